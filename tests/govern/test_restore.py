"""The limit found comes back after a kill -9: at the next start, or by hand (``--restore``).
A real SIGKILL of a ``specband govern`` on the emulator's GPU state file (its limit lives in a
file, so it outlives the killed process as a real GPU's does)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.govern.plans import plan_file
from tests.servers import one_error_line

from specband.emulator.gpu import EmulatedDevice
from specband.sim import build_model

HARDWARE = "h100-sxm"
MODEL = build_model(HARDWARE)


def emulated(state: Path) -> list[str]:
    return ["--device", "emulated", "--emulator-state", str(state), "--emulator-hardware", HARDWARE]


def limit_of(state: Path) -> float:
    return float(json.loads(state.read_text())["power_limit_w"])


def kill_9_while_governing(fake_server, tmp_path: Path) -> Path:
    """Start a governor in a child process, wait until it set the tier's 400 W, SIGKILL it."""
    state = tmp_path / "gpu.json"
    EmulatedDevice(state, MODEL, HARDWARE)  # the GPU at its default 700 W
    args = [sys.executable, "-m", "specband", "govern", "--url", fake_server.url, "--plan", str(plan_file(tmp_path)),
            *emulated(state), "--interval", "0.05", "--duration", "600", "--quiet"]  # fmt: skip
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while limit_of(state) == 700.0 and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.05)
        assert limit_of(state) == 400.0, child.stderr.read() if child.poll() is not None else "no limit set"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=60) == -9
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert limit_of(state) == 400.0  # nothing restored it
    return state


def test_restore_by_hand_puts_back_what_a_killed_governor_found(fake_server, run_cli, tmp_path):
    state = kill_9_while_governing(fake_server, tmp_path)
    result = run_cli("govern", "--restore", *emulated(state))
    assert result.exit_code == 0, result.stderr
    assert "restored 700 W" in result.stdout and "did not restore it" in result.stdout
    assert limit_of(state) == 700.0
    again = run_cli("govern", "--restore", *emulated(state))  # the record is cleared: nothing left
    assert again.exit_code == 0 and "nothing to restore" in again.stdout


def test_the_next_governor_restores_the_original_a_killed_one_recorded(fake_server, run_cli, tmp_path):
    state = kill_9_while_governing(fake_server, tmp_path)
    result = run_cli("govern", "--url", fake_server.url, "--plan", str(plan_file(tmp_path)), *emulated(state),
                     "--interval", "0.05", "--duration", "1", "--quiet")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "is at 400 W, the limit a specband process" in result.stderr
    assert "power limit restored to 700 W" in result.stdout
    assert limit_of(state) == 700.0


def test_restore_refuses_a_gpu_a_live_governor_holds(fake_server, run_cli, tmp_path):
    from specband.devices.power_limit import PowerLimitLock

    state = tmp_path / "gpu.json"
    device = EmulatedDevice(state, MODEL, HARDWARE)
    held = PowerLimitLock(device.power_limit_lock_path(), device.name)
    try:
        result = run_cli("govern", "--restore", *emulated(state))
    finally:
        held.release()
    assert result.exit_code == 2
    assert "another specband process" in one_error_line(result.stderr)
