"""The docs site's CLI reference is each command's own ``--help`` (issue 22)."""

from __future__ import annotations

import os
import subprocess
import sys

from specband.cli import COMMANDS
from specband.cli.reference import WIDTH, command_help, render_reference


def test_reference_has_every_command_once() -> None:
    page = render_reference()
    headings = [line for line in page.splitlines() if line.startswith("## ")]
    assert headings[0] == "## specband"
    assert sorted(h.removeprefix("## specband ") for h in headings[1:]) == sorted(COMMANDS)
    assert page.count("```text") == len(COMMANDS) + 1


def test_reference_section_is_the_commands_help() -> None:
    """The rendered section equals what `specband recommend --help` prints at the same width."""
    env = {"TERMINAL_WIDTH": str(WIDTH), "NO_COLOR": "1", "COLUMNS": str(WIDTH)}
    printed = subprocess.run(
        [sys.executable, "-m", "specband", "recommend", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
        timeout=120,
    ).stdout
    expected = "\n".join(line.rstrip() for line in printed.splitlines()).strip("\n")
    section = command_help("recommend")
    assert section == expected
    assert "--batch-size" in section
    assert "Usage: specband recommend [OPTIONS]" in section
