"""``cql``: conservative Q-learning (Kumar, Zhou, Tucker, Levine 2020, "Conservative
Q-Learning for Offline Reinforcement Learning", CQL(H), eq. 4) in the one-step (bandit)
case: ``QNetwork(4, 19)`` trained on

    mean_batch[(Q(s, a) - r)^2] + alpha * mean_batch[logsumexp_a' Q(s, a') - Q(s, a)]

for 600 epochs (AdamW lr 1e-3, minibatch 8; docs/FACTS.md §5). The penalty pushes down the
Q-values of actions the data does not support and up those of logged actions.

Default ``alpha`` and why it differs from the published one: the published alpha = 1.0 is
an absolute weight, about twice the largest reward of this problem (about 0.53); the
penalty then outweighs the reward differences and CQL picked (0,0,0) at batch sizes >= 4
(docs/FACTS.md §6). Here ``alpha = alpha_relative * std(training rewards)`` with
``alpha_relative = 0.1`` (set ``alpha`` for an absolute weight): the penalty stays a small
fraction of the reward spread whatever the reward scale. The resolved value is in the
sidecar's ``fit_info``.

Model card file ``cql/policy.pth``: the QNetwork ``state_dict``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specband.policies.base import check_number
from specband.policies.nets import NetConfig, QNetworkPolicy, TrainSettings
from specband.sweeps.dataset import TrainingData

__all__ = ["CQL", "POLICY", "CQLConfig", "resolve_alpha"]


@dataclass(frozen=True)
class CQLConfig(NetConfig):
    """Settings of :class:`CQL` (see :class:`~specband.policies.nets.NetConfig`).

    Attributes:
        epochs: 600 (docs/FACTS.md §5).
        alpha: absolute conservative weight in reward units; ``None`` = relative (below).
        alpha_relative: conservative weight in units of the training rewards' standard
            deviation, used when ``alpha`` is ``None``; >= 0.
    """

    epochs: int = 600
    alpha: float | None = None
    alpha_relative: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_number("cql", "alpha", self.alpha, low=0.0, allow_none=True)
        check_number("cql", "alpha_relative", self.alpha_relative, low=0.0)


def resolve_alpha(config: CQLConfig, rewards: np.ndarray) -> float:
    """The conservative weight used for training: ``config.alpha`` when set, else
    ``alpha_relative * std(rewards)`` (population standard deviation)."""
    if config.alpha is not None:
        return float(config.alpha)
    return float(config.alpha_relative * np.std(np.asarray(rewards, dtype=np.float64)))


class CQL(QNetworkPolicy):
    """Conservative Q-learning, one-step (see the module docstring)."""

    name = "cql"
    config_class = CQLConfig

    def _settings(self, data: TrainingData) -> TrainSettings:
        return self.config.train_settings("cql", alpha=resolve_alpha(self.config, data.rewards))

    def _fit_extras(self, settings: TrainSettings) -> dict[str, Any]:
        return {"alpha": settings.alpha}


POLICY = CQL
