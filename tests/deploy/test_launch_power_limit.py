"""``launch --set-power-limit``: set through (a patched) NVML before the server starts, the
old limit restored when the server stops, exits, fails to launch or is interrupted."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pynvml
import pytest
from tests.devices import conftest as devices_conftest
from tests.servers import one_error_line

from specband.harness import runner
from specband.sim import build_model, simulate_power_limits

FakeGpu = devices_conftest.FakeGpu
fake_gpu = devices_conftest.fake_gpu  # the patched-NVML fixture of the device tests


class _Proc:
    def __init__(self, ending):
        self.ending = ending

    def wait(self):
        if isinstance(self.ending, BaseException):
            raise self.ending
        return self.ending


def _fake_launch(monkeypatch, gpu: FakeGpu, ending, launched: list):
    def launch_with_retry(settings, clock, action, batch_size, log):
        launched.append((tuple(action), list(gpu.limits_set)))  # the limit in force at launch
        server = SimpleNamespace(
            base_url="http://127.0.0.1:1", proc=_Proc(ending), stop=lambda *a: None, log_tail=lambda n: ""
        )
        return SimpleNamespace(server=server, retry_mem_fraction=None)

    monkeypatch.setattr(runner, "launch_with_retry", launch_with_retry)


_ARGS = ("launch", "--allow-transfer", "--target", "m", "--draft", "d", "-b", "4", "--sglang-version", "0.5.23")


@pytest.mark.parametrize("ending", [0, 3, KeyboardInterrupt()])
def test_the_limit_is_set_before_the_launch_and_restored_when_the_server_stops(
    run_cli,
    tmp_path,
    monkeypatch,
    fake_gpu,
    ending,
):
    launched: list = []
    _fake_launch(monkeypatch, fake_gpu, ending, launched)
    result = run_cli(*_ARGS, "--set-power-limit", "60", "--log", tmp_path / "s.log")
    assert result.exit_code == (0 if isinstance(ending, BaseException) else ending), result.stderr
    assert launched and launched[0][1] == [60_000]  # set before the server started
    # then the limit that was set (management, 90 W) put back, not the enforced 80 W
    assert fake_gpu.limits_set == [60_000, 90_000]
    assert "power limit set to 60 W" in result.stderr


def test_a_failed_launch_restores_the_limit(run_cli, tmp_path, monkeypatch, fake_gpu):
    from specband.engines.failures import LaunchError
    from specband.harness.runner import RetriedLaunchError

    def failing(*args, **kwargs):
        raise RetriedLaunchError(LaunchError("exited", "the server exited during start-up", 1), 0.55, 2)

    monkeypatch.setattr(runner, "launch_with_retry", failing)
    result = run_cli(*_ARGS, "--set-power-limit", "0.5", "--log", tmp_path / "s.log")
    assert result.exit_code == 3  # the engine failed, not the input
    assert one_error_line(result.stderr) == "error: launch_failed: exited (exit 1): the server exited during start-up"
    assert fake_gpu.limits_set == [50_000, 90_000]  # 0.5 of the 100 W default, then restored


def test_no_permission_is_one_line_and_nothing_launches(run_cli, tmp_path, monkeypatch, fake_gpu):
    fake_gpu.errors = {"set_limit": pynvml.NVML_ERROR_NO_PERMISSION}
    launched: list = []
    _fake_launch(monkeypatch, fake_gpu, 0, launched)
    result = run_cli(*_ARGS, "--set-power-limit", "60", "--log", tmp_path / "s.log")
    assert result.exit_code == 2
    assert "no permission to set power limits" in one_error_line(result.stderr)
    assert launched == [] and fake_gpu.limits_set == []


def test_auto_takes_the_limit_and_flags_from_a_sweep_over_limits(run_cli, tmp_path, monkeypatch, fake_gpu):
    fake_gpu.max_limit_mw = fake_gpu.default_mw = 700_000
    fake_gpu.enforced_mw = 700_000
    model = build_model("h100-sxm", target_config="llama-3.1-8b-instruct", draft_config="eagle3-llama-3.1-8b-instruct")
    rows = simulate_power_limits(model, [float(w) for w in range(400, 701, 10)], batch_sizes=(4,), repeats=1)
    data = tmp_path / "h100.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run_cli(*_ARGS, "--set-power-limit", "auto", "--data", data, "--dry-run", "--log", tmp_path / "s.log")
    assert result.exit_code == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("# sudo nvidia-smi -pl "))
    assert 400 <= float(line.split()[-1]) < 700 and fake_gpu.limits_set == []  # a dry run sets nothing
    assert "--speculative-num-steps" in result.stdout and "in the band" in result.stderr


def test_set_power_limit_refused_with_device_none(run_cli, tmp_path):
    result = run_cli(*_ARGS, "--device", "none", "--set-power-limit", "60", "--log", tmp_path / "s.log")
    assert result.exit_code == 2 and "not with --device none" in one_error_line(result.stderr)
    result = run_cli(*_ARGS, "--set-power-limit", "auto", "--log", tmp_path / "s.log")
    assert result.exit_code == 2 and "needs --data SWEEP" in one_error_line(result.stderr)


def test_auto_checks_the_users_setup_against_the_sweeps_as_recommend_does(run_cli, tmp_path, monkeypatch, fake_gpu):
    fake_gpu.max_limit_mw = fake_gpu.default_mw = fake_gpu.enforced_mw = 700_000
    model = build_model("h100-sxm", target_config="llama-3.1-8b-instruct", draft_config="eagle3-llama-3.1-8b-instruct")
    rows = simulate_power_limits(model, [400.0, 550.0, 700.0], batch_sizes=(4,), repeats=1)
    data = tmp_path / "h100.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ("launch", "--target", "org/another-target", "--draft", "d", "-b", "4", "--sglang-version", "0.5.23")
    auto = ("--set-power-limit", "auto", "--data", data, "--dry-run", "--log", tmp_path / "s.log")
    refused = run_cli(*args, *auto)
    assert refused.exit_code == 2 and refused.stdout == ""
    line = one_error_line(refused.stderr)
    assert line.startswith(f"error: {data} answers for another setup: target org/another-target")
    taken = run_cli(*args, *auto, "--allow-transfer")
    assert taken.exit_code == 0, taken.stderr
    assert "note: transferred (--allow-transfer): target org/another-target" in taken.stderr
    assert any(x.startswith("# sudo nvidia-smi -pl ") for x in taken.stdout.splitlines())


def test_the_pick_is_checked_against_the_limit_it_will_serve_at(run_cli, tmp_path, fake_gpu):
    """The trial's N10: ``--set-power-limit 30`` on a GPU now at 80 W passed silently with
    the 80 W study's pick; a GPU at 40 W with ``--set-power-limit 80`` was refused."""
    pair = ("--target", "unsloth/Llama-3.2-1B-Instruct", "--draft", "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct")
    args = ("launch", *pair, "-b", "4", "--sglang-version", "0.5.23", "--dry-run", "--log", tmp_path / "s.log")
    fake_gpu.enforced_mw = fake_gpu.management_mw = 80_000
    refused = run_cli(*args, "--set-power-limit", "30")
    assert refused.exit_code == 2 and refused.stdout == ""
    assert "power limit 30 W vs the data's 80 W" in one_error_line(refused.stderr)
    fake_gpu.enforced_mw = fake_gpu.management_mw = 40_000
    taken = run_cli(*args, "--set-power-limit", "80")
    assert taken.exit_code == 0, taken.stderr
    assert "# sudo nvidia-smi -pl 80" in taken.stdout and fake_gpu.limits_set == []
