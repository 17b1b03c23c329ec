"""Convert sglang ``scripts/playground/bench_speculative.py`` output into a sweep file.

The reading (grid index and repeats, skipped triples, no energy) is
:mod:`specband.sweeps.benchfile`'s, the one :func:`specband.sweeps.dataset.load_sweep` uses too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError, DataError
from specband.files.fileio import write_jsonl_atomic
from specband.files.jsonl import read_jsonl
from specband.sweeps.benchfile import BENCH_COLUMNS, read_bench
from specband.sweeps.dataset import load_sweep

__all__ = ["ImportResult", "import_bench"]


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


#: Sweep column -> the bench file's field it came from (errors name the input's field).
_BENCH_FIELD = {
    "accept_length": "acc_length",
    "speed_tok_s": "speed",
    "step_time_s": "step_time",
    "avg_output_tokens": "completion_tokens",
}


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
    check that the result loads with :func:`specband.sweeps.dataset.load_sweep`.

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
    bench = read_bench(read_jsonl(src), src, hardware)
    rows = [record.as_row(BENCH_COLUMNS) for _, record in bench.records]
    skipped = bench.skipped
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
            field = _BENCH_FIELD.get(exc.field or "", exc.field)
            raise DataError(
                f"the converted row does not load as a sweep: {exc.message}", path=src, line=line, field=field
            ) from None

    write_jsonl_atomic(out, rows, error=ConfigError, make_parents=True, check=check)
    return ImportResult(rows, skipped, out)
