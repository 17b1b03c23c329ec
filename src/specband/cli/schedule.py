"""``specband schedule``: a per-batch-size speculation schedule in sglang's or vLLM's format.

The work is in :mod:`specband.deploy.schedule` and :mod:`specband.deploy.tiers` (their NumPy
loads when a schedule is built, not for ``--help``: see :mod:`specband.cli`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from specband.cli.output import note as _note
from specband.cli.output import say
from specband.cli.params import request_command
from specband.contract.actions import EXTENDED_ACTIONS
from specband.core.batchlist import parse_batch_mix
from specband.core.tables import print_table, table_console
from specband.deploy.explain import origin_line
from specband.deploy.schedule import ScheduleRequest
from specband.deploy.usersetup import user_setup
from specband.evaluation.schedules import (
    evaluate_schedules,
    figure_reason,
    render_schedule_table,
    write_schedule_report,
)
from specband.sweeps.dataset import FEATURE_KINDS

if TYPE_CHECKING:
    from specband.deploy.answers import MixAnswer, MixPick, ScheduleAnswer
    from specband.deploy.tiers import TierPick
    from specband.evaluation.baselines import BaselineComparison


def register(app: typer.Typer) -> None:
    """Add ``schedule`` to ``app``."""
    app.command("schedule")(schedule_command)


@request_command(ScheduleRequest)
def schedule_command(request: ScheduleRequest) -> None:
    """Write the energy-band speculation schedule (one chain config, topk 1, per
    batch-size tier) in the engine's own format, and print how far each tier's chain
    config falls behind the best tree config (topk > 1)."""
    from specband.deploy.schedule import write_schedule  # lazy: off the cold path (recommend, --help)

    engine = request.engine
    written = write_schedule(request, user_setup(request.target, request.draft_model, request.gpu))
    origin = origin_line(written.answer.origin)
    for line in (*written.answer.notes, *([origin] if origin else [])):
        _note(line)
    margin_note = engine.serving.schedule_margin_note(request.margin)
    if margin_note is not None:
        _note(margin_note)
    defaults = engine_defaults(request, written.answer)
    if request.output_format == "json":
        doc = written.to_json(request.engine)
        if defaults is not None:
            doc["engine_defaults"] = defaults.to_json()
        typer.echo(json.dumps(doc, indent=2))
        return
    _print_table(written.answer.picks, written.answer.algorithm)
    for pick in written.answer.picks:
        if pick.off_reason:
            _note(pick.off_reason)
    if defaults is not None:
        print_engine_defaults(defaults)
    said, noted = engine.serving.schedule_written(
        written.path, written.config, len(written.tiers), written.engine_checked, request.draft_model
    )
    for line in said:
        say(line)
    made = written.provenance
    say(f"written for {made['engine_version_basis']}; its provenance beside it: {written.provenance_file}")
    for line in (*noted, str(made["beyond_last_tier"])):
        _note(line)


def engine_defaults(request: ScheduleRequest, answer: ScheduleAnswer) -> BaselineComparison | None:
    """The schedule's chain pick at each measured batch size against sglang's default adaptive
    tiers and vLLM with a fixed K (:func:`specband.evaluation.baselines.compare_from_stats`),
    from the folder's per-config means (read once, with the picks); ``None`` when the folder
    records none."""
    from specband.evaluation.baselines import compare_from_stats

    manifest = answer.manifest
    if manifest is None or manifest.origin is None:
        return None
    chosen = {
        p.measured_batch_size: EXTENDED_ACTIONS[p.chain[0]]
        for p in answer.picks
        if p.measured_batch_size in manifest.stats
    }
    if not chosen:
        return None
    return compare_from_stats(manifest.stats, manifest.origin, chosen, algorithm=f"{request.algo} schedule")


def print_engine_defaults(comparison: BaselineComparison) -> None:
    """The comparison's table (stdout) and notes (stderr)."""
    from rich.table import Table

    from specband.evaluation.baselines import comparison_table

    title, headers, rows, notes = comparison_table(comparison)
    table = Table(title=title, title_justify="left")
    for h in headers:
        table.add_column(h, overflow="fold")
    for r in rows:
        table.add_row(*r)
    print_table(table, table_console())
    for line in notes:
        _note(line)


def _print_table(picks: Sequence[TierPick], algorithm: str) -> None:
    from rich.table import Table

    table = Table(title=f"{algorithm}: chain schedule (topk 1) vs the best tree config (estimated reward)")
    for name in ("bs", "measured", "chain pick", "reward", "candidate steps", "best tree", "tree reward", "chain cost"):
        table.add_column(name, justify="right" if name in ("bs", "measured") else "left")
    for p in picks:
        table.add_row(
            str(p.batch_size),
            str(p.measured_batch_size),
            str(EXTENDED_ACTIONS[p.chain[0]]),
            f"{p.chain_reward:.4f}",
            ",".join(map(str, p.steps)),
            "-" if p.tree_index is None else str(EXTENDED_ACTIONS[p.tree_index]),
            "-" if p.tree_reward is None else f"{p.tree_reward:.4f}",
            "-" if p.chain_cost is None else f"{p.chain_cost:+.4f}",
        )
    print_table(table, table_console())


def print_mix_recommendation(answer: MixAnswer, output_format: str) -> None:
    """Print ``recommend --batch-mix``'s answer (:class:`specband.deploy.answers.MixAnswer`):
    its notes and each batch size's own pick with the regret of using one config for all on
    stderr, the flags line alone on stdout (JSON on stdout with ``--format json``)."""
    for line in answer.notes:
        _note(line)
    if output_format == "json":
        typer.echo(json.dumps(answer.to_json(), indent=2))
    else:
        _print_mix_table(answer.pick, answer.algorithm)
        typer.echo(shlex.join(answer.flags))
    if answer.action.is_baseline:
        _note("the pick is the non-speculative baseline (0,0,0): launch without speculative flags")


def _print_mix_table(pick: MixPick, algorithm: str) -> None:
    from rich.table import Table

    table = Table(
        title=f"{algorithm}: one config for the mix, {EXTENDED_ACTIONS[pick.index]} (expected reward "
        f"{pick.expected_reward:.4f}, expected regret {pick.expected_regret:.4f})"
    )
    for name in ("bs", "measured", "weight", "own pick", "own reward", "mix pick reward", "regret"):
        table.add_column(name, justify="left" if name.split()[-1] == "pick" else "right")
    for r in pick.rows:
        table.add_row(
            str(r.batch_size),
            str(r.measured_batch_size),
            f"{r.weight:.3f}",
            str(EXTENDED_ACTIONS[r.own_index]),
            f"{r.own_reward:.4f}",
            f"{r.mix_reward:.4f}",
            f"{r.regret:.4f}",
        )
    print_table(table, table_console(stderr=True))  # with the notes: stdout is the flags line only


def evaluate_schedules_hook(
    sweep: Any,
    holdout: str,
    algo: list[str] | None,
    features: list[str] | None,
    batch_mix: str | None,
    seed: int,
    n_bootstrap: int,
    out_dir: Path | None,
    to_stderr: bool = False,
) -> list[Path]:
    """``specband evaluate --schedules``: score schedules and batch-mix picks held out
    (:func:`specband.evaluation.schedules.evaluate_schedules`), print the table (on stderr
    when ``to_stderr``, e.g. beside ``--json``) and write ``schedules.json`` and
    ``schedules.png`` into the report folder.

    Returns:
        the written paths (empty without ``out_dir``).
    """

    result = evaluate_schedules(
        sweep,
        holdout=holdout,
        algorithms=algo or None,
        features=tuple(features) if features else FEATURE_KINDS,
        mix=None if batch_mix is None else parse_batch_mix(batch_mix),
        seed=seed,
        n_bootstrap=n_bootstrap,
    )
    render_schedule_table(result, table_console(stderr=to_stderr))
    if out_dir is None:
        return []
    reason = figure_reason(result)
    if reason is not None:
        _note(f"no schedules.png: {reason}")
    return write_schedule_report(result, out_dir)
