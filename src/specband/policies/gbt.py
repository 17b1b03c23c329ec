"""``gbt``: a gradient-boosted regression-tree reward model (Friedman 2001, "Greedy
Function Approximation: A Gradient Boosting Machine"; scikit-learn's
``GradientBoostingRegressor``) over ``[state(4), action_idx / 19]``; the pick is the
allowed action with the highest predicted reward.

Model card file ``gbt/model.joblib``: the fitted ``GradientBoostingRegressor(n_estimators=100,
max_depth=3)`` (``joblib.load(...)``; features ``[state, action_idx/19]``). ``random_state``
is the seed, so the same seed gives the same trees.

Loading a joblib file runs pickle: specband reads the skops copy it writes beside it, and
unpickles only files it wrote or the user trusts (:mod:`specband.files.safeload`).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specband.contract.actions import NUM_ACTIONS
from specband.core.errors import ArtifactError
from specband.files.safeload import SKOPS_SUFFIX, check_sklearn_structure, load_sklearn_model, skops_bytes
from specband.policies.base import Policy, PolicyConfig, as_states, check_int, check_number, write_bytes_atomic
from specband.sweeps.dataset import TrainingData

__all__ = [
    "GBT",
    "POLICY",
    "GBTConfig",
    "action_features",
    "fit_reward_model",
    "load_joblib",
    "predict_per_action",
    "write_joblib_atomic",
    "write_model_files",
]

#: Divisor of the action index in the model features (model card: ``action_idx/19``).
ACTION_SCALE = float(NUM_ACTIONS)


def action_features(states: np.ndarray, actions: np.ndarray | None = None) -> np.ndarray:
    """Model inputs ``[state(4), action_idx / 19]``.

    Args:
        states: (n, 4) states.
        actions: (n,) action indices; ``None`` pairs every state with all 19 actions.

    Returns:
        (n, 5) float64, or (n * 19, 5) with the 19 actions of state i in rows
        ``19 i .. 19 i + 18``.
    """
    x = np.asarray(states, dtype=np.float64)
    if actions is None:
        x = np.repeat(x, NUM_ACTIONS, axis=0)
        actions = np.tile(np.arange(NUM_ACTIONS), x.shape[0] // NUM_ACTIONS)
    return np.hstack([x, np.asarray(actions, dtype=np.float64)[:, None] / ACTION_SCALE])


def fit_reward_model(model: Any, data: TrainingData) -> Any:
    """Fit a scikit-learn regressor on the logged rows, ``[state, action/19] -> reward``
    (the reward model of ``gbt`` and the direct model of ``doubly_robust``).

    Args:
        model: an unfitted regressor with ``fit(X (n, 5), y (n,))``.
        data: the logged rows.

    Returns:
        ``model``, fitted.
    """
    model.fit(action_features(data.states, data.actions), np.asarray(data.rewards, dtype=np.float64))
    return model


def predict_per_action(model: Any, states: np.ndarray) -> np.ndarray:
    """A fitted reward model's prediction for every (state, action) pair.

    Args:
        model: a regressor fitted on :func:`action_features`.
        states: (n, 4) float64 states.

    Returns:
        (n, 19) float64 predicted rewards.
    """
    return model.predict(action_features(states)).reshape(states.shape[0], NUM_ACTIONS)


def write_joblib_atomic(path: Path, model: Any) -> Path:
    """``joblib.dump`` into memory, then a temporary file and a rename.

    Raises:
        ArtifactError: the file cannot be written.
    """
    import joblib

    buf = io.BytesIO()
    joblib.dump(model, buf)
    return write_bytes_atomic(path, buf.getvalue())


def write_model_files(path: Path, model: Any) -> Path:
    """Write the model card's ``model.joblib`` at ``path`` and its pickle-free skops copy
    beside it (``model.skops``, preferred when loading; see :mod:`specband.files.safeload`).

    Raises:
        ArtifactError: a file cannot be written.
    """

    write_bytes_atomic(path.with_suffix(SKOPS_SUFFIX), skops_bytes(model))
    return write_joblib_atomic(path, model)


def load_joblib(path: Path, expected: str, n_features: int = 5, *, trust_pickle: bool = False) -> Any:
    """A scikit-learn regressor from ``path`` (``model.joblib``), checked: read from its
    skops copy when present, else unpickled only when specband wrote it (sha256 in the
    manifest) or ``trust_pickle`` (see :func:`specband.files.safeload.load_sklearn_model`).

    The fitted arrays are checked (:func:`specband.files.safeload.check_sklearn_structure`:
    tree child and feature indices in range, no cycles, finite numbers) before the model
    predicts anything, so a crafted file is one error, never a crash or a hang.

    Raises:
        ArtifactError: missing or unreadable file, no ``predict``, a class other than
            ``expected``, a feature count other than ``n_features``, or a malformed tree
            or coefficient array.
        specband.files.safeload.UntrustedPickleError: a pickle specband cannot vouch for.
    """

    model = load_sklearn_model(path, trust_pickle=trust_pickle)
    if type(model).__name__ != expected or not hasattr(model, "predict"):
        raise ArtifactError(f"{path}: expected a scikit-learn {expected}, got {type(model).__name__}")
    got = getattr(model, "n_features_in_", None)
    if got != n_features:
        raise ArtifactError(
            f"{path}: the model takes {got} features, the model card's is {n_features} ([state(4), action_idx/19])"
        )
    skops_path = path.with_suffix(SKOPS_SUFFIX)
    check_sklearn_structure(model, skops_path if skops_path.is_file() else path, n_features)
    import numpy as np

    try:  # a crafted file (unfitted, a wrong-length coef_) fails here, not at the first pick
        probe = np.asarray(model.predict(np.zeros((2, n_features))), dtype=np.float64)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ArtifactError(f"{path}: the {expected} cannot predict ({type(exc).__name__}: {first})") from None
    if probe.shape != (2,) or not np.isfinite(probe).all():
        raise ArtifactError(f"{path}: the {expected} predicts {probe.shape} values, not one finite value per row")
    return model


@dataclass(frozen=True)
class GBTConfig(PolicyConfig):
    """Settings of :class:`GBT` (model card: ``n_estimators=100, max_depth=3``).

    Attributes:
        n_estimators: boosting stages; >= 1.
        max_depth: depth of each tree; >= 1.
        learning_rate: shrinkage of each stage (scikit-learn's default 0.1); > 0.
    """

    n_estimators: int = 100
    max_depth: int = 3
    learning_rate: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("gbt", "n_estimators", self.n_estimators)
        check_int("gbt", "max_depth", self.max_depth)
        check_number("gbt", "learning_rate", self.learning_rate, low=0.0, low_open=True)


class GBT(Policy):
    """Gradient-boosted trees reward model (see the module docstring).

    Attributes:
        model: the fitted ``sklearn.ensemble.GradientBoostingRegressor``.
    """

    name = "gbt"
    config_class = GBTConfig

    def __init__(self, config: GBTConfig | None = None) -> None:
        super().__init__(config)
        self.model: Any = None

    def fit(self, data: TrainingData) -> GBT:
        """Fit the regressor on ``[state, action/19] -> reward`` of the logged rows.

        Raises:
            DataError: no rows.
        """
        from sklearn.ensemble import GradientBoostingRegressor

        self._check_data(data)
        c = self.config
        self.model = fit_reward_model(
            GradientBoostingRegressor(
                n_estimators=c.n_estimators, max_depth=c.max_depth, learning_rate=c.learning_rate, random_state=c.seed
            ),
            data,
        )
        self.fit_info = {"rows": len(data)}
        self._fitted = True
        return self

    def scores(self, states: np.ndarray) -> np.ndarray:
        """Predicted reward of each action, shape (n, 19) (or (19,))."""
        self._require_fitted()
        x, single = as_states(states)
        out = predict_per_action(self.model, x)
        return out[0] if single else out

    def save(self, directory: str | Path) -> Path:
        """Write ``gbt/model.joblib`` and the sidecar.

        Raises:
            ArtifactError: not fitted, or the file cannot be written.
        """
        self._require_fitted()
        path = write_model_files(self.artifact_path(directory), self.model)
        self._write_sidecar(directory)
        return path

    @classmethod
    def load(cls, directory: str | Path, *, trust_pickle: bool = False) -> GBT:
        """Read ``gbt/model.skops``, else ``gbt/model.joblib`` when specband wrote it or
        ``trust_pickle`` is True (unpickling runs code from the file).

        Raises:
            ArtifactError: see :func:`load_joblib`.
        """
        model = load_joblib(
            Path(directory) / cls.name / cls.artifact_file, "GradientBoostingRegressor", trust_pickle=trust_pickle
        )
        policy, _ = cls._from_sidecar(directory)
        policy.model = model
        policy._fitted = True
        return policy


POLICY = GBT
