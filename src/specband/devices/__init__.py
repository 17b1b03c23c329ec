"""GPU telemetry for the sweep: one interface, three backends.

* :class:`~specband.devices.nvml.NvmlDevice`: NVML through ``nvidia-ml-py`` (energy
  counter with a sampled-power fallback, power limit chain, clock-event reasons);
* :class:`~specband.devices.zeus.ZeusDevice`: energy from Zeus ``ZeusMonitor`` windows
  (optional extra ``specband[zeus]``), other readings from NVML;
* a :class:`DeviceSpec` that a layer above plugs in (the CLI passes the emulator's GPU,
  :class:`specband.emulator.spec.EmulatedGpuSpec`, for tests and CPU runs): this package
  knows no emulator;
* :class:`~specband.devices.base.NullDevice`: no telemetry (NVML missing).

:func:`open_device` picks one. A :class:`~specband.devices.base.TelemetryWindow` measures
one timed batch.
"""

from __future__ import annotations

import warnings
from typing import Protocol, runtime_checkable

from specband.core.errors import ConfigError, DeviceError
from specband.devices import base as _base
from specband.devices.base import *  # noqa: F403  (the interface: every name in base.__all__)
from specband.devices.base import DeviceWarning, GpuDevice, NullDevice, check_power_limit_w
from specband.devices.nvml import NvmlDevice
from specband.devices.zeus import ZeusDevice

__all__ = ["DEVICE_KINDS", "DeviceSpec", "open_device", *_base.__all__]

#: Values of ``specband sweep --device``.
DEVICE_KINDS: tuple[str, ...] = ("auto", "nvml", "zeus", "emulated", "none")


@runtime_checkable
class DeviceSpec(Protocol):
    """A telemetry backend supplied from above the device layer (``--device emulated``: the
    emulator's GPU), typed and picklable (a ``--ray`` worker opens it on its node).

    ``open()`` gives the device; ``for_gpu(n)`` the spec of GPU ``n`` of a multi-GPU sweep
    and the environment variables its server needs (e.g. its own state file).
    """

    def open(self) -> GpuDevice:
        """Open the device (raises :class:`~specband.core.errors.SpecbandError` subclasses)."""
        ...

    def for_gpu(self, index: int) -> tuple[DeviceSpec, dict[str, str]]:
        """The spec of GPU ``index`` and the server environment it adds."""
        ...


def open_device(
    kind: str = "auto",
    *,
    index: int = 0,
    power_limit_w: float | None = None,
    plugged: DeviceSpec | None = None,
) -> GpuDevice:
    """Open the telemetry backend for one GPU.

    Args:
        kind: ``"auto"`` (the plugged device when ``plugged`` is given, else NVML, else none),
            ``"nvml"``, ``"zeus"``, ``"emulated"`` or ``"none"``.
        index: GPU index.
        power_limit_w: the limit to use when the backend gives none (``--power-limit``), W.
        plugged: the ``"emulated"`` backend, supplied by the caller (a :class:`DeviceSpec`).

    Returns:
        the device. With ``"auto"``, NVML missing or failing gives a :class:`NullDevice`
        with a :class:`DeviceWarning` (telemetry off; the sweep still runs).

    Raises:
        ConfigError: an unknown kind, ``"emulated"`` without ``plugged``, or a
            ``power_limit_w`` that is not a finite number > 0.
        DeviceError: ``"nvml"`` asked for explicitly when NVML is missing or fails (no
            silent fallback); ``"zeus"`` when zeus is not installed or cannot start.
    """
    if kind not in DEVICE_KINDS:
        raise ConfigError(f"unknown device {kind!r}; expected one of {', '.join(DEVICE_KINDS)}")
    power_limit_w = check_power_limit_w(power_limit_w)
    explicit = kind
    if kind == "auto":
        kind = "emulated" if plugged is not None else "nvml"
    if kind == "none":
        return NullDevice(power_limit_w=power_limit_w)
    if kind == "emulated":
        if plugged is None:
            raise ConfigError("--device emulated needs the emulator's state file, model and time scale")
        return plugged.open()
    if kind == "zeus":
        return ZeusDevice(index, power_limit_w=power_limit_w)

    try:
        return NvmlDevice(index, power_limit_w=power_limit_w)
    except DeviceError as exc:
        if explicit == "nvml":
            raise DeviceError(f"--device nvml: {exc} (--device auto goes on without telemetry)") from None
        warnings.warn(
            f"{exc}; telemetry is off (no energy, temperature or memory readings)", DeviceWarning, stacklevel=2
        )
        return NullDevice(power_limit_w=power_limit_w)
