"""Ray fails fast and cleanly (issue 16 item 8): a malformed or unreachable address is one
line within seconds, nothing written; a failing ``ray.init`` is one line; SIGTERM while Ray
connects exits as SIGTERM, not with Ray's status 15."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import pytest

from specband.core.errors import ConfigError, HarnessError
from specband.harness import interrupts
from specband.harness.workers import _ray_init, check_ray_address


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "address", ["foo", "host:", ":6379", "127.0.0.1:0", "127.0.0.1:99999", "ray://", "h:12a", "a/b:1"]
)
def test_malformed_addresses_are_one_line(address: str) -> None:
    with pytest.raises(ConfigError, match="expected HOST:PORT") as exc:
        check_ray_address(address)
    assert "\n" not in str(exc.value)


def test_auto_and_local_are_left_to_ray() -> None:
    assert check_ray_address("auto") is None and check_ray_address("local") is None


def test_a_listening_address_passes() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert check_ray_address(f"127.0.0.1:{port}") == ("127.0.0.1", port)
        assert check_ray_address(f"ray://127.0.0.1:{port}") == ("127.0.0.1", port)


def test_an_unreachable_address_is_one_line_fast(run_cli, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = tmp_path / "s.jsonl"
    address = f"127.0.0.1:{_free_port()}"
    t0 = time.monotonic()
    result = run_cli(
        "sweep", "--target", "m", "--draft", "d", "--ray", "--ray-address", address,
        "--server-command", "false", "--device", "none", "--out", out,
    )  # fmt: skip
    assert time.monotonic() - t0 < 30
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: --ray-address {address}: cannot reach the Ray cluster")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no <out>, <out>.lock or <out>.logs


def test_a_silent_address_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    def silent(address, timeout):
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    with pytest.raises(HarnessError, match=r"timed out within 0\.5 s"):
        check_ray_address("10.255.255.1:6379", timeout_s=0.5)


class _FakeRay:
    def __init__(self, exc: BaseException | None, install_handler: bool = False) -> None:
        self.exc = exc
        self.install_handler = install_handler

    def init(self, **kwargs) -> None:
        if self.install_handler:
            signal.signal(signal.SIGTERM, lambda signum, frame: None)  # as ray.init does
        if self.exc is not None:
            raise self.exc


def test_ray_init_failures_are_one_line() -> None:
    with pytest.raises(HarnessError, match=r"--ray-address 1\.2\.3\.4:6379: Ray could not connect \(ConnectionError"):
        _ray_init(_FakeRay(ConnectionError("Authentication failed: token mismatch\nmore")), "1.2.3.4:6379", {})


def test_sigterm_inside_ray_init_is_sigterm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interrupts._STATE, "received", None)
    with pytest.raises(KeyboardInterrupt):
        _ray_init(_FakeRay(SystemExit(signal.SIGTERM)), None, {})
    assert interrupts.received_signal() == signal.SIGTERM


def test_specband_handlers_survive_ray_init() -> None:
    def mine(signum, frame) -> None:
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        _ray_init(_FakeRay(None, install_handler=True), None, {})
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_ray_address_from_the_environment_is_checked_like_the_option(run_cli, tmp_path: Path, monkeypatch) -> None:
    """The trial's R03: ``RAY_ADDRESS`` (no ``--ray-address``) hung the sweep, ignored SIGTERM
    and left the output, its lock and its log folder."""
    pytest.importorskip("ray")
    out = tmp_path / "s.jsonl"
    address = f"127.0.0.1:{_free_port()}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    args = ("sweep", "--target", "m", "--draft", "d", "--ray", "--server-command", "false", "--device", "none")
    t0 = time.monotonic()
    result = run_cli(*args, "--out", out)
    assert time.monotonic() - t0 < 30
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: RAY_ADDRESS={address}: cannot reach the Ray cluster")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:notaport")
    result = run_cli(*args, "--out", out)
    assert result.exit_code == 2 and "RAY_ADDRESS='127.0.0.1:notaport': expected HOST:PORT" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no <out>, <out>.lock or <out>.logs


def test_sigterm_while_ray_waits_for_a_silent_cluster_exits_at_once(tmp_path: Path) -> None:
    """An address that accepts TCP but is no Ray head: ``ray.init`` waits in native code
    (Python's SIGTERM handler cannot run there); the sweep exits 143 at once, writing nothing."""
    pytest.importorskip("ray")
    import os
    import subprocess
    import sys

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(50)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        out = tmp_path / "s.jsonl"
        log = tmp_path / "stderr.txt"
        cmd = [sys.executable, "-m", "specband", "sweep", "--target", "m", "--draft", "d", "--ray"]
        cmd += ["--server-command", "false", "--device", "none", "--out", str(out)]
        with log.open("w") as err:
            proc = subprocess.Popen(
                cmd, stderr=err, stdout=subprocess.DEVNULL, env={**os.environ, "RAY_ADDRESS": address}
            )
            try:
                deadline = time.monotonic() + 120
                while "GCS" not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.1)  # Ray says it is waiting for the GCS: inside ray.init now
                assert proc.poll() is None, log.read_text()
                proc.send_signal(signal.SIGTERM)
                t0 = time.monotonic()
                code = proc.wait(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        assert code == 143 and time.monotonic() - t0 < 5, log.read_text()
        assert "terminated while connecting to Ray (nothing was written)" in log.read_text()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["stderr.txt"]
