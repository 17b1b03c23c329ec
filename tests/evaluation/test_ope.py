"""Off-policy estimators on a synthetic logged bandit with known policy values, and their
input checks."""

from __future__ import annotations

import numpy as np
import pytest

from specband.core.errors import ConfigError, DataError
from specband.evaluation.ope import (
    ESTIMATORS,
    DirectMethod,
    DoublyRobust,
    InverseProbabilityScoring,
    SelfNormalizedIPS,
    bootstrap_interval,
    check_logged_bandit,
    mean_reward_model,
    one_hot,
    uniform_propensities,
)

from .synthetic import SyntheticBandit


def _inputs(bandit: SyntheticBandit, pi: np.ndarray, log: dict[str, np.ndarray], q: np.ndarray | None = None):
    x = log["context"]
    return {
        "action_dist": pi[x],
        "reward": log["reward"],
        "action": log["action"],
        "pscore": log["pscore"],
        "estimated_rewards": (bandit.q if q is None else q)[x],
    }


# ----------------------------------------------------------------------------- ground truth
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("policy", ["pi_det", "pi_sto"])
@pytest.mark.parametrize("name", ["dm", "ips", "snips", "dr"])
def test_interval_covers_true_value(seed: int, policy: str, name: str) -> None:
    bandit = SyntheticBandit.make(seed=seed)
    pi = getattr(bandit, policy)
    truth = bandit.true_value(pi)
    log = bandit.log(3000, seed=100 + seed)
    interval = ESTIMATORS[name].estimate_interval(**_inputs(bandit, pi, log), random_state=seed)
    assert interval.low <= interval.estimate <= interval.high
    assert interval.covers(truth), (name, policy, truth, interval)
    # The interval is informative: narrower than the reward range, wider than nothing.
    assert 0.0 < interval.high - interval.low < 0.3
    assert interval.n == 3000 and interval.n_bootstrap == 1000 and interval.level == pytest.approx(0.95)


def test_coverage_rate_over_replications() -> None:
    """Over 100 independent logs, each estimator's 95 % interval covers the truth in most of
    them, while IPS with the wrong (uniform) propensities and DM with a biased reward model
    almost never do (the check can fail)."""
    bandit = SyntheticBandit.make(seed=0)
    reps = 100
    for policy in ("pi_det", "pi_sto"):
        pi = getattr(bandit, policy)
        truth = bandit.true_value(pi)
        covered = dict.fromkeys(ESTIMATORS, 0)
        wrong_ips = biased_dm = biased_dr = 0
        for rep in range(reps):
            log = bandit.log(1000, seed=1000 + rep)
            inputs = _inputs(bandit, pi, log)
            for name, est in ESTIMATORS.items():
                covered[name] += est.estimate_interval(**inputs, n_bootstrap=300, random_state=rep).covers(truth)
            if policy == "pi_det":
                wrong = dict(inputs, pscore=np.full(len(log["reward"]), 1.0 / bandit.q.shape[1]))
                wrong_ips += (
                    InverseProbabilityScoring()
                    .estimate_interval(**wrong, n_bootstrap=300, random_state=rep)
                    .covers(truth)
                )
                biased = _inputs(bandit, pi, log, q=bandit.q + 0.15)
                biased_dm += DirectMethod().estimate_interval(**biased, n_bootstrap=300, random_state=rep).covers(truth)
                biased_dr += DoublyRobust().estimate_interval(**biased, n_bootstrap=300, random_state=rep).covers(truth)
        for name, count in covered.items():
            assert count / reps >= 0.85, (policy, name, count)
        if policy == "pi_det":
            assert wrong_ips / reps < 0.2
            assert biased_dm == 0
            # DR stays right with a wrong reward model when the propensities are right.
            assert biased_dr / reps >= 0.85


def test_estimators_converge_to_truth_on_a_large_log() -> None:
    bandit = SyntheticBandit.make(seed=3)
    log = bandit.log(60_000, seed=7)
    for pi in (bandit.pi_det, bandit.pi_sto):
        truth = bandit.true_value(pi)
        for name, est in ESTIMATORS.items():
            assert est.estimate_policy_value(**_inputs(bandit, pi, log)) == pytest.approx(truth, abs=0.02), name


# ----------------------------------------------------------------------------- exact values
def test_hand_computed_values() -> None:
    # Two actions, four rounds, logging uniform (p = 0.5), evaluation policy always action 1.
    reward = np.array([1.0, 0.0, 0.5, 0.25])
    action = np.array([1, 0, 1, 0])
    pscore = np.full(4, 0.5)
    action_dist = one_hot(np.array([1, 1, 1, 1]), 2)
    q = np.array([[0.1, 0.6], [0.1, 0.6], [0.1, 0.6], [0.1, 0.6]])
    kw = dict(reward=reward, action=action, pscore=pscore, action_dist=action_dist, estimated_rewards=q)
    assert DirectMethod().estimate_policy_value(**kw) == pytest.approx(0.6)
    assert InverseProbabilityScoring().estimate_policy_value(**kw) == pytest.approx((2 * 1.0 + 2 * 0.5) / 4)
    assert SelfNormalizedIPS().estimate_policy_value(**kw) == pytest.approx(0.75)
    # DR: 0.6 + mean([2*(1-0.6), 0, 2*(0.5-0.6), 0]) = 0.6 + 0.15
    assert DoublyRobust().estimate_policy_value(**kw) == pytest.approx(0.75)


def test_dr_with_zero_model_is_ips_and_snips_is_shift_invariant() -> None:
    bandit = SyntheticBandit.make(seed=5)
    log = bandit.log(500, seed=11)
    inputs = _inputs(bandit, bandit.pi_sto, log, q=np.zeros_like(bandit.q))
    assert DoublyRobust().estimate_policy_value(**inputs) == pytest.approx(
        InverseProbabilityScoring().estimate_policy_value(**inputs)
    )
    shifted = dict(inputs, reward=inputs["reward"] + 3.0)
    assert SelfNormalizedIPS().estimate_policy_value(**shifted) == pytest.approx(
        SelfNormalizedIPS().estimate_policy_value(**inputs) + 3.0
    )


def test_interval_is_seeded_and_degenerate_for_one_round() -> None:
    values = np.random.default_rng(0).random(50)
    a = bootstrap_interval(values, random_state=4)
    b = bootstrap_interval(values, random_state=4)
    c = bootstrap_interval(values, random_state=5)
    assert a == b and a != c
    assert a.estimate == pytest.approx(values.mean()) and a.low < a.estimate < a.high
    one = bootstrap_interval(np.array([0.4]))
    assert (one.estimate, one.low, one.high, one.n_bootstrap, one.informative) == (0.4, 0.4, 0.4, 0, False)
    assert one.as_dict()["low"] is None and a.as_dict()["low"] == a.low
    ratio = bootstrap_interval(np.array([1.0, 2.0, 3.0]), weights=np.array([1.0, 1.0, 2.0]), n_bootstrap=200)
    assert ratio.estimate == pytest.approx(1.5)


def test_snips_undefined_without_support() -> None:
    kw = dict(
        reward=np.array([1.0, 0.0]),
        action=np.array([0, 0]),
        pscore=np.array([0.5, 0.5]),
        action_dist=one_hot(np.array([1, 1]), 2),
    )
    with pytest.raises(DataError, match="undefined"):
        SelfNormalizedIPS().estimate_policy_value(**kw)
    with pytest.raises(DataError, match="undefined"):
        SelfNormalizedIPS().estimate_interval(**kw)
    assert InverseProbabilityScoring().estimate_policy_value(**kw) == 0.0


def test_helpers() -> None:
    p = uniform_propensities(np.array([1, 1, 1, 16, 16]), np.array([0, 10, 10, 0, 13]))
    np.testing.assert_allclose(p, [0.5, 0.5, 0.5, 0.5, 0.5])
    p = uniform_propensities(np.array([1, 1, 1, 4]), np.array([0, 10, 3, 0]))
    np.testing.assert_allclose(p, [1 / 3, 1 / 3, 1 / 3, 1.0])
    q = mean_reward_model(
        np.array([1, 1, 1, 4]), np.array([0, 10, 10, 0]), np.array([0.0, 0.4, 0.6, 0.2]), np.array([1, 4, 8]), 19
    )
    assert q.shape == (3, 19)
    assert q[0, 10] == pytest.approx(0.5) and q[0, 0] == 0.0
    assert q[0, 5] == pytest.approx(1 / 3)  # unseen action at bs 1: the mean of its rows
    assert q[1, 0] == pytest.approx(0.2) and q[1, 7] == pytest.approx(0.2)
    assert np.allclose(q[2], 0.3)  # unseen batch size: the overall mean
    assert one_hot(np.array([2, 0]), 3).tolist() == [[0, 0, 1], [1, 0, 0]]


# ----------------------------------------------------------------------------- input checks
_GOOD = dict(
    reward=np.array([1.0, 0.0, 0.5]),
    action=np.array([0, 1, 2]),
    pscore=np.array([0.5, 0.25, 0.25]),
    action_dist=one_hot(np.array([1, 1, 2]), 3),
    estimated_rewards=np.full((3, 3), 0.5),
)


@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"reward": np.array([1.0, 0.0])}, "reward", "different numbers of rounds"),
        ({"action_dist": one_hot(np.array([1, 1]), 3)}, "action_dist", "different numbers of rounds"),
        ({"reward": np.array([1.0, np.nan, 0.5])}, "reward", "NaN"),
        ({"reward": np.array([[1.0, 0.0, 0.5]])}, "reward", "1-d"),
        ({"action": np.array([0, 1, 3])}, "action", r"\[0, 3\)"),
        ({"action": np.array([0, -1, 2])}, "action", r"\[0, 3\)"),
        ({"action": np.array([0.0, 1.0, 2.0])}, "action", "integers"),
        ({"pscore": np.array([0.5, 0.0, 0.25])}, "pscore", r"\(0, 1\]"),
        ({"pscore": np.array([0.5, 1.5, 0.25])}, "pscore", r"\(0, 1\]"),
        ({"pscore": np.array([0.5, np.inf, 0.25])}, "pscore", "NaN or Infinity"),
        ({"action_dist": np.full((3, 3), 0.5)}, "action_dist", "sum to 1"),
        ({"action_dist": np.array([[1.5, -0.5, 0], [0, 1, 0], [0, 0, 1]])}, "action_dist", ">= 0"),
        ({"action_dist": np.ones((3, 1))}, "estimated_rewards", "actions"),
        ({"estimated_rewards": np.full((3, 4), 0.5)}, "estimated_rewards", "actions"),
        ({"estimated_rewards": np.full((2, 3), 0.5)}, "estimated_rewards", "different numbers of rounds"),
        ({"estimated_rewards": np.array([["a"] * 3] * 3)}, "estimated_rewards", "real numbers"),
    ],
)
def test_invalid_inputs_raise_data_error(change: dict, field: str, message: str) -> None:
    kw = dict(_GOOD, **change)
    with pytest.raises(DataError, match=message) as info:
        DoublyRobust().estimate_policy_value(**kw)
    assert info.value.field == field


def test_empty_and_missing_inputs() -> None:
    with pytest.raises(DataError, match="no logged rounds"):
        check_logged_bandit(reward=np.array([]), action=np.array([], dtype=int))
    with pytest.raises(DataError, match="needs 'estimated_rewards'") as info:
        DirectMethod().estimate_policy_value(action_dist=_GOOD["action_dist"])
    assert info.value.field == "estimated_rewards"
    with pytest.raises(DataError, match="needs 'pscore'"):
        InverseProbabilityScoring().estimate_policy_value(
            action_dist=_GOOD["action_dist"], reward=_GOOD["reward"], action=_GOOD["action"]
        )
    # Unused inputs are not read: DM ignores a bad pscore.
    assert DirectMethod().estimate_policy_value(**dict(_GOOD, pscore=np.array([9.0, 9.0, 9.0]))) == 0.5


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.0}, "alpha"),
        ({"n_bootstrap": 0}, "n_bootstrap"),
        ({"n_bootstrap": 2.5}, "n_bootstrap"),
    ],
)
def test_invalid_bootstrap_config(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DoublyRobust().estimate_interval(**_GOOD, **kwargs)
    with pytest.raises(ConfigError, match=message):
        bootstrap_interval(np.array([0.1, 0.2]), **kwargs)


def test_estimator_names_and_frozen() -> None:
    assert list(ESTIMATORS) == ["dm", "ips", "snips", "dr"]
    with pytest.raises(AttributeError):
        DirectMethod().estimator_name = "x"  # type: ignore[misc]
