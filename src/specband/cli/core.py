"""Core commands: ``specband train``, ``specband recommend`` and ``specband actions``.

``recommend`` with the default ``lookup_table`` imports neither NumPy, torch nor scikit-learn
(what would bring them loads inside the command: see :mod:`specband.cli`).
"""

from __future__ import annotations

import json
import shlex

import typer

from specband.cli.answer_table import print_answer_table
from specband.cli.output import note as _note
from specband.cli.params import PANEL_TITLES, request_command
from specband.contract.actions import ACTIONS, REFERENCE_INDEX
from specband.core.engine_table import default_engine_name, engine_names
from specband.core.tables import flag_units, print_table, table_console
from specband.deploy.answers import MixAnswer, Pick, PowerLimitAnswer
from specband.deploy.mixlimit import MixPowerLimitAnswer
from specband.deploy.recommend import RecommendRequest
from specband.deploy.table import FirstGuess, answer_table
from specband.engines.base import get_engine


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
    engine_name: str = typer.Option(
        default_engine_name(),
        "--engine",
        help=f"The engine whose flags are listed: {' or '.join(engine_names())}.",
        metavar="NAME",
        rich_help_panel=PANEL_TITLES["output"],
    ),
) -> None:
    """List the 19 contract actions with their index and the engine's flags (sglang's by default;
    an action the engine does not run says so)."""
    engine = get_engine(engine_name)
    if as_json:
        out = [
            {
                "index": i,
                "action": list(a),
                "engine": engine.name,
                "runs": engine.runs(a),
                "flags": engine.speculative_flags(a, None) if engine.runs(a) else None,
                "kwargs": engine.speculative_kwargs(a, None) if engine.runs(a) else None,
            }
            for i, a in enumerate(ACTIONS)
        ]
        typer.echo(json.dumps(out, indent=2))
        return
    from rich.table import Table

    table = Table(
        title="specband actions: index (its position in every published policy file), action "
        f"(steps,topk,draft) and its {engine.display_name} flags"
    )
    table.add_column("index", justify="right")
    table.add_column("action")
    table.add_column(f"{engine.display_name} flags")
    for i, a in enumerate(ACTIONS):
        note = " (baseline)" if a.is_baseline else " (reference)" if i == REFERENCE_INDEX else ""
        if not engine.runs(a):
            flags = f"(not run by {engine.display_name})"
        else:
            flags = flag_units(engine.speculative_flags(a, None)) or "(no speculative flags)"
        table.add_row(str(i), f"{a}{note}", flags)
    print_table(table, table_console())


@request_command(RecommendRequest)
def recommend_command(request: RecommendRequest) -> None:
    """Print the flags and the power limit for one or more batch sizes as one table (stderr) and
    the commands to type (stdout: the engine's flags, --engine: sglang's by default, ready to paste
    after `python -m sglang.launch_server`; vLLM's --speculative-config)."""
    from specband.deploy.recommend import answer  # lazy: off the cold path (recommend, --help)
    from specband.deploy.usersetup import user_setup  # lazy: off the cold path (recommend, --help)

    setup = user_setup(request.target, request.draft_model, request.gpu)
    if request.is_mix:
        decided = answer(request.answer_request(), setup)
        if isinstance(decided, MixAnswer):
            from specband.cli.schedule import print_mix_recommendation  # lazy: off the cold path (recommend, --help)

            print_mix_recommendation(decided, request.output_format)
        else:
            assert isinstance(decided, MixPowerLimitAnswer)  # data over several power limits
            _print_mix_limit(decided, request.output_format)
        return
    asked = request.answer_requests()
    answers = [answer(one, setup) for one in asked]
    rows = [a for a in answers if isinstance(a, (Pick, PowerLimitAnswer, FirstGuess))]
    assert len(rows) == len(answers)  # one batch size each: a pick, a limit or a first guess
    table = answer_table(rows, request.draft_model, asked[0].engine)
    print_answer_table(table, request.output_format, explain=request.explain)


def _print_mix_limit(decided: MixPowerLimitAnswer, output_format: str) -> None:
    """A mix's answer over several power limits: the notes, then the ``nvidia-smi -pl`` line and
    the flags (or JSON), and what the limit does on stderr."""
    for line in decided.notes:
        _note(line)
    if output_format == "json":
        typer.echo(json.dumps(decided.to_json(), indent=2))
        return
    typer.echo(decided.nvidia_smi)
    typer.echo(shlex.join(decided.flags))
    for line in decided.summary_lines():
        _note(line)
