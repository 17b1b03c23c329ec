"""Harness commands: ``specband sweep``, ``specband emulate``, ``specband import-bench``.

The sweep's NumPy-heavy parts load inside the commands, so ``--help`` stays light (see
:mod:`specband.cli`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import shlex  # noqa: F401
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from specband.cli.output import say
from specband.cli.params import PANEL_TITLES, build_request, help_text, request_command, request_signature
from specband.contract.actions import ACTION_SETS, ActionSet
from specband.core.errors import DataError, EngineError, one_line
from specband.devices.base import Clock
from specband.emulator.faults import parse_fault
from specband.emulator.options import EmulatorOptions
from specband.emulator.request import EmulateRequest
from specband.files.fileio import given_path
from specband.harness.request import SweepRequest
from specband.harness.sweepfile import read_rows_for_resume

if TYPE_CHECKING:  # the harness loads inside the commands
    from specband.harness.job import SweepJob
    from specband.harness.pipeline import GridPoint, SweepSummary

_EMULATOR_HELP = "For the emulator only: "


@contextlib.contextmanager
def _plain_warnings() -> Iterator[None]:
    """Show warnings as ``warning: <message>`` lines on stderr."""

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        say(f"warning: {message}", err=True)

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        previous = warnings.showwarning
        warnings.showwarning = show
        try:
            yield
        finally:
            warnings.showwarning = previous


def _warn(message: str | None) -> None:
    """Print ``warning: <message>`` on stderr (nothing for ``None``)."""
    if message is not None:
        say(f"warning: {message}", err=True)


class _RichReporter:
    """A rich progress bar with ETA on stderr, plus one line per finished run; ``warning``
    (e.g. sglang not found) and ``notes`` (``--cpu``'s, a skipped RoPE check) are printed
    once, when the sweep starts running: after every check passed, so that bad input stays
    one ``error:`` line."""

    def __init__(self, quiet: bool, warning: str | None = None, notes: tuple[str, ...] = ()) -> None:
        from rich.console import Console

        self.warning = warning
        self.notes = notes
        self.quiet = quiet
        self.console = Console(stderr=True)
        self.progress: Any = None
        self.task: Any = None
        #: ``--gpus``/``--ray``: GPU -> its progress line (runs written from that GPU)
        self.gpu_tasks: dict[str, Any] = {}

    def start(self, total: int, skipped: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        _warn(self.warning)
        self.warning = None
        for line in self.notes:
            say(f"note: {line}", err=True)
        self.notes = ()
        if skipped:
            self.console.print(f"resuming: {skipped} runs already in the file")
        if self.quiet:
            return
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self.progress.start()
        self.task = self.progress.add_task("sweep", total=total)
        self.gpu_tasks = {}

    def run_started(self, point: GridPoint, repeat: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, description=f"r{repeat} bs={point.batch_size} {point.action}")

    def run_finished(self, point: GridPoint, repeat: int, row: dict[str, Any]) -> None:
        if self.progress is not None:
            self.progress.advance(self.task)
            if row.get("error"):
                self.progress.console.print(
                    one_line(f"  error r{repeat} bs={point.batch_size} {point.action}: {row['error']}"),
                    markup=False,
                    highlight=False,
                )

    def unit_finished(self, gpu: str, runs: int) -> None:
        """One line per GPU under the sweep's bar: the runs its worker wrote so far."""
        if self.progress is None:
            return
        if gpu not in self.gpu_tasks:
            self.gpu_tasks[gpu] = self.progress.add_task(f"  GPU {gpu}", total=None)
        self.progress.advance(self.gpu_tasks[gpu], runs)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def register(app: typer.Typer) -> None:
    """Add the sweep, emulate and import-bench commands to ``app``."""

    @app.command("sweep")
    @request_command(SweepRequest)
    def sweep_command(request: SweepRequest) -> None:
        """Measure every (batch size, action): launch sglang, warm up, time a batch with
        energy telemetry, write one JSONL row per run (flushed and fsynced)."""
        from specband.harness.request import build_sweep, dry_run_lines  # lazy: off the cold path (recommend, --help)

        with _plain_warnings():
            job = build_sweep(_plug_emulator(request))
            for line in job.power_limit_notes:
                say(f"note: {line}", err=True)
            if request.dry_run:
                lines = dry_run_lines(job)
                _warn(job.version.warning)
                for note in job.notes:
                    say(f"note: {note}", err=True)
                for line in lines:
                    typer.echo(line)
                return
            _run_sweep(job, quiet=request.quiet)

    app.command("emulate", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(emulate_command)
    app.command("import-bench")(import_bench_command)


def emulate_command(ctx: typer.Context, **values: Any) -> None:
    """An sglang-compatible server driven by a performance model. Takes sglang's
    launch_server flags (e.g. --model-path M --port P --speculative-algorithm EAGLE3 ...)."""
    from specband.emulator.server import serve  # lazy: off the cold path (recommend, --help)

    r = build_request(EmulateRequest, values)
    with _plain_warnings():
        if r.time_scale is not None:
            Clock(r.time_scale)
        options = EmulatorOptions.from_env(
            hardware=r.hardware,
            model_spec=r.perf_model,
            state_file=str(r.state_file) if r.state_file else None,
            time_scale=r.time_scale,
            load_time_s=r.load_time,
            seed=r.seed,
            faults=[parse_fault(f) for f in r.fault],
            engine=r.engine,
        )
        Clock(options.time_scale)
        code = serve(list(ctx.args), options)
    raise typer.Exit(code)


emulate_command.__signature__ = request_signature(  # type: ignore[attr-defined]
    EmulateRequest, inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
)


def import_bench_command(
    file: Path = typer.Argument(
        ...,
        help="JSONL written by sglang's scripts/playground/bench_speculative.py.",
        metavar="FILE",
        rich_help_panel=PANEL_TITLES["input"],
    ),
    hardware: str = typer.Option(
        "unknown",
        "--hardware",
        help="GPU name written in every row's 'hardware' column (bench_speculative.py does not record it).",
        metavar="NAME",
        rich_help_panel=PANEL_TITLES["input"],
    ),
    out_text: str | None = typer.Option(
        None,
        "--out",
        help=help_text("Sweep JSONL to write (default: <file>.sweep.jsonl)."),
        metavar="FILE",
        rich_help_panel=PANEL_TITLES["output"],
    ),
    force: bool = typer.Option(
        False, "--force", help="Replace --out if it exists.", rich_help_panel=PANEL_TITLES["output"]
    ),
) -> None:
    """Convert sglang bench_speculative.py output into sweep rows (no energy: rewards
    come from throughput only)."""
    from specband.harness.import_bench import import_bench  # lazy: off the cold path (recommend, --help)
    from specband.harness.request import file_path  # lazy: off the cold path (recommend, --help)

    out = None if out_text is None else file_path("--out", out_text)
    target = out or file.with_name(file.name + ".sweep.jsonl")
    result = import_bench(file, target, hardware=hardware, overwrite=force)
    print(
        "warning: sglang's bench_speculative.py measures no energy; these rows have no energy, "
        "so rewards come from throughput (and temperature) only",
        file=sys.stderr,
    )
    for line in result.skipped:
        say(f"skipped (not a contract action): {line}", err=True)
    say(f"wrote {len(result.rows)} rows to {result.out_path} ({len(result.skipped)} skipped)")


def _plug_emulator(request: SweepRequest) -> SweepRequest:
    """The request with the emulator's GPU plugged in when the sweep's device is the
    emulator (the harness and the device layer know no emulator)."""
    if request.device_kind() != "emulated":
        return request
    from specband.emulator.models import load_performance_model  # lazy: off the cold path (recommend, --help)
    from specband.emulator.spec import EmulatedGpuSpec  # lazy: off the cold path (recommend, --help)

    out = given_path("--out", request.out)
    if not (request.dry_run and ":" in request.emulator_model):  # a dry run imports no module:function factory
        load_performance_model(request.emulator_model, request.emulator_hardware)  # a bad model: one line, now
    spec = EmulatedGpuSpec(
        request.emulator_state_path(out), request.emulator_hardware, request.emulator_model, request.time_scale
    )
    spec.check()  # a folder as --emulator-state: refused by the dry run too (ConfigError, exit 2)
    return dataclasses.replace(request, plugged=spec)


def _run_sweep(job: SweepJob, *, quiet: bool) -> None:
    """Run a checked sweep with a progress bar (none when ``quiet``) and print its summary.

    Raises:
        EngineError: no run was measured (:meth:`~specband.harness.pipeline.SweepSummary.failure`),
            after the summary.
    """
    from specband.harness.sweep import run_sweep  # lazy: off the cold path (recommend, --help)

    reporter = _RichReporter(quiet, job.version.warning, job.notes)
    try:
        # the device is opened by the sweep once it holds the lock on --out and every
        # check passed (a refused sweep creates no emulated GPU state)
        summary = run_sweep(job, reporter=reporter)
    except KeyboardInterrupt:
        reporter.stop()
        say(interrupted_line(job.out), err=True)
        raise
    finally:
        reporter.stop()
    _report(summary, job.out, ACTION_SETS[job.settings.action_set])
    _warn_mixed_speed_sources(job.out)
    if job.adaptive:
        _report_adaptive(job.out, job.plan().points, job.repeats)
    if job.predict is not None:
        _report_predicted(job.out, job.plan().points, job.repeats)
    failure = summary.failure()
    if failure is None and summary.written == 0:  # a resume with nothing left to run
        failure = _no_measured_row(job.out)
    if failure is not None:  # every run failed: the engine's failure, exit 3
        raise failure


def interrupted_line(out: Path) -> str:
    """What an interrupted sweep says: its servers are stopped and, naming ``out`` only where it
    exists, how many complete rows it holds (an early Ctrl-C, before the first row, named a file
    that was never created)."""
    stopped = "interrupted: every server the sweep started was stopped"
    try:
        with out.open("rb") as f:
            rows = sum(1 for line in f if line.endswith(b"\n") and line.strip())
    except FileNotFoundError:
        return f"{stopped}; no row was written (run the same command to start again)"
    except OSError as exc:
        return f"{stopped}; {out} could not be read ({exc.strerror})"
    return f"{stopped}; {out} holds {rows} complete row(s) (continue with --resume)"


def _warn_mixed_speed_sources(out: Path) -> None:
    """``warning:`` when a batch size's successful rows have speeds from sglang's step times
    and from the wall clock (runs too short for step times, hostile trial N58);
    ``train``, ``evaluate`` and ``recommend`` then read that batch size on the wall clock
    (:meth:`specband.sweeps.dataset.Sweep.speed_note`)."""
    from specband.harness.sweepfile import parse_rows  # lazy: off the cold path (recommend, --help)

    sources: dict[Any, set[Any]] = {}
    for _, row in parse_rows(out, verb="resume")[0]:
        if not row.get("error"):
            sources.setdefault(row.get("batch_size"), set()).add(row.get("speed_source"))
    mixed = sorted(str(bs) for bs, found in sources.items() if {"step_time", "wall_clock"} <= found)
    if mixed:
        say(
            f"warning: at batch size(s) {', '.join(mixed)} some speeds come from sglang's step times and others from "
            "the wall clock (their runs were too short for step times, one per 40 decode iterations: raise "
            "--max-new-tokens); train, evaluate and recommend read those batch sizes on the wall clock",
            err=True,
        )


def _no_measured_row(out: Path) -> EngineError | None:
    """The error a resumed sweep ends with when it ran nothing and its file holds error rows
    only (every run failed before, in a way ``--resume`` does not run again, such as an
    out-of-memory): the sweep measured nothing, exit 3 as for a fresh one. ``None`` when a
    row was measured."""
    from specband.harness.sweepfile import parse_rows  # lazy: off the cold path (recommend, --help)

    numbered, _ = parse_rows(out, verb="resume")
    rows = [row for _, row in numbered]
    if not rows or any(not row.get("error") for row in rows):
        return None
    return EngineError(
        f"no run was measured: all {len(rows)} rows of {out} are error rows (first: {rows[0]['error']}); "
        "--resume runs again only the runs that failed for the environment (launch timeouts, a server that died)"
    )


def _report_adaptive(out: Path, points: Sequence[GridPoint], repeats: int) -> None:
    """Print the runs and GPU-seconds the adaptive sweep saved."""
    from specband.harness.adaptive import adaptive_savings  # lazy: off the cold path (recommend, --help)

    saved = adaptive_savings(read_rows_for_resume(out), points, repeats)
    typer.echo(
        f"--adaptive: {saved.runs} of {saved.runs_exhaustive} runs ({saved.runs_saved} saved), "
        f"{saved.gpu_s:.0f} GPU-s of an estimated {saved.gpu_s_exhaustive:.0f} ({saved.gpu_s_saved:.0f} saved)"
    )


def _report_predicted(out: Path, points: Sequence[GridPoint], repeats: int) -> None:
    """Print what the predicted sweep measured against the exhaustive grid, and its picks."""
    from specband.harness.predict import predict_summary  # lazy: off the cold path (recommend, --help)

    got = predict_summary(read_rows_for_resume(out), points, repeats)
    why = ", ".join(f"{n} {k}" for k, n in sorted(got.planned_by.items()))
    typer.echo(
        f"--plan predict: {got.runs} of {got.runs_exhaustive} runs ({why}), {got.gpu_s:.0f} GPU-s of an estimated "
        f"{got.gpu_s_exhaustive:.0f} for the whole grid ({100 * got.gpu_s / max(got.gpu_s_exhaustive, 1e-9):.0f} %)"
    )
    for bs, (action, reward, n) in got.picks.items():
        typer.echo(f"  bs {bs}: pick {action} (measured mean reward {reward:.4f}, {n} row(s))")


def _report(summary: SweepSummary, out: Path, action_set: ActionSet) -> None:
    """Print the sweep summary and check the file loads as a sweep of ``action_set`` (the
    grid's)."""
    from specband.sweeps.dataset import load_sweep  # lazy: off the cold path (recommend, --help)

    say(
        f"wrote {summary.written} rows ({summary.errors} errors) to {out}; skipped {summary.skipped}; "
        f"{summary.launches} server launches in {summary.elapsed_s:.1f} s"
    )
    if summary.one_launch_per_config:
        typer.echo(
            f"--one-launch-per-config saved {summary.launches_saved} launches "
            f"({summary.runs} runs, {summary.launches} launches)"
        )
    if not out.exists() or out.stat().st_size == 0:
        return
    try:
        load_sweep(out, action_set=action_set)
    except DataError as exc:
        say(f"warning: {out} does not load as a training sweep yet: {exc}", err=True)
