"""One writer at a time per path: :class:`PathLock`, an exclusive, non-blocking ``flock`` on
``<real path>.lock``, held while a command writes (or runs on) the path.

It goes by the path resolved (symlinks, ``..``, ``//``, a trailing ``/``), so every spelling
of one folder or file locks the same lock file: ``train --out tm``, ``--out $PWD/tm/`` and
``--out LINK`` (a symlink to ``tm``) are one (hostile trial V12: two concurrent
``train --force`` into one folder both said ``wrote tm`` and one's folder was silently gone);
two sweeps naming one emulated GPU state file are one (N52). The kernel drops a ``flock``
when its process dies, so a lock file left by a killed process is simply taken over;
:meth:`PathLock.release` removes the file while still holding it, and :meth:`PathLock.acquire`
checks after locking that the file it locked is still the one at the path (else it was
removed meanwhile, and it tries again), so two processes never both hold it. The same scheme
as a sweep's lock on its output (:class:`specband.harness.sweeplock.SweepLock`, which also
locks the output's inode).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from specband.core.errors import ConfigError

__all__ = ["PathBusyError", "PathLock"]


class PathBusyError(ConfigError):
    """Another live process holds the path's :class:`PathLock`: one line, exit 2, nothing
    written."""


class PathLock:
    """An exclusive lock on ``<real path>.lock`` (see the module docstring).

    Args:
        path: the path written (a folder or a file; it need not exist yet).
        busy: what the error says the holder is doing, e.g. ``"being written by another
            specband train"``.

    Use as a context manager, or :meth:`acquire` then :meth:`release`.
    """

    def __init__(self, path: str | Path, busy: str) -> None:
        self.given = Path(path)
        real = Path(os.path.realpath(self.given))
        self.path = real.with_name(real.name + ".lock")
        self.busy = busy
        self._fd: int | None = None

    def acquire(self) -> PathLock:
        """Take the lock (its folder must exist).

        Raises:
            PathBusyError: another live process holds it (``"<path> is <busy> (pid N)"``).
            ConfigError: the lock file cannot be created (``"<path>: cannot lock (<reason>)"``).
        """
        cloexec = getattr(os, "O_CLOEXEC", 0)
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | cloexec, 0o644)
            except OSError as exc:
                raise ConfigError(f"{self.given}: cannot lock ({exc.strerror or exc})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise PathBusyError(f"{self.given} is {self.busy} (pid {holder or 'unknown'})") from None
            except OSError as exc:
                os.close(fd)
                raise ConfigError(f"{self.given}: cannot lock ({exc.strerror or exc})") from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # removed by its holder meanwhile: lock the new file
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file and unlock. Idempotent."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> PathLock:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _holder(fd: int, wait_s: float = 1.0) -> str:
    """The pid in a held lock file (its holder writes it right after locking: waited for up to
    ``wait_s`` real seconds), or ``""``."""
    deadline = time.monotonic() + wait_s
    while True:
        with contextlib.suppress(OSError):
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            if text:
                return text
        if time.monotonic() >= deadline:
            return ""
        time.sleep(0.02)
