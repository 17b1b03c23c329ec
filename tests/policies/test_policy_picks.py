"""No collapse: on the bundled published measurements each of the eight picks the best
measured config at every batch size (the published study: 3 of 8), and the data-relative
CQL/BCQ defaults avoid the baseline where the published absolute ones pick it."""

from __future__ import annotations

import numpy as np
import pytest

from specband.contract.actions import ACTIONS, BASELINE_INDEX, NUM_ACTIONS, REFERENCE_INDEX, action_index
from specband.policies import ALGORITHMS, create_policy
from specband.policies.base import Policy
from specband.sweeps.dataset import TrainingData, state_vector

#: Best measured config per batch size on the bundled data (docs/FACTS.md §6): (3,4,8) = 10, (3,2,4) = 7.
BEST_MEASURED = {1: 10, 4: 10, 8: 10, 16: 7}


@pytest.mark.parametrize("name", ALGORITHMS)
def test_each_algorithm_picks_the_best_measured_config(
    name: str, fitted: dict[str, Policy], bundled_data, state_at
) -> None:
    picks = {bs: ACTIONS[fitted[name].act(state_at(bs), mask)] for bs, mask in bundled_data.allowed.items()}
    assert picks == {1: (3, 4, 8), 4: (3, 4, 8), 8: (3, 4, 8), 16: (3, 2, 4)}
    assert {bs: action_index(a) for bs, a in picks.items()} == BEST_MEASURED


@pytest.mark.parametrize("name", ["mlp_bandit", "cql", "bcq", "gbt"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_seeded_algorithms_pick_the_best_for_other_seeds_too(name: str, seed: int, bundled_data, state_at) -> None:
    policy = create_policy(name, seed=seed).fit(bundled_data)
    picks = {bs: policy.act(state_at(bs), mask) for bs, mask in bundled_data.allowed.items()}
    assert picks == BEST_MEASURED


def test_published_ridge_lambda_misses_bs4(bundled_data, state_at) -> None:
    """Why linucb's default lambda is 0.01: with the published lambda 1 it picks (5,4,16) at
    batch size 4, where (3,4,8) measured 0.4975 vs 0.4290."""
    published = create_policy("linucb", ridge_lambda=1.0).fit(bundled_data)
    assert ACTIONS[published.act(state_at(4), bundled_data.allowed[4])] == (5, 4, 16)
    assert create_policy("linucb").fit(bundled_data).act(state_at(4), bundled_data.allowed[4]) == REFERENCE_INDEX


def _skewed_log() -> TrainingData:
    """One batch size; the baseline logged 30 times (reward 0), (3,4,8) 5 times (reward
    0.05), (3,2,4) 5 times (reward 0.02): small rewards, and the best config rarer than
    the baseline."""
    rows = [(BASELINE_INDEX, 0.0)] * 30 + [(REFERENCE_INDEX, 0.05)] * 5 + [(action_index((3, 2, 4)), 0.02)] * 5
    n = len(rows)
    state = state_vector(4)
    counts = {a: sum(1 for b, _ in rows if b == a) for a, _ in rows}
    allowed = np.zeros(NUM_ACTIONS, dtype=bool)
    allowed[list(counts)] = True
    return TrainingData(
        states=np.tile(state, (n, 1)).astype(np.float32),
        actions=np.array([a for a, _ in rows], dtype=np.int64),
        rewards=np.array([r for _, r in rows]),
        batch_sizes=np.full(n, 4, dtype=np.int64),
        propensities=np.full(n, 1.0 / len(counts)),
        allowed={4: allowed},
    )


def test_cql_relative_alpha_does_not_collapse_where_the_published_alpha_does() -> None:
    data = _skewed_log()
    state, allowed = state_vector(4), data.allowed[4]
    published = create_policy("cql", alpha=1.0).fit(data)
    assert published.act(state, allowed) == BASELINE_INDEX
    default = create_policy("cql").fit(data)
    assert default.act(state, allowed) == REFERENCE_INDEX
    assert default.fit_info["alpha"] == pytest.approx(0.1 * np.std(data.rewards))


def test_bcq_relative_threshold_does_not_collapse_where_the_published_threshold_does() -> None:
    data = _skewed_log()
    state, allowed = state_vector(4), data.allowed[4]
    published = create_policy("bcq", threshold=0.3).fit(data)
    assert published.act(state, allowed) == BASELINE_INDEX
    assert not published.support(state)[REFERENCE_INDEX]
    default = create_policy("bcq").fit(data)
    assert default.fit_info["min_logging_ratio"] == pytest.approx(5 / 30)
    assert default.threshold == pytest.approx(0.3 * 5 / 30)
    assert default.support(state)[REFERENCE_INDEX]
    assert default.act(state, allowed) == REFERENCE_INDEX


def test_bcq_on_a_balanced_log_uses_the_published_threshold(bundled_data) -> None:
    balanced = TrainingData(
        states=bundled_data.states[:4],
        actions=bundled_data.actions[:4],
        rewards=bundled_data.rewards[:4],
        batch_sizes=bundled_data.batch_sizes[:4],
        propensities=bundled_data.propensities[:4],
        allowed={1: bundled_data.allowed[1]},
    )
    assert create_policy("bcq", epochs=2).fit(balanced).threshold == pytest.approx(0.3)


def test_bcq_unsupported_actions_rank_below_supported_ones(fitted: dict[str, Policy], state_at) -> None:
    bcq = fitted["bcq"]
    support = bcq.support(state_at(16))
    scores, q = bcq.scores(state_at(16)), bcq.q_values(state_at(16))
    assert support.sum() >= 5 and not support.all()  # the 5 logged configs, not the 14 others
    assert np.array_equal(scores[support], q[support])
    assert scores[~support].max() < scores[support].min()
    # with only unsupported actions allowed, the best of them by Q
    mask = ~support
    assert bcq.act(state_at(16), mask) == int(np.flatnonzero(mask)[np.argmax(q[mask])])


def test_thompson_sampling_decides_by_the_mean_unless_asked(bundled_data, state_at) -> None:
    mean_policy = create_policy("thompson_sampling").fit(bundled_data)
    np.testing.assert_array_equal(mean_policy.scores(state_at(1)), mean_policy.scores(state_at(1)))
    np.testing.assert_allclose(mean_policy.scores(state_at(1)), mean_policy.mean @ state_at(1).astype(np.float64))
    draws = [create_policy("thompson_sampling", seed=5, sample=True).fit(bundled_data) for _ in range(2)]
    seq = [[d.scores(state_at(1)) for _ in range(3)] for d in draws]
    np.testing.assert_array_equal(np.array(seq[0]), np.array(seq[1]))  # seeded: same draws
    assert not np.array_equal(seq[0][0], seq[0][1])  # successive draws differ
    assert not np.array_equal(seq[0][0], mean_policy.scores(state_at(1)))
    assert draws[0].noise_std == pytest.approx(mean_policy.fit_info["noise_std"])


def test_linucb_bonus_favours_rarely_logged_actions(bundled_data, state_at) -> None:
    greedy = create_policy("linucb").fit(bundled_data)
    optimistic = create_policy("linucb", ucb_alpha=1.0).fit(bundled_data)
    bonus = optimistic.scores(state_at(16)) - greedy.scores(state_at(16))
    assert (bonus >= 0).all()
    # an action never logged has the widest interval; the most logged ones the narrowest
    assert bonus[action_index((5, 4, 4))] > bonus[REFERENCE_INDEX]


def test_doubly_robust_matches_cell_means_on_balanced_batch_sizes(
    fitted: dict[str, Policy], bundled_data, state_at
) -> None:
    """With one row per config and uniform propensities the DR value is the observed reward."""
    dr = fitted["doubly_robust"]
    for bs in (1, 4, 8):
        rows = bundled_data.batch_sizes == bs
        scores = dr.scores(state_at(bs))
        for a, r in zip(bundled_data.actions[rows], bundled_data.rewards[rows], strict=True):
            assert scores[a] == pytest.approx(r, abs=1e-9)


def test_lookup_table_keeps_every_measured_mean(fitted: dict[str, Policy], bundled_data, state_at) -> None:
    lookup = fitted["lookup_table"]
    scores = lookup.scores(state_at(16))
    assert np.isnan(scores[~bundled_data.allowed[16]]).all()
    assert scores[action_index((3, 2, 4))] == pytest.approx(np.mean([0.3855, 0.3869, 0.3863, 0.3852, 0.4009]), abs=2e-4)
    # an unmeasured batch size uses the nearest measured one (ties: the larger)
    np.testing.assert_array_equal(lookup.scores(state_vector(12)), scores)
    np.testing.assert_array_equal(lookup.scores(state_vector(6)), lookup.scores(state_at(8)))
