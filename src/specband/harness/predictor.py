"""Predicted reward intervals for ``sweep --plan predict``: the simulator, corrected by the rows
measured so far, says what every config of the grid would score.

What is fitted to the measured rows (:func:`fit_world`):

* **acceptance** (the prompts' part, shared by every batch size): each measured config's mean
  accept length (successful speculative rows, any batch size; plus ``--acceptance-from FILE``'s
  observations) is an observation of :func:`specband.sim.acceptance_fit.fit_acceptance`, which
  moves the profile's :class:`~specband.sim.draft_tree.AcceptParams` as far as the measurements
  pin them (:func:`fit_acceptance_rows`);
* **cost** (the GPU's part, per batch size): the simulated step time is split into the target's
  forward plus host time ``T`` and the speculative rest ``S``; the measured baseline fixes the
  factor ``a`` on ``T``, the measured speculative configs the factor ``b`` on ``S`` (their
  median); the utilisation (average power / power limit) is the simulated one times the
  measured/simulated ratio's mean, and the thermal multiplier the measured rows' mean.

Interval of an accept length (:meth:`AcceptanceFit.interval`): a measured config's own mean (it
is not predicted); else the fit's 95 % interval
(:meth:`specband.sim.acceptance_fit.FittedAcceptance.accept_length_interval`: tight for a chain
between the measured chain depths, wide for a tree while only chains were measured, since a
tree's accept length is 0.64-1.07 of the same-depth chain's across published workloads); before
any speculative row, ``[1, steps + 1]``.

Reward interval (:meth:`WorldFit.reward_interval`): speed ``accept / step`` with the step's
relative half-width ``h_c = max(0.03, 2 x`` the rms relative error of the cost fit at that
batch size``)``, utilisation with ``h_p = max(0.02, 2 x`` its rms relative error``)``; the
reward (:mod:`specband.contract.reward`) is monotone in speed, and its band score is taken at
its worst and best over the utilisation interval. Every figure here is *simulated* (a
prediction), never a measurement; the rows it plans are measured.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specband.contract.actions import Action, as_action
from specband.contract.reward import RewardConfig, band_score, throughput_score
from specband.sim.acceptance_fit import AcceptanceObservation, FittedAcceptance, fit_acceptance
from specband.sim.draft_tree import AcceptParams, accept_length
from specband.sim.model import SpeculativeDecodingModel

__all__ = [
    "AcceptanceFit",
    "BatchSizeCost",
    "Interval",
    "WorldFit",
    "fit_acceptance_rows",
    "fit_world",
]


@dataclass(frozen=True)
class Interval:
    """An estimate and its interval (``low <= estimate <= high``)."""

    estimate: float
    low: float
    high: float


@dataclass(frozen=True)
class AcceptanceFit:
    """Accept lengths fitted to the measured configs (:func:`specband.sim.acceptance_fit.fit_acceptance`).

    Attributes:
        fitted: the fit (``None`` while no speculative config was measured: the prior alone).
        prior: the profile's acceptance (the fit's start and the value of every parameter the
            measurements do not pin).
        observed: action -> (mean measured accept length, rows behind it).
        label: where the acceptance comes from (``"fitted to 3 configs of the sweep's rows"``).
    """

    fitted: FittedAcceptance | None
    prior: AcceptParams
    observed: Mapping[Action, tuple[float, float]]
    label: str

    def interval(self, action: Action | tuple[int, int, int]) -> Interval:
        """The accept length of ``action`` with its 95 % interval (bonus token included, within
        ``[1, steps + 1]``): a measured config's own mean, else the fit's interval, else (nothing
        measured yet) the prior's estimate between 1 and ``steps + 1``."""
        action = as_action(action)
        if action.is_baseline:
            return Interval(1.0, 1.0, 1.0)
        if action in self.observed:
            mean = self.observed[action][0]
            return Interval(mean, mean, mean)
        if self.fitted is None:
            est = accept_length(action, self.prior)
            return Interval(est, 1.0, float(action.speculative_num_steps) + 1.0)
        est, low, high = self.fitted.accept_length_interval(tuple(action))
        return Interval(est, min(low, est), max(high, est))


def fit_acceptance_rows(
    rows: Sequence[Mapping[str, Any]], prior: AcceptParams, extra: Sequence[AcceptanceObservation] = ()
) -> AcceptanceFit:
    """Fit the acceptance to the successful speculative rows' accept lengths (any batch size),
    and to ``extra`` observations (``--acceptance-from FILE``).

    Args:
        rows: sweep rows (dicts as in the JSONL).
        prior: the profile's acceptance (the start of the fit).
        extra: observations measured elsewhere (another file).

    Returns:
        the :class:`AcceptanceFit` (the prior alone when nothing was measured).
    """
    sums: dict[Action, list[float]] = defaultdict(list)
    for row in rows:
        accept = row.get("accept_length")
        if row.get("error") or not isinstance(accept, (int, float)) or not row.get("steps"):
            continue
        sums[as_action((row["steps"], row["topk"], row["num_draft_tokens"]))].append(float(accept))
    observed = {a: (sum(v) / len(v), float(len(v))) for a, v in sums.items()}
    observations = [AcceptanceObservation((a[0], a[1], a[2]), m, weight=n) for a, (m, n) in observed.items()]
    observations += list(extra)
    if not observations:
        return AcceptanceFit(None, prior, observed, "the profile's acceptance (nothing measured yet)")
    fitted = fit_acceptance(observations, prior=prior, label=f"fitted to {len(observations)} measured config(s)")
    return AcceptanceFit(fitted, prior, observed, fitted.label)


@dataclass(frozen=True)
class BatchSizeCost:
    """The cost side fitted at one batch size (see the module docstring).

    Attributes:
        target_factor: ``a``, measured/simulated on the target's part of the step.
        spec_factor: ``b``, on the speculative part.
        step_half: relative half-width of a predicted step time.
        utilization_factor: measured/simulated utilisation (``None``: no energy measured).
        utilization_half: relative half-width of a predicted utilisation.
        thermal: (mean, lowest, highest) thermal multiplier of the measured rows.
        baseline_speed: mean measured baseline speed, tok/s.
    """

    target_factor: float
    spec_factor: float
    step_half: float
    utilization_factor: float | None
    utilization_half: float
    thermal: tuple[float, float, float]
    baseline_speed: float


def _thermal(row: Mapping[str, Any], config: RewardConfig) -> float:
    from specband.contract.reward import thermal_multiplier

    temp = row.get("gpu_temp_c")
    return thermal_multiplier(temp if isinstance(temp, (int, float)) else None, row.get("gpu_throttling"), config)


@dataclass
class WorldFit:
    """The simulator corrected by the measured rows: reward intervals of every config.

    Attributes:
        model: the performance model of the profile.
        acceptance: the fitted acceptance.
        costs: batch size -> its :class:`BatchSizeCost` (batch sizes with a measured baseline).
        config: the reward's constants.
    """

    model: SpeculativeDecodingModel
    acceptance: AcceptanceFit
    costs: Mapping[int, BatchSizeCost]
    config: RewardConfig = field(default_factory=RewardConfig)

    def reward_interval(self, batch_size: int, action: Action) -> Interval | None:
        """The predicted reward of ``action`` at ``batch_size`` with its interval (simulated),
        or ``None`` when the batch size has no measured baseline to score against."""
        cost = self.costs.get(batch_size)
        if cost is None:
            return None
        if action.is_baseline:
            return Interval(0.0, 0.0, 0.0)
        accept = self.acceptance.interval(action)
        step = _step_time(self.model, batch_size, action, cost)
        cfg = self.config
        speeds = (accept.estimate / step, accept.low / (step * (1.0 + cost.step_half)),
                  accept.high / (step * max(1e-9, 1.0 - cost.step_half)))  # fmt: skip
        tputs = [throughput_score(s, cost.baseline_speed, cfg) for s in speeds]
        if cost.utilization_factor is None:
            bands = (1.0, 1.0, 1.0)
            w = 0.0
        else:
            pred = self.model.predict(batch_size, action, self.model.profile.reference_temp_c)
            util = pred.avg_power_w / self.model.power_limit_w * cost.utilization_factor
            lo_u, hi_u = util * (1.0 - cost.utilization_half), util * (1.0 + cost.utilization_half)
            ends = (band_score(lo_u, cfg), band_score(hi_u, cfg))
            inside = lo_u <= cfg.band_high and hi_u >= cfg.band_low
            bands = (band_score(util, cfg), min(ends), 1.0 if inside else max(ends))
            w = cfg.energy_weight
        mean_t, low_t, high_t = cost.thermal

        def reward(band: float, tput: float, thermal: float) -> float:
            return min(1.0, max(0.0, band**w * tput ** (1.0 - w) * thermal))

        return Interval(
            reward(bands[0], tputs[0], mean_t), reward(bands[1], tputs[1], low_t), reward(bands[2], tputs[2], high_t)
        )


def _step_parts(model: SpeculativeDecodingModel, batch_size: int, action: Action) -> tuple[float, float]:
    """(target part ``T``, speculative part ``S``) of the simulated step time, s."""
    pred = model.predict(batch_size, action, model.profile.reference_temp_c)
    tokens = batch_size * (action.speculative_num_draft_tokens if not action.is_baseline else 1)
    target = model.forward_time_s(model.target, batch_size, tokens) + model.profile.host_overhead_base_s
    target = min(target, pred.step_time_s)
    return target, max(0.0, pred.step_time_s - target)


def _step_time(model: SpeculativeDecodingModel, batch_size: int, action: Action, cost: BatchSizeCost) -> float:
    target, spec = _step_parts(model, batch_size, action)
    return cost.target_factor * target + cost.spec_factor * spec


def _row_step(row: Mapping[str, Any]) -> float | None:
    accept, speed = row.get("accept_length"), row.get("speed_tok_s")
    if row.get("error") or not isinstance(speed, (int, float)) or speed <= 0:
        return None
    accept = 1.0 if not row.get("steps") else accept
    return float(accept) / float(speed) if isinstance(accept, (int, float)) else None


def _utilization(row: Mapping[str, Any]) -> float | None:
    power, limit = row.get("avg_power_watts"), row.get("power_limit_watts")
    if isinstance(power, (int, float)) and isinstance(limit, (int, float)) and limit > 0:
        return float(power) / float(limit)
    return None


def _cost_at(
    model: SpeculativeDecodingModel, batch_size: int, rows: Sequence[Mapping[str, Any]], config: RewardConfig
) -> BatchSizeCost | None:
    """The cost fitted to the successful rows at one batch size (``None``: no baseline)."""
    ok = [r for r in rows if _row_step(r) is not None]
    base = [r for r in ok if not r.get("steps")]
    if not base:
        return None
    base_steps = [_row_step(r) or 0.0 for r in base]
    t0, _ = _step_parts(model, batch_size, as_action((0, 0, 0)))
    a = (sum(base_steps) / len(base_steps)) / t0
    spec_rows = [r for r in ok if r.get("steps")]
    bs_, rel = [], []
    for r in spec_rows:
        act = as_action((r["steps"], r["topk"], r["num_draft_tokens"]))
        t, s = _step_parts(model, batch_size, act)
        if s > 0:
            bs_.append(((_row_step(r) or 0.0) - a * t) / s)
    b = float(np.median(bs_)) if bs_ else 1.0
    b = min(max(b, 0.05), 20.0)
    for r in spec_rows:
        act = as_action((r["steps"], r["topk"], r["num_draft_tokens"]))
        t, s = _step_parts(model, batch_size, act)
        rel.append((a * t + b * s) / (_row_step(r) or 1.0) - 1.0)
    step_half = max(0.03, 2.0 * math.sqrt(sum(e * e for e in rel) / len(rel))) if rel else 0.1
    ratios = []
    for r in ok:
        util = _utilization(r)
        if util is None:
            continue
        act = as_action((r["steps"], r["topk"], r["num_draft_tokens"]))
        pred = model.predict(batch_size, act, model.profile.reference_temp_c)
        ratios.append(util / (pred.avg_power_w / model.power_limit_w))
    factor: float | None = None
    util_half = 0.0
    if ratios:
        mean_ratio = sum(ratios) / len(ratios)
        spread = math.sqrt(sum((x / mean_ratio - 1.0) ** 2 for x in ratios) / len(ratios))
        factor, util_half = mean_ratio, max(0.02, 2.0 * spread)
    thermal = [_thermal(r, config) for r in ok]
    baseline_speed = sum(float(r["speed_tok_s"]) for r in base) / len(base)
    return BatchSizeCost(a, b, step_half, factor, util_half,
                         (sum(thermal) / len(thermal), min(thermal), max(thermal)), baseline_speed)  # fmt: skip


def fit_world(
    model: SpeculativeDecodingModel, rows: Sequence[Mapping[str, Any]], config: RewardConfig = RewardConfig(),
    observations: Sequence[AcceptanceObservation] = (),
) -> WorldFit:  # fmt: skip
    """The simulator ``model`` corrected by ``rows`` (see the module docstring).

    Args:
        model: the profile's performance model (its acceptance is the prior).
        rows: the sweep's rows so far (error rows are ignored).
        config: the reward's constants.
        observations: accept lengths measured elsewhere (``--acceptance-from``), fitted with the rows.
    """
    acceptance = fit_acceptance_rows(rows, model.acceptance.params, observations)
    by_bs: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        if isinstance(row.get("batch_size"), int):
            by_bs[row["batch_size"]].append(row)
    costs = {}
    for bs, bs_rows in by_bs.items():
        cost = _cost_at(model, bs, bs_rows, config)
        if cost is not None:
            costs[bs] = cost
    return WorldFit(model, acceptance, costs, config)
