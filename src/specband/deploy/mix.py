"""One config for a batch-size mix: the pick with the best expected reward when the
running batch size moves, and the regret of using it everywhere.

The mix comes from ``recommend --batch-mix 1:0.2,4:0.5,16:0.3`` (weights normalised) or
from sglang's Prometheus metrics text (``recommend --batch-mix-from FILE``): the samples of
the gauge ``sglang:num_running_reqs`` (sglang 0.5.23,
``srt/observability/metrics_collector.py``; one sample per scrape, so a file of
concatenated scrapes is a sample of the running batch size), or a histogram family of that
name. The text is parsed with ``prometheus_client``'s own parser.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from specband.core.batchlist import normalise_mix
from specband.core.errors import ConfigError
from specband.core.limits import MAX_BATCH_SIZE, MAX_CONFIG_FILE_BYTES
from specband.files.fileio import read_text_bounded

__all__ = [
    "RUNNING_REQS_METRIC",
    "LeftOut",
    "MixPick",
    "MixRow",
    "pick_for_mix",
    "read_running_requests",
]

#: sglang's gauge of running requests (the decode batch size), sglang 0.5.23.
RUNNING_REQS_METRIC = "sglang:num_running_reqs"


def read_running_requests(path: str | Path, metric: str = RUNNING_REQS_METRIC) -> dict[int, float]:
    """The running-batch-size mix in a Prometheus metrics text file.

    Gauge samples of ``metric`` count one observation each at their value rounded to an
    integer (per-priority breakdowns, ``priority`` label not empty, are skipped; 0 running
    requests is an idle server, not a batch size). A histogram of that name gives each
    bucket's count to its upper bound (the ``+Inf`` bucket's to the largest finite bound).

    Raises:
        ConfigError: unreadable file, text the parser rejects, no sample of ``metric`` or
            no non-zero batch size (the message names the file).
    """
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = read_text_bounded(path, limit=MAX_CONFIG_FILE_BYTES, kind="Prometheus metrics file", error=ConfigError)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--batch-mix-from {path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    counts: dict[int, float] = {}
    seen = False
    try:
        for family in text_string_to_metric_families(text):
            if family.name != metric:
                continue
            seen = True
            if family.type == "histogram":
                _add_histogram(
                    counts, [(s.labels.get("le", ""), s.value) for s in family.samples if s.name.endswith("_bucket")]
                )
                continue
            for sample in family.samples:
                if sample.name == metric and not sample.labels.get("priority"):
                    if not math.isfinite(sample.value) or not 0 <= sample.value <= MAX_BATCH_SIZE:
                        raise ConfigError(
                            f"--batch-mix-from {path}: {metric} sample {sample.value!r} is not a batch size "
                            f"(0..{MAX_BATCH_SIZE})"
                        )
                    bs = round(sample.value)
                    if bs > 0:
                        counts[bs] = counts.get(bs, 0.0) + 1.0
    except ValueError as exc:
        raise ConfigError(f"--batch-mix-from {path}: not Prometheus text ({exc})") from None
    if not seen:
        raise ConfigError(
            f"--batch-mix-from {path}: no {metric} samples (scrape sglang's /metrics, started with --enable-metrics)"
        )
    if not counts:
        raise ConfigError(f"--batch-mix-from {path}: {metric} never shows a running request")
    return normalise_mix(counts, f"--batch-mix-from {path}")


def _add_histogram(counts: dict[int, float], buckets: list[tuple[str, float]]) -> None:
    """Add a cumulative histogram's bucket counts to ``counts`` at each upper bound."""
    finite = sorted(
        (float(le), v)
        for le, v in buckets
        if le not in ("+Inf", "inf", "") and math.isfinite(float(le)) and 0 <= float(le) <= MAX_BATCH_SIZE
    )
    total = max((v for le, v in buckets if le in ("+Inf", "inf")), default=None)
    previous = 0.0
    for le, cumulative in finite:
        bs = math.floor(le)
        if bs > 0 and cumulative > previous:
            counts[bs] = counts.get(bs, 0.0) + cumulative - previous
        previous = max(previous, cumulative)
    if finite and total is not None and total > previous and int(finite[-1][0]) > 0:
        bs = int(finite[-1][0])
        counts[bs] = counts.get(bs, 0.0) + total - previous


@dataclass(frozen=True)
class MixRow:
    """One batch size of the mix.

    Attributes:
        batch_size: running batch size; measured_batch_size: the one its scores come from.
        weight: its share of the mix (sums to 1 over the rows).
        own_index: the batch size's own pick (the best-scored allowed action there).
        own_reward, mix_reward: estimated reward of its own pick and of the mix pick there.
    """

    batch_size: int
    measured_batch_size: int
    weight: float
    own_index: int
    own_reward: float
    mix_reward: float

    @property
    def regret(self) -> float:
        """Reward lost here by running the mix pick instead of the own pick (>= 0)."""
        return self.own_reward - self.mix_reward


@dataclass(frozen=True)
class LeftOut:
    """A batch size's own pick that the mix could not consider: it is not scored at every
    batch size of the mix (the lookup table has no mean for it there).

    Attributes:
        index: its action index.
        own_pick_at: the batch sizes whose own pick it is (ascending).
        not_scored_at: the batch sizes of the mix where it has no score (ascending).
    """

    index: int
    own_pick_at: tuple[int, ...]
    not_scored_at: tuple[int, ...]

    def note(self) -> str:
        """The line ``recommend --batch-mix`` prints, e.g. ``"(3,2,4), bs 16's own pick, was
        not scored at bs 1: the mix considers only configs scored at every batch size of it"``."""
        from specband.contract.actions import EXTENDED_ACTIONS

        own = " and ".join(f"bs {bs}'s" for bs in self.own_pick_at)
        at = ", ".join(str(bs) for bs in self.not_scored_at)
        return (
            f"{EXTENDED_ACTIONS[self.index]}, {own} own pick, was not scored at bs {at}: "
            "the mix considers only configs scored at every batch size of it"
        )


@dataclass(frozen=True)
class MixPick:
    """The single config for a mix.

    Attributes:
        index: action index with the best expected reward over the mix.
        expected_reward: ``sum(weight * reward)`` of it.
        rows: one :class:`MixRow` per batch size.
        left_out: the batch sizes' own picks other than ``index`` that were not scored at
            every batch size of the mix, so not considered (:class:`LeftOut`), by index.
    """

    index: int
    expected_reward: float
    rows: tuple[MixRow, ...]
    left_out: tuple[LeftOut, ...] = ()

    @property
    def expected_regret(self) -> float:
        """``sum(weight * regret)``: what one config for all costs against per-batch-size picks."""
        return float(sum(r.weight * r.regret for r in self.rows))


class Scorer(Protocol):
    """What :func:`pick_for_mix` asks (:class:`specband.deploy.tiers.PolicyScorer`)."""

    def scores_at(self, batch_size: int) -> tuple[int, np.ndarray]:
        """``(measured batch size used, (19,) estimated reward, NaN: not scored)``."""
        ...


def pick_for_mix(scorer: Scorer, mix: Mapping[int, float]) -> MixPick:
    """The action with the best expected estimated reward over ``mix`` among those scored
    at every batch size of it (ties: the lowest index), with each batch size's own pick.

    Args:
        scorer: a :class:`specband.deploy.tiers.PolicyScorer` (``scores_at(bs)``).
        mix: batch size -> weight (normalised, see :func:`normalise_mix`).

    Raises:
        ConfigError: no action is scored at every batch size of the mix.
    """
    rows = [(bs, w, *scorer.scores_at(bs)) for bs, w in sorted(mix.items())]
    matrix = np.vstack([scores for _, _, _, scores in rows])  # (n_bs, 19), NaN: not scored
    weights = np.array([w for _, w, _, _ in rows])
    common = [a for a in range(matrix.shape[1]) if not np.isnan(matrix[:, a]).any()]
    if not common:
        raise ConfigError(
            "no config is measured at every batch size of the mix; ask a model-based --algo, or a mix of "
            "measured batch sizes"
        )
    expected = {a: float(weights @ matrix[:, a]) for a in common}
    best = max(common, key=lambda a: (expected[a], -a))
    out = []
    for (bs, w, measured, _scores), row in zip(rows, matrix, strict=True):
        own = max((a for a in range(matrix.shape[1]) if not math.isnan(row[a])), key=lambda a: (row[a], -a))
        out.append(MixRow(bs, measured, float(w), own, float(row[own]), float(row[best])))
    left_out = tuple(
        LeftOut(
            a,
            tuple(r.batch_size for r in out if r.own_index == a),
            tuple(bs for (bs, *_), scores in zip(rows, matrix, strict=True) if np.isnan(scores[a])),
        )
        for a in sorted({r.own_index for r in out} - set(common))
    )
    return MixPick(best, expected[best], tuple(out), left_out)
