"""Core commands: ``specband actions`` (``train`` and ``recommend`` join here)."""

from __future__ import annotations

import json

import typer


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
