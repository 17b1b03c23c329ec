"""The bundled published datacenter measurements (``specband/data/published_datacenter.json``).

Each row names its source and how it was measured (copied from ``published_datacenter.md``
and the other sources its ``source`` names). :mod:`specband.sim.published` holds the simulator
to them; :mod:`specband.sim.cost_error` and :mod:`specband.sim.serving_check` read them too.

A row's ``role`` says what a fit may do with it: ``"fit"`` (a fit of the simulator used it),
``"held-out"`` (no fit saw it: it checks the fit), or ``""`` (a row the report compares, no
stage of the published fit split the rows of its metric).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from specband.contract.actions import Action
from specband.core.errors import ConfigError

__all__ = ["DRAFT_CONFIG", "ROLES", "TARGET_CONFIG", "PublishedRow", "load_published_reference"]

TARGET_CONFIG = "llama-3.1-8b-instruct"
DRAFT_CONFIG = "eagle3-llama-3.1-8b-instruct"
#: What a row is to the fits.
ROLES = ("", "fit", "held-out")


@dataclass(frozen=True)
class PublishedRow:
    """One published figure (fields as in the JSON file; ``role`` one of :data:`ROLES`)."""

    id: str
    source: str
    method: str
    profile: str | None
    metric: str
    value: float | None
    workload: str | None = None
    batch_size: int | None = None
    batch_sizes: tuple[int, ...] = ()
    spec_batch_sizes: tuple[int, ...] = ()
    action: Action | None = None
    range: tuple[float, float] | None = None
    criteria: bool = True
    note: str = ""
    role: str = ""


def _path() -> Path:
    return Path(str(resources.files("specband").joinpath("data/published_datacenter.json")))


def _parse(rec: Any, i: int) -> PublishedRow:
    where = f"published_datacenter.json: rows[{i}]"
    try:
        action = rec.get("action")
        span = rec.get("range")
        role = str(rec.get("role", ""))
        if role not in ROLES:
            raise ValueError(f"role {role!r} is not one of {ROLES}")
        return PublishedRow(
            id=str(rec["id"]),
            source=str(rec["source"]),
            method=str(rec["method"]),
            profile=rec.get("profile"),
            metric=str(rec["metric"]),
            value=None if rec.get("value") is None else float(rec["value"]),
            workload=rec.get("workload"),
            batch_size=rec.get("batch_size"),
            batch_sizes=tuple(int(b) for b in rec.get("batch_sizes") or ()),
            spec_batch_sizes=tuple(int(b) for b in rec.get("spec_batch_sizes") or ()),
            action=None if action is None else Action(*(int(x) for x in action)),
            range=None if span is None else (float(span[0]), float(span[1])),
            criteria=bool(rec.get("criteria", True)),
            note=str(rec.get("note", "")),
            role=role,
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


@lru_cache(maxsize=1)
def load_published_reference() -> tuple[PublishedRow, ...]:
    """The bundled published datacenter rows, in file order.

    Raises:
        ConfigError: the bundled file is malformed.
    """
    data = json.loads(_path().read_text(encoding="utf-8"))
    return tuple(_parse(rec, i) for i, rec in enumerate(data["rows"]))
