"""The feedback loop, as pure objects over typed readings: no NVML, no server, no clock.

* :class:`TierTracker` follows the server's running batch size to a plan tier, switching only
  after :attr:`ControlSettings.switch_readings` readings in a row in the new tier (a batch
  size flickering on a tier boundary does not move the limit every second); batch size 0 is
  *idle* (no tier: the limit is held).
* :class:`BandController` holds one GPU's utilisation inside the band. Entering a tier sets
  that tier's limit: the plan's starting limit, times what the loop has learned of the plan's
  error so far (one factor per GPU: a plan whose power is 40 % high at one batch size is
  likely high at the next), or the limit the loop left the tier at once it corrected it. The
  utilisation is taken over a window of :attr:`ControlSettings.window_s` seconds, across tier
  switches: the energy drawn over the time-integral of the limits in force (the mean power
  over the mean limit). After a full window and at least :attr:`ControlSettings.dwell_s` since
  the last change, a window above ``band_high + hysteresis`` raises, and one below
  ``band_low - hysteresis`` lowers, the limit of every tier the window ran in by the factor
  ``utilisation / target`` (``target`` the band's middle; a throttled GPU, whose power is its
  limit, by :attr:`ControlSettings.max_step_w`), each change bounded by that step, and the
  factor for the tiers not corrected yet with them. Never below the GPU's floor, never above
  its default limit; at the floor below the band, or at the default limit above it, it holds
  and says so once per tier.

The shape follows Zeus's ``zeus/optimizer/power_limit.py``: a selector over typed measurements
that the caller feeds and obeys, testable without a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specband.contract.reward import BAND_HIGH, BAND_LOW
from specband.core.errors import ConfigError

__all__ = [
    "THROTTLED_UTILIZATION",
    "BandController",
    "ControlSettings",
    "Decision",
    "GpuRange",
    "GpuReading",
    "TierTracker",
]

#: Utilisation at or above which the GPU is taken to be held at its limit (its power is the
#: limit, not its demand): NVML's averaged power sits within ~0.5 % of an enforced cap.
THROTTLED_UTILIZATION = 0.995


@dataclass(frozen=True)
class ControlSettings:
    """How the loop moves the limit.

    Attributes:
        band_low, band_high: the band, fractions of the limit (contract/reward.py's 0.95-0.98).
        window_s: seconds of readings the utilisation is averaged over before a decision.
        dwell_s: least seconds at a limit before the loop moves it again (per tier).
        max_step_w: the largest change one decision makes, W.
        hysteresis: how far outside the band (fraction of the limit) a window must be before
            the loop acts.
        switch_readings: readings in a row in another tier before the tier switches (1: at
            once; the tier's limit is set on the next reading, and a batch size that moves back
            sets the other tier's limit again: a write to NVML, which costs nothing).
        min_change_w: changes smaller than this are not made, W (NVML takes whole mW; a
            change under 1 W is noise).
        settled_share: a window acts only when one tier holds this share of it: a window over
            a batch size that kept moving between tiers measures the moves (the limit set one
            reading late), not an error of the plan.

    Raises:
        ConfigError: a band outside (0, 1], a non-positive window, step or count.
    """

    band_low: float = BAND_LOW
    band_high: float = BAND_HIGH
    window_s: float = 5.0
    dwell_s: float = 5.0
    max_step_w: float = 70.0
    hysteresis: float = 0.005
    switch_readings: int = 1
    min_change_w: float = 1.0
    settled_share: float = 0.6

    def __post_init__(self) -> None:
        if not 0.0 < self.band_low < self.band_high <= 1.0:
            raise ConfigError(f"the band must be 0 < low < high <= 1, got {self.band_low}-{self.band_high}")
        for name in ("window_s", "max_step_w", "min_change_w"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number, got {value!r}")
        if not (math.isfinite(self.dwell_s) and self.dwell_s >= 0) or not 0 <= self.hysteresis < 0.5:
            raise ConfigError("dwell_s must be >= 0 and hysteresis in [0, 0.5)")
        if self.switch_readings < 1:
            raise ConfigError(f"switch_readings must be >= 1, got {self.switch_readings}")

    @property
    def target(self) -> float:
        """The utilisation a change aims at: the band's middle."""
        return 0.5 * (self.band_low + self.band_high)


@dataclass(frozen=True)
class GpuRange:
    """The limits the loop may set on one GPU: its NVML floor and its default limit, W."""

    min_w: float
    max_w: float

    def clamp(self, watts: float) -> float:
        """``watts`` within the range."""
        return min(self.max_w, max(self.min_w, watts))


@dataclass(frozen=True)
class GpuReading:
    """One GPU's checked reading (:mod:`specband.govern.readings`).

    Attributes:
        t_s: when it was read, s (the governor's clock).
        power_w: board power, W.
        energy_mj: the energy counter, mJ, or ``None`` without one.
        limit_w: the limit in force when it was read, W (in a dry run: the limit the loop would
            have set).
    """

    t_s: float
    power_w: float
    energy_mj: float | None
    limit_w: float


@dataclass(frozen=True)
class Decision:
    """What the loop decided for one GPU.

    Attributes:
        kind: ``"tier"`` (the tier's limit is set), ``"raise"``, ``"lower"``, ``"floor"`` (below
            the band at the floor: held, said once per tier) or ``"ceiling"`` (above the band at
            the default limit: held, said once per tier).
        tier: the tier's index.
        limit_w: the limit to set (for ``floor``/``ceiling``: the one held), W.
        previous_w: the limit before, W.
        utilization: the window's utilisation behind it (``None`` for a tier switch).
        reason: one line saying why.
    """

    kind: str
    tier: int
    limit_w: float
    previous_w: float
    utilization: float | None
    reason: str

    @property
    def changes(self) -> bool:
        """Whether the limit moves."""
        return self.kind in ("tier", "raise", "lower") and not math.isclose(self.limit_w, self.previous_w)


class TierTracker:
    """Which plan tier the server is in, with a switching hysteresis (module docstring).

    Args:
        tier_of: batch size -> tier index (``None`` for batch size 0).
        switch_readings: readings in a row before a switch.
    """

    def __init__(self, tier_of: Callable[[int], int | None], switch_readings: int) -> None:
        self._tier_of = tier_of
        self.switch_readings = switch_readings
        self.current: int | None = None
        self.started = False
        self._pending: int | None = None
        self._count = 0

    def observe(self, batch_size: int) -> tuple[int | None, bool]:
        """Feed one reading's batch size.

        Returns:
            ``(tier, switched)``: the tier now (``None``: idle) and whether it just changed.
        """
        wanted = self._tier_of(batch_size)
        if not self.started:
            self.started, self.current = True, wanted
            return wanted, True
        if wanted == self.current:
            self._pending, self._count = None, 0
            return self.current, False
        if wanted != self._pending:
            self._pending, self._count = wanted, 0
        self._count += 1
        if self._count < self.switch_readings:
            return self.current, False
        self.current, self._pending, self._count = wanted, None, 0
        return wanted, True


class BandController:
    """One GPU's limits, per tier (module docstring).

    Args:
        settings: how the loop moves.
        gpu_range: the floor and the default limit, W.
        tier_limits: each plan tier's starting limit, W (clamped to ``gpu_range``).
        current_w: the limit in force when the loop starts, W.
    """

    def __init__(
        self, settings: ControlSettings, gpu_range: GpuRange, tier_limits: Sequence[float], current_w: float
    ) -> None:
        self.settings = settings
        self.range = gpu_range
        self.plan = [float(w) for w in tier_limits]
        self.learned: list[float | None] = [None] * len(self.plan)
        self.scale = 1.0
        self.current_w = float(current_w)
        self.tier: int | None = None
        self._last: GpuReading | None = None
        self._energy_j = 0.0
        self._limit_s = 0.0  # integral of the limit in force over the window, W s
        self._span_s = 0.0
        self._tier_s: dict[int, float] = {}
        self._last_change = -math.inf
        self._said: set[tuple[int, str]] = set()

    def limit_for(self, tier: int) -> float:
        """The limit ``tier`` runs at now: the one the loop left it at, else the plan's times the
        learned factor, within the GPU's range."""
        learned = self.learned[tier]
        return round(self.range.clamp(learned if learned is not None else self.plan[tier] * self.scale), 3)

    def enter(self, tier: int | None, t_s: float) -> Decision | None:
        """The server moved to ``tier`` (``None``: idle): the tier's limit, if it differs from the
        one in force. The window goes on (it spans tiers); idle time leaves it."""
        self.tier = tier
        if tier is None:
            self._reset(None)
            return None
        wanted = self.limit_for(tier)
        if abs(wanted - self.current_w) < self.settings.min_change_w:
            return None
        if self.learned[tier] is not None:
            whence = "the limit the loop left it at"
        elif self.scale != 1.0:
            whence = f"the plan's limit x {self.scale:.3f} (the plan's error learned so far)"
        else:
            whence = "its starting limit in the plan"
        decision = Decision("tier", tier, wanted, self.current_w, None, f"the tier's limit: {whence}")
        self.current_w = wanted
        return decision

    def _reset(self, reading: GpuReading | None) -> None:
        self._last = reading
        self._energy_j = self._limit_s = self._span_s = 0.0
        self._tier_s = {}

    def observe(self, reading: GpuReading) -> Decision | None:
        """Feed one checked reading (its ``limit_w`` the limit the utilisation is taken against);
        a decision once a full window says to move (or, once per tier, that the band cannot be
        reached at the floor or the default limit)."""
        last = self._last
        if self.tier is None or last is None:
            self._reset(reading if self.tier is not None else None)
            return None
        dt = reading.t_s - last.t_s
        if dt <= 0:
            return None
        if reading.energy_mj is not None and last.energy_mj is not None and reading.energy_mj >= last.energy_mj:
            self._energy_j += (reading.energy_mj - last.energy_mj) / 1000.0
        else:
            self._energy_j += 0.5 * (reading.power_w + last.power_w) * dt
        self._limit_s += reading.limit_w * dt
        self._span_s += dt
        self._tier_s[self.tier] = self._tier_s.get(self.tier, 0.0) + dt
        self._last = reading
        s = self.settings
        if self._span_s < s.window_s or reading.t_s - self._last_change < s.dwell_s:
            return None
        u = self._energy_j / self._limit_s
        tiers = [t for t, secs in self._tier_s.items() if secs >= 0.2 * self._span_s]
        settled = max(self._tier_s.values()) >= s.settled_share * self._span_s
        self._reset(reading)
        if not settled:
            return None  # the batch size moved through tiers: the window says more about the moves than the plan
        decision = self._decide(u, tiers)
        if decision is not None and decision.changes:
            self._last_change = reading.t_s
        return decision

    def _step(self, limit_w: float, factor: float) -> float:
        """``limit_w`` times ``factor``, by at most the step and within the range."""
        s = self.settings
        wanted = min(limit_w + s.max_step_w, max(limit_w - s.max_step_w, limit_w * factor))
        return round(self.range.clamp(wanted), 3)

    def _decide(self, u: float, tiers: list[int]) -> Decision | None:
        s, tier = self.settings, self.tier
        assert tier is not None
        limit_w = self.current_w
        if s.band_low - s.hysteresis <= u <= s.band_high + s.hysteresis:
            return None
        raising = u > s.band_high
        if raising and limit_w >= self.range.max_w - 0.5:
            why = "it draws all the default allows (the band needs a higher limit than the GPU takes)"
            return self._once(tier, "ceiling", u, f"above the band at the GPU's default limit: {why}")
        if not raising and limit_w <= self.range.min_w + 0.5:
            why = f"it draws {u * limit_w:.0f} W (the band cannot be reached here)"
            return self._once(
                tier, "floor", u, f"below the band at the GPU's lowest limit, {self.range.min_w:g} W: {why}"
            )
        throttled = u >= THROTTLED_UTILIZATION
        factor = (limit_w + s.max_step_w) / limit_w if throttled else u / s.target
        for t in {*tiers, tier}:
            self.learned[t] = self._step(self.limit_for(t), factor)
        new = self.limit_for(tier)
        if self.range.min_w + 0.5 < new < self.range.max_w - 0.5:
            self.scale = new / self.plan[tier]  # the plan's error where it was just measured
        else:
            self.scale *= factor
        if abs(new - limit_w) < s.min_change_w:
            return None
        self.current_w = new
        kind = "raise" if raising else "lower"
        where = "above" if raising else "below"
        why = "held at its limit (throttled)" if throttled else f"{u * limit_w:.0f} W drawn"
        return Decision(kind, tier, new, limit_w, u, f"utilisation {u:.3f} {where} the band over the window: {why}")

    def _once(self, tier: int, kind: str, u: float, reason: str) -> Decision | None:
        if (tier, kind) in self._said:
            return None
        self._said.add((tier, kind))
        return Decision(kind, tier, self.current_w, self.current_w, u, reason)
