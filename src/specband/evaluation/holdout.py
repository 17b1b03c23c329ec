"""Held-out evaluation of the policies' picks on a sweep.

For every held-out split (one repeat, or one trial, at a time; or the whole data in-sample)
each policy is trained on the other rows and its pick at each batch size is scored on the
held-out rows:

* **decision state**: the mean of the held-out rows' states at that batch size, for the
  feature kind (``contract`` or ``pre``, see :mod:`specband.dataset`). The published study
  decided from one "representative" row's state;
* **pick**: the best-scored action among those the *training* rows allow at that batch
  size (successful there, never failed there);
* **held-out reward of the pick**: the mean reward of the held-out rows that ran that
  config at that batch size (a failed run scores 0). When the held-out split did not run it,
  the pick is "not measured in held-out" and only a doubly robust estimate is given,
  labelled so;
* **oracle**: the held-out config with the best mean reward; **reference**: ``(3,4,8)``;
  **regret** = oracle reward - pick reward, per split;
* **utilisation** of the pick (average power / power limit) and whether it is inside the band.

Across splits, intervals are 95 % percentile bootstrap intervals: reward and utilisation
over the pooled held-out rows of the config in question, regret over splits (one paired
observation per split). With a single observation an interval is not informative and is
reported as such.

Each policy is also scored per held-out row by the off-policy estimators of
:mod:`specband.evaluation.ope` (the policy acts on every held-out row's own state; logged
action, reward and a propensity uniform over the configs the split ran at that batch size,
or the file's ``propensity`` column; reward model: per-(batch size, action) training means).

A batch size that has no training rows outside a split cannot be held out in that split;
the result says so (:attr:`EvaluationResult.not_held_out`).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from specband.actions import NUM_ACTIONS, REFERENCE_INDEX
from specband.dataset import FEATURE_KINDS, Sweep, SweepRow, TrainingData
from specband.errors import ConfigError, DataError
from specband.evaluation.ope import (
    DEFAULT_N_BOOTSTRAP,
    ESTIMATORS,
    DoublyRobust,
    Interval,
    bootstrap_interval,
    mean_reward_model,
    one_hot,
)
from specband.reward import RewardConfig

if TYPE_CHECKING:
    from specband.policies.base import Policy

__all__ = [
    "HOLDOUT_KINDS",
    "BatchSizeContext",
    "EvaluationResult",
    "FeatureResult",
    "NotHeldOut",
    "PickSummary",
    "Split",
    "SplitPick",
    "evaluate",
    "make_splits",
    "provenance_label",
    "resolve_holdout",
]

#: Accepted ``holdout`` values; ``auto`` picks ``repeat``, else ``trial``, else ``none``.
HOLDOUT_KINDS: tuple[str, ...] = ("auto", "repeat", "trial", "none")
#: Label of in-sample results, printed wherever they are.
IN_SAMPLE = "in-sample"
HELD_OUT = "held-out"
#: Reward tolerance for "the pick reaches the oracle".
_TIE = 1e-9


# ----------------------------------------------------------------------------- splits
@dataclass(frozen=True)
class Split:
    """One train/held-out split.

    Attributes:
        name: ``"repeat=0"``, ``"trial=seed0"`` or ``"in-sample"``.
        train: the rows trained on.
        test: the rows scored (the same rows as ``train`` for the in-sample split).
    """

    name: str
    train: Sweep
    test: Sweep


def _usable(row: SweepRow) -> bool:
    return not row.is_agentic_trace


def _group_name(kind: str, value: Any) -> str:
    return f"{kind}={'null' if value is None else value}"


def resolve_holdout(sweep: Sweep, holdout: str) -> tuple[str, str]:
    """The holdout kind to use and why.

    Args:
        sweep: the data.
        holdout: one of :data:`HOLDOUT_KINDS`.

    Returns:
        ``(kind, reason)``: kind is ``repeat``, ``trial`` or ``none``.

    Raises:
        ConfigError: an unknown kind, or ``repeat``/``trial`` on data with fewer than two
            distinct values of that column (nothing could be held out).
    """
    if holdout not in HOLDOUT_KINDS:
        raise ConfigError(f"unknown holdout {holdout!r}; expected one of: {', '.join(HOLDOUT_KINDS)}")
    rows = [r for r in sweep.rows if _usable(r)]
    repeats = {r.repeat for r in rows}
    trials = {r.trial for r in rows}
    if holdout == "auto":
        if len(repeats) > 1:
            return "repeat", f"auto: the data has {len(repeats)} repeats"
        if len(trials) > 1:
            return "trial", f"auto: the data has no repeats but {len(trials)} trials"
        return "none", "auto: the data has a single repeat and trial, nothing can be held out"
    if holdout == "none":
        return "none", "requested"
    values = repeats if holdout == "repeat" else trials
    if len(values) < 2:
        only = next(iter(values)) if values else None
        shown = "null" if only is None else repr(only)
        raise ConfigError(
            f"--holdout {holdout}: every row has {holdout} {shown}, so nothing "
            f"can be held out by {holdout}; use "
            + ("--holdout trial or none" if holdout == "repeat" else "--holdout repeat or none")
        )
    return holdout, "requested"


def make_splits(sweep: Sweep, kind: str) -> list[Split]:
    """The splits of a resolved holdout kind (``repeat``, ``trial`` or ``none``), in order
    of first appearance of each group in the file (agentic trace rows dropped).

    Raises:
        ConfigError: an unknown kind.
    """
    data = sweep.subset(_usable)
    if kind == "none":
        return [Split(IN_SAMPLE, data, data)]
    if kind not in ("repeat", "trial"):
        raise ConfigError(f"unknown holdout kind {kind!r}; expected repeat, trial or none")
    key: Callable[[SweepRow], Any] = (lambda r: r.repeat) if kind == "repeat" else (lambda r: r.trial)
    groups = list(dict.fromkeys(key(r) for r in data.rows))
    return [
        Split(_group_name(kind, g), data.subset(lambda r, g=g: key(r) != g), data.subset(lambda r, g=g: key(r) == g))
        for g in groups
    ]


# ----------------------------------------------------------------------------- labels
def _row_label(row: SweepRow) -> str:
    if row.provenance in ("simulated", "emulated"):
        return row.provenance
    if row.utilization_origin == "derived":
        return "derived"
    return "measured"


def provenance_label(rows: Sequence[SweepRow]) -> str:
    """``"measured"``, ``"derived"``, ``"simulated"`` or ``"emulated"`` when every row
    agrees, else e.g. ``"mixed: 3 measured, 1 derived"``; ``"none"`` for no rows.

    A row is simulated (``specband simulate``) or emulated (``specband sweep`` against
    ``specband emulate``) when its ``provenance`` says so, derived when its utilisation was
    derived (e.g. back-computed from a published reward), measured otherwise.
    """
    counts = Counter(_row_label(r) for r in rows)
    if not counts:
        return "none"
    if len(counts) == 1:
        return next(iter(counts))
    order = ("measured", "derived", "simulated", "emulated")
    return "mixed: " + ", ".join(f"{counts[k]} {k}" for k in order if counts[k])


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


# ----------------------------------------------------------------------------- evaluation
def _observe(sweep: Sweep, rows: Sequence[SweepRow], config: RewardConfig) -> list[_Obs]:
    out = []
    for r in rows:
        parts = sweep.reward_parts(r, config)
        out.append(_Obs(r, parts.reward, parts.energy_utilization if r.trainable else None))
    return out


def _interval(values: Sequence[float], alpha: float, n_bootstrap: int, seed: int) -> Interval | None:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return bootstrap_interval(np.array(vals, dtype=np.float64), alpha=alpha, n_bootstrap=n_bootstrap, random_state=seed)


def _modal(counts: Counter[int]) -> int:
    best = max(counts.values())
    return min(a for a, c in counts.items() if c == best)


def _propensities(rows: Sequence[SweepRow]) -> np.ndarray:
    """Uniform over the configs the rows ran at each batch size, or the rows' own column."""
    seen: dict[int, set[int]] = defaultdict(set)
    for r in rows:
        seen[r.batch_size].add(r.action_index)
    return np.array(
        [r.propensity if r.propensity is not None else 1.0 / len(seen[r.batch_size]) for r in rows],
        dtype=np.float64,
    )


def _same_states(a: TrainingData, b: TrainingData) -> bool:
    return a.states.shape == b.states.shape and bool(np.array_equal(a.states, b.states))


def _default_factory(name: str, seed: int) -> Policy:
    from specband.policies import create_policy

    return create_policy(name, seed=seed)


def evaluate(
    sweep: Sweep,
    *,
    holdout: str = "auto",
    algorithms: Sequence[str] | None = None,
    features: Sequence[str] = FEATURE_KINDS,
    config: RewardConfig = RewardConfig(),
    seed: int = 0,
    n_bootstrap: int = DEFAULT_N_BOOTSTRAP,
    alpha: float = 0.05,
    policy_factory: Callable[[str, int], Policy] | None = None,
    progress: Callable[[str], None] | None = None,
    batch_sizes: Sequence[int] | None = None,
    in_sample_fallback: bool = True,
) -> EvaluationResult:
    """Train each algorithm on every split's training rows and score its picks on the
    held-out rows (see the module docstring).

    Args:
        sweep: the data (:func:`specband.dataset.load_sweep`).
        holdout: ``auto``, ``repeat``, ``trial`` or ``none`` (in-sample).
        algorithms: names from :data:`specband.policies.ALGORITHMS` (default: all eight).
        features: feature kinds to evaluate, ``contract`` and/or ``pre``.
        config: reward constants.
        seed: policy training seed and bootstrap seed.
        n_bootstrap: bootstrap resamples per interval.
        alpha: 1 - interval level.
        policy_factory: ``(name, seed) -> unfitted Policy``; default
            :func:`specband.policies.create_policy`.
        progress: called with a short message before each fit.
        batch_sizes: score only these batch sizes (default: every batch size).
        in_sample_fallback: when some batch sizes cannot be held out in any split, also
            evaluate them in-sample (:attr:`EvaluationResult.in_sample`, labelled so).

    Returns:
        an :class:`EvaluationResult`.

    Raises:
        ConfigError: an unknown algorithm, holdout or feature kind, bad bootstrap settings,
            or ``repeat``/``trial`` holdout on data without two such groups.
        DataError: the data has no successful rows, or a split leaves nothing to score.
    """
    started = time.perf_counter()
    if algorithms is None or len(algorithms) == 0:
        from specband.policies import ALGORITHMS

        algorithms = ALGORITHMS
    else:
        from specband.policies import ALGORITHMS

        unknown = [a for a in algorithms if a not in ALGORITHMS]
        if unknown:
            raise ConfigError(f"unknown algorithm {unknown[0]!r}; expected one of: {', '.join(ALGORITHMS)}")
    algorithms = tuple(dict.fromkeys(algorithms))
    features = tuple(dict.fromkeys(features))
    for kind in features:
        if kind not in FEATURE_KINDS:
            raise ConfigError(f"unknown feature kind {kind!r}; expected one of: {', '.join(FEATURE_KINDS)}")
    if not features:
        raise ConfigError("no feature kind to evaluate")
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha must be in (0, 1), got {alpha}")
    if n_bootstrap < 1:
        raise ConfigError(f"n_bootstrap must be a positive integer, got {n_bootstrap}")
    if not sweep.training_rows():
        raise DataError("no successful rows to evaluate on", path=sweep.path)
    factory = policy_factory or _default_factory
    kind, reason = resolve_holdout(sweep, holdout)
    splits = make_splits(sweep, kind)
    scored_on = IN_SAMPLE if kind == "none" else HELD_OUT
    data = sweep.subset(_usable)

    # Per split: which batch sizes are scored, the held-out observations, fitted policies.
    not_held: list[NotHeldOut] = []
    split_obs: dict[str, dict[int, list[_Obs]]] = {}
    split_train: dict[str, dict[str, TrainingData]] = {}
    split_bs: dict[str, list[int]] = {}
    for split in splits:
        obs = _observe(data, split.test.rows, config)
        by_bs: dict[int, list[_Obs]] = defaultdict(list)
        for o in obs:
            by_bs[o.row.batch_size].append(o)
        train_bs = set(split.train.batch_sizes())
        scored = []
        for bs in sorted(by_bs):
            if not any(o.row.trainable for o in by_bs[bs]):
                continue
            if batch_sizes is not None and bs not in batch_sizes:
                continue
            if bs not in train_bs:
                ran = sorted({o.row.trial or "" for o in by_bs[bs]} - {""})
                not_held.append(
                    NotHeldOut(
                        split.name,
                        bs,
                        f"batch size {bs} has no successful rows outside {split.name}"
                        + (f" (it was run only in trial {', '.join(ran)})" if ran and kind == "trial" else ""),
                    )
                )
                continue
            scored.append(bs)
        split_obs[split.name] = by_bs
        split_bs[split.name] = scored
        if scored:
            split_train[split.name] = {k: split.train.training_data(k, config) for k in features}
    if not any(split_bs.values()):
        raise DataError(
            "no batch size can be held out: every batch size was run in only one "
            f"{kind} (use --holdout none for an in-sample evaluation)",
            path=sweep.path,
        )
    never_scored = sorted({n.batch_size for n in not_held} - {bs for v in split_bs.values() for bs in v})

    # Fit every algorithm once per split and distinct training states.
    fits = 0
    fit_s = 0.0
    fitted: dict[tuple[str, str, str], Policy] = {}
    identical: dict[str, str | None] = dict.fromkeys(features)
    for split in splits:
        if split.name not in split_train:
            continue
        tds = split_train[split.name]
        for algo in algorithms:
            for i, k in enumerate(features):
                twin = next((f for f in features[:i] if _same_states(tds[f], tds[k])), None)
                if twin is not None:
                    fitted[(split.name, algo, k)] = fitted[(split.name, algo, twin)]
                    continue
                if progress:
                    progress(f"fit {algo} ({k} features) on {split.name if kind != 'none' else 'all rows'}")
                t0 = time.perf_counter()
                fitted[(split.name, algo, k)] = factory(algo, seed).fit(tds[k])
                fit_s += time.perf_counter() - t0
                fits += 1

    # Are the kinds' held-out states identical too?
    for i, k in enumerate(features):
        for f in features[:i]:
            same_train = all(_same_states(split_train[s][f], split_train[s][k]) for s in split_train)
            same_test = all(
                np.array_equal(o.row.state(f), o.row.state(k))
                for s in split_obs.values()
                for obs in s.values()
                for o in obs
            )
            if same_train and same_test:
                identical[k] = f
                break

    from specband.policies.base import masked_argmax

    results: dict[str, FeatureResult] = {}
    for k in features:
        contexts: dict[int, BatchSizeContext] = {}
        picks: dict[str, dict[int, PickSummary]] = {a: {} for a in algorithms}
        per_split_context: dict[int, list[tuple[str, int, list[_Obs], list[_Obs]]]] = defaultdict(list)
        ope_rows: dict[str, dict[str, list[np.ndarray]]] = {a: defaultdict(list) for a in algorithms}
        for split in splits:
            if split.name not in split_train:
                continue
            td = split_train[split.name][k]
            for bs in split_bs[split.name]:
                obs = split_obs[split.name][bs]
                by_action: dict[int, list[_Obs]] = defaultdict(list)
                for o in obs:
                    by_action[o.row.action_index].append(o)
                means = {a: float(np.mean([o.reward for o in os_])) for a, os_ in by_action.items()}
                best = max(means.values())
                oracle = min(a for a, m in means.items() if m >= best - _TIE)
                per_split_context[bs].append((split.name, oracle, by_action[oracle], by_action.get(REFERENCE_INDEX, [])))
            # Off-policy rounds: every held-out row at a scored batch size.
            rows = [o for bs in split_bs[split.name] for o in split_obs[split.name][bs]]
            states = np.stack([o.row.state(k) for o in rows]).astype(np.float32)
            bss = np.array([o.row.batch_size for o in rows], dtype=np.int64)
            q_hat = mean_reward_model(td.batch_sizes, td.actions, td.rewards, bss)
            for algo in algorithms:
                policy = fitted[(split.name, algo, k)]
                scores = np.asarray(policy.scores(states), dtype=np.float64).reshape(len(rows), NUM_ACTIONS)
                row_picks = np.array(
                    [masked_argmax(scores[i], td.allowed_for(int(bss[i]))) for i in range(len(rows))], dtype=np.int64
                )
                bucket = ope_rows[algo]
                bucket["reward"].append(np.array([o.reward for o in rows]))
                bucket["action"].append(np.array([o.row.action_index for o in rows], dtype=np.int64))
                bucket["pscore"].append(_propensities([o.row for o in rows]))
                bucket["pick"].append(row_picks)
                bucket["q_hat"].append(q_hat)
                bucket["batch_size"].append(bss)
        for bs, ctx in sorted(per_split_context.items()):
            oracle_counts = Counter(o for _, o, _, _ in ctx)
            oracle_obs = [o for _, _, os_, _ in ctx for o in os_]
            ref_obs = [o for _, _, _, rs in ctx for o in rs]
            ref_regret = [
                float(np.mean([o.reward for o in os_])) - float(np.mean([o.reward for o in rs]))
                for _, _, os_, rs in ctx
                if rs
            ]
            all_rows = [o.row for s, _, _, _ in ctx for o in split_obs[s][bs]]
            contexts[bs] = BatchSizeContext(
                batch_size=bs,
                splits=tuple(s for s, _, _, _ in ctx),
                oracle=_modal(oracle_counts),
                oracles=dict(sorted(oracle_counts.items())),
                oracle_reward=_interval([o.reward for o in oracle_obs], alpha, n_bootstrap, seed),  # type: ignore[arg-type]
                oracle_utilization=_interval([o.utilization for o in oracle_obs], alpha, n_bootstrap, seed),
                reference_reward=_interval([o.reward for o in ref_obs], alpha, n_bootstrap, seed),
                reference_regret=_interval(ref_regret, alpha, n_bootstrap, seed),
                reference_utilization=_interval([o.utilization for o in ref_obs], alpha, n_bootstrap, seed),
                n_rows=len(all_rows),
                label=provenance_label(all_rows),
            )
        for algo in algorithms:
            for bs in sorted(per_split_context):
                split_picks: list[SplitPick] = []
                pick_obs: list[_Obs] = []
                regrets: list[float] = []
                estimates: list[float] = []
                for split in splits:
                    if split.name not in split_train or bs not in split_bs[split.name]:
                        continue
                    td = split_train[split.name][k]
                    obs = split_obs[split.name][bs]
                    state = np.mean(np.stack([o.row.state(k) for o in obs]), axis=0).astype(np.float32)
                    policy = fitted[(split.name, algo, k)]
                    score = np.asarray(policy.scores(state[None, :]), dtype=np.float64).reshape(-1)
                    pick = masked_argmax(score, td.allowed_for(bs))
                    mine = [o for o in obs if o.row.action_index == pick]
                    oracle = next(o for s, o, _, _ in per_split_context[bs] if s == split.name)
                    oracle_reward = float(np.mean([o.reward for o in obs if o.row.action_index == oracle]))
                    if mine:
                        reward = float(np.mean([o.reward for o in mine]))
                        utils = [o.utilization for o in mine if o.utilization is not None]
                        split_picks.append(
                            SplitPick(
                                split.name, bs, pick, reward, None, oracle, oracle_reward,
                                oracle_reward - reward, float(np.mean(utils)) if utils else None,
                            )  # fmt: skip
                        )
                        pick_obs.extend(mine)
                        regrets.append(oracle_reward - reward)
                    else:
                        q_hat = mean_reward_model(td.batch_sizes, td.actions, td.rewards, np.full(len(obs), bs))
                        estimate = DoublyRobust().estimate_policy_value(
                            action_dist=one_hot(np.full(len(obs), pick)),
                            reward=np.array([o.reward for o in obs]),
                            action=np.array([o.row.action_index for o in obs], dtype=np.int64),
                            pscore=_propensities([o.row for o in obs]),
                            estimated_rewards=q_hat,
                        )
                        estimates.append(estimate)
                        split_picks.append(
                            SplitPick(split.name, bs, pick, None, estimate, oracle, oracle_reward, None, None)
                        )
                counts = Counter(p.pick for p in split_picks)
                utils = [o.utilization for o in pick_obs if o.utilization is not None]
                util_iv = _interval(utils, alpha, n_bootstrap, seed)
                in_band = None
                if util_iv is not None:
                    in_band = config.band_low <= util_iv.estimate <= config.band_high
                measured = [p for p in split_picks if p.pick_reward is not None]
                picks[algo][bs] = PickSummary(
                    batch_size=bs,
                    pick=_modal(counts),
                    picks=dict(sorted(counts.items())),
                    reward=_interval([o.reward for o in pick_obs], alpha, n_bootstrap, seed),
                    regret=_interval(regrets, alpha, n_bootstrap, seed),
                    utilization=util_iv,
                    in_band=in_band,
                    in_band_fraction=(
                        sum(config.band_low <= u <= config.band_high for u in utils) / len(utils) if utils else None
                    ),
                    reaches_oracle=bool(measured) and all(p.regret is not None and p.regret <= _TIE for p in measured),
                    label=provenance_label([o.row for o in pick_obs]),
                    splits=tuple(split_picks),
                    not_measured=tuple(p.split for p in split_picks if p.pick_reward is None),
                    estimate=float(np.mean(estimates)) if estimates else None,
                )
        ope: dict[str, dict[str, Interval | None]] = {}
        ope_n = 0
        for algo in algorithms:
            bucket = ope_rows[algo]
            if not bucket["reward"]:
                continue
            kw = {
                "reward": np.concatenate(bucket["reward"]),
                "action": np.concatenate(bucket["action"]),
                "pscore": np.concatenate(bucket["pscore"]),
                "action_dist": one_hot(np.concatenate(bucket["pick"])),
                "estimated_rewards": np.concatenate(bucket["q_hat"]),
            }
            ope_n = int(kw["reward"].shape[0])
            ope[algo] = {}
            for name, est in ESTIMATORS.items():
                try:
                    ope[algo][name] = est.estimate_interval(
                        **kw, alpha=alpha, n_bootstrap=n_bootstrap, random_state=seed
                    )
                except DataError:
                    ope[algo][name] = None
        results[k] = FeatureResult(
            features=k,
            contexts=contexts,
            picks=picks,
            ope=ope,
            ope_n=ope_n,
            identical_to=identical[k],
            note=_feature_note(k, data),
        )
    provenance = Counter(_row_label(r) for r in data.rows if r.trainable)
    fallback = None
    if in_sample_fallback and kind != "none" and never_scored:
        fallback = evaluate(
            sweep,
            holdout="none",
            algorithms=algorithms,
            features=features,
            config=config,
            seed=seed,
            n_bootstrap=n_bootstrap,
            alpha=alpha,
            policy_factory=policy_factory,
            progress=progress,
            batch_sizes=never_scored,
            in_sample_fallback=False,
        )
        fits += fallback.fits
        fit_s += fallback.fit_s
    return EvaluationResult(
        holdout=kind,
        holdout_reason=reason,
        scored_on=scored_on,
        splits=tuple(s.name for s in splits),
        algorithms=algorithms,
        features=results,
        not_held_out=tuple(not_held),
        data_path=sweep.path,
        data_format=sweep.format,
        n_rows=len(data.rows),
        provenance=dict(sorted(provenance.items())),
        reward_config=config,
        n_bootstrap=n_bootstrap,
        alpha=alpha,
        seed=seed,
        fit_s=fit_s,
        fits=fits,
        timings={"total_s": time.perf_counter() - started},
        in_sample=fallback,
        energy_measured=data.energy_measured,
    )


def _feature_note(kind: str, sweep: Sweep) -> str | None:
    rows = sweep.training_rows()
    if kind == "pre":
        has_pre = any(r.gpu_mem_used_mb_before is not None or r.gpu_util_pct_before is not None for r in rows)
        has_temp = any(r.gpu_temp_c_before is not None for r in rows)
        if not has_pre:
            return (
                "the data has no pre-launch telemetry (gpu_mem_used_mb_before, gpu_util_pct_before): "
                "the pre state is [batch_size/8, "
                + ("gpu_temp_c_before/100" if has_temp else "0.40 (temperature fill 40 C)")
                + ", 0, 0]"
            )
        return "pre-launch state: batch size, temperature, memory and utilisation read before the run"
    has_post = any(r.gpu_mem_used_mb is not None or r.gpu_util_pct is not None for r in rows)
    if has_post:
        return "contract state: memory and utilisation read after the run (hindsight, as in the published data)"
    return "contract state: the data has no memory/utilisation readings; upstream's fills (0 MB, 0 %) are used"

