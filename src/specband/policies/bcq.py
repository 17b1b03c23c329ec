"""``bcq``: discrete batch-constrained Q-learning (Fujimoto, Conti, Ghavamzadeh, Pineau
2019, "Benchmarking Batch Deep Reinforcement Learning Algorithms", discrete BCQ) in the
one-step (bandit) case.

Two networks trained together for 300 epochs (AdamW lr 1e-3, minibatch 8; docs/FACTS.md §5):

* a behaviour model ``G(a | s)`` (``net.0`` Linear(4, 128), GELU, ``net.2`` Linear(128, 19),
  softmax), cross-entropy on the logged actions;
* ``Q = QNetwork(4, 19)``, MSE on the taken action's Q.

An action is *supported* in state ``s`` when ``G(a | s) / max_a' G(a' | s) >= threshold``;
the pick is the supported allowed action with the highest Q (the allowed action with the
highest Q when none of them is supported).

Default ``threshold`` and why it differs from the published one: the published 0.3 is an
absolute ratio. In the bundled published measurements the rarest config logged at a batch
size was run 1 time where another was run 5 times (ratio 0.2), so a well-fitted behaviour
model rules it out at 0.3 whatever its reward, and the published BCQ picked (0,0,0) at batch
sizes >= 4 (docs/FACTS.md §6). Here ``threshold = threshold_relative * r_min`` with
``threshold_relative = 0.3`` and ``r_min`` the smallest ratio, over batch sizes, of a logged
config's row count to the most-run config's there: 0.3 on a balanced grid sweep (the
published value), 0.06 on the bundled data. Set ``threshold`` for an absolute value. The
resolved value is in the sidecar's ``fit_info``; a folder without a sidecar uses 0.3.

With the same seed, the Q-network is initialised and trained exactly as the MLP bandit's
network (same draws, same minibatch order): its first 200 epochs are the MLP bandit, which
:func:`specband.policies.nets.train_mlp` reuses.

Model card file ``bcq/policy.pth``: a dict ``behavior_state_dict``, ``q_state_dict``,
``actions`` (the 19 triples as lists), loadable with ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specband.contract.actions import ACTIONS, NUM_ACTIONS
from specband.core.errors import ArtifactError
from specband.core.limits import is_number
from specband.policies.base import as_states, check_actions_entry, check_number
from specband.policies.nets import (
    BEHAVIOR_LAYERS,
    MLP,
    QNETWORK_LAYERS,
    NetConfig,
    QNetworkPolicy,
    load_state_dict,
    require_torch,
    save_torch_atomic,
    state_dict_tensors,
    train_mlp,
)
from specband.sweeps.dataset import TrainingData

__all__ = ["BCQ", "POLICY", "PUBLISHED_THRESHOLD", "UNSUPPORTED_OFFSET", "BCQConfig", "min_logging_ratio"]

#: The published study's absolute support threshold (model card).
PUBLISHED_THRESHOLD = 0.3
#: Subtracted from the Q-value of an unsupported action in :meth:`BCQ.scores` (far beyond
#: any reward in [0, 1]), so an argmax prefers every supported action to it.
UNSUPPORTED_OFFSET = 1.0e6


@dataclass(frozen=True)
class BCQConfig(NetConfig):
    """Settings of :class:`BCQ` (see :class:`~specband.policies.nets.NetConfig`).

    Attributes:
        epochs: 300 (docs/FACTS.md §5).
        threshold: absolute support threshold on ``G(a|s) / max G``; ``None`` = relative.
        threshold_relative: multiplies the rarest logged config's count ratio when
            ``threshold`` is ``None``; in [0, 1].
    """

    epochs: int = 300
    threshold: float | None = None
    threshold_relative: float = 0.3

    def __post_init__(self) -> None:
        super().__post_init__()
        check_number("bcq", "threshold", self.threshold, low=0.0, high=1.0, allow_none=True)
        check_number("bcq", "threshold_relative", self.threshold_relative, low=0.0, high=1.0)


def min_logging_ratio(data: TrainingData) -> float:
    """Smallest ``count(bs, a) / max_a' count(bs, a')`` over batch sizes and the configs
    logged there (1.0 on a balanced sweep)."""
    ratio = 1.0
    for bs in np.unique(data.batch_sizes):
        counts = np.bincount(data.actions[data.batch_sizes == bs], minlength=NUM_ACTIONS)
        logged = counts[counts > 0]
        ratio = min(ratio, float(logged.min() / logged.max()))
    return ratio


class BCQ(QNetworkPolicy):
    """Discrete BCQ, one-step (see the module docstring).

    Attributes:
        net: the Q-network.
        behavior: the behaviour model.
        threshold: the support threshold in use.
    """

    name = "bcq"
    config_class = BCQConfig

    def __init__(self, config: BCQConfig | None = None) -> None:
        super().__init__(config)
        self.behavior: MLP | None = None
        self.threshold = PUBLISHED_THRESHOLD if self.config.threshold is None else float(self.config.threshold)

    def fit(self, data: TrainingData) -> BCQ:
        """Train the Q-network and the behaviour model; resolve the threshold.

        Raises:
            DataError: no rows.
        """
        self._check_data(data)
        c = self.config
        q_settings = c.train_settings("mse")
        g_settings = c.train_settings("ce", layers=BEHAVIOR_LAYERS)
        self.net = train_mlp(data.states, data.actions, data.rewards, seed=c.seed, epochs=c.epochs, settings=q_settings)
        self.behavior = train_mlp(data.states, data.actions, None, seed=c.seed, epochs=c.epochs, settings=g_settings)
        ratio = min_logging_ratio(data)
        self.threshold = float(c.threshold) if c.threshold is not None else c.threshold_relative * ratio
        self.fit_info = {"rows": len(data), "threshold": self.threshold, "min_logging_ratio": ratio}
        self._fitted = True
        return self

    def support(self, states: np.ndarray) -> np.ndarray:
        """Whether each action is supported in each state: ``G(a|s) / max G >= threshold``;
        (n, 19) bool (or (19,))."""
        self._require_fitted()
        x, single = as_states(states)
        assert self.behavior is not None
        logits = self.behavior.forward(x)
        # G(a|s) / max G = exp(logit_a - max logit)
        ratio = np.exp(logits - logits.max(axis=1, keepdims=True))
        out = ratio >= self.threshold
        return out[0] if single else out

    def q_values(self, states: np.ndarray) -> np.ndarray:
        """The Q-network's outputs, (n, 19) (or (19,))."""
        return super().scores(states)

    def scores(self, states: np.ndarray) -> np.ndarray:
        """Q-values, with :data:`UNSUPPORTED_OFFSET` subtracted from unsupported actions, so
        that the argmax over any allowed set is the supported allowed action with the
        highest Q, or the allowed action with the highest Q when none is supported; (n, 19)
        (or (19,)). Only supported actions' scores are reward estimates."""
        q = self.q_values(states)
        return np.where(self.support(states), q, q - UNSUPPORTED_OFFSET)

    def save(self, directory: str | Path) -> Path:
        """Write ``bcq/policy.pth`` (``behavior_state_dict``, ``q_state_dict``, ``actions``)
        and the sidecar.

        Raises:
            ArtifactError: not fitted, or the file cannot be written.
            MissingExtraError: torch is not installed (the ``.pth`` file needs it).
        """
        self._require_fitted()
        assert self.net is not None and self.behavior is not None
        path = self.artifact_path(directory)
        require_torch(f"writing {path}")
        obj = {
            "behavior_state_dict": state_dict_tensors(self.behavior),
            "q_state_dict": state_dict_tensors(self.net),
            "actions": [list(a) for a in ACTIONS],
        }
        save_torch_atomic(obj, path)
        self._write_sidecar(directory)
        return path

    @classmethod
    def load(cls, directory: str | Path) -> BCQ:
        """Read ``bcq/policy.pth`` with ``weights_only=True``.

        Raises:
            ArtifactError: missing file, not a dict with the three keys, wrong network
                shapes, or ``actions`` that are not the contract.
        """
        path = Path(directory) / cls.name / cls.artifact_file
        obj: Any = load_state_dict(path)
        if not isinstance(obj, dict):
            raise ArtifactError(
                f"{path}: expected a dict with behavior_state_dict, q_state_dict, actions; got {type(obj).__name__}"
            )
        missing = [k for k in ("behavior_state_dict", "q_state_dict", "actions") if k not in obj]
        if missing:
            raise ArtifactError(f"{path}: missing key(s) {missing}; has {sorted(obj)}")
        check_actions_entry(obj["actions"], str(path))
        policy, _ = cls._from_sidecar(directory)
        policy.behavior = MLP.from_state_dict(
            obj["behavior_state_dict"], BEHAVIOR_LAYERS, f"{path} behavior_state_dict"
        )
        policy.net = MLP.from_state_dict(obj["q_state_dict"], QNETWORK_LAYERS, f"{path} q_state_dict")
        stored = policy.fit_info.get("threshold")
        if policy.config.threshold is not None:
            policy.threshold = float(policy.config.threshold)
        elif is_number(stored) and 0.0 <= stored <= 1.0:
            policy.threshold = float(stored)
        else:
            policy.threshold = PUBLISHED_THRESHOLD
        policy._fitted = True
        return policy


POLICY = BCQ
