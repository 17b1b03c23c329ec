"""``specband merge OUT SHARD...``: one sweep file from the files of ``sweep --shard K/N``."""

from __future__ import annotations

import typer

from specband.cli.params import PANEL_TITLES
from specband.files.fileio import given_path


def register(app: typer.Typer) -> None:
    """Add ``merge`` to ``app``."""

    @app.command("merge")
    def merge_command(
        out: str = typer.Argument(..., help="The merged sweep file (JSONL).", metavar="OUT"),
        shards: list[str] = typer.Argument(
            ..., help="The shard files, each written by sweep --shard K/N.", metavar="SHARD..."
        ),
        force: bool = typer.Option(
            False, "--force", help="Replace an existing OUT.", rich_help_panel=PANEL_TITLES["output"]
        ),
    ) -> None:
        """Join the files of a sharded sweep into one sweep file, refusing files of another
        target, draft, grid, workload or measurement settings and any (index, repeat) given
        twice. OUT is written all or nothing; the shards are only read."""
        from specband.harness.merge import merge_shards  # lazy: off the cold path (recommend, --help)

        summary = merge_shards(given_path("OUT", out), [given_path("SHARD", s) for s in shards], force=force)
        typer.echo(f"{summary.path}: {summary.rows} rows from {len(summary.rows_per_file)} files "
                   f"({', '.join(map(str, summary.rows_per_file))})")  # fmt: skip
        if summary.missing:
            first = ", ".join(f"({i}, {r})" for i, r in summary.missing[:5])
            typer.echo(f"note: {len(summary.missing)} runs (index, repeat) of the grid are in no shard, "
                       f"e.g. {first}: a shard not given or not finished", err=True)  # fmt: skip
