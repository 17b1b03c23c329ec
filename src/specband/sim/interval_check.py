"""The 95 % intervals held to published points no fit saw (issue 35 item 6).

Points: SpecForge SpecBundle's accept lengths and speeds (``specband/data/specbundle_h200_8b.json``:
Llama-3.1-8B-Instruct, 7 workloads x 2 drafts, H200, bs 1; ``specbundle_acceptance.json``: accept
lengths of Llama-3.3-70B, Qwen3-30B-A3B, Kimi-K2 and Ling-Flash-2.0 with their drafts, bs 8),
each a (model, workload, draft) *group* with the configs (3,1,4), (5,1,6), (5,3,6), (7,1,8) and
(7,4,8) measured. Every group is fitted as a user's file would be, in each :data:`SCENARIOS`
(two chains; two chains and a tree), and the configs the scenario left out are the held-out
points: the accept length (every group) and, for the 8B groups, the speed (the file holds the
baseline's speed too, so the cost side is fitted as well, :mod:`specband.sim.cost_fit`).

Calibration (split conformal, per interval class): a held-out point's *score* is its log error
over its interval's log half-width on that side (``|log(measured / estimate)| / log(hi /
estimate)``, or ``... / log(estimate / lo)`` below): the interval holds it while the score is at
most 1. A class's factor :data:`~specband.sim.acceptance_fit.INTERVAL_SCALES` is the
``ceil((n + 1) x 0.95)``-th smallest score of its n points: the narrowest widening (or
narrowing: a factor under 1) that holds 95 % of them. :func:`held_out_coverage` checks that on
points none of the calibration saw: each model (or each workload) in turn is left out, the
factors are computed from the others, and the left-out group's points are scored with them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from specband.sim.acceptance import fitted_choice, resolve_acceptance
from specband.sim.acceptance_file import SpeedObservation
from specband.sim.acceptance_fit import INTERVAL_SCALES, AcceptanceObservation, fit_acceptance
from specband.sim.cost_fit import fit_cost
from specband.sim.model import SpeculativeDecodingModel, build_model
from specband.sim.profile import load_profile
from specband.sim.speed_interval import speed_interval

__all__ = [
    "LEVEL",
    "LEVELS",
    "SCENARIOS",
    "Calibration",
    "Group",
    "HeldOutPoint",
    "acceptance_points",
    "calibrate",
    "conformal_scale",
    "fitted_scales",
    "held_out_coverage",
    "load_groups",
    "speed_points",
]

#: The intervals' level.
LEVEL = 0.95
Triple = tuple[int, int, int]
_CONFIGS: tuple[Triple, ...] = ((3, 1, 4), (5, 1, 6), (5, 3, 6), (7, 1, 8), (7, 4, 8))
#: What a user's file measured in each scenario; the other configs are held out.
SCENARIOS: tuple[tuple[Triple, ...], ...] = (
    ((3, 1, 4), (7, 1, 8)),
    ((3, 1, 4), (5, 1, 6)),
    ((5, 1, 6), (7, 1, 8)),
    ((3, 1, 4), (7, 1, 8), (5, 3, 6)),
)


@dataclass(frozen=True)
class Group:
    """One published (model, workload, draft).

    Attributes:
        model, workload, draft: as published.
        accept_length: config -> measured accept length.
        speed_tok_s: config -> measured speed (the baseline under ``(0, 0, 0)``), empty when only
            accept lengths are bundled.
        batch_size: the batch size it was measured at.
    """

    model: str
    workload: str
    draft: str
    accept_length: Mapping[Triple, float]
    speed_tok_s: Mapping[Triple, float]
    batch_size: int


@dataclass(frozen=True)
class HeldOutPoint:
    """One held-out published figure against its interval.

    Attributes:
        group: where it comes from.
        scenario: the configs the fit saw.
        action: the held-out config.
        kind: the interval class (``chain``, ``tree``, ``cross``; ``speed`` for a speed).
        measured, estimate, lo, hi: the figure, the estimate and the 95 % interval (at the scales used).
        score: ``|log(measured / estimate)|`` over the log half-width on its side (covered at <= 1).
    """

    group: Group
    scenario: tuple[Triple, ...]
    action: Triple
    kind: str
    measured: float
    estimate: float
    lo: float
    hi: float
    score: float

    @property
    def covered(self) -> bool:
        """Whether the interval holds the measured figure."""
        return self.lo <= self.measured <= self.hi


def _triple(text: str) -> Triple:
    a, b, c = (int(x) for x in text.split(","))
    return (a, b, c)


def _data(name: str) -> Any:
    return json.loads(resources.files("specband").joinpath(f"data/{name}").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def load_groups() -> tuple[Group, ...]:
    """Every bundled group: the 8B pair's (with speeds) first, then the other models'."""
    out = []
    data = _data("specbundle_h200_8b.json")
    for workload, w in data["workloads"].items():
        for key, rows in w["drafts"].items():
            accept = {_triple(a): float(v["accept_length"]) for a, v in rows.items()}
            speed = {_triple(a): float(v["speed_tok_s"]) for a, v in rows.items()}
            speed[(0, 0, 0)] = float(w["baseline_tok_s"])
            out.append(Group(data["target"], workload, data["drafts"][key], accept, speed, int(data["batch_size"])))
    for g in _data("specbundle_acceptance.json")["groups"]:
        accept = {_triple(a): float(v) for a, v in g["accept_length"].items()}
        out.append(Group(g["model"], g["workload"], g["draft"], accept, {}, 8))
    return tuple(out)


def _score(measured: float, est: float, lo: float, hi: float) -> float:
    err = math.log(measured / est)
    width = math.log(hi / est) if err > 0 else math.log(est / lo)
    if width <= 0:
        return 0.0 if err == 0 else math.inf
    return abs(err) / width


def acceptance_points(scales: Mapping[str, float] | None = None) -> list[HeldOutPoint]:
    """Every held-out accept length of every group and scenario, scored at ``scales`` (default:
    the shipped :data:`~specband.sim.acceptance_fit.INTERVAL_SCALES`)."""
    profile = load_profile("h200")
    out = []
    for group in load_groups():
        prior = resolve_acceptance(profile, group.model, group.draft).params
        for scenario in SCENARIOS:
            fit = fit_acceptance([AcceptanceObservation(a, group.accept_length[a]) for a in scenario], prior=prior)
            for action in _CONFIGS:
                if action in scenario:
                    continue
                est, lo, hi = fit.accept_length_interval(action, scales)
                measured = group.accept_length[action]
                kind = fit.interval_class(action)
                out.append(
                    HeldOutPoint(group, scenario, action, kind, measured, est, lo, hi, _score(measured, est, lo, hi))
                )
    return out


def _speed_model(group: Group, scenario: tuple[Triple, ...]) -> SpeculativeDecodingModel:
    base = build_model("h200", target_config="llama-3.1-8b-instruct")
    obs = [AcceptanceObservation(a, group.accept_length[a]) for a in scenario]
    choice = base.acceptance
    fitted = SpeculativeDecodingModel(
        base.profile,
        base.target,
        base.draft,
        acceptance=fitted_choice(choice, fit_acceptance(obs, prior=choice.params)),
    )
    speeds = [SpeedObservation(group.batch_size, (0, 0, 0), group.speed_tok_s[(0, 0, 0)], 1.0)]
    speeds += [SpeedObservation(group.batch_size, a, group.speed_tok_s[a], group.accept_length[a]) for a in scenario]
    correction = fit_cost(fitted, speeds, label="held-out check")
    return SpeculativeDecodingModel(
        fitted.profile, fitted.target, fitted.draft, acceptance=fitted.acceptance, cost_correction=correction
    )


def speed_points(scales: Mapping[str, float] | None = None, speed_scale: float | None = None) -> list[HeldOutPoint]:
    """Every held-out speed of the 8B groups (the file: the baseline and the scenario's configs,
    speeds and accept lengths), scored against its speed interval at ``scales`` and
    ``speed_scale`` (defaults: the shipped ones)."""
    out = []
    for group in load_groups():
        if not group.speed_tok_s:
            continue
        for scenario in SCENARIOS:
            model = _speed_model(group, scenario)
            for action in _CONFIGS:
                if action in scenario:
                    continue
                si = speed_interval(model, group.batch_size, action, scales=scales, speed_scale=speed_scale)
                measured = group.speed_tok_s[action]
                out.append(
                    HeldOutPoint(
                        group, scenario, action, "speed", measured, si.expected_tok_s, si.lo_tok_s, si.hi_tok_s,
                        _score(measured, si.expected_tok_s, si.lo_tok_s, si.hi_tok_s),
                    )
                )  # fmt: skip
    return out


def conformal_scale(scores: Sequence[float], level: float = LEVEL) -> float:
    """The split-conformal factor: the ``ceil((n + 1) x level)``-th smallest score (the largest
    when that rank is past ``n``)."""
    ordered = sorted(scores)
    if not ordered:
        return 1.0
    rank = min(len(ordered), math.ceil((len(ordered) + 1) * level))
    return ordered[rank - 1]


def fitted_scales(points: Sequence[HeldOutPoint], level: float = LEVEL) -> dict[str, float]:
    """The factor of each acceptance interval class from ``points`` scored at scale 1."""
    return {kind: conformal_scale([p.score for p in points if p.kind == kind], level) for kind in INTERVAL_SCALES}


def held_out_coverage(
    points: Sequence[HeldOutPoint], by: Callable[[Group], str], level: float = LEVEL
) -> tuple[float, dict[str, float]]:
    """Coverage on points no calibration saw: each value of ``by`` (the model, the workload) is
    left out in turn, each class's factor is fitted (at ``level``) on the rest of ``points``
    (scored at scale 1), and the left-out points are checked against it.

    Returns:
        ``(coverage, per-class coverage)``.
    """
    covered: dict[str, list[bool]] = {}
    for key in sorted({by(p.group) for p in points}):
        rest = [p for p in points if by(p.group) != key]
        scales = {
            kind: conformal_scale([p.score for p in rest if p.kind == kind], level) for kind in {p.kind for p in points}
        }
        for p in points:
            if by(p.group) == key:
                covered.setdefault(p.kind, []).append(p.score <= scales[p.kind])
    every = [c for cs in covered.values() for c in cs]
    return sum(every) / len(every), {k: sum(v) / len(v) for k, v in covered.items()}


#: The calibration levels tried, in order: the first whose leave-one-model-out and
#: leave-one-workload-out coverage are both at least :data:`LEVEL` is the one shipped (the
#: narrowest intervals that hold 95 % of points no calibration saw).
LEVELS = (0.95, 0.96, 0.97, 0.98, 0.99)


def _by_model(g: Group) -> str:
    return g.model


def _by_workload(g: Group) -> str:
    return g.workload


@dataclass(frozen=True)
class Calibration:
    """The intervals' calibration and how it holds (:func:`calibrate`).

    Attributes:
        scales: the acceptance classes' factors (:data:`~specband.sim.acceptance_fit.INTERVAL_SCALES`).
        level: the conformal level they were fitted at.
        speed_scale: the cost-fitted speed intervals' factor
            (:data:`~specband.sim.speed_interval.FITTED_SPEED_SCALE`).
        speed_level: its level.
        coverage: ``{"acceptance by model", "acceptance by workload", "speed by workload"}`` ->
            held-out coverage; ``"acceptance points"``, ``"speed points"``: how many.
        class_coverage: per acceptance class, coverage left out by model and by workload.
        raw_coverage: coverage of the points at the intervals before calibration (scale 1).
    """

    scales: dict[str, float]
    level: float
    speed_scale: float
    speed_level: float
    coverage: dict[str, float]
    class_coverage: dict[str, tuple[float, float]]
    raw_coverage: dict[str, float]


def _lowest_level(points: Sequence[HeldOutPoint], splits: Sequence[Callable[[Group], str]]) -> float:
    for level in LEVELS:
        if all(held_out_coverage(points, by, level)[0] >= LEVEL for by in splits):
            return level
    return LEVELS[-1]


def calibrate() -> Calibration:
    """Fit every interval factor to the bundled published points and report how they hold on
    points no calibration saw (see the module docstring)."""
    raw = acceptance_points({k: 1.0 for k in INTERVAL_SCALES})
    level = _lowest_level(raw, (_by_model, _by_workload))
    scales = fitted_scales(raw, level)
    by_model = held_out_coverage(raw, _by_model, level)
    by_workload = held_out_coverage(raw, _by_workload, level)
    speeds = speed_points(scales, 1.0)
    speed_level = _lowest_level(speeds, (_by_workload,))
    speed_scale = conformal_scale([p.score for p in speeds], speed_level)
    coverage = {
        "acceptance by model": by_model[0],
        "acceptance by workload": by_workload[0],
        "speed by workload": held_out_coverage(speeds, _by_workload, speed_level)[0],
        "acceptance points": float(len(raw)),
        "speed points": float(len(speeds)),
    }
    classes = {k: (by_model[1][k], by_workload[1][k]) for k in scales}
    raw_coverage = {k: sum(p.covered for p in raw if p.kind == k) / sum(p.kind == k for p in raw) for k in scales}
    raw_coverage["speed"] = sum(p.covered for p in speeds) / len(speeds)
    return Calibration(scales, level, speed_scale, speed_level, coverage, classes, raw_coverage)
