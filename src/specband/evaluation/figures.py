"""The figures of an evaluation report, written by :func:`specband.evaluation.report.write_report`
(matplotlib):

* ``tradeoff.png``: per batch size, every config the data ran: speed (tok/s) against energy
  utilisation with the band shaded, coloured by J/token; the pick, the engines' defaults and
  the baseline marked;
* ``baselines.png``: per batch size, specband's pick against sglang's default adaptive tiers
  and vLLM with a fixed K (:mod:`specband.evaluation.baselines`): tok/s, J/token, utilisation;
* ``utilization.png``: the utilisation of each algorithm's pick against the band.

Every figure carries its source in the figure (a footer line: measured, published, emulated or
simulated rows, and the file) and in the PNG's ``Source`` text chunk. A figure with nothing to
show is not written; :class:`FigureOutcome` says why in one line (the report prints it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from specband.contract.actions import EXTENDED_ACTIONS, Action
from specband.evaluation.baselines import SGLANG, SGLANG_DEFAULTS_SOURCE, VLLM, VLLM_K
from specband.evaluation.holdout import IN_SAMPLE, EvaluationResult, FeatureResult
from specband.evaluation.ope import Interval

if TYPE_CHECKING:
    from specband.evaluation.baselines import BaselineComparison
    from specband.sweeps.origin import ActionStats

__all__ = ["FIGURES", "FigureOutcome", "figure_source", "source_line", "sweep_source", "write_figures"]

#: Figures :func:`write_figures` may write, in report order.
FIGURES: tuple[str, ...] = ("tradeoff.png", "baselines.png", "utilization.png")


@dataclass(frozen=True)
class FigureOutcome:
    """One figure of the report.

    Attributes:
        name: the file name.
        written: whether it was drawn.
        why: one line saying why it was not (``None`` when written).
        source: the provenance line drawn in it.
        values: the numbers behind it, by series name (what a test checks).
    """

    name: str
    written: bool
    why: str | None
    source: str
    values: dict[str, list[float]] = field(default_factory=dict)


def _err(interval: Interval | None) -> tuple[float, float, float]:
    if interval is None:
        return (np.nan, 0.0, 0.0)
    return (interval.estimate, interval.estimate - interval.low, interval.high - interval.estimate)


_SHORT_LABEL = {"measured": "", "derived": "derived", "simulated": "simulated", "none": ""}


def _short(label: str) -> str:
    return _SHORT_LABEL.get(label, "mixed" if label.startswith("mixed") else label)


def source_line(data_format: str, provenance: Mapping[str, int], data_path: str | None) -> str:
    """The provenance line of a figure: what the rows are and where they come from, e.g.
    ``"source: published measurements (4 derived, 25 measured rows), rtx4060_published_live.jsonl"``.

    Args:
        data_format: the sweep's format (``"published_live"`` for the published study's rows).
        provenance: row label (measured, derived, simulated, emulated) -> count.
        data_path: the data file (its name is shown), or ``None``.
    """
    counts = ", ".join(f"{n} {k}" for k, n in sorted(provenance.items())) or "no"
    kinds = set(provenance)
    if data_format == "published_live":
        what = "published measurements"
    elif kinds <= {"measured", "derived"}:
        what = "measured rows"
    elif len(kinds) == 1:
        what = f"{next(iter(kinds))} rows" + (" (a simulation, not a measurement)" if "simulated" in kinds else "")
    else:
        what = "mixed rows"
    name = Path(data_path).name if data_path else "in-memory data"
    return f"source: {what} ({counts} rows), {name}"


def figure_source(result: EvaluationResult) -> str:
    """:func:`source_line` of an evaluation's rows."""
    return source_line(result.data_format, result.provenance, result.data_path)


def sweep_source(sweep: Any) -> str:
    """:func:`source_line` of a sweep's successful rows."""
    from collections import Counter

    from specband.evaluation.splits import _row_label

    counts = Counter(_row_label(r) for r in sweep.rows if r.trainable)
    return source_line(sweep.format, counts, None if sweep.path is None else str(sweep.path))


def _columns(result: EvaluationResult, k: str) -> list[tuple[int, EvaluationResult, FeatureResult]]:
    """Batch-size columns of a figure panel: the main result's, then the in-sample fallback's."""
    cols = [(bs, result, result.features[k]) for bs in result.features[k].contexts]
    if result.in_sample is not None and k in result.in_sample.features:
        fb = result.in_sample
        cols += [(bs, fb, fb.features[k]) for bs in fb.features[k].contexts]
    return sorted(cols, key=lambda c: c[0])


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, path: Path, source: str, bottom: float = 0.08, top: float = 1.0) -> None:
    """Footer (wrapped, never cut), tight layout above it, PNG with a ``Source`` text chunk."""
    import textwrap

    footer = "\n".join(textwrap.wrap(source, width=int(fig.get_figwidth() * 15)))
    fig.text(0.005, 0.005, footer, ha="left", va="bottom", fontsize=7, color="dimgray")
    lines = footer.count("\n") + 1
    fig.tight_layout(rect=(0, bottom + 0.025 * lines, 1, top))
    fig.savefig(path, dpi=110, metadata={"Source": source})
    plt.close(fig)


def _kinds(result: EvaluationResult) -> list[str]:
    """Feature kinds to draw: a kind identical to an earlier one is drawn once, as that one."""
    return [k for k, fr in result.features.items() if fr.identical_to is None]


def _kind_title(result: EvaluationResult, k: str) -> str:
    twins = [t for t, fr in result.features.items() if fr.identical_to == k]
    return f"{k} features" + (f" (= {', '.join(twins)}: identical states on this data)" if twins else "")


def _utilization(result: EvaluationResult, directory: Path, source: str) -> FigureOutcome:
    name = "utilization.png"
    kinds, algos = _kinds(result), list(result.algorithms)
    values: dict[str, list[float]] = {}
    for k in kinds:
        for algo in algos:
            ys = [
                p.utilization.estimate
                for bs, _, fr in _columns(result, k)
                for p in [fr.picks.get(algo, {}).get(bs)]
                if p is not None and p.utilization is not None
            ]
            values[f"{k}/{algo}"] = ys
    if not any(values.values()):
        return FigureOutcome(name, False, "no power in the data: the picks' utilisation is unknown", source)
    plt = _plt()
    colors = plt.get_cmap("tab10")
    cfg = result.reward_config
    how = "in-sample" if result.scored_on == IN_SAMPLE else f"held-out by {result.holdout}"
    mixed_scoring = result.in_sample is not None
    width = 0.8 / max(len(algos), 1)
    fig, axes = plt.subplots(1, len(kinds), figsize=(7.5 * len(kinds), 5.6), squeeze=False, sharey=True)
    extra = "; batch sizes marked in-sample could not be held out" if mixed_scoring else ""
    import textwrap

    title = (
        f"Utilisation of each algorithm's pick against the band ({how}{extra}; "
        f"{100 * (1 - result.alpha):.0f} % bootstrap intervals; text on a mark: row provenance when not measured)"
    )
    fig.suptitle("\n".join(textwrap.wrap(title, int(fig.get_figwidth() * 13))), fontsize=10)
    for ax, k in zip(axes[0], kinds, strict=True):
        cols = _columns(result, k)
        ax.set_title(_kind_title(result, k), fontsize=9)
        ax.axhspan(
            cfg.band_low, cfg.band_high, color="green", alpha=0.18, label=f"band {cfg.band_low:.2f}-{cfg.band_high:.2f}"
        )
        for j, algo in enumerate(algos):
            xs, ys, lo, hi = [], [], [], []
            for i, (bs, _, fr) in enumerate(cols):
                p = fr.picks.get(algo, {}).get(bs)
                y, dl, dh = _err(p.utilization if p else None)
                x = i - 0.4 + width * (j + 0.5)
                xs.append(x)
                ys.append(y)
                lo.append(dl)
                hi.append(dh)
                note = _short(p.label) if p is not None and p.utilization is not None else ""
                if note and np.isfinite(y):
                    ax.annotate(
                        note, (x, y), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=6, rotation=90
                    )
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=3, color=colors(j % 10), label=algo)
        for i, (bs, _, fr) in enumerate(cols):
            ref = fr.contexts[bs].reference_utilization
            if ref is not None:
                ax.hlines(
                    ref.estimate,
                    i - 0.45,
                    i + 0.45,
                    colors="red",
                    linestyles="--",
                    label="reference (3,4,8)" if i == 0 else None,
                )
        labels = [f"{bs}\n(in-sample)" if mixed_scoring and r.scored_on == IN_SAMPLE else str(bs) for bs, r, _ in cols]
        ax.set_xticks(range(len(cols)), labels)
        ax.set_xlabel("batch size")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("energy utilisation (avg power / power limit)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.035),
        ncol=min(6, len(labels)),
        fontsize=8,
        frameon=False,
    )
    _save(plt, fig, directory / name, source, bottom=0.1)
    return FigureOutcome(name, True, None, source, values)


def _grid(n: int) -> tuple[int, int]:
    cols = min(n, 4)
    return (n + cols - 1) // cols, cols


#: ``tradeoff.png``: inches kept right of the panels for the colour bar (0.15 in wide), its tick labels
#: (``6 x 10^-2`` on a log scale) and its label, and the narrowest figure (one batch size).
_CBAR_ROOM_IN = 2.0
_MIN_TRADEOFF_WIDTH_IN = 9.0
#: Width of a character of the 7-point footer and legend text, inches (DejaVu Sans, measured: 160
#: characters of the footer take 8.3 in), and of a legend entry's marker and padding.
_CHAR_IN = 0.055
_LEGEND_HANDLE_IN = 0.55


def _tradeoff_frame(fig: Any, source: str, legend: Mapping[str, Any], scatter: Any) -> None:
    """The trade-off figure's footer, legend (wrapped into rows that fit the width), panel margins
    and colour bar (``scatter``'s, labelled ``energy, J/token``; ``None``: no J/token to colour by),
    all laid out in inches so that nothing is cut, whatever the number of panels."""
    import textwrap

    width, height = fig.get_figwidth(), fig.get_figheight()
    note = "; dashed outline: the engine default's config is not in the data, its figures are simulated"
    footer = "\n".join(textwrap.wrap(source + note, int((width - 0.2) / _CHAR_IN)))
    fig.text(0.005, 0.005, footer, ha="left", va="bottom", fontsize=7, color="dimgray")
    entry_in = max((_LEGEND_HANDLE_IN + _CHAR_IN * len(label) for label in legend), default=1.0)
    per_row = max(1, min(len(legend), int((width - 0.4) // entry_in)))
    rows = -(-len(legend) // per_row)
    bottom_in = 0.25 + 0.15 * (footer.count("\n") + 1)
    fig.set_figheight(height + 0.22 * (rows - 1))
    height = fig.get_figheight()
    fig.legend(
        list(legend.values()),
        list(legend),
        loc="lower center",
        bbox_to_anchor=(0.5, bottom_in / height),
        ncol=per_row,
        fontsize=7,
        frameon=False,
    )
    axes_bottom_in = bottom_in + 0.22 * rows + 0.6  # the legend, then the x tick labels and label
    axes_top_in = height - 0.7  # the suptitle and the panel titles
    right_in = width - _CBAR_ROOM_IN + 0.3
    fig.subplots_adjust(
        left=0.75 / width,
        right=right_in / width,
        top=axes_top_in / height,
        bottom=axes_bottom_in / height,
        hspace=0.4,
        wspace=0.3,
    )
    if scatter is not None:
        cax = fig.add_axes(
            ((right_in + 0.25) / width, axes_bottom_in / height, 0.15 / width, (axes_top_in - axes_bottom_in) / height)
        )
        fig.colorbar(scatter, cax=cax, label="energy, J/token")


def _tradeoff(  # noqa: C901
    result: EvaluationResult,
    directory: Path,
    source: str,
    stats: Mapping[int, Mapping[int, ActionStats]] | None,
    picks: Mapping[int, Action],
    algorithm: str,
    comparison: BaselineComparison | None,
) -> FigureOutcome:
    name = "tradeoff.png"
    if not stats:
        return FigureOutcome(name, False, "no rows with a speed to draw", source)
    sizes = [bs for bs in sorted(stats) if any(s.energy_utilization is not None for s in stats[bs].values())]
    if not sizes:
        return FigureOutcome(
            name, False, "no power in the data: utilisation is unknown, so the band cannot be drawn", source
        )
    values: dict[str, list[float]] = {}
    for bs in sizes:
        values[f"bs{bs}/speed_tok_s"] = [s.speed_tok_s for s in stats[bs].values()]
        values[f"bs{bs}/utilization"] = [
            s.energy_utilization for s in stats[bs].values() if s.energy_utilization is not None
        ]
        values[f"bs{bs}/joules_per_token"] = [
            s.joules_per_token for s in stats[bs].values() if s.joules_per_token is not None
        ]
    plt = _plt()
    cfg = result.reward_config
    nrows, ncols = _grid(len(sizes))
    # room on the right for the colour bar, its ticks and its label; a one-panel figure still as
    # wide as its title, legend and footer (they were cut at 5.8 in)
    width = max(4.4 * ncols + _CBAR_ROOM_IN, _MIN_TRADEOFF_WIDTH_IN)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, 3.8 * nrows + 1.6), squeeze=False)
    jpts = [v for bs in sizes for v in values[f"bs{bs}/joules_per_token"]]
    norm = None
    if jpts:
        from matplotlib.colors import LogNorm, Normalize

        lo, hi = min(jpts), max(jpts)
        norm = LogNorm(lo, hi) if lo > 0 and hi / lo > 5 else Normalize(lo, hi if hi > lo else lo * 1.01 + 1e-9)
    scatter = None
    legend: dict[str, Any] = {}
    marks = {SGLANG: ("s", "tab:orange"), VLLM: ("^", "tab:purple")}  # by the comparison's row label
    for n, bs in enumerate(sizes):
        ax = axes[n // ncols][n % ncols]
        ax.axvspan(
            cfg.band_low,
            cfg.band_high,
            color="green",
            alpha=0.15,
            lw=0,
            label=f"band {cfg.band_low:.2f}-{cfg.band_high:.2f}",
        )
        items = [(a, s) for a, s in stats[bs].items() if s.energy_utilization is not None]
        xs = [s.energy_utilization for _, s in items]
        ys = [s.speed_tok_s for _, s in items]
        cs = [s.joules_per_token if s.joules_per_token is not None else np.nan for _, s in items]
        scatter = ax.scatter(
            xs, ys, c=cs if jpts else "tab:blue", cmap="viridis", norm=norm, s=28, zorder=3, edgecolors="none"
        )
        speed_rank = sorted(items, key=lambda it: -it[1].speed_tok_s)[:3]
        labelled = {a for a, _ in speed_rank} | {0}
        pick = picks.get(bs)
        for a, s in items:
            act = EXTENDED_ACTIONS[a]
            if a in labelled or act == pick:
                ax.annotate(
                    f"({act[0]},{act[1]},{act[2]})",
                    (s.energy_utilization, s.speed_tok_s),
                    textcoords="offset points",
                    xytext=(4, -9),
                    fontsize=6,
                )
        if pick is not None:
            hit = [(s.energy_utilization, s.speed_tok_s) for a, s in items if EXTENDED_ACTIONS[a] == pick]
            if hit:
                ax.scatter(
                    *zip(*hit, strict=True),
                    marker="*",
                    s=260,
                    facecolors="none",
                    edgecolors="red",
                    linewidths=1.5,
                    zorder=4,
                    label=f"specband pick ({algorithm})",
                )
        if comparison is not None:
            for key, (marker, color) in marks.items():
                row = next((r for r in comparison.rows if r.batch_size == bs and r.who == key), None)
                if row is None or row.figures is None or row.figures.energy_utilization is None:
                    continue
                sim = not row.figures.from_data
                ax.scatter(
                    [row.figures.energy_utilization],
                    [row.figures.speed_tok_s],
                    marker=marker,
                    s=110,
                    facecolors="none",
                    edgecolors=color,
                    linewidths=1.4,
                    linestyle="--" if sim else "-",
                    zorder=5,
                    label=f"{key.split()[0]} default" + (" (not in the data: simulated)" if sim else ""),
                )
        if not any(x is not None and cfg.band_low <= x <= cfg.band_high for x in xs):
            ax.text(
                0.5,
                0.02,
                "no config in the band at this limit",
                transform=ax.transAxes,
                ha="center",
                fontsize=7,
                color="darkgreen",
            )
        ax.set_title(f"batch size {bs}", fontsize=9)
        ax.set_xlabel("energy utilisation (avg power / limit)", fontsize=8)
        ax.set_ylabel("speed, tok/s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(lab, h)
    for n in range(len(sizes), nrows * ncols):
        axes[n // ncols][n % ncols].axis("off")
    _tradeoff_frame(fig, source, legend, scatter if jpts else None)
    fig.suptitle(
        "Speed against energy utilisation of every config the data ran (mean over its rows), per batch size",
        fontsize=10,
    )
    fig.savefig(directory / name, dpi=110, metadata={"Source": source})
    plt.close(fig)
    return FigureOutcome(name, True, None, source, values)


def _baselines(directory: Path, source: str, comparison: BaselineComparison | None) -> FigureOutcome:
    name = "baselines.png"
    if comparison is None:
        return FigureOutcome(name, False, "no comparison with the engines' defaults was made", source)
    sizes = comparison.batch_sizes()
    whos = list(dict.fromkeys(r.who for r in comparison.rows))
    metrics = (
        ("speed_tok_s", "speed, tok/s"),
        ("joules_per_token", "energy, J/token"),
        ("energy_utilization", "utilisation"),
    )
    values: dict[str, list[float]] = {}
    for attr, _ in metrics:
        for who in whos:
            values[f"{attr}/{who}"] = [
                float(getattr(r.figures, attr))
                for r in comparison.rows
                if r.who == who and r.figures is not None and getattr(r.figures, attr) is not None
            ]
    if not any(values[f"speed_tok_s/{w}"] for w in whos):
        return FigureOutcome(
            name, False, "no contender has figures at any batch size (not in the data, no simulator)", source
        )
    plt = _plt()
    colors = {w: c for w, c in zip(whos, ("tab:red", "tab:orange", "tab:purple"), strict=False)}
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8), squeeze=False)
    width = 0.8 / len(whos)
    for ax, (attr, label) in zip(axes[0], metrics, strict=True):
        if attr == "energy_utilization":
            ax.axhspan(0.95, 0.98, color="green", alpha=0.15, lw=0, label="band 0.95-0.98")
        for j, who in enumerate(whos):
            for i, bs in enumerate(sizes):
                r = next((x for x in comparison.rows if x.who == who and x.batch_size == bs), None)
                v = None if r is None or r.figures is None else getattr(r.figures, attr)
                if v is None:
                    continue
                x = i - 0.4 + width * (j + 0.5)
                sim = r is not None and r.figures is not None and not r.figures.from_data
                first = ax.get_legend_handles_labels()[1].count(who) == 0
                if attr == "energy_utilization":  # a point: a bar from 0 would hide the band's few hundredths
                    ax.scatter(
                        [x],
                        [v],
                        s=45,
                        marker="o",
                        color=colors[who] if not sim else "white",
                        edgecolors=colors[who],
                        linewidths=1.5,
                        zorder=3,
                        label=who if first else None,
                    )
                else:
                    ax.bar(
                        x,
                        v,
                        width * 0.9,
                        color=colors[who],
                        hatch="//" if sim else None,
                        edgecolor="white" if sim else None,
                        label=who if first else None,
                    )
                    iv = None if r is None or r.figures is None else r.figures.speed_interval
                    if attr == "speed_tok_s" and iv is not None:  # the simulator's error on this data
                        ax.errorbar([x], [v], yerr=[[v - iv[0]], [iv[1] - v]], fmt="none", ecolor="black", capsize=2)
                if r is not None:
                    ax.annotate(
                        r.config_text,
                        (x, v),
                        textcoords="offset points",
                        xytext=(0, 4),
                        ha="center",
                        fontsize=6,
                        rotation=90,
                    )
        ax.set_xticks(range(len(sizes)), [str(bs) for bs in sizes])
        ax.set_xlabel("batch size")
        ax.grid(axis="y", alpha=0.3)
        vals = [v for w in whos for v in values[f"{attr}/{w}"]]
        if attr == "energy_utilization" and vals:
            ax.set_ylim(min(min(vals), 0.95) - 0.03, max(max(vals), 0.98) + 0.04)
        elif attr == "joules_per_token" and vals and min(vals) > 0 and max(vals) / min(vals) > 5:
            ax.set_yscale("log")
            ax.set_ylim(min(vals) / 1.5, max(vals) * 2.5)
        else:
            ax.set_ylim(0, ax.get_ylim()[1] * 1.18)
        ax.set_title(label + (" (log scale)" if ax.get_yscale() == "log" else ""), fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(
        handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.94), ncol=len(labels), fontsize=8, frameon=False
    )
    fig.suptitle(
        "specband's pick against the engines' defaults, per batch size "
        "(hatched bar or hollow point: simulated, not in the data; its error bar: the simulator's worst "
        "speed error on the data's own configs)",
        fontsize=10,
    )
    simulated = f"; hatched: simulated on {comparison.simulator}" if comparison.simulator else ""
    fig.subplots_adjust(top=0.8)
    _save(
        plt,
        fig,
        directory / name,
        source + simulated + f"; sglang tiers: {SGLANG_DEFAULTS_SOURCE.split(' (')[0]}; vLLM K={VLLM_K}",
        bottom=0.0,
        top=0.86,
    )
    return FigureOutcome(name, True, None, source, values)


def write_figures(
    result: EvaluationResult,
    directory: Path,
    *,
    stats: Mapping[int, Mapping[int, ActionStats]] | None = None,
    picks: tuple[str, Mapping[int, Action]] | None = None,
    comparison: BaselineComparison | None = None,
) -> list[FigureOutcome]:
    """Draw the report's figures (:data:`FIGURES`) into ``directory``.

    Args:
        result: the evaluation.
        directory: an existing folder.
        stats: per batch size and action index, the data's means
            (:func:`specband.sweeps.origin.action_stats`); ``None``: no ``tradeoff.png``.
        picks: the algorithm and its pick per batch size (:func:`specband.evaluation.baselines.picks_of`).
        comparison: the engines' defaults (:func:`specband.evaluation.baselines.compare_with_engine_defaults`).

    Returns:
        one :class:`FigureOutcome` per name of :data:`FIGURES`, in order.
    """
    source = figure_source(result)
    algorithm, pick_map = picks if picks is not None else ("", {})
    return [
        _tradeoff(result, directory, source, stats, pick_map, algorithm, comparison),
        _baselines(directory, source, comparison),
        _utilization(result, directory, source),
    ]
