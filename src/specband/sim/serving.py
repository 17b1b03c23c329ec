"""Serving power: what a GPU draws under a server (continuous batching, prefills mixed in).

A sweep measures a decode window (a few short prompts, then 512 tokens of decode); a server
under continuous batching keeps ``bs`` requests running, and every request that finishes is
replaced by one that needs its prompt prefilled. :func:`serving_estimate` models one average
step of such a server, for a batch size, a speculative config and a workload's mean prompt and
output lengths (:class:`ServingWorkload`), and prices it with the profile's power model:

* **decode** (first principles, the model's own step): the draft and verify forwards of
  :meth:`~specband.sim.model.SpeculativeDecodingModel.step_cost`, with the KV cache of the
  running requests at the workload's mean context ``prompt + output / 2`` (requests are
  uniformly spread over their output);
* **arrivals** (first principles): a request leaves after ``output / a`` steps (``a`` the accept
  length: tokens per request per step, 1 without speculation), so at steady state
  ``bs x a / output`` requests start per step, each bringing ``prompt`` tokens of prefill:
  ``bs x a x prompt / output`` prefill tokens per step;
* **mix** (assumed): the prefill tokens ride in the target's forward (chunked prefill, vLLM's
  default and sglang's ``--enable-mixed-chunk``), adding their FLOPs (dense and attention over
  half the prompt) to that forward's roofline, not a second read of the weights;
* **power** (fitted, one parameter per GPU class): the profile's activity model
  (:mod:`specband.sim.model`: a busy term, a bandwidth term and a FLOP term, fractions of the
  idle-to-limit headroom) with the busy term of a GPU kept busy by a server,
  ``serving_busy_power_frac``, fitted to ML.ENERGY's serving measurements (H100 SXM, vLLM,
  Llama-3.1-8B at 8, 32 and 128 sequences; the other batch sizes are held out,
  :mod:`specband.sim.published`); the bandwidth and FLOP fractions are the decode-window fit's;
* **the limit** (the model's DVFS rule): above the limit the clock drops until the power holds
  (the limit's demand kept, as ``nvidia-smi -pl`` keeps the work), which lengthens the
  compute-bound part of the step; where even the lowest clock draws more, the GPU throttles
  further at the same energy per step.

Why a busy term of its own: ML.ENERGY's H100 draws 486 W at 8 sequences, where the step's
work (16 GB of weights read in ~7 ms, prefill ~1 % of the FLOPs for chat prompts) is worth
~100 W above idle by the decode-window fit (fitted to an H200 study of pure decode, 137-300 W);
the two sources disagree on what a busy GPU draws at small batch sizes, and the serving figures
are held to the serving measurements. A profile without its own serving fit (no
``serving_power_source``) takes the calibration of the nearest measured GPU class
(:func:`nearest_measured_class`), its fractions applied to its own idle-to-limit headroom, and
says so.

Every figure of a :class:`ServingEstimate` is simulated; its power interval is the held-out
error of the calibration (``serving_power_rel_sd``), or :data:`BORROWED_SERVING_SD` for a
borrowed one.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from specband.contract.actions import Action, as_action
from specband.core.errors import ConfigError
from specband.core.limits import is_finite_number
from specband.sim.model import SpeculativeDecodingModel, StepCost
from specband.sim.profile import HardwareProfile, builtin_profiles, load_profile
from specband.sim.speed_interval import Z95, speed_interval

__all__ = [
    "BORROWED_SERVING_SD",
    "DEFAULT_OUTPUT_TOKENS",
    "DEFAULT_PROMPT_TOKENS",
    "DEFAULT_WORKLOAD",
    "ServingCalibration",
    "ServingEstimate",
    "ServingStep",
    "ServingWorkload",
    "nearest_measured_class",
    "serving_calibration",
    "serving_estimate",
    "serving_step",
]

#: Mean prompt tokens of the default workload: chat prompts (LM Arena's, which ML.ENERGY's
#: ``lm-arena-chat`` serves: median ~16, mean ~54 words) plus the Llama 3 chat template's header
#: tokens; an assumption, not a measurement of ML.ENERGY's requests.
DEFAULT_PROMPT_TOKENS = 100.0
#: Mean output tokens of the default workload: ML.ENERGY Leaderboard v3, Text Conversation
#: (``lm-arena-chat``), mean 717 output tokens per response (the v3.0 blog post, B200
#: minimum-energy configurations).
DEFAULT_OUTPUT_TOKENS = 717.0
#: Largest prompt or output length accepted, tokens (a 1M-token context).
MAX_WORKLOAD_TOKENS = 1_000_000.0
#: Relative sd of the serving power of a GPU class no serving measurement holds, whose
#: calibration is borrowed: 10 %, the issue's tolerance on held-out batch sizes (stated, not fitted).
BORROWED_SERVING_SD = 0.10
_DEFAULT_SOURCE = (
    f"default chat workload: {DEFAULT_PROMPT_TOKENS:g} prompt tokens (assumed, LM Arena prompts), "
    f"{DEFAULT_OUTPUT_TOKENS:g} output tokens (ML.ENERGY v3 Text Conversation mean)"
)


@dataclass(frozen=True)
class ServingWorkload:
    """A server's workload: the mean lengths of its requests.

    Attributes:
        prompt_tokens: mean input tokens per request (``>= 1``).
        output_tokens: mean output tokens per request (``>= 1``).
        source: where the lengths come from (an option, a probe, the default's sources).

    Raises:
        ConfigError: a length that is not a finite number in ``[1, MAX_WORKLOAD_TOKENS]``,
            naming the field.
    """

    prompt_tokens: float = DEFAULT_PROMPT_TOKENS
    output_tokens: float = DEFAULT_OUTPUT_TOKENS
    source: str = _DEFAULT_SOURCE

    def __post_init__(self) -> None:
        for name in ("prompt_tokens", "output_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not is_finite_number(value) or not 1 <= value <= MAX_WORKLOAD_TOKENS:
                raise ConfigError(
                    f"serving workload: {name} must be a number of tokens in [1, {MAX_WORKLOAD_TOKENS:g}], "
                    f"got {value!r}"
                )
            object.__setattr__(self, name, float(value))

    @property
    def context_tokens(self) -> float:
        """Mean context of a running request, tokens: the prompt and half the output."""
        return self.prompt_tokens + self.output_tokens / 2.0

    def describe(self) -> str:
        """``"P prompt / O output tokens (SOURCE)"``."""
        return f"{self.prompt_tokens:g} prompt / {self.output_tokens:g} output tokens ({self.source})"


DEFAULT_WORKLOAD = ServingWorkload()


@dataclass(frozen=True)
class ServingStep:
    """One average step of a server at full clock.

    Attributes:
        cost: the step's work (decode and the prefill fused into the target's forward).
        accept_length: tokens per request per step.
        prefill_tokens: prefill tokens per step, ``bs x a x prompt / output``.
        prefill_time_share: share of the step's kernel time the prefill adds.
    """

    cost: StepCost
    accept_length: float
    prefill_tokens: float
    prefill_time_share: float


def serving_step(
    model: SpeculativeDecodingModel,
    batch_size: int,
    action: Action | Sequence[int],
    workload: ServingWorkload = DEFAULT_WORKLOAD,
) -> ServingStep:
    """The average step of a server (see the module docstring), at full clock.

    Raises:
        ConfigError: a bad batch size; InvalidActionError: a bad action.
    """
    act = as_action(action)
    cost = model.step_cost(batch_size, act, context_tokens=workload.context_tokens)
    accept = model.accept_length(act)
    tokens = batch_size * accept * workload.prompt_tokens / workload.output_tokens
    target = model.target
    flops = tokens * (target.dense_flops_per_token + (workload.prompt_tokens / 2.0) * target.attn_flops_per_token_ctx)
    _t_mem, t_cmp = model._times(0.0, flops)
    forwards = list(cost.forwards)
    # the target's forward is the last one (the verify, or the decode without speculation)
    label, n, t_mem, t_c = forwards[-1]
    forwards[-1] = (label, n + round(tokens), t_mem, t_c + t_cmp)
    kernel, compute = model._kernel_time(forwards, 1.0)
    mixed = StepCost(cost.bytes_moved, cost.flops + flops, kernel, compute, cost.host_time_s, tuple(forwards))
    share = (kernel - cost.kernel_time_s) / kernel if kernel > 0 else 0.0
    return ServingStep(mixed, accept, tokens, share)


# ----------------------------------------------------------------------------- calibration


@dataclass(frozen=True)
class ServingCalibration:
    """The power fractions a profile's serving figures use.

    Attributes:
        profile: the profile priced.
        busy_power_frac, mem_power_frac, compute_power_frac: the activity fractions (of the
            profile's own idle-to-limit headroom).
        rel_sd: relative sd of the serving power (held-out error, or :data:`BORROWED_SERVING_SD`).
        borrowed_from: the measured class the fractions come from, ``None`` for the profile's own.
        label: one line: what the calibration was fitted to, or whose it borrows.
    """

    profile: str
    busy_power_frac: float
    mem_power_frac: float
    compute_power_frac: float
    rel_sd: float
    borrowed_from: str | None
    label: str


@lru_cache(maxsize=1)
def _measured_classes() -> tuple[HardwareProfile, ...]:
    return tuple(p for p in (load_profile(n) for n in builtin_profiles()) if p.serving_power_source)


def _distance(a: HardwareProfile, b: HardwareProfile) -> float:
    keys = ("power_limit_w", "mem_bandwidth_gbs", "peak_tflops")
    return math.sqrt(sum(math.log(getattr(a, k) / getattr(b, k)) ** 2 for k in keys))


def nearest_measured_class(
    profile: HardwareProfile, candidates: Sequence[HardwareProfile] | None = None
) -> HardwareProfile | None:
    """The measured GPU class closest to ``profile``: the smallest distance of the logs of
    (power limit, memory bandwidth, peak tensor throughput).

    Args:
        profile: the profile that lacks a measurement.
        candidates: the measured classes to choose from (default: the built-in profiles with a
            serving fit, ``serving_power_source``); ``profile`` itself (by name) is never chosen.

    Returns:
        the nearest candidate (ties: the first name in alphabetical order), or ``None``.
    """
    pool = [c for c in (_measured_classes() if candidates is None else candidates) if c.name != profile.name]
    if not pool:
        return None
    return min(pool, key=lambda c: (_distance(profile, c), c.name))


def serving_calibration(profile: HardwareProfile) -> ServingCalibration:
    """The serving calibration of ``profile``: its own (``serving_power_source`` set), or that of
    :func:`nearest_measured_class`, applied to this profile's headroom.

    Raises:
        ConfigError: neither exists (no built-in profile has a serving fit).
    """
    if profile.serving_power_source:
        return ServingCalibration(
            profile.name,
            profile.serving_busy_power_frac,
            profile.mem_power_frac,
            profile.compute_power_frac,
            max(profile.serving_power_rel_sd, 1e-6),
            None,
            f"serving power fitted to {profile.serving_power_source}",
        )
    near = nearest_measured_class(profile)
    if near is None:
        raise ConfigError(
            f"profile '{profile.name}': no serving power fit, and no measured GPU class to borrow one from"
        )
    idle, limit = profile.idle_power_w, profile.power_limit_w
    return ServingCalibration(
        profile.name,
        near.serving_busy_power_frac,
        near.mem_power_frac,
        near.compute_power_frac,
        max(BORROWED_SERVING_SD, near.serving_power_rel_sd),
        near.name,
        f"serving power BORROWED from {near.name} (the nearest measured GPU class: {near.serving_power_source}), "
        f"scaled to this GPU's {idle:g}-{limit:g} W; not measured on {profile.hardware}",
    )


# ----------------------------------------------------------------------------- the estimate


@dataclass(frozen=True)
class ServingEstimate:
    """What a server at one batch size and config draws and delivers under a power limit
    (every figure simulated; see the module docstring).

    Attributes:
        batch_size: running requests.
        action: the speculative config.
        workload: the workload's lengths.
        power_limit_w: the limit, W.
        demand_w: serving power at full clock, before the limit, W.
        power_w: serving power under the limit, W (``<= power_limit_w``).
        power_w_interval: 95 % interval of ``power_w``, W.
        utilisation: ``power_w / power_limit_w``.
        utilisation_interval: 95 % interval of it.
        throttled: True when the demand exceeds the limit (the clock drops).
        clock_fraction: core clock under the limit, relative to full clock.
        speed_tok_s: decode speed per request under the limit, tok/s.
        speed_tok_s_interval: 95 % interval of it (acceptance and step-time calibration).
        speed_unthrottled_tok_s: the same at full clock, tok/s.
        output_tok_s: generated tokens per second over all requests, tok/s.
        joules_per_token: J per generated token under the limit.
        joules_per_token_interval: 95 % interval of it.
        prefill_tokens_per_step: prefill tokens per step.
        prefill_time_share: share of the step's kernel time the prefill takes, at full clock.
        decode_window_power_w: the decode-window figure (no prefill, the decode-window power fit:
            what a sweep's rows carry), at full clock, W; not the server's.
        calibration: the :class:`ServingCalibration` used.
        source: one line: simulated, by which calibration, for which workload.
    """

    batch_size: int
    action: Action
    workload: ServingWorkload
    power_limit_w: float
    demand_w: float
    power_w: float
    power_w_interval: tuple[float, float]
    utilisation: float
    utilisation_interval: tuple[float, float]
    throttled: bool
    clock_fraction: float
    speed_tok_s: float
    speed_tok_s_interval: tuple[float, float]
    speed_unthrottled_tok_s: float
    output_tok_s: float
    joules_per_token: float
    joules_per_token_interval: tuple[float, float]
    prefill_tokens_per_step: float
    prefill_time_share: float
    decode_window_power_w: float
    calibration: ServingCalibration
    source: str

    def to_json(self) -> dict[str, Any]:
        """The estimate as JSON-ready values (rounded; intervals as ``[lo, hi]``)."""

        def r(x: float, d: int = 3) -> float:
            return round(float(x), d)

        return {
            "provenance": "simulated",
            "batch_size": self.batch_size,
            "action": list(self.action),
            "prompt_tokens": self.workload.prompt_tokens,
            "output_tokens": self.workload.output_tokens,
            "power_limit_w": r(self.power_limit_w, 1),
            "serving_power_w": r(self.power_w, 1),
            "serving_power_w_interval": [r(x, 1) for x in self.power_w_interval],
            "serving_demand_w": r(self.demand_w, 1),
            "utilisation": r(self.utilisation, 4),
            "utilisation_interval": [r(x, 4) for x in self.utilisation_interval],
            "throttled": self.throttled,
            "clock_fraction": r(self.clock_fraction, 4),
            "speed_tok_s": r(self.speed_tok_s),
            "speed_tok_s_interval": [r(x) for x in self.speed_tok_s_interval],
            "speed_unthrottled_tok_s": r(self.speed_unthrottled_tok_s),
            "output_tok_s": r(self.output_tok_s, 1),
            "joules_per_token": r(self.joules_per_token, 5),
            "joules_per_token_interval": [r(x, 5) for x in self.joules_per_token_interval],
            "prefill_tokens_per_step": r(self.prefill_tokens_per_step),
            "prefill_time_share": r(self.prefill_time_share, 4),
            "decode_window_power_w": r(self.decode_window_power_w, 1),
            "source": self.source,
        }


def _priced(
    model: SpeculativeDecodingModel, cal: ServingCalibration, limit_w: float | None
) -> SpeculativeDecodingModel:
    p = model.profile
    values: dict[str, Any] = {
        "busy_power_frac": cal.busy_power_frac,
        "mem_power_frac": cal.mem_power_frac,
        "compute_power_frac": cal.compute_power_frac,
    }
    if limit_w is not None and not math.isclose(limit_w, p.power_limit_w, abs_tol=5e-4):
        # nvidia-smi -pl keeps the work: the demand stays, the cap holds the new limit exactly
        values.update(power_limit_w=limit_w, activity_power_w=p.activity_scale_w, cap_tracking=0.0)
    priced = copy.copy(model)
    priced.profile = p.with_values(**values)
    return priced


def _capped_clock(model: SpeculativeDecodingModel, cost: StepCost, temp: float, demand: float) -> float:
    p = model.profile
    target = p.power_limit_w + p.cap_tracking * (demand - p.power_limit_w)
    lo, hi = p.min_clock_fraction, 1.0
    if model._power(cost, lo, temp)[0] >= target:
        return lo
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if model._power(cost, mid, temp)[0] > target:
            hi = mid
        else:
            lo = mid
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


def serving_estimate(
    model: SpeculativeDecodingModel,
    batch_size: int,
    action: Action | Sequence[int],
    *,
    workload: ServingWorkload | None = None,
    power_limit_w: float | None = None,
    gpu_temp_c: float | None = None,
) -> ServingEstimate:
    """What a server running ``batch_size`` requests with ``action`` draws and delivers.

    Args:
        model: the performance model (a profile and a target/draft pair with its acceptance).
        batch_size: running requests (``>= 1``).
        action: ``(steps, topk, num_draft_tokens)``; ``(0, 0, 0)`` without speculation.
        workload: the requests' mean lengths (default :data:`DEFAULT_WORKLOAD`).
        power_limit_w: the power limit, W (default: the profile's); above the idle power.
        gpu_temp_c: the temperature, C (default: the profile's ``reference_temp_c``).

    Returns:
        the :class:`ServingEstimate` (simulated).

    Raises:
        ConfigError: a bad batch size, limit or temperature, or no serving calibration to use;
            InvalidActionError: a bad action.
    """
    act = as_action(action)
    wl = workload if workload is not None else DEFAULT_WORKLOAD
    p = model.profile
    limit = p.power_limit_w if power_limit_w is None else power_limit_w
    if isinstance(limit, bool) or not is_finite_number(limit) or not p.idle_power_w < limit <= 1e5:
        raise ConfigError(
            f"power limit must be a number of W above the GPU's idle power ({p.idle_power_w:g} W), got {limit!r}"
        )
    temp = p.reference_temp_c if gpu_temp_c is None else gpu_temp_c
    if isinstance(temp, bool) or not is_finite_number(temp):
        raise ConfigError(f"gpu_temp_c must be a finite number, got {gpu_temp_c!r}")
    cal = serving_calibration(p)
    priced = _priced(model, cal, float(limit))
    step = serving_step(priced, batch_size, act, wl)
    demand, full_step, _busy = priced._power(step.cost, 1.0, float(temp))
    power, step_s, clock = demand, full_step, 1.0
    lim = priced.profile.power_limit_w
    throttled = demand > lim * (1.0 + 1e-9)
    if throttled:
        clock = _capped_clock(priced, step.cost, float(temp), demand)
        power, step_s, _busy = priced._power(step.cost, clock, float(temp))
        if power > lim:  # the lowest clock still draws more: throttle at the same energy per step
            idle = p.idle_power_w
            step_s *= (power - idle) / (lim - idle)
            power = lim
    a = step.accept_length
    speed = a / step_s
    output = batch_size * speed
    jpt = power / output
    z = math.exp(Z95 * cal.rel_sd)
    p_lo, p_hi = min(demand / z, power), min(demand * z, lim)
    p_lo = min(p_lo, p_hi)
    interval = speed_interval(model, batch_size, act)
    s_lo = speed * interval.lo_tok_s / interval.expected_tok_s
    s_hi = speed * interval.hi_tok_s / interval.expected_tok_s
    return ServingEstimate(
        batch_size=batch_size,
        action=act,
        workload=wl,
        power_limit_w=lim,
        demand_w=demand,
        power_w=power,
        power_w_interval=(p_lo, p_hi),
        utilisation=power / lim,
        utilisation_interval=(p_lo / lim, p_hi / lim),
        throttled=throttled,
        clock_fraction=clock,
        speed_tok_s=speed,
        speed_tok_s_interval=(s_lo, s_hi),
        speed_unthrottled_tok_s=a / full_step,
        output_tok_s=output,
        joules_per_token=jpt,
        joules_per_token_interval=(p_lo / (batch_size * s_hi), p_hi / (batch_size * s_lo)),
        prefill_tokens_per_step=step.prefill_tokens,
        prefill_time_share=step.prefill_time_share,
        decode_window_power_w=model.decode_power_w(batch_size, act, gpu_temp_c=float(temp)),
        calibration=cal,
        source=f"simulated: {cal.label}; workload {wl.describe()}",
    )
