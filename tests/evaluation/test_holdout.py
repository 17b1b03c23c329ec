"""Held-out evaluation machinery, with a transparent test policy (conftest.MeanTablePolicy)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specband.contract.actions import REFERENCE_INDEX, action_index
from specband.core.errors import ConfigError, DataError
from specband.evaluation.holdout import evaluate, make_splits, provenance_label, resolve_holdout
from specband.sweeps.dataset import Sweep, load_sweep

from .conftest import MeanTablePolicy, repeat_records

IDX_324 = action_index((3, 2, 4))
IDX_528 = action_index((5, 2, 8))
ALGOS = ["lookup_table", "bcq"]  # bcq -> MeanTablePolicy biased towards (1,1,2) in table_factory


def biased_factory(action: int) -> Callable[[str, int], MeanTablePolicy]:
    return lambda name, seed: MeanTablePolicy(seed, bias_action=action if name == "bcq" else None)


@pytest.fixture(scope="module")
def bundled() -> Sweep:
    return load_sweep(None)


def _bs16_rows(sweep: Sweep, action: int) -> list[Any]:
    return [r for r in sweep.rows if r.batch_size == 16 and r.action_index == action]


def test_resolve_holdout(bundled: Sweep, published_records: list[dict[str, Any]]) -> None:
    assert resolve_holdout(bundled, "auto")[0] == "trial"
    assert resolve_holdout(bundled, "none") == ("none", "requested")
    with pytest.raises(ConfigError, match="every row has repeat null"):
        resolve_holdout(bundled, "repeat")
    with pytest.raises(ConfigError, match="unknown holdout 'fold'"):
        resolve_holdout(bundled, "fold")
    repeats = Sweep.from_records(repeat_records(published_records))
    assert resolve_holdout(repeats, "auto") == ("repeat", "auto: the data has 3 repeats")
    with pytest.raises(ConfigError, match="every row has trial null"):
        resolve_holdout(repeats, "trial")
    single = bundled.subset(lambda r: r.trial == "validate")
    assert resolve_holdout(single, "auto")[0] == "none"


def test_make_splits_partition_the_rows(bundled: Sweep) -> None:
    splits = make_splits(bundled, "trial")
    assert [s.name for s in splits] == ["trial=validate", "trial=seed0", "trial=seed1", "trial=seed2", "trial=seed3"]
    for s in splits:
        assert len(s.train.rows) + len(s.test.rows) == 29
        assert {r.trial for r in s.test.rows} == {s.name.split("=")[1]}
        assert s.name.split("=")[1] not in {r.trial for r in s.train.rows}
    (only,) = make_splits(bundled, "none")
    assert only.name == "in-sample" and only.train.rows == only.test.rows


def test_bundled_trial_holdout(bundled: Sweep, table_factory: Callable[..., Any]) -> None:
    result = evaluate(bundled, algorithms=ALGOS, policy_factory=biased_factory(REFERENCE_INDEX), n_bootstrap=200)
    assert result.holdout == "trial" and result.scored_on == "held-out"
    # bs 1/4/8 were run only in the validate trial: said so, and scored in-sample instead.
    assert [(n.split, n.batch_size) for n in result.not_held_out] == [
        ("trial=validate", 1),
        ("trial=validate", 4),
        ("trial=validate", 8),
    ]
    assert "run only in trial validate" in result.not_held_out[0].reason
    fr = result.features["contract"]
    assert sorted(fr.contexts) == [16]
    ctx = fr.contexts[16]
    assert ctx.oracles == {IDX_324: 5} and ctx.n_rows == 17
    ref_rows = _bs16_rows(bundled, REFERENCE_INDEX)
    ref_rewards = [bundled.reward_parts(r).reward for r in ref_rows]
    pick_rewards = [bundled.reward_parts(r).reward for r in _bs16_rows(bundled, IDX_324)]
    assert ctx.reference_reward.estimate == pytest.approx(np.mean(ref_rewards))
    assert ctx.oracle_reward.estimate == pytest.approx(np.mean(pick_rewards))
    # The mean-table policy picks (3,2,4) at bs 16 in every split: regret exactly 0.
    good = fr.picks["lookup_table"][16]
    assert good.pick == IDX_324 and good.picks == {IDX_324: 5}
    assert good.reaches_oracle and good.regret.estimate == 0.0 and good.regret.high == 0.0
    assert good.reward.estimate == pytest.approx(np.mean(pick_rewards)) and good.reward.n == 5
    assert good.in_band is True and good.label == "measured"
    # The biased policy always picks the reference (3,4,8): regret = oracle - reference per split.
    bad = fr.picks["bcq"][16]
    assert bad.pick == REFERENCE_INDEX and not bad.reaches_oracle
    assert bad.regret.estimate == pytest.approx(np.mean(np.array(pick_rewards) - np.array(ref_rewards)))
    assert bad.regret.low > 0.0 and bad.regret.n == 5
    utils = [bundled.reward_parts(r).energy_utilization for r in ref_rows]
    assert bad.utilization.estimate == pytest.approx(np.mean(utils)) and bad.in_band is False
    assert bad.in_band_fraction == 0.0
    assert bad.label == "mixed: 4 measured, 1 derived"
    # The in-sample fallback covers exactly the batch sizes that could not be held out.
    fb = result.in_sample
    assert fb is not None and fb.scored_on == "in-sample" and fb.splits == ("in-sample",)
    assert sorted(fb.features["contract"].contexts) == [1, 4, 8]
    for bs in (1, 4, 8):
        p = fb.features["contract"].picks["lookup_table"][bs]
        assert p.pick == REFERENCE_INDEX and p.reaches_oracle and p.reward.n == 1 and not p.reward.informative
        assert p.label == "derived"  # the reference rows' utilisation was back-computed upstream
    # No pre-launch telemetry: pre states equal contract states, fits are shared.
    assert result.features["pre"].identical_to == "contract"
    assert "no pre-launch telemetry" in result.features["pre"].note
    assert result.fits == 2 * (5 + 1)
    # OPE over the 17 held-out bs-16 rows ranks the policies like the measured picks.
    assert fr.ope_n == 17
    assert fr.ope["lookup_table"]["dr"].estimate > fr.ope["bcq"]["dr"].estimate


def test_pick_not_run_in_held_out_split(bundled: Sweep) -> None:
    """(5,2,8) at bs 16 was run only in the validate trial: a policy that wants it gets it
    from the training side of the seed splits, where the held-out rows never ran it."""
    result = evaluate(bundled, algorithms=["bcq"], policy_factory=biased_factory(IDX_528), n_bootstrap=100)
    p = result.features["contract"].picks["bcq"][16]
    by_split = {s.split: s for s in p.splits}
    assert by_split["trial=validate"].pick != IDX_528  # not allowed: training had no (5,2,8) run
    assert by_split["trial=validate"].pick_reward is not None
    for name in ("trial=seed0", "trial=seed1", "trial=seed2", "trial=seed3"):
        assert by_split[name].pick == IDX_528
        assert by_split[name].pick_reward is None and by_split[name].regret is None
        # DR with no logged support reduces to the training mean of (5,2,8) at bs 16.
        assert by_split[name].pick_estimate == pytest.approx(
            bundled.reward_parts(_bs16_rows(bundled, IDX_528)[0]).reward
        )
    assert p.not_measured == ("trial=seed0", "trial=seed1", "trial=seed2", "trial=seed3")
    assert p.reward is not None and p.reward.n == 1 and p.regret.n == 1
    assert p.estimate == pytest.approx(by_split["trial=seed0"].pick_estimate)


def test_repeat_holdout_on_a_sweep_with_repeats(
    published_records: list[dict[str, Any]], table_factory: Callable[..., Any]
) -> None:
    sweep = Sweep.from_records(repeat_records(published_records))
    result = evaluate(sweep, algorithms=ALGOS, policy_factory=table_factory, n_bootstrap=200)
    assert result.holdout == "repeat" and result.splits == ("repeat=0", "repeat=1", "repeat=2")
    assert result.not_held_out == () and result.in_sample is None
    for kind in ("contract", "pre"):
        fr = result.features[kind]
        assert sorted(fr.contexts) == [1, 4, 8, 16]
        assert fr.identical_to is None  # pre-launch telemetry differs from the post-run readings
        for p in fr.picks["lookup_table"].values():
            assert p.reward.n == 3 and p.reward.informative
            assert p.reaches_oracle == (p.regret.estimate == 0.0)
        assert fr.picks["lookup_table"][16].pick == IDX_324
        assert fr.picks["bcq"][8].pick == action_index((1, 1, 2))
        assert fr.picks["bcq"][8].regret.estimate > 0.1
    assert "pre-launch state" in result.features["pre"].note
    assert "hindsight" in result.features["contract"].note
    assert result.fits == 2 * 3 * 2  # two algorithms, three splits, two distinct feature kinds


def test_failed_held_out_run_scores_zero_and_failed_training_run_is_never_picked(
    published_records: list[dict[str, Any]], table_factory: Callable[..., Any]
) -> None:
    records = repeat_records(published_records)
    for r in records:
        if r["repeat"] == 2 and r["batch_size"] == 16 and (r["steps"], r["topk"], r["num_draft_tokens"]) == (3, 2, 4):
            r.update(error="CUDA out of memory", speed_tok_s=None, accept_length=None, avg_power_watts=None)
    sweep = Sweep.from_records(records)
    result = evaluate(
        sweep, algorithms=["lookup_table"], features=["contract"], policy_factory=table_factory, n_bootstrap=100
    )
    p = result.features["contract"].picks["lookup_table"][16]
    by_split = {s.split: s for s in p.splits}
    # Held out repeat 2: training (repeats 0, 1) says (3,2,4); it failed in repeat 2 -> reward 0.
    assert by_split["repeat=2"].pick == IDX_324
    assert by_split["repeat=2"].pick_reward == 0.0
    assert by_split["repeat=2"].regret == pytest.approx(by_split["repeat=2"].oracle_reward)
    # Held out repeat 0 or 1: (3,2,4) failed on the training side, so it is not allowed.
    assert by_split["repeat=0"].pick != IDX_324 and by_split["repeat=1"].pick != IDX_324
    assert not p.reaches_oracle


def test_in_sample_is_labelled(bundled: Sweep, table_factory: Callable[..., Any]) -> None:
    result = evaluate(
        bundled, holdout="none", algorithms=["lookup_table"], policy_factory=table_factory, n_bootstrap=50
    )
    assert result.scored_on == "in-sample" and result.splits == ("in-sample",) and result.in_sample is None
    fr = result.features["contract"]
    assert sorted(fr.contexts) == [1, 4, 8, 16]
    assert all(p.reaches_oracle for p in fr.picks["lookup_table"].values())
    assert fr.picks["lookup_table"][16].reward.n == 5


def test_evaluate_input_errors(bundled: Sweep, table_factory: Callable[..., Any]) -> None:
    with pytest.raises(ConfigError, match="unknown algorithm 'sarsa'"):
        evaluate(bundled, algorithms=["sarsa"], policy_factory=table_factory)
    with pytest.raises(ConfigError, match="unknown feature kind 'post'"):
        evaluate(bundled, features=["post"], policy_factory=table_factory)
    with pytest.raises(ConfigError, match="every row has repeat null"):
        evaluate(bundled, holdout="repeat", policy_factory=table_factory)
    with pytest.raises(ConfigError, match="alpha"):
        evaluate(bundled, alpha=1.5, policy_factory=table_factory)
    # Two trials that never share a batch size: nothing can be held out.
    disjoint = bundled.subset(lambda r: (r.trial == "validate" and r.batch_size == 1) or r.trial == "seed0")
    with pytest.raises(DataError, match="no batch size can be held out"):
        evaluate(disjoint, holdout="trial", policy_factory=table_factory)


def test_provenance_label(bundled: Sweep) -> None:
    rows = list(bundled.rows)
    assert provenance_label([]) == "none"
    assert provenance_label([r for r in rows if r.utilization_origin == "derived"]) == "derived"
    assert provenance_label(rows[:4]) == "mixed: 3 measured, 1 derived"
    sim = Sweep.from_records([dict(r.raw, provenance="simulated") for r in rows[:4]])
    assert provenance_label(list(sim.rows)) == "simulated"
    emu = Sweep.from_records([dict(r.raw, provenance="emulated") for r in rows[:2]] + [dict(r.raw) for r in rows[2:4]])
    assert provenance_label(list(emu.rows)) == "mixed: 2 measured, 2 emulated"


def test_evaluation_is_deterministic(bundled: Sweep, table_factory: Callable[..., Any], tmp_path: Path) -> None:
    a = evaluate(bundled, algorithms=ALGOS, policy_factory=table_factory, n_bootstrap=100, seed=3)
    b = evaluate(bundled, algorithms=ALGOS, policy_factory=table_factory, n_bootstrap=100, seed=3)
    assert a.features == b.features
