"""The files ``--acceptance-from`` reads: measured accept lengths and, where the file has them,
measured speeds (:func:`read_acceptance_file`).

Files read (sniffed from the content):

* a specband sweep JSONL (``specband sweep``/``simulate`` rows: ``batch_size, steps, topk,
  num_draft_tokens, accept_length, speed_tok_s``; error rows skipped; ``position_accept`` where a
  row has it; ``step_time_s`` where it has it);
* an sglang ``scripts/playground/bench_speculative.py`` JSONL (the ``import-bench`` format:
  ``batch_size, steps, topk, num_draft_tokens, acc_length, speed``, ``step_time`` optional; any
  valid sglang triple, the extended grid included);
* a probe file (``specband probe``: one JSON object, ``"format": "specband-probe"``, its frame
  checked by :func:`specband.engines.probe_file.check_probe_file`: version 1 or 2, exactly its
  keys, a known engine, version 2's provenance and reading digest), whose ``acceptance`` holds
  the accept length and, where the engine reports them, vLLM's per-position acceptance or
  sglang's accept histogram (a probe measures no decode speed).

Every field is checked as ``import-bench`` checks a bench file (:mod:`specband.sweeps.benchfile`):
a batch size, a triple or a speed that is not what it must be (``"batch_size": "one"``, ``-1``,
``"speed": -5``, ``NaN``) is one :class:`~specband.core.errors.DataError` naming the file, the
line and the field. A sweep file whose rows come from two engines (``engine``) or mix measured
rows with emulated or simulated ones (``provenance``) is refused in one line: a fit to both would
describe neither; rows that are all emulated or simulated are fitted, and the fit's label says so.
A probe file of a version this specband does not read, or one edited since ``probe`` wrote it, is
refused; an emulated probe's fit says so, as emulated sweep rows' does.

Baseline rows say nothing about acceptance but their speed is the baseline's step time: they
are kept as :class:`SpeedObservation` for the cost-side fit (:mod:`specband.sim.cost_fit`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.contract.actions import validate_action
from specband.core.errors import DataError, InvalidActionError
from specband.core.limits import MAX_BATCH_SIZE, is_finite_number, is_int
from specband.engines.probe_file import check_probe_file
from specband.files.jsonl import parse_jsonl, read_data_text

__all__ = [
    "AcceptanceObservation",
    "AcceptanceSource",
    "SpeedObservation",
    "histogram_position_accept",
    "read_acceptance_file",
]

#: Relative slack of a probe's accept histogram against its accept length (the histogram and
#: the mean are read from the server's counters at slightly different moments).
HISTOGRAM_SLACK = 0.05

Triple = tuple[int, int, int]


@dataclass(frozen=True)
class AcceptanceObservation:
    """One measured accept length.

    Attributes:
        action: ``(steps, topk, num_draft_tokens)`` (not the baseline).
        accept_length: mean tokens per verify step, bonus token included, ``>= 1``.
        weight: verify steps or requests behind it (1.0 when unknown); weights the mean of
            several observations of one config.
        position_accept: per draft position ``i = 1..steps``, the fraction of drafts whose
            ``i``-th token was accepted (chains only; from vLLM's per-position counters or
            sglang's accept histogram), or ``None``.
        batch_size: the batch size it was measured at, or ``None``.
    """

    action: Triple
    accept_length: float
    weight: float = 1.0
    position_accept: tuple[float, ...] | None = None
    batch_size: int | None = None


@dataclass(frozen=True)
class SpeedObservation:
    """One measured decode speed (the cost side: step time = accept length / speed).

    Attributes:
        batch_size: the batch size it was measured at.
        action: ``(steps, topk, num_draft_tokens)``; ``(0, 0, 0)`` for the baseline.
        speed_tok_s: per-request decode speed, tok/s (sglang's bench ``speed``, a sweep's
            ``speed_tok_s``).
        accept_length: the accept length measured with it (1 for the baseline).
        line: the file's line, or ``None``.
    """

    batch_size: int
    action: Triple
    speed_tok_s: float
    accept_length: float
    line: int | None = None

    @property
    def step_time_s(self) -> float:
        """The measured step time, ``accept_length / speed_tok_s``, s."""
        return self.accept_length / self.speed_tok_s


@dataclass(frozen=True)
class AcceptanceSource:
    """What an acceptance file holds (:func:`read_acceptance_file`).

    Attributes:
        path: the file.
        kind: ``"sweep"``, ``"bench"`` or ``"probe"``.
        observations: one per measured speculative row/config (baseline rows dropped).
        label: ``"fitted to N configs of FILE"`` (N distinct configs, FILE the path as given),
            with ``" (emulated rows)"`` or ``" (simulated rows)"`` where the rows are not measured.
        engine, target, draft: what the file says (probe files; sweep rows' ``engine``,
            ``target_model``/``draft_model``), else ``None``.
        speeds: the measured speeds (baseline rows included), empty when the file has none.
        provenance: ``"measured"``, ``"emulated"`` or ``"simulated"`` (the rows').
    """

    path: str
    kind: str
    observations: tuple[AcceptanceObservation, ...]
    label: str
    engine: str | None = None
    target: str | None = None
    draft: str | None = None
    speeds: tuple[SpeedObservation, ...] = ()
    provenance: str = "measured"


def _label(name: str, n: int, provenance: str = "measured") -> str:
    mark = "" if provenance == "measured" else f" ({provenance} rows)"
    return f"fitted to {n} config{'s' if n != 1 else ''} of {name}{mark}"


def histogram_position_accept(histogram: Sequence[float], steps: int) -> tuple[float, ...]:
    """Per-position acceptance from an accept histogram.

    Args:
        histogram: ``histogram[j]`` = verify steps that accepted ``j`` draft tokens (accept
            length ``j + 1``), ``j = 0..steps`` (sglang's accept histogram).
        steps: the chain's draft steps.

    Returns:
        ``steps`` fractions: position ``i`` is ``P(accepted >= i)``.

    Raises:
        ValueError: negative or non-finite counts, longer than ``steps + 1``, or no counts.
    """
    counts = [float(c) for c in histogram]
    if any(not math.isfinite(c) or c < 0 for c in counts):
        raise ValueError("counts must be finite and >= 0")
    if len(counts) > steps + 1:
        raise ValueError(f"has {len(counts)} bins, more than steps + 1 = {steps + 1}")
    total = sum(counts)
    if total <= 0:
        raise ValueError("holds no verify step")
    counts += [0.0] * (steps + 1 - len(counts))
    return tuple(sum(counts[i:]) / total for i in range(1, steps + 1))


# ----------------------------------------------------------------------------- field checks


def _num(value: Any, path: str, line: int | None, field: str) -> float:
    if isinstance(value, bool) or not is_finite_number(value):
        raise DataError(f"expected a finite number, got {repr(value)[:80]}", path=path, line=line, field=field)
    return float(value)


def _positive(value: Any, path: str, line: int | None, field: str, unit: str) -> float:
    number = _num(value, path, line, field)
    if number <= 0:
        raise DataError(f"must be > 0 {unit}, got {number:g}", path=path, line=line, field=field)
    return number


def _batch_size(value: Any, path: str, line: int | None, field: str = "batch_size") -> int:
    if isinstance(value, bool) or not is_int(value):
        raise DataError(f"expected an integer, got {repr(value)[:80]}", path=path, line=line, field=field)
    if not 1 <= value <= MAX_BATCH_SIZE:
        raise DataError(f"must be in [1, {MAX_BATCH_SIZE}], got {value}", path=path, line=line, field=field)
    return int(value)


def _triple(rec: dict[str, Any], names: Sequence[str], path: str, line: int | None) -> Triple:
    for name in names:
        if name not in rec:
            raise DataError("required field is missing", path=path, line=line, field=name)
        if isinstance(rec[name], bool) or not is_int(rec[name]) or rec[name] < 0:
            raise DataError(f"expected an integer >= 0, got {rec[name]!r}", path=path, line=line, field=name)
    raw = tuple(int(rec[n]) for n in names)
    try:
        action = validate_action(raw)
    except InvalidActionError as exc:
        raise DataError(f"{raw} is not a valid sglang config ({exc})", path=path, line=line, field=names[0]) from None
    return (action[0], action[1], action[2])


def _accept(value: Any, action: Triple, path: str, line: int | None, field: str) -> float:
    accept = _num(value, path, line, field)
    if not 1.0 <= accept <= action[0] + 1.0 + 1e-9:
        raise DataError(
            f"accept length {accept:g} is outside [1, steps + 1 = {action[0] + 1}] for {action}",
            path=path,
            line=line,
            field=field,
        )
    return min(accept, action[0] + 1.0)


def _positions(value: Any, action: Triple, path: str, line: int | None, field: str) -> tuple[float, ...] | None:
    if value is None or action[1] != 1:
        return None
    if not isinstance(value, list) or not value or len(value) > action[0]:
        raise DataError(f"expected a list of 1..{action[0]} fractions", path=path, line=line, field=field)
    out = tuple(_num(v, path, line, field) for v in value)
    if any(not 0.0 <= v <= 1.0 for v in out):
        raise DataError("fractions must be in [0, 1]", path=path, line=line, field=field)
    return out


def _text(rec: dict[str, Any], key: str, path: str, line: int | None) -> str | None:
    value = rec.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.isprintable() or len(value) > 200:
        raise DataError(f"expected one printable line of text, got {repr(value)[:80]}", path=path, line=line, field=key)
    return value


# ----------------------------------------------------------------------------- JSONL files


@dataclass
class _Lines:
    observations: list[AcceptanceObservation]
    speeds: list[SpeedObservation]
    names: dict[str, str]
    engines: dict[str, int]
    provenances: dict[str, int]


def _read_line(rec: Any, line: int, bench: bool, path: str, out: _Lines) -> None:
    if not isinstance(rec, dict):
        raise DataError(f"expected a JSON object, got {type(rec).__name__}", path=path, line=line)
    action = _triple(rec, ("steps", "topk", "num_draft_tokens"), path, line)
    if "batch_size" not in rec:
        raise DataError("required field is missing", path=path, line=line, field="batch_size")
    bs = _batch_size(rec["batch_size"], path, line)
    # a row that names no engine is sglang's, one that names no provenance measured (as load_sweep reads them)
    out.engines.setdefault(_text(rec, "engine", path, line) or "sglang", line)
    out.provenances.setdefault(_text(rec, "provenance", path, line) or "measured", line)
    for key in ("target_model", "draft_model"):
        value = _text(rec, key, path, line)
        if value is not None:
            out.names.setdefault(key, value)
    if not bench and rec.get("error"):
        return  # a failed run
    accept_field, speed_field = ("acc_length", "speed") if bench else ("accept_length", "speed_tok_s")
    for name in (accept_field, speed_field) if bench else ():
        if name not in rec:
            raise DataError("required field is missing", path=path, line=line, field=name)
    speed = None if rec.get(speed_field) is None else _positive(rec[speed_field], path, line, speed_field, "tok/s")
    for name in ("step_time", "step_time_s", "completion_tokens"):
        if rec.get(name) is not None:
            _positive(rec[name], path, line, name, "s" if name.startswith("step") else "tokens")
    if action[0] == 0:
        if speed is not None:
            out.speeds.append(SpeedObservation(bs, action, speed, 1.0, line))
        return
    if rec.get(accept_field) is None:
        if bench:
            raise DataError("required field is missing", path=path, line=line, field=accept_field)
        return  # a sweep row without an accept length (an old or failed run)
    accept = _accept(rec[accept_field], action, path, line, accept_field)
    positions = _positions(rec.get("position_accept"), action, path, line, "position_accept")
    out.observations.append(AcceptanceObservation(action, accept, 1.0, positions, bs))
    if speed is not None:
        out.speeds.append(SpeedObservation(bs, action, speed, accept, line))


def _one_kind(seen: dict[str, int], what: str, path: str, field: str) -> str | None:
    """The one value of ``seen`` (value -> first line), or one error line naming two."""
    if len(seen) > 1:
        first, second = sorted(seen.items(), key=lambda kv: kv[1])[:2]
        raise DataError(
            f"mixes {what} {first[0]!r} (line {first[1]}) and {second[0]!r} (line {second[1]}): a fit to both "
            "would describe neither; give the rows of one",
            path=path,
            line=second[1],
            field=field,
        )
    return next(iter(seen), None)


def _read_lines(numbered: list[tuple[int, Any]], path: str) -> AcceptanceSource:
    first = numbered[0][1]
    bench = isinstance(first, dict) and ("acc_length" in first or ("speed" in first and "speed_tok_s" not in first))
    out = _Lines([], [], {}, {}, {})
    for line, rec in numbered:
        _read_line(rec, line, bench, path, out)
    engine = _one_kind(out.engines, "engines", path, "engine")
    provenance = _one_kind(out.provenances, "rows of", path, "provenance") or "measured"
    return AcceptanceSource(
        path,
        "bench" if bench else "sweep",
        tuple(out.observations),
        _label(path, len({o.action for o in out.observations}), provenance),
        engine=engine,
        target=out.names.get("target_model"),
        draft=out.names.get("draft_model"),
        speeds=tuple(out.speeds),
        provenance=provenance,
    )


# ----------------------------------------------------------------------------- probe files


def _histogram_positions(acc: dict[str, Any], action: Triple, accept: float, path: str) -> tuple[float, ...] | None:
    hist = acc.get("accept_histogram")
    if hist is None:
        return None
    field = "acceptance.accept_histogram"
    if not isinstance(hist, list):
        raise DataError("expected a list of counts", path=path, field=field)
    counts = [_num(h, path, None, field) for h in hist]
    try:
        positions = histogram_position_accept(counts, action[0])
    except ValueError as exc:
        raise DataError(str(exc), path=path, field=field) from None
    mean = 1.0 + sum(positions)
    if abs(mean / accept - 1.0) > HISTOGRAM_SLACK:
        raise DataError(
            f"the histogram's mean accept length {mean:.3f} disagrees with acceptance.accept_length {accept:.3f} "
            f"(by more than {HISTOGRAM_SLACK:.0%}): was one of them edited?",
            path=path,
            field=field,
        )
    return positions if action[1] == 1 else None


def _read_probe(data: dict[str, Any], path: str) -> AcceptanceSource:
    check_probe_file(data, path)  # format, version, keys, engine; version 2: provenance and digest
    provenance = str(data.get("provenance", "measured"))
    raw = data.get("action")
    if not isinstance(raw, list) or len(raw) != 3:
        raise DataError(f"expected [steps, topk, num_draft_tokens], got {repr(raw)[:80]}", path=path, field="action")
    names = ("steps", "topk", "num_draft_tokens")
    action = _triple(dict(zip(names, raw, strict=True)), names, path, None)
    acc = data.get("acceptance")
    if not isinstance(acc, dict):
        raise DataError("expected an object", path=path, field="acceptance")
    obs: list[AcceptanceObservation] = []
    seen = data.get("batch_sizes_seen")
    if seen is not None and not isinstance(seen, list):
        raise DataError(f"expected a list of batch sizes, got {repr(seen)[:80]}", path=path, field="batch_sizes_seen")
    sizes = [_batch_size(b, path, None, "batch_sizes_seen") for b in seen or ()]
    if action[0] > 0:
        accept = _accept(acc.get("accept_length"), action, path, None, "acceptance.accept_length")
        weight = 1.0
        for key in ("verify_steps", "num_drafts"):
            if acc.get(key) is not None:
                weight = max(1.0, _num(acc[key], path, None, f"acceptance.{key}"))
                break
        positions = _positions(acc.get("position_accept"), action, path, None, "acceptance.position_accept")
        from_histogram = _histogram_positions(acc, action, accept, path)
        positions = positions if positions is not None else from_histogram
        obs.append(AcceptanceObservation(action, accept, weight, positions, sizes[0] if len(sizes) == 1 else None))
    return AcceptanceSource(
        path,
        "probe",
        tuple(obs),
        _label(path, len({o.action for o in obs}), provenance),
        engine=_text(data, "engine", path, None),
        target=_text(data, "target", path, None),
        draft=_text(data, "draft", path, None),
        provenance=provenance,
    )


def read_acceptance_file(path: str | Path) -> AcceptanceSource:
    """Read measured accept lengths (and speeds, where the file has them) from a sweep JSONL, a
    bench_speculative JSONL or a probe file (sniffed: a JSON object with ``"format":
    "specband-probe"`` is a probe file; JSONL whose first line has ``acc_length`` is bench
    output; other JSONL is a sweep).

    Args:
        path: the file (at most :data:`~specband.core.limits.MAX_DATA_FILE_BYTES`).

    Returns:
        the :class:`AcceptanceSource`.

    Raises:
        DataError: missing, unreadable or too large; not JSON/JSONL; a line without the fields
            its format needs, a bad value (naming file, line and field); rows of two engines or
            of measured and emulated runs; a probe file that check_probe_file refuses; no measured
            speculative config (only baseline or error rows).
    """
    p = Path(path)
    name = str(p)
    text = read_data_text(p, kind="an acceptance file")
    if not text.strip():
        raise DataError("empty file", path=name)
    whole: Any = None
    if text.lstrip().startswith("{"):
        try:
            whole = json.loads(text)
        except (json.JSONDecodeError, RecursionError, ValueError):
            whole = None  # JSONL: one object per line
    if isinstance(whole, dict) and "format" in whole:
        source = _read_probe(whole, name)  # another format is refused there
    else:
        source = _read_lines(parse_jsonl(text, name), name)
    if not source.observations:
        raise DataError(
            "no measured speculative config (only baseline or failed rows): nothing to fit acceptance to", path=name
        )
    return source
