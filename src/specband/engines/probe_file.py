"""The probe file's format, defined once: what ``specband probe`` writes and what a reader of
it (``--acceptance-from``) may take as a measurement.

A probe file is one JSON object, ``"format": "specband-probe"``, ``"version"``
:data:`PROBE_VERSION`, with exactly the keys of :data:`PROBE_KEYS`. Version 2 adds
``provenance`` (``"measured"``, or ``"emulated"`` when the server was ``specband emulate``:
every answer of the emulator carries its time-scale header) and ``reading_sha256``, the
sha256 of what was read from the server (:data:`READING_KEYS`, canonical JSON): a file whose
action, acceptance, engine or flags were edited after the probe no longer matches it, so it is
no longer taken as what a server answered (hostile trial A08: an action changed with the
histogram kept, ``engine`` changed with the other engine's flags). Like a policy folder's
manifest this catches edits, not a forger, who can write the digest too.

Version 1 files (written before the digest) are still read, without it; a newer version is
refused, as a newer manifest ``format`` is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from specband.core.engine_table import engine_names
from specband.core.errors import DataError
from specband.core.limits import is_int

__all__ = [
    "PROBE_FORMAT",
    "PROBE_KEYS",
    "PROBE_PROVENANCES",
    "PROBE_VERSION",
    "READING_KEYS",
    "check_probe_file",
    "reading_sha256",
]

#: The probe file's ``format``.
PROBE_FORMAT = "specband-probe"
#: The version ``specband probe`` writes (1: before ``provenance`` and ``reading_sha256``).
PROBE_VERSION = 2
#: The keys of a version-1 probe file.
_V1_KEYS = frozenset(
    {
        "format",
        "version",
        "engine",
        "engine_version",
        "url",
        "target",
        "draft",
        "action",
        "flags",
        "acceptance",
        "batch_sizes_seen",
        "batch_size_source",
        "power",
        "power_note",
        "requests_sent",
        "max_requests",
        "notes",
        "probed_at_unix",
        "specband_version",
    }
)
#: The keys of a probe file of each version: no other, and none missing.
PROBE_KEYS: dict[int, frozenset[str]] = {1: _V1_KEYS, 2: _V1_KEYS | {"provenance", "reading_sha256"}}
#: What ``provenance`` may say.
PROBE_PROVENANCES = ("measured", "emulated")
#: The keys ``reading_sha256`` covers: what the server answered, and where it came from.
READING_KEYS = (
    "engine",
    "engine_version",
    "url",
    "target",
    "draft",
    "action",
    "flags",
    "acceptance",
    "batch_sizes_seen",
    "batch_size_source",
    "power",
    "provenance",
)


def reading_sha256(data: Mapping[str, Any]) -> str:
    """The sha256 (hex) of ``data``'s :data:`READING_KEYS` as canonical JSON (sorted keys, no
    spaces), computed alike on the object written and on the object read back."""
    covered = {key: data.get(key) for key in READING_KEYS}
    text = json.dumps(covered, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def check_probe_file(data: Mapping[str, Any], path: str) -> None:
    """Check a probe file's frame before its values are read: its ``format`` and ``version``,
    exactly the keys of its version, a known ``engine``, and (version 2) its ``provenance`` and
    ``reading_sha256``. The values themselves (an accept length in ``[1, steps + 1]``, ...) are
    the reader's to check, with the bounds ``probe`` held them to before writing
    (:func:`specband.engines.probing.check_reading`).

    Args:
        data: the file's JSON object.
        path: the file, for the error line.

    Raises:
        DataError: naming the file and the field: another format, a version newer or other
            than this specband reads, a key a probe file does not have or one missing, an
            unknown engine or provenance, or a reading edited since it was written.
    """
    if data.get("format") != PROBE_FORMAT:
        raise DataError(
            f"unknown format {repr(data.get('format'))[:60]} (expected {PROBE_FORMAT!r})", path=path, field="format"
        )
    version = data.get("version")
    if not is_int(version) or version not in PROBE_KEYS:
        newer = is_int(version) and version > PROBE_VERSION
        raise DataError(
            f"version {repr(version)[:40]} is {'newer than' if newer else 'not one'} this specband reads "
            f"(probe files of version {', '.join(map(str, sorted(PROBE_KEYS)))}); "
            "probe the server again with this specband",
            path=path,
            field="version",
        )
    keys = PROBE_KEYS[version]
    for key in data:
        if key not in keys:
            raise DataError(f"not a key of a probe file (version {version})", path=path, field=str(key)[:80])
    for key in sorted(keys):
        if key not in data:
            raise DataError("required field is missing", path=path, field=key)
    if data["engine"] not in engine_names():
        raise DataError(
            f"unknown engine {repr(data['engine'])[:60]} (one of {', '.join(engine_names())})",
            path=path,
            field="engine",
        )
    if version < 2:
        return
    if data["provenance"] not in PROBE_PROVENANCES:
        raise DataError(
            f"expected one of {', '.join(PROBE_PROVENANCES)}, got {repr(data['provenance'])[:60]}",
            path=path,
            field="provenance",
        )
    if data["reading_sha256"] != reading_sha256(data):
        raise DataError(
            "does not match the reading: the file was edited after specband probe wrote it (its action, acceptance, "
            "engine, flags or batch sizes are no longer what the server answered); probe the server again",
            path=path,
            field="reading_sha256",
        )
