"""The results of a held-out evaluation (:func:`specband.evaluation.holdout.evaluate`):
per split, per batch size, per algorithm and feature kind, with their intervals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specband.contract.reward import RewardConfig
from specband.evaluation.ope import (
    Interval,
)
from specband.sweeps.dataset import SweepRow

if TYPE_CHECKING:
    pass


__all__ = ["BatchSizeContext", "EvaluationResult", "FeatureResult", "NotHeldOut", "PickSummary", "SplitPick"]


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class _Obs:
    """A scored held-out row."""

    row: SweepRow
    reward: float
    utilization: float | None


@dataclass(frozen=True)
class SplitPick:
    """One policy's pick at one batch size in one split.

    Attributes:
        split: split name.
        batch_size: requests in flight.
        pick: action index picked from the training side.
        pick_reward: mean held-out reward of the pick, ``None`` when not run in the split.
        pick_estimate: doubly robust estimate of the pick's reward from the held-out rows
            and the training reward model, given only when ``pick_reward`` is ``None``.
        oracle: best held-out action; ``oracle_reward`` its mean held-out reward.
        regret: ``oracle_reward - pick_reward`` (``None`` when the pick was not measured).
        pick_utilization: mean utilisation of the pick's held-out rows (``None`` unknown).
    """

    split: str
    batch_size: int
    pick: int
    pick_reward: float | None
    pick_estimate: float | None
    oracle: int
    oracle_reward: float
    regret: float | None
    pick_utilization: float | None


@dataclass(frozen=True)
class PickSummary:
    """One policy at one batch size, over all splits where that batch size was held out.

    Attributes:
        batch_size: requests in flight.
        pick: the most frequent pick over splits (ties: lowest index); ``picks`` counts each.
        reward: mean held-out reward of the picks, interval over their pooled held-out rows
            (``None`` when no split ran the pick).
        regret: interval over splits of oracle minus pick reward (``None`` as above).
        utilization: mean utilisation of the picks' held-out rows with an interval
            (``None`` when unknown, e.g. no energy measured).
        in_band: whether ``utilization.estimate`` lies inside the band (``None`` unknown).
        in_band_fraction: share of the picks' held-out rows inside the band.
        reaches_oracle: the pick's held-out reward equals the oracle's in every split where
            it was measured (and it was measured in at least one).
        label: provenance of the rows behind ``reward`` (:func:`provenance_label`).
        splits: the per-split picks.
        not_measured: splits whose held-out rows did not run the pick.
        estimate: doubly robust estimate (mean over the not-measured splits), labelled
            in reports as an estimate.
    """

    batch_size: int
    pick: int
    picks: dict[int, int]
    reward: Interval | None
    regret: Interval | None
    utilization: Interval | None
    in_band: bool | None
    in_band_fraction: float | None
    reaches_oracle: bool
    label: str
    splits: tuple[SplitPick, ...]
    not_measured: tuple[str, ...]
    estimate: float | None


@dataclass(frozen=True)
class BatchSizeContext:
    """What every policy is compared with at one batch size.

    Attributes:
        batch_size: requests in flight.
        splits: names of the splits where this batch size was held out.
        oracle: the most frequent per-split oracle action; ``oracles`` counts each.
        oracle_reward: interval over the pooled held-out rows of each split's oracle.
        oracle_utilization: same, utilisation (``None`` unknown).
        reference_reward: interval over the held-out ``(3,4,8)`` rows (``None`` when not run).
        reference_regret: interval over splits of oracle minus reference reward.
        reference_utilization: utilisation of the held-out reference rows.
        n_rows: held-out rows at this batch size (summed over splits).
        label: provenance of those rows.
    """

    batch_size: int
    splits: tuple[str, ...]
    oracle: int
    oracles: dict[int, int]
    oracle_reward: Interval
    oracle_utilization: Interval | None
    reference_reward: Interval | None
    reference_regret: Interval | None
    reference_utilization: Interval | None
    n_rows: int
    label: str


@dataclass(frozen=True)
class NotHeldOut:
    """A batch size that could not be held out in a split, and why."""

    split: str
    batch_size: int
    reason: str


@dataclass(frozen=True)
class FeatureResult:
    """Results for one feature kind (``contract`` or ``pre``).

    Attributes:
        features: the kind.
        contexts: batch size -> :class:`BatchSizeContext`.
        picks: algorithm -> batch size -> :class:`PickSummary`.
        ope: algorithm -> estimator name (dm/ips/snips/dr) -> interval of the policy's
            per-row value on the pooled held-out rows (``None`` when undefined, e.g. SNIPS
            with no logged support).
        ope_n: held-out rounds behind ``ope``.
        identical_to: another kind whose training and held-out states are identical to this
            one's (results are then identical), else ``None``.
        note: a note on the feature kind (e.g. no pre-launch telemetry in the data).
    """

    features: str
    contexts: dict[int, BatchSizeContext]
    picks: dict[str, dict[int, PickSummary]]
    ope: dict[str, dict[str, Interval | None]]
    ope_n: int
    identical_to: str | None
    note: str | None


@dataclass(frozen=True)
class EvaluationResult:
    """Everything :func:`evaluate` found.

    Attributes:
        holdout: resolved kind (``repeat``, ``trial`` or ``none``); ``holdout_reason`` why.
        scored_on: ``"held-out"`` or ``"in-sample"`` (the label printed with every number).
        splits: split names.
        algorithms: evaluated algorithms, in order.
        features: kind -> :class:`FeatureResult`.
        not_held_out: batch sizes that could not be held out, per split.
        data_path, data_format, n_rows: the data.
        provenance: row label -> count over the evaluated rows.
        reward_config: the reward constants.
        n_bootstrap, alpha, seed: interval settings.
        fit_s: seconds spent fitting policies; ``fits`` the number of fits (feature kinds
            with identical states share them), both including ``in_sample``.
        timings: ``total_s``, wall time of the evaluation.
        in_sample: for batch sizes that could not be held out in any split, their in-sample
            evaluation (``scored_on == "in-sample"``), or ``None``.
        energy_measured: False when no row has energy (e.g. sglang bench output): rewards
            are then throughput only and there is no utilisation.
    """

    holdout: str
    holdout_reason: str
    scored_on: str
    splits: tuple[str, ...]
    algorithms: tuple[str, ...]
    features: dict[str, FeatureResult]
    not_held_out: tuple[NotHeldOut, ...]
    data_path: str | None
    data_format: str
    n_rows: int
    provenance: dict[str, int]
    reward_config: RewardConfig
    n_bootstrap: int
    alpha: float
    seed: int
    fit_s: float = 0.0
    fits: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    in_sample: EvaluationResult | None = None
    energy_measured: bool = True
