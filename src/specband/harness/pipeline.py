"""The sweep as one pipeline: a plan of launches, an executor of one launch, a sink of rows.

::

    plan = SweepPlan(grid(batch_sizes, actions), repeats, actions, one_launch_per_config, done)
    executor = LaunchExecutor(settings, device, clock)
    sink = RowSink(writer, reporter, summary)
    for unit in plan.units():
        for result in executor.execute(unit):
            sink.consume(result)

* :class:`SweepPlan` is data: the grid (:func:`grid`), the passes and the runs already
  written; :meth:`SweepPlan.units` lists the :class:`LaunchUnit` s (one server launch and
  the :class:`PlannedRun` s it serves) in launch order. A subset of units is a shard.
* :class:`LaunchExecutor` runs one unit on one GPU (its settings name the server port,
  its device the GPU) and yields one :class:`RunResult` per run, each a finished
  :class:`~specband.contract.record.SweepRecord`: launch, measure, stop, cool down, read top to
  bottom in :meth:`LaunchExecutor.execute`. It writes nothing; a result is plain data
  (picklable), so a unit can run in another process (``list(executor.execute(unit))``).
* :class:`RowSink` consumes results: it writes the row (flushed and fsynced), counts it
  in the :class:`SweepSummary` and reports progress; one sink can take results from
  several executors (it serialises them).

:func:`specband.harness.sweep.run_sweep` wires the three together for one
:class:`~specband.harness.job.SweepJob` (``job.plan()`` is the whole plan).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Collection, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from specband.contract.actions import ACTIONS, Action, as_action
from specband.contract.record import SweepRecord
from specband.core.errors import ConfigError, EngineError, HarnessError
from specband.devices.base import Clock, GpuDevice, TelemetrySample
from specband.devices.power_limit import PowerLimitGuard
from specband.engines.serverconfig import build_launch_command
from specband.harness.draft_health import draft_rejected_message
from specband.harness.runner import (
    LaunchOutcome,
    MeasureSettings,
    RetriedLaunchError,
    base_record,
    error_record,
    launch_with_retry,
    measure_on_server,
    measured_record,
)

__all__ = [
    "DEFAULT_BATCH_SIZES",
    "GridPoint",
    "LaunchExecutor",
    "LaunchUnit",
    "PlannedRun",
    "RowSink",
    "RunResult",
    "SweepPlan",
    "SweepReporter",
    "SweepSummary",
    "grid",
]

#: Batch sizes of the published sweep.
DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 4, 8, 16)


# --------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class GridPoint:
    """One configuration of the grid.

    Attributes:
        index: position in the bs-major grid (limit-major first with ``--power-limits``).
        batch_size: concurrent requests.
        action: the canonical triple.
        power_limit_w: the GPU power limit the run is measured at (``--power-limits``), W;
            ``None``: the limit is left as it is.
    """

    index: int
    batch_size: int
    action: Action
    power_limit_w: float | None = None


def grid(
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    actions: Sequence[Action] = ACTIONS,
    power_limits_w: Sequence[float] | None = None,
) -> list[GridPoint]:
    """The bs-major grid: ``for bs in batch_sizes: for action in actions``; with power
    limits (W), ``for limit in power_limits_w`` outside it (the limit changes least often).

    Raises:
        ConfigError: empty, duplicate or non-positive batch sizes; empty or duplicate
            actions (naming the action given twice, also when two triples canonicalise
            to the same action).
        InvalidActionError: a plain triple that breaks a rule (an ``Action`` is trusted).
    """
    if not batch_sizes:
        raise ConfigError("--batch-sizes must name at least one batch size")
    if any(b <= 0 for b in batch_sizes) or len(set(batch_sizes)) != len(batch_sizes):
        raise ConfigError(f"--batch-sizes must be distinct and > 0, got {list(batch_sizes)}")
    acts = [as_action(a) for a in actions]
    if not acts:
        raise ConfigError("--actions must name at least one action")
    for i, act in enumerate(acts):
        if act in acts[:i]:
            raise ConfigError(f"--actions: {act} is given twice")
    base = [GridPoint(i * len(acts) + j, bs, a) for i, bs in enumerate(batch_sizes) for j, a in enumerate(acts)]
    if not power_limits_w:
        return base
    if len(set(power_limits_w)) != len(power_limits_w):
        raise ConfigError(f"--power-limits must be distinct, got {list(power_limits_w)}")
    return [
        GridPoint(k * len(base) + p.index, p.batch_size, p.action, float(limit))
        for k, limit in enumerate(power_limits_w)
        for p in base
    ]


@dataclass(frozen=True)
class PlannedRun:
    """One row to measure: a grid point in one pass (``repeat``)."""

    point: GridPoint
    repeat: int

    @property
    def batch_size(self) -> int:
        """The run's batch size (``--max-running-requests`` of its own launch)."""
        return self.point.batch_size

    @property
    def action(self) -> Action:
        """The run's action."""
        return self.point.action

    @property
    def key(self) -> tuple[int, int]:
        """``(index, repeat)``: the row's identity in the file."""
        return self.point.index, self.repeat

    def label(self) -> str:
        """Where this run and pass appear in messages: ``bs=4 (3,4,8) r1``."""
        return f"bs={self.batch_size} {self.action} r{self.repeat}"


@dataclass(frozen=True)
class LaunchUnit:
    """One server launch and the runs it serves, in order.

    Attributes:
        repeat: the pass.
        runs: one run, or (``shared``) every batch size of one action, increasing.
        shared: one server serves every run (``--one-launch-per-config``); if its launch
            fails or the server dies, the runs left fall back to launches of their own.
    """

    repeat: int
    runs: tuple[PlannedRun, ...]
    shared: bool = False

    @property
    def action(self) -> Action:
        """The action every run of the unit measures."""
        return self.runs[0].action

    @property
    def max_batch_size(self) -> int:
        """The largest batch size served (the launch's ``--cuda-graph-max-bs``)."""
        return max(r.batch_size for r in self.runs)


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep runs, before anything runs (see the module docstring of
    :mod:`specband.harness.sweep` for the order).

    Attributes:
        points: the grid (:func:`grid`).
        repeats: full passes over the grid.
        actions: the actions in the order given (config-major order of shared launches).
        one_launch_per_config: one server per action for all batch sizes of a pass.
        done: ``(index, repeat)`` of the rows already written (skipped).
    """

    points: tuple[GridPoint, ...]
    repeats: int
    actions: tuple[Action, ...] = ACTIONS
    one_launch_per_config: bool = False
    done: Collection[tuple[Any, Any]] = frozenset()

    def pending(self, repeat: int) -> list[PlannedRun]:
        """The runs of pass ``repeat`` still to do, in grid order."""
        return [PlannedRun(p, repeat) for p in self.points if (p.index, repeat) not in self.done]

    def runs(self) -> list[PlannedRun]:
        """The runs still to do, pass by pass, in grid order."""
        return [run for rep in range(self.repeats) for run in self.pending(rep)]

    def units(self) -> list[LaunchUnit]:
        """The launches in launch order: per pass, one per run (bs-major), or one per
        action (in :attr:`actions` order) serving its batch sizes in increasing order."""
        units = []
        for rep in range(self.repeats):
            pending = self.pending(rep)
            if not self.one_launch_per_config:
                units += [LaunchUnit(rep, (run,)) for run in pending]
                continue
            limits = list(dict.fromkeys(p.power_limit_w for p in self.points))
            for limit in limits:
                for action in [as_action(a) for a in self.actions]:
                    runs = sorted(
                        (r for r in pending if r.action == action and r.point.power_limit_w == limit),
                        key=lambda r: r.batch_size,
                    )
                    if runs:
                        units.append(LaunchUnit(rep, tuple(runs), shared=True))
        return units

    def launch_commands(self, settings: MeasureSettings) -> list[list[str]]:
        """Every server command line the plan launches, in launch order (first launches;
        a retry at ``retry_mem_fraction`` only follows a failed one)."""
        return [
            build_launch_command(settings.server, unit.action, unit.max_batch_size, settings.mem_fraction_static)
            for unit in self.units()
        ]


# --------------------------------------------------------------------------- the executor
@dataclass(frozen=True)
class RunResult:
    """One finished run.

    Attributes:
        run: what was run.
        record: its row (measured, or an error row).
        launches: server processes started since the previous result of the same
            executor (0 for a run served by an already counted shared launch).
    """

    run: PlannedRun
    record: SweepRecord
    launches: int


def _no_start(run: PlannedRun) -> None:
    """The default :attr:`LaunchExecutor.started` hook: nothing."""


@dataclass
class LaunchExecutor:
    """Runs launch units on one GPU and one server port.

    Attributes:
        settings: how to launch and measure (its ``server.port`` is this executor's).
        device: the GPU's telemetry.
        clock: the time base (emulated seconds for the emulator).
        started: called as each run begins (progress; a remote executor may leave it).
    """

    settings: MeasureSettings
    device: GpuDevice
    clock: Clock
    started: Callable[[PlannedRun], None] = _no_start
    #: sets the runs' power limits and remembers the original (restored by the sweep)
    power_limits: PowerLimitGuard | None = None
    _launches: int = field(default=0, init=False, repr=False)

    @property
    def hardware(self) -> str:
        """The ``hardware`` column: the settings' name for it, else the device's."""
        return self.settings.hardware or self.device.name

    def execute(self, unit: LaunchUnit) -> Generator[RunResult, None, None]:
        """Run ``unit``, yielding each run's result as soon as its row is known (a shared
        server is still up while its rows are yielded; close the iterator to stop it).

        Raises:
            PortInUseError, LauncherError, HarnessError: as
                :func:`~specband.harness.runner.launch_with_retry` (the sweep must stop).
            KeyboardInterrupt: Ctrl-C or SIGTERM (the server is stopped first).
        """
        self._apply_power_limit(unit.runs[0].point.power_limit_w)
        if unit.shared:
            yield from self._shared(unit)
        else:
            yield from self._single(unit.runs[0])

    def _apply_power_limit(self, watts: float | None) -> None:
        """Set the unit's power limit before its launch (through :attr:`power_limits`, which
        restores the original limit when the sweep ends)."""
        if watts is None:
            return
        if self.power_limits is None:
            self.power_limits = PowerLimitGuard(self.device)
        self.power_limits.set(watts)

    def _single(self, run: PlannedRun) -> Iterator[RunResult]:
        """One launch, one measured row (or an error row), cool-down."""
        self.started(run)
        pre = self.device.sample(self.clock)
        base = self._base(run, pre, pre.temp_c)
        label = f"i{run.point.index:03d}_bs{run.batch_size}_{'-'.join(map(str, run.action))}"
        try:
            launch = self._launch(run.action, run.batch_size, run.repeat, label)
        except RetriedLaunchError as exc:
            self.clock.sleep(self.settings.cooldown_s)
            yield self._result(run, _launch_failed(base, exc, self.settings))
            return
        try:
            with launch.server:
                try:
                    record = self._measure(run, base, launch)
                except HarnessError as exc:
                    record = _measure_failed(base, exc, launch)
        finally:
            launch.server.stop(self.settings.stop_grace_s)
        self.clock.sleep(self.settings.cooldown_s)
        yield self._result(run, record)

    def _shared(self, unit: LaunchUnit) -> Iterator[RunResult]:
        """One server for every batch size of one action; the runs left fall back to
        launches of their own when the shared launch fails or the server dies."""
        first = unit.runs[0]
        pre = self.device.sample(self.clock)
        self.started(first)
        label = f"cfg_{'-'.join(map(str, unit.action))}_maxbs{unit.max_batch_size}"
        try:
            launch = self._launch(unit.action, unit.max_batch_size, unit.repeat, label)
        except RetriedLaunchError as exc:
            self.clock.sleep(self.settings.cooldown_s)
            for run in unit.runs:
                if run.batch_size == unit.max_batch_size:
                    # the shared launch was exactly this run's launch: its failure is this row
                    yield self._result(run, _launch_failed(self._base(run, pre, pre.temp_c), exc, self.settings))
                else:
                    yield from self._single(run)
            return
        remaining = list(unit.runs)
        try:
            with launch.server:
                while remaining and launch.server.alive():
                    run = remaining[0]
                    if run is not first:
                        self.started(run)
                    base = self._base(run, pre, self.device.read_temp_c())
                    try:
                        record = self._measure(run, base, launch)
                    except HarnessError as exc:
                        if not launch.server.alive():
                            break  # the server died: the rest fall back to their own launches
                        record = _measure_failed(base, exc, launch)
                    remaining.pop(0)
                    yield self._result(run, record)
        finally:
            launch.server.stop(self.settings.stop_grace_s)
        self.clock.sleep(self.settings.cooldown_s)
        for run in remaining:
            yield from self._single(run)

    def _launch(self, action: Action, max_batch_size: int, repeat: int, label: str) -> LaunchOutcome:
        """A healthy server (after one retry at the retry fraction), counted."""
        log_path = self.settings.log_dir / f"r{repeat}_{label}.log"
        try:
            launch = launch_with_retry(self.settings, self.clock, action, max_batch_size, log_path)
        except RetriedLaunchError as exc:
            self._launches += exc.launches
            raise
        self._launches += launch.launches
        return launch

    def _base(self, run: PlannedRun, pre: TelemetrySample, temp_before: float | None) -> SweepRecord:
        return base_record(
            self.settings,
            self.device,
            hardware=self.hardware,
            index=run.point.index,
            repeat=run.repeat,
            batch_size=run.batch_size,
            action=run.action,
            pre=pre,
            temp_before=temp_before,
        )

    def _measure(self, run: PlannedRun, base: SweepRecord, launch: LaunchOutcome) -> SweepRecord:
        m = measure_on_server(self.settings, self.device, self.clock, launch.server, run.batch_size, run.action)
        return measured_record(base, m, launch)

    def _result(self, run: PlannedRun, record: SweepRecord) -> RunResult:
        launches, self._launches = self._launches, 0
        return RunResult(run, record, launches)


def _launch_failed(base: SweepRecord, exc: RetriedLaunchError, settings: MeasureSettings) -> SweepRecord:
    """The error row of a run whose launch failed (at the retry fraction too)."""
    return error_record(base, str(exc), exc.retry_mem_fraction, exc.retry_mem_fraction or settings.mem_fraction_static)


def _measure_failed(base: SweepRecord, exc: HarnessError, launch: LaunchOutcome) -> SweepRecord:
    """The error row of a run whose measurement failed on a healthy server."""
    return error_record(base, str(exc), launch.retry_mem_fraction, launch.mem_fraction_static)


# --------------------------------------------------------------------------- the sink
class SweepReporter(Protocol):
    """Progress callbacks (the CLI draws a rich progress bar)."""

    def start(self, total: int, skipped: int) -> None:
        """``total`` runs to do, ``skipped`` already in the file."""

    def run_started(self, point: GridPoint, repeat: int) -> None:
        """A run begins."""

    def run_finished(self, point: GridPoint, repeat: int, row: dict[str, Any]) -> None:
        """A row was written."""

    def unit_finished(self, gpu: str, runs: int) -> None:
        """A worker's launch unit on GPU ``gpu`` (its ``CUDA_VISIBLE_DEVICES``) ended with
        ``runs`` rows written (``--gpus`` and ``--ray`` only)."""


class NoReporter:
    """A :class:`SweepReporter` that reports nothing."""

    def start(self, total: int, skipped: int) -> None:
        """Nothing."""

    def run_started(self, point: GridPoint, repeat: int) -> None:
        """Nothing."""

    def run_finished(self, point: GridPoint, repeat: int, row: dict[str, Any]) -> None:
        """Nothing."""

    def unit_finished(self, gpu: str, runs: int) -> None:
        """Nothing."""


class RowAppender(Protocol):
    """Where rows go (:class:`specband.harness.sweepfile.RowWriter`: one fsynced line each)."""

    def append(self, row: dict[str, Any]) -> None:
        """Write one row durably."""


@dataclass
class SweepSummary:
    """What a sweep did.

    Attributes:
        path: the output file.
        written: rows written by this invocation.
        errors: of which error rows.
        skipped: runs skipped because their row was already in the file.
        launches: server processes started.
        runs: runs measured or failed (= written).
        elapsed_s: real seconds.
        one_launch_per_config: the mode.
        error_messages: ``"bs=4 (3,4,8) r1: <error>"`` per error row.
        draft_rejected: speculative rows flagged ``draft_flag`` (accept length at most
            :data:`~specband.harness.draft_health.DRAFT_REJECTED_ACCEPT_LENGTH`).
    """

    path: Path
    written: int = 0
    errors: int = 0
    skipped: int = 0
    launches: int = 0
    runs: int = 0
    elapsed_s: float = 0.0
    one_launch_per_config: bool = False
    error_messages: list[str] = field(default_factory=list)
    draft_rejected: int = 0

    @property
    def launches_saved(self) -> int:
        """Launches one-launch-per-run would have made (one per run, plus the retries
        this sweep made) minus the launches made."""
        return self.runs - self.launches if self.one_launch_per_config else 0

    def failure(self) -> EngineError | None:
        """The error a sweep that measured nothing ends with, after its rows and summary are
        written: every row this invocation wrote is an error row (no server became healthy,
        or none answered its batch), so the engine, not one configuration, failed (exit 3;
        ``--resume`` runs the ``environment``-class rows again). ``None`` when a row was
        measured or none was written (every run already in the file)."""
        if self.written == 0 or self.errors < self.written:
            return None
        runs = "the one run" if self.written == 1 else f"all {self.written} runs"
        return EngineError(
            f"no run was measured: {runs} failed (first: {self.error_messages[0]}); the error rows are in {self.path}"
        )

    def count(self, result: RunResult) -> None:
        """Add one written result (its row, error and draft flag, its launches)."""
        record = result.record
        self.written += 1
        self.runs += 1
        self.launches += result.launches
        if record.draft_flag:
            self.draft_rejected += 1
        if record.error:
            self.errors += 1
            self.error_messages.append(f"{result.run.label()}: {record.error}")


@dataclass
class RowSink:
    """Consumes results: writes each row, counts it, reports it (thread-safe: several
    executors may feed one sink).

    Attributes:
        writer: where rows go.
        reporter: progress.
        summary: the counts.
        columns: the columns written (``None``: :data:`~specband.contract.record.RUN_COLUMNS`;
            ``sweep --adaptive`` adds ``propensity``).
    """

    writer: RowAppender
    reporter: SweepReporter
    summary: SweepSummary
    columns: tuple[str, ...] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def consume(self, result: RunResult) -> None:
        """Write ``result``'s row (:data:`~specband.contract.record.RUN_COLUMNS`), count it, warn
        once about a draft whose every token was rejected, and report it.

        Raises:
            HarnessError: the row cannot be written.
        """
        row = result.record.as_row(self.columns)
        with self._lock:
            self.writer.append(row)
            if result.record.draft_flag and not self.summary.draft_rejected:
                warnings.warn(draft_rejected_message(result.run.label()), stacklevel=2)
            self.summary.count(result)
            self.reporter.run_finished(result.run.point, result.run.repeat, row)
