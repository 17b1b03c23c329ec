"""``sweep --power-limits`` and ``launch --set-power-limit``: the GPU's range and the limits
in watts, read before anything is launched or written."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from specband.core.errors import ConfigError
from specband.devices.nvml import NvmlDevice
from specband.devices.power_limit import PowerLimitGuard, PowerLimitRange, parse_power_limits, resolve_power_limits
from specband.harness.interrupts import deferred

__all__ = ["held_power_limit", "launch_power_limit_w", "power_limit_range", "sweep_power_limits_w"]


def power_limit_range(kind: str, index: int = 0, plugged: Any = None) -> PowerLimitRange:
    """The limits the GPU accepts, read without writing anything.

    Args:
        kind: the resolved ``--device`` kind (``nvml``, ``zeus``, ``emulated``; ``auto`` is NVML).
        index: NVML GPU index.
        plugged: the device spec plugged in for ``--device emulated``
            (:class:`~specband.devices.DeviceSpec`); its ``power_limit_range_w()`` answers.

    Raises:
        ConfigError: ``--device none``, or a plugged device that cannot set limits.
        DeviceError, PowerLimitError, PowerLimitPermissionError: NVML's answer.
    """
    if kind == "none":
        raise ConfigError("--power-limits needs a GPU to set limits on (not --device none)")
    if kind == "emulated":
        ranged = getattr(plugged, "power_limit_range_w", None)
        if not callable(ranged):
            raise ConfigError("--power-limits: the plugged device cannot set power limits")
        limits: PowerLimitRange = ranged()
        return limits

    with NvmlDevice(index) as device:
        got = device.power_limit_range_w()
    assert got is not None
    return got


def sweep_power_limits_w(
    text: str, kind: str, index: int = 0, plugged: Any = None, option: str = "--power-limits"
) -> tuple[tuple[float, ...], tuple[str, ...]]:
    """``--power-limits`` in watts, clamped to the GPU's range, and a note per clamped value.

    Raises:
        ConfigError: a bad list (see :func:`~specband.devices.power_limit.parse_power_limits`);
            as :func:`power_limit_range`.
    """
    values = parse_power_limits(text, option)
    return resolve_power_limits(values, power_limit_range(kind, index, plugged), option)


def launch_power_limit_w(text: str, index: int = 0) -> tuple[float, tuple[str, ...]]:
    """``launch --set-power-limit W`` in watts (a fraction <= 1 of the default limit allowed),
    clamped to the NVML range of GPU ``index``, and a note when it was clamped.

    Raises:
        ConfigError: not one value; DeviceError and its power-limit subclasses: NVML's answer.
    """
    values = parse_power_limits(text, "--set-power-limit")
    if len(values) != 1:
        raise ConfigError(f"--set-power-limit takes one limit (W, or a fraction of the default), got {text!r}")
    watts, notes = resolve_power_limits(values, power_limit_range("nvml", index), "--set-power-limit")
    return watts[0], notes


@contextlib.contextmanager
def held_power_limit(watts: float, index: int = 0) -> Iterator[float]:
    """Set GPU ``index``'s power limit through NVML for the ``with`` block, and put the limit
    found back when the block ends, however it ends (the server stopped, Ctrl-C, SIGTERM,
    a failed launch).

    Yields:
        the limit in force, W.

    Raises:
        PowerLimitPermissionError: not root; PowerLimitError, DeviceError: NVML's answer.
    """

    with NvmlDevice(index) as device:
        guard = PowerLimitGuard(device)
        try:
            yield guard.set(watts)
        finally:
            with deferred():
                guard.restore()
