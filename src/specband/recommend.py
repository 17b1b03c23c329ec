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
    from specband.artifacts import Manifest
    from specband.transfer import UserSetup

__all__ = ["DEFAULT_MODELS_DIR", "Recommendation", "folder_algorithms", "pick_origin", "recommend"]

#: Default artifact folder of ``specband train``, picked up by ``recommend`` and ``launch``.
DEFAULT_MODELS_DIR = "specband-models"


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


def recommend(
    batch_size: int,
    algo: str = "lookup_table",
    models: str | Path | None = None,
    telemetry: tuple[float, float, float] | None = None,
    draft_model: str | None = None,
    data_path: str | Path | None = None,
    *,
    trust_pickle: bool = False,
    setup: UserSetup | None = None,
    allow_transfer: bool = False,
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
        setup: the user's target, draft, GPU and power limit, checked against the data's
            (:func:`specband.transfer.check_transfer`); ``None``: not checked.
        allow_transfer: take a pick whose data came from another setup (the differences
            become notes) instead of stopping.

    Returns:
        a :class:`Recommendation`; its ``pick`` has ``action_index``, ``action`` (triple),
        ``flags``, ``kwargs``, ``features``, ``state``, ``source``, ``measured_batch_size``,
        ``mean_reward``, ``origin`` (:func:`pick_origin`), ``explanation``
        (:func:`specband.explain.explain_pick`) and ``transfer`` (the differences taken).

    Raises:
        ConfigError: unknown algorithm, an empty ``draft_model``; TransferError: the data is
        from another setup and ``allow_transfer`` is False; ArtifactError: unreadable
        folder or an untrusted pickle; DataError: bad sweep; HubError: a hub id not found.
    """
    # The lookup_table path reads JSON only: no NumPy, torch or scikit-learn (cold-fast).
    from specband.actions import ACTIONS, server_args_kwargs, sglang_cli_args
    from specband.artifacts import embedded_manifest, load_manifest, validate_algorithms
    from specband.errors import ConfigError
    from specband.explain import explain_pick
    from specband.hub import resolve_data_file, resolve_folder

    validate_algorithms([algo])
    if draft_model is not None and not draft_model.strip():
        raise ConfigError("draft model: empty; give the EAGLE3 draft model's path or hub id")
    notes: list[str] = []
    note = notes.append
    if models is not None:
        models = resolve_folder(models)
    if data_path is not None:
        data_path = resolve_data_file(data_path)
    policy = None
    lookup_means = None
    if models is None and (Path(DEFAULT_MODELS_DIR) / "specband.json").is_file():
        if algo in folder_algorithms(Path(DEFAULT_MODELS_DIR)):
            models = Path(DEFAULT_MODELS_DIR)
            note(f"using ./{DEFAULT_MODELS_DIR} (written by `specband train`; --models DIR picks another folder)")
        else:
            note(f"./{DEFAULT_MODELS_DIR} has no {algo}; using the embedded default")
    if models is None:
        if data_path is not None:
            note("--data is used with --models only; ignored")
        source = "embedded (bundled published measurements)"
        if algo == "lookup_table":
            manifest = embedded_manifest()
            lookup_means = manifest.mean_rewards
        else:
            from specband.training import embedded_policy

            note(f"no --models: training {algo} on the bundled published measurements (seed 0)")
            policy, manifest = embedded_policy(algo)
    else:
        manifest = load_manifest(models)
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
                note(f"{models} has a specband manifest; --data ignored")
        if algo == "lookup_table":
            from specband.policies.lookup_core import read_lookup_folder

            lookup_means = read_lookup_folder(models).means
        else:
            from specband.artifacts import load_policy

            policy = load_policy(models, algo, training, trust_pickle=trust_pickle)
        source = str(models)
        if manifest.foreign and training is None:
            note(
                f"{models} has no specband manifest: picking among all 19 actions from the default state "
                "(pass --data SWEEP to restrict them to the configs measured there)"
            )
            if algo == "doubly_robust" and getattr(policy, "correction_source", "") == "none":
                note("doubly_robust without its IPS correction (no sidecar, no --data): direct model only")
    from specband.transfer import TransferCheck, check_transfer

    checked = TransferCheck()
    if setup is not None:
        label = "the embedded study policy" if models is None else str(models)
        checked = check_transfer(manifest.origin, setup, allow=allow_transfer, source=label)
        notes.extend(checked.warnings)
    if manifest.origin is not None and manifest.origin.simulated:
        note(
            f"{source}: trained on SIMULATED rows ({manifest.origin.profile or 'simulator'}); every figure is a "
            "simulation, not a measurement (a sweep on the GPU settles it)"
        )
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
    action = ACTIONS[index]
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
        "origin": pick_origin(manifest, measured),
        "explanation": explain_pick(manifest, measured, index),
        "transfer": checked.to_json(),
    }
    return Recommendation(pick, tuple(notes))


def pick_origin(manifest: Manifest, measured_batch_size: int | None) -> dict[str, Any]:
    """What a pick rests on, as ``recommend --format json`` prints it under ``origin``: the
    data's :class:`~specband.origin.DataOrigin` fields (``hardware``, ``power_limit_w``,
    ``target_model``, ``draft_model``, ``sglang_version``, ``workload``, ``provenance``,
    ``power_measured``, ``power_source``, ``profile``; ``None`` where the folder does not
    say), ``rows`` and ``repeats`` behind the batch size (successful rows; distinct
    ``(trial, repeat)`` runs, the most of any action there) and ``heldout_interval``
    (``None``: ``specband evaluate`` reports it, the folder does not record one)."""
    from specband.origin import DataOrigin

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
