"""The CLI reference page of the docs site, rendered from the commands themselves.

Each section is exactly what ``specband <command> --help`` prints (typer's own help, at a
fixed width and without colour), so the reference cannot drift from ``--help``. Used by the
mkdocs hook ``mkdocs_hooks/cli_reference.py``; ``python -m specband.cli.reference`` prints it.
"""

from __future__ import annotations

from specband.cli import COMMANDS, STAGES, build_app

#: Columns the help is rendered at (typer reads ``TERMINAL_WIDTH``).
WIDTH = 100


def command_help(command: str | None) -> str:
    """``specband [command] --help`` as plain text (trailing spaces stripped).

    Args:
        command: a name of :data:`specband.cli.COMMANDS`, or ``None`` for the top-level help.

    Raises:
        RuntimeError: the help exits with a status other than 0.
    """
    from typer.testing import CliRunner

    app = build_app(command)
    args = [command, "--help"] if command else ["--help"]
    env = {"TERMINAL_WIDTH": str(WIDTH), "NO_COLOR": "1", "COLUMNS": str(WIDTH)}
    result = CliRunner().invoke(app, args, prog_name="specband", env=env)
    if result.exit_code != 0:
        raise RuntimeError(f"specband {' '.join(args)} exited {result.exit_code}: {result.output}")
    lines = [line.rstrip() for line in result.output.splitlines()]
    return "\n".join(lines).strip("\n")


def render_reference() -> str:
    """The reference as Markdown: the top-level help, then one section per command in
    :data:`specband.cli.COMMANDS` order, each the command's ``--help`` in a ``text`` block."""

    parts = ["## specband", "", "```text", command_help(None), "```", ""]
    for command in sorted(COMMANDS, key=lambda c: list(dict.fromkeys(STAGES.values())).index(STAGES[c])):
        parts += [f"## specband {command}", "", "```text", command_help(command), "```", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    print(render_reference())
