"""The report table of ``specband train``: every policy's pick at every measured batch
size, with the observed mean rewards beside it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specband.contract.actions import EXTENDED_ACTIONS, REFERENCE_INDEX

if TYPE_CHECKING:
    from specband.artifacts.folder import Manifest
    from specband.policies.base import Policy

__all__ = ["PickRow", "pick_table"]


@dataclass(frozen=True)
class PickRow:
    """One algorithm's pick at one batch size.

    Attributes:
        algorithm: the algorithm.
        batch_size: the measured batch size.
        action: index of the pick.
        mean_reward: observed mean reward of the pick there (``None`` if never measured).
        reference_reward: observed mean reward of the reference (3,4,8) there, or ``None``.
        best_action: index of the best observed allowed config there (``None`` if unknown).
        best_reward: its observed mean reward.
    """

    algorithm: str
    batch_size: int
    action: int
    mean_reward: float | None
    reference_reward: float | None
    best_action: int | None
    best_reward: float | None

    @property
    def triple(self) -> tuple[int, int, int]:
        """The picked (steps, topk, num_draft_tokens)."""
        return EXTENDED_ACTIONS[self.action]


def pick_table(policies: Mapping[str, Policy], manifest: Manifest) -> list[PickRow]:
    """Every policy's pick at every measured batch size, from the manifest's state and
    allowed actions, with observed mean rewards beside it."""
    rows: list[PickRow] = []
    for name, policy in policies.items():
        for bs in manifest.batch_sizes:
            action = policy.act(manifest.state_for(bs), manifest.allowed_for(bs))
            means = manifest.mean_rewards.get(bs, {})
            candidates = [a for a in manifest.allowed[bs] if a in means]
            best = max(candidates, key=lambda a: (means[a], -a)) if candidates else None
            rows.append(
                PickRow(
                    algorithm=name,
                    batch_size=bs,
                    action=action,
                    mean_reward=manifest.mean_reward(bs, action),
                    reference_reward=manifest.mean_reward(bs, REFERENCE_INDEX),
                    best_action=None if best is None else int(best),
                    best_reward=None if best is None else float(means[int(best)]),
                )
            )
    return rows
