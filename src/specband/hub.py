"""Hugging Face hub ids wherever specband takes a path.

Forms (``REV`` optional; a revision holding slashes, such as the hub's Parquet
conversion ``refs/convert/parquet``, is written with ``%2F`` or as the last part):

* ``org/name[@REV]``: a model repo (the study's ``Pradheep1647/eagle3-speculative-decoding-policy``);
* ``datasets/org/name[@REV]``: a dataset repo (``datasets/Pradheep1647/eagle3-speculative-decoding-energy-sweep``);
* ``hf://[datasets/]org/name[@REV][/path/in/repo]``, as ``huggingface_hub.HfFileSystem`` writes them.

An existing local path always wins over a hub id. Downloads go through
``huggingface_hub`` into its cache (``HF_HUB_CACHE``); with ``HF_HUB_OFFLINE=1``, or when
the hub is unreachable, the cache alone answers, and a miss is one :class:`HubError` line
naming the id. A downloaded folder is foreign: its pickles load only when trusted
(:mod:`specband.safeload`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from specband.errors import ConfigError

__all__ = [
    "HubError",
    "HubRef",
    "download_file",
    "download_repo",
    "parse_hub_ref",
    "resolve_config_file",
    "resolve_data_file",
    "resolve_folder",
]

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_SHORT = re.compile(rf"^(?P<datasets>datasets/)?(?P<repo>{_NAME}/{_NAME})(?:@(?P<rev>[^/]+(?:/convert/[^/]+)?))?$")
_HF = re.compile(rf"^hf:/+(?P<datasets>datasets/)?(?P<repo>{_NAME}/{_NAME})(?:@(?P<rev>[^/]+))?(?:/(?P<path>.*))?$")
_CONVERT = re.compile(r"^(?P<rev>refs/convert/[^/]+)(?:/(?P<path>.*))?$")


class HubError(ConfigError):
    """A hub id that cannot be resolved (not in the cache while offline, no such repo or file)."""


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
    where = "HF_HUB_OFFLINE=1" if constants.HF_HUB_OFFLINE else "the hub is unreachable"
    return HubError(f"{ref}: not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and {where}")


@contextmanager
def _quiet_hub() -> Iterator[None]:
    """huggingface_hub's own retry warnings off: a failure is one specband error line."""
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
        HubError: a cache miss offline, no such repo or revision.
    """
    from huggingface_hub import snapshot_download

    try:
        with _quiet_hub():
            return Path(snapshot_download(ref.repo_id, repo_type=ref.repo_type, revision=ref.revision))
    except Exception as exc:
        raise _hub_error(ref, exc) from None


def download_file(ref: HubRef, filename: str) -> Path:
    """One file of ``ref``'s repo, from the hub cache (downloaded first when online).

    Raises:
        HubError: a cache miss offline, no such repo, revision or file.
    """
    from huggingface_hub import hf_hub_download

    try:
        with _quiet_hub():
            return Path(hf_hub_download(ref.repo_id, filename, repo_type=ref.repo_type, revision=ref.revision))
    except Exception as exc:
        raise _hub_error(HubRef(ref.repo_id, ref.repo_type, ref.revision, filename), exc) from None


def resolve_folder(text: str | Path) -> Path:
    """A local folder for a ``--models`` value: the path itself, or the hub repo's snapshot
    (with ``/path`` inside it, when given).

    Raises:
        HubError: see :func:`download_repo`.
    """
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

    Raises:
        HubError: see :func:`download_repo`.
        ConfigError: a folder with no or several ``.jsonl`` files and no Parquet.
    """
    ref = parse_hub_ref(text)
    path = Path(text) if ref is None else download_repo(ref) / (ref.path or "")
    if path.is_dir():
        path = _data_file_in(path, str(text))
    if path.suffix == ".parquet" or path.is_dir():
        return _parquet_to_jsonl(sorted(path.rglob("*.parquet")) if path.is_dir() else [path])
    return path


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

    from specband.fileio import write_text_atomic

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
