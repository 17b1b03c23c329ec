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
    out>.lock``; and the output file itself is ``flock``-ed as well (its inode: a hard
    link, or the same file seen through a bind mount, is the same file). A fresh sweep's
    output is created (empty, exclusively) when the lock is taken, so that an alias made
    of it later is caught too; :meth:`release` removes it again while it is still empty.
    After the sweep replaces its output (dropping a killed sweep's partial last line),
    :meth:`relock_output` locks the new file.

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
        self._created_out: tuple[int, int] | None = None  # (st_dev, st_ino) of an output this lock created
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
        """``flock`` the output file (its inode: a hard link is the same file), creating it
        empty when there is none yet (``O_EXCL``: never through a symlink); ``None`` when
        it is not a regular file (the writer refuses it with one line) or cannot be opened."""
        cloexec = getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.out_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | cloexec, 0o666)
            st = os.fstat(fd)
            self._created_out = (st.st_dev, st.st_ino)
        except FileExistsError:
            try:
                fd = os.open(self.out_path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | cloexec)
            except OSError:
                return None
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

    def relock_output(self) -> None:
        """Lock the output file again after the sweep replaced it (a new inode), keeping
        the old lock until the new one is held.

        Raises:
            SweepBusyError: another sweep holds the new file (it made an alias of it).
        """
        if self._fd is None:
            return
        fd = self._lock_file_itself()
        if self._file_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._file_fd)
        self._file_fd = fd

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
        self._remove_created_output()
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

    def _remove_created_output(self) -> None:
        """Remove the output :meth:`acquire` created if it is still that empty file (a
        sweep refused or stopped before its first row leaves no file behind)."""
        created, self._created_out = self._created_out, None
        if created is None:
            return
        with contextlib.suppress(OSError):
            st = os.stat(self.out_path, follow_symlinks=False)
            if (st.st_dev, st.st_ino) == created and st.st_size == 0 and stat.S_ISREG(st.st_mode):
                os.unlink(self.out_path)

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
