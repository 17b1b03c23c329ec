"""The eight policies of the model card, one module each, with a common interface
(:mod:`specband.policies.base`).

Each module ``specband.policies.<name>`` defines ``POLICY``, its :class:`Policy` subclass.
Modules load lazily, so using ``lookup_table`` never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from specband.core.errors import ConfigError

if TYPE_CHECKING:
    from specband.policies.base import Policy

__all__ = ["ALGORITHMS", "EXTENDED_ALGORITHMS", "create_policy", "policy_class"]

#: The model card's algorithm names, in the model card's order.
ALGORITHMS: tuple[str, ...] = (
    "mlp_bandit",
    "lookup_table",
    "linucb",
    "thompson_sampling",
    "gbt",
    "doubly_robust",
    "cql",
    "bcq",
)
#: Algorithms trained and evaluated on the extended action set (``--actions extended``): the
#: model card's file of ``lookup_table`` names triples (``{"config": [s, k, d]}``); every
#: other file is a 19-action format (``QNetwork(4, 19)``, ``action_idx/19`` features,
#: ``(19, 3)`` action arrays) whose loaders must never be handed an index outside 0-18.
EXTENDED_ALGORITHMS: tuple[str, ...] = ("lookup_table",)


def policy_class(name: str) -> type[Policy]:
    """The :class:`Policy` subclass for a model card name (imports only that module).

    Raises:
        ConfigError: an unknown name.
    """
    if name not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {name!r}; expected one of: {', '.join(ALGORITHMS)}")
    module = importlib.import_module(f"specband.policies.{name}")
    return module.POLICY


def create_policy(name: str, seed: int = 0, **overrides: Any) -> Policy:
    """A fresh, unfitted policy with its default config, ``seed`` and any config overrides.

    Raises:
        ConfigError: an unknown name or an invalid config value.
    """
    cls = policy_class(name)
    return cls.from_config(seed=seed, **overrides)
