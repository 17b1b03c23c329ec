"""Option checks shared by several commands, declared on the options themselves (typer
``callback=``), so that every command holds a value to the same bound."""

from __future__ import annotations

import enum
from pathlib import Path

import typer

from specband.limits import MAX_BATCH_SIZE


def check_batch_size_list(value: str) -> str:
    """typer callback of ``--batch-sizes`` (``simulate``, ``sweep``): refuse an entry above
    :data:`~specband.limits.MAX_BATCH_SIZE`; each command's own parser checks the rest
    (format, >= 1, repeats).

    Returns:
        ``value`` unchanged.

    Raises:
        typer.BadParameter: naming the entry and the bound (a usage error: one line, exit 2).
    """
    for part in value.replace(",", " ").split():
        digits = part.lstrip("+")
        if digits.isdigit() and (len(digits) > len(str(MAX_BATCH_SIZE)) or int(digits) > MAX_BATCH_SIZE):
            raise typer.BadParameter(
                f"batch size {part} is above {MAX_BATCH_SIZE}, the largest specband accepts "
                "(specband.limits.MAX_BATCH_SIZE)"
            )
    return value


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
