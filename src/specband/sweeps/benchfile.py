"""The one reading of sglang's ``scripts/playground/bench_speculative.py`` output.

The bench script writes one JSON line per configuration: ``batch_size, steps, topk,
num_draft_tokens, acc_length, step_time, speed, completion_tokens`` (``completion_tokens``
is the *average* output tokens per request; ``speed = acc_length / p20(step_time)``). It
measures **no energy**: the rows have null energy columns and ``energy_method = "none"``,
and their reward comes from throughput (and the thermal multiplier) only.

Both ``specband import-bench`` and :func:`specband.sweeps.dataset.load_sweep` (a bench file given
as data) read it here, the same way:

* ``index`` is the **grid index**: the bs-major position over the file's batch sizes
  (sorted) and the 19 contract actions, as ``specband sweep`` numbers its runs; a
  configuration that occurs again gets the next ``repeat``. (A line's position would
  give the same configuration a new index on every repeat, so a repeated configuration
  would not be a repeat, and indexes would not match a sweep's.)
* a triple that is not one of the 19 contract actions after sglang's canonicalisation is
  **skipped and counted**, not an error: the bench script's own default grid includes
  such triples (steps 7, topk 8, 32 draft tokens), so refusing them would refuse every
  unedited bench file; the contract's policies cannot pick them anyway.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.contract.actions import ACTIONS, NUM_ACTIONS, action_index
from specband.contract.record import RUN_COLUMNS, SweepRecord
from specband.core.errors import DataError, InvalidActionError
from specband.core.limits import is_finite_number, is_int

__all__ = ["BENCH_COLUMNS", "BenchRows", "is_bench_record", "read_bench"]

#: Fields every bench line has.
REQUIRED_BENCH_FIELDS = ("batch_size", "steps", "topk", "num_draft_tokens", "acc_length", "speed")
#: Columns of a bench line converted to a sweep row, in order.
BENCH_COLUMNS: tuple[str, ...] = (*RUN_COLUMNS, "avg_output_tokens", "source_line")


@dataclass(frozen=True)
class BenchRows:
    """A bench file read as sweep rows.

    Attributes:
        records: ``(input line, record)`` of each contract configuration, in file order.
        skipped: ``"line <n>: <triple>: <why>"`` for each line whose triple is not a
            contract action.
    """

    records: list[tuple[int, SweepRecord]]
    skipped: list[str]


def is_bench_record(record: Any) -> bool:
    """Whether a JSON value looks like a bench line (``acc_length``, or ``speed`` without
    ``speed_tok_s``)."""
    return isinstance(record, dict) and ("acc_length" in record or ("speed" in record and "speed_tok_s" not in record))


def _number(value: Any, name: str, path: str | Path | None, line: int) -> float:
    if not is_finite_number(value):
        raise DataError(f"expected a finite number, got {value!r}", path=path, line=line, field=name)
    return float(value)


def _optional_number(rec: dict[str, Any], name: str, path: str | Path | None, line: int) -> float | None:
    return None if rec.get(name) is None else _number(rec[name], name, path, line)


def _check_line(rec: Any, path: str | Path | None, line: int) -> None:
    if not isinstance(rec, dict):
        raise DataError(f"expected a JSON object, got {type(rec).__name__}", path=path, line=line)
    for name in REQUIRED_BENCH_FIELDS:
        if name not in rec:
            raise DataError("required field is missing", path=path, line=line, field=name)
    for name in ("batch_size", "steps", "topk", "num_draft_tokens"):
        if not is_int(rec[name]):
            raise DataError(f"expected an integer, got {rec[name]!r}", path=path, line=line, field=name)
    if rec["batch_size"] <= 0:
        raise DataError(f"must be > 0, got {rec['batch_size']}", path=path, line=line, field="batch_size")


def read_bench(numbered: Sequence[tuple[int, Any]], path: str | Path | None, hardware: str | None = None) -> BenchRows:
    """Turn numbered bench lines into sweep records (see the module docstring).

    Args:
        numbered: ``(line, value)`` pairs, e.g. from :func:`specband.files.jsonl.read_jsonl`.
        path: named in the errors.
        hardware: the ``hardware`` column (the bench file does not say).

    Raises:
        DataError: a line that is not an object, a missing field or a bad value (naming
            file, line and the bench file's field).
    """
    parsed = []
    skipped = []
    for line, rec in numbered:
        _check_line(rec, path, line)
        triple = (rec["steps"], rec["topk"], rec["num_draft_tokens"])
        try:
            parsed.append((line, rec, action_index(triple)))
        except InvalidActionError as exc:
            skipped.append(f"line {line}: {triple}: {exc}")
    bs_pos = {bs: i for i, bs in enumerate(sorted({rec["batch_size"] for _, rec, _ in parsed}))}
    repeats: dict[int, int] = defaultdict(int)
    records = []
    for line, rec, idx in parsed:
        action = ACTIONS[idx]
        accept = _number(rec["acc_length"], "acc_length", path, line)
        index = bs_pos[rec["batch_size"]] * NUM_ACTIONS + idx
        record = SweepRecord(
            hardware=hardware,
            index=index,
            repeat=repeats[index],
            batch_size=rec["batch_size"],
            steps=action.speculative_num_steps,
            topk=action.speculative_eagle_topk,
            num_draft_tokens=action.speculative_num_draft_tokens,
            is_baseline=action.is_baseline,
            accept_length=1.0 if action.is_baseline else accept,
            speed_tok_s=_number(rec["speed"], "speed", path, line),
            speed_source="bench_speculative",
            step_time_s=_optional_number(rec, "step_time", path, line),
            energy_method="none",
            provenance="measured",
            accept_length_source="bench_speculative",
            avg_output_tokens=_optional_number(rec, "completion_tokens", path, line),
            source_line=line,
        )
        repeats[index] += 1
        records.append((line, record))
    return BenchRows(records, skipped)
