"""The Zeus backend with a fake ``zeus.monitor`` module that mimics ZeusMonitor's windows
(``begin_window(key, sync_execution=True)``, ``end_window(key, sync_execution=True,
cancel=False) -> Measurement(time, gpu_energy)``)."""

from __future__ import annotations

import sys
import time
import types
from dataclasses import dataclass
from typing import ClassVar

import pytest

from specband.core.errors import DeviceError
from specband.devices import open_device
from specband.devices.base import Clock, NullDevice, TelemetryWindow
from specband.devices.zeus import ZeusDevice


@dataclass
class Measurement:
    time: float
    gpu_energy: dict[int, float]


class FakeZeusMonitor:
    """Counts windows; energy = 70 W x window time; records the sync_execution flags."""

    instances: ClassVar[list[FakeZeusMonitor]] = []

    def __init__(
        self,
        gpu_indices=None,
        cpu_indices=None,
        approx_instant_energy=False,
        log_file=None,
        sync_execution_with="torch",
    ):
        self.gpu_indices = gpu_indices
        self.cpu_indices = cpu_indices
        self.windows: dict[str, float] = {}
        self.sync_flags: list[bool] = []
        self.energy_override: float | None = None
        FakeZeusMonitor.instances.append(self)

    def begin_window(self, key, sync_execution=True):
        if key in self.windows:
            raise ValueError(f"Measurement window '{key}' already exists")
        self.sync_flags.append(sync_execution)
        self.windows[key] = time.monotonic()

    def end_window(self, key, sync_execution=True, cancel=False):
        start = self.windows.pop(key)
        self.sync_flags.append(sync_execution)
        elapsed = time.monotonic() - start
        energy = 70.0 * elapsed if self.energy_override is None else self.energy_override
        return Measurement(time=elapsed, gpu_energy={i: energy for i in self.gpu_indices})


@pytest.fixture
def fake_zeus(monkeypatch):
    FakeZeusMonitor.instances.clear()
    zeus = types.ModuleType("zeus")
    monitor = types.ModuleType("zeus.monitor")
    monitor.ZeusMonitor = FakeZeusMonitor
    zeus.monitor = monitor
    monkeypatch.setitem(sys.modules, "zeus", zeus)
    monkeypatch.setitem(sys.modules, "zeus.monitor", monitor)
    return FakeZeusMonitor


def test_zeus_windows_give_the_energy(fake_zeus, fake_gpu):
    dev = open_device("zeus", index=0)
    assert isinstance(dev, ZeusDevice)
    assert dev.energy_method == "zeus"
    mon = fake_zeus.instances[0]
    assert mon.gpu_indices == [0] and mon.cpu_indices == []
    window = TelemetryWindow(dev, Clock(), sample_period_s=0.02)
    # Zeus's window opens and closes at moments inside start() and stop(): bounded by
    # clock reads around each (a stall of this busy process between Zeus's clock read and
    # the window's own is no failure)
    before_start = time.monotonic()
    window.start()
    after_start = time.monotonic()
    time.sleep(0.1)
    before_stop = time.monotonic()
    result = window.stop()
    after_stop = time.monotonic()
    assert result.energy_method == "zeus"
    assert 70.0 * (before_stop - after_start) <= result.energy_j <= 70.0 * (after_stop - before_start)
    assert before_stop - after_start <= result.elapsed_s <= after_stop - before_start
    # the sweep process runs no CUDA work: Zeus must not try to synchronise
    assert mon.sync_flags == [False, False]
    # the other readings come from NVML
    assert result.temp_c_end == 61.0
    assert dev.power_limit_w == 80.0 and dev.power_limit_source == "enforced"


def test_zeus_bad_window_is_flagged_and_integrated(fake_zeus):
    dev = ZeusDevice(0, telemetry=NullDevice(power_limit_w=80.0))
    fake_zeus.instances[0].energy_override = -5.0
    window = TelemetryWindow(dev, Clock(), sample_period_s=0.02)
    window.start()
    result = window.stop()
    assert result.energy_flag == "zeus_negative_energy"
    assert result.energy_j is None  # no power samples from a NullDevice: no energy, not 0 or negative
    assert result.energy_method == "none"


def test_zeus_not_installed_is_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "zeus", None)
    monkeypatch.setitem(sys.modules, "zeus.monitor", None)
    with pytest.raises(DeviceError, match=r"specband\[zeus\]"):
        open_device("zeus")


def test_zeus_without_nvml_warns_and_measures_energy_only(fake_zeus, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.warns(UserWarning, match="Zeus measures energy only"):
        dev = ZeusDevice(0, power_limit_w=80.0)
    assert dev.power_limit_w == 80.0
    assert dev.read_temp_c() is None
    token = dev.energy_window_begin("w")
    energy, flag = dev.energy_window_end("w", token)
    assert flag is None and energy is not None and energy >= 0


class OldZeusMonitor:
    """Zeus before 0.9: the flag is called ``sync_cuda``."""

    def __init__(self) -> None:
        self.flags: list[bool] = []

    def begin_window(self, key, sync_cuda=True):
        self.flags.append(sync_cuda)

    def end_window(self, key, sync_cuda=True):
        self.flags.append(sync_cuda)
        return Measurement(time=1.0, gpu_energy={0: 42.0})


def test_older_zeus_api_is_called_without_cuda_sync():
    mon = OldZeusMonitor()
    dev = ZeusDevice(0, telemetry=NullDevice(), monitor=mon)
    token = dev.energy_window_begin("w")
    assert dev.energy_window_end("w", token) == (42.0, None)
    assert mon.flags == [False, False]
