"""Core commands: ``specband train``, ``specband recommend`` and ``specband actions``.

Only typer and the standard library are imported at module level; ``recommend`` with the
default ``lookup_table`` imports neither torch nor scikit-learn.
"""

from __future__ import annotations

import enum
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import typer

from specband.cli.output import note as _note
from specband.cli.output import print_power_label as _print_power_label
from specband.cli.output import say
from specband.cli.params import request_command
from specband.limits import MAX_SEED
from specband.recommend import DEFAULT_MODELS_DIR, RecommendRequest


def _out_path(text: str) -> Path:
    """:func:`specband.cli.options.out_path`, imported when ``train`` parses (a cold
    ``recommend`` loads no other command's module)."""
    from specband.cli.options import out_path

    return out_path(text)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


class FeatureChoice(str, enum.Enum):
    """``--features`` of ``train``: :data:`specband.dataset.FEATURE_KINDS` (a test holds the
    two equal; declared here, not in ``cli/options.py``, so that a cold ``recommend`` loads
    no other CLI module)."""

    contract = "contract"
    pre = "pre"


def register(app: typer.Typer) -> None:
    """Add the core commands to ``app``."""

    @app.command("actions")
    def actions_command(
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """List the 19 contract actions with their index and sglang flags."""
        from specband.actions import ACTIONS, REFERENCE_INDEX, server_args_kwargs, sglang_cli_args

        if as_json:
            out = [
                {
                    "index": i,
                    "action": list(a),
                    "flags": sglang_cli_args(a),
                    "kwargs": server_args_kwargs(a),
                }
                for i, a in enumerate(ACTIONS)
            ]
            typer.echo(json.dumps(out, indent=2))
            return
        from rich.console import Console
        from rich.table import Table

        table = Table(title="specband actions (index = position in every published policy file)")
        table.add_column("index", justify="right")
        table.add_column("(steps, topk, draft)")
        table.add_column("sglang flags")
        for i, a in enumerate(ACTIONS):
            note = "  (baseline)" if a.is_baseline else "  (reference)" if i == REFERENCE_INDEX else ""
            flags = " ".join(sglang_cli_args(a)) or "(no speculative flags)"
            table.add_row(str(i), f"({a[0]}, {a[1]}, {a[2]}){note}", flags)
        Console().print(table)

    @app.command("train")
    def train_command(
        data: Path | None = typer.Argument(
            None,
            help="Sweep JSONL (published sweep schema, specband sweep/simulate output, or sglang "
            "bench_speculative.py output), a Parquet file, or a hub dataset id (datasets/org/name[@REV], "
            "hf://datasets/org/name). Default: the bundled published measurements.",
            show_default=False,
            metavar="DATA",
        ),
        out: Path = typer.Option(
            Path(DEFAULT_MODELS_DIR), "--out", "-o", help="Artifact folder to write.", metavar="DIR", parser=_out_path
        ),
        algo: list[str] | None = typer.Option(
            None,
            "--algo",
            "-a",
            help="Algorithm to train (repeatable). Default: all eight.",
            show_default=False,
            metavar="NAME",
        ),
        power_limit: float | None = typer.Option(
            None,
            "--power-limit",
            help="GPU power limit in W, overriding the rows' own.",
            show_default=False,
            metavar="W",
        ),
        seed: int = typer.Option(
            0, "--seed", help="Training seed (same seed, same artifacts).", min=0, max=MAX_SEED, metavar="N"
        ),
        features: FeatureChoice = typer.Option(
            FeatureChoice.pre,
            "--features",
            help="Decision state: 'pre' (only what is known before launch: batch size, temperature, "
            "memory used and utilisation of the idle GPU) or 'contract' (the published 4-float state, "
            "whose memory and utilisation were read after the run).",
            metavar="KIND",
        ),
    ) -> None:
        """Train the policies on a sweep and write the artifact folder (model card layout).

        Prints, per algorithm and batch size, the pick, its mean observed reward and the
        reference (3,4,8) beside it.
        """
        import dataclasses
        import time

        from specband.artifacts import save_artifacts, validate_algorithms
        from specband.dataset import load_sweep
        from specband.devices.base import check_power_limit_w
        from specband.hub import parse_hub_ref, resolve_data_file
        from specband.picks import pick_table
        from specband.recommend import folder_algorithms
        from specband.training import build_manifest, train_policies

        names = validate_algorithms(algo)
        limit_w = check_power_limit_w(power_limit)
        sweep = load_sweep(None if data is None else resolve_data_file(data), power_limit_w=limit_w)
        from specband.harness.draft_health import warn_if_draft_rejected

        warn_if_draft_rejected(sweep)
        energy_note = sweep.energy_note()
        if energy_note is not None:
            _note(energy_note)
        training = sweep.training_data(features.value)
        start = time.perf_counter()
        policies = train_policies(training, names, seed=seed)
        elapsed = time.perf_counter() - start
        manifest = build_manifest(training, names, seed=seed, sweep=sweep)
        hub_data = None if data is None else parse_hub_ref(data)
        if hub_data is not None:  # record the hub id, not the cache path
            manifest = dataclasses.replace(manifest, data={**manifest.data, "path": f"hf://{hub_data}"})
        previous = folder_algorithms(out)
        rows = pick_table(policies, manifest)
        from specband.modelcard import render_model_card

        dataset_id = hub_data.repo_id if hub_data is not None and hub_data.repo_type == "dataset" else None
        folder = save_artifacts(
            policies,
            out,
            manifest,
            model_card=lambda final: render_model_card(final, sweep, rows, dataset_id=dataset_id),
        )
        dropped = [name for name in previous if name not in names]
        if dropped:
            _note(f"{folder} was replaced; it no longer holds {', '.join(dropped)} (train them again with --algo)")
        source = "bundled published measurements" if data is None else str(data)
        say(
            f"trained {len(names)} algorithm(s) on {source} ({len(training)} training rows, "
            f"features={features.value}, seed={seed}) in {elapsed:.2f} s; wrote {folder}"
        )
        _print_picks(rows)
        _print_power_label(sweep.rows)

    app.command("recommend")(recommend_command)


@request_command(RecommendRequest)
def recommend_command(request: RecommendRequest) -> None:
    """Print the sglang flags for a batch size, ready to paste after
    `python -m sglang.launch_server`."""
    if request.is_mix:
        from specband.cli.schedule import print_mix_recommendation
        from specband.schedule import recommend_mix

        print_mix_recommendation(recommend_mix(request), request.output_format)
        return
    from specband.recommend import recommend_request

    decided = recommend_request(request)
    for line in decided.notes:
        _note(line)
    result = decided.pick
    if request.output_format == "json":
        typer.echo(json.dumps(result, indent=2))
    else:
        typer.echo(shlex.join(result["flags"]))
    if result["action"] == [0, 0, 0]:
        _note("the pick is the non-speculative baseline (0,0,0): launch without speculative flags")
    elif request.draft_model is None:
        _note(
            "sglang needs --speculative-draft-model-path for EAGLE3; pass --draft-model PATH to "
            "include it (the published study used rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct)"
        )


def _print_picks(rows: list[Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from specband.actions import ACTIONS, REFERENCE_ACTION

    table = Table(title="picks per algorithm and batch size (mean observed reward in the training data)")
    table.add_column("algorithm")
    table.add_column("bs", justify="right")
    table.add_column("pick")
    table.add_column("reward", justify="right")
    table.add_column(f"reference {REFERENCE_ACTION}", justify="right")
    table.add_column("vs ref", justify="right")
    table.add_column("best measured", justify="right")
    previous = None
    for r in rows:
        delta = None if r.mean_reward is None or r.reference_reward is None else r.mean_reward - r.reference_reward
        best = "-" if r.best_action is None else f"{ACTIONS[r.best_action]} {_fmt(r.best_reward)}"
        table.add_row(
            r.algorithm if r.algorithm != previous else "",
            str(r.batch_size),
            str(ACTIONS[r.action]),
            _fmt(r.mean_reward),
            _fmt(r.reference_reward),
            "-" if delta is None else f"{delta:+.4f}",
            best,
            end_section=False,
        )
        previous = r.algorithm
    console = Console(width=None if sys.stdout.isatty() else 110, soft_wrap=False)
    console.print(table)
