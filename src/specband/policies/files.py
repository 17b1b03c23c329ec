"""File helpers of the policies and artifact folders, free of NumPy so that the
``lookup_table`` path of ``specband recommend`` stays cold-fast.

Writes go through :mod:`specband.fileio` (a temporary file in the target's folder,
fsynced and renamed into place), so a reader never sees half a file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specband import fileio
from specband.errors import ArtifactError
from specband.fileio import read_json, read_text_bounded  # noqa: F401  (read_json: re-exported)

__all__ = [
    "SIDECAR_FILE",
    "nearest_batch_size",
    "read_json",
    "write_bytes_atomic",
    "write_json_atomic",
]

#: Name of the optional per-policy file ``<name>/specband.json`` that holds what the model
#: card's file has no room for (resolved config, fitted extras). Loading works without it.
SIDECAR_FILE = "specband.json"


def nearest_batch_size(batch_size: int, available: Iterable[int]) -> int:
    """The measured batch size closest to ``batch_size``; the larger on a tie (the more
    memory-constrained one), as :meth:`specband.dataset.TrainingData.allowed_for`.

    Raises:
        ArtifactError: ``available`` is empty.
    """
    choices = sorted({int(b) for b in available})
    if not choices:
        raise ArtifactError("no measured batch size to pick for")
    return min(choices, key=lambda b: (abs(b - batch_size), -b))


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` all or nothing (:func:`specband.fileio.write_bytes_atomic`:
    temporary file in the same folder, fsync, rename; file mode 0666 minus the umask, as
    ``open`` would give), creating missing parent folders.

    Raises:
        ArtifactError: the file cannot be written (``"<path>: cannot write (<reason>)"``).
    """
    return fileio.write_bytes_atomic(path, data, error=ArtifactError, make_parents=True)


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON (keys in the given order) to ``path`` atomically.

    Raises:
        ArtifactError: the file cannot be written, or ``obj`` holds NaN/Infinity.
    """
    try:
        text = json.dumps(obj, indent=2, allow_nan=False) + "\n"
    except ValueError as exc:
        raise ArtifactError(f"{path}: cannot write JSON ({exc})") from None
    return write_bytes_atomic(path, text.encode("utf-8"))
