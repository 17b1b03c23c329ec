"""Calibration of the datacenter profiles against NVIDIA AIConfigurator's sglang step times,
and its report (``specband simulate --calibration-report --against aic [--refit]``).

Reference data: ``specband/data/aic_reference.json``, written by
``benchmarks/aic_reference.py`` (run where the ``aic`` extra, ``aiconfigurator``, is
installed; it records AIC's version, its sglang database version, the date and the query
settings). AIConfigurator estimates an sglang step from its database of GEMM and attention
kernels measured on each GPU (``SILICON`` mode). Each record is one step of a bundled model
pair on one profile's GPU:

* ``decode``: the target's non-speculative decode step at ``bs`` requests (AIC's TPOT);
* ``verify``: one target forward over ``bs x num_draft_tokens`` tokens;
* ``draft``: one forward of the EAGLE3 draft head at ``bs`` tokens;

plus ``docs`` records: step times read off sglang's own documentation (the H100 baseline of
its EAGLE3 table, 158.34 tok/s, Llama-3.1-8B-Instruct at bs 1). Everything here works offline
from that file; AIC is never imported.

The simulated step of a record: ``decode`` = :meth:`SpeculativeDecodingModel.predict` of the
baseline at the profile's reference temperature (``step_time_s``); ``verify`` = the target's
:meth:`~SpeculativeDecodingModel.forward_time_s` + ``host_overhead_base_s``; ``draft`` = the
head's forward time + ``host_overhead_draft_step_s``.

:func:`fit_profile_to_aic` fits :data:`AIC_FIT_PARAMETERS` with
``scipy.optimize.least_squares`` (trust-region reflective, bounded) on ``log(simulated /
reference)`` of every record of the profile (both model pairs, all three kinds, and the docs
records); ``roofline_sharpness`` stays at 3 (fitting it trades decode accuracy for verify
accuracy). The speculative host overheads (``host_overhead_spec_s``,
``host_overhead_verify_token_s``), acceptance and power stay as inherited: AIC models neither
EAGLE's tree building nor the draft's acceptance, and no power was measured.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from specband.core.errors import ConfigError
from specband.core.limits import MAX_CONFIG_FILE_BYTES
from specband.core.tables import text_table, wrap_lines
from specband.files.fileio import read_text_bounded
from specband.sim import build_model
from specband.sim.model import SpeculativeDecodingModel
from specband.sim.profile import HardwareProfile, load_profile

__all__ = [
    "AIC_FIT_PARAMETERS",
    "CRITERIA_BATCH_SIZES",
    "CRITERIA_PROFILES",
    "CRITERIA_TARGET",
    "STEP_TOLERANCE",
    "AicFit",
    "AicReferenceData",
    "AicReport",
    "ReferenceStep",
    "StepComparison",
    "aic_report",
    "compare_profile",
    "fit_profile_to_aic",
    "format_aic_fit",
    "format_aic_report",
    "load_aic_reference",
    "simulated_step_ms",
]

#: Parameters fitted to the reference steps, with bounds.
AIC_FIT_PARAMETERS: dict[str, tuple[float, float]] = {
    "bandwidth_efficiency": (0.3, 1.0),
    "compute_efficiency": (0.05, 1.0),
    "host_overhead_base_s": (0.0, 0.003),
    "host_overhead_draft_step_s": (0.0, 0.003),
}
#: Largest |simulated / reference - 1| of a decode step that meets issue 13's criteria.
STEP_TOLERANCE = 0.10
#: The criteria's profiles, model and batch sizes (issue 13, "Done when").
CRITERIA_PROFILES: tuple[str, ...] = ("h100-sxm", "h200")
CRITERIA_TARGET = "llama-3.1-8b-instruct"
CRITERIA_BATCH_SIZES: tuple[int, ...] = (1, 4, 8, 16)
_KINDS = ("decode", "verify", "draft")


@dataclass(frozen=True)
class ReferenceStep:
    """One reference step time.

    Attributes:
        profile: specband profile of the GPU (``h100-sxm`` for AIC's ``h100_sxm``).
        target, draft: bundled model configs of the pair (``draft`` empty on a docs record).
        kind: ``decode``, ``verify`` or ``draft``.
        batch_size: requests in the step.
        tokens: query tokens of the forward (``bs``, or ``bs x num_draft_tokens``).
        step_ms: reference step time, ms.
        source: ``aic`` or ``docs``.
        num_draft_tokens: ``N`` of a verify record, else ``None``.
    """

    profile: str
    target: str
    draft: str
    kind: str
    batch_size: int
    tokens: int
    step_ms: float
    source: str = "aic"
    num_draft_tokens: int | None = None


@dataclass(frozen=True)
class AicReferenceData:
    """The reference file: its metadata (AIC version, date, query settings, sources) and steps."""

    meta: dict[str, Any]
    steps: tuple[ReferenceStep, ...]

    @property
    def profiles(self) -> list[str]:
        """Profiles with reference steps, sorted."""
        return sorted({s.profile for s in self.steps})

    def for_profile(self, name: str) -> list[ReferenceStep]:
        """The steps of one profile."""
        return [s for s in self.steps if s.profile == name]

    @property
    def label(self) -> str:
        """``AIConfigurator <version> (<date>)``."""
        return f"AIConfigurator {self.meta.get('aiconfigurator_version', '?')} ({self.meta.get('date', '?')})"


def _reference_path() -> Path:
    return Path(str(resources.files("specband").joinpath("data/aic_reference.json")))


def _step(rec: Any, where: str, source: str) -> ReferenceStep:
    if not isinstance(rec, dict):
        raise ConfigError(f"{where}: expected an object")
    try:
        step = ReferenceStep(
            profile=str(rec["profile"]),
            target=str(rec["target"]),
            draft=str(rec.get("draft", "")),
            kind=str(rec["kind"]),
            batch_size=int(rec["batch_size"]),
            tokens=int(rec["tokens"] if "tokens" in rec else rec["batch_size"]),
            step_ms=float(rec["step_ms"]),
            source=source,
            num_draft_tokens=None if rec.get("num_draft_tokens") is None else int(rec["num_draft_tokens"]),
        )
    except KeyError as exc:
        raise ConfigError(f"{where}: field {exc.args[0]!r} is missing") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if step.kind not in _KINDS:
        raise ConfigError(f"{where}: field 'kind': expected one of {', '.join(_KINDS)}, got {step.kind!r}")
    if step.batch_size < 1 or step.tokens < step.batch_size:
        raise ConfigError(f"{where}: field 'batch_size'/'tokens': need 1 <= batch_size <= tokens")
    if not (math.isfinite(step.step_ms) and step.step_ms > 0):
        raise ConfigError(f"{where}: field 'step_ms': expected a positive number of ms, got {step.step_ms!r}")
    return step


def load_aic_reference(path: str | Path | None = None) -> AicReferenceData:
    """Read the reference step times.

    Args:
        path: a file written by ``benchmarks/aic_reference.py``; default the bundled
            ``specband/data/aic_reference.json``.

    Raises:
        ConfigError: unreadable or malformed file, naming the file and the record.
    """
    file = _reference_path() if path is None else Path(path)
    try:
        data = json.loads(read_text_bounded(file, limit=MAX_CONFIG_FILE_BYTES, kind="JSON file", error=ConfigError))
    except FileNotFoundError:
        raise ConfigError(f"{file}: no such AIC reference file") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise ConfigError(f"{file}: not a readable AIC reference file ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise ConfigError(f"{file}: expected an object with a 'records' list")
    steps = [_step(r, f"{file}: records[{i}]", "aic") for i, r in enumerate(data["records"])]
    steps += [_step(r, f"{file}: docs[{i}]", "docs") for i, r in enumerate(data.get("docs", []))]
    meta = {k: v for k, v in data.items() if k not in ("records", "docs")}
    return AicReferenceData(meta, tuple(steps))


def simulated_step_ms(model: SpeculativeDecodingModel, step: ReferenceStep) -> float:
    """The model's time for a reference step, ms (see the module docstring).

    Raises:
        ConfigError: a batch size or token count below 1.
    """
    p = model.profile
    if step.kind == "decode":
        return 1e3 * model.predict(step.batch_size, (0, 0, 0), p.reference_temp_c).step_time_s
    if step.kind == "verify":
        return 1e3 * (model.forward_time_s(model.target, step.batch_size, step.tokens) + p.host_overhead_base_s)
    return 1e3 * (model.forward_time_s(model.draft, step.batch_size, step.tokens) + p.host_overhead_draft_step_s)


@dataclass(frozen=True)
class StepComparison:
    """A reference step beside the simulated one."""

    reference: ReferenceStep
    simulated_ms: float

    @property
    def error(self) -> float:
        """Relative error of the simulated step, ``simulated / reference - 1``."""
        return self.simulated_ms / self.reference.step_ms - 1.0


def _models(profile: HardwareProfile, steps: Sequence[ReferenceStep]) -> dict[tuple[str, str], Any]:

    models: dict[tuple[str, str], Any] = {}
    for s in steps:
        pair = (s.target, s.draft or _draft_of(steps, s.target))
        if pair not in models:
            models[pair] = build_model(profile, target_config=pair[0], draft_config=pair[1])
    return models


def _draft_of(steps: Sequence[ReferenceStep], target: str) -> str:
    drafts = sorted({s.draft for s in steps if s.target == target and s.draft})
    if not drafts:
        raise ConfigError(f"AIC reference: no draft config is named for target {target!r}")
    return drafts[0]


def compare_profile(profile: str | Path | HardwareProfile, data: AicReferenceData) -> list[StepComparison]:
    """Every reference step of a profile beside the simulated one.

    Args:
        profile: a built-in name, profile file or :class:`HardwareProfile`; its ``name``
            selects the reference steps.

    Raises:
        ConfigError: the reference has no step for the profile.
    """
    prof = load_profile(profile)
    steps = data.for_profile(prof.name)
    if not steps:
        raise ConfigError(f"no AIC reference for profile '{prof.name}'; the reference has {', '.join(data.profiles)}")
    models = _models(prof, steps)
    out = []
    for s in steps:
        model = models[(s.target, s.draft or _draft_of(steps, s.target))]
        out.append(StepComparison(s, simulated_step_ms(model, s)))
    return out


@dataclass(frozen=True)
class AicReport:
    """Comparisons of one or more profiles and issue 13's criteria.

    Attributes:
        comparisons: per profile name, its comparisons.
        targets: criterion -> (worst |error|, threshold, met).
        label: the reference's label (AIC version and date).
        power_measured: per profile name, whether its power model was fitted to measured power or to
            published figures of its GPU class (``power_source``).
    """

    comparisons: dict[str, list[StepComparison]]
    targets: dict[str, tuple[float, float, bool]] = field(default_factory=dict)
    label: str = ""
    power_measured: dict[str, bool] = field(default_factory=dict)


def _criteria(comparisons: dict[str, list[StepComparison]]) -> dict[str, tuple[float, float, bool]]:
    targets: dict[str, tuple[float, float, bool]] = {}
    for name in CRITERIA_PROFILES:
        rows = [
            c
            for c in comparisons.get(name, [])
            if c.reference.kind == "decode"
            and c.reference.target == CRITERIA_TARGET
            and c.reference.batch_size in CRITERIA_BATCH_SIZES
        ]
        for source in ("aic", "docs"):
            chosen = [c for c in rows if c.reference.source == source]
            if not chosen:
                continue
            worst = max(abs(c.error) for c in chosen)
            sizes = ",".join(str(bs) for bs in sorted({c.reference.batch_size for c in chosen}))
            what = "AIConfigurator's sglang estimate" if source == "aic" else "sglang's docs"
            targets[f"{name} {CRITERIA_TARGET} decode bs {sizes} within 10 % of {what}"] = (
                worst,
                STEP_TOLERANCE,
                worst <= STEP_TOLERANCE,
            )
    return targets


def aic_report(
    profiles: Sequence[str | Path | HardwareProfile] | None = None, data: AicReferenceData | None = None
) -> AicReport:
    """Compare profiles with the reference steps.

    Args:
        profiles: the profiles; default every profile the reference has.
        data: the reference; default the bundled file.

    Raises:
        ConfigError: a profile without reference steps, or a bad reference file.
    """
    data = load_aic_reference() if data is None else data
    chosen = list(profiles) if profiles else list(data.profiles)
    comparisons = {}
    power = {}
    for prof in chosen:
        loaded = load_profile(prof)
        comparisons[loaded.name] = compare_profile(loaded, data)
        power[loaded.name] = loaded.power_measured or bool(loaded.power_source)
    return AicReport(comparisons, _criteria(comparisons), data.label, power)


def _summary_line(label: str, rows: Sequence[StepComparison]) -> str:
    errors = [abs(c.error) for c in rows]
    if not errors:
        return f"  {label}: no steps"
    return f"  {label}: median |error| {100 * statistics.median(errors):.1f} %, worst {100 * max(errors):.1f} %"


_AIC_HEADERS = ("profile", "source", "target", "kind", "bs", "tokens", "reference", "simulated", "error")


def format_aic_report(report: AicReport, width: int | None = None) -> str:
    """The report as text: one line per reference step (GPU profile, model, kind, batch
    size, tokens, reference and simulated ms, error), then per profile and kind the median
    and worst |error|, then the criteria; within ``width`` columns when given
    (:mod:`specband.core.tables`)."""

    lines = [f"calibration report vs {report.label}: simulated vs reference step times (ms)", ""]
    h = _AIC_HEADERS
    header = f"{h[0]:16} {h[1]:6} {h[2]:24} {h[3]:6} {h[4]:>3} {h[5]:>6} {h[6]:>10} {h[7]:>10} {h[8]:>8}"
    for name, rows in report.comparisons.items():
        cells = [
            [name, c.reference.source, c.reference.target, c.reference.kind, str(c.reference.batch_size),
             str(c.reference.tokens), f"{c.reference.step_ms:.3f}", f"{c.simulated_ms:.3f}", f"{100 * c.error:+.1f}%"]
            for c in rows
        ]  # fmt: skip
        if width is None:
            lines.append(header)
            lines += [
                f"{c[0]:16} {c[1]:6} {c[2]:24} {c[3]:6} {c[4]:>3} {c[5]:>6} {c[6]:>10} {c[7]:>10} {c[8]:>8}"
                for c in cells
            ]
        else:
            lines += text_table(_AIC_HEADERS, cells, width)
        for kind in _KINDS:
            lines.append(_summary_line(f"{name} {kind}", [c for c in rows if c.reference.kind == kind]))
        lines.append(_summary_line(f"{name} all", rows))
        if not report.power_measured.get(name, True):
            lines.append(
                f"  {name} power: UNMEASURED (no measured power was fitted; simulated rows carry "
                "power_measured: false and power_w_range, see specband.sim.power)"
            )
        lines.append("")
    if report.targets:
        lines.append("targets (issue 13):")
        for label, (value, threshold, met) in report.targets.items():
            lines.append(
                f"  [{'met' if met else 'MISSED'}] {label}: worst |error| {100 * value:.1f} % "
                f"(threshold {100 * threshold:.0f} %)"
            )
    return "\n".join(wrap_lines(lines, width))


@dataclass(frozen=True)
class AicFit:
    """What :func:`fit_profile_to_aic` did.

    Attributes:
        profile: the fitted profile.
        before, after: fitted parameters before and after.
        cost_before, cost_after: ``0.5 x sum(log(sim / ref)^2)`` before and after.
    """

    profile: HardwareProfile
    before: dict[str, float]
    after: dict[str, float]
    cost_before: float
    cost_after: float


def _log_errors(profile: HardwareProfile, steps: Sequence[ReferenceStep], models: dict) -> np.ndarray:
    out = []
    for s in steps:
        base = models[(s.target, s.draft or _draft_of(steps, s.target))]
        model = SpeculativeDecodingModel(profile, base.target, base.draft)
        out.append(math.log(simulated_step_ms(model, s) / s.step_ms))
    return np.asarray(out)


def _identifiable(steps: Sequence[ReferenceStep]) -> list[str]:
    """The fitted parameters: all of :data:`AIC_FIT_PARAMETERS`, less ``host_overhead_base_s``
    when the steps cover one target only (a fixed per-step time and the weight streaming of a
    single model size cannot be told apart)."""
    names = list(AIC_FIT_PARAMETERS)
    if len({s.target for s in steps}) < 2:
        names.remove("host_overhead_base_s")
    return names


def fit_profile_to_aic(profile: str | Path | HardwareProfile, data: AicReferenceData | None = None) -> AicFit:
    """Fit :data:`AIC_FIT_PARAMETERS` of a profile to its reference steps (``host_overhead_base_s``
    only when they cover both model sizes; otherwise it keeps the profile's value).

    Raises:
        ConfigError: the reference has no step for the profile.
    """
    from scipy.optimize import least_squares

    data = load_aic_reference() if data is None else data
    prof = load_profile(profile)
    steps = data.for_profile(prof.name)
    if not steps:
        raise ConfigError(f"no AIC reference for profile '{prof.name}'; the reference has {', '.join(data.profiles)}")
    models = _models(prof, steps)
    names = _identifiable(steps)
    lo = np.array([AIC_FIT_PARAMETERS[n][0] for n in names])
    hi = np.array([AIC_FIT_PARAMETERS[n][1] for n in names])
    before = {n: float(getattr(prof, n)) for n in names}
    x0 = np.clip(np.array([before[n] for n in names]), lo, hi)

    def residuals(x: np.ndarray) -> np.ndarray:
        return _log_errors(prof.with_values(**dict(zip(names, map(float, x), strict=True))), steps, models)

    start = residuals(x0)
    result = least_squares(residuals, x0, bounds=(lo, hi), x_scale=np.maximum(hi - lo, 1e-9) / 10, method="trf")
    after = {n: float(v) for n, v in zip(names, result.x, strict=True)}
    fitted = prof.with_values(**after)
    return AicFit(fitted, before, after, 0.5 * float(start @ start), float(result.cost))


def format_aic_fit(fit: AicFit, width: int | None = None) -> str:
    """The fit as text: each parameter before -> after, and the costs (lines longer than
    ``width`` wrapped between words)."""

    head = f"refit of profile {fit.profile.name} to the AIC reference steps (cost {fit.cost_before:.4g} -> "
    lines = [head + f"{fit.cost_after:.4g}):"]
    lines += [f"  {n} = {fit.before[n]:.6g} -> {fit.after[n]:.6g}" for n in fit.after]
    return "\n".join(wrap_lines(lines, width))
