"""``specband doctor``: check a target/draft pair and the machine before hours of measuring.

Checks come back as data (:class:`~specband.doctor.pairs.Check`: ``ok``/``warn``/``error`` with
a fix); the CLI prints them, one line each. The pair's config checks live one floor down in
:mod:`specband.doctor.pairs` (the sweep runs them too) and are re-exported here;
:func:`environment_checks` looks at sglang, flashinfer and NVML.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from specband.contract.actions import ACTIONS, REFERENCE_INDEX, sglang_cli_args
from specband.core.errors import ConfigError, SpecbandError
from specband.devices.nvml import NvmlDevice
from specband.doctor.pairs import (
    ALLOW_ROPE_OPTION,
    LEVELS,
    Check,
    check_pair_before_launch,
    config_checks,
    exit_status,
    read_model_config,
)
from specband.engines.sglang_flags import FLAG_SPELLINGS, NEWEST_VERSION, OLDEST_VERSION, flag_for, parse_version
from specband.files.hub import HubError, HubUnreachableError, parse_hub_ref

__all__ = [
    "ALLOW_ROPE_OPTION",
    "LEVELS",
    "Check",
    "check_pair_before_launch",
    "config_checks",
    "environment_checks",
    "exit_status",
    "read_model_config",
    "run_doctor",
]


def _sglang_check() -> Check:
    """The installed sglang's version and the flag spellings specband emits for it
    (:func:`specband.engines.sglang_flags.flag_for`): ``warn`` for a version outside
    ``OLDEST_VERSION``..``NEWEST_VERSION``, ``error`` when sglang is not installed."""
    from importlib import metadata

    try:
        version = metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return Check("sglang", "error", "sglang is not installed", "pip install sglang (on the GPU machine)")
    return sglang_version_check(version)


def sglang_version_check(version: str) -> Check:
    """The ``sglang`` check for sglang ``version`` (see :func:`_sglang_check`)."""

    supported = f"supported: {OLDEST_VERSION} .. {NEWEST_VERSION}"
    try:
        parsed = parse_version(version, option="sglang")
    except ConfigError as exc:
        return Check("sglang", "warn", str(exc), f"install an sglang release in {OLDEST_VERSION} .. {NEWEST_VERSION}")
    flags = " ".join(sglang_cli_args(ACTIONS[REFERENCE_INDEX]))
    spelled = ", ".join(flag_for(field, parsed) for field in FLAG_SPELLINGS)
    message = f"sglang {version}; specband emits: {flags}; version-dependent spellings: {spelled}"
    newest = parse_version(NEWEST_VERSION)
    if parsed > newest:
        return Check(
            "sglang",
            "warn",
            f"{message}; newer than {NEWEST_VERSION} ({supported}): the {NEWEST_VERSION} spellings are assumed",
            f"check the launch lines, or install sglang {NEWEST_VERSION}",
        )
    return Check("sglang", "ok", message)


def _flashinfer_check() -> Check:
    from importlib.util import find_spec

    if find_spec("flashinfer") is not None:
        return Check("flashinfer", "ok", "flashinfer importable (--attention-backend flashinfer)")
    return Check(
        "flashinfer",
        "warn",
        "flashinfer is not importable",
        "pip install flashinfer-python, or --attention-backend triton",
    )


def _nvml_checks(open_nvml: Callable[[], Any]) -> list[Check]:
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the checks below say the same, one line each
            device = open_nvml()
    except SpecbandError as exc:
        return [Check("nvml", "warn", str(exc), "run on the GPU machine with the NVIDIA driver (or --device emulated)")]
    with device:
        checks = [Check("nvml", "ok", f"NVML sees {device.name}")]
        if device.energy_method == "counter":
            checks.append(Check("energy", "ok", "NVML energy counter supported"))
        elif device.energy_method == "power_integration":
            checks.append(Check("energy", "warn", "no energy counter: energy is integrated from sampled power", None))
        else:
            checks.append(Check("energy", "error", "neither energy counter nor power readable", "use --device zeus"))
        if device.power_limit_w is not None:
            checks.append(Check("power-limit", "ok", f"{device.power_limit_w:g} W ({device.power_limit_source})"))
        else:
            checks.append(Check("power-limit", "warn", "NVML gives no power limit", "pass --power-limit W"))
    return checks


def environment_checks(open_nvml: Callable[[], Any] | None = None) -> list[Check]:
    """sglang (version and the flag spellings specband emits), flashinfer, NVML (energy
    counter, power limit).

    Args:
        open_nvml: opens the GPU's telemetry (default: NVML device 0); raises a
            :class:`~specband.core.errors.SpecbandError` when there is none.
    """
    if open_nvml is None:
        open_nvml = NvmlDevice
    return [_sglang_check(), _flashinfer_check(), *_nvml_checks(open_nvml)]


def _config_fix(model: str | Path, exc: ConfigError | HubError) -> str:
    """The fix of an unreadable config: for a hub id the hub's answer (not in the cache
    and the hub unreachable or offline: ``hf download``; no such repo: check the id),
    else what ``--target``/``--draft`` accept."""

    ref = parse_hub_ref(model) if isinstance(exc, HubError) else None
    if ref is None:
        return "give a model folder, its config.json or a hub id"
    if not isinstance(exc, HubUnreachableError):
        return f"check the hub id {ref.repo_id} (org/name), or give a local model folder or its config.json"
    return (
        f"the hub was not reached (offline or unreachable) and {ref.repo_id} is not in its cache: "
        f"run `hf download {ref.repo_id}` where the hub is reachable (the same HF_HOME), "
        "or give a local model folder or its config.json"
    )


def run_doctor(target: str | Path, draft: str | Path, *, open_nvml: Callable[[], Any] | None = None) -> list[Check]:
    """Every check of ``specband doctor``: the two configs (an unreadable one is an
    ``error`` check naming it), then the machine."""
    checks: list[Check] = []
    configs = {}
    for name, model in (("target-config", target), ("draft-config", draft)):
        try:
            configs[name] = read_model_config(model)
        except (ConfigError, HubError) as exc:
            checks.append(Check(name, "error", str(exc), _config_fix(model, exc)))
    if len(configs) == 2:
        (t, tsrc), (d, dsrc) = configs["target-config"], configs["draft-config"]
        try:
            pair = config_checks(t, d, target_source=tsrc, draft_source=dsrc)
        except ConfigError as exc:
            pair = [Check("config", "error", str(exc), "fix that field in the config.json (its type or value)")]
        checks += [_fixed_copy(c, t, d, dsrc, draft) if c.name == "rope" and c.level == "error" else c for c in pair]
    return checks + environment_checks(open_nvml)


#: Where ``specband doctor`` writes a fixed copy of a draft config that is not the user's to edit.
FIXED_DIR = Path("specband-fixed")


def _fixed_copy(check: Check, target: dict[str, Any], draft: dict[str, Any], dsrc: str, given: str | Path) -> Check:
    """The RoPE check of a draft whose config is not the user's to edit (bundled in specband, or
    in the Hugging Face cache): a fixed copy (the target's ``rope_theta`` and ``rope_scaling``,
    in the layout the draft uses) is written to ``./specband-fixed/<draft>/config.json`` (never
    over a different file) and the fix names it; any other draft keeps its fix (edit its own file)."""
    import dataclasses
    import json

    from specband.doctor.pairs import not_yours
    from specband.files.fileio import write_text_atomic

    where = not_yours(dsrc)
    if where is None:
        return check
    fixed = dict(draft)
    for key in ("rope_theta", "rope_scaling", "rope_parameters"):
        if key in target:
            fixed[key] = target[key]
        else:
            fixed.pop(key, None)
    ref = parse_hub_ref(given)
    name = ref.repo_id.split("/")[-1] if ref is not None else Path(str(given)).name.removesuffix(".json")
    out = FIXED_DIR / (name or "draft") / "config.json"
    text = json.dumps(fixed, indent=2) + "\n"
    if out.exists() and out.read_text(encoding="utf-8", errors="replace") != text:
        fix = f"{out} exists and differs from the fixed copy: remove it and run doctor again"
    else:
        try:
            write_text_atomic(out, text, error=ConfigError, make_parents=True)
        except ConfigError as exc:
            return dataclasses.replace(check, fix=f"{check.fix} (could not write it: {exc})")
        hub_id = ref.repo_id if ref is not None else draft.get("_name_or_path")
        download = f"`hf download {hub_id} --local-dir DIR`" if hub_id else "the draft's files in a folder DIR"
        fix = (
            f"{dsrc} is {where}, not a file to edit; a fixed copy with the target's RoPE is written to {out}: "
            f"take your own copy of the draft ({download}), copy {out} over DIR/config.json and pass --draft DIR"
        )
    return dataclasses.replace(check, fix=fix)
