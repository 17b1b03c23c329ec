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

* :class:`PowerLimitLock` lets one process at a time set a GPU's limit (a second
  ``sweep --power-limits`` or ``launch --set-power-limit`` on the same GPU is refused:
  its rows would be measured at the other's limits, and the two restores would leave the
  GPU at a swept limit). Its lock file also records, before each limit is set, the limit
  found and the limit being set, so that after a kill -9 the next guard restores the
  original limit, not the low one left behind. The lock files live in :func:`gpu_lock_dir`,
  one folder every process on the machine sees whatever its ``TMPDIR`` (``/run/lock``), not
  the temporary folder: a sweep started with another ``TMPDIR`` passed a lock kept there and
  moved the limit under the first one (hostile trial V16).

The lock's API, for any process that changes a GPU's limit (a sweep, ``launch``, a governor
that holds the limit for a whole run): ``with PowerLimitGuard(device) as guard:`` then
:meth:`PowerLimitGuard.acquire` (take the GPU's lock and find the limit to restore, setting
nothing; optional, :meth:`~PowerLimitGuard.set` does it first), :meth:`~PowerLimitGuard.set`
as often as needed while it is held, and :meth:`~PowerLimitGuard.restore` (also on leaving the
``with`` block, whatever ends it) puts the found limit back, clears the record and releases
the lock.

Errors: :class:`PowerLimitError` (the device cannot set limits: exit 4) and its subclass
:class:`PowerLimitPermissionError` (NVML's ``NVML_ERROR_NO_PERMISSION``: setting a limit
needs root: exit 2), each one line. The NVML backend maps NVML's error codes to these once
(:mod:`specband.devices.nvml`), as Zeus's device layer does.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

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
    "LOCK_DIR_ENV",
    "MAX_POWER_LIMITS",
    "SYSTEM_LOCK_DIRS",
    "PowerLimitBusyError",
    "PowerLimitError",
    "PowerLimitGuard",
    "PowerLimitLock",
    "PowerLimitPermissionError",
    "PowerLimitRange",
    "PowerLimitedDevice",
    "gpu_lock_dir",
    "parse_power_limits",
    "resolve_power_limits",
    "restore_left_limit",
]

#: Most values ``--power-limits`` takes (each multiplies the sweep's grid).
MAX_POWER_LIMITS = 128
#: Environment variable naming the folder of the per-GPU power-limit lock files (default:
#: the first of :data:`SYSTEM_LOCK_DIRS` that exists and this user can write to).
LOCK_DIR_ENV = "SPECBAND_GPU_LOCK_DIR"
#: The machine-wide lock folders tried, in order: ``/run/lock`` (FHS 3.0 and systemd: a
#: tmpfs every user can write to, sticky, and cleared at boot, as a reboot resets the power
#: limit) and ``/var/lock`` (its older name, a link to it on current systems). Neither
#: depends on ``TMPDIR`` or on a service's private ``/tmp``. Without either, the lock files go
#: to the user's state folder (``$XDG_STATE_HOME/specband/gpu-locks``, by default
#: ``~/.local/state/specband/gpu-locks``), which other users do not see.
SYSTEM_LOCK_DIRS: tuple[Path, ...] = (Path("/run/lock"), Path("/var/lock"))
#: Two limits closer than this are the same setting, W (NVML sets whole mW; a profile's
#: emulated limit is rounded to 1 mW).
SAME_LIMIT_TOL_W = 0.5


def gpu_lock_dir() -> Path:
    """The folder of the per-GPU lock files: :data:`LOCK_DIR_ENV` when set, else the first of
    :data:`SYSTEM_LOCK_DIRS` that is a folder this user can write to, else the user's state
    folder; never the temporary folder (``TMPDIR`` differs between processes that share a GPU:
    containers, systemd's ``PrivateTmp``, a set ``TMPDIR``)."""
    given = os.environ.get(LOCK_DIR_ENV)
    if given:
        return Path(given)
    for folder in SYSTEM_LOCK_DIRS:
        if folder.is_dir() and os.access(folder, os.W_OK | os.X_OK):
            return folder
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "specband" / "gpu-locks"


class PowerLimitError(DeviceError):
    """The device cannot set its power limit (not supported, a value NVML refused): a
    device failure, exit 4."""


class PowerLimitBusyError(ConfigError):
    """Another live process holds the GPU's :class:`PowerLimitLock` (one power-limit sweep
    or launch per GPU at a time): exit 2, nothing set."""


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


class PowerLimitLock:
    """An exclusive ``flock`` on a GPU's lock file, held while a process sets its power
    limit, and the file's record of what to restore.

    The record (JSON: ``pid``, ``gpu``, ``original_w``, ``set_w``) is written and fsynced
    *before* each limit is set; :meth:`clear` empties it once the original is back. The
    kernel drops the ``flock`` of a killed process, but the record stays: the next holder
    finds it in :attr:`left`.

    Args:
        path: the lock file (:meth:`~specband.devices.base.GpuDevice.power_limit_lock_path`).
        gpu: the GPU's name for messages.

    Raises:
        PowerLimitBusyError: another live process holds it.
        PowerLimitError: the lock file cannot be created or locked.
    """

    def __init__(self, path: Path, gpu: str) -> None:
        self.path = Path(path)
        self.gpu = gpu
        self.writable = True
        cloexec = getattr(os, "O_CLOEXEC", 0)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | cloexec, 0o666)
            except PermissionError:
                # another user's lock file (or fs.protected_regular on a sticky /tmp): a
                # read-only descriptor still takes the flock; nothing can be recorded then
                fd = os.open(self.path, os.O_RDONLY | cloexec)
                self.writable = False
        except OSError as exc:
            raise PowerLimitError(
                f"{gpu}: cannot create the power-limit lock {self.path} ({exc.strerror or exc})"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_record(fd).get("pid")
            os.close(fd)
            raise PowerLimitBusyError(
                f"{gpu}: another specband process (pid {holder or 'unknown'}) is setting this GPU's power limit "
                f"(lock {self.path}); one power-limit sweep or launch per GPU at a time"
            ) from None
        except OSError as exc:
            os.close(fd)
            raise PowerLimitError(f"{gpu}: cannot lock {self.path} ({exc.strerror or exc})") from None
        self._fd: int | None = fd
        #: the record a previous holder left (it was killed before restoring), else ``{}``
        self.left: dict[str, Any] = _read_record(fd)

    def record(self, original_w: float, set_w: float) -> None:
        """Durably note the limit to restore and the one about to be set (nothing when the
        lock file is another user's and read-only here: :attr:`writable` is False).

        Raises:
            PowerLimitError: the record cannot be written (nothing is set then).
        """
        if self._fd is None or not self.writable:
            return
        text = json.dumps({"pid": os.getpid(), "gpu": self.gpu, "original_w": original_w, "set_w": set_w})
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, (text + "\n").encode(), 0)
            os.fsync(self._fd)
        except OSError as exc:
            raise PowerLimitError(
                f"{self.gpu}: cannot record the power limit to restore in {self.path} ({exc.strerror or exc})"
            ) from None

    def clear(self) -> None:
        """Empty the record (the original limit is back)."""
        if self._fd is not None and self.writable:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
                os.fsync(self._fd)

    def release(self) -> None:
        """Unlock (the record stays as it is). Idempotent."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _read_record(fd: int) -> dict[str, Any]:
    """The JSON record of a lock file (``{}`` when empty or unreadable)."""
    try:
        data = os.pread(fd, 4096, 0)
        value = json.loads(data.decode("utf-8")) if data.strip() else {}
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def _finite(value: Any) -> float | None:
    return (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else None
    )


class PowerLimitGuard:
    """Sets power limits on one device and restores the limit it found on exit.

    Usage::

        with PowerLimitGuard(device) as guard:
            guard.set(300.0)
            ...  # runs at 300 W
        # the original limit is back (also after an exception, Ctrl-C or SIGTERM)

    The first :meth:`set` takes the device's :class:`PowerLimitLock` (when the device
    names one: ``power_limit_lock_path()``), so a second guard on the same GPU, in any
    process, is refused until this one has restored the limit. The limit found is the
    limit *set* on the GPU (``power_limit_setting_w()``: NVML's management limit, which an
    external cap may keep above the enforced one), unless the lock's record shows that a
    killed guard left the GPU at the limit it was setting: the original that guard recorded
    is restored then (with a note on stderr).

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
        self._lock: PowerLimitLock | None = None

    def _setting_w(self) -> float | None:
        read = getattr(self.device, "power_limit_setting_w", None)
        return read() if callable(read) else self.device.power_limit_w

    def _take_lock(self) -> None:
        where = getattr(self.device, "power_limit_lock_path", None)
        path = where() if callable(where) else None
        if path is not None:
            self._lock = PowerLimitLock(path, self.device.name)

    def _find_original(self) -> float:
        found = self._setting_w()
        left = self._lock.left if self._lock is not None else {}
        left_original, left_set = _finite(left.get("original_w")), _finite(left.get("set_w"))
        if (
            found is not None
            and left_original is not None
            and left_set is not None
            and abs(found - left_set) <= SAME_LIMIT_TOL_W
            and abs(found - left_original) > SAME_LIMIT_TOL_W
        ):
            print(
                f"note: {self.device.name} is at {found:g} W, the limit a specband process (pid "
                f"{left.get('pid', 'unknown')}) set and did not restore (it was killed); {left_original:g} W, "
                "the limit it found, is restored at the end",
                file=sys.stderr,
            )
            return left_original
        if found is None:
            raise PowerLimitError(f"{self.device.name}: the current power limit is unknown, so it cannot be restored")
        return found

    def acquire(self) -> float:
        """Take the GPU's lock (when the device names one) and find the limit to restore,
        setting nothing; a no-op once done. A process that holds the limit for a whole run
        calls it first, so that no other process can take the GPU between its sets.

        Returns:
            the limit :meth:`restore` will put back, W (:attr:`original_w`).

        Raises:
            PowerLimitBusyError: another process holds this GPU's lock.
            PowerLimitError: the lock cannot be taken, or the current limit is unknown.
        """
        if self.original_w is None:
            self._take_lock()
            try:
                self.original_w = self._find_original()
            except BaseException:
                self._release()
                raise
        return self.original_w

    def set(self, watts: float) -> float:
        """Set the limit (a no-op when it is already set), after :meth:`acquire`.

        Returns:
            the limit the device reports after setting, W.

        Raises:
            PowerLimitBusyError: another process is setting this GPU's limit.
            PowerLimitError, PowerLimitPermissionError: as the device's ``set_power_limit_w``.
        """
        if self.current_w is not None and math.isclose(self.current_w, watts, abs_tol=5e-4):
            return self.current_w
        self.acquire()
        assert self.original_w is not None  # acquire found it
        if self._lock is not None:
            self._lock.record(self.original_w, float(watts))
        self.current_w = self.device.set_power_limit_w(watts)
        return self.current_w

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def restore(self) -> None:
        """Put the original limit back (once; a failure is a warning, never hides the
        exception that ended the block), clear the lock's record and release the lock (also
        after an :meth:`acquire` with no :meth:`set`: nothing was changed, the lock is released)."""
        if self.original_w is None or self.current_w is None:
            self._release()
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
        else:
            if self._lock is not None:
                self._lock.clear()
        finally:
            self._release()

    def __enter__(self) -> PowerLimitGuard:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.restore()


def restore_left_limit(device: PowerLimitedDevice) -> str:
    """Put back, by hand, the limit a killed holder of the GPU's lock left (``specband govern
    --restore``): the lock is taken (refused while a live process holds it), and when the GPU
    is still at the limit the record says was being set, the original it records is set again
    and the record cleared. A GPU whose limit was changed since (by hand) keeps it.

    Returns:
        one line saying what was done.

    Raises:
        PowerLimitBusyError: a live process holds the lock.
        PowerLimitError, PowerLimitPermissionError: the device cannot set limits, or NVML's answer.
    """
    where = getattr(device, "power_limit_lock_path", None)
    path = where() if callable(where) else None
    if path is None:
        raise PowerLimitError(f"{device.name}: this device backend cannot set power limits")
    lock = PowerLimitLock(path, device.name)
    try:
        read = getattr(device, "power_limit_setting_w", None)
        found = read() if callable(read) else device.power_limit_w
        left = lock.left
        original, set_w = _finite(left.get("original_w")), _finite(left.get("set_w"))
        who = f"pid {left.get('pid', 'unknown')}"
        if original is None or set_w is None:
            return f"{device.name}: nothing to restore (no record left in {path}); its limit is {found} W"
        if found is not None and abs(found - set_w) <= SAME_LIMIT_TOL_W and abs(found - original) > SAME_LIMIT_TOL_W:
            lock.record(original, original)
            device.set_power_limit_w(original)
            lock.clear()
            return f"{device.name}: restored {original:g} W ({who} set {set_w:g} W and did not restore it)"
        lock.clear()
        if found is not None and abs(found - original) <= SAME_LIMIT_TOL_W:
            return f"{device.name}: already at {original:g} W, the limit {who} had found; record cleared"
        return (
            f"{device.name}: at {found} W, not the {set_w:g} W {who} was setting (changed since): kept; record cleared"
        )
    finally:
        lock.release()
