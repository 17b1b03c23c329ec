"""Honest evaluation of the policies: off-policy estimators, held-out splits, reports.

* :mod:`specband.evaluation.ope`: direct method, IPS, self-normalised IPS and doubly
  robust estimates of a policy's value from logged (context, action, reward, propensity)
  data, with bootstrap intervals;
* :mod:`specband.evaluation.holdout`: train on all but one repeat (or trial), score each
  policy's pick per batch size on the held-out rows (``specband evaluate``);
* :mod:`specband.evaluation.report`: JSON, rich tables, ``report.md`` and figures.

Importing this package loads numpy only; matplotlib and rich load when a report is drawn.
"""

from __future__ import annotations

from specband.evaluation.holdout import EvaluationResult, evaluate, make_splits, resolve_holdout
from specband.evaluation.ope import (
    ESTIMATORS,
    DirectMethod,
    DoublyRobust,
    Interval,
    InverseProbabilityScoring,
    SelfNormalizedIPS,
    bootstrap_interval,
    mean_reward_model,
    one_hot,
    uniform_propensities,
)

__all__ = [
    "ESTIMATORS",
    "DirectMethod",
    "DoublyRobust",
    "EvaluationResult",
    "Interval",
    "InverseProbabilityScoring",
    "SelfNormalizedIPS",
    "bootstrap_interval",
    "evaluate",
    "make_splits",
    "mean_reward_model",
    "one_hot",
    "resolve_holdout",
    "uniform_propensities",
]
