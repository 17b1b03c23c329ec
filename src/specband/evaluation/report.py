"""Output of an evaluation: a JSON document, rich tables, and a report folder
(``report.md`` plus PNG figures).

Every number is printed with the label of how it was scored (``held-out`` or
``in-sample``) and where its rows come from (``measured``, ``emulated``, ``simulated`` or
``published``, ``derived`` where the utilisation was back-computed: :data:`ROW_LABELS`,
:func:`row_label`, :func:`specband.evaluation.holdout.provenance_label`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specband.contract.actions import EXTENDED_ACTIONS, REFERENCE_INDEX
from specband.core.errors import ConfigError, SpecbandError
from specband.core.limits import MAX_CONFIG_FILE_BYTES
from specband.core.tables import print_table, table_console, unit
from specband.evaluation.extras import ReportExtras, report_extras
from specband.evaluation.figures import FIGURES, FigureOutcome
from specband.evaluation.holdout import IN_SAMPLE, EvaluationResult, FeatureResult, PickSummary
from specband.evaluation.ope import ESTIMATORS, Interval
from specband.files.fileio import given_path, read_text_bounded, replace_target

if TYPE_CHECKING:
    from specband.evaluation.baselines import BaselineComparison

__all__ = [
    "FIGURES",
    "JSON_SCHEMA",
    "REPORT_FILES",
    "ROW_LABELS",
    "ReportExtras",
    "WrittenReport",
    "action_json",
    "check_report_dir",
    "format_interval",
    "format_utilization",
    "is_report_dir",
    "render_tables",
    "report_extras",
    "report_markdown",
    "result_to_json",
    "row_label",
    "summary_rows",
    "write_report",
]

#: Identifier of the JSON document's layout.
JSON_SCHEMA = "specband.evaluate/1"
#: Every file :func:`write_report` may write into the report folder (a figure with nothing to
#: show is not written; one left from an earlier report is removed).
REPORT_FILES: tuple[str, ...] = ("report.md", "evaluation.json", *FIGURES)
#: Figures of earlier layouts (all-zero in-sample regret, equal reward bars), removed from a
#: report folder that is written again.
_OLD_FIGURES: tuple[str, ...] = ("reward.png", "regret.png")


@dataclass(frozen=True)
class WrittenReport:
    """What :func:`write_report` wrote.

    Attributes:
        paths: the files written, in :data:`REPORT_FILES` order.
        figures: every figure's :class:`~specband.evaluation.figures.FigureOutcome` (written
            or not, and why not).
    """

    paths: list[Path]
    figures: list[FigureOutcome]

    def skipped(self) -> list[str]:
        """One line per figure not written: ``"no tradeoff.png: <why>"``."""
        return [f"no {f.name}: {f.why}" for f in self.figures if not f.written]


def action_json(index: int) -> dict[str, Any]:
    """``{"index": i, "action": [steps, topk, draft]}``."""
    return {"index": int(index), "action": list(EXTENDED_ACTIONS[index])}


def _iv(interval: Interval | None) -> dict[str, Any] | None:
    return None if interval is None else interval.as_dict()


def format_interval(interval: Interval | None, digits: int = 3) -> str:
    """``"0.389 [0.386, 0.395]"``, ``"0.532 (n=1)"`` without an informative interval, or
    ``"-"`` for ``None``."""
    if interval is None:
        return "-"
    est = f"{interval.estimate:.{digits}f}"
    if not interval.informative:
        return f"{est} (n={interval.n})"
    return f"{est} [{interval.low:.{digits}f}, {interval.high:.{digits}f}]"


def _band_side(value: float, band: tuple[float, float]) -> int:
    """-1 below the band, 0 inside (edges included, as :attr:`PickSummary.in_band`), 1 above."""
    return -1 if value < band[0] else (1 if value > band[1] else 0)


#: Most decimals printed for a utilisation (1e-7 of the power limit is below any meter's resolution).
_MAX_UTILIZATION_DIGITS = 7


def format_utilization(interval: Interval | None, band: tuple[float, float], digits: int = 4) -> str:
    """A utilisation interval (fraction of the power limit) like :func:`format_interval`,
    with at least ``digits`` decimals and more where needed so that no printed number
    lands on the other side of a band edge than its exact value (0.98004 against a
    0.95-0.98 band prints ``0.98004``, not ``0.9800``), up to 7 decimals.

    Args:
        interval: the utilisation interval, or ``None`` (printed ``"-"``).
        band: ``(band_low, band_high)`` fractions of the power limit.
        digits: the fewest decimals to print.
    """
    if interval is None:
        return "-"
    values = [interval.estimate] + ([interval.low, interval.high] if interval.informative else [])
    values = [v for v in values if np.isfinite(v)]
    for d in range(digits, _MAX_UTILIZATION_DIGITS + 1):
        if all(_band_side(float(f"{v:.{d}f}"), band) == _band_side(v, band) for v in values):
            return format_interval(interval, d)
    # closer to an edge than 1e-7: float noise (0.9800000000000001), not a measurable difference
    return format_interval(interval, _MAX_UTILIZATION_DIGITS)


#: The band cell of a pick by :func:`_band_side` (the side :attr:`PickSummary.in_band` tests).
_BAND_CELL = {-1: "below", 0: "in band", 1: "above"}

#: An estimate and its interval (``0.123 [0.070, 0.209]``, ``0.532 (n=1)``): one unit in a table.
_INTERVAL = re.compile(r"-?\d[\d.eE+-]* (?:\[[^\]]*\]|\(n=\d+\))")


def _interval_units(cell: str) -> str:
    """``cell`` with each estimate and its interval made one unbreakable unit (:func:`specband.core.tables.unit`)."""

    return _INTERVAL.sub(lambda m: unit(m.group(0)), cell)


def _action_text(index: int) -> str:
    a = EXTENDED_ACTIONS[index]
    return f"({a[0]},{a[1]},{a[2]})"


def summary_rows(result: EvaluationResult, features: str) -> list[dict[str, Any]]:
    """Per algorithm: mean pick reward, oracle and reference over the scored batch sizes,
    mean regret, how many batch sizes reach the oracle and land in the band.

    Means are over the batch sizes where the pick was measured (a batch size whose pick was
    never run in a held-out split is left out and counted in ``batch_sizes_not_measured``).
    ``batch_sizes_in_band`` is ``None`` when no utilisation is known (no energy measured).
    """
    fr = result.features[features]
    rows = []
    for algo in result.algorithms:
        picks = fr.picks.get(algo, {})
        measured = [p for p in picks.values() if p.reward is not None]
        rewards = [p.reward.estimate for p in measured if p.reward is not None]
        regrets = [p.regret.estimate for p in measured if p.regret is not None]  # None with the reward
        oracle = [fr.contexts[p.batch_size].oracle_reward.estimate for p in measured]
        refs = [fr.contexts[p.batch_size].reference_reward for p in measured]
        known_refs = [r for r in refs if r is not None]
        rows.append(
            {
                "algorithm": algo,
                "mean_reward": float(np.mean(rewards)) if rewards else None,
                "mean_oracle_reward": float(np.mean(oracle)) if oracle else None,
                "mean_reference_reward": (
                    float(np.mean([r.estimate for r in known_refs])) if refs and len(known_refs) == len(refs) else None
                ),
                "mean_regret": float(np.mean(regrets)) if regrets else None,
                "batch_sizes_scored": len(picks),
                "batch_sizes_not_measured": len(picks) - len(measured),
                "batch_sizes_at_oracle": sum(p.reaches_oracle for p in picks.values()),
                "batch_sizes_in_band": (
                    sum(bool(p.in_band) for p in picks.values())
                    if any(p.in_band is not None for p in picks.values())
                    else None
                ),
                "dr": _iv(fr.ope.get(algo, {}).get("dr")),
            }
        )
    return rows


def _pick_json(algo: str, p: PickSummary, scored_on: str) -> dict[str, Any]:
    return {
        "algorithm": algo,
        "batch_size": p.batch_size,
        "scored_on": scored_on,
        "pick": action_json(p.pick),
        "picks": [dict(action_json(a), splits=c) for a, c in p.picks.items()],
        "reward": _iv(p.reward),
        "label": p.label,
        "regret": _iv(p.regret),
        "utilization": _iv(p.utilization),
        "in_band": p.in_band,
        "in_band_fraction": p.in_band_fraction,
        "reaches_oracle": p.reaches_oracle,
        "not_measured_in_held_out": list(p.not_measured),
        "estimate": (
            None
            if p.estimate is None
            else {"estimator": "dr", "value": p.estimate, "label": "estimate: pick not run in the held-out split"}
        ),
        "splits": [
            {
                "split": s.split,
                "pick": action_json(s.pick),
                "reward": s.pick_reward,
                "estimate": s.pick_estimate,
                "oracle": action_json(s.oracle),
                "oracle_reward": s.oracle_reward,
                "regret": s.regret,
                "utilization": s.pick_utilization,
            }
            for s in p.splits
        ],
    }


def _feature_json(result: EvaluationResult, fr: FeatureResult) -> dict[str, Any]:
    return {
        "note": fr.note,
        "identical_to": fr.identical_to,
        "batch_sizes": [
            {
                "batch_size": bs,
                "scored_on": result.scored_on,
                "splits": list(c.splits),
                "n_rows": c.n_rows,
                "label": c.label,
                "oracle": dict(action_json(c.oracle), splits=c.oracles.get(c.oracle, 0)),
                "oracles": [dict(action_json(a), splits=n) for a, n in c.oracles.items()],
                "oracle_reward": _iv(c.oracle_reward),
                "oracle_utilization": _iv(c.oracle_utilization),
                "reference": action_json(REFERENCE_INDEX),
                "reference_reward": _iv(c.reference_reward),
                "reference_regret": _iv(c.reference_regret),
                "reference_utilization": _iv(c.reference_utilization),
            }
            for bs, c in sorted(fr.contexts.items())
        ],
        "picks": [
            _pick_json(algo, p, result.scored_on)
            for algo in result.algorithms
            for _, p in sorted(fr.picks.get(algo, {}).items())
        ],
        "summary": summary_rows(result, fr.features),
        "ope": {
            "scored_on": result.scored_on,
            "n_rounds": fr.ope_n,
            "propensity": "uniform over the configs run at each batch size in the scored rows, "
            "or the file's propensity column",
            "reward_model": "per-(batch size, action) mean reward of the training rows",
            "estimates": [
                dict({"algorithm": algo}, **{name: _iv(fr.ope.get(algo, {}).get(name)) for name in ESTIMATORS})
                for algo in result.algorithms
            ],
        },
    }


def result_to_json(result: EvaluationResult) -> dict[str, Any]:
    """The evaluation as one JSON-ready document (layout :data:`JSON_SCHEMA`; keys are
    stable, intervals are ``{"estimate", "low", "high", "level", "n"}`` with ``low``/``high``
    ``null`` when there was a single observation). ``in_sample_fallback`` holds the
    in-sample evaluation of batch sizes that could not be held out (or ``null``)."""
    cfg = result.reward_config
    return {
        "schema": JSON_SCHEMA,
        "data": {
            "path": result.data_path,
            "format": result.data_format,
            "rows": result.n_rows,
            "provenance": result.provenance,
            "energy_measured": result.energy_measured,
        },
        "holdout": {
            "kind": result.holdout,
            "reason": result.holdout_reason,
            "scored_on": result.scored_on,
            "splits": list(result.splits),
            "not_held_out": [
                {"split": n.split, "batch_size": n.batch_size, "reason": n.reason} for n in result.not_held_out
            ],
        },
        "reward_config": asdict(cfg),
        "band": [cfg.band_low, cfg.band_high],
        "intervals": {
            "method": "percentile bootstrap",
            "level": 1.0 - result.alpha,
            "n_bootstrap": result.n_bootstrap,
            "seed": result.seed,
        },
        "algorithms": list(result.algorithms),
        "features": {k: _feature_json(result, fr) for k, fr in result.features.items()},
        "in_sample_fallback": (
            None
            if result.in_sample is None
            else {
                "batch_sizes": sorted({bs for fr in result.in_sample.features.values() for bs in fr.contexts}),
                "scored_on": result.in_sample.scored_on,
                "reason": "these batch sizes could not be held out in any split",
                "features": {k: _feature_json(result.in_sample, fr) for k, fr in result.in_sample.features.items()},
            }
        ),
        "timing": {
            "fits": result.fits,
            "fit_s": round(result.fit_s, 3),
            **{k: round(v, 3) for k, v in result.timings.items()},
        },
    }


# ----------------------------------------------------------------------------- text
def _title(result: EvaluationResult) -> str:
    kinds = " = ".join(result.features) if _all_identical(result) else " and ".join(result.features)
    if result.scored_on == IN_SAMPLE:
        how = "IN-SAMPLE (trained and scored on the same rows)"
    else:
        how = f"held-out by {result.holdout} ({len(result.splits)} splits)"
    return f"{kinds} features - {how}"


def _all_identical(result: EvaluationResult) -> bool:
    """Every feature kind after the first is identical to an earlier one (no pre-launch telemetry)."""
    return all(fr.identical_to is not None for fr in list(result.features.values())[1:])


def _merged_rows(result: EvaluationResult, cells_of: Any) -> list[list[str]]:
    """Rows of a table over the feature kinds, a ``features`` cell first: one row where every
    kind gives the same cells (``"contract = pre"``), else one row per kind.

    Args:
        result: the evaluation.
        cells_of: ``FeatureResult -> {key: cells}`` (keys in table order).
    """
    kinds = list(result.features)
    per = {k: cells_of(result.features[k]) for k in kinds}
    rows: list[list[str]] = []
    for key in dict.fromkeys(key for k in kinds for key in per[k]):
        cells = [(k, per[k][key]) for k in kinds if key in per[k]]
        if all(c == cells[0][1] for _, c in cells):
            rows.append([" = ".join(k for k, _ in cells), *cells[0][1]])
        else:
            rows += [[k, *c] for k, c in cells]
    return rows


def _tables(result: EvaluationResult) -> list[tuple[str, tuple[str, ...], list[list[str]]]]:
    """The three tables of an evaluation (title, headers, rows): picks, oracle and reference,
    summary; contract and pre-launch features in one table, merged where they agree."""
    title = _title(result)
    picks = _merged_rows(
        result,
        lambda fr: {
            (a, bs): _pick_cells(result, fr, a, p)
            for a in result.algorithms
            for bs, p in sorted(fr.picks.get(a, {}).items())
        },
    )
    first = next(iter(result.features.values()))  # the oracle and the reference do not depend on the features
    ctx = [_context_cells(result, first, bs) for bs in sorted(first.contexts)]
    summary = _merged_rows(result, lambda fr: {c[0]: c for c in _summary_cells(result, fr)})
    return [
        (f"{title}: picks", ("features", *_PICK_HEADERS), picks),
        (f"{title}: oracle and reference", _CONTEXT_HEADERS, ctx),
        (f"{title}: summary over batch sizes", ("features", *_SUMMARY_HEADERS), summary),
    ]


#: What each row label means (``report.md``'s legend; :func:`row_label` gives a row set's label).
ROW_LABELS: tuple[tuple[str, str], ...] = (
    ("measured", "read from a run of a real engine on a GPU"),
    ("emulated", "from a sweep against `specband emulate` (a model of an engine on a GPU, not a measurement)"),
    ("simulated", "from `specband simulate` (not a measurement)"),
    ("published", "measured by the published study, read from its data"),
    ("derived", "the utilisation back-computed from a published reward"),
    ("mixed", "rows of several of these kinds, counted"),
)


def row_label(result: EvaluationResult, label: str) -> str:
    """The label of a set of rows as the tables print it: ``label`` from
    :func:`specband.evaluation.splits.provenance_label`, with the published study's rows
    (``published_live`` data) called published: ``published``, ``published (derived)`` or
    ``published (mixed: 3 measured, 1 derived)``."""
    if result.data_format != "published_live":
        return label
    if label == "measured":
        return "published"
    return f"published ({label})"


def _pick_cells(result: EvaluationResult, fr: FeatureResult, algo: str, p: PickSummary) -> list[str]:
    pick = _action_text(p.pick)
    if len(p.picks) > 1:
        pick = ", ".join(f"{_action_text(a)} x{c}" for a, c in p.picks.items())
    if p.reward is None:
        reward = "not measured in held-out"
        if p.estimate is not None:
            reward += f" (DR estimate {p.estimate:.3f})"
    else:
        reward = format_interval(p.reward)
        if p.not_measured:
            reward += f"; not measured in {len(p.not_measured)} split(s)"
    limits = (result.reward_config.band_low, result.reward_config.band_high)
    band = "-"  # no utilisation measured
    if p.in_band is not None and p.utilization is not None:  # in_band is set exactly when utilization is
        band = _BAND_CELL[_band_side(p.utilization.estimate, limits)]
    return [
        algo,
        str(p.batch_size),
        pick,
        reward,
        format_interval(p.regret),
        "yes" if p.reaches_oracle else "no",
        format_utilization(p.utilization, limits),
        band,
        row_label(result, p.label),
    ]


_PICK_HEADERS = (
    "algorithm",
    "bs",
    "pick",
    "reward [95% CI]",
    "regret [95% CI]",
    "at oracle",
    "utilisation [95% CI]",
    "band",
    "rows",
)
_CONTEXT_HEADERS = (
    "bs",
    "splits",
    "oracle",
    "oracle reward",
    "reference (3,4,8) reward",
    "reference regret",
    "reference utilisation",
    "rows",
)


def _context_cells(result: EvaluationResult, fr: FeatureResult, bs: int) -> list[str]:
    c = fr.contexts[bs]
    oracle = _action_text(c.oracle)
    if len(c.oracles) > 1:
        oracle = ", ".join(f"{_action_text(a)} x{n}" for a, n in c.oracles.items())
    return [
        str(bs),
        str(len(c.splits)),
        oracle,
        format_interval(c.oracle_reward),
        format_interval(c.reference_reward),
        format_interval(c.reference_regret),
        format_utilization(c.reference_utilization, (result.reward_config.band_low, result.reward_config.band_high)),
        f"{c.n_rows} ({row_label(result, c.label)})",
    ]


def _summary_cells(result: EvaluationResult, fr: FeatureResult) -> list[list[str]]:
    return [
        [
            r["algorithm"],
            _num(r["mean_reward"]),
            _num(r["mean_oracle_reward"]),
            _num(r["mean_reference_reward"]),
            _num(r["mean_regret"]),
            f"{r['batch_sizes_at_oracle']}/{r['batch_sizes_scored']}",
            "-" if r["batch_sizes_in_band"] is None else f"{r['batch_sizes_in_band']}/{r['batch_sizes_scored']}",
            format_interval(fr.ope.get(r["algorithm"], {}).get("dr")),
        ]
        for r in summary_rows(result, fr.features)
    ]


_SUMMARY_HEADERS = (
    "algorithm",
    "mean reward",
    "mean oracle",
    "mean reference",
    "mean regret",
    "bs at oracle",
    "bs in band",
    "OPE DR value [95% CI]",
)


def _notes(result: EvaluationResult) -> list[str]:
    notes = [f"holdout: {result.holdout} ({result.holdout_reason}); every number is {result.scored_on}"]
    if not result.energy_measured:
        notes.append("no energy was measured in this data: rewards are throughput only, utilisation is unknown")
    for n in result.not_held_out:
        notes.append(f"not held out: {n.split}, bs {n.batch_size}: {n.reason}")
    return notes


def _feature_notes(fr: FeatureResult) -> list[str]:
    notes = []
    if fr.note:
        notes.append(f"note ({fr.features}): {fr.note}")
    if fr.identical_to:
        notes.append(
            f"note ({fr.features}): the {fr.features} and {fr.identical_to} states are identical on this data, "
            "so are the results"
        )
    return notes


def render_tables(
    result: EvaluationResult, console: Any | None = None, comparison: BaselineComparison | None = None
) -> None:
    """Print the pick table, the oracle/reference table and the summary with rich (contract
    and pre-launch features in one table, one row where they agree), then the engines'
    defaults; every title says whether the numbers are held-out or in-sample.

    Args:
        result: the evaluation.
        console: a ``rich.console.Console`` (default: a new one on stdout, 160 columns wide
            when stdout is not a terminal).
        comparison: specband's pick against the engines' defaults, or ``None``.
    """
    from rich.table import Table

    if console is None:
        console = table_console()

    def table(title: str, headers: tuple[str, ...], rows: list[list[str]]) -> Table:
        t = Table(title=title, title_justify="left")
        for i, h in enumerate(headers):
            t.add_column(h, no_wrap=i == 0, overflow="fold")
        for r in rows:
            t.add_row(*(_interval_units(c) for c in r))
        return t

    for note in _notes(result):
        console.print(note, highlight=False, markup=False)
    _render_features(result, console, table)
    if result.in_sample is not None:
        bss = sorted({bs for fr in result.in_sample.features.values() for bs in fr.contexts})
        console.print(
            f"batch sizes {', '.join(map(str, bss))} could not be held out in any split: "
            "their results below are IN-SAMPLE (trained and scored on the same rows)",
            highlight=False,
            markup=False,
        )
        _render_features(result.in_sample, console, table)
    if comparison is not None:
        from specband.evaluation.baselines import comparison_table

        title, headers, rows, notes = comparison_table(comparison)
        print_table(table(title, headers, rows), console)
        for note in notes:
            console.print(f"note: {note}", highlight=False, markup=False)


def _render_features(result: EvaluationResult, console: Any, table: Any) -> None:
    for title, headers, rows in _tables(result):
        print_table(table(title, headers, rows), console)
    for fr in result.features.values():
        for note in _feature_notes(fr):
            console.print(note, highlight=False, markup=False)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


# ----------------------------------------------------------------------------- markdown
def _md_table(headers: list[str] | tuple[str, ...], rows: list[list[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def report_markdown(
    result: EvaluationResult, extras: ReportExtras | None = None, figures: list[FigureOutcome] | None = None
) -> str:
    """The text of ``report.md``: settings, what could not be held out, the pick table, the
    summary and the off-policy estimates, the engines' defaults, and the figures (or, for a
    figure not drawn, why)."""
    cfg = result.reward_config
    scored = "**in-sample**" if result.scored_on == IN_SAMPLE else "held-out"
    prov = ", ".join(f"{n} {row_label(result, k)}" for k, n in result.provenance.items()) or "none"
    out = [
        "# specband evaluation",
        "",
        f"- data: `{result.data_path or '<in memory>'}` ({result.data_format}, {result.n_rows} rows; "
        f"successful rows: {prov})",
        f"- holdout: **{result.holdout}** ({result.holdout_reason}); splits: {', '.join(result.splits)}",
        f"- every number below is {scored}"
        + (" (trained and scored on the same rows: optimistic)" if result.scored_on == IN_SAMPLE else "")
        + (
            ", except the section marked **in-sample** for batch sizes that could not be held out"
            if result.in_sample is not None
            else ""
        ),
        f"- band: {cfg.band_low:.2f}-{cfg.band_high:.2f} of the power limit; intervals: "
        f"{100 * (1 - result.alpha):.0f} % percentile bootstrap, {result.n_bootstrap} resamples, seed {result.seed} "
        "(reward and utilisation over held-out rows, regret over splits; `(n=1)`: a single observation, no interval)",
        "- row labels: " + "; ".join(f"{label} = {meaning}" for label, meaning in ROW_LABELS),
        f"- {result.fits} policy fits in {result.fit_s:.1f} s",
    ]
    if not result.energy_measured:
        out.append("- no energy was measured in this data: rewards are throughput only, utilisation is unknown")
    if result.not_held_out:
        out += ["", "## Not held out", ""]
        out += [f"- {n.split}, batch size {n.batch_size}: {n.reason}" for n in result.not_held_out]
    out += _markdown_features(result, "##")
    if result.in_sample is not None:
        bss = sorted({bs for fr in result.in_sample.features.values() for bs in fr.contexts})
        out += [
            "",
            f"## In-sample results for batch sizes {', '.join(map(str, bss))} (could not be held out)",
            "",
            "These batch sizes were run in a single split, so there is nothing to hold out: the numbers "
            "below are **in-sample** (trained and scored on the same rows) and optimistic.",
        ]
        out += _markdown_features(result.in_sample, "###")
    if extras is not None and extras.comparison is not None:
        from specband.evaluation.baselines import comparison_table

        title, headers, rows, notes = comparison_table(extras.comparison)
        out += ["", f"## {title}", "", _md_table(headers, rows), ""]
        out += [f"- {n}" for n in notes]
    out += ["", "## Figures", ""]
    for f in figures or []:
        out += [f"![{f.name}]({f.name})" if f.written else f"- none for `{f.name}`: {f.why}", ""]
    return "\n".join(out)


def _markdown_features(result: EvaluationResult, level: str) -> list[str]:
    out: list[str] = ["", f"{level} {_title(result)}", ""]
    for fr in result.features.values():
        out += [n[0].upper() + n[1:] + "." for n in _feature_notes(fr)]
    for title, headers, rows in _tables(result):
        out += ["", f"{level}# {title.rpartition(': ')[2].capitalize()}", "", _md_table(headers, rows)]
    for k, fr in result.features.items():
        if fr.identical_to is not None:
            continue
        out += [
            "",
            f"{level}# Off-policy estimates, {k} features ({result.scored_on}, {fr.ope_n} rows, "
            "the policy acting on each row's own state)",
            "",
            "Propensity: uniform over the configs run at each batch size (or the file's `propensity` column); "
            "reward model: per-(batch size, action) training means. DM: direct method; IPS: inverse propensity "
            "scoring; SNIPS: self-normalised IPS (Swaminathan and Joachims 2015); DR: doubly robust (Dudik, "
            "Langford and Li 2011).",
            "",
        ]
        orows = [
            [algo] + [format_interval(fr.ope.get(algo, {}).get(name)) for name in ESTIMATORS]
            for algo in result.algorithms
        ]
        out.append(_md_table(["algorithm", *[n.upper() for n in ESTIMATORS]], orows))
    return out


def is_report_dir(path: str | Path) -> bool:
    """Whether ``path`` is a folder written by :func:`write_report`: it holds an
    ``evaluation.json`` whose ``schema`` is a ``specband.evaluate/<version>`` layout
    (:data:`JSON_SCHEMA`). Never raises; an unreadable folder or file gives ``False``."""
    try:
        doc = json.loads(
            read_text_bounded(Path(path) / "evaluation.json", limit=MAX_CONFIG_FILE_BYTES, kind="JSON file")
        )
    except (OSError, ValueError, RecursionError, SpecbandError):
        return False
    schema = doc.get("schema") if isinstance(doc, dict) else None
    return isinstance(schema, str) and schema.partition("/")[0] == JSON_SCHEMA.partition("/")[0]


def check_report_dir(out_dir: str | Path) -> Path:
    """Check that ``out_dir`` may receive a report, before anything is computed.

    Allowed: a path that does not exist yet, an empty folder, or a previous specband report
    folder (:func:`is_report_dir`), whose files :func:`write_report` then replaces.

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`.

    Raises:
        ConfigError: ``out_dir`` is an empty string (it would mean the current folder), is
            not a folder, cannot be read, or is a non-empty folder that is not a specband
            report (so a user's files are never overwritten).
    """
    given_path("--out", out_dir)  # an empty --out would mean the current folder
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a folder")
    if out.is_dir():
        try:
            non_empty = any(out.iterdir())
        except OSError as exc:
            raise ConfigError(f"--out {out}: cannot read the folder ({exc.strerror or exc})") from None
        if non_empty and not is_report_dir(out):
            raise ConfigError(
                f"--out {out}: exists, is not empty and is not a specband report folder (no evaluation.json "
                f"with schema {JSON_SCHEMA}); choose another --out or remove it"
            )
    return out


def _umask() -> int:
    """The process umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_report(result: EvaluationResult, out_dir: str | Path, extras: ReportExtras | None = None) -> WrittenReport:
    """Write ``report.md``, ``evaluation.json`` and the figures (:data:`FIGURES`) into
    ``out_dir``, atomically per file: everything is rendered into a temporary folder next
    to ``out_dir`` first, then moved in. A new folder gets the mode ``mkdir`` would give it
    (0777 minus the umask); in a previous report folder only the report's own files
    (:data:`REPORT_FILES`) are replaced, and a figure not drawn this time (or of an earlier
    layout) is removed, so no figure outlives the data it showed.

    Args:
        result: the evaluation.
        out_dir: the report folder.
        extras: the data's per-config means, the pick and the engines' defaults
            (:func:`report_extras`); without them ``tradeoff.png`` and ``baselines.png``
            are not drawn (the report says why).

    Returns:
        a :class:`WrittenReport`.

    Raises:
        ConfigError: ``out_dir`` is refused by :func:`check_report_dir` (empty name, not a
            folder, a non-empty folder that is not a specband report), or cannot be written.
    """
    out = check_report_dir(out_dir)
    target = out.resolve()
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name or 'report'}.", dir=parent))
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write there ({exc.strerror})") from None
    try:
        from specband.evaluation.figures import write_figures  # lazy: matplotlib only when a report is written

        figures = write_figures(
            result,
            tmp,
            stats=None if extras is None else extras.stats,
            picks=None if extras is None else extras.picks,
            comparison=None if extras is None else extras.comparison,
        )
        (tmp / "report.md").write_text(report_markdown(result, extras, figures), encoding="utf-8")
        doc = result_to_json(result)
        if extras is not None and extras.comparison is not None:
            doc["engine_defaults"] = extras.comparison.to_json()
        (tmp / "evaluation.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        names = [n for n in REPORT_FILES if (tmp / n).exists()]
        if not out.exists():
            os.chmod(tmp, 0o777 & ~_umask())
            os.replace(tmp, out)
            return WrittenReport([out / n for n in names], figures)
        targets = [replace_target(out / n, error=ConfigError) for n in names]  # regular files only
        for n, dest in zip(names, targets, strict=True):
            os.replace(tmp / n, dest)
        for stale in [n for n in REPORT_FILES if n not in names] + list(_OLD_FIGURES):
            if (out / stale).is_file() and not (out / stale).is_symlink():
                (out / stale).unlink()
        return WrittenReport([out / n for n in names], figures)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write the report ({exc.strerror})") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
