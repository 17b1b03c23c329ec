"""A performance model under a power limit other than its GPU's default (``nvidia-smi -pl W``).

The limit is applied on top of whatever power the model predicts, as DVFS does: where the
demand exceeds the new limit the clock is lowered until the power fits, and the part of the
step that scales with the clock slows down. Power never exceeds the limit.

* A :class:`~specband.sim.model.SpeculativeDecodingModel` runs its own power-capping search
  (its clock-dependent power and roofline, :meth:`~specband.sim.model.SpeculativeDecodingModel.predict`)
  against the new limit, with its demand kept (``activity_power_w`` pinned to the default
  headroom, as ``nvidia-smi -pl`` keeps the work) and no steady overshoot (``cap_tracking`` 0).
* Any other model: its prediction is the demand; the clock fraction is
  ``f = ((limit - idle) / (demand - idle)) ** (1 / g)`` (power above idle ~ ``f ** g``, ``g``
  the profile's ``clock_exponent``, 2 by default) and the step time ``t_fixed + t_clock / f``
  (``t_clock`` the compute-bound share, from ``step_cost`` when the model has it, else the
  whole busy share: the pessimistic end).
* Either way, where the lowest clock still draws more than the limit (the memory-bound floor),
  the GPU is taken to throttle further at the same energy per step: the power is the limit and
  the speed scales by ``(limit - idle) / (power - idle)``.

These are assumptions, not measurements; rows simulated under them carry the profile's power
label (:mod:`specband.sim.power`). :func:`limited_power_w` is the power rule alone;
:func:`with_power_limit` wraps a model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from specband.core.errors import ConfigError
from specband.devices.power_limit import PowerLimitRange, parse_power_limits, resolve_power_limits
from specband.sim.model import SpeculativeDecodingModel
from specband.sim.power import prefill_power_w

__all__ = [
    "MIN_LIMIT_FRACTION",
    "PowerLimitedModel",
    "clock_fraction_at_limit",
    "limited_power_w",
    "model_power_limit_range",
    "prefill_burst",
    "resolve_model_power_limits",
    "with_power_limit",
]

#: Lowest limit of a simulated or emulated GPU, fraction of its profile's limit (an H100 SXM's
#: NVML range, as ``nvidia-smi -q -d POWER`` reports it, is 200-700 W: 2/7 of its default; a
#: profile holds no NVML constraint, so every profile takes that fraction, an assumption for the
#: others), and never at or below idle power.
MIN_LIMIT_FRACTION = 2.0 / 7.0


def model_power_limit_range(model: Any) -> PowerLimitRange:
    """The limits a simulated GPU accepts: its profile's limit is the default and the highest
    (``model.power_limit_w``, W); the lowest is :data:`MIN_LIMIT_FRACTION` of it, above
    ``model.idle_power_w`` + 1 W."""
    inner = model.inner if isinstance(model, PowerLimitedModel) else model
    default = float(inner.power_limit_w)
    low = max(MIN_LIMIT_FRACTION * default, float(inner.idle_power_w) + 1.0)
    return PowerLimitRange(default, min(low, default), default)


def limited_power_w(demand_w: float, limit_w: float) -> float:
    """Board power under a limit: the demand, never above the limit, W."""
    return min(float(demand_w), float(limit_w))


def clock_fraction_at_limit(
    demand_w: float, idle_w: float, limit_w: float, clock_exponent: float = 2.0, min_clock: float = 0.3
) -> float:
    """The clock fraction at which a demand of ``demand_w`` (at full clock) fits ``limit_w``.

    Args:
        demand_w: power at full clock, W.
        idle_w: power that does not scale with the clock, W.
        limit_w: the limit, W.
        clock_exponent: ``g`` of ``power - idle ~ f ** g``.
        min_clock: the lowest clock fraction the GPU goes to.

    Returns:
        1.0 when the demand fits, else ``((limit - idle) / (demand - idle)) ** (1 / g)``,
        at least ``min_clock``.
    """
    if demand_w <= limit_w:
        return 1.0
    if limit_w <= idle_w:
        return min_clock
    return max(min_clock, ((limit_w - idle_w) / (demand_w - idle_w)) ** (1.0 / clock_exponent))


class PowerLimitedModel:
    """``model`` run under ``limit_w`` (see the module docstring); satisfies the same
    protocol (:class:`~specband.sim.base.PerformanceModel`), delegating everything else.

    Args:
        model: the performance model (its ``power_limit_w`` is the GPU's default limit).
        limit_w: the limit, W, above the model's idle power.

    Raises:
        ConfigError: a limit that is not a finite number above idle power.
    """

    inner: Any
    limit_w: float

    def __init__(self, model: Any, limit_w: float) -> None:
        if isinstance(model, PowerLimitedModel):
            model = model.inner
        idle = float(model.idle_power_w)
        if not (isinstance(limit_w, (int, float)) and math.isfinite(limit_w) and limit_w > idle):
            raise ConfigError(
                f"power limit must be a number of W above the GPU's idle power ({idle:g} W), got {limit_w!r}"
            )
        self.inner = model
        self.limit_w = float(limit_w)
        self._own: Any = None
        profile: Any = getattr(model, "profile", None)

        if isinstance(model, SpeculativeDecodingModel) and hasattr(profile, "with_values"):
            import copy

            # the same model (pair, acceptance and workload kept) on a profile at the new limit
            self._own = copy.copy(model)
            self._own.profile = profile.with_values(
                power_limit_w=self.limit_w, activity_power_w=profile.activity_scale_w, cap_tracking=0.0
            )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def power_limit_w(self) -> float:
        """The limit in force, W."""
        return self.limit_w

    @property
    def default_power_limit_w(self) -> float:
        """The GPU's default limit (the wrapped model's), W."""
        return float(self.inner.power_limit_w)

    def _clock_share(self, batch_size: int, action: Any, busy_pct: float) -> float:
        cost_fn = getattr(self.inner, "step_cost", None)
        if cost_fn is None:
            return max(0.0, min(1.0, busy_pct / 100.0))
        cost = cost_fn(batch_size, action)
        step = cost.kernel_time_s + cost.host_time_s
        return 0.0 if step <= 0 else max(0.0, min(1.0, cost.compute_time_s / step))

    def predict(self, batch_size: int, action: Any, gpu_temp_c: float, mem_fraction_static: float = 0.65) -> Any:
        """The wrapped model's prediction with the limit applied (power <= limit; a slower
        step where the demand exceeded it; ``power_capped`` then True)."""
        if self._own is not None:
            return self._floor(self._own.predict(batch_size, action, gpu_temp_c, mem_fraction_static))
        pred = self.inner.predict(batch_size, action, gpu_temp_c, mem_fraction_static)
        demand = float(pred.avg_power_w)
        if demand <= self.limit_w:
            return dataclasses.replace(pred, power_limit_w=self.limit_w)
        profile = getattr(self.inner, "profile", None)
        g = float(getattr(profile, "clock_exponent", 2.0))
        floor = float(getattr(profile, "min_clock_fraction", 0.3))
        idle = float(self.inner.idle_power_w)
        f = clock_fraction_at_limit(demand, idle, self.limit_w, g, floor)
        share = self._clock_share(batch_size, action, float(pred.gpu_util_pct))
        scale = (1.0 - share) + share / f  # step time at clock f / step time at full clock
        step = pred.step_time_s * scale
        busy_frac = min(1.0, pred.gpu_util_pct / 100.0)
        busy = (max(busy_frac, share) - share + share / f) / scale  # kernels stretch, host time does not
        return self._floor(
            dataclasses.replace(
                pred,
                step_time_s=step,
                speed_tok_s=pred.accept_length / step,
                avg_power_w=self.limit_w if f > floor else idle + (demand - idle) * f**g,
                power_limit_w=self.limit_w,
                gpu_util_pct=100.0 * min(1.0, busy),
                power_capped=True,
                clock_fraction=float(pred.clock_fraction) * f,
            )
        )

    def _floor(self, pred: Any) -> Any:
        """Power above the limit at the lowest clock: throttle at the same energy per step."""
        power = float(pred.avg_power_w)
        if power <= self.limit_w:
            return dataclasses.replace(pred, power_limit_w=self.limit_w)
        idle = float(self.inner.idle_power_w)
        scale = (self.limit_w - idle) / (power - idle) if power > idle else 1.0
        step = pred.step_time_s / scale
        return dataclasses.replace(
            pred,
            step_time_s=step,
            speed_tok_s=pred.accept_length / step,
            avg_power_w=self.limit_w,
            power_limit_w=self.limit_w,
            power_capped=True,
        )


def with_power_limit(model: Any, limit_w: float | None) -> Any:
    """``model`` under ``limit_w`` (a :class:`PowerLimitedModel`), or ``model`` itself when
    ``limit_w`` is ``None`` or its own limit.

    Raises:
        ConfigError: as :class:`PowerLimitedModel`.
    """
    inner = model.inner if isinstance(model, PowerLimitedModel) else model
    if limit_w is None or math.isclose(float(limit_w), float(inner.power_limit_w), abs_tol=5e-4):
        return inner
    return PowerLimitedModel(inner, limit_w)


def resolve_model_power_limits(model: Any, text: str) -> tuple[tuple[float, ...], tuple[str, ...]]:
    """``--power-limits`` of ``simulate`` in watts, clamped to :func:`model_power_limit_range`,
    and a note per clamped value.

    Raises:
        ConfigError: a bad list (:func:`~specband.devices.power_limit.parse_power_limits`).
    """

    return resolve_power_limits(parse_power_limits(text), model_power_limit_range(model))


def prefill_burst(model: Any, tokens: int) -> tuple[float, float, bool] | None:
    """One prefill forward of ``tokens`` prompt tokens on ``model``'s GPU under its limit: its
    time (s), its board power (W) and whether the limit held it (True: throttled).

    The forward is the target's over ``tokens`` tokens of one context (attention over half the
    prompt on average), compute-bound (:func:`specband.sim.power.prefill_power_w`'s forward),
    plus the step's base host time. Under a limit below its demand the clock falls as in
    :class:`PowerLimitedModel` (the compute-bound share of the time stretches by the clock
    fraction; at the lowest clock the GPU throttles further at the same energy).

    Returns:
        ``(seconds, power_w, throttled)``, or ``None`` for a model without the roofline (a
        user's ``module:function`` model).
    """
    inner = model.inner if isinstance(model, PowerLimitedModel) else model
    if not isinstance(inner, SpeculativeDecodingModel) or tokens < 1:
        return None
    n = int(tokens)
    demand = prefill_power_w(inner, n)
    _b, _f, t_mem, t_cmp = inner._forward_work(inner.target, 1, n, n / 2.0)
    kernel, compute = inner._kernel_time((("prefill", n, t_mem, t_cmp),), 1.0)
    host = inner.profile.host_overhead_base_s
    seconds = kernel + host
    limit = float(model.power_limit_w)
    if demand <= limit:
        return seconds, demand, False
    p = inner.profile
    idle = float(inner.idle_power_w)
    f = clock_fraction_at_limit(demand, idle, limit, float(p.clock_exponent), float(p.min_clock_fraction))
    seconds = (kernel - compute) + compute / f + host
    power = idle + (demand - idle) * f ** float(p.clock_exponent)
    if power > limit:
        seconds *= (power - idle) / (limit - idle) if limit > idle else 1.0
    return seconds, min(power, limit), True
