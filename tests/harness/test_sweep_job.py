"""The sweep's plan travels whole: ``build_sweep`` makes every check that needs no lock (the
ones ``run_sweep`` used to make again included), ``--dry-run`` refuses what the sweep
refuses, and a :class:`~specband.harness.job.SweepJob` built in code runs as it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.harness.jobs import sweep_job
from tests.servers import TIME_SCALE, emulator_command, one_error_line

from specband.contract.actions import Action
from specband.core.errors import ConfigError
from specband.emulator.spec import EmulatedGpuSpec
from specband.harness.request import SweepRequest, build_sweep


def _emulated(tmp_path: Path, **changes: object) -> SweepRequest:
    """A request on an emulated GPU (its power-limit range read from its model, 40-80 W)."""
    spec = EmulatedGpuSpec(tmp_path / "gpu.json", "rtx4060-laptop", "calibrated", TIME_SCALE)
    fields: dict[str, object] = dict(
        target="m", draft="d", out=str(tmp_path / "s.jsonl"), sglang_version="0.5.23", device="emulated",
        time_scale=TIME_SCALE, plugged=spec,
    )  # fmt: skip
    fields.update(changes)
    return SweepRequest(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"repeats": 0}, "--repeats must be > 0, got 0"),
        ({"power_limits": "0.5,1.0", "adaptive": True}, "--power-limits runs on one local GPU: not with --gpus, --ray"),
        ({"power_limits": "0.5,1.0", "gpus": "0,1"}, "--power-limits runs on one local GPU: not with --gpus, --ray"),
        ({"gpus": "0,1", "env": ["CUDA_VISIBLE_DEVICES=3"]}, "--env CUDA_VISIBLE_DEVICES=3: specband sets"),
    ],
)
def test_build_sweep_refuses_what_the_sweep_refused_after_it(tmp_path, changes, message) -> None:
    with pytest.raises(ConfigError) as info:
        build_sweep(_emulated(tmp_path, **changes))
    assert str(info.value).startswith(message)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no GPU state, no log folder, no output


def test_a_default_log_folder_that_is_a_file_is_refused_by_build_sweep(tmp_path) -> None:
    logs = tmp_path / "s.jsonl.logs"
    logs.write_text("not a folder\n")
    with pytest.raises(ConfigError, match=f"^--log-dir {logs}: is a file, not a folder$"):
        build_sweep(_emulated(tmp_path))
    job = build_sweep(_emulated(tmp_path, log_dir=str(tmp_path / "logs")))  # another folder: fine
    assert job.settings.log_dir == tmp_path / "logs" and job.device.kind == "emulated"


def test_dry_run_refuses_what_the_sweep_refuses(run_cli, tmp_path) -> None:
    out = tmp_path / "s.jsonl"
    args = ["sweep", "--target", "m", "--draft", "d", "--device", "none", "--sglang-version", "0.5.23"]
    result = run_cli(*args, "--gpus", "0,1", "--env", "CUDA_VISIBLE_DEVICES=3", "--out", out, "--dry-run")
    assert result.exit_code == 2 and result.stdout == ""
    assert one_error_line(result.stderr).startswith("error: --env CUDA_VISIBLE_DEVICES=3: specband sets")
    result = run_cli(*args, "--gpus", "0,1", "--env", "A=1", "--out", out, "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == "# sglang 0.5.23 (--sglang-version)"
    assert not out.exists()


def test_build_sweep_carries_every_option_the_sweep_reads(tmp_path) -> None:
    job = build_sweep(
        _emulated(
            tmp_path, batch_sizes="4,1", actions="3,2,4 0", repeats=2, resume=True, one_launch_per_config=True,
            shard="2/3", gpu_index=1, power_limit=70.0, power_limits="0.5,1.0",
        )
    )  # fmt: skip
    assert job.out == tmp_path / "s.jsonl" and job.batch_sizes == (4, 1)
    assert job.actions == (Action(3, 2, 4), Action(0, 0, 0)) and all(type(a) is Action for a in job.actions)
    assert (job.repeats, job.resume, job.one_launch_per_config, job.adaptive) == (2, True, True, False)
    assert str(job.shard) == "2/3" and job.pool is None and job.setup is None
    assert job.power_limits_w == (40.0, 80.0) and job.settings.time_scale == TIME_SCALE
    assert (job.device.kind, job.device.index, job.device.power_limit_w) == ("emulated", 1, 70.0)
    plan = job.plan()
    assert len(plan.points) == 2 * 2 * 2 and plan.points[4].power_limit_w == 80.0
    assert (plan.points[1].batch_size, plan.points[1].action) == (4, Action(0, 0, 0))


def test_a_job_built_in_code_runs_on_its_own_clock(tmp_path, port) -> None:
    from specband.engines.serverconfig import ServerConfig
    from specband.harness.job import SweepDevice
    from specband.harness.runner import MeasureSettings
    from specband.harness.sweep import run_sweep

    spec = EmulatedGpuSpec(tmp_path / "gpu.json", "rtx4060-laptop", "calibrated", TIME_SCALE)
    server = ServerConfig(
        model_path="m", draft_model_path="d", server_command=emulator_command(), port=port, env=spec.server_env()
    )
    settings = MeasureSettings(
        server=server, num_prompts=4, max_new_tokens=64, launch_timeout_s=60000, request_timeout_s=60000,
        log_dir=tmp_path / "logs", health_poll_s=0.5, sample_period_s=0.005, time_scale=TIME_SCALE,
        cooldown_s=30.0,
    )  # fmt: skip
    out = tmp_path / "s.jsonl"
    job = sweep_job(
        settings, out, device=SweepDevice("emulated", plugged=spec), batch_sizes=(1,),
        actions=(Action(0, 0, 0), Action(3, 2, 4)), repeats=1,
    )  # fmt: skip
    summary = run_sweep(job)  # no clock given: the settings' time scale (a 30 s cool-down takes 0.3 s)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["index"], r["repeat"], r["steps"], r["topk"], r["num_draft_tokens"]) for r in rows] == [
        (0, 0, 0, 0, 0),
        (1, 0, 3, 2, 4),
    ]
    assert all(r["error"] is None and r["provenance"] == "emulated" and r["time_scale"] == TIME_SCALE for r in rows)
    assert (summary.written, summary.errors, summary.launches, summary.skipped) == (2, 0, 2, 0)
    assert summary.elapsed_s < 45  # two cool-downs on a real-time clock would take 60 s


@pytest.mark.parametrize("pool", [["--gpus", "0,1"], ["--adaptive", "--repeats", "2"]])
def test_power_limits_with_a_pool_is_refused_before_the_gpu_is_read(run_cli, tmp_path, pool) -> None:
    # --device nvml on a machine without NVML: reading the GPU's range would exit 4 (the device
    # failed); the option combination is bad input whatever the GPU, and is said first
    args = ["sweep", "--target", "m", "--draft", "d", "--device", "nvml", "--sglang-version", "0.5.23"]
    result = run_cli(*args, "--power-limits", "100,200", *pool, "--out", tmp_path / "s.jsonl", "--dry-run")
    assert result.exit_code == 2, result.stderr
    assert one_error_line(result.stderr) == (
        "error: --power-limits runs on one local GPU: not with --gpus, --ray or --adaptive"
    )
