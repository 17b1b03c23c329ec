"""A governor plan from the simulator (``--gpu PROFILE --target-config ... --draft-config ...``),
labelled simulated throughout.

Per tier (planned at one batch size): the flags of the simulated first guess
(:func:`specband.deploy.firstguess.first_guess`, the lookup table on a simulated grid), and the
starting limit that puts the simulator's *serving* power of that config (prefill mixed in,
:func:`specband.sim.power.serving_power_w`) at the band's middle, clamped to the GPU's range.
A profile without a serving-power fit falls back to decode power, and says so. The expected
speed carries the simulator's 95 % interval (:func:`specband.sim.speed_interval.speed_interval`),
and the plan's acceptance table holds the accept length (95 % interval) of every config it
names, for the drift check.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specband.contract.actions import chain_action
from specband.contract.reward import BAND_HIGH, BAND_LOW
from specband.core.errors import ConfigError
from specband.deploy.firstguess import first_guess
from specband.devices.power_limit import PowerLimitRange
from specband.govern.plan import GovernorPlan, PlanFigure, PlanGpu, PlanTier, geometric_tiers
from specband.sim.model import build_model
from specband.sim.power import serving_power_w
from specband.sim.power_capped import model_power_limit_range, with_power_limit
from specband.sim.serving import serving_calibration
from specband.sim.speed_interval import speed_interval

__all__ = ["DEFAULT_TIER_BATCH_SIZES", "first_guess_plan", "planned_power_w"]

#: The batch sizes tiers are planned at by default (each tier covers the batch sizes nearer to
#: it on a log scale, :func:`~specband.govern.plan.geometric_tiers`): one per batch size up to 4,
#: where serving power climbs fastest (prefill's share grows as ``1 - exp(-bs / 7.4)`` on the
#: H100 fit), then two per doubling where it flattens.
DEFAULT_TIER_BATCH_SIZES: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
#: The chains whose acceptance the plan always carries (vLLM's K = 1..7, sglang chains).
_CHAINS = tuple(chain_action(s) for s in range(1, 8))


def planned_power_w(model: Any, batch_size: int, action: Sequence[int]) -> tuple[float, str]:
    """The power a server running ``action`` at ``batch_size`` draws on ``model``'s GPU, W,
    and what it is: serving power (prefill mixed in) where the profile has that fit or borrows
    one (:func:`specband.sim.serving.serving_calibration`, its label said), else decode power
    (labelled so)."""
    triple = (int(action[0]), int(action[1]), int(action[2]))
    try:
        label = serving_calibration(model.profile).label
        watts = serving_power_w(model, batch_size, triple)
        return watts, f"serving power (prefill mixed in) of {model.profile.name}: {label}"
    except ConfigError:
        decode = model.decode_power_w(batch_size, triple)
        return decode, f"decode power of {model.profile.name} (it has no serving-power fit: prefill not mixed in)"


def first_guess_plan(
    profile: str,
    target_config: str | None,
    draft_config: str | None,
    *,
    acceptance_from: str | None = None,
    batch_sizes: Sequence[int] = DEFAULT_TIER_BATCH_SIZES,
    gpu_range: PowerLimitRange | None = None,
    range_source: str | None = None,
    chains_only: bool = False,
    extra_actions: Sequence[Sequence[int]] = (),
    band: tuple[float, float] = (BAND_LOW, BAND_HIGH),
) -> GovernorPlan:
    """The simulated plan (see the module docstring).

    Args:
        profile: the simulator profile of the GPU.
        target_config, draft_config: the pair (as ``simulate`` takes them).
        acceptance_from: measured accept lengths the acceptance is fitted to, or ``None``.
        batch_sizes: the batch sizes tiers are planned at, increasing.
        gpu_range: the limits the GPU accepts (NVML's), else the profile's assumption.
        range_source: where ``gpu_range`` comes from, for the plan.
        chains_only: the engine runs chains only (vLLM): a tree pick becomes the chain of its steps.
        extra_actions: configs whose acceptance the plan must carry too (the server's own).
        band: the band, fractions of the limit.

    Raises:
        ConfigError: a bad profile, pair or batch size list; DataError: a bad ``acceptance_from``.
    """
    try:
        ranges = geometric_tiers(list(batch_sizes))
    except ValueError as exc:
        raise ConfigError(f"--tiers: {exc}") from None
    model = build_model(
        profile, target_config=target_config, draft_config=draft_config, acceptance_from=acceptance_from
    )
    limits = gpu_range or model_power_limit_range(model)
    where = range_source or f"the {model.profile.name} profile's assumption (2/7 of its limit to its limit)"
    target = 0.5 * (band[0] + band[1])
    tiers: list[PlanTier] = []
    notes: list[str] = []
    actions: set[tuple[int, int, int]] = {tuple(int(x) for x in a) for a in extra_actions if a[0]}  # type: ignore[misc]
    for low, high, bs in ranges:
        pick = first_guess(bs, profile, target_config, draft_config, acceptance_from=acceptance_from)
        action = (int(pick.action[0]), int(pick.action[1]), int(pick.action[2]))
        if chains_only and action[1] > 1:
            notes.append(f"tier {bs}: the engine runs chains: {chain_action(action[0])} in place of the pick {action}")
            action = tuple(chain_action(action[0]))  # type: ignore[assignment]
        actions.add(action)
        tiers.append(_tier(model, low, high, bs, action, limits, target, band, notes))
    acceptance = {a: _accept_figure(model, a) for a in sorted(actions | set(_CHAINS)) if a[0]}
    pair = f"{model.target.name} + {model.draft.name}"
    return GovernorPlan(
        tiers=tuple(tiers),
        gpu=PlanGpu(profile, model.profile.hardware, limits.min_w, limits.max_w, where),
        source=f"simulated first guess on {model.profile.name} for {pair} (acceptance {model.acceptance.source})",
        model={
            "target_config": target_config,
            "draft_config": draft_config,
            "acceptance_from": acceptance_from,
            "profile": profile,
        },
        band=band,
        acceptance=acceptance,
        notes=(*model.warnings, *notes),
    )


def _accept_figure(model: Any, action: tuple[int, int, int]) -> PlanFigure:
    est, lo, hi = model.acceptance.accept_length_interval(action)
    return PlanFigure(est, "simulated", lo, hi, f"acceptance {model.acceptance.source}")


def _tier(
    model: Any,
    low: int,
    high: int | None,
    bs: int,
    action: tuple[int, int, int],
    limits: PowerLimitRange,
    target: float,
    band: tuple[float, float],
    notes: list[str],
) -> PlanTier:
    power, basis = planned_power_w(model, bs, action)
    limit = round(min(limits.max_w, max(limits.min_w, power / target)), 1)
    util = min(1.0, power / limit)
    if util < band[0]:
        notes.append(
            f"tier {bs}: {power:.0f} W ({basis}) is below the band even at the GPU's lowest limit, "
            f"{limits.min_w:g} W (utilisation {util:.3f})"
        )
    elif util > band[1]:
        notes.append(
            f"tier {bs}: {power:.0f} W ({basis}) is above the band even at the GPU's highest limit, "
            f"{limits.max_w:g} W: the server is held at the limit (throttled)"
        )
    pred = with_power_limit(model, limit).predict(bs, action, model.profile.reference_temp_c)
    interval = speed_interval(model, bs, action, prediction=pred)
    total = interval.expected_tok_s * bs
    j_per_token = min(power, limit) / total
    expected = {
        "serving_power_w": PlanFigure(power, "simulated", basis=basis),
        "utilization": PlanFigure(util, "simulated", basis=f"{basis} over the limit"),
        "tok_s": PlanFigure(
            total,
            "simulated",
            interval.lo_tok_s * bs,
            interval.hi_tok_s * bs,
            f"all {bs} requests, decode speed at the limit; acceptance {interval.acceptance_source}",
        ),
        "joules_per_token": PlanFigure(
            j_per_token,
            "simulated",
            min(power, limit) / (interval.hi_tok_s * bs),
            min(power, limit) / (interval.lo_tok_s * bs),
            "planned power over the simulated speed",
        ),
        "accept_length": _accept_figure(model, action),
    }
    return PlanTier(low, high, bs, action, limit, "simulated", expected)
