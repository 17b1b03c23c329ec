"""``specband sweep`` end to end against the emulator: the dataset, resume after kills,
retries, error rows, one launch per config, no telemetry, Ctrl-C."""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.servers import (
    TIME_SCALE,
    emulator_command,
    emulator_running,
    one_error_line,
    processes_with,
    server_marker,
)

from specband.contract.actions import ACTIONS
from specband.contract.record import EXTRA_COLUMNS
from specband.core.exitcodes import ExitCode
from specband.harness.pipeline import grid
from specband.harness.sweepfile import read_rows_for_resume
from specband.sim import build_model
from specband.sweeps.dataset import SWEEP_COLUMNS, load_sweep

#: The emulator's default performance model (``--emulator-model calibrated``).
MODEL = build_model("rtx4060-laptop")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _by_action(rows: list[dict]) -> dict[tuple[int, int, int, int], dict]:
    return {(r["batch_size"], r["steps"], r["topk"], r["num_draft_tokens"]): r for r in rows}


def test_full_sweep_is_a_valid_dataset_that_train_accepts(run_cli, sweep_args, tmp_path):
    out = tmp_path / "sweep.jsonl"
    args = [a for a in sweep_args if a != "--quiet"]
    result = run_cli(*args, "--batch-sizes", "1,4", "--actions", "0 10", "--repeats", "2", "--out", out)
    assert result.exit_code == 0, result.stderr
    assert "wrote 8 rows (0 errors)" in result.stdout
    assert "ETA" in result.stderr  # the progress bar
    rows = _rows(out)
    assert len(rows) == 8
    # every row has the published columns plus ours, in that order
    assert all(list(r)[: len(SWEEP_COLUMNS) + len(EXTRA_COLUMNS)] == [*SWEEP_COLUMNS, *EXTRA_COLUMNS] for r in rows)
    # repeats are full passes: pass 0 over the grid, then pass 1; index = bs-major grid position
    assert [r["repeat"] for r in rows] == [0] * 4 + [1] * 4
    assert [r["index"] for r in rows] == [0, 1, 2, 3] * 2
    points = grid((1, 4), (ACTIONS[0], ACTIONS[10]))
    for r in rows:
        p = points[r["index"]]
        assert (r["batch_size"], (r["steps"], r["topk"], r["num_draft_tokens"])) == (p.batch_size, tuple(p.action))
        assert r["error"] is None and r["retry_mem_fraction"] is None
        assert r["provenance"] == "emulated" and r["energy_method"] == "counter"
        # the profile's hardware name, as simulated and published rows (not the profile id)
        assert r["power_limit_watts"] == 80.0 and r["hardware"] == MODEL.profile.hardware == "RTX4060_Laptop"
        # step times are sglang's: one value per 40 decode iterations, keyed by the batch
        # running then. At bs 1 every iteration runs alone, so the timed batch always records
        # them (a count fixed by the emulated decode, not by time). At bs 4 a request that
        # reaches the server late (a loaded machine) decodes at a smaller batch, as on sglang,
        # and too few values at bs 4 fall back to the wall clock: assert the rule, not the mode.
        if r["batch_size"] == 1:
            assert r["speed_source"] == "step_time"
        if r["speed_source"] == "step_time":
            assert r["step_time_count"] > 0
            assert r["speed_tok_s"] == pytest.approx(r["accept_length"] / r["step_time_s"])
        else:
            assert r["speed_source"] == "wall_clock" and r["speed_tok_s"] == r["wall_clock_tok_s"]
        assert r["total_output_tokens"] == max(4, r["batch_size"]) * 512
        assert r["energy_joules"] > 0 and r["avg_power_watts"] > 0
        assert r["joules_per_token"] == pytest.approx(r["energy_joules"] / r["total_output_tokens"])
        assert r["gpu_mem_used_mb_before"] == 0.0 and r["gpu_util_pct_before"] == 0.0  # idle GPU before launch
        assert r["gpu_mem_used_mb"] > 1000 and r["gpu_temp_c_before"] is not None
        assert r["mem_fraction_static"] == 0.65 and r["target_model"] == "m" and r["draft_model"] == "d"
        if r["steps"] == 0:
            assert r["accept_length"] == 1.0 and r["accept_length_source"] == "baseline"
        else:
            assert 1.0 < r["accept_length"] <= r["steps"] + 1 and r["accept_length_source"] == "meta_info"
        # the default emulator model is the calibrated one: the row follows its prediction
        # (p20 of step times with 2 % noise: about 2 % faster than the mean step)
        pred = MODEL.predict(r["batch_size"], (r["steps"], r["topk"], r["num_draft_tokens"]), r["gpu_temp_c_before"])
        assert r["accept_length"] == pytest.approx(pred.accept_length, abs=0.1)
        if r["speed_source"] == "step_time":
            assert r["speed_tok_s"] == pytest.approx(pred.speed_tok_s, rel=0.05)
    sweep = load_sweep(out)
    data = sweep.training_data()
    assert len(data) == 8 and data.rewards.max() > 0
    assert sweep.training_data("pre").states[:, 2].max() == 0.0  # pre-launch memory of the idle GPU
    # the emulated GPU persisted across launches: the state file is next to the output
    assert (tmp_path / "sweep.jsonl.gpu-state.json").exists()
    assert len(list((tmp_path / "sweep.jsonl.logs").glob("*.log"))) == 8
    trained = run_cli("train", out, "--out", tmp_path / "models", "--algo", "lookup_table")
    assert trained.exit_code == 0, trained.stderr
    assert (tmp_path / "models" / "lookup_table" / "model.json").exists()


def test_existing_output_needs_resume(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    out.write_text(json.dumps({"index": 0, "repeat": 0}) + "\n")
    result = run_cli(*sweep_args, "--batch-sizes", "1", "--actions", "0", "--out", out)
    assert result.exit_code == 2
    assert "--resume" in result.stderr
    assert _rows(out) == [{"index": 0, "repeat": 0}]


def test_resume_drops_a_partial_last_line_and_skips_finished_rows(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    first = run_cli(*sweep_args, "--batch-sizes", "1", "--actions", "0 13", "--repeats", "1", "--out", out)
    assert first.exit_code == 0, first.stderr
    done = out.read_text()
    out.write_text(done + '{"hardware": "rtx4060-laptop", "index": 1, "rep')  # killed mid-write
    again = run_cli(*sweep_args, "--batch-sizes", "1", "--actions", "0 13", "--repeats", "2", "--out", out, "--resume")
    assert again.exit_code == 0, again.stderr
    assert "skipped 2" in again.stdout and "wrote 2 rows" in again.stdout
    rows = _rows(out)
    assert out.read_text().startswith(done)
    assert sorted((r["index"], r["repeat"]) for r in rows) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    load_sweep(out)


def test_resume_refuses_another_target_or_grid(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    row = {"index": 1, "repeat": 0, "batch_size": 1, "steps": 3, "topk": 4, "num_draft_tokens": 8}
    out.write_text(json.dumps({**row, "target_model": "other"}) + "\n")
    result = run_cli(*sweep_args, "--batch-sizes", "1", "--actions", "0 10", "--out", out, "--resume")
    assert result.exit_code == 2 and "target_model" in result.stderr
    out.write_text(json.dumps(row) + "\n")
    result = run_cli(*sweep_args, "--batch-sizes", "1", "--actions", "0 13", "--out", out, "--resume")
    assert result.exit_code == 2 and "same --batch-sizes and --actions" in result.stderr


def test_killed_at_random_points_and_resumed_loses_and_duplicates_nothing(sweep_args, tmp_path, port):
    out = tmp_path / "s.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "specband",
        *sweep_args,
        "--batch-sizes",
        "1,4",
        "--actions",
        "0",
        "--repeats",
        "2",
        "--out",
        str(out),
    ]
    rng = random.Random(4)
    kills = 0
    for attempt in range(12):
        proc = subprocess.Popen([*cmd, "--resume"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if attempt < 4:
            time.sleep(rng.uniform(0.5, 2.0))
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                kills += 1
        proc.wait(timeout=120)
        if proc.returncode == 0:
            break
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 0
    assert kills >= 2
    rows = read_rows_for_resume(out)  # raises on a duplicate (index, repeat) or a bad line
    assert sorted((r["index"], r["repeat"]) for r in rows) == [(i, rep) for i in range(2) for rep in range(2)]
    assert all(r["error"] is None for r in rows)
    assert load_sweep(out).training_data().rewards.shape == (4,)


def test_a_failed_launch_is_retried_at_the_lower_mem_fraction(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    args = [*sweep_args]
    args[args.index("--server-command") + 1] = emulator_command("--fault", "launch_failure:mem=0.65")
    result = run_cli(*args, "--batch-sizes", "1", "--actions", "0 13", "--repeats", "1", "--out", out)
    assert result.exit_code == 0, result.stderr
    assert "4 server launches" in result.stdout
    for r in _rows(out):
        assert r["error"] is None
        assert r["retry_mem_fraction"] == 0.55 and r["mem_fraction_static"] == 0.55
    assert load_sweep(out).rows[0].trainable


def test_failures_become_error_rows(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    faults = [
        "--fault",
        "die_mid_batch:steps=1,topk=1",
        "--fault",
        "missing_step_times:steps=3,topk=2,draft=2",
        "--fault",
        "oom_at_capture:steps=5,topk=4,draft=16",
    ]
    args = [*sweep_args]
    args[args.index("--server-command") + 1] = emulator_command(*faults)
    actions = "0 1,1,2 3,2,2 5,4,16"
    result = run_cli(*args, "--batch-sizes", "1", "--actions", actions, "--repeats", "1", "--out", out)
    assert result.exit_code == 0, result.stderr
    assert "wrote 4 rows (2 errors)" in result.stdout
    rows = _by_action(_rows(out))
    died = rows[(1, 1, 1, 2)]
    assert died["error"].startswith("server_died_mid_batch") and died["speed_tok_s"] is None
    no_steps = rows[(1, 3, 2, 2)]
    assert no_steps["error"] is None
    assert no_steps["speed_source"] == "wall_clock" and no_steps["step_time_s"] is None
    assert no_steps["speed_tok_s"] == pytest.approx(no_steps["wall_clock_tok_s"])
    oom = rows[(1, 5, 4, 16)]
    assert oom["error"].startswith("launch_failed: out_of_memory_cuda_graph_capture")
    assert oom["retry_mem_fraction"] == 0.55 and oom["energy_joules"] is None
    assert oom["gpu_temp_c_before"] is not None  # the pre-launch state is kept
    sweep = load_sweep(out)
    rewards = dict(zip(((r.batch_size, *r.action) for r in sweep.rows), sweep.rewards(), strict=True))
    assert rewards[(1, 5, 4, 16)] == 0.0 and rewards[(1, 1, 1, 2)] == 0.0


def test_launch_timeout_becomes_an_error_row_and_a_sweep_of_no_healthy_server_exits_3(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    args = [*sweep_args]
    args[args.index("--server-command") + 1] = emulator_command("--fault", "slow_health")
    result = run_cli(
        *args, "--batch-sizes", "1", "--actions", "0", "--repeats", "1", "--out", out, "--launch-timeout", "1.5"
    )
    # the server never became healthy: the row is written, then the engine's failure status
    assert result.exit_code == ExitCode.ENGINE_FAILED == 3, result.stderr
    assert "wrote 1 rows (1 errors)" in result.stdout
    assert one_error_line(result.stderr) == (
        "error: no run was measured: the one run failed (first: bs=1 (0,0,0) r0: launch_failed: launch_timeout: "
        f"no healthy /health within 1.5 s); the error rows are in {out}"
    )
    (row,) = _rows(out)
    assert row["error"].startswith("launch_failed: launch_timeout") and row["retry_mem_fraction"] == 0.55


def test_one_launch_per_config_serves_every_batch_size_and_falls_back(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    result = run_cli(
        *sweep_args,
        "--batch-sizes",
        "4,16",
        "--actions",
        "0 18",
        "--repeats",
        "1",
        "--out",
        out,
        "--one-launch-per-config",
    )
    assert result.exit_code == 0, result.stderr
    # (0,0,0): one launch for both sizes; (5,4,16): the shared launch at bs 16 fails twice
    # (out of memory, as on the 8 GB laptop), bs 4 then gets its own launch
    assert "4 server launches" in result.stdout
    assert "saved 0 launches (4 runs, 4 launches)" in result.stdout
    rows = _rows(out)
    assert [(r["batch_size"], r["steps"]) for r in rows] == [(4, 0), (16, 0), (4, 5), (16, 5)]  # config-major
    assert [r["index"] for r in rows] == [0, 2, 1, 3]  # bs-major grid positions, as in a per-run sweep
    by = _by_action(rows)
    assert by[(4, 0, 0, 0)]["launch_wall_s"] == by[(16, 0, 0, 0)]["launch_wall_s"]  # the same server
    assert by[(4, 5, 4, 16)]["error"] is None
    assert by[(16, 5, 4, 16)]["error"].startswith("launch_failed: out_of_memory")
    load_sweep(out)


def test_one_launch_per_config_saves_launches(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    result = run_cli(
        *sweep_args,
        "--batch-sizes",
        "1,4,8",
        "--actions",
        "0 10",
        "--repeats",
        "1",
        "--out",
        out,
        "--one-launch-per-config",
    )
    assert result.exit_code == 0, result.stderr
    assert "saved 4 launches (6 runs, 2 launches)" in result.stdout
    assert sorted(r["index"] for r in _rows(out)) == [0, 1, 2, 3, 4, 5]


def test_without_nvml_the_sweep_runs_with_telemetry_off(run_cli, sweep_args, tmp_path, monkeypatch):
    import pynvml

    def no_nvml() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_nvml)
    out = tmp_path / "s.jsonl"
    args = [*sweep_args]
    i = args.index("--time-scale")
    del args[i : i + 2]  # a real-time sweep: the emulator runs fast on its own
    # the emulator, started so that `--device auto` does not recognise it: a "real" GPU server
    launcher = shlex.join([sys.executable, "-c", "from specband.cli import main; main()"])
    args[args.index("--server-command") + 1] = emulator_command(
        "--time-scale",
        str(TIME_SCALE),
        "--perf-model",
        "specband.sim:build_model",  # a module:function factory
    ).replace("python -m specband", launcher)
    explicit = run_cli(
        *args,
        "--batch-sizes",
        "1",
        "--actions",
        "0 10",
        "--repeats",
        "1",
        "--out",
        out,
        "--device",
        "nvml",
        "--power-limit",
        "80",
        "--cooldown",
        "0",
    )
    assert explicit.exit_code == ExitCode.DEVICE_FAILED  # asked for NVML, which is missing: no silent fallback
    assert one_error_line(explicit.stderr).startswith("error: --device nvml: NVML is not available: nvmlInit failed")
    assert not out.exists()
    result = run_cli(
        *args,
        "--batch-sizes",
        "1",
        "--actions",
        "0 10",
        "--repeats",
        "1",
        "--out",
        out,
        "--device",
        "auto",
        "--power-limit",
        "80",
        "--cooldown",
        "0",
    )
    # the disguised emulator announces itself in its answers: its rows would have said
    # "measured" (the trial's N55), so the sweep stops before the first row
    assert result.exit_code == 2, result.stderr
    assert "warning: NVML is not available" in result.stderr and "telemetry is off" in result.stderr
    assert "is specband's emulator (its answers say so)" in one_error_line(result.stderr)
    assert not out.exists()
    args[args.index("--server-command") + 1] = emulator_command("--time-scale", str(TIME_SCALE))
    result = run_cli(
        *args, "--batch-sizes", "1", "--actions", "0 10", "--repeats", "1", "--out", out, "--device", "none",
        "--power-limit", "80", "--cooldown", "0",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = _rows(out)
    for r in rows:
        assert r["error"] is None and r["energy_method"] == "none"
        assert r["energy_joules"] is None and r["avg_power_watts"] is None and r["gpu_temp_c"] is None
        # the emulator's rows are emulated whatever the device, and its step times and the
        # wall clock are both in its emulated seconds (not 1/TIME_SCALE apart)
        assert r["power_limit_watts"] == 80.0 and r["provenance"] == "emulated"
        assert 0.2 < r["wall_clock_tok_s"] / r["speed_tok_s"] <= 1.5, r
    sweep = load_sweep(out)
    assert not sweep.energy_measured  # rewards from throughput only


def test_an_interrupted_sweep_names_its_output_only_where_it_exists(tmp_path) -> None:
    from specband.cli.harness import interrupted_line

    out = tmp_path / "s.jsonl"
    line = interrupted_line(out)
    assert line == (
        "interrupted: every server the sweep started was stopped; no row was written (run the same command to "
        "start again)"
    )
    assert str(out) not in line and not out.exists()
    out.write_text('{"index": 0}\n{"index": 1}\n{"index": 2')  # a row cut short is not counted
    assert interrupted_line(out).endswith(f"; {out} holds 2 complete row(s) (continue with --resume)")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_during_a_launch_leaves_no_server(sweep_args, tmp_path, port, sig):
    out = tmp_path / "s.jsonl"
    args = [*sweep_args]
    args[args.index("--server-command") + 1] = emulator_command("--load-time", "100000")  # 1000 s real to load
    proc = subprocess.Popen(
        [sys.executable, "-m", "specband", *args, "--batch-sizes", "1", "--actions", "0", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    marker = server_marker(port)
    try:
        deadline = time.monotonic() + 300  # a busy machine may take a while to start the sweep
        servers: list[int] = []
        while time.monotonic() < deadline and not servers and proc.poll() is None:
            servers = [p for p in processes_with(marker) if p != proc.pid]
            time.sleep(0.05)
        assert servers, f"the server never started: {proc.poll()}"
        os.kill(proc.pid, sig)
        _, stderr = proc.communicate(timeout=120)  # far below the server's 1000 s load
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == (143 if sig == signal.SIGTERM else 130)  # one rule for every command
    # before the first row: it names only what exists (issue 37: it named an --out never created)
    if out.exists():
        assert _rows(out) == [] and f"{out} holds 0 complete row(s) (continue with --resume)" in stderr
    else:
        assert "interrupted: every server the sweep started was stopped; no row was written" in stderr
        assert str(out) not in stderr
    assert [p for p in processes_with(marker) if p != proc.pid] == []


def _listing(folder: Path) -> dict[str, int | None]:
    """Every path under ``folder`` (relative) -> its size (``None`` for a folder)."""
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.stat().st_size) for p in sorted(folder.rglob("*"))}


def _not_written_by_the_first(listing: dict[str, int | None]) -> dict[str, int | None]:
    """``listing`` without the sizes of the files a running sweep writes on its own (its
    emulated GPU state, its server logs): comparing those would depend on timing."""
    return {k: v for k, v in listing.items() if "gpu-state" not in k and ".logs/" not in k}


def test_a_second_sweep_on_the_same_output_is_refused_at_once(run_cli, sweep_args, tmp_path, port):
    import pynvml

    out = tmp_path / "s.jsonl"
    args = [*sweep_args]
    args[args.index("--server-command") + 1] = emulator_command("--load-time", "100000")  # 1000 s real to load
    first = subprocess.Popen(
        [sys.executable, "-m", "specband", *args, "--batch-sizes", "1", "--actions", "0", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    marker = server_marker(port)
    state = tmp_path / "s.jsonl.gpu-state.json"
    try:
        # until the first sweep's server runs and has written its GPU state (its one write
        # while it loads): before that, its state file and the temporary file of an atomic
        # write could appear between the two listings below
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and first.poll() is None and not emulator_running(state, port):
            time.sleep(0.05)
        assert first.poll() is None, first.communicate()
        assert emulator_running(state, port), "the first sweep's server never started"
        assert (tmp_path / "s.jsonl.lock").read_text() == f"{first.pid}\n"
        before = _listing(tmp_path)
        servers = sorted(processes_with(marker))
        for extra in ([], ["--resume"], ["--device", "nvml", "--power-limit", "80"]):
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(pynvml, "nvmlInit", lambda: pytest.fail("NVML was probed before the lock was taken"))
                second = run_cli(
                    *[a for a in sweep_args if extra[:1] != ["--device"] or a not in ("--time-scale", str(TIME_SCALE))],
                    "--batch-sizes",
                    "1",
                    "--actions",
                    "0",
                    "--out",
                    out,
                    *extra,
                )
            assert second.exit_code == 2
            assert one_error_line(second.stderr) == f"error: {out} is being written by another sweep (pid {first.pid})"
            # nothing touched: no server started, no file written (sizes unchanged, except the
            # files the first sweep itself keeps writing: its emulated GPU's state file and its
            # server's log, which grows at the server's own pace)
            after = _listing(tmp_path)
            assert after.keys() == before.keys()
            assert _not_written_by_the_first(after) == _not_written_by_the_first(before)
            assert sorted(processes_with(marker)) == servers
        os.kill(first.pid, signal.SIGTERM)
        _, stderr = first.communicate(timeout=120)  # far below the server's 1000 s load
        assert first.returncode == 143, stderr  # SIGTERM: 143, as every command (Ctrl-C: 130)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert not (tmp_path / "s.jsonl.lock").exists()  # released and removed


def test_a_lock_left_by_a_killed_sweep_is_taken_over(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    (tmp_path / "s.jsonl.lock").write_text("999999999\n")  # its process is gone: flock died with it
    result = run_cli(
        *sweep_args, "--batch-sizes", "1", "--actions", "0", "--repeats", "1", "--out", out, "--cooldown", "0"
    )
    assert result.exit_code == 0, result.stderr
    assert len(_rows(out)) == 1
    assert not (tmp_path / "s.jsonl.lock").exists()


def test_the_lock_is_exclusive_and_released():
    import tempfile

    from specband.harness.sweeplock import SweepBusyError, SweepLock

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "new" / "s.jsonl"
        with SweepLock(out):
            assert (out.parent / "s.jsonl.lock").read_text() == f"{os.getpid()}\n"
            with pytest.raises(
                SweepBusyError, match=rf"s\.jsonl is being written by another sweep \(pid {os.getpid()}\)"
            ):
                SweepLock(out).acquire()  # a second open file description: flock refuses it too
        assert not out.parent.exists()  # the folder it created for the lock, empty again
        with SweepLock(out):  # free again
            pass


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` (relative) -> its content (``None`` for a folder)."""
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes()) for p in sorted(folder.rglob("*"))}


_ROW = {
    "index": 0,
    "repeat": 0,
    "batch_size": 1,
    "steps": 0,
    "topk": 0,
    "num_draft_tokens": 0,
    "target_model": "m",
    "draft_model": "d",
    "error": None,
}


@pytest.mark.parametrize(
    ("content", "options", "message", "status"),
    [
        (
            None,
            ["--log-dir", "/proc/specband-logs"],
            "error: /proc/specband-logs: cannot create the server-log folder (",
            ExitCode.BAD_INPUT,
        ),
        (
            json.dumps(_ROW) + '\n{"index": 1, "rep',
            [],
            "error: {out} already has 1 rows; pass --resume",
            ExitCode.BAD_INPUT,
        ),
        (
            json.dumps({**_ROW, "target_model": "other"}) + "\n",
            ["--resume"],
            "error: {out}: cannot resume: its rows have target_model='other', this sweep has 'm'",
            ExitCode.BAD_INPUT,
        ),
        (
            None,
            ["--device", "nvml", "--power-limit", "80"],
            "error: --device nvml: NVML is not available",
            ExitCode.DEVICE_FAILED,
        ),
        (
            None,
            ["--port-taken"],
            "error: port {port} on 127.0.0.1 is already answering; refusing to launch",
            ExitCode.ENGINE_FAILED,
        ),
    ],
)
def test_a_refused_sweep_leaves_the_folder_as_it_was(
    run_cli, sweep_args, tmp_path, port, monkeypatch, content, options, message, status
):
    import socket

    import pynvml

    from specband.harness import sweep as sweep_module

    def no_nvml() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_nvml)
    out = tmp_path / "s.jsonl"
    if content is not None:
        out.write_text(content)
    args = [*sweep_args]
    listener = None
    if options == ["--port-taken"]:
        options = []
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # someone else's server on --port
        listener.bind(("127.0.0.1", port))
        listener.listen()
        real = sweep_module.wait_port_free
        monkeypatch.setattr(sweep_module, "wait_port_free", lambda host, p, wait_s: real(host, p, 0.2))
    if "--device" in options:
        del args[args.index("--time-scale") : args.index("--time-scale") + 2]  # not the emulator's GPU
    before = _snapshot(tmp_path)
    try:
        result = run_cli(*args, "--batch-sizes", "1", "--actions", "0", "--out", out, *options)
    finally:
        if listener is not None:
            listener.close()
    assert result.exit_code == status  # bad input 2; NVML missing 4; another server on the port 3
    assert one_error_line(result.stderr).startswith(message.format(out=out, port=port)), result.stderr
    # no emulated GPU state, no lock, no log folder, no rows, no rewrite of a partial line
    assert _snapshot(tmp_path) == before


def test_time_scale_needs_the_emulator(run_cli, tmp_path):
    result = run_cli(
        "sweep", "--target", "m", "--device", "none", "--time-scale", "0.01", "--out", tmp_path / "x.jsonl"
    )
    assert result.exit_code == 2 and "--time-scale applies only to the emulator" in result.stderr


def test_an_unbalanced_server_arg_is_one_error_line(run_cli, tmp_path):
    out = tmp_path / "x.jsonl"
    result = run_cli("sweep", "--target", "m", "--device", "none", "--server-arg", '"oops', "--out", out)
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: --server-arg '\"oops' cannot be parsed: No closing quotation"], result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("server_arg", "message"),
    [
        (
            "--speculative-num-steps 5",
            "error: --server-arg '--speculative-num-steps 5': --speculative-num-steps is "
            "set by specband sweep; use its --actions instead",
        ),
        ("--port=31561", "error: --server-arg '--port=31561': --port is set by specband sweep; use its --port instead"),
    ],
)
def test_a_server_arg_that_would_change_the_measured_config_is_refused(
    run_cli, sweep_args, tmp_path, server_arg, message
):
    import pynvml

    out = tmp_path / "s.jsonl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pynvml, "nvmlInit", lambda: pytest.fail("NVML was probed before the options were checked"))
        result = run_cli(
            *sweep_args, "--batch-sizes", "1", "--actions", "0 10", "--server-arg", server_arg, "--out", out
        )
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == message
    assert list(tmp_path.iterdir()) == []  # no rows, no logs, no emulated GPU state


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--actions", "3,2,4 7"], 'error: --actions: (3,2,4) is given twice (as "3,2,4" and "7")'),
        (["--actions", "0;10 (0,0,0)"], 'error: --actions: (0,0,0) is given twice (as "0" and "(0,0,0)")'),
        (["--actions", "0 99"], "error: --actions: action index 99 is outside 0..43"),
        (["--actions", " ; "], "error: --actions must name at least one action ('all', indices or triples)"),
        (["--batch-sizes", "1,4,4"], "error: --batch-sizes: batch size 4 is given twice in '1,4,4'"),
        (["--batch-sizes", "0,4"], "error: --batch-sizes: batch sizes must be in [1, 1048576], got 0"),
    ],
)
def test_a_bad_grid_names_the_option_and_the_culprit(run_cli, sweep_args, tmp_path, options, message):
    result = run_cli(*sweep_args, "--out", tmp_path / "s.jsonl", *options)
    assert result.exit_code == 2
    assert one_error_line(result.stderr) == message
    assert list(tmp_path.iterdir()) == []


def test_a_resume_rewrite_that_fails_is_a_harness_error_and_keeps_the_file(tmp_path, monkeypatch):
    from specband.core.errors import HarnessError
    from specband.files import fileio

    out = tmp_path / "s.jsonl"
    out.write_text('{"index": 0, "repeat": 0}\n{"index": 1, "rep')

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(fileio.os, "replace", refuse)
    with pytest.raises(HarnessError, match=r"s\.jsonl: cannot write \(Permission denied\)"):
        read_rows_for_resume(out)
    assert out.read_text() == '{"index": 0, "repeat": 0}\n{"index": 1, "rep'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]
    monkeypatch.undo()
    assert read_rows_for_resume(out) == [{"index": 0, "repeat": 0}]
    assert out.read_text() == '{"index": 0, "repeat": 0}\n'


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (lambda d: ["--out", d / "adir"], "error: --out {d}/adir: is a folder; name a file"),
        (lambda d: ["--out", ""], "error: --out: empty"),
        (
            lambda d: ["--out", d / "afile" / "s.jsonl"],
            "error: {d}/afile/s.jsonl: cannot write ({d}/afile is not a folder)",
        ),
        (lambda d: ["--out", d / "s.jsonl", "--log-dir", d / "afile"], "error: --log-dir {d}/afile: is a file"),
        (
            lambda d: ["--out", d / "s.jsonl", "--log-dir", d / "afile" / "logs"],
            "error: {d}/afile/logs: cannot create the server-log folder (Not a directory)",
        ),
        (
            lambda d: ["--out", d / "s.jsonl", "--log-dir", "/proc/specband-logs"],
            "error: /proc/specband-logs: cannot create the server-log folder (",
        ),
        (lambda d: ["--out", "/proc/specband.files.jsonl"], "error: /proc/specband.files.jsonl: cannot write ("),
    ],
)
def test_bad_output_paths_are_one_error_line_and_create_nothing(run_cli, tmp_path, options, message):
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    result = run_cli(
        "sweep",
        "--target",
        "m",
        "--draft",
        "d",
        "--device",
        "none",
        "--batch-sizes",
        "1",
        "--actions",
        "0",
        "--quiet",
        *options(tmp_path),
    )
    assert result.exit_code == 2
    assert one_error_line(result.stderr).startswith(message.format(d=tmp_path)), result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]
    assert list((tmp_path / "adir").iterdir()) == [] and (tmp_path / "afile").read_text() == "x"


#: typer's message for an integer option's ``min`` (the sweep's bounds are typer's own).
_AT_LEAST = "Input should be greater than or equal to {} (see 'specband sweep --help')"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--power-limit", "0"],
            "error: --power-limit must be a power limit in W in [1, 2000], got 0.0",
        ),
        (
            ["--power-limit", "-5"],
            "error: --power-limit must be a power limit in W in [1, 2000], got -5.0",
        ),
        (
            ["--power-limit", "nan"],
            "error: --power-limit must be a power limit in W in [1, 2000], got nan",
        ),
        (
            ["--power-limit", "inf"],
            "error: --power-limit must be a power limit in W in [1, 2000], got inf",
        ),
        (["--cooldown", "nan"], "error: --cooldown: must be a finite number, got nan"),  # not "out of range"
        (["--retry-mem-fraction", "-5"], "error: --retry-mem-fraction must be 0 (no retry) or in (0, 1), got -5.0"),
        (["--retry-mem-fraction", "nan"], "error: --retry-mem-fraction must be 0 (no retry) or in (0, 1), got nan"),
        (["--repeats", "0"], "error: Invalid value for '--repeats': " + _AT_LEAST.format(1)),
        (["--gpu-index", "-1"], "error: Invalid value for '--gpu-index': " + _AT_LEAST.format(0)),
    ],
)
def test_bad_numbers_are_refused_before_anything_runs(run_cli, sweep_args, tmp_path, options, message):
    import pynvml

    out = tmp_path / "s.jsonl"
    for device in (["--device", "nvml"], []):  # a real GPU's sweep, and the emulator's
        args = [a for a in sweep_args if a not in ("--time-scale", str(TIME_SCALE))] if device else sweep_args
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(pynvml, "nvmlInit", lambda: pytest.fail("NVML was probed before the options were checked"))
            result = run_cli(*args, *device, "--batch-sizes", "1", "--actions", "0", "--out", out, *options)
        assert result.exit_code == 2
        assert one_error_line(result.stderr) == message
        assert list(tmp_path.iterdir()) == []  # no rows, no logs, no emulated GPU state


@pytest.mark.parametrize(
    ("server_command", "message"),
    [
        (
            "/nonexistent/sglang",
            "error: --server-command cannot be run: cannot execute '/nonexistent/sglang': "
            "not an executable file (nor one on PATH)",
        ),
        ("sh -c specband_no_such_command", "error: --server-command cannot be run: "),
        ("python -m specband_no_such_module", "error: --server-command cannot be run: "),
    ],
)
def test_a_server_command_that_cannot_run_stops_the_sweep_at_once(
    run_cli, sweep_args, tmp_path, server_command, message
):
    out = tmp_path / "s.jsonl"  # a sweep to resume: its first run is done
    done = {
        "index": 0,
        "repeat": 0,
        "batch_size": 1,
        "steps": 0,
        "topk": 0,
        "num_draft_tokens": 0,
        "target_model": "m",
        "draft_model": "d",
        "error": None,
    }
    out.write_text(json.dumps(done) + "\n")
    measured = out.read_text()
    args = [*sweep_args]
    args[args.index("--server-command") + 1] = server_command
    del args[args.index("--time-scale") : args.index("--time-scale") + 2]  # not the emulator
    for target, extra in [
        (out, ["--resume"]),
        (tmp_path / "new.jsonl", []),
        (tmp_path / "cfg.jsonl", ["--one-launch-per-config"]),
    ]:
        logs = tmp_path / f"{target.name}.failed-logs"
        result = run_cli(
            *args,
            "--device",
            "none",
            "--batch-sizes",
            "1,4",
            "--actions",
            "0 10",
            "--repeats",
            "2",
            "--out",
            target,
            "--log-dir",
            logs,
            "--cooldown",
            "0",
            *extra,
        )
        assert result.exit_code == 2
        line = one_error_line(result.stderr)
        assert line.startswith(message), line
        assert any(why in line for why in ("not found", "No such file", "No module named", "not an executable file"))
        # a missing executable is refused with the options (no launch, no log folder); else one
        # launch, no retry, no error rows; the rows measured before stay
        launches = sum(p.read_text().count("=== specband launch") for p in logs.iterdir()) if logs.exists() else 0
        assert launches == (0 if server_command.startswith("/nonexistent") else 1)
        assert not target.exists() if target != out else out.read_text() == measured


def test_sglang_flag_names_and_real_launch_seconds(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    result = run_cli(
        *sweep_args,
        "--batch-sizes",
        "1,4",
        "--actions",
        "0",
        "--repeats",
        "1",
        "--out",
        out,
        "--mem-fraction-static",
        "0.6",
        "--cooldown",
        "0",
    )
    assert result.exit_code == 0, result.stderr
    rows = _rows(out)
    assert [r["mem_fraction_static"] for r in rows] == [0.6, 0.6]
    logs = "".join(p.read_text() for p in (tmp_path / "s.jsonl.logs").iterdir())
    assert logs.count("--mem-fraction-static 0.6 ") == 2
    # launch time in real seconds, whatever the time scale: the two launches, one after the
    # other, took less than the whole sweep (scaled by 1 / --time-scale, the emulator's real
    # start-up would read as minutes); the sweep's seconds are printed rounded to 0.1 s
    elapsed = float(re.search(r"launches in ([0-9.]+) s", result.stdout).group(1))
    assert all("launch_s" not in r and r["launch_wall_s"] > 0 for r in rows)
    assert sum(r["launch_wall_s"] for r in rows) <= elapsed + 0.05
    old = run_cli(*sweep_args, "--out", tmp_path / "o.jsonl", "--mem-fraction", "0.6")
    assert old.exit_code == 2 and "No such option: --mem-fraction" in one_error_line(old.stderr)
