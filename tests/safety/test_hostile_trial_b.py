"""Regression tests of the hostile trial's second half (issue 30 item 8; the rows' ids are the
trial's, /work/shared/qa/hostile-trial.md): each input is one ``error:`` line or handled."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _one_line(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    return lines[0]


DATA_COMMANDS = [
    ("recommend", "-b", "1"),
    ("launch", "--target", "m", "--draft", "d", "-b", "1", "--allow-transfer", "--dry-run"),
    ("schedule", "-e", "sglang", "--force", "-o"),
]


@pytest.mark.parametrize("command", DATA_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("kind", ["missing", "fifo", "device"])
def test_data_without_models_that_cannot_be_read_is_an_error(run_cli, tmp_path: Path, command, kind) -> None:
    """N28: ``--data /nonexistent.jsonl`` without ``--models`` was ignored with a note."""
    data = {"missing": tmp_path / "nonexistent.jsonl", "fifo": tmp_path / "f.jsonl", "device": Path("/dev/zero")}[kind]
    if kind == "fifo":
        os.mkfifo(data)
    args = [*command, tmp_path / "s.json"] if command[0] == "schedule" else list(command)
    line = _one_line(run_cli(*args, "--data", data))
    expected = "no such file" if kind == "missing" else "not a regular file"
    assert line == f"error: {data}: {expected}" or line.startswith(f"error: {data}: {expected} ("), line
    assert not (tmp_path / "s.json").exists()
