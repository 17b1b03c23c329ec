"""``lookup_table``: the empirical best configuration per batch size.

For every measured batch size the policy keeps the observed mean reward of each action
and picks the best one among the actions allowed there (data, no failure). A state is
mapped to the nearest measured batch size; the rest of the state is ignored.

Model card file ``lookup_table/model.json``::

    {"<bs>": {"config": [steps, topk, num_draft_tokens], "mean_reward": float}, ...}

(loaded by the recipe ``json.load(open(...))``). The per-action means go to the sidecar
``lookup_table/specband.json``; a ``model.json`` without it (e.g. the published one) still
loads and then knows one action per batch size.

Source: the published study's ``lookup_table`` (docs/FACTS.md §5, §6). Imports neither torch nor
scikit-learn, so ``specband recommend`` with it stays cold-fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specband.contract.actions import CONTRACT_SET, ActionSet
from specband.policies.base import (
    Policy,
    PolicyConfig,
    as_states,
    batch_size_of,
    masked_argmax,
    mean_reward_by_cell,
    nearest_batch_size,
    write_json_atomic,
)
from specband.policies.lookup_core import read_lookup_folder
from specband.sweeps.dataset import TrainingData

__all__ = ["POLICY", "LookupTable", "LookupTableConfig"]


@dataclass(frozen=True)
class LookupTableConfig(PolicyConfig):
    """The lookup table has no settings besides the seed (it is deterministic)."""


class LookupTable(Policy):
    """Per-batch-size empirical best action (see the module docstring).

    Attributes:
        means: batch size -> (19,) observed mean reward (NaN: no data for that action).
        picks: batch size -> (action index, its mean reward), as in ``model.json``.
        action_set: the set it was fitted on or loaded against (the data's, or the
            folder's; :attr:`Policy.action_set <specband.policies.base.Policy>`).
    """

    name = "lookup_table"
    config_class = LookupTableConfig

    def __init__(self, config: LookupTableConfig | None = None) -> None:
        super().__init__(config)
        self.means: dict[int, np.ndarray] = {}
        self.picks: dict[int, tuple[int, float]] = {}

    def fit(self, data: TrainingData) -> LookupTable:
        """Mean reward per (batch size, action); the pick per batch size is the best mean
        among ``data.allowed[bs]`` (ties: lowest index).

        Raises:
            DataError: no rows.
        """
        self._check_data(data)
        self.action_set = data.action_set
        self.means = {}
        self.picks = {}
        for bs, (means, _counts) in mean_reward_by_cell(data).items():
            allowed = data.allowed.get(bs, np.isfinite(means))
            allowed = np.asarray(allowed, dtype=bool) & np.isfinite(means)
            if not allowed.any():
                continue
            best = masked_argmax(means, allowed, self.action_set)
            self.means[bs] = means
            self.picks[bs] = (best, float(means[best]))
        self.fit_info = {"batch_sizes": sorted(self.picks)}
        self._fitted = True
        return self

    def scores(self, states: np.ndarray) -> np.ndarray:
        """The observed mean reward of each action at the state's nearest measured batch
        size; NaN where there is no data (shape (n, 19), or (19,) for one state)."""
        self._require_fitted()
        arr, single = as_states(states)
        out = np.full((arr.shape[0], len(self.action_set)), np.nan)
        for i, bs in enumerate(batch_size_of(arr)):
            out[i] = self.means[nearest_batch_size(int(bs), self.means)]
        return out[0] if single else out

    def save(self, directory: str | Path) -> Path:
        """Write ``lookup_table/model.json`` and the sidecar with the per-action means.

        Raises:
            ArtifactError: not fitted, or the files cannot be written.
        """
        self._require_fitted()
        table = {
            str(bs): {"config": list(self.action_set[idx]), "mean_reward": mean}
            for bs, (idx, mean) in sorted(self.picks.items())
        }
        path = write_json_atomic(self.artifact_path(directory), table)
        means = {
            str(bs): {str(a): float(m[a]) for a in range(len(self.action_set)) if math.isfinite(m[a])}
            for bs, m in sorted(self.means.items())
        }
        self._write_sidecar(directory, {"action_mean_rewards": means})
        return path

    @classmethod
    def load(cls, directory: str | Path, action_set: ActionSet = CONTRACT_SET) -> LookupTable:
        """Read ``lookup_table/model.json`` (and the sidecar's per-action means if present)
        against ``action_set`` (the folder's; the 19 contract actions by default).

        Raises:
            ArtifactError: missing file, not a JSON object keyed by positive batch sizes, a
                ``config`` that is not in ``action_set``, or a ``mean_reward`` that is not a
                finite number (see :func:`~specband.policies.lookup_core.parse_lookup_table`).
        """
        files = read_lookup_folder(directory, action_set)
        config = cls._config_from_sidecar(files.sidecar)
        assert isinstance(config, LookupTableConfig)
        policy = cls(config)
        policy.action_set = action_set
        policy.picks = dict(files.picks)
        policy.means = {}
        for bs, row in files.means.items():
            means = np.full(len(action_set), np.nan)
            for a, m in row.items():
                means[a] = m
            policy.means[bs] = means
        policy.fit_info = dict((files.sidecar or {}).get("fit_info") or {}, batch_sizes=sorted(files.picks))
        policy._fitted = True
        return policy

    def table(self) -> dict[int, tuple[tuple[int, int, int], float]]:
        """Batch size -> (picked triple, its mean reward), as in ``model.json``."""
        self._require_fitted()
        return {bs: (self.action_set[idx], mean) for bs, (idx, mean) in self.picks.items()}


POLICY = LookupTable
