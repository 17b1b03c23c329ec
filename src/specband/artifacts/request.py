"""``specband train`` as data: :class:`TrainRequest` (every option, declared once and checked
when the request is built) and :func:`run_training`, which trains the policies and writes the
artifact folder (model card layout). The CLI prints."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.artifacts.card import render_model_card
from specband.artifacts.folder import DEFAULT_MODELS_DIR, folder_algorithms, save_artifacts, validate_algorithms
from specband.artifacts.pick_table import pick_table
from specband.contract.actions import ACTION_SETS, ActionSet, action_set_field
from specband.contract.actions import action_set as named_action_set
from specband.contract.state import FEATURE_KINDS
from specband.core.errors import ArtifactError, ConfigError, MissingExtraError
from specband.core.limits import MAX_SEED
from specband.core.optionspec import option
from specband.devices.base import check_power_limit_w
from specband.files.fileio import out_option_path
from specband.files.hub import parse_hub_ref, resolve_data_file
from specband.files.pathlock import PathLock
from specband.policies import EXTENDED_ALGORITHMS

__all__ = ["EXTENDED_ALGORITHMS", "TrainOutcome", "TrainRequest", "run_training"]


@dataclass(frozen=True)
class TrainRequest:
    """Every option of ``specband train``.

    Raises:
        ConfigError: an unknown algorithm, a bad ``--power-limit`` or an empty ``--out``;
            InvalidActionError: an unknown ``--actions``.
    """

    data: Path | None = option(
        None,
        "DATA",
        help="Sweep JSONL (published sweep schema, specband sweep/simulate output, or sglang "
        "bench_speculative.py output), a Parquet file, or a hub dataset id (datasets/org/name[@REV], "
        "hf://datasets/org/name). Default: the bundled published measurements.",
        panel="input",
        show_default=False,
        argument=True,
    )
    out: str = option(
        DEFAULT_MODELS_DIR, "--out", "-o", help="Artifact folder to write.", panel="output", metavar="DIR"
    )
    algo: list[str] | None = option(
        None,
        "--algo",
        "-a",
        help="Algorithm to train (repeatable). Default: all eight (without torch, the five that need "
        "none: mlp_bandit, cql and bcq are skipped, saying so; install 'specband[torch]' for them).",
        panel="model",
        metavar="NAME",
        show_default=False,
    )
    power_limit: float | None = option(
        None,
        "--power-limit",
        help="GPU power limit in W, overriding the rows' own.",
        panel="grid",
        metavar="W",
        finite=False,  # its own check says what a power limit must be, nan and inf included
        show_default=False,
    )
    seed: int = option(
        0, "--seed", help="Training seed (same seed, same artifacts).", panel="model", metavar="N", min=0, max=MAX_SEED
    )
    features: str = option(
        "pre",
        "--features",
        help="Decision state: 'pre' (only what is known before launch: batch size, temperature, memory used "
        "and utilisation of the idle GPU) or 'contract' (the published 4-float state, whose memory and "
        "utilisation were read after the run).",
        panel="model",
        metavar="KIND",
        choices=FEATURE_KINDS,
    )
    force: bool = option(
        False,
        "--force",
        help="Replace an --out folder trained on other data (checked before training).",
        panel="output",
    )
    actions: str = action_set_field("the sweep's rows and the models")

    def __post_init__(self) -> None:

        names = validate_algorithms(self.algo)
        if self.actions == "extended" and self.algo and set(names) - set(EXTENDED_ALGORITHMS):
            raise ConfigError(
                f"--actions extended trains {', '.join(EXTENDED_ALGORITHMS)} only (the other model card formats "
                f"hold 19 actions), got --algo {', '.join(n for n in names if n not in EXTENDED_ALGORITHMS)}"
            )
        check_power_limit_w(self.power_limit)
        _ = self.out_path
        named_action_set(self.actions)  # an unknown --actions, naming the option

    @property
    def action_set(self) -> ActionSet:
        """The set ``--actions`` names: the rows are read, the policies trained and the
        manifest written against it."""
        return ACTION_SETS[self.actions]

    @property
    def out_path(self) -> Path:
        """``--out`` as a path (an empty one is refused, naming ``--out``)."""

        return out_option_path(self.out)


@dataclass(frozen=True)
class TrainOutcome:
    """What :func:`run_training` did.

    Attributes:
        folder: the artifact folder written.
        algorithms: the algorithms trained.
        training_rows: rows the policies were trained on.
        elapsed_s: seconds of training.
        picks: the pick table (:func:`specband.artifacts.pick_table.pick_table`).
        sweep: the loaded sweep.
        dropped: algorithms the folder held before and no longer holds.
        provenance: the data's provenance (:attr:`specband.sweeps.origin.DataOrigin.provenance`).
        notes: what to tell the user (a sweep over several power limits: what was trained on;
            the algorithms skipped for want of torch).
        skipped: algorithms of the default set left out because torch is not installed
            (their ``policy.pth`` needs it); empty when torch is there or ``--algo`` was given.
    """

    folder: Path
    algorithms: tuple[str, ...]
    training_rows: int
    elapsed_s: float
    picks: list[Any]
    sweep: Any
    dropped: tuple[str, ...]
    provenance: str = "measured"
    notes: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()


def _trainable(asked: list[str] | None) -> tuple[list[str], tuple[str, ...]]:
    """The algorithms to train and those skipped for want of torch: with no ``--algo``, the
    torch-free ones when torch is missing; an explicit torch algorithm without torch fails.

    Raises:
        ConfigError: an unknown name. MissingExtraError: ``--algo`` names a torch
            algorithm and torch is not installed.
    """
    from specband.policies.nets import TORCH_ALGORITHMS, torch_available  # lazy: off the cold path (recommend, --help)

    names = validate_algorithms(asked)
    if torch_available():
        return names, ()
    if asked:
        needing = [name for name in names if name in TORCH_ALGORITHMS]
        if needing:
            raise MissingExtraError("torch", "torch", f"--algo {needing[0]} (its policy.pth)")
        return names, ()
    return [n for n in names if n not in TORCH_ALGORITHMS], tuple(n for n in names if n in TORCH_ALGORITHMS)


def run_training(
    r: TrainRequest,
    loaded: Callable[[Any], None] | None = None,
    fitted: Callable[[str, int, int], None] | None = None,
) -> TrainOutcome:
    """Load the sweep, train the policies and write the artifact folder with its model card.
    ``loaded(sweep)`` is called once the sweep is read (the CLI prints its warnings then);
    ``fitted(name, i, n)`` after the i-th of n policies is fitted (the CLI's progress).

    Raises:
        DataError / HubError: an unreadable sweep; ArtifactError: the folder cannot be written;
        MissingExtraError: ``--algo`` names a torch algorithm and torch is not installed.
        With ``--actions extended`` (rows read, policies trained and the manifest written
        against the 44-action set) only :data:`EXTENDED_ALGORITHMS` are trained.
    """
    return _run_training(
        r, loaded, list(EXTENDED_ALGORITHMS) if r.actions == "extended" and not r.algo else None, fitted
    )


def _run_training(
    r: TrainRequest,
    loaded: Callable[[Any], None] | None,
    algorithms: list[str] | None,
    fitted: Callable[[str, int, int], None] | None = None,
) -> TrainOutcome:
    """:func:`run_training` under a lock on ``--out`` (every spelling of the folder, a symlink
    to it included, is one lock: a second ``train`` into it is refused with one line, hostile
    trial V12); the folder it makes for the lock is removed again when nothing was written."""
    out = r.out_path
    made = [parent for parent in out.parents if not parent.exists()]  # deepest first
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ArtifactError(f"{out}: cannot create ({exc.strerror or exc})") from None
    try:
        with PathLock(out, "being written by another specband train"):
            return _train_locked(r, loaded, algorithms, fitted)
    finally:
        for folder in made:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty: nothing was written


def _train_locked(
    r: TrainRequest,
    loaded: Callable[[Any], None] | None,
    algorithms: list[str] | None,
    fitted: Callable[[str, int, int], None] | None = None,
) -> TrainOutcome:
    import dataclasses
    import time

    from specband.artifacts.fit import (  # lazy: off the cold path (recommend, --help)
        build_manifest,
        split_power_limits,
        train_policies,
    )
    from specband.sweeps.dataset import load_sweep  # lazy: off the cold path (recommend, --help)

    names, skipped = (algorithms, ()) if algorithms else _trainable(r.algo)
    sweep = load_sweep(
        None if r.data is None else resolve_data_file(r.data), power_limit_w=r.power_limit, action_set=r.action_set
    )
    from specband.artifacts.fit import check_out_folder  # lazy: off the cold path (recommend, --help)

    check_out_folder(
        r.out_path,
        sweep,
        force=r.force,
        data_label="the bundled published measurements" if r.data is None else str(r.data),
    )
    if loaded is not None:
        loaded(sweep)
    sweep, limit_table, limit_note = split_power_limits(sweep)  # several power limits: issue 20
    training = sweep.training_data(r.features)
    start = time.perf_counter()
    count: list[str] = []

    def on_done(name: str, _seconds: float) -> None:
        count.append(name)
        if fitted is not None:
            fitted(name, len(count), len(names))

    policies = train_policies(training, names, seed=r.seed, on_done=on_done)
    elapsed = time.perf_counter() - start
    manifest = build_manifest(training, names, seed=r.seed, sweep=sweep)
    if limit_table is not None:
        manifest = dataclasses.replace(manifest, power_limits=limit_table)
    hub_data = None if r.data is None else parse_hub_ref(r.data)
    if hub_data is not None:  # record the hub id, not the cache path
        assert manifest.data.sweep is not None  # trained on a sweep
        data = dataclasses.replace(
            manifest.data, sweep=dataclasses.replace(manifest.data.sweep, path=f"hf://{hub_data}")
        )
        manifest = dataclasses.replace(manifest, data=data)
    previous = folder_algorithms(r.out_path, r.action_set)
    rows = pick_table(policies, manifest)
    dataset_id = hub_data.repo_id if hub_data is not None and hub_data.repo_type == "dataset" else None
    folder = save_artifacts(
        policies,
        r.out_path,
        manifest,
        model_card=lambda final: render_model_card(final, sweep, rows, dataset_id=dataset_id),
    )
    dropped = tuple(name for name in previous if name not in names)
    provenance = "measured" if manifest.origin is None else manifest.origin.provenance
    notes: tuple[str, ...] = () if limit_note is None else (limit_note,)
    if skipped:
        notes += (f"skipped {', '.join(skipped)}: their policy.pth files need torch: pip install 'specband[torch]'",)
    return TrainOutcome(folder, tuple(names), len(training), elapsed, rows, sweep, dropped, provenance, notes, skipped)
