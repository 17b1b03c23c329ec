"""Failure classes: what stops a sweep at once, what becomes an error row within
seconds, draft health, and interrupts while a request to a hung server is in flight."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.servers import TIME_SCALE, emulator_command, one_error_line, processes_with


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _with_command(sweep_args: list[str], command: str) -> list[str]:
    args = [*sweep_args]
    args[args.index("--server-command") + 1] = command
    return args


def test_an_argument_sglang_refuses_stops_the_sweep_at_once(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    res = run_cli(
        *sweep_args, "--batch-sizes", "1,4", "--actions", "0 10", "--out", out, "--server-arg", "--bogus-flag 1"
    )
    assert res.exit_code == 2
    line = one_error_line(res.stderr)
    assert "sglang refused the command line" in line and "unrecognized arguments: --bogus-flag 1" in line
    assert not out.exists()  # no error rows, no retry at another mem fraction
    logs = sorted((tmp_path / "s.jsonl.logs").glob("*.log"))
    assert len(logs) == 1 and logs[0].read_text().count("=== specband launch") == 1


def test_a_flag_spelt_for_another_sglang_version_stops_the_sweep(run_cli, sweep_args, tmp_path):
    # 0.5.13's --cuda-graph-max-bs is ambiguous for the emulator, which is sglang 0.5.23
    out = tmp_path / "s.jsonl"
    res = run_cli(*sweep_args, "--batch-sizes", "1", "--actions", "0", "--out", out, "--sglang-version", "0.5.13")
    assert res.exit_code == 2
    assert "ambiguous option: --cuda-graph-max-bs could match" in one_error_line(res.stderr)
    assert not out.exists()


def test_a_missing_script_as_server_command_stops_the_sweep(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    res = run_cli(
        *_with_command(sweep_args, "python /missing-specband-server.py"),
        "--batch-sizes",
        "1,4",
        "--actions",
        "0",
        "--out",
        out,
        "--device",
        "emulated",
    )
    assert res.exit_code == 2
    line = one_error_line(res.stderr)
    assert "--server-command cannot be run" in line and "missing-specband-server.py" in line
    assert not out.exists()


def test_an_oom_during_capture_of_a_server_that_keeps_running_is_an_error_row_not_a_timeout(
    run_cli, sweep_args, tmp_path
):
    out = tmp_path / "s.jsonl"
    # at time scale 1 the launch timeout is 600 real seconds: the row comes from the log
    args = [
        a
        for a in _with_command(sweep_args, emulator_command("--fault", "oom_at_capture:hang=1"))
        if a not in ("--time-scale", str(TIME_SCALE))
    ]
    res = run_cli(
        *args,
        "--batch-sizes",
        "1",
        "--actions",
        "0",
        "--repeats",
        "1",
        "--out",
        out,
        "--cooldown",
        "0",
        "--device",
        "none",
        "--power-limit",
        "80",
    )
    # the only run's server never became healthy: its row, then the engine's failure status
    assert res.exit_code == 3, res.stderr
    assert "no run was measured: the one run failed" in one_error_line(res.stderr)
    (row,) = _rows(out)
    assert row["error"].startswith("launch_failed: out_of_memory_cuda_graph_capture")
    assert row["retry_mem_fraction"] == 0.55
    # resumed, nothing is run again (an out-of-memory is the configuration's): still no measured row, exit 3
    again = run_cli(*args, "--batch-sizes", "1", "--actions", "0", "--repeats", "1", "--out", out, "--cooldown", "0",
                    "--device", "none", "--power-limit", "80", "--resume")  # fmt: skip
    assert again.exit_code == 3, again.stderr
    assert one_error_line(again.stderr).startswith(f"error: no run was measured: all 1 rows of {out} are error rows")
    assert _rows(out) == [row]  # retried once at the lower fraction, as an out-of-memory is


def test_a_rejected_draft_is_flagged_and_warned_once(run_cli, sweep_args, tmp_path):
    out = tmp_path / "s.jsonl"
    res = run_cli(
        *_with_command(sweep_args, emulator_command("--fault", "draft_rejected")),
        "--batch-sizes",
        "1,4",
        "--actions",
        "0 3,1,4",
        "--repeats",
        "1",
        "--out",
        out,
    )
    assert res.exit_code == 0, res.stderr
    flags = {(r["batch_size"], r["steps"]): r["draft_flag"] for r in _rows(out)}
    assert flags == {(1, 0): None, (1, 3): "all_rejected", (4, 0): None, (4, 3): "all_rejected"}
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:") and "rejected" in ln]
    assert len(warnings) == 1 and "rope mismatch" in warnings[0] and "--speculative-algorithm" in warnings[0]


def test_one_sigterm_ends_a_sweep_with_a_request_in_flight_to_a_hung_server(sweep_args, tmp_path, port):
    out = tmp_path / "s.jsonl"
    args = _with_command(sweep_args, emulator_command("--fault", "hung_requests"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specband",
            *args,
            "--batch-sizes",
            "1",
            "--actions",
            "0",
            "--out",
            str(out),
            "--request-timeout",
            "100000",
        ],  # 1000 s real per request
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log_dir = tmp_path / "s.jsonl.logs"

    def in_flight() -> bool:  # the server logged that it got a request and will never answer
        return any("hung_requests" in p.read_text(errors="replace") for p in log_dir.glob("*.log"))

    try:
        deadline = time.monotonic() + 300  # a busy machine may take a while
        while time.monotonic() < deadline and proc.poll() is None and not in_flight():
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        assert in_flight(), "no request reached the server"
        os.kill(proc.pid, signal.SIGTERM)  # once
        _, stderr = proc.communicate(timeout=120)  # far below the 1000 s request timeout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, stderr
    assert [p for p in processes_with(f"--port {port}") if p != proc.pid] == []


def test_request_timeout_must_be_positive(run_cli, sweep_args, tmp_path):
    res = run_cli(*sweep_args, "--out", tmp_path / "s.jsonl", "--request-timeout", "0")
    assert res.exit_code == 2
    assert "--request-timeout must be > 0" in one_error_line(res.stderr)


def test_train_and_evaluate_warn_on_data_with_rejected_drafts(run_cli, tmp_path):
    from specband.sweeps.dataset import bundled_data_path

    rows = [json.loads(line) for line in Path(bundled_data_path()).read_text().splitlines() if line.strip()]
    spec = next(i for i, r in enumerate(rows) if r.get("steps") and not r.get("error"))
    rows[spec]["accept_length"] = 1.0  # a draft whose every proposal was rejected
    data = tmp_path / "sweep.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for args in (
        ["train", str(data), "--out", str(tmp_path / "models"), "--algo", "lookup_table"],
        ["evaluate", str(data), "--algo", "lookup_table"],
    ):
        res = run_cli(*args)
        assert res.exit_code == 0, res.stderr
        warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:") and "rejected" in ln]
        assert warnings == [f"warning: {data}: 1 rows: " + warnings[0].split(": 1 rows: ", 1)[1]]
        assert "rope mismatch" in warnings[0]
