"""``specband schedule``: a per-batch-size speculation schedule in sglang's or vLLM's format.

Only typer and the standard library are imported at module level (see
:mod:`specband.cli`); the work is in :mod:`specband.schedule`.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from specband.cli.core import _note, say
from specband.cli.options import out_path

ENGINES = ("sglang", "vllm")


def register(app: typer.Typer) -> None:
    """Add ``schedule`` to ``app``."""

    @app.command("schedule")
    def schedule_command(
        engine: str = typer.Option(..., "--engine", "-e", help="Engine format: sglang or vllm.", metavar="NAME"),
        models: Path | None = typer.Option(
            None,
            "--models",
            "-m",
            help="Artifact folder (as `specband recommend`). Default: ./specband-models when it holds --algo, "
            "else the embedded policy trained on the bundled published measurements.",
            show_default=False,
            metavar="DIR",
        ),
        algo: str = typer.Option("lookup_table", "--algo", "-a", help="Algorithm to ask.", metavar="NAME"),
        batch_sizes: str | None = typer.Option(
            None,
            "--batch-sizes",
            help="Comma-separated batch sizes to schedule. Default: the measured ones.",
            show_default=False,
            metavar="N,N,...",
        ),
        margin: float = typer.Option(
            0.0,
            "--margin",
            help="sglang: chain configs scoring within this many reward units of the best join a tier's "
            "candidate_steps, so sglang's acceptance controller can move inside the set.",
            metavar="R",
        ),
        out: Path = typer.Option(
            Path("specband-schedule.json"), "--out", "-o", help="File to write.", metavar="FILE", parser=out_path
        ),
        force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
        draft_model: str | None = typer.Option(
            None,
            "--draft-model",
            help="EAGLE3 draft model path or id (vLLM's `model`; sglang's launch flag).",
            show_default=False,
            metavar="PATH",
        ),
        data: Path | None = typer.Option(
            None,
            "--data",
            help="Sweep for a folder without a specband manifest (as recommend).",
            show_default=False,
            metavar="SWEEP",
        ),
        include_unmeasured: bool = typer.Option(
            False,
            "--include-unmeasured",
            help="Let a model-based policy score configs never measured at a batch size (default: only measured "
            "configs, as recommend).",
        ),
        engine_check: bool = typer.Option(
            True,
            "--engine-check/--no-engine-check",
            help="Load the sglang file with sglang's own _load_adaptive_config when sglang is importable.",
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
            help="Your GPU as a simulator profile, checked against the data's. Default: NVML's GPU 0.",
            show_default=False,
            metavar="PROFILE",
        ),
        allow_transfer: bool = typer.Option(
            False,
            "--allow-transfer",
            help="Schedule with data from another GPU, model or power limit (the difference is printed as a "
            "warning) instead of stopping.",
        ),
        output_format: str = typer.Option(
            "text",
            "--format",
            "-f",
            help="'text' (a table) or 'json' (tiers, origin, transfer, why speculation is off).",
            metavar="KIND",
        ),
    ) -> None:
        """Write the energy-band speculation schedule (one chain config, topk 1, per
        batch-size tier) in the engine's own format, and print how far each tier's chain
        config falls behind the best tree config (topk > 1)."""
        from specband.errors import ConfigError
        from specband.fileio import check_out_path, write_text_atomic
        from specband.schedule import (
            load_scorer,
            merge_tiers,
            pick_chain_tiers,
            sglang_adaptive_config,
            sglang_schedule_flags,
            validate_with_sglang,
            vllm_speculative_config,
        )

        if engine not in ENGINES:
            raise ConfigError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        check_out_path(out, overwrite=force)
        from specband.batchlist import parse_batch_sizes

        sizes = None if batch_sizes is None else parse_batch_sizes(batch_sizes)
        if output_format not in ("text", "json"):
            raise ConfigError(f"--format must be 'text' or 'json', got {output_format!r}")
        scorer = load_scorer(algo, models, data, measured_only=not include_unmeasured)
        from specband.explain import origin_line
        from specband.recommend import pick_origin
        from specband.schedule import check_scorer_transfer
        from specband.transfer import user_setup

        transfer = check_scorer_transfer(scorer, user_setup(target, draft_model, gpu), allow=allow_transfer)
        picks = pick_chain_tiers(scorer, sizes, margin)
        tiers = merge_tiers(picks)
        checked = []
        check: Callable[[Path], None] | None = None
        if engine == "sglang":
            obj: dict[str, Any] = sglang_adaptive_config(tiers)

            def check_with_sglang(tmp: Path) -> None:
                if engine_check and validate_with_sglang(tmp):
                    checked.append(True)

            check = check_with_sglang
        else:
            if margin:
                _note("--margin is for sglang's candidate sets; vLLM takes one K per range (the best)")
            obj = vllm_speculative_config(tiers, draft_model)
        write_text_atomic(out, json.dumps(obj, indent=2) + "\n", error=ConfigError, check=check)
        origin = pick_origin(scorer.manifest, None)
        for line in (*transfer.warnings, origin_line(origin)):
            if line:
                _note(line)
        if output_format == "json":
            from specband.actions import ACTIONS

            summary = {
                "engine": engine,
                "path": str(out),
                "config": obj,
                "batch_sizes": [
                    {
                        "batch_size": p.batch_size,
                        "measured_batch_size": p.measured_batch_size,
                        "chain_pick": list(ACTIONS[p.chain[0]]),
                        "candidate_steps": list(p.steps),
                        "speculation_off": p.off_reason,
                    }
                    for p in picks
                ],
                "origin": {k: v for k, v in origin.items() if k not in ("rows", "repeats")},
                "transfer": transfer.to_json(),
            }
            typer.echo(json.dumps(summary, indent=2))
            return
        _print_table(picks, scorer.algorithm)
        for pick in picks:
            if pick.off_reason:
                _note(pick.off_reason)
        if engine == "sglang":
            from specband.schedule import check_sglang_adaptive_config

            entries = check_sglang_adaptive_config(obj)
            say(
                f"wrote {out} ({len(tiers)} tier(s)); "
                + (
                    "sglang's _load_adaptive_config accepts it"
                    if checked
                    else "sglang not importable: checked with its rules"
                )
            )
            try:
                say("sglang flags: " + shlex.join(sglang_schedule_flags(out, entries, draft_model)))
            except ConfigError as exc:
                _note(str(exc))
        else:
            say(f"wrote {out} ({len(tiers)} range(s)); vLLM flag: --speculative-config {shlex.quote(json.dumps(obj))}")


def _print_table(picks: list[Any], algorithm: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from specband.actions import ACTIONS

    table = Table(title=f"{algorithm}: chain schedule (topk 1) vs the best tree config (estimated reward)")
    for name in ("bs", "measured", "chain pick", "reward", "candidate steps", "best tree", "tree reward", "chain cost"):
        table.add_column(name, justify="right" if name in ("bs", "measured") else "left")
    for p in picks:
        table.add_row(
            str(p.batch_size),
            str(p.measured_batch_size),
            str(ACTIONS[p.chain[0]]),
            f"{p.chain_reward:.4f}",
            ",".join(map(str, p.steps)),
            "-" if p.tree_index is None else str(ACTIONS[p.tree_index]),
            "-" if p.tree_reward is None else f"{p.tree_reward:.4f}",
            "-" if p.chain_cost is None else f"{p.chain_cost:+.4f}",
        )
    Console(width=None if sys.stdout.isatty() else 120, soft_wrap=False).print(table)


def recommend_batch_mix(
    batch_mix: str | None,
    batch_mix_from: Path | None,
    batch_size: int | None,
    algo: str,
    models: Path | None,
    data: Path | None,
    state: tuple[float, float, float] | None,
    draft_model: str | None,
    output_format: str,
) -> None:
    """``specband recommend --batch-mix MIX | --batch-mix-from FILE``: print the single config
    with the best expected reward over the mix (flags line or JSON on stdout) and a table of
    each batch size's own pick and the regret of using one config for all (stderr with
    ``--format json``, else stdout).

    Raises:
        ConfigError: both or neither mix option, ``--batch-size`` with a mix, a bad mix.
    """
    import dataclasses

    from specband.actions import ACTIONS, server_args_kwargs, sglang_cli_args
    from specband.batchmix import parse_batch_mix, pick_for_mix, read_running_requests
    from specband.errors import ConfigError
    from specband.schedule import load_scorer

    if batch_mix is not None and batch_mix_from is not None:
        raise ConfigError("--batch-mix and --batch-mix-from are alternatives; give one")
    if batch_size is not None:
        raise ConfigError("--batch-size is for one batch size; a mix takes --batch-mix or --batch-mix-from alone")
    if batch_mix is not None:
        mix = parse_batch_mix(batch_mix)
    else:
        assert batch_mix_from is not None  # recommend calls this with one of the two
        mix = read_running_requests(batch_mix_from)
    scorer = dataclasses.replace(load_scorer(algo, models, data), telemetry=state)
    pick = pick_for_mix(scorer, mix)
    action = ACTIONS[pick.index]
    if output_format == "json":
        result = {
            "algorithm": algo,
            "source": scorer.source,
            "batch_mix": {str(bs): w for bs, w in mix.items()},
            "action_index": pick.index,
            "action": list(action),
            "flags": sglang_cli_args(action, draft_model),
            "kwargs": server_args_kwargs(action, draft_model),
            "expected_reward": pick.expected_reward,
            "expected_regret": pick.expected_regret,
            "per_batch_size": [
                {**dataclasses.asdict(r), "own_action": list(ACTIONS[r.own_index]), "regret": r.regret}
                for r in pick.rows
            ],
        }
        typer.echo(json.dumps(result, indent=2))
    else:
        _print_mix_table(pick, algo)
        typer.echo(shlex.join(sglang_cli_args(action, draft_model)))
    if action.is_baseline:
        _note("the pick is the non-speculative baseline (0,0,0): launch without speculative flags")


def _print_mix_table(pick: Any, algorithm: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from specband.actions import ACTIONS

    table = Table(
        title=f"{algorithm}: one config for the mix, {ACTIONS[pick.index]} (expected reward "
        f"{pick.expected_reward:.4f}, expected regret {pick.expected_regret:.4f})"
    )
    for name in ("bs", "measured", "weight", "own pick", "own reward", "mix pick reward", "regret"):
        table.add_column(name, justify="left" if name.split()[-1] == "pick" else "right")
    for r in pick.rows:
        table.add_row(
            str(r.batch_size),
            str(r.measured_batch_size),
            f"{r.weight:.3f}",
            str(ACTIONS[r.own_index]),
            f"{r.own_reward:.4f}",
            f"{r.mix_reward:.4f}",
            f"{r.regret:.4f}",
        )
    Console(width=None if sys.stdout.isatty() else 120, soft_wrap=False).print(table)


def new_auto_schedule_file(log: Path) -> Path:
    """A new, empty file for the schedule ``launch --schedule auto`` builds: beside the
    server log, named ``<log>.schedule-<random>.json`` and created with ``O_EXCL`` (so no
    file of the user's is ever overwritten). The launch owns it and removes it when it ends.

    Raises:
        ConfigError: the log's folder cannot be written.
    """
    import os
    import tempfile

    from specband.errors import ConfigError

    try:
        fd, name = tempfile.mkstemp(prefix=f"{log.name}.schedule-", suffix=".json", dir=log.parent)
    except OSError as exc:
        raise ConfigError(f"--log {log}: cannot write the schedule beside it ({exc.strerror or exc})") from None
    os.close(fd)
    return Path(name)


def schedule_for_launch(
    schedule: str,
    algo: str,
    models: Path | None,
    data: Path | None,
    *,
    notes: list[str],
    auto_file: Path | None = None,
    log: Path = Path("specband-server.log"),
    setup: Any = None,
    allow_transfer: bool = False,
) -> dict[str, Any]:
    """The adaptive-speculation part of ``specband launch --schedule FILE|auto``; what it
    has to say (the file ``auto`` wrote) is appended to ``notes`` for the caller to print.

    ``FILE`` is read and checked with sglang's rules; ``auto`` builds the schedule of
    ``specband schedule --engine sglang`` for ``--algo``/``--models`` and writes it to
    ``auto_file`` (:func:`new_auto_schedule_file`, owned by the launch); with ``auto_file``
    ``None`` (a dry run) nothing is written: the note holds the schedule and the command
    line names ``<log>.schedule-XXXXXXXX.json``.

    Returns:
        ``path`` (the config file), ``entries`` (tier -> entry), ``action`` (the chain
        config sglang starts from: ``--speculative-num-steps`` = sglang's own default) and
        ``extra_args`` (``--speculative-adaptive --speculative-adaptive-config FILE``).

    Raises:
        ConfigError: an unreadable or invalid file, or a schedule that never speculates.
    """
    from specband import schedule as sch
    from specband.errors import ConfigError
    from specband.fileio import write_text_atomic

    if schedule == "auto":
        scorer = sch.load_scorer(algo, models, data)
        if setup is not None:
            notes.extend(sch.check_scorer_transfer(scorer, setup, allow=allow_transfer).warnings)
        picks = sch.pick_chain_tiers(scorer)
        notes.extend(p.off_reason for p in picks if p.off_reason)
        obj = sch.sglang_adaptive_config(sch.merge_tiers(picks))
        entries = sch.check_sglang_adaptive_config(obj)
        path = auto_file or log.with_name(f"{log.name}.schedule-XXXXXXXX.json")
        sch.sglang_schedule_flags(path, entries, None)  # refuses a schedule that never speculates, before writing
        tiers = ", ".join(map(str, sorted(entries)))
        if auto_file is None:
            notes.append(
                f"--schedule auto (dry run, nothing written): {algo}'s schedule {json.dumps(obj)} (tiers {tiers}); "
                f"a launch writes it beside --log and removes it when it ends"
            )
        else:
            write_text_atomic(auto_file, json.dumps(obj, indent=2) + "\n", error=ConfigError)
            notes.append(f"--schedule auto: wrote {algo}'s schedule to {auto_file} (tiers {tiers}; removed at the end)")
    else:
        path = Path(schedule)
        entries = sch.read_sglang_adaptive_config(path)
    flags = sch.sglang_schedule_flags(path, entries, None)
    return {
        "path": path,
        "entries": entries,
        "action": sch.chain_action(sch.sglang_initial_steps(entries)),
        "extra_args": flags[flags.index("--speculative-adaptive") :],
    }


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
    from rich.console import Console

    from specband.batchmix import parse_batch_mix
    from specband.dataset import FEATURE_KINDS
    from specband.evaluation.schedules import (
        evaluate_schedules,
        render_schedule_table,
        write_schedule_report,
    )

    result = evaluate_schedules(
        sweep,
        holdout=holdout,
        algorithms=algo or None,
        features=tuple(features) if features else FEATURE_KINDS,
        mix=None if batch_mix is None else parse_batch_mix(batch_mix),
        seed=seed,
        n_bootstrap=n_bootstrap,
    )
    stream = sys.stderr if to_stderr else sys.stdout
    render_schedule_table(result, Console(stderr=to_stderr, width=None if stream.isatty() else 160))
    return write_schedule_report(result, out_dir) if out_dir is not None else []
