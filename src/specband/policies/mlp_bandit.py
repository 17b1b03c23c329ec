"""``mlp_bandit``: a neural contextual bandit, ``QNetwork(4, 19)`` regressing the reward of
the taken action on the state (the greedy neural bandit of the published study; cf.
Riquelme, Tucker, Snoek 2018, "Deep Bayesian Bandits Showdown", the greedy neural baseline).

Training (docs/FACTS.md §5): AdamW lr 1e-3, minibatch 8, MSE on the taken action's Q, 200 epochs
(see :mod:`specband.policies.nets`). The pick is the allowed action with the highest Q.

Model card file ``mlp_bandit/policy.pth``: the QNetwork ``state_dict`` (``net.0``
Linear(4, 128), GELU, ``net.2`` Linear(128, 128), GELU, ``net.4`` Linear(128, 19));
recipe ``QNetwork(4, 19).load_state_dict(torch.load(...))``.
"""

from __future__ import annotations

from dataclasses import dataclass

from specband.policies.nets import NetConfig, QNetworkPolicy

__all__ = ["POLICY", "MLPBandit", "MLPBanditConfig"]


@dataclass(frozen=True)
class MLPBanditConfig(NetConfig):
    """Settings of :class:`MLPBandit` (see :class:`~specband.policies.nets.NetConfig`);
    200 epochs."""

    epochs: int = 200


class MLPBandit(QNetworkPolicy):
    """Greedy neural contextual bandit (see the module docstring)."""

    name = "mlp_bandit"
    config_class = MLPBanditConfig


POLICY = MLPBandit
