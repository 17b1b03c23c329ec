"""The governor replayed in simulation over a batch-size trace, beside the two ways of serving
it without one (``benchmarks/bench_govern.py``); every figure here is SIMULATED.

A trace (:func:`read_trace`) gives the server's running batch size second by second. Each
second, a strategy runs a config at a limit; the simulator says what the GPU draws and decodes
(:func:`serving_at_limit`): the serving power of that config at that batch size (prefill mixed
in, :func:`specband.govern.firstguess.planned_power_w`) and its decode speed, both cut where the
power exceeds the limit (the clock falls until the power fits: the compute-bound share of the
step stretches, :func:`specband.sim.power_capped.clock_fraction_at_limit`; at the lowest clock
the GPU throttles further at the same energy). The strategies (:func:`replay`):

* ``default``: the GPU's default limit with the engine's default speculation (sglang's
  ``--speculative-adaptive`` default tiers, run to their steady state,
  :func:`specband.evaluation.baselines.settle_adaptive`; an alternation is averaged);
* ``one-limit``: the plan's flags per tier with one limit for the whole trace: the lowest limit
  whose trace-weighted speed is within :data:`~specband.core.limits.DEFAULT_MAX_SPEED_LOSS` of
  the fastest (specband's rule for a limit, ``recommend --power-limits``);
* ``governor``: the plan's flags, and the limit moved by the governor's own controller
  (:class:`~specband.govern.controller.BandController`) fed the simulated power with a 1 %
  seeded noise, one reading a second.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.contract.actions import chain_action
from specband.core.errors import DataError
from specband.core.limits import DEFAULT_MAX_SPEED_LOSS, MAX_BATCH_SIZE, is_finite_number
from specband.engines.schedule_files import SGLANG_DEFAULT_ADAPTIVE_CONFIG
from specband.evaluation.baselines import settle_adaptive
from specband.files.fileio import read_text_bounded
from specband.govern.controller import BandController, ControlSettings, GpuRange, GpuReading, TierTracker
from specband.govern.firstguess import planned_power_w
from specband.govern.ledger import SlidingUtilization
from specband.govern.plan import GovernorPlan
from specband.sim.power_capped import clock_fraction_at_limit

__all__ = ["ReplayResult", "read_trace", "replay", "serving_at_limit"]

#: Largest trace read: 16 MiB (a day at one row a second is ~1.3 MB).
MAX_TRACE_BYTES = 16 << 20


def read_trace(path: str | Path) -> list[tuple[float, int]]:
    """A batch-size trace: CSV with a header ``t_s,batch_size`` and one row per reading,
    times increasing. ``#`` lines are comments (the trace's source).

    Raises:
        DataError: unreadable, too large, a bad row (naming the line).
    """
    name = str(path)
    try:
        text = read_text_bounded(path, limit=MAX_TRACE_BYTES, kind="batch-size trace", error=DataError)
    except OSError as exc:
        raise DataError(f"cannot read ({exc.strerror or exc})", path=name) from None
    rows: list[tuple[float, int]] = []
    lines = [(i, ln.strip()) for i, ln in enumerate(text.splitlines(), 1) if ln.strip() and not ln.startswith("#")]
    if not lines or lines[0][1].replace(" ", "") != "t_s,batch_size":
        raise DataError("expected the header t_s,batch_size", path=name, line=lines[0][0] if lines else 1)
    for i, line in lines[1:]:
        parts = line.split(",")
        try:
            t, bs = float(parts[0]), int(parts[1])
        except (ValueError, IndexError):
            raise DataError(f"expected t_s,batch_size, got {line[:60]!r}", path=name, line=i) from None
        if len(parts) != 2 or not is_finite_number(t) or not 0 <= bs <= MAX_BATCH_SIZE or (rows and t <= rows[-1][0]):
            raise DataError(f"a bad or out-of-order row {line[:60]!r}", path=name, line=i)
        rows.append((t, bs))
    if len(rows) < 2:
        raise DataError("a trace needs at least two rows", path=name)
    return rows


def _compute_share(model: Any, bs: int, action: tuple[int, int, int]) -> float:
    cost = model.step_cost(bs, action)
    step = cost.kernel_time_s + cost.host_time_s
    return 0.0 if step <= 0 else max(0.0, min(1.0, cost.compute_time_s / step))


def serving_at_limit(model: Any, bs: int, action: tuple[int, int, int], limit_w: float) -> tuple[float, float, bool]:
    """``(power W, tok/s of all requests, throttled)`` of a server at ``bs`` running ``action``
    under ``limit_w`` (module docstring)."""
    demand, _ = planned_power_w(model, bs, action)
    speed = model.predict(bs, action, model.profile.reference_temp_c).speed_tok_s * bs
    if demand <= limit_w:
        return demand, speed, False
    p, idle = model.profile, float(model.idle_power_w)
    f = clock_fraction_at_limit(demand, idle, limit_w, p.clock_exponent, p.min_clock_fraction)
    share = _compute_share(model, bs, action)
    slow = (1.0 - share) + share / f
    power = idle + (demand - idle) * f**p.clock_exponent
    if power > limit_w:
        slow *= (power - idle) / (limit_w - idle) if limit_w > idle else 1.0
    return min(power, limit_w), speed / slow, True


@dataclass
class ReplayResult:
    """One strategy over one trace (SIMULATED)."""

    label: str
    busy_s: float = 0.0
    in_band_s: float = 0.0
    reachable_s: float = 0.0
    reachable_in_band_s: float = 0.0
    reachable_in_band_window_s: float = 0.0
    throttled_s: float = 0.0
    energy_j: float = 0.0
    tokens: float = 0.0
    limits: str = ""

    @property
    def in_band_of_reachable(self) -> float | None:
        """Time in band over the busy time where the band is reachable."""
        return None if self.reachable_s <= 0 else self.reachable_in_band_s / self.reachable_s

    @property
    def window_in_band_of_reachable(self) -> float | None:
        """As :attr:`in_band_of_reachable`, the utilisation taken over the governor's window."""
        return None if self.reachable_s <= 0 else self.reachable_in_band_window_s / self.reachable_s

    @property
    def joules_per_token(self) -> float | None:
        """Energy over tokens (busy time only)."""
        return None if self.tokens <= 0 else self.energy_j / self.tokens

    @property
    def tok_s(self) -> float | None:
        """Tokens over busy seconds."""
        return None if self.busy_s <= 0 else self.tokens / self.busy_s


def _default_actions(model: Any) -> Callable[[int], list[tuple[int, int, int]]]:
    """sglang's default adaptive tiers at their steady state, per batch size."""
    tiers = sorted((int(k), v) for k, v in SGLANG_DEFAULT_ADAPTIVE_CONFIG.items())
    cache: dict[int, list[tuple[int, int, int]]] = {}

    def accepted(steps: int) -> float:
        return float(model.accept_length(chain_action(steps))) - 1.0

    def actions(bs: int) -> list[tuple[int, int, int]]:
        key = max(k for k, _ in tiers if k <= bs)
        if key not in cache:
            cycle, _ = settle_adaptive(dict(tiers)[key], 3, accepted)
            cache[key] = [tuple(chain_action(s)) for s in cycle]  # type: ignore[misc]
        return cache[key]

    return actions


def _account(
    result: ReplayResult,
    power: float,
    tokens: float,
    limit: float,
    span: tuple[float, float],
    demand: float,
    rng: GpuRange,
    band: tuple[float, float],
    throttled: bool,
    window: SlidingUtilization,
) -> None:
    dt = span[1] - span[0]
    result.busy_s += dt
    result.energy_j += power * dt
    result.tokens += tokens * dt
    u = power / limit
    wide = window.add(span[0], span[1], power * dt, limit)
    in_band = band[0] <= u <= band[1]
    reachable = demand >= band[0] * rng.min_w and demand <= band[1] * rng.max_w
    result.in_band_s += dt if in_band else 0.0
    result.throttled_s += dt if throttled else 0.0
    if reachable:
        result.reachable_s += dt
        result.reachable_in_band_s += dt if in_band else 0.0
        result.reachable_in_band_window_s += dt if band[0] <= wide <= band[1] else 0.0


def _mean_at(
    model: Any, bs: int, actions: Sequence[tuple[int, int, int]], limit: float
) -> tuple[float, float, bool, float]:
    runs = [serving_at_limit(model, bs, a, limit) for a in actions]
    demand = sum(planned_power_w(model, bs, a)[0] for a in actions) / len(actions)
    return (sum(r[0] for r in runs) / len(runs), sum(r[1] for r in runs) / len(runs), any(r[2] for r in runs), demand)


def one_limit(
    model: Any, plan: GovernorPlan, trace: Sequence[tuple[float, int]], rng: GpuRange, step_w: float = 5.0
) -> float:
    """The lowest limit whose trace-weighted speed with the plan's flags is within
    :data:`~specband.core.limits.DEFAULT_MAX_SPEED_LOSS` of the fastest (module docstring)."""
    weights: dict[int, float] = {}
    for (t0, bs), (t1, _) in itertools.pairwise(trace):
        if bs > 0:
            weights[bs] = weights.get(bs, 0.0) + (t1 - t0)
    limits = [rng.min_w + i * step_w for i in range(int((rng.max_w - rng.min_w) / step_w) + 1)] + [rng.max_w]

    def speed(limit: float) -> float:
        return sum(w * serving_at_limit(model, bs, _plan_action(plan, bs), limit)[1] for bs, w in weights.items())

    fastest = speed(rng.max_w)
    return next(lim for lim in limits if speed(lim) >= (1.0 - DEFAULT_MAX_SPEED_LOSS) * fastest)


def _plan_action(plan: GovernorPlan, bs: int) -> tuple[int, int, int]:
    tier = plan.tier_index(bs)
    return plan.tiers[tier if tier is not None else 0].action


def replay(
    model: Any,
    plan: GovernorPlan,
    trace: Sequence[tuple[float, int]],
    strategy: str,
    *,
    settings: ControlSettings | None = None,
    seed: int = 0,
    lag: int = 1,
) -> ReplayResult:
    """Replay ``trace`` under ``strategy`` (``default``, ``one-limit`` or ``governor``; module
    docstring) on ``model`` (the plan's profile and pair). The governor acts on the batch size
    it read ``lag`` rows before (one reading late: it sets a limit for the second that follows a
    reading, whose batch size may have moved meanwhile)."""
    rng = GpuRange(plan.gpu.min_limit_w, plan.gpu.max_limit_w)
    band = plan.band
    result = ReplayResult(strategy)
    default_actions = _default_actions(model)
    limit = rng.max_w
    if strategy == "one-limit":
        limit = one_limit(model, plan, trace, rng)
        result.limits = f"{limit:g} W"
    settings = settings or ControlSettings(band_low=band[0], band_high=band[1], max_step_w=0.1 * rng.max_w)
    controller = BandController(settings, rng, [t.power_limit_w for t in plan.tiers], rng.max_w)
    tracker = TierTracker(plan.tier_index, settings.switch_readings)
    noise = random.Random(seed)
    window = SlidingUtilization(settings.window_s)
    energy_mj = 0.0
    for k, ((t0, bs), (t1, _)) in enumerate(itertools.pairwise(trace)):
        dt = t1 - t0
        if strategy == "governor":
            tier, switched = tracker.observe(trace[max(0, k - lag)][1])
            if switched:
                controller.enter(tier, t0)
            limit = controller.current_w
        if bs <= 0:
            energy_mj += float(model.idle_power_w) * dt * 1000.0
            continue
        actions = default_actions(bs) if strategy == "default" else [_plan_action(plan, bs)]
        power, tokens, throttled, demand = _mean_at(model, bs, actions, limit)
        _account(result, power, tokens, limit, (t0, t1), demand, rng, band, throttled, window)
        if strategy == "governor":
            read = min(limit, power * math.exp(0.01 * noise.gauss(0.0, 1.0)))
            energy_mj += read * dt * 1000.0
            controller.observe(GpuReading(t1, read, energy_mj, limit))
    if strategy == "governor":
        result.limits = ", ".join(f"{t.label}: {controller.limit_for(i):g} W" for i, t in enumerate(plan.tiers))
    return result
