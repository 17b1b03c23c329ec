"""Acceptance fitted to a user's own measurements (``--acceptance-from FILE``).

How often the target accepts the draft's tokens belongs to the prompts: on the same H200,
pair and config, SpecForge's SpecBundle measures accept length 1.72 on one workload and 3.05
on another. The cost side of the simulator holds across workloads (step time given the
measured accept length: 1.4 % median error on the published H200 rows), so a user's few
measured accept lengths are what a simulation of *their* workload needs.

The files are read by :mod:`specband.sim.acceptance_file` (:func:`read_acceptance_file`,
re-exported here: sweep, bench and probe files, every field checked); their speeds fit the
cost side (:mod:`specband.sim.cost_fit`).

The fit (:func:`fit_acceptance`) moves the parameters of the per-depth model
(:class:`~specband.sim.draft_tree.AcceptParams`) away from a prior (the pair's bundled
profile) as far as the measurements pin them: ``first_token_accept`` always, ``depth_decay``
with two depths, ``chain_factor`` when both chains and trees were measured, ``rank2_ratio``
and ``off_track_factor`` with two and three measured trees; never more free parameters than
measured numbers. Residuals are log accept-length errors over :data:`ACCEPT_REL_SD` and, for
chains with per-position data, acceptance-fraction errors over :data:`POSITION_SD`
(``scipy.optimize.least_squares``, trust-region reflective, bounded).

Intervals (:meth:`FittedAcceptance.accept_length_interval`, 95 %): the fit's parameter
covariance propagated to the config, plus a model-form term: :data:`CHAIN_FORM_SD` for a
chain between measured chain depths (two measured chains fix a workload's chain acceptance:
the per-position model fitted to (3,1,4) and (7,1,8) gives (5,1,6) within 1.7 % on the
SpecBundle H200 rows of two workloads and two drafts), growing by :data:`DEPTH_FORM_SD` per
step outside them; :data:`TREE_FORM_SD` for a tree when trees were measured. A kind of draft
(chain or tree) that was *not* measured gets the range of the published tree/chain ratio
(:data:`TREE_CHAIN_RATIO`): trees' accept length is 0.64-1.07 of the same-depth chain's,
depending on the workload, so trees from chains alone carry a wide interval. Each class's log
half-width is then scaled by its factor in :data:`INTERVAL_SCALES`, calibrated split-conformally on
published points no fit saw (:mod:`specband.sim.interval_check`): the narrowest intervals that
hold 95 % of them, left out by model and by workload.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from specband.core.errors import DataError
from specband.engines.probe_file import PROBE_FORMAT
from specband.sim.acceptance_file import (
    AcceptanceObservation,
    AcceptanceSource,
    SpeedObservation,
    histogram_position_accept,
    read_acceptance_file,
)
from specband.sim.draft_tree import AcceptParams, accept_length, tree_node_values

__all__ = [
    "ACCEPT_REL_SD",
    "CHAIN_FORM_SD",
    "DEPTH_FORM_SD",
    "INTERVAL_SCALES",
    "POSITION_SD",
    "PROBE_FORMAT",
    "TREE_CHAIN_RATIO",
    "TREE_FORM_SD",
    "AcceptanceObservation",
    "AcceptanceSource",
    "FitResidual",
    "FittedAcceptance",
    "SpeedObservation",
    "fit_acceptance",
    "histogram_position_accept",
    "read_acceptance_file",
]

#: Relative sd of one measured accept length: 1 %, the run-to-run spread of a config's accept
#: length rounded up (0.009 absolute at accept ~2, 0.45 %, over the five published bs-16
#: trials on the RTX 4060 Laptop: the profile's ``accept_sd``).
ACCEPT_REL_SD = 0.01
#: Absolute sd of one measured per-position acceptance fraction (same basis as ACCEPT_REL_SD).
POSITION_SD = 0.01
#: Model-form relative sd of a chain between measured chain depths: the per-position fit to
#: (3,1,4) and (7,1,8) gives (5,1,6) within 1.7 % on the SpecBundle H200 rows (MT-bench and
#: HumanEval, two drafts; ``../shared/data/specbundle_h200_two_workloads.md``).
CHAIN_FORM_SD = 0.01
#: Extra relative sd per draft step outside the measured depths (extrapolation; a stated
#: allowance, not fitted).
DEPTH_FORM_SD = 0.02
#: Model-form relative sd of a tree when trees were measured: the bundled MT-bench fit's tree
#: rows are within 2.2 % with 7 parameters; 5 % leaves room for other tree shapes.
TREE_FORM_SD = 0.05
#: Published tree/chain accept-length ratio range at the same depth and draft budget: trees
#: (5,3,6) and (7,4,8) accept 0.64-1.07 of (5,1,6) and (7,1,8), by workload (SpecForge
#: SpecBundle ``data.json``, H200, Llama-3.1-8B-Instruct, 7 workloads, 2 drafts; issue 29).
TREE_CHAIN_RATIO = (0.64, 1.07)
#: The (tree, chain) pairs TREE_CHAIN_RATIO was measured on.
_RATIO_SHAPES = (((5, 3, 6), (5, 1, 6)), ((7, 4, 8), (7, 1, 8)))
_Z95 = 1.959964
#: Factor on the log half-width of each interval class (:meth:`FittedAcceptance.interval_class`),
#: calibrated split-conformally (level 0.96) on 286 held-out published accept lengths of 5 models,
#: 7 workloads (:func:`specband.sim.interval_check.calibrate`, which ``tests/sim/test_interval_check.py``
#: reruns): left out by model, the calibrated intervals hold 95.8 % of them, by workload 95.5 %.
INTERVAL_SCALES: dict[str, float] = {"chain": 0.726696, "tree": 1.00366, "cross": 0.953008}
#: Bounds of the fitted parameters (inside AcceptParams's own).
_BOUNDS = {
    "first_token_accept": (0.01, 0.995),
    "depth_decay": (0.05, 1.5),
    "chain_factor": (0.05, 1.5),
    "rank2_ratio": (0.0, 1.0),
    "off_track_factor": (0.0, 1.0),
}
Triple = tuple[int, int, int]


@dataclass(frozen=True)
class FitResidual:
    """The fit at one measured config.

    Attributes:
        action: the config.
        measured: the measured accept length (weighted mean of its observations).
        fitted: the fitted model's accept length.
        observations: how many observations it averages.
    """

    action: Triple
    measured: float
    fitted: float
    observations: int

    @property
    def relative_error(self) -> float:
        """``fitted / measured - 1``."""
        return self.fitted / self.measured - 1.0


# ----------------------------------------------------------------------------- fitting


@dataclass(frozen=True)
class _Measured:
    action: Triple
    accept: float
    count: int
    positions: tuple[float, ...] | None


def _aggregate(observations: Iterable[AcceptanceObservation]) -> list[_Measured]:
    groups: dict[Triple, list[AcceptanceObservation]] = defaultdict(list)
    for o in observations:
        action = tuple(int(x) for x in o.action)
        if action[0] == 0:
            continue
        groups[(action[0], action[1], action[2])].append(o)
    out = []
    for action, group in sorted(groups.items()):
        weights = [max(float(o.weight), 1e-12) for o in group]
        accept = sum(w * o.accept_length for w, o in zip(weights, group, strict=True)) / sum(weights)
        with_pos = [(w, o.position_accept) for w, o in zip(weights, group, strict=True) if o.position_accept]
        positions = None
        if with_pos:
            n = min(len(p) for _, p in with_pos if p)
            total = sum(w for w, _ in with_pos)
            positions = tuple(sum(w * p[i] for w, p in with_pos if p) / total for i in range(n))
        out.append(_Measured(action, accept, len(group), positions))
    return out


def _free_names(measured: Sequence[_Measured]) -> list[str]:
    chains = {m.action for m in measured if m.action[1] == 1}
    trees = {m.action for m in measured if m.action[1] > 1}
    depths = {a[0] for a in chains | trees}
    n_pos = sum(len(m.positions) for m in measured if m.positions)
    n_numbers = len(measured) + n_pos
    names = ["first_token_accept"]
    if len(depths) >= 2 or n_pos >= 2:
        names.append("depth_decay")
    if chains and trees:
        names.append("chain_factor")
    if len(trees) >= 2:
        names.append("rank2_ratio")
    if len(trees) >= 3:
        names.append("off_track_factor")
    return names[: max(1, n_numbers)]


def _with(prior: AcceptParams, names: Sequence[str], x: Sequence[float]) -> AcceptParams:
    return dataclasses.replace(prior, **{n: float(v) for n, v in zip(names, x, strict=True)})


def _residuals(params: AcceptParams, measured: Sequence[_Measured]) -> list[float]:
    out = []
    for m in measured:
        sd = ACCEPT_REL_SD / math.sqrt(m.count)
        out.append(math.log(accept_length(m.action, params) / m.accept) / sd)
        if m.positions:
            values = tree_node_values(m.action, params)
            out += [(values[i] - p) / (POSITION_SD / math.sqrt(m.count)) for i, p in enumerate(m.positions)]
    return out


@dataclass(frozen=True)
class FittedAcceptance:
    """Acceptance fitted to measured accept lengths (:func:`fit_acceptance`).

    Attributes:
        params: the fitted :class:`~specband.sim.draft_tree.AcceptParams` (the prior's value
            where the measurements do not pin a parameter).
        prior: the parameters the fit started from (the pair's profile).
        free: the names of the fitted parameters.
        residuals: one :class:`FitResidual` per measured config, in config order.
        label: ``"fitted to N configs of NAME"``.
        covariance: covariance of the free parameters (``len(free)`` square, nested tuples).
        chain_depths, tree_depths: the measured chains' and trees' draft steps.
    """

    params: AcceptParams
    prior: AcceptParams
    free: tuple[str, ...]
    residuals: tuple[FitResidual, ...]
    label: str
    covariance: tuple[tuple[float, ...], ...]
    chain_depths: tuple[int, ...]
    tree_depths: tuple[int, ...]

    @property
    def n_configs(self) -> int:
        """Measured configs the fit used."""
        return len(self.residuals)

    def accept_length(self, action: Sequence[int]) -> float:
        """The fitted accept length of ``(steps, topk, num_draft_tokens)``."""
        steps, topk, tokens = (int(x) for x in action)
        return accept_length((steps, topk, tokens), self.params)

    def _log_sd_params(self, action: Triple) -> float:
        if not self.free:
            return 0.0
        base = [getattr(self.params, n) for n in self.free]
        grad = []
        for i, name in enumerate(self.free):
            lo, hi = _BOUNDS[name]
            h = 1e-4 * max(1.0, abs(base[i]))
            up, down = min(hi, base[i] + h), max(lo, base[i] - h)
            xs_up, xs_down = list(base), list(base)
            xs_up[i], xs_down[i] = up, down
            f_up = math.log(accept_length(action, _with(self.params, self.free, xs_up)))
            f_down = math.log(accept_length(action, _with(self.params, self.free, xs_down)))
            grad.append((f_up - f_down) / (up - down) if up > down else 0.0)
        g = np.asarray(grad)
        var = float(g @ np.asarray(self.covariance) @ g)
        return math.sqrt(max(0.0, var))

    def _ratio_band(self) -> tuple[float, float]:
        """(low, high) factors on a tree's fitted accept length when no tree was measured:
        the published tree/chain ratio range over this fit's tree/chain ratio at the shapes
        it was measured on."""
        ratios = [self.accept_length(tree) / self.accept_length(chain) for tree, chain in _RATIO_SHAPES]
        return TREE_CHAIN_RATIO[0] / max(ratios), TREE_CHAIN_RATIO[1] / min(ratios)

    def interval_class(self, action: Sequence[int]) -> str:
        """Which calibration a config's interval takes (:data:`INTERVAL_SCALES`): ``"chain"`` or
        ``"tree"`` when its kind of draft was measured, ``"cross"`` when only the other was."""
        chain = int(action[1]) == 1
        depths = self.chain_depths if chain else self.tree_depths
        return ("chain" if chain else "tree") if depths else "cross"

    def accept_length_interval(
        self, action: Sequence[int], scales: Mapping[str, float] | None = None
    ) -> tuple[float, float, float]:
        """``(estimate, lo95, hi95)`` accept length of a config (see the module docstring):
        tight for chains between measured chain depths, wide for trees when only chains were
        measured (and for chains when only trees were). Within ``[1, steps + 1]``; the
        baseline is ``(1, 1, 1)``.

        Args:
            action: ``(steps, topk, num_draft_tokens)``.
            scales: the factor on each class's log half-width (default :data:`INTERVAL_SCALES`,
                calibrated on held-out published points; :mod:`specband.sim.interval_check`
                passes 1 to recompute them).
        """
        steps, topk, tokens = (int(x) for x in action)
        if steps == 0:
            return 1.0, 1.0, 1.0
        triple = (steps, topk, tokens)
        est = self.accept_length(triple)
        chain = topk == 1
        depths = self.chain_depths if chain else self.tree_depths
        sd_param = self._log_sd_params(triple)
        lo_f = hi_f = 1.0
        if depths:
            outside = max(0, min(depths) - steps, steps - max(depths))
            form = (CHAIN_FORM_SD if chain else TREE_FORM_SD) + DEPTH_FORM_SD * outside
        else:
            # this kind of draft was not measured: the other kind's fit, with the published
            # tree/chain ratio range around it
            band_lo, band_hi = self._ratio_band()
            lo_f, hi_f = (band_lo, band_hi) if not chain else (1.0 / band_hi, 1.0 / band_lo)
            lo_f, hi_f = min(lo_f, 1.0), max(hi_f, 1.0)
            form = 0.0
        half = _Z95 * math.hypot(sd_param, form)
        scale = (INTERVAL_SCALES if scales is None else scales)[self.interval_class(triple)]
        # (a log width past 50 is an unbounded interval: the clip to [1, steps + 1] below bounds it)
        lo = est * math.exp(-min(50.0, scale * (half - math.log(lo_f))))
        hi = est * math.exp(min(50.0, scale * (half + math.log(hi_f))))
        top = steps + 1.0
        return est, min(max(lo, 1.0), top), min(max(hi, 1.0), top)

    def residual_lines(self) -> list[str]:
        """One line per fitted config: ``(s,k,N): measured X, fitted Y (+Z %)``."""
        return [
            f"{r.action}: measured {r.measured:.3f}, fitted {r.fitted:.3f} ({100 * r.relative_error:+.1f} %)"
            + (f", {r.observations} rows" if r.observations > 1 else "")
            for r in self.residuals
        ]


def fit_acceptance(
    source_or_observations: AcceptanceSource | Iterable[AcceptanceObservation],
    *,
    prior: AcceptParams,
    label: str | None = None,
) -> FittedAcceptance:
    """Fit the per-depth acceptance model to measured accept lengths (see the module docstring).

    Args:
        source_or_observations: an :class:`AcceptanceSource` or observations.
        prior: the starting parameters (the pair's bundled profile, or what stands in for it);
            parameters the measurements do not pin keep its values.
        label: the fit's label (default: the source's, or ``"fitted to N configs"``).

    Returns:
        the :class:`FittedAcceptance`.

    Raises:
        DataError: no speculative observation.
    """
    from scipy.optimize import least_squares  # SciPy only where a fit runs (cold commands stay fast)

    if isinstance(source_or_observations, AcceptanceSource):
        observations: Iterable[AcceptanceObservation] = source_or_observations.observations
        label = label or source_or_observations.label
    else:
        observations = source_or_observations
    measured = _aggregate(observations)
    if not measured:
        raise DataError("no measured speculative config: nothing to fit acceptance to")
    label = label or f"fitted to {len(measured)} config{'s' if len(measured) != 1 else ''}"
    names = _free_names(measured)
    x0 = [min(max(getattr(prior, n), _BOUNDS[n][0]), _BOUNDS[n][1]) for n in names]
    result = least_squares(
        lambda x: _residuals(_with(prior, names, x), measured),
        x0,
        bounds=([_BOUNDS[n][0] for n in names], [_BOUNDS[n][1] for n in names]),
        method="trf",
    )
    params = _with(prior, names, result.x)
    jac = np.asarray(result.jac, dtype=float)
    cov = np.linalg.pinv(jac.T @ jac)
    dof = len(result.fun) - len(names)
    if dof > 0:
        cov *= max(1.0, 2.0 * float(result.cost) / dof)  # residual spread beyond the stated sd
    residuals = tuple(FitResidual(m.action, m.accept, accept_length(m.action, params), m.count) for m in measured)
    return FittedAcceptance(
        params=params,
        prior=prior,
        free=tuple(names),
        residuals=residuals,
        label=label,
        covariance=tuple(tuple(float(v) for v in row) for row in cov),
        chain_depths=tuple(sorted({m.action[0] for m in measured if m.action[1] == 1})),
        tree_depths=tuple(sorted({m.action[0] for m in measured if m.action[1] > 1})),
    )
