"""Loading scikit-learn models from an artifact folder without running code from it.

A joblib file is a pickle: unpickling runs whatever the file says. specband therefore
unpickles ``<folder>/<algo>/model.joblib`` only when

* specband wrote it: the folder's manifest (``specband.json``, key ``files``) holds the
  file's sha256 and the file's bytes match, checked before a byte is unpickled, and the
  folder is not a download (a folder inside the Hugging Face hub cache is foreign whatever
  its manifest says: anybody can write a manifest); or
* the caller trusts it explicitly (``--trust-pickle``, or ``trust_pickle=True`` in Python).

Otherwise :class:`UntrustedPickleError` names the file and the option. specband writes a
pickle-free copy beside every joblib file (``model.skops``, skops' format, loaded with a
fixed list of allowed types and no pickle) and prefers it when loading; the model card's
own ``model.joblib`` stays so that its recipes keep working.

A scikit-learn version mismatch found while unpickling is printed as one ``note:`` line
on stderr (never silenced).
"""

from __future__ import annotations

import io
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specband.errors import ArtifactError

__all__ = [
    "SKOPS_SUFFIX",
    "SKOPS_TRUSTED_TYPES",
    "TRUST_OPTION",
    "UntrustedPickleError",
    "check_pickle_trusted",
    "in_hub_cache",
    "load_sklearn_model",
    "manifest_file_sha256",
    "skops_bytes",
]

#: The CLI option that allows unpickling a file specband cannot vouch for.
TRUST_OPTION = "--trust-pickle"
#: Suffix of the pickle-free copy written beside each joblib file.
SKOPS_SUFFIX = ".skops"
#: Types, beyond skops' own defaults, that a specband model may hold (what
#: ``skops.io.get_untrusted_types`` reports for a GradientBoostingRegressor and a
#: LinearRegression with skops 0.16 and scikit-learn 1.9).
SKOPS_TRUSTED_TYPES: frozenset[str] = frozenset({"sklearn.tree._tree.Tree"})


class UntrustedPickleError(ArtifactError):
    """A pickle file that specband did not write (no matching sha256 in its folder's
    manifest) and that the user did not trust explicitly."""


def in_hub_cache(path: str | Path) -> bool:
    """True when ``path`` lies inside the Hugging Face hub cache (a downloaded folder)."""
    from huggingface_hub import constants

    resolved = Path(path).absolute()
    cache = Path(constants.HF_HUB_CACHE).absolute()
    return resolved == cache or cache in resolved.parents


def manifest_file_sha256(path: Path) -> str | None:
    """The sha256 that the manifest of ``path``'s artifact folder (``<folder>/specband.json``,
    with ``path`` = ``<folder>/<algo>/<file>``) records for the file, or ``None``."""
    from specband.fileio import read_json

    folder = path.parent.parent
    manifest = folder / "specband.json"
    if not manifest.is_file():
        return None
    try:
        files = read_json(manifest).get("files")
    except (ArtifactError, AttributeError):
        return None
    if not isinstance(files, dict):
        return None
    value = files.get(path.relative_to(folder).as_posix())
    return value if isinstance(value, str) else None


def check_pickle_trusted(path: Path, data: bytes, *, trust_pickle: bool = False) -> None:
    """Refuse to unpickle ``data`` (the bytes read from ``path``) unless specband wrote
    them or the caller trusts them. Unpickles nothing.

    Raises:
        UntrustedPickleError: no matching sha256 in a local manifest and ``trust_pickle``
            is False.
    """
    if trust_pickle:
        return
    import hashlib

    expected = None if in_hub_cache(path) else manifest_file_sha256(path)
    if expected is not None and hashlib.sha256(data).hexdigest() == expected:
        return
    why = "downloaded" if in_hub_cache(path) else "no matching sha256 in the folder's specband.json"
    raise UntrustedPickleError(
        f"{path}: not written by specband ({why}); unpickling it runs code from the file: "
        f"pass {TRUST_OPTION} if you trust its source"
    )


def _schema_ids(node: Any, found: dict[str, str]) -> None:
    """Collect skops' object ids (``__id__`` values and ``<id>.npy`` file names) in schema order."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "__id__" or (key == "file" and isinstance(value, str) and value.endswith(".npy")):
                found.setdefault(str(value).removesuffix(".npy"), str(len(found) + 1))
            else:
                _schema_ids(value, found)
    elif isinstance(node, list):
        for value in node:
            _schema_ids(value, found)


def skops_bytes(model: Any) -> bytes:
    """``model`` in skops' pickle-free format (a zip). skops names objects by their memory
    address and stamps entries with the time; both are replaced (ids numbered in schema
    order, a fixed timestamp) so that the same model gives the same bytes."""
    import json
    import re
    import zipfile

    import skops.io

    src = zipfile.ZipFile(io.BytesIO(skops.io.dumps(model)))
    schema = src.read("schema.json").decode("utf-8")
    ids: dict[str, str] = {}
    _schema_ids(json.loads(schema), ids)

    def renumber(text: str) -> str:
        return re.sub(r"\b\d+\b", lambda m: ids.get(m.group(0), m.group(0)), text)

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in sorted(src.infolist(), key=lambda i: renumber(i.filename)):
            name = renumber(info.filename)
            data = renumber(schema).encode("utf-8") if info.filename == "schema.json" else src.read(info.filename)
            fixed = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            fixed.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(fixed, data)
    return out.getvalue()


@contextmanager
def _version_notes(path: Path) -> Iterator[None]:
    """scikit-learn's version-mismatch warnings raised inside become one ``note:`` line
    each on stderr (per version pair); other warnings pass on unchanged."""
    from sklearn.exceptions import InconsistentVersionWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InconsistentVersionWarning)
        yield
    versions = {
        (w.message.original_sklearn_version, w.message.current_sklearn_version)
        for w in caught
        if isinstance(w.message, InconsistentVersionWarning)
    }
    for original, current in sorted(versions):
        print(
            f"note: {path}: written with scikit-learn {original}, loaded with {current}; its predictions may differ",
            file=sys.stderr,
        )
    for w in caught:
        if not isinstance(w.message, InconsistentVersionWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _load_skops(path: Path) -> Any:
    import skops.io

    try:
        untrusted = skops.io.get_untrusted_types(file=path)
        unknown = sorted(set(untrusted) - SKOPS_TRUSTED_TYPES)
        if unknown:
            raise ArtifactError(f"{path}: holds types specband does not load: {', '.join(unknown)}")
        with _version_notes(path):
            return skops.io.load(path, trusted=list(untrusted))
    except ArtifactError:
        raise
    except Exception as exc:
        raise ArtifactError(f"{path}: not a readable skops file ({type(exc).__name__}: {exc})") from None


def _load_joblib(path: Path, data: bytes) -> Any:
    import joblib

    with _version_notes(path):
        try:
            return joblib.load(io.BytesIO(data))
        except Exception as exc:
            raise ArtifactError(f"{path}: not a readable joblib file ({type(exc).__name__}: {exc})") from None


def load_sklearn_model(path: Path, *, trust_pickle: bool = False) -> Any:
    """The scikit-learn model of ``path`` (a ``.joblib`` file): from the skops copy beside
    it when there is one, else unpickled once :func:`check_pickle_trusted` allows it.

    Raises:
        ArtifactError: neither file exists, or a file is unreadable.
        UntrustedPickleError: see :func:`check_pickle_trusted`.
    """
    skops_path = path.with_suffix(SKOPS_SUFFIX)
    if skops_path.is_file():
        return _load_skops(skops_path)
    try:
        data = path.read_bytes()  # hashed and unpickled from the same bytes
    except FileNotFoundError:
        raise ArtifactError(f"{path}: no such file") from None
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read ({exc.strerror or exc})") from None
    check_pickle_trusted(path, data, trust_pickle=trust_pickle)
    return _load_joblib(path, data)
