"""What the governor's run amounted to: time in the band (in all and per tier), energy, output
tokens, J/token and throttled time, accumulated interval by interval (:class:`Ledger`).

Each interval between two readings acted on is put to the tier the server was in at its start,
and per GPU: its utilisation is the energy counter's difference over the interval over the
limit in force (the mean of the two power readings where there is no counter); it is *in the
band* when the utilisation lies in it, *throttled* when it is at the limit
(:data:`~specband.govern.controller.THROTTLED_UTILIZATION`), and the band is *reachable* there
unless the GPU drew less than the band's bottom of its lowest limit (no limit it takes puts
that power in the band) or more than the band's top at its default limit. Time at batch size
0 is idle time, outside every tier.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specband.govern.controller import THROTTLED_UTILIZATION, GpuRange, GpuReading

__all__ = ["GpuInterval", "Ledger", "SlidingUtilization", "TierTally", "interval_of"]


@dataclass(frozen=True)
class GpuInterval:
    """One GPU over one interval: seconds, energy (J), utilisation, and the flags: in the band
    over the interval itself (``in_band``) and over the window ending with it
    (``in_band_window``: the utilisation the loop holds, average power over up to ``--window``
    seconds at one limit), throttled, and whether the band is reachable there."""

    seconds: float
    energy_j: float
    utilization: float
    in_band: bool
    throttled: bool
    reachable: bool
    in_band_window: bool = False


class SlidingUtilization:
    """One GPU's utilisation over the last ``window_s`` seconds at the limit now in force (the
    window starts afresh when the limit moves).

    Args:
        window_s: the window, s.
    """

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._parts: list[tuple[float, float, float]] = []  # (start, end, energy J)
        self._limit: float | None = None

    def add(self, start_s: float, end_s: float, energy_j: float, limit_w: float) -> float:
        """Add one interval at ``limit_w``; the utilisation over the window ending with it."""
        if self._limit is None or abs(self._limit - limit_w) > 0.5:
            self._parts, self._limit = [], limit_w
        self._parts.append((start_s, end_s, energy_j))
        self._parts = [p for p in self._parts if p[1] > end_s - self.window_s + 1e-9]
        span = end_s - self._parts[0][0]
        return sum(p[2] for p in self._parts) / span / limit_w if span > 0 else 0.0


def interval_of(
    before: GpuReading,
    after: GpuReading,
    limit_w: float,
    gpu_range: GpuRange,
    band: tuple[float, float],
    window: SlidingUtilization | None = None,
) -> GpuInterval | None:
    """The interval from ``before`` to ``after`` at ``limit_w`` (``None`` when no time passed);
    ``window`` (this GPU's) gives the windowed utilisation."""
    dt = after.t_s - before.t_s
    if dt <= 0 or limit_w <= 0:
        return None
    if before.energy_mj is not None and after.energy_mj is not None and after.energy_mj >= before.energy_mj:
        energy = (after.energy_mj - before.energy_mj) / 1000.0
    else:
        energy = 0.5 * (before.power_w + after.power_w) * dt
    power = energy / dt
    u = power / limit_w
    low, high = band
    below_floor = power < low * gpu_range.min_w  # under the band even at the lowest limit
    over_ceiling = limit_w >= gpu_range.max_w - 0.5 and u > high  # over it at the highest
    wide = u if window is None else window.add(before.t_s, after.t_s, energy, limit_w)
    reachable = not (below_floor or over_ceiling)
    return GpuInterval(dt, energy, u, low <= u <= high, u >= THROTTLED_UTILIZATION, reachable, low <= wide <= high)


@dataclass
class TierTally:
    """One tier's (or idle time's) totals, summed over the governed GPUs (GPU-seconds)."""

    gpu_seconds: float = 0.0
    in_band_s: float = 0.0
    reachable_s: float = 0.0
    reachable_in_band_s: float = 0.0
    in_band_window_s: float = 0.0
    reachable_in_band_window_s: float = 0.0
    throttled_s: float = 0.0
    energy_j: float = 0.0
    output_tokens: float = 0.0
    seconds: float = 0.0

    def add(self, part: GpuInterval) -> None:
        """Add one GPU's interval."""
        self.gpu_seconds += part.seconds
        self.energy_j += part.energy_j
        if part.in_band:
            self.in_band_s += part.seconds
        if part.throttled:
            self.throttled_s += part.seconds
        if part.in_band_window:
            self.in_band_window_s += part.seconds
        if part.reachable:
            self.reachable_s += part.seconds
            if part.in_band:
                self.reachable_in_band_s += part.seconds
            if part.in_band_window:
                self.reachable_in_band_window_s += part.seconds

    def to_json(self) -> dict[str, Any]:
        """The tally as JSON, with the fractions."""
        return {
            "seconds": round(self.seconds, 3),
            "gpu_seconds": round(self.gpu_seconds, 3),
            "in_band_s": round(self.in_band_s, 3),
            "in_band_fraction": None if self.gpu_seconds <= 0 else round(self.in_band_s / self.gpu_seconds, 4),
            "reachable_s": round(self.reachable_s, 3),
            "reachable_in_band_s": round(self.reachable_in_band_s, 3),
            "in_band_window_s": round(self.in_band_window_s, 3),
            "reachable_in_band_window_s": round(self.reachable_in_band_window_s, 3),
            "in_band_of_reachable": None
            if self.reachable_s <= 0
            else round(self.reachable_in_band_s / self.reachable_s, 4),
            "throttled_s": round(self.throttled_s, 3),
            "energy_j": round(self.energy_j, 3),
            "output_tokens": round(self.output_tokens, 1),
            "joules_per_token": None
            if self.output_tokens <= 0 or self.energy_j <= 0
            else round(self.energy_j / self.output_tokens, 6),
        }


@dataclass
class Ledger:
    """The run's totals per tier (``None``: idle) and in all.

    Args:
        labels: each tier's label, in order.
    """

    labels: Sequence[str]
    tiers: dict[int | None, TierTally] = field(default_factory=dict)
    unread_s: float = 0.0
    per_gpu_in_band_s: dict[int, float] = field(default_factory=dict)
    per_gpu_energy_j: dict[int, float] = field(default_factory=dict)

    def add(self, tier: int | None, seconds: float, parts: Sequence[tuple[int, GpuInterval]], tokens: float) -> None:
        """One interval of ``seconds`` in ``tier``: each GPU's part and the output tokens in it."""
        tally = self.tiers.setdefault(tier, TierTally())
        tally.seconds += seconds
        tally.output_tokens += max(0.0, tokens)
        for index, part in parts:
            tally.add(part)
            self.per_gpu_energy_j[index] = self.per_gpu_energy_j.get(index, 0.0) + part.energy_j
            if part.in_band_window:
                self.per_gpu_in_band_s[index] = self.per_gpu_in_band_s.get(index, 0.0) + part.seconds

    def total(self, *, busy_only: bool = False) -> TierTally:
        """Every tier summed (``busy_only``: idle time left out)."""
        out = TierTally()
        for tier, t in self.tiers.items():
            if busy_only and tier is None:
                continue
            for name in vars(out):
                setattr(out, name, getattr(out, name) + getattr(t, name))
        return out

    @property
    def energy_j(self) -> float:
        """Energy in all, J."""
        return self.total().energy_j

    @property
    def output_tokens(self) -> float:
        """Output tokens in all."""
        return self.total().output_tokens

    def joules_per_token(self) -> float | None:
        """Energy over output tokens (``None`` before any token)."""
        tokens = self.output_tokens
        return None if tokens <= 0 else self.energy_j / tokens

    def to_json(self) -> dict[str, Any]:
        """The summary as the log's ``summary`` event holds it."""
        per_tier = {
            ("idle" if k is None else self.labels[k]): v.to_json()
            for k, v in sorted(self.tiers.items(), key=lambda kv: -1 if kv[0] is None else kv[0])
        }
        return {
            "total": self.total().to_json(),
            "busy": self.total(busy_only=True).to_json(),
            "tiers": per_tier,
            "unread_s": round(self.unread_s, 3),
        }
