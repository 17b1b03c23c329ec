"""The one JSONL reader: every file of one JSON value per line (sweep files, sglang bench
output, prompt files, a sweep being resumed) is read here.

Only the standard library is imported (cold commands stay fast).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from specband.core.errors import DataError
from specband.core.limits import MAX_DATA_FILE_BYTES
from specband.files.fileio import read_text_bounded

__all__ = ["parse_jsonl", "read_data_text", "read_jsonl"]

#: JSON Lines ends a line with ``\n`` (``\r\n`` and a lone ``\r`` are read too: neither can
#: stand raw inside a JSON string). ``str.splitlines`` would also split on U+0085, U+2028,
#: U+2029, ``\x0b``, ``\x0c`` and ``\x1c``-``\x1e``, and the first three are valid raw inside
#: a JSON string (``json.dumps(..., ensure_ascii=False)`` writes them so).
_LINE_END = re.compile(r"\r\n|\r|\n")


def parse_jsonl(text: str, path: str | Path | None, *, objects: bool = False, why: str = "") -> list[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank line of ``text`` (1-based numbers).

    Lines end at ``\n``, ``\r\n`` or ``\r`` only (:data:`_LINE_END`), so a string holding a
    raw U+2028 or U+0085 stays on its line.

    Args:
        text: the file's text.
        path: named in the errors.
        objects: every value must be a JSON object.
        why: appended to an error's message (e.g. ``"; cannot resume"``).

    Raises:
        DataError: ``"<path>:<line>: not valid JSON (<reason> at column <n>)"``, or
            ``"... expected a JSON object"`` with ``objects``.
    """
    out: list[tuple[int, Any]] = []
    for lineno, line in enumerate(_LINE_END.split(text), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"not valid JSON ({exc.msg} at column {exc.colno}){why}", path=path, line=lineno) from None
        except RecursionError:
            raise DataError(f"not valid JSON (nested too deeply){why}", path=path, line=lineno) from None
        except ValueError as exc:  # a number over Python's digit limit
            raise DataError(f"not valid JSON ({' '.join(str(exc).split())}){why}", path=path, line=lineno) from None
        if objects and not isinstance(value, dict):
            raise DataError(f"expected a JSON object, got {type(value).__name__}{why}", path=path, line=lineno)
        out.append((lineno, value))
    return out


def read_data_text(path: Path, *, kind: str) -> str:
    """The text of a data file (UTF-8, a byte-order mark dropped), read at most
    :data:`~specband.core.limits.MAX_DATA_FILE_BYTES`.

    Args:
        path: the file.
        kind: what it should be, with its article, for the messages (``"a JSONL file"``).

    Raises:
        DataError: naming the file: missing, a folder, a device/FIFO/socket, too large, not
            UTF-8 or unreadable.
    """
    try:
        return read_text_bounded(
            path, limit=MAX_DATA_FILE_BYTES, kind=kind.split(" ", 1)[-1], error=DataError, encoding="utf-8-sig"
        )
    except FileNotFoundError:
        raise DataError("no such file", path=path) from None
    except IsADirectoryError:
        raise DataError(f"is a directory, not {kind}", path=path) from None
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text ({exc.reason})", path=path) from None
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror or exc}", path=path) from None


def read_jsonl(path: str | Path, *, objects: bool = False) -> list[tuple[int, Any]]:
    """Read a JSONL data file: ``(line number, value)`` of each non-blank line.

    A UTF-8 byte-order mark (files saved by Windows editors) is not data.

    Raises:
        DataError: naming the file: missing, a folder, a device/FIFO/socket, larger than
            :data:`~specband.core.limits.MAX_DATA_FILE_BYTES`, not UTF-8, unreadable, empty, or
            a line as :func:`parse_jsonl`.
    """
    p = Path(path)
    numbered = parse_jsonl(read_data_text(p, kind="a JSONL file"), p, objects=objects)
    if not numbered:
        raise DataError("file is empty: no JSON rows", path=p)
    return numbered
