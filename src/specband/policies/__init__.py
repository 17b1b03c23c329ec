"""The eight policies of the model card, one module each, with a common interface
(:mod:`specband.policies.base`), listed once in :mod:`specband.policies.registry`.

Each module ``specband.policies.<name>`` defines ``POLICY``, its :class:`Policy` subclass.
Modules load lazily, so using ``lookup_table`` never imports torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from specband.policies.registry import REGISTRY, PolicyEntry, policy_entry

if TYPE_CHECKING:
    from specband.policies.base import Policy

__all__ = [
    "ALGORITHMS",
    "EXTENDED_ALGORITHMS",
    "REGISTRY",
    "PolicyEntry",
    "create_policy",
    "policy_class",
    "policy_entry",
]

#: The model card's algorithm names, in the model card's order (the registry's).
ALGORITHMS: tuple[str, ...] = tuple(REGISTRY)
#: Algorithms trained and evaluated on the extended action set (``--actions extended``);
#: see :attr:`PolicyEntry.extended`.
EXTENDED_ALGORITHMS: tuple[str, ...] = tuple(e.name for e in REGISTRY.values() if e.extended)


def policy_class(name: str) -> type[Policy]:
    """The :class:`Policy` subclass for a model card name (imports only that module).

    Raises:
        ConfigError: an unknown name.
    """
    cls: type[Policy] = importlib.import_module(policy_entry(name).module).POLICY  # lazy: the policy registry's seam
    return cls


def create_policy(name: str, seed: int = 0, **overrides: Any) -> Policy:
    """A fresh, unfitted policy with its default config, ``seed`` and any config overrides.

    Raises:
        ConfigError: an unknown name or an invalid config value.
    """
    cls = policy_class(name)
    return cls.from_config(seed=seed, **overrides)
