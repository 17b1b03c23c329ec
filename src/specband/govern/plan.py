"""The governor's plan: batch-size tiers, each with the engine flags it was planned with, its
starting power limit per GPU and what that tier is expected to give, every figure with the
source it comes from.

A :class:`GovernorPlan` is what ``specband govern`` follows: when the server's running batch
size enters a tier, the tier's limit is set (then held in the band by the feedback loop,
:mod:`specband.govern.controller`). It is built from a simulated first guess
(:mod:`specband.govern.firstguess`) or read from a plan file (:func:`read_plan`, written by
``specband govern --write-plan``); the answer of ``recommend``/``schedule`` (the joint pick of
flags and limit per batch size) maps onto the same fields: per batch size, the flags, the limit
and the figures with their sources and 95 % intervals.

The plan file (JSON, :data:`PLAN_FORMAT` version :data:`PLAN_VERSION`)::

    {"format": "specband-govern-plan", "version": 1,
     "source": "simulated first guess on h100-sxm ...",
     "gpu": {"profile": "h100-sxm", "hardware": "H100_SXM5_80GB",
             "min_limit_w": 200.0, "max_limit_w": 700.0, "range_source": "the h100-sxm profile"},
     "model": {"target_config": "llama-3.1-8b-instruct", "draft_config": "...", "acceptance_from": null},
     "band": [0.95, 0.98],
     "tiers": [{"batch_sizes": [1, 1], "planned_batch_size": 1, "action": [5, 1, 6],
                "power_limit_w": 209.0, "power_limit_source": "simulated",
                "expected": {"serving_power_w": {"value": 201.7, "source": "simulated"},
                             "utilization": {"value": 0.965, "source": "simulated"},
                             "tok_s": {"value": 296.7, "low": 270.1, "high": 321.0, "source": "simulated"}}},
               ...],
     "acceptance": [{"action": [5, 1, 6], "value": 3.1, "low": 2.9, "high": 3.3, "source": "simulated"}],
     "notes": ["..."]}

``batch_sizes`` are inclusive ranges, contiguous from 1; the last tier's upper end may be
``null`` (every larger batch size). ``acceptance`` holds the accept lengths (95 % interval)
the plan expects of the configs it names: the drift check compares the server's measured
acceptance with them (:mod:`specband.govern.drift`).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specband.contract.actions import validate_action
from specband.contract.reward import BAND_HIGH, BAND_LOW
from specband.core.errors import DataError, InvalidActionError
from specband.core.limits import MAX_BATCH_SIZE, MAX_SCHEDULE_TIERS, POWER_LIMIT_RANGE_W, is_int, is_number
from specband.files.fileio import read_text_bounded

__all__ = [
    "FIGURE_SOURCES",
    "MAX_PLAN_BYTES",
    "PLAN_FORMAT",
    "PLAN_VERSION",
    "GovernorPlan",
    "PlanFigure",
    "PlanGpu",
    "PlanTier",
    "geometric_tiers",
    "read_plan",
]

#: The plan file's ``format`` and ``version``.
PLAN_FORMAT = "specband-govern-plan"
PLAN_VERSION = 1
#: Largest plan file read: 4 MiB. Basis: a plan of :data:`~specband.core.limits.MAX_SCHEDULE_TIERS`
#: tiers at ~600 bytes each is 2.5 MB; a real one is a few KB.
MAX_PLAN_BYTES = 4 << 20
#: Where a figure may come from (the project's provenance words).
FIGURE_SOURCES = ("measured", "emulated", "simulated", "published", "borrowed")
#: The flag names of a triple, in sglang's spelling (vLLM's K is ``steps``).
_FLAGS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")


@dataclass(frozen=True)
class PlanFigure:
    """One expected figure with where it comes from.

    Attributes:
        value: the figure (unit by its key: W, fraction, tokens/s, J/token, tokens per step).
        source: one of :data:`FIGURE_SOURCES`.
        low, high: its 95 % interval, or ``None`` where none is estimated.
        basis: what it rests on (e.g. ``"serving power of the h100-sxm profile"``), or ``None``.
    """

    value: float
    source: str
    low: float | None = None
    high: float | None = None
    basis: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The figure's JSON object (``low``/``high``/``basis`` only where known)."""
        out: dict[str, Any] = {"value": round(self.value, 6), "source": self.source}
        if self.low is not None and self.high is not None:
            out["low"], out["high"] = round(self.low, 6), round(self.high, 6)
        if self.basis:
            out["basis"] = self.basis
        return out

    def contains(self, value: float) -> bool | None:
        """Whether ``value`` lies in the 95 % interval (``None`` without one)."""
        if self.low is None or self.high is None:
            return None
        return self.low <= value <= self.high


@dataclass(frozen=True)
class PlanTier:
    """One batch-size tier.

    Attributes:
        low, high: the batch sizes it covers, inclusive (``high`` ``None``: every larger one).
        planned_batch_size: the batch size its figures were planned at.
        action: the ``(steps, topk, num_draft_tokens)`` it was planned with (``(0, 0, 0)``:
            plain decoding).
        power_limit_w: its starting power limit per GPU, W.
        power_limit_source: where the limit comes from (:data:`FIGURE_SOURCES`).
        expected: what the tier should give at that limit, by name (``serving_power_w``,
            ``utilization``, ``tok_s``, ``joules_per_token``, ``accept_length``).
    """

    low: int
    high: int | None
    planned_batch_size: int
    action: tuple[int, int, int]
    power_limit_w: float
    power_limit_source: str
    expected: Mapping[str, PlanFigure] = field(default_factory=dict)

    def covers(self, batch_size: int) -> bool:
        """Whether ``batch_size`` falls in this tier."""
        return batch_size >= self.low and (self.high is None or batch_size <= self.high)

    @property
    def label(self) -> str:
        """``"1"``, ``"6-11"`` or ``"91+"``."""
        if self.high is None:
            return f"{self.low}+"
        return str(self.low) if self.high == self.low else f"{self.low}-{self.high}"

    @property
    def flags(self) -> dict[str, int]:
        """The speculative flags in sglang's spelling (empty for plain decoding)."""
        return {} if self.action[0] == 0 else dict(zip(_FLAGS, self.action, strict=True))

    def to_json(self) -> dict[str, Any]:
        """The tier's JSON object."""
        return {
            "batch_sizes": [self.low, self.high],
            "planned_batch_size": self.planned_batch_size,
            "action": list(self.action),
            "flags": self.flags,
            "power_limit_w": round(self.power_limit_w, 3),
            "power_limit_source": self.power_limit_source,
            "expected": {k: v.to_json() for k, v in self.expected.items()},
        }


@dataclass(frozen=True)
class PlanGpu:
    """The GPU a plan was made for.

    Attributes:
        profile: the simulator profile (``h100-sxm``), or ``None``.
        hardware: its name (``H100_SXM5_80GB``), or ``None``.
        min_limit_w, max_limit_w: the limits the plan assumed it accepts, W.
        range_source: where that range comes from (NVML, or a profile's assumption).
    """

    profile: str | None
    hardware: str | None
    min_limit_w: float
    max_limit_w: float
    range_source: str

    def to_json(self) -> dict[str, Any]:
        """The ``gpu`` object."""
        return {
            "profile": self.profile,
            "hardware": self.hardware,
            "min_limit_w": self.min_limit_w,
            "max_limit_w": self.max_limit_w,
            "range_source": self.range_source,
        }


@dataclass(frozen=True)
class GovernorPlan:
    """Tiers, the GPU and pair they were planned for, and the acceptance they expect.

    Attributes:
        tiers: contiguous from batch size 1, in order.
        gpu: the GPU it was planned for.
        source: one line saying where the plan comes from.
        model: what the figures were simulated with (``target_config``, ``draft_config``,
            ``acceptance_from``, ``workload``), or empty for a plan from measurements.
        band: the utilisation band, fractions of the limit.
        acceptance: accept length expected per config (with its 95 % interval).
        notes: what to know about it, one line each.
    """

    tiers: tuple[PlanTier, ...]
    gpu: PlanGpu
    source: str
    model: Mapping[str, str | None] = field(default_factory=dict)
    band: tuple[float, float] = (BAND_LOW, BAND_HIGH)
    acceptance: Mapping[tuple[int, int, int], PlanFigure] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def tier_index(self, batch_size: int) -> int | None:
        """The index of the tier covering ``batch_size`` (``None`` for batch size 0: idle)."""
        if batch_size < 1:
            return None
        for i, tier in enumerate(self.tiers):
            if tier.covers(batch_size):
                return i
        return len(self.tiers) - 1

    def to_json(self) -> dict[str, Any]:
        """The plan file's JSON object."""
        return {
            "format": PLAN_FORMAT,
            "version": PLAN_VERSION,
            "source": self.source,
            "gpu": self.gpu.to_json(),
            "model": dict(self.model),
            "band": list(self.band),
            "tiers": [t.to_json() for t in self.tiers],
            "acceptance": [{"action": list(a), **f.to_json()} for a, f in sorted(self.acceptance.items())],
            "notes": list(self.notes),
        }

    def dumps(self) -> str:
        """The plan file's text (indented JSON, one trailing newline)."""
        return json.dumps(self.to_json(), indent=2) + "\n"


def geometric_tiers(planned: Sequence[int]) -> list[tuple[int, int | None, int]]:
    """Tier ranges around planned batch sizes: each covers the batch sizes nearer to it than to
    its neighbours on a log scale (the boundary between ``a`` and ``b`` is ``sqrt(a * b)``),
    the first from 1, the last open-ended.

    Args:
        planned: increasing batch sizes >= 1.

    Returns:
        ``(low, high, planned)`` per tier (``high`` ``None`` for the last).

    Raises:
        ValueError: an empty or non-increasing list.
    """
    if not planned or any(b < 1 for b in planned) or any(b >= c for b, c in itertools.pairwise(planned)):
        raise ValueError(f"tier batch sizes must be increasing integers >= 1, got {list(planned)}")
    out: list[tuple[int, int | None, int]] = []
    low = 1
    for i, b in enumerate(planned):
        if i + 1 == len(planned):
            out.append((low, None, b))
            break
        high = max(b, math.floor(math.sqrt(b * planned[i + 1])))
        high = min(high, planned[i + 1] - 1)
        out.append((low, high, b))
        low = high + 1
    return out


# ----------------------------------------------------------------------------- the strict reader


def _fail(path: str, field_name: str, message: str) -> DataError:
    return DataError(message, path=path, field=field_name)


def _number(value: Any, path: str, name: str, low: float = -math.inf, high: float = math.inf) -> float:
    if not is_number(value) or not math.isfinite(float(value)) or not low <= float(value) <= high:
        raise _fail(path, name, f"expected a finite number in [{low:g}, {high:g}], got {repr(value)[:60]}")
    return float(value)


def _int(value: Any, path: str, name: str, low: int, high: int) -> int:
    if not is_int(value) or not low <= value <= high:
        raise _fail(path, name, f"expected an integer in [{low}, {high}], got {repr(value)[:60]}")
    return int(value)


def _source(value: Any, path: str, name: str) -> str:
    if value not in FIGURE_SOURCES:
        raise _fail(path, name, f"expected one of {', '.join(FIGURE_SOURCES)}, got {repr(value)[:60]}")
    return str(value)


def _text(value: Any, path: str, name: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > 4096:
        raise _fail(path, name, f"expected a string (at most 4096 characters), got {repr(value)[:60]}")
    return value


def _object(value: Any, path: str, name: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, name, f"expected a JSON object, got {type(value).__name__}")
    return value


def _figure(value: Any, path: str, name: str) -> PlanFigure:
    obj = _object(value, path, name)
    low, high = obj.get("low"), obj.get("high")
    if (low is None) != (high is None):
        raise _fail(path, name, "give both low and high (the 95 % interval) or neither")
    fig = PlanFigure(
        value=_number(obj.get("value"), path, f"{name}.value"),
        source=_source(obj.get("source"), path, f"{name}.source"),
        low=None if low is None else _number(low, path, f"{name}.low"),
        high=None if high is None else _number(high, path, f"{name}.high"),
        basis=_text(obj.get("basis"), path, f"{name}.basis", optional=True),
    )
    if fig.low is not None and fig.high is not None and not fig.low <= fig.value <= fig.high:
        raise _fail(path, name, f"value {fig.value:g} is outside its interval [{fig.low:g}, {fig.high:g}]")
    return fig


def _action(value: Any, path: str, name: str) -> tuple[int, int, int]:
    if not isinstance(value, list) or len(value) != 3 or not all(is_int(v) for v in value):
        raise _fail(path, name, f"expected [steps, topk, num_draft_tokens], got {repr(value)[:60]}")
    try:
        action = validate_action((int(value[0]), int(value[1]), int(value[2])))
    except InvalidActionError as exc:
        raise _fail(path, name, str(exc)) from None
    return (int(action[0]), int(action[1]), int(action[2]))


def _tier(value: Any, path: str, name: str, gpu: PlanGpu) -> PlanTier:
    obj = _object(value, path, name)
    sizes = obj.get("batch_sizes")
    if not isinstance(sizes, list) or len(sizes) != 2:
        raise _fail(path, f"{name}.batch_sizes", f"expected [low, high] (high may be null), got {repr(sizes)[:60]}")
    low = _int(sizes[0], path, f"{name}.batch_sizes", 1, MAX_BATCH_SIZE)
    high = None if sizes[1] is None else _int(sizes[1], path, f"{name}.batch_sizes", low, MAX_BATCH_SIZE)
    planned = _int(obj.get("planned_batch_size"), path, f"{name}.planned_batch_size", 1, MAX_BATCH_SIZE)
    lo_w, hi_w = POWER_LIMIT_RANGE_W
    limit = _number(obj.get("power_limit_w"), path, f"{name}.power_limit_w", lo_w, hi_w)
    if not gpu.min_limit_w - 0.5 <= limit <= gpu.max_limit_w + 0.5:
        raise _fail(
            path,
            f"{name}.power_limit_w",
            f"{limit:g} W is outside the plan's GPU range [{gpu.min_limit_w:g}, {gpu.max_limit_w:g}] W",
        )
    expected_obj = _object(obj.get("expected", {}), path, f"{name}.expected")
    if len(expected_obj) > 32:
        raise _fail(path, f"{name}.expected", "more than 32 figures")
    expected = {str(k): _figure(v, path, f"{name}.expected.{k}") for k, v in expected_obj.items()}
    return PlanTier(
        low=low,
        high=high,
        planned_batch_size=planned,
        action=_action(obj.get("action"), path, f"{name}.action"),
        power_limit_w=limit,
        power_limit_source=_source(obj.get("power_limit_source"), path, f"{name}.power_limit_source"),
        expected=expected,
    )


def _gpu(value: Any, path: str) -> PlanGpu:
    obj = _object(value, path, "gpu")
    lo_w, hi_w = POWER_LIMIT_RANGE_W
    low = _number(obj.get("min_limit_w"), path, "gpu.min_limit_w", lo_w, hi_w)
    high = _number(obj.get("max_limit_w"), path, "gpu.max_limit_w", low, hi_w)
    return PlanGpu(
        profile=_text(obj.get("profile"), path, "gpu.profile", optional=True),
        hardware=_text(obj.get("hardware"), path, "gpu.hardware", optional=True),
        min_limit_w=low,
        max_limit_w=high,
        range_source=_text(obj.get("range_source", "not recorded"), path, "gpu.range_source") or "not recorded",
    )


def _check_contiguous(tiers: Sequence[PlanTier], path: str) -> None:
    if tiers[0].low != 1:
        raise _fail(path, "tiers[0].batch_sizes", f"the first tier must start at batch size 1, got {tiers[0].low}")
    for i, (a, b) in enumerate(itertools.pairwise(tiers)):
        if a.high is None or b.low != a.high + 1:
            raise _fail(
                path, f"tiers[{i + 1}].batch_sizes", f"must start right after tier {i} ({a.label}), got {b.low}"
            )
    for i, t in enumerate(tiers):
        if not t.covers(t.planned_batch_size):
            raise _fail(path, f"tiers[{i}].planned_batch_size", f"{t.planned_batch_size} is outside {t.label}")


def plan_from_json(data: Any, path: str) -> GovernorPlan:
    """A :class:`GovernorPlan` from a plan file's parsed JSON (see the module docstring).

    Raises:
        DataError: any field missing or wrong, naming ``path`` and the field.
    """
    obj = _object(data, path, "(top level)")
    if obj.get("format") != PLAN_FORMAT:
        raise _fail(path, "format", f"expected {PLAN_FORMAT!r}, got {repr(obj.get('format'))[:60]}")
    if obj.get("version") != PLAN_VERSION:
        raise _fail(path, "version", f"expected {PLAN_VERSION}, got {repr(obj.get('version'))[:60]}")
    gpu = _gpu(obj.get("gpu"), path)
    raw_tiers = obj.get("tiers")
    if not isinstance(raw_tiers, list) or not 1 <= len(raw_tiers) <= MAX_SCHEDULE_TIERS:
        raise _fail(path, "tiers", f"expected a list of 1 to {MAX_SCHEDULE_TIERS} tiers")
    tiers = tuple(_tier(t, path, f"tiers[{i}]", gpu) for i, t in enumerate(raw_tiers))
    _check_contiguous(tiers, path)
    band = obj.get("band", [BAND_LOW, BAND_HIGH])
    if not isinstance(band, list) or len(band) != 2:
        raise _fail(path, "band", f"expected [low, high], got {repr(band)[:60]}")
    low = _number(band[0], path, "band", 0.01, 1.0)
    high = _number(band[1], path, "band", low, 1.0)
    raw_acc = obj.get("acceptance", [])
    if not isinstance(raw_acc, list) or len(raw_acc) > MAX_SCHEDULE_TIERS:
        raise _fail(path, "acceptance", f"expected a list of at most {MAX_SCHEDULE_TIERS} entries")
    acceptance: dict[tuple[int, int, int], PlanFigure] = {}
    for i, entry in enumerate(raw_acc):
        name = f"acceptance[{i}]"
        entry_obj = _object(entry, path, name)
        acceptance[_action(entry_obj.get("action"), path, f"{name}.action")] = _figure(
            {k: v for k, v in entry_obj.items() if k != "action"}, path, name
        )
    model = _object(obj.get("model", {}), path, "model")
    notes = obj.get("notes", [])
    if not isinstance(notes, list) or len(notes) > 256:
        raise _fail(path, "notes", "expected a list of at most 256 strings")
    return GovernorPlan(
        tiers=tiers,
        gpu=gpu,
        source=_text(obj.get("source"), path, "source") or "",
        model={str(k): _text(v, path, f"model.{k}", optional=True) for k, v in model.items()},
        band=(low, high),
        acceptance=acceptance,
        notes=tuple(_text(n, path, f"notes[{i}]") or "" for i, n in enumerate(notes)),
    )


def read_plan(path: str | Path) -> GovernorPlan:
    """Read a plan file (at most :data:`MAX_PLAN_BYTES`), strictly: every field is checked.

    Raises:
        DataError: missing, unreadable, too large, not JSON, or a bad field (one line naming
            the file and the field).
    """
    name = str(path)
    try:
        text = read_text_bounded(path, limit=MAX_PLAN_BYTES, kind="plan file", error=DataError)
    except FileNotFoundError:
        raise DataError("no such file", path=name) from None
    except IsADirectoryError:
        raise DataError("is a folder, not a plan file", path=name) from None
    except UnicodeDecodeError:
        raise DataError("not UTF-8 text", path=name) from None
    except OSError as exc:
        raise DataError(f"cannot read ({exc.strerror or exc})", path=name) from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise DataError(f"not JSON ({str(exc)[:80]})", path=name) from None
    return plan_from_json(data, name)
