"""``specband evaluate``: how good each policy's pick really is, held out."""

from __future__ import annotations

import json

import typer

from specband.artifacts.fit import at_highest_power_limit
from specband.cli.output import note, print_power_label, say
from specband.cli.params import request_command
from specband.cli.schedule import evaluate_schedules_hook
from specband.evaluation.limit_curves import power_limit_curves, write_power_limit_report
from specband.evaluation.report import check_report_dir, render_tables, report_extras, result_to_json, write_report
from specband.evaluation.request import EvaluateRequest, evaluate_request, load_request_sweep
from specband.harness.draft_health import warn_if_draft_rejected
from specband.sim.power import unmeasured_power_note


def register(app: typer.Typer) -> None:
    """Add ``specband evaluate`` to ``app``."""
    app.command("evaluate")(evaluate_command)


@request_command(EvaluateRequest)
def evaluate_command(request: EvaluateRequest) -> None:
    """Train on all but one repeat (or trial), score each algorithm's pick per batch size on
    the held-out rows, for every split: pick, reward, oracle, reference (3,4,8), regret,
    utilisation and band, with 95 % bootstrap intervals, for contract and pre features."""
    import sys

    r = request
    out_dir = check_report_dir(r.out) if r.out is not None else None
    sweep = load_request_sweep(r)
    warn_if_draft_rejected(sweep)
    speed_note = sweep.speed_note()
    if speed_note is not None:
        say(speed_note if speed_note.startswith("warning: ") else f"note: {speed_note}", err=True)
    if sweep.power_limit_assumed:
        note(str(sweep.energy_note()))

    full_sweep = sweep  # several power limits (issue 20): the policies on the highest limit's rows
    sweep, limit_note = at_highest_power_limit(sweep, "are evaluated")
    if limit_note:
        note(limit_note)

    def progress(message: str) -> None:
        if not r.as_json and sys.stderr.isatty():
            print(message, file=sys.stderr, flush=True)

    result = evaluate_request(r, sweep, progress)
    extras = report_extras(result, sweep)  # the data's configs, the pick against the engines' defaults
    report = write_report(result, out_dir, extras) if out_dir is not None else None
    written = [] if report is None else list(report.paths)
    if out_dir is not None and limit_note:  # the pair (limit, flags) at every limit
        curves = power_limit_curves(full_sweep, power_label=unmeasured_power_note(full_sweep.rows))
        written += write_power_limit_report(curves, out_dir)
    if r.schedules:  # issue 10: schedules and batch-mix picks held out (table on stderr with --json)
        written += evaluate_schedules_hook(
            sweep, r.holdout, r.algorithms, r.features, r.batch_mix, r.seed, r.n_bootstrap, out_dir, r.as_json
        )
    if r.as_json:
        payload = result_to_json(result)
        if extras.comparison is not None:
            payload["engine_defaults"] = extras.comparison.to_json()
        label = unmeasured_power_note(sweep.rows)
        if label:
            payload = {**payload, "power_unmeasured": label}
        typer.echo(json.dumps(payload, indent=2))
        return
    render_tables(result, comparison=extras.comparison)
    print_power_label(sweep.rows)
    for path in written:
        say(f"wrote {path}")
    for line in [] if report is None else report.skipped():
        note(line)
