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

from specband.limits import MAX_BATCH_SIZE, MAX_SEED
from specband.recommend import DEFAULT_MODELS_DIR


def say(text: str, *, err: bool = False) -> None:
    """Print ``text`` as one line (on stderr with ``err``), its unprintable characters
    escaped (:func:`specband.errors.one_line`): the one way every success, note and
    warning line that names a path or a value from the user is printed, so that a file
    name holding a newline cannot split it or pose as a second line."""
    from specband.errors import one_line

    print(one_line(text), file=sys.stderr if err else sys.stdout)


def _note(message: str) -> None:
    say(f"note: {message}", err=True)


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
        force: bool = typer.Option(
            False, "--force", help="Replace an --out folder trained on other data (checked before training)."
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
        from specband.training import check_out_folder

        check_out_folder(
            out, sweep, force=force, data_label="the bundled published measurements" if data is None else str(data)
        )
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
        _print_picks(rows, "measured" if manifest.origin is None else manifest.origin.provenance)
        _print_power_label(sweep.rows)

    @app.command("recommend")
    def recommend_command(
        batch_size: int | None = typer.Option(
            None,
            "--batch-size",
            "-b",
            help="Concurrent requests (--max-running-requests). "
            "Required unless --batch-mix or --batch-mix-from is given.",
            show_default=False,
            min=1,
            max=MAX_BATCH_SIZE,
            metavar="N",
        ),
        algo: str = typer.Option("lookup_table", "--algo", "-a", help="Algorithm to ask.", metavar="NAME"),
        models: Path | None = typer.Option(
            None,
            "--models",
            "-m",
            help="Artifact folder (from `specband train`, or the model card's layout) or a Hugging Face "
            "hub id (org/name[@REV], hf://org/name). "
            f"Default: ./{DEFAULT_MODELS_DIR} when it exists, else the embedded policy trained on the "
            "bundled published measurements.",
            show_default=False,
            metavar="DIR",
        ),
        state: tuple[float, float, float] | None = typer.Option(
            None,
            "--state",
            help="GPU state TEMP_C MEM_MB UTIL_PCT (for 'pre' models: the idle GPU before launch). "
            "Default: the state the folder's picks were made from.",
            show_default=False,
            metavar="TEMP_C MEM_MB UTIL_PCT",
        ),
        output_format: str = typer.Option(
            "flags", "--format", "-f", help="'flags' (one line) or 'json'.", metavar="KIND"
        ),
        draft_model: str | None = typer.Option(
            None,
            "--draft-model",
            help="EAGLE3 draft model path or id, emitted as --speculative-draft-model-path.",
            show_default=False,
            metavar="PATH",
        ),
        data: Path | None = typer.Option(
            None,
            "--data",
            help="Sweep to take allowed configs (and doubly_robust's IPS correction) from, for a "
            "folder without a specband manifest.",
            show_default=False,
            metavar="SWEEP",
        ),
        trust_pickle: bool = typer.Option(
            False,
            "--trust-pickle",
            help="Unpickle a joblib file that specband did not write (no matching sha256 in the folder's "
            "specband.json, or a downloaded folder). Unpickling runs code from the file.",
        ),
        batch_mix: str | None = typer.Option(
            None,
            "--batch-mix",
            help="One pick for a batch-size mix BS:WEIGHT,... (weights normalised), with "
            "each batch size's own pick and the regret beside it.",
            show_default=False,
            metavar="MIX",
        ),
        batch_mix_from: Path | None = typer.Option(
            None,
            "--batch-mix-from",
            help="As --batch-mix, the mix read from sglang's Prometheus metrics text "
            "(samples or a histogram of sglang:num_running_reqs).",
            show_default=False,
            metavar="FILE",
        ),
        target: str | None = typer.Option(
            None,
            "--target",
            help="Your target model (path or id), checked against the data's. Default: the data's own.",
            show_default=False,
            metavar="MODEL",
        ),
        gpu: str | None = typer.Option(
            None,
            "--gpu",
            help="Your GPU as a simulator profile (h100-sxm, h200, ...), checked against the data's. "
            "Default: NVML's GPU 0; without NVML the GPU is not checked (a note says so).",
            show_default=False,
            metavar="PROFILE",
        ),
        target_config: str | None = typer.Option(
            None,
            "--target-config",
            help="With --gpu: a simulated first guess for this target (config.json, folder, bundled name or "
            "hub id), labelled with the profile's calibration error.",
            show_default=False,
            metavar="CONFIG",
        ),
        draft_config: str | None = typer.Option(
            None,
            "--draft-config",
            help="With --gpu: the EAGLE3 draft head's config.json for the simulated first guess.",
            show_default=False,
            metavar="CONFIG",
        ),
        allow_transfer: bool = typer.Option(
            False,
            "--allow-transfer",
            help="Take a pick whose data came from another GPU, model or power limit (the difference is "
            "printed as a warning) instead of stopping.",
        ),
    ) -> None:
        """Print the sglang flags for a batch size, ready to paste after
        `python -m sglang.launch_server`."""
        from specband.errors import ConfigError

        if output_format not in ("flags", "json"):
            raise ConfigError(f"--format must be 'flags' or 'json', got {output_format!r}")
        if state is not None:
            from specband.state import check_gpu_state

            check_gpu_state(*state, option="--state")
        if draft_model is not None and not draft_model.strip():
            raise ConfigError("--draft-model: empty; give the EAGLE3 draft model's path or hub id")
        if batch_mix is not None or batch_mix_from is not None:
            from specband.cli.schedule import recommend_batch_mix

            recommend_batch_mix(
                batch_mix, batch_mix_from, batch_size, algo, models, data, state, draft_model, output_format
            )
            return
        if batch_size is None:
            raise ConfigError("--batch-size is required (or --batch-mix / --batch-mix-from for a batch-size mix)")
        from specband.explain import answer_lines

        if target_config is not None or draft_config is not None:
            if gpu is None:
                raise ConfigError("--target-config/--draft-config make a simulated first guess: give --gpu PROFILE")
            from specband.firstguess import first_guess

            decided = first_guess(batch_size, gpu, target_config, draft_config, draft_model=draft_model)
        else:
            from specband.recommend import recommend
            from specband.transfer import user_setup

            decided = recommend(
                batch_size,
                algo,
                models,
                state,
                draft_model,
                data,
                trust_pickle=trust_pickle,
                setup=user_setup(target, draft_model, gpu),
                allow_transfer=allow_transfer,
            )
        for note in (*decided.notes, *answer_lines(decided.pick)):
            _note(note)
        result = decided.pick
        if output_format == "json":
            typer.echo(json.dumps(result, indent=2))
        else:
            typer.echo(shlex.join(result["flags"]))
        if result["action"] == [0, 0, 0]:
            _note("the pick is the non-speculative baseline (0,0,0): launch without speculative flags")
        elif draft_model is None:
            _note(
                "sglang needs --speculative-draft-model-path for EAGLE3; pass --draft-model PATH to "
                "include it (the published study used rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct)"
            )


def _print_power_label(rows: Any) -> None:
    """Label the printed band figures when the rows' power rests on no measurement
    (:func:`specband.sim.power.unmeasured_power_note`)."""
    from specband.sim.power import unmeasured_power_note

    label = unmeasured_power_note(rows)
    if label:
        typer.echo(label)


def _print_picks(rows: list[Any], provenance: str = "measured") -> None:
    from rich.console import Console
    from rich.table import Table

    from specband.actions import ACTIONS, REFERENCE_ACTION

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
