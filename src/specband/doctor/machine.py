"""``specband doctor``: check a target/draft pair and the machine before hours of measuring.

Checks come back as data (:class:`~specband.doctor.pairs.Check`: ``ok``/``warn``/``error`` with
a fix); the CLI prints them, one line each. The pair's config checks live one floor down in
:mod:`specband.doctor.pairs` (the sweep runs them too) and are re-exported here;
:func:`environment_checks` looks at the engine (sglang by default), flashinfer and NVML.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError, SpecbandError
from specband.core.exitcodes import exit_code_for
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
from specband.engines.base import Engine, default_engine
from specband.files.hub import HubError, HubUnreachableError, parse_hub_ref

__all__ = [
    "ALLOW_ROPE_OPTION",
    "LEVELS",
    "WRITE_FIXED_OPTION",
    "Check",
    "check_pair_before_launch",
    "config_checks",
    "engine_check",
    "environment_checks",
    "exit_status",
    "read_model_config",
    "run_doctor",
]


def engine_check(engine: Engine) -> Check:
    """The engine installed beside specband, its release and the flags specband emits for it
    (:meth:`specband.engines.base.EngineServing.installed_check`), as the check named after it."""
    found = engine.serving.installed_check()
    return Check(engine.name, found.level, found.message, found.fix)


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


def environment_checks(open_nvml: Callable[[], Any] | None = None, engine: Engine | None = None) -> list[Check]:
    """The engine (its version and the flag spellings specband emits, :func:`engine_check`),
    flashinfer, NVML (energy counter, power limit).

    Args:
        open_nvml: opens the GPU's telemetry (default: NVML device 0); raises a
            :class:`~specband.core.errors.SpecbandError` when there is none.
        engine: the engine to check (``None``: the default engine).
    """
    if open_nvml is None:
        open_nvml = NvmlDevice
    return [engine_check(engine or default_engine()), _flashinfer_check(), *_nvml_checks(open_nvml)]


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


def run_doctor(
    target: str | Path,
    draft: str | Path,
    *,
    open_nvml: Callable[[], Any] | None = None,
    engine: Engine | None = None,
    fixed_dir: Path | None = None,
) -> list[Check]:
    """Every check of ``specband doctor``: the two configs (an unreadable one is an
    ``error`` check naming it, with the exit status of its cause: 5 for a hub id the hub could
    not deliver), then the machine.

    Args:
        engine: the engine to check; ``None``: the default engine.
        fixed_dir: ``--write-fixed DIR``: where a fixed copy of a draft config that is not the
            user's to edit goes (:func:`_fixed_copy`); ``None``: nothing is written.
    """
    checks: list[Check] = []
    configs = {}
    for name, model in (("target-config", target), ("draft-config", draft)):
        try:
            configs[name] = read_model_config(model)
        except (ConfigError, HubError) as exc:
            checks.append(Check(name, "error", str(exc), _config_fix(model, exc), exit_code_for(exc)))
    if len(configs) == 2:
        (t, tsrc), (d, dsrc) = configs["target-config"], configs["draft-config"]
        try:
            pair = config_checks(t, d, target_source=tsrc, draft_source=dsrc)
        except ConfigError as exc:
            pair = [Check("config", "error", str(exc), "fix that field in the config.json (its type or value)")]
        checks += [
            _fixed_copy(c, t, d, dsrc, draft, fixed_dir) if c.name == "rope" and c.level == "error" else c for c in pair
        ]
    return checks + environment_checks(open_nvml, engine)


#: The option of ``specband doctor`` that writes a fixed copy of a draft config that is not the
#: user's to edit (nothing is written without it).
WRITE_FIXED_OPTION = "--write-fixed"


def _fixed_copy(
    check: Check, target: dict[str, Any], draft: dict[str, Any], dsrc: str, given: str | Path, fixed_dir: Path | None
) -> Check:
    """The RoPE check of a draft whose config is not the user's to edit (bundled in specband, or
    in the Hugging Face cache): with ``fixed_dir`` (``--write-fixed DIR``) a fixed copy (the
    target's ``rope_theta`` and ``rope_scaling``, in the layout the draft uses) is written to
    ``DIR/<draft>/config.json`` (never over a different file) and the fix names it; without it
    nothing is written and the fix names the option. Any other draft keeps its fix (edit its own file)."""
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
    name = (ref.repo_id.split("/")[-1] if ref is not None else Path(str(given)).name.removesuffix(".json")) or "draft"
    hub_id = ref.repo_id if ref is not None else draft.get("_name_or_path")
    download = f"`hf download {hub_id} --local-dir DRAFT`" if hub_id else "the draft's files in a folder DRAFT"
    use = f"take your own copy of the draft ({download}), copy it over DRAFT/config.json and pass --draft DRAFT"
    if fixed_dir is None:
        fix = (
            f"{dsrc} is {where}, not a file to edit; {WRITE_FIXED_OPTION} DIR writes a copy of it with the "
            f"target's RoPE to DIR/{name}/config.json: {use}"
        )
        return dataclasses.replace(check, fix=fix)
    out = fixed_dir / name / "config.json"
    text = json.dumps(fixed, indent=2) + "\n"
    if out.exists() and out.read_text(encoding="utf-8", errors="replace") != text:
        fix = f"{out} exists and differs from the fixed copy: remove it and run doctor again"
    else:
        try:
            write_text_atomic(out, text, error=ConfigError, make_parents=True)
        except ConfigError as exc:
            return dataclasses.replace(check, fix=f"{check.fix} (could not write it: {exc})")
        fix = f"{dsrc} is {where}, not a file to edit; a fixed copy with the target's RoPE is written to {out}: {use}"
    return dataclasses.replace(check, fix=fix)
