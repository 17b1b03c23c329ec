"""``sweep --power-limits`` and ``launch --set-power-limit``: the GPU's range and the limits
in watts, read before anything is launched or written."""

from __future__ import annotations

from typing import Any

from specband.devices.power_limit import PowerLimitRange, parse_power_limits, resolve_power_limits
from specband.errors import ConfigError

__all__ = ["power_limit_range", "sweep_power_limits_w"]


def power_limit_range(kind: str, index: int = 0, emulated: dict[str, Any] | None = None) -> PowerLimitRange:
    """The limits the GPU accepts, read without writing anything.

    Args:
        kind: the resolved ``--device`` kind (``nvml``, ``zeus``, ``emulated``; ``auto`` is NVML).
        index: NVML GPU index.
        emulated: the emulated device's keyword arguments (its ``model``).

    Raises:
        ConfigError: ``--device none`` (no device to set limits on).
        DeviceError, PowerLimitError, PowerLimitPermissionError: NVML's answer.
    """
    if kind == "none":
        raise ConfigError("--power-limits needs a GPU to set limits on (not --device none)")
    if kind == "emulated":
        if emulated is None:
            raise ConfigError("--power-limits with --device emulated needs the emulator's model")
        from specband.emulator.gpu import emulated_power_limit_range

        return emulated_power_limit_range(emulated["model"])
    from specband.devices.nvml import NvmlDevice

    with NvmlDevice(index) as device:
        limits = device.power_limit_range_w()
    assert limits is not None
    return limits


def sweep_power_limits_w(
    text: str, kind: str, index: int = 0, emulated: dict[str, Any] | None = None, option: str = "--power-limits"
) -> tuple[tuple[float, ...], tuple[str, ...]]:
    """``--power-limits`` in watts, clamped to the GPU's range, and a note per clamped value.

    Raises:
        ConfigError: a bad list (see :func:`~specband.devices.power_limit.parse_power_limits`);
            as :func:`power_limit_range`.
    """
    values = parse_power_limits(text, option)
    return resolve_power_limits(values, power_limit_range(kind, index, emulated), option)
