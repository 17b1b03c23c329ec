"""Loading model files from an artifact folder without running code from it.

A joblib file is a pickle: unpickling runs whatever the file says. A folder's own
manifest cannot vouch for it (whoever wrote the file can write its sha256 too), so
specband unpickles ``<folder>/<algo>/model.joblib`` only when the caller trusts it
explicitly (``--trust-pickle``, or ``trust_pickle=True`` in Python); otherwise
:class:`UntrustedPickleError` names the file and the option. specband's own folders need no
pickle at all: ``specband train`` writes a pickle-free copy beside every joblib file
(``model.skops``, skops' format, loaded with a fixed list of trusted types) and beside every
``.pth`` (``.safetensors``), and loading prefers them.

Untrusted input is bounded before it is allocated: :func:`check_zip_members` bounds a
skops zip's members, :func:`check_npz_arrays` the arrays declared in an ``.npz``'s
``.npy`` headers and :func:`check_safetensors_header` the tensors a safetensors header
declares (:data:`MAX_MODEL_FILE_BYTES`, :data:`MAX_MODEL_ARRAY_BYTES`).

:func:`verify_files` checks the files of an algorithm against the sha256 the folder's
manifest records for them (a file modified after ``specband train`` is refused, or loaded
with a warning under ``--allow-modified``). Every path is resolved (symlinks, ``..``,
``//``) with :func:`resolved` before any check.

A model read from a file is checked before scikit-learn runs it: scikit-learn's compiled
tree walk trusts a tree's child and feature indices (an out-of-range index reads outside
its arrays and crashes the process; a node pointing back to itself loops forever without
releasing the GIL, so no signal ends it). :func:`check_sklearn_structure` validates every
tree of a ``GradientBoostingRegressor`` and the arrays of a ``LinearRegression`` first.

A scikit-learn version mismatch found while loading is printed as one ``note:`` line on
stderr (never silenced).
"""

from __future__ import annotations

import io
import json
import os
import struct
import sys
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specband.core.errors import ArtifactError
from specband.files.fileio import read_json

__all__ = [
    "ALLOW_MODIFIED_OPTION",
    "MAX_MODEL_ARRAY_BYTES",
    "MAX_MODEL_FILE_BYTES",
    "SKOPS_SUFFIX",
    "SKOPS_TRUSTED_TYPES",
    "TRUST_OPTION",
    "UntrustedPickleError",
    "check_file_size",
    "check_files_inside",
    "check_npz_arrays",
    "check_pickle_trusted",
    "check_safetensors_header",
    "check_sklearn_structure",
    "check_tree_structure",
    "check_zip_members",
    "in_hub_cache",
    "load_sklearn_model",
    "manifest_file_sha256",
    "resolved",
    "skops_bytes",
    "verify_files",
]

#: The CLI option that allows unpickling a file specband cannot vouch for.
TRUST_OPTION = "--trust-pickle"
#: The CLI option that loads files whose sha256 no longer matches the manifest (with a warning).
ALLOW_MODIFIED_OPTION = "--allow-modified"
#: Largest policy file (a skops zip, ``.npz``, ``.safetensors``, ``.pth``) read, bytes.
#: Basis: the model card's largest file (a 100-tree GBT) is under 1 MiB; 64 MiB leaves room
#: for any model of the 4-feature, 19-action contract.
MAX_MODEL_FILE_BYTES = 64 << 20
#: Largest array or tensor (and total of them) a policy file may declare, bytes; checked
#: from the headers before anything is allocated. Basis: as :data:`MAX_MODEL_FILE_BYTES`.
MAX_MODEL_ARRAY_BYTES = 64 << 20
#: Largest safetensors JSON header, bytes (the format's own readers cap it at 100 MB; a
#: specband file's header is under 4 KiB).
MAX_SAFETENSORS_HEADER_BYTES = 1 << 20
#: Suffixes of pickle files (never loaded without ``trust_pickle``; not hash-checked).
PICKLE_SUFFIXES: frozenset[str] = frozenset({".joblib", ".pkl", ".pickle"})
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

    target = resolved(path)
    cache = resolved(constants.HF_HUB_CACHE)
    return target == cache or cache in target.parents


#: At most this many entries of an algorithm's folder are checked by :func:`check_files_inside`
#: (a specband algorithm folder holds under ten; bounded work on an untrusted folder).
MAX_CHECKED_ENTRIES = 256


def check_files_inside(folder: str | Path, names: Iterable[str]) -> None:
    """Refuse a file of an artifact folder whose real path (symlinks resolved) leaves the
    folder: ``folder/<name>`` itself and, for a name that is a folder, its entries (the
    first :data:`MAX_CHECKED_ENTRIES`). A folder in the Hugging Face hub cache may point
    into its repo's ``blobs/`` (that is how the cache stores files). Missing names are left
    to the loaders.

    Raises:
        ArtifactError: ``"<file>: a link to <real path>, outside the artifact folder
            <folder>; refused (copy the file into the folder)"``.
    """
    root = resolved(folder)
    allowed = root
    for name in names:
        path = Path(folder) / name
        paths = [path]
        if path.is_dir() and not path.is_symlink():
            with os.scandir(path) as entries:
                paths += [Path(e.path) for _, e in zip(range(MAX_CHECKED_ENTRIES), entries, strict=False)]
        for p in paths:
            if not os.path.lexists(p):
                continue
            real = resolved(p)
            if real == allowed or allowed in real.parents:
                continue
            if allowed is root and in_hub_cache(root):  # snapshots/<commit>/... -> ../../blobs/<sha>
                from huggingface_hub import constants

                cache = resolved(constants.HF_HUB_CACHE)
                parts = root.relative_to(cache).parts
                allowed = cache / parts[0] if parts else root
                if allowed in real.parents:
                    continue
            raise ArtifactError(
                f"{p}: a link to {real}, outside the artifact folder {folder}; refused (copy the file into the folder)"
            )


def resolved(path: str | os.PathLike[str]) -> Path:
    """``path`` with every symlink, ``..`` and repeated ``/`` resolved (``os.path.realpath``),
    the form every check of this module compares."""
    return Path(os.path.realpath(os.fspath(path)))


def manifest_file_sha256(path: Path) -> str | None:
    """The sha256 that the manifest of ``path``'s artifact folder (``<folder>/specband.json``,
    with ``path`` = ``<folder>/<algo>/<file>``) records for the file, or ``None``."""

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
    """Refuse to unpickle ``data`` (the bytes read from ``path``) unless the caller trusts
    them explicitly; a sha256 in the folder's own manifest is no proof (whoever wrote the
    file could write it too). Unpickles nothing.

    Raises:
        UntrustedPickleError: ``trust_pickle`` is False.
    """
    del data
    if trust_pickle:
        return
    why = "downloaded" if in_hub_cache(path) else "a pickle, which no manifest can vouch for"
    raise UntrustedPickleError(
        f"{path}: not loaded ({why}); unpickling it runs code from the file: "
        f"pass {TRUST_OPTION} if you trust its source"
    )


def verify_files(folder: Path, files: dict[str, str], prefix: str, *, allow_modified: bool = False) -> None:
    """Check every non-pickle file under ``folder/prefix`` that the manifest's ``files``
    (path relative to ``folder`` -> sha256) records against its sha256; a missing one is
    left to the loader, a pickle to :func:`check_pickle_trusted`.

    Raises:
        ArtifactError: ``"<file>: modified since specband wrote it (sha256 differs from
            specband.json); pass --allow-modified to load it anyway"``; with
            ``allow_modified`` a ``warning:`` line is printed on stderr instead.
    """
    import hashlib

    for rel, expected in sorted(files.items()):
        if not rel.startswith(prefix.rstrip("/") + "/"):
            continue
        path = folder / rel
        if ".." in rel.split("/") or path.suffix in PICKLE_SUFFIXES or not path.is_file():
            # a pickle is refused without --trust-pickle whatever its sha256 (check_pickle_trusted)
            continue
        h = hashlib.sha256()
        try:
            with open(path, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
        except OSError as exc:
            raise ArtifactError(f"{path}: cannot read ({exc.strerror or exc})") from None
        if h.hexdigest() == expected:
            continue
        if not allow_modified:
            raise ArtifactError(
                f"{path}: modified since specband wrote it (sha256 differs from {folder / 'specband.json'}); "
                f"pass {ALLOW_MODIFIED_OPTION} to load it anyway"
            )
        print(
            f"warning: {path}: modified since specband wrote it; loaded under {ALLOW_MODIFIED_OPTION}", file=sys.stderr
        )


def _check_size(path: Path, nbytes: int, what: str) -> None:
    if nbytes > MAX_MODEL_ARRAY_BYTES:
        raise ArtifactError(
            f"{path}: declares {what} of {nbytes} bytes, over the {MAX_MODEL_ARRAY_BYTES >> 20} MiB "
            "a policy file may hold; not loaded"
        )


def check_file_size(path: Path) -> None:
    """Refuse a policy file over :data:`MAX_MODEL_FILE_BYTES` (raises ArtifactError)."""
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if size > MAX_MODEL_FILE_BYTES:
        raise ArtifactError(
            f"{path}: too large ({size} bytes; a policy file may have at most {MAX_MODEL_FILE_BYTES >> 20} MiB)"
        )


def check_zip_members(path: Path) -> None:
    """Bound a zip (skops file, ``.npz``) before it is read: the file size, the number of
    members (at most 10000) and their declared uncompressed sizes (each and in total at
    most :data:`MAX_MODEL_ARRAY_BYTES`); every ``.npy`` member's header is checked with
    :func:`check_npz_arrays`.

    Raises:
        ArtifactError: over a bound, or not a zip file.
    """
    import zipfile

    check_file_size(path)
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            if len(infos) > 10_000:
                raise ArtifactError(f"{path}: holds {len(infos)} members, over the 10000 a policy file may hold")
            total = 0
            for info in infos:
                _check_size(path, info.file_size, f"member {info.filename!r}")
                total += info.file_size
            _check_size(path, total, "members")
    except ArtifactError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ArtifactError(f"{path}: not a readable zip file ({exc})") from None
    check_npz_arrays(path)


def check_npz_arrays(path: Path) -> None:
    """Bound the arrays an ``.npz`` (or any zip of ``.npy`` members) declares: each
    ``.npy`` header is read (at most its first 64 KiB) and ``prod(shape) * itemsize``
    checked against :data:`MAX_MODEL_ARRAY_BYTES`, each and in total, before any array
    is allocated.

    Raises:
        ArtifactError: a declared size over the bound, or an unreadable header.
    """
    import zipfile

    import numpy as np
    from numpy.lib import format as npy_format

    check_file_size(path)
    total = 0
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                with zf.open(info) as fh:
                    head = io.BytesIO(fh.read(1 << 16))
                try:
                    version = npy_format.read_magic(head)
                    reader = npy_format.read_array_header_1_0 if version == (1, 0) else npy_format.read_array_header_2_0
                    shape, _, dtype = reader(head)
                except Exception as exc:
                    raise ArtifactError(
                        f"{path}: member {info.filename!r}: not a readable .npy header ({exc})"
                    ) from None
                count = 1
                for dim in shape:
                    count *= int(dim)
                nbytes = count * max(np.dtype(dtype).itemsize, 1)
                _check_size(path, nbytes, f"array {info.filename.removesuffix('.npy')!r} {tuple(shape)}")
                total += nbytes
                _check_size(path, total, "arrays")
    except ArtifactError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ArtifactError(f"{path}: not a readable .npz file ({exc})") from None


_ST_DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip


def check_safetensors_header(path: Path) -> dict[str, Any]:
    """Read and bound a safetensors file's header before any tensor is allocated: the
    header length (at most 1 MiB), a JSON object of tensors with known dtypes, shapes of
    non-negative integers whose byte size matches their ``data_offsets``, each tensor and
    their total at most :data:`MAX_MODEL_ARRAY_BYTES`, and no key that is both a tensor and
    a folder of others (``x`` and ``x/y``: specband nests keys by ``/``).

    Returns:
        the header's tensors (name -> entry), without ``__metadata__``.

    Raises:
        ArtifactError: any of the above.
    """
    check_file_size(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise ArtifactError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
            (length,) = struct.unpack("<Q", raw)
            if length > MAX_SAFETENSORS_HEADER_BYTES:
                raise ArtifactError(
                    f"{path}: declares a {length}-byte header, "
                    f"over the {MAX_SAFETENSORS_HEADER_BYTES} a policy file may have"
                )
            text = fh.read(length)
            size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ArtifactError(f"{path}: not a safetensors file (header is not JSON: {type(exc).__name__})") from None
    if not isinstance(header, dict):
        raise ArtifactError(f"{path}: not a safetensors file (header is not a JSON object)")
    header.pop("__metadata__", None)
    total = 0
    data_bytes = size - 8 - length
    for name, entry in header.items():
        ok = (
            isinstance(entry, dict)
            and entry.get("dtype") in _ST_DTYPE_BYTES
            and isinstance(entry.get("shape"), list)
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in entry["shape"])
            and isinstance(entry.get("data_offsets"), list)
            and len(entry["data_offsets"]) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in entry["data_offsets"])
        )
        if not ok:
            raise ArtifactError(f"{path}: tensor {name!r}: not a valid safetensors entry (dtype, shape, data_offsets)")
        count = 1
        for dim in entry["shape"]:
            count *= dim
        nbytes = count * _ST_DTYPE_BYTES[entry["dtype"]]
        _check_size(path, nbytes, f"tensor {name!r} {tuple(entry['shape'])}")
        start, end = entry["data_offsets"]
        if end - start != nbytes or end > data_bytes:
            raise ArtifactError(f"{path}: tensor {name!r}: data_offsets do not match its shape or the file's size")
        total += nbytes
        _check_size(path, total, "tensors")
    names = set(header)
    for name in names:
        parts = name.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in names:
                raise ArtifactError(
                    f"{path}: tensor {'/'.join(parts[:i])!r} is also a folder of {name!r}; not a specband file"
                )
        if any(not p for p in parts):
            raise ArtifactError(f"{path}: tensor name {name!r} has an empty part")
    return header


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


#: scikit-learn's marker of a leaf in ``children_left``/``children_right`` (``sklearn.tree._tree.TREE_LEAF``).
TREE_LEAF = -1


def _bad(path: Path, what: str) -> ArtifactError:
    return ArtifactError(f"{path}: {what}; not a model specband wrote (refused before scikit-learn reads it)")


def check_tree_structure(tree: Any, path: Path, where: str, n_features: int) -> None:
    """Check one fitted ``sklearn.tree._tree.Tree`` before anything walks it.

    A regression tree specband can predict with has ``node_count == capacity >= 1``, one
    output and one "class" (a value stride of 1, which ``GradientBoostingRegressor``'s
    compiled prediction assumes), and ``n_features`` inputs. Node ``i`` is a leaf (both
    children ``-1``) or a split whose children are both in ``(i, node_count)``: scikit-learn's
    builders number children after their parent, so this also rules out cycles (a walk
    then ends within ``node_count`` steps). A split's feature is in ``[0, n_features)`` and
    its threshold finite; values are ``(node_count, 1, 1)`` finite floats.

    Args:
        tree: the ``tree_`` attribute of a fitted decision tree.
        path: the file it came from (for the message).
        where: which tree, e.g. ``"estimators_[3, 0]"``.
        n_features: the model's input width.

    Raises:
        ArtifactError: any of the above does not hold (the first violation is named).
    """
    import numpy as np
    from sklearn.tree._tree import Tree

    if type(tree) is not Tree:
        raise _bad(path, f"{where}.tree_ is a {type(tree).__name__}, not a scikit-learn Tree")
    n = int(tree.node_count)
    # node_count is stored apart from the node array; reading the arrays with a count
    # larger than what was allocated reads past it, so this comes first.
    if n < 1 or n != int(tree.capacity):
        raise _bad(path, f"{where} declares {n} nodes for {int(tree.capacity)} stored")
    if int(tree.n_features) != n_features or int(tree.n_outputs) != 1 or int(tree.max_n_classes) != 1:
        raise _bad(
            path,
            f"{where} has {int(tree.n_features)} features, {int(tree.n_outputs)} outputs and "
            f"{int(tree.max_n_classes)} classes (a regression tree over {n_features} features has 1 and 1)",
        )
    left = np.asarray(tree.children_left, dtype=np.int64)
    right = np.asarray(tree.children_right, dtype=np.int64)
    feature = np.asarray(tree.feature, dtype=np.int64)
    threshold = np.asarray(tree.threshold, dtype=np.float64)
    value = np.asarray(tree.value)
    if not (left.shape == right.shape == feature.shape == threshold.shape == (n,)):
        raise _bad(path, f"{where}: node arrays are not {n} long")
    index = np.arange(n)
    leaf = left == TREE_LEAF
    split = ~leaf
    if np.any(right[leaf] != TREE_LEAF):
        i = int(index[leaf][right[leaf] != TREE_LEAF][0])
        raise _bad(path, f"{where} node {i}: a leaf (left child -1) with right child {int(right[i])}")
    for name, child in (("left", left), ("right", right)):
        wrong = split & ((child <= index) | (child >= n))
        if np.any(wrong):
            i = int(index[wrong][0])
            raise _bad(
                path,
                f"{where} node {i}: {name} child {int(child[i])} is not in ({i}, {n}) "
                "(out of range, or pointing back up the tree: a cycle)",
            )
    wrong = split & (left == right)
    if np.any(wrong):
        raise _bad(path, f"{where} node {int(index[wrong][0])}: both children are the same node")
    wrong = split & ((feature < 0) | (feature >= n_features))
    if np.any(wrong):
        i = int(index[wrong][0])
        raise _bad(path, f"{where} node {i}: feature {int(feature[i])} is not in [0, {n_features})")
    wrong = split & ~np.isfinite(threshold)
    if np.any(wrong):
        raise _bad(path, f"{where} node {int(index[wrong][0])}: its threshold is not a finite number")
    if value.shape != (n, 1, 1) or value.dtype != np.float64:
        raise _bad(path, f"{where}: values have shape {value.shape} ({value.dtype}), not ({n}, 1, 1) float64")
    if not np.isfinite(value).all():
        raise _bad(path, f"{where}: holds a value that is not a finite number")


def _check_gbr(model: Any, path: Path, n_features: int) -> None:
    import numpy as np
    from sklearn.dummy import DummyRegressor
    from sklearn.tree import DecisionTreeRegressor

    stages = getattr(model, "estimators_", None)
    if stages is None:
        return  # unfitted: the prediction probe names it
    count = getattr(model, "n_estimators_", None)
    if (
        not isinstance(stages, np.ndarray)
        or stages.dtype != object
        or stages.ndim != 2
        or stages.shape[1] != 1
        or not isinstance(count, (int, np.integer))
        or stages.shape[0] != count
        or count < 1
    ):
        shape = getattr(stages, "shape", type(stages).__name__)
        raise _bad(path, f"estimators_ is {shape} for n_estimators_={count!r}, not ({count!r}, 1) trees")
    if getattr(model, "n_trees_per_iteration_", 1) != 1:
        raise _bad(path, f"n_trees_per_iteration_ is {model.n_trees_per_iteration_!r}, not 1 (a regressor)")
    rate = getattr(model, "learning_rate", None)
    if not isinstance(rate, (int, float, np.floating)) or not np.isfinite(rate):
        raise _bad(path, f"learning_rate {rate!r} is not a finite number")
    init = getattr(model, "init_", None)
    if not (isinstance(init, str) and init == "zero") and type(init) is not DummyRegressor:
        raise _bad(path, f"init_ is a {type(init).__name__}, not a DummyRegressor or 'zero'")
    for i in range(count):
        est = stages[i, 0]
        where = f"estimators_[{i}, 0]"
        if type(est) is not DecisionTreeRegressor:
            raise _bad(path, f"{where} is a {type(est).__name__}, not a DecisionTreeRegressor")
        if getattr(est, "n_features_in_", None) != n_features:
            raise _bad(path, f"{where} takes {getattr(est, 'n_features_in_', None)!r} features, not {n_features}")
        check_tree_structure(getattr(est, "tree_", None), path, where, n_features)


def _check_linear(model: Any, path: Path, n_features: int) -> None:
    import numpy as np

    coef = getattr(model, "coef_", None)
    if coef is None:
        return  # unfitted: the prediction probe names it
    intercept = getattr(model, "intercept_", None)
    if (
        not isinstance(coef, np.ndarray)
        or coef.dtype.kind != "f"
        or coef.shape not in ((n_features,), (1, n_features))
        or not np.isfinite(coef).all()
    ):
        shape = getattr(coef, "shape", type(coef).__name__)
        raise _bad(path, f"coef_ is {shape}, not {n_features} finite floats")
    arr = np.asarray(intercept) if isinstance(intercept, (float, int, np.ndarray, np.number)) else None
    if arr is None or arr.dtype.kind not in "fi" or arr.size != 1 or not np.isfinite(arr).all():
        raise _bad(path, f"intercept_ {intercept!r} is not one finite number")


def check_sklearn_structure(model: Any, path: Path, n_features: int) -> None:
    """Check a loaded scikit-learn model's fitted arrays before anything predicts with it:
    every tree of a ``GradientBoostingRegressor`` (:func:`check_tree_structure`, the stage
    array's shape, ``init_``, ``learning_rate``), or a ``LinearRegression``'s ``coef_``
    (``n_features`` finite floats) and ``intercept_`` (one finite number). Other classes
    are refused by the caller's class check; an unfitted model is left to its caller.

    Args:
        model: the loaded estimator.
        path: the file it was read from (named in the message).
        n_features: the model card's input width (5: ``[state(4), action_idx/19]``).

    Raises:
        ArtifactError: a structure scikit-learn's compiled code would read out of range
            or loop on, or a non-finite number.
    """
    name = type(model).__name__
    if name == "GradientBoostingRegressor":
        _check_gbr(model, path, n_features)
    elif name == "LinearRegression":
        _check_linear(model, path, n_features)


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

    check_zip_members(path)
    try:
        untrusted = skops.io.get_untrusted_types(file=path)
        unknown = sorted(set(untrusted) - SKOPS_TRUSTED_TYPES)
        if unknown:
            raise ArtifactError(f"{path}: holds types specband does not load: {', '.join(unknown)}")
        with _version_notes(path):
            return skops.io.load(path, trusted=sorted(SKOPS_TRUSTED_TYPES))
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
    it when there is one (bounded by :func:`check_zip_members`, only trusted types), else
    unpickled once :func:`check_pickle_trusted` allows it (``trust_pickle``).

    Raises:
        ArtifactError: neither file exists, or a file is unreadable.
        UntrustedPickleError: see :func:`check_pickle_trusted`.
    """
    skops_path = path.with_suffix(SKOPS_SUFFIX)
    if skops_path.is_file():
        return _load_skops(skops_path)
    if not path.is_file():
        raise ArtifactError(f"{path}: no such file (nor its pickle-free copy {skops_path.name})")
    if not trust_pickle:
        check_pickle_trusted(path, b"", trust_pickle=False)  # refused before a byte is read
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ArtifactError(f"{path}: no such file") from None
    except OSError as exc:
        raise ArtifactError(f"{path}: cannot read ({exc.strerror or exc})") from None
    check_pickle_trusted(path, data, trust_pickle=trust_pickle)
    return _load_joblib(path, data)
