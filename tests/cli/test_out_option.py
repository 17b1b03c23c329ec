"""One ``--out`` check (:func:`specband.files.fileio.given_path`, :func:`specband.files.fileio.check_out_path`):
an empty ``--out`` is ``--out: empty`` for every command, and ``schedule`` refuses to
replace an existing file without ``--force``, like ``simulate`` and ``import-bench``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


@pytest.mark.parametrize(
    "command",
    [
        ("train",),
        ("schedule", "--engine", "sglang"),
        ("sweep", "--target", "m", "--draft", "d", "--dry-run"),
        ("simulate",),
        ("evaluate",),
        ("import-bench", "bench.jsonl"),
    ],
)
def test_an_empty_out_is_named_as_out(run_cli: Any, command: tuple[str, ...]) -> None:
    res = run_cli(*command, "--out", "")
    assert res.exit_code == 2
    assert res.stderr.splitlines() == ["error: --out: empty"], res.stderr
    assert res.stdout == "" and list(Path().iterdir()) == []


def test_schedule_refuses_an_existing_out_without_force(run_cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "mine.json"
    out.write_text('{"mine": 1}\n')
    res = run_cli("schedule", "--engine", "sglang", "--out", out)
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [f"error: {out}: output file exists (pass --force to replace it)"]
    assert out.read_text() == '{"mine": 1}\n' and res.stdout == ""
    res = run_cli("schedule", "--engine", "sglang", "--out", out, "--force")
    assert res.exit_code == 0, res.stderr
    assert set(json.loads(out.read_text())) == {"1", "3", "6", "12"}  # the bundled policy's tiers
