"""The reward of one sweep row: stay inside the energy band, decode fast, stay cool.

``energy_utilization = avg_power_w / power_limit_w``;

``band_score(u)`` is 1 inside ``[band_low, band_high]`` (0.95-0.98), ``u / band_low``
below it and ``max(0, 1 - (u - band_high) * overshoot_slope)`` above it;

``throughput_score = clip((speed / baseline_speed - 1) / speedup_scale, 0, 1)`` against
the non-speculative ``(0, 0, 0)`` row of the same batch size (the baseline scores 0);

``thermal_multiplier`` is ``hot_factor`` above ``hot_temp_c``, else ``warm_factor`` above
``warm_temp_c``, else 1, times ``throttle_factor`` when the GPU throttled;

``reward = clip(band ** w * throughput ** (1 - w) * thermal, 0, 1)`` with ``w =
energy_weight``; a row that errored scores 0.

Source: the published RTX 4060 Laptop study (model card ``eagle3-speculative-decoding-energy-sweep``);
these constants reproduce every reward its logs print to within 1e-3.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from specband.core.errors import ConfigError
from specband.core.limits import is_finite_number

if TYPE_CHECKING:
    pass

__all__ = [
    "RewardConfig",
    "RewardParts",
    "band_score",
    "compute_reward",
    "energy_utilization",
    "thermal_multiplier",
    "throughput_score",
]


@dataclass(frozen=True)
class RewardConfig:
    """Reward constants (defaults: the published study).

    Attributes:
        band_low: lower edge of the target utilisation band (fraction of the power limit), 0.95.
        band_high: upper edge, 0.98.
        overshoot_slope: band-score loss per unit of utilisation above ``band_high``, 10.
        energy_weight: exponent ``w`` of the band score; throughput gets ``1 - w``. 0.5.
        speedup_scale: speed-up over the baseline that earns a full throughput score is
            ``1 + speedup_scale``; 2.0 (a 3x speed-up scores 1).
        warm_temp_c: above this GPU temperature (C) the reward is multiplied by ``warm_factor``; 75.
        warm_factor: 0.8.
        hot_temp_c: above this temperature the multiplier is ``hot_factor`` instead; 80.
        hot_factor: 0.5.
        throttle_factor: extra multiplier when the GPU throttled (power/thermal/slowdown), 0.3.
        power_limit_w: power limit in W used when a row has none; 80 W (the study laptop's cap).

    Raises:
        ConfigError: from ``__post_init__`` when a value is out of range.
    """

    band_low: float = 0.95
    band_high: float = 0.98
    overshoot_slope: float = 10.0
    energy_weight: float = 0.5
    speedup_scale: float = 2.0
    warm_temp_c: float = 75.0
    warm_factor: float = 0.8
    hot_temp_c: float = 80.0
    hot_factor: float = 0.5
    throttle_factor: float = 0.3
    power_limit_w: float = field(default=80.0)

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not is_finite_number(value):
                raise ConfigError(f"reward config '{name}' must be a finite number, got {value!r}")
        if not 0.0 < self.band_low < self.band_high:
            raise ConfigError(f"reward config needs 0 < band_low < band_high, got {self.band_low}, {self.band_high}")
        if self.overshoot_slope <= 0:
            raise ConfigError(f"reward config 'overshoot_slope' must be > 0, got {self.overshoot_slope}")
        if not 0.0 <= self.energy_weight <= 1.0:
            raise ConfigError(f"reward config 'energy_weight' must be in [0, 1], got {self.energy_weight}")
        if self.speedup_scale <= 0:
            raise ConfigError(f"reward config 'speedup_scale' must be > 0, got {self.speedup_scale}")
        if self.warm_temp_c > self.hot_temp_c:
            raise ConfigError(
                f"reward config needs warm_temp_c <= hot_temp_c, got {self.warm_temp_c}, {self.hot_temp_c}"
            )
        for name in ("warm_factor", "hot_factor", "throttle_factor"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"reward config '{name}' must be in [0, 1], got {getattr(self, name)}")
        if self.power_limit_w <= 0:
            raise ConfigError(f"reward config 'power_limit_w' must be > 0 W, got {self.power_limit_w}")


@dataclass(frozen=True)
class RewardParts:
    """The parts of one row's reward.

    Attributes:
        energy_utilization: average power / power limit (``None`` when no energy was measured).
        band_score: in [0, 1] (``None`` when no energy was measured).
        throughput_score: in [0, 1].
        thermal_multiplier: in [0, 1].
        reward: in [0, 1]; 0 for an error row.
        energy_measured: False when the reward had to be computed from throughput alone.
    """

    energy_utilization: float | None
    band_score: float | None
    throughput_score: float
    thermal_multiplier: float
    reward: float
    energy_measured: bool = True

    @property
    def in_band(self) -> bool | None:
        """True when the utilisation is inside the band (band score exactly 1)."""
        return None if self.band_score is None else self.band_score >= 1.0


def energy_utilization(avg_power_w: float, power_limit_w: float) -> float:
    """Average power over the power limit, both in W (dimensionless, may exceed 1).

    Raises:
        ConfigError: ``power_limit_w <= 0`` or a negative power.
    """
    if power_limit_w <= 0:
        raise ConfigError(f"power limit must be > 0 W, got {power_limit_w}")
    if avg_power_w < 0:
        raise ConfigError(f"average power must be >= 0 W, got {avg_power_w}")
    return avg_power_w / power_limit_w


def band_score(utilization: float, config: RewardConfig = RewardConfig()) -> float:
    """1 inside ``[band_low, band_high]``, ``u / band_low`` below, linear fall to 0 above."""
    if utilization < config.band_low:
        return max(0.0, utilization / config.band_low)
    if utilization <= config.band_high:
        return 1.0
    return max(0.0, 1.0 - (utilization - config.band_high) * config.overshoot_slope)


def throughput_score(speed_tok_s: float, baseline_speed_tok_s: float, config: RewardConfig = RewardConfig()) -> float:
    """``clip((speed / baseline - 1) / speedup_scale, 0, 1)``; speeds in tokens/s.

    Raises:
        ConfigError: a non-positive baseline speed.
    """
    if baseline_speed_tok_s <= 0:
        raise ConfigError(f"baseline speed must be > 0 tok/s, got {baseline_speed_tok_s}")
    value = (speed_tok_s / baseline_speed_tok_s - 1.0) / config.speedup_scale
    return min(1.0, max(0.0, value))


def thermal_multiplier(
    gpu_temp_c: float | None, gpu_throttling: bool | None, config: RewardConfig = RewardConfig()
) -> float:
    """Penalty for heat: ``hot_factor`` above ``hot_temp_c``, else ``warm_factor`` above
    ``warm_temp_c``, times ``throttle_factor`` when throttled. Unknown values cost nothing."""
    factor = 1.0
    if gpu_temp_c is not None:
        if gpu_temp_c > config.hot_temp_c:
            factor = config.hot_factor
        elif gpu_temp_c > config.warm_temp_c:
            factor = config.warm_factor
    if gpu_throttling:
        factor *= config.throttle_factor
    return factor


def compute_reward(
    *,
    speed_tok_s: float | None,
    baseline_speed_tok_s: float,
    utilization: float | None,
    gpu_temp_c: float | None = None,
    gpu_throttling: bool | None = None,
    error: bool = False,
    config: RewardConfig = RewardConfig(),
) -> RewardParts:
    """Reward of one row and its parts.

    Args:
        speed_tok_s: decode speed of the row (tokens/s per request), ``None`` for an error row.
        baseline_speed_tok_s: speed of the ``(0, 0, 0)`` row of the same batch size.
        utilization: average power / power limit; ``None`` when no energy was measured (e.g.
            rows imported from sglang's bench_speculative.py), in which case the reward is
            ``clip(throughput * thermal, 0, 1)`` and ``energy_measured`` is False.
        gpu_temp_c: GPU temperature after the run, C.
        gpu_throttling: whether power/thermal/slowdown throttling was seen.
        error: the run failed; reward 0.
        config: reward constants.

    Raises:
        ConfigError: a non-positive baseline speed.
    """
    if error or speed_tok_s is None:
        return RewardParts(utilization, None if utilization is None else 0.0, 0.0, 0.0, 0.0, utilization is not None)
    tput = throughput_score(speed_tok_s, baseline_speed_tok_s, config)
    thermal = thermal_multiplier(gpu_temp_c, gpu_throttling, config)
    if utilization is None:
        return RewardParts(None, None, tput, thermal, min(1.0, max(0.0, tput * thermal)), False)
    band = band_score(utilization, config)
    w = config.energy_weight
    value = (band**w) * (tput ** (1.0 - w)) * thermal
    return RewardParts(utilization, band, tput, thermal, min(1.0, max(0.0, value)), True)


#: The energy band of the reward (:class:`specband.contract.reward.RewardConfig` defaults), fractions of the limit.
BAND_LOW = 0.95
BAND_HIGH = 0.98


def band_status(utilization: float | None, low: float = BAND_LOW, high: float = BAND_HIGH) -> dict[str, Any]:
    """``{"status": "in"|"below"|"above"|"unknown", "by": fraction outside the band (0 inside),
    "low": low, "high": high}`` for a utilisation (fraction of the power limit)."""
    if utilization is None:
        return {"status": "unknown", "by": None, "low": low, "high": high}
    if utilization < low:
        return {"status": "below", "by": round(low - utilization, 4), "low": low, "high": high}
    if utilization > high:
        return {"status": "above", "by": round(utilization - high, 4), "low": low, "high": high}
    return {"status": "in", "by": 0.0, "low": low, "high": high}
