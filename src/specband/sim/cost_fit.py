"""The cost side fitted to measured speeds (``--acceptance-from FILE`` where the file has speeds).

A file that measures speeds as well as accept lengths measures step times: ``step = accept
length / speed`` (for the baseline, ``1 / speed``). The profile's step time is calibrated on other
prompts, another engine build, another clock: on SpecBundle's H200 rows, GSM8K's (3,1,4) runs
~6 % slower than MT-bench's at the same accept length. :func:`fit_cost` scales the simulated
step time to the measured ones, per batch size, with as few parameters as the data pins:

* one measured config at a batch size: a factor ``f`` (``step = f x simulated``);
* two or more, speculative ones among them: a factor and a per-speculative-step term ``c``
  (``step = f x simulated + c`` for a speculative config, ``f x simulated`` for the baseline: the
  host work sglang does around every speculative step, which the profile's
  ``host_overhead_spec_s`` prices and a given server may pay otherwise), by least squares on
  relative errors: two configs are reproduced exactly, three or more leave a residual that says
  how well the form holds (on SpecBundle's rows: within 1.7 % with the baseline, (3,1,4) and
  (7,1,8); a per-verified-token term instead leaves 3.0 %).

Batch sizes between measured ones take ``f`` and ``c`` interpolated in ``log(bs)``; outside them,
the nearest measured batch size's. The ratio of the corrected to the simulated step stays inside
the range of the measured configs' own ratios (a config unlike any measured one is not
extrapolated past them). The correction stretches (or shrinks) the whole step uniformly, kernels
and host time alike (:meth:`CostCorrection.adjust`): the power model then sees the same work over
a longer step.

Held to SpecBundle's H200 rows (``specband/data/specbundle_h200_8b.json``, 7 workloads x 2
drafts at bs 1): the baseline, (3,1,4) and (7,1,8) as the file, the acceptance and this fit
predict (5,1,6)'s speed within 2.0 % on all 14 (without the cost fit: 11.8 % off on GSM8K with
the SpecForge draft, whose measured (3,1,4) runs 11 % slower than the profile says);
``tests/sim/test_cost_fit.py`` recomputes it.
"""

from __future__ import annotations

import dataclasses
import math
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specband.core.errors import DataError
from specband.sim.acceptance_file import SpeedObservation

__all__ = [
    "COST_FIT_SD",
    "CostCorrection",
    "CostPoint",
    "CostResidual",
    "fit_cost",
]

#: Relative sd of a fitted step time at a measured batch size, for a config the file did not
#: measure: the RMS error of the held-out configs' step times after the fit on SpecBundle's H200
#: rows (the baseline, (3,1,4) and (7,1,8) fitted; (5,1,6), (5,3,6) and (7,4,8) held out, 7
#: workloads x 2 drafts: 2.75 %; the chain 0.31 %, the trees 3.4 %, worst 9.4 %); the intervals'
#: calibration (:mod:`specband.sim.interval_check`) checks what it gives.
COST_FIT_SD = 0.0275

Triple = tuple[int, int, int]


def _speculative(action: Sequence[int]) -> bool:
    return int(action[0]) > 0


def _step(cost: Any) -> float:
    return float(cost.kernel_time_s + cost.host_time_s)


@dataclass(frozen=True)
class CostPoint:
    """The correction at one measured batch size.

    Attributes:
        batch_size: the batch size.
        factor: ``f``, the simulated step time's multiplier.
        spec_step_s: ``c``, s added to every speculative step (0 with one config).
        configs: measured configs behind it.
        kinds: which kinds were measured: ``"baseline"``, ``"speculative"`` or both.
        ratios: ``(lowest, highest)`` measured over simulated step time of the measured configs.
    """

    batch_size: int
    factor: float
    spec_step_s: float
    configs: int
    kinds: tuple[str, ...] = ()
    ratios: tuple[float, float] = (1.0, 1.0)


@dataclass(frozen=True)
class CostResidual:
    """The fit at one measured (batch size, config).

    Attributes:
        batch_size, action: where.
        measured_step_s: the measured step time (mean of its rows), s.
        fitted_step_s: the corrected simulated step time, s.
        observations: rows behind the measured figure.
    """

    batch_size: int
    action: Triple
    measured_step_s: float
    fitted_step_s: float
    observations: int

    @property
    def relative_error(self) -> float:
        """``fitted / measured - 1`` of the step time (the speed's error is its inverse)."""
        return self.fitted_step_s / self.measured_step_s - 1.0


@dataclass(frozen=True)
class CostCorrection:
    """The step-time correction fitted to measured speeds (:func:`fit_cost`).

    Attributes:
        points: one :class:`CostPoint` per measured batch size, ascending.
        residuals: one :class:`CostResidual` per measured (batch size, config).
        label: where the speeds come from (``"speeds of N configs of FILE"``).
    """

    points: tuple[CostPoint, ...]
    residuals: tuple[CostResidual, ...]
    label: str

    def _around(self, batch_size: int) -> tuple[CostPoint, CostPoint, float]:
        """The measured points at or around ``batch_size`` and the weight of the upper one."""
        sizes = [p.batch_size for p in self.points]
        i = bisect_left(sizes, batch_size)
        if i < len(sizes) and sizes[i] == batch_size:
            return self.points[i], self.points[i], 0.0
        if i == 0 or i == len(sizes):
            edge = self.points[0] if i == 0 else self.points[-1]
            return edge, edge, 0.0
        lo, hi = self.points[i - 1], self.points[i]
        t = (math.log(batch_size) - math.log(lo.batch_size)) / (math.log(hi.batch_size) - math.log(lo.batch_size))
        return lo, hi, t

    def at(self, batch_size: int) -> tuple[float, float]:
        """``(f, c)`` at ``batch_size``: a measured one's, interpolated in ``log(bs)`` between
        two, the nearest one's outside them."""
        lo, hi, t = self._around(batch_size)
        return lo.factor + t * (hi.factor - lo.factor), lo.spec_step_s + t * (hi.spec_step_s - lo.spec_step_s)

    def ratio(self, batch_size: int, action: Sequence[int], simulated_step_s: float) -> float:
        """Corrected over simulated step time: ``f + c / simulated`` (``c`` on speculative configs
        only), kept inside the range of the measured configs' own ratios at or around
        ``batch_size``."""
        f, c = self.at(batch_size)
        lo, hi, _t = self._around(batch_size)
        low, high = min(lo.ratios[0], hi.ratios[0]), max(lo.ratios[1], hi.ratios[1])
        raw = f + (c if _speculative(action) else 0.0) / simulated_step_s
        return min(high, max(low, raw))

    def adjust(self, batch_size: int, action: Sequence[int], cost: Any) -> Any:
        """``cost`` (a :class:`~specband.sim.model.StepCost` at full clock) with every forward
        and the host time stretched by :meth:`ratio`."""
        k = self.ratio(batch_size, action, _step(cost))
        forwards = tuple((label, n, t_mem * k, t_cmp * k) for label, n, t_mem, t_cmp in cost.forwards)
        return dataclasses.replace(
            cost,
            kernel_time_s=cost.kernel_time_s * k,
            compute_time_s=cost.compute_time_s * k,
            host_time_s=cost.host_time_s * k,
            forwards=forwards,
        )

    def step_sd(self, batch_size: int, action: Sequence[int], default: float) -> float:
        """Relative sd of the corrected step time.

        Args:
            batch_size, action: the config.
            default: the profile's calibration error (used at a batch size not measured).

        Returns:
            at a measured (batch size, config): its own residual, at least half of
            :data:`COST_FIT_SD`; another config at a batch size where the baseline and a
            speculative config were measured: :data:`COST_FIT_SD` (what the held-out check on
            SpecBundle's rows gives); where only one kind was measured, the factor and the
            per-step time are confounded: :data:`COST_FIT_SD` (``default`` for the kind not
            measured, at least :data:`COST_FIT_SD`) plus the measured configs' spread of ratios;
            a batch size not measured: ``default``.
        """
        point = next((p for p in self.points if p.batch_size == batch_size), None)
        if point is None:
            return default
        act = tuple(int(x) for x in action)
        own = [r for r in self.residuals if r.batch_size == batch_size and r.action == act]
        if own:
            return max(abs(own[0].relative_error), COST_FIT_SD / 2)
        kind = "speculative" if _speculative(act) else "baseline"
        if len(point.kinds) == 2:
            return COST_FIT_SD
        low, high = point.ratios
        spread = (high - low) / (0.5 * (high + low))
        return (COST_FIT_SD if kind in point.kinds else max(default, COST_FIT_SD)) + spread

    def lines(self) -> list[str]:
        """One line per batch size and one per measured config: what the fit did."""
        out = []
        for p in self.points:
            sign = "+" if p.spec_step_s >= 0 else "-"
            term = f" {sign} {1e3 * abs(p.spec_step_s):.3f} ms per speculative step" if p.configs > 1 else ""
            out.append(
                f"cost fit bs {p.batch_size}: step time x{p.factor:.3f}{term} ({p.configs} config"
                f"{'s' if p.configs != 1 else ''}, {self.label})"
            )
        for r in self.residuals:
            out.append(
                f"cost fit residual bs {r.batch_size} {r.action}: measured step {1e3 * r.measured_step_s:.3f} ms, "
                f"fitted {1e3 * r.fitted_step_s:.3f} ms ({100 * r.relative_error:+.1f} %)"
                + (f", {r.observations} rows" if r.observations > 1 else "")
            )
        return out


def fit_cost(model: Any, speeds: Sequence[SpeedObservation], *, label: str) -> CostCorrection:
    """Fit the step-time correction to measured speeds (see the module docstring).

    Args:
        model: the performance model whose step time is corrected (its ``step_cost``; any
            correction it already has is not used).
        speeds: the measured speeds.
        label: where they come from.

    Raises:
        DataError: no speed to fit to.
    """
    groups: dict[tuple[int, Triple], list[float]] = defaultdict(list)
    for s in speeds:
        groups[(s.batch_size, s.action)].append(s.step_time_s)
    if not groups:
        raise DataError("no measured speed: nothing to fit the cost side to")
    by_bs: dict[int, list[tuple[Triple, float, int]]] = defaultdict(list)
    for (bs, action), steps in sorted(groups.items()):
        by_bs[bs].append((action, sum(steps) / len(steps), len(steps)))
    points, measured_at = [], []
    for bs, configs in sorted(by_bs.items()):
        sim = np.array([_step(model.step_cost(bs, a)) for a, _m, _n in configs])
        measured = np.array([m for _a, m, _n in configs])
        spec = np.array([1.0 if _speculative(a) else 0.0 for a, _m, _n in configs])
        ratios = measured / sim
        if len(configs) >= 2 and spec.any():
            design = np.column_stack([sim / measured, spec / measured])
            f, c = (float(x) for x in np.linalg.lstsq(design, np.ones(len(configs)), rcond=None)[0])
        else:
            f, c = float(np.sum(1 / ratios) / np.sum(1 / ratios**2)), 0.0
        kinds = tuple(k for k, present in (("baseline", not spec.all()), ("speculative", spec.any())) if present)
        points.append(CostPoint(bs, f, c, len(configs), kinds, (float(ratios.min()), float(ratios.max()))))
        measured_at += [(bs, a, m, n, float(s)) for (a, m, n), s in zip(configs, sim, strict=True)]
    unfinished = CostCorrection(tuple(points), (), label)
    residuals = tuple(CostResidual(bs, a, m, s * unfinished.ratio(bs, a, s), n) for bs, a, m, n, s in measured_at)
    return CostCorrection(tuple(points), residuals, label)
