"""File helpers of the policies and artifact folders, free of NumPy so that the
``lookup_table`` path of ``specband recommend`` stays cold-fast.

Writes go through :mod:`specband.files.fileio` (a temporary file in the target's folder,
fsynced and renamed into place), so a reader never sees half a file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specband.core.errors import ArtifactError
from specband.files import fileio
from specband.files.fileio import read_json, read_text_bounded  # noqa: F401  (read_json: re-exported)

__all__ = [
    "SIDECAR_FILE",
    "read_json",
    "write_bytes_atomic",
    "write_json_atomic",
]

#: Name of the optional per-policy file ``<name>/specband.json`` that holds what the model
#: card's file has no room for (resolved config, fitted extras). Loading works without it.
SIDECAR_FILE = "specband.json"


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` all or nothing (:func:`specband.files.fileio.write_bytes_atomic`:
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
