"""Convert sglang ``scripts/playground/bench_speculative.py`` output into sweep rows.

sglang's bench script writes one JSON line per configuration: ``batch_size, steps, topk,
num_draft_tokens, acc_length, step_time, speed, completion_tokens`` (``completion_tokens``
is the *average* output tokens per request; ``speed = acc_length / p20(step_time)``).
It measures **no energy**: the imported rows have null energy columns and
``energy_method = "none"``, and their reward is computed from throughput (and the
thermal multiplier) only.

Rows: ``index`` is the bs-major grid position over the file's batch sizes (sorted) and
the 19 contract actions, as ``specband sweep`` numbers them; a configuration that occurs
again gets the next ``repeat``. Triples that are not contract actions after sglang's
canonicalisation (e.g. steps 7, topk 8 or 32 draft tokens, which the bench script's
default grid includes) are skipped and counted.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.actions import ACTIONS, NUM_ACTIONS, action_index
from specband.dataset import SWEEP_COLUMNS, load_sweep
from specband.errors import ConfigError, DataError, InvalidActionError
from specband.fileio import write_jsonl_atomic
from specband.harness.runner import EXTRA_COLUMNS
from specband.limits import is_finite_number, is_int

__all__ = ["ImportResult", "convert_bench_rows", "import_bench"]

_REQUIRED = ("batch_size", "steps", "topk", "num_draft_tokens", "acc_length", "speed")


@dataclass(frozen=True)
class ImportResult:
    """What :func:`import_bench` did.

    Attributes:
        rows: the sweep rows written.
        skipped: input lines whose triple is not a contract action.
        out_path: the file written.
    """

    rows: list[dict[str, Any]]
    skipped: list[str]
    out_path: Path


def _number(value: Any, name: str, path: Path, line: int) -> float:
    if not is_finite_number(value):
        raise DataError(f"expected a finite number, got {value!r}", path=path, line=line, field=name)
    return float(value)


def convert_bench_rows(
    records: list[tuple[int, dict[str, Any]]], path: Path, hardware: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """Turn numbered bench records into sweep rows (see the module docstring).

    Raises:
        DataError: a missing field or a bad value (naming file, line and field).
    """
    parsed = []
    skipped = []
    for line, rec in records:
        for name in _REQUIRED:
            if name not in rec:
                raise DataError("required field is missing", path=path, line=line, field=name)
        for name in ("batch_size", "steps", "topk", "num_draft_tokens"):
            if not is_int(rec[name]):
                raise DataError(f"expected an integer, got {rec[name]!r}", path=path, line=line, field=name)
        if rec["batch_size"] <= 0:
            raise DataError(f"must be > 0, got {rec['batch_size']}", path=path, line=line, field="batch_size")
        triple = (rec["steps"], rec["topk"], rec["num_draft_tokens"])
        try:
            idx = action_index(triple)
        except InvalidActionError as exc:
            skipped.append(f"line {line}: {triple}: {exc}")
            continue
        parsed.append((line, rec, idx))
    batch_sizes = sorted({rec["batch_size"] for _, rec, _ in parsed})
    bs_pos = {bs: i for i, bs in enumerate(batch_sizes)}
    repeats: dict[int, int] = defaultdict(int)
    rows = []
    for line, rec, idx in parsed:
        action = ACTIONS[idx]
        accept = _number(rec["acc_length"], "acc_length", path, line)
        speed = _number(rec["speed"], "speed", path, line)
        step = rec.get("step_time")
        step_time = None if step is None else _number(step, "step_time", path, line)
        avg_tokens = rec.get("completion_tokens")
        avg_tokens = None if avg_tokens is None else _number(avg_tokens, "completion_tokens", path, line)
        index = bs_pos[rec["batch_size"]] * NUM_ACTIONS + idx
        row: dict[str, Any] = {name: None for name in (*SWEEP_COLUMNS, *EXTRA_COLUMNS)}
        row.update(
            hardware=hardware,
            index=index,
            repeat=repeats[index],
            batch_size=rec["batch_size"],
            steps=action.speculative_num_steps,
            topk=action.speculative_eagle_topk,
            num_draft_tokens=action.speculative_num_draft_tokens,
            is_baseline=action.is_baseline,
            accept_length=1.0 if action.is_baseline else accept,
            speed_tok_s=speed,
            speed_source="bench_speculative",
            step_time_s=step_time,
            energy_method="none",
            provenance="measured",
            accept_length_source="bench_speculative",
        )
        row["avg_output_tokens"] = avg_tokens
        row["source_line"] = line
        repeats[index] += 1
        rows.append(row)
    return rows, skipped


def _same_file(a: Path, b: Path) -> bool:
    """True when ``a`` and ``b`` name the same file (:func:`os.path.samefile`: the same
    device and inode, so links too), or resolve to the same path."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        pass
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):  # a symbolic-link loop
        return False


def import_bench(
    path: str | os.PathLike[str], out_path: str | os.PathLike[str], hardware: str = "unknown", overwrite: bool = False
) -> ImportResult:
    """Read a bench_speculative.py JSONL and write it as a sweep file (atomically), then
    check that the result loads with :func:`specband.dataset.load_sweep`.

    Raises:
        DataError: the input is missing, not JSONL, has a bad row, has no contract
            action, or a batch size without a ``(0, 0, 0)`` baseline row (nothing to score
            speed-ups against; run the bench script with ``--steps 0 ...``), or
            ``out_path`` exists and ``overwrite`` is false, or a converted row that
            does not load as a sweep (naming the input line; nothing is written).
        ConfigError: ``out_path`` is a folder or cannot be written (``"<path>: cannot
            write (<reason>)"``; the old file, if any, is left as it was), or it is the
            input file itself (the same path, a symbolic or hard link to it), with or
            without ``overwrite``.
    """
    src = Path(path)
    out = Path(out_path)
    if out.is_dir():
        raise ConfigError(f"{out}: cannot write (Is a directory)")
    if _same_file(src, out):
        raise ConfigError(
            f"--out {out}: is the input file {src}; converting would replace the bench output it reads "
            f"(choose another --out)"
        )
    if out.exists() and not overwrite:
        raise DataError("output file exists (pass --force to replace it)", path=out)
    try:
        text = src.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError("no such file", path=src) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read: {exc}", path=src) from None
    records = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DataError(f"not valid JSON ({exc.msg})", path=src, line=line) from None
        if not isinstance(rec, dict):
            raise DataError("expected a JSON object", path=src, line=line)
        records.append((line, rec))
    if not records:
        raise DataError("file is empty: no JSON rows", path=src)
    rows, skipped = convert_bench_rows(records, src, hardware)
    if not rows:
        raise DataError("no row is one of the 19 contract actions", path=src)
    baseline_bs = {r["batch_size"] for r in rows if r["is_baseline"]}
    for r in rows:
        if r["batch_size"] not in baseline_bs:
            raise DataError(
                f"batch size {r['batch_size']} has no (0,0,0) baseline row to score speed-ups against "
                f"(run bench_speculative.py with --steps 0 among the steps)",
                path=src,
                line=r["source_line"],
                field="batch_size",
            )

    def check(tmp: Path) -> None:
        # the written file must load as a sweep; report a failure at the input's line
        try:
            load_sweep(tmp)
        except DataError as exc:
            line = rows[exc.line - 1]["source_line"] if exc.line is not None and exc.line <= len(rows) else None
            raise DataError(
                f"the converted row does not load as a sweep: {exc.message}", path=src, line=line, field=exc.field
            ) from None

    write_jsonl_atomic(out, rows, error=ConfigError, make_parents=True, check=check)
    return ImportResult(rows, skipped, out)
