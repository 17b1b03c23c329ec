"""``specband launch``: read the idle GPU, pick the flags, start sglang with them.

The last step of the workflow (sweep -> train -> evaluate -> launch): the pre-launch GPU
state (temperature, memory used and utilisation of the idle GPU, from NVML) goes to the
policy, whose pick is launched with the same command line and environment as a sweep run
(docs/FACTS.md §1: ``--mem-fraction-static`` 0.65 retried once at 0.55, ``--dtype float16``,
``--cuda-graph-max-bs`` and ``--max-running-requests`` = the batch size,
``SGLANG_RECORD_STEP_TIME=1`` ...). The server runs in the foreground until it exits (its
exit status is returned) or Ctrl-C / SIGTERM, which stops its whole process group (exit
status 0: stopping is the normal way to end it).

Every option is checked before the GPU is read; notes about the GPU and the pick are
printed only once the pick is known to be launchable, so bad input (a bad option, a
speculative pick without ``--draft``) is one ``error:`` line. ``--device nvml`` without
NVML is an error; ``--device auto`` then goes on without telemetry, with a note.
"""

from __future__ import annotations

import typer

from specband.cli.answer_table import print_table_lines
from specband.cli.output import note, say, warn
from specband.cli.params import request_command
from specband.deploy.launch import LaunchRequest
from specband.engines.serverconfig import format_launch


def register(app: typer.Typer) -> None:
    """Add ``launch`` to ``app``."""
    app.command("launch")(launch_command)


@request_command(LaunchRequest)
def launch_command(request: LaunchRequest) -> None:
    """Pick the flags for this batch size and GPU state, then run the engine (--engine: sglang or
    vLLM) with them in the foreground. Ctrl-C (or SIGTERM) stops the server and everything it started; exit
    status 0, since stopping is the normal way to end it. If the server exits on its
    own, its exit status is returned. Every option is checked before the GPU is read:
    bad input is one error line (exit 2)."""
    from specband.deploy.launch import plan_launch, serve_launch  # lazy: off the cold path (recommend, --help)

    plan = plan_launch(request)
    warn(plan.version_warning)
    for line in plan.notes:
        note(line)
    if plan.table is not None:
        print_table_lines(plan.table, explain=request.explain)
    if request.dry_run:
        engine = plan.config.engine.display_name
        typer.echo(f"# {engine} {plan.engine_version} ({plan.engine_version_source})")
        suggested = None if plan.table is None else plan.table.rows[0].nvidia_smi
        if plan.power_limit_w is not None:
            typer.echo(f"# sudo nvidia-smi -pl {plan.power_limit_w:g}")
        elif suggested is not None:  # a picked limit that this launch does not set (--set-power-limit W sets one)
            typer.echo(f"# {suggested}")
        typer.echo(format_launch(plan.command, plan.config.env, engine=plan.config.engine))
        return
    code = serve_launch(plan, say, note)
    if code:
        raise typer.Exit(code)
