"""A sweep measures only the server it started (issue 16 item 4): another process on the
port is an environment failure (one line, exit 3 as the engine's failure, no row); error rows carry their class
and ``--resume`` runs environment-class rows again."""

from __future__ import annotations

import http.server
import json
import socket
import sys
import threading
from pathlib import Path

import pytest
from tests.servers import one_error_line

from specband.contract.record import error_class_of, row_error_class
from specband.engines.failures import PortInUseError
from specband.harness.process import ServerProcess
from specband.harness.procfs import listening_socket_inodes, socket_inodes_of


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def test_a_foreign_server_answering_after_the_launch_is_refused(tmp_path: Path, port: int) -> None:
    """Sweep B's server never binds; sweep A's answers /health on the port: not B's."""
    server = ServerProcess(
        [sys.executable, "-c", "import time; time.sleep(60)", "--port", str(port)],
        host="127.0.0.1",
        port=port,
        log_path=tmp_path / "s.log",
        port_wait_s=0.0,
    )
    server.start()
    foreign = http.server.HTTPServer(("127.0.0.1", port), _Health)
    thread = threading.Thread(target=foreign.serve_forever, daemon=True)
    thread.start()
    try:
        with server, pytest.raises(PortInUseError, match="process specband did not start"):
            server.wait_healthy(30, 0.05)
    finally:
        foreign.shutdown()
        foreign.server_close()


def test_the_listening_socket_is_found_and_owned(port: int) -> None:
    import os

    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        assert listening_socket_inodes(port) == set()  # bound, not listening
        s.listen()
        inodes = listening_socket_inodes(port)
        assert inodes and inodes <= socket_inodes_of([os.getpid()])
        assert not inodes & socket_inodes_of([os.getppid()])


def test_a_port_held_by_a_socket_that_does_not_listen_stops_the_sweep(run_cli, sweep_args, tmp_path: Path) -> None:
    port = int(sweep_args[sweep_args.index("--port") + 1])
    out = tmp_path / "s.jsonl"
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # the emulator's bind fails: an environment failure, not a row
        result = run_cli(*sweep_args, "--batch-sizes", "1", "--actions", "0 10", "--out", out)
    assert result.exit_code == 3  # the server never became healthy: a failed launch, not bad input
    line = one_error_line(result.stderr)
    assert f"port {port}" in line and "could not bind" in line
    assert not out.exists() or out.read_text() == ""


@pytest.mark.parametrize(
    "error, cls",
    [
        ("launch_failed: port_in_use (exit 1): address already in use", "environment"),
        ("launch_failed: launch_timeout: no healthy /health within 600 s", "environment"),
        ("launch_failed: out_of_memory (exit 1): CUDA out of memory", "config"),
        ("launch_failed: out_of_memory_cuda_graph_capture: x", "config"),
        ("launch_failed: cuda_graph_capture_failed (exit 1): x", "config"),
        ("launch_failed: exited (exit 139): Segmentation fault", "server_crash"),
        ("server_died_mid_batch: connection reset", "server_crash"),
        ("request failed: timed out", "environment"),
    ],
)
def test_error_classes(error: str, cls: str) -> None:
    assert error_class_of(error) == cls
    assert row_error_class({"error": error}) == cls
    assert row_error_class({"error": error, "error_class": "config"}) == "config"
    assert row_error_class({"error": None}) is None


def test_resume_runs_environment_rows_again_and_keeps_config_rows(run_cli, sweep_args, tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    grid = ["--batch-sizes", "1", "--actions", "0 10", "--repeats", "1"]
    first = run_cli(*sweep_args, *grid, "--out", out)
    assert first.exit_code == 0, first.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(r["error"] is None and r["error_class"] is None for r in rows)
    measured = ("speed_tok_s", "energy_joules", "accept_length", "avg_power_watts", "step_time_s")
    env_row = {**rows[0], "error": "launch_failed: port_in_use (exit 1): address already in use"}
    env_row.update(dict.fromkeys(measured))
    env_row.pop("error_class")  # a file written before the column existed: classed from its text
    cfg_row = {**rows[1], "error": "launch_failed: out_of_memory (exit 1): x", "error_class": "config"}
    cfg_row.update(dict.fromkeys(measured))
    out.write_text(json.dumps(env_row) + "\n" + json.dumps(cfg_row) + "\n")
    again = run_cli(*sweep_args, *grid, "--out", out, "--resume")
    assert again.exit_code == 0, again.stderr
    after = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["index"], r["repeat"]) for r in after) == [(0, 0), (1, 0)]  # no duplicate, none lost
    by_index = {r["index"]: r for r in after}
    assert by_index[0]["error"] is None and by_index[0]["speed_tok_s"] > 0  # measured again
    assert by_index[1] == cfg_row  # a config failure stays


@pytest.mark.parametrize(
    "column, value",
    [("hardware", "H100_SXM"), ("power_limit_watts", 700.0), ("provenance", "measured")],
)
def test_resume_refuses_rows_of_another_world(run_cli, sweep_args, tmp_path: Path, column: str, value) -> None:
    """An 80 W emulated RTX 4060 sweep resumed over 700 W H100 (or measured) rows: refused, file kept."""
    out = tmp_path / "s.jsonl"
    grid = ["--batch-sizes", "1", "--actions", "0", "--repeats", "1"]
    first = run_cli(*sweep_args, *grid, "--out", out)
    assert first.exit_code == 0, first.stderr
    row = json.loads(out.read_text())
    assert row["hardware"] == "RTX4060_Laptop" and row["provenance"] == "emulated"
    row[column] = value
    before = json.dumps(row) + "\n"
    out.write_text(before)
    again = run_cli(*sweep_args, "--batch-sizes", "1", "--actions", "0", "--repeats", "2", "--out", out, "--resume")
    assert again.exit_code == 2
    line = one_error_line(again.stderr)
    assert f"{column}={value!r}" in line and "cannot resume" in line
    assert out.read_text() == before
