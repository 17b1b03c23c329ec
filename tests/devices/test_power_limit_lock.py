"""One process at a time sets a GPU's power limit, and the limit found survives a kill -9.

The trial's N05: two ``--power-limits`` sweeps on one GPU both ran (rows labelled 40 W were
measured at the other's 50 W) and left the GPU at 40 W instead of its 80 W. N03: after a
kill -9, ``--resume`` took the low limit left behind as the original. N04: the restore
wrote the enforced limit, not the one that was set.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.servers import one_error_line

from specband.devices.nvml import NvmlDevice
from specband.devices.power_limit import PowerLimitBusyError, PowerLimitGuard, PowerLimitLock
from specband.emulator.gpu import EmulatedDevice
from specband.sim import build_model

MODEL = build_model("rtx4060-laptop")
HARDWARE = "rtx4060-laptop"


def test_a_second_guard_on_the_same_gpu_is_refused_until_the_first_restored(fake_gpu):
    first, second = NvmlDevice(0), NvmlDevice(0)
    with PowerLimitGuard(first) as a:
        a.set(40.0)
        b = PowerLimitGuard(second)
        with pytest.raises(PowerLimitBusyError, match=r"another specband process \(pid \d+\) is setting"):
            b.set(50.0)
        assert fake_gpu.limits_set == [40_000]  # the second never touched the GPU
        b.restore()  # what the refused sweep's exit path does: nothing to put back
        assert fake_gpu.limits_set == [40_000]
    assert fake_gpu.limits_set == [40_000, 90_000]  # the first restored the 90 W it found
    with PowerLimitGuard(second) as b:  # free again
        b.set(50.0)
    assert fake_gpu.limits_set == [40_000, 90_000, 50_000, 90_000]


def test_another_gpu_has_its_own_lock(fake_gpu):
    with PowerLimitGuard(NvmlDevice(0)) as a:
        a.set(40.0)
        fake_gpu.uuid = "GPU-other"
        with PowerLimitGuard(NvmlDevice(1)) as b:
            b.set(50.0)


def test_the_original_is_the_limit_set_not_the_enforced_one(fake_gpu):
    fake_gpu.enforced_mw, fake_gpu.management_mw = 70_000, 90_000  # an external cap at 70 W
    with PowerLimitGuard(NvmlDevice(0)) as guard:
        guard.set(40.0)
    assert fake_gpu.limits_set == [40_000, 90_000]


def test_after_a_kill_the_recorded_original_is_restored(fake_gpu, capsys):
    """A guard killed at 40 W (its lock dropped by the kernel, its record left): the next
    guard restores 90 W, the limit the killed one found, not the 40 W it finds."""
    dead = PowerLimitGuard(NvmlDevice(0))
    dead.set(40.0)
    dead._release()  # what the kernel does to a killed process's flock; no restore ran
    assert fake_gpu.management_mw == 40_000
    with PowerLimitGuard(NvmlDevice(0)) as guard:
        guard.set(60.0)
        assert guard.original_w == 90.0
    assert fake_gpu.limits_set == [40_000, 60_000, 90_000]
    assert "is at 40 W, the limit a specband process" in capsys.readouterr().err
    with PowerLimitGuard(NvmlDevice(0)) as guard:  # the record was cleared by the restore
        guard.set(50.0)
        assert guard.original_w == 90.0
    assert fake_gpu.limits_set[-2:] == [50_000, 90_000]


def test_a_limit_changed_by_hand_after_a_kill_is_kept(fake_gpu):
    """The record says 40 W was being set, but someone ran ``nvidia-smi -pl 70`` since: 70 W
    is what the user wants back."""
    dead = PowerLimitGuard(NvmlDevice(0))
    dead.set(40.0)
    dead._release()
    fake_gpu.enforced_mw = fake_gpu.management_mw = 70_000
    with PowerLimitGuard(NvmlDevice(0)) as guard:
        guard.set(60.0)
    assert fake_gpu.limits_set[-2:] == [60_000, 70_000]


def test_kill_9_of_a_process_at_a_low_emulated_limit_is_undone(tmp_path):
    """A real SIGKILL: the child sets the emulated GPU to 40 W and kills itself."""
    state = tmp_path / "gpu.json"
    default = float(MODEL.power_limit_w)
    child = textwrap.dedent(
        f"""
        import os, signal
        from specband.devices.power_limit import PowerLimitGuard
        from specband.emulator.gpu import EmulatedDevice
        from specband.sim import build_model
        guard = PowerLimitGuard(EmulatedDevice({str(state)!r}, build_model("rtx4060-laptop"), "rtx4060-laptop"))
        guard.set({0.5 * default!r})
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert result.returncode == -9, result.stderr
    left = EmulatedDevice(state, MODEL, HARDWARE)
    assert left.power_limit_setting_w() == pytest.approx(0.5 * default)
    guard = PowerLimitGuard(left)
    guard.set(0.75 * default)
    assert guard.original_w == pytest.approx(default)
    guard.restore()
    assert EmulatedDevice(state, MODEL, HARDWARE).power_limit_setting_w() == pytest.approx(default)
    record = Path(str(state) + ".power-limit.lock").read_text()
    assert record == ""  # cleared once the original was back


def test_a_power_limit_sweep_on_a_gpu_held_by_another_is_one_error(run_cli, sweep_args, tmp_path):
    """Two sweeps sharing one emulated GPU (``--emulator-state``): the second is refused
    before it sets anything, and writes nothing."""
    state = tmp_path / "shared-gpu.json"
    device = EmulatedDevice(state, MODEL, HARDWARE)
    held = PowerLimitLock(device.power_limit_lock_path(), device.name)
    try:
        held.record(float(MODEL.power_limit_w), 40.0)
        out = tmp_path / "b.jsonl"
        args = ["--batch-sizes", "1", "--actions", "0", "--repeats", "1", "--power-limits", "0.5,1.0"]
        result = run_cli(*sweep_args, *args, "--emulator-state", state, "--out", out)
        assert result.exit_code == 2, result.stderr
        assert "another specband process" in one_error_line(result.stderr)
        assert not out.exists() and not Path(str(out) + ".lock").exists()
        assert json.loads(Path(str(state) + ".power-limit.lock").read_text())["set_w"] == 40.0  # untouched
    finally:
        held.release()


def test_a_lock_file_that_cannot_be_written_still_locks(fake_gpu, tmp_path, monkeypatch):
    """Another user's lock file (or a sticky /tmp's protected_regular): opening it for
    writing is refused, the flock is taken on a read-only descriptor, and NVML's own answer
    is what the user sees."""
    import os

    lock_dir = tmp_path / "locks"
    lock_dir.mkdir()
    monkeypatch.setenv("SPECBAND_GPU_LOCK_DIR", str(lock_dir))
    path = NvmlDevice(0).power_limit_lock_path()
    path.write_text("")
    real_open = os.open

    def no_write(file, flags, *args):
        if str(file) == str(path) and flags & (os.O_RDWR | os.O_WRONLY):
            raise PermissionError(13, "Permission denied")
        return real_open(file, flags, *args)

    monkeypatch.setattr(os, "open", no_write)
    with PowerLimitGuard(NvmlDevice(0)) as guard:
        guard.set(40.0)
        with pytest.raises(PowerLimitBusyError):
            PowerLimitGuard(NvmlDevice(0)).set(50.0)
    assert fake_gpu.limits_set == [40_000, 90_000] and path.read_text() == ""


@pytest.fixture
def machine_lock_dir(fake_gpu, tmp_path, monkeypatch):
    """SPECBAND_GPU_LOCK_DIR unset, and the machine-wide folder a test folder standing for /run/lock."""
    import specband.devices.power_limit as power_limit

    run_lock = tmp_path / "run-lock"
    run_lock.mkdir()
    monkeypatch.delenv("SPECBAND_GPU_LOCK_DIR", raising=False)
    monkeypatch.setattr(power_limit, "SYSTEM_LOCK_DIRS", (tmp_path / "absent", run_lock))
    return run_lock


def test_the_lock_does_not_depend_on_the_temporary_folder(machine_lock_dir, fake_gpu, tmp_path, monkeypatch):
    """V16: the lock lived in the temporary folder, so a sweep with another TMPDIR passed it and
    the GPU ended at the other's swept limit. Now both processes' locks are one file."""
    import tempfile

    def with_tmpdir(name: str) -> None:
        folder = tmp_path / name
        folder.mkdir()
        monkeypatch.setenv("TMPDIR", str(folder))
        monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
        assert tempfile.gettempdir() == str(folder)

    with_tmpdir("tmpA")
    with PowerLimitGuard(NvmlDevice(0)) as a:
        a.set(40.0)
        assert NvmlDevice(0).power_limit_lock_path().parent == machine_lock_dir
        with_tmpdir("tmpB")
        with pytest.raises(PowerLimitBusyError):
            PowerLimitGuard(NvmlDevice(0)).set(50.0)
    assert fake_gpu.limits_set == [40_000, 90_000]  # B never moved the limit; A restored 90 W


def test_without_a_machine_lock_folder_the_users_state_folder_holds_the_locks(machine_lock_dir, tmp_path, monkeypatch):
    import specband.devices.power_limit as power_limit

    monkeypatch.setattr(power_limit, "SYSTEM_LOCK_DIRS", (tmp_path / "absent",))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert power_limit.gpu_lock_dir() == tmp_path / "state" / "specband" / "gpu-locks"
    monkeypatch.setenv("SPECBAND_GPU_LOCK_DIR", str(tmp_path / "given"))
    assert power_limit.gpu_lock_dir() == tmp_path / "given"


def test_acquire_holds_the_gpu_before_any_limit_is_set(fake_gpu):
    """A process that holds the limit for a whole run (a governor) takes the lock first."""
    with PowerLimitGuard(NvmlDevice(0)) as held:
        assert held.acquire() == 90.0 and fake_gpu.limits_set == []
        with pytest.raises(PowerLimitBusyError):
            PowerLimitGuard(NvmlDevice(0)).acquire()
        held.set(60.0)
        held.set(70.0)
    assert fake_gpu.limits_set == [60_000, 70_000, 90_000]
    with PowerLimitGuard(NvmlDevice(0)) as again:  # released on restore
        again.acquire()
    assert fake_gpu.limits_set == [60_000, 70_000, 90_000]  # nothing set: nothing restored
