"""A sweep's output file: the rows already in it (read for resume, merge and dry runs), and
new rows appended one fsynced line each (:class:`RowWriter`).

A file that ends in a partial line (the sweep was killed mid-write) has that line dropped
(rewritten atomically) before rows are appended; a repeated ``(index, repeat)`` is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from specband.core.errors import DataError, HarnessError
from specband.core.limits import MAX_DATA_FILE_BYTES
from specband.files.fileio import read_bytes_bounded, replace_target, write_bytes_atomic
from specband.files.jsonl import parse_jsonl
from specband.harness.interrupts import deferred

__all__ = ["RowWriter", "existing_rows", "parse_rows", "read_rows_for_resume", "sweep_file_bytes", "without_lines"]


def read_rows_for_resume(path: Path) -> list[dict[str, Any]]:
    """Rows already in ``path``; a trailing partial line (killed mid-write) is dropped
    and the file rewritten atomically without it.

    Raises:
        DataError: a complete line that is not a JSON object, or a repeated
            ``(index, repeat)``.
        HarnessError: the file cannot be read (``"<path>: cannot read (<reason>)"``, e.g.
            a folder) or rewritten (``"<path>: cannot write (<reason>)"``; it is left as it
            was).
    """
    numbered, complete = parse_rows(path)
    if complete is not None:
        write_bytes_atomic(path, complete, error=HarnessError)
    return [row for _, row in numbered]


def parse_rows(path: Path, *, verb: str = "resume") -> tuple[list[tuple[int, dict[str, Any]]], bytes | None]:
    """``(line number, row)`` of the rows already in ``path`` (none when it does not
    exist), read with :func:`specband.files.jsonl.parse_jsonl` and without writing anything
    (``sweep --resume`` and ``merge`` read sweep files here; ``verb`` ends a bad line's
    message: ``"; cannot resume"``).

    Returns:
        ``(numbered, complete)``: ``complete`` is the file's content without a trailing
        partial line when it ends in one (the file must then be rewritten before
        appending), else ``None``.

    Raises:
        DataError, HarnessError: as :func:`read_rows_for_resume` (cannot read).
    """
    try:
        data = read_bytes_bounded(path, limit=MAX_DATA_FILE_BYTES, kind="sweep file", error=HarnessError)
    except FileNotFoundError:
        return [], None
    except OSError as exc:  # a folder, no permission, ...
        raise HarnessError(f"{path}: cannot read ({exc.strerror or exc})") from None
    complete, _, partial = data.rpartition(b"\n")
    rewrite = (complete + b"\n" if complete else b"") if partial.strip() else None
    numbered = parse_jsonl(complete.decode("utf-8", "replace"), path, objects=True, why=f"; cannot {verb}")
    seen: dict[tuple[Any, Any], int] = {}
    for lineno, row in numbered:
        key = (row.get("index"), row.get("repeat"))
        if key in seen:
            raise DataError(
                f"(index, repeat) = {key} already on line {seen[key]}", path=path, line=lineno, field="index"
            )
        seen[key] = lineno
    return numbered, rewrite


def sweep_file_bytes(path: Path) -> bytes:
    """The whole sweep file, bounded (:data:`~specband.core.limits.MAX_DATA_FILE_BYTES`).

    Raises:
        HarnessError: it cannot be read (``"<path>: cannot read (<reason>)"``) or is too large.
    """
    try:
        return read_bytes_bounded(path, limit=MAX_DATA_FILE_BYTES, kind="sweep file", error=HarnessError)
    except OSError as exc:
        raise HarnessError(f"{path}: cannot read ({exc.strerror or exc})") from None


def without_lines(data: bytes, drop: set[int]) -> bytes:
    """``data`` without its (1-based) lines in ``drop``."""
    lines = data.split(b"\n")
    kept = [line for n, line in enumerate(lines, start=1) if n not in drop]
    return b"\n".join(kept)


def existing_rows(path: Path) -> list[dict[str, Any]]:
    """The complete rows already in ``path`` (none when it does not exist), reading only.

    Raises:
        DataError, HarnessError: as :func:`read_rows_for_resume` (cannot read).
    """
    numbered, _ = parse_rows(path)
    return [row for _, row in numbered]


class RowWriter:
    """Appends JSON rows to a JSONL file, flushing and fsyncing after each row.

    Attributes:
        path: the file.
        created: True when this writer created the file (it did not exist before).
        rows: rows appended by this writer.

    Raises:
        HarnessError: the file cannot be opened or written
            (``"<path>: cannot write (<reason>)"``).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows = 0
        new = not path.exists()
        if path.parent.exists() and not path.parent.is_dir():
            raise HarnessError(f"{path}: cannot write ({path.parent} is not a folder)")

        replace_target(path, error=HarnessError)  # appends to a regular file only (never a FIFO or device)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 (held open for every row; closed in close())
        except OSError as exc:
            raise HarnessError(f"{path}: cannot write ({exc.strerror or exc})") from None
        self.created = new
        if new:
            try:
                dir_fd = os.open(str(path.parent), os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
            except OSError:
                pass

    def append(self, row: dict[str, Any]) -> None:
        """Write one row as one line (no NaN or Infinity), flush and fsync; Ctrl-C and
        SIGTERM wait until the row is written (:func:`~specband.harness.interrupts.deferred`)."""
        line = json.dumps(row, allow_nan=False) + "\n"
        with deferred():
            try:
                self._fh.write(line)
                self._fh.flush()
                os.fsync(self._fh.fileno())
            except OSError as exc:
                raise HarnessError(f"{self.path}: cannot write a row ({exc.strerror or exc})") from None
            self.rows += 1

    def close(self) -> None:
        """Close the file. A flush that fails here (the disk filled while a row was being
        written: :meth:`append` already raised for it) is not raised a second time; every
        row before it was fsynced, and a partial last line is dropped on ``--resume``."""
        try:
            self._fh.close()
        except OSError:
            with contextlib.suppress(OSError, ValueError):
                os.close(self._fh.fileno())

    def __enter__(self) -> RowWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        """Close; after an error (not an interrupt) before the first row, remove the file
        this writer created (:meth:`discard_if_unused`)."""
        if exc_type is not None and issubclass(exc_type, Exception):
            self.discard_if_unused()
        else:
            self.close()

    def discard_if_unused(self) -> None:
        """Close, and remove the file if this writer created it and wrote no row (a sweep
        that fails before its first row leaves no empty file behind)."""
        self.close()
        if self.created and self.rows == 0:
            with contextlib.suppress(OSError):
                if self.path.stat().st_size == 0:
                    self.path.unlink()
