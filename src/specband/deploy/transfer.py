"""No silent transfer: a pick answers for the setup its data came from. :func:`check_transfer`
compares the user's setup (:class:`UserSetup`: target and draft, GPU, power limit) with the
data's :class:`~specband.sweeps.origin.DataOrigin` and stops with one line naming every difference
and the ways forward, unless the user allowed the transfer (then the difference is a warning).

Rules (documented in the README, "Whose answer is it"):

* a model is identified by what it is, not how it was spelt: when its ``config.json`` can be read
  here (a folder, an absolute or relative path, a bundled config's name, a hub id in the local
  cache), by the config's identity (:func:`specband.sim.hfconfig.config_sha256`) against the one
  the rows record (simulated rows do) or the bundled config of the data's model, else by its
  shape (architecture, hidden size, layers); a local folder never matches by its name alone (a
  folder named like the study's model holding another config is another model). A model whose
  config cannot be read here (a hub id not in the cache) matches by name (the part after the
  hub org, case and punctuation ignored: ``unsloth/Llama-3.2-1B-Instruct`` is
  ``meta-llama/Llama-3.2-1B-Instruct``); a model the user does not name is the data's own (not a
  transfer);
* a GPU matches by its model token (``RTX 4060`` + laptop, ``H100``, ...) of the NVML name or
  of a ``--gpu PROFILE``'s hardware; with neither (no NVML here) the GPU cannot be checked:
  that is said, not refused;
* a power limit differs when it is more than :data:`POWER_LIMIT_TOLERANCE` away.

Only the standard library is imported (the user's GPU is read one floor up, in
:mod:`specband.deploy.usersetup`); the outcome, :class:`~specband.deploy.answers.TransferCheck`,
is an answer's part and lives with the answers.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specband.core.errors import SpecbandError
from specband.deploy.answers import TransferCheck  # the check's outcome is part of every answer

if TYPE_CHECKING:
    from specband.deploy.tiers import PolicyScorer
    from specband.sweeps.origin import DataOrigin

__all__ = [
    "ALLOW_TRANSFER_OPTION",
    "POWER_LIMIT_TOLERANCE",
    "TransferCheck",
    "TransferError",
    "UserSetup",
    "check_scorer_transfer",
    "check_transfer",
    "gpu_key",
    "model_key",
    "transfer_differences",
]

ALLOW_TRANSFER_OPTION = "--allow-transfer"
#: Relative difference of power limits above which they differ (2 %: NVML reports the
#: limit in mW; a board's default and enforced limits agree to well within this).
POWER_LIMIT_TOLERANCE = 0.02


class TransferError(SpecbandError):
    """The user's setup differs from the data's and the transfer was not allowed: a refusal
    of the command as given (exit 2; ``--allow-transfer`` or matching data answers), not a
    configuration value out of range, so not a
    :class:`~specband.core.errors.ConfigError`."""


@dataclass(frozen=True)
class UserSetup:
    """What the user runs (``None``: not known, not checked).

    Attributes:
        target, draft: the target and EAGLE3 draft model (path or hub id).
        gpu_name: the GPU's name (NVML's, or a profile's ``hardware``).
        gpu_source: where ``gpu_name`` came from (``"NVML"``, ``"--gpu h100-sxm"``).
        power_limit_w: the GPU's power limit, W.
        gpu_unchecked: why the GPU could not be checked (e.g. no NVML), or ``None``.
        power_limit_range_w: the limits the GPU accepts, ``(min_w, max_w)`` W, as NVML reports
            them (``nvmlDeviceGetPowerManagementLimitConstraints``); ``None``: not read.
    """

    target: str | None = None
    draft: str | None = None
    gpu_name: str | None = None
    gpu_source: str | None = None
    power_limit_w: float | None = None
    gpu_unchecked: str | None = None
    power_limit_range_w: tuple[float, float] | None = None


def model_key(name: str) -> str:
    """A model's name for comparison: the last path part, lower case, letters and digits only."""
    last = str(name).rstrip("/").split("/")[-1]
    return re.sub(r"[^a-z0-9]", "", last.lower())


def gpu_key(name: str) -> str:
    """A GPU's model for comparison: its first letters+digits token after the vendor words
    (``"NVIDIA GeForce RTX 4060 Laptop GPU"`` and ``"RTX4060_Laptop"`` -> ``"rtx4060-laptop"``,
    ``"NVIDIA H100 80GB HBM3"`` and ``"H100_SXM5_80GB"`` -> ``"h100"``)."""
    tokens = [t for t in re.findall(r"[a-z]+|\d+", name.lower()) if t not in ("nvidia", "geforce", "tesla", "quadro")]
    key = next(
        (a + b for a, b in itertools.pairwise(tokens) if a.isalpha() and b.isdigit()),
        "".join(tokens),
    )
    return f"{key}-laptop" if "laptop" in tokens else key


@dataclass(frozen=True)
class _Config:
    """What a model config says the model is: its identity hash and its shape."""

    sha256: str
    triple: tuple[str, int, int] | None  # (architecture, hidden size, layers), None when not all set


def _config_of(data: object) -> _Config | None:
    from specband.sim.hfconfig import config_sha256  # lazy: only when a model is compared (cold recommend)

    if not isinstance(data, dict):
        return None
    arch = data.get("architectures")
    hidden, layers = data.get("hidden_size"), data.get("num_hidden_layers")
    triple = None
    if isinstance(arch, list) and arch and isinstance(hidden, int) and isinstance(layers, int):
        triple = (str(arch[0]), hidden, layers)
    return _Config(config_sha256(data), triple)


def _given_config(given: str) -> _Config | None:
    """The config of a model as the user gave it: a local folder or ``config.json``, a bundled
    config's name, or a hub id whose ``config.json`` is in the local Hugging Face cache (never
    looked up on the hub); ``None`` when none can be read here."""
    from specband.sim.hfconfig import bundled_model_configs, read_model_config  # lazy: cold recommend

    source: str | Path | None = None
    if Path(given).exists() or given in bundled_model_configs():
        source = given
    else:
        from specband.files.hub import parse_hub_ref  # lazy: cold recommend

        ref = parse_hub_ref(given)
        if ref is not None:
            try:
                from huggingface_hub import try_to_load_from_cache

                cached = try_to_load_from_cache(ref.repo_id, "config.json", revision=ref.revision)
            except (ImportError, ValueError, OSError):
                cached = None
            source = cached if isinstance(cached, str) else None
    if source is None:
        return None
    try:
        data, _ = read_model_config(source)
    except (SpecbandError, OSError):
        return None
    return _config_of(data)


def _bundled_config_named(name: str) -> _Config | None:
    """The bundled config whose ``_name_or_path`` is ``name`` (org and case ignored), or ``None``."""
    import json
    from importlib import resources

    folder = Path(str(resources.files("specband").joinpath("data/models")))
    for bundled in sorted(folder.glob("*.json")):
        try:
            candidate = json.loads(bundled.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(candidate, dict) and model_key(str(candidate.get("_name_or_path", ""))) == model_key(name):
            return _config_of(candidate)
    return None


def _model_difference(kind: str, user: str, data: str, data_sha256: str | None = None) -> str | None:
    """How the user's model differs from the data's, or ``None`` when it is the same.

    A model is identified by what it is: when its config can be read here (a folder, a path,
    a bundled name, a cached hub id), by the config's identity (:func:`specband.sim.hfconfig.config_sha256`)
    against the rows' recorded one (``data_sha256``), the bundled config of the data's model or
    the config at the data's path where it is readable here, else by its shape (architecture,
    hidden size, layers); a local folder is never matched by its name while anything says what
    the data's model is. Only when neither config can be read here is the name compared."""
    candidates = data.split(" + ")
    by_name = (
        None if any(model_key(user) == model_key(c) for c in candidates) else f"{kind} {user} vs the data's {data}"
    )
    mine = _given_config(user)
    if mine is None:
        return by_name
    # the data's model: its bundled config, else its own config.json where the rows' path is readable here
    theirs = [
        c
        for c in (_bundled_config_named(c) or (_given_config(c) if Path(c).exists() else None) for c in candidates)
        if c is not None
    ]
    recorded = set((data_sha256 or "").split(" + ")) - {""}
    if not theirs and not recorded:  # nothing here says what the data's model is: its name is all there is
        return by_name
    if mine.sha256 in recorded or any(mine.sha256 == c.sha256 for c in theirs):
        return None
    if mine.triple is not None and any(mine.triple == c.triple for c in theirs):
        return None
    if theirs and mine.triple is not None and theirs[0].triple is not None:
        fields = [
            f"{name} {a} vs {b}"
            for name, a, b in zip(("architecture", "hidden size", "layers"), mine.triple, theirs[0].triple, strict=True)
            if a != b
        ]
        if fields:
            return f"{kind} {user} vs the data's {data} ({', '.join(fields)})"
    return f"{kind} {user} vs the data's {data} (another config.json)"


def transfer_differences(origin: DataOrigin, setup: UserSetup) -> list[str]:
    """Every difference between the user's setup and the data's (see the module docstring)."""
    out: list[str] = []
    if setup.target is not None and origin.target_model is not None:
        diff = _model_difference("target", setup.target, origin.target_model, origin.target_config_sha256)
        if diff:
            out.append(diff)
    if setup.draft is not None and origin.draft_model is not None:
        diff = _model_difference("draft", setup.draft, origin.draft_model, origin.draft_config_sha256)
        if diff:
            out.append(diff)
    if setup.gpu_name is not None and origin.hardware is not None:
        keys = {gpu_key(h) for h in origin.hardware.split(" + ")}
        if gpu_key(setup.gpu_name) not in keys:
            out.append(f"GPU {setup.gpu_name} ({setup.gpu_source or 'given'}) vs the data's {origin.hardware}")
    if (
        setup.power_limit_w is not None
        and origin.power_limit_w is not None
        and abs(setup.power_limit_w / origin.power_limit_w - 1.0) > POWER_LIMIT_TOLERANCE
    ):
        out.append(f"power limit {setup.power_limit_w:g} W vs the data's {origin.power_limit_w:g} W")
    return out


def check_transfer(
    origin: DataOrigin | None, setup: UserSetup, *, allow: bool = False, source: str = "the data"
) -> TransferCheck:
    """Stop unless the user's setup is the data's, or the transfer is allowed.

    Args:
        origin: the data's origin (``None``: a folder that does not say; nothing can be
            checked, which is said as a warning).
        setup: the user's setup.
        allow: ``--allow-transfer``: take the pick anyway, the differences as warnings.
        source: what the pick rests on, for the messages (a folder, "the embedded study policy").

    Raises:
        TransferError: one line naming every difference and the ways forward.
    """
    if origin is None:
        return TransferCheck(warnings=(f"{source} does not say which GPU, models and power limit it was trained on",))
    differences = transfer_differences(origin, setup)
    warnings: list[str] = []
    if differences and not allow:
        raise TransferError(
            f"{source} answers for another setup: {'; '.join(differences)}. Ways forward: `specband sweep` "
            f"on this GPU (then `specband train` on it), `specband recommend --gpu PROFILE --target-config CONFIG "
            f"--draft-config CONFIG` or `specband simulate --profile PROFILE` for a simulated first guess, or "
            f"{ALLOW_TRANSFER_OPTION} to take this pick anyway"
        )
    if differences:
        warnings.append(f"transferred ({ALLOW_TRANSFER_OPTION}): {'; '.join(differences)}")
    if setup.gpu_name is None and origin.hardware is not None:
        why = setup.gpu_unchecked or "no GPU was read"
        warnings.append(
            f"the GPU could not be checked ({why}); {source} is from {origin.hardware}"
            + (f" {origin.limit_phrase}" if origin.limit_text != "?" else "")
            + " (--gpu PROFILE names yours)"
        )
    return TransferCheck(tuple(differences), tuple(warnings))


def check_scorer_transfer(scorer: PolicyScorer, setup: UserSetup, *, allow: bool = False) -> TransferCheck:
    """:func:`check_transfer` for a schedule's or a mix's policy (the data behind
    ``scorer``), plus a note when that data is simulated.

    Raises:
        TransferError: the data is from another setup and ``allow`` is False.
    """
    label = "the embedded study policy" if scorer.source == "embedded" else scorer.source
    checked = check_transfer(scorer.manifest.origin, setup, allow=allow, source=label)
    origin = scorer.manifest.origin
    if origin is not None and origin.simulated:
        note = f"{label}: trained on SIMULATED rows; the schedule rests on a simulation, not a measurement"
        checked = TransferCheck(checked.differences, (*checked.warnings, note))
    return checked
