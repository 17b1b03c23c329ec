"""Every line that names a path is printed through one helper
(:func:`specband.cli.core.say`): a file name with a newline or an escape character stays
on its line, escaped, and cannot pose as a second line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

NAME = "new\nline\x1b[31m"
SHOWN = "new\\nline\\x1b[31m"


def test_train_and_schedule_escape_the_path_they_wrote(run_cli: Any) -> None:
    res = run_cli("train", "--out", NAME, "--algo", "lookup_table")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.splitlines()[0].endswith(f"; wrote {SHOWN}")
    assert Path(NAME).is_dir()
    out = NAME + ".json"
    res = run_cli("schedule", "--engine", "sglang", "--out", out)
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    wrote = next(i for i, line in enumerate(lines) if line.startswith("wrote "))
    assert lines[wrote].startswith(f"wrote {SHOWN}.json (4 tier(s)); ")
    assert lines[wrote + 1].endswith(f"--speculative-adaptive-config '{SHOWN}.json'")
    assert Path(out).is_file()


def test_simulate_escapes_the_path_it_wrote(run_cli: Any, tmp_path: Path) -> None:
    out = tmp_path / NAME
    res = run_cli("simulate", "--out", out, "--batch-sizes", "1", "--repeats", "1")
    assert res.exit_code == 0, res.stderr
    (line,) = res.stdout.splitlines()
    assert line.endswith(f"-> {tmp_path}/{SHOWN}")
