"""``lookup_table``: the empirical best configuration per batch size.

For every measured batch size the policy keeps the observed mean reward of each action
and picks the best one among the actions allowed there (data, no failure). A state is
mapped to the nearest measured batch size; the rest of the state is ignored.

Model card file ``lookup_table/model.json``::

    {"<bs>": {"config": [steps, topk, num_draft_tokens], "mean_reward": float}, ...}

(loaded by the recipe ``json.load(open(...))``). The per-action means go to the sidecar
``lookup_table/specband.json``; a ``model.json`` without it (e.g. the published one) still
loads and then knows one action per batch size.

Source: the published study's ``lookup_table`` (FACTS §5, §6). Imports neither torch nor
scikit-learn, so ``specband recommend`` with it stays cold-fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specband.actions import ACTIONS, NUM_ACTIONS, action_index
from specband.dataset import TrainingData
from specband.errors import ArtifactError, InvalidActionError
from specband.policies.base import (
    Policy,
    PolicyConfig,
    as_states,
    batch_size_of,
    masked_argmax,
    mean_reward_by_cell,
    nearest_batch_size,
    read_json,
    write_json_atomic,
)

__all__ = ["LookupTable", "LookupTableConfig", "POLICY"]


@dataclass(frozen=True)
class LookupTableConfig(PolicyConfig):
    """The lookup table has no settings besides the seed (it is deterministic)."""


class LookupTable(Policy):
    """Per-batch-size empirical best action (see the module docstring).

    Attributes:
        means: batch size -> (19,) observed mean reward (NaN: no data for that action).
        picks: batch size -> (action index, its mean reward), as in ``model.json``.
    """

    name = "lookup_table"
    artifact_file = "model.json"
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
        self.means = {}
        self.picks = {}
        for bs, (means, _counts) in mean_reward_by_cell(data).items():
            allowed = data.allowed.get(bs, np.isfinite(means))
            allowed = np.asarray(allowed, dtype=bool) & np.isfinite(means)
            if not allowed.any():
                continue
            best = masked_argmax(means, allowed)
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
        out = np.full((arr.shape[0], NUM_ACTIONS), np.nan)
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
            str(bs): {"config": list(ACTIONS[idx]), "mean_reward": mean}
            for bs, (idx, mean) in sorted(self.picks.items())
        }
        path = write_json_atomic(self.artifact_path(directory), table)
        means = {
            str(bs): {str(a): float(m[a]) for a in range(NUM_ACTIONS) if math.isfinite(m[a])}
            for bs, m in sorted(self.means.items())
        }
        self._write_sidecar(directory, {"action_mean_rewards": means})
        return path

    @classmethod
    def load(cls, directory: str | Path) -> LookupTable:
        """Read ``lookup_table/model.json`` (and the sidecar's per-action means if present).

        Raises:
            ArtifactError: missing file, not a JSON object keyed by positive batch sizes, a
                ``config`` that is not one of the 19 contract actions, or a ``mean_reward``
                that is not a finite number.
        """
        path = Path(directory) / cls.name / cls.artifact_file
        table = read_json(path)
        if not isinstance(table, dict) or not table:
            raise ArtifactError(f"{path}: expected a non-empty JSON object {{\"<bs>\": {{\"config\": [...], \"mean_reward\": ...}}}}")
        picks: dict[int, tuple[int, float]] = {}
        for key, entry in table.items():
            bs = _parse_bs(key, path)
            if not isinstance(entry, dict) or "config" not in entry or "mean_reward" not in entry:
                raise ArtifactError(f"{path}: entry {key!r} must be an object with 'config' and 'mean_reward'")
            config = entry["config"]
            if (
                not isinstance(config, list)
                or len(config) != 3
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in config)
            ):
                raise ArtifactError(f"{path}: entry {key!r}: 'config' must be [steps, topk, num_draft_tokens], got {config!r}")
            try:
                idx = action_index(tuple(config))  # type: ignore[arg-type]
            except InvalidActionError as exc:
                raise ArtifactError(f"{path}: entry {key!r}: {exc}") from None
            mean = entry["mean_reward"]
            if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not math.isfinite(mean):
                raise ArtifactError(f"{path}: entry {key!r}: 'mean_reward' must be a finite number, got {mean!r}")
            picks[bs] = (idx, float(mean))
        sidecar = cls._read_sidecar(directory)
        policy = cls(cls._config_from_sidecar(sidecar))
        policy.picks = dict(sorted(picks.items()))
        policy.means = {}
        stored = (sidecar or {}).get("action_mean_rewards")
        for bs, (idx, mean) in policy.picks.items():
            means = np.full(NUM_ACTIONS, np.nan)
            if isinstance(stored, dict) and isinstance(stored.get(str(bs)), dict):
                for a, m in stored[str(bs)].items():
                    if not (a.isdigit() and 0 <= int(a) < NUM_ACTIONS) or isinstance(m, bool) or not isinstance(m, (int, float)):
                        raise ArtifactError(f"{path.parent / 'specband.json'}: bad mean reward entry {a!r}: {m!r} at batch size {bs}")
                    means[int(a)] = float(m)
            if not math.isfinite(means[idx]):
                means[idx] = mean
            policy.means[bs] = means
        policy.fit_info = dict((sidecar or {}).get("fit_info") or {}, batch_sizes=sorted(picks))
        policy._fitted = True
        return policy

    def table(self) -> dict[int, tuple[tuple[int, int, int], float]]:
        """Batch size -> (picked triple, its mean reward), as in ``model.json``."""
        self._require_fitted()
        return {bs: (tuple(ACTIONS[idx]), mean) for bs, (idx, mean) in self.picks.items()}  # type: ignore[misc]


def _parse_bs(key: Any, path: Path) -> int:
    text = str(key).strip()
    if not text.isdigit() or int(text) <= 0:
        raise ArtifactError(f"{path}: key {key!r} must be a batch size (a positive integer)")
    return int(text)


POLICY = LookupTable
