"""Server helpers and fixtures shared by the tests that start servers (harness, engines, deploy,
emulator): free loopback ports, the emulator command, a guard that no server process outlives its
test, and a local Ray. Registered for every test as a plugin (``pytest_plugins`` in tests/conftest.py)."""

from __future__ import annotations

import json
import os
import re
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


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive TCP ports on 127.0.0.1 that are all free right
    now (each bound once, together, then released): ``sweep --gpus`` serves worker ``i``
    on ``--port + i``, so a free ``--port`` alone says nothing of the next ones."""
    for _ in range(1000):
        base = free_port()
        if base + count - 1 > 65535:
            continue
        held: list[socket.socket] = []
        try:
            for p in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                held.append(s)
                s.bind(("127.0.0.1", p))
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
        return base
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1")


def emulator_command(*options: str) -> str:
    """``python -m specband emulate`` with a 2 s emulated load (the performance model
    comes from ``SPECBAND_EMULATOR_MODEL``, which the sweep sets from ``--emulator-model``;
    the calibrated ``rtx4060-laptop`` model unless a test says otherwise)."""
    return " ".join(["python", "-m", "specband", "emulate", "--load-time", "2", *options])


#: The variable ``tests/conftest.py`` sets to this session's token (not imported from it:
#: a conftest imported again under another module name would run again, drawing another).
TEST_SESSION_ENV = "SPECBAND_TEST_SESSION"


def _session_entry() -> bytes:
    """``SPECBAND_TEST_SESSION=<token>`` as it appears in ``/proc/PID/environ``."""
    return f"{TEST_SESSION_ENV}={os.environ[TEST_SESSION_ENV]}".encode()


def processes_with(marker: str) -> list[int]:
    """Pids of live (non-zombie) processes of this test session whose command line (its
    arguments joined by spaces) contains ``marker`` followed by a space or its end.

    Only processes that inherited this session's ``SPECBAND_TEST_SESSION`` token count
    (every server, sweep and Ray worker a test starts does): another developer's test on
    this machine may run a server with the same ``--port P``. ``--port 4123`` never matches
    ``--port 41234``."""
    found = []
    entry = _session_entry()
    pattern = re.compile(re.escape(marker).encode() + rb"(?: |$)")
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").rstrip(b" ")
            if not pattern.search(cmdline):
                continue
            with open(f"/proc/{pid}/environ", "rb") as fh:
                ours = entry in fh.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:  # gone, or another user's
            continue
        if ours and stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z":
            found.append(int(pid))
    return found


def server_marker(port: int) -> str:
    """What only a launched server's command line holds (``build_launch_command`` writes
    ``--host H --port P``). ``--port P`` alone is not enough: the sweep's own command line
    holds it too, and so does every child the sweep forks until that child execs (the
    sglang version probe, the server itself), so a test waiting for "a process with
    ``--port P``" could find such a child and act before the server exists."""
    return f"--host 127.0.0.1 --port {port}"


def emulator_running(state: Path, port: int) -> bool:
    """True once the emulated server on ``port`` runs: it wrote its pid into the emulated
    GPU's state file ``state`` as the GPU's owner. It does so when it starts loading, long
    after the sweep's ``Popen`` returned and registered it, and writes nothing more until
    it is healthy (a test's ``--load-time 100000`` keeps it loading for 1000 s real)."""
    try:
        owner = json.loads(state.read_text()).get("owner_pid")
    except (OSError, ValueError):  # not written yet
        return False
    return owner is not None and owner in processes_with(server_marker(port))


def no_process_left_on(*ports: int, wait_s: float = 30.0) -> None:
    """Assert that no process of this session still has ``--port P`` (any of ``ports``)
    on its command line, waiting up to ``wait_s`` real seconds for those exiting; leftovers
    are killed so that one failure does not leak servers into the next tests."""
    markers = [f"--port {p}" for p in ports]
    deadline = time.monotonic() + wait_s
    left = [pid for m in markers for pid in processes_with(m)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [pid for m in markers for pid in processes_with(m)]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"server processes left running after the test: {left}"


@pytest.fixture
def port() -> Iterator[int]:
    """A free port; after the test, asserts that no process of this session still serves
    with it (and kills leftovers so that one failure does not leak servers)."""
    p = free_port()
    yield p
    no_process_left_on(p)


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
        # 600 s real to launch and per request: the floor of 10 real seconds the defaults get
        # at this time scale is short for an emulator's Python start on a busy machine (a
        # test wanting a timeout gives its own, later, which wins)
        "--launch-timeout",
        "60000",
        "--request-timeout",
        "60000",
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
