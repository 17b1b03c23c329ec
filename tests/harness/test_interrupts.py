"""Ctrl-C / SIGTERM become KeyboardInterrupt only at safe points (the race behind a
sweep that died of SIGINT, exit -2, after being sent SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tests.servers import processes_with

from specband.harness import process as server_module
from specband.harness.interrupts import deferred, interrupts_as_keyboard_interrupt

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _wait_for_interrupt(seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_signal_inside_string_exec_code_is_handled_once_it_is_done():
    ns: dict = {}
    before = signal.getsignal(signal.SIGTERM)
    code = (
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\n"
        "t = time.monotonic()\nwhile time.monotonic() - t < 0.2: pass\ndone = True\n"
    )
    with interrupts_as_keyboard_interrupt(), pytest.raises(KeyboardInterrupt):
        exec(code, ns)  # the code dataclasses and namedtuple run while a module is imported
        _wait_for_interrupt()
    assert ns["done"] is True  # not interrupted halfway
    assert signal.getsignal(signal.SIGTERM) is before  # restored


def test_a_deferred_block_finishes_and_then_raises():
    steps = []
    with interrupts_as_keyboard_interrupt():
        with pytest.raises(KeyboardInterrupt), deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)  # the handler runs during this sleep: it must not raise here
            steps.append("finished")
        assert steps == ["finished"]
        # an error leaving the block with a signal pending becomes the interrupt
        with pytest.raises(KeyboardInterrupt) as info, deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            raise ValueError("boom")
        assert isinstance(info.value.__cause__, ValueError)
        with deferred():  # nothing pending: nothing raised
            steps.append("quiet")
    assert steps == ["finished", "quiet"]


def test_under_python_m_a_caught_interrupt_exits_130_not_minus_2(tmp_path):
    # CPython marks a KeyboardInterrupt that ends string-exec'd code as unhandled, even when
    # it is caught later, and a `python -m` process then kills itself with SIGINT at exit.
    (tmp_path / "interrupt_probe.py").write_text(
        textwrap.dedent("""
        import sys, time
        from specband.harness.interrupts import interrupts_as_keyboard_interrupt
        try:
            with interrupts_as_keyboard_interrupt():
                exec("import os, signal\\nos.kill(os.getpid(), signal.SIGTERM)\\nx = sum(range(300000))")
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    time.sleep(0.01)
        except KeyboardInterrupt:
            sys.exit(130)
        sys.exit(0)
    """)
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), SRC])}
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-m", "interrupt_probe"], cwd=tmp_path, env=env, timeout=60)
        assert proc.returncode == 130


def test_a_signal_while_a_server_starts_leaves_it_registered_and_stoppable(tmp_path, monkeypatch, port):
    real_popen = subprocess.Popen

    def popen_then_signal(*args, **kwargs):  # the signal lands between fork and Popen's return
        proc = real_popen(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        return proc

    monkeypatch.setattr(server_module.subprocess, "Popen", popen_then_signal)
    server = server_module.ServerProcess(
        [sys.executable, "-c", "import time; time.sleep(60)", "--port", str(port)],
        host="127.0.0.1",
        port=port,
        log_path=tmp_path / "s.log",
        port_wait_s=0,
    )
    with interrupts_as_keyboard_interrupt():
        with pytest.raises(KeyboardInterrupt):
            server.start()
        assert server.proc is not None and server.pgid in server_module._LIVE  # someone can stop it
        assert processes_with(f"--port {port}")
        server.stop(grace_s=5)
    assert not processes_with(f"--port {port}")
