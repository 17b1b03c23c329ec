"""One batch size's speeds are compared on one clock (hostile trial N58: with
``--max-new-tokens 32`` the baseline's speed came from sglang's step times and the speculative
configs' from the wall clock, and ``train``/``recommend`` compared them without a word)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specband.contract.actions import ACTIONS
from specband.sim.simulated import simulate_sweep
from specband.sweeps.dataset import load_sweep


def _rows(mixed_at: int = 1, wall_clock_everywhere: bool = True) -> list[dict[str, Any]]:
    """A simulated sweep at batch sizes 1 and 4 whose rows carry the runner's speed columns;
    at ``mixed_at`` the baseline's speed is a step-time one (27.3 tok/s; its wall clock 20.0)."""
    rows = simulate_sweep(profile="rtx4060-laptop", batch_sizes=(1, 4), actions=ACTIONS[:3], repeats=1, seed=0)
    out = []
    for r in rows:
        row = {**r, "speed_source": "wall_clock", "wall_clock_tok_s": r["speed_tok_s"]}
        if r["batch_size"] == mixed_at and r["steps"] == 0:
            row.update(speed_source="step_time", speed_tok_s=27.3, wall_clock_tok_s=20.0)
            if not wall_clock_everywhere:
                row.pop("wall_clock_tok_s")
        out.append(row)
    return out


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_batch_size_of_two_clocks_is_read_on_the_wall_clock(tmp_path: Path) -> None:
    rows = _rows()
    sweep = load_sweep(_write(tmp_path / "s.jsonl", rows))
    assert sweep.wall_clock_batch_sizes == (1,) and sweep.mixed_speed_batch_sizes == ()
    by_key = {(r.batch_size, r.action_index): r for r in sweep.rows}
    assert by_key[(1, 0)].speed_tok_s == pytest.approx(20.0)  # the baseline's wall clock, not its 27.3
    for r in rows:  # every other row keeps its own (wall-clock) speed
        if not (r["batch_size"] == 1 and r["steps"] == 0):
            index = ACTIONS.index((r["steps"], r["topk"], r["num_draft_tokens"]))
            assert by_key[(r["batch_size"], index)].speed_tok_s == pytest.approx(r["speed_tok_s"])
    assert "at batch size(s) 1 some runs were too short for sglang's step times" in str(sweep.speed_note())


def test_a_row_without_its_wall_clock_leaves_a_warning(tmp_path: Path) -> None:
    sweep = load_sweep(_write(tmp_path / "s.jsonl", _rows(wall_clock_everywhere=False)))
    assert sweep.mixed_speed_batch_sizes == (1,) and sweep.wall_clock_batch_sizes == ()
    assert str(sweep.speed_note()).startswith("warning: ") and "compare two clocks" in str(sweep.speed_note())


def test_one_clock_needs_no_note(tmp_path: Path) -> None:
    sweep = load_sweep(_write(tmp_path / "s.jsonl", _rows(mixed_at=99)))
    assert sweep.speed_note() is None and sweep.wall_clock_batch_sizes == ()


def test_train_says_so(run_cli, tmp_path: Path) -> None:
    data = _write(tmp_path / "s.jsonl", _rows())
    result = run_cli("train", data, "--out", tmp_path / "m", "--algo", "lookup_table")
    assert result.exit_code == 0, result.stderr
    assert f"note: {data}: at batch size(s) 1 some runs were too short" in result.stderr


def test_the_sweep_warns_at_its_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from specband.cli.harness import _warn_mixed_speed_sources

    _warn_mixed_speed_sources(_write(tmp_path / "s.jsonl", _rows()))
    err = capsys.readouterr().err
    assert (
        err.startswith("warning: at batch size(s) 1 some speeds come from sglang's step times") and err.count("\n") == 1
    )
    _warn_mixed_speed_sources(_write(tmp_path / "t.jsonl", _rows(mixed_at=99)))
    assert capsys.readouterr().err == ""
