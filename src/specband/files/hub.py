"""Hugging Face hub ids wherever specband takes a path.

Forms (``REV`` optional; a revision holding slashes, such as the hub's Parquet
conversion ``refs/convert/parquet``, is written with ``%2F`` or as the last part):

* ``org/name[@REV]``: a model repo (the study's ``Pradheep1647/eagle3-speculative-decoding-policy``);
* ``datasets/org/name[@REV]``: a dataset repo (``datasets/Pradheep1647/eagle3-speculative-decoding-energy-sweep``);
* ``hf://[datasets/]org/name[@REV][/path/in/repo]``, as ``huggingface_hub.HfFileSystem`` writes them.

An existing local path always wins over a hub id, and a path whose first folder exists here
(``models/mine`` beside a ``models`` folder) is a local path: a missing one is "no such
folder", not a hub cache miss. Downloads go through ``huggingface_hub`` into its cache
(``HF_HUB_CACHE``); with ``HF_HUB_OFFLINE=1``, or when the hub does not answer a probe within
:data:`HUB_PROBE_TIMEOUT_S` (once per process), the cache alone answers, and a miss is one
:class:`HubUnreachableError` line naming the id (exit 5: the id may be right, the download
could not happen); a hub id that names no repo, revision or file is a :class:`HubError`
(bad input, exit 2). A look-up that takes longer than
:data:`HUB_PROGRESS_AFTER_S` prints one progress line on stderr, and one that has not finished
within :data:`HUB_LOOKUP_DEADLINE_S` (``SPECBAND_HUB_DEADLINE_S``) is a
:class:`HubUnreachableError` too: huggingface_hub bounds its file downloads
(``HF_HUB_ETAG_TIMEOUT``, ``HF_HUB_DOWNLOAD_TIMEOUT``) but sends its repo look-up
(``repo_info``) with no timeout, so a hub that answers the HEAD probe and never a GET held
``recommend --models org/name`` forever (hostile trial E05). A downloaded folder is
foreign: its pickles load only when trusted (:mod:`specband.files.safeload`).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from specband.core.errors import ConfigError, DataError, DownloadError, SpecbandError, one_line
from specband.files.fileio import write_text_atomic

__all__ = [
    "HUB_DEADLINE_ENV",
    "HUB_LOOKUP_DEADLINE_S",
    "HUB_PROBE_TIMEOUT_S",
    "HUB_PROGRESS_AFTER_S",
    "HubError",
    "HubRef",
    "HubUnreachableError",
    "check_local_path",
    "check_readable_file",
    "download_file",
    "download_repo",
    "hub_reachable",
    "parse_hub_ref",
    "resolve_config_file",
    "resolve_data_file",
    "resolve_folder",
]

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_SHORT = re.compile(rf"^(?P<datasets>datasets/)?(?P<repo>{_NAME}/{_NAME})(?:@(?P<rev>[^/]+(?:/convert/[^/]+)?))?$")
_HF = re.compile(rf"^hf:/+(?P<datasets>datasets/)?(?P<repo>{_NAME}/{_NAME})(?:@(?P<rev>[^/]+))?(?:/(?P<path>.*))?$")
_CONVERT = re.compile(r"^(?P<rev>refs/convert/[^/]+)(?:/(?P<path>.*))?$")


#: Seconds the hub has to answer a HEAD request before it counts as unreachable (issue 18:
#: offline detected within 2 s, instead of huggingface_hub's retries of about 23 s a look-up).
HUB_PROBE_TIMEOUT_S = 2.0
#: A look-up running longer than this prints a progress line on stderr, seconds.
HUB_PROGRESS_AFTER_S = 1.0
#: Longest one hub look-up (a repo snapshot or one file, all its requests) may take, seconds:
#: 120, or ``SPECBAND_HUB_DEADLINE_S``. Basis: what specband fetches from the hub is small (a
#: ``config.json`` of KB, a policy folder of a few MB, a sweep dataset of tens of MB), under a
#: minute at 1 MB/s; a slower link sets the variable. Past it the look-up is abandoned (its
#: thread finishes or fails on its own; huggingface_hub writes the cache through temporary
#: files, so nothing half-written is kept) and the endpoint counts as unreachable for the process.
HUB_LOOKUP_DEADLINE_S = 120.0
HUB_DEADLINE_ENV = "SPECBAND_HUB_DEADLINE_S"
_reachable: dict[str, bool] = {}
#: The error of an endpoint's probe that failed before the timeout (connection refused, no
#: network), for the error line; a probe that ran out of time has none.
_probe_errors: dict[str, str] = {}


def hub_reachable(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Whether the hub endpoint (``HF_ENDPOINT``) answers an HTTP HEAD request within
    ``timeout_s`` (name resolution included); remembered per endpoint for the process.
    False at once with ``HF_HUB_OFFLINE=1``."""
    import threading

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    endpoint = constants.ENDPOINT
    if endpoint in _reachable:
        return _reachable[endpoint]
    answer: list[bool] = []
    failure: list[str] = []  # the probe's error when it failed before the timeout

    def probe() -> None:
        try:
            import httpx

            httpx.head(endpoint, timeout=timeout_s, follow_redirects=False)
            answer.append(True)
        except Exception as exc:  # refused, no route, a name that does not resolve, a timeout
            if not (isinstance(exc, TimeoutError) or type(exc).__name__.endswith("Timeout")):
                failure.append(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
            answer.append(False)

    thread = threading.Thread(target=probe, name="specband-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    _reachable[endpoint] = bool(answer and answer[0])
    if answer and not answer[0] and failure:
        _probe_errors[endpoint] = failure[0]
    return _reachable[endpoint]


@contextmanager
def _progress(ref: HubRef) -> Iterator[None]:
    """One stderr line when the look-up of ``ref`` is still running after
    :data:`HUB_PROGRESS_AFTER_S`."""
    import sys
    import threading

    timer = threading.Timer(
        HUB_PROGRESS_AFTER_S,
        lambda: print(one_line(f"note: looking up {ref} on the Hugging Face hub ..."), file=sys.stderr, flush=True),
    )
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _local_only() -> bool:
    """Answer from the cache alone: offline by setting or by the probe."""
    return not hub_reachable()


def _deadline_s() -> float:
    """:data:`HUB_LOOKUP_DEADLINE_S`, or ``SPECBAND_HUB_DEADLINE_S`` when set (ConfigError: not a
    positive number)."""
    raw = os.environ.get(HUB_DEADLINE_ENV)
    if raw is None or not raw.strip():
        return HUB_LOOKUP_DEADLINE_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1e7:  # NaN fails too
        raise ConfigError(f"{HUB_DEADLINE_ENV}={raw[:40]!r}: must be a number of seconds in (0, 1e7]")
    return value


def _within_deadline(ref: HubRef, call: Callable[[], str]) -> str:
    """``call()`` (a huggingface_hub look-up) in a daemon thread, waited for at most
    :func:`_deadline_s` seconds; its exception re-raised here.

    Raises:
        HubUnreachableError: it did not finish in time (the endpoint then counts as
            unreachable for the rest of the process).
    """
    import threading

    from huggingface_hub import constants

    deadline = _deadline_s()
    result: list[str] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="specband-hub-lookup", daemon=True)
    thread.start()
    thread.join(deadline)
    if thread.is_alive():
        endpoint = constants.ENDPOINT
        _reachable[endpoint] = False
        raise HubUnreachableError(
            f"{ref}: the hub ({endpoint}) did not finish the look-up within {deadline:g} s "
            f"({HUB_DEADLINE_ENV} sets the bound); nothing was taken from it"
        )
    if failure:
        raise failure[0]
    return result[0]


def check_local_path(text: str | Path, kind: str = "folder") -> None:
    """Refuse a value shaped like a hub id (``org/name``) whose first part is a folder here
    (``models/mine`` beside a ``models`` folder): a mistyped local path, which would otherwise
    be looked up on the hub and reported as a cache miss.

    Raises:
        ConfigError: ``"<path>: no such <kind>"``.
    """
    raw = str(text)
    if raw.startswith("hf:") or Path(raw).exists() or parse_hub_ref(raw) is None:
        return
    parts = Path(raw).parts
    if len(parts) > 1 and Path(parts[0]).is_dir():
        raise ConfigError(
            f"{raw}: no such {kind} (not looked up on the hub as org/name: ./{parts[0]} is a folder here)"
        )


class HubError(SpecbandError):
    """A hub id that cannot be resolved: no such repo, revision or file (bad input, exit 2);
    its subclass :class:`HubUnreachableError` is a download that could not happen."""


class HubUnreachableError(HubError, DownloadError):
    """A hub id that is not in the local cache while the hub cannot be reached (it did not
    answer the probe, refused the connection, failed the download) or ``HF_HUB_OFFLINE=1``:
    a failed download (:class:`~specband.core.errors.DownloadError`, exit 5), not a bad id."""


@dataclass(frozen=True)
class HubRef:
    """A parsed hub id.

    Attributes:
        repo_id: ``org/name``.
        repo_type: ``"model"`` or ``"dataset"``.
        revision: branch, tag, commit or ``refs/convert/parquet``; ``None`` for the default.
        path: a file or folder inside the repo, or ``None``.
    """

    repo_id: str
    repo_type: str = "model"
    revision: str | None = None
    path: str | None = None

    def __str__(self) -> str:
        kind = "datasets/" if self.repo_type == "dataset" else ""
        rev = f"@{self.revision}" if self.revision else ""
        tail = f"/{self.path}" if self.path else ""
        return f"{kind}{self.repo_id}{rev}{tail}"


def parse_hub_ref(text: str | Path) -> HubRef | None:
    """The hub id ``text`` names, or ``None`` when it is a local path (one that exists, or
    one that does not look like a hub id). ``hf:/`` with one slash (what ``pathlib``
    makes of ``hf://``) is accepted too."""
    raw = str(text)
    hf = _HF.match(raw)
    if hf is None and Path(raw).exists():
        return None
    if hf is not None:
        rev, path = hf["rev"], hf["path"]
        if rev == "refs" and path:  # hf://datasets/org/name@refs/convert/parquet/...
            conv = _CONVERT.match(f"refs/{path}")
            if conv is not None:
                rev, path = conv["rev"], conv["path"]
        return HubRef(hf["repo"], "dataset" if hf["datasets"] else "model", unquote(rev) if rev else None, path or None)
    short = _SHORT.match(raw)
    if short is None:
        return None
    rev = short["rev"]
    return HubRef(short["repo"], "dataset" if short["datasets"] else "model", unquote(rev) if rev else None)


def _hub_error(ref: HubRef, exc: Exception) -> HubError:
    from huggingface_hub import constants

    name = type(exc).__name__
    if "EntryNotFound" in name and "Local" not in name:
        return HubError(f"{ref}: no such file in the hub repo")
    if "RepositoryNotFound" in name or "RevisionNotFound" in name:
        return HubError(f"{ref}: no such hub repo or revision")
    where = "HF_HUB_OFFLINE=1" if constants.HF_HUB_OFFLINE else _unreachable_why(constants.ENDPOINT)
    return HubUnreachableError(f"{ref}: not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and {where}")


def _unreachable_why(endpoint: str) -> str:
    """What the probe of ``endpoint`` found: its error when it failed at once (connection
    refused, no network, a name that does not resolve), else that it did not answer within
    :data:`HUB_PROBE_TIMEOUT_S`."""
    if _reachable.get(endpoint) is not False:
        return "the hub is unreachable"
    error = _probe_errors.get(endpoint)
    if error is not None:
        return f"the hub ({endpoint}) could not be reached ({error})"
    return f"the hub ({endpoint}) did not answer within {HUB_PROBE_TIMEOUT_S:g} s"


@contextmanager
def _quiet_hub() -> Iterator[None]:
    """huggingface_hub's own retry warnings off: a failure is one specband error line."""
    import logging  # here: the cold recommend path does not need it

    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def download_repo(ref: HubRef) -> Path:
    """The local snapshot folder of ``ref``'s repo (downloaded into the hub cache, or read
    from it offline).

    Raises:
        HubError: no such repo or revision; HubUnreachableError: a cache miss offline or
            with the hub unreachable.
    """
    from huggingface_hub import snapshot_download

    try:
        with _quiet_hub(), _progress(ref):
            local = _local_only()
            return Path(
                _within_deadline(
                    ref,
                    lambda: snapshot_download(
                        ref.repo_id, repo_type=ref.repo_type, revision=ref.revision, local_files_only=local
                    ),
                )
            )
    except SpecbandError:  # ours: the deadline, a bad SPECBAND_HUB_DEADLINE_S
        raise
    except Exception as exc:
        raise _hub_error(ref, exc) from None


def download_file(ref: HubRef, filename: str) -> Path:
    """One file of ``ref``'s repo, from the hub cache (downloaded first when online).

    Raises:
        HubError: no such repo, revision or file; HubUnreachableError: a cache miss
            offline or with the hub unreachable.
    """
    from huggingface_hub import hf_hub_download

    try:
        with _quiet_hub(), _progress(ref):
            local = _local_only()
            return Path(
                _within_deadline(
                    ref,
                    lambda: hf_hub_download(
                        ref.repo_id, filename, repo_type=ref.repo_type, revision=ref.revision, local_files_only=local
                    ),
                )
            )
    except SpecbandError:  # ours: the deadline, a bad SPECBAND_HUB_DEADLINE_S
        raise
    except Exception as exc:
        raise _hub_error(HubRef(ref.repo_id, ref.repo_type, ref.revision, filename), exc) from None


def resolve_folder(text: str | Path) -> Path:
    """A local folder for a ``--models`` value: the path itself, or the hub repo's snapshot
    (with ``/path`` inside it, when given).

    Raises:
        HubError: see :func:`download_repo`.
    """
    check_local_path(text)
    ref = parse_hub_ref(text)
    if ref is None:
        return Path(text)
    folder = download_repo(ref)
    return folder / ref.path if ref.path else folder


def resolve_config_file(text: str | Path) -> Path:
    """A local ``config.json`` for a model given as a file, a folder (its ``config.json``)
    or a hub id (only ``config.json`` is downloaded, not the weights).

    Raises:
        HubError: see :func:`download_file`.
    """
    check_local_path(text, "file or folder")
    ref = parse_hub_ref(text)
    if ref is None:
        path = Path(text)
        return path / "config.json" if path.is_dir() else path
    return download_file(ref, ref.path or "config.json")


def resolve_data_file(text: str | Path) -> Path:
    """A local sweep JSONL for a data argument: a file, a folder holding one ``.jsonl``
    (or Parquet files), or a hub dataset id. Parquet (the hub's conversion of a dataset,
    revision ``refs/convert/parquet``) is converted to JSONL once, into
    ``<hub cache>/specband-parquet/<sha256>.jsonl``.

    The file is checked here, before any command decides whether it uses it (``--data``
    without ``--models`` is still a file the user named, hostile trial N28).

    Raises:
        HubError: see :func:`download_repo`.
        ConfigError: a folder with no or several ``.jsonl`` files and no Parquet.
        DataError: ``"<path>: no such file"``, not a regular file (a device, FIFO or
            socket) or not readable by this user (:func:`check_readable_file`).
    """
    check_local_path(text, "file or folder")
    ref = parse_hub_ref(text)
    path = Path(text) if ref is None else download_repo(ref) / (ref.path or "")
    if path.is_dir():
        path = _data_file_in(path, str(text))
    if path.suffix == ".parquet" or path.is_dir():
        return _parquet_to_jsonl(sorted(path.rglob("*.parquet")) if path.is_dir() else [path])
    check_readable_file(path)
    return path


def check_readable_file(path: Path) -> None:
    """Refuse a data file that cannot be read, without opening it (a FIFO would block).

    Raises:
        DataError: ``"<path>: no such file"``, ``"<path>: not a regular file (a device, FIFO
            or socket); give a JSONL file"`` or ``"<path>: cannot read: Permission denied"``.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DataError("no such file", path=path) from None
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror}", path=path) from None
    if not stat.S_ISREG(mode):
        raise DataError("not a regular file (a device, FIFO or socket); give a JSONL file", path=path)
    if not os.access(path, os.R_OK):
        raise DataError("cannot read: Permission denied", path=path)


def _data_file_in(folder: Path, label: str) -> Path:
    jsonl = sorted(p for p in folder.rglob("*.jsonl") if ".cache" not in p.parts)
    if len(jsonl) == 1:
        return jsonl[0]
    if len(jsonl) > 1:
        names = ", ".join(str(p.relative_to(folder)) for p in jsonl)
        raise ConfigError(f"{label}: several JSONL files ({names}); name one, e.g. hf://datasets/org/name/FILE")
    if any(folder.rglob("*.parquet")):
        return folder
    raise ConfigError(f"{label}: no .jsonl or .parquet file in {folder}")


def _parquet_to_jsonl(files: list[Path]) -> Path:
    """Rows of the Parquet ``files`` (in order) as one JSONL file, written atomically
    once per content (keyed by the files' sha256)."""
    import hashlib
    import json

    from huggingface_hub import constants

    digest = hashlib.sha256()
    for f in files:
        digest.update(f.read_bytes())
    out = Path(constants.HF_HUB_CACHE) / "specband-parquet" / f"{digest.hexdigest()}.jsonl"
    if out.is_file():
        return out
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("reading Parquet needs pyarrow: pip install 'specband[parquet]'") from None
    lines: list[str] = []
    for f in files:
        try:
            rows = pq.read_table(f).to_pylist()
        except Exception as exc:
            raise ConfigError(f"{f}: not a readable Parquet file ({exc})") from None
        lines.extend(json.dumps(row, default=str) for row in rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, "".join(line + "\n" for line in lines))
    return out
