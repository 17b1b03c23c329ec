"""``doubly_robust``: a direct reward model with the doubly robust correction (Dudik,
Langford, Li 2011, "Doubly Robust Policy Evaluation and Learning").

Direct model (DM): scikit-learn ``LinearRegression`` of reward on ``[state(4),
action_idx / 19]``. The doubly robust value of always playing action ``a`` at batch size
``bs`` is

    V(a | bs) = 1/n_bs * sum_{i at bs} [ DM(x_i, a) + 1{a_i = a} / p_i * (r_i - DM(x_i, a_i)) ]

with ``p_i`` the logging propensity of row i (uniform over the configs run at that batch
size for a grid sweep, or the file's ``propensity`` column). The score of ``a`` in state
``x`` is ``DM(x, a) + c_bs(a)``, the direct model plus the IPS correction term
``c_bs(a) = 1/n_bs * sum_{i at bs, a_i = a} (r_i - DM(x_i, a)) / p_i`` of the state's
nearest measured batch size.

Model card file ``doubly_robust/model.joblib``: the ``LinearRegression`` only; the card says
the correction is recomputed from the raw sweep at pick time. specband also keeps it in the
sidecar ``doubly_robust/specband.json`` (``ips_correction``: batch size -> 19 floats) so a
folder is self-contained; a folder without it loads with :meth:`DoublyRobust.load`'s
``data`` (the raw sweep's training data) or, lacking that, as the direct model alone
(``correction_source == "none"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specband.contract.actions import NUM_ACTIONS
from specband.core.errors import ArtifactError
from specband.core.limits import is_finite_number
from specband.policies.base import Policy, PolicyConfig, as_states, batch_size_of, nearest_batch_size
from specband.policies.gbt import (
    action_features,
    fit_reward_model,
    load_joblib,
    predict_per_action,
    write_model_files,
)
from specband.sweeps.dataset import TrainingData

__all__ = ["POLICY", "DoublyRobust", "DoublyRobustConfig", "ips_correction"]


@dataclass(frozen=True)
class DoublyRobustConfig(PolicyConfig):
    """The doubly robust policy has no settings besides the seed (it is deterministic)."""


def ips_correction(model: Any, data: TrainingData) -> dict[int, np.ndarray]:
    """The IPS correction term of every batch size (see the module docstring).

    Args:
        model: the fitted direct model (``predict`` on ``[state, action/19]``).
        data: the logged rows with their propensities.

    Returns:
        batch size -> (19,) float64 correction (0 for actions without rows there).
    """
    x = np.asarray(data.states, dtype=np.float64)
    resid = np.asarray(data.rewards, dtype=np.float64) - model.predict(action_features(x, data.actions))
    weighted = resid / np.asarray(data.propensities, dtype=np.float64)
    out: dict[int, np.ndarray] = {}
    for bs in sorted(int(b) for b in np.unique(data.batch_sizes)):
        rows = data.batch_sizes == bs
        sums = np.bincount(data.actions[rows], weights=weighted[rows], minlength=NUM_ACTIONS)
        out[bs] = sums / int(rows.sum())
    return out


class DoublyRobust(Policy):
    """Doubly robust direct model (see the module docstring).

    Attributes:
        model: the fitted ``sklearn.linear_model.LinearRegression``.
        correction: batch size -> (19,) IPS correction term.
        correction_source: ``"fit"``, ``"sidecar"``, ``"data"`` or ``"none"``.
    """

    name = "doubly_robust"
    config_class = DoublyRobustConfig

    def __init__(self, config: DoublyRobustConfig | None = None) -> None:
        super().__init__(config)
        self.model: Any = None
        self.correction: dict[int, np.ndarray] = {}
        self.correction_source = "none"

    def fit(self, data: TrainingData) -> DoublyRobust:
        """Fit the direct model and compute the IPS correction per batch size.

        Raises:
            DataError: no rows.
        """
        from sklearn.linear_model import LinearRegression

        self._check_data(data)
        self.model = fit_reward_model(LinearRegression(), data)
        self.correction = ips_correction(self.model, data)
        self.correction_source = "fit"
        self.fit_info = {"rows": len(data)}
        self._fitted = True
        return self

    def scores(self, states: np.ndarray) -> np.ndarray:
        """``DM(x, a) + c_bs(a)``, shape (n, 19) (or (19,))."""
        self._require_fitted()
        x, single = as_states(states)
        out = predict_per_action(self.model, x)
        if self.correction:
            for i, bs in enumerate(batch_size_of(x)):
                out[i] += self.correction[nearest_batch_size(int(bs), self.correction)]
        return out[0] if single else out

    def save(self, directory: str | Path) -> Path:
        """Write ``doubly_robust/model.joblib`` and the sidecar with the IPS correction.

        Raises:
            ArtifactError: not fitted, or the file cannot be written.
        """
        self._require_fitted()
        path = write_model_files(self.artifact_path(directory), self.model)
        self._write_sidecar(
            directory,
            {
                "ips_correction": {str(bs): [float(v) for v in c] for bs, c in sorted(self.correction.items())},
                "propensity": "logged propensity per row (uniform over the configs run at that batch size "
                "unless the sweep had a propensity column)",
            },
        )
        return path

    @classmethod
    def load(
        cls, directory: str | Path, data: TrainingData | None = None, *, trust_pickle: bool = False
    ) -> DoublyRobust:
        """Read ``doubly_robust/model.joblib``; the correction comes from ``data`` when
        given (recomputed from the raw sweep, the model card's recipe), else from the
        sidecar, else there is none (direct model only). The model comes from
        ``model.skops`` when present, else from ``model.joblib`` when specband wrote it or
        ``trust_pickle`` is True.

        Raises:
            ArtifactError: see :func:`specband.policies.gbt.load_joblib`; a malformed
                ``ips_correction`` in the sidecar.
        """
        model = load_joblib(
            Path(directory) / cls.name / cls.artifact_file, "LinearRegression", trust_pickle=trust_pickle
        )
        policy, sidecar = cls._from_sidecar(directory)
        policy.model = model
        if data is not None:
            policy.correction = ips_correction(model, data)
            policy.correction_source = "data"
        elif sidecar is not None and "ips_correction" in sidecar:
            policy.correction = _parse_correction(sidecar["ips_correction"], Path(directory) / cls.name)
            policy.correction_source = "sidecar"
        policy._fitted = True
        return policy


def _parse_correction(value: Any, where: Path) -> dict[int, np.ndarray]:
    if not isinstance(value, dict):
        raise ArtifactError(f"{where}/specband.json: 'ips_correction' must map batch sizes to 19 numbers")
    out: dict[int, np.ndarray] = {}
    for key, row in value.items():
        if not str(key).isdigit() or int(key) <= 0:
            raise ArtifactError(f"{where}/specband.json: 'ips_correction' key {key!r} is not a batch size")
        if not isinstance(row, list) or len(row) != NUM_ACTIONS or not all(is_finite_number(v) for v in row):
            raise ArtifactError(
                f"{where}/specband.json: 'ips_correction' at batch size {key} must be {NUM_ACTIONS} finite numbers"
            )
        out[int(key)] = np.array(row, dtype=np.float64)
    return out


POLICY = DoublyRobust
