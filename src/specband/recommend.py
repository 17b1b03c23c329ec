"""What ``specband recommend`` (and ``launch``) decide: the pick of one algorithm for a
batch size and GPU state, with its notes, returned as data. The CLI prints; it never decides.

Only the standard library is imported at module level; the ``lookup_table`` path reads JSON
only (no NumPy, torch or scikit-learn), so a cold ``specband recommend`` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.actions import action_set_field
from specband.limits import MAX_BATCH_SIZE
from specband.optionspec import option

__all__ = [
    "DEFAULT_MODELS_DIR",
    "LoadedModels",
    "RecommendRequest",
    "Recommendation",
    "folder_algorithms",
    "load_models",
    "recommend",
    "recommend_request",
]

#: Default artifact folder of ``specband train``, picked up by ``recommend`` and ``launch``.
DEFAULT_MODELS_DIR = "specband-models"


# The options of every command that asks a policy (recommend, launch, schedule), declared
# once (:mod:`specband.optionspec`); each returns a request dataclass field.


def algo_field() -> Any:
    """``--algo/-a``: the model card algorithm to ask."""
    from specband.optionspec import option

    return option("lookup_table", "--algo", "-a", help="Algorithm to ask.", panel="model", metavar="NAME")


def models_field() -> Any:
    """``--models/-m``: artifact folder or hub id (:func:`load_models`)."""
    from specband.optionspec import option

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
    )


def data_field() -> Any:
    """``--data``: the sweep of a foreign folder (:func:`load_models`)."""
    from specband.optionspec import option

    return option(
        None,
        "--data",
        help="Sweep to take allowed configs (and doubly_robust's IPS correction) from, for a folder "
        "without a specband manifest.",
        panel="model",
        metavar="SWEEP",
        show_default=False,
    )


def trust_pickle_field() -> Any:
    """``--trust-pickle`` (:mod:`specband.safeload`)."""
    from specband.optionspec import option

    return option(
        False,
        "--trust-pickle",
        help="Unpickle a joblib file that specband did not write (no matching sha256 in the folder's "
        "specband.json, or a downloaded folder). Unpickling runs code from the file.",
        panel="model",
    )


def state_field(help_text: str) -> Any:
    """``--state TEMP_C MEM_MB UTIL_PCT``: the GPU state to decide from."""
    from specband.optionspec import option

    return option(None, "--state", help=help_text, panel="pick", metavar="TEMP_C MEM_MB UTIL_PCT", show_default=False)


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
        panel="pick",
        metavar="PATH",
        show_default=False,
    )
    data: Path | None = data_field()
    trust_pickle: bool = trust_pickle_field()
    actions: str = action_set_field("the models (an extended folder is read with 'extended' only)")
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

    def __post_init__(self) -> None:
        from specband.errors import ConfigError

        if self.output_format not in ("flags", "json"):
            raise ConfigError(f"--format must be 'flags' or 'json', got {self.output_format!r}")
        if self.state is not None:
            from specband.state import check_gpu_state

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
    def is_mix(self) -> bool:
        """A pick for a batch-size mix (``--batch-mix`` or ``--batch-mix-from``)."""
        return self.batch_mix is not None or self.batch_mix_from is not None


@dataclass(frozen=True)
class Recommendation:
    """A pick and what the user should know about it.

    Attributes:
        pick: the JSON-ready pick (see :func:`recommend`).
        notes: one-line notes (which folder was used, an unmeasured batch size, ...), in order.
    """

    pick: dict[str, Any]
    notes: tuple[str, ...] = ()


def folder_algorithms(folder: Path) -> tuple[str, ...]:
    """Algorithms of an existing specband folder at ``folder`` (empty when there is none
    or its manifest is unreadable)."""
    from specband.artifacts import MANIFEST_FILE, load_manifest
    from specband.errors import ArtifactError

    if not (folder / MANIFEST_FILE).is_file():
        return ()
    try:
        return load_manifest(folder).algorithms
    except ArtifactError:
        return ()


@dataclass(frozen=True)
class LoadedModels:
    """One algorithm's policy as every command loads it (:func:`load_models`).

    Attributes:
        algorithm: model card algorithm name.
        folder: the artifact folder, or ``None`` for the embedded default.
        manifest: its :class:`~specband.artifacts.Manifest` (rebuilt from ``--data`` for a
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
) -> LoadedModels:
    """Load ``algo`` the one way ``recommend``, ``recommend --batch-mix``, ``schedule`` and
    ``launch`` (``--schedule auto`` too) do: ``models`` (a folder or a hub id), else
    ``./specband-models`` when it holds ``algo``, else the embedded default.

    Args:
        algo: model card algorithm name.
        models: artifact folder or hub id, or ``None``.
        data_path: sweep restricting a foreign folder's picks to measured configs.
        trust_pickle: unpickle joblib files specband cannot vouch for (:mod:`specband.safeload`).

    Raises:
        ConfigError: unknown algorithm; ArtifactError: unreadable folder or an untrusted
        pickle; DataError: bad sweep; HubError: a hub id not found.
    """
    from specband.artifacts import embedded_manifest, load_manifest, validate_algorithms
    from specband.hub import resolve_data_file, resolve_folder

    validate_algorithms([algo])
    notes: list[str] = []
    note = notes.append
    policy: Any = None
    if models is not None:
        models = resolve_folder(models)
    if data_path is not None:
        data_path = resolve_data_file(data_path)
    if models is None and (Path(DEFAULT_MODELS_DIR) / "specband.json").is_file():
        if algo in folder_algorithms(Path(DEFAULT_MODELS_DIR)):
            models = Path(DEFAULT_MODELS_DIR)
            note(f"using ./{DEFAULT_MODELS_DIR} (written by `specband train`; --models DIR picks another folder)")
        else:
            note(f"./{DEFAULT_MODELS_DIR} has no {algo}; using the embedded default")
    if models is None:
        _check_embedded_action_set()
        if data_path is not None:
            note("--data is used with --models only; ignored")
        if algo == "lookup_table":
            manifest = embedded_manifest()
            return LoadedModels(algo, None, manifest, None, manifest.mean_rewards, tuple(notes))
        from specband.training import embedded_policy

        note(f"no --models: training {algo} on the bundled published measurements (seed 0)")
        policy, manifest = embedded_policy(algo)
        return LoadedModels(algo, None, manifest, policy, None, tuple(notes))
    folder = Path(models)
    manifest = load_manifest(folder)
    training = None
    if data_path is not None:
        if manifest.foreign:
            import dataclasses

            from specband.dataset import load_sweep
            from specband.training import build_manifest

            sweep = load_sweep(data_path)
            training = sweep.training_data(manifest.features)
            manifest = dataclasses.replace(build_manifest(training, [algo], seed=None, sweep=sweep), foreign=True)
        else:
            note(f"{folder} has a specband manifest; --data ignored")
    lookup_means: Any = None
    if algo == "lookup_table":
        from specband.policies.lookup_core import read_lookup_folder

        lookup_means = read_lookup_folder(folder).means
    else:
        from specband.artifacts import load_policy

        policy = load_policy(folder, algo, training, trust_pickle=trust_pickle)
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
    from specband.actions import active_action_set
    from specband.errors import ConfigError

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
) -> Recommendation:
    """The pick of one algorithm for a batch size (the ``pick`` dict is what
    ``specband recommend --format json`` prints) and the notes that go with it, as data:
    the caller decides whether and when to print them.

    Args:
        batch_size: concurrent requests; an unmeasured one uses the nearest measured one.
        algo: model card algorithm name.
        models: artifact folder, or ``None`` for the embedded default (bundled data).
        telemetry: ``(temp_c, mem_used_mb, util_pct)`` of the GPU, or ``None`` for the
            state the folder's picks were made from.
        draft_model: EAGLE3 draft path for ``--speculative-draft-model-path`` (or ``None``).
        data_path: sweep restricting a foreign folder's picks to measured configs.
        trust_pickle: unpickle joblib files specband cannot vouch for (see
            :mod:`specband.safeload`).

    Returns:
        a :class:`Recommendation`; its ``pick`` has ``action_index``, ``action`` (triple),
        ``flags``, ``kwargs``, ``features``, ``state``, ``source``, ``measured_batch_size``
        and ``mean_reward``.

    Raises:
        ConfigError: unknown algorithm, an empty ``draft_model``; ArtifactError: unreadable
        folder or an untrusted pickle; DataError: bad sweep; HubError: a hub id not found.
    """
    # The lookup_table path reads JSON only: no NumPy, torch or scikit-learn (cold-fast).
    from specband.actions import EXTENDED_ACTIONS, active_action_set, server_args_kwargs, sglang_cli_args
    from specband.errors import ConfigError

    if draft_model is not None and not draft_model.strip():
        raise ConfigError("draft model: empty; give the EAGLE3 draft model's path or hub id")
    loaded = load_models(algo, models, data_path, trust_pickle=trust_pickle)
    notes = list(loaded.notes)
    note = notes.append
    manifest, policy, lookup_means = loaded.manifest, loaded.policy, loaded.lookup_means
    source = "embedded (bundled published measurements)" if loaded.folder is None else str(loaded.folder)
    if telemetry is not None and manifest.features == "contract":
        note(
            "these policies use the contract state, whose memory and utilisation were read after each "
            "run; the readings given here are not what they were trained on (train with --features pre "
            "for decisions from the idle GPU)"
        )
    measured = manifest.measured_batch_size(batch_size)
    if measured is not None and measured != batch_size:
        note(f"batch size {batch_size} was not measured; picking for the nearest measured batch size {measured}")
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
    pick = {
        "algorithm": algo,
        "batch_size": batch_size,
        "measured_batch_size": measured,
        "features": manifest.features,
        "state": [float(f"{float(v):.7g}") for v in state],  # float32 precision
        "source": source,
        "action_index": index,
        "action": list(action),
        "flags": sglang_cli_args(action, draft_model),
        "kwargs": server_args_kwargs(action, draft_model),
        "mean_reward": None if measured is None else manifest.mean_reward(measured, index),
    }
    if active_action_set() != "contract":
        pick["action_set"] = active_action_set()
    return Recommendation(pick, tuple(notes))


def recommend_request(request: RecommendRequest) -> Recommendation:
    """:func:`recommend` for a one-batch-size :class:`RecommendRequest`."""
    from specband.actions import use_action_set

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
        )
