"""NVML backend (``nvidia-ml-py``, imported as ``pynvml``).

Capabilities are probed once, at open:

* energy: ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded, Volta
  and newer) -> ``energy_method = "counter"``; when that answers an NVML error (laptop
  GPUs often say "Not Supported") but ``nvmlDeviceGetPowerUsage`` works, energy is the
  integral of sampled power (``"power_integration"``); when neither works, ``"none"``,
  with a :class:`~specband.devices.base.DeviceWarning` (never a silent 0 J);
* power limit: ``nvmlDeviceGetEnforcedPowerLimit``, then
  ``nvmlDeviceGetPowerManagementLimit``, then ``nvmlDeviceGetPowerManagementDefaultLimit``
  (all mW), then the ``--power-limit`` given by hand (the published RTX 4060 Laptop
  answered "Not Supported" to all three: 80 W had to be given), else ``None`` with a warning;
* setting the limit: ``nvmlDeviceSetPowerManagementLimit`` (mW), within
  ``nvmlDeviceGetPowerManagementLimitConstraints``; NVML's error codes become specband
  errors in one place, :meth:`NvmlDevice._error` (``NVML_ERROR_NO_PERMISSION`` ->
  :class:`~specband.devices.power_limit.PowerLimitPermissionError`, "Not Supported" ->
  :class:`~specband.devices.power_limit.PowerLimitError`);
* throttling: ``nvmlDeviceGetCurrentClocksEventReasons`` (or the older
  ``nvmlDeviceGetCurrentClocksThrottleReasons``), masked with
  :data:`~specband.devices.base.THROTTLE_REASON_MASK`.

Source: NVML API reference (``nvml.h``), nvidia-ml-py's ``pynvml.py``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from specband.core.errors import DeviceError
from specband.devices.base import DeviceWarning, GpuDevice, check_power_limit_w
from specband.devices.power_limit import PowerLimitError, PowerLimitPermissionError, PowerLimitRange, gpu_lock_dir

__all__ = ["NvmlDevice", "import_pynvml"]

_MIB = float(1 << 20)


def import_pynvml() -> ModuleType:
    """Import ``pynvml`` from the nvidia-ml-py package.

    Raises:
        DeviceError: the package is not installed.
    """
    try:
        import pynvml
    except ImportError as exc:
        raise DeviceError(f"NVML is not available: cannot import pynvml ({exc}); install nvidia-ml-py") from None
    return pynvml


class NvmlDevice(GpuDevice):
    """One GPU read through NVML.

    Args:
        index: NVML device index (``nvmlDeviceGetHandleByIndex``).
        power_limit_w: the limit to use when NVML gives none (``--power-limit``), W.
        pynvml_module: the ``pynvml`` module to use (tests pass a patched one).

    Raises:
        ConfigError: ``power_limit_w`` is not a finite number > 0.
        DeviceError: NVML cannot be imported or initialised, or the index is invalid.
    """

    def __init__(
        self, index: int = 0, power_limit_w: float | None = None, pynvml_module: ModuleType | None = None
    ) -> None:
        power_limit_w = check_power_limit_w(power_limit_w)
        self._nvml = pynvml_module if pynvml_module is not None else import_pynvml()
        self._unsupported: set[str] = set()
        self._open = False
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:
            raise DeviceError(f"NVML is not available: nvmlInit failed: {exc}") from None
        self._open = True
        try:
            self._handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
        except self._nvml.NVMLError as exc:
            self.close()
            raise DeviceError(f"NVML has no GPU at index {index}: {exc}") from None
        self.index = index
        self.name = self._read_name()
        self.provenance = "measured"
        self.energy_method = self._probe_energy_method()
        self.power_limit_w, self.power_limit_source = self._resolve_power_limit(power_limit_w)

    # ------------------------------------------------------------------ probing
    def _read_name(self) -> str:
        try:
            name = self._nvml.nvmlDeviceGetName(self._handle)
        except (self._nvml.NVMLError, AttributeError):
            return f"nvml-gpu{self.index}"
        return name.decode() if isinstance(name, bytes) else str(name)

    def _probe(self, fn_name: str) -> str | None:
        """Why the getter ``fn_name`` gives nothing (an NVML error, or a ``pynvml`` without the
        function), or ``None`` when it answers."""
        fn = getattr(self._nvml, fn_name, None)
        if fn is None:
            return f"{fn_name} is missing from this pynvml"
        try:
            fn(self._handle)
        except self._nvml.NVMLError as exc:
            return str(exc)
        return None

    def _probe_energy_method(self) -> str:
        counter_error = self._probe("nvmlDeviceGetTotalEnergyConsumption")
        if counter_error is None:
            return "counter"
        power_error = self._probe("nvmlDeviceGetPowerUsage")
        if power_error is not None:
            warnings.warn(
                f"NVML gives neither an energy counter ({counter_error}) nor power ({power_error}) for "
                f"GPU {self.index}: energy will not be measured (energy_method=none)",
                DeviceWarning,
                stacklevel=3,
            )
            return "none"
        warnings.warn(
            f"NVML energy counter unavailable for GPU {self.index} ({counter_error}); energy is "
            f"the integral of sampled power (energy_method=power_integration)",
            DeviceWarning,
            stacklevel=3,
        )
        return "power_integration"

    def _resolve_power_limit(self, fallback_w: float | None) -> tuple[float | None, str]:
        getters: list[tuple[str, str]] = [
            ("enforced", "nvmlDeviceGetEnforcedPowerLimit"),
            ("management", "nvmlDeviceGetPowerManagementLimit"),
            ("default", "nvmlDeviceGetPowerManagementDefaultLimit"),
        ]
        failures = []
        for source, fn_name in getters:
            fn = getattr(self._nvml, fn_name, None)
            if fn is None:
                failures.append(f"{fn_name}: missing")
                continue
            try:
                value_mw = fn(self._handle)
            except self._nvml.NVMLError as exc:
                failures.append(f"{fn_name}: {exc}")
                continue
            if value_mw and value_mw > 0:
                return float(value_mw) / 1000.0, source
            failures.append(f"{fn_name}: {value_mw}")
        if fallback_w is not None:
            return float(fallback_w), "cli"
        warnings.warn(
            "NVML gives no power limit (" + "; ".join(failures) + "); pass --power-limit W "
            "(energy utilisation cannot be computed without it)",
            DeviceWarning,
            stacklevel=3,
        )
        return None, "none"

    # ------------------------------------------------------------------ readings
    def _is_permanent(self, exc: BaseException) -> bool:
        """NVML errors that will not go away by asking again ("Not Supported", a function
        the driver lacks)."""
        code = getattr(exc, "value", None)
        return code is not None and code in (
            getattr(self._nvml, "NVML_ERROR_NOT_SUPPORTED", None),
            getattr(self._nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", None),
        )

    def _call(self, key: str, fn: Callable[[], Any]) -> Any:
        """Call an NVML getter; ``None`` on error, and never again after "Not Supported"."""
        if key in self._unsupported or not self._open:
            return None
        try:
            return fn()
        except self._nvml.NVMLError as exc:
            if self._is_permanent(exc):
                self._unsupported.add(key)
            return None
        except AttributeError:
            self._unsupported.add(key)
            return None

    def read_energy_mj(self) -> float | None:
        """NVML's cumulative energy counter, mJ (``None`` unless ``energy_method == "counter"``)."""
        if self.energy_method != "counter":
            return None
        value = self._call("energy", lambda: self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        return None if value is None else float(value)

    def read_power_w(self) -> float | None:
        """``nvmlDeviceGetPowerUsage`` (mW) in W."""
        value = self._call("power", lambda: self._nvml.nvmlDeviceGetPowerUsage(self._handle))
        return None if value is None else float(value) / 1000.0

    def read_temp_c(self) -> float | None:
        """``nvmlDeviceGetTemperature(handle, NVML_TEMPERATURE_GPU)``, C."""
        sensor = getattr(self._nvml, "NVML_TEMPERATURE_GPU", 0)
        value = self._call("temp", lambda: self._nvml.nvmlDeviceGetTemperature(self._handle, sensor))
        return None if value is None else float(value)

    def read_mem_used_mb(self) -> float | None:
        """``nvmlDeviceGetMemoryInfo(handle).used`` in MB (MiB)."""
        info = self._call("mem", lambda: self._nvml.nvmlDeviceGetMemoryInfo(self._handle))
        return None if info is None else float(info.used) / _MIB

    def read_util_pct(self) -> float | None:
        """``nvmlDeviceGetUtilizationRates(handle).gpu``, %."""
        rates = self._call("util", lambda: self._nvml.nvmlDeviceGetUtilizationRates(self._handle))
        return None if rates is None else float(rates.gpu)

    def read_clock_event_reasons(self) -> int | None:
        """``nvmlDeviceGetCurrentClocksEventReasons`` (or the older ``...ClocksThrottleReasons``)."""
        for fn_name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            key = f"reasons:{fn_name}"
            fn = getattr(self._nvml, fn_name, None)
            if fn is None or key in self._unsupported:
                continue
            try:
                return int(fn(self._handle))
            except self._nvml.NVMLError as exc:
                if self._is_permanent(exc):
                    self._unsupported.add(key)
                    continue
                return None
        return None

    # ------------------------------------------------------------------ the power limit lever
    def _error(self, exc: BaseException, doing: str) -> DeviceError:
        """The specband error for an NVML error raised while ``doing`` something with the
        power limit (the one place NVML's codes are mapped)."""
        code = getattr(exc, "value", None)
        where = f"GPU {self.index} ({self.name}): {doing}"
        if code == getattr(self._nvml, "NVML_ERROR_NO_PERMISSION", 4):
            return PowerLimitPermissionError(
                f"{where}: no permission to set power limits (NVML: {exc}); run as root, or set it yourself "
                "with `sudo nvidia-smi -pl W`"
            )
        if code in (
            getattr(self._nvml, "NVML_ERROR_NOT_SUPPORTED", 3),
            getattr(self._nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),
        ):
            return PowerLimitError(f"{where}: this GPU does not support setting power limits (NVML: {exc})")
        if code == getattr(self._nvml, "NVML_ERROR_INVALID_ARGUMENT", 2):
            return PowerLimitError(f"{where}: NVML refused the value (NVML: {exc})")
        return DeviceError(f"{where}: NVML error: {exc}")

    def power_limit_range_w(self) -> PowerLimitRange | None:
        """Default and allowed limits: ``nvmlDeviceGetPowerManagementDefaultLimit`` and
        ``nvmlDeviceGetPowerManagementLimitConstraints`` (mW), in W.

        Raises:
            PowerLimitError, PowerLimitPermissionError, DeviceError: NVML's answer
                (see :meth:`_error`).
        """
        try:
            low_mw, high_mw = self._nvml.nvmlDeviceGetPowerManagementLimitConstraints(self._handle)
            default_mw = self._nvml.nvmlDeviceGetPowerManagementDefaultLimit(self._handle)
        except self._nvml.NVMLError as exc:
            raise self._error(exc, "reading the allowed power limits") from None
        return PowerLimitRange(float(default_mw) / 1000.0, float(low_mw) / 1000.0, float(high_mw) / 1000.0)

    def power_limit_setting_w(self) -> float | None:
        """``nvmlDeviceGetPowerManagementLimit`` (the limit set, e.g. by ``nvidia-smi -pl``),
        W; the enforced limit when NVML does not answer."""
        try:
            value_mw = self._nvml.nvmlDeviceGetPowerManagementLimit(self._handle)
        except (self._nvml.NVMLError, AttributeError):
            return self.power_limit_w
        return float(value_mw) / 1000.0 if value_mw and value_mw > 0 else self.power_limit_w

    def power_limit_lock_path(self) -> Path:
        """``<lock dir>/specband-gpu-<UUID>.power-limit.lock`` (NVML's ``nvmlDeviceGetUUID``;
        the NVML index when it gives none: NVML indices ignore ``CUDA_VISIBLE_DEVICES``)."""
        try:
            uuid = self._nvml.nvmlDeviceGetUUID(self._handle)
            key = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        except Exception:  # an NVML error, or a pynvml without the call
            key = ""
        key = "".join(c if c.isalnum() or c in "-_" else "_" for c in key)[:80] or f"index{self.index}"
        return gpu_lock_dir() / f"specband-gpu-{key}.power-limit.lock"

    def set_power_limit_w(self, watts: float) -> float:
        """``nvmlDeviceSetPowerManagementLimit(handle, mW)``, clamped to the allowed range;
        then re-reads the enforced limit.

        Raises:
            PowerLimitPermissionError: not root (``NVML_ERROR_NO_PERMISSION``).
            PowerLimitError: not supported, or a value NVML refused.
            DeviceError: another NVML error.
        """
        limits = self.power_limit_range_w()
        assert limits is not None
        clamped = min(limits.max_w, max(limits.min_w, float(watts)))
        try:
            self._nvml.nvmlDeviceSetPowerManagementLimit(self._handle, round(clamped * 1000.0))
        except self._nvml.NVMLError as exc:
            raise self._error(exc, f"setting the power limit to {clamped:g} W") from None
        try:
            enforced_mw = self._nvml.nvmlDeviceGetEnforcedPowerLimit(self._handle)
            self.power_limit_w = float(enforced_mw) / 1000.0
        except self._nvml.NVMLError:
            self.power_limit_w = clamped
        self.power_limit_source = "set"
        return self.power_limit_w

    def close(self) -> None:
        """``nvmlShutdown`` once."""
        if self._open:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
