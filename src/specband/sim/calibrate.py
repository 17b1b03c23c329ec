"""Calibration of the performance model against published measurements, and its report.

Data: the 29 bundled published live rows (RTX 4060 Laptop, 80 W; docs/FACTS.md §7). The rows of
trial ``validate`` (17 rows, batch sizes 1/4/8/16) are fitted; the rows of trials
``seed0``..``seed3`` (12 rows, bs 16 only) are held out and only predicted.

Two stages, both ``scipy.optimize.least_squares`` (trust-region reflective, bounded):

1. acceptance (:mod:`specband.sim.draft_tree`, 7 parameters) on the fitted rows' accept lengths,
   started from the current profile's values and from a few fixed points;
2. step time, power and wall clock (:data:`FIT_PARAMETERS`) on the fitted rows' speed
   (relative error, scale 1 %), energy utilisation (absolute, scale 0.01) and J/token
   (relative, scale 3 %); baselines have no utilisation and contribute speed and J/token.

Temperatures were not published: the fit takes every run at the profile's
``reference_temp_c`` (leakage factor 1), and the thermal parameters are assumptions
consistent with the published rewards (a thermal multiplier of 1, i.e. <= 75 C after every
published run).

:func:`refit_profile` keeps what a fit did (:class:`FitResult`: the costs of both stages,
every parameter before and after); :func:`format_fit` prints it (``specband simulate
--calibration-report --refit``).

The report compares, per published row, predicted and measured accept length, speed,
J/token and utilisation, gives the median and worst errors for the fitted and the held-out
rows, checks that the measured ranking of configs by reward at each batch size is kept, and
that bs 16 (3,4,8) overshoots the band while (3,2,4) lands in it.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specband.contract.actions import Action
from specband.contract.reward import RewardConfig, compute_reward
from specband.core.errors import ConfigError
from specband.core.tables import text_table, wrap_lines
from specband.files.fileio import write_text_atomic
from specband.sim.draft_tree import AcceptParams, accept_length
from specband.sim.hfconfig import ModelSpec
from specband.sim.model import SpeculativeDecodingModel
from specband.sim.profile import HardwareProfile, profile_to_toml
from specband.sim.simulated import check_out_path
from specband.sweeps.dataset import Sweep, SweepRow, load_sweep

__all__ = [
    "ACCEPT_PARAMETERS",
    "CALIBRATION_TRIALS",
    "FIT_PARAMETERS",
    "NOISE_PARAMETERS",
    "CalibrationReport",
    "FitResult",
    "RowComparison",
    "aic_refitted_provenance",
    "calibration_report",
    "check_rows_gpu",
    "fit_profile",
    "format_fit",
    "noise_from_trials",
    "refit_profile",
    "refitted_provenance",
    "write_profile",
]

#: Trials fitted; the others (seed0..seed3) are held out.
CALIBRATION_TRIALS: tuple[str, ...] = ("validate",)

#: Acceptance parameters and their bounds.
ACCEPT_PARAMETERS: dict[str, tuple[float, float]] = {
    "first_token_accept": (0.05, 0.99),
    "depth_decay": (0.3, 1.2),
    "rank2_ratio": (0.01, 1.0),
    "rank_decay": (0.01, 1.0),
    "alt_depth_decay": (0.01, 1.5),
    "off_track_factor": (0.01, 1.0),
    "chain_factor": (0.3, 1.2),
}

#: Step-time, power and wall-clock parameters fitted in stage 2, with bounds.
FIT_PARAMETERS: dict[str, tuple[float, float]] = {
    "bandwidth_efficiency": (0.5, 1.0),
    "compute_efficiency": (0.05, 1.0),
    "host_overhead_base_s": (0.0, 0.003),
    "host_overhead_spec_s": (0.0, 0.01),
    "host_overhead_draft_step_s": (0.0, 0.005),
    "host_overhead_verify_token_s": (0.0, 5e-6),
    "prompt_tokens": (16.0, 2048.0),
    "idle_power_w": (8.0, 20.0),
    "busy_power_frac": (0.0, 2.0),
    "mem_power_frac": (0.0, 2.0),
    "compute_power_frac": (0.0, 2.0),
    "cap_tracking": (0.0, 0.5),
    "ragged_overhead": (0.0, 1.0),
    "ragged_overhead_per_step": (0.0, 0.3),
    "fixed_overhead_s": (0.0, 5.0),
}

_SPEED_SCALE = 0.01
_UTIL_SCALE = 0.01
_JPT_SCALE = 0.03


def _is_fitted(row: SweepRow) -> bool:
    return row.trial in CALIBRATION_TRIALS


def _usable(sweep: Sweep) -> list[SweepRow]:
    return [r for r in sweep.rows if r.trainable and r.speed_tok_s is not None]


def _speed(r: SweepRow) -> float:
    """The measured decode speed (tok/s) of a row :func:`_usable` kept."""
    assert r.speed_tok_s is not None
    return r.speed_tok_s


def _model_with(model: SpeculativeDecodingModel, values: dict[str, float]) -> SpeculativeDecodingModel:
    return SpeculativeDecodingModel(model.profile.with_values(**values), model.target, model.draft)


def _fit_accept(model: SpeculativeDecodingModel, rows: Sequence[SweepRow]) -> tuple[dict[str, float], float, float]:
    """Stage 1: the acceptance parameters; returns (values, cost at the start, cost after)."""
    from scipy.optimize import least_squares

    names = list(ACCEPT_PARAMETERS)
    lo = np.array([ACCEPT_PARAMETERS[n][0] for n in names])
    hi = np.array([ACCEPT_PARAMETERS[n][1] for n in names])
    data = [(r.action, float(r.accept_length)) for r in rows if not r.is_baseline and r.accept_length is not None]

    def residuals(x: np.ndarray) -> list[float]:
        params = AcceptParams(*(float(v) for v in x))
        return [accept_length(a, params) - v for a, v in data]

    current = np.array([getattr(model.profile, n) for n in names], dtype=float)
    start_cost = _cost(residuals(current))
    starts = [
        np.clip(current, lo, hi),
        np.array([0.6, 0.95, 0.2, 0.8, 0.55, 0.55, 1.0]),
        np.array([0.6, 0.9, 0.4, 0.5, 0.8, 0.3, 0.9]),
    ]
    best = None
    for x0 in starts:
        res = least_squares(residuals, np.clip(x0, lo, hi), bounds=(lo, hi), diff_step=1e-3)
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    return {n: float(v) for n, v in zip(names, best.x, strict=True)}, start_cost, float(best.cost)


def _cost(residuals: Sequence[float] | np.ndarray) -> float:
    """scipy's least-squares cost: 0.5 x the sum of squared residuals."""
    r = np.asarray(residuals, dtype=float)
    return float(0.5 * np.dot(r, r))


#: Noise parameters set from the repeated published trials (:func:`noise_from_trials`).
NOISE_PARAMETERS: tuple[str, ...] = ("accept_sd", "speed_rel_sd", "power_rel_sd")


@dataclass(frozen=True)
class FitResult:
    """What a refit did: the profile before and after, and the least-squares costs.

    Costs are scipy's ``0.5 * sum(residual ** 2)`` of the scaled residuals (stage 1: accept
    length error in tokens; stage 2: speed error per 1 %, utilisation error per 0.01, J/token
    error per 3 %), dimensionless.

    Attributes:
        start: the profile the fit started from.
        profile: the fitted profile (``calibrated = True``).
        rows: number of published rows fitted (trial ``validate``).
        accept_cost: stage 1 cost at the start's acceptance values and after the fit.
        cost: stage 2 cost at the starting values (clipped to :data:`FIT_PARAMETERS`'s
            bounds, with the stage 1 acceptance) and after the fit.
        evaluations: residual evaluations of stage 2.
        message: scipy's termination message of stage 2.
    """

    start: HardwareProfile
    profile: HardwareProfile
    rows: int
    accept_cost: tuple[float, float]
    cost: tuple[float, float]
    evaluations: int
    message: str

    def changes(self) -> list[tuple[str, float, float]]:
        """``(parameter, before, after)`` for every parameter a refit sets: acceptance,
        :data:`FIT_PARAMETERS`, ``activity_power_w`` and the noise parameters."""
        names = [*ACCEPT_PARAMETERS, *FIT_PARAMETERS, "activity_power_w", *NOISE_PARAMETERS]
        return [(n, float(getattr(self.start, n)), float(getattr(self.profile, n))) for n in names]


def _gpu_key(name: str) -> str:
    return "".join(c for c in str(name).lower() if c.isalnum())


def rows_hardware(sweep: Sweep | None = None) -> str:
    """The ``hardware`` the calibration rows were measured on (``"RTX4060_Laptop"`` for the
    bundled rows; several names joined with ``" + "``)."""
    sweep = load_sweep() if sweep is None else sweep
    names = sorted({str(r.raw.get("hardware")) for r in sweep.rows if r.raw.get("hardware")})
    return " + ".join(names) or "unknown"


def check_rows_gpu(profile: HardwareProfile, sweep: Sweep | None = None, *, refit: bool = False) -> None:
    """A profile is compared with (or refitted to) measurements of its own GPU only: its
    ``hardware`` must be the rows' (letters and digits, case-insensitive).

    Raises:
        ConfigError: another GPU's profile, naming both and the reports that fit it.
    """
    rows = rows_hardware(sweep)
    if _gpu_key(profile.hardware) in {_gpu_key(h) for h in rows.split(" + ")}:
        return
    what = "refitted to" if refit else "compared with"
    raise ConfigError(
        f"profile {profile.name} is {profile.hardware}; the published live rows are {rows}'s, so it cannot be "
        f"{what} them (another GPU's measurements). For {profile.hardware}: --against published-datacenter "
        "(published measurements of datacenter GPUs) or --against aic (AIConfigurator's step times)"
    )


def refitted_provenance(fit: FitResult, name: str, sweep: Sweep | None = None) -> HardwareProfile:
    """The refitted profile named ``name`` (the file it is written to), its ``source``
    (and ``power_source``, which the fit replaced) saying what it was fitted to, so that
    rows simulated from it cannot be taken for the shipped profile's."""
    hardware = rows_hardware(sweep)
    fitted = (
        f"refitted by specband simulate --refit from profile {fit.start.name} to {fit.rows} published live rows of "
        f"{hardware} (trial {', '.join(CALIBRATION_TRIALS)})"
    )
    values: dict[str, object] = {"name": name, "source": fitted}
    if fit.profile.power_source:
        values["power_source"] = f"{fitted}: idle and activity power fitted to their utilisation and J/token"
    return fit.profile.with_values(**values)


def aic_refitted_provenance(profile: HardwareProfile, name: str, start: str, reference: str) -> HardwareProfile:
    """A profile refitted to AIConfigurator's step times (``--refit --against aic``), named
    ``name`` (the file it is written to) with ``source`` (and ``power_source``, whose power now
    follows the refitted step times) saying what it was refitted against, so that neither the
    file nor the rows simulated from it pass for the shipped profile (hostile trial N21b: the
    file kept ``name = "h100-sxm"`` and the shipped source line, and its rows said
    ``profile: "h100-sxm"``)."""
    fitted = f"refitted by specband simulate --refit --against aic from profile {start} to {reference}"
    values: dict[str, object] = {"name": name, "source": fitted}
    if profile.power_source:
        values["power_source"] = f"{profile.power_source}, with step times {fitted}"
    return profile.with_values(**values)


def refit_profile(
    model: SpeculativeDecodingModel, sweep: Sweep | None = None, *, max_nfev: int = 400, noise: bool = False
) -> FitResult:
    """Fit the acceptance and step/power/wall-clock parameters to the calibration trials,
    keeping what was done (see :class:`FitResult`).

    Args:
        model: starting point (its profile's values seed the fit).
        sweep: published-live rows; default the bundled 29 rows.
        max_nfev: evaluation budget of stage 2.
        noise: also set the noise parameters from the repeated trials
            (:func:`noise_from_trials`).

    Returns:
        the fit; ``profile`` has ``calibrated = True``; the held-out trials are not used.
    """
    from scipy.optimize import least_squares

    start = model.profile
    sweep = load_sweep() if sweep is None else sweep
    rows = [r for r in _usable(sweep) if _is_fitted(r)]
    accept_values, accept_before, accept_after = _fit_accept(model, rows)
    # during the fit the activity scale follows the fitted idle power; it is pinned after
    model = _model_with(model, {**accept_values, "activity_power_w": 0.0})
    names = list(FIT_PARAMETERS)
    lo = np.array([FIT_PARAMETERS[n][0] for n in names])
    hi = np.array([FIT_PARAMETERS[n][1] for n in names])
    limit = model.profile.power_limit_w
    temp = model.profile.reference_temp_c

    def residuals(x: np.ndarray) -> np.ndarray:
        try:
            m = _model_with(model, {n: float(v) for n, v in zip(names, x, strict=True)})
        except Exception:  # out-of-range combination (e.g. idle power above limit)
            return np.full(3 * len(rows), 1e3)
        out = []
        for r in rows:
            pred = m.predict(r.batch_size, r.action, temp)
            speed = r.accept_length / pred.step_time_s if r.accept_length else pred.speed_tok_s
            out.append((speed / _speed(r) - 1.0) / _SPEED_SCALE)
            util = r.utilization(limit)
            out.append(0.0 if util is None else (pred.avg_power_w / limit - util) / _UTIL_SCALE)
            jpt = r.raw.get("joules_per_token")
            if jpt:
                cost = m.run_cost(r.batch_size, r.action, pred)
                out.append((cost.joules_per_token / jpt - 1.0) / _JPT_SCALE)
            else:
                out.append(0.0)
        return np.array(out)

    x0 = np.clip(np.array([getattr(model.profile, n) for n in names], dtype=float), lo, hi)
    before = _cost(residuals(x0))
    res = least_squares(
        residuals, x0, bounds=(lo, hi), x_scale=np.maximum(hi - lo, 1e-9) * 0.1, diff_step=1e-4, max_nfev=max_nfev
    )
    fitted = {n: float(v) for n, v in zip(names, res.x, strict=True)}
    profile = model.profile.with_values(**fitted, calibrated=True)
    profile = profile.with_values(activity_power_w=profile.power_limit_w - profile.idle_power_w)
    if noise:
        profile = profile.with_values(**noise_from_trials(sweep))
    return FitResult(
        start=start,
        profile=profile,
        rows=len(rows),
        accept_cost=(accept_before, accept_after),
        cost=(before, float(res.cost)),
        evaluations=int(res.nfev),
        message=str(res.message),
    )


def fit_profile(model: SpeculativeDecodingModel, sweep: Sweep | None = None, *, max_nfev: int = 400) -> HardwareProfile:
    """Fit the acceptance and step/power/wall-clock parameters to the calibration trials
    (:func:`refit_profile` without the costs).

    Args:
        model: starting point (its profile's values seed the fit).
        sweep: published-live rows; default the bundled 29 rows.
        max_nfev: evaluation budget of stage 2.

    Returns:
        the fitted profile (``calibrated = True``); the held-out trials are not used.
    """
    return refit_profile(model, sweep, max_nfev=max_nfev).profile


def format_fit(result: FitResult, width: int | None = None) -> str:
    """What a refit did, as plain text: the costs of both stages, then every parameter it
    sets as ``before -> after`` (6 significant digits, as a written profile holds them);
    lines longer than ``width`` wrapped between words."""

    acc0, acc1 = result.accept_cost
    c0, c1 = result.cost
    lines = [
        f"refit of profile {result.start.name} to trial {', '.join(CALIBRATION_TRIALS)} "
        f"({result.rows} published rows), scipy.optimize.least_squares:",
        f"  stage 1, acceptance ({len(ACCEPT_PARAMETERS)} parameters): cost {acc0:.6g} -> {acc1:.6g}",
        f"  stage 2, step time/power/wall clock ({len(FIT_PARAMETERS)} parameters): cost {c0:.6g} -> {c1:.6g} "
        f"({result.evaluations} evaluations; {result.message})",
        "  cost = 0.5 x sum of squared scaled residuals (accept length in tokens; speed per 1 %, "
        "utilisation per 0.01, J/token per 3 %)",
    ]
    changes = result.changes()
    name_width = max(len(n) for n, _, _ in changes)
    changed = 0
    for name, before, after in changes:
        b, a = f"{before:.6g}", f"{after:.6g}"
        if b == a:
            note = "unchanged"
        else:
            changed += 1
            note = f"{100 * (after / before - 1):+.3g} %" if before else "was 0"
        lines.append(f"  {name:{name_width}}  {b:>12} -> {a:<12} {note}")
    lines.append(f"  {changed} of {len(changes)} parameters changed")
    return "\n".join(wrap_lines(lines, width))


def noise_from_trials(sweep: Sweep | None = None) -> dict[str, float]:
    """Run-to-run noise from the repeated published configs: pooled sample standard
    deviation, per (batch size, action) with >= 3 trials, of accept length (absolute),
    speed (relative) and utilisation (relative).

    Returns:
        ``{"accept_sd", "speed_rel_sd", "power_rel_sd"}``.
    """
    sweep = load_sweep() if sweep is None else sweep
    groups: dict[tuple[int, int], list[SweepRow]] = defaultdict(list)
    for r in _usable(sweep):
        groups[(r.batch_size, r.action_index)].append(r)
    acc, spd, pwr = [], [], []
    for rows in groups.values():
        if len(rows) < 3:
            continue
        if not rows[0].is_baseline:
            a = [r.accept_length for r in rows if r.accept_length is not None]
            acc.append((len(a) - 1, statistics.variance(a)))
        s = [_speed(r) for r in rows]
        spd.append((len(s) - 1, statistics.variance(s) / statistics.mean(s) ** 2))
        u = [x for x in (r.utilization(80.0) for r in rows) if x is not None]
        if len(u) >= 3:
            pwr.append((len(u) - 1, statistics.variance(u) / statistics.mean(u) ** 2))

    def pooled(items: list[tuple[int, float]]) -> float:
        dof = sum(d for d, _ in items)
        return math.sqrt(sum(d * v for d, v in items) / dof) if dof else 0.0

    return {"accept_sd": pooled(acc), "speed_rel_sd": pooled(spd), "power_rel_sd": pooled(pwr)}


# --------------------------------------------------------------------------- report
@dataclass(frozen=True)
class RowComparison:
    """Predicted vs measured for one published row.

    Attributes:
        trial, batch_size, action: the row.
        fitted: True for a calibration row, False for a held-out one.
        accept_measured, accept_predicted: accept length.
        speed_measured, speed_predicted: tok/s per request.
        jpt_measured, jpt_predicted: J per output token.
        util_measured, util_predicted: energy utilisation (``None`` when not published).
        reward_measured, reward_predicted: reward against the same trial's baseline
            (measured) and the predicted baseline (predicted); ``None`` for baselines.
    """

    trial: str
    batch_size: int
    action: Action
    fitted: bool
    accept_measured: float
    accept_predicted: float
    speed_measured: float
    speed_predicted: float
    jpt_measured: float | None
    jpt_predicted: float
    util_measured: float | None
    util_predicted: float
    reward_measured: float | None
    reward_predicted: float | None

    @property
    def speed_error(self) -> float:
        """Relative speed error, predicted / measured - 1."""
        return self.speed_predicted / self.speed_measured - 1.0

    @property
    def util_error(self) -> float | None:
        """Utilisation error, predicted - measured."""
        return None if self.util_measured is None else self.util_predicted - self.util_measured

    @property
    def jpt_error(self) -> float | None:
        """Relative J/token error."""
        return None if self.jpt_measured is None else self.jpt_predicted / self.jpt_measured - 1.0

    @property
    def accept_error(self) -> float:
        """Accept length error, predicted - measured."""
        return self.accept_predicted - self.accept_measured


@dataclass(frozen=True)
class CalibrationReport:
    """The calibration report (see the module docstring).

    Attributes:
        rows: one comparison per published successful row.
        profile: the profile's name.
        ranking: batch size -> (measured order, predicted order) of the fitted trial's
            configs by reward, best first.
        speed_ranking: the same by speed (the baseline included).
        overshoot: predicted bs 16 utilisation of (3,4,8) and (3,2,4).
        gflops_per_token: action -> (computed, published) dense GFLOPs per output token.
        targets: target name -> (value, threshold, met).
    """

    rows: tuple[RowComparison, ...]
    profile: str
    ranking: dict[int, tuple[tuple[Action, ...], tuple[Action, ...]]] = field(default_factory=dict)
    speed_ranking: dict[int, tuple[tuple[Action, ...], tuple[Action, ...]]] = field(default_factory=dict)
    overshoot: dict[str, float] = field(default_factory=dict)
    gflops_per_token: dict[str, tuple[float, float]] = field(default_factory=dict)
    targets: dict[str, tuple[float, float, bool]] = field(default_factory=dict)

    def summary(self, fitted: bool | None) -> dict[str, float]:
        """Median and worst absolute errors over the fitted (True), held-out (False) or all
        (None) rows: ``speed_median``, ``speed_worst`` (relative), ``util_median``,
        ``util_worst``, ``accept_median``, ``accept_worst``, ``jpt_median``, ``jpt_worst``."""
        rows = [r for r in self.rows if fitted is None or r.fitted == fitted]
        out: dict[str, float] = {}
        for key, values in (
            ("speed", [abs(r.speed_error) for r in rows]),
            ("util", [abs(r.util_error) for r in rows if r.util_error is not None]),
            ("accept", [abs(r.accept_error) for r in rows if not r.action.is_baseline]),
            ("jpt", [abs(r.jpt_error) for r in rows if r.jpt_error is not None]),
        ):
            out[f"{key}_median"] = float(statistics.median(values)) if values else float("nan")
            out[f"{key}_worst"] = float(max(values)) if values else float("nan")
        return out


def calibration_report(
    model: SpeculativeDecodingModel, sweep: Sweep | None = None, config: RewardConfig = RewardConfig()
) -> CalibrationReport:
    """Compare the model with every published successful row.

    Args:
        model: the model to check (its profile's power limit scores utilisation).
        sweep: published-live rows; default the bundled 29 rows.
        config: reward constants for the ranking check.
    """
    sweep = load_sweep() if sweep is None else sweep
    limit = model.profile.power_limit_w
    temp = model.profile.reference_temp_c
    preds = {}
    for r in _usable(sweep):
        key = (r.batch_size, r.action)
        if key not in preds:
            pred = model.predict(r.batch_size, r.action, temp)
            preds[key] = (pred, model.run_cost(r.batch_size, r.action, pred))
    comparisons = []
    for r in _usable(sweep):
        pred, cost = preds[(r.batch_size, r.action)]
        base_pred = preds.get((r.batch_size, Action(0, 0, 0)))
        util_meas = r.utilization(limit)
        if r.is_baseline:
            reward_m = reward_p = None
        else:
            reward_m = sweep.reward_parts(r, config).reward
            base = model.predict(r.batch_size, (0, 0, 0), temp) if base_pred is None else base_pred[0]
            base_speed = base.speed_tok_s
            reward_p = compute_reward(
                speed_tok_s=pred.speed_tok_s,
                baseline_speed_tok_s=base_speed,
                utilization=pred.avg_power_w / limit,
                config=config,
            ).reward
        comparisons.append(
            RowComparison(
                trial=r.trial or "",
                batch_size=r.batch_size,
                action=r.action,
                fitted=_is_fitted(r),
                accept_measured=float(r.accept_length if r.accept_length is not None else 1.0),
                accept_predicted=pred.accept_length,
                speed_measured=_speed(r),
                speed_predicted=pred.speed_tok_s,
                jpt_measured=r.raw.get("joules_per_token"),
                jpt_predicted=cost.joules_per_token,
                util_measured=util_meas,
                util_predicted=pred.avg_power_w / limit,
                reward_measured=reward_m,
                reward_predicted=reward_p,
            )
        )
    ranking: dict[int, tuple[tuple[Action, ...], tuple[Action, ...]]] = {}
    for bs in sorted({c.batch_size for c in comparisons if c.fitted}):
        rows = [c for c in comparisons if c.fitted and c.batch_size == bs and c.reward_measured is not None]
        # rows with a measured reward have a predicted one (both are None on baseline rows only)
        measured = tuple(c.action for c in sorted(rows, key=lambda c: c.reward_measured or 0.0, reverse=True))
        predicted = tuple(c.action for c in sorted(rows, key=lambda c: c.reward_predicted or 0.0, reverse=True))
        ranking[bs] = (measured, predicted)
    speed_ranking: dict[int, tuple[tuple[Action, ...], tuple[Action, ...]]] = {}
    for bs in sorted({c.batch_size for c in comparisons if c.fitted}):
        rows = [c for c in comparisons if c.fitted and c.batch_size == bs]
        speed_ranking[bs] = (
            tuple(c.action for c in sorted(rows, key=lambda c: -c.speed_measured)),
            tuple(c.action for c in sorted(rows, key=lambda c: -c.speed_predicted)),
        )
    over = {
        "bs16 (3,4,8)": model.predict(16, (3, 4, 8), temp).avg_power_w / limit,
        "bs16 (3,2,4)": model.predict(16, (3, 2, 4), temp).avg_power_w / limit,
    }
    gflops = {}
    for action, acc, published in (((3, 4, 8), 2.425, 9.24), ((3, 2, 4), 2.129, 5.36), ((0, 0, 0), 1.0, 2.47)):
        computed = _dense_gflops_per_output_token(model.target, model.draft, action, acc)
        gflops[str(Action(*action))] = (computed, published)
    report = CalibrationReport(tuple(comparisons), model.profile.name, ranking, speed_ranking, over, gflops)
    held = report.summary(False)
    fit = report.summary(True)
    band = config.band_high
    targets = {
        "held-out median |speed error| <= 3 %": (held["speed_median"], 0.03, held["speed_median"] <= 0.03),
        "held-out median |utilisation error| <= 0.02": (held["util_median"], 0.02, held["util_median"] <= 0.02),
        "fitted median |speed error| <= 3 %": (fit["speed_median"], 0.03, fit["speed_median"] <= 0.03),
        "fitted median |utilisation error| <= 0.02": (fit["util_median"], 0.02, fit["util_median"] <= 0.02),
        "measured reward ranking kept at every batch size": (
            float(sum(m == p for m, p in ranking.values())),
            float(len(ranking)),
            all(m == p for m, p in ranking.values()),
        ),
        "measured speed ranking kept at every batch size": (
            float(sum(m == p for m, p in speed_ranking.values())),
            float(len(speed_ranking)),
            all(m == p for m, p in speed_ranking.values()),
        ),
        "bs16 (3,4,8) above the band, (3,2,4) inside": (
            over["bs16 (3,4,8)"],
            band,
            over["bs16 (3,4,8)"] > band and config.band_low <= over["bs16 (3,2,4)"] <= band,
        ),
    }
    return CalibrationReport(tuple(comparisons), model.profile.name, ranking, speed_ranking, over, gflops, targets)


def _dense_gflops_per_output_token(
    target: ModelSpec, draft: ModelSpec, action: tuple[int, int, int], accept: float
) -> float:
    steps, topk, draft_tokens = action
    if steps == 0:
        return target.dense_flops_per_token / 1e9
    flops = draft_tokens * target.dense_flops_per_token + (1 + (steps - 1) * topk) * draft.dense_flops_per_token
    return flops / accept / 1e9


_REPORT_HEADERS = ("trial", "set", "bs", "action", "accept m/p", "speed m/p (err)", "J/tok m/p (err)", "util m/p (err)")


def _report_cells(r: RowComparison, *, aligned: bool) -> list[str]:
    """One published row's cells (measured/predicted and the error) in the report, padded
    to the one-line layout's widths when ``aligned``."""
    jm = "-" if r.jpt_measured is None else f"{r.jpt_measured:.5f}"
    je = "" if r.jpt_error is None else f"{100 * r.jpt_error:+.1f}%"
    um = "-" if r.util_measured is None else f"{r.util_measured:.3f}"
    ue = "" if r.util_error is None else f"{r.util_error:+.3f}"
    if not aligned:
        return [
            r.trial,
            "fit" if r.fitted else "held",
            str(r.batch_size),
            str(r.action),
            f"{r.accept_measured:.3f}/{r.accept_predicted:.3f}",
            f"{r.speed_measured:.2f}/{r.speed_predicted:.2f} ({100 * r.speed_error:+.1f}%)",
            f"{jm}/{r.jpt_predicted:.5f}" + (f" ({je})" if je else ""),
            f"{um}/{r.util_predicted:.3f}" + (f" ({ue})" if ue else ""),
        ]
    return [
        r.trial,
        "fit" if r.fitted else "held",
        str(r.batch_size),
        str(r.action),
        f"{r.accept_measured:6.3f}/{r.accept_predicted:6.3f}",
        f"{r.speed_measured:8.2f}/{r.speed_predicted:8.2f} ({100 * r.speed_error:+5.1f}%)",
        f"{jm:>8}/{r.jpt_predicted:.5f} ({je:>6})",
        f"{um:>6}/{r.util_predicted:.3f} ({ue:>6})",
    ]


def format_report(report: CalibrationReport, width: int | None = None) -> str:
    """The report as plain text (one line per published row, then the summaries); within
    ``width`` columns when given (:mod:`specband.core.tables`), else one line per row."""

    lines = [
        f"calibration report: profile {report.profile} vs the published RTX 4060 Laptop live rows",
        "fitted: trial validate; held out: seed0..seed3 (bs 16)",
        "",
    ]
    cells = [_report_cells(r, aligned=width is None) for r in report.rows]
    if width is None:
        h = _REPORT_HEADERS
        lines.append(f"{h[0]:9} {h[1]:4} {h[2]:>3} {h[3]:9} {h[4]:>13} {h[5]:>26} {h[6]:>28} {h[7]:>24}")
        lines += [f"{c[0]:9} {c[1]:4} {c[2]:>3} {c[3]:9} {' '.join(c[4:])}" for c in cells]
    else:
        lines += text_table(_REPORT_HEADERS, cells, width)
    lines.append("")
    for label, flag in (("fitted", True), ("held-out", False), ("all", None)):
        s = report.summary(flag)
        lines.append(
            f"{label:9} |speed err| median {100 * s['speed_median']:.2f}% worst {100 * s['speed_worst']:.2f}%; "
            f"|util err| median {s['util_median']:.4f} worst {s['util_worst']:.4f}; "
            f"|accept err| median {s['accept_median']:.3f} worst {s['accept_worst']:.3f}; "
            f"|J/tok err| median {100 * s['jpt_median']:.1f}% worst {100 * s['jpt_worst']:.1f}%"
        )
    lines.append("")
    lines.append("ranking by reward at each batch size (fitted trial), best first:")
    for bs, (measured, predicted) in report.ranking.items():
        same = "kept" if measured == predicted else "NOT kept"
        lines.append(f"  bs {bs:>2}: measured {_order(measured)}; predicted {_order(predicted)} [{same}]")
    for bs, (measured, predicted) in report.ranking.items():
        if measured != predicted:
            gaps = _reward_gaps(report, bs, measured, predicted)
            lines.append(f"  bs {bs:>2}: swapped pairs, measured reward gap: {gaps}")
    lines.append("ranking by speed at each batch size (fitted trial), fastest first:")
    for bs, (measured, predicted) in report.speed_ranking.items():
        same = "kept" if measured == predicted else "NOT kept"
        lines.append(f"  bs {bs:>2}: measured {_order(measured)}; predicted {_order(predicted)} [{same}]")
    lines.append("bs 16 utilisation: " + ", ".join(f"{k} {v:.3f}" for k, v in report.overshoot.items()))
    lines.append(
        "dense GFLOPs per output token (computed / published in docs/FACTS.md §6): "
        + ", ".join(f"{k} {c:.2f}/{p:.2f}" for k, (c, p) in report.gflops_per_token.items())
    )
    lines.append("")
    lines.append("targets:")
    for name, (value, threshold, met) in report.targets.items():
        lines.append(f"  [{'met' if met else 'MISSED'}] {name}: {value:.4g} (threshold {threshold:.4g})")
    return "\n".join(wrap_lines(lines, width))


def _order(actions: tuple[Action, ...]) -> str:
    return " > ".join(map(str, actions))


def _reward_gaps(
    report: CalibrationReport, bs: int, measured: tuple[Action, ...], predicted: tuple[Action, ...]
) -> str:
    reward = {c.action: c.reward_measured for c in report.rows if c.fitted and c.batch_size == bs and c.reward_measured}
    parts = []
    for i, a in enumerate(measured):
        for b in measured[i + 1 :]:
            if predicted.index(a) > predicted.index(b):
                parts.append(f"{a} {reward[a]:.4f} vs {b} {reward[b]:.4f}")
    return "; ".join(parts)


def write_profile(profile: HardwareProfile, path: str | Path, header: str = "", *, overwrite: bool = False) -> Path:
    """Write a profile as TOML (:func:`specband.sim.profile.profile_to_toml`, ``header`` as
    its leading comment) all or nothing: temporary file in the same folder, fsync, rename
    (:func:`specband.files.fileio.write_text_atomic`).

    Args:
        overwrite: replace an existing file; by default one is refused.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ConfigError: ``path`` is empty, a folder, or exists without ``overwrite``; its
            folder does not exist (:func:`specband.sim.simulated.check_out_path`); or the file
            cannot be written (``"<path>: cannot write (<reason>)"``); nothing is written then.
    """

    out = check_out_path(path, overwrite=overwrite, option="--write-profile")
    return write_text_atomic(out, profile_to_toml(profile, header), error=ConfigError)
