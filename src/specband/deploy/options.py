"""The options of every command that asks a policy (``recommend``, ``launch``, ``schedule``),
declared once (:mod:`specband.core.optionspec`): each function returns a request dataclass field,
with the help text the command passes where it differs.

Only the standard library and the lowest floors are imported here (``recommend`` stays cold-fast).
"""

from __future__ import annotations

from typing import Any

from specband.artifacts.folder import DEFAULT_MODELS_DIR
from specband.core.limits import DEFAULT_MAX_SPEED_LOSS
from specband.core.optionspec import option

__all__ = [
    "DATA_HELP",
    "algo_field",
    "allow_modified_field",
    "allow_transfer_field",
    "data_field",
    "gpu_field",
    "models_field",
    "state_field",
    "target_field",
    "trust_pickle_field",
]


def algo_field() -> Any:
    """``--algo/-a``: the model card algorithm to ask."""

    return option("lookup_table", "--algo", "-a", help="Algorithm to ask.", panel="model", metavar="NAME")


def models_field() -> Any:
    """``--models/-m``: artifact folder or hub id (:func:`load_models`)."""

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
    "Sweep to take allowed configs (and doubly_robust's IPS correction) from, for a folder without a specband "
    "manifest; without --models, --algo is trained on it in memory and answers."
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
    "schedule": _DATA_HELP,
}


def data_field(command: str = "recommend") -> Any:
    """``--data`` of ``command`` (``recommend``, ``launch`` or ``schedule``: the sweep of a
    foreign folder, :func:`load_models`; its help per command, :data:`DATA_HELP`)."""

    return option(None, "--data", help=DATA_HELP[command], panel="model", metavar="SWEEP", show_default=False)


def trust_pickle_field() -> Any:
    """``--trust-pickle`` (:mod:`specband.files.safeload`)."""

    return option(
        False,
        "--trust-pickle",
        help="Unpickle a joblib file (a pickle runs code from the file; specband's own folders need none). "
        "Never applied to ./specband-models picked up without --models.",
        panel="model",
    )


def allow_modified_field() -> Any:
    """``--allow-modified`` (:func:`specband.files.safeload.verify_files`)."""

    return option(
        False,
        "--allow-modified",
        help="Load policy files whose sha256 no longer matches the folder's specband.json (with a warning).",
        panel="model",
    )


def state_field(help_text: str) -> Any:
    """``--state TEMP_C MEM_MB UTIL_PCT``: the GPU state to decide from."""

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

    return option(
        False,
        "--allow-transfer",
        help="Take a pick whose data came from another GPU, model or power limit (the difference is printed "
        "as a warning) instead of stopping.",
        panel="setup",
    )
