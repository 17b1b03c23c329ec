"""Core commands: ``specband train``, ``specband recommend`` and ``specband actions``.

Only typer and the standard library are imported at module level; ``recommend`` with the
default ``lookup_table`` imports neither torch nor scikit-learn.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import typer

from specband.cli.output import note as _note
from specband.cli.params import PANEL_TITLES, request_command
from specband.deploy.recommend import RecommendRequest


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def register(app: typer.Typer) -> None:
    """Add the core commands to ``app``."""
    app.command("actions")(actions_command)
    app.command("recommend")(recommend_command)


def actions_command(
    as_json: bool = typer.Option(
        False, "--json", help="Print JSON instead of a table.", rich_help_panel=PANEL_TITLES["output"]
    ),
) -> None:
    """List the 19 contract actions with their index and sglang flags."""
    from specband.contract.actions import ACTIONS, REFERENCE_INDEX, server_args_kwargs, sglang_cli_args

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
    from rich.table import Table

    from specband.core.tables import flag_units, print_table, table_console

    table = Table(
        title="specband actions: index (its position in every published policy file), action "
        "(steps,topk,draft) and its sglang flags"
    )
    table.add_column("index", justify="right")
    table.add_column("action")
    table.add_column("sglang flags")
    for i, a in enumerate(ACTIONS):
        note = " (baseline)" if a.is_baseline else " (reference)" if i == REFERENCE_INDEX else ""
        flags = flag_units(sglang_cli_args(a)) or "(no speculative flags)"
        table.add_row(str(i), f"{a}{note}", flags)
    print_table(table, table_console())


@request_command(RecommendRequest)
def recommend_command(request: RecommendRequest) -> None:
    """Print the sglang flags for a batch size, ready to paste after
    `python -m sglang.launch_server`."""
    from specband.deploy.usersetup import user_setup

    if request.is_mix:
        from specband.cli.schedule import print_mix_recommendation
        from specband.deploy.schedule import recommend_mix

        mix_setup = user_setup(request.target, request.draft_model, request.gpu)
        print_mix_recommendation(recommend_mix(request, mix_setup), request.output_format)
        return
    from specband.contract.actions import use_action_set
    from specband.deploy.explain import answer_lines
    from specband.deploy.power_answer import power_limit_recommendation
    from specband.deploy.recommend import recommend_request

    with use_action_set(request.actions):  # a folder is read against its action set
        setup = None if request.is_first_guess else user_setup(request.target, request.draft_model, request.gpu)
        with_limit = None if request.is_first_guess else power_limit_recommendation(request, setup)
    if with_limit is not None:  # a sweep or folder over several power limits (issue 20)
        _print_power_limit(with_limit, request)
        return
    if request.is_first_guess:
        from specband.deploy.firstguess import first_guess

        assert request.batch_size is not None and request.gpu is not None  # checked when the request was built
        decided = first_guess(
            request.batch_size,
            request.gpu,
            request.target_config,
            request.draft_config,
            draft_model=request.draft_model,
        )
    else:
        decided = recommend_request(request, setup)
    for line in (*decided.notes, *answer_lines(decided.pick)):
        _note(line)
    result = decided.pick
    if request.output_format == "json":
        typer.echo(json.dumps(result.to_json(), indent=2))
    else:
        typer.echo(shlex.join(result.flags))
    if result.action.is_baseline:
        _note("the pick is the non-speculative baseline (0,0,0): launch without speculative flags")
    elif request.draft_model is None:
        draft = result.origin.get("draft_model")  # the data's own draft (the study's for the embedded policy)
        _note(
            "sglang needs --speculative-draft-model-path for EAGLE3; pass --draft-model PATH to include it"
            + (f" (the data's rows used {draft})" if draft else "")
        )


def _print_power_limit(decided: Any, request: RecommendRequest) -> None:
    """The answer with a power limit: the ``nvidia-smi -pl`` line and the flags (or JSON), the
    notes and what the limit does on stderr."""
    from specband.deploy.power_answer import power_limit_pick, power_limit_summary

    for line in decided.notes:
        _note(line)
    answer = power_limit_pick(decided, request.draft_model)
    if request.output_format == "json":
        typer.echo(json.dumps(answer.to_json(), indent=2))
        return
    typer.echo(answer.nvidia_smi)
    typer.echo(shlex.join(answer.flags))
    _note(power_limit_summary(decided))
