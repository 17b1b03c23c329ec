"""Every algorithm through fit, act, save, load, act-again-identically; same seed, same
files and picks; picks only among allowed actions; config validation."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from specband.contract.actions import NUM_ACTIONS
from specband.core.errors import ArtifactError, ConfigError
from specband.policies import ALGORITHMS, create_policy, policy_class
from specband.policies.base import Policy, masked_argmax
from specband.policies.nets import clear_training_cache
from specband.sweeps.dataset import TrainingData

MODEL_CARD_FILES = {
    "mlp_bandit": "policy.pth",
    "lookup_table": "model.json",
    "linucb": "model.npz",
    "thompson_sampling": "model.npz",
    "gbt": "model.joblib",
    "doubly_robust": "model.joblib",
    "cql": "policy.pth",
    "bcq": "policy.pth",
}


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("name", ALGORITHMS)
def test_fit_act_save_load_act_again(
    name: str, fitted: dict[str, Policy], bundled_data: TrainingData, state_at, tmp_path: Path
) -> None:
    policy = fitted[name]
    assert policy.name == name and policy.artifact_file == MODEL_CARD_FILES[name]
    states = np.stack([state_at(bs) for bs in bundled_data.allowed])
    scores = policy.scores(states)
    assert scores.shape == (len(bundled_data.allowed), NUM_ACTIONS) and scores.dtype == np.float64
    assert policy.scores(states[0]).shape == (NUM_ACTIONS,)
    picks = {bs: policy.act(state_at(bs), mask) for bs, mask in bundled_data.allowed.items()}
    for bs, pick in picks.items():
        assert bundled_data.allowed[bs][pick], (name, bs, pick)
        # act is the masked argmax of scores
        assert pick == masked_argmax(policy.scores(state_at(bs)), bundled_data.allowed[bs])

    path = policy.save(tmp_path)
    assert path == tmp_path / name / MODEL_CARD_FILES[name] and path.is_file()
    loaded = policy_class(name).load(tmp_path)
    assert type(loaded) is type(policy) and loaded.fitted
    again = {bs: loaded.act(state_at(bs), mask) for bs, mask in bundled_data.allowed.items()}
    assert again == picks
    np.testing.assert_array_equal(np.nan_to_num(loaded.scores(states)), np.nan_to_num(scores))


@pytest.mark.parametrize("name", ALGORITHMS)
def test_same_seed_same_files_and_picks(name: str, bundled_data: TrainingData, state_at, tmp_path: Path) -> None:
    digests, picks = [], []
    for run in range(2):
        clear_training_cache()  # the second run trains from scratch, not from the cache
        policy = create_policy(name, seed=7).fit(bundled_data)
        policy.save(tmp_path / str(run))
        digests.append(_digest(tmp_path / str(run)))
        picks.append([policy.act(state_at(bs), m) for bs, m in bundled_data.allowed.items()])
    # model card file + sidecar (+ the pickle-free copy beside a joblib or torch file)
    pickle_free = name in ("gbt", "doubly_robust", "mlp_bandit", "cql", "bcq")
    assert digests[0] == digests[1] and len(digests[0]) == (3 if pickle_free else 2)
    assert picks[0] == picks[1]


@pytest.mark.parametrize("name", ["mlp_bandit", "gbt", "cql", "bcq"])
def test_different_seed_different_model(name: str, bundled_data: TrainingData, state_at) -> None:
    a = create_policy(name, seed=1).fit(bundled_data).scores(state_at(16))
    b = create_policy(name, seed=2).fit(bundled_data).scores(state_at(16))
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_picks_only_allowed_actions(name: str, fitted: dict[str, Policy], state_at) -> None:
    policy = fitted[name]
    for allowed_idx in ([3], [0, 5], [1, 2, 11, 12]):
        mask = np.zeros(NUM_ACTIONS, dtype=bool)
        mask[allowed_idx] = True
        for bs in (1, 4, 8, 16):
            assert policy.act(state_at(bs), mask) in allowed_idx
    with pytest.raises(ConfigError, match="no action is allowed"):
        policy.act(state_at(1), np.zeros(NUM_ACTIONS, dtype=bool))


@pytest.mark.parametrize("name", ALGORITHMS)
def test_unfitted_policy_cannot_save_or_score(name: str, tmp_path: Path, state_at) -> None:
    policy = create_policy(name)
    assert not policy.fitted
    with pytest.raises(ArtifactError, match="not fitted"):
        policy.save(tmp_path)
    with pytest.raises(ArtifactError, match="not fitted"):
        policy.scores(state_at(1))
    assert not (tmp_path / name).exists()


@pytest.mark.parametrize("name", ALGORITHMS)
def test_load_missing_file(name: str, tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="no such file"):
        policy_class(name).load(tmp_path)


def test_unknown_algorithm_and_setting() -> None:
    with pytest.raises(ConfigError, match="unknown algorithm 'dqn'"):
        create_policy("dqn")
    with pytest.raises(ConfigError, match="unknown setting"):
        create_policy("mlp_bandit", epochz=3)


@pytest.mark.parametrize(
    "name, overrides, message",
    [
        ("mlp_bandit", {"epochs": 0}, "epochs"),
        ("mlp_bandit", {"lr": -1.0}, "lr"),
        ("mlp_bandit", {"batch_size": True}, "batch_size"),
        ("cql", {"alpha_relative": float("nan")}, "alpha_relative"),
        ("cql", {"alpha": -0.5}, "alpha"),
        ("bcq", {"threshold": 1.5}, "threshold"),
        ("linucb", {"ridge_lambda": 0.0}, "ridge_lambda"),
        ("thompson_sampling", {"sample": "yes"}, "sample"),
        ("gbt", {"max_depth": 0}, "max_depth"),
        ("lookup_table", {"seed": -1}, "seed"),
    ],
)
def test_bad_settings(name: str, overrides: dict, message: str) -> None:
    seed = overrides.pop("seed", 0)
    with pytest.raises(ConfigError, match=message):
        create_policy(name, seed=seed, **overrides)


def test_bad_state_shape(fitted: dict[str, Policy]) -> None:
    for policy in fitted.values():
        with pytest.raises(ConfigError, match="4 features"):
            policy.scores(np.zeros(3))
        with pytest.raises(ConfigError, match="NaN"):
            policy.scores(np.array([1.0, np.nan, 0.0, 0.0]))


def test_no_rows_is_a_data_error(bundled_data: TrainingData) -> None:
    from specband.core.errors import DataError

    empty = TrainingData(
        states=np.zeros((0, 4), np.float32),
        actions=np.zeros(0, np.int64),
        rewards=np.zeros(0),
        batch_sizes=np.zeros(0, np.int64),
        propensities=np.zeros(0),
        allowed={},
    )
    for name in ALGORITHMS:
        with pytest.raises(DataError, match="no successful rows"):
            create_policy(name).fit(empty)


def test_masked_argmax_rules() -> None:
    scores = np.zeros(NUM_ACTIONS)
    scores[[3, 5]] = 1.0
    assert masked_argmax(scores, None) == 3  # tie -> lowest index
    mask = np.zeros(NUM_ACTIONS, dtype=bool)
    mask[[5, 7]] = True
    assert masked_argmax(scores, mask) == 5
    nan_scores = np.full(NUM_ACTIONS, np.nan)
    assert masked_argmax(nan_scores, mask) == 5  # no finite allowed score: lowest allowed
    with pytest.raises(ConfigError, match="19 action scores"):
        masked_argmax(np.zeros(5), None)
