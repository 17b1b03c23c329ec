"""Rows whose measured figures no GPU could give are refused where rows are read (hostile
trial round 3: B05 for ``import-bench``, B07 for sweep rows): one line naming file, line and
field, exit 2, nothing trained or written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.harness.test_import_bench import BENCH

from specband.sweeps.dataset import bundled_data_path


def _lines(result: Any) -> list[str]:
    assert "Traceback" not in result.stderr
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"step_time": 0}, "step_time"),
        ({"completion_tokens": -1e308}, "completion_tokens"),
        ({"completion_tokens": 0}, "completion_tokens"),
        ({"speed": 1e308}, "speed"),
    ],
)
def test_import_bench_refuses_figures_no_run_gives(
    run_cli: Any, tmp_path: Path, edit: dict[str, Any], field: str
) -> None:
    """B05: step_time 0, completion_tokens -1e308 and 0 and speed 1e308 were converted, and
    train then trained on them (speed 1e308 gave reward 1.0)."""
    src = tmp_path / "bench.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [BENCH[0], {**BENCH[1], **edit}]))
    out = tmp_path / "o.jsonl"
    result = run_cli("import-bench", src, "--out", out)
    assert result.exit_code == 2
    (line,) = _lines(result)
    assert line.startswith(f"error: {src}:2: field '{field}': the converted row does not load as a sweep: "), line
    assert not out.exists()


def _published(tmp_path: Path, edit: dict[str, Any]) -> Path:
    rows = [json.loads(line) for line in bundled_data_path().read_text().splitlines() if line.strip()]
    rows[1] = {**rows[1], **edit}
    path = tmp_path / "b07.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("edit", "field", "says"),
    [
        ({"avg_power_watts": 1e300}, "avg_power_watts", "must be a number in [0, 2000]"),
        ({"avg_power_watts": 500.0}, "avg_power_watts", "500 W is 6.25x the row's power_limit_watts 80 W"),
        ({"energy_utilization": 7.5}, "energy_utilization", "must be a number in [0, 1.5], got 7.5"),
        ({"speed_tok_s": 1e308}, "speed_tok_s", "tok/s is over"),
        ({"energy_joules": 1e300, "wall_clock_s": 10.0}, "energy_joules", "1e+300 J over 10 s is more than 2000 W"),
        ({"power_limit_watts": 1e308}, "power_limit_watts", "must be a number in [1, 2000]"),
    ],
)
@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_sweep_rows_with_figures_no_gpu_gives_are_refused(
    run_cli: Any, tmp_path: Path, edit: dict[str, Any], field: str, says: str, command: str
) -> None:
    """B07: each was trained on (evaluate ran on the 1e300 W row), and power_limit_watts 1e308 was
    refused with a misleading 'no successful baseline row'."""
    data = _published(tmp_path, edit)
    out = tmp_path / "out"
    args = ("--out", out, "--algo", "lookup_table") if command == "train" else ("--algo", "lookup_table", "--out", out)
    result = run_cli(command, data, *args)
    assert result.exit_code == 2
    (line,) = _lines(result)
    assert line.startswith(f"error: {data}:2: field '{field}': ") and says in line, line
    assert not out.exists()


def test_the_published_rows_are_within_every_bound(run_cli: Any, tmp_path: Path) -> None:
    result = run_cli("train", "--out", tmp_path / "m", "--algo", "lookup_table")
    assert result.exit_code == 0, result.stderr
