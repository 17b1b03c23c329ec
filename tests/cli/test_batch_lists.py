"""One parser of batch-size lists (:mod:`specband.core.batchlist`): every command refuses a
repeated batch size (naming it) and an empty list the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

SIZES = [
    ("sweep", "--target", "m", "--draft", "d", "--dry-run"),
    ("simulate", "--out", "s.jsonl"),
    ("schedule", "--engine", "sglang"),
]
MIX = [("recommend",), ("evaluate", "--schedules")]


def _error(run_cli: Any, *args: str) -> str:
    res = run_cli(*args)
    assert res.exit_code == 2
    assert res.stdout == "" and list(Path().iterdir()) == []
    (line,) = res.stderr.splitlines()
    return line


@pytest.mark.parametrize("command", SIZES)
def test_a_repeated_or_empty_batch_size_list_is_refused_alike(run_cli: Any, command: tuple[str, ...]) -> None:
    assert (
        _error(run_cli, *command, "--batch-sizes", "1,1")
        == "error: --batch-sizes: batch size 1 is given twice in '1,1'"
    )
    assert _error(run_cli, *command, "--batch-sizes", "1,4,4") == (
        "error: --batch-sizes: batch size 4 is given twice in '1,4,4'"
    )
    assert _error(run_cli, *command, "--batch-sizes", "") == "error: --batch-sizes: empty"


@pytest.mark.parametrize("command", MIX)
def test_a_repeated_or_empty_batch_mix_is_refused_alike(run_cli: Any, command: tuple[str, ...]) -> None:
    assert _error(run_cli, *command, "--batch-mix", "1:1,4:1,4:3") == (
        "error: --batch-mix: batch size 4 is given twice in '1:1,4:1,4:3'"
    )
    assert _error(run_cli, *command, "--batch-mix", "") == "error: --batch-mix: empty"
