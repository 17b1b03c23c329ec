"""The GPU telemetry interface shared by every backend, and the measurement window.

A :class:`GpuDevice` answers the quantities NVML exposes for one GPU: the energy
counter (mJ), board power (W), the power limit (W), temperature (C), memory used (MB),
utilisation (%) and the clock-event (throttle) reason bit mask. A reading the backend
cannot give is ``None``, never 0.

A :class:`TelemetryWindow` brackets one timed batch: it reads the energy at the start
and the end (counter delta, Zeus window, or the integral of sampled power, whichever
the device supports; :attr:`GpuDevice.energy_method` says which) and samples the other
quantities from a background thread.

Time: every duration goes through a :class:`Clock`. A real GPU uses ``Clock(1.0)``; the
emulator runs faster than real time, and ``Clock(time_scale)`` converts real seconds to
emulated seconds (``emulated = real / time_scale``) so that rows report emulated time.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from specband.core.errors import ConfigError
from specband.core.limits import POWER_LIMIT_RANGE_W, is_finite_number
from specband.devices.power_limit import PowerLimitError, PowerLimitRange

__all__ = [
    "ENERGY_METHODS",
    "THROTTLE_REASON_MASK",
    "Clock",
    "DeviceWarning",
    "GpuDevice",
    "NullDevice",
    "TelemetrySample",
    "TelemetryWindow",
    "WindowResult",
    "check_power_limit_w",
    "is_throttling",
]

#: How a window's energy was obtained: NVML's cumulative counter, the trapezoid integral
#: of sampled power, a Zeus ``ZeusMonitor`` window, or not at all.
ENERGY_METHODS: tuple[str, ...] = ("counter", "power_integration", "zeus", "none")

# NVML clock-event reason bits (nvml.h, ``nvmlClocksEventReason*``). Only these five mean
# the GPU was slowed by power or heat; GpuIdle (0x1), ApplicationsClocksSetting (0x2),
# SyncBoost (0x10) and DisplayClockSetting (0x100) are not throttling.
_SW_POWER_CAP = 0x4
_HW_SLOWDOWN = 0x8
_SW_THERMAL_SLOWDOWN = 0x20
_HW_THERMAL_SLOWDOWN = 0x40
_HW_POWER_BRAKE_SLOWDOWN = 0x80
#: Bit mask of the clock-event reasons that count as throttling (power cap, hardware
#: slowdown, software/hardware thermal slowdown, power-brake slowdown). Source: nvml.h.
THROTTLE_REASON_MASK: int = (
    _SW_POWER_CAP | _HW_SLOWDOWN | _SW_THERMAL_SLOWDOWN | _HW_THERMAL_SLOWDOWN | _HW_POWER_BRAKE_SLOWDOWN
)


class DeviceWarning(UserWarning):
    """A telemetry capability is missing (no NVML, no energy counter, no power limit);
    the sweep continues with less data and the row records what was used."""


def is_throttling(reasons: int | None) -> bool | None:
    """Whether a clock-event reason mask contains a power/thermal/slowdown reason.

    Args:
        reasons: NVML clock-event reason bit mask, or ``None`` when unsupported.

    Returns:
        ``None`` when ``reasons`` is ``None``, else ``bool(reasons & THROTTLE_REASON_MASK)``.
    """
    if reasons is None:
        return None
    return bool(int(reasons) & THROTTLE_REASON_MASK)


def check_power_limit_w(value: float | None) -> float | None:
    """Validate a power limit given by hand (``--power-limit``).

    Args:
        value: watts, or ``None`` (none given).

    Returns:
        ``value`` as a float, or ``None``.

    Raises:
        ConfigError: not a finite number in :data:`~specband.core.limits.POWER_LIMIT_RANGE_W`
            (0, negative, NaN, infinity, 1e-300, a non-number): a row's
            ``power_limit_watts`` must be a real limit, since energy utilisation divides by
            it (``"--power-limit must be a power limit in W in [1, 2000], got X"``).
    """
    if value is None:
        return None
    low, high = POWER_LIMIT_RANGE_W
    if not is_finite_number(value) or not low <= value <= high:
        raise ConfigError(f"--power-limit must be a power limit in W in [{low:g}, {high:g}], got {value!r}")
    return float(value)


#: Accepted time scales, real seconds per emulated second. Basis: below 1e-6 an emulated
#: run of seconds is shorter than the monotonic clock's resolution in real time (rows
#: of 1e297 emulated seconds); above 1e3 one emulated second of decoding waits over 16
#: real minutes, and 1e300 overflows the conversions.
TIME_SCALE_RANGE: tuple[float, float] = (1e-6, 1e3)


@dataclass(frozen=True)
class Clock:
    """Converts between real and (possibly emulated) seconds.

    Attributes:
        time_scale: real seconds per emulated second (1.0 for a real GPU; 0.002 makes
            the emulator run 500x faster than real time).

    Raises:
        ConfigError: a non-positive or non-finite ``time_scale``.
    """

    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if not (isinstance(self.time_scale, (int, float)) and math.isfinite(self.time_scale) and self.time_scale > 0):
            raise ConfigError(f"time scale must be a positive number, got {self.time_scale!r}")
        low, high = TIME_SCALE_RANGE
        if not low <= self.time_scale <= high:
            raise ConfigError(
                f"time scale must be in [{low:g}, {high:g}] real seconds per emulated second, got {self.time_scale!r}"
            )

    def now(self) -> float:
        """Current (emulated) time in seconds, from a monotonic clock."""
        return time.monotonic() / self.time_scale

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` of (emulated) time, i.e. ``seconds * time_scale`` real seconds."""
        if seconds > 0:
            time.sleep(seconds * self.time_scale)

    def to_real(self, seconds: float) -> float:
        """Real seconds that ``seconds`` of (emulated) time take."""
        return seconds * self.time_scale


@dataclass(frozen=True)
class TelemetrySample:
    """One reading of the GPU.

    Attributes:
        t_s: time of the reading on the window's :class:`Clock`, s.
        power_w: board power, W (``None`` if unsupported).
        temp_c: GPU temperature, C.
        mem_used_mb: memory in use, MB (MiB, as NVML's ``used`` / 2**20).
        util_pct: GPU utilisation, %.
        clock_event_reasons: NVML clock-event reason bit mask.
        throttling: :func:`is_throttling` of the mask.
    """

    t_s: float
    power_w: float | None
    temp_c: float | None
    mem_used_mb: float | None
    util_pct: float | None
    clock_event_reasons: int | None
    throttling: bool | None


@dataclass(frozen=True)
class WindowResult:
    """What a :class:`TelemetryWindow` measured.

    Attributes:
        elapsed_s: window length, s (emulated seconds under an emulated clock).
        energy_j: energy drawn by the GPU in the window, J; ``None`` when it could not be
            measured (then ``energy_method`` is ``"none"`` and ``energy_flag`` says why).
        avg_power_w: ``energy_j / elapsed_s``, W.
        energy_method: one of :data:`ENERGY_METHODS`.
        energy_flag: ``None`` for a clean window, else why the window is suspect (e.g.
            ``"counter_went_backwards"``: the counter decreased, so the sampled power
            integral was used instead).
        samples: number of telemetry samples taken (start and end included).
        temp_c_end, temp_c_max: GPU temperature at the end / the highest seen, C.
        power_w_mean: mean sampled board power, W.
        util_pct_mean: mean sampled utilisation, %.
        mem_used_mb_max: highest sampled memory use, MB.
        throttling: any sample showed a power/thermal/slowdown reason; ``None`` when the
            reasons are unsupported.
        clock_event_reasons: OR of every sampled reason mask (``None`` if unsupported).
    """

    elapsed_s: float
    energy_j: float | None
    avg_power_w: float | None
    energy_method: str
    energy_flag: str | None
    samples: int
    temp_c_end: float | None
    temp_c_max: float | None
    power_w_mean: float | None
    util_pct_mean: float | None
    mem_used_mb_max: float | None
    throttling: bool | None
    clock_event_reasons: int | None


class GpuDevice(ABC):
    """One GPU's telemetry. Subclasses implement the ``read_*`` methods.

    Attributes:
        name: the GPU's name (e.g. NVML's ``nvmlDeviceGetName``), used as ``hardware``.
        energy_method: how energy windows are measured (one of :data:`ENERGY_METHODS`).
        power_limit_w: the power limit, W, or ``None`` when unknown.
        power_limit_source: where the limit came from (``"enforced"``, ``"management"``,
            ``"default"``, ``"cli"``, ``"model"`` or ``"none"``).
        provenance: ``"measured"`` for a real GPU, ``"emulated"`` for the emulator.
    """

    name: str = "unknown"
    energy_method: str = "none"
    power_limit_w: float | None = None
    power_limit_source: str = "none"
    provenance: str = "measured"

    @abstractmethod
    def read_energy_mj(self) -> float | None:
        """Cumulative energy counter, mJ (``None`` when the device has no counter)."""

    @abstractmethod
    def read_power_w(self) -> float | None:
        """Current board power, W."""

    @abstractmethod
    def read_temp_c(self) -> float | None:
        """Current GPU temperature, C."""

    @abstractmethod
    def read_mem_used_mb(self) -> float | None:
        """GPU memory in use, MB."""

    @abstractmethod
    def read_util_pct(self) -> float | None:
        """GPU utilisation, %."""

    @abstractmethod
    def read_clock_event_reasons(self) -> int | None:
        """NVML clock-event reason bit mask."""

    def sample(self, clock: Clock) -> TelemetrySample:
        """Read every quantity once; a failing reading is ``None``."""
        reasons = self.read_clock_event_reasons()
        return TelemetrySample(
            t_s=clock.now(),
            power_w=self.read_power_w(),
            temp_c=self.read_temp_c(),
            mem_used_mb=self.read_mem_used_mb(),
            util_pct=self.read_util_pct(),
            clock_event_reasons=reasons,
            throttling=is_throttling(reasons),
        )

    def energy_window_begin(self, key: str) -> object:
        """Start an energy window; returns a token for :meth:`energy_window_end`.

        The default reads the cumulative counter (``energy_method == "counter"``).
        """
        return self.read_energy_mj() if self.energy_method == "counter" else None

    def energy_window_end(self, key: str, token: object) -> tuple[float | None, str | None]:
        """End an energy window.

        Returns:
            ``(energy_j, flag)``: the window's energy in J from the device's own
            mechanism, or ``None`` (the caller then integrates sampled power); ``flag``
            names a bad window (``"counter_went_backwards"``, ``"counter_unreadable"``).
        """
        if self.energy_method != "counter":
            return None, None
        end = self.read_energy_mj()
        if token is None or end is None:
            return None, "counter_unreadable"
        delta_mj = float(end) - float(cast(float, token))  # the counter reading energy_window_begin returned
        if delta_mj < 0:
            return None, "counter_went_backwards"
        return delta_mj / 1000.0, None

    def power_limit_range_w(self) -> PowerLimitRange | None:
        """The limits this GPU accepts (default, min, max in W), or ``None`` when the backend
        cannot set limits."""
        return None

    def power_limit_setting_w(self) -> float | None:
        """The limit *set* on the GPU (what a restore writes back), W; the default is
        :attr:`power_limit_w`. NVML's management limit can be above the enforced one
        (an external cap)."""
        return self.power_limit_w

    def power_limit_lock_path(self) -> Path | None:
        """The file that serialises setting this GPU's limit across processes
        (:class:`~specband.devices.power_limit.PowerLimitLock`), or ``None`` when the
        backend cannot set limits."""
        return None

    def set_power_limit_w(self, watts: float) -> float:
        """Set the GPU's power limit.

        Args:
            watts: the new limit, W (the caller clamps to :meth:`power_limit_range_w`).

        Returns:
            the limit now in force, W (:attr:`power_limit_w` is updated to it).

        Raises:
            PowerLimitError: this backend cannot set limits (the default);
            PowerLimitPermissionError: the process lacks the permission.
        """
        raise PowerLimitError(f"{self.name}: this device backend cannot set power limits")

    def close(self) -> None:  # noqa: B027 (a backend with nothing to release keeps this no-op)
        """Release the backend (e.g. ``nvmlShutdown``). Idempotent."""

    def __enter__(self) -> GpuDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NullDevice(GpuDevice):
    """No telemetry (NVML missing, or ``--device none``): every reading is ``None`` and
    energy is not measured (``energy_method == "none"``); the sweep still runs.

    Args:
        power_limit_w: a power limit given by hand (``--power-limit``), W.
        name: hardware name to report.

    Raises:
        ConfigError: ``power_limit_w`` is not a finite number > 0.
    """

    def __init__(self, power_limit_w: float | None = None, name: str = "unknown") -> None:
        self.name = name
        self.energy_method = "none"
        self.power_limit_w = check_power_limit_w(power_limit_w)
        self.power_limit_source = "cli" if power_limit_w is not None else "none"

    def read_energy_mj(self) -> float | None:
        return None

    def read_power_w(self) -> float | None:
        return None

    def read_temp_c(self) -> float | None:
        return None

    def read_mem_used_mb(self) -> float | None:
        return None

    def read_util_pct(self) -> float | None:
        return None

    def read_clock_event_reasons(self) -> int | None:
        return None


def _integrate_power_j(samples: list[TelemetrySample]) -> float | None:
    """Trapezoid integral of sampled power over time, J; ``None`` with < 2 power samples."""
    points = [(s.t_s, s.power_w) for s in samples if s.power_w is not None]
    if len(points) < 2:
        return None
    total = 0.0
    for (t0, p0), (t1, p1) in itertools.pairwise(points):
        total += 0.5 * (p0 + p1) * max(0.0, t1 - t0)
    return total


@dataclass
class TelemetryWindow:
    """Energy and telemetry around one timed batch.

    Usage::

        window = TelemetryWindow(device, clock)
        window.start()
        ...  # the timed batch
        result = window.stop()

    Args:
        device: the GPU.
        clock: converts real to emulated time (``Clock()`` for a real GPU).
        sample_period_s: real seconds between background samples (NVML power is
            updated every 20-100 ms; laptop GPUs average over about 1 s).
        key: window name (Zeus windows are named).

    The energy of the window is, in order: the device's own mechanism (counter delta or
    Zeus), else the integral of sampled power (``energy_method`` becomes
    ``"power_integration"``), else ``None`` with ``energy_method == "none"``. A counter
    that went backwards is flagged and replaced by the integral, never reported as
    negative energy.
    """

    device: GpuDevice
    clock: Clock = field(default_factory=Clock)
    sample_period_s: float = 0.1
    key: str = "specband-timed-batch"
    _samples: list[TelemetrySample] = field(default_factory=list, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _token: object = field(default=None, init=False, repr=False)
    _t0: float = field(default=0.0, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def start(self) -> None:
        """Take the first sample, open the energy window and start sampling."""
        self._samples = [self.device.sample(self.clock)]
        self._token = self.device.energy_window_begin(self.key)
        self._t0 = self.clock.now()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="specband-telemetry", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.sample_period_s):
            try:
                s = self.device.sample(self.clock)
            except Exception as exc:  # a backend error must not kill the measurement
                warnings.warn(f"telemetry sample failed: {exc}", DeviceWarning, stacklevel=1)
                continue
            with self._lock:
                self._samples.append(s)

    @property
    def active(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._thread is not None

    def stop(self) -> WindowResult:
        """Stop sampling, close the energy window and summarise.

        Raises:
            RuntimeError: :meth:`start` was not called.
        """
        if self._thread is None:
            raise RuntimeError("TelemetryWindow.stop() called before start()")
        self._stop.set()
        self._thread.join()
        self._thread = None
        energy_j, flag = self.device.energy_window_end(self.key, self._token)
        t1 = self.clock.now()
        with self._lock:
            self._samples.append(self.device.sample(self.clock))
            samples = list(self._samples)
        elapsed = max(0.0, t1 - self._t0)
        method = self.device.energy_method
        if energy_j is None:
            energy_j = _integrate_power_j(samples)
            method = "power_integration" if energy_j is not None else "none"
            if energy_j is None and flag is None and self.device.energy_method != "none":
                flag = "no_power_samples"
        avg_power = energy_j / elapsed if energy_j is not None and elapsed > 0 else None

        def values(attr: str) -> list[float]:
            return [getattr(s, attr) for s in samples if getattr(s, attr) is not None]

        temps, powers, utils, mems = values("temp_c"), values("power_w"), values("util_pct"), values("mem_used_mb")
        reasons = [s.clock_event_reasons for s in samples if s.clock_event_reasons is not None]
        mask: int | None = None
        for r in reasons:
            mask = (mask or 0) | int(r)
        return WindowResult(
            elapsed_s=elapsed,
            energy_j=energy_j,
            avg_power_w=avg_power,
            energy_method=method,
            energy_flag=flag,
            samples=len(samples),
            temp_c_end=samples[-1].temp_c,
            temp_c_max=max(temps) if temps else None,
            power_w_mean=sum(powers) / len(powers) if powers else None,
            util_pct_mean=sum(utils) / len(utils) if utils else None,
            mem_used_mb_max=max(mems) if mems else None,
            throttling=is_throttling(mask),
            clock_event_reasons=mask,
        )
