"""``thompson_sampling``: Bayesian linear Thompson sampling (Agrawal & Goyal 2013,
"Thompson Sampling for Contextual Bandits with Linear Payoffs"), one Gaussian posterior
per action over the 4-float state.

Posterior of action ``a`` (ridge prior, as :mod:`specband.policies.linucb`):
``mean_a = A_a^-1 b_a``, ``cov_a = A_a^-1`` with ``A_a = lambda I + X_a^T X_a`` (the model
card stores ``cov = inv(A)``, i.e. unit noise variance).

Decisions: by the posterior mean unless ``sample=True``. The published study picked from a
single posterior draw, which with a handful of rows per action is a coin toss (its picks
were worst but one, docs/FACTS.md §6). With ``sample=True`` each :meth:`scores` call draws
``theta_a ~ N(mean_a, noise_std^2 cov_a)`` from a generator seeded by ``seed`` (the same
seed gives the same sequence of draws); ``noise_std`` defaults to the residual standard
deviation of the fit, since unit variance is far wider than a reward in [0, 1].

``ridge_lambda = 0.01`` for the reason given in :mod:`specband.policies.linucb`.

Model card file ``thompson_sampling/model.npz``: ``mean`` (19, 4), ``cov`` (19, 4, 4) float64,
``actions`` (19, 3) int64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specband.contract.actions import NUM_ACTIONS
from specband.core.errors import ConfigError
from specband.core.limits import is_finite_number
from specband.policies.base import STATE_DIM, PolicyConfig, RidgeNpzPolicy, as_states, check_number
from specband.policies.linucb import ridge_per_action
from specband.sweeps.dataset import TrainingData

__all__ = ["POLICY", "ThompsonSampling", "ThompsonSamplingConfig"]

_STREAM_SAMPLE = 7
_MIN_NOISE_STD = 1e-3


@dataclass(frozen=True)
class ThompsonSamplingConfig(PolicyConfig):
    """Settings of :class:`ThompsonSampling`.

    Attributes:
        ridge_lambda: prior precision; > 0.
        sample: decide from a posterior draw instead of the posterior mean.
        noise_std: reward noise standard deviation scaling the stored covariance when
            sampling; ``None`` = the residual standard deviation of the fit.
    """

    ridge_lambda: float = 0.01
    sample: bool = False
    noise_std: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_number("thompson_sampling", "ridge_lambda", self.ridge_lambda, low=0.0, low_open=True)
        check_number("thompson_sampling", "noise_std", self.noise_std, low=0.0, low_open=True, allow_none=True)
        if not isinstance(self.sample, bool):
            raise ConfigError(f"thompson_sampling 'sample' must be true or false, got {self.sample!r}")


class ThompsonSampling(RidgeNpzPolicy):
    """Linear Thompson sampling, deciding by the posterior mean by default; saved and
    loaded as ``thompson_sampling/model.npz`` (``mean``, ``cov``, ``actions``) by
    :class:`~specband.policies.base.RidgeNpzPolicy` (loading restarts the draw sequence
    from the seed).

    Attributes:
        mean: (19, 4) posterior means.
        cov: (19, 4, 4) ``inv(A)`` per action.
        noise_std: the standard deviation used when sampling.
    """

    name = "thompson_sampling"
    npz_keys = ("mean", "cov")
    config_class = ThompsonSamplingConfig

    def __init__(self, config: ThompsonSamplingConfig | None = None) -> None:
        super().__init__(config)
        self.mean = np.zeros((NUM_ACTIONS, STATE_DIM))
        self.cov = np.tile(np.eye(STATE_DIM), (NUM_ACTIONS, 1, 1))
        self.noise_std = 1.0
        self._reset_rng()

    def _reset_rng(self) -> None:
        self._rng = np.random.default_rng(np.random.SeedSequence([self.config.seed, _STREAM_SAMPLE]))

    def fit(self, data: TrainingData) -> ThompsonSampling:
        """Per-action ridge posterior; the noise scale from the residuals.

        Raises:
            DataError: no rows.
        """
        self._check_data(data)
        theta, A, _ = ridge_per_action(data, self.config.ridge_lambda)
        self.mean = theta
        self.cov = np.linalg.inv(A)
        if self.config.noise_std is not None:
            self.noise_std = float(self.config.noise_std)
        else:
            pred = np.einsum("ni,ni->n", np.asarray(data.states, dtype=np.float64), theta[data.actions])
            resid = np.asarray(data.rewards, dtype=np.float64) - pred
            self.noise_std = max(_MIN_NOISE_STD, float(np.sqrt(np.mean(resid**2))))
        self.fit_info = {"rows": len(data), "noise_std": self.noise_std}
        self._reset_rng()
        self._fitted = True
        return self

    def scores(self, states: np.ndarray) -> np.ndarray:
        """Posterior-mean rewards (or, with ``sample=True``, one seeded posterior draw per
        call, shared by the states), shape (n, 19) (or (19,))."""
        self._require_fitted()
        x, single = as_states(states)
        theta = self.mean
        if self.config.sample:
            z = self._rng.standard_normal((NUM_ACTIONS, STATE_DIM))
            chol = np.linalg.cholesky(self.cov + 1e-12 * np.eye(STATE_DIM))
            theta = self.mean + self.noise_std * np.einsum("aij,aj->ai", chol, z)
        out = x @ theta.T
        return out[0] if single else out

    def ridge_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``mean`` (19, 4) and ``cov`` (19, 4, 4)."""
        return self.mean, self.cov

    def _restore(self, vector: np.ndarray, matrix: np.ndarray) -> None:
        """The posterior from the file; the noise scale from the config, else the sidecar,
        else 1 (the model card's convention: ``cov = inv(A)``, unit noise); the draw
        sequence restarts from the seed."""
        self.mean, self.cov = vector, matrix
        stored = self.fit_info.get("noise_std")
        if self.config.noise_std is not None:
            self.noise_std = float(self.config.noise_std)
        elif is_finite_number(stored) and stored > 0:
            self.noise_std = float(stored)
        else:
            self.noise_std = 1.0
        self._reset_rng()


POLICY = ThompsonSampling
