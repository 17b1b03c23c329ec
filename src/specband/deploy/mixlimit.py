"""``recommend --batch-mix``'s answer over data with several power limits
(:class:`MixPowerLimitAnswer`): one limit and one config for the whole mix. Beside
:mod:`specband.deploy.answers` (whose other answer types it shares parts with), kept apart
so that neither module grows past the code-shape bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from specband.deploy.answers import ChosenLimit, PickOrigin, TransferCheck, _limit_pick_json
from specband.sweeps.limit_table import speed_loss

if TYPE_CHECKING:
    from specband.engines.base import Engine
    from specband.sweeps.limit_table import LimitPick, MixLimitRow

__all__ = ["MixPowerLimitAnswer"]


@dataclass(frozen=True)
class MixPowerLimitAnswer(ChosenLimit):
    """``recommend --batch-mix``'s answer when the data holds several power limits: one GPU
    has one limit, so one limit and one config for the whole mix
    (:func:`specband.deploy.mix.mix_power_limit_answer`).

    Attributes:
        mix: batch size -> weight (normalised).
        chosen: the mix's config at the chosen limit (a
            :class:`~specband.sweeps.limit_table.LimitPick` with the mix's weighted speed and
            utilisation): the lowest limit within ``max_speed_loss`` of the fastest and in the
            band, else the lowest within the speed loss.
        rows: per batch size of the mix, that config at the chosen limit
            (:class:`~specband.sweeps.limit_table.MixLimitRow`: speed, utilisation, band).
        picks: the mix's config at every limit, by increasing limit.
        max_speed_loss, band, provenance, engine, draft_model, origin, transfer, notes: as
            :class:`PowerLimitAnswer`'s.
    """

    mix: Mapping[int, float]
    chosen: LimitPick
    rows: tuple[MixLimitRow, ...]
    picks: tuple[LimitPick, ...]
    max_speed_loss: float
    band: tuple[float, float]
    provenance: str
    engine: Engine
    draft_model: str | None = None
    origin: PickOrigin | None = None
    transfer: TransferCheck | None = None
    notes: tuple[str, ...] = ()

    def summary_lines(self) -> list[str]:
        """What the chosen limit does: one line for the mix, then one per batch size (its
        utilisation of the limit and band status, its speed), with the data's provenance."""
        chosen, default = self.chosen, self.picks[-1]
        band = f"{self.band[0]:.0%}-{self.band[1]:.0%}"

        def pct(value: float | None) -> str:
            return "?" if value is None else f"{value:.1%}"

        loss = speed_loss(self.picks, chosen)
        lines = [
            f"power limit {chosen.power_limit_w:g} W for the whole mix "
            f"(default as swept: {default.power_limit_w:g} W): "
            f"{self.action} at every batch size; the mix draws {pct(chosen.utilization)} of the limit "
            f"({'in' if chosen.in_band else 'NOT in'} the band {band}), {chosen.speed_tok_s:.4g} tok/s mix-weighted, "
            f"{loss:.1%} below the fastest limit's (bound {self.max_speed_loss:.1%}); from {self.provenance} rows"
        ]
        for row in self.rows:
            at = "" if row.measured_batch_size == row.batch_size else f" (measured at {row.measured_batch_size})"
            if row.utilization is None:
                status = "band unknown (no power)"
            else:
                where = "in" if row.in_band else "below" if row.utilization < self.band[0] else "above"
                status = f"utilisation {row.utilization:.3f} ({where} the band)"
            lines.append(
                f"  bs {row.batch_size}{at}, weight {row.weight:.2f}: {status}, {row.speed_tok_s:.4g} tok/s "
                f"({self.provenance})"
            )
        return lines

    def to_json(self) -> dict[str, Any]:
        """What ``recommend --batch-mix --format json`` prints for data over several limits."""
        return {
            "mix": {str(bs): w for bs, w in sorted(self.mix.items())},
            "power_limit_w": self.power_limit_w,
            "nvidia_smi": self.nvidia_smi,
            "action_index": self.chosen.action_index,
            "action": list(self.action),
            "engine": self.engine.name,
            "flags": list(self.flags),
            "in_band": self.chosen.in_band,
            "utilization": self.chosen.utilization,
            "speed_tok_s": self.chosen.speed_tok_s,
            "max_speed_loss": self.max_speed_loss,
            "band": list(self.band),
            "provenance": self.provenance,
            "per_batch_size": [asdict(row) for row in self.rows],
            "origin": None if self.origin is None else self.origin.to_json(),
            "transfer": None if self.transfer is None else self.transfer.to_json(),
            "picks": [_limit_pick_json(p) for p in self.picks],
        }
