"""Power honesty: what a simulated row's power rests on.

A profile's ``[power]`` fractions are fitted to NVML power only where it says
``power_measured = true`` (the RTX 4060 Laptop, against the published live rows). A profile
whose ``[power]`` has a ``power_source`` (``h100-sxm``, ``h200``) was fitted to *published*
power figures of its GPU class (:mod:`specband.sim.published`); its rows carry
``power_source: "published fit (...)"``. Any other profile inherits the laptop fit, or, where
its ``[power]`` says ``power_borrowed_from = "NAME"`` (the A100), the fractions of the nearest
measured GPU class applied to its own idle-to-limit headroom; either way its single power figure
rests on no measurement of its GPU. Its rows therefore carry ``power_measured: false`` and
``power_w_range``: the range the board power can take under the stated activity model

    power = idle_power_w + a x busy x (power_limit_w - idle_power_w),  a in [ACTIVITY_LOW, ACTIVITY_HIGH]

where ``busy`` is the simulated share of the step the GPU runs kernels (``gpu_util_pct / 100``)
and ``a`` the unknown activity of a busy GPU: from a memory-bound decode at a fraction of the
idle-to-limit headroom (:data:`ACTIVITY_LOW`) to the full limit (:data:`ACTIVITY_HIGH`). No
measurement narrows ``a``; both ends are assumptions, stated so.

Serving power is not decode power. A sweep (``specband sweep``, the simulator's rows) measures a
decode-heavy window: a few short prompts, then ``max_new_tokens`` 512 of decode, so its power is
:meth:`~specband.sim.model.SpeculativeDecodingModel.decode_power_w`, the *decode-window* figure
(pure decode on an H200 draws 137-300 W of 700 W, arXiv 2605.11999). A server under continuous
batching draws what :mod:`specband.sim.serving` models (ML.ENERGY v3 measured 486-690 W at
8-1024 sequences on an H100 with Llama-3.1-8B); :func:`serving_power_w` is its demand at full clock.

:func:`unmeasured_power_note` is the label ``specband train`` and ``specband evaluate`` print
beside their band figures when the rows they read carry ``power_measured: false``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from specband.contract.actions import Action
from specband.core.errors import ConfigError
from specband.sim.base import RunPrediction
from specband.sim.model import SpeculativeDecodingModel, StepCost
from specband.sim.profile import HardwareProfile
from specband.sim.serving import ServingWorkload, serving_estimate

__all__ = [
    "ACTIVITY_HIGH",
    "ACTIVITY_LOW",
    "power_range_w",
    "prefill_power_w",
    "serving_power_w",
    "unmeasured_power_note",
]

#: Lowest activity of a busy GPU, fraction of the idle-to-limit headroom (an assumption).
ACTIVITY_LOW = 0.3
#: Highest activity of a busy GPU: the power limit.
ACTIVITY_HIGH = 1.0


def power_range_w(profile: HardwareProfile, prediction: RunPrediction) -> tuple[float, float]:
    """The board power range of a run under the activity model of this module, W.

    Args:
        profile: the hardware profile (its idle power and power limit, datasheet numbers).
        prediction: the run (its ``gpu_util_pct`` gives the busy share).

    Returns:
        ``(low, high)``, ``idle_power_w <= low <= high <= power_limit_w``.
    """
    busy = min(1.0, max(0.0, prediction.gpu_util_pct / 100.0))
    headroom = profile.power_limit_w - profile.idle_power_w
    low = profile.idle_power_w + ACTIVITY_LOW * busy * headroom
    high = profile.idle_power_w + ACTIVITY_HIGH * busy * headroom
    return low, min(high, profile.power_limit_w)


def unmeasured_power_note(rows: Iterable[Any]) -> str | None:
    """The label for band figures computed from rows whose power rests on no measurement.

    Args:
        rows: sweep rows (:class:`~specband.sweeps.dataset.SweepRow`, read through their ``raw``
            mapping) or row mappings.

    Returns:
        one line naming the hardware, the number of such rows and the utilisation range their
        ``power_w_range`` spans; for rows whose power comes from a published fit (a
        ``power_source`` column) and none unmeasured, a line naming that fit; ``None`` when every
        row's power was measured (rows without a ``power_measured`` column count as measured).
    """
    hardware: set[str] = set()
    count = 0
    low, high = float("inf"), float("-inf")
    fitted: dict[str, int] = {}
    for row in rows:
        raw: Mapping[str, Any] = getattr(row, "raw", row)
        source = raw.get("power_source")
        if isinstance(source, str) and source:
            fitted[source] = fitted.get(source, 0) + 1
        if raw.get("power_measured") is not False:
            continue
        count += 1
        hardware.add(str(raw.get("hardware", "?")))
        span, limit = raw.get("power_w_range"), raw.get("power_limit_watts")
        if span and limit:
            low, high = min(low, span[0] / limit), max(high, span[1] / limit)
    if not count:
        if fitted:
            sources = "; ".join(sorted(fitted))
            return (
                f"power SIMULATED from a {sources}: {sum(fitted.values())} row(s); decode power of that GPU class, "
                "not measured on this setup"
            )
        return None
    spread = f"; their power_w_range spans {low:.2f}-{high:.2f} of the limit" if low <= high else ""
    return (
        f"power UNMEASURED: {count} row(s) on {', '.join(sorted(hardware))} come from a profile whose power model "
        f"rests on no measurement of that GPU{spread}; utilisation and band figures from them are guesses, "
        "not predictions"
    )


def prefill_power_w(model: SpeculativeDecodingModel, tokens: int) -> float:
    """Board power of one compute-bound prefill forward of the target over ``tokens`` prompt
    tokens of one context (attention over half the prompt on average), W, at full clock and the
    profile's reference temperature (``govern``'s emulated prefill bursts,
    :func:`specband.sim.power_capped.prefill_burst`).

    Raises:
        ConfigError: ``tokens < 1``.
    """
    n = int(tokens)
    if n < 1:
        raise ConfigError(f"prefill tokens must be >= 1, got {n}")
    nbytes, flops, t_mem, t_cmp = model._forward_work(model.target, 1, n, n / 2.0)
    forwards = (("prefill", n, t_mem, t_cmp),)
    kernel, compute = model._kernel_time(forwards, 1.0)
    cost = StepCost(nbytes, flops, kernel, compute, 0.0, forwards)
    return model._power(cost, 1.0, model.profile.reference_temp_c)[0]


def serving_power_w(
    model: SpeculativeDecodingModel,
    batch_size: int,
    action: Action | tuple[int, int, int],
    *,
    workload: ServingWorkload | None = None,
) -> float:
    """Average board power of a server under continuous batching (prefill mixed in) at
    ``batch_size`` running requests, W, at full clock, before any power limit: the demand of
    :func:`specband.sim.serving.serving_estimate` (which applies a limit and gives speed,
    utilisation and J/token with their intervals).

    Args:
        model: the performance model.
        batch_size: running requests.
        action: the speculative config.
        workload: the requests' mean prompt and output lengths (default: the default chat workload).

    Raises:
        ConfigError: a bad batch size, or no serving calibration to use; InvalidActionError: a bad action.
    """
    return serving_estimate(model, batch_size, action, workload=workload).demand_w
