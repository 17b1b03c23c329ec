"""What ``specband recommend`` (and ``launch``) decide: the pick of one algorithm for a
batch size and GPU state, with its notes, returned as data. The CLI prints; it never decides.

Only the standard library is imported at module level; the ``lookup_table`` path reads JSON
only (no NumPy, torch or scikit-learn), so a cold ``specband recommend`` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.powerpicks import (
    DEFAULT_MAX_SPEED_LOSS,
    LimitPick,
    PowerLimitRecommendation,
    choose_power_limit,
    power_limit_table,
    recommend_power_limit,
    recommend_power_limit_from_table,
    sweep_power_limits,
)

__all__ = [
    "DEFAULT_MAX_SPEED_LOSS",
    "DEFAULT_MODELS_DIR",
    "LimitPick",
    "PowerLimitRecommendation",
    "Recommendation",
    "choose_power_limit",
    "folder_algorithms",
    "folder_power_limits",
    "power_limit_pick",
    "power_limit_summary",
    "power_limit_table",
    "power_limits_of_file",
    "recommend",
    "recommend_power_limit",
    "recommend_power_limit_from_table",
    "sweep_power_limits",
]

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
    from specband.actions import ACTIONS, server_args_kwargs, sglang_cli_args
    from specband.artifacts import embedded_manifest, load_manifest, validate_algorithms
    from specband.errors import ConfigError
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
    }
    return Recommendation(pick, tuple(notes))


def power_limit_pick(decided: PowerLimitRecommendation, draft_model: str | None = None) -> dict[str, Any]:
    """The JSON-ready answer of ``recommend`` when the data holds several power limits
    (what ``--format json`` prints): the limit and its command, the flags, and the pick at
    every limit.

    Returns:
        ``power_limit_w``, ``nvidia_smi``, ``action`` (triple), ``action_index``, ``flags``,
        ``kwargs``, ``batch_size``, ``measured_batch_size``, ``in_band``, ``utilization``,
        ``speed_tok_s``, ``speed_loss``, ``max_speed_loss``, ``joules_per_token``,
        ``default_power_limit_w``, ``default_joules_per_token``, ``default_utilization``,
        ``band``, ``provenance`` and ``picks`` (one object per limit).
    """
    from specband.actions import ACTIONS, server_args_kwargs, sglang_cli_args

    chosen, default = decided.chosen, decided.default
    action = ACTIONS[chosen.action_index]
    return {
        "batch_size": decided.batch_size,
        "measured_batch_size": decided.measured_batch_size,
        "power_limit_w": chosen.power_limit_w,
        "nvidia_smi": decided.nvidia_smi_command,
        "action_index": chosen.action_index,
        "action": list(action),
        "flags": sglang_cli_args(action, draft_model),
        "kwargs": server_args_kwargs(action, draft_model),
        "in_band": chosen.in_band,
        "utilization": chosen.utilization,
        "speed_tok_s": chosen.speed_tok_s,
        "speed_loss": decided.speed_loss,
        "max_speed_loss": decided.max_speed_loss,
        "joules_per_token": chosen.joules_per_token,
        "default_power_limit_w": default.power_limit_w,
        "default_joules_per_token": default.joules_per_token,
        "default_utilization": default.utilization,
        "band": list(decided.band),
        "provenance": decided.provenance,
        "picks": [
            {
                "power_limit_w": p.power_limit_w,
                "action": list(p.action),
                "speed_tok_s": p.speed_tok_s,
                "utilization": p.utilization,
                "joules_per_token": p.joules_per_token,
                "in_band": p.in_band,
                "mean_reward": p.mean_reward,
                "runs": p.runs,
            }
            for p in decided.picks
        ],
    }


def power_limit_summary(decided: PowerLimitRecommendation) -> str:
    """One line saying what the chosen limit does against the default, with where the data
    came from (``recommend`` prints it beside the ``nvidia-smi -pl`` line)."""
    chosen, default = decided.chosen, decided.default

    def pct(value: float | None) -> str:
        return "?" if value is None else f"{value:.1%}"

    def jpt(value: float | None) -> str:
        return "?" if value is None else f"{value:.4g} J/token"

    band = f"{decided.band[0]:.0%}-{decided.band[1]:.0%}"
    return (
        f"power limit {chosen.power_limit_w:g} W (default as swept: {default.power_limit_w:g} W): "
        f"pick {chosen.action} at {pct(chosen.utilization)} of the limit "
        f"({'in' if chosen.in_band else 'NOT in'} the band {band}); {chosen.speed_tok_s:.4g} tok/s, "
        f"{decided.speed_loss:.1%} below the fastest pick (bound {decided.max_speed_loss:.1%}); "
        f"energy {jpt(chosen.joules_per_token)} vs {jpt(default.joules_per_token)} at {default.power_limit_w:g} W "
        f"(utilisation there {pct(default.utilization)}); from {decided.provenance} rows"
    )


def power_limits_of_file(path: str | Path) -> tuple[float, ...]:
    """The distinct ``power_limit_watts`` of a sweep file's rows (read through the bounded
    sweep reader; a hub id is resolved first), increasing."""
    from specband.dataset import load_sweep
    from specband.hub import resolve_data_file

    return sweep_power_limits(load_sweep(resolve_data_file(path)))


def folder_power_limits(models: str | Path) -> dict[str, Any] | None:
    """The ``power_limits`` of a specband folder's manifest (a folder trained on a sweep over
    several limits), or ``None`` (one limit, a foreign folder, no manifest).

    Raises:
        ArtifactError: an unreadable or invalid manifest; HubError: a hub id not found.
    """
    from specband.artifacts import MANIFEST_FILE, load_manifest
    from specband.hub import resolve_folder

    folder = Path(resolve_folder(models))
    if not (folder / MANIFEST_FILE).is_file():
        return None
    table = load_manifest(folder).power_limits
    return None if table is None else dict(table)
