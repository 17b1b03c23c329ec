"""Option checks shared by several commands, declared on the options themselves (typer
``callback=``), so that every command holds a value to the same bound."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import typer

from specband.limits import MAX_BATCH_SIZE, MAX_GPU_INDEX, MAX_TIMEOUT_S, PORT_RANGE


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


def sglang_version_option() -> Any:  # typer.Option's own return type: the parameter's default
    """``--sglang-version`` (``sweep``, ``launch``): the sglang release whose flag spellings
    the launch lines use (default: the one in the server command's interpreter;
    :func:`specband.harness.sglang_flags.resolve_sglang_version`)."""
    return typer.Option(
        None,
        "--sglang-version",
        help="sglang release to spell the flags for (default: found in --server-command's interpreter).",
        metavar="X.Y.Z",
    )


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


def gpu_index_option() -> Any:  # typer.Option's own return type: the parameter's default
    """``--gpu-index`` (``sweep``, ``launch``): the NVML index of the GPU, >= 0; ``None`` when
    not given (GPU 0), so that ``sweep`` can refuse it beside ``--gpus``/``--ray``."""
    return typer.Option(
        None,
        "--gpu-index",
        min=0,
        max=MAX_GPU_INDEX,
        help="NVML index of the GPU [default: 0].",
        show_default=False,
        metavar="N",
    )


def port_option() -> Any:  # typer.Option's own return type: the parameter's default
    """``--port`` (``sweep``, ``launch``): the server's TCP port, in
    :data:`~specband.limits.PORT_RANGE`."""
    return typer.Option(30000, "--port", min=PORT_RANGE[0], max=PORT_RANGE[1], metavar="N")


def launch_timeout_option() -> Any:  # typer.Option's own return type: the parameter's default
    """``--launch-timeout`` (``sweep``, ``launch``): seconds to wait for ``/health``, at
    most :data:`~specband.limits.MAX_TIMEOUT_S` (> 0 is checked by the command)."""
    return typer.Option(600.0, "--launch-timeout", help="Seconds to wait for /health.", max=MAX_TIMEOUT_S, metavar="S")


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
