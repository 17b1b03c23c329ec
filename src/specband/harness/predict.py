"""A sweep that measures only what could win (``sweep --plan predict``).

Rounds, each planned from every row measured so far (:func:`plan_round`), at each batch size:

1. **seed**: the baseline ``(0, 0, 0)`` and two chains of the grid (:func:`seed_actions`: the
   chains nearest to ``(3, 1, 4)`` and ``(7, 1, 8)`` by depth; ``(3, 1, 4)`` and ``(5, 1, 6)``
   in the contract set), once;
2. the acceptance and the cost side are fitted to every measured row
   (:func:`specband.harness.predictor.fit_world`), and the whole grid is *simulated* on the
   profile: every config gets a predicted reward interval; a measured config gets its measured
   interval ``mean +- z s / sqrt(n)`` (``z = 1.645``, one-sided 95 %; ``s`` the pooled
   standard deviation of the rewards of every config measured twice or more, over every batch
   size, or :data:`PRIOR_REWARD_SD` while fewer than 3 degrees of freedom are pooled; a config
   whose rewards are all 0, the reward's floor, no faster than the baseline, has ``[0, 0]``);
3. the *best* is the measured config with the highest mean reward; its lower end is ``L``.
   A config **could win** when its interval's upper end exceeds ``L + eps`` (``eps =``
   :data:`TOLERANCE` x the best's mean: a config that can beat the best by less than that is
   not worth a run). The unmeasured configs that could win are measured next (``planned_by:
   "prediction"``), at most :data:`PER_ROUND` per batch size and round, highest upper end
   first; the acceptance is refitted with them before the next round (trees measured at one
   batch size narrow the trees' intervals at every other);
4. when no unmeasured config could win, the measured ones that could (the best included) are
   measured once more (``planned_by: "remeasure"``), up to ``--repeats`` rows each;
5. **stop rule**: a batch size is settled when no config, measured or not, could win except
   the best, or when every measured config that could has ``--repeats`` rows; the sweep ends
   when every batch size is settled. The pick is then the best measured mean.

A row's ``repeat`` is the number of rows its config had before it (0 for its first), so
``(index, repeat)`` stays unique and a resumed sweep (``--resume``) plans from the rows in the
file: a row is never measured twice nor lost. Re-measured rows are scored against the mean of
their batch size's baselines (:meth:`specband.sweeps.dataset.Sweep.baseline_speed`). Each row
carries ``propensity`` (``1 / configs measured at its batch size in its round``, as
``--adaptive`` writes it: the file never reads as a uniform sweep), ``planned_by`` (``seed``,
``prediction``, ``remeasure``) and, for a predicted row, ``predicted_reward`` ``[estimate, low,
high]`` (simulated).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specband.contract.actions import EXTENDED_ACTIONS, Action, as_action
from specband.contract.record import RUN_COLUMNS, SweepRecord
from specband.contract.reward import RewardConfig
from specband.harness.adaptive import AdaptiveSink, _rewards_by_config, _sweep_of, row_gpu_seconds
from specband.harness.pipeline import GridPoint, RowSink, RunResult, SweepPlan
from specband.harness.predictor import Interval, WorldFit, fit_world
from specband.sim.model import SpeculativeDecodingModel

__all__ = [
    "PER_ROUND",
    "PREDICT_COLUMNS",
    "PRIOR_REWARD_SD",
    "TOLERANCE",
    "ConfigView",
    "PlannedRun",
    "PredictDecision",
    "PredictSink",
    "PredictSummary",
    "plan_round",
    "predict_summary",
    "replay_predicted",
    "run_predicted",
    "seed_actions",
]

#: The columns of a predicted sweep's rows.
PREDICT_COLUMNS: tuple[str, ...] = (*RUN_COLUMNS, "propensity", "planned_by", "predicted_reward")
#: Unmeasured configs measured per batch size and round (the acceptance is refitted between rounds).
PER_ROUND = 3
#: A config that can beat the best by less than this fraction of the best's mean reward is not run.
TOLERANCE = 0.005
#: One-sided 95 % normal quantile of the measured intervals.
Z = 1.645
#: Reward standard deviation of one run while too few repeats are pooled: the largest run-to-run
#: spread of a config's reward in 20 simulated passes of the calibrated RTX 4060 Laptop profile
#: (0.006-0.018; ``benchmarks/bench_fleet.py``), rounded up.
PRIOR_REWARD_SD = 0.02

_SEED_TARGETS = ((3, 1, 4), (7, 1, 8))


def seed_actions(actions: Sequence[Action]) -> tuple[Action, ...]:
    """The configs every batch size measures first: the baseline (if in the grid) and the two
    chains of ``actions`` nearest by depth to ``(3, 1, 4)`` and ``(7, 1, 8)`` (distinct; fewer
    when the grid has fewer chains)."""
    acts = [as_action(a) for a in actions]
    seeds = [a for a in acts if a.is_baseline]
    chains = [a for a in acts if a.speculative_eagle_topk == 1]
    for steps, _, _ in _SEED_TARGETS:
        left = [c for c in chains if c not in seeds]
        if left:
            seeds.append(min(left, key=lambda c: (abs(c.speculative_num_steps - steps), c.speculative_num_steps)))
    return tuple(seeds)


@dataclass(frozen=True)
class ConfigView:
    """One config at one batch size, as the planner sees it.

    Attributes:
        action: the config.
        n: its successful rows.
        reward: measured ``mean +- z s / sqrt(n)`` (``n > 0``) or predicted (simulated).
        measured: whether ``reward`` is measured.
    """

    action: Action
    n: int
    reward: Interval
    measured: bool


@dataclass(frozen=True)
class PredictDecision:
    """What the rows so far say at one batch size.

    Attributes:
        batch_size: the batch size.
        configs: every config of the grid there that did not fail.
        best: the measured config with the highest mean (``None`` before the seed).
        measure: the configs the next round measures there.
        settled: nothing more runs there.
    """

    batch_size: int
    configs: tuple[ConfigView, ...]
    best: Action | None
    measure: tuple[Action, ...]
    settled: bool


@dataclass(frozen=True)
class PlannedRun:
    """One run the next round measures.

    Attributes:
        point: the grid point.
        repeat: the row's ``repeat`` (rows its config had before).
        planned_by: ``seed``, ``prediction`` or ``remeasure``.
        predicted: the predicted reward ``(estimate, low, high)`` of a ``prediction`` run.
    """

    point: GridPoint
    repeat: int
    planned_by: str
    predicted: tuple[float, float, float] | None = None


def _pooled_sd(samples: Mapping[int, Mapping[Action, Sequence[float]]]) -> float:
    """Pooled standard deviation of the rewards over every (batch size, config) measured twice
    or more (the baseline and all-zero configs left out); :data:`PRIOR_REWARD_SD` below 3
    degrees of freedom."""
    ss, df = 0.0, 0
    for per in samples.values():
        for action, values in per.items():
            if action.is_baseline or len(values) < 2 or not any(values):
                continue
            mean = sum(values) / len(values)
            ss += sum((v - mean) ** 2 for v in values)
            df += len(values) - 1
    return math.sqrt(ss / df) if df >= 3 else PRIOR_REWARD_SD


def _row_counts(rows: Sequence[Mapping[str, Any]]) -> Counter[int]:
    return Counter(r["index"] for r in rows if isinstance(r.get("index"), int))


def _failed(rows: Sequence[Mapping[str, Any]]) -> set[int]:
    return {r["index"] for r in rows if r.get("error") and isinstance(r.get("index"), int)}


def _samples(rows: Sequence[Mapping[str, Any]], config: RewardConfig) -> dict[int, dict[Action, list[float]]]:
    """batch size -> action -> rewards, for the batch sizes with a successful baseline."""
    with_base = {r["batch_size"] for r in rows if not r.get("error") and not r.get("steps")}
    usable = [r for r in rows if r.get("batch_size") in with_base]
    return _rewards_by_config(_sweep_of(usable), config) if usable else {}


def _decide(
    bs: int, points: Sequence[GridPoint], samples: Mapping[Action, Sequence[float]], world: WorldFit, sd: float,
    counts: Mapping[int, int], max_repeats: int,
) -> tuple[PredictDecision, list[PlannedRun]]:  # fmt: skip
    views: list[ConfigView] = []
    by_action = {p.action: p for p in points}
    for p in points:
        got = samples.get(p.action)
        if got:
            mean = sum(got) / len(got)
            # the baseline scores 0 by definition; rewards all 0 sit at the floor (no faster than the baseline)
            half = Z * sd / math.sqrt(len(got)) if any(got) else 0.0
            views.append(ConfigView(p.action, len(got), Interval(mean, mean - half, mean + half), True))
        elif counts.get(p.index, 0) == 0:
            predicted = world.reward_interval(bs, p.action)
            if predicted is not None:
                views.append(ConfigView(p.action, 0, predicted, False))
    measured = [v for v in views if v.measured]
    if not measured:
        return PredictDecision(bs, tuple(views), None, (), True), []
    order = {a: i for i, a in enumerate(EXTENDED_ACTIONS)}
    best = max(measured, key=lambda v: (v.reward.estimate, -order.get(v.action, 0)))
    bar = best.reward.low + TOLERANCE * best.reward.estimate
    could = [v for v in views if v is not best and not v.action.is_baseline and v.reward.high > bar]
    fresh = sorted((v for v in could if not v.measured), key=lambda v: (-v.reward.high, order.get(v.action, 0)))
    runs: list[PlannedRun] = []
    if fresh:
        for v in fresh[:PER_ROUND]:
            r = v.reward
            runs.append(PlannedRun(by_action[v.action], 0, "prediction", (r.estimate, r.low, r.high)))
    else:
        again = [v for v in could if v.measured] + ([best] if could else [])
        for v in again:
            point = by_action[v.action]
            if counts.get(point.index, 0) < max_repeats:
                runs.append(PlannedRun(point, counts.get(point.index, 0), "remeasure"))
        if len(runs) == 1 and runs[0].point.action == best.action:
            runs = []  # the rivals are at --repeats: one more run of the best alone changes no pick
    runs.sort(key=lambda run: run.point.index)
    decision = PredictDecision(bs, tuple(views), best.action, tuple(r.point.action for r in runs), not runs)
    return decision, runs


def plan_round(
    rows: Sequence[Mapping[str, Any]], points: Sequence[GridPoint], model: SpeculativeDecodingModel, *,
    max_repeats: int, reward_config: RewardConfig = RewardConfig(), observations: Sequence[Any] = (),
) -> tuple[list[PlannedRun], dict[int, PredictDecision], WorldFit | None]:  # fmt: skip
    """The runs of the next round, decided from ``rows`` (see the module docstring).

    Deterministic in ``rows``: a resumed sweep plans from the rows in its file.

    Args:
        rows: the sweep's rows so far (dicts as in the JSONL; ``index`` is the grid's).
        points: the grid (:func:`specband.harness.pipeline.grid`, no power limits).
        model: the profile's performance model (the simulator the predictions come from).
        max_repeats: rows a config may have at most (``--repeats``).
        reward_config: the reward's constants.
        observations: accept lengths measured elsewhere (``--acceptance-from``), fitted with
            the rows.

    Returns:
        ``(runs in grid order, decision per batch size, the fitted world or None before the
        seed)``; no runs: every batch size is settled.

    Raises:
        DataError: an invalid row (:meth:`specband.sweeps.dataset.Sweep.from_records`).
    """
    counts = _row_counts(rows)
    seeds = set(seed_actions([p.action for p in points if p.batch_size == points[0].batch_size]))
    missing = [PlannedRun(p, 0, "seed") for p in points if p.action in seeds and counts.get(p.index, 0) == 0]
    if missing:
        return missing, {}, None
    samples = _samples(rows, reward_config)
    sd = _pooled_sd(samples)
    world = fit_world(model, rows, reward_config, observations)
    failed = _failed(rows)
    by_bs: dict[int, list[GridPoint]] = defaultdict(list)
    for p in points:
        if p.index not in failed:
            by_bs[p.batch_size].append(p)
    runs: list[PlannedRun] = []
    decisions = {}
    for bs in sorted(by_bs):
        decision, chosen = _decide(bs, by_bs[bs], samples.get(bs, {}), world, sd, counts, max_repeats)
        decisions[bs] = decision
        runs += chosen
    runs.sort(key=lambda run: run.point.index)
    return runs, decisions, world


@dataclass
class PredictSink(AdaptiveSink):
    """An :class:`~specband.harness.adaptive.AdaptiveSink` for one round: each row gets its
    ``propensity``, ``planned_by`` and ``predicted_reward`` (see the module docstring) and is
    kept in :attr:`rows` (the next round is planned from them).

    Attributes:
        planned: ``(index, repeat)`` -> the run's :class:`PlannedRun`.
        propensity: batch size -> ``1 / configs measured there this round``.
        rows: the rows so far.
    """

    columns: tuple[str, ...] | None = PREDICT_COLUMNS
    planned: Mapping[tuple[int, int], PlannedRun] = field(default_factory=dict)

    def with_columns(self, result: RunResult) -> SweepRecord:
        """``result``'s record with its ``propensity``, ``planned_by`` and ``predicted_reward``."""
        run = self.planned[result.run.key]
        predicted = None if run.predicted is None else [round(x, 4) for x in run.predicted]
        return dataclasses.replace(super().with_columns(result), planned_by=run.planned_by, predicted_reward=predicted)


def run_predicted(
    plan: SweepPlan,
    rows: Sequence[dict[str, Any]],
    sink: RowSink,
    execute: Callable[[SweepPlan, RowSink], None],
    model: SpeculativeDecodingModel,
    *,
    observations: Sequence[Any] = (),
    max_rounds: int = 1000,
) -> dict[int, PredictDecision]:
    """Run a predicted sweep: round after round of :func:`plan_round`'s runs until every batch
    size is settled.

    Args:
        plan: the whole sweep (its points, ``repeats`` = the most rows per config, launch mode).
        rows: the rows already in the file.
        sink: where rows go (its writer, reporter and summary are shared by the rounds).
        execute: runs one round's plan into a sink (one GPU or a worker pool).
        model: the profile's performance model.
        observations: accept lengths measured elsewhere (``--acceptance-from``).
        max_rounds: a bound on the rounds (each measures at least one new row, so the sweep
            ends after at most ``repeats x points`` rounds anyway).

    Returns:
        the decisions of the last round planned.

    Raises:
        as ``execute`` and :func:`plan_round`.
    """
    kept = list(rows)
    decisions: dict[int, PredictDecision] = {}
    for _ in range(max_rounds):
        chosen, decisions, _world = plan_round(
            kept, plan.points, model, max_repeats=plan.repeats, observations=observations
        )
        if not chosen:
            break
        keys = {(run.point.index, run.repeat) for run in chosen}
        points = tuple(sorted({run.point for run in chosen}, key=lambda p: p.index))
        top = max(run.repeat for run in chosen) + 1
        done = {(p.index, r) for p in points for r in range(top)} - keys
        per_bs = Counter(run.point.batch_size for run in chosen)
        round_plan = dataclasses.replace(plan, points=points, repeats=top, done=frozenset(done))
        round_sink = PredictSink(
            sink.writer, sink.reporter, sink.summary,
            planned={(run.point.index, run.repeat): run for run in chosen},
            propensity={bs: 1.0 / n for bs, n in per_bs.items()}, rows=kept,
        )  # fmt: skip
        before = len(kept)
        execute(round_plan, round_sink)
        if len(kept) == before:  # nothing was written (every run cancelled): do not spin
            break
    return decisions


@dataclass(frozen=True)
class PredictSummary:
    """What a predicted sweep measured, against the exhaustive sweep of the same grid.

    Attributes:
        runs: rows in the file.
        runs_exhaustive: ``repeats x grid points``.
        gpu_s: GPU seconds of the rows (:func:`specband.harness.adaptive.row_gpu_seconds`).
        gpu_s_exhaustive: an estimate: every grid point ``repeats`` times, a point never
            measured at the mean GPU time of its batch size's rows.
        picks: batch size -> (the best measured config, its mean reward, its rows).
        planned_by: ``planned_by`` -> rows.
    """

    runs: int
    runs_exhaustive: int
    gpu_s: float
    gpu_s_exhaustive: float
    picks: Mapping[int, tuple[Action, float, int]]
    planned_by: Mapping[str, int]


def predict_summary(
    rows: Sequence[Mapping[str, Any]], points: Sequence[GridPoint], repeats: int,
    reward_config: RewardConfig = RewardConfig(),
) -> PredictSummary:  # fmt: skip
    """Runs, GPU seconds and picks of a predicted sweep's rows (see :class:`PredictSummary`).

    Raises:
        DataError: an invalid row.
    """
    per_point: dict[int, list[float]] = defaultdict(list)
    for row in rows:
        if isinstance(row.get("index"), int):
            per_point[row["index"]].append(row_gpu_seconds(row))
    per_bs: dict[int, list[float]] = defaultdict(list)
    for p in points:
        per_bs[p.batch_size] += per_point.get(p.index, [])
    gpu_s = sum(sum(v) for v in per_point.values())
    estimate = 0.0
    for p in points:
        seen = per_point.get(p.index) or per_bs.get(p.batch_size) or [0.0]
        estimate += repeats * sum(seen) / len(seen)
    picks = {}
    order = {a: i for i, a in enumerate(EXTENDED_ACTIONS)}
    for bs, per in _samples(rows, reward_config).items():
        if per:
            best = max(per, key=lambda a: (sum(per[a]) / len(per[a]), -order.get(a, 0)))
            picks[bs] = (best, sum(per[best]) / len(per[best]), len(per[best]))
    planned = Counter(str(r.get("planned_by")) for r in rows)
    return PredictSummary(len(rows), repeats * len(points), gpu_s, estimate, dict(sorted(picks.items())), planned)


def replay_predicted(
    world: Sequence[Mapping[str, Any]], points: Sequence[GridPoint], model: SpeculativeDecodingModel, repeats: int,
    *, start: Sequence[Mapping[str, Any]] = (), max_rounds: int = 1000,
) -> list[dict[str, Any]]:  # fmt: skip
    """The rows a predicted sweep would measure in a world whose every run is already known:
    each round's run ``(index, repeat)`` takes the row of ``world`` with that key, with
    ``planned_by`` and ``predicted_reward`` set (as :class:`PredictSink` writes them). For
    benchmarks and tests: an exhaustive (e.g. simulated) sweep of ``repeats`` passes stands in
    for the GPU.

    Args:
        world: rows with every ``(index, repeat)`` of the grid up to ``repeats`` passes.
        points: the grid.
        model: the profile's performance model.
        repeats: the most rows per config.
        start: rows already measured (a resumed sweep's file).
        max_rounds: a bound on the rounds.

    Raises:
        KeyError: ``world`` lacks a run the planner asks for.
    """
    by_run = {(r["index"], r["repeat"]): r for r in world}
    rows = [dict(r) for r in start]
    for _ in range(max_rounds):
        chosen, _decisions, _world = plan_round(rows, points, model, max_repeats=repeats)
        if not chosen:
            break
        per_bs = Counter(run.point.batch_size for run in chosen)
        for run in chosen:
            predicted = None if run.predicted is None else [round(x, 4) for x in run.predicted]
            rows.append({**by_run[(run.point.index, run.repeat)], "propensity": 1.0 / per_bs[run.point.batch_size],
                         "planned_by": run.planned_by, "predicted_reward": predicted})  # fmt: skip
    return rows
