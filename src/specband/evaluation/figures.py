"""The figures of an evaluation report (``reward.png``, ``utilization.png``, ``regret.png``):
matplotlib, written by :func:`specband.evaluation.report.write_report`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from specband.evaluation.holdout import IN_SAMPLE, EvaluationResult, FeatureResult
from specband.evaluation.ope import Interval

__all__ = ["write_figures"]


def _err(interval: Interval | None) -> tuple[float, float, float]:
    if interval is None:
        return (np.nan, 0.0, 0.0)
    return (interval.estimate, interval.estimate - interval.low, interval.high - interval.estimate)


_SHORT_LABEL = {"measured": "", "derived": "derived", "simulated": "simulated", "none": ""}


def _short(label: str) -> str:
    return _SHORT_LABEL.get(label, "mixed" if label.startswith("mixed") else label)


def _columns(result: EvaluationResult, k: str) -> list[tuple[int, EvaluationResult, FeatureResult]]:
    """Batch-size columns of a figure panel: the main result's, then the in-sample fallback's."""
    cols = [(bs, result, result.features[k]) for bs in result.features[k].contexts]
    if result.in_sample is not None and k in result.in_sample.features:
        fb = result.in_sample
        cols += [(bs, fb, fb.features[k]) for bs in fb.features[k].contexts]
    return sorted(cols, key=lambda c: c[0])


def write_figures(result: EvaluationResult, directory: Path) -> None:  # noqa: C901, PLR0915
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    kinds = list(result.features)
    algos = list(result.algorithms)
    colors = plt.get_cmap("tab10")
    cfg = result.reward_config
    how = "in-sample" if result.scored_on == IN_SAMPLE else f"held-out by {result.holdout}"
    mixed_scoring = result.in_sample is not None
    width = 0.8 / max(len(algos), 1)
    labels_seen = {
        p.label
        for k in kinds
        for _, _, fr in _columns(result, k)
        for per_bs in fr.picks.values()
        for p in per_bs.values()
        if p.reward is not None
    }
    uniform = next(iter(labels_seen)) if len(labels_seen) == 1 else None
    provenance = f"all rows {uniform}" if uniform else "text on a mark: row provenance (none = measured)"

    def setup(ylabel: str, title: str) -> tuple[Any, list[Any]]:
        fig, axes = plt.subplots(1, len(kinds), figsize=(7.5 * len(kinds), 5.6), squeeze=False, sharey=True)
        extra = "; batch sizes marked in-sample could not be held out" if mixed_scoring else ""
        fig.suptitle(f"{title} ({how}{extra}; {100 * (1 - result.alpha):.0f} % bootstrap intervals)", fontsize=11)
        for ax, k in zip(axes[0], kinds, strict=True):
            fr = result.features[k]
            ax.set_title(f"{k} features" + (f" (identical to {fr.identical_to})" if fr.identical_to else ""))
            ax.set_xlabel("batch size")
            ax.grid(axis="y", alpha=0.3)
        axes[0][0].set_ylabel(ylabel)
        return fig, list(axes[0])

    def ticks(ax: Any, cols: list[tuple[int, EvaluationResult, FeatureResult]]) -> None:
        labels = [f"{bs}\n(in-sample)" if mixed_scoring and r.scored_on == IN_SAMPLE else str(bs) for bs, r, _ in cols]
        ax.set_xticks(range(len(cols)), labels)

    def series(cols: list[tuple[int, EvaluationResult, FeatureResult]], algo: str, attr: str, j: int) -> tuple:
        xs, ys, lo, hi, notes = [], [], [], [], []
        for i, (bs, _, fr) in enumerate(cols):
            p = fr.picks.get(algo, {}).get(bs)
            y, dl, dh = _err(getattr(p, attr) if p else None)
            xs.append(i - 0.4 + width * (j + 0.5))
            ys.append(y)
            lo.append(dl)
            hi.append(dh)
            notes.append(_short(p.label) if p is not None and getattr(p, attr) is not None else "")
        return xs, ys, lo, hi, notes

    def annotate(ax: Any, xs: list[float], ys: list[float], notes: list[str]) -> None:
        if uniform:
            return
        for x, y, note in zip(xs, ys, notes, strict=True):
            if note and np.isfinite(y):
                ax.annotate(
                    note,
                    (x, y),
                    textcoords="offset points",
                    xytext=(0, 3),
                    ha="center",
                    va="bottom",
                    fontsize=6,
                    rotation=90,
                )

    def finish(fig: Any, axes: list[Any], name: str, provenance_note: bool = True) -> None:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=8, frameon=False)
        if provenance_note:
            fig.text(0.995, 0.005, provenance, ha="right", va="bottom", fontsize=8, color="dimgray")
        fig.tight_layout(rect=(0, 0.1, 1, 1))
        fig.savefig(directory / name, dpi=110)
        plt.close(fig)

    # Reward of each pick with reference and oracle.
    fig, axes = setup("reward of the pick", "Reward of each algorithm's pick")
    for ax, k in zip(axes, kinds, strict=True):
        cols = _columns(result, k)
        for j, algo in enumerate(algos):
            xs, ys, lo, hi, notes = series(cols, algo, "reward", j)
            ax.bar(xs, ys, width * 0.9, yerr=[lo, hi], capsize=2, color=colors(j % 10), label=algo)
            annotate(ax, xs, ys, notes)
        for i, (bs, _, fr) in enumerate(cols):
            ctx = fr.contexts[bs]
            ax.hlines(
                ctx.oracle_reward.estimate,
                i - 0.45,
                i + 0.45,
                colors="black",
                linewidth=2,
                label="oracle (best held-out config)" if i == 0 else None,
            )
            if ctx.reference_reward is not None:
                ax.hlines(
                    ctx.reference_reward.estimate,
                    i - 0.45,
                    i + 0.45,
                    colors="red",
                    linestyles="--",
                    linewidth=2,
                    label="reference (3,4,8)" if i == 0 else None,
                )
        ticks(ax, cols)
        ax.set_ylim(0, max(0.05, ax.get_ylim()[1] * 1.08))
    finish(fig, axes, "reward.png")

    # Utilisation of each pick against the band.
    fig, axes = setup("energy utilisation (avg power / power limit)", "Utilisation of each pick against the band")
    for ax, k in zip(axes, kinds, strict=True):
        cols = _columns(result, k)
        ax.axhspan(
            cfg.band_low,
            cfg.band_high,
            color="green",
            alpha=0.18,
            label=f"target band {cfg.band_low:.2f}-{cfg.band_high:.2f}",
        )
        for j, algo in enumerate(algos):
            xs, ys, lo, hi, notes = series(cols, algo, "utilization", j)
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=3, color=colors(j % 10), label=algo)
            annotate(ax, xs, ys, notes)
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
        ticks(ax, cols)
    finish(fig, axes, "utilization.png")

    # Regret with intervals.
    fig, axes = setup("regret (oracle reward - pick reward)", "Regret of each pick")
    for ax, k in zip(axes, kinds, strict=True):
        cols = _columns(result, k)
        for j, algo in enumerate(algos):
            xs, ys, lo, hi, notes = series(cols, algo, "regret", j)
            ax.bar(xs, ys, width * 0.9, yerr=[lo, hi], capsize=2, color=colors(j % 10), label=algo)
            zero = [x for x, y in zip(xs, ys, strict=True) if y == 0]
            ax.plot(zero, [0] * len(zero), linestyle="none", marker="^", color=colors(j % 10), markersize=5)
        ax.axhline(0, color="black", linewidth=0.8)
        ticks(ax, cols)
        ax.set_ylim(bottom=min(-0.01, ax.get_ylim()[0]), top=max(0.05, ax.get_ylim()[1]))
    axes[0].text(
        0.01,
        0.98,
        "triangle on the axis: regret 0 (the pick is the oracle)",
        transform=axes[0].transAxes,
        fontsize=7,
        va="top",
        color="dimgray",
    )
    finish(fig, axes, "regret.png", provenance_note=False)
