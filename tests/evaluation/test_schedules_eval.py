"""Schedules and batch-mix picks scored held out (specband.evaluation.schedules)."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from specband.core.errors import ConfigError, DataError
from specband.evaluation.holdout import evaluate
from specband.evaluation.schedules import evaluate_schedules
from specband.sweeps.dataset import Sweep

from .conftest import repeat_records


@pytest.fixture
def sweep(published_records) -> Sweep:
    return Sweep.from_records(repeat_records(published_records))


def _held_out_means(sweep: Sweep, split: str) -> dict[int, dict[int, float]]:
    """bs -> action -> mean held-out reward of one repeat, computed here independently."""
    rep = int(split.partition("=")[2])
    acc: dict[int, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in sweep.rows:
        if row.repeat == rep:
            acc[row.batch_size][row.action_index].append(sweep.reward_parts(row).reward)
    return {bs: {a: float(np.mean(v)) for a, v in d.items()} for bs, d in acc.items()}


def test_variants_per_split(sweep):
    res = evaluate_schedules(sweep, algorithms=["lookup_table"], features=["pre"], n_bootstrap=50)
    assert res.holdout == "repeat" and res.scored_on == "held-out"
    rows = {(r.split, r.variant): r for r in res.splits}
    assert {s for s, _ in rows} == {"repeat=0", "repeat=1", "repeat=2"}
    picks = evaluate(sweep, holdout="repeat", algorithms=["lookup_table"], features=["pre"], n_bootstrap=50)
    for split in ("repeat=0", "repeat=1", "repeat=2"):
        means = _held_out_means(sweep, split)
        for variant in ("per-batch-size", "schedule", "batch-mix", "best fixed"):
            r = rows[(split, variant)]
            expected = sum(means[bs][a] for bs, a in r.configs.items()) / len(r.configs)  # uniform mix
            assert r.value == pytest.approx(expected)
        # the per-batch-size configs are evaluate()'s picks
        by_bs = picks.features["pre"].picks["lookup_table"]
        assert rows[(split, "per-batch-size")].configs == {
            bs: next(p.pick for p in by_bs[bs].splits if p.split == split) for bs in by_bs
        }
        # the schedule only serves chain configs; measured chain configs on this data
        assert rows[(split, "schedule")].configs == {1: 0, 4: 5, 8: 1, 16: 0}
        # one config for every batch size; the hindsight best fixed config is at least as good
        assert len(set(rows[(split, "batch-mix")].configs.values())) == 1
        assert rows[(split, "best fixed")].value >= rows[(split, "batch-mix")].value - 1e-12
    summary = {(s.algorithm, s.variant): s for s in res.summaries}
    assert summary[("lookup_table", "schedule")].n_measured == 3
    assert (
        summary[("lookup_table", "per-batch-size")].value.estimate
        > summary[("lookup_table", "schedule")].value.estimate
    )


def test_a_mix_weights_the_batch_sizes(sweep):
    res = evaluate_schedules(sweep, algorithms=["lookup_table"], features=["pre"], mix={4: 3.0, 8: 1.0}, n_bootstrap=50)
    r = next(r for r in res.splits if r.split == "repeat=0" and r.variant == "schedule")
    means = _held_out_means(sweep, "repeat=0")
    assert r.configs == {4: 5, 8: 1}
    assert r.value == pytest.approx(0.75 * means[4][5] + 0.25 * means[8][1])
    with pytest.raises(DataError, match="no split holds out a batch size of the mix"):
        evaluate_schedules(sweep, algorithms=["lookup_table"], features=["pre"], mix={3: 1.0}, n_bootstrap=50)
    with pytest.raises(ConfigError, match="unknown algorithm or feature kind 'dqn'"):
        evaluate_schedules(sweep, algorithms=["dqn"])


def test_evaluate_cli_schedules_writes_json_and_figure(run_cli, tmp_path, repeat_sweep_path):
    out = tmp_path / "report"
    res = run_cli(
        "evaluate",
        repeat_sweep_path,
        "--schedules",
        "--algo",
        "lookup_table",
        "--features",
        "pre",
        "--bootstrap",
        "50",
        "--out",
        out,
    )
    assert res.exit_code == 0, res.stderr
    assert "serving a batch-size mix" in res.stdout
    doc = json.loads((out / "schedules.json").read_text())
    assert doc["schema"] == "specband.schedules/1" and doc["holdout"] == "repeat"
    variants = {s["variant"] for s in doc["summaries"]}
    assert variants == {"per-batch-size", "schedule", "batch-mix", "best fixed"}
    assert (out / "schedules.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "evaluation.json").is_file()  # still a report folder: a rerun may replace it
    res = run_cli(
        "evaluate",
        repeat_sweep_path,
        "--schedules",
        "--algo",
        "lookup_table",
        "--features",
        "pre",
        "--bootstrap",
        "50",
        "--out",
        out,
        "--batch-mix",
        "4:1",
    )
    assert res.exit_code == 0, res.stderr
    assert json.loads((out / "schedules.json").read_text())["mix"] == {"4": 1.0}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch-mix", "4:1"], "--batch-mix goes with --schedules"),
        (["--schedules", "--batch-mix", "4"], "--batch-mix: expected"),
    ],
)
def test_evaluate_cli_mix_errors(run_cli, args, message):
    res = run_cli("evaluate", "--algo", "lookup_table", *args)
    assert res.exit_code == 2 and message in res.stderr and res.stderr.count("\n") == 1
