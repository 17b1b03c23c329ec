"""One sweep at a time per output file: :class:`SweepLock`, and the folders it makes.

The lock is taken before a sweep touches anything; the folders it (or the server-log
folder) creates are removed again when they are left empty (:func:`make_dirs`,
:func:`remove_empty_dirs`), so that a refused sweep leaves its folder as it was.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Sequence
from pathlib import Path

from specband.core.errors import ConfigError, HarnessError

__all__ = ["SweepBusyError", "SweepLock", "make_dirs", "remove_empty_dirs"]


class SweepBusyError(ConfigError):
    """Another sweep is writing the same output file (it holds its :class:`SweepLock`)."""


class SweepLock:
    """An exclusive, non-blocking lock on a sweep's output file, held for the sweep's
    whole run so that two sweeps never append to one file (or measure on each other's
    servers).

    It goes by the file itself, not its name: the output path is resolved first
    (symlinks, ``..``, ``//``), so every alias of one file locks the same ``<real
    out>.lock``; and when the output file exists, the file itself (its inode, so a hard
    link is the same file too) is ``flock``-ed as well.

    It is an advisory ``fcntl.flock`` on ``<real out>.lock``, which holds the owner's pid.
    The kernel drops a ``flock`` when its process dies, so a lock file left by a killed
    sweep (even by SIGKILL) is stale and simply taken over. :meth:`release` removes the
    file while still holding the lock; :meth:`acquire` checks after locking that the file
    it locked is still the one at the path (else it was removed meanwhile and it tries
    again), so two sweeps never both hold it. The folder of ``out`` is created if missing
    (and removed again by :meth:`release` if it is then empty).

    Args:
        out_path: the sweep's output file.

    Use as a context manager.
    """

    #: Real seconds to wait for the holder to write its pid into a fresh lock file.
    PID_WAIT_S = 1.0

    def __init__(self, out_path: Path) -> None:
        self.out_path = Path(out_path)
        self.path = self._lock_path()
        self._fd: int | None = None
        self._file_fd: int | None = None
        self._created_dirs: list[Path] = []

    def _lock_path(self) -> Path:
        real = Path(os.path.realpath(self.out_path))
        return real.with_name(real.name + ".lock")

    def acquire(self) -> None:
        """Take the lock.

        Raises:
            SweepBusyError: another live sweep holds it
                (``"<out> is being written by another sweep (pid N)"``).
            HarnessError: the lock file cannot be created
                (``"<out>: cannot write (<reason>)"``); nothing is left behind.
        """
        parent = self.out_path.parent
        if parent.exists() and not parent.is_dir():
            raise HarnessError(f"{self.out_path}: cannot write ({parent} is not a folder)")
        try:
            self._created_dirs = make_dirs(parent)
        except OSError as exc:
            raise HarnessError(f"{self.out_path}: cannot write ({exc.strerror or exc})") from None
        self.path = self._lock_path()  # resolved again now that its folders exist
        try:
            self._fd = self._lock()
        except BaseException:
            remove_empty_dirs(self._created_dirs)
            raise
        try:
            self._file_fd = self._lock_file_itself()
        except BaseException:
            self.release()
            raise
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
            os.write(self._fd, f"{os.getpid()}\n".encode())

    def _lock(self) -> int:
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            except OSError as exc:
                raise HarnessError(f"{self.out_path}: cannot write ({exc.strerror or exc})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._holder(fd)
                os.close(fd)
                raise SweepBusyError(
                    f"{self.out_path} is being written by another sweep (pid {holder or 'unknown'})"
                ) from None
            except OSError as exc:
                os.close(fd)
                raise HarnessError(f"{self.out_path}: cannot lock ({exc.strerror or exc})") from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)  # released and removed by its holder meanwhile: lock the new file

    def _lock_file_itself(self) -> int | None:
        """``flock`` the existing output file (its inode: a hard link is the same file);
        ``None`` when there is none yet (its lock file then covers every alias)."""
        try:
            fd = os.open(self.out_path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                return None  # the writer refuses it with one line
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SweepBusyError(
                f"{self.out_path} is being written by another sweep (the same file under another name)"
            ) from None
        except OSError:
            os.close(fd)
            return None
        return fd

    def _holder(self, fd: int) -> str:
        """The pid in the lock file (its holder writes it right after locking)."""
        deadline = time.monotonic() + self.PID_WAIT_S
        while True:
            with contextlib.suppress(OSError):
                text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
                if text:
                    return text
            if time.monotonic() >= deadline:
                return ""
            time.sleep(0.02)

    def release(self) -> None:
        """Remove the lock file and unlock; remove the folders :meth:`acquire` created if
        they are empty. Idempotent."""
        if self._fd is None:
            return
        if self._file_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._file_fd)
            self._file_fd = None
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = None
        remove_empty_dirs(self._created_dirs)
        self._created_dirs = []

    def __enter__(self) -> SweepLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def make_dirs(path: Path) -> list[Path]:
    """Create ``path`` and its missing parents; return those created, deepest first.

    Raises:
        OSError: one cannot be created (those created before are removed again).
    """
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    created: list[Path] = []
    try:
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:
                if not folder.is_dir():
                    raise
                continue
            created.append(folder)
    except OSError:
        remove_empty_dirs(created[::-1])
        raise
    return created[::-1]


def remove_empty_dirs(folders: Sequence[Path]) -> None:
    """Remove each folder (deepest first) if it is empty."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()
