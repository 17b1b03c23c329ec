"""Adaptive repeats: which configs the next pass re-measures, the logging propensities and
the savings; on simulated sweeps it keeps the exhaustive sweep's pick with fewer runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specband.contract.actions import ACTIONS
from specband.core.errors import ConfigError
from specband.evaluation.ope import uniform_propensities
from specband.harness.adaptive import (
    adaptive_savings,
    decide,
    logging_propensities,
    mean_rewards,
    plan_pass,
    row_gpu_seconds,
)
from specband.harness.pipeline import grid
from specband.sim.simulated import simulate_sweep
from specband.sweeps.dataset import Sweep

BASE, A, B, C = ACTIONS[0], ACTIONS[1], ACTIONS[2], ACTIONS[3]


def test_a_config_needs_two_measurements_before_it_can_be_dropped():
    d = decide(4, {BASE: [0.0], A: [0.9], B: [0.1]})
    assert not d.settled and d.best == A and d.keep == (BASE, A, B)
    assert all(math.isinf(c.high) for c in d.intervals)  # one measurement each: no spread known


def test_pooled_t_interval_drops_the_clear_loser_and_keeps_the_close_rival():
    samples = {BASE: [0.0, 0.0], A: [0.50, 0.52], B: [0.49, 0.51], C: [0.20, 0.22]}
    d = decide(8, samples)
    # A, B, C: two values 0.02 apart -> squared deviations 2e-4 each, df 3 (the baseline left out)
    sd = math.sqrt(3 * 2e-4 / 3)
    half = 3.182446305284263 * sd / math.sqrt(2)  # t_{0.975, 3}
    by = {c.action: c for c in d.intervals}
    assert by[A].high - by[A].mean == pytest.approx(half)
    assert d.best == A and d.keep == (BASE, A, B) and not d.settled  # C's interval lies below A's


def test_settled_when_only_the_best_reaches_it():
    d = decide(16, {BASE: [0.0, 0.0], A: [0.50, 0.51], C: [0.20, 0.21]})
    assert d.settled and d.best == A and d.keep == ()


def test_a_failed_config_is_not_re_measured_and_all_zero_rewards_settle():
    d = decide(1, {BASE: [0.0, 0.0], A: [0.0, 0.0], B: [0.0, 0.0]})
    assert d.settled and d.best == BASE  # nothing beats the baseline: nothing to tell apart
    rows = simulate_sweep(profile="rtx4060-laptop", batch_sizes=(16,), actions=ACTIONS[:4], repeats=1, seed=0)
    rows[2] = {**rows[2], "error": "out of memory", "speed_tok_s": None, "accept_length": None}
    points = grid((16,), ACTIONS[:4])
    todo, decisions = plan_pass(rows, points, 1)
    assert ACTIONS[2] not in {p.action for p in todo} and ACTIONS[2] not in decisions[16].keep
    assert {p.action for p in todo} == {ACTIONS[0], ACTIONS[1], ACTIONS[3]}  # one measurement: kept


@pytest.mark.parametrize("kwargs", [{"level": 1.0}, {"level": 0.0}, {"min_measurements": 0}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ConfigError):
        decide(1, {A: [0.1]}, **kwargs)


def test_pass_zero_measures_everything_and_later_passes_ignore_their_own_rows():
    points = grid((1, 4), ACTIONS)
    assert plan_pass([], points, 0) == (points, {})
    rows = _grid_rows("rtx4060-laptop", (1, 4), 3, seed=2)
    first = plan_pass([r for r in rows if r["repeat"] < 2], points, 2)
    assert plan_pass(rows, points, 2) == first  # rows of pass 2 do not change pass 2's plan


def test_propensities_are_uniform_for_an_exhaustive_sweep_and_the_mixture_otherwise():
    rows = _grid_rows("rtx4060-laptop", (1, 4), 2, seed=1)
    sweep = Sweep.from_records(rows)
    expected = uniform_propensities(np.array([r.batch_size for r in sweep.rows]),
                                    np.array([r.action_index for r in sweep.rows]))  # fmt: skip
    assert logging_propensities(rows) == pytest.approx(list(expected))
    kept = [r for r in rows if r["repeat"] == 0 or (r["batch_size"] == 1 and r["steps"] in (0, 1))]
    props = logging_propensities(kept)
    n_bs1 = sum(1 for r in kept if r["batch_size"] == 1)
    for row, p in zip(kept, props, strict=True):
        n = sum(
            1
            for r in kept
            if r["batch_size"] == row["batch_size"]
            and (r["steps"], r["topk"], r["num_draft_tokens"]) == (row["steps"], row["topk"], row["num_draft_tokens"])
        )
        assert p == pytest.approx(n / (n_bs1 if row["batch_size"] == 1 else 19))
    for bs in (1, 4):  # a distribution over the actions logged at each batch size
        per_action = {(r["steps"], r["topk"], r["num_draft_tokens"]): p
                      for r, p in zip(kept, props, strict=True) if r["batch_size"] == bs}  # fmt: skip
        assert sum(per_action.values()) == pytest.approx(1.0)
    td = Sweep.from_records([{**r, "propensity": p} for r, p in zip(kept, props, strict=True)]).training_data()
    assert td.propensities.tolist() == pytest.approx(props)  # evaluate reads the column


def test_savings_count_runs_and_estimate_gpu_seconds():
    points = grid((1,), ACTIONS[:2])
    rows = [{"index": 0, "repeat": 0, "wall_clock_s": 10.0, "launch_wall_s": 30.0},
            {"index": 1, "repeat": 0, "wall_clock_s": 20.0},
            {"index": 1, "repeat": 1, "wall_clock_s": 22.0, "launch_wall_s": None}]  # fmt: skip
    s = adaptive_savings(rows, points, 3)
    assert (s.runs, s.runs_exhaustive, s.runs_saved) == (3, 6, 3)
    assert s.gpu_s == 82.0 and s.gpu_s_saved == pytest.approx(2 * 40.0 + 21.0)
    assert row_gpu_seconds(rows[0]) == 40.0
    with pytest.raises(ConfigError, match="grid index 1 has no row"):
        adaptive_savings(rows[:1], points, 3)


def _grid_rows(profile: str, batch_sizes: tuple[int, ...], repeats: int, seed: int) -> list[dict]:
    rows = simulate_sweep(profile=profile, batch_sizes=batch_sizes, repeats=repeats, seed=seed)
    n = len(batch_sizes) * len(ACTIONS)
    return [{**r, "index": r["index"] % n} for r in rows]


def _picks(rows: list[dict]) -> tuple[dict[int, tuple], dict[int, dict[tuple, float]]]:
    means = mean_rewards(rows)
    return {bs: max(m, key=lambda a: (m[a], -ACTIONS.index(a))) for bs, m in means.items()}, means


@pytest.mark.parametrize("repeats, max_share", [(10, 0.40), (5, 0.50), (3, 0.75)])
def test_on_a_simulated_sweep_it_keeps_the_exhaustive_pick_with_fewer_runs(repeats, max_share):
    """Replays the passes on a simulated exhaustive sweep (each pass takes the simulated
    rows of the configs it measures): the pick at every batch size is the exhaustive
    sweep's (regret 0 <= 1 % of its reward). Two passes of every config come first, so
    with 3 repeats at least 2/3 of the runs are measured."""
    points = grid((1, 4, 8, 16), ACTIONS)
    full = _grid_rows("rtx4060-laptop", (1, 4, 8, 16), repeats, seed=4)
    by_run = {(r["index"], r["repeat"]): r for r in full}
    rows: list[dict] = []
    for rep in range(repeats):
        todo, _ = plan_pass(rows, points, rep)
        rows += [by_run[(p.index, rep)] for p in todo]
    exhaustive, means = _picks(full)
    adaptive, _ = _picks(rows)
    for bs, pick in exhaustive.items():
        assert means[bs][pick] - means[bs][adaptive[bs]] <= 0.01 * means[bs][pick]
    assert len(rows) <= max_share * len(full)
    savings = adaptive_savings(rows, points, repeats)
    assert savings.runs_saved == len(full) - len(rows) and savings.gpu_s_saved > 0
