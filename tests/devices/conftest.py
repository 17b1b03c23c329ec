"""Fixtures for the GPU device tests: a patched NVML (the real ``pynvml`` module with its
functions replaced) driven by a :class:`FakeGpu`."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest


@dataclass
class FakeGpu:
    """What the patched NVML answers. A name in ``unsupported`` raises
    ``NVMLError(NVML_ERROR_NOT_SUPPORTED)``; ``errors`` maps a name to another error code."""

    energy_mj: list[int] = field(default_factory=lambda: [1_000_000])
    power_mw: int = 50_000
    enforced_mw: int = 80_000
    management_mw: int = 90_000
    default_mw: int = 100_000
    temp_c: int = 61
    mem_used_bytes: int = 3 * 1024 * 1024 * 1024
    util_pct: int = 97
    reasons: int = 0
    name: str = "NVIDIA GeForce RTX 4060 Laptop GPU"
    uuid: str = "GPU-00000000-fake-4060-0000-000000000000"
    unsupported: set[str] = field(default_factory=set)
    errors: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    init_error: int | None = None
    min_limit_mw: int = 30_000
    max_limit_mw: int = 100_000
    #: every limit set, mW, in order
    limits_set: list[int] = field(default_factory=list)

    def set_limit(self, mw: int) -> None:
        self.answer("set_limit", None)
        if not self.min_limit_mw <= mw <= self.max_limit_mw:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self.limits_set.append(mw)
        self.enforced_mw = self.management_mw = mw

    def answer(self, what: str, value: Any) -> Any:
        self.calls[what] = self.calls.get(what, 0) + 1
        if what in self.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if what in self.errors:
            raise pynvml.NVMLError(self.errors[what])
        return value() if callable(value) else value

    def next_energy(self) -> int:
        """Successive counter readings; the last value repeats."""
        if len(self.energy_mj) > 1:
            return self.energy_mj.pop(0)
        return self.energy_mj[0]


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> FakeGpu:
    """Patch every NVML function the NVML backend calls to read from a FakeGpu; the
    per-GPU power-limit locks go to a folder of this test's own."""
    gpu = FakeGpu()
    monkeypatch.setenv("SPECBAND_GPU_LOCK_DIR", str(tmp_path_factory.mktemp("gpu-locks")))
    handle = object()

    def init() -> None:
        gpu.calls["init"] = gpu.calls.get("init", 0) + 1
        if gpu.init_error is not None:
            raise pynvml.NVMLError(gpu.init_error)

    patches = {
        "nvmlInit": init,
        "nvmlShutdown": lambda: gpu.calls.__setitem__("shutdown", gpu.calls.get("shutdown", 0) + 1),
        "nvmlDeviceGetHandleByIndex": lambda i: handle,
        "nvmlDeviceGetName": lambda h: gpu.answer("name", gpu.name),
        "nvmlDeviceGetUUID": lambda h: gpu.answer("uuid", gpu.uuid),
        "nvmlDeviceGetTotalEnergyConsumption": lambda h: gpu.answer("energy", gpu.next_energy),
        "nvmlDeviceGetPowerUsage": lambda h: gpu.answer("power", lambda: gpu.power_mw),
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: gpu.answer("enforced", lambda: gpu.enforced_mw),
        "nvmlDeviceGetPowerManagementLimit": lambda h: gpu.answer("management", lambda: gpu.management_mw),
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: gpu.answer("default", lambda: gpu.default_mw),
        "nvmlDeviceGetTemperature": lambda h, sensor: gpu.answer("temp", lambda: gpu.temp_c),
        "nvmlDeviceGetMemoryInfo": lambda h: gpu.answer("mem", lambda: SimpleNamespace(used=gpu.mem_used_bytes)),
        "nvmlDeviceGetUtilizationRates": lambda h: gpu.answer("util", lambda: SimpleNamespace(gpu=gpu.util_pct)),
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: gpu.answer("event_reasons", lambda: gpu.reasons),
        "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: gpu.answer("throttle_reasons", lambda: gpu.reasons),
        "nvmlDeviceGetPowerManagementLimitConstraints": lambda h: gpu.answer(
            "constraints", lambda: [gpu.min_limit_mw, gpu.max_limit_mw]
        ),
        "nvmlDeviceSetPowerManagementLimit": lambda h, mw: gpu.set_limit(mw),
    }
    for name, fn in patches.items():
        monkeypatch.setattr(pynvml, name, fn)
    return gpu
