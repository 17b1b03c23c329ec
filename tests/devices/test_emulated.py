"""The emulated GPU: a state file shared across processes, extrapolated by the reader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from specband.core.errors import DeviceError
from specband.devices import open_device
from specband.devices.base import Clock, TelemetryWindow
from specband.emulator.gpu import EmulatedDevice, EmulatedGpu
from specband.sim import build_model

MODEL = build_model("rtx4060-laptop")
HARDWARE = "rtx4060-laptop"
SCALE = 0.001  # 1 emulated second = 1 ms


def test_new_state_starts_idle_at_ambient(tmp_path):
    frozen = 1_700_000_000.0  # the state's wall clock, fixed: no load can move the temperature
    dev = EmulatedDevice(tmp_path / "gpu.json", MODEL, HARDWARE, SCALE, now=lambda: frozen)
    s = dev.sample(Clock(SCALE))
    assert s.temp_c == MODEL.ambient_temp_c
    assert s.power_w == MODEL.idle_power_w
    assert s.util_pct == 0.0 and s.mem_used_mb == 0.0
    assert s.throttling is False
    assert dev.provenance == "emulated" and dev.energy_method == "counter"
    assert dev.power_limit_w == MODEL.power_limit_w


def test_heat_carries_over_and_cools_down(tmp_path):
    path = tmp_path / "gpu.json"
    server = EmulatedGpu(path, MODEL, HARDWARE, SCALE)
    start = server.update(power_w=80.0, util_pct=99.0, mem_used_mb=5000.0, owner_pid=os.getpid())
    time.sleep(60 * SCALE)  # (at least) one emulated minute at 80 W
    hot = server.release()
    emulated_s = (hot.updated_unix - start.updated_unix) / SCALE
    assert emulated_s >= 60.0
    assert hot.temp_c == pytest.approx(MODEL.advance_temperature(start.temp_c, 80.0, emulated_s), abs=1e-6)
    assert hot.temp_c > MODEL.ambient_temp_c + 15
    # another process (the sweep) sees the same GPU, then it cools towards idle
    dev = EmulatedDevice(path, MODEL, HARDWARE, SCALE)
    before = time.time()
    first = dev.read_temp_c()
    after = time.time()
    # the reader extrapolates the idle GPU's cooling from the release to the moment of reading
    # (bounded by wall-clock reads around it, so that a stalled test process is no failure)
    earliest = max(0.0, before - hot.updated_unix) / SCALE
    latest = (after - hot.updated_unix) / SCALE
    assert MODEL.advance_temperature(hot.temp_c, MODEL.idle_power_w, latest) - 1e-6 <= first
    assert first <= MODEL.advance_temperature(hot.temp_c, MODEL.idle_power_w, earliest) + 1e-6
    time.sleep(30 * SCALE)
    assert dev.read_temp_c() < first - 3.0
    assert dev.read_mem_used_mb() == 0.0 and dev.read_power_w() == MODEL.idle_power_w


def test_energy_counter_follows_the_power(tmp_path):
    gpu = EmulatedGpu(tmp_path / "gpu.json", MODEL, HARDWARE, SCALE)
    gpu.update(power_w=70.0, owner_pid=os.getpid())
    dev = EmulatedDevice(tmp_path / "gpu.json", MODEL, HARDWARE, SCALE)
    window = TelemetryWindow(dev, Clock(SCALE), sample_period_s=0.005)
    # the counter is read at wall-clock moments inside start() and stop(): bounded by reads
    # around each (a 1 ms stall of this process is 1 emulated second, 2 % of the window)
    before_start = time.time()
    window.start()
    after_start = time.time()
    time.sleep(0.05)  # 50 emulated seconds
    before_stop = time.time()
    result = window.stop()
    after_stop = time.time()
    shortest, longest = (before_stop - after_start) / SCALE, (after_stop - before_start) / SCALE
    assert result.energy_method == "counter"
    assert result.elapsed_s >= 45.0
    assert 70.0 * shortest * (1 - 1e-9) <= result.energy_j <= 70.0 * longest * (1 + 1e-9)
    assert result.avg_power_w == pytest.approx(result.energy_j / result.elapsed_s)


def test_a_dead_owner_releases_the_gpu(tmp_path):
    path = tmp_path / "gpu.json"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    gpu = EmulatedGpu(path, MODEL, HARDWARE, SCALE)
    gpu.update(power_w=78.0, mem_used_mb=6000.0, util_pct=98.0, owner_pid=child.pid)
    dev = EmulatedDevice(path, MODEL, HARDWARE, SCALE)
    s = dev.sample(Clock(SCALE))
    assert s.power_w == MODEL.idle_power_w
    assert s.mem_used_mb == 0.0 and s.util_pct == 0.0


def test_writes_are_atomic_and_leave_no_temporary_files(tmp_path):
    path = tmp_path / "gpu.json"
    gpu = EmulatedGpu(path, MODEL, HARDWARE, SCALE)
    for i in range(20):
        gpu.update(power_w=20.0 + i)
    assert json.loads(path.read_text())["power_w"] == 39.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.json"]  # the lock (on the folder) leaves no file


def test_a_corrupt_state_file_is_an_error(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text("{not json")
    with pytest.raises(DeviceError, match="not an emulated GPU state file"):
        EmulatedDevice(path, MODEL, HARDWARE, SCALE)


def test_another_time_scale_rebases_and_keeps_the_temperature(tmp_path):
    path = tmp_path / "gpu.json"
    wall = [1_700_000_000.0]  # the state's wall clock, moved by hand only
    gpu = EmulatedGpu(path, MODEL, HARDWARE, SCALE, now=lambda: wall[0])
    gpu.update(temp_c=70.0, power_w=MODEL.idle_power_w)
    dev = EmulatedDevice(path, MODEL, HARDWARE, 1.0, now=lambda: wall[0])
    assert json.loads(path.read_text())["time_scale"] == 1.0
    assert dev.read_temp_c() == 70.0  # kept across the re-base
    wall[0] += 2.0  # 2 real s are 2 emulated s at the new scale (2000 at the old one)
    assert dev.read_temp_c() == pytest.approx(MODEL.advance_temperature(70.0, MODEL.idle_power_w, 2.0), rel=1e-12)


def test_open_device_emulated_needs_its_settings(tmp_path):
    from specband.core.errors import ConfigError

    with pytest.raises(ConfigError):
        open_device("emulated")
    from specband.emulator.spec import EmulatedGpuSpec

    dev = open_device("auto", plugged=EmulatedGpuSpec(tmp_path / "g.json", HARDWARE, MODEL, SCALE))
    assert isinstance(dev, EmulatedDevice)


def test_the_emulated_gpu_is_named_like_simulated_and_published_rows(tmp_path, published_records):
    from types import SimpleNamespace

    from specband.emulator.gpu import hardware_name

    dev = EmulatedDevice(tmp_path / "g.json", MODEL, HARDWARE, SCALE)
    assert dev.name == "RTX4060_Laptop" == MODEL.profile.hardware  # not the profile id "rtx4060-laptop"
    assert {r["hardware"] for r in published_records} == {dev.name}
    assert json.loads((tmp_path / "g.json").read_text())["hardware"] == HARDWARE  # the state keeps the profile id
    # a user's factory: its own label, else the profile id it was asked for
    assert hardware_name(SimpleNamespace(hardware="MyGPU"), "my-profile") == "MyGPU"
    assert hardware_name(SimpleNamespace(), "my-profile") == "my-profile"


def test_the_state_lock_excludes_another_process_and_leaves_no_file(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "gpu.json"
    gpu = EmulatedGpu(path, MODEL, HARDWARE, SCALE)
    probe = (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print('free')\n"
        "except BlockingIOError:\n    print('held')\n"
    )

    def other_process_sees() -> str:
        done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, check=True)
        return done.stdout.strip()

    with gpu._locked():
        assert other_process_sees() == "held"  # a writer elsewhere waits for this one
    assert other_process_sees() == "free"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu.json"]
