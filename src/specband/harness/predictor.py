"""Predicted reward intervals for ``sweep --plan predict``: the simulator, corrected by the rows
measured so far, says what every config of the grid would score.

What is fitted to the measured rows (:func:`fit_world`):

* **acceptance** (the prompts' part, shared by every batch size): each measured config's mean
  accept length (successful speculative rows, any batch size) is an observation; the chain
  parameters of :class:`~specband.sim.draft_tree.AcceptParams` (``first_token_accept``,
  ``depth_decay``) are fitted to the chains by least squares, the tree parameters
  (``chain_factor``, ``rank2_ratio``, ``off_track_factor``) as well once a tree was measured,
  each pulled towards the prior (the profile's acceptance) by a weak penalty so that two
  observations never leave a parameter free (:func:`fit_acceptance_rows`);
* **cost** (the GPU's part, per batch size): the simulated step time is split into the target's
  forward plus host time ``T`` and the speculative rest ``S``; the measured baseline fixes the
  factor ``a`` on ``T``, the measured speculative configs the factor ``b`` on ``S`` (their
  median); the utilisation (average power / power limit) is the simulated one times the
  measured/simulated ratio's mean, and the thermal multiplier the measured rows' mean.

Interval of an accept length (:meth:`AcceptanceFit.interval`), estimate ``e``:

* a config measured: its own mean (it is not predicted);
* a chain: ``e +- max(0.02 (e - 1) + 0.01, 2 rmse_chains)``, doubled outside the measured
  depths (an extrapolation);
* a tree while no tree was measured: the lowest and the highest accept length over the corners
  of a box (``chain_factor`` 0.8 / 1.3 with the chain parameters refitted at each;
  ``rank2_ratio`` 0.02 / 0.6, ``rank_decay`` 0.4 / 1, ``alt_depth_decay`` 0.3 / 1,
  ``off_track_factor`` 0.3 / 1): chains say little about trees (a tree's accept length is
  0.64-1.07 of the same-depth chain's across published workloads, issue 29);
* a tree once ``m`` tree configs were measured: ``e +- max(0.03 e, 2 rmse_trees) (1 + 2/m)``.

Reward interval (:meth:`WorldFit.reward_interval`): speed ``accept / step`` with the step's
relative half-width ``h_c = max(0.03, 2 x`` the rms relative error of the cost fit at that
batch size``)``, utilisation with ``h_p = max(0.02, 2 x`` its rms relative error``)``; the
reward (:mod:`specband.contract.reward`) is monotone in speed, and its band score is taken at
its worst and best over the utilisation interval. Every figure here is *simulated* (a
prediction), never a measurement; the rows it plans are measured.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specband.contract.actions import Action, as_action
from specband.contract.reward import RewardConfig, band_score, throughput_score
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

#: Corners of the tree-parameter box while no tree is measured (see the module docstring).
_CHAIN_FACTORS = (0.8, 1.3)
_TREE_LOW = {"rank2_ratio": 0.02, "rank_decay": 0.4, "alt_depth_decay": 0.3, "off_track_factor": 0.3}
_TREE_HIGH = {"rank2_ratio": 0.6, "rank_decay": 1.0, "alt_depth_decay": 1.0, "off_track_factor": 1.0}
#: Weight of the pull towards the prior per parameter (accept-length units per unit of parameter).
_PRIOR_WEIGHT = 0.05


@dataclass(frozen=True)
class Interval:
    """An estimate and its interval (``low <= estimate <= high``)."""

    estimate: float
    low: float
    high: float


def _is_chain(action: Action) -> bool:
    return action.speculative_eagle_topk == 1


def _residuals(params: AcceptParams, obs: Mapping[Action, tuple[float, float]]) -> np.ndarray:
    return np.array([math.sqrt(w) * (accept_length(a, params) - m) for a, (m, w) in obs.items()])


def _least_squares(
    prior: AcceptParams, names: Sequence[str], bounds: Sequence[tuple[float, float]],
    obs: Mapping[Action, tuple[float, float]],
) -> AcceptParams:  # fmt: skip
    """``prior`` with ``names`` fitted to ``obs`` (action -> (mean accept length, weight)),
    pulled towards the prior's values by :data:`_PRIOR_WEIGHT`."""
    from scipy.optimize import least_squares  # lazy: scipy only when a sweep plans by prediction

    x0 = np.array([min(max(getattr(prior, n), lo), hi) for n, (lo, hi) in zip(names, bounds, strict=True)])

    def fun(x: np.ndarray) -> np.ndarray:
        params = dataclasses.replace(prior, **dict(zip(names, (float(v) for v in x), strict=True)))
        return np.concatenate([_residuals(params, obs), _PRIOR_WEIGHT * (x - x0)])

    lo = np.array([b[0] for b in bounds])
    hi = np.array([b[1] for b in bounds])
    result = least_squares(fun, x0, bounds=(lo, hi), method="trf", xtol=1e-8, max_nfev=200)
    return dataclasses.replace(prior, **dict(zip(names, (float(v) for v in result.x), strict=True)))


_CHAIN_PARAMS = ("first_token_accept", "depth_decay")
_CHAIN_BOUNDS = ((0.02, 0.99), (0.3, 1.3))
_TREE_PARAMS = ("chain_factor", "rank2_ratio", "off_track_factor")
_TREE_BOUNDS = ((0.5, 1.5), (0.0, 1.0), (0.0, 1.0))


@dataclass(frozen=True)
class AcceptanceFit:
    """Accept lengths fitted to measured configs (see the module docstring).

    Attributes:
        params: the fitted parameters.
        observed: action -> (mean measured accept length, rows behind it).
        rmse_chains, rmse_trees: root-mean-square residual of the fitted chains / trees
            (``0.0`` when none).
        corners: parameter sets whose accept lengths bound an unmeasured tree's (while no tree
            is measured; empty after).
        label: where the acceptance comes from (``"fitted to 3 measured configs"``).
    """

    params: AcceptParams
    observed: Mapping[Action, tuple[float, float]]
    rmse_chains: float
    rmse_trees: float
    corners: tuple[AcceptParams, ...]
    label: str

    def interval(self, action: Action | tuple[int, int, int]) -> Interval:
        """The accept length of ``action`` with its interval (bonus token included, within
        ``[1, steps + 1]``)."""
        action = as_action(action)
        if action.is_baseline:
            return Interval(1.0, 1.0, 1.0)
        if action in self.observed:
            mean = self.observed[action][0]
            return Interval(mean, mean, mean)
        top = float(action.speculative_num_steps) + 1.0
        est = accept_length(action, self.params)
        if _is_chain(action):
            half = max(0.02 * (est - 1.0) + 0.01, 2.0 * self.rmse_chains)
            depths = [a.speculative_num_steps for a in self.observed if _is_chain(a)]
            if not depths or not min(depths) <= action.speculative_num_steps <= max(depths):
                half *= 2.0
            low, high = est - half, est + half
        elif self.corners:
            values = [accept_length(action, p) for p in self.corners] + [est]
            low, high = min(values), max(values)
        else:
            trees = sum(1 for a in self.observed if not _is_chain(a))
            half = max(0.03 * est, 2.0 * self.rmse_trees) * (1.0 + 2.0 / max(1, trees))
            low, high = est - half, est + half
        return Interval(est, min(max(low, 1.0), top), min(max(high, 1.0), top))


def _rmse(params: AcceptParams, obs: Mapping[Action, tuple[float, float]], chains: bool) -> float:
    errs = [accept_length(a, params) - m for a, (m, _) in obs.items() if _is_chain(a) == chains]
    return math.sqrt(sum(e * e for e in errs) / len(errs)) if errs else 0.0


def fit_acceptance_rows(rows: Sequence[Mapping[str, Any]], prior: AcceptParams) -> AcceptanceFit:
    """Fit the acceptance to the successful speculative rows' accept lengths (any batch size).

    Args:
        rows: sweep rows (dicts as in the JSONL).
        prior: the profile's acceptance (the start and the pull of the fit).

    Returns:
        the :class:`AcceptanceFit` (the prior, with tree corners, when nothing was measured).
    """
    sums: dict[Action, list[float]] = defaultdict(list)
    for row in rows:
        accept = row.get("accept_length")
        if row.get("error") or not isinstance(accept, (int, float)) or not row.get("steps"):
            continue
        sums[as_action((row["steps"], row["topk"], row["num_draft_tokens"]))].append(float(accept))
    obs = {a: (sum(v) / len(v), float(len(v))) for a, v in sums.items()}
    chains = {a: v for a, v in obs.items() if _is_chain(a)}
    trees = {a: v for a, v in obs.items() if not _is_chain(a)}
    params = prior
    if chains:
        names = _CHAIN_PARAMS if len(chains) >= 2 else _CHAIN_PARAMS[:1]
        params = _least_squares(prior, names, _CHAIN_BOUNDS[: len(names)], chains)
    corners: tuple[AcceptParams, ...] = ()
    if trees:
        params = _least_squares(params, _CHAIN_PARAMS + _TREE_PARAMS, _CHAIN_BOUNDS + _TREE_BOUNDS, obs)
    else:
        found = []
        for factor in _CHAIN_FACTORS:
            base = dataclasses.replace(params, chain_factor=factor)
            if chains:
                names = _CHAIN_PARAMS if len(chains) >= 2 else _CHAIN_PARAMS[:1]
                base = _least_squares(base, names, _CHAIN_BOUNDS[: len(names)], chains)
            found += [dataclasses.replace(base, **_TREE_LOW), dataclasses.replace(base, **_TREE_HIGH)]
        corners = tuple(found)
    label = f"fitted to {len(obs)} measured config(s)" if obs else "the profile's acceptance (nothing measured yet)"
    return AcceptanceFit(params, obs, _rmse(params, obs, True), _rmse(params, obs, False), corners, label)


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
    model: SpeculativeDecodingModel, rows: Sequence[Mapping[str, Any]], config: RewardConfig = RewardConfig()
) -> WorldFit:
    """The simulator ``model`` corrected by ``rows`` (see the module docstring).

    Args:
        model: the profile's performance model (its acceptance is the prior).
        rows: the sweep's rows so far (error rows are ignored).
        config: the reward's constants.
    """
    acceptance = fit_acceptance_rows(rows, model.acceptance.params)
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
