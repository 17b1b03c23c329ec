"""What an evaluation report shows beside the evaluation, from the data itself: the data's
per-config means, the pick per batch size and the engines' defaults (:class:`ReportExtras`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specband.contract.actions import Action
from specband.evaluation.baselines import BaselineComparison, compare_with_engine_defaults, picks_of
from specband.evaluation.holdout import EvaluationResult
from specband.sweeps.origin import action_stats

__all__ = ["ReportExtras", "report_extras"]


@dataclass(frozen=True)
class ReportExtras:
    """What the report shows beside the evaluation, from the data itself.

    Attributes:
        stats: batch size -> action index -> the data's means (:func:`specband.sweeps.origin.action_stats`).
        picks: the algorithm whose picks are compared and its pick per batch size
            (:func:`specband.evaluation.baselines.picks_of`).
        comparison: the engines' defaults against the pick
            (:func:`specband.evaluation.baselines.compare_with_engine_defaults`), or ``None``.
    """

    stats: Mapping[int, Mapping[int, Any]]
    picks: tuple[str, Mapping[int, Action]]
    comparison: BaselineComparison | None


def report_extras(result: EvaluationResult, sweep: Any) -> ReportExtras:
    """The :class:`ReportExtras` of ``result`` on ``sweep`` (the rows it was evaluated on)."""
    algo, picks = picks_of(result)
    comparison = (
        compare_with_engine_defaults(sweep, picks, algorithm=algo, config=result.reward_config) if picks else None
    )
    return ReportExtras(action_stats(sweep), (algo, picks), comparison)
