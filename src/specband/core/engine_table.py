"""The serving engines specband knows, as data: ``specband/data/engines.json`` (each engine's
name, the module that defines it, how lines name it, and the per-engine version column that
files written before the ``engine_version`` column carry), plus the engines a plug-in
registers at run time (:func:`register_engine_entry`).

This is the one engine list. ``--engine``'s values, the rows' ``engine`` column, the engine of
an origin or a manifest and the name a line gives an engine all read it; the engine itself
(its flags, launch line, probes, schedules) is :func:`specband.engines.get_engine`'s, which
imports ``module`` the first time the engine is asked for (one lazy table per plug-in kind,
as lm-evaluation-harness's ``lm_eval/models/__init__.py`` keeps). Standard library only: the
lowest floor, so that the contract (rows) and sweeps (origins) read it too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError

__all__ = [
    "ENGINE_TABLE_FILE",
    "EngineEntry",
    "default_engine_name",
    "display_name_of",
    "engine_entries",
    "engine_names",
    "find_engine_entry",
    "register_engine_entry",
    "row_engine",
    "version_columns",
]

#: The bundled engine list.
ENGINE_TABLE_FILE = Path(__file__).resolve().parent.parent / "data" / "engines.json"


@dataclass(frozen=True)
class EngineEntry:
    """One engine of the list.

    Attributes:
        name: the ``--engine`` value and the rows' ``engine`` column (lower case, no spaces).
        module: the module whose ``ENGINE`` is the :class:`specband.engines.base.Engine`.
        display_name: how lines name the engine (``"vLLM"``).
        version_column: the row and manifest key that held this engine's release before
            ``engine_version`` did (``"sglang_version"``), or ``None`` (an engine added since).
    """

    name: str
    module: str
    display_name: str
    version_column: str | None = None

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip().lower() or " " in self.name or self.name == "auto":
            raise ConfigError(f"an engine's name is one lower-case word other than 'auto', got {self.name!r}")
        if not self.module or not self.display_name:
            raise ConfigError(f"engine {self.name!r} needs a module and a display name")


@cache
def _bundled() -> tuple[tuple[EngineEntry, ...], str]:
    """The entries of :data:`ENGINE_TABLE_FILE` and its default engine."""
    data: Any = json.loads(ENGINE_TABLE_FILE.read_text(encoding="utf-8"))
    entries = tuple(
        EngineEntry(e["name"], e["module"], e["display_name"], e.get("version_column")) for e in data["engines"]
    )
    default = str(data["default"])
    if default not in {e.name for e in entries}:
        raise ConfigError(f"{ENGINE_TABLE_FILE}: the default engine {default!r} is not in its list")
    return entries, default


#: Engines registered at run time (:func:`register_engine_entry`), by name, in order.
_REGISTERED: dict[str, EngineEntry] = {}


def engine_entries() -> tuple[EngineEntry, ...]:
    """Every engine: the bundled ones in the file's order, then those registered at run time."""
    return (*_bundled()[0], *_REGISTERED.values())


def engine_names() -> tuple[str, ...]:
    """The ``--engine`` values, in :func:`engine_entries`' order."""
    return tuple(e.name for e in engine_entries())


def find_engine_entry(name: str) -> EngineEntry | None:
    """The entry named ``name`` (exactly: names are lower case), or ``None``."""
    return next((e for e in engine_entries() if e.name == name), None)


def default_engine_name() -> str:
    """``--engine``'s default, and the engine of rows and origins that name none (the
    published study's; ``data/engines.json``'s ``default``)."""
    return _bundled()[1]


def display_name_of(name: str) -> str:
    """How a line names the engine ``name`` (its entry's display name; an unknown name as given,
    e.g. several engines joined by ``" + "`` in an origin)."""
    entry = find_engine_entry(name)
    return name if entry is None else entry.display_name


def version_columns() -> dict[str, str]:
    """Per-engine version column (``"sglang_version"``) -> the engine's name: the columns of rows
    and manifests written before ``engine_version``, still read."""
    return {e.version_column: e.name for e in engine_entries() if e.version_column is not None}


def register_engine_entry(entry: EngineEntry) -> None:
    """Add an engine at run time (a plug-in, or a test's engine); registering the same entry
    again does nothing.

    Raises:
        ConfigError: the name is taken by another entry.
    """
    known = find_engine_entry(entry.name)
    if known == entry:
        return
    if known is not None:
        raise ConfigError(f"engine {entry.name!r} is registered already (module {known.module})")
    _REGISTERED[entry.name] = entry


def unregister_engine_entry(name: str) -> None:
    """Remove an engine registered at run time (the bundled ones stay)."""
    _REGISTERED.pop(name, None)


def row_engine(row: Mapping[str, Any], *, default: bool = True) -> tuple[str | None, str | None]:
    """``(engine, engine_version)`` of a row (or a manifest's origin) as written: its ``engine``
    and ``engine_version``, else what a file written before ``engine_version`` says (a per-engine
    column, :func:`specband.core.engine_table.version_columns`: ``sglang_version`` -> sglang).
    A row naming no engine is the default engine's (the study's, and the only one specband ran
    before the column) when ``default``, else ``None``. A value that is not text reads as
    unknown (``None``)."""
    engine = row.get("engine")
    engine = engine if isinstance(engine, str) and engine else None
    version = row.get("engine_version")
    version = version if isinstance(version, str) and version else None
    if version is None:
        for column, name in version_columns().items():
            old = row.get(column)
            if isinstance(old, str) and old and (engine is None or engine == name):
                engine, version = name, old
                break
    if engine is None and default:
        engine = default_engine_name()
    return engine, version
