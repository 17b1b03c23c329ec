"""All-or-nothing file writes, and the one bounded reader of a file a user names.

Reads: :func:`read_bytes_bounded` / :func:`read_text_bounded` read every file a user names
(sweep and bench files, prompts, configs, profiles, schedules, metrics, a model folder's
JSON). The path is ``stat``-ed before it is opened, so a FIFO never blocks and a device
(``/dev/zero``) is never read: anything but a regular file is refused, and so is a file
over the caller's bound (one per kind of file, each with its basis, in
:mod:`specband.core.limits`). The file is then opened non-blocking and checked again with
``fstat`` (a file swapped in between is refused too), and at most ``limit + 1`` bytes
are read (a file that grew is refused). A folder or a missing file raises the ``OSError``
the caller already handles (``IsADirectoryError``, ``FileNotFoundError``).

Writes:

A reader of the target path sees either the old file or the complete new one, never half
a file: the content goes to a temporary file ``.<name>.<random>.tmp`` in the target's
folder (same file system, so the rename is atomic), is flushed and (by default) fsynced,
and is then renamed over the target with :func:`os.replace`. The temporary file is
created with mode ``0o666`` through ``os.open``, so the kernel applies the umask (and a
folder's default ACL) exactly as for a file made by ``open(path, "w")``. On any failure,
including an exception from the caller's ``check`` or a KeyboardInterrupt, the temporary
file is removed and the target is left as it was.

Replacing is checked (:func:`replace_target`, used by every writer): only a regular file is
replaced. A device, FIFO, socket or folder at the target is refused (``--force`` never
turns ``/dev/null`` into a file); a symlink is followed only to a regular file in the
link's own folder (that file is replaced, the link kept), any other symlink is refused.

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
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from specband.core.errors import ArtifactError, ConfigError, DataError, SpecbandError
from specband.core.limits import MAX_CONFIG_FILE_BYTES

__all__ = [
    "check_name_lengths",
    "check_out_path",
    "given_path",
    "read_bytes_bounded",
    "read_json",
    "read_text_bounded",
    "replace_target",
    "write_bytes_atomic",
    "write_jsonl_atomic",
    "write_text_atomic",
]

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


def replace_target(path: str | os.PathLike[str], *, error: type[SpecbandError] = SpecbandError) -> Path:
    """The file that writing ``path`` may replace, checked before anything is written.

    Returns:
        ``path`` itself (missing, or a regular file), or the regular file in the same folder
        that the symlink ``path`` points to.

    Raises:
        error: ``path`` is a folder, a device, FIFO or socket, or a symlink to anything but
            a regular file in its own folder (``"<path>: not replaced (<why>)"``).
    """
    out = Path(path)
    try:
        info = os.lstat(out)
    except FileNotFoundError:
        return out
    except OSError:
        return out  # unreadable: the write itself reports why
    target = out
    if stat.S_ISLNK(info.st_mode):
        real = Path(os.path.realpath(out))
        if real.parent != Path(os.path.realpath(out.parent)):
            raise error(f"{out}: not replaced (a symlink to {real}, outside its folder; give the file itself)")
        try:
            info = os.stat(real)
        except OSError:
            raise error(f"{out}: not replaced (a symlink to {real}, which does not exist)") from None
        target = real
    if stat.S_ISDIR(info.st_mode):
        raise error(f"{out}: not replaced (a folder; give a file name)")
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{out}: not replaced (not a regular file: a device, FIFO or socket)")
    return target


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
    out = replace_target(out, error=error)
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
    return Path(path)


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


def _refuse(path: str, info: os.stat_result, limit: int, kind: str, error: type[SpecbandError]) -> None:
    """Raise unless ``info`` is a regular file of at most ``limit`` bytes (a folder raises
    ``IsADirectoryError``, which every caller reports as it did before)."""
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    if not stat.S_ISREG(info.st_mode):
        raise _read_error(error, path, f"not a regular file (a device, FIFO or socket); give {_with_article(kind)}")
    if info.st_size > limit:
        raise _read_error(error, path, f"too large ({info.st_size} bytes; a {kind} may have at most {_size(limit)})")


def _read_error(error: type[SpecbandError], path: str, reason: str) -> SpecbandError:
    """``error`` with the message ``"<path>: <reason>"`` (a :class:`DataError` is given
    the path as its own field, which prints the same)."""
    return error(reason, path=path) if issubclass(error, DataError) else error(f"{path}: {reason}")


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes} bytes"


def read_bytes_bounded(
    path: str | os.PathLike[str], *, limit: int, kind: str, error: type[SpecbandError] = SpecbandError
) -> bytes:
    """The bytes of the regular file ``path``, read only when it holds at most ``limit``
    bytes (see the module docstring).

    Args:
        path: the file a user named.
        limit: the largest size accepted, bytes (a bound of :mod:`specband.core.limits`).
        kind: what the file is, for the message (``"JSON config file"``).
        error: the :class:`SpecbandError` subclass raised.

    Raises:
        error: ``"<path>: not a regular file (a device, FIFO or socket); give a/an <kind>"``
            or ``"<path>: too large (<n> bytes; a <kind> may have at most <limit>)"``.
        OSError: missing (``FileNotFoundError``), a folder (``IsADirectoryError``),
            unreadable: the caller reports it as before.
    """
    name = os.fspath(path)
    _refuse(name, os.stat(name), limit, kind, error)
    fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        _refuse(name, os.fstat(fd), limit, kind, error)
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise _read_error(error, name, f"too large (over {_size(limit)}, the most a {kind} may have)")
    return data


def _with_article(kind: str) -> str:
    """``kind`` with its indefinite article ("a JSONL file", "an acceptance file")."""
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"


def read_text_bounded(
    path: str | os.PathLike[str],
    *,
    limit: int,
    kind: str,
    error: type[SpecbandError] = SpecbandError,
    encoding: str = "utf-8",
) -> str:
    """:func:`read_bytes_bounded` decoded with ``encoding``; raises as it does, and
    ``UnicodeDecodeError`` for bytes that are not ``encoding``."""
    return read_bytes_bounded(path, limit=limit, kind=kind, error=error).decode(encoding)


def given_path(option: str, text: str | os.PathLike[str]) -> Path:
    """``text`` (an option's raw value) as a :class:`~pathlib.Path`: the one check of an
    empty ``--out`` (``Path("")`` would silently be ``.``, the working folder).

    Raises:
        ConfigError: ``"<option>: empty"`` for an empty or blank value.
    """
    if not str(text).strip():
        raise ConfigError(f"{option}: empty")
    path = Path(text)
    check_name_lengths(path, option=option)
    return path


def out_option_path(text: str | os.PathLike[str]) -> Path:
    """``--out`` of a command's request as a path (:func:`given_path`, its error re-raised as a
    plain :class:`SpecbandError`, one line naming ``--out``)."""
    try:
        return given_path("--out", text)
    except ConfigError as exc:
        raise SpecbandError(str(exc)) from None


#: Longest file name (one path component) in bytes: ``NAME_MAX`` of Linux file systems.
NAME_MAX = 255
#: Longest path in bytes, its terminating NUL included: ``PATH_MAX`` of Linux (``<linux/limits.h>``).
PATH_MAX = 4096


def check_name_lengths(path: str | os.PathLike[str], *, option: str, error: type[SpecbandError] = ConfigError) -> None:
    """Refuse a path with a component over :data:`NAME_MAX` bytes (and room for the
    ``.<name>.<random>.tmp`` temporary file an atomic write makes next to it), or a whole
    path over :data:`PATH_MAX` bytes less the same room.

    Raises:
        error: ``"<option> <path>: file name too long (<n> bytes; at most 230)"``, or
            ``"<option> <path>: path too long (<n> bytes; at most 4070)"``.
    """
    total = len(os.fsencode(os.fspath(path)))
    if total > PATH_MAX - 26:
        text = os.fspath(path)
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise error(f"{option} {shown}: path too long ({total} bytes; at most {PATH_MAX - 26})")
    limit = NAME_MAX - 25  # ".<name>.<12 hex>.tmp" and a ".lock" / ".logs" suffix fit
    for part in Path(path).parts:
        n = len(os.fsencode(part))
        if n > limit:
            shown = part if len(part) <= 40 else part[:37] + "..."
            raise error(f"{option} {shown}: file name too long ({n} bytes; at most {limit})")


def check_out_path(path: str | os.PathLike[str], *, overwrite: bool = False, option: str = "--out") -> Path:
    """Check that ``path`` can take a new file before any work is done (``simulate``,
    ``schedule``, ``calibrate --write-profile``).

    Args:
        path: the file to write.
        overwrite: replace an existing file (``--force``); otherwise one is refused.
        option: the CLI option named in the messages.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ConfigError: ``path`` is empty (:func:`given_path`) or a folder, its folder is
            missing or is not a folder, it exists and ``overwrite`` is false, or it is not a
            file that may be replaced (:func:`replace_target`: a device, FIFO, socket, a
            symlink out of its folder), whatever ``overwrite``.
    """
    out = given_path(option, path)
    if os.path.lexists(out) and not out.is_dir():
        replace_target(out, error=ConfigError)
    if out.is_dir():
        raise ConfigError(f"{option} {out}: is a folder; give a file name")
    folder = out.parent
    if not folder.exists():
        raise ConfigError(f"{out}: folder {folder} does not exist")
    if not folder.is_dir():
        raise ConfigError(f"{out}: {folder} is not a folder")
    if out.exists() and not overwrite:
        raise ConfigError(f"{out}: output file exists (pass --force to replace it)")
    return out


def read_json(path: str | Path) -> Any:
    """Parse a JSON file of at most :data:`~specband.core.limits.MAX_CONFIG_FILE_BYTES` (NaN and
    Infinity are rejected); the one reader of manifests, sidecars and policy files.

    Raises:
        ArtifactError: missing file, unreadable, or not valid JSON (naming line and column).
    """

    p = Path(path)
    try:
        text = read_text_bounded(p, limit=MAX_CONFIG_FILE_BYTES, kind="JSON file", error=ArtifactError)
    except FileNotFoundError:
        raise ArtifactError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise ArtifactError(f"{p}: is a folder, not a JSON file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{p}: cannot read ({exc})") from None

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        return json.loads(text, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:
        raise ArtifactError(f"{p}: not valid JSON ({exc})") from None
    except RecursionError:
        raise ArtifactError(f"{p}: not valid JSON (nested too deeply)") from None
