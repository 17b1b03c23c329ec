"""``train`` works in time linear in the number of batch sizes, and a data file holds at most
:data:`~specband.core.limits.MAX_DATA_BATCH_SIZES` of them (hostile trial N45: 20 000 batch
sizes ran past 300 s; 2000 took 21 s, 4000 about four times that)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from specband.core.batchlist import nearest_batch_size
from specband.core.limits import MAX_DATA_BATCH_SIZES
from specband.sim.simulated import simulate_sweep
from specband.sweeps.dataset import Sweep, SweepRow


def _rows(count: int) -> list[dict[str, Any]]:
    """A baseline and a (3,4,8) row at each of ``count`` batch sizes (the trial's file)."""
    base = simulate_sweep(profile="rtx4060-laptop", batch_sizes=(1,), repeats=1, seed=0)
    pair = [r for r in base if (r["steps"], r["topk"], r["num_draft_tokens"]) in ((0, 0, 0), (3, 4, 8))]
    sizes = range(1, count + 1)
    return [{**r, "batch_size": bs, "index": (bs - 1) * 19 + k} for bs in sizes for k, r in enumerate(pair)]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _trainable_reads(run_cli, tmp_path: Path, monkeypatch, count: int) -> int:
    reads = [0]
    original = SweepRow.trainable

    def counted(self: SweepRow) -> bool:
        reads[0] += 1
        return original.fget(self)  # type: ignore[misc]

    monkeypatch.setattr(SweepRow, "trainable", property(counted))
    data = _write(tmp_path / f"m{count}.jsonl", _rows(count))
    result = run_cli("train", data, "--out", tmp_path / f"out{count}", "--algo", "lookup_table")
    monkeypatch.setattr(SweepRow, "trainable", original)
    assert result.exit_code == 0, result.stderr
    return reads[0]


def test_train_reads_each_row_a_bounded_number_of_times(run_cli, tmp_path: Path, monkeypatch) -> None:
    """Doubling the batch sizes doubles the row reads (a scan per batch size quadrupled them)."""
    small = _trainable_reads(run_cli, tmp_path, monkeypatch, 150)
    large = _trainable_reads(run_cli, tmp_path, monkeypatch, 300)
    assert large / small == pytest.approx(2.0, rel=0.1), (small, large)


class _NoScan(Mapping[int, int]):
    def __init__(self, keys: range) -> None:
        self.keys_ = keys

    def __getitem__(self, key: int) -> int:
        return key

    def __contains__(self, key: object) -> bool:
        return key in self.keys_

    def __len__(self) -> int:
        return len(self.keys_)

    def __iter__(self) -> Iterator[int]:
        raise AssertionError("scanned")


def test_a_measured_batch_size_is_answered_without_a_scan() -> None:
    assert nearest_batch_size(7, _NoScan(range(1, 20_000))) == 7
    assert nearest_batch_size(6, {4: 0, 8: 0}) == 8  # the larger on a tie, as before
    assert nearest_batch_size(5, [4, 8]) == 4


def test_allowed_masks_in_one_pass_are_the_per_batch_size_masks() -> None:
    rows = _rows(5)
    rows[3] = {**rows[3], "error": "OOM"}  # (3,4,8) failed at batch size 2
    sweep = Sweep.from_records(rows)
    masks = sweep.allowed_masks()
    assert sorted(masks) == [1, 2, 3, 4, 5]
    for bs, mask in masks.items():
        assert mask.tolist() == sweep.allowed_mask(bs).tolist()
    assert masks[2].sum() == 1 and masks[1].sum() == 2


def test_more_batch_sizes_than_the_bound_is_one_line(run_cli, tmp_path: Path) -> None:
    rows = _rows(1)
    many = [{**rows[0], "batch_size": bs, "index": bs} for bs in range(1, MAX_DATA_BATCH_SIZES + 2)]
    result = run_cli("train", _write(tmp_path / "many.jsonl", many), "--out", tmp_path / "m")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {tmp_path / 'many.jsonl'}:{MAX_DATA_BATCH_SIZES + 1}: field 'batch_size': more than "
        f"{MAX_DATA_BATCH_SIZES} distinct batch sizes in one file (a measured sweep of that many is weeks of GPU "
        "time; see specband.core.limits.MAX_DATA_BATCH_SIZES)"
    )
    assert not (tmp_path / "m").exists()
