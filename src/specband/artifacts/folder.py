"""Policy artifact folders in the model card's layout, plus specband's manifest.

Layout (docs/FACTS.md §5; every file loads with the model card's own recipe, without specband)::

    <folder>/mlp_bandit/policy.pth          QNetwork(4, 19) state_dict
    <folder>/lookup_table/model.json        {"<bs>": {"config": [s,k,d], "mean_reward": float}}
    <folder>/linucb/model.npz               theta (19,4), A (19,4,4), actions (19,3)
    <folder>/thompson_sampling/model.npz    mean (19,4), cov (19,4,4), actions (19,3)
    <folder>/gbt/model.joblib               GradientBoostingRegressor on [state, action/19]
    <folder>/doubly_robust/model.joblib     LinearRegression on [state, action/19]
    <folder>/cql/policy.pth                 QNetwork(4, 19) state_dict
    <folder>/bcq/policy.pth                 {behavior_state_dict, q_state_dict, actions}

specband adds files the recipes ignore: ``<folder>/specband.json`` (the manifest: feature
kind, seed, data file and its sha256, power limit, reward config, and per batch size the
allowed actions, the state used for picks and the observed mean rewards) and
``<folder>/<algorithm>/specband.json`` (resolved settings and fitted extras). A folder
written by another tool (no manifest) loads too, as ``contract`` features.

A folder is written whole or not at all: into a temporary folder next to the target,
renamed into place when every file is written.

This module does folder I/O, the manifest and safe loading; training is
:mod:`specband.artifacts.fit`, the report table :mod:`specband.artifacts.pick_table`, the decision state
:mod:`specband.contract.state`. It imports NumPy only inside the functions that need it, so reading a
manifest (the ``lookup_table`` path of ``specband recommend``) stays cold-fast.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specband.contract.actions import ACTION_SETS, CONTRACT_SET, ActionSet
from specband.contract.reward import RewardConfig
from specband.contract.state import FEATURE_KINDS, state_tuple
from specband.core.batchlist import nearest_batch_size
from specband.core.errors import ArtifactError, ConfigError
from specband.core.limits import (
    is_finite_number,
    is_int,
)
from specband.files.safeload import check_files_inside, resolved, verify_files
from specband.policies import ALGORITHMS, REGISTRY, policy_class, policy_entry
from specband.policies.embedded import EMBEDDED_MANIFEST
from specband.policies.files import read_json, write_bytes_atomic, write_json_atomic
from specband.sweeps.limit_table import LimitTable
from specband.sweeps.origin import ActionStats, DataOrigin

if TYPE_CHECKING:
    import numpy as np

    from specband.policies.base import Policy
    from specband.sweeps.dataset import TrainingData

__all__ = [
    "ARTIFACT_FILES",
    "MANIFEST_FILE",
    "MODEL_CARD_FILE",
    "PICKLED_ALGORITHMS",
    "DataRecord",
    "Manifest",
    "SweepRecord",
    "available_algorithms",
    "embedded_manifest",
    "file_sha256",
    "load_manifest",
    "load_policies",
    "load_policy",
    "save_artifacts",
    "validate_algorithms",
    "verify_algorithm_files",
]

#: specband's manifest file at the top of an artifact folder.
MANIFEST_FILE = "specband.json"
#: The model card (hub README with YAML front matter) that ``specband train`` writes.
MODEL_CARD_FILE = "README.md"
#: The manifest layout this specband writes and the newest it reads (``"format"`` in
#: ``specband.json``; a folder without the key is read as this one).
MANIFEST_FORMAT = 1
#: Model card file of each algorithm, relative to the artifact folder (docs/FACTS.md §5;
#: :attr:`specband.policies.registry.PolicyEntry.path`), in the model card's order.
ARTIFACT_FILES: dict[str, str] = {name: entry.path for name, entry in REGISTRY.items()}
#: Algorithms whose model card file is a pickle (joblib): loaded safely, see :mod:`specband.files.safeload`.
PICKLED_ALGORITHMS: tuple[str, ...] = tuple(name for name, entry in REGISTRY.items() if entry.pickled)


def validate_algorithms(names: Iterable[str] | None) -> list[str]:
    """Algorithm names checked against the model card's, de-duplicated, in the given order
    (``None`` or empty: all eight in the model card's order).

    Raises:
        ConfigError: an unknown name.
    """
    if not names:
        return list(ALGORITHMS)
    out: list[str] = []
    for name in names:
        policy_entry(name)  # ConfigError for an unknown name
        if name not in out:
            out.append(name)
    return out


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes.

    Raises:
        ArtifactError: the file cannot be read.
    """
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return h.hexdigest()


@dataclass(frozen=True)
class SweepRecord:
    """The sweep file a folder was trained on (part of the manifest's ``data``).

    Attributes:
        path: the file as given (a hub dataset as ``hf://...``; ``None``: rows not read from a file).
        format: the sweep's format (``published_live``, ``specband``, ...).
        sha256: the file's sha256 (``None``: not a file here).
        energy_measured: some row's power was measured on a GPU (``None``: not recorded, a
            folder written before it was).
        energy_in_rewards: the rewards count energy, measured or not (``None``: not recorded).
        provenance: the rows' provenance (:attr:`specband.sweeps.origin.DataOrigin.provenance`;
            ``None``: not recorded).
    """

    path: str | None = None
    format: str | None = None
    sha256: str | None = None
    energy_measured: bool | None = None
    energy_in_rewards: bool | None = None
    provenance: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``path``, ``format``, ``sha256``, then the others that are recorded."""
        out: dict[str, Any] = {"path": self.path, "format": self.format, "sha256": self.sha256}
        for key in ("energy_measured", "energy_in_rewards", "provenance"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@dataclass(frozen=True)
class DataRecord:
    """What a manifest records about the data a folder was trained on (its ``data``).

    Attributes:
        rows: the sweep's rows (``None``: not from a sweep).
        training_rows: the rows the policies were trained on.
        sweep: the sweep file (:class:`SweepRecord`), or ``None`` when the training rows
            came from no sweep (and for a folder written by another tool).
    """

    rows: int | None = None
    training_rows: int | None = None
    sweep: SweepRecord | None = None

    @property
    def energy_in_rewards(self) -> bool:
        """The rewards count energy (an older folder's ``energy_measured`` when it does not say)."""
        if self.sweep is None:
            return False
        if self.sweep.energy_in_rewards is not None:
            return self.sweep.energy_in_rewards
        return bool(self.sweep.energy_measured)

    def to_json(self) -> dict[str, Any]:
        """``rows``, ``training_rows`` and the sweep's keys (:meth:`SweepRecord.to_json`), flat."""
        return {
            "rows": self.rows,
            "training_rows": self.training_rows,
            **({} if self.sweep is None else self.sweep.to_json()),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> DataRecord:
        """Parse :meth:`to_json`'s object (a foreign folder's ``{}`` too); a value of the wrong
        type is read as not recorded (``None``), unknown keys are ignored."""

        def typed(key: str, kind: type | tuple[type, ...]) -> Any:
            value = obj.get(key)
            return value if isinstance(value, kind) and not (kind is int and isinstance(value, bool)) else None

        sweep = None
        if any(key in obj for key in ("path", "format", "sha256")):
            sweep = SweepRecord(
                path=typed("path", str),
                format=typed("format", str),
                sha256=typed("sha256", str),
                energy_measured=typed("energy_measured", bool),
                energy_in_rewards=typed("energy_in_rewards", bool),
                provenance=typed("provenance", str),
            )
        return cls(rows=typed("rows", int), training_rows=typed("training_rows", int), sweep=sweep)


@dataclass(frozen=True)
class Manifest:
    """What specband records about an artifact folder (``specband.json``).

    Attributes:
        features: ``"contract"`` or ``"pre"``: the state the policies were trained on.
        seed: training seed (``None`` for a folder written by another tool).
        algorithms: the algorithms in the folder.
        data: the data trained on (:class:`DataRecord`: rows, training rows, the sweep file).
        power_limit_w: power limit (W) that overrode the rows' own, or ``None``.
        reward_config: the reward constants used (:class:`specband.contract.reward.RewardConfig`),
            or ``None`` for a folder that does not say.
        allowed: batch size -> sorted indices of the actions with data there and no failure.
        states: batch size -> the 4-float state the picks are made from.
        mean_rewards: batch size -> action index -> observed mean reward.
        row_counts: batch size -> action index -> number of rows.
        specband_version: the version that wrote the folder.
        foreign: True when the folder has no manifest (written by another tool).
        files: path relative to the folder -> sha256 of every policy file specband wrote
            (what :mod:`specband.files.safeload` checks before unpickling a joblib file).
        action_set: the set the folder was trained on: :data:`~specband.contract.actions.CONTRACT_SET`
            (the 19 actions; the manifest then has no ``action_set`` key, as before) or the
            extended set (the manifest says so and lists the 44 triples under ``actions``;
            every index in it is into that list).
        origin: what the data rests on (hardware, power limit, models, sglang version,
            workload, provenance; :class:`specband.sweeps.origin.DataOrigin`), or ``None`` for a
            folder written before origins were recorded, or by another tool.
        stats: batch size -> action index -> what its rows showed
            (:class:`specband.sweeps.origin.ActionStats`: speed, utilisation, J/token, repeats).
        power_limits: for a folder trained on a sweep over several power limits, the pick at
            every limit per batch size (:class:`specband.sweeps.limit_table.LimitTable`, with
            the limits, the band and the rows' provenance); the policies were then trained on
            the rows at the highest limit. ``None`` (and no key in the file) otherwise.
    """

    features: str = "contract"
    seed: int | None = None
    algorithms: tuple[str, ...] = ()
    data: DataRecord = field(default_factory=DataRecord)
    power_limit_w: float | None = None
    reward_config: RewardConfig | None = None
    allowed: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    states: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    mean_rewards: Mapping[int, Mapping[int, float]] = field(default_factory=dict)
    row_counts: Mapping[int, Mapping[int, int]] = field(default_factory=dict)
    specband_version: str | None = None
    foreign: bool = False
    files: Mapping[str, str] = field(default_factory=dict)
    action_set: ActionSet = CONTRACT_SET
    origin: DataOrigin | None = None
    stats: Mapping[int, Mapping[int, ActionStats]] = field(default_factory=dict)
    power_limits: LimitTable | None = None

    @property
    def batch_sizes(self) -> list[int]:
        """Measured batch sizes, sorted."""
        return sorted(self.allowed)

    def measured_batch_size(self, batch_size: int) -> int | None:
        """The measured batch size used for ``batch_size`` (itself when measured, else the
        nearest, the larger on a tie); ``None`` when the manifest knows none."""
        if not self.allowed:
            return None
        return nearest_batch_size(batch_size, self.allowed)

    def allowed_indices(self, batch_size: int) -> tuple[int, ...] | None:
        """Allowed action indices of the measured batch size used for ``batch_size``, or
        ``None`` (a foreign folder: unknown)."""
        measured = self.measured_batch_size(batch_size)
        return None if measured is None else tuple(self.allowed[measured])

    def allowed_for(self, batch_size: int) -> np.ndarray | None:
        """(19,) bool mask of :meth:`allowed_indices`, or ``None``."""
        import numpy as np

        indices = self.allowed_indices(batch_size)
        if indices is None:
            return None
        mask = np.zeros(len(self.action_set), dtype=bool)
        mask[list(indices)] = True
        return mask

    def state_for(
        self, batch_size: int, telemetry: tuple[float, float, float] | None = None
    ) -> tuple[float, float, float, float]:
        """The 4-float state to ask a policy with for ``batch_size``.

        Args:
            batch_size: requested batch size; an unmeasured one is asked as its nearest
                measured batch size (see :meth:`measured_batch_size`).
            telemetry: ``(temp_c, mem_used_mb, util_pct)`` to use instead of the stored
                representative state (for ``pre`` features: the idle GPU before launch).
        """
        measured = self.measured_batch_size(batch_size)
        bs = batch_size if measured is None else measured
        if telemetry is not None:
            return state_tuple(bs, *telemetry)
        if measured is not None and measured in self.states:
            a, b, c, d = (float(v) for v in self.states[measured])
            return a, b, c, d
        return state_tuple(bs)

    def mean_reward(self, batch_size: int, action: int) -> float | None:
        """Observed mean reward of ``action`` at a measured batch size, or ``None``."""
        value = self.mean_rewards.get(batch_size, {}).get(action)
        return None if value is None else float(value)

    def to_json(self) -> dict[str, Any]:
        """The manifest as a JSON-ready dict (``files`` only when known)."""
        sizes = sorted(set(self.allowed) | set(self.states) | set(self.mean_rewards))
        out: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "specband_version": self.specband_version,
            "features": self.features,
            "seed": self.seed,
            "algorithms": {name: {"file": ARTIFACT_FILES[name]} for name in self.algorithms},
            "data": self.data.to_json(),
            "power_limit_w": self.power_limit_w,
            "reward_config": None if self.reward_config is None else asdict(self.reward_config),
            "batch_sizes": {
                str(bs): {
                    "allowed": [int(i) for i in self.allowed.get(bs, ())],
                    "state": [float(v) for v in self.states[bs]] if bs in self.states else None,
                    "mean_reward": {str(a): float(v) for a, v in sorted(self.mean_rewards.get(bs, {}).items())},
                    "rows": {str(a): int(v) for a, v in sorted(self.row_counts.get(bs, {}).items())},
                    **(
                        {"stats": {str(a): s.to_json() for a, s in sorted(self.stats[bs].items())}}
                        if bs in self.stats
                        else {}
                    ),
                }
                for bs in sizes
            },
        }
        if self.origin is not None:
            out["origin"] = self.origin.to_json()
        if self.files:
            out["files"] = dict(sorted(self.files.items()))
        if not self.action_set.is_contract:
            out["action_set"] = self.action_set.name
            out["actions"] = [list(a) for a in self.action_set]
        if self.power_limits is not None:
            out["power_limits"] = self.power_limits.to_json()
        return out

    @classmethod
    def from_json(cls, obj: Any, path: str | Path, action_set: ActionSet = CONTRACT_SET) -> Manifest:  # noqa: C901
        """Parse a manifest dict, read against ``action_set`` (the command's ``--actions``):
        a folder of another set is refused (its indices would mean other triples).

        Raises:
            ArtifactError: a ``format`` newer than :data:`MANIFEST_FORMAT` (or not a positive
                integer), wrong types, an unknown feature kind or algorithm, a folder of
                another action set than ``action_set`` (naming ``--actions``), an action
                index outside the set, or a state that is not 4 finite numbers.
        """

        def bad(message: str) -> ArtifactError:
            return ArtifactError(f"{path}: {message}")

        if not isinstance(obj, dict):
            raise bad("expected a JSON object")
        fmt = obj.get("format", MANIFEST_FORMAT)
        if not is_int(fmt) or fmt < 1:
            raise bad(f"'format' must be a positive integer, got {fmt!r}")
        if fmt > MANIFEST_FORMAT:
            raise bad(
                f"'format' {fmt} is newer than this specband reads (up to {MANIFEST_FORMAT}); "
                "upgrade specband or retrain the folder with this one"
            )
        features = obj.get("features", "contract")
        if features not in FEATURE_KINDS:
            raise bad(f"'features' must be one of {FEATURE_KINDS}, got {features!r}")
        seed = obj.get("seed")
        if seed is not None and not is_int(seed):
            raise bad(f"'seed' must be an integer or null, got {seed!r}")
        algos = obj.get("algorithms", {})
        if not isinstance(algos, (dict, list)):
            raise bad("'algorithms' must be an object keyed by algorithm name")
        for name in algos:
            if name not in ALGORITHMS:
                raise bad(f"unknown algorithm {name!r} in 'algorithms'")
        data = obj.get("data") or {}
        if not isinstance(data, dict):
            raise bad("'data' must be an object")
        limit = obj.get("power_limit_w")
        if limit is not None and (not _is_number(limit) or not limit > 0):
            raise bad(f"'power_limit_w' must be a positive number or null, got {limit!r}")
        reward = _reward_config(obj.get("reward_config"), bad)
        files = obj.get("files") or {}
        if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and len(v) == 64 for k, v in files.items()
        ):
            raise bad("'files' must map relative paths to sha256 hex digests")
        folder_set = _manifest_action_set(obj, bad, action_set)
        num_actions = len(folder_set)
        sizes = obj.get("batch_sizes") or {}
        if not isinstance(sizes, dict):
            raise bad("'batch_sizes' must be an object keyed by batch size")
        allowed: dict[int, tuple[int, ...]] = {}
        states: dict[int, tuple[float, ...]] = {}
        means: dict[int, dict[int, float]] = {}
        counts: dict[int, dict[int, int]] = {}
        stats: dict[int, dict[int, ActionStats]] = {}
        for key, entry in sizes.items():
            if not str(key).isdigit() or int(key) <= 0:
                raise bad(f"'batch_sizes' key {key!r} is not a positive integer")
            bs = int(key)
            if not isinstance(entry, dict):
                raise bad(f"'batch_sizes.{key}' must be an object")
            idx = entry.get("allowed", [])
            if not isinstance(idx, list) or not all(is_int(i) and 0 <= i < num_actions for i in idx):
                raise bad(f"'batch_sizes.{key}.allowed' must be action indices in 0..{num_actions - 1}")
            if idx:
                allowed[bs] = tuple(sorted(set(idx)))
            state = entry.get("state")
            if state is not None:
                if not isinstance(state, list) or len(state) != 4 or not all(_is_number(v) for v in state):
                    raise bad(f"'batch_sizes.{key}.state' must be 4 finite numbers")
                states[bs] = tuple(float(v) for v in state)
            means[bs] = _index_map(
                entry.get("mean_reward", {}), float, bad, f"batch_sizes.{key}.mean_reward", num_actions
            )
            counts[bs] = _index_map(entry.get("rows", {}), int, bad, f"batch_sizes.{key}.rows", num_actions)
            raw_stats = entry.get("stats")
            if isinstance(raw_stats, dict):
                parsed = {
                    int(a): st
                    for a, v in raw_stats.items()
                    if str(a).isdigit() and int(a) < num_actions and (st := ActionStats.from_json(v)) is not None
                }
                if parsed:
                    stats[bs] = parsed
        return cls(
            features=features,
            seed=seed,
            algorithms=tuple(a for a in ALGORITHMS if a in algos),
            data=DataRecord.from_json(data),
            power_limit_w=None if limit is None else float(limit),
            reward_config=reward,
            allowed=allowed,
            states=states,
            mean_rewards=means,
            row_counts=counts,
            specband_version=obj.get("specband_version"),
            files=files,
            action_set=folder_set,
            origin=DataOrigin.from_json(obj.get("origin")),
            stats=stats,
            power_limits=None if obj.get("power_limits") is None else LimitTable.from_json(obj["power_limits"], bad),
        )


def _reward_config(value: Any, bad: Callable[[str], ArtifactError]) -> RewardConfig | None:
    """A manifest's ``reward_config`` (``None`` when absent): its constants over the defaults
    of :class:`~specband.contract.reward.RewardConfig` (unknown keys are ignored).

    Raises:
        ArtifactError: not an object, or a constant out of its range.
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad("'reward_config' must be an object or null")
    names = {f.name for f in fields(RewardConfig)}
    try:
        return RewardConfig(**{k: v for k, v in value.items() if k in names})
    except ConfigError as exc:
        raise bad(f"'reward_config': {exc}") from None


def _manifest_action_set(obj: Mapping[str, Any], bad: Callable[[str], ArtifactError], expected: ActionSet) -> ActionSet:
    """The manifest's ``action_set`` (absent: ``contract``), held to ``expected`` (the
    command's): a folder of one set is never read as the other (its indices would mean
    other triples).

    Raises:
        ArtifactError: an unknown name, an ``actions`` list that is not that set's triples,
            or a set other than ``expected`` (naming ``--actions``).
    """
    name = obj.get("action_set", "contract")
    if name not in ACTION_SETS:
        raise bad(f"'action_set' must be one of {', '.join(ACTION_SETS)}, got {name!r}")
    if name != "contract" and obj.get("actions") != [list(a) for a in ACTION_SETS[name]]:
        raise bad(f"'actions' must list the {len(ACTION_SETS[name])} triples of the {name} action set in order")
    if name != expected.name:
        raise bad(f"the models are of the {name} action set; pass --actions {name}")
    return ACTION_SETS[name]


def _is_number(value: Any) -> bool:
    return is_finite_number(value)


def _index_map(
    value: Any, kind: type, bad: Callable[[str], ArtifactError], where: str, num_actions: int
) -> dict[int, Any]:
    if not isinstance(value, dict):
        raise bad(f"'{where}' must be an object keyed by action index")
    out: dict[int, Any] = {}
    for k, v in value.items():
        ok = str(k).isdigit() and int(k) < num_actions and _is_number(v)
        if not ok:
            raise bad(f"'{where}' entry {k!r}: {v!r} is not an action index with a finite number")
        out[int(k)] = kind(v)
    return out


def _policy_file_hashes(folder: Path, policies: Mapping[str, Policy]) -> dict[str, str]:
    """sha256 of every file under each policy's subfolder, keyed by path relative to ``folder``."""
    return {
        p.relative_to(folder).as_posix(): file_sha256(p)
        for name in policies
        for p in sorted((folder / name).rglob("*"))
        if p.is_file()
    }


def _foreign_policy_files(out: Path, action_set: ActionSet) -> list[str]:
    """Files inside the algorithm folders of the specband folder ``out`` that its
    manifest's ``files`` does not list (a user's own; none known for an older manifest
    without ``files``, or one of another action set than ``action_set``)."""
    try:
        files = load_manifest(out, action_set).files
    except ArtifactError:
        return []
    if not files:
        return []
    found = []
    for name in ALGORITHMS:
        folder = out / name
        if not folder.is_dir():
            continue
        for p in sorted(folder.rglob("*")):
            rel = p.relative_to(out).as_posix()
            if (p.is_file() or p.is_symlink()) and rel not in files:
                found.append(rel)
    return found


def save_artifacts(
    policies: Mapping[str, Policy],
    out_dir: str | Path,
    manifest: Manifest,
    *,
    model_card: Callable[[Manifest], str] | None = None,
) -> Path:
    """Write every policy's model card file and the manifest (with the sha256 of every
    policy file) into ``out_dir``, atomically; with ``model_card``, also ``README.md`` with
    the text it returns for the final manifest.

    The folder is built next to ``out_dir`` and renamed into place when complete; an
    existing specband folder (one with a manifest and nothing but specband's files) or an
    empty folder at ``out_dir`` is replaced, anything else is left alone. A symlink
    ``out_dir`` to a folder is written through (the folder it points to is replaced, the link
    stays).

    Returns:
        ``out_dir``.

    Raises:
        ArtifactError: ``out_dir`` is a file, a non-empty folder without a manifest or a
            specband folder holding other files too, a symlink to no folder, or a file
            cannot be written (nothing is left behind then).
    """
    given = Path(out_dir)
    out = _through_link(given)
    if out.exists() and not out.is_dir():
        raise ArtifactError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST_FILE).is_file():
        raise ArtifactError(
            f"{out}: exists, is not empty and has no {MANIFEST_FILE} (not a specband artifact folder); "
            f"choose another --out or remove it"
        )
    if out.is_dir() and (out / MANIFEST_FILE).is_file():
        known = {MANIFEST_FILE, MODEL_CARD_FILE, *ALGORITHMS}
        foreign = sorted(p.name for p in out.iterdir() if p.name not in known)
        foreign += _foreign_policy_files(out, manifest.action_set)
        if foreign:
            raise ArtifactError(
                f"{out}: also holds {', '.join(foreign)}, which specband did not write; training would replace "
                f"the folder and lose them (move them or choose another --out)"
            )
    parent = out.parent if str(out.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = parent / f".{out.name}.tmp-{uuid.uuid4().hex}"
        os.mkdir(tmp, 0o777)  # the mode mkdir gives (0777 minus the umask), as for any new folder
    except OSError as exc:
        raise ArtifactError(f"{out}: cannot create ({exc.strerror or exc})") from None
    try:
        for policy in policies.values():
            policy.save(tmp)
        manifest = replace(manifest, files=_policy_file_hashes(tmp, policies))
        write_json_atomic(tmp / MANIFEST_FILE, manifest.to_json())
        if model_card is not None:
            write_bytes_atomic(tmp / MODEL_CARD_FILE, model_card(manifest).encode("utf-8"))
        if out.exists():
            old = parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
            os.rename(out, old)
            try:
                os.rename(tmp, out)
            except BaseException:
                os.rename(old, out)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ArtifactError(f"{out}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return given


def _through_link(out: Path) -> Path:
    """The folder ``out`` names: itself, or the folder a symlink ``out`` points to (written
    through, the link kept: replacing the link left it as ``.NAME.old-*`` beside a new real
    folder, hostile trial V11).

    Raises:
        ArtifactError: ``out`` is a symlink to nothing, or to something other than a folder.
    """
    if not out.is_symlink():
        return out
    target = Path(os.path.realpath(out))
    if not target.is_dir():
        what = "which does not exist" if not target.exists() else "which is not a folder"
        raise ArtifactError(f"{out}: not written (a symlink to {target}, {what})")
    return target


def load_manifest(directory: str | Path, action_set: ActionSet = CONTRACT_SET) -> Manifest:
    """The folder's manifest, read against ``action_set`` (the command's ``--actions``; see
    :meth:`Manifest.from_json`), or a ``foreign`` one (contract features, nothing else known)
    when it has none.

    Raises:
        ArtifactError: the folder does not exist or is a file, the manifest is malformed,
            of another action set, or a link whose real path leaves the folder.
    """
    d = Path(directory)
    if not d.is_dir():
        what = "not a folder (an artifact folder is a directory)" if d.exists() else "no such artifact folder"
        raise ArtifactError(f"{d}: {what}")
    path = d / MANIFEST_FILE
    if not path.is_file():
        return Manifest(algorithms=tuple(available_algorithms(d)), foreign=True)

    check_files_inside(d, (MANIFEST_FILE,))  # not read through a link out of the folder
    return Manifest.from_json(read_json(path), path, action_set)


def available_algorithms(directory: str | Path) -> list[str]:
    """Algorithms whose model card file exists in the folder, in the model card's order."""
    d = Path(directory)
    return [name for name in ALGORITHMS if (d / ARTIFACT_FILES[name]).is_file()]


def verify_algorithm_files(
    directory: str | Path, name: str, *, allow_modified: bool = False, manifest: Manifest | None = None
) -> None:
    """Check the files of ``name`` in a specband folder against the sha256 its manifest
    records (nothing to check in a foreign folder); see :func:`specband.files.safeload.verify_files`.
    ``manifest``: the folder's, when the caller has read it already (else it is read here).

    Files whose real path leaves the folder (a symlink to ``/etc/passwd``) are refused
    first, whatever ``allow_modified`` says (:func:`specband.files.safeload.check_files_inside`).

    Raises:
        ArtifactError: a file modified since ``specband train`` wrote it (unless
            ``allow_modified``: a warning line on stderr), a file outside the folder, or a
            malformed manifest.
    """

    d = Path(directory)
    check_files_inside(d, (MANIFEST_FILE, ARTIFACT_FILES[name].split("/")[0]))
    if manifest is None:
        manifest = load_manifest(d)
    if not manifest.foreign:
        verify_files(d, dict(manifest.files), name, allow_modified=allow_modified)


def load_policy(
    directory: str | Path,
    name: str,
    data: TrainingData | None = None,
    *,
    trust_pickle: bool = False,
    allow_modified: bool = False,
    manifest: Manifest | None = None,
) -> Policy:
    """Load one algorithm from an artifact folder.

    The folder's path is resolved first (symlinks, ``..``, ``//``); the algorithm's files
    are checked against the manifest's sha256 (:func:`verify_algorithm_files`); the
    pickle-free copies (skops, safetensors) are preferred and a joblib file is unpickled
    only with ``trust_pickle``, whatever the manifest says.

    Args:
        directory: the folder.
        name: the algorithm.
        data: for ``doubly_robust``, the raw sweep's training data to recompute the IPS
            correction from (the model card's recipe); ignored by the others.
        trust_pickle: unpickle a joblib file (runs code from the file; see
            :mod:`specband.files.safeload`).
        allow_modified: load files whose sha256 no longer matches the manifest, with a
            warning on stderr.
        manifest: the folder's manifest when the caller has read it already (else it is
            read here).

    Raises:
        ConfigError: an unknown algorithm.
        ArtifactError: the file is missing, malformed or modified.
        specband.files.safeload.UntrustedPickleError: a pickle and no ``trust_pickle``.
    """

    validate_algorithms([name])
    d = resolved(directory)
    if not (d / ARTIFACT_FILES[name]).is_file():
        have = available_algorithms(d)
        raise ArtifactError(
            f"{Path(directory) / ARTIFACT_FILES[name]}: no such file "
            f"(the folder has: {', '.join(have) if have else 'no policy files'})"
        )
    verify_algorithm_files(d, name, allow_modified=allow_modified, manifest=manifest)
    cls = policy_class(name)
    kwargs: dict[str, Any] = {"trust_pickle": trust_pickle} if name in PICKLED_ALGORITHMS else {}
    if name == "doubly_robust" and data is not None:
        kwargs["data"] = data
    return cls.load(d, **kwargs)


def load_policies(
    directory: str | Path,
    algorithms: Sequence[str] | None = None,
    data: TrainingData | None = None,
    *,
    trust_pickle: bool = False,
    allow_modified: bool = False,
) -> dict[str, Policy]:
    """Load several algorithms (default: every one whose file is in the folder); see
    :func:`load_policy` for ``trust_pickle`` and ``allow_modified``.

    Raises:
        ArtifactError: a missing, malformed or modified file, or an untrusted pickle.
    """
    names = validate_algorithms(algorithms) if algorithms else available_algorithms(directory)
    return {
        name: load_policy(directory, name, data, trust_pickle=trust_pickle, allow_modified=allow_modified)
        for name in names
    }


def embedded_manifest() -> Manifest:
    """The shipped manifest of the bundled published measurements (``pre`` features;
    see :func:`compute_embedded_manifest`). No NumPy is imported."""

    return Manifest.from_json(EMBEDDED_MANIFEST, "<embedded default>")


#: Default artifact folder of ``specband train``, picked up by ``recommend`` and ``launch``.
DEFAULT_MODELS_DIR = "specband-models"


def folder_algorithms(folder: Path, action_set: ActionSet = CONTRACT_SET) -> tuple[str, ...]:
    """Algorithms of an existing specband folder at ``folder`` (empty when there is none,
    its manifest is unreadable or of another action set than ``action_set``)."""
    if not (folder / MANIFEST_FILE).is_file():
        return ()
    try:
        return load_manifest(folder, action_set).algorithms
    except ArtifactError:
        return ()
