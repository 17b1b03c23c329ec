"""The power limit as a lever: parse ``--power-limits``, clamp to the GPU's range, set it,
and put the original back on every exit path.

* :func:`parse_power_limits` reads ``"300,450,700"`` (W) or ``"0.6,0.8,1.0"`` (fractions of
  the GPU's default limit);
* :func:`resolve_power_limits` turns them into watts within a :class:`PowerLimitRange`
  (NVML's ``nvmlDeviceGetPowerManagementLimitConstraints`` and default limit), with a note
  for each value that was clamped;
* :class:`PowerLimitGuard` sets limits on a :class:`~specband.devices.base.GpuDevice` and
  restores the limit it found when its ``with`` block ends, whatever ends it: the end of
  the sweep, an exception, Ctrl-C or SIGTERM (the sweep turns both into
  ``KeyboardInterrupt``, :mod:`specband.harness.interrupts`).

Errors: :class:`PowerLimitError` (the device cannot set limits: exit 4) and its subclass
:class:`PowerLimitPermissionError` (NVML's ``NVML_ERROR_NO_PERMISSION``: setting a limit
needs root: exit 2), each one line. The NVML backend maps NVML's error codes to these once
(:mod:`specband.devices.nvml`), as Zeus's device layer does.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

from specband.core.errors import ConfigError, DeviceError, PermissionDeniedError


class PowerLimitedDevice(Protocol):
    """What :class:`PowerLimitGuard` needs of a GPU (a
    :class:`~specband.devices.base.GpuDevice` is one): its name, its limit in W (``None``:
    unknown) and a setter returning the limit in force, W. A protocol here, so that this
    module does not import the device interface that imports it."""

    @property
    def name(self) -> str: ...

    @property
    def power_limit_w(self) -> float | None: ...

    def set_power_limit_w(self, watts: float) -> float: ...


__all__ = [
    "MAX_POWER_LIMITS",
    "PowerLimitError",
    "PowerLimitGuard",
    "PowerLimitPermissionError",
    "PowerLimitRange",
    "PowerLimitedDevice",
    "parse_power_limits",
    "resolve_power_limits",
]

#: Most values ``--power-limits`` takes (each multiplies the sweep's grid).
MAX_POWER_LIMITS = 128


class PowerLimitError(DeviceError):
    """The device cannot set its power limit (not supported, a value NVML refused): a
    device failure, exit 4."""


class PowerLimitPermissionError(PowerLimitError, PermissionDeniedError):
    """Setting the power limit needs root (``NVML_ERROR_NO_PERMISSION``): a
    :class:`PowerLimitError` for the code that handles the device's failures, but the
    command's permission, not the GPU, is at fault (exit 2, as
    :class:`~specband.core.errors.PermissionDeniedError`)."""


@dataclass(frozen=True)
class PowerLimitRange:
    """What limits a GPU accepts.

    Attributes:
        default_w: the default limit (``nvmlDeviceGetPowerManagementDefaultLimit``), W.
        min_w, max_w: the allowed range (``nvmlDeviceGetPowerManagementLimitConstraints``), W.
    """

    default_w: float
    min_w: float
    max_w: float


def parse_power_limits(text: str, option: str = "--power-limits") -> tuple[float, ...]:
    """Parse a comma-separated list of power limits.

    Args:
        text: ``"300,450,700"`` (watts, every value > 1) or ``"0.6,0.8,1.0"`` (fractions of
            the default limit, every value in (0, 1]); the two are not mixed. ``"LOW:HIGH:STEP"``
            (e.g. ``"200:700:10"`` W or ``"0.5:1:0.05"``) is every value from LOW to HIGH.
        option: the option named in errors.

    Returns:
        the values as given (watts or fractions), in order.

    Raises:
        ConfigError: empty, not a number, not finite, <= 0, repeated, fractions mixed with
            watts, watts above 5000, or more than :data:`MAX_POWER_LIMITS` values.
    """
    text = str(text)
    if ":" in text:
        return _parse_range(text, option)
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise ConfigError(f"{option}: give watts (300,450,700) or fractions of the default limit (0.6,0.8,1.0)")
    if len(parts) > MAX_POWER_LIMITS:
        raise ConfigError(f"{option}: at most {MAX_POWER_LIMITS} limits, got {len(parts)}")
    values: list[float] = []
    for part in parts:
        if len(part) > 32:
            raise ConfigError(f"{option}: {part[:32]!r}... is not a number")
        try:
            value = float(part)
        except ValueError:
            raise ConfigError(f"{option}: {part!r} is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{option}: {part!r} must be a positive number of W or a fraction in (0, 1]")
        if value > 5000:
            raise ConfigError(f"{option}: {part!r} W is above 5000 W")
        if value in values:
            raise ConfigError(f"{option}: {part!r} is given twice")
        values.append(value)
    fractions = [v <= 1.0 for v in values]
    if any(fractions) and not all(fractions):
        raise ConfigError(f"{option}: do not mix fractions (<= 1) and watts (> 1): {text!r}")
    return tuple(values)


def _parse_range(text: str, option: str) -> tuple[float, ...]:
    """``LOW:HIGH:STEP`` -> the values LOW, LOW + STEP, ... up to HIGH (included within 1e-9)."""
    parts = [p.strip() for p in text.split(":")]
    try:
        if len(parts) != 3 or any(len(p) > 32 for p in parts):
            raise ValueError
        low, high, step = (float(p) for p in parts)
    except ValueError:
        raise ConfigError(f"{option}: a range is LOW:HIGH:STEP (e.g. 200:700:10), got {text[:40]!r}") from None
    if not all(math.isfinite(v) for v in (low, high, step)) or step <= 0 or low <= 0 or high < low:
        raise ConfigError(f"{option}: a range needs 0 < LOW <= HIGH and STEP > 0, got {text[:40]!r}")
    count = math.floor((high - low) / step + 1e-9) + 1
    if count > MAX_POWER_LIMITS:
        raise ConfigError(f"{option}: at most {MAX_POWER_LIMITS} limits, {text!r} gives {count}")
    return parse_power_limits(",".join(repr(round(low + i * step, 6)) for i in range(count)), option)


def resolve_power_limits(
    values: tuple[float, ...], limits: PowerLimitRange, option: str = "--power-limits"
) -> tuple[tuple[float, ...], tuple[str, ...]]:
    """Watts for the values of :func:`parse_power_limits`, clamped to the GPU's range.

    Args:
        values: watts, or fractions (all <= 1) of ``limits.default_w``.
        limits: the GPU's range.
        option: the option named in notes.

    Returns:
        ``(watts, notes)``: one limit per value (rounded to 0.001 W, NVML's mW), in order;
        one note per value that was clamped.

    Raises:
        ConfigError: two values that land on the same limit after clamping.
    """
    fractions = bool(values) and all(v <= 1.0 for v in values)
    watts: list[float] = []
    notes: list[str] = []
    for value in values:
        asked = value * limits.default_w if fractions else value
        got = round(min(limits.max_w, max(limits.min_w, asked)), 3)
        if not math.isclose(got, asked, abs_tol=5e-4):
            notes.append(
                f"{option}: {asked:g} W is outside the GPU's range "
                f"[{limits.min_w:g}, {limits.max_w:g}] W; using {got:g} W"
            )
        if got in watts:
            raise ConfigError(f"{option}: {value:g} and another value both give {got:g} W on this GPU")
        watts.append(got)
    return tuple(watts), tuple(notes)


class PowerLimitGuard:
    """Sets power limits on one device and restores the limit it found on exit.

    Usage::

        with PowerLimitGuard(device) as guard:
            guard.set(300.0)
            ...  # runs at 300 W
        # the original limit is back (also after an exception, Ctrl-C or SIGTERM)

    Args:
        device: the GPU (its :meth:`~specband.devices.base.GpuDevice.set_power_limit_w`).

    Attributes:
        original_w: the limit found at the first :meth:`set` (``None`` before), W.
        current_w: the limit last set, W.
    """

    def __init__(self, device: PowerLimitedDevice) -> None:
        self.device = device
        self.original_w: float | None = None
        self.current_w: float | None = None

    def set(self, watts: float) -> float:
        """Set the limit (a no-op when it is already set).

        Returns:
            the limit the device reports after setting, W.

        Raises:
            PowerLimitError, PowerLimitPermissionError: as the device's ``set_power_limit_w``.
        """
        if self.current_w is not None and math.isclose(self.current_w, watts, abs_tol=5e-4):
            return self.current_w
        if self.original_w is None:
            self.original_w = self.device.power_limit_w
            if self.original_w is None:
                raise PowerLimitError(
                    f"{self.device.name}: the current power limit is unknown, so it cannot be restored"
                )
        self.current_w = self.device.set_power_limit_w(watts)
        return self.current_w

    def restore(self) -> None:
        """Put the original limit back (once; a failure is a warning, never hides the
        exception that ended the block)."""
        if self.original_w is None or self.current_w is None:
            return
        original, self.current_w = self.original_w, None
        try:
            self.device.set_power_limit_w(original)
        except DeviceError as exc:
            warnings.warn(
                f"could not restore the power limit of {self.device.name} to {original:g} W: {exc}; "
                f"run `nvidia-smi -pl {original:g}`",
                RuntimeWarning,
                stacklevel=2,
            )

    def __enter__(self) -> PowerLimitGuard:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.restore()
