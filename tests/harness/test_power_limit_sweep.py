"""``specband sweep --power-limits`` against the emulator: every row at its limit, the
emulated GPU honouring it, the limit found restored at the end and after Ctrl-C."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.servers import TIME_SCALE, emulator_command, one_error_line

from specband.emulator.gpu import EmulatedGpu
from specband.sim import build_model

MODEL = build_model("rtx4060-laptop")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_sweep_runs_the_grid_at_each_limit_and_restores_the_default(run_cli, sweep_args, tmp_path):
    out = tmp_path / "sweep.jsonl"
    result = run_cli(
        *sweep_args,
        "--batch-sizes",
        "1",
        "--actions",
        "0 10",
        "--repeats",
        "1",
        "--power-limits",
        "0.5,1.0",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.stderr
    rows = _rows(out)
    assert [(r["index"], r["power_limit_watts"]) for r in rows] == [(0, 40.0), (1, 40.0), (2, 80.0), (3, 80.0)]
    low = {r["steps"]: r for r in rows if r["power_limit_watts"] == 40.0}
    high = {r["steps"]: r for r in rows if r["power_limit_watts"] == 80.0}
    for steps in (0, 3):
        # the emulated GPU holds the limit: power at most 40 W (idle gaps in the window pull
        # the average below it), the clock was lowered (SwPowerCap), never faster than at 80 W
        # (a memory-bound 1B decode loses little speed to a lower core clock)
        assert 30.0 < low[steps]["avg_power_watts"] <= 40.0
        assert high[steps]["avg_power_watts"] > 45.0
        assert low[steps]["gpu_throttling"] is True
        assert low[steps]["speed_tok_s"] <= high[steps]["speed_tok_s"] * 1.001
    state = EmulatedGpu(Path(str(out) + ".gpu-state.json"), MODEL, "rtx4060-laptop", 0.01).read()
    assert state.power_limit_w == 80.0  # restored


def test_a_resume_with_other_limits_is_refused(run_cli, sweep_args, tmp_path):
    out = tmp_path / "sweep.jsonl"
    args = [*sweep_args, "--batch-sizes", "1", "--actions", "0", "--repeats", "1", "--out", out]
    assert run_cli(*args, "--power-limits", "0.5,1.0").exit_code == 0
    result = run_cli(*args, "--power-limits", "0.6,1.0", "--resume")
    assert result.exit_code == 2
    assert "was measured at power_limit_watts=40.0, in this sweep's grid it is 48 W" in one_error_line(result.stderr)


def test_power_limits_refused_without_a_device_or_beside_gpus(run_cli, tmp_path):
    base = ["sweep", "--target", "m", "--batch-sizes", "1", "--actions", "0", "--quiet", "--out", tmp_path / "s.jsonl"]
    result = run_cli(*base, "--device", "none", "--power-limits", "100,200")
    assert result.exit_code == 2 and "not --device none" in one_error_line(result.stderr)
    result = run_cli(*base, "--device", "none", "--power-limits", "0.5,300")
    assert result.exit_code == 2 and "do not mix" in one_error_line(result.stderr)
    assert not (tmp_path / "s.jsonl").exists()


def test_ctrl_c_mid_sweep_restores_the_limit(run_cli, sweep_args, tmp_path, monkeypatch):
    from specband.harness import pipeline

    out = tmp_path / "sweep.jsonl"
    calls = {"n": 0}
    real = pipeline.RowSink.consume

    def consume_then_interrupt(self, result):
        real(self, result)
        calls["n"] += 1
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline.RowSink, "consume", consume_then_interrupt)
    result = run_cli(
        *sweep_args, "--batch-sizes", "1", "--actions", "0", "--repeats", "1", "--power-limits", "0.5,1.0", "--out", out
    )
    assert result.exit_code != 0 and calls["n"] == 1
    assert [r["power_limit_watts"] for r in _rows(out)] == [40.0]
    state = EmulatedGpu(Path(str(out) + ".gpu-state.json"), MODEL, "rtx4060-laptop", 0.01).read()
    assert state.power_limit_w == 80.0


@pytest.mark.parametrize("bad", ["", "0.5,,1", "x"])
def test_bad_power_limit_lists_are_one_line(run_cli, sweep_args, tmp_path, bad):
    result = run_cli(
        *sweep_args, "--batch-sizes", "1", "--actions", "0", "--power-limits", bad, "--out", tmp_path / "s.jsonl"
    )
    assert result.exit_code == 2 and one_error_line(result.stderr).startswith("error: --power-limits:")


from tests.devices import conftest as devices_conftest  # noqa: E402

fake_gpu = devices_conftest.fake_gpu  # the patched-NVML fixture of the device tests


def _nvml_args(sweep_args: list[str], tmp_path: Path) -> list[str]:
    """The sweep against a fast emulator (its own time scale) with the sweep on real time:
    the GPU it reads and sets is the patched NVML."""
    args = list(sweep_args)
    i = args.index("--time-scale")
    del args[i : i + 2]
    j = args.index("--server-command")
    args[j + 1] = emulator_command("--time-scale", str(TIME_SCALE), "--state-file", str(tmp_path / "gpu.json"))
    return [*args, "--device", "nvml", "--cooldown", "0.1"]


@pytest.mark.parametrize("ending", [None, RuntimeError("crash"), KeyboardInterrupt()])
def test_through_nvml_every_limit_is_set_and_the_old_one_restored(
    run_cli, sweep_args, tmp_path, monkeypatch, fake_gpu, ending
):
    from specband.harness import pipeline

    if ending is not None:
        real = pipeline.RowSink.consume

        def consume_then_end(self, result):
            real(self, result)
            raise ending

        monkeypatch.setattr(pipeline.RowSink, "consume", consume_then_end)
    out = tmp_path / "sweep.jsonl"
    args = (
        *_nvml_args(sweep_args, tmp_path),
        "--batch-sizes",
        "1",
        "--actions",
        "0",
        "--repeats",
        "1",
        "--power-limits",
        "40,60",
        "--out",
        out,
    )
    if isinstance(ending, RuntimeError):
        with pytest.raises(RuntimeError, match="crash"):  # a crash propagates, after the restore
            run_cli(*args)
        result = None
    else:
        result = run_cli(*args)
    if ending is None:
        assert result.exit_code == 0, result.stderr
        assert [r["power_limit_watts"] for r in _rows(out)] == [40.0, 60.0]
        assert fake_gpu.limits_set == [40_000, 60_000, 90_000]  # then the limit set (management) found
    else:
        assert result is None or result.exit_code != 0
        assert [r["power_limit_watts"] for r in _rows(out)] == [40.0]
        assert fake_gpu.limits_set == [40_000, 90_000]


def test_through_nvml_without_permission_nothing_runs(run_cli, sweep_args, tmp_path, fake_gpu):
    import pynvml

    fake_gpu.errors = {"set_limit": pynvml.NVML_ERROR_NO_PERMISSION}
    out = tmp_path / "sweep.jsonl"
    result = run_cli(
        *_nvml_args(sweep_args, tmp_path), "--batch-sizes", "1", "--actions", "0", "--power-limits", "0.5", "--out", out
    )
    assert result.exit_code == 2
    assert "no permission to set power limits" in one_error_line(result.stderr)
    assert not out.exists() or out.read_text() == ""


def test_resume_after_kill_9_restores_the_limit_found_before_the_killed_sweep(sweep_args, tmp_path):
    """The trial's N03/N34: kill -9 left the emulated GPU at 40 W, and ``--resume`` took 40 W
    as the limit it found and "restored" it."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "sweep.jsonl"
    state_path = Path(str(out) + ".gpu-state.json")
    args = [*sweep_args, "--batch-sizes", "1", "--actions", "0 10", "--repeats", "1", "--power-limits", "0.5,1.0"]
    command = [sys.executable, "-m", "specband", *args, "--out", str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and not (out.exists() and out.read_text().strip()):
            time.sleep(0.05)
        assert proc.poll() is None, "the sweep ended before a row was written"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # the killed sweep's server dies with it (PR_SET_PDEATHSIG); --resume waits for its port
    assert EmulatedGpu(state_path, MODEL, "rtx4060-laptop", 0.01).read().power_limit_w == 40.0  # left low
    result = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "is at 40 W, the limit a specband process" in result.stderr
    assert [r["power_limit_watts"] for r in _rows(out)] == [40.0, 40.0, 80.0, 80.0]
    assert EmulatedGpu(state_path, MODEL, "rtx4060-laptop", 0.01).read().power_limit_w == 80.0  # the original


def test_an_emulator_read_through_nvml_keeps_energy_and_time_on_one_clock(run_cli, sweep_args, tmp_path, fake_gpu):
    """V07: with --device nvml beside an emulator on its own time scale, the wall clock was the
    emulator's seconds and the energy the real window's (0.5 J beside 5.9 s at 71.7 W): the row's
    energy is now the read power over the emulated seconds, flagged, so J/token and power agree."""
    import json

    fake_gpu.energy_mj = [1_000_000, 1_000_000 + 50_000]  # 50 J over the real window
    out = tmp_path / "nv.jsonl"
    args = (*_nvml_args(sweep_args, tmp_path), "--batch-sizes", "1", "--actions", "0", "--repeats", "1")
    result = run_cli(*args, "--out", out)
    assert result.exit_code == 0, result.stderr
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["provenance"] == "emulated" and row["energy_flag"] == "energy_on_emulator_clock"
    assert row["energy_joules"] == pytest.approx(row["avg_power_watts"] * row["wall_clock_s"], rel=1e-6)
    assert row["joules_per_token"] == pytest.approx(row["energy_joules"] / row["total_output_tokens"], rel=1e-6)
