"""Zeus backend: energy from ``zeus.monitor.ZeusMonitor`` measurement windows.

Zeus (https://ml.energy/zeus, the optional extra ``specband[zeus]``) reads NVML's energy
counter on Volta and newer GPUs and integrates polled power on older ones. Here a timed
batch is one ``begin_window`` / ``end_window`` pair; ``Measurement.gpu_energy[index]`` (J)
is the window's energy. ``sync_execution=False`` is passed because the sweep process runs
no CUDA work itself (the server is another process).

Zeus measures energy only, so temperature, memory, utilisation, power, the power limit
and the clock-event reasons come from an :class:`~specband.devices.nvml.NvmlDevice` on
the same GPU (or nothing, with a warning, when NVML is missing).

Note: Zeus's GPU indices follow ``CUDA_VISIBLE_DEVICES``; NVML's do not.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from specband.core.errors import DeviceError
from specband.devices.base import DeviceWarning, GpuDevice, NullDevice, check_power_limit_w
from specband.devices.nvml import NvmlDevice
from specband.devices.power_limit import PowerLimitRange

__all__ = ["ZeusDevice"]


class ZeusDevice(GpuDevice):
    """Energy windows from Zeus, the other readings from NVML.

    Args:
        index: GPU index (Zeus ``gpu_indices=[index]``; NVML handle index).
        power_limit_w: power limit to use when NVML gives none, W.
        telemetry: the device for the non-energy readings (default: NVML, or nothing).
        monitor: a ready ``ZeusMonitor`` (tests pass a fake one).

    Raises:
        ConfigError: ``power_limit_w`` is not a finite number > 0.
        DeviceError: zeus is not installed or ``ZeusMonitor`` cannot start.
    """

    def __init__(
        self,
        index: int = 0,
        power_limit_w: float | None = None,
        telemetry: GpuDevice | None = None,
        monitor: Any | None = None,
    ) -> None:
        power_limit_w = check_power_limit_w(power_limit_w)
        self.index = index
        if monitor is None:
            try:
                from zeus.monitor import ZeusMonitor
            except ImportError as exc:
                raise DeviceError(
                    f"the Zeus backend needs zeus ({exc}); install it with `pip install 'specband[zeus]'`"
                ) from None
            try:
                monitor = ZeusMonitor(gpu_indices=[index], cpu_indices=[])
            except Exception as exc:  # Zeus raises its own error types
                raise DeviceError(f"ZeusMonitor could not start on GPU {index}: {exc}") from None
        self._monitor = monitor
        if telemetry is None:
            try:
                telemetry = NvmlDevice(index, power_limit_w=power_limit_w)
            except DeviceError as exc:
                warnings.warn(
                    f"{exc}; Zeus measures energy only, so temperature, memory, utilisation and "
                    f"throttling will be missing",
                    DeviceWarning,
                    stacklevel=2,
                )
                telemetry = NullDevice(power_limit_w=power_limit_w)
        self._telemetry = telemetry
        self.name = telemetry.name if telemetry.name != "unknown" else f"zeus-gpu{index}"
        self.energy_method = "zeus"
        self.power_limit_w = telemetry.power_limit_w
        self.power_limit_source = telemetry.power_limit_source
        self.provenance = "measured"
        self._open_windows: set[str] = set()

    @staticmethod
    def _call_window(method: Any, key: str) -> Any:
        """Call ``begin_window``/``end_window`` without CUDA synchronisation: Zeus >= 0.9
        names the flag ``sync_execution``, older versions ``sync_cuda``."""
        for kwargs in ({"sync_execution": False}, {"sync_cuda": False}):
            try:
                return method(key, **kwargs)
            except TypeError as exc:
                if next(iter(kwargs)) not in str(exc):
                    raise
        return method(key)

    def energy_window_begin(self, key: str) -> object:
        """``ZeusMonitor.begin_window(key, sync_execution=False)``.

        Raises:
            DeviceError: Zeus refused the window.
        """
        try:
            self._call_window(self._monitor.begin_window, key)
        except Exception as exc:  # Zeus raises its own error types
            raise DeviceError(f"Zeus begin_window({key!r}) failed: {exc}") from None
        self._open_windows.add(key)
        return key

    def energy_window_end(self, key: str, token: object) -> tuple[float | None, str | None]:
        """``ZeusMonitor.end_window(key)`` -> the GPU's energy in J.

        Returns:
            ``(energy_j, None)``; ``(None, flag)`` when Zeus failed or gave a negative or
            missing value (the caller then integrates sampled power).
        """
        if key not in self._open_windows:
            return None, "zeus_window_not_open"
        self._open_windows.discard(key)
        try:
            measurement = self._call_window(self._monitor.end_window, key)
        except Exception as exc:
            return None, f"zeus_end_window_failed: {exc}"
        gpu_energy = getattr(measurement, "gpu_energy", None) or {}
        energy = gpu_energy.get(self.index)
        if energy is None and len(gpu_energy) == 1:
            energy = next(iter(gpu_energy.values()))
        if energy is None:
            return None, "zeus_no_gpu_energy"
        if energy < 0:
            return None, "zeus_negative_energy"
        return float(energy), None

    def read_energy_mj(self) -> float | None:
        return None

    def read_power_w(self) -> float | None:
        return self._telemetry.read_power_w()

    def read_temp_c(self) -> float | None:
        return self._telemetry.read_temp_c()

    def read_mem_used_mb(self) -> float | None:
        return self._telemetry.read_mem_used_mb()

    def read_util_pct(self) -> float | None:
        return self._telemetry.read_util_pct()

    def read_clock_event_reasons(self) -> int | None:
        return self._telemetry.read_clock_event_reasons()

    def power_limit_range_w(self) -> PowerLimitRange | None:
        """The NVML telemetry device's allowed limits (Zeus measures energy only)."""
        return self._telemetry.power_limit_range_w()

    def power_limit_setting_w(self) -> float | None:
        """The NVML telemetry device's limit set (its management limit), W."""
        return self._telemetry.power_limit_setting_w()

    def power_limit_lock_path(self) -> Path | None:
        """The NVML telemetry device's lock file (one lock per GPU, whichever backend)."""
        return self._telemetry.power_limit_lock_path()

    def set_power_limit_w(self, watts: float) -> float:
        """Set the limit through the NVML telemetry device (errors as
        :meth:`~specband.devices.nvml.NvmlDevice.set_power_limit_w`)."""
        self.power_limit_w = self._telemetry.set_power_limit_w(watts)
        self.power_limit_source = self._telemetry.power_limit_source
        return self.power_limit_w

    def close(self) -> None:
        """Close the NVML telemetry device."""
        self._telemetry.close()
