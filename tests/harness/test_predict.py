"""``sweep --plan predict``: the planner's choices on simulated worlds (the seed, the configs that
could win, the stop rule), a world where a tree wins, resume, the rows' columns and the
acceptance fit behind the predictions."""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from specband.contract.actions import ACTIONS, EXTENDED_ACTIONS, as_action
from specband.harness.adaptive import mean_rewards, row_gpu_seconds
from specband.harness.pipeline import grid
from specband.harness.predict import plan_round, predict_summary, replay_predicted, seed_actions
from specband.harness.predictor import fit_acceptance_rows
from specband.sim import build_model
from specband.sim.draft_tree import AcceptParams, accept_length
from specband.sim.simulated import simulate_sweep
from specband.sweeps.dataset import Sweep

BATCH_SIZES = (1, 4, 8, 16)
PAIR_8B = {"target_config": "llama-3.1-8b-instruct", "draft_config": "eagle3-llama-3.1-8b-instruct"}
#: An acceptance where trees accept far more than the 8B pair's bundled (MT-bench) profile says:
#: rank-2 candidates almost as good as rank 1 (a workload the chains tell nothing about).
TREE_FRIENDLY = AcceptParams(0.7, 0.95, 0.45, 0.9, 0.8, 0.7, 0.85)


def _world_rows(model, repeats, seed, batch_sizes=BATCH_SIZES):
    """A simulated exhaustive sweep with grid indices (``index`` modulo the grid)."""
    rows = simulate_sweep(model, batch_sizes=batch_sizes, repeats=repeats, seed=seed)
    n = len(batch_sizes) * len(ACTIONS)
    return [{**r, "index": r["index"] % n} for r in rows]


def _with_acceptance(model, params):
    """A copy of ``model`` whose runs accept as ``params`` say (the world; the planner keeps
    ``model``'s acceptance as its prior)."""
    world = copy.copy(model)
    world._accept = params
    return world


def _pick(means, bs):
    return max(means[bs], key=lambda a: (means[bs][a], -ACTIONS.index(a)))


def _gpu_s(rows, launch_s):
    return sum(row_gpu_seconds(r) for r in rows) + launch_s * len(rows)


def test_seed_is_the_baseline_and_the_chains_nearest_3_1_4_and_7_1_8():
    assert seed_actions(ACTIONS) == (ACTIONS[0], as_action((3, 1, 4)), as_action((5, 1, 6)))
    assert seed_actions(EXTENDED_ACTIONS)[1:] == (as_action((3, 1, 4)), as_action((7, 1, 8)))
    only_one = [ACTIONS[0], as_action((1, 1, 2)), as_action((3, 2, 4))]
    assert seed_actions(only_one) == (ACTIONS[0], as_action((1, 1, 2)))  # fewer chains: fewer seeds


def test_first_round_is_the_seed_at_every_batch_size_and_nothing_is_predicted_before_it():
    model = build_model("rtx4060-laptop")
    points = grid(BATCH_SIZES, ACTIONS)
    runs, decisions, world = plan_round([], points, model, max_repeats=3)
    assert world is None and decisions == {}
    assert {r.planned_by for r in runs} == {"seed"} and len(runs) == 3 * len(BATCH_SIZES)
    assert {r.point.action for r in runs} == set(seed_actions(ACTIONS)) and {r.repeat for r in runs} == {0}


def test_on_the_simulated_laptop_it_keeps_the_oracle_pick_at_a_fifth_of_the_gpu_seconds():
    model = build_model("rtx4060-laptop")
    points = grid(BATCH_SIZES, ACTIONS)
    full = _world_rows(model, 3, seed=11)
    rows = replay_predicted(full, points, model, 3)
    oracle = mean_rewards(_world_rows(model, 8, seed=99))
    picks = mean_rewards(rows)
    for bs in BATCH_SIZES:
        best = max(oracle[bs].values())
        assert best - oracle[bs][_pick(picks, bs)] <= 0.01 * best, bs  # regret <= 1 % of the oracle
    launch_s = model.profile.launch_s
    assert _gpu_s(rows, launch_s) <= 0.2 * _gpu_s(full, launch_s)
    keys = [(r["index"], r["repeat"]) for r in rows]
    assert len(keys) == len(set(keys))  # no run twice
    by = Counter(r["planned_by"] for r in rows)
    assert by["seed"] == 12 and by["prediction"] > 0
    # a row planned by prediction carries the interval it was planned on; the others none
    assert all((r["predicted_reward"] is not None) == (r["planned_by"] == "prediction") for r in rows)
    assert all(lo <= est <= hi for r in rows if r["predicted_reward"] for est, lo, hi in [r["predicted_reward"]])


def test_a_world_where_a_tree_wins_gets_the_tree_measured_and_picked():
    model = build_model("h200", **PAIR_8B)  # the prior: the 8B pair's chain-friendly MT-bench acceptance
    world = _with_acceptance(model, TREE_FRIENDLY)
    points = grid(BATCH_SIZES, ACTIONS)
    full = _world_rows(world, 3, seed=11)
    oracle = mean_rewards(_world_rows(world, 8, seed=99))
    winner = _pick(oracle, 1)
    assert winner.speculative_eagle_topk > 1  # the world's best at bs 1 is a tree
    prior_best = max(ACTIONS[1:], key=lambda a: model.predict(1, a, 40.0).speed_tok_s)
    assert prior_best.speculative_eagle_topk == 1  # which the prior alone would never try
    rows = replay_predicted(full, points, model, 3)
    measured = {(r["batch_size"], (r["steps"], r["topk"], r["num_draft_tokens"])) for r in rows}
    assert (1, tuple(winner)) in measured
    picks = mean_rewards(rows)
    for bs in BATCH_SIZES:
        best = max(oracle[bs].values())
        assert best - oracle[bs][_pick(picks, bs)] <= 0.01 * best, bs


def test_a_world_where_nothing_beats_the_baseline_stops_soon_after_the_seed():
    model = build_model("h100-sxm")  # the 1B pair on an H100: speculation never pays (reward 0)
    points = grid(BATCH_SIZES, ACTIONS)
    rows = replay_predicted(_world_rows(model, 3, seed=3), points, model, 3)
    by = Counter(r["planned_by"] for r in rows)
    # a reward at the floor (0) is not re-measured; only a config whose interval reached above 0 was tried
    assert by["seed"] == 12 and by["remeasure"] == 0 and by["prediction"] <= 4
    assert all(r["error"] is None for r in rows) and max(mean_rewards(rows)[1].values()) == 0.0
    _, decisions, _ = plan_round(rows, points, model, max_repeats=3)
    assert all(d.settled and d.measure == () for d in decisions.values())


def test_remeasure_stops_at_repeats_and_a_failed_config_is_never_planned_again():
    model = build_model("rtx4060-laptop")
    points = grid((16,), ACTIONS)
    full = _world_rows(model, 2, seed=5, batch_sizes=(16,))
    failed = as_action((5, 4, 16))  # does not fit at bs 16 on the laptop: an error row
    assert any(r["error"] for r in full if (r["steps"], r["topk"], r["num_draft_tokens"]) == tuple(failed))
    rows = replay_predicted(full, points, model, 2)
    per_config = Counter((r["steps"], r["topk"], r["num_draft_tokens"]) for r in rows)
    assert max(per_config.values()) <= 2 and per_config.get(tuple(failed), 0) <= 1
    assert {r["repeat"] for r in rows} <= {0, 1}


def test_resume_from_any_cut_neither_loses_nor_duplicates_a_row():
    model = build_model("h200", **PAIR_8B)
    points = grid(BATCH_SIZES, ACTIONS)
    full = _world_rows(model, 3, seed=7)
    whole = replay_predicted(full, points, model, 3)
    for cut in (5, 12, 17, len(whole) - 1):
        resumed = replay_predicted(full, points, model, 3, start=whole[:cut])
        keys = [(r["index"], r["repeat"]) for r in resumed]
        assert resumed[:cut] == whole[:cut] and len(keys) == len(set(keys))
        # the same pick at every batch size as the uninterrupted sweep
        a, b = mean_rewards(whole), mean_rewards(resumed)
        assert all(_pick(a, bs) == _pick(b, bs) for bs in BATCH_SIZES)


def test_rows_load_as_a_sweep_and_the_summary_counts_gpu_seconds():
    model = build_model("rtx4060-laptop")
    points = grid((1, 16), ACTIONS)
    full = _world_rows(model, 2, seed=2, batch_sizes=(1, 16))
    rows = replay_predicted(full, points, model, 2)
    sweep = Sweep.from_records(rows)  # the reader keeps the new columns, checks the known ones
    assert len(sweep.rows) == len(rows) and all(0 < r.propensity <= 1 for r in sweep.rows)
    got = predict_summary(rows, points, 2)
    assert got.runs == len(rows) and got.runs_exhaustive == 2 * len(points)
    assert got.gpu_s == pytest.approx(sum(row_gpu_seconds(r) for r in rows))
    assert got.gpu_s < got.gpu_s_exhaustive and set(got.picks) == {1, 16}
    assert sum(got.planned_by.values()) == len(rows)


def test_two_chains_pin_the_other_chains_and_trees_stay_wide_until_one_is_measured():
    truth = AcceptParams(0.66, 0.9, 0.3, 0.8, 0.6, 0.5, 1.1)
    prior = AcceptParams()

    def rows_of(actions):
        return [{"steps": a[0], "topk": a[1], "num_draft_tokens": a[2], "accept_length": accept_length(a, truth)}
                for a in actions]  # fmt: skip

    chains = fit_acceptance_rows(rows_of([(3, 1, 4), (5, 1, 6)]), prior)
    between = chains.interval(as_action((5, 1, 6)))
    assert between.low == between.high  # a measured config is its own mean
    one = chains.interval(as_action((1, 1, 2)))
    assert one.low <= accept_length((1, 1, 2), truth) <= one.high
    tree = as_action((3, 4, 8))
    wide = chains.interval(tree)
    assert wide.low <= accept_length(tree, truth) <= wide.high and wide.high - wide.low > 0.5
    with_tree = fit_acceptance_rows(rows_of([(3, 1, 4), (5, 1, 6), (3, 2, 4), (5, 4, 8)]), prior)
    narrow = with_tree.interval(tree)
    assert narrow.high - narrow.low < wide.high - wide.low
    assert narrow.low <= accept_length(tree, truth) <= narrow.high


def test_acceptance_from_another_file_narrows_the_trees_before_any_tree_is_measured():
    from specband.sim.acceptance_fit import AcceptanceObservation

    model = build_model("h200", **PAIR_8B)
    world = _with_acceptance(model, TREE_FRIENDLY)
    points = grid((1,), ACTIONS)
    full = _world_rows(world, 1, seed=4, batch_sizes=(1,))
    seed = [r for r in full if (r["steps"], r["topk"], r["num_draft_tokens"]) in {(0, 0, 0), (3, 1, 4), (5, 1, 6)}]
    trees = [(3, 2, 4), (5, 4, 8), (3, 4, 8)]
    elsewhere = [AcceptanceObservation(t, accept_length(t, TREE_FRIENDLY)) for t in trees]
    _, plain, fit_plain = plan_round(seed, points, model, max_repeats=1)
    _, informed, fit_informed = plan_round(seed, points, model, max_repeats=1, observations=elsewhere)
    tree = as_action((5, 4, 16))
    wide, narrow = fit_plain.acceptance.interval(tree), fit_informed.acceptance.interval(tree)
    assert narrow.high - narrow.low < wide.high - wide.low
    assert narrow.low <= accept_length(tree, TREE_FRIENDLY) <= narrow.high
    assert fit_informed.acceptance.label.startswith("fitted to 5 ")  # 2 chains measured here + 3 trees from the file
    assert plain[1].best == informed[1].best  # the pick is still the measured best


@pytest.mark.parametrize(
    ("gpu", "profile"),
    [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("H100_SXM5_80GB", "h100-sxm"),
     ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"), ("NVIDIA GeForce RTX 4060 Laptop GPU", "rtx4060-laptop")],
)  # fmt: skip
def test_the_gpu_name_finds_its_profile_and_an_unknown_gpu_needs_one(gpu, profile):
    from specband.core.errors import ConfigError
    from specband.harness.job import PredictSetup

    assert PredictSetup().profile_for(gpu) == profile
    assert PredictSetup(profile="h200").profile_for(gpu) == "h200"  # --profile wins
    with pytest.raises(ConfigError, match="no calibrated simulator profile for the GPU 'NVIDIA L4'; name one"):
        PredictSetup().profile_for("NVIDIA L4")
