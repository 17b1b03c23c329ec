"""Held-out evaluation of schedules and batch-mix picks (``specband evaluate --schedules``).

For every split of :func:`specband.evaluation.holdout.make_splits` and every algorithm and
feature kind, a policy is trained on the split's training rows and, at each held-out batch
size, asked from the mean held-out state there (as :func:`~specband.evaluation.holdout.evaluate`
does). Four ways to serve a batch-size mix (weights ``w_bs``; default uniform over the
batch sizes held out in the split) are scored on the held-out rows:

* ``per-batch-size``: each batch size's own pick (any of the allowed configs);
* ``schedule``: each batch size's best chain config (topk 1 or the baseline), what
  ``specband schedule`` deploys (:data:`specband.deploy.tiers.CHAIN_INDICES`);
* ``batch-mix``: the one config with the best expected score over the mix
  (``recommend --batch-mix``);
* ``best fixed``: the one config with the best held-out reward over the mix, in
  hindsight (an oracle, the same for every algorithm).

A variant's held-out value in a split is ``sum(w_bs * mean held-out reward of its config at
bs)``; when a config was not run in the split's held-out rows at some batch size, the
split's value is not measured (counted, never imputed). Intervals are 95 % percentile
bootstrap intervals over the measured splits.
"""

from __future__ import annotations

import io
import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specband.contract.actions import EXTENDED_ACTIONS, chain_and_tree_indices
from specband.contract.reward import RewardConfig
from specband.core.errors import ConfigError, DataError
from specband.core.tables import print_table, table_console
from specband.evaluation.figures import sweep_source
from specband.evaluation.holdout import (
    HELD_OUT,
    IN_SAMPLE,
    _default_factory,
    _interval,
    _modal,
    _observe,
    _usable,
    make_splits,
    resolve_holdout,
)
from specband.evaluation.ope import DEFAULT_N_BOOTSTRAP, Interval
from specband.evaluation.report import format_interval
from specband.files.fileio import write_bytes_atomic, write_text_atomic
from specband.policies import ALGORITHMS
from specband.sweeps.dataset import FEATURE_KINDS, Sweep

__all__ = [
    "FIGURE",
    "JSON_FILE",
    "VARIANTS",
    "ScheduleEvaluation",
    "ScheduleSplit",
    "ScheduleSummary",
    "evaluate_schedules",
    "figure_reason",
    "render_schedule_table",
    "schedules_to_json",
    "write_schedule_report",
]

#: The ways to serve a mix, in report order.
VARIANTS: tuple[str, ...] = ("per-batch-size", "schedule", "batch-mix", "best fixed")
#: Files :func:`write_schedule_report` adds to a report folder.
JSON_FILE = "schedules.json"
FIGURE = "schedules.png"
_ORACLE = "oracle"


@dataclass(frozen=True)
class ScheduleSplit:
    """One variant of one algorithm and feature kind in one split.

    Attributes:
        split, features, algorithm (``"oracle"`` for ``best fixed``), variant.
        configs: batch size -> action index served there.
        value: mix-weighted mean held-out reward, ``None`` when a config was not run there.
        not_measured: batch sizes whose config the held-out rows did not run.
    """

    split: str
    features: str
    algorithm: str
    variant: str
    configs: dict[int, int]
    value: float | None
    not_measured: tuple[int, ...]


@dataclass(frozen=True)
class ScheduleSummary:
    """A variant over all splits.

    Attributes:
        features, algorithm, variant: as :class:`ScheduleSplit`.
        value: bootstrap interval of the per-split values (``None`` when never measured).
        n_splits: splits scored; n_measured: those with a value.
        configs: batch size -> most frequent config over splits (ties: lowest index).
    """

    features: str
    algorithm: str
    variant: str
    value: Interval | None
    n_splits: int
    n_measured: int
    configs: dict[int, int]


@dataclass(frozen=True)
class ScheduleEvaluation:
    """What :func:`evaluate_schedules` found.

    Attributes:
        holdout: the resolved holdout kind; scored_on: ``held-out`` or ``in-sample``.
        mix: the requested mix (``None``: uniform over each split's held-out batch sizes).
        splits: every :class:`ScheduleSplit`; summaries: every :class:`ScheduleSummary`.
        source: the rows' provenance line (:func:`specband.evaluation.figures.sweep_source`).
    """

    holdout: str
    scored_on: str
    mix: dict[int, float] | None
    splits: tuple[ScheduleSplit, ...]
    summaries: tuple[ScheduleSummary, ...]
    source: str = ""


def _argmax(values: Mapping[int, float]) -> int | None:
    """Key with the highest finite value (ties: the lowest key)."""
    finite = [(v, -a) for a, v in values.items() if not math.isnan(v)]
    return -max(finite)[1] if finite else None


def _split_weights(mix: Mapping[int, float] | None, sizes: Sequence[int]) -> dict[int, float]:
    """The mix restricted to ``sizes`` and renormalised (uniform when ``mix`` is None)."""
    if mix is None:
        return {bs: 1.0 / len(sizes) for bs in sizes}
    kept = {bs: w for bs, w in mix.items() if bs in sizes}
    total = sum(kept.values())
    return {bs: w / total for bs, w in kept.items()} if total > 0 else {}


def _value(
    configs: Mapping[int, int], weights: Mapping[int, float], means: Mapping[int, Mapping[int, float]]
) -> tuple[float | None, tuple[int, ...]]:
    missing = tuple(bs for bs, a in configs.items() if a not in means[bs])
    if missing:
        return None, missing
    return float(sum(w * means[bs][configs[bs]] for bs, w in weights.items())), ()


def evaluate_schedules(
    sweep: Sweep,
    *,
    holdout: str = "auto",
    algorithms: Sequence[str] | None = None,
    features: Sequence[str] = FEATURE_KINDS,
    mix: Mapping[int, float] | None = None,
    config: RewardConfig = RewardConfig(),
    seed: int = 0,
    n_bootstrap: int = DEFAULT_N_BOOTSTRAP,
    alpha: float = 0.05,
    progress: Callable[[str], None] | None = None,
) -> ScheduleEvaluation:
    """Score schedules, batch-mix picks, per-batch-size picks and the best fixed config on
    held-out rows (see the module docstring).

    Args:
        sweep: the data; holdout: as :func:`~specband.evaluation.holdout.evaluate`.
        algorithms: default all eight; features: ``contract`` and/or ``pre``.
        mix: batch size -> weight (normalised per split over its held-out batch sizes),
            ``None`` for uniform.
        config, seed, n_bootstrap, alpha: reward constants and interval settings.
        progress: called before each fit.

    Raises:
        ConfigError: unknown algorithm/feature/holdout, or a mix none of whose batch sizes
            is held out; DataError: nothing can be held out.
    """

    algorithms = tuple(dict.fromkeys(algorithms or ALGORITHMS))
    unknown = [a for a in algorithms if a not in ALGORITHMS] + [k for k in features if k not in FEATURE_KINDS]
    if unknown:
        raise ConfigError(f"unknown algorithm or feature kind {unknown[0]!r}")
    kind, _ = resolve_holdout(sweep, holdout)
    data = sweep.subset(_usable)
    rows: list[ScheduleSplit] = []
    for split in make_splits(sweep, kind):
        by_bs: dict[int, list[Any]] = defaultdict(list)
        for o in _observe(data, split.test.rows, config):
            by_bs[o.row.batch_size].append(o)
        train_bs = set(split.train.batch_sizes())
        sizes = sorted(bs for bs, obs in by_bs.items() if bs in train_bs and any(o.row.trainable for o in obs))
        weights = _split_weights(mix, sizes)
        if not weights:
            continue
        means = {bs: _action_means(by_bs[bs]) for bs in weights}
        common = set.intersection(*(set(m) for m in means.values()))
        best_fixed = _argmax({a: sum(w * means[bs][a] for bs, w in weights.items()) for a in common})
        for k in features:
            td = split.train.training_data(k, config)
            if best_fixed is not None and k == features[0]:
                fixed = dict.fromkeys(weights, best_fixed)
                rows.append(
                    ScheduleSplit(split.name, "all", _ORACLE, "best fixed", fixed, *_value(fixed, weights, means))
                )
            for algo in algorithms:
                if progress:
                    progress(f"schedules: fit {algo} ({k} features) on {split.name}")
                policy = _default_factory(algo, seed).fit(td)
                scores = {}
                for bs in weights:
                    state = np.mean(np.stack([o.row.state(k) for o in by_bs[bs]]), axis=0).astype(np.float32)
                    s = np.asarray(policy.scores(state[None, :]), dtype=np.float64).reshape(len(td.action_set))
                    allowed = td.allowed_for(bs)
                    s = np.where(np.isfinite(s) & (allowed if allowed is not None else True), s, np.nan)
                    scores[bs] = s
                for variant, configs in _variant_configs(scores, weights).items():
                    rows.append(ScheduleSplit(split.name, k, algo, variant, configs, *_value(configs, weights, means)))
    if not rows:
        raise DataError("no split holds out a batch size of the mix", path=sweep.path)
    summaries = []
    groups: dict[tuple[str, str, str], list[ScheduleSplit]] = defaultdict(list)
    for r in rows:
        groups[(r.features, r.algorithm, r.variant)].append(r)
    for (k, algo, variant), group in groups.items():
        values = [r.value for r in group if r.value is not None]
        configs = {
            bs: _modal(Counter(r.configs[bs] for r in group if bs in r.configs))
            for bs in sorted({bs for r in group for bs in r.configs})
        }
        value = _interval(values, alpha, n_bootstrap, seed)
        summaries.append(ScheduleSummary(k, algo, variant, value, len(group), len(values), configs))
    summaries.sort(key=lambda s: (s.features, s.algorithm != _ORACLE, s.algorithm, VARIANTS.index(s.variant)))
    scored_on = IN_SAMPLE if kind == "none" else HELD_OUT
    mix_copy = None if mix is None else dict(mix)
    return ScheduleEvaluation(kind, scored_on, mix_copy, tuple(rows), tuple(summaries), sweep_source(sweep))


def _action_means(obs: Sequence[Any]) -> dict[int, float]:
    """Action index -> mean held-out reward (failed runs score 0, as in holdout.py)."""
    by_action: dict[int, list[float]] = defaultdict(list)
    for o in obs:
        by_action[o.row.action_index].append(o.reward)
    return {a: float(np.mean(v)) for a, v in by_action.items()}


def _variant_configs(scores: Mapping[int, np.ndarray], weights: Mapping[int, float]) -> dict[str, dict[int, int]]:
    """Configs per batch size of the per-batch-size, schedule and batch-mix variants from
    the (19,) scores at each batch size (NaN: not allowed); a variant without a scored
    config at some batch size is left out."""
    out: dict[str, dict[int, int]] = {}
    per_bs = {bs: _argmax(dict(enumerate(s))) for bs, s in scores.items()}
    chain = {bs: _argmax({i: s[i] for i in chain_and_tree_indices(len(s))[0]}) for bs, s in scores.items()}
    for name, configs in (("per-batch-size", per_bs), ("schedule", chain)):
        known = {bs: a for bs, a in configs.items() if a is not None}
        if len(known) == len(configs):
            out[name] = known
    width = len(next(iter(scores.values()), ()))  # 19 or 44: the action set's
    total = {a: sum(w * scores[bs][a] for bs, w in weights.items()) for a in range(width)}
    mix_pick = _argmax(total)
    if mix_pick is not None:
        out["batch-mix"] = dict.fromkeys(weights, mix_pick)
    return out


# ----------------------------------------------------------------------------- report


def _iv_json(interval: Interval | None) -> dict[str, Any] | None:
    return None if interval is None else interval.as_dict()


def schedules_to_json(result: ScheduleEvaluation) -> dict[str, Any]:
    """The evaluation as a JSON-ready dict (``schedules.json``)."""

    def configs(c: Mapping[int, int]) -> dict[str, list[int]]:
        return {str(bs): list(EXTENDED_ACTIONS[a]) for bs, a in c.items()}

    return {
        "schema": "specband.schedules/1",
        "holdout": result.holdout,
        "scored_on": result.scored_on,
        "mix": None if result.mix is None else {str(k): v for k, v in result.mix.items()},
        "source": result.source,
        "summaries": [
            {
                "features": s.features,
                "algorithm": s.algorithm,
                "variant": s.variant,
                "value": _iv_json(s.value),
                "n_splits": s.n_splits,
                "n_measured": s.n_measured,
                "configs": configs(s.configs),
            }
            for s in result.summaries
        ],
        "splits": [
            {
                "split": r.split,
                "features": r.features,
                "algorithm": r.algorithm,
                "variant": r.variant,
                "configs": configs(r.configs),
                "value": r.value,
                "not_measured": list(r.not_measured),
            }
            for r in result.splits
        ],
    }


def _cell(s: ScheduleSummary) -> str:

    measured = f" ({s.n_measured}/{s.n_splits} splits)" if s.n_measured < s.n_splits else ""
    return format_interval(s.value) + measured


def render_schedule_table(result: ScheduleEvaluation, console: Any | None = None) -> None:
    """Print one table: per feature kind and algorithm, the held-out mix value of each variant."""
    from rich.table import Table

    console = console or table_console()
    mix = (
        "uniform over held-out batch sizes"
        if result.mix is None
        else ", ".join(f"{b}:{w:g}" for b, w in result.mix.items())
    )
    table = Table(title=f"serving a batch-size mix ({mix}): {result.scored_on} reward, 95 % interval over splits")
    for name in ("features", "algorithm", *VARIANTS):
        table.add_column(name)
    oracle = {s.features: s for s in result.summaries if s.variant == "best fixed"}
    best_fixed = next(iter(oracle.values()), None)
    by_row: dict[tuple[str, str], dict[str, ScheduleSummary]] = defaultdict(dict)
    for s in result.summaries:
        if s.algorithm != _ORACLE:
            by_row[(s.features, s.algorithm)][s.variant] = s
    for (k, algo), cells in by_row.items():
        row = [k, algo] + [_cell(cells[v]) if v in cells else "-" for v in VARIANTS[:3]]
        table.add_row(*row, "-" if best_fixed is None else _cell(best_fixed))
    print_table(table, console)


def _values(rows: Sequence[ScheduleSummary], k: str) -> list[tuple[str, str, float | None]]:
    return sorted(
        (s.algorithm, s.variant, None if s.value is None else s.value.estimate) for s in rows if s.features == k
    )


def _drawn_kinds(rows: Sequence[ScheduleSummary]) -> list[str]:
    """Feature kinds with a panel: a kind whose every value equals an earlier kind's is drawn once."""
    kinds: list[str] = []
    for k in sorted({s.features for s in rows}):
        if not any(_values(rows, k) == _values(rows, d) for d in kinds):
            kinds.append(k)
    return kinds


def figure_reason(result: ScheduleEvaluation) -> str | None:
    """Why ``schedules.png`` has nothing to show (one line), or ``None`` when it has: every
    variant of every algorithm has the same held-out value (within 1e-9), e.g. when every
    batch size's pick is a chain config that is also the best fixed config."""
    values = [s.value.estimate for s in result.summaries if s.value is not None]
    if not values:
        return "no variant was measured in a held-out split"
    if max(values) - min(values) <= 1e-9:
        return (
            f"every variant (per-batch-size, schedule, batch-mix, best fixed) of every algorithm serves the same "
            f"{result.scored_on} value {values[0]:.4f}: nothing to compare"
        )
    return None


def _figure(result: ScheduleEvaluation) -> bytes:
    """``schedules.png``: per algorithm (first feature kind), the variants' values with intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [s for s in result.summaries if s.algorithm != _ORACLE]
    kinds = _drawn_kinds(rows)
    algos = sorted({s.algorithm for s in rows})
    fig, axes = plt.subplots(
        len(kinds), 1, figsize=(max(6.0, 1.4 * len(algos) + 2) + 2.2, 3.2 * len(kinds)), squeeze=False
    )
    oracle = next((s for s in result.summaries if s.variant == "best fixed"), None)
    for ax, k in zip(axes[:, 0], kinds, strict=True):
        for j, variant in enumerate(VARIANTS[:3]):
            xs, ys, lo, hi = [], [], [], []
            for i, algo in enumerate(algos):
                s = next((s for s in rows if (s.features, s.algorithm, s.variant) == (k, algo, variant)), None)
                if s is None or s.value is None:
                    continue
                xs.append(i + (j - 1) * 0.25)
                ys.append(s.value.estimate)
                lo.append(s.value.estimate - s.value.low)
                hi.append(s.value.high - s.value.estimate)
            ax.bar(xs, ys, width=0.25, yerr=[lo, hi], capsize=2, label=variant)
        if oracle is not None and oracle.value is not None:
            ax.axhline(oracle.value.estimate, color="k", linestyle="--", linewidth=1, label="best fixed (hindsight)")
        ax.set_xticks(range(len(algos)), algos, rotation=20, fontsize=8)
        ax.set_ylabel(f"{result.scored_on} reward")
        twins = [t for t in sorted({s.features for s in rows}) if t != k and t not in kinds]
        ax.set_title(f"{' = '.join([k, *twins])} features: serving the batch-size mix", fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    import textwrap

    source = result.source or "source: not recorded"
    footer = "\n".join(
        textwrap.wrap(f"{source}; {result.scored_on}, holdout {result.holdout}", int(fig.get_figwidth() * 15))
    )
    fig.text(0.005, 0.005, footer, ha="left", va="bottom", fontsize=7, color="dimgray")
    fig.tight_layout(rect=(0, (0.1 + 0.13 * (footer.count("\n") + 1)) / fig.get_figheight(), 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Source": source})
    plt.close(fig)
    return buf.getvalue()


def write_schedule_report(result: ScheduleEvaluation, out_dir: str | Path) -> list[Path]:
    """Write :data:`JSON_FILE` and :data:`FIGURE` into a report folder (atomically per file);
    the figure only when it has something to show (:func:`figure_reason`).

    Raises:
        ConfigError: the folder cannot be written.
    """

    out = Path(out_dir)
    paths = [
        write_text_atomic(out / JSON_FILE, json.dumps(schedules_to_json(result), indent=2) + "\n", error=ConfigError)
    ]
    if figure_reason(result) is None:
        paths.append(write_bytes_atomic(out / FIGURE, _figure(result), error=ConfigError))
    elif (out / FIGURE).is_file() and not (out / FIGURE).is_symlink():
        (out / FIGURE).unlink()  # an earlier report's figure would outlive the data it showed
    return paths
