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
(:class:`~specband.engines.failures.LauncherError`: not found, not executable, exit status
126/127 before ``/health``, ``python -m`` of a module that is not installed, ``python``
of a script that does not exist) and a command line sglang refuses
(:class:`~specband.engines.failures.ServerArgsError`: its parser's ``error:``, the same for
every action) are configuration errors: the sweep stops at once, writing no row for it (rows already in the
file stay; a file this sweep created and left empty is removed). Ctrl-C and SIGTERM stop
the running server (without waiting for a request in flight) and leave the file with complete
rows only; they are turned into
``KeyboardInterrupt`` at safe points only (:mod:`specband.harness.interrupts`: never
inside an import, a server's start-up bookkeeping or a row's write).

The sweep reads one :class:`~specband.harness.job.SweepJob`, built and checked by
:func:`specband.harness.request.build_sweep`. The rows already in the file are read by
:mod:`specband.harness.sweepfile`, checked by :mod:`specband.harness.resume`; the lock is
:mod:`specband.harness.sweeplock`.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specband.contract.record import row_error_class
from specband.core.errors import HarnessError
from specband.devices.base import Clock, GpuDevice
from specband.files.fileio import write_bytes_atomic
from specband.harness.adaptive import run_adaptive
from specband.harness.fleet import execute_on_pool
from specband.harness.interrupts import deferred, interrupts_as_keyboard_interrupt
from specband.harness.job import SweepJob
from specband.harness.pipeline import (
    LaunchExecutor,
    NoReporter,
    RowSink,
    SweepPlan,
    SweepReporter,
    SweepSummary,
)
from specband.harness.predict import run_predicted
from specband.harness.procfs import wait_port_free
from specband.harness.resume import check_same_world
from specband.harness.runner import MeasureSettings
from specband.harness.sweepfile import RowWriter, parse_rows, sweep_file_bytes, without_lines
from specband.harness.sweeplock import SweepLock, make_dirs, remove_empty_dirs
from specband.harness.workers import LocalGpuPool, WorkerPool

__all__ = ["execute_plan", "run_sweep"]


def run_sweep(job: SweepJob, *, clock: Clock | None = None, reporter: SweepReporter | None = None) -> SweepSummary:
    """Run (or resume) the sweep ``job`` and write its rows to ``job.out``.

    ``job`` comes checked (:func:`specband.harness.request.build_sweep`: the options, the
    grid, the pair, the power limits, the pool's environment, the output and log paths);
    what is checked here needs the lock. The sweep holds a :class:`SweepLock` on
    ``job.out`` for its whole run, taken before anything else (a server, the device, the
    output or the log folder) is touched: a second sweep on the same file is refused at
    once. Then, writing nothing, it checks the rows already in the file (``resume``
    needed, same target, draft, grid, logging and shard: they may change until the lock is
    held) and that the server ports are free (right before the launches); then it creates
    the log folder (checking that it can write there), and only then drops a partial last
    line, opens the device (its world checked against the file's rows) and appends rows.
    A sweep refused by any of these checks leaves the folder as it was: the lock file,
    and the folders created for the lock or the logs, are removed again (a log folder
    this sweep created is removed whenever it is left empty).

    With ``job.power_limits_w`` each limit is set through the device before the runs at
    it, and the limit found is restored when the sweep ends, however it ends (Ctrl-C,
    SIGTERM, an error). With ``job.pool`` the units run on the pool's workers, each with
    the executor ``job.setup`` builds (:mod:`specband.harness.fleet`); ``job.device`` is
    then not opened, and the ports checked free are the pool's. With ``job.adaptive``
    pass 0 measures every run and later passes only the configs that may still be the
    pick (:func:`specband.harness.adaptive.run_adaptive`); rows get a ``propensity``
    column. With ``job.predict`` (``--plan predict``) each batch size measures the baseline
    and two chains, then only the configs whose simulated reward interval could beat the best
    measured one (:func:`specband.harness.predict.run_predicted`); rows get ``propensity``,
    ``planned_by`` and ``predicted_reward``.

    Args:
        job: the checked sweep.
        clock: time base (default ``Clock(job.settings.time_scale)``: emulated seconds for
            the emulator).
        reporter: progress callbacks (default: none).

    Returns:
        the :class:`SweepSummary`.

    Raises:
        ConfigError: an existing file without ``resume``, or a file from another
            target/draft, grid, logging policy, shard or world.
        SweepBusyError: another sweep is writing ``job.out``.
        DataError: the existing file cannot be resumed.
        HarnessError: ``job.out`` cannot be read or written, or the log folder cannot
            be created (nothing is created then); a server log cannot be written.
        PortInUseError: the server port is taken by something else (at the start, after
            ``settings.port_wait_s``, or before a launch).
        LauncherError: the server command cannot be run at all.
        KeyboardInterrupt: Ctrl-C or SIGTERM (after the server was stopped).
    """
    clock = clock or Clock(job.settings.time_scale)
    reporter = reporter or NoReporter()
    pool = job.pool
    with interrupts_as_keyboard_interrupt():
        connect = getattr(pool, "connect", None)
        if callable(connect):  # a Ray pool: connected before anything is written (SIGTERM then exits at once)
            connect(prompt_exit=True)
        try:
            return _locked_sweep(job, clock, reporter)
        finally:
            disconnect = getattr(pool, "disconnect", None)
            if callable(disconnect):
                disconnect()


def _locked_sweep(job: SweepJob, clock: Clock, reporter: SweepReporter) -> SweepSummary:
    """:func:`run_sweep` once the pool is connected: everything under the output's lock."""
    settings, out_path, pool, setup = job.settings, job.out, job.pool, job.setup
    power = not job.power_limits_w  # a --power-limits sweep sets several limits: its rows differ in theirs
    with SweepLock(out_path) as lock:
        # every check first, writing nothing: a refused sweep leaves the folder as it was
        numbered, complete = parse_rows(out_path)
        existing = [row for _, row in numbered]
        plan, mine = job.planned(existing)
        todo = plan.runs()
        retried = {n for n, row in numbered if job.resume and row_error_class(row) == "environment"}
        if retried:
            existing = [row for n, row in numbered if n not in retried]
            complete = without_lines(complete if complete is not None else sweep_file_bytes(out_path), retried)
        if todo:
            for port in _local_ports(settings, pool):
                wait_port_free(settings.server.host, port, settings.port_wait_s)
        summary = SweepSummary(out_path, skipped=mine - len(todo), one_launch_per_config=job.one_launch_per_config)
        created_logs = _make_log_dir(settings.log_dir)
        try:
            check_same_world(existing, out_path, power=power)  # the rows among themselves
            with contextlib.ExitStack() as stack:
                execute: Callable[[SweepPlan, RowSink], None]
                predict_model = None
                if pool is not None and setup is not None:
                    if job.predict is not None:
                        predict_model = job.predict.model(settings.hardware)

                    def execute(p: SweepPlan, sink: RowSink) -> None:
                        execute_on_pool(p, pool, setup, clock, sink)

                else:
                    gpu = job.device.open()
                    stack.callback(gpu.close)
                    check_same_world(existing, out_path, mine=_device_world(settings, gpu), power=power)
                    if job.predict is not None:  # the GPU's name finds the profile when none was named
                        predict_model = job.predict.model(settings.hardware or gpu.name)
                    executor = LaunchExecutor(
                        settings, gpu, clock, started=lambda run: reporter.run_started(run.point, run.repeat)
                    )
                    # runs before the device closes: the limit found is back on every exit path
                    stack.callback(_restore_power_limit, executor)

                    def execute(p: SweepPlan, sink: RowSink) -> None:
                        execute_plan(p, executor, sink)

                if complete is not None:  # drop the partial last line of a killed sweep (and retried rows)
                    write_bytes_atomic(out_path, complete, error=HarnessError)
                    lock.relock_output()  # the rewritten file is a new inode
                sink = RowSink(stack.enter_context(RowWriter(out_path)), reporter, summary)
                if job.adaptive:
                    _run_adaptive(plan, existing, sink, execute)
                elif job.predict is not None:
                    _run_predicted(plan, existing, sink, execute, predict_model, job.predict.observations)
                else:
                    execute(plan, sink)
        finally:
            remove_empty_dirs(created_logs)  # the log folder this sweep created and left empty
    return summary


def _device_world(settings: MeasureSettings, gpu: GpuDevice) -> dict[str, Any]:
    """This sweep's world columns (:data:`~specband.harness.resume.WORLD_COLUMNS`) from its opened device."""
    limit = getattr(gpu, "power_limit_w", None)
    return {
        "hardware": settings.hardware or gpu.name,
        "power_limit_watts": limit if isinstance(limit, (int, float)) else None,
        "provenance": settings.provenance or getattr(gpu, "provenance", None),
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

    t0 = time.monotonic()
    try:
        run_adaptive(plan, rows, sink, execute)
    finally:
        sink.summary.elapsed_s = time.monotonic() - t0


def _run_predicted(
    plan: SweepPlan, rows: list[dict[str, Any]], sink: RowSink, execute: Callable[[SweepPlan, RowSink], None],
    model: Any, observations: tuple[Any, ...],
) -> None:  # fmt: skip
    """:func:`specband.harness.predict.run_predicted`, timed over every round."""
    t0 = time.monotonic()
    try:
        run_predicted(plan, rows, sink, execute, model, observations=observations)
    finally:
        sink.summary.elapsed_s = time.monotonic() - t0


def _local_ports(settings: MeasureSettings, pool: WorkerPool | None) -> list[int]:
    """The server ports of this machine the sweep will use (none for a Ray pool: its tasks
    check their own node's port when they launch)."""
    if pool is None:
        return [settings.server.port]
    if isinstance(pool, LocalGpuPool):
        return [pool.base_port + i for i in range(len(pool.gpus))]
    return []


def _make_log_dir(path: Path) -> list[Path]:
    """Create the server-log folder (and its parents) if missing and check that a file
    can be created in it.

    Returns:
        the folders created, deepest first (for :func:`~specband.harness.sweeplock.remove_empty_dirs`).

    Raises:
        HarnessError: it cannot be created
            (``"<path>: cannot create the server-log folder (<reason>)"``) or written in
            (``"<path>: cannot write in the server-log folder (<reason>)"``); what was
            created is removed again.
    """
    try:
        created = make_dirs(path)
    except OSError as exc:
        raise HarnessError(f"{path}: cannot create the server-log folder ({exc.strerror or exc})") from None
    try:
        with tempfile.TemporaryFile(dir=path, prefix=".specband-probe-"):
            pass
    except OSError as exc:
        remove_empty_dirs(created)
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
