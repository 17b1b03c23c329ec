"""An emulated GPU shared by the emulator servers and the sweep process.

Design: the GPU's state lives in a small JSON *state file* (path in the environment
variable ``SPECBAND_EMULATOR_STATE``, or ``--state-file``), so it persists across server
launches exactly like a real GPU: heat from one run carries over into the next, and the
sweep reads the idle GPU before it launches a server.

The file holds a piecewise-constant-power timeline: the state at ``updated_unix`` (real
wall-clock time) and the power drawn since then. A reader *extrapolates* to now without
writing: ``dt = (now - updated_unix) / time_scale`` emulated seconds at ``power_w``, the
temperature relaxing by the performance model's ``advance_temperature`` and the energy
counter growing by ``power_w * dt``. Only the emulator server that owns the GPU writes
(``owner_pid``): when it loads, decodes, idles and exits. A server that died without
writing (SIGKILL) is detected by its dead ``owner_pid``; readers then treat the GPU as
released (idle power, idle memory) from the last update on.

Writes are atomic (:func:`specband.files.fileio.write_text_atomic`: temporary file +
``os.replace``, not fsynced) and serialised by ``flock`` on the state file's folder
(a lock that leaves no file behind, and that no rename can swap: the state file itself
is replaced at every write); reads never lock.

The time scale applies to everything: ``time_scale`` real seconds per emulated second.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from specband.core.errors import DeviceError
from specband.core.limits import MAX_CONFIG_FILE_BYTES
from specband.devices.base import Clock, GpuDevice, TelemetrySample, is_throttling
from specband.devices.power_limit import PowerLimitRange
from specband.files.fileio import read_text_bounded, write_text_atomic
from specband.files.pathlock import PathLock
from specband.sim.power_capped import model_power_limit_range

__all__ = [
    "EmulatedDevice",
    "EmulatedGpu",
    "GpuState",
    "emulated_power_limit_range",
    "hardware_name",
    "pid_alive",
    "reasons_for",
]

_GPU_IDLE = 0x1
_SW_POWER_CAP = 0x4
_SW_THERMAL_SLOWDOWN = 0x20


def pid_alive(pid: int) -> bool:
    """True when process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"
    except (OSError, ValueError):
        return True


@dataclass(frozen=True)
class GpuState:
    """The emulated GPU at time ``updated_unix``.

    Attributes:
        hardware: performance-model profile name.
        time_scale: real seconds per emulated second.
        updated_unix: real wall-clock time of this state, s since the epoch.
        temp_c: GPU temperature, C.
        power_w: board power drawn from ``updated_unix`` on, W.
        energy_mj: cumulative energy counter, mJ.
        mem_used_mb: memory in use, MB.
        util_pct: utilisation, %.
        clock_event_reasons: NVML clock-event reason mask.
        power_limit_w: the power limit, W.
        idle_power_w: power of the idle GPU, W.
        idle_mem_used_mb: memory used with no server, MB.
        owner_pid: the emulator server holding the GPU, or ``None``.
    """

    hardware: str
    time_scale: float
    updated_unix: float
    temp_c: float
    power_w: float
    energy_mj: float
    mem_used_mb: float
    util_pct: float
    clock_event_reasons: int
    power_limit_w: float
    idle_power_w: float
    idle_mem_used_mb: float = 0.0
    owner_pid: int | None = None

    def released(self) -> GpuState:
        """The same GPU with no server: idle power and memory, no owner."""
        return replace(
            self,
            power_w=self.idle_power_w,
            mem_used_mb=self.idle_mem_used_mb,
            util_pct=0.0,
            clock_event_reasons=_GPU_IDLE,
            owner_pid=None,
        )


class EmulatedGpu:
    """Reads and updates the shared state file (see the module docstring).

    Args:
        path: the state file (created at ambient temperature when missing).
        model: a :class:`~specband.sim.base.PerformanceModel` (its
            ``advance_temperature``, power limit, idle power and ambient temperature).
        hardware: profile name recorded in the file.
        time_scale: real seconds per emulated second; an existing file with another
            scale or hardware is re-based (its current values kept) to these.
        idle_mem_used_mb: memory used with no server loaded, MB.
        now: the wall clock, Unix seconds (:func:`time.time`; the state file is shared
            between processes, so it is the time base; a test passes a fixed one).

    Raises:
        DeviceError: the file exists but is not a valid state, or cannot be written.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        model: Any,
        hardware: str,
        time_scale: float = 1.0,
        idle_mem_used_mb: float = 0.0,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self._now = now
        self.model = model
        self.hardware = hardware
        self.time_scale = Clock(time_scale).time_scale
        self.idle_mem_used_mb = float(idle_mem_used_mb)
        with self._locked():
            state = self._load()
            if state is None:
                created_unix = self._now()
                state = GpuState(
                    hardware=hardware,
                    time_scale=self.time_scale,
                    updated_unix=created_unix,
                    temp_c=float(model.ambient_temp_c),
                    power_w=float(model.idle_power_w),
                    energy_mj=0.0,
                    mem_used_mb=self.idle_mem_used_mb,
                    util_pct=0.0,
                    clock_event_reasons=_GPU_IDLE,
                    power_limit_w=float(model.power_limit_w),
                    idle_power_w=float(model.idle_power_w),
                    idle_mem_used_mb=self.idle_mem_used_mb,
                )
                self._write(state)
            elif state.time_scale != self.time_scale or state.hardware != hardware:
                current = self.extrapolate(state, self._now())
                self._write(
                    replace(
                        current,
                        time_scale=self.time_scale,
                        hardware=hardware,
                        power_limit_w=float(model.power_limit_w),
                        idle_power_w=float(model.idle_power_w),
                    )
                )

    # ------------------------------------------------------------------ file I/O
    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise DeviceError(f"{self.path}: cannot open the emulated GPU state's folder: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _load(self) -> GpuState | None:
        try:
            text = read_text_bounded(
                self.path, limit=MAX_CONFIG_FILE_BYTES, kind="emulated GPU state file", error=DeviceError
            )
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise DeviceError(f"{self.path}: cannot read the emulated GPU state: {exc.strerror}") from None
        try:
            data = json.loads(text)
            data.pop("version", None)
            state = GpuState(**data)
        except (ValueError, TypeError, AttributeError, RecursionError) as exc:
            raise DeviceError(f"{self.path}: not an emulated GPU state file ({type(exc).__name__})") from None
        for name in ("temp_c", "power_w", "energy_mj", "updated_unix", "time_scale"):
            if not isinstance(getattr(state, name), (int, float)) or not math.isfinite(getattr(state, name)):
                raise DeviceError(f"{self.path}: field '{name}' is not a finite number")
        return state

    def _write(self, state: GpuState) -> None:
        # short-lived and rewritten at every state change: atomic, but not fsynced
        payload = {"version": 1, **asdict(state)}
        write_text_atomic(self.path, json.dumps(payload), error=DeviceError, fsync=False)

    # ------------------------------------------------------------------ model
    def extrapolate(self, state: GpuState, now_unix: float) -> GpuState:
        """The state at ``now_unix`` given constant power since ``state.updated_unix``
        (a dead owner releases the GPU at its last update)."""
        if state.owner_pid is not None and state.owner_pid != os.getpid() and not pid_alive(state.owner_pid):
            state = state.released()
        dt = max(0.0, now_unix - state.updated_unix) / state.time_scale
        if dt <= 0:
            return state
        temp = float(self.model.advance_temperature(state.temp_c, state.power_w, dt))
        return replace(
            state,
            updated_unix=now_unix,
            temp_c=temp,
            energy_mj=state.energy_mj + state.power_w * dt * 1000.0,
        )

    def read(self, now_unix: float | None = None) -> GpuState:
        """The current state (extrapolated; nothing is written).

        Raises:
            DeviceError: the state file vanished or is corrupt.
        """
        state = self._load()
        if state is None:
            raise DeviceError(f"{self.path}: the emulated GPU state file is missing")
        return self.extrapolate(state, self._now() if now_unix is None else now_unix)

    def update(self, **changes: Any) -> GpuState:
        """Extrapolate to now, apply ``changes`` (``GpuState`` fields) and write atomically.

        Returns:
            the new state.

        Raises:
            DeviceError: the file cannot be read or written.
        """
        with self._locked():
            state = self._load()
            if state is None:
                raise DeviceError(f"{self.path}: the emulated GPU state file is missing")
            new = replace(self.extrapolate(state, self._now()), **changes)
            self._write(new)
            return new

    def release(self) -> GpuState:
        """The owning server exits: idle power and memory, no owner."""
        with self._locked():
            state = self._load()
            if state is None:
                raise DeviceError(f"{self.path}: the emulated GPU state file is missing")
            new = self.extrapolate(state, self._now()).released()
            self._write(new)
            return new


def hardware_name(model: Any, profile: str) -> str:
    """The hardware name of an emulated GPU, for the ``hardware`` column.

    Args:
        model: the performance model.
        profile: the profile id it was built for (e.g. ``rtx4060-laptop``).

    Returns:
        the model's profile ``hardware`` label (``specband.sim``'s ``HardwareProfile.hardware``,
        e.g. ``RTX4060_Laptop``, the name simulated and published rows carry), else a
        ``hardware`` attribute of the model (a user's factory may set one), else ``profile``.
    """
    for label in (getattr(getattr(model, "profile", None), "hardware", None), getattr(model, "hardware", None)):
        if isinstance(label, str) and label:
            return label
    return profile


class EmulatedDevice(GpuDevice):
    """A :class:`~specband.devices.base.GpuDevice` over the emulated GPU's state file.

    Readings are the state extrapolated to now; the energy counter is in emulated mJ
    (``energy_method == "counter"``), so a window measured with ``Clock(time_scale)``
    gives emulated joules over emulated seconds.

    Args:
        state_path: the state file shared with the emulator servers.
        model: the performance model (the same profile the emulator uses).
        hardware: the performance-model profile id (e.g. ``rtx4060-laptop``).
        time_scale: real seconds per emulated second.
        now: the wall clock (as :class:`EmulatedGpu`).
        held: a lock on the state file this device holds until :meth:`close` (a sweep's:
            :meth:`specband.emulator.spec.EmulatedGpuSpec.open`), or ``None``.

    Attributes:
        name: the hardware name rows carry (:func:`hardware_name`: the profile's
            ``hardware`` label, e.g. ``RTX4060_Laptop``, as simulated and published rows).

    Raises:
        DeviceError: the state file is invalid or cannot be created.
    """

    def __init__(
        self,
        state_path: str | os.PathLike[str],
        model: Any,
        hardware: str,
        time_scale: float = 1.0,
        now: Callable[[], float] = time.time,
        held: PathLock | None = None,
    ) -> None:
        self._held = held
        self.gpu = EmulatedGpu(state_path, model, hardware, time_scale, now=now)
        self.name = hardware_name(model, hardware)
        self.energy_method = "counter"
        self.default_power_limit_w = float(model.power_limit_w)
        self.power_limit_w = float(self.gpu.read().power_limit_w)
        self.power_limit_source = "model" if self.power_limit_w == self.default_power_limit_w else "set"
        self.provenance = "emulated"

    def close(self) -> None:
        """Release the lock on the state file (when this device holds one). Idempotent."""
        if self._held is not None:
            self._held.release()
            self._held = None

    def power_limit_range_w(self) -> PowerLimitRange:
        """The emulated GPU's limits: its profile's limit is the default and the highest; the
        lowest is :data:`~specband.sim.power_capped.MIN_LIMIT_FRACTION` of it, above idle power (a profile
        holds no NVML constraint, so this range is the emulator's own assumption)."""
        return emulated_power_limit_range(self.gpu.model)

    def power_limit_setting_w(self) -> float:
        """The limit in the state file now, W (another process may have set it)."""
        return float(self.gpu.read().power_limit_w)

    def power_limit_lock_path(self) -> Path:
        """``<state file>.power-limit.lock``: the state file is the emulated GPU, so every
        sweep sharing it shares the lock."""
        real = Path(os.path.realpath(self.gpu.path))
        return real.with_name(real.name + ".power-limit.lock")

    def set_power_limit_w(self, watts: float) -> float:
        """Write the limit into the state file: the emulator server launched next runs under
        it (speed falls where the demand exceeds it, :func:`specband.sim.power_capped.with_power_limit`)."""
        limits = self.power_limit_range_w()
        clamped = round(min(limits.max_w, max(limits.min_w, float(watts))), 3)
        self.gpu.update(power_limit_w=clamped)
        self.power_limit_w = clamped
        self.power_limit_source = "set"
        return clamped

    def read_energy_mj(self) -> float | None:
        return self.gpu.read().energy_mj

    def read_power_w(self) -> float | None:
        return self.gpu.read().power_w

    def read_temp_c(self) -> float | None:
        return self.gpu.read().temp_c

    def read_mem_used_mb(self) -> float | None:
        return self.gpu.read().mem_used_mb

    def read_util_pct(self) -> float | None:
        return self.gpu.read().util_pct

    def read_clock_event_reasons(self) -> int | None:
        return self.gpu.read().clock_event_reasons

    def sample(self, clock: Clock) -> TelemetrySample:
        """One consistent reading (the state file is read once)."""
        state = self.gpu.read()
        return TelemetrySample(
            t_s=clock.now(),
            power_w=state.power_w,
            temp_c=state.temp_c,
            mem_used_mb=state.mem_used_mb,
            util_pct=state.util_pct,
            clock_event_reasons=state.clock_event_reasons,
            throttling=is_throttling(state.clock_event_reasons),
        )


def emulated_power_limit_range(model: Any) -> PowerLimitRange:
    """:class:`~specband.devices.power_limit.PowerLimitRange` of an emulated GPU built on
    ``model`` (:func:`specband.sim.power_capped.model_power_limit_range`); reads no state file."""

    return model_power_limit_range(model)


def reasons_for(power_capped: bool, temp_c: float, throttle_temp_c: float, busy: bool) -> int:
    """NVML-style clock-event reasons of the emulated GPU: SwPowerCap when the model
    capped power, SwThermalSlowdown above the throttle temperature, GpuIdle when idle."""
    mask = 0
    if power_capped:
        mask |= _SW_POWER_CAP
    if temp_c > throttle_temp_c:
        mask |= _SW_THERMAL_SLOWDOWN
    if not busy:
        mask |= _GPU_IDLE
    return mask
