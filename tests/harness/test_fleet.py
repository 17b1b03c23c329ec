"""``sweep --shard``, ``--gpus`` and ``--ray`` against the emulator: the same runs as one
plain sweep, resumable, and no server left after Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.servers import (
    emulator_command,
    emulator_running,
    free_ports,
    no_process_left_on,
    one_error_line,
    processes_with,
)

from specband.harness.sweepfile import read_rows_for_resume
from specband.sweeps.dataset import load_sweep

#: Emulated seconds a launch and a request may take (600 s real, as ``sweep_args`` gives):
#: several emulators run at once on a busy machine.
LAUNCH_TIMEOUT = ["--launch-timeout", "60000", "--request-timeout", "60000"]
GRID = ["--batch-sizes", "1,4", "--actions", "0 1"]
ONCE = ["--repeats", "1"]


def _keys(path: Path) -> list[tuple[int, int]]:
    return sorted((r["index"], r["repeat"]) for r in read_rows_for_resume(path))


@pytest.fixture
def port() -> Iterator[int]:
    """``--port`` for two workers: worker ``i`` serves on ``port + i``, so both ports are
    free when the test starts (another test on this busy machine may hold ``port + 1``),
    and no process of this session is left on either after it."""
    base = free_ports(2)
    yield base
    no_process_left_on(base, base + 1)


def test_two_gpus_measure_every_run_once_each_worker_on_its_own_gpu(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    result = run_cli(*sweep_args, *GRID, *ONCE, *LAUNCH_TIMEOUT, "--gpus", "0,1", "--out", out)
    assert result.exit_code == 0, result.stderr
    rows = read_rows_for_resume(out)
    assert _keys(out) == [(i, 0) for i in range(4)] and all(r["error"] is None for r in rows)
    logs = {p.parent.name for p in (tmp_path / "s.jsonl.logs").rglob("*.log")}
    assert logs == {"gpu0", "gpu1"}  # each worker launched servers, each with its own log folder
    assert {p.name for p in tmp_path.glob("s.jsonl.gpu-state.gpu*.json")} == {
        "s.jsonl.gpu-state.gpu0.json",
        "s.jsonl.gpu-state.gpu1.json",
    }
    assert load_sweep(out).training_data().rewards.shape == (4,)  # train accepts it
    again = run_cli(*sweep_args, *GRID, *ONCE, *LAUNCH_TIMEOUT, "--gpus", "0,1", "--out", out, "--resume")
    assert again.exit_code == 0 and "skipped 4" in again.stdout and _keys(out) == [(i, 0) for i in range(4)]


def test_shards_merge_into_the_plain_sweep_s_runs_and_dry_run_lists_the_share(run_cli, sweep_args, tmp_path):
    files = []
    for k in (1, 2):
        out = tmp_path / f"s{k}.jsonl"
        dry = run_cli(*sweep_args, *GRID, "--repeats", "2", "--shard", f"{k}/2", "--dry-run", "--out", out)
        assert dry.exit_code == 0 and len([ln for ln in dry.stdout.splitlines() if "emulate" in ln]) == 4
        result = run_cli(*sweep_args, *GRID, *LAUNCH_TIMEOUT, "--repeats", "2", "--shard", f"{k}/2", "--out", out)
        assert result.exit_code == 0, result.stderr
        files.append(out)
    assert set(_keys(files[0])).isdisjoint(_keys(files[1])) and len(_keys(files[0])) == 4
    merged = run_cli("merge", tmp_path / "all.jsonl", *files)
    assert merged.exit_code == 0, merged.stderr
    assert _keys(tmp_path / "all.jsonl") == [(i, r) for i in range(4) for r in range(2)]
    resumed = run_cli(*sweep_args, *GRID, "--repeats", "2", "--shard", "1/2", "--resume", "--out", files[0])
    assert resumed.exit_code == 0 and "wrote 0 rows" in resumed.stdout and "skipped 4" in resumed.stdout
    for dry in ([], ["--dry-run"]):  # a shard's file resumed as another shard: refused, as in a dry run
        wrong = run_cli(*sweep_args, *GRID, "--repeats", "2", "--shard", "2/2", "--resume", *dry, "--out", files[0])
        assert wrong.exit_code == 2
        assert "cannot resume as shard 2/2: it holds runs of another shard" in one_error_line(wrong.stderr)
    other = run_cli(
        *sweep_args, *GRID, "--repeats", "2", "--resume", "--dry-run", "--max-new-tokens", "256", "--out", files[0]
    )
    assert other.exit_code == 2  # a dry run checks the settings as the sweep does
    assert "cannot resume: its rows have max_new_tokens=512, this sweep has 256" in one_error_line(other.stderr)


@pytest.mark.parametrize(
    "options, message",
    [
        (["--ray", "--gpus", "0,1"], "--ray and --gpus exclude each other"),
        (["--ray-address", "127.0.0.1:6379"], "--ray-address needs --ray"),
        (["--gpus", "0,1", "--gpu-index", "1"], "--gpu-index and --gpus exclude each other"),
        (["--ray", "--gpu-index", "0"], "--gpu-index and --ray exclude each other"),
        (["--gpus", "0,0"], "--gpus: a GPU is given twice"),
        (["--shard", "3/2"], "--shard: expected K/N with 1 <= K <= N"),
        (["--shard", "1/20000"], "--shard: at most 10000 shards"),
        (["--shard", "1/" + "9" * 5000], "--shard: at most 10000 shards"),
        (["--gpus", "0,64"], "--gpus: GPU indices are 0..63"),
        (["--gpus", "9" * 5000], "--gpus: GPU indices are 0..63"),
    ],
)
def test_options_that_make_no_sense_together_are_one_error_line(run_cli, sweep_args, tmp_path, options, message):
    result = run_cli(*sweep_args, *options, "--out", tmp_path / "s.jsonl")
    assert result.exit_code == 2 and message in one_error_line(result.stderr)
    assert not (tmp_path / "s.jsonl").exists()


def test_ray_on_a_cluster_without_gpus_is_one_error_line(run_cli, sweep_args, tmp_path, monkeypatch, require_module):
    ray = require_module("ray", require_env="SPECBAND_REQUIRE_RAY")
    if ray.is_initialized():  # the module's Ray with fake GPUs is up (tests run out of order)
        pytest.skip("a Ray instance with GPUs is already running in this process")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a local Ray on a machine without GPUs
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    result = run_cli(*sweep_args, *GRID, "--ray", "--out", tmp_path / "s.jsonl")
    assert result.exit_code == 2 and "--ray: the Ray cluster has no GPU" in one_error_line(result.stderr)
    assert not (tmp_path / "s.jsonl").exists() and not ray.is_initialized()


def _both_running(states: dict[int, Path]) -> bool:
    return all(emulator_running(state, port) for port, state in states.items())


def test_ctrl_c_with_two_gpus_leaves_no_server_on_any_worker(sweep_args, tmp_path, port):
    out = tmp_path / "s.jsonl"
    args = [*sweep_args]
    args[args.index("--server-command") + 1] = emulator_command("--load-time", "100000")  # 1000 s real to load
    cmd = [sys.executable, "-m", "specband", *args, *GRID, "--gpus", "0,1", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    states = {port + i: tmp_path / f"s.jsonl.gpu-state.gpu{i}.json" for i in (0, 1)}
    try:
        # Ctrl-C once both servers run (not merely once a process names the port: the
        # sweep's own command line holds --port P); a busy machine may take a while
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and not _both_running(states):
            time.sleep(0.05)
        if proc.poll() is not None:  # the sweep ended before both servers ran: say why
            pytest.fail(f"the sweep exited {proc.returncode} before its servers ran: {proc.communicate()[1]}")
        assert _both_running(states), "the two servers never started"
        os.kill(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)  # far below the 1000 s load
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert "interrupted: every server the sweep started was stopped" in stderr
    assert [pid for p in states for pid in processes_with(f"--port {p}")] == []  # stopped before the sweep exits
    assert not out.exists() or out.read_text() == ""
    assert (str(out) in stderr) == out.exists()  # named only where it exists


def _ray_sweep(tmp_path: Path, base_port: int, *, resume: bool, stop_after: int | None = None):
    from tests.harness.jobs import sweep_job
    from tests.servers import TIME_SCALE

    from specband.contract.actions import Action
    from specband.devices.base import Clock
    from specband.emulator.env import STATE_ENV, TIME_SCALE_ENV
    from specband.engines.serverconfig import ServerConfig
    from specband.harness.fleet import GpuWorkerSetup
    from specband.harness.runner import MeasureSettings
    from specband.harness.sweep import run_sweep
    from specband.harness.workers import RayPool

    out = tmp_path / "ray.jsonl"
    state = tmp_path / "gpu-state.json"
    server = ServerConfig(
        model_path="m",
        draft_model_path="d",
        server_command=emulator_command(),
        port=base_port,
        env={STATE_ENV: str(state), TIME_SCALE_ENV: repr(TIME_SCALE)},
    )
    settings = MeasureSettings(
        server=server,
        num_prompts=4,
        launch_timeout_s=6000,
        request_timeout_s=6000,
        log_dir=tmp_path / "logs",
        health_poll_s=0.5,
        sample_period_s=0.005,
    )
    from specband.emulator.spec import EmulatedGpuSpec

    emulator = EmulatedGpuSpec(state, "rtx4060-laptop", "calibrated", TIME_SCALE)

    class StopAfter:
        def __init__(self):
            self.rows = 0
            self.per_gpu = {}

        def start(self, total, skipped):
            pass

        def unit_finished(self, gpu, runs):
            self.per_gpu[gpu] = self.per_gpu.get(gpu, 0) + runs

        def run_started(self, point, repeat):
            pass

        def run_finished(self, point, repeat, row):
            self.rows += 1
            if stop_after is not None and self.rows >= stop_after:
                raise KeyboardInterrupt  # as Ctrl-C in the driver

    reporter = StopAfter()
    job = sweep_job(
        settings,
        out,
        batch_sizes=(1, 4),
        actions=(Action(0, 0, 0), Action(1, 1, 2)),
        repeats=2,
        resume=resume,
        pool=RayPool(base_port=base_port),
        setup=GpuWorkerSetup(settings, "emulated", None, emulator),  # each task opens its GPU's device
    )
    return out, reporter, lambda: run_sweep(job, clock=Clock(TIME_SCALE), reporter=reporter)


def test_ray_with_two_fake_gpus_interrupted_and_resumed_duplicates_nothing(local_ray, tmp_path):
    base = free_ports(2)  # a task on fake GPU g serves on base + g
    out, _, sweep = _ray_sweep(tmp_path, base, resume=True, stop_after=3)
    with pytest.raises(KeyboardInterrupt):
        sweep()
    first = _keys(out)
    assert len(first) >= 3
    for marker in (f"--port {base}", f"--port {base + 1}"):
        deadline = time.monotonic() + 30
        while processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_with(marker) == []  # the cancelled tasks stopped their servers
    out, reporter, sweep = _ray_sweep(tmp_path, base, resume=True)
    summary = sweep()
    assert summary.skipped == len(first)
    # the progress's line per GPU: every row of this call counted once, on a GPU Ray gave
    assert sum(reporter.per_gpu.values()) == 8 - len(first) and set(reporter.per_gpu) <= {"0", "1"}
    assert _keys(out) == [(i, r) for i in range(4) for r in range(2)]  # no run lost or twice
    assert [r["error"] for r in read_rows_for_resume(out) if r["error"]] == []
    assert load_sweep(out).training_data().rewards.shape == (8,)


def test_adaptive_measures_fewer_runs_writes_each_row_s_propensity_and_evaluate_reads_it(run_cli, sweep_args, tmp_path):
    out = tmp_path / "a.jsonl"
    grid_options = ["--batch-sizes", "1", "--actions", "0 1 10 5", "--repeats", "3"]
    result = run_cli(*sweep_args, *grid_options, *LAUNCH_TIMEOUT, "--adaptive", "--out", out)
    assert result.exit_code == 0, result.stderr
    rows = read_rows_for_resume(out)
    assert {(r["index"], r["repeat"]) for r in rows} >= {(i, 0) for i in range(4)}  # pass 0: everything
    # whether three passes separate these configs rests on the emulated GPU's power, which since the
    # emulator's prefill bursts is read over real time and moves with the machine's load: the saving
    # itself is held on fixed rewards (tests/harness/test_adaptive.py); here, what the sweep says of it
    assert len(rows) <= 12 and f"{len(rows)} of 12 runs ({12 - len(rows)} saved)" in result.stdout
    for rep in {r["repeat"] for r in rows}:  # each row: 1 / configs its pass measured
        in_pass = [r for r in rows if r["repeat"] == rep]
        assert all(r["propensity"] == pytest.approx(1 / len(in_pass)) for r in in_pass)
    evaluated = run_cli("evaluate", out, "--bootstrap", "20", "--algo", "lookup_table", "--json")
    assert evaluated.exit_code == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["data"]["rows"] == len(rows)
    for dry in ([], ["--dry-run"]):
        again = run_cli(*sweep_args, *grid_options, "--out", out, "--resume", *dry)  # without --adaptive
        assert again.exit_code == 2
        assert "its rows were written with --adaptive; resume with it" in one_error_line(again.stderr)
    # merge refuses to mix logging policies: this file's rows with a uniform sweep's
    uniform = tmp_path / "u.jsonl"
    assert run_cli(*sweep_args, *grid_options, "--repeats", "1", *LAUNCH_TIMEOUT, "--out", uniform).exit_code == 0
    adaptive_rest = tmp_path / "a1.jsonl"
    adaptive_rest.write_text("".join(json.dumps(r) + "\n" for r in rows if r["repeat"] > 0))
    mixed = run_cli("merge", tmp_path / "m.jsonl", uniform, adaptive_rest)
    assert mixed.exit_code == 2 and not (tmp_path / "m.jsonl").exists()
    assert f"{adaptive_rest}:1: cannot merge: its rows were written with --adaptive" in one_error_line(mixed.stderr)


@pytest.mark.parametrize(
    "options, message",
    [
        (["--adaptive", "--shard", "1/2"], "--adaptive and --shard exclude each other"),
        (["--adaptive", "--repeats", "1"], "--adaptive needs --repeats >= 2"),
    ],
)
def test_adaptive_combinations_that_make_no_sense(run_cli, sweep_args, tmp_path, options, message):
    result = run_cli(*sweep_args, *options, "--out", tmp_path / "s.jsonl")
    assert result.exit_code == 2 and message in one_error_line(result.stderr)


def test_the_progress_has_a_line_per_gpu_under_the_sweeps_bar():
    from specband.cli.harness import _RichReporter

    reporter = _RichReporter(quiet=False)
    with open(os.devnull, "w") as devnull:
        reporter.console.file = devnull
        reporter.start(total=6, skipped=0)
        for gpu, runs in (("0", 2), ("1", 1), ("0", 2)):
            reporter.unit_finished(gpu, runs)
        tasks = {task.description: task.completed for task in reporter.progress.tasks}
        reporter.stop()
    assert tasks == {"sweep": 0, "  GPU 0": 4, "  GPU 1": 1}  # the sweep's bar counts rows itself
