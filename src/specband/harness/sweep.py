"""The sweep: every (batch size, action) of the grid, ``repeats`` times, one JSONL row each.

Grid and identity: ``index`` is the position of ``(batch_size, action)`` in the
*bs-major* grid (``for bs in batch_sizes: for action in actions``, the nesting of
sglang's ``bench_speculative.py``), so index ``i`` means the same configuration in every
file with the same grid; ``repeat`` is the 0-based pass number. Repeats run as full
passes (pass 0 over the whole grid, then pass 1, ...) so that they land at different
thermal states.

Execution order: bs-major, one server launch per run (as upstream). With
``one_launch_per_config`` the order is config-major: one server per action (launched
with ``--cuda-graph-max-bs`` and ``--max-running-requests`` set to the largest batch size
still to run) serves every batch size in increasing order; if that launch fails even at
the retry fraction, those runs fall back to one launch each. Rows keep their bs-major
``index``. In that mode ``gpu_mem_used_mb_before`` / ``gpu_util_pct_before`` are read
before the shared launch and ``gpu_temp_c_before`` right before each batch size's warm-up.

Durability: rows are appended to the output file, flushed and fsynced one by one; a
file that ends in a partial line (the sweep was killed mid-write) has that line dropped
on ``resume`` (rewritten atomically). ``resume`` skips every ``(index, repeat)`` already in
the file (error rows included); without it an existing non-empty file is refused.
One sweep at a time per output file: :class:`SweepLock` (``flock`` on ``<out>.lock``)
refuses a second one before it touches anything. Every check (existing file, resume
compatibility, port free, log folder writable) runs before the emulated GPU state, the
log folder or the output is written, so a refused sweep leaves its folder as it was.
A launch that fails is retried once at ``retry_mem_fraction``; a run that still fails
becomes an error row. A server command that cannot be run at all
(:class:`~specband.harness.failures.LauncherError`: not found, not executable, exit status
126/127 before ``/health``, ``python -m`` of a module that is not installed, ``python``
of a script that does not exist) and a command line sglang refuses
(:class:`~specband.harness.failures.ServerArgsError`: its parser's ``error:``, the same for
every action) are configuration errors: the sweep stops at once, writing no row for it (rows already in the
file stay; a file this sweep created and left empty is removed). Ctrl-C and SIGTERM stop
the running server (without waiting for a request in flight) and leave the file with complete
rows only; they are turned into
``KeyboardInterrupt`` at safe points only (:mod:`specband.harness.interrupts`: never
inside an import, a server's start-up bookkeeping or a row's write).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from specband.actions import ACTIONS, Action
from specband.devices.base import Clock, GpuDevice
from specband.errors import ConfigError, DataError, HarnessError
from specband.fileio import read_bytes_bounded, write_bytes_atomic
from specband.harness.fleet import WorkerSetup, execute_on_pool
from specband.harness.interrupts import deferred, interrupts_as_keyboard_interrupt
from specband.harness.pipeline import (
    DEFAULT_BATCH_SIZES,
    GridPoint,
    LaunchExecutor,
    NoReporter,
    RowSink,
    SweepPlan,
    SweepReporter,
    SweepSummary,
    grid,
)
from specband.harness.procfs import wait_port_free
from specband.harness.runner import MeasureSettings
from specband.harness.shards import ShardSpec, shard_plan, shard_runs
from specband.harness.workers import LocalGpuPool, WorkerPool
from specband.jsonl import parse_jsonl
from specband.limits import MAX_DATA_FILE_BYTES
from specband.record import row_error_class

__all__ = [
    "RowWriter",
    "SweepBusyError",
    "SweepLock",
    "check_resumable",
    "check_same_logging",
    "execute_plan",
    "existing_rows",
    "parse_rows",
    "planned_sweep",
    "read_rows_for_resume",
    "run_sweep",
]


def read_rows_for_resume(path: Path) -> list[dict[str, Any]]:
    """Rows already in ``path``; a trailing partial line (killed mid-write) is dropped
    and the file rewritten atomically without it.

    Raises:
        DataError: a complete line that is not a JSON object, or a repeated
            ``(index, repeat)``.
        HarnessError: the file cannot be read (``"<path>: cannot read (<reason>)"``, e.g.
            a folder) or rewritten (``"<path>: cannot write (<reason>)"``; it is left as it
            was).
    """
    numbered, complete = parse_rows(path)
    if complete is not None:
        write_bytes_atomic(path, complete, error=HarnessError)
    return [row for _, row in numbered]


def parse_rows(path: Path, *, verb: str = "resume") -> tuple[list[tuple[int, dict[str, Any]]], bytes | None]:
    """``(line number, row)`` of the rows already in ``path`` (none when it does not
    exist), read with :func:`specband.jsonl.parse_jsonl` and without writing anything
    (``sweep --resume`` and ``merge`` read sweep files here; ``verb`` ends a bad line's
    message: ``"; cannot resume"``).

    Returns:
        ``(numbered, complete)``: ``complete`` is the file's content without a trailing
        partial line when it ends in one (the file must then be rewritten before
        appending), else ``None``.

    Raises:
        DataError, HarnessError: as :func:`read_rows_for_resume` (cannot read).
    """
    try:
        data = read_bytes_bounded(path, limit=MAX_DATA_FILE_BYTES, kind="sweep file", error=HarnessError)
    except FileNotFoundError:
        return [], None
    except OSError as exc:  # a folder, no permission, ...
        raise HarnessError(f"{path}: cannot read ({exc.strerror or exc})") from None
    complete, _, partial = data.rpartition(b"\n")
    rewrite = (complete + b"\n" if complete else b"") if partial.strip() else None
    numbered = parse_jsonl(complete.decode("utf-8", "replace"), path, objects=True, why=f"; cannot {verb}")
    seen: dict[tuple[Any, Any], int] = {}
    for lineno, row in numbered:
        key = (row.get("index"), row.get("repeat"))
        if key in seen:
            raise DataError(
                f"(index, repeat) = {key} already on line {seen[key]}", path=path, line=lineno, field="index"
            )
        seen[key] = lineno
    return numbered, rewrite


def _file_bytes(path: Path) -> bytes:
    try:
        return read_bytes_bounded(path, limit=MAX_DATA_FILE_BYTES, kind="sweep file", error=HarnessError)
    except OSError as exc:
        raise HarnessError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _without_lines(data: bytes, drop: set[int]) -> bytes:
    """``data`` without its (1-based) lines in ``drop``."""
    lines = data.split(b"\n")
    kept = [line for n, line in enumerate(lines, start=1) if n not in drop]
    return b"\n".join(kept)


def existing_rows(path: Path) -> list[dict[str, Any]]:
    """The complete rows already in ``path`` (none when it does not exist), reading only.

    Raises:
        DataError, HarnessError: as :func:`read_rows_for_resume` (cannot read).
    """
    numbered, _ = parse_rows(path)
    return [row for _, row in numbered]


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
            self._created_dirs = _make_dirs(parent)
        except OSError as exc:
            raise HarnessError(f"{self.out_path}: cannot write ({exc.strerror or exc})") from None
        self.path = self._lock_path()  # resolved again now that its folders exist
        try:
            self._fd = self._lock()
        except BaseException:
            _remove_empty_dirs(self._created_dirs)
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
        _remove_empty_dirs(self._created_dirs)
        self._created_dirs = []

    def __enter__(self) -> SweepLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _make_dirs(path: Path) -> list[Path]:
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
        _remove_empty_dirs(created[::-1])
        raise
    return created[::-1]


def _remove_empty_dirs(folders: Sequence[Path]) -> None:
    """Remove each folder (deepest first) if it is empty."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


class RowWriter:
    """Appends JSON rows to a JSONL file, flushing and fsyncing after each row.

    Attributes:
        path: the file.
        created: True when this writer created the file (it did not exist before).
        rows: rows appended by this writer.

    Raises:
        HarnessError: the file cannot be opened or written
            (``"<path>: cannot write (<reason>)"``).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows = 0
        new = not path.exists()
        if path.parent.exists() and not path.parent.is_dir():
            raise HarnessError(f"{path}: cannot write ({path.parent} is not a folder)")
        from specband.fileio import replace_target

        replace_target(path, error=HarnessError)  # appends to a regular file only (never a FIFO or device)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 (held open for every row; closed in close())
        except OSError as exc:
            raise HarnessError(f"{path}: cannot write ({exc.strerror or exc})") from None
        self.created = new
        if new:
            try:
                dir_fd = os.open(str(path.parent), os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
            except OSError:
                pass

    def append(self, row: dict[str, Any]) -> None:
        """Write one row as one line (no NaN or Infinity), flush and fsync; Ctrl-C and
        SIGTERM wait until the row is written (:func:`~specband.harness.interrupts.deferred`)."""
        line = json.dumps(row, allow_nan=False) + "\n"
        with deferred():
            try:
                self._fh.write(line)
                self._fh.flush()
                os.fsync(self._fh.fileno())
            except OSError as exc:
                raise HarnessError(f"{self.path}: cannot write a row ({exc.strerror or exc})") from None
            self.rows += 1

    def close(self) -> None:
        """Close the file. A flush that fails here (the disk filled while a row was being
        written: :meth:`append` already raised for it) is not raised a second time; every
        row before it was fsynced, and a partial last line is dropped on ``--resume``."""
        try:
            self._fh.close()
        except OSError:
            with contextlib.suppress(OSError, ValueError):
                os.close(self._fh.fileno())

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        """Close; after an error (not an interrupt) before the first row, remove the file
        this writer created (:meth:`discard_if_unused`)."""
        if exc_type is not None and issubclass(exc_type, Exception):
            self.discard_if_unused()
        else:
            self.close()

    def discard_if_unused(self) -> None:
        """Close, and remove the file if this writer created it and wrote no row (a sweep
        that fails before its first row leaves no empty file behind)."""
        self.close()
        if self.created and self.rows == 0:
            with contextlib.suppress(OSError):
                if self.path.stat().st_size == 0:
                    self.path.unlink()


def run_sweep(  # noqa: PLR0913
    settings: MeasureSettings,
    device: GpuDevice | Callable[[], GpuDevice],
    out_path: Path,
    *,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    actions: Sequence[Action] = ACTIONS,
    repeats: int = 3,
    resume: bool = False,
    one_launch_per_config: bool = False,
    clock: Clock | None = None,
    reporter: SweepReporter | None = None,
    allow_rope_mismatch: bool = False,
    shard: ShardSpec | None = None,
    pool: WorkerPool | None = None,
    setup: WorkerSetup | None = None,
    adaptive: bool = False,
    power_limits_w: Sequence[float] | None = None,
) -> SweepSummary:
    """Run (or resume) a sweep and write its rows to ``out_path``.

    The sweep holds a :class:`SweepLock` on ``out_path`` for its whole run, taken before
    anything else (a server, the device, the output or the log folder) is touched: a
    second sweep on the same file is refused at once. Then, writing nothing, it checks the
    existing file (``resume`` needed, same target, draft and grid) and that the server
    port is free; then it creates the log folder (checking that it can write there), and
    only then drops a partial last line, opens the device and appends rows. A sweep
    refused by any of these checks leaves the folder as it was: the lock file, and the
    folders created for the lock or the logs, are removed again (a log folder this sweep
    created is removed whenever it is left empty).

    Args:
        settings: launch and measurement settings.
        device: the GPU's telemetry, or a function that opens it: it is called once the
            lock is held and every check passed (so that a refused sweep touches no
            device, e.g. creates no emulated GPU state file), and the device it returns
            is closed when the sweep ends.
        out_path: the JSONL file.
        batch_sizes, actions: the grid (bs-major).
        power_limits_w: GPU power limits in W (``--power-limits``, already clamped to the
            GPU's range): the grid is run at each, limit-major; each is set through the
            device before the runs at it and the limit found is restored when the sweep
            ends, however it ends (Ctrl-C, SIGTERM, an error). One local GPU only.
        repeats: full passes over the grid.
        resume: skip ``(index, repeat)`` rows already in the file.
        one_launch_per_config: one server per action for all batch sizes.
        clock: time base (``Clock(time_scale)`` for the emulator).
        reporter: progress callbacks.
        allow_rope_mismatch: launch even when the draft's RoPE settings differ from the
            target's (:func:`specband.pairchecks.check_pair_before_launch`).
        shard: measure only this shard's runs (:mod:`specband.harness.shards`, computed
            over the whole sweep); the others count neither as done nor as skipped.
        pool, setup: run the units on ``pool``'s workers, each with the executor
            ``setup`` builds (:mod:`specband.harness.fleet`); ``device`` is then not
            opened, and the ports checked free are ``settings``'s and the next
            ``len(pool.gpus) - 1`` for a local pool.
        adaptive: adaptive repeats (:func:`specband.harness.adaptive.run_adaptive`):
            pass 0 measures every run, later passes only the configs that may still be
            the pick; rows get a ``propensity`` column. A file's rows are all adaptive or
            all uniform (``resume`` refuses to mix them).

    Returns:
        the :class:`SweepSummary`.

    Raises:
        ConfigError: bad grid or repeats, or an existing file without ``resume``, or a
            file from another target/draft or another grid, or ``out_path`` is a folder,
            or ``settings.log_dir`` is a file.
        SweepBusyError: another sweep is writing ``out_path``.
        DataError: the existing file cannot be resumed.
        HarnessError: ``out_path`` cannot be read or written, or the log folder cannot
            be created (nothing is created then); a server log cannot be written.
        PortInUseError: the server port is taken by something else (at the start, after
            ``settings.port_wait_s``, or before a launch).
        LauncherError: the server command cannot be run at all.
        KeyboardInterrupt: Ctrl-C or SIGTERM (after the server was stopped).
    """
    clock = clock or Clock()
    reporter = reporter or NoReporter()
    if repeats <= 0:
        raise ConfigError(f"--repeats must be > 0, got {repeats}")
    points = grid(batch_sizes, actions, power_limits_w)
    if power_limits_w and (pool is not None or adaptive):
        raise ConfigError("--power-limits runs on one local GPU: not with --gpus, --ray or --adaptive")
    if pool is not None:
        from specband.harness.workers import check_pool_env

        check_pool_env(settings.server.env)
    if out_path.is_dir():
        raise ConfigError(f"--out {out_path}: is a folder; name a file (e.g. {out_path / 'sweep.jsonl'})")
    if settings.log_dir.exists() and not settings.log_dir.is_dir():
        raise ConfigError(f"--log-dir {settings.log_dir}: is a file, not a folder")
    from specband.pairchecks import check_pair_before_launch

    check_pair_before_launch(
        settings.server.model_path, settings.server.draft_model_path, allow_rope_mismatch=allow_rope_mismatch
    )
    with interrupts_as_keyboard_interrupt(), SweepLock(out_path):
        # every check first, writing nothing: a refused sweep leaves the folder as it was
        numbered, complete = parse_rows(out_path)
        existing = [row for _, row in numbered]
        plan, mine = planned_sweep(
            existing,
            SweepPlan(tuple(points), repeats, tuple(actions), one_launch_per_config),
            settings,
            out_path,
            resume=resume,
            adaptive=adaptive,
            shard=shard,
        )
        todo = plan.runs()
        retried = {n for n, row in numbered if resume and row_error_class(row) == "environment"}
        if retried:
            existing = [row for n, row in numbered if n not in retried]
            complete = _without_lines(complete if complete is not None else _file_bytes(out_path), retried)
        if todo:
            for port in _local_ports(settings, pool):
                wait_port_free(settings.server.host, port, settings.port_wait_s)
        summary = SweepSummary(out_path, skipped=mine - len(todo), one_launch_per_config=one_launch_per_config)
        created_logs = _make_log_dir(settings.log_dir)
        try:
            check_same_world(existing, out_path, power=not power_limits_w)
            with contextlib.ExitStack() as stack:
                execute: Callable[[SweepPlan, RowSink], None]
                if pool is not None and setup is not None:

                    def execute(p: SweepPlan, sink: RowSink) -> None:
                        execute_on_pool(p, pool, setup, clock, sink)

                else:
                    gpu = stack.enter_context(_opened(device))
                    check_same_world(existing, out_path, mine=_device_world(settings, gpu), power=not power_limits_w)
                    executor = LaunchExecutor(
                        settings, gpu, clock, started=lambda run: reporter.run_started(run.point, run.repeat)
                    )
                    # runs before the device closes: the limit found is back on every exit path
                    stack.callback(_restore_power_limit, executor)

                    def execute(p: SweepPlan, sink: RowSink) -> None:
                        execute_plan(p, executor, sink)

                if complete is not None:  # drop the partial last line of a killed sweep (and retried rows)
                    write_bytes_atomic(out_path, complete, error=HarnessError)
                sink = RowSink(stack.enter_context(RowWriter(out_path)), reporter, summary)
                if adaptive:
                    _run_adaptive(plan, existing, sink, execute)
                else:
                    execute(plan, sink)
        finally:
            _remove_empty_dirs(created_logs)  # the log folder this sweep created and left empty
    return summary


def _device_world(settings: MeasureSettings, gpu: GpuDevice) -> dict[str, Any]:
    """This sweep's world columns (:data:`WORLD_COLUMNS`) from its opened device."""
    limit = getattr(gpu, "power_limit_w", None)
    return {
        "hardware": settings.hardware or gpu.name,
        "power_limit_watts": limit if isinstance(limit, (int, float)) else None,
        "provenance": getattr(gpu, "provenance", None),
    }


def _restore_power_limit(executor: LaunchExecutor) -> None:
    """Put back the power limit the sweep found (a Ctrl-C or SIGTERM waits until it is)."""
    if executor.power_limits is not None:
        with deferred():
            executor.power_limits.restore()


def _run_adaptive(
    plan: SweepPlan, rows: list[dict[str, Any]], sink: RowSink, execute: Callable[[SweepPlan, RowSink], None]
) -> None:
    """:func:`specband.harness.adaptive.run_adaptive`, timed over every pass."""
    from specband.harness.adaptive import run_adaptive

    t0 = time.monotonic()
    try:
        run_adaptive(plan, rows, sink, execute)
    finally:
        sink.summary.elapsed_s = time.monotonic() - t0


def planned_sweep(
    existing: Sequence[dict[str, Any]],
    plan: SweepPlan,
    settings: MeasureSettings,
    out_path: Path,
    *,
    resume: bool,
    adaptive: bool,
    shard: ShardSpec | None,
) -> tuple[SweepPlan, int]:
    """What a sweep into ``out_path`` still runs, given the rows already there, after every
    check a resumed sweep makes (``sweep`` and ``sweep --dry-run`` alike).

    Args:
        existing: the rows in ``out_path`` (``[]`` for a new file).
        plan: the whole sweep, nothing done.
        settings: this sweep's measurement settings.
        out_path: the output file (named in messages).
        resume: ``--resume`` was given.
        adaptive: ``--adaptive`` was given.
        shard: ``--shard K/N`` (``None``: the whole sweep).

    Returns:
        the plan with the file's runs (and, for a shard, the other shards' runs) done, and
        how many runs the shard holds in all.

    Raises:
        ConfigError: rows without ``--resume``; rows of other settings, grid or logging
            policy; a shard's file that holds runs of another shard (resuming it as this
            shard would mix two shards' runs in one file).
    """
    if existing and not resume:
        raise ConfigError(
            f"{out_path} already has {len(existing)} rows; pass --resume to continue it or choose another --out"
        )
    check_resumable(existing, settings, plan.points, out_path)
    check_same_logging(existing, adaptive, out_path)
    if resume:  # environment-class error rows are run again (run_sweep drops them from the file)
        existing = [r for r in existing if row_error_class(r) != "environment"]
    done = frozenset((r.get("index"), r.get("repeat")) for r in existing)
    if shard is not None:
        foreign = sorted(done - shard_runs(plan, shard))
        if foreign:
            raise ConfigError(
                f"{out_path}: cannot resume as shard {shard}: it holds runs of another shard "
                f"((index, repeat) = {foreign[0]}); resume it with the --shard it was written with"
            )
    # the other shards' runs are skipped as if done
    return shard_plan(dataclasses.replace(plan, done=done), shard)


def check_same_logging(rows: Sequence[dict[str, Any]], adaptive: bool, where: str | Path, verb: str = "resume") -> None:
    """Refuse to ``verb`` (resume, merge) rows of a uniform sweep with those of an adaptive
    one (an adaptive row carries a ``propensity``; a uniform one has none): one file holds
    one logging policy, so that the off-policy estimators read it right.

    Raises:
        ConfigError: ``"<where>: cannot resume: its rows were written with --adaptive ..."``.
    """
    for row in rows:
        if (row.get("propensity") is not None) != adaptive:
            was = "with" if not adaptive else "without"
            hint = f"; resume {was} it" if verb == "resume" else ""
            raise ConfigError(
                f"{where}: cannot {verb}: its rows were written {was} --adaptive{hint} "
                "(a file mixes no logging policies)"
            )


def _local_ports(settings: MeasureSettings, pool: WorkerPool | None) -> list[int]:
    """The server ports of this machine the sweep will use (none for a Ray pool: its tasks
    check their own node's port when they launch)."""
    if pool is None:
        return [settings.server.port]
    if isinstance(pool, LocalGpuPool):
        return [pool.base_port + i for i in range(len(pool.gpus))]
    return []


@contextlib.contextmanager
def _opened(device: GpuDevice | Callable[[], GpuDevice]) -> Iterator[GpuDevice]:
    """``device``, or the device that calling it opens (closed again at the end)."""
    if isinstance(device, GpuDevice):
        yield device
        return
    gpu = device()
    try:
        yield gpu
    finally:
        gpu.close()


def check_resumable(
    existing: Sequence[dict[str, Any]],
    settings: MeasureSettings,
    points: Sequence[GridPoint],
    out_path: Path | str,
    *,
    verb: str = "resume",
) -> None:
    """Refuse rows written for another engine (a row without ``engine`` is sglang's), target,
    draft, grid, or with other run settings (dtype, attention backend, max new tokens, number
    of prompts, prompt set, mem fraction, sglang or vLLM version, the emulator's time scale).
    A column a row lacks (an older file) is not compared.

    Args:
        existing: the rows.
        settings: this sweep's settings (``merge`` passes the first rows' settings).
        points: this sweep's grid.
        out_path: named in the message (a file, or ``"<file>:<line>"``).
        verb: what is refused (``"resume"``, ``"merge"``).

    Raises:
        ConfigError: ``"<out>: cannot <verb>: ..."`` naming the first difference.
    """
    check_same_action_set(existing, getattr(settings, "action_set", "contract"), out_path, verb)
    mine_by_key = {
        "target_model": settings.server.model_path,
        "draft_model": settings.server.draft_model_path,
        **settings.run_settings(),
    }
    mine_engine = mine_by_key.pop("engine", None)
    for row in existing:
        theirs = row.get("engine") or "sglang"  # a row written before the column: sglang's
        if mine_engine is not None and theirs != mine_engine:
            raise ConfigError(
                f"{out_path}: cannot {verb}: its rows are {theirs} runs, this sweep runs {mine_engine} "
                f"(one file holds one engine's rows)"
            )
        for key, mine in mine_by_key.items():
            if key in row and row[key] != mine:
                raise ConfigError(
                    f"{out_path}: cannot {verb}: its rows have {key}={row[key]!r}, this sweep has {mine!r}"
                )
        _check_mem_fraction(row, settings, out_path, verb)
    for row in existing:
        index = row.get("index")
        point = points[index] if isinstance(index, int) and 0 <= index < len(points) else None
        if point is not None and point.power_limit_w is not None:
            got = row.get("power_limit_watts")
            if not isinstance(got, (int, float)) or abs(float(got) - point.power_limit_w) > 0.5:
                raise ConfigError(
                    f"{out_path}: cannot {verb}: its row index={index} was measured at power_limit_watts={got!r}, "
                    f"in this sweep's grid it is {point.power_limit_w:g} W (use the same --power-limits)"
                )
        ident = (row.get("batch_size"), row.get("steps"), row.get("topk"), row.get("num_draft_tokens"))
        if point is None or ident != (point.batch_size, *point.action):
            raise ConfigError(
                f"{out_path}: cannot {verb}: its row index={index} is bs={ident[0]} {tuple(ident[1:])}, but in this "
                f"sweep's grid it is {'nothing' if point is None else f'bs={point.batch_size} {point.action}'} "
                f"(use the same --batch-sizes and --actions)"
            )


def check_same_action_set(existing: Sequence[dict[str, Any]], mine: str, out_path: Path | str, verb: str) -> None:
    """Refuse rows of another action set than ``mine`` (a row without ``action_set`` is a
    contract row): one file never mixes the 19-action contract and the extended set.

    Raises:
        ConfigError: ``"<out>: cannot <verb>: its rows are of the extended action set, ..."``.
    """
    for row in existing:
        theirs = row.get("action_set", "contract")
        if theirs != mine:
            raise ConfigError(
                f"{out_path}: cannot {verb}: its rows are of the {theirs} action set, this sweep's is {mine} "
                f"(one file never mixes action sets; see --actions)"
            )


#: Columns that say which world a row was measured in: one sweep file (resumed or merged)
#: holds one world. ``profile`` names the emulated GPU's performance model.
WORLD_COLUMNS: tuple[str, ...] = ("hardware", "power_limit_watts", "provenance", "profile")


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(float(a) - float(b)) <= 1e-6 * max(1.0, abs(float(a)), abs(float(b)))
    return bool(a == b)


def check_same_world(
    rows: Sequence[dict[str, Any]],
    where: Path | str,
    *,
    verb: str = "resume",
    mine: dict[str, Any] | None = None,
    first: str = "its first row",
    power: bool = True,
) -> None:
    """Refuse rows of more than one world (:data:`WORLD_COLUMNS`: another hardware name,
    power limit, provenance (measured, emulated, simulated) or emulated performance
    model), among themselves or against ``mine`` (this sweep's device), naming the
    difference. A column a row lacks is not compared.

    Raises:
        ConfigError: ``"<where>: cannot <verb>: its rows have hardware='RTX4060_Laptop',
            this sweep has 'H100' (another world: ...)"``.
    """
    reference: dict[str, Any] = {}
    label = first
    if mine is not None:
        reference = {k: v for k, v in mine.items() if v is not None}
        label = "this sweep"
    for row in rows:
        for key in WORLD_COLUMNS:
            if key == "power_limit_watts" and not power:  # a --power-limits sweep sets several
                continue
            value = row.get(key)
            if value is None:
                continue
            if key not in reference:
                reference[key] = value
                continue
            if not _same_value(reference[key], value):
                theirs = f"row index={row.get('index')} repeat={row.get('repeat')}"
                raise ConfigError(
                    f"{where}: cannot {verb}: {theirs} has {key}={value!r}, {label} has {reference[key]!r} "
                    "(rows of another GPU, power limit or provenance never share one file)"
                )


def _check_mem_fraction(row: dict[str, Any], settings: MeasureSettings, out_path: Path | str, verb: str) -> None:
    """Refuse a row launched at another first (or retry) mem fraction.

    Raises:
        ConfigError: ``"<out>: cannot <verb>: its rows have mem_fraction_static=0.7 ..."``.
    """
    retried = row.get("retry_mem_fraction")
    key, mine = (
        ("retry_mem_fraction", settings.retry_mem_fraction)
        if retried is not None
        else ("mem_fraction_static", settings.mem_fraction_static)
    )
    if key in row and row[key] is not None and mine is not None and abs(row[key] - mine) > 1e-9:
        option = "--retry-mem-fraction" if retried is not None else "--mem-fraction-static"
        raise ConfigError(
            f"{out_path}: cannot {verb}: its rows have {key}={row[key]!r}, this sweep has {option} {mine:g}"
        )


def _make_log_dir(path: Path) -> list[Path]:
    """Create the server-log folder (and its parents) if missing and check that a file
    can be created in it.

    Returns:
        the folders created, deepest first (for :func:`_remove_empty_dirs`).

    Raises:
        HarnessError: it cannot be created
            (``"<path>: cannot create the server-log folder (<reason>)"``) or written in
            (``"<path>: cannot write in the server-log folder (<reason>)"``); what was
            created is removed again.
    """
    try:
        created = _make_dirs(path)
    except OSError as exc:
        raise HarnessError(f"{path}: cannot create the server-log folder ({exc.strerror or exc})") from None
    try:
        with tempfile.TemporaryFile(dir=path, prefix=".specband-probe-"):
            pass
    except OSError as exc:
        _remove_empty_dirs(created)
        raise HarnessError(f"{path}: cannot write in the server-log folder ({exc.strerror or exc})") from None
    return created


def execute_plan(plan: SweepPlan, executor: LaunchExecutor, sink: RowSink) -> None:
    """Run every unit of ``plan`` on ``executor`` and hand each result to ``sink`` as it
    comes (a row is on disk before the next run starts); ``sink.summary.elapsed_s`` gets
    the real seconds taken.

    Raises:
        as :meth:`LaunchExecutor.execute <specband.harness.pipeline.LaunchExecutor.execute>`
        and :meth:`RowSink.consume <specband.harness.pipeline.RowSink.consume>`.
    """
    t0 = time.monotonic()
    sink.reporter.start(len(plan.runs()), sink.summary.skipped)
    try:
        for unit in plan.units():
            with contextlib.closing(executor.execute(unit)) as results:  # closing stops a shared server
                for result in results:
                    sink.consume(result)
    finally:
        sink.summary.elapsed_s = time.monotonic() - t0
