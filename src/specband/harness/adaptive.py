"""Adaptive repeats (``sweep --adaptive``): re-measure only the configs that may still be the pick.

Pass 0 measures every grid point. Before pass ``r`` (``1 <= r < repeats``), the rows of
passes ``0 .. r-1`` decide, per batch size, which configs pass ``r`` measures
(:func:`plan_pass`):

* every reward is specband's reward (:mod:`specband.contract.reward`) of a row scored against the
  baseline ``(0, 0, 0)`` of the *same* repeat and batch size
  (:meth:`specband.sweeps.dataset.Sweep.reward_parts`), so the baseline is re-measured whenever
  any other config at that batch size is;
* a config that failed at a batch size (an error row: out of memory at both mem
  fractions, a server that died) is never picked there (:meth:`Sweep.allowed_mask
  <specband.sweeps.dataset.Sweep.allowed_mask>`) and is not re-measured;
* interval: ``mean_a +- t_{(1+level)/2, df} * s_p / sqrt(n_a)``, a Student t interval
  with the *pooled* standard deviation ``s_p`` of the rewards of every config at that
  batch size (each config's squared deviations from its own mean, summed, over ``df =
  sum(n_a - 1)``). Run-to-run noise (accept length, step time, power) is shared by the
  configs of one batch size, and pooling gives ``df`` of tens after two passes where a
  per-config interval from 2 measurements would use ``t_{0.975, 1} = 12.7``. The baseline
  (reward 0 by definition) and configs whose rewards are all 0 (clipped: no spread seen)
  are left out of ``s_p``. When no config has shown any spread (every reward 0: e.g. no
  config beats the baseline's speed), a config with ``min_measurements`` rewards of 0 has
  the interval ``[0, 0]``: the floor of the reward, where nothing is left to tell apart;
* a config is kept (re-measured) while it has fewer than ``min_measurements`` (2)
  successful rows, or while its interval overlaps the best config's (its upper end above the
  best's lower end): with one measurement a config has no spread of its own, and a
  single draw (a thermal spike, a slow launch) must not drop the true best for good;
* a batch size is *settled* when no config but the best is kept: nothing more runs there.
  The sweep ends when every batch size is settled or ``repeats`` passes ran.

The sweep (:func:`run_adaptive`): pass ``r`` is a :class:`~specband.harness.pipeline.SweepPlan`
of :func:`plan_pass`'s points; its rows go through an :class:`AdaptiveSink`, which writes
each row's ``propensity`` column *at write time*: the probability with which that pass's
logging policy (uniform over the configs the pass measures at that batch size) chose the
row's config, ``1 / k_r(bs)`` (``1 / configs`` in pass 0). Every row of an adaptive file
so carries its own logger's propensity, also in a file whose sweep was interrupted, so
that no reader ever takes it for a uniform sweep; IPS with each row's own logger
propensity is unbiased for a mixture of loggers (Agarwal et al. 2017, "naive" IPS). A
file's rows are all adaptive (a ``propensity`` on every row) or all uniform (none):
``--resume`` refuses to mix them. :func:`logging_propensities` gives the lower-variance
balance-heuristic propensities of a finished file for offline analyses.

Logging propensities (:func:`logging_propensities`): the data of an adaptive sweep is
logged by a mixture of per-pass policies, each uniform over the configs its pass ran at a
batch size. The propensity of a successful row is the mixture's probability of its
action at its batch size, ``n(bs, a) / n(bs)`` (successful rows), the balance heuristic
of multiple importance sampling (Veach and Guibas 1995; Agarwal et al. 2017 for
off-policy evaluation with several loggers). For an exhaustive sweep it equals the
uniform ``1 / configs`` that :mod:`specband.evaluation` assumes without a ``propensity``
column, so IPS, SNIPS and DR read the same numbers; error rows (never trained on) get
``None``. Because passes depend on earlier rewards, the estimators are only approximately
unbiased on adaptively collected data (Hadad et al. 2021).

References:
    E. Veach, L. Guibas. Optimally combining sampling techniques for Monte Carlo
    rendering. SIGGRAPH 1995 (balance heuristic).
    A. Agarwal, S. Basu, T. Schnabel, T. Joachims. Effective evaluation using logged
    bandit feedback from multiple loggers. KDD 2017.
    V. Hadad, D. Hirshberg, R. Zhan, S. Wager, S. Athey. Confidence intervals for policy
    evaluation in adaptive experiments. PNAS 2021.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specband.contract.actions import ACTIONS, CONTRACT_SET, EXTENDED_ACTIONS, EXTENDED_SET, Action
from specband.contract.record import RUN_COLUMNS, SweepRecord
from specband.contract.reward import RewardConfig
from specband.core.errors import ConfigError
from specband.harness.pipeline import GridPoint, RowSink, RunResult, SweepPlan
from specband.sweeps.dataset import Sweep

__all__ = [
    "ADAPTIVE_COLUMNS",
    "AdaptiveSavings",
    "AdaptiveSink",
    "BatchSizeDecision",
    "ConfigInterval",
    "adaptive_savings",
    "decide",
    "logging_propensities",
    "mean_rewards",
    "plan_pass",
    "row_gpu_seconds",
    "run_adaptive",
]

#: The columns of an adaptive sweep's rows: a measured row's and ``propensity``.
ADAPTIVE_COLUMNS: tuple[str, ...] = (*RUN_COLUMNS, "propensity")

#: The baseline every reward is scored against.
BASELINE: Action = ACTIONS[0]


@dataclass(frozen=True)
class ConfigInterval:
    """One config's rewards at one batch size.

    Attributes:
        action: the config.
        n: successful measurements.
        mean: mean reward in [0, 1].
        low, high: the interval's ends (``-inf``/``inf`` while no spread is known).
    """

    action: Action
    n: int
    mean: float
    low: float
    high: float


@dataclass(frozen=True)
class BatchSizeDecision:
    """What the rows so far say at one batch size.

    Attributes:
        batch_size: concurrent requests.
        intervals: every config with a successful row there and no failed one.
        best: the config with the highest mean reward (``None``: none measured).
        keep: the configs the next pass measures there (the best and the baseline
            included), empty when settled.
        settled: the best is the only config whose interval reaches the best's.
    """

    batch_size: int
    intervals: tuple[ConfigInterval, ...]
    best: Action | None
    keep: tuple[Action, ...]
    settled: bool


def _check(level: float, min_measurements: int) -> None:
    if not 0.0 < level < 1.0:
        raise ConfigError(f"confidence level must be in (0, 1), got {level}")
    if min_measurements < 1:
        raise ConfigError(f"min_measurements must be >= 1, got {min_measurements}")


def _sweep_of(rows: Sequence[Mapping[str, Any]]) -> Sweep:
    """The rows as a :class:`Sweep`, read against their own action set (a row of the
    extended grid says ``action_set: "extended"``)."""
    extended = any(r.get("action_set") == "extended" for r in rows)
    return Sweep.from_records(rows, action_set=EXTENDED_SET if extended else CONTRACT_SET)


def _rewards_by_config(sweep: Sweep, config: RewardConfig) -> dict[int, dict[Action, list[float]]]:
    """batch size -> action -> rewards of its successful rows, for the actions allowed
    there (a failed one is left out)."""
    out: dict[int, dict[Action, list[float]]] = defaultdict(lambda: defaultdict(list))
    allowed = {bs: sweep.allowed_mask(bs) for bs in {r.batch_size for r in sweep.rows}}
    for row in sweep.rows:
        if row.trainable and allowed[row.batch_size][row.action_index]:
            out[row.batch_size][row.action].append(sweep.reward_parts(row, config).reward)
    return out


def mean_rewards(
    rows: Sequence[Mapping[str, Any]], config: RewardConfig = RewardConfig()
) -> dict[int, dict[Action, float]]:
    """batch size -> action -> mean reward of its successful rows, for the configs allowed
    there (the pick is the best mean; the oracle's means are those of many passes).

    Raises:
        DataError: an invalid row (:meth:`specband.sweeps.dataset.Sweep.from_records`).
    """
    by_config = _rewards_by_config(_sweep_of(rows), config)
    return {bs: {a: sum(v) / len(v) for a, v in per.items()} for bs, per in by_config.items()}


def _pooled_sd(samples: Mapping[Action, list[float]]) -> tuple[float, int]:
    """``(s_p, df)`` of the configs' rewards (the baseline and all-zero configs left out)."""
    ss, df = 0.0, 0
    for action, values in samples.items():
        if action == BASELINE or len(values) < 2 or not any(values):
            continue
        mean = sum(values) / len(values)
        ss += sum((v - mean) ** 2 for v in values)
        df += len(values) - 1
    return (math.sqrt(ss / df) if df else math.inf), df


def decide(
    batch_size: int, samples: Mapping[Action, Sequence[float]], *, level: float = 0.95, min_measurements: int = 2
) -> BatchSizeDecision:
    """The decision at one batch size from each allowed config's rewards (see the module
    docstring).

    Args:
        batch_size: the batch size (reported back).
        samples: action -> its rewards (one per successful repeat) at that batch size.
        level: two-sided confidence level of the intervals (0.95).
        min_measurements: successful rows a config needs before it can be dropped (2).

    Raises:
        ConfigError: ``level`` outside (0, 1) or ``min_measurements < 1``.
    """
    from scipy.stats import t as student_t

    _check(level, min_measurements)
    values = {a: list(v) for a, v in samples.items() if v}
    sd, df = _pooled_sd(values)
    quantile = float(student_t.ppf((1.0 + level) / 2.0, df)) if df else math.inf
    intervals = []
    for action, rewards in sorted(values.items(), key=lambda kv: EXTENDED_ACTIONS.index(kv[0])):
        mean = sum(rewards) / len(rewards)
        if math.isfinite(sd):
            half = quantile * sd / math.sqrt(len(rewards))
        else:  # no spread seen anywhere: only a config at the reward's floor every time is known
            half = 0.0 if not any(rewards) and len(rewards) >= min_measurements else math.inf
        intervals.append(ConfigInterval(action, len(rewards), mean, mean - half, mean + half))
    if not intervals:
        return BatchSizeDecision(batch_size, (), None, (), True)
    best = max(intervals, key=lambda c: (c.mean, -EXTENDED_ACTIONS.index(c.action)))
    rivals = [c.action for c in intervals if c is not best and c.action != BASELINE
              and (c.n < min_measurements or c.high > best.low)]  # fmt: skip
    if not rivals:
        return BatchSizeDecision(batch_size, tuple(intervals), best.action, (), True)
    keep = {BASELINE, best.action, *rivals}
    kept = tuple(a for a in EXTENDED_ACTIONS if a in keep)
    return BatchSizeDecision(batch_size, tuple(intervals), best.action, kept, False)


def plan_pass(
    rows: Sequence[Mapping[str, Any]], points: Sequence[GridPoint], repeat: int, *, level: float = 0.95,
    min_measurements: int = 2, reward_config: RewardConfig = RewardConfig(),
) -> tuple[list[GridPoint], dict[int, BatchSizeDecision]]:  # fmt: skip
    """The grid points pass ``repeat`` measures, decided from the rows of passes before it.

    Deterministic in the rows of earlier passes, so a resumed sweep plans the same passes
    (rows of pass ``repeat`` and later are ignored).

    Args:
        rows: the sweep's rows so far (dicts as in the JSONL; ``index`` is the grid's).
        points: the grid (:func:`specband.harness.pipeline.grid`).
        repeat: the pass to plan (0: every point, no decisions).
        level, min_measurements: as :func:`decide`.
        reward_config: the reward's constants.

    Returns:
        ``(points to measure, in grid order; decision per batch size)``; no points: the
        sweep is done (every batch size settled).

    Raises:
        DataError: a row is invalid, or a batch size has successful rows but no
            successful baseline (:meth:`specband.sweeps.dataset.Sweep.from_records`).
        ConfigError: as :func:`decide`.
    """
    _check(level, min_measurements)
    earlier = [r for r in rows if isinstance(r.get("repeat"), int) and r["repeat"] < repeat]
    if repeat == 0 or not earlier:
        return list(points), {}
    samples = _rewards_by_config(_sweep_of(earlier), reward_config)
    decisions = {
        bs: decide(bs, samples.get(bs, {}), level=level, min_measurements=min_measurements)
        for bs in sorted({p.batch_size for p in points})
    }
    return [p for p in points if p.action in decisions[p.batch_size].keep], decisions


def logging_propensities(rows: Sequence[Mapping[str, Any]]) -> list[float | None]:
    """Each row's ``propensity`` column: ``n(bs, a) / n(bs)`` over the successful rows
    (see the module docstring), ``None`` on an error row; aligned with ``rows``.

    Raises:
        DataError: an invalid row (:meth:`specband.sweeps.dataset.Sweep.from_records`).
    """
    sweep = _sweep_of(rows)
    ok = [r for r in sweep.rows if r.trainable]
    per_action = Counter((r.batch_size, r.action_index) for r in ok)
    per_bs = Counter(r.batch_size for r in ok)
    return [per_action[(r.batch_size, r.action_index)] / per_bs[r.batch_size] if r.trainable else None
            for r in sweep.rows]  # fmt: skip


def row_gpu_seconds(row: Mapping[str, Any]) -> float:
    """GPU time of one run, s: the timed batch (``wall_clock_s``) plus the launch
    (``launch_wall_s``) when the row has them. On the emulator ``wall_clock_s`` is in
    emulated seconds and ``launch_wall_s`` in real ones."""
    return float(row.get("wall_clock_s") or 0.0) + float(row.get("launch_wall_s") or 0.0)


@dataclass(frozen=True)
class AdaptiveSavings:
    """Runs and GPU time an adaptive sweep saved against the exhaustive one.

    Attributes:
        runs: runs measured (rows).
        runs_exhaustive: ``repeats x grid points``.
        gpu_s: GPU seconds of the rows (:func:`row_gpu_seconds`).
        gpu_s_exhaustive: ``gpu_s`` plus, for every run not measured, the mean GPU time
            of that grid point's rows (an estimate).
    """

    runs: int
    runs_exhaustive: int
    gpu_s: float
    gpu_s_exhaustive: float

    @property
    def runs_saved(self) -> int:
        """Runs not measured."""
        return self.runs_exhaustive - self.runs

    @property
    def gpu_s_saved(self) -> float:
        """Estimated GPU seconds not spent."""
        return self.gpu_s_exhaustive - self.gpu_s


def adaptive_savings(rows: Sequence[Mapping[str, Any]], points: Sequence[GridPoint], repeats: int) -> AdaptiveSavings:
    """Runs and GPU seconds saved (see :class:`AdaptiveSavings`); every grid point must
    have a row (pass 0 measures them all).

    Raises:
        ConfigError: a grid point without a row.
    """
    by_index: dict[int, list[float]] = defaultdict(list)
    for row in rows:
        by_index[row["index"]].append(row_gpu_seconds(row))
    missing = [p.index for p in points if p.index not in by_index]
    if missing:
        raise ConfigError(f"grid index {missing[0]} has no row: pass 0 of an adaptive sweep measures every point")
    gpu_s = sum(sum(v) for v in by_index.values())
    unmeasured = sum((repeats - len(by_index[p.index])) * sum(by_index[p.index]) / len(by_index[p.index])
                     for p in points)  # fmt: skip
    return AdaptiveSavings(len(rows), repeats * len(points), gpu_s, gpu_s + unmeasured)


@dataclass
class AdaptiveSink(RowSink):
    """A :class:`~specband.harness.pipeline.RowSink` for one adaptive pass: each row gets
    its pass's logging propensity at its batch size (see the module docstring) and is
    kept in :attr:`rows` (the next pass is planned from them).

    Attributes:
        propensity: batch size -> ``1 / configs the pass measures there``.
        rows: the rows so far (the file's, then each written one).
    """

    columns: tuple[str, ...] | None = ADAPTIVE_COLUMNS
    propensity: Mapping[int, float] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)

    def consume(self, result: RunResult) -> None:
        """Write ``result``'s row with its ``propensity`` (:meth:`with_columns`) and keep it.

        Raises:
            HarnessError: as :meth:`RowSink.consume`.
        """
        record = self.with_columns(result)
        super().consume(dataclasses.replace(result, record=record))
        self.rows.append(record.as_row(self.columns))

    def with_columns(self, result: RunResult) -> SweepRecord:
        """``result``'s record with this sink's columns: its batch size's ``propensity``."""
        return dataclasses.replace(result.record, propensity=self.propensity[result.run.batch_size])


def run_adaptive(
    plan: SweepPlan,
    rows: Sequence[dict[str, Any]],
    sink: RowSink,
    execute: Callable[[SweepPlan, RowSink], None],
    *,
    level: float = 0.95,
    min_measurements: int = 2,
) -> dict[int, BatchSizeDecision]:
    """Run an adaptive sweep: pass ``r`` (``r < plan.repeats``) measures
    :func:`plan_pass`'s points (the runs of ``plan.done`` skipped) until every batch size
    is settled.

    Args:
        plan: the whole sweep (its points, repeats, launch mode and done runs).
        rows: the rows already in the file (a resumed sweep plans the same passes).
        sink: where rows go (its writer, reporter and summary are shared by the passes).
        execute: runs one pass's plan into a sink (one GPU or a worker pool).
        level, min_measurements: as :func:`decide`.

    Returns:
        the decisions before the last pass planned (empty when only pass 0 ran).

    Raises:
        as ``execute`` and :func:`plan_pass`.
    """
    kept = list(rows)
    decisions: dict[int, BatchSizeDecision] = {}
    for rep in range(plan.repeats):
        chosen, decisions = plan_pass(kept, plan.points, rep, level=level, min_measurements=min_measurements)
        if not chosen:
            break
        per_bs = Counter(p.batch_size for p in chosen)
        earlier = {(p.index, r) for p in chosen for r in range(rep)}
        pass_plan = dataclasses.replace(
            plan, points=tuple(chosen), repeats=rep + 1, done=frozenset(plan.done) | earlier
        )
        pass_sink = AdaptiveSink(
            sink.writer, sink.reporter, sink.summary, propensity={bs: 1.0 / n for bs, n in per_bs.items()}, rows=kept
        )
        execute(pass_plan, pass_sink)
    return decisions
