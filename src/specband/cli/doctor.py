"""``specband doctor``: one line per check of a target/draft pair and the machine."""

from __future__ import annotations

import typer

from specband.cli.params import PANEL_TITLES
from specband.core.engine_table import default_engine_name, engine_names
from specband.engines.base import get_engine
from specband.files.fileio import given_path


def register(app: typer.Typer) -> None:
    """Add ``doctor`` to ``app``."""

    @app.command("doctor")
    def doctor_command(
        target: str = typer.Option(
            ...,
            "--target",
            help="Target model: folder, its config.json, or a hub id (org/name[@REV]).",
            metavar="ID|PATH",
            rich_help_panel=PANEL_TITLES["input"],
        ),
        draft: str = typer.Option(
            ...,
            "--draft",
            help="EAGLE3 draft head: folder, its config.json, or a hub id.",
            metavar="ID|PATH",
            rich_help_panel=PANEL_TITLES["input"],
        ),
        engine_name: str = typer.Option(
            default_engine_name(),
            "--engine",
            help=f"The engine to check (installed beside specband, and the flags specband emits for it): "
            f"{' or '.join(engine_names())}.",
            metavar="NAME",
            rich_help_panel=PANEL_TITLES["input"],
        ),
        write_fixed: str | None = typer.Option(
            None,
            "--write-fixed",
            help="Where to write a fixed copy (the target's RoPE) of a draft config that is not yours to edit "
            "(bundled in specband, or in the Hugging Face cache): DIR/<draft>/config.json, never over a different "
            "file. Without it doctor writes nothing and its fix names this option.",
            metavar="DIR",
            show_default=False,
            rich_help_panel=PANEL_TITLES["output"],
        ),
    ) -> None:
        """Check a target/draft pair (RoPE in either config layout, dtype and the --dtype that
        follows, vocabulary, hidden size, architectures, maximum positions) and the machine
        (the engine and its version, sglang by default; flashinfer; NVML energy counter and power limit). One line
        per check: ok, warn or error with its fix. Exit 0 when all are ok, 1 on warnings,
        2 on errors, 5 when the only errors are configs the hub could not deliver (unreachable
        or offline, and not in the local cache)."""
        from specband.doctor.machine import exit_status, run_doctor  # lazy: off the cold path (recommend, --help)

        engine = get_engine(engine_name)  # an unknown one is one error line
        for option, value in (("--target", target), ("--draft", draft)):
            given_path(option, value)  # an empty one is refused, not read as "."
        fixed_dir = None if write_fixed is None else given_path("--write-fixed", write_fixed)
        checks = run_doctor(target, draft, engine=engine, fixed_dir=fixed_dir)
        for check in checks:  # one line per check (scripts read them; README, tests/test_readme.py)
            typer.echo(check.line())
        raise typer.Exit(exit_status(checks))
