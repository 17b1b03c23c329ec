"""The contract's trade behind a pick outside the band, as answer types
(:class:`RewardTerms`, :class:`BandTrade`; re-exported by :mod:`specband.deploy.answers`).

Only the standard library is imported (``recommend`` stays cold-fast).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from specband.contract.actions import Action

__all__ = ["BandTrade", "RewardTerms"]


@dataclass(frozen=True)
class RewardTerms:
    """A config's reward taken apart (the contract's reward, docs/FACTS.md §2:
    ``band^w x speed^(1-w)``, w = 0.5, times the thermal multiplier), from its mean figures.

    Attributes:
        action: its triple.
        mean_reward: its mean reward over its rows (4 decimals; includes the thermal multiplier).
        band_term: ``band_score`` of its mean utilisation (1 inside the band; 4 decimals).
        speed_term: ``throughput_score`` of its mean speed over the baseline's (4 decimals).
        energy_utilization: its mean utilisation (4 decimals).
        speed_tok_s: its mean speed, tokens/s (3 decimals).
    """

    action: Action
    mean_reward: float
    band_term: float
    speed_term: float
    energy_utilization: float
    speed_tok_s: float

    def to_json(self) -> dict[str, Any]:
        """Every field; ``action`` as a list."""
        return {**asdict(self), "action": list(self.action)}


@dataclass(frozen=True)
class BandTrade:
    """The contract's trade behind a pick outside the band: the best config inside the band
    (by mean reward) and the pick, each with its reward terms. The reward multiplies a band
    term by a speed term, so a faster config just outside the band can out-score a slower
    one inside it; this says by how much each term moved.

    Attributes:
        pick: the pick's :class:`RewardTerms` (outside the band).
        in_band: the best in-band config's :class:`RewardTerms`.
    """

    pick: RewardTerms
    in_band: RewardTerms

    def to_json(self) -> dict[str, Any]:
        """``pick`` and ``in_band`` (as :meth:`RewardTerms.to_json`), then the differences
        ``band_term_lost`` (in-band minus pick) and ``speed_term_gained`` (pick minus in-band)."""
        return {
            "pick": self.pick.to_json(),
            "in_band": self.in_band.to_json(),
            "band_term_lost": round(self.in_band.band_term - self.pick.band_term, 4),
            "speed_term_gained": round(self.pick.speed_term - self.in_band.speed_term, 4),
        }
