"""The common interface of the eight policies.

A policy is a contextual-bandit decision rule over the 19 contract actions:

* ``fit(data)`` learns from logged :class:`~specband.sweeps.dataset.TrainingData`;
* ``scores(states)`` returns an estimated reward for every action, shape (n, 19);
* ``act(state, allowed)`` picks the best-scored allowed action (ties go to the lower index);
* ``save(directory)`` writes the model card's file ``<directory>/<name>/<artifact_file>``;
* ``load(directory)`` reads it back (also files written by the published study).

Each algorithm is one module with a frozen config dataclass (the docs/FACTS.md §5 defaults, or a
documented data-relative default where the published one collapsed) and a thin class;
:data:`specband.policies.registry.REGISTRY` lists them (name, module, files, loading recipe)
and gives each class its ``artifact_file`` and ``needs_torch``. :class:`RidgeNpzPolicy` holds
the file I/O of the two per-action ridge models (``linucb``, ``thompson_sampling``).

What the model card's file has no room for (resolved settings, fitted extras such as the
lookup table's per-action means) goes to an optional sidecar ``<name>/specband.json``;
every model-card recipe ignores it and :meth:`Policy.load` works without it.
"""

from __future__ import annotations

import zipfile
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import numpy.typing as npt

from specband.contract.actions import ACTIONS, CONTRACT_SET, NUM_ACTIONS, ActionSet
from specband.core.batchlist import nearest_batch_size
from specband.core.errors import ArtifactError, ConfigError, DataError
from specband.core.limits import MAX_SEED, is_finite_number, is_int
from specband.files.safeload import check_npz_arrays
from specband.policies.files import SIDECAR_FILE, read_json, write_bytes_atomic, write_json_atomic
from specband.policies.registry import REGISTRY
from specband.sweeps.dataset import BATCH_SIZE_SCALE, TrainingData

__all__ = [
    "ACTIONS_ARRAY",
    "SIDECAR_FILE",
    "STATE_DIM",
    "Policy",
    "PolicyConfig",
    "RidgeNpzPolicy",
    "as_states",
    "batch_size_of",
    "check_actions_entry",
    "check_int",
    "check_number",
    "load_npz",
    "load_ridge_npz",
    "masked_argmax",
    "mean_reward_by_cell",
    "nearest_batch_size",
    "read_json",
    "write_bytes_atomic",
    "write_json_atomic",
    "write_npz_atomic",
]

#: (19, 3) int64 array of the contract actions, as stored in the ``actions`` entry of the
#: published ``.npz`` and BCQ files.
ACTIONS_ARRAY: np.ndarray = np.array(ACTIONS, dtype=np.int64)
#: Features of a decision state (:func:`specband.sweeps.dataset.state_vector`): batch size,
#: temperature, memory and utilisation, scaled.
STATE_DIM = 4

_C = TypeVar("_C", bound="PolicyConfig")
_P = TypeVar("_P", bound="Policy")


@dataclass(frozen=True)
class PolicyConfig:
    """Settings every policy has.

    Attributes:
        seed: random seed; the same seed gives the same artifacts and picks.
    """

    seed: int = 0

    def __post_init__(self) -> None:
        if not is_int(self.seed) or not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(f"seed must be an integer in [0, {MAX_SEED}], got {self.seed!r}")

    @classmethod
    def build(cls: type[_C], seed: int = 0, **overrides: Any) -> _C:
        """The config with ``seed`` and ``overrides`` on top of the defaults.

        Raises:
            ConfigError: an unknown field or a value out of range.
        """
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ConfigError(
                f"{cls.__name__}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(names - {'seed'}))}"
            )
        try:
            return cls(seed=seed, **overrides)
        except TypeError as exc:  # a wrong type that the dataclass could not take
            raise ConfigError(f"{cls.__name__}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict."""
        return asdict(self)


def check_number(
    owner: str,
    name: str,
    value: Any,
    *,
    low: float | None = None,
    low_open: bool = False,
    high: float | None = None,
    allow_none: bool = False,
) -> None:
    """Check one config value: a finite number in range (``None`` too if ``allow_none``).

    Raises:
        ConfigError: naming ``owner`` and ``name``.
    """
    if value is None and allow_none:
        return
    if not is_finite_number(value):
        raise ConfigError(f"{owner} '{name}' must be a finite number, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        raise ConfigError(f"{owner} '{name}' must be {'>' if low_open else '>='} {low}, got {value}")
    if high is not None and value > high:
        raise ConfigError(f"{owner} '{name}' must be <= {high}, got {value}")


def check_int(owner: str, name: str, value: Any, *, low: int = 1) -> None:
    """Check one config value: an integer (not a bool) >= ``low``.

    Raises:
        ConfigError: naming ``owner`` and ``name``.
    """
    if not is_int(value) or value < low:
        raise ConfigError(f"{owner} '{name}' must be an integer >= {low}, got {value!r}")


def as_states(states: npt.ArrayLike) -> tuple[np.ndarray, bool]:
    """``states`` as a (n, 4) float64 array, and whether a single (4,) state was given.

    Raises:
        ConfigError: not 4 features per state, or NaN/Infinity.
    """
    arr = np.asarray(states, dtype=np.float64)
    single = arr.ndim == 1
    arr = arr.reshape(1, -1) if single else arr
    if arr.ndim != 2 or arr.shape[1] != 4:
        raise ConfigError(f"a state has 4 features [bs/8, temp/100, mem/8192, util/100], got shape {np.shape(states)}")
    if not np.isfinite(arr).all():
        raise ConfigError("a state holds NaN or Infinity")
    return arr, single


def batch_size_of(states: np.ndarray) -> np.ndarray:
    """Batch size encoded in each state (``round(state[0] * 8)``), shape (n,) int64."""
    arr, _ = as_states(states)
    return np.rint(arr[:, 0] * BATCH_SIZE_SCALE).astype(np.int64)


def write_npz_atomic(path: str | Path, arrays: Mapping[str, np.ndarray]) -> Path:
    """An uncompressed ``.npz`` readable by ``np.load``, byte-identical for identical arrays
    (fixed zip timestamps, unlike ``np.savez``), written via a temporary file and a rename.

    Raises:
        ArtifactError: the file cannot be written.
    """
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for key, value in arrays.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            with zf.open(info, "w") as fh:
                np.lib.format.write_array(fh, np.asarray(value), allow_pickle=False)
    return write_bytes_atomic(path, buf.getvalue())


def check_actions_entry(value: Any, what: str) -> None:
    """Check that a stored ``actions`` entry is the (19, 3) contract in contract order.

    Raises:
        ArtifactError: a different shape or order (index i must mean ``ACTIONS[i]``).
    """
    try:
        arr = np.asarray(value.detach().cpu().numpy() if hasattr(value, "detach") else value)
    except Exception:
        raise ArtifactError(f"{what}: 'actions' is not an array of triples") from None
    if arr.shape != (NUM_ACTIONS, 3):
        raise ArtifactError(f"{what}: 'actions' must have shape ({NUM_ACTIONS}, 3), got {arr.shape}")
    if not np.array_equal(arr.astype(np.int64), ACTIONS_ARRAY):
        raise ArtifactError(
            f"{what}: 'actions' is not the 19-action contract in contract order (see `specband actions`)"
        )


def load_npz(path: Path, keys: tuple[str, ...], shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Read an ``.npz`` without pickles and check the model card's keys and shapes.

    Raises:
        ArtifactError: missing file, unreadable, a missing key, a wrong shape, NaN, or an
            ``actions`` entry that is not the contract.
    """
    if not path.is_file():
        raise ArtifactError(f"{path}: no such file")

    check_npz_arrays(path)  # declared sizes bounded before np.load allocates them
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in keys if k not in npz.files]
            if missing:
                raise ArtifactError(f"{path}: missing key(s) {missing}; has {sorted(npz.files)}")
            arrays = {k: np.array(npz[k]) for k in keys}
    except ArtifactError:
        raise
    except Exception as exc:
        raise ArtifactError(f"{path}: not a readable .npz file ({exc})") from None
    for k, shape in shapes.items():
        if arrays[k].shape != shape:
            raise ArtifactError(f"{path}: '{k}' must have shape {shape}, got {arrays[k].shape}")
        if k != "actions":
            if not np.issubdtype(arrays[k].dtype, np.number):
                raise ArtifactError(f"{path}: '{k}' must be numeric, got dtype {arrays[k].dtype}")
            arrays[k] = arrays[k].astype(np.float64)
            if not np.isfinite(arrays[k]).all():
                raise ArtifactError(f"{path}: '{k}' holds NaN or Infinity")
    check_actions_entry(arrays["actions"], str(path))
    return arrays


def load_ridge_npz(path: Path, vector_key: str, matrix_key: str) -> tuple[np.ndarray, np.ndarray]:
    """Read a per-action ridge model file (``linucb`` and ``thompson_sampling`` share the
    layout): ``vector_key`` (19, 4), ``matrix_key`` (19, 4, 4) and the contract ``actions``
    (19, 3).

    Returns:
        the (19, 4) and (19, 4, 4) arrays as float64.

    Raises:
        ArtifactError: see :func:`load_npz`.
    """
    arrays = load_npz(
        path,
        (vector_key, matrix_key, "actions"),
        {
            vector_key: (NUM_ACTIONS, STATE_DIM),
            matrix_key: (NUM_ACTIONS, STATE_DIM, STATE_DIM),
            "actions": (NUM_ACTIONS, 3),
        },
    )
    return arrays[vector_key], arrays[matrix_key]


def mean_reward_by_cell(data: TrainingData) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Observed mean reward and row count of every (batch size, action) cell.

    Returns:
        batch size -> ((19,) float64 mean reward, NaN where the action has no row there;
        (19,) int64 row counts), as wide as ``data.action_set`` (44 for the extended set).
    """
    n = len(data.action_set)
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for bs in sorted(int(b) for b in np.unique(data.batch_sizes)):
        rows = data.batch_sizes == bs
        counts = np.bincount(data.actions[rows], minlength=n).astype(np.int64)
        sums = np.bincount(data.actions[rows], weights=data.rewards[rows], minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        out[bs] = (means, counts)
    return out


def masked_argmax(scores: np.ndarray, allowed: np.ndarray | None, action_set: ActionSet = CONTRACT_SET) -> int:
    """Index of the highest score among allowed actions; ties go to the lowest index.

    Args:
        scores: (19,) estimated rewards (one per action of ``action_set``).
        allowed: (19,) bool mask, or ``None`` for all actions.
        action_set: the set the scores are over (the contract's 19 by default; 44 for the
            extended set).

    NaN scores count as -inf; when every allowed action scores -inf the lowest allowed
    index is returned (a pick is never outside ``allowed``).

    Raises:
        ConfigError: wrong shapes, or no action is allowed.
    """
    n = len(action_set)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if scores.shape != (n,):
        raise ConfigError(f"expected {n} action scores, got shape {scores.shape}")
    if allowed is None:
        allowed = np.ones(n, dtype=bool)
    allowed = np.asarray(allowed, dtype=bool).reshape(-1)
    if allowed.shape != (n,):
        raise ConfigError(f"expected a {n}-action mask, got shape {allowed.shape}")
    if not allowed.any():
        raise ConfigError("no action is allowed at this batch size: there is no successful data to pick from")
    masked = np.where(allowed, np.nan_to_num(scores, nan=-np.inf, posinf=np.inf, neginf=-np.inf), -np.inf)
    best = masked.max()
    if best == -np.inf:  # no allowed action has a finite score: the lowest allowed index
        return int(np.flatnonzero(allowed)[0])
    return int(np.flatnonzero(masked == best)[0])


class Policy(ABC):
    """Base class of the eight policies (see the module docstring).

    Class attributes:
        name: the model card's folder name, e.g. ``"mlp_bandit"``.
        artifact_file: the file inside that folder, e.g. ``"policy.pth"``; for a class whose
            ``name`` is in :data:`~specband.policies.registry.REGISTRY`, set from its entry.
        needs_torch: whether saving or loading imports torch (fitting never does); set from
            the registry entry like ``artifact_file``.
        config_class: the policy's frozen config dataclass (a :class:`PolicyConfig`).

    Attributes:
        config: the policy's settings.
        fit_info: what fitting resolved from the data (e.g. a CQL weight set against the
            reward spread), JSON-ready; saved in the sidecar ``<name>/specband.json``.
        action_set: the set the policy's action indices are into, and the width of its
            scores: the 19 contract actions, unless a policy that can take the extended set
            (``lookup_table``) was fitted on such data or loaded from such a folder.
    """

    name: ClassVar[str]
    artifact_file: ClassVar[str]
    needs_torch: ClassVar[bool] = False
    config_class: ClassVar[type[PolicyConfig]] = PolicyConfig

    config: Any

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give a registered algorithm's class the ``artifact_file`` and ``needs_torch`` of its
        :class:`~specband.policies.registry.PolicyEntry` (the registry is their one source)."""
        super().__init_subclass__(**kwargs)
        entry = REGISTRY.get(cls.__dict__.get("name", ""))
        if entry is not None:
            cls.artifact_file = entry.artifact_file
            cls.needs_torch = entry.needs_torch

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config if config is not None else self.config_class()
        self.fit_info: dict[str, Any] = {}
        self.action_set: ActionSet = CONTRACT_SET
        self._fitted = False

    @classmethod
    def from_config(cls, seed: int = 0, **overrides: Any) -> Policy:
        """A fresh, unfitted policy with the default config, ``seed`` and ``overrides``.

        Raises:
            ConfigError: an unknown or out-of-range config field.
        """
        return cls(cls.config_class.build(seed=seed, **overrides))

    @property
    def fitted(self) -> bool:
        """Whether the policy was fitted or loaded."""
        return self._fitted

    def _require_fitted(self) -> None:
        if not self._fitted:
            raise ArtifactError(f"{self.name}: the policy is not fitted (call fit or load first)")

    @staticmethod
    def _check_data(data: TrainingData) -> None:

        if len(data) == 0:
            raise DataError("no successful rows to train on")

    @abstractmethod
    def fit(self, data: TrainingData) -> Policy:
        """Learn from logged data; returns ``self``.

        Raises:
            DataError: no rows to learn from.
        """

    @abstractmethod
    def scores(self, states: np.ndarray) -> np.ndarray:
        """Estimated reward of each action for each state.

        Args:
            states: (n, 4) or (4,) float states (see :func:`specband.sweeps.dataset.state_vector`).

        Returns:
            (n, 19) float64 (or (19,) for a single state). NaN or -inf marks an action
            the policy has no estimate for or will not pick.
        """

    def act(self, state: npt.ArrayLike, allowed: np.ndarray | None = None) -> int:
        """The index of the best-scored allowed action for one state (ties: lowest index).

        Args:
            state: (4,) state (an array or a sequence of 4 floats).
            allowed: (19,) bool mask of actions with data at this batch size.
        """
        arr, _ = as_states(state)
        return masked_argmax(np.asarray(self.scores(arr[:1]))[0], allowed, self.action_set)

    def artifact_path(self, directory: str | Path) -> Path:
        """``<directory>/<name>/<artifact_file>``."""
        return Path(directory) / self.name / self.artifact_file

    def sidecar_path(self, directory: str | Path) -> Path:
        """``<directory>/<name>/specband.json`` (optional extras; see :data:`SIDECAR_FILE`)."""
        return Path(directory) / self.name / SIDECAR_FILE

    def _write_sidecar(self, directory: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
        info: dict[str, Any] = {
            "algorithm": self.name,
            "config": self.config.to_dict(),
            "fit_info": self.fit_info,
        }
        if extra:
            info.update(extra)
        return write_json_atomic(self.sidecar_path(directory), info)

    @classmethod
    def _read_sidecar(cls, directory: str | Path) -> dict[str, Any] | None:
        """The sidecar as a dict, or ``None`` when absent (a folder written by another tool).

        Raises:
            ArtifactError: present but not a JSON object.
        """
        path = Path(directory) / cls.name / SIDECAR_FILE
        if not path.is_file():
            return None
        info = read_json(path)
        if not isinstance(info, dict):
            raise ArtifactError(f"{path}: expected a JSON object")
        return info

    @classmethod
    def _from_sidecar(cls: type[_P], directory: str | Path) -> tuple[_P, dict[str, Any] | None]:
        """A new, not yet fitted policy with the sidecar's config and ``fit_info`` (the
        defaults and ``{}`` when the folder has no sidecar), and the sidecar itself.

        :meth:`load` reads the model card's file first, then calls this and fills in the
        fitted parameters.

        Raises:
            ArtifactError: the sidecar is present but not a JSON object, or its config is
                invalid.
        """
        sidecar = cls._read_sidecar(directory)
        policy = cls(cls._config_from_sidecar(sidecar))
        policy.fit_info = dict((sidecar or {}).get("fit_info") or {})
        return policy, sidecar

    @classmethod
    def _config_from_sidecar(cls, info: Mapping[str, Any] | None) -> PolicyConfig:
        """The config stored in a sidecar (unknown keys ignored), else the defaults."""
        if not info or not isinstance(info.get("config"), dict):
            return cls.config_class()
        names = {f.name for f in fields(cls.config_class)}
        stored = {k: v for k, v in info["config"].items() if k in names}
        for f in fields(cls.config_class):  # JSON turns tuples into lists
            if isinstance(getattr(cls.config_class(), f.name), tuple) and isinstance(stored.get(f.name), list):
                stored[f.name] = tuple(stored[f.name])
        seed = stored.pop("seed", 0)
        try:
            return cls.config_class.build(seed=seed, **stored)
        except ConfigError as exc:
            raise ArtifactError(f"{cls.name}/{SIDECAR_FILE}: {exc}") from None

    @abstractmethod
    def save(self, directory: str | Path) -> Path:
        """Write the model card's file (and the sidecar) under ``directory``; returns the
        model card file's path.

        Raises:
            ArtifactError: the policy is not fitted, or the file cannot be written.
        """

    @classmethod
    @abstractmethod
    def load(cls, directory: str | Path) -> Policy:
        """Read ``<directory>/<name>/<artifact_file>`` (and the sidecar when present).

        Raises:
            ArtifactError: missing file, wrong keys, shapes or types.
        """


_R = TypeVar("_R", bound="RidgeNpzPolicy")


class RidgeNpzPolicy(Policy):
    """Base of the per-action ridge models whose model card file is one ``.npz`` of a
    (19, 4) per-action vector, a (19, 4, 4) per-action matrix and the contract ``actions``
    (19, 3), in that order: ``linucb`` (``theta``, ``A``) and ``thompson_sampling``
    (``mean``, ``cov``).

    Class attributes:
        npz_keys: the keys of the vector and the matrix in the file.
    """

    npz_keys: ClassVar[tuple[str, str]]

    @abstractmethod
    def ridge_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The fitted (19, 4) vector and (19, 4, 4) matrix stored under :attr:`npz_keys`."""

    @abstractmethod
    def _restore(self, vector: np.ndarray, matrix: np.ndarray) -> None:
        """Take the arrays read from the file (float64, shapes checked) into a policy built
        from the sidecar (config and ``fit_info`` already set)."""

    def save(self, directory: str | Path) -> Path:
        """Write ``<name>/<artifact_file>`` (the two arrays under :attr:`npz_keys`, then
        ``actions``) and the sidecar.

        Raises:
            ArtifactError: not fitted, or the file cannot be written.
        """
        self._require_fitted()
        vector_key, matrix_key = self.npz_keys
        vector, matrix = self.ridge_arrays()
        path = write_npz_atomic(
            self.artifact_path(directory), {vector_key: vector, matrix_key: matrix, "actions": ACTIONS_ARRAY}
        )
        self._write_sidecar(directory)
        return path

    @classmethod
    def load(cls: type[_R], directory: str | Path) -> _R:
        """Read ``<name>/<artifact_file>`` (see :func:`load_ridge_npz`), then the sidecar.

        Raises:
            ArtifactError: missing file, missing keys, wrong shapes, or ``actions`` that
                are not the contract; a malformed sidecar.
        """
        vector, matrix = load_ridge_npz(Path(directory) / cls.name / cls.artifact_file, *cls.npz_keys)
        policy, _ = cls._from_sidecar(directory)
        policy._restore(vector, matrix)
        policy._fitted = True
        return policy
