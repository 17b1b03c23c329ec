"""A policy loaded the one way every command loads it (``recommend``, ``recommend --batch-mix``,
``schedule``, ``launch``): ``--models`` (a folder or a hub id), else ``./specband-models`` when
it holds the algorithm, else the embedded default trained on the bundled published
measurements.

A folder is resolved once (a hub id downloaded once) and its ``specband.json`` read once per
command: :func:`open_folder` gives a :class:`ModelFolder` (the folder and its manifest), which
:func:`load_models` and the answer over several power limits
(:func:`specband.deploy.recommend.answer`) both read.

Only the standard library is imported at module level; the ``lookup_table`` path reads JSON
only (no NumPy, torch or scikit-learn), so a cold ``specband recommend`` stays fast.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from specband.artifacts.folder import (
    ARTIFACT_FILES,
    DEFAULT_MODELS_DIR,
    MANIFEST_FILE,
    Manifest,
    available_algorithms,
    embedded_manifest,
    load_manifest,
    load_policy,
    validate_algorithms,
    verify_algorithm_files,
)
from specband.contract.actions import CONTRACT_SET, ActionSet
from specband.core.errors import ArtifactError, ConfigError, SpecbandError
from specband.files.hub import resolve_data_file, resolve_folder
from specband.policies.lookup_core import read_lookup_folder

if TYPE_CHECKING:
    from specband.policies.base import Policy
    from specband.sweeps.dataset import TrainingData

__all__ = ["LoadedModels", "ModelFolder", "load_models", "open_folder"]


@dataclass(frozen=True)
class ModelFolder:
    """An artifact folder, resolved once and its manifest read once.

    Attributes:
        given: the folder as the user named it (a path or a hub id; ``./specband-models``
            picked up without ``--models``: its path).
        path: the local folder (a hub id's snapshot).
        manifest: its :class:`~specband.artifacts.folder.Manifest` (a ``foreign`` one when the
            folder has no ``specband.json``).
        implicit: picked up as ``./specband-models`` without ``--models``.
    """

    given: str
    path: Path
    manifest: Manifest
    implicit: bool = False


def open_folder(models: str | Path, action_set: ActionSet = CONTRACT_SET) -> ModelFolder:
    """The folder ``--models`` names, resolved (:func:`specband.files.hub.resolve_folder`) and
    its manifest read against ``action_set``, the command's ``--actions``
    (:func:`specband.artifacts.folder.load_manifest`).

    Raises:
        ArtifactError: the folder does not exist, its manifest is malformed or of another
            action set; HubError: a hub id not found.
    """

    path = resolve_folder(models)
    return ModelFolder(str(models), path, load_manifest(path, action_set))


@dataclass(frozen=True)
class LoadedModels:
    """One algorithm's policy as every command loads it (:func:`load_models`).

    Attributes:
        algorithm: model card algorithm name.
        folder: the artifact folder, or ``None`` for the embedded default.
        manifest: its :class:`~specband.artifacts.folder.Manifest` (rebuilt from ``--data`` for a
            foreign folder).
        policy: the fitted policy, or ``None`` for ``lookup_table``.
        lookup_means: ``lookup_table``'s batch size -> action index -> mean reward (``None``
            for the other algorithms).
        notes: one-line notes for the user (which folder, what was ignored), in order.
        data: the sweep the policy was trained on in memory (``--data`` without ``--models``),
            else ``None``.
    """

    algorithm: str
    folder: Path | None
    manifest: Manifest
    policy: Policy | None = None
    lookup_means: Mapping[int, Mapping[int, float]] | None = None
    notes: tuple[str, ...] = ()
    data: str | None = None

    @property
    def source(self) -> str:
        """Where the policy comes from: ``"embedded"``, the folder, or ``"<data> (trained in memory)"``."""
        if self.folder is not None:
            return str(self.folder)
        return "embedded" if self.data is None else f"{self.data} (trained in memory)"

    @property
    def label(self) -> str:
        """:attr:`source` as messages name it (``"the embedded study policy"`` for the embedded one)."""
        return "the embedded study policy" if self.source == "embedded" else self.source


def load_models(
    algo: str,
    models: str | Path | ModelFolder | None = None,
    data_path: str | Path | None = None,
    *,
    trust_pickle: bool = False,
    allow_modified: bool = False,
    action_set: ActionSet = CONTRACT_SET,
) -> LoadedModels:
    """Load ``algo`` from ``models`` (a folder or a hub id, or a :class:`ModelFolder` opened
    already), else ``./specband-models`` when it holds ``algo``, else the embedded default.

    Args:
        algo: model card algorithm name.
        models: artifact folder or hub id (resolved here), an opened :class:`ModelFolder`, or ``None``.
        data_path: sweep restricting a foreign folder's picks to measured configs.
        trust_pickle: unpickle joblib files (:mod:`specband.files.safeload`); never applied to
            ``./specband-models`` picked up without being named.
        allow_modified: load files whose sha256 no longer matches the folder's manifest
            (a warning on stderr).
        action_set: the command's ``--actions``: a folder (and ``data_path``'s rows) is read
            against it; the embedded default is a contract model.

    Raises:
        ConfigError: unknown algorithm, or the embedded default under another action set;
        ArtifactError: unreadable folder, one of another action set, or an untrusted
        pickle; DataError: bad sweep; HubError: a hub id not found.
    """

    validate_algorithms([algo])
    notes: list[str] = []
    note = notes.append
    folder: ModelFolder | None = None
    if isinstance(models, ModelFolder):
        folder = models
    elif models is not None:
        path = resolve_folder(models)
        folder = ModelFolder(str(models), path, load_manifest(path, action_set))
    if data_path is not None:
        data_path = resolve_data_file(data_path)
    if folder is None:
        folder = _implicit_folder(algo, note, action_set)
        if folder is not None:
            trust_pickle = False  # a folder nobody named is never unpickled
            note(f"using ./{DEFAULT_MODELS_DIR} (written by `specband train`; --models DIR picks another folder)")
    if folder is None and data_path is not None:  # the data named answers, not the study's (N28)
        from specband.artifacts.fit import data_policy  # lazy: NumPy and the policies, only with --data

        note(f"no --models: trained {algo} on {data_path} in memory (seed 0; `specband train` keeps it as a folder)")
        policy, manifest = data_policy(algo, data_path, action_set=action_set)
        return LoadedModels(algo, None, manifest, policy, None, tuple(notes), data=str(data_path))
    if folder is None:
        _check_embedded_action_set(action_set)
        if algo == "lookup_table":
            manifest = embedded_manifest()
            return LoadedModels(algo, None, manifest, None, manifest.mean_rewards, tuple(notes))
        from specband.artifacts.fit import embedded_policy  # lazy: off the cold path (recommend, --help)

        note(f"no --models: training {algo} on the bundled published measurements (seed 0)")
        policy, manifest = embedded_policy(algo)
        return LoadedModels(algo, None, manifest, policy, None, tuple(notes))
    try:
        return _load_folder(
            folder,
            algo,
            data_path,
            notes,
            trust_pickle=trust_pickle,
            allow_modified=allow_modified,
            action_set=action_set,
        )
    except SpecbandError as exc:
        if not folder.implicit:
            raise
        raise type(exc)(
            f"{exc} (./{DEFAULT_MODELS_DIR} was picked up without --models; --models DIR names a folder)"
        ) from None


def _implicit_folder(algo: str, note: Callable[[str], None], action_set: ActionSet) -> ModelFolder | None:
    """``./specband-models`` when it is picked up for ``algo`` without ``--models``: only a
    folder with specband's manifest (written by ``specband train``) that holds ``algo``.
    Anything else found under that name is announced through ``note`` (what was found, and
    that the embedded default is used instead); nothing there: no note.

    Raises:
        ArtifactError: the folder's ``specband.json`` is unreadable, malformed or of another
            action set than ``action_set`` (as with ``--models``), the message saying the
            folder was picked up without ``--models``.
    """
    path = Path(DEFAULT_MODELS_DIR)
    shown = f"./{DEFAULT_MODELS_DIR}"
    instead = "using the embedded default"
    if not os.path.lexists(path):
        return None
    if path.is_symlink() and not path.exists():
        note(f"{shown} is a dangling symlink (to {os.readlink(path)}); {instead}")
        return None
    if not path.is_dir():
        note(f"{shown} is not a folder (a file named like specband's default folder); {instead}")
        return None
    if not (path / MANIFEST_FILE).is_file():
        found = [ARTIFACT_FILES[a] for a in available_algorithms(path)]
        holds = f" (it holds {', '.join(found)})" if found else ""
        note(
            f"{shown} has no {MANIFEST_FILE}, so `specband train` did not write it{holds}; not picked up "
            f"without --models: {instead} (--models {shown} reads it)"
        )
        return None
    try:
        manifest = load_manifest(path, action_set)
    except ArtifactError as exc:
        raise ArtifactError(
            f"{exc} ({shown} was picked up without --models; --models DIR names another folder)"
        ) from None
    if algo not in manifest.algorithms:
        note(f"{shown} has no {algo}; {instead}")
        return None
    return ModelFolder(str(path), path, manifest, implicit=True)


def _load_folder(
    folder: ModelFolder,
    algo: str,
    data_path: Path | None,
    notes: list[str],
    *,
    trust_pickle: bool,
    allow_modified: bool,
    action_set: ActionSet,
) -> LoadedModels:
    """:func:`load_models` of a folder (its manifest as read once, against ``action_set``)."""
    note = notes.append
    policy: Policy | None = None
    manifest = read = folder.manifest
    training: TrainingData | None = None
    if data_path is not None:
        if manifest.foreign:
            from specband.artifacts.fit import build_manifest  # lazy: off the cold path (recommend, --help)
            from specband.sweeps.dataset import load_sweep  # lazy: off the cold path (recommend, --help)

            sweep = load_sweep(data_path, action_set=action_set)
            training = sweep.training_data(manifest.features)
            manifest = replace(build_manifest(training, [algo], seed=None, sweep=sweep), foreign=True)
        else:
            note(f"{folder.path} has a specband manifest; --data ignored")
    lookup_means: Mapping[int, Mapping[int, float]] | None = None
    if algo == "lookup_table":
        verify_algorithm_files(folder.path, algo, allow_modified=allow_modified, manifest=read)
        lookup_means = read_lookup_folder(folder.path, action_set).means
    else:
        policy = load_policy(
            folder.path, algo, training, trust_pickle=trust_pickle, allow_modified=allow_modified, manifest=read
        )
    if manifest.foreign and training is None:
        note(
            f"{folder.path} has no specband manifest: picking among all 19 actions from the default state "
            "(pass --data SWEEP to restrict them to the configs measured there)"
        )
        if algo == "doubly_robust" and getattr(policy, "correction_source", "") == "none":
            note("doubly_robust without its IPS correction (no sidecar, no --data): direct model only")
    return LoadedModels(algo, folder.path, manifest, policy, lookup_means, tuple(notes))


def _check_embedded_action_set(action_set: ActionSet) -> None:
    """The embedded default is a contract model: refuse it under another action set.

    Raises:
        ConfigError: naming ``--models`` and ``--actions``.
    """
    name = action_set.name
    if not action_set.is_contract:
        raise ConfigError(
            f"--actions {name} needs --models DIR of a folder trained with `specband train --actions {name}` "
            f"(./{DEFAULT_MODELS_DIR} and the embedded default are not)"
        )
