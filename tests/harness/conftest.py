"""Fixtures for the harness tests: free loopback ports, the emulator command, and a guard
that no server process outlives its test."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

#: Time scale of the tests: 1 emulated second = 10 ms. Faster scales work, but real
#: overheads (HTTP, thread start-up on a busy machine) then stretch the arrival of
#: concurrent requests past the decoding of short ones.
TIME_SCALE = 0.01


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def emulator_command(*options: str) -> str:
    """``python -m specband emulate`` with a 2 s emulated load (the performance model
    comes from ``SPECBAND_EMULATOR_MODEL``, which the sweep sets from ``--emulator-model``;
    the calibrated ``rtx4060-laptop`` model unless a test says otherwise)."""
    return " ".join(["python", "-m", "specband", "emulate", "--load-time", "2", *options])


def processes_with(marker: str) -> list[int]:
    """Pids of live (non-zombie) processes whose command line contains ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        if marker in cmdline and stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z":
            found.append(int(entry))
    return found


def server_marker(port: int) -> str:
    """What only a launched server's command line holds (``build_launch_command`` writes
    ``--host H --port P``). ``--port P`` alone is not enough: the sweep's own command line
    holds it too, and so does every child the sweep forks until that child execs (the
    sglang version probe, the server itself), so a test waiting for "a process with
    ``--port P``" could find such a child and act before the server exists."""
    return f"--host 127.0.0.1 --port {port}"


@pytest.fixture
def port() -> Iterator[int]:
    """A free port; after the test, asserts that no process still serves with it (and
    kills leftovers so that one failure does not leak servers)."""
    p = free_port()
    yield p
    marker = f"--port {p}"
    deadline = time.monotonic() + 5.0
    left = processes_with(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = processes_with(marker)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"server processes left running after the test: {left}"


@pytest.fixture
def sweep_args(tmp_path: Path, port: int) -> list[str]:
    """Common ``specband sweep`` arguments against the emulator (small workload)."""
    return [
        "sweep",
        "--target",
        "m",
        "--draft",
        "d",
        "--port",
        str(port),
        "--server-command",
        emulator_command(),
        "--time-scale",
        str(TIME_SCALE),
        "--num-prompts",
        "4",
        "--quiet",
    ]


@pytest.fixture
def python() -> str:
    """This interpreter."""
    return sys.executable


def one_error_line(stderr: str) -> str:
    """The only ``error: ...`` line of ``stderr`` (asserts there is exactly one, and no
    traceback)."""
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return errors[0]


@pytest.fixture(scope="module")
def local_ray(request: pytest.FixtureRequest, require_module: Callable[..., Any]) -> Iterator[object]:
    """One local Ray instance per test module, advertising two fake GPUs (skipped without
    Ray); the module's own functions go to Ray's workers by value."""
    ray = require_module("ray", require_env="SPECBAND_REQUIRE_RAY")
    hidden = os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # Ray refuses fake GPUs that env hides
    try:
        ray.init(
            num_cpus=2,
            num_gpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            _node_ip_address="127.0.0.1",  # loopback only
        )
    finally:
        if hidden is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = hidden
    ray.cloudpickle.register_pickle_by_value(request.module)
    yield ray
    ray.cloudpickle.unregister_pickle_by_value(request.module)
    ray.shutdown()
