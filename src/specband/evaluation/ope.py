"""Off-policy estimators: the value of an evaluation policy from logged bandit data.

Logged data is ``n`` rounds of (context ``x_i``, logged action ``a_i``, reward ``r_i``,
propensity score ``p_i = pi_b(a_i | x_i)``) collected by a logging policy ``pi_b``. The
evaluation policy ``pi_e`` is given as ``action_dist`` (n, n_actions): row ``i`` is
``pi_e(. | x_i)`` (one-hot for a deterministic policy such as a specband pick). A reward
model ``q_hat(x, a)`` is given as ``estimated_rewards`` (n, n_actions), e.g. a policy's
``scores`` or :func:`mean_reward_model`.

Estimators (``w_i = pi_e(a_i | x_i) / p_i`` is the importance weight):

* direct method (DM): ``V = 1/n sum_i sum_a pi_e(a | x_i) q_hat(x_i, a)``;
* inverse propensity scoring (IPS): ``V = 1/n sum_i w_i r_i`` (unbiased when ``p_i`` is
  the true logging probability and ``pi_b`` covers ``pi_e``);
* self-normalised IPS (SNIPS): ``V = sum_i w_i r_i / sum_i w_i`` (biased, lower variance;
  Swaminathan and Joachims 2015);
* doubly robust (DR): ``V = 1/n sum_i [sum_a pi_e(a | x_i) q_hat(x_i, a) + w_i (r_i -
  q_hat(x_i, a_i))]`` (unbiased when either the propensities or the reward model is right;
  Dudik, Langford and Li 2011).

Intervals are percentile bootstrap intervals over rounds (rounds resampled with
replacement, the estimator recomputed, ``n_bootstrap`` times, seeded numpy ``Generator``).

References:
    M. Dudik, J. Langford, L. Li. Doubly Robust Policy Evaluation and Learning. ICML 2011.
    A. Swaminathan, T. Joachims. The Self-Normalized Estimator for Counterfactual
    Learning. NeurIPS 2015.
    D. G. Horvitz, D. J. Thompson. A generalization of sampling without replacement from a
    finite universe. JASA 1952 (IPS).
    The interface follows the Open Bandit Pipeline (Saito et al. 2021, ``obp.ope``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from specband.contract.actions import NUM_ACTIONS
from specband.core.errors import ConfigError, DataError
from specband.core.limits import is_int, is_number

__all__ = [
    "DEFAULT_N_BOOTSTRAP",
    "ESTIMATORS",
    "DirectMethod",
    "DoublyRobust",
    "Interval",
    "InverseProbabilityScoring",
    "OffPolicyEstimator",
    "SelfNormalizedIPS",
    "bootstrap_interval",
    "check_logged_bandit",
    "mean_reward_model",
    "one_hot",
    "uniform_propensities",
]

#: Default number of bootstrap resamples.
DEFAULT_N_BOOTSTRAP = 1000
#: Largest (resamples x rounds) index block drawn at once (scipy's ``batch``), to bound memory.
_BLOCK = 2_000_000
#: Tolerance on ``action_dist`` rows summing to 1.
_SUM_TOL = 1e-6


@dataclass(frozen=True)
class Interval:
    """A point estimate with a percentile bootstrap interval.

    Attributes:
        estimate: the point estimate on the full sample.
        low, high: the ``(1 - level) / 2`` and ``(1 + level) / 2`` bootstrap percentiles.
        level: coverage level, e.g. 0.95.
        n: number of observations the estimate is made from.
        n_bootstrap: number of bootstrap resamples used (0 when ``n < 2``: then
            ``low == high == estimate`` and the interval carries no information).
    """

    estimate: float
    low: float
    high: float
    level: float = 0.95
    n: int = 0
    n_bootstrap: int = 0

    @property
    def informative(self) -> bool:
        """True when the interval came from a bootstrap over at least two observations."""
        return self.n_bootstrap > 0

    def covers(self, value: float) -> bool:
        """True when ``low <= value <= high``."""
        return self.low <= value <= self.high

    def as_dict(self) -> dict[str, float | int | None]:
        """JSON-ready dict: ``estimate, low, high, level, n`` (``low``/``high`` are ``None``
        when the interval is not informative)."""
        return {
            "estimate": self.estimate,
            "low": self.low if self.informative else None,
            "high": self.high if self.informative else None,
            "level": self.level,
            "n": self.n,
        }


def _check_bootstrap_args(alpha: float, n_bootstrap: int) -> None:
    if not is_number(alpha) or not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha must be in (0, 1), got {alpha!r}")
    if not (is_int(n_bootstrap) or isinstance(n_bootstrap, np.integer)) or n_bootstrap < 1:
        raise ConfigError(f"n_bootstrap must be a positive integer, got {n_bootstrap!r}")


def bootstrap_interval(
    values: np.ndarray,
    *,
    weights: np.ndarray | None = None,
    alpha: float = 0.05,
    n_bootstrap: int = DEFAULT_N_BOOTSTRAP,
    random_state: int | np.random.Generator | None = 0,
) -> Interval:
    """Percentile bootstrap interval of a mean, or of a ratio of sums.

    Without ``weights`` the statistic is ``mean(values)``; with ``weights`` it is
    ``sum(values) / sum(weights)`` (resampled jointly; resamples whose weight sum is 0 are
    dropped). The resampling and the percentiles are scipy's
    (``scipy.stats.bootstrap(..., paired=True, vectorized=True, method="percentile")``,
    in batches of at most ``_BLOCK`` drawn indices); the guards around it are specband's.

    Args:
        values: (n,) finite observations.
        weights: (n,) finite denominators for a ratio statistic, or ``None``.
        alpha: 1 - coverage level (0.05 gives a 95 % interval).
        n_bootstrap: number of resamples.
        random_state: seed or ``numpy.random.Generator``.

    Returns:
        an :class:`Interval`; with ``n < 2`` a degenerate one (``n_bootstrap = 0``).

    Raises:
        DataError: empty, non-finite or mismatched arrays, or a ratio with zero denominator.
        ConfigError: ``alpha`` outside (0, 1) or ``n_bootstrap < 1``.
    """
    _check_bootstrap_args(alpha, n_bootstrap)
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if values.size == 0:
        raise DataError("no observations to estimate from", field="values")
    if not np.all(np.isfinite(values)):
        raise DataError("observations contain NaN or Infinity", field="values")
    if weights is None:
        terms = values[:, None]
        estimate = float(values.mean())
    else:
        weights = np.asarray(weights, dtype=np.float64).reshape(-1)
        if weights.shape != values.shape:
            raise DataError(f"weights have shape {weights.shape}, values {values.shape}", field="weights")
        if not np.all(np.isfinite(weights)):
            raise DataError("weights contain NaN or Infinity", field="weights")
        if weights.sum() == 0:
            raise DataError("the weights sum to 0: the ratio is undefined", field="weights")
        terms = np.stack([values, weights], axis=1)
        estimate = float(values.sum() / weights.sum())
    level = 1.0 - alpha
    n = int(values.size)
    if n < 2:
        return Interval(estimate, estimate, estimate, level, n, 0)
    rng = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)
    low, high, size = _percentile_bootstrap(terms, alpha, int(n_bootstrap), rng)
    # Float summation order can put an all-equal sample's percentile one ulp off its mean.
    low, high = min(low, estimate), max(high, estimate)
    return Interval(estimate, low, high, level, n, size)


def _percentile_bootstrap(
    terms: np.ndarray, alpha: float, n_bootstrap: int, rng: np.random.Generator
) -> tuple[float, float, int]:
    """scipy's paired percentile bootstrap of ``sum(terms[:, 0]) / n`` (one column) or of
    ``sum(terms[:, 0]) / sum(terms[:, 1])`` (two columns) over the n rows of ``terms``.

    Returns:
        ``(low, high, resamples used)``; ratio resamples whose denominator sums to 0 give
        NaN and are left out of the percentiles.
    """
    import warnings

    from scipy import stats

    n = terms.shape[0]

    def statistic(*columns: np.ndarray, axis: int = -1) -> np.ndarray:
        top = columns[0].sum(axis=axis)
        if len(columns) == 1:
            return top / n
        bottom = columns[1].sum(axis=axis)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(bottom != 0, top / np.where(bottom != 0, bottom, 1.0), np.nan)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)  # NaN ratios: handled below
        result = stats.bootstrap(
            tuple(terms.T),
            statistic,
            n_resamples=n_bootstrap,
            batch=max(1, _BLOCK // max(n, 1)),
            vectorized=True,
            paired=True,
            confidence_level=1.0 - alpha,
            method="percentile",
            rng=rng,
        )
    distribution = np.asarray(result.bootstrap_distribution)
    kept = int(np.count_nonzero(~np.isnan(distribution)))
    if kept == distribution.size:
        low, high = result.confidence_interval
    else:
        low, high = stats.quantile(distribution, np.array([alpha / 2, 1 - alpha / 2]), nan_policy="omit")
    return float(low), float(high), kept


def check_logged_bandit(  # noqa: C901
    *,
    reward: np.ndarray | None = None,
    action: np.ndarray | None = None,
    pscore: np.ndarray | None = None,
    action_dist: np.ndarray | None = None,
    estimated_rewards: np.ndarray | None = None,
) -> int:
    """Validate logged bandit arrays against each other; returns the number of rounds ``n``.

    Args:
        reward: (n,) finite rewards.
        action: (n,) integer logged actions in ``[0, n_actions)``.
        pscore: (n,) propensity scores ``pi_b(a_i | x_i)`` in (0, 1].
        action_dist: (n, n_actions) evaluation policy, non-negative rows summing to 1.
        estimated_rewards: (n, n_actions) finite reward model ``q_hat(x_i, a)``.

    Raises:
        DataError: naming the field, for a wrong shape or dimension, a length that differs
            from another array's, NaN/Infinity, a propensity outside (0, 1], an action
            outside ``[0, n_actions)`` or not an integer, an ``action_dist`` row that is
            negative or does not sum to 1, or zero rounds.
    """
    given = {
        "reward": reward,
        "action": action,
        "pscore": pscore,
        "action_dist": action_dist,
        "estimated_rewards": estimated_rewards,
    }
    arrays = {name: np.asarray(arr) for name, arr in given.items() if arr is not None}
    for name, arr in arrays.items():
        ndim = 2 if name in ("action_dist", "estimated_rewards") else 1
        if arr.ndim != ndim:
            raise DataError(f"expected a {ndim}-d array, got shape {arr.shape}", field=name)
    lengths = {name: arr.shape[0] for name, arr in arrays.items()}
    if len(set(lengths.values())) > 1:
        counts = list(lengths.values())
        common = max(set(counts), key=counts.count)
        odd = next(name for name, m in lengths.items() if m != common)
        listing = ", ".join(f"{k} {v}" for k, v in lengths.items())
        raise DataError(f"arrays have different numbers of rounds ({listing})", field=odd)
    widths = {name: arrays[name].shape[1] for name in ("action_dist", "estimated_rewards") if name in arrays}
    if len(set(widths.values())) > 1:
        raise DataError(
            f"has {widths['estimated_rewards']} actions, action_dist has {widths['action_dist']}",
            field="estimated_rewards",
        )
    n = next(iter(lengths.values()), 0)
    n_actions = next(iter(widths.values()), None)
    for name in ("reward", "pscore", "action_dist", "estimated_rewards"):
        if name not in arrays:
            continue
        arr = arrays[name]
        if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
            raise DataError(f"expected real numbers, got dtype {arr.dtype}", field=name)
        if not np.all(np.isfinite(arr)):
            raise DataError("contains NaN or Infinity", field=name)
    if action is not None:
        arr = arrays["action"]
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise DataError(f"logged actions must be integers, got dtype {arr.dtype}", field="action")
        high = n_actions if n_actions is not None else NUM_ACTIONS
        if arr.size and (arr.min() < 0 or arr.max() >= high):
            raise DataError(f"logged actions must be in [0, {high}), got {arr.min()}..{arr.max()}", field="action")
    if pscore is not None:
        p = np.asarray(pscore, dtype=np.float64)
        if p.size and (p.min() <= 0.0 or p.max() > 1.0):
            raise DataError(f"propensity scores must be in (0, 1], got {p.min()}..{p.max()}", field="pscore")
    if action_dist is not None:
        d = np.asarray(action_dist, dtype=np.float64)
        if d.size and d.min() < 0.0:
            raise DataError("evaluation policy probabilities must be >= 0", field="action_dist")
        if d.size and np.abs(d.sum(axis=1) - 1.0).max() > _SUM_TOL:
            raise DataError("each row of the evaluation policy must sum to 1", field="action_dist")
    if not n:
        raise DataError("no logged rounds to estimate from")
    return int(n)


@dataclass(frozen=True)
class OffPolicyEstimator(ABC):
    """Base of the off-policy estimators (see the module docstring).

    Subclasses set ``estimator_name`` and ``needs`` (which inputs they read) and
    implement ``_terms``: per-round numerator terms, and denominators for a ratio estimator.
    """

    estimator_name: ClassVar[str] = ""
    needs: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def _terms(
        self,
        reward: np.ndarray | None,
        action: np.ndarray | None,
        pscore: np.ndarray | None,
        action_dist: np.ndarray,
        estimated_rewards: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Per-round numerator terms (n,), and (n,) denominators for a ratio estimator."""

    def _prepare(
        self,
        reward: np.ndarray | None,
        action: np.ndarray | None,
        pscore: np.ndarray | None,
        action_dist: np.ndarray | None,
        estimated_rewards: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Check the inputs this estimator needs and compute its per-round terms.

        Returns:
            (n,) numerator terms, and (n,) denominators (``None`` unless a ratio estimator).

        Raises:
            DataError: a needed array is missing or invalid (see :func:`check_logged_bandit`),
                or the denominators sum to 0 (no logged round is supported by the
                evaluation policy: the ratio is undefined).
        """
        given = {
            "reward": reward,
            "action": action,
            "pscore": pscore,
            "action_dist": action_dist,
            "estimated_rewards": estimated_rewards,
        }
        for name in ("action_dist", *self.needs):
            if given[name] is None:
                raise DataError(f"{self.estimator_name} needs '{name}'", field=name)
        check_logged_bandit(**{k: v for k, v in given.items() if k in self.needs or k == "action_dist"})
        as_float = lambda a: None if a is None else np.asarray(a, dtype=np.float64)  # noqa: E731
        num, den = self._terms(
            as_float(reward),
            None if action is None else np.asarray(action, dtype=np.int64),
            as_float(pscore),
            np.asarray(action_dist, dtype=np.float64),
            as_float(estimated_rewards),
        )
        if den is not None and den.sum() == 0:
            raise DataError(
                f"{self.estimator_name}: no logged action has positive probability under the "
                f"evaluation policy, the estimate is undefined",
                field="action_dist",
            )
        return num, den

    def estimate_policy_value(
        self,
        *,
        action_dist: np.ndarray,
        reward: np.ndarray | None = None,
        action: np.ndarray | None = None,
        pscore: np.ndarray | None = None,
        estimated_rewards: np.ndarray | None = None,
    ) -> float:
        """Estimated value of the evaluation policy (expected reward per round).

        Args:
            action_dist: (n, n_actions) evaluation policy ``pi_e(a | x_i)``.
            reward: (n,) logged rewards.
            action: (n,) logged action indices.
            pscore: (n,) logging propensities ``pi_b(a_i | x_i)`` in (0, 1].
            estimated_rewards: (n, n_actions) reward model ``q_hat(x_i, a)``.

        Arguments an estimator does not use are ignored (not validated).

        Raises:
            DataError: a needed array is missing or invalid (see :func:`check_logged_bandit`),
                or SNIPS has zero total importance weight (no logged round is supported by
                the evaluation policy).
        """
        num, den = self._prepare(reward, action, pscore, action_dist, estimated_rewards)
        if den is None:
            return float(num.mean())
        return float(num.sum() / den.sum())

    def estimate_interval(
        self,
        *,
        action_dist: np.ndarray,
        reward: np.ndarray | None = None,
        action: np.ndarray | None = None,
        pscore: np.ndarray | None = None,
        estimated_rewards: np.ndarray | None = None,
        alpha: float = 0.05,
        n_bootstrap: int = DEFAULT_N_BOOTSTRAP,
        random_state: int | np.random.Generator | None = 0,
    ) -> Interval:
        """The estimate with a percentile bootstrap interval over rounds.

        Args:
            action_dist, reward, action, pscore, estimated_rewards: as for
                :meth:`estimate_policy_value`.
            alpha: 1 - coverage level (0.05: a 95 % interval).
            n_bootstrap: number of resamples of the n rounds.
            random_state: seed or ``numpy.random.Generator`` (same seed, same interval).

        Raises:
            DataError: as :meth:`estimate_policy_value`.
            ConfigError: ``alpha`` outside (0, 1) or ``n_bootstrap < 1``.
        """
        _check_bootstrap_args(alpha, n_bootstrap)
        num, den = self._prepare(reward, action, pscore, action_dist, estimated_rewards)
        return bootstrap_interval(num, weights=den, alpha=alpha, n_bootstrap=n_bootstrap, random_state=random_state)


def _importance_weights(action: np.ndarray, pscore: np.ndarray, action_dist: np.ndarray) -> np.ndarray:
    return action_dist[np.arange(action.shape[0]), action] / pscore


@dataclass(frozen=True)
class DirectMethod(OffPolicyEstimator):
    """Direct method: ``V = 1/n sum_i sum_a pi_e(a | x_i) q_hat(x_i, a)``.

    Needs ``action_dist`` and ``estimated_rewards`` (n, n_actions). Unbiased only when the
    reward model is; its bootstrap interval covers the context noise, not the model's error.
    Reference: Beygelzimer and Langford 2009; Dudik, Langford and Li 2011 (section 2).
    """

    estimator_name: ClassVar[str] = "dm"
    needs: ClassVar[tuple[str, ...]] = ("estimated_rewards",)

    def _terms(self, reward, action, pscore, action_dist, estimated_rewards):
        return (action_dist * estimated_rewards).sum(axis=1), None


@dataclass(frozen=True)
class InverseProbabilityScoring(OffPolicyEstimator):
    """Inverse propensity scoring: ``V = 1/n sum_i pi_e(a_i | x_i) / p_i * r_i``.

    Needs ``reward``, ``action``, ``pscore`` and ``action_dist``. Unbiased when ``p_i`` are
    the true logging probabilities and the logging policy gives every action the evaluation
    policy takes a positive probability. Reference: Horvitz and Thompson 1952; Dudik,
    Langford and Li 2011 (section 2).
    """

    estimator_name: ClassVar[str] = "ips"
    needs: ClassVar[tuple[str, ...]] = ("reward", "action", "pscore")

    def _terms(self, reward, action, pscore, action_dist, estimated_rewards):
        return _importance_weights(action, pscore, action_dist) * reward, None


@dataclass(frozen=True)
class SelfNormalizedIPS(OffPolicyEstimator):
    """Self-normalised IPS: ``V = sum_i w_i r_i / sum_i w_i`` with ``w_i = pi_e(a_i|x_i) / p_i``.

    Needs ``reward``, ``action``, ``pscore`` and ``action_dist``. Consistent, with a small
    bias and lower variance than IPS; invariant to a constant shift of the rewards.
    Undefined (raises :class:`DataError`) when every weight is 0.
    Reference: Swaminathan and Joachims, The Self-Normalized Estimator for Counterfactual
    Learning, NeurIPS 2015.
    """

    estimator_name: ClassVar[str] = "snips"
    needs: ClassVar[tuple[str, ...]] = ("reward", "action", "pscore")

    def _terms(self, reward, action, pscore, action_dist, estimated_rewards):
        w = _importance_weights(action, pscore, action_dist)
        return w * reward, w


@dataclass(frozen=True)
class DoublyRobust(OffPolicyEstimator):
    """Doubly robust: ``V = 1/n sum_i [sum_a pi_e(a|x_i) q_hat(x_i, a) + w_i (r_i - q_hat(x_i, a_i))]``.

    Needs all five inputs. Unbiased when either the propensities or the reward model are
    correct. Reference: Dudik, Langford and Li, Doubly Robust Policy Evaluation and
    Learning, ICML 2011 (eq. 2).
    """

    estimator_name: ClassVar[str] = "dr"
    needs: ClassVar[tuple[str, ...]] = ("reward", "action", "pscore", "estimated_rewards")

    def _terms(self, reward, action, pscore, action_dist, estimated_rewards):
        rows = np.arange(action.shape[0])
        dm = (action_dist * estimated_rewards).sum(axis=1)
        w = _importance_weights(action, pscore, action_dist)
        return dm + w * (reward - estimated_rewards[rows, action]), None


#: The estimators by ``estimator_name``, in the order reports list them.
ESTIMATORS: Mapping[str, OffPolicyEstimator] = {
    e.estimator_name: e for e in (DirectMethod(), InverseProbabilityScoring(), SelfNormalizedIPS(), DoublyRobust())
}


def one_hot(actions: np.ndarray, n_actions: int | None = None) -> np.ndarray:
    """(n, n_actions) float64 deterministic policy from (n,) action indices (``n_actions``
    default: the 19 contract actions; 44 for the extended set, ``len(data.action_set)``).

    Raises:
        DataError: an index outside ``[0, n_actions)`` or a non-1-d input.
    """
    actions = np.asarray(actions)
    n_actions = NUM_ACTIONS if n_actions is None else n_actions
    if actions.ndim != 1:
        raise DataError(f"expected a 1-d array of action indices, got shape {actions.shape}", field="action")
    if actions.size and (actions.min() < 0 or actions.max() >= n_actions):
        raise DataError(f"action indices must be in [0, {n_actions})", field="action")
    out = np.zeros((actions.size, n_actions), dtype=np.float64)
    out[np.arange(actions.size), actions.astype(np.int64)] = 1.0
    return out


def uniform_propensities(batch_sizes: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """(n,) propensities of a grid sweep: 1 / (number of distinct actions logged at each
    row's batch size), i.e. a logging policy uniform over the configs run at that batch size.

    Raises:
        DataError: arrays of different lengths.
    """
    batch_sizes = np.asarray(batch_sizes).reshape(-1)
    actions = np.asarray(actions).reshape(-1)
    if batch_sizes.shape != actions.shape:
        raise DataError(f"batch_sizes {batch_sizes.shape} and actions {actions.shape} differ", field="batch_size")
    counts = {int(bs): len(set(actions[batch_sizes == bs].tolist())) for bs in np.unique(batch_sizes)}
    return np.array([1.0 / counts[int(bs)] for bs in batch_sizes], dtype=np.float64)


def mean_reward_model(
    train_batch_sizes: np.ndarray,
    train_actions: np.ndarray,
    train_rewards: np.ndarray,
    batch_sizes: np.ndarray,
    n_actions: int | None = None,
) -> np.ndarray:
    """A per-(batch size, action) mean reward model ``q_hat``, shape (n, n_actions).

    ``q_hat(bs, a)`` is the mean training reward of action ``a`` at batch size ``bs``; an
    action without training rows at ``bs`` gets the mean of all training rows at ``bs``; a
    batch size without training rows gets the overall training mean.

    Args:
        train_batch_sizes, train_actions, train_rewards: (m,) logged training rounds.
        batch_sizes: (n,) batch size of each round to predict for.
        n_actions: number of actions (default: the 19 contract actions; 44 for the extended
            set, ``len(data.action_set)``).

    Raises:
        DataError: empty or mismatched training arrays, or non-finite rewards.
    """
    tb = np.asarray(train_batch_sizes).reshape(-1)
    n_actions = NUM_ACTIONS if n_actions is None else n_actions
    ta = np.asarray(train_actions).reshape(-1).astype(np.int64)
    tr = np.asarray(train_rewards, dtype=np.float64).reshape(-1)
    if not (tb.shape == ta.shape == tr.shape):
        raise DataError("training batch sizes, actions and rewards have different lengths", field="reward")
    if tr.size == 0:
        raise DataError("no training rounds to fit a reward model on", field="reward")
    if not np.all(np.isfinite(tr)):
        raise DataError("training rewards contain NaN or Infinity", field="reward")
    overall = float(tr.mean())
    table: dict[int, np.ndarray] = {}
    for bs in np.unique(tb):
        at = tb == bs
        row = np.full(n_actions, float(tr[at].mean()))
        for a in np.unique(ta[at]):
            row[a] = float(tr[at & (ta == a)].mean())
        table[int(bs)] = row
    fallback = np.full(n_actions, overall)
    bs_out = np.asarray(batch_sizes).reshape(-1)
    return np.stack([table.get(int(b), fallback) for b in bs_out]) if bs_out.size else np.zeros((0, n_actions))
