"""Option checks shared by several commands, declared on the options themselves (typer
``callback=``), so that every command holds a value to the same bound."""

from __future__ import annotations

import enum
from pathlib import Path

import typer


def check_batch_size_list(value: str) -> str:
    """typer callback of ``--batch-sizes`` (``simulate``):
    :func:`specband.batchlist.check_batch_size_bound` as a usage error (one line, exit 2)."""
    from specband.batchlist import check_batch_size_bound
    from specband.errors import ConfigError

    try:
        return check_batch_size_bound(value)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from None


class DeviceKind(str, enum.Enum):
    """``--device`` of ``sweep``: :data:`specband.devices.DEVICE_KINDS` (a test holds the two equal)."""

    auto = "auto"
    nvml = "nvml"
    zeus = "zeus"
    emulated = "emulated"
    none = "none"


class IdleStateDevice(str, enum.Enum):
    """``--device`` of ``launch``: where the idle GPU state is read (no emulator, no Zeus)."""

    auto = "auto"
    nvml = "nvml"
    none = "none"


def out_path(text: str) -> Path:
    """typer ``parser`` of a ``Path``-typed ``--out`` (``train``, ``schedule``): the raw
    text through :func:`specband.fileio.given_path`, so that an empty ``--out`` is
    ``--out: empty`` rather than the working folder ``.``."""
    from specband.errors import ConfigError, SpecbandError
    from specband.fileio import given_path

    try:
        return given_path("--out", text)
    except ConfigError as exc:  # a ValueError, which typer would wrap as "Invalid value ... Value error"
        raise SpecbandError(str(exc)) from None
