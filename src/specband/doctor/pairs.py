"""The config checks of a target/draft pair (:class:`Check` data): RoPE in either layout,
dtype, vocabulary, hidden size, architectures, maximum positions; and
:func:`check_pair_before_launch`, what ``sweep`` and ``launch`` run before their first launch:
it refuses a RoPE mismatch (docs/FACTS.md §6: accept length about 1.0) unless overridden.

Below the harness (the sweep calls it); ``specband doctor`` (:mod:`specband.doctor.machine`) adds the
machine's checks on top.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError
from specband.core.exitcodes import ExitCode
from specband.core.limits import MAX_CONTEXT_POSITIONS, is_int
from specband.files.hub import HubError
from specband.sim.hfconfig import config_dtype, rope_settings
from specband.sim.hfconfig import read_model_config as read

__all__ = [
    "ALLOW_ROPE_OPTION",
    "LEVELS",
    "REFUSED_CHECKS",
    "Check",
    "check_pair_before_launch",
    "config_checks",
    "exit_status",
    "local_model_config",
    "pair_refusal",
    "read_model_config",
    "refuse_local_pair",
    "refuse_named_pair",
    "refuse_pair",
]

#: Check levels, mildest first.
LEVELS: tuple[str, ...] = ("ok", "warn", "error")
#: The option of ``sweep`` and ``launch`` that overrides the RoPE refusal.
ALLOW_ROPE_OPTION = "--allow-rope-mismatch"
#: The checks whose error refuses a pair in every command that takes one (``recommend``,
#: ``simulate``, ``launch``, ``sweep``), as ``doctor`` calls them errors: a draft head of another
#: vocabulary or width cannot draft for the target (no option overrides them).
REFUSED_CHECKS: tuple[str, ...] = ("vocab", "hidden")


@dataclass(frozen=True)
class Check:
    """One doctor check.

    Attributes:
        name: what was checked (``rope``, ``dtype``, ``vocab``, ``hidden``, ``architecture``,
            ``positions``, ``sglang``, ``flashinfer``, ``nvml``, ``energy``, ``power-limit``,
            ``target-config``, ``draft-config``).
        level: ``"ok"``, ``"warn"`` or ``"error"``.
        message: what was found.
        fix: what to do (``None`` for ``ok``).
        status: the exit status an ``error`` check stands for
            (:class:`~specband.core.exitcodes.ExitCode`): bad input (2) unless a failed
            operation caused it, e.g. a config that could not be downloaded (5).
    """

    name: str
    level: str
    message: str
    fix: str | None = None
    status: int = ExitCode.BAD_INPUT

    def line(self) -> str:
        """``"<level> <name>: <message>[; fix: <fix>]"``, one line."""
        tail = f"; fix: {self.fix}" if self.fix else ""
        return f"{self.level:5} {self.name}: {self.message}{tail}"


def exit_status(checks: list[Check]) -> int:
    """0 when every check is ok, 1 with a warning, else the status of the errors by cause
    (:class:`~specband.core.exitcodes.ExitCode`): 2 when an error is bad input (running doctor
    again as it is finds it again), else the first error's (5: a config could not be downloaded)."""
    errors = [c for c in checks if c.level == "error"]
    if errors:
        if any(c.status == ExitCode.BAD_INPUT for c in errors):
            return ExitCode.BAD_INPUT
        return errors[0].status
    return ExitCode.WARNINGS if any(c.level == "warn" for c in checks) else ExitCode.OK


def read_model_config(model: str | Path) -> tuple[dict[str, Any], str]:
    """The parsed ``config.json`` of a model given as a file, a folder, a bundled config's
    name or a hub id, and the file it came from (:func:`specband.sim.hfconfig.read_model_config`).

    Raises:
        ConfigError: one line naming the file; HubError: the hub id (no such repo or file,
            or not in the cache with the hub unreachable).
    """

    return read(model)


def _rope_check(target: Mapping[str, Any], draft: Mapping[str, Any], tsrc: str, dsrc: str) -> Check:

    t_theta, t_scaling = rope_settings(target, tsrc)
    d_theta, d_scaling = rope_settings(draft, dsrc)
    shown = f"target {t_theta:g}/{t_scaling}" if t_theta is not None else f"target ?/{t_scaling}"
    if (t_theta, t_scaling) == (d_theta, d_scaling):
        return Check("rope", "ok", f"rope_theta/rope_scaling match ({shown})")
    d_shown = f"{d_theta:g}/{d_scaling}" if d_theta is not None else f"?/{d_scaling}"
    what = f"the target's rope_theta ({t_theta:g}) and rope_scaling" if t_theta is not None else "the target's RoPE"
    where = not_yours(dsrc)
    return Check(
        "rope",
        "error",
        f"draft {d_shown} differs from {shown}: accept length collapses to about 1.0 on long prompts "
        "(docs/FACTS.md §6)",
        f"copy {what} into {dsrc}"
        if where is None
        else f"{dsrc} is {where}, not a file to edit: `specband doctor --target TARGET --draft DRAFT --write-fixed "
        f"DIR` writes a fixed copy with {what} to DIR, for your own copy of the draft",
    )


def not_yours(path: str | Path) -> str | None:
    """Where ``path`` lies when it is not the user's file to edit: ``"inside the installed
    specband package"`` (a bundled config) or ``"in the Hugging Face cache"`` (a hub id's
    snapshot, a link to a shared blob); ``None`` for any other file."""
    from importlib import resources

    resolved = Path(path).resolve()
    package = Path(str(resources.files("specband"))).resolve()
    if resolved.is_relative_to(package):
        return "inside the installed specband package"
    try:
        from huggingface_hub import constants
    except ImportError:
        return None
    for cache in {Path(constants.HF_HUB_CACHE), Path(constants.HF_HUB_CACHE).resolve()}:
        if Path(path).absolute().is_relative_to(cache) or resolved.is_relative_to(cache):
            return "in the Hugging Face cache"
    return None


def _dtype_check(target: Mapping[str, Any], draft: Mapping[str, Any], tsrc: str, dsrc: str) -> Check:

    t, d = config_dtype(target, tsrc), config_dtype(draft, dsrc)
    if t is None or d is None:
        return Check("dtype", "warn", f"target {t}, draft {d}: a config names no dtype", "pass --dtype explicitly")
    if t == d:
        return Check("dtype", "ok", f"target and draft are {t}: --dtype {t}")
    return Check(
        "dtype",
        "warn",
        f"target {t}, draft {d}: both run in one dtype, and a {d} EAGLE3 head under --dtype {t} fails "
        "CUDA-graph capture",
        f"--dtype {d} (specband's launch and sweep default to float16)",
    )


def _int(config: Mapping[str, Any], key: str, source: str) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if not is_int(value):
        raise ConfigError(f"{source}: field '{key}': expected an integer, got {value!r}")
    return value


def _equal_check(name: str, key: str, t: int | None, d: int | None, fix: str) -> Check:
    if t is None or d is None:
        return Check(name, "warn", f"{key}: target {t}, draft {d} (missing in a config)", "check the configs")
    if t == d:
        return Check(name, "ok", f"{key} {t} in both")
    return Check(name, "error", f"{key}: target {t}, draft {d}", fix)


def _architecture_check(draft: Mapping[str, Any], dsrc: str) -> Check:
    archs = draft.get("architectures") or []
    if not isinstance(archs, list):
        raise ConfigError(f"{dsrc}: field 'architectures': expected a list of names, got {archs!r}")
    names = ", ".join(str(a) for a in archs) or "none"
    if any("eagle3" in str(a).lower() for a in archs):
        return Check("architecture", "ok", f"draft {names}: --speculative-algorithm EAGLE3 (specband's actions)")
    if any("eagle" in str(a).lower() for a in archs):
        return Check(
            "architecture",
            "warn",
            f"draft {names} is an EAGLE (not EAGLE3) head: it needs --speculative-algorithm EAGLE",
            "use an EAGLE3 head, or launch with --speculative-algorithm EAGLE (specband's actions assume EAGLE3)",
        )
    return Check(
        "architecture", "error", f"draft {names} is not an EAGLE/EAGLE3 head", "give the draft model's folder or id"
    )


def _positions(config: Mapping[str, Any], source: str) -> int | None:
    """``max_position_embeddings`` in ``[1, MAX_CONTEXT_POSITIONS]`` (ConfigError naming the
    field; the value cut to 40 characters: 10**400 was printed whole, -5 put in a fix, B28)."""
    value = _int(config, "max_position_embeddings", source)
    if value is not None and not 1 <= value <= MAX_CONTEXT_POSITIONS:
        shown = str(value) if len(str(value)) <= 40 else f"{str(value)[:20]}... ({len(str(value))} digits)"
        raise ConfigError(
            f"{source}: field 'max_position_embeddings': must be an integer in [1, {MAX_CONTEXT_POSITIONS}] "
            f"(specband.core.limits.MAX_CONTEXT_POSITIONS), got {shown}"
        )
    return value


def _positions_check(target: Mapping[str, Any], draft: Mapping[str, Any], tsrc: str, dsrc: str) -> Check:
    t, d = _positions(target, tsrc), _positions(draft, dsrc)
    if t is None or d is None or d >= t:
        return Check("positions", "ok", f"max_position_embeddings: target {t}, draft {d}")
    return Check(
        "positions",
        "warn",
        f"max_position_embeddings: draft {d} < target {t}",
        f"keep prompts plus output under {d} tokens, or pass --context-length {d}",
    )


def config_checks(
    target: Mapping[str, Any], draft: Mapping[str, Any], *, target_source: str = "target", draft_source: str = "draft"
) -> list[Check]:
    """The config checks of a target and its EAGLE3 draft head (parsed ``config.json``).

    Raises:
        ConfigError: a field of the wrong type (one line naming file and key).
    """
    tsrc, dsrc = target_source, draft_source
    t_hidden = _int(target, "hidden_size", tsrc)
    d_hidden = _int(draft, "target_hidden_size", dsrc) or _int(draft, "hidden_size", dsrc)
    return [
        _rope_check(target, draft, tsrc, dsrc),
        _dtype_check(target, draft, tsrc, dsrc),
        _equal_check(
            "vocab",
            "vocab_size",
            _int(target, "vocab_size", tsrc),
            _int(draft, "vocab_size", dsrc),
            "use the draft head trained for this target (its tokenizer)",
        ),
        _equal_check(
            "hidden", "hidden_size", t_hidden, d_hidden, "use the draft head trained for this target (its width)"
        ),
        _architecture_check(draft, dsrc),
        _positions_check(target, draft, tsrc, dsrc),
    ]


def pair_refusal(checks: list[Check]) -> str | None:
    """The one line a command refuses a pair with, in ``doctor``'s words (``"vocab: vocab_size:
    target 151936, draft 128256; fix: use the draft head trained for this target (its
    tokenizer)"``), or ``None`` when no check of :data:`REFUSED_CHECKS` is an error."""
    for check in checks:
        if check.name in REFUSED_CHECKS and check.level == "error":
            return f"{check.name}: {check.message}; fix: {check.fix}"
    return None


def refuse_pair(
    target: Mapping[str, Any], draft: Mapping[str, Any], *, target_source: str = "target", draft_source: str = "draft"
) -> None:
    """Refuse a target/draft pair ``doctor`` calls an error (:data:`REFUSED_CHECKS`), in its words.

    Raises:
        ConfigError: the first refused check's line (:func:`pair_refusal`), or a config field of
            the wrong type.
    """
    line = pair_refusal(config_checks(target, draft, target_source=target_source, draft_source=draft_source))
    if line is not None:
        raise ConfigError(line)


def refuse_named_pair(target: str | Path | None, draft: str | Path | None) -> None:
    """:func:`refuse_pair` for a pair named by config (``--target-config``/``--draft-config``: a
    file, folder, bundled name or hub id); nothing when either is not given (a bundled partner
    always fits its pair).

    Raises:
        ConfigError: a refused check, or an unreadable config; HubError: a hub id not found.
    """
    if target is None or draft is None:
        return
    (t, tsrc), (d, dsrc) = read_model_config(target), read_model_config(draft)
    refuse_pair(t, d, target_source=tsrc, draft_source=dsrc)


def local_model_config(model: str | Path) -> tuple[dict[str, Any], str] | None:
    """A model's ``config.json`` when it can be read here without the network: a file or folder,
    a bundled config's name, or a hub id whose ``config.json`` is in the local Hugging Face cache;
    ``None`` otherwise (the hub is never asked).

    Raises:
        ConfigError: a file that is there but is not a valid config.
    """
    from specband.sim.hfconfig import bundled_model_configs  # lazy: only when a pair is given

    given = str(model)
    if Path(given).exists() or given in bundled_model_configs():
        return read_model_config(given)
    from specband.files.hub import parse_hub_ref  # lazy: only for a hub id

    ref = parse_hub_ref(given)
    if ref is None:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(ref.repo_id, "config.json", revision=ref.revision)
    except (ImportError, ValueError, OSError):
        return None
    return read_model_config(cached) if isinstance(cached, str) else None


def refuse_local_pair(target: str | Path | None, draft: str | Path | None) -> None:
    """:func:`refuse_pair` for a pair the user named as models (``recommend --target`` and
    ``--draft-model``) when both configs can be read here without the network
    (:func:`local_model_config`); nothing otherwise (``launch`` and ``sweep`` read the hub:
    :func:`check_pair_before_launch`).

    Raises:
        ConfigError: a refused check, or a config file that is there but not valid.
    """
    if target is None or draft is None:
        return
    t, d = local_model_config(target), local_model_config(draft)
    if t is not None and d is not None:
        refuse_pair(t[0], d[0], target_source=t[1], draft_source=d[1])


def check_pair_before_launch(
    target: str | Path, draft: str | Path | None, *, allow_rope_mismatch: bool = False
) -> str | None:
    """What ``sweep`` and ``launch`` run before their first launch: the config checks of
    the pair, refusing a pair of another vocabulary or width (:data:`REFUSED_CHECKS`, as
    ``recommend`` and ``simulate`` refuse it) and a RoPE mismatch. A pair whose configs cannot be
    read here (a hub id not in the cache, a test's fake model) is not checked: the returned note
    says so, for the caller to print on stderr.

    Returns:
        ``None`` when the check ran (or there is no draft), else one line saying that the
        RoPE check was skipped and why.

    Raises:
        ConfigError: a refused check (:func:`pair_refusal`), or the RoPE settings differ and
            ``allow_rope_mismatch`` is False.
    """
    if draft is None:
        return None
    try:
        (t, tsrc), (d, dsrc) = read_model_config(target), read_model_config(draft)
        checks = config_checks(t, d, target_source=tsrc, draft_source=dsrc)
    except (ConfigError, HubError) as exc:
        return f"RoPE check of the target and draft skipped: their config.json could not be read here ({exc})"
    refused = pair_refusal(checks)
    if refused is not None:
        raise ConfigError(refused)
    rope = next(c for c in checks if c.name == "rope")
    if rope.level == "error" and not allow_rope_mismatch:
        raise ConfigError(f"rope: {rope.message}; fix: {rope.fix} (or pass {ALLOW_ROPE_OPTION})")
    return None
