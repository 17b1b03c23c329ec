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


def test_the_committed_page_is_the_generated_reference() -> None:
    """docs/cli.md in the repository holds the reference as generated now (issue 30: it was an
    empty placeholder outside the built site). Stale: `python -m specband.cli.reference --write docs/cli.md`."""
    from pathlib import Path

    from specband.cli.reference import END, START, updated_page

    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    assert page.count(START) == 1 and page.count(END) == 1
    assert page == updated_page(page), "docs/cli.md is stale: python -m specband.cli.reference --write docs/cli.md"
    assert page.count("```text") == len(COMMANDS) + 1 and "## specband recommend" in page


def test_write_regenerates_only_the_region(tmp_path) -> None:
    from specband.cli.reference import END, START, main

    page = tmp_path / "cli.md"
    page.write_text(f"# title\n\nprose\n\n{START}\nstale text\n{END}\n\ntail\n")
    assert main(["--write", str(page)]) == 0
    text = page.read_text()
    assert text.startswith(f"# title\n\nprose\n\n{START}\n\n## specband\n") and text.endswith(f"```\n\n{END}\n\ntail\n")
    assert "stale text" not in text
    (tmp_path / "bare.md").write_text("no markers\n")
    assert main(["--write", str(tmp_path / "bare.md")]) == 2


def test_draft_config_help_says_bundled_names_work(run_cli) -> None:
    """recommend's --draft-config takes a bundled name (issue 30): its help says so, and the
    name it gives as an example works."""
    import re

    section = re.sub(r"[\s│]+", " ", command_help("recommend"))
    assert "bundled name such as eagle3-llama-3.1-8b-instruct" in section
    res = run_cli("recommend", "--gpu", "h100-sxm", "--target-config", "llama-3.1-8b-instruct",
                  "--draft-config", "eagle3-llama-3.1-8b-instruct", "-b", "1")  # fmt: skip
    # issue 35: the limit picked with the flags comes first, then the flags
    lines = res.stdout.splitlines()
    assert res.exit_code == 0 and lines[0].startswith("sudo nvidia-smi -pl "), res.stderr
    assert lines[1].startswith("--speculative-algorithm EAGLE3")
