"""``specband train``: train the policies on a sweep and write the artifact folder."""

from __future__ import annotations

from typing import Any

import typer

from specband.artifacts.request import TrainRequest
from specband.cli.output import note, print_power_label, say
from specband.cli.params import request_command
from specband.cli.progress import progress
from specband.contract.actions import EXTENDED_ACTIONS, REFERENCE_ACTION
from specband.core.tables import print_table, table_console
from specband.harness.draft_health import warn_if_draft_rejected


def register(app: typer.Typer) -> None:
    """Add ``train`` to ``app``."""
    app.command("train")(train_command)


@request_command(TrainRequest)
def train_command(request: TrainRequest) -> None:
    """Train the policies on a sweep and write the artifact folder (model card layout).

    Prints, per algorithm and batch size, the pick, its mean observed reward and the
    reference (3,4,8) beside it.
    """
    from specband.artifacts.request import run_training  # lazy: off the cold path (recommend, --help)

    def loaded(sweep: Any) -> None:
        warn_if_draft_rejected(sweep)
        energy_note = sweep.energy_note()
        if energy_note is not None:
            note(energy_note)
        speed_note = sweep.speed_note()
        if speed_note is not None:
            say(speed_note if speed_note.startswith("warning: ") else f"note: {speed_note}", err=True)

    with progress("specband train: reading the sweep") as step:

        def fitted(name: str, index: int, total: int) -> None:
            step(f"specband train: {index}/{total} fitted ({name}); {'writing' if index == total else 'fitting'}")

        done = run_training(request, loaded, fitted)
    for line in done.notes:
        note(line)
    if done.dropped:
        note(f"{done.folder} was replaced; it no longer holds {', '.join(done.dropped)} (train them again with --algo)")
    source = "bundled published measurements" if request.data is None else str(request.data)
    say(
        f"trained {len(done.algorithms)} algorithm(s) on {source} ({done.training_rows} training rows, "
        f"features={request.features}, seed={request.seed}) in {done.elapsed_s:.2f} s; wrote {done.folder}"
    )
    _print_picks(done.picks, done.provenance)
    print_power_label(done.sweep.rows)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _print_picks(rows: list[Any], provenance: str = "measured") -> None:
    from rich.table import Table

    simulated = "simulated" in provenance
    kind = "simulated" if simulated else "emulated" if "emulated" in provenance else "measured"
    title = f"picks per algorithm and batch size (mean reward in the training data: {provenance} rows)"
    if simulated:
        title += "; SIMULATED, not measured"
    table = Table(title=title)
    table.add_column("algorithm")
    table.add_column("bs", justify="right")
    table.add_column("pick")
    table.add_column("reward", justify="right")
    table.add_column(f"reference {REFERENCE_ACTION}", justify="right")
    table.add_column("vs ref", justify="right")
    table.add_column(f"best {kind}", justify="right")
    previous = None
    for r in rows:
        delta = None if r.mean_reward is None or r.reference_reward is None else r.mean_reward - r.reference_reward
        best = "-" if r.best_action is None else f"{EXTENDED_ACTIONS[r.best_action]} {_fmt(r.best_reward)}"
        table.add_row(
            r.algorithm if r.algorithm != previous else "",
            str(r.batch_size),
            str(EXTENDED_ACTIONS[r.action]),
            _fmt(r.mean_reward),
            _fmt(r.reference_reward),
            "-" if delta is None else f"{delta:+.4f}",
            best,
            end_section=False,
        )
        previous = r.algorithm
    print_table(table, table_console())
