"""The common interface of the eight policies.

A policy is a contextual-bandit decision rule over the 19 contract actions:

* ``fit(data)`` learns from logged :class:`~specband.dataset.TrainingData`;
* ``scores(states)`` returns an estimated reward for every action, shape (n, 19);
* ``act(state, allowed)`` picks the best-scored allowed action (ties go to the lower index);
* ``save(directory)`` writes the model card's file ``<directory>/<name>/<artifact_file>``;
* ``load(directory)`` reads it back (also files written by the published study).

Each algorithm is one module with a frozen config dataclass (the FACTS §5 defaults) and a
thin class; :data:`REGISTRY` maps the model card names to the classes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from specband.actions import NUM_ACTIONS
from specband.dataset import TrainingData
from specband.errors import ConfigError

__all__ = ["Policy", "PolicyConfig", "masked_argmax"]


@dataclass(frozen=True)
class PolicyConfig:
    """Settings every policy has.

    Attributes:
        seed: random seed; the same seed gives the same artifacts and picks.
    """

    seed: int = 0


def masked_argmax(scores: np.ndarray, allowed: np.ndarray | None) -> int:
    """Index of the highest score among allowed actions; ties go to the lowest index.

    Args:
        scores: (19,) estimated rewards.
        allowed: (19,) bool mask, or ``None`` for all actions.

    Raises:
        ConfigError: wrong shapes, or no action is allowed.
    """
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if scores.shape != (NUM_ACTIONS,):
        raise ConfigError(f"expected {NUM_ACTIONS} action scores, got shape {scores.shape}")
    if allowed is None:
        allowed = np.ones(NUM_ACTIONS, dtype=bool)
    allowed = np.asarray(allowed, dtype=bool).reshape(-1)
    if allowed.shape != (NUM_ACTIONS,):
        raise ConfigError(f"expected a {NUM_ACTIONS}-action mask, got shape {allowed.shape}")
    if not allowed.any():
        raise ConfigError("no action is allowed at this batch size: there is no successful data to pick from")
    masked = np.where(allowed, np.nan_to_num(scores, nan=-np.inf), -np.inf)
    best = masked.max()
    return int(np.flatnonzero(masked == best)[0])


class Policy(ABC):
    """Base class of the eight policies (see the module docstring).

    Class attributes:
        name: the model card's folder name, e.g. ``"mlp_bandit"``.
        artifact_file: the file inside that folder, e.g. ``"policy.pth"``.
        needs_torch: whether fitting or loading imports torch.
    """

    name: ClassVar[str]
    artifact_file: ClassVar[str]
    needs_torch: ClassVar[bool] = False

    config: Any

    @classmethod
    @abstractmethod
    def from_config(cls, seed: int = 0, **overrides: Any) -> Policy:
        """A fresh, unfitted policy with the default config, ``seed`` and ``overrides``.

        Raises:
            ConfigError: an unknown or out-of-range config field.
        """

    @abstractmethod
    def fit(self, data: TrainingData) -> Policy:
        """Learn from logged data; returns ``self``.

        Raises:
            DataError: no rows to learn from.
        """

    @abstractmethod
    def scores(self, states: np.ndarray) -> np.ndarray:
        """Estimated reward of each action for each state.

        Args:
            states: (n, 4) or (4,) float states (see :func:`specband.dataset.state_vector`).

        Returns:
            (n, 19) float64 (or (19,) for a single state).
        """

    def act(self, state: np.ndarray, allowed: np.ndarray | None = None) -> int:
        """The index of the best-scored allowed action for one state (ties: lowest index).

        Args:
            state: (4,) state.
            allowed: (19,) bool mask of actions with data at this batch size.
        """
        return masked_argmax(np.asarray(self.scores(np.asarray(state)[None, :]))[0], allowed)

    def artifact_path(self, directory: str | Path) -> Path:
        """``<directory>/<name>/<artifact_file>``."""
        return Path(directory) / self.name / self.artifact_file

    @abstractmethod
    def save(self, directory: str | Path) -> Path:
        """Write the model card's file under ``directory``; returns its path.

        Raises:
            ArtifactError: the policy is not fitted, or the file cannot be written.
        """

    @classmethod
    @abstractmethod
    def load(cls, directory: str | Path) -> Policy:
        """Read ``<directory>/<name>/<artifact_file>``.

        Raises:
            ArtifactError: missing file, wrong keys, shapes or types.
        """
