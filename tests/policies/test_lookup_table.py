"""lookup_table: model.json format, the NumPy-free pick path, foreign files, bad files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specband.contract.actions import ACTIONS, NUM_ACTIONS
from specband.core.errors import ArtifactError
from specband.policies.base import Policy
from specband.policies.lookup_core import lookup_pick, read_lookup_folder
from specband.policies.lookup_table import LookupTable


def test_model_json_is_the_model_card_format(fitted: dict[str, Policy], tmp_path: Path) -> None:
    fitted["lookup_table"].save(tmp_path)
    table = json.loads((tmp_path / "lookup_table" / "model.json").read_text())
    assert list(table) == ["1", "4", "8", "16"]
    assert {k: v["config"] for k, v in table.items()} == {
        "1": [3, 4, 8],
        "4": [3, 4, 8],
        "8": [3, 4, 8],
        "16": [3, 2, 4],
    }
    assert table["1"]["mean_reward"] == pytest.approx(0.5323, abs=2e-4)
    assert set(table["16"]) == {"config", "mean_reward"}


def test_numpy_free_pick_equals_the_policy(fitted: dict[str, Policy], tmp_path: Path) -> None:
    from specband.sweeps.dataset import state_vector

    policy = fitted["lookup_table"]
    policy.save(tmp_path)
    means = read_lookup_folder(tmp_path).means
    rng = np.random.default_rng(0)
    for bs in range(1, 40):
        for _ in range(3):
            allowed = rng.random(NUM_ACTIONS) < 0.4
            allowed[rng.integers(NUM_ACTIONS)] = True
            # the policy is asked at the nearest measured batch size, as recommend does
            nearest = min(means, key=lambda b: (abs(b - bs), -b))
            expected = policy.act(state_vector(nearest), allowed)
            assert lookup_pick(means, bs, np.flatnonzero(allowed)) == expected
        assert lookup_pick(means, bs) == policy.act(state_vector(min(means, key=lambda b: (abs(b - bs), -b))))


def test_foreign_model_json_without_sidecar(tmp_path: Path) -> None:
    """A model.json written by another tool (e.g. the published one) loads and picks its config."""
    folder = tmp_path / "lookup_table"
    folder.mkdir()
    (folder / "model.json").write_text(
        json.dumps({"1": {"config": [3, 4, 8], "mean_reward": 0.53}, "16": {"config": [3, 1, 2], "mean_reward": 0.3}})
    )
    policy = LookupTable.load(tmp_path)
    assert policy.table() == {1: ((3, 4, 8), 0.53), 16: ((3, 1, 4), 0.3)}  # topk=1 canonicalised
    from specband.sweeps.dataset import state_vector

    assert ACTIONS[policy.act(state_vector(16))] == (3, 1, 4)
    assert ACTIONS[policy.act(state_vector(2))] == (3, 4, 8)
    scores = policy.scores(state_vector(1))
    assert np.isfinite(scores).sum() == 1


@pytest.mark.parametrize(
    "content, message",
    [
        ("[]", "non-empty JSON object"),
        ("{}", "non-empty JSON object"),
        ('{"x": {"config": [3,4,8], "mean_reward": 0.5}}', "key 'x' must be a batch size"),
        ('{"0": {"config": [3,4,8], "mean_reward": 0.5}}', "key '0' must be a batch size"),
        ('{"4": {"config": [3,4,8]}}', "'config' and 'mean_reward'"),
        ('{"4": {"config": [3,4], "mean_reward": 0.5}}', r"\[steps, topk, num_draft_tokens\]"),
        ('{"4": {"config": [3,4,16], "mean_reward": 0.5}}', "rule 1"),
        ('{"4": {"config": [3,4,8], "mean_reward": "high"}}', "finite number"),
        ('{"4": {"config": [3,4,8], "mean_reward": NaN}}', "not valid JSON"),
        ('{"4": ', "model.json:1: not valid JSON"),
    ],
)
def test_bad_model_json(tmp_path: Path, content: str, message: str) -> None:
    folder = tmp_path / "lookup_table"
    folder.mkdir()
    (folder / "model.json").write_text(content)
    with pytest.raises(ArtifactError, match=message):
        LookupTable.load(tmp_path)


def test_bad_sidecar_means(fitted: dict[str, Policy], tmp_path: Path) -> None:
    fitted["lookup_table"].save(tmp_path)
    sidecar = tmp_path / "lookup_table" / "specband.json"
    info = json.loads(sidecar.read_text())
    info["action_mean_rewards"]["4"]["25"] = 0.1
    sidecar.write_text(json.dumps(info))
    with pytest.raises(ArtifactError, match="'25'"):
        LookupTable.load(tmp_path)
