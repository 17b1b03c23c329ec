"""What ``specband recommend`` (and ``launch``) decide: the pick of one algorithm for a
batch size and GPU state, with its notes, returned as data. The CLI prints; it never decides.

Only the standard library is imported at module level; the ``lookup_table`` path reads JSON
only (no NumPy, torch or scikit-learn), so a cold ``specband recommend`` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from specband.artifacts.folder import Manifest
    from specband.deploy.transfer import UserSetup

from specband.artifacts.folder import DEFAULT_MODELS_DIR
from specband.contract.actions import action_set_field
from specband.core.limits import DEFAULT_MAX_SPEED_LOSS, MAX_BATCH_SIZE
from specband.core.optionspec import option
from specband.deploy.answers import Pick

__all__ = [
    "LoadedModels",
    "Pick",
    "RecommendRequest",
    "Recommendation",
    "data_notes",
    "load_models",
    "pick_origin",
    "recommend",
    "recommend_request",
    "unmeasured_notes",
]


# The options of every command that asks a policy (recommend, launch, schedule), declared
# once (:mod:`specband.core.optionspec`); each returns a request dataclass field.


def algo_field() -> Any:
    """``--algo/-a``: the model card algorithm to ask."""
    from specband.core.optionspec import option

    return option("lookup_table", "--algo", "-a", help="Algorithm to ask.", panel="model", metavar="NAME")


def models_field() -> Any:
    """``--models/-m``: artifact folder or hub id (:func:`load_models`)."""
    from specband.core.optionspec import option

    return option(
        None,
        "--models",
        "-m",
        help="Artifact folder (from `specband train`, or the model card's layout) or a Hugging Face hub id "
        f"(org/name[@REV], hf://org/name). Default: ./{DEFAULT_MODELS_DIR} when it exists and holds the --algo "
        "algorithm, else the embedded policy trained on the bundled published measurements.",
        panel="model",
        metavar="DIR",
        show_default=False,
        give="an artifact folder or hub id",
    )


#: ``--data``'s first sentence, the same in every command (:func:`load_models`).
_DATA_HELP = (
    "Sweep to take allowed configs (and doubly_robust's IPS correction) from, for a folder without a specband manifest."
)
#: ``--data``'s help per command: what else the sweep answers there (``recommend``: a power
#: limit within its --max-speed-loss; ``launch``: with --set-power-limit auto, within
#: :data:`specband.core.limits.DEFAULT_MAX_SPEED_LOSS`; ``schedule``: nothing).
DATA_HELP: dict[str, str] = {
    "recommend": _DATA_HELP + " Without --models, a sweep over several power limits (sweep/simulate "
    "--power-limits) answers with a limit: the lowest whose pick is within --max-speed-loss of the fastest "
    "and in the band.",
    "launch": _DATA_HELP + " With --set-power-limit auto, a sweep over several power limits (sweep/simulate "
    "--power-limits) answers with the limit: the lowest whose pick is within "
    f"{DEFAULT_MAX_SPEED_LOSS:.0%} of the fastest and in the band.",
    "schedule": _DATA_HELP + " Used with such a --models folder only (ignored without --models).",
}


def data_field(command: str = "recommend") -> Any:
    """``--data`` of ``command`` (``recommend``, ``launch`` or ``schedule``: the sweep of a
    foreign folder, :func:`load_models`; its help per command, :data:`DATA_HELP`)."""
    from specband.core.optionspec import option

    return option(None, "--data", help=DATA_HELP[command], panel="model", metavar="SWEEP", show_default=False)


def trust_pickle_field() -> Any:
    """``--trust-pickle`` (:mod:`specband.files.safeload`)."""
    from specband.core.optionspec import option

    return option(
        False,
        "--trust-pickle",
        help="Unpickle a joblib file (a pickle runs code from the file; specband's own folders need none). "
        "Never applied to ./specband-models picked up without --models.",
        panel="model",
    )


def allow_modified_field() -> Any:
    """``--allow-modified`` (:func:`specband.files.safeload.verify_files`)."""
    from specband.core.optionspec import option

    return option(
        False,
        "--allow-modified",
        help="Load policy files whose sha256 no longer matches the folder's specband.json (with a warning).",
        panel="model",
    )


def state_field(help_text: str) -> Any:
    """``--state TEMP_C MEM_MB UTIL_PCT``: the GPU state to decide from."""
    from specband.core.optionspec import option

    return option(
        None,
        "--state",
        help=help_text,
        panel="pick",
        metavar="TEMP_C MEM_MB UTIL_PCT",
        show_default=False,
        finite=False,  # check_gpu_state names the quantity and its range, nan and inf included
    )


def gpu_field() -> Any:
    """``--gpu PROFILE``: the user's GPU as a simulator profile (:func:`specband.deploy.transfer.user_gpu`)."""
    from specband.core.optionspec import option

    return option(
        None,
        "--gpu",
        help="Your GPU as a simulator profile (h100-sxm, h200, a100-sxm4-80gb, rtx4060-laptop), checked against "
        "the data's. Default: NVML's; without NVML the GPU is not checked (a note says so).",
        panel="setup",
        metavar="PROFILE",
        show_default=False,
    )


def target_field() -> Any:
    """``--target MODEL``: the user's target model, checked against the data's
    (:func:`specband.deploy.transfer.check_transfer`)."""
    return option(
        None,
        "--target",
        help="Your target model (path or id), checked against the data's. Default: the data's own.",
        panel="setup",
        metavar="MODEL",
        show_default=False,
    )


def allow_transfer_field() -> Any:
    """``--allow-transfer`` (:func:`specband.deploy.transfer.check_transfer`)."""
    from specband.core.optionspec import option

    return option(
        False,
        "--allow-transfer",
        help="Take a pick whose data came from another GPU, model or power limit (the difference is printed "
        "as a warning) instead of stopping.",
        panel="setup",
    )


@dataclass(frozen=True)
class RecommendRequest:
    """Every option of ``specband recommend``, checked when it is built (one line each).

    Raises:
        ConfigError: a bad ``--format``, ``--state`` or empty ``--draft-model``; both mix
            options, or ``--batch-size`` with one; neither ``--batch-size`` nor a mix.
    """

    batch_size: int | None = option(
        None,
        "--batch-size",
        "-b",
        help="Concurrent requests (--max-running-requests). Required unless --batch-mix or --batch-mix-from is given.",
        panel="pick",
        metavar="N",
        min=1,
        max=MAX_BATCH_SIZE,
        show_default=False,
    )
    algo: str = algo_field()
    models: Path | None = models_field()
    state: tuple[float, float, float] | None = state_field(
        "GPU state TEMP_C MEM_MB UTIL_PCT (for 'pre' models: the idle GPU before launch). "
        "Default: the state the folder's picks were made from."
    )
    output_format: str = option(
        "flags", "--format", "-f", help="'flags' (one line) or 'json'.", panel="output", metavar="KIND"
    )
    draft_model: str | None = option(
        None,
        "--draft-model",
        help="EAGLE3 draft model path or id, emitted as --speculative-draft-model-path.",
        panel="setup",
        metavar="PATH",
        give="the EAGLE3 draft model's path or hub id",
        show_default=False,
    )
    data: Path | None = data_field()
    trust_pickle: bool = trust_pickle_field()
    actions: str = action_set_field("the models (an extended folder is read with 'extended' only)", "model")
    allow_modified: bool = allow_modified_field()
    max_speed_loss: float = option(
        DEFAULT_MAX_SPEED_LOSS,
        "--max-speed-loss",
        help="With a sweep (--data) or a folder (--models) over several power limits: the speed loss "
        "(fraction) a lower limit may cost against the fastest pick.",
        panel="pick",
        metavar="F",
        min=0.0,
        max=0.99,
    )
    batch_mix: str | None = option(
        None,
        "--batch-mix",
        help="One pick for a batch-size mix BS:WEIGHT,... (weights normalised), with each batch size's own "
        "pick and the regret beside it.",
        panel="pick",
        metavar="MIX",
        show_default=False,
    )
    batch_mix_from: Path | None = option(
        None,
        "--batch-mix-from",
        help="As --batch-mix, the mix read from sglang's Prometheus metrics text (samples or a histogram of "
        "sglang:num_running_reqs).",
        panel="pick",
        metavar="FILE",
        show_default=False,
    )

    target: str | None = target_field()
    gpu: str | None = gpu_field()
    target_config: str | None = option(
        None,
        "--target-config",
        help="With --gpu: a simulated first guess for this target (config.json, folder, bundled name or hub id), "
        "labelled with the profile's calibration error against published measurements.",
        panel="setup",
        metavar="CONFIG",
        show_default=False,
    )
    draft_config: str | None = option(
        None,
        "--draft-config",
        help="With --gpu: the EAGLE3 draft head's config.json for the simulated first guess.",
        panel="setup",
        metavar="CONFIG",
        show_default=False,
    )
    allow_transfer: bool = allow_transfer_field()

    def __post_init__(self) -> None:
        from specband.core.errors import ConfigError

        if self.is_first_guess and self.gpu is None:
            raise ConfigError("--target-config/--draft-config make a simulated first guess: give --gpu PROFILE")
        if self.is_first_guess and self.is_mix:
            raise ConfigError("--target-config/--draft-config answer for one --batch-size, not a mix")
        if self.output_format not in ("flags", "json"):
            raise ConfigError(f"--format must be 'flags' or 'json', got {self.output_format!r}")
        if self.state is not None:
            from specband.contract.state import check_gpu_state

            check_gpu_state(*self.state, option="--state")
        if self.draft_model is not None and not self.draft_model.strip():
            raise ConfigError("--draft-model: empty; give the EAGLE3 draft model's path or hub id")
        if self.is_mix:
            if self.batch_mix is not None and self.batch_mix_from is not None:
                raise ConfigError("--batch-mix and --batch-mix-from are alternatives; give one")
            if self.batch_size is not None:
                raise ConfigError(
                    "--batch-size is for one batch size; a mix takes --batch-mix or --batch-mix-from alone"
                )
        elif self.batch_size is None:
            raise ConfigError("--batch-size is required (or --batch-mix / --batch-mix-from for a batch-size mix)")

    @property
    def is_first_guess(self) -> bool:
        """A simulated first guess (``--target-config`` or ``--draft-config``)."""
        return self.target_config is not None or self.draft_config is not None

    @property
    def is_mix(self) -> bool:
        """A pick for a batch-size mix (``--batch-mix`` or ``--batch-mix-from``)."""
        return self.batch_mix is not None or self.batch_mix_from is not None


@dataclass(frozen=True)
class Recommendation:
    """A pick and what the user should know about it.

    Attributes:
        pick: the :class:`~specband.deploy.answers.Pick` (``pick.to_json()`` is what
            ``--format json`` prints).
        notes: one-line notes (which folder was used, an unmeasured batch size, ...), in order.
    """

    pick: Pick
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class LoadedModels:
    """One algorithm's policy as every command loads it (:func:`load_models`).

    Attributes:
        algorithm: model card algorithm name.
        folder: the artifact folder, or ``None`` for the embedded default.
        manifest: its :class:`~specband.artifacts.folder.Manifest` (rebuilt from ``--data`` for a
            foreign folder).
        policy: the fitted policy, or ``None`` for ``lookup_table``.
        lookup_means: ``lookup_table``'s batch size -> action index -> mean reward.
        notes: one-line notes for the user (which folder, what was ignored), in order.
    """

    algorithm: str
    folder: Path | None
    manifest: Any
    policy: Any = None
    lookup_means: Any = None
    notes: tuple[str, ...] = ()


def load_models(
    algo: str,
    models: str | Path | None = None,
    data_path: str | Path | None = None,
    *,
    trust_pickle: bool = False,
    allow_modified: bool = False,
) -> LoadedModels:
    """Load ``algo`` the one way ``recommend``, ``recommend --batch-mix``, ``schedule`` and
    ``launch`` (``--schedule auto`` too) do: ``models`` (a folder or a hub id), else
    ``./specband-models`` when it holds ``algo``, else the embedded default.

    Args:
        algo: model card algorithm name.
        models: artifact folder or hub id, or ``None``.
        data_path: sweep restricting a foreign folder's picks to measured configs.
        trust_pickle: unpickle joblib files (:mod:`specband.files.safeload`); never applied to
            ``./specband-models`` picked up without being named.
        allow_modified: load files whose sha256 no longer matches the folder's manifest
            (a warning on stderr).

    Raises:
        ConfigError: unknown algorithm; ArtifactError: unreadable folder or an untrusted
        pickle; DataError: bad sweep; HubError: a hub id not found.
    """
    from specband.artifacts.folder import embedded_manifest, validate_algorithms
    from specband.core.errors import SpecbandError
    from specband.files.hub import resolve_data_file, resolve_folder

    validate_algorithms([algo])
    notes: list[str] = []
    note = notes.append
    policy: Any = None
    implicit = False
    if models is not None:
        models = resolve_folder(models)
    if data_path is not None:
        data_path = resolve_data_file(data_path)
    if models is None and _implicit_folder(algo, note):
        models = Path(DEFAULT_MODELS_DIR)
        implicit = True
        trust_pickle = False  # a folder nobody named is never unpickled
        note(f"using ./{DEFAULT_MODELS_DIR} (written by `specband train`; --models DIR picks another folder)")
    if models is None:
        _check_embedded_action_set()
        if data_path is not None:
            note("--data is used with --models only; ignored")
        if algo == "lookup_table":
            manifest = embedded_manifest()
            return LoadedModels(algo, None, manifest, None, manifest.mean_rewards, tuple(notes))
        from specband.artifacts.fit import embedded_policy

        note(f"no --models: training {algo} on the bundled published measurements (seed 0)")
        policy, manifest = embedded_policy(algo)
        return LoadedModels(algo, None, manifest, policy, None, tuple(notes))
    folder = Path(models)
    try:
        return _load_folder(folder, algo, data_path, notes, trust_pickle=trust_pickle, allow_modified=allow_modified)
    except SpecbandError as exc:
        if not implicit:
            raise
        raise type(exc)(
            f"{exc} (./{DEFAULT_MODELS_DIR} was picked up without --models; --models DIR names a folder)"
        ) from None


def _implicit_folder(algo: str, note: Callable[[str], None]) -> bool:
    """Whether ``./specband-models`` is picked up for ``algo`` without ``--models``: only a
    folder with specband's manifest (written by ``specband train``) that holds ``algo``.
    Anything else found under that name is announced through ``note`` (what was found, and
    that the embedded default is used instead); nothing there: no note.

    Raises:
        ArtifactError: the folder's ``specband.json`` is unreadable or malformed (as with
            ``--models``), the message saying the folder was picked up without ``--models``.
    """
    import os

    from specband.artifacts.folder import ARTIFACT_FILES, MANIFEST_FILE, available_algorithms, load_manifest
    from specband.core.errors import ArtifactError

    folder = Path(DEFAULT_MODELS_DIR)
    shown = f"./{DEFAULT_MODELS_DIR}"
    instead = "using the embedded default"
    if not os.path.lexists(folder):
        return False
    if folder.is_symlink() and not folder.exists():
        note(f"{shown} is a dangling symlink (to {os.readlink(folder)}); {instead}")
        return False
    if not folder.is_dir():
        note(f"{shown} is not a folder (a file named like specband's default folder); {instead}")
        return False
    if not (folder / MANIFEST_FILE).is_file():
        found = [ARTIFACT_FILES[a] for a in available_algorithms(folder)]
        holds = f" (it holds {', '.join(found)})" if found else ""
        note(
            f"{shown} has no {MANIFEST_FILE}, so `specband train` did not write it{holds}; not picked up "
            f"without --models: {instead} (--models {shown} reads it)"
        )
        return False
    try:
        algorithms = load_manifest(folder).algorithms
    except ArtifactError as exc:
        raise ArtifactError(
            f"{exc} ({shown} was picked up without --models; --models DIR names another folder)"
        ) from None
    if algo not in algorithms:
        note(f"{shown} has no {algo}; {instead}")
        return False
    return True


def _load_folder(
    folder: Path, algo: str, data_path: Path | None, notes: list[str], *, trust_pickle: bool, allow_modified: bool
) -> LoadedModels:
    """:func:`load_models` of a folder."""
    from specband.artifacts.folder import load_manifest, verify_algorithm_files

    note = notes.append
    policy: Any = None
    manifest = load_manifest(folder)
    training = None
    if data_path is not None:
        if manifest.foreign:
            import dataclasses

            from specband.artifacts.fit import build_manifest
            from specband.sweeps.dataset import load_sweep

            sweep = load_sweep(data_path)
            training = sweep.training_data(manifest.features)
            manifest = dataclasses.replace(build_manifest(training, [algo], seed=None, sweep=sweep), foreign=True)
        else:
            note(f"{folder} has a specband manifest; --data ignored")
    lookup_means: Any = None
    if algo == "lookup_table":
        from specband.policies.lookup_core import read_lookup_folder

        verify_algorithm_files(folder, algo, allow_modified=allow_modified)
        lookup_means = read_lookup_folder(folder).means
    else:
        from specband.artifacts.folder import load_policy

        policy = load_policy(folder, algo, training, trust_pickle=trust_pickle, allow_modified=allow_modified)
    if manifest.foreign and training is None:
        note(
            f"{folder} has no specband manifest: picking among all 19 actions from the default state "
            "(pass --data SWEEP to restrict them to the configs measured there)"
        )
        if algo == "doubly_robust" and getattr(policy, "correction_source", "") == "none":
            note("doubly_robust without its IPS correction (no sidecar, no --data): direct model only")
    return LoadedModels(algo, folder, manifest, policy, lookup_means, tuple(notes))


def _check_embedded_action_set() -> None:
    """The embedded default is a contract model: refuse it under another action set.

    Raises:
        ConfigError: naming ``--models`` and ``--actions``.
    """
    from specband.contract.actions import active_action_set
    from specband.core.errors import ConfigError

    name = active_action_set()
    if name != "contract":
        raise ConfigError(
            f"--actions {name} needs --models DIR of a folder trained with `specband train --actions {name}` "
            f"(./{DEFAULT_MODELS_DIR} and the embedded default are not)"
        )


def recommend(
    batch_size: int,
    algo: str = "lookup_table",
    models: str | Path | None = None,
    telemetry: tuple[float, float, float] | None = None,
    draft_model: str | None = None,
    data_path: str | Path | None = None,
    *,
    trust_pickle: bool = False,
    allow_modified: bool = False,
    setup: UserSetup | None = None,
    allow_transfer: bool = False,
) -> Recommendation:
    """The pick of one algorithm for a batch size (a :class:`~specband.deploy.answers.Pick`, whose
    ``to_json()`` is what ``specband recommend --format json`` prints) and the notes that go
    with it, as data: the caller decides whether and when to print them.

    Args:
        batch_size: concurrent requests; an unmeasured one uses the nearest measured one.
        algo: model card algorithm name.
        models: artifact folder, or ``None`` for the embedded default (bundled data).
        telemetry: ``(temp_c, mem_used_mb, util_pct)`` of the GPU, or ``None`` for the
            state the folder's picks were made from.
        draft_model: EAGLE3 draft path for ``--speculative-draft-model-path`` (or ``None``).
        data_path: sweep restricting a foreign folder's picks to measured configs.
        trust_pickle: unpickle joblib files specband cannot vouch for (see
            :mod:`specband.files.safeload`).
        setup: the user's target, draft, GPU and power limit, checked against the data's
            (:func:`specband.deploy.transfer.check_transfer`); ``None``: not checked.
        allow_transfer: take a pick whose data came from another setup (the differences
            become notes) instead of stopping.

    Returns:
        a :class:`Recommendation`; its ``pick`` (:class:`~specband.deploy.answers.Pick`) has
        ``action_index``, ``action`` (triple), ``flags``, ``kwargs``, ``features``, ``state``,
        ``source``, ``measured_batch_size``, ``mean_reward``, ``origin`` (:func:`pick_origin`),
        ``explanation`` (:func:`specband.deploy.explain.explain_pick`) and ``transfer`` (the
        :class:`~specband.deploy.transfer.TransferCheck`: the differences taken).

    Raises:
        ConfigError: unknown algorithm, an empty ``draft_model``; TransferError: the data is
        from another setup and ``allow_transfer`` is False; ArtifactError: unreadable
        folder or an untrusted pickle; DataError: bad sweep; HubError: a hub id not found.
    """
    # The lookup_table path reads JSON only: no NumPy, torch or scikit-learn (cold-fast).
    from specband.contract.actions import EXTENDED_ACTIONS, active_action_set, server_args_kwargs, sglang_cli_args
    from specband.core.errors import ConfigError
    from specband.deploy.explain import explain_pick

    if draft_model is not None and not draft_model.strip():
        raise ConfigError("draft model: empty; give the EAGLE3 draft model's path or hub id")
    loaded = load_models(algo, models, data_path, trust_pickle=trust_pickle, allow_modified=allow_modified)
    notes = list(loaded.notes)
    manifest, policy, lookup_means = loaded.manifest, loaded.policy, loaded.lookup_means
    source = "embedded (bundled published measurements)" if loaded.folder is None else str(loaded.folder)
    from specband.deploy.transfer import TransferCheck, check_transfer

    checked = TransferCheck()
    if setup is not None:
        label = "the embedded study policy" if loaded.folder is None else str(loaded.folder)
        checked = check_transfer(manifest.origin, setup, allow=allow_transfer, source=label)
        notes.extend(checked.warnings)
    notes.extend(data_notes(manifest, source, telemetry))
    measured = manifest.measured_batch_size(batch_size)
    notes.extend(unmeasured_notes(manifest, [batch_size]))
    state = manifest.state_for(batch_size, telemetry)
    if lookup_means is not None:
        from specband.policies.lookup_core import lookup_pick

        index = lookup_pick(
            lookup_means, batch_size if measured is None else measured, manifest.allowed_indices(batch_size)
        )
    else:
        assert policy is not None
        index = policy.act(state, manifest.allowed_for(batch_size))
    action = EXTENDED_ACTIONS[index]  # the contract's 19 first: right for either set
    pick = Pick(
        algorithm=algo,
        batch_size=batch_size,
        measured_batch_size=measured,
        features=manifest.features,
        state=tuple(float(f"{float(v):.7g}") for v in state),  # float32 precision
        source=source,
        action_index=index,
        action=action,
        flags=tuple(sglang_cli_args(action, draft_model)),
        kwargs=server_args_kwargs(action, draft_model),
        mean_reward=None if measured is None else manifest.mean_reward(measured, index),
        origin=pick_origin(manifest, measured),
        explanation=explain_pick(manifest, measured, index),
        transfer=checked,
        action_set=None if active_action_set() == "contract" else active_action_set(),
    )
    return Recommendation(pick, tuple(notes))


def data_notes(manifest: Manifest, source: str, telemetry: tuple[float, float, float] | None) -> list[str]:
    """What a pick from ``manifest``'s data must say beside its origin line
    (:func:`specband.deploy.explain.origin_line`), as ``recommend`` and ``recommend --batch-mix``
    say it: rows that are a simulation (``source`` names the folder), and GPU readings
    (``telemetry``) read against a policy trained on the contract state."""
    notes = []
    if manifest.origin is not None and manifest.origin.simulated:
        notes.append(
            f"{source}: trained on SIMULATED rows ({manifest.origin.profile or 'simulator'}); every figure is a "
            "simulation, not a measurement (a sweep on the GPU settles it)"
        )
    if telemetry is not None and manifest.features == "contract":
        notes.append(
            "these policies use the contract state, whose memory and utilisation were read after each "
            "run; the readings given here are not what they were trained on (train with --features pre "
            "for decisions from the idle GPU)"
        )
    return notes


def unmeasured_notes(manifest: Manifest, batch_sizes: Iterable[int]) -> list[str]:
    """One note per batch size of ``batch_sizes`` that was not measured, naming the nearest
    measured one the pick is made for."""
    notes = []
    for batch_size in batch_sizes:
        measured = manifest.measured_batch_size(batch_size)
        if measured is not None and measured != batch_size:
            notes.append(
                f"batch size {batch_size} was not measured; picking for the nearest measured batch size {measured}"
            )
    return notes


def pick_origin(manifest: Manifest, measured_batch_size: int | None) -> dict[str, Any]:
    """What a pick rests on, as ``recommend --format json`` prints it under ``origin``: the
    data's :class:`~specband.sweeps.origin.DataOrigin` fields (``hardware``, ``power_limit_w``,
    ``target_model``, ``draft_model``, ``sglang_version``, ``workload``, ``provenance``,
    ``power_measured``, ``power_source``, ``profile``; ``None`` where the folder does not
    say), ``rows`` and ``repeats`` behind the batch size (successful rows; distinct
    ``(trial, repeat)`` runs, the most of any action there) and ``heldout_interval``
    (``None``: ``specband evaluate`` reports it, the folder does not record one)."""
    from specband.sweeps.origin import DataOrigin

    origin = manifest.origin or DataOrigin(provenance="unknown")
    bs = measured_batch_size
    counts = manifest.row_counts.get(bs, {}) if bs is not None else {}
    stats = manifest.stats.get(bs, {}) if bs is not None else {}
    return {
        **origin.to_json(),
        "rows": sum(counts.values()) if counts else None,
        "repeats": max((s.repeats for s in stats.values()), default=None),
        "heldout_interval": None,
    }


def recommend_request(request: RecommendRequest, setup: UserSetup | None = None) -> Recommendation:
    """:func:`recommend` for a one-batch-size :class:`RecommendRequest`, the user's ``setup``
    (:func:`specband.deploy.usersetup.user_setup`) checked against the data's, read against
    ``--actions``. A first guess (``request.is_first_guess``) is
    :func:`specband.deploy.firstguess.first_guess`, a floor up."""
    from specband.contract.actions import use_action_set

    assert request.batch_size is not None  # checked when the request was built
    with use_action_set(request.actions):
        return recommend(
            request.batch_size,
            request.algo,
            request.models,
            request.state,
            request.draft_model,
            request.data,
            trust_pickle=request.trust_pickle,
            allow_modified=request.allow_modified,
            setup=setup,
            allow_transfer=request.allow_transfer,
        )
