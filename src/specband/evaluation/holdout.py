"""Held-out evaluation of the policies' picks on a sweep.

For every held-out split (one repeat, or one trial, at a time; or the whole data in-sample)
each policy is trained on the other rows and its pick at each batch size is scored on the
held-out rows:

* **decision state**: the mean of the held-out rows' states at that batch size, for the
  feature kind (``contract`` or ``pre``, see :mod:`specband.sweeps.dataset`). The published study
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
from functools import partial
from typing import TYPE_CHECKING, cast

import numpy as np

from specband.contract.actions import REFERENCE_INDEX
from specband.contract.reward import RewardConfig
from specband.core.errors import ConfigError, DataError
from specband.evaluation.ope import (
    DEFAULT_N_BOOTSTRAP,
    ESTIMATORS,
    DoublyRobust,
    Interval,
    bootstrap_interval,
    mean_reward_model,
    one_hot,
)
from specband.evaluation.results import (
    BatchSizeContext,
    EvaluationResult,
    FeatureResult,
    NotHeldOut,
    PickSummary,
    SplitPick,
    _Obs,
)
from specband.evaluation.splits import (
    HELD_OUT,
    HOLDOUT_KINDS,
    IN_SAMPLE,
    Split,
    _row_label,
    _usable,
    make_splits,
    provenance_label,
    resolve_holdout,
)
from specband.policies import ALGORITHMS, create_policy
from specband.policies.base import masked_argmax
from specband.sweeps.dataset import FEATURE_KINDS, FeatureKind, Sweep, SweepRow, TrainingData

if TYPE_CHECKING:
    from specband.policies.base import Policy

__all__ = [
    "HELD_OUT",
    "HOLDOUT_KINDS",
    "IN_SAMPLE",
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

#: Reward tolerance for "the pick reaches the oracle".
_TIE = 1e-9


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

    return create_policy(name, seed=seed)


@dataclass(frozen=True)
class _HeldOutContext:
    """One split's held-out context at one batch size: its oracle config and the rows of the
    oracle and of the reference (3,4,8) there."""

    split: str
    oracle: int
    oracle_obs: list[_Obs]
    reference_obs: list[_Obs]


@dataclass
class _SplitPlan:
    """What every split scores.

    Attributes:
        obs: split -> batch size -> held-out observations.
        scored: split -> the batch sizes scored there (held out, with training rows).
        training: split -> feature kind -> training data, for the splits that score any.
        not_held: the (split, batch size) pairs that cannot be held out, with why.
    """

    obs: dict[str, dict[int, list[_Obs]]] = field(default_factory=dict)
    scored: dict[str, list[int]] = field(default_factory=dict)
    training: dict[str, dict[str, TrainingData]] = field(default_factory=dict)
    not_held: list[NotHeldOut] = field(default_factory=list)

    def scoring_splits(self, splits: Sequence[Split]) -> list[Split]:
        """The splits that score at least one batch size, in order."""
        return [s for s in splits if s.name in self.training]


@dataclass
class _Fits:
    """The fitted policies: (split, algorithm, feature kind) -> policy; fit count and time (s)."""

    policies: dict[tuple[str, str, str], Policy] = field(default_factory=dict)
    count: int = 0
    seconds: float = 0.0


def _check_settings(
    algorithms: Sequence[str] | None, features: Sequence[str], alpha: float, n_bootstrap: int
) -> tuple[tuple[str, ...], tuple[FeatureKind, ...]]:
    """The algorithms (default: all eight) and feature kinds, each once, in order.

    Raises:
        ConfigError: an unknown algorithm or feature kind, none of the latter, ``alpha``
            outside (0, 1) or ``n_bootstrap < 1``.
    """

    if algorithms is None or len(algorithms) == 0:
        algorithms = ALGORITHMS
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown:
        raise ConfigError(f"unknown algorithm {unknown[0]!r}; expected one of: {', '.join(ALGORITHMS)}")
    kinds = tuple(dict.fromkeys(features))
    for kind in kinds:
        if kind not in FEATURE_KINDS:
            raise ConfigError(f"unknown feature kind {kind!r}; expected one of: {', '.join(FEATURE_KINDS)}")
    if not kinds:
        raise ConfigError("no feature kind to evaluate")
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha must be in (0, 1), got {alpha}")
    if n_bootstrap < 1:
        raise ConfigError(f"n_bootstrap must be a positive integer, got {n_bootstrap}")
    return tuple(dict.fromkeys(algorithms)), cast("tuple[FeatureKind, ...]", kinds)


def _plan_splits(
    data: Sweep,
    splits: Sequence[Split],
    kind: str,
    features: Sequence[FeatureKind],
    config: RewardConfig,
    batch_sizes: Sequence[int] | None,
) -> _SplitPlan:
    """Per split: the held-out observations by batch size, which batch sizes are scored
    (successful held-out rows, asked for, and with training rows outside the split), and the
    training data of each feature kind."""
    plan = _SplitPlan()
    for split in splits:
        by_bs: dict[int, list[_Obs]] = defaultdict(list)
        for o in _observe(data, split.test.rows, config):
            by_bs[o.row.batch_size].append(o)
        train_bs = set(split.train.batch_sizes())
        scored = []
        for bs in sorted(by_bs):
            if not any(o.row.trainable for o in by_bs[bs]):
                continue
            if batch_sizes is not None and bs not in batch_sizes:
                continue
            if bs not in train_bs:
                plan.not_held.append(NotHeldOut(split.name, bs, _not_held_reason(split.name, bs, by_bs[bs], kind)))
                continue
            scored.append(bs)
        plan.obs[split.name] = by_bs
        plan.scored[split.name] = scored
        if scored:
            plan.training[split.name] = {k: split.train.training_data(k, config) for k in features}
    return plan


def _not_held_reason(split: str, batch_size: int, obs: Sequence[_Obs], kind: str) -> str:
    ran = sorted({o.row.trial or "" for o in obs} - {""})
    return f"batch size {batch_size} has no successful rows outside {split}" + (
        f" (it was run only in trial {', '.join(ran)})" if ran and kind == "trial" else ""
    )


def _fit_policies(
    plan: _SplitPlan,
    splits: Sequence[Split],
    kind: str,
    algorithms: Sequence[str],
    features: Sequence[str],
    factory: Callable[[str, int], Policy],
    seed: int,
    progress: Callable[[str], None] | None,
) -> _Fits:
    """Fit every algorithm once per scoring split and distinct training states (a feature
    kind whose training states equal an earlier kind's shares its fit)."""
    fits = _Fits()
    for split in plan.scoring_splits(splits):
        training = plan.training[split.name]
        for algo in algorithms:
            for i, k in enumerate(features):
                twin = next((f for f in features[:i] if _same_states(training[f], training[k])), None)
                if twin is not None:
                    fits.policies[(split.name, algo, k)] = fits.policies[(split.name, algo, twin)]
                    continue
                if progress:
                    progress(f"fit {algo} ({k} features) on {split.name if kind != 'none' else 'all rows'}")
                t0 = time.perf_counter()
                fits.policies[(split.name, algo, k)] = factory(algo, seed).fit(training[k])
                fits.seconds += time.perf_counter() - t0
                fits.count += 1
    return fits


def _identical_kinds(plan: _SplitPlan, features: Sequence[FeatureKind]) -> dict[str, str | None]:
    """Feature kind -> the earlier kind whose training and held-out states are the same
    (``None`` when none is)."""
    identical: dict[str, str | None] = dict.fromkeys(features)
    for i, k in enumerate(features):
        for f in features[:i]:
            same_train = all(_same_states(plan.training[s][f], plan.training[s][k]) for s in plan.training)
            same_test = all(
                np.array_equal(o.row.state(f), o.row.state(k))
                for by_bs in plan.obs.values()
                for obs in by_bs.values()
                for o in obs
            )
            if same_train and same_test:
                identical[k] = f
                break
    return identical


def _held_out_context(split: str, obs: Sequence[_Obs]) -> _HeldOutContext:
    """The oracle (best mean held-out reward, the lowest index on a tie) of one split at one
    batch size, with the oracle's and the reference's rows."""
    by_action: dict[int, list[_Obs]] = defaultdict(list)
    for o in obs:
        by_action[o.row.action_index].append(o)
    means = {a: float(np.mean([o.reward for o in action_obs])) for a, action_obs in by_action.items()}
    best = max(means.values())
    oracle = min(a for a, m in means.items() if m >= best - _TIE)
    return _HeldOutContext(split, oracle, by_action[oracle], by_action.get(REFERENCE_INDEX, []))


def _off_policy_rounds(
    obs: Sequence[_Obs], kind: FeatureKind, training: TrainingData, policy: Policy
) -> dict[str, np.ndarray]:
    """The off-policy rounds of one split for one policy: every held-out row at a scored
    batch size, with the policy's pick from the row's own state and the reward model.

    Returns:
        ``reward, action, pscore, pick, q_hat`` arrays over the rows (``q_hat``: (n, 19)).
    """

    states = np.stack([o.row.state(kind) for o in obs]).astype(np.float32)
    row_batch_sizes = np.array([o.row.batch_size for o in obs], dtype=np.int64)
    actions = training.action_set
    scores = np.asarray(policy.scores(states), dtype=np.float64).reshape(len(obs), len(actions))
    picks = [masked_argmax(scores[i], training.allowed_for(int(row_batch_sizes[i])), actions) for i in range(len(obs))]
    return {
        "reward": np.array([o.reward for o in obs]),
        "action": np.array([o.row.action_index for o in obs], dtype=np.int64),
        "pscore": _propensities([o.row for o in obs]),
        "pick": np.array(picks, dtype=np.int64),
        "q_hat": mean_reward_model(
            training.batch_sizes, training.actions, training.rewards, row_batch_sizes, n_actions=len(actions)
        ),
    }


def _batch_size_context(
    bs: int, held_out: Sequence[_HeldOutContext], plan: _SplitPlan, interval: Callable[..., Interval | None]
) -> BatchSizeContext:
    """Oracle and reference of one batch size over the splits that score it."""
    oracle_counts = Counter(c.oracle for c in held_out)
    oracle_obs = [o for c in held_out for o in c.oracle_obs]
    ref_obs = [o for c in held_out for o in c.reference_obs]
    ref_regret = [
        float(np.mean([o.reward for o in c.oracle_obs])) - float(np.mean([o.reward for o in c.reference_obs]))
        for c in held_out
        if c.reference_obs
    ]
    all_rows = [o.row for c in held_out for o in plan.obs[c.split][bs]]
    oracle_reward = interval([o.reward for o in oracle_obs])
    assert oracle_reward is not None  # the oracle has rows in every split that scores this batch size
    return BatchSizeContext(
        batch_size=bs,
        splits=tuple(c.split for c in held_out),
        oracle=_modal(oracle_counts),
        oracles=dict(sorted(oracle_counts.items())),
        oracle_reward=oracle_reward,
        oracle_utilization=interval([o.utilization for o in oracle_obs]),
        reference_reward=interval([o.reward for o in ref_obs]),
        reference_regret=interval(ref_regret),
        reference_utilization=interval([o.utilization for o in ref_obs]),
        n_rows=len(all_rows),
        label=provenance_label(all_rows),
    )


def _split_pick(
    split: str, bs: int, obs: Sequence[_Obs], kind: FeatureKind, training: TrainingData, policy: Policy, oracle: int
) -> tuple[SplitPick, list[_Obs]]:
    """A policy's pick in one split at one batch size, from the mean held-out state, scored
    on the held-out rows that ran it, else estimated by doubly robust.

    Returns:
        the :class:`SplitPick` and the held-out rows of the pick (empty when not measured).
    """

    state = np.mean(np.stack([o.row.state(kind) for o in obs]), axis=0).astype(np.float32)
    score = np.asarray(policy.scores(state[None, :]), dtype=np.float64).reshape(-1)
    pick = masked_argmax(score, training.allowed_for(bs), training.action_set)
    mine = [o for o in obs if o.row.action_index == pick]
    oracle_reward = float(np.mean([o.reward for o in obs if o.row.action_index == oracle]))
    if mine:
        reward = float(np.mean([o.reward for o in mine]))
        utils = [o.utilization for o in mine if o.utilization is not None]
        measured = SplitPick(
            split,
            bs,
            pick,
            reward,
            None,
            oracle,
            oracle_reward,
            oracle_reward - reward,
            float(np.mean(utils)) if utils else None,
        )
        return measured, mine
    n_actions = len(training.action_set)
    q_hat = mean_reward_model(
        training.batch_sizes, training.actions, training.rewards, np.full(len(obs), bs), n_actions=n_actions
    )
    estimate = DoublyRobust().estimate_policy_value(
        action_dist=one_hot(np.full(len(obs), pick), n_actions),
        reward=np.array([o.reward for o in obs]),
        action=np.array([o.row.action_index for o in obs], dtype=np.int64),
        pscore=_propensities([o.row for o in obs]),
        estimated_rewards=q_hat,
    )
    return SplitPick(split, bs, pick, None, estimate, oracle, oracle_reward, None, None), []


def _pick_summary(
    bs: int,
    split_picks: Sequence[SplitPick],
    pick_obs: Sequence[_Obs],
    config: RewardConfig,
    interval: Callable[..., Interval | None],
) -> PickSummary:
    """One algorithm's picks at one batch size over the splits, with intervals."""
    counts = Counter(p.pick for p in split_picks)
    utils = [o.utilization for o in pick_obs if o.utilization is not None]
    util_iv = interval(utils)
    in_band = None
    if util_iv is not None:
        in_band = config.band_low <= util_iv.estimate <= config.band_high
    measured = [p for p in split_picks if p.pick_reward is not None]
    estimates = [p.pick_estimate for p in split_picks if p.pick_estimate is not None]
    return PickSummary(
        batch_size=bs,
        pick=_modal(counts),
        picks=dict(sorted(counts.items())),
        reward=interval([o.reward for o in pick_obs]),
        regret=interval([p.regret for p in measured]),
        utilization=util_iv,
        in_band=in_band,
        in_band_fraction=(sum(config.band_low <= u <= config.band_high for u in utils) / len(utils) if utils else None),
        reaches_oracle=bool(measured) and all(p.regret is not None and p.regret <= _TIE for p in measured),
        label=provenance_label([o.row for o in pick_obs]),
        splits=tuple(split_picks),
        not_measured=tuple(p.split for p in split_picks if p.pick_reward is None),
        estimate=float(np.mean(estimates)) if estimates else None,
    )


def _off_policy_values(
    rounds: Sequence[dict[str, np.ndarray]], alpha: float, n_bootstrap: int, seed: int
) -> dict[str, Interval | None]:
    """DM, IPS, SNIPS and DR values (with intervals) of one policy over its pooled rounds;
    ``None`` for an estimator the data does not support."""
    q_hat = np.concatenate([r["q_hat"] for r in rounds])
    kw = {
        "reward": np.concatenate([r["reward"] for r in rounds]),
        "action": np.concatenate([r["action"] for r in rounds]),
        "pscore": np.concatenate([r["pscore"] for r in rounds]),
        "action_dist": one_hot(np.concatenate([r["pick"] for r in rounds]), q_hat.shape[1]),  # the data's set
        "estimated_rewards": q_hat,
    }
    values: dict[str, Interval | None] = {}
    for name, est in ESTIMATORS.items():
        try:
            values[name] = est.estimate_interval(**kw, alpha=alpha, n_bootstrap=n_bootstrap, random_state=seed)
        except DataError:
            values[name] = None
    return values


def _evaluate_kind(  # noqa: PLR0913
    k: FeatureKind,
    data: Sweep,
    splits: Sequence[Split],
    plan: _SplitPlan,
    fits: _Fits,
    algorithms: Sequence[str],
    config: RewardConfig,
    alpha: float,
    n_bootstrap: int,
    seed: int,
    identical_to: str | None,
) -> FeatureResult:
    """Every algorithm's picks, their scores and off-policy values for one feature kind."""
    interval = partial(_interval, alpha=alpha, n_bootstrap=n_bootstrap, seed=seed)
    scoring = plan.scoring_splits(splits)
    held_out: dict[int, list[_HeldOutContext]] = defaultdict(list)
    rounds: dict[str, list[dict[str, np.ndarray]]] = {a: [] for a in algorithms}
    for split in scoring:
        for bs in plan.scored[split.name]:
            held_out[bs].append(_held_out_context(split.name, plan.obs[split.name][bs]))
        obs = [o for bs in plan.scored[split.name] for o in plan.obs[split.name][bs]]
        for algo in algorithms:
            policy = fits.policies[(split.name, algo, k)]
            rounds[algo].append(_off_policy_rounds(obs, k, plan.training[split.name][k], policy))
    contexts = {bs: _batch_size_context(bs, ctx, plan, interval) for bs, ctx in sorted(held_out.items())}
    picks: dict[str, dict[int, PickSummary]] = {a: {} for a in algorithms}
    for algo in algorithms:
        for bs in sorted(held_out):
            oracles = {c.split: c.oracle for c in held_out[bs]}
            split_picks: list[SplitPick] = []
            pick_obs: list[_Obs] = []
            for split in scoring:
                if bs not in plan.scored[split.name]:
                    continue
                split_pick, mine = _split_pick(
                    split.name,
                    bs,
                    plan.obs[split.name][bs],
                    k,
                    plan.training[split.name][k],
                    fits.policies[(split.name, algo, k)],
                    oracles[split.name],
                )
                split_picks.append(split_pick)
                pick_obs.extend(mine)
            picks[algo][bs] = _pick_summary(bs, split_picks, pick_obs, config, interval)
    ope = {algo: _off_policy_values(rounds[algo], alpha, n_bootstrap, seed) for algo in algorithms if rounds[algo]}
    ope_n = sum(len(r["reward"]) for r in rounds[algorithms[-1]])  # the same rounds for every algorithm
    return FeatureResult(
        features=k,
        contexts=contexts,
        picks=picks,
        ope=ope,
        ope_n=ope_n,
        identical_to=identical_to,
        note=_feature_note(k, data),
    )


def evaluate(  # noqa: PLR0913
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

    Stages: check the settings; split the data (:func:`resolve_holdout`,
    :func:`make_splits`); plan what each split scores; fit the policies; per feature kind,
    score the picks and the off-policy values; evaluate in-sample what no split can hold out.

    Args:
        sweep: the data (:func:`specband.sweeps.dataset.load_sweep`).
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
    algorithms, features = _check_settings(algorithms, features, alpha, n_bootstrap)
    if not sweep.training_rows():
        raise DataError("no successful rows to evaluate on", path=sweep.path)
    kind, reason = resolve_holdout(sweep, holdout)
    splits = make_splits(sweep, kind)
    data = sweep.subset(_usable)
    plan = _plan_splits(data, splits, kind, features, config, batch_sizes)
    if not any(plan.scored.values()):
        raise DataError(
            "no batch size can be held out: every batch size was run in only one "
            f"{kind} (use --holdout none for an in-sample evaluation)",
            path=sweep.path,
        )
    fits = _fit_policies(plan, splits, kind, algorithms, features, policy_factory or _default_factory, seed, progress)
    identical = _identical_kinds(plan, features)
    results: dict[str, FeatureResult] = {
        k: _evaluate_kind(k, data, splits, plan, fits, algorithms, config, alpha, n_bootstrap, seed, identical[k])
        for k in features
    }
    scored_anywhere = {bs for scored in plan.scored.values() for bs in scored}
    never_scored = sorted({n.batch_size for n in plan.not_held} - scored_anywhere)
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
        fits.count += fallback.fits
        fits.seconds += fallback.fit_s
    return EvaluationResult(
        holdout=kind,
        holdout_reason=reason,
        scored_on=IN_SAMPLE if kind == "none" else HELD_OUT,
        splits=tuple(s.name for s in splits),
        algorithms=algorithms,
        features=results,
        not_held_out=tuple(plan.not_held),
        data_path=sweep.path,
        data_format=sweep.format,
        n_rows=len(data.rows),
        provenance=dict(sorted(Counter(_row_label(r) for r in data.rows if r.trainable).items())),
        reward_config=config,
        n_bootstrap=n_bootstrap,
        alpha=alpha,
        seed=seed,
        fit_s=fits.seconds,
        fits=fits.count,
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
