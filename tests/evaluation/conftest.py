"""Fixtures of the evaluation tests: a small transparent policy and a sweep with repeats."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specband.contract.actions import NUM_ACTIONS
from specband.policies.base import Policy
from specband.sweeps.dataset import TrainingData


class MeanTablePolicy(Policy):
    """Test policy: the mean training reward of each (batch size, action); states are read
    only through their batch size (``state[0] * 8``). ``bias`` adds a fixed preference for
    one action, to make a policy that picks badly on purpose."""

    name = "mean_table"
    artifact_file = "model.json"

    def __init__(self, seed: int = 0, bias_action: int | None = None) -> None:
        self.seed = seed
        self.bias_action = bias_action
        self.table: dict[int, np.ndarray] = {}
        self.fits = 0

    @classmethod
    def from_config(cls, seed: int = 0, **overrides: Any) -> MeanTablePolicy:
        return cls(seed, **overrides)

    def fit(self, data: TrainingData) -> MeanTablePolicy:
        self.fits += 1
        for bs in np.unique(data.batch_sizes):
            row = np.full(NUM_ACTIONS, -1.0)
            at = data.batch_sizes == bs
            for a in np.unique(data.actions[at]):
                row[a] = data.rewards[at & (data.actions == a)].mean()
            if self.bias_action is not None:
                row[self.bias_action] += 10.0
            self.table[int(bs)] = row
        return self

    def scores(self, states: np.ndarray) -> np.ndarray:
        states = np.atleast_2d(np.asarray(states, dtype=np.float64))
        out = []
        for s in states:
            bs = round(float(s[0]) * 8)
            nearest = min(self.table, key=lambda b: abs(b - bs))
            out.append(self.table[nearest])
        return np.stack(out)

    def save(self, directory: str | Path) -> Path:
        path = self.artifact_path(directory)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({str(k): v.tolist() for k, v in self.table.items()}))
        return path

    @classmethod
    def load(cls, directory: str | Path) -> MeanTablePolicy:
        policy = cls()
        data = json.loads((Path(directory) / cls.name / cls.artifact_file).read_text())
        policy.table = {int(k): np.array(v) for k, v in data.items()}
        return policy


@pytest.fixture
def table_factory() -> Callable[[str, int], Policy]:
    """``(name, seed) -> policy``: ``good`` is the mean table, ``bad`` always prefers (1,1,2)."""

    def make(name: str, seed: int) -> Policy:
        return MeanTablePolicy(seed, bias_action=1 if name == "bcq" else None)

    return make


def repeat_records(published: list[dict[str, Any]], repeats: int = 3, seed: int = 0) -> list[dict[str, Any]]:
    """The bundled published rows re-labelled as ``repeats`` repeats (trial dropped), with
    small seeded perturbations of speed and power: a sweep with repeats for the tests."""
    rng = np.random.default_rng(seed)
    out = []
    for rep in range(repeats):
        for rec in published:
            if rec["trial"] not in ("validate",):
                continue
            r = {k: v for k, v in rec.items() if k not in ("trial", "tag", "source", "reward_published")}
            r["repeat"] = rep
            r["speed_tok_s"] = round(r["speed_tok_s"] * float(rng.uniform(0.98, 1.02)), 3)
            if r.get("avg_power_watts") is not None:
                r["avg_power_watts"] = round(r["avg_power_watts"] * float(rng.uniform(0.995, 1.005)), 3)
                r["energy_utilization"] = None
                r["energy_utilization_origin"] = None
            r["gpu_temp_c_before"] = round(float(rng.uniform(45, 60)), 1)
            r["gpu_mem_used_mb_before"] = round(float(rng.uniform(300, 500)), 1)
            r["gpu_util_pct_before"] = 0.0
            r["gpu_mem_used_mb"] = round(float(rng.uniform(5000, 7000)), 1)
            r["gpu_util_pct"] = round(float(rng.uniform(90, 100)), 1)
            out.append(r)
    return out


@pytest.fixture
def repeat_sweep_path(published_records: list[dict[str, Any]], write_jsonl: Callable[..., Path]) -> Path:
    """A 3-repeat sweep file built from the bundled rows (see :func:`repeat_records`)."""
    return write_jsonl(repeat_records(published_records), "repeats.jsonl")
