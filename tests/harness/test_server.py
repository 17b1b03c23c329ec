"""Server launch command, failure classification and process hygiene."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tests.servers import processes_with

from specband.core.errors import ConfigError
from specband.devices.base import Clock
from specband.engines.failures import LaunchError, PortInUseError, classify_failure
from specband.engines.serverconfig import SGLANG_ENV, ServerConfig, build_launch_command, split_server_args
from specband.harness.process import ServerProcess
from specband.harness.procfs import group_members


def _flag(cmd: list[str], name: str) -> str | None:
    return cmd[cmd.index(name) + 1] if name in cmd else None


def test_launch_command_has_the_facts_flags():
    cfg = ServerConfig(model_path="unsloth/Llama-3.2-1B-Instruct", draft_model_path="draft", port=20000)
    cmd = build_launch_command(cfg, (3, 4, 8), 16, 0.65)
    assert cmd[0] == sys.executable and cmd[1:3] == ["-m", "sglang.launch_server"]
    assert _flag(cmd, "--model-path") == "unsloth/Llama-3.2-1B-Instruct"
    assert _flag(cmd, "--port") == "20000" and _flag(cmd, "--host") == "127.0.0.1"
    assert _flag(cmd, "--mem-fraction-static") == "0.65"
    assert _flag(cmd, "--dtype") == "float16"
    assert _flag(cmd, "--cuda-graph-max-bs-decode") == "16" and _flag(cmd, "--max-running-requests") == "16"
    assert _flag(cmd, "--attention-backend") == "flashinfer"
    assert _flag(cmd, "--speculative-algorithm") == "EAGLE3"
    assert _flag(cmd, "--speculative-draft-model-path") == "draft"
    assert (
        _flag(cmd, "--speculative-num-steps"),
        _flag(cmd, "--speculative-eagle-topk"),
        _flag(cmd, "--speculative-num-draft-tokens"),
    ) == ("3", "4", "8")
    assert SGLANG_ENV == {"SGLANG_RECORD_STEP_TIME": "1", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}


def test_baseline_has_no_speculative_flags_and_backend_stays_pinned():
    cmd = build_launch_command(ServerConfig(model_path="m"), (0, 0, 0), 1, 0.55)
    assert not any(a.startswith("--speculative") for a in cmd)
    assert _flag(cmd, "--attention-backend") == "flashinfer"
    assert _flag(cmd, "--mem-fraction-static") == "0.55"


def test_auto_backend_reproduces_upstream_flashinfer_only_when_topk_above_one():
    cfg = ServerConfig(model_path="m", draft_model_path="d", attention_backend="auto")
    assert "--attention-backend" not in build_launch_command(cfg, (3, 1, 4), 4, 0.65)
    assert _flag(build_launch_command(cfg, (3, 2, 4), 4, 0.65), "--attention-backend") == "flashinfer"


def test_topk_one_is_canonicalised_and_bad_input_rejected():
    cfg = ServerConfig(model_path="m", draft_model_path="d", extra_args=("--tp-size", "1"))
    cmd = build_launch_command(cfg, (3, 1, 2), 4, 0.65)
    assert _flag(cmd, "--speculative-num-draft-tokens") == "4"
    assert cmd[-2:] == ["--tp-size", "1"]
    with pytest.raises(ConfigError, match="--draft"):
        build_launch_command(ServerConfig(model_path="m"), (3, 4, 8), 4, 0.65)
    with pytest.raises(ConfigError):
        build_launch_command(cfg, (3, 4, 8), 0, 0.65)
    with pytest.raises(ConfigError):
        ServerConfig(model_path="m", port=70000)


@pytest.mark.parametrize(
    ("log", "reason"),
    [
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n"
            "Exception: Capture cuda graph failed: CUDA out of memory.",
            "out_of_memory_cuda_graph_capture",
        ),
        ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "out_of_memory"),
        ("Exception: Capture cuda graph failed: Ninja build failed.", "cuda_graph_capture_failed"),
        (
            "ERROR: [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use",
            "port_in_use",
        ),
        ("launch_server.py: error: unrecognized arguments: --bogus", "bad_arguments"),
        ("Traceback (most recent call last):\nValueError: something else", "exited"),
        ("", "exited"),
    ],
)
def test_failure_classification(log, reason):
    got, detail = classify_failure(log)
    assert got == reason
    if log:
        assert detail and detail in log


def _script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "server.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def test_exit_during_launch_returns_at_once_with_the_reason(tmp_path, port):
    cmd = _script(
        tmp_path,
        """
        import sys, time
        time.sleep(0.2)
        print("Exception: Capture cuda graph failed: CUDA out of memory.", file=sys.stderr)
        sys.exit(1)
    """,
    )
    server = ServerProcess([*cmd, "--port", str(port)], host="127.0.0.1", port=port, log_path=tmp_path / "s.log")
    server.start()
    t0 = time.monotonic()
    with server, pytest.raises(LaunchError) as info:
        server.wait_healthy(timeout_s=600)
    assert time.monotonic() - t0 < 300  # at its exit, not at the 600 s timeout (a busy machine starts Python slowly)
    assert info.value.reason == "out_of_memory_cuda_graph_capture"
    assert info.value.returncode == 1
    assert "launch_failed: out_of_memory_cuda_graph_capture (exit 1)" in str(info.value)


def test_launch_timeout(tmp_path, port):
    cmd = _script(tmp_path, "import time\ntime.sleep(60)\n")
    server = ServerProcess([*cmd, "--port", str(port)], host="127.0.0.1", port=port, log_path=tmp_path / "s.log")
    server.start()
    with server, pytest.raises(LaunchError) as info:
        server.wait_healthy(timeout_s=0.5, poll_s=0.05)
    assert info.value.reason == "launch_timeout"
    assert not processes_with(f"--port {port}")


def test_a_port_that_already_answers_is_refused(tmp_path, port):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        server = ServerProcess(
            [sys.executable, "-c", "pass"], host="127.0.0.1", port=port, log_path=tmp_path / "s.log", port_wait_s=0.2
        )
        with pytest.raises(PortInUseError, match=f"port {port}"):
            server.start()
        assert server.proc is None


def test_stop_kills_the_whole_group_even_a_child_that_ignores_sigterm(tmp_path, port):
    marker = f"--port {port}"
    ready = tmp_path / "child-ignores-sigterm"
    cmd = _script(
        tmp_path,
        f"""
        import signal, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c",
            "import pathlib, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "pathlib.Path({str(ready)!r}).touch(); time.sleep(600)", "{marker}"])
        time.sleep(600)
    """,
    )
    server = ServerProcess([*cmd, marker], host="127.0.0.1", port=port, log_path=tmp_path / "s.log")
    server.start()
    # until the child ignores SIGTERM (a count of processes with the marker also counts the
    # child between its fork and its exec, which SIGTERM still kills: SIGKILL would go untested)
    deadline = time.monotonic() + 300
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), "the child never started"
    pgid = server.pgid
    assert len(group_members(pgid)) == 2
    t0 = time.monotonic()
    server.stop(grace_s=0.5)
    assert time.monotonic() - t0 < 60  # SIGKILL after the 0.5 s grace, not the child's 600 s
    assert group_members(pgid) == []
    assert processes_with(marker) == []
    server.stop()  # idempotent


def test_server_log_gets_the_command_and_output(tmp_path, port):
    cmd = _script(tmp_path, "print('hello from the server')\n")
    server = ServerProcess([*cmd, "--port", str(port)], host="127.0.0.1", port=port, log_path=tmp_path / "s.log")
    server.start()
    with server, pytest.raises(LaunchError) as info:
        server.wait_healthy(timeout_s=30)
    assert info.value.reason == "exited" and info.value.returncode == 0
    log = (tmp_path / "s.log").read_text()
    assert "hello from the server" in log and "=== specband launch" in log


def test_the_server_dies_with_a_killed_sweep(tmp_path, port):
    """A sweep killed with SIGKILL cannot clean up: the parent-death signal stops its server."""
    marker = f"--port {port}"
    driver = _script(
        tmp_path,
        f"""
        import sys, time
        from specband.harness.process import ServerProcess
        s = ServerProcess([sys.executable, "-c", "import time; time.sleep(600)", "{marker}"],
                          host="127.0.0.1", port={port}, log_path="{tmp_path / "d.log"}")
        s.start()
        print(s.pgid, flush=True)
        time.sleep(600)
    """,
    )
    proc = subprocess.Popen(driver, stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(proc.stdout.readline())
        deadline = time.monotonic() + 60
        while server_pid not in processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server_pid in processes_with(marker)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 60  # its SIGTERM, then its exit, on a busy machine
        while processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with(marker) == []
    finally:
        proc.kill()
        proc.wait()


def test_clock_scales_health_polling(tmp_path, port):
    cmd = _script(tmp_path, "import time\ntime.sleep(60)\n")
    server = ServerProcess(
        [*cmd, "--port", str(port)], host="127.0.0.1", port=port, log_path=tmp_path / "s.log", clock=Clock(0.001)
    )
    server.start()
    t0 = time.monotonic()
    with server, pytest.raises(LaunchError, match="launch_timeout"):
        server.wait_healthy(timeout_s=1.0, poll_s=0.5)  # 1 emulated s, floored at min(1 s, 10 s) real
    assert 0.9 < time.monotonic() - t0 < 9  # neither 1 ms (unfloored) nor 10 s (the floor's cap)


def test_a_cancelled_worker_s_launch_stops_at_the_next_poll_not_at_the_timeout(tmp_path, port):
    """A ``sweep --gpus`` worker can register its server just after the pool's stop ran
    (Ctrl-C while the worker starts it): its clock then ends the wait for /health."""
    from specband.harness.fleet import CancellableClock
    from specband.harness.workers import Cancellation

    cancellation = Cancellation()
    cmd = _script(tmp_path, "import time\ntime.sleep(600)\n")
    server = ServerProcess(
        [*cmd, "--port", str(port)],
        host="127.0.0.1",
        port=port,
        log_path=tmp_path / "s.log",
        clock=CancellableClock(1.0, cancellation),
    )
    server.start()
    cancellation.cancel()  # nothing registered: the server is not stopped by it
    t0 = time.monotonic()
    with server, pytest.raises(KeyboardInterrupt):
        server.wait_healthy(timeout_s=600, poll_s=0.05)
    assert time.monotonic() - t0 < 300  # at its first poll, not at the 600 s timeout
    assert not processes_with(f"--port {port}")


def test_split_server_args_splits_like_a_shell_and_names_a_bad_value():
    assert split_server_args([]) == ()
    values = ["--log-level warning", "--trust-remote-code", "--json-model-override-args '{\"a\": 1}'"]
    assert split_server_args(values) == (
        "--log-level",
        "warning",
        "--trust-remote-code",
        "--json-model-override-args",
        '{"a": 1}',
    )
    with pytest.raises(ConfigError, match=r"^--server-arg '\"oops' cannot be parsed: No closing quotation$"):
        split_server_args(["--ok", '"oops'])
    with pytest.raises(ConfigError, match=r"--server-arg 'x\\\\' cannot be parsed: No escaped character"):
        split_server_args(["x\\"])


@pytest.mark.parametrize(
    ("value", "flag", "option"),
    [
        ("--model-path other", "--model-path", "--target"),
        ("--model=other", "--model", "--target"),
        ("--host 0.0.0.0", "--host", "--host"),
        ("--port 31561", "--port", "--port"),
        ("--port=31561", "--port", "--port"),
        ("--mem-fraction-static=0.9", "--mem-fraction-static", "--mem-fraction-static"),
        ("--dtype bfloat16", "--dtype", "--dtype"),
        ("--attention-backend triton", "--attention-backend", "--attention-backend"),
        ("--cuda-graph-max-bs 64", "--cuda-graph-max-bs", "--batch-sizes"),
        ("--max-running-requests=64", "--max-running-requests", "--batch-sizes"),
        ("--speculative-draft-model-path x", "--speculative-draft-model-path", "--draft"),
        ("--speculative-algorithm EAGLE", "--speculative-algorithm", "--actions"),
        ("--speculative-num-steps 5", "--speculative-num-steps", "--actions"),
        ("--speculative-eagle-topk=1", "--speculative-eagle-topk", "--actions"),
        ("--speculative-num-draft-tokens 16", "--speculative-num-draft-tokens", "--actions"),
        ("--speculative-token-map m.pt", "--speculative-token-map", "--actions"),
        ("--log-level warning --speculative-num-steps=5", "--speculative-num-steps", "--actions"),
        ("--mem-fraction 0.9", "--mem-fraction (short for --mem-fraction-static)", "--mem-fraction-static"),
    ],
)
def test_split_server_args_refuses_every_flag_specband_sets(value, flag, option):
    # appended after specband's own flags, each would win in sglang's argparse (last value)
    message = f"--server-arg {value!r}: {flag} is set by specband sweep; use its {option} instead"
    with pytest.raises(ConfigError) as caught:
        split_server_args(["--trust-remote-code", value])
    assert str(caught.value) == message
    with pytest.raises(ConfigError, match="is set by specband launch; use its "):
        split_server_args([value], command="launch")


def test_split_server_args_names_launch_options():
    with pytest.raises(ConfigError) as caught:
        split_server_args(["--cuda-graph-max-bs=8"], command="launch")
    assert str(caught.value) == (
        "--server-arg '--cuda-graph-max-bs=8': --cuda-graph-max-bs is set by specband launch; use its --batch-size "
        "instead"
    )
    with pytest.raises(
        ConfigError,
        match=r"--speculative-eagle-topk is set by specband launch; use its --algo and "
        r"--models \(the policy picks",
    ):
        split_server_args(["--speculative-eagle-topk 1"], command="launch")
    # flags specband does not set pass through, also ones that share a prefix with a set flag
    assert split_server_args(["--model-impl sglang --port-offset 1 --device cuda --hostname x"]) == (
        "--model-impl",
        "sglang",
        "--port-offset",
        "1",
        "--device",
        "cuda",
        "--hostname",
        "x",
    )


def test_an_unwritable_server_log_is_a_harness_error_and_starts_nothing(tmp_path):
    from specband.core.errors import HarnessError

    (tmp_path / "afile").write_text("")
    log = tmp_path / "afile" / "server.log"
    server = ServerProcess([sys.executable, "-c", "pass"], host="127.0.0.1", port=9, log_path=log, port_wait_s=0)
    with pytest.raises(HarnessError, match=r"afile/server\.log: cannot write the server log \(File exists\)"):
        server.start()
    assert server.proc is None


def test_launcher_failure_tells_a_command_that_cannot_run_from_a_failed_launch():
    from specband.engines.failures import launcher_failure

    header = "\n=== specband launch 2026-01-01T00:00:00: x --port 1\n"
    sglang = [sys.executable, "-m", "sglang.launch_server", "--model-path", "m"]
    assert launcher_failure(["/x"], 127, header + "cannot execute '/x': No such file or directory\n") == (
        "cannot execute '/x': No such file or directory"
    )
    assert launcher_failure(["sh", "-c", "y"], 126, header) == "exit status 126"
    missing = (
        f"{sys.executable}: Error while finding module specification for 'sglang.launch_server' "
        "(ModuleNotFoundError: No module named 'sglang')"
    )
    assert launcher_failure(sglang, 1, header + missing + "\n") == missing
    assert launcher_failure(sglang, 1, header + f"{sys.executable}: No module named sglang.launch_server\n")
    # sglang ran and failed: one action's failure (an error row), not a configuration error
    assert launcher_failure(sglang, 1, header + "ModuleNotFoundError: No module named 'flashinfer'\n") is None
    assert launcher_failure(sglang, 1, header + "torch.OutOfMemoryError: CUDA out of memory.\n") is None
    assert launcher_failure(["/x", "--model-path", "m"], 1, header + "No module named x\n") is None
