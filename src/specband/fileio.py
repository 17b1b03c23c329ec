"""All-or-nothing file writes, shared by every part of specband that writes a file whole.

A reader of the target path sees either the old file or the complete new one, never half
a file: the content goes to a temporary file ``.<name>.<random>.tmp`` in the target's
folder (same file system, so the rename is atomic), is flushed and (by default) fsynced,
and is then renamed over the target with :func:`os.replace`. The temporary file is
created with mode ``0o666`` through ``os.open``, so the kernel applies the umask (and a
folder's default ACL) exactly as for a file made by ``open(path, "w")``. On any failure,
including an exception from the caller's ``check`` or a KeyboardInterrupt, the temporary
file is removed and the target is left as it was.

``OSError`` from the file system is turned into the caller's :class:`SpecbandError`
subclass with the one-line message ``"<path>: cannot write (<reason>)"`` (``reason`` is
the OS's text, e.g. ``No such file or directory``), which the CLI prints as
``error: ...`` with exit status 2.

Only the standard library is imported here, so that cold paths (``specband recommend``)
stay fast.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from specband.errors import SpecbandError

__all__ = ["write_bytes_atomic", "write_jsonl_atomic", "write_text_atomic"]

#: Attempts at an unused temporary name before giving up (each name has 48 random bits).
_NAME_ATTEMPTS = 100


def _error(error: type[SpecbandError], path: Path, exc: OSError) -> SpecbandError:
    return error(f"{path}: cannot write ({exc.strerror or exc})")


def _create_temp(path: Path) -> tuple[int, Path]:
    """Create and open ``.<name>.<random>.tmp`` next to ``path`` (``O_EXCL``, mode 0666
    before the umask). Raises OSError."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_NAME_ATTEMPTS):
        tmp = path.with_name(f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary file name", str(path.parent))


def _write_atomic(
    path: str | os.PathLike[str],
    fill: Callable[[IO[bytes]], object],
    *,
    error: type[SpecbandError],
    fsync: bool,
    make_parents: bool,
    check: Callable[[Path], object] | None,
) -> Path:
    out = Path(path)
    if not str(path).strip() or out.name in ("", ".", ".."):
        raise error(f"{str(path)!r}: not a file name")
    folder = out.parent
    if not make_parents and folder.exists() and not folder.is_dir():
        raise error(f"{out}: cannot write ({folder} is not a folder)")
    try:
        if make_parents:
            folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = _create_temp(out)
    except OSError as exc:
        raise _error(error, out, exc) from None
    try:
        try:
            with os.fdopen(fd, "wb") as fh:
                fill(fh)
                fh.flush()
                if fsync:
                    os.fsync(fh.fileno())
        except OSError as exc:
            raise _error(error, out, exc) from None
        if check is not None:
            check(tmp)
        try:
            os.replace(tmp, out)
        except OSError as exc:
            raise _error(error, out, exc) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    return out


def write_bytes_atomic(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    error: type[SpecbandError] = SpecbandError,
    fsync: bool = True,
    make_parents: bool = False,
    check: Callable[[Path], object] | None = None,
) -> Path:
    """Write ``data`` to ``path`` all or nothing (see the module docstring).

    Args:
        path: the target file; replaced if it exists.
        data: the complete content.
        error: the :class:`SpecbandError` subclass an ``OSError`` becomes (called with
            one message argument).
        fsync: fsync the temporary file before the rename (durable content); ``False``
            for short-lived state files rewritten often.
        make_parents: create missing parent folders first (else a missing folder is an
            error).
        check: called with the temporary file's path once it is complete, before the
            rename; whatever it raises propagates unchanged and nothing is written.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        error: an empty path or one naming a folder (``.``, ``..``), the folder is missing or
            not writable, the disk is full, or the rename fails; the message is
            ``"<path>: cannot write (<reason>)"`` for the failures.
    """
    return _write_atomic(
        path, lambda fh: fh.write(data), error=error, fsync=fsync, make_parents=make_parents, check=check
    )


def write_text_atomic(
    path: str | os.PathLike[str],
    text: str,
    *,
    encoding: str = "utf-8",
    error: type[SpecbandError] = SpecbandError,
    fsync: bool = True,
    make_parents: bool = False,
    check: Callable[[Path], object] | None = None,
) -> Path:
    """Write ``text`` (encoded with ``encoding``, newlines as given) to ``path`` all or
    nothing; arguments, return value and errors as :func:`write_bytes_atomic`."""
    return write_bytes_atomic(
        path, text.encode(encoding), error=error, fsync=fsync, make_parents=make_parents, check=check
    )


def write_jsonl_atomic(
    path: str | os.PathLike[str],
    rows: Iterable[Mapping[str, Any]],
    *,
    error: type[SpecbandError] = SpecbandError,
    fsync: bool = True,
    make_parents: bool = False,
    check: Callable[[Path], object] | None = None,
) -> Path:
    """Write ``rows`` as JSONL (one compact JSON object per line, UTF-8, each line ending
    in ``\\n``) to ``path`` all or nothing; ``rows`` may be a generator (streamed).
    Other arguments and the return value as :func:`write_bytes_atomic`.

    Raises:
        error: as :func:`write_bytes_atomic`, or a row that JSON cannot hold (NaN,
            Infinity, a non-serialisable value): ``"<path>: row <n>: cannot write JSON
            (<reason>)"`` with ``n`` 1-based; nothing is written then.
    """
    out = Path(path)

    def fill(fh: IO[bytes]) -> None:
        for n, row in enumerate(rows, start=1):
            try:
                line = json.dumps(row, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise error(f"{out}: row {n}: cannot write JSON ({exc})") from None
            fh.write(line.encode("utf-8") + b"\n")

    return _write_atomic(out, fill, error=error, fsync=fsync, make_parents=make_parents, check=check)
