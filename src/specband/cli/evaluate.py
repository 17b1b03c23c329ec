"""``specband evaluate``: how good each policy's pick really is, held out."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from specband.limits import MAX_BOOTSTRAP_RESAMPLES, MAX_SEED


def register(app: typer.Typer) -> None:
    """Add ``specband evaluate`` to ``app``."""

    @app.command("evaluate")
    def evaluate_command(
        data: Path | None = typer.Argument(
            None,
            help="Sweep JSONL file (default: the bundled 29 published measurements).",
            show_default=False,
            metavar="DATA",
        ),
        holdout: str = typer.Option(
            "auto",
            "--holdout",
            help="repeat: train on all but one repeat, score on it, for every repeat; trial: same by "
            "trial; none: in-sample (labelled so); auto: repeat if the data has repeats, else trial, "
            "else none.",
            metavar="KIND",
        ),
        algo: list[str] | None = typer.Option(
            None,
            "--algo",
            help="Algorithm to evaluate (repeatable; default: all eight).",
            show_default=False,
            metavar="NAME",
        ),
        features: list[str] | None = typer.Option(
            None,
            "--features",
            help="State features: contract and/or pre (repeatable; default: both).",
            show_default=False,
            metavar="KIND",
        ),
        out: str | None = typer.Option(
            None,
            "--out",
            help="Write report.md, evaluation.json and PNG figures into this folder (new, empty, or a "
            "previous report folder, whose report files are replaced).",
            show_default=False,
            metavar="DIR",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of tables."),
        seed: int = typer.Option(0, "--seed", help="Training and bootstrap seed (>= 0).", max=MAX_SEED, metavar="N"),
        n_bootstrap: int = typer.Option(
            1000,
            "--bootstrap",
            help="Bootstrap resamples per interval.",
            min=1,
            max=MAX_BOOTSTRAP_RESAMPLES,
            metavar="N",
        ),
        power_limit: float | None = typer.Option(
            None,
            "--power-limit",
            help="GPU power limit in W, overriding the rows' own (power_limit_watts).",
            show_default=False,
            metavar="W",
        ),
        schedules: bool = typer.Option(
            False,
            "--schedules",
            help="Also score, per split, serving a batch-size mix with a per-batch-size "
            "schedule (chain configs, as `specband schedule`), the batch-mix pick and the per-batch-size picks "
            "against the best fixed config (schedules.json and schedules.png with --out).",
        ),
        batch_mix: str | None = typer.Option(
            None,
            "--batch-mix",
            help="With --schedules: the mix BS:WEIGHT,... (default: uniform over the held-out batch sizes).",
            show_default=False,
            metavar="MIX",
        ),
    ) -> None:
        """Train on all but one repeat (or trial), score each algorithm's pick per batch size on
        the held-out rows, for every split: pick, reward, oracle, reference (3,4,8), regret,
        utilisation and band, with 95 % bootstrap intervals, for contract and pre features."""
        import sys

        from specband.dataset import FEATURE_KINDS, load_sweep
        from specband.devices.base import check_power_limit_w
        from specband.errors import ConfigError
        from specband.evaluation.holdout import evaluate
        from specband.evaluation.report import check_report_dir, render_tables, result_to_json, write_report

        check_power_limit_w(power_limit)
        if seed < 0:
            raise ConfigError(f"--seed must be a whole number >= 0, got {seed}")
        out_dir = check_report_dir(out) if out is not None else None
        if batch_mix is not None and not schedules:
            raise ConfigError("--batch-mix goes with --schedules")
        if batch_mix is not None:
            from specband.batchmix import parse_batch_mix

            parse_batch_mix(batch_mix)  # checked before anything is computed
        from specband.hub import resolve_data_file

        sweep = load_sweep(None if data is None else resolve_data_file(data), power_limit_w=power_limit)
        from specband.harness.draft_health import warn_if_draft_rejected

        warn_if_draft_rejected(sweep)
        if sweep.power_limit_assumed:
            from specband.cli.core import _note

            _note(str(sweep.energy_note()))

        def progress(message: str) -> None:
            if not as_json and sys.stderr.isatty():
                print(message, file=sys.stderr, flush=True)

        from specband.training import at_highest_power_limit

        full_sweep = sweep
        sweep, limit_note = at_highest_power_limit(sweep, "are evaluated")
        if limit_note:
            from specband.cli.core import _note

            _note(limit_note)
        result = evaluate(
            sweep,
            holdout=holdout,
            algorithms=algo or None,
            features=tuple(features) if features else FEATURE_KINDS,
            seed=seed,
            n_bootstrap=n_bootstrap,
            progress=progress,
        )
        written = write_report(result, out_dir) if out_dir is not None else []
        if out_dir is not None:
            from specband.recommend import sweep_power_limits

            if len(sweep_power_limits(full_sweep)) > 1:  # the pair (limit, flags): issue 20
                from specband.evaluation.power_limits import power_limit_curves, write_power_limit_report
                from specband.sim.power import unmeasured_power_note

                curves = power_limit_curves(full_sweep, power_label=unmeasured_power_note(full_sweep.rows))
                written += write_power_limit_report(curves, out_dir)
        if schedules:  # issue 10: schedules and batch-mix picks held out (table on stderr with --json)
            from specband.cli.schedule import evaluate_schedules_hook

            written += evaluate_schedules_hook(
                sweep, holdout, algo, features, batch_mix, seed, n_bootstrap, out_dir, as_json
            )
        if as_json:
            from specband.sim.power import unmeasured_power_note

            payload = result_to_json(result)
            label = unmeasured_power_note(sweep.rows)
            if label:
                payload = {**payload, "power_unmeasured": label}
            typer.echo(json.dumps(payload, indent=2))
            return
        render_tables(result)
        from specband.cli.core import _print_power_label

        _print_power_label(sweep.rows)
        from specband.cli.core import say

        for path in written:
            say(f"wrote {path}")
