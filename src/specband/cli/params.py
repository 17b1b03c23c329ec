"""typer options from the request dataclasses' declarations (:mod:`specband.core.optionspec`):
the one place an option's flags, help text, bounds and ``--help`` panel become a typer
option. A command whose request is a dataclass is :func:`request_command`: its signature
is the request's option fields, and its body receives the built request.

Standard library and typer only at module level (a cold ``recommend`` stays fast).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from specband.core.errors import ConfigError
from specband.core.optionspec import GIVE, NAME_METAVARS, PANELS, OptionSpec, option_spec
from specband.files.fileio import check_name_lengths

__all__ = ["PANEL_TITLES", "build_request", "check_values", "request_command", "typer_option"]

R = TypeVar("R")

#: ``--help`` panel titles of :data:`specband.core.optionspec.PANELS`.
PANEL_TITLES: dict[str, str] = {
    "input": "Input (what is read)",
    "pick": "Pick (what to decide for)",
    "setup": "Your setup (checked against the data)",
    "grid": "Grid (what is measured)",
    "server": "Server (how each run is launched)",
    "telemetry": "Telemetry (how energy is read)",
    "fleet": "Fleet (several GPUs)",
    "emulator": "Emulator (CPU runs and tests)",
    "model": "Model (the policy asked, or the simulated GPU and pair)",
    "calibration": "Calibration report",
    "output": "Output",
}


def help_text(text: str) -> str:
    """``text`` as the CLI's markdown help renders it literally: a ``<out>`` would be read as
    an HTML tag and dropped (``default: <out>.logs/`` printed as ``default: .logs/``)."""
    return text.replace("<", "\\<")


def typer_option(spec: OptionSpec, default: Any, *, bounds: bool = True) -> Any:  # typer.Option's own return type
    """The typer option of ``spec`` with ``default`` (``...``: required); ``bounds=False``
    leaves ``min``/``max`` to :func:`check_values` (a float's: ``nan`` must not be reported as
    out of range)."""
    extra: dict[str, Any] = {}
    if bounds and spec.min is not None:
        extra["min"] = spec.min
    if bounds and spec.max is not None:
        extra["max"] = spec.max
    if spec.check is not None:
        extra["callback"] = _usage_check(spec.check)
    if spec.envvar is not None:
        extra["envvar"] = spec.envvar
    metavar = spec.metavar
    if not bounds and (spec.min is not None or spec.max is not None):  # the range --help shows, as typer's own
        low, high = spec.min, spec.max
        shown = f"x<={high}" if low is None else f"x>={low}" if high is None else f"{low}<=x<={high}"
        metavar = f"{metavar or 'FLOAT'} [{shown}]"
    if spec.argument:
        return typer.Argument(
            default,
            help=help_text(spec.help),
            metavar=spec.metavar or spec.flags[0],
            show_default=spec.show_default and default is not None,
            rich_help_panel=PANEL_TITLES[spec.panel],
        )
    return typer.Option(
        default,
        *spec.flags,
        help=help_text(spec.help),
        metavar=metavar,
        show_default=spec.show_default and default is not None and default is not ... and default != [],
        rich_help_panel=PANEL_TITLES[spec.panel],
        **extra,
    )


def _usage_check(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``check`` as a typer callback: its ConfigError becomes a usage error (one line, exit 2)."""

    def callback(value: Any) -> Any:

        try:
            check(value)
        except ConfigError as exc:
            raise typer.BadParameter(str(exc)) from None
        return value

    return callback


def request_signature(request_type: type, *leading: inspect.Parameter) -> inspect.Signature:
    """The signature typer reads for a command whose options are ``request_type``'s option
    fields (after ``leading`` parameters, e.g. a ``typer.Context``)."""
    return inspect.Signature([*leading, *_request_params(request_type)[0]])


def _request_params(request_type: type) -> tuple[list[inspect.Parameter], set[str]]:
    """The typer parameters of ``request_type``'s option fields, panel by panel in
    :data:`~specband.core.optionspec.PANELS` order (``--help`` lists its panels in the order their
    first option comes; within a panel, the fields' order), and the names of those whose
    values come back as enum members (fields with ``choices``)."""
    hints = typing.get_type_hints(request_type)
    params = []
    panels: dict[str, int] = {}
    choices: set[str] = set()
    for field in dataclasses.fields(request_type):
        spec = option_spec(field)
        if spec is None:
            continue
        factory: Any = field.default_factory
        default = field.default if field.default is not dataclasses.MISSING else factory()
        # an argument keeps its path type: typer shows it in --help's type column (<path>)
        annotation: Any = hints[field.name] if spec.argument else _as_text(hints[field.name])
        if spec.parse is not None:  # given as text; the request holds what parse makes of it
            annotation = str
        if spec.choices is not None:  # typer lists an enum's values in --help and refuses others
            choice: Any = enum.Enum(f"{field.name}_choice", {c: c for c in spec.choices}, type=str)  # type: ignore[misc]
            choices.add(field.name)
            annotation, default = choice, choice(default)
        params.append(
            inspect.Parameter(
                field.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=typer_option(spec, default, bounds=float not in _leaf_types(hints[field.name])),
                annotation=annotation,
            )
        )
        panels[field.name] = PANELS.index(spec.panel)
    params.sort(key=lambda param: panels[param.name])  # stable: the fields' order within a panel
    return params, choices


def request_command(request_type: type[R]) -> Callable[[Callable[[R], Any]], Callable[..., Any]]:
    """Decorate ``body(request)`` into a typer command whose options are the fields of the
    dataclass ``request_type`` declared with :func:`specband.core.optionspec.option`; typer
    parses them (usage errors: one line, exit 2) and ``body`` gets ``request_type(**values)``."""
    params, choices = _request_params(request_type)

    def decorate(body: Callable[[R], Any]) -> Callable[..., Any]:
        @functools.wraps(body)
        def command(**values: Any) -> Any:
            values = {k: v.value if k in choices else v for k, v in values.items()}
            return body(build_request(request_type, values))

        del command.__wrapped__  # typer reads __signature__, not the body's
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate


def _leaf_types(annotation: Any) -> set[Any]:
    """The plain types inside ``annotation`` (``Path | None`` -> {Path, NoneType};
    ``tuple[float, float]`` -> {float})."""
    args = typing.get_args(annotation)
    if not args:
        return {annotation}
    return set().union(*(_leaf_types(a) for a in args if a is not Ellipsis))


def _as_text(annotation: Any) -> Any:
    """``annotation`` with :class:`~pathlib.Path` read as ``str``: the parsers hand over the
    raw text (``Path("")`` would already be ``.``, the working folder), which
    :func:`check_values` checks and turns into a path."""
    from pathlib import Path

    if annotation is Path:
        return str
    if annotation == (Path | None):
        return str | None
    if annotation == list[Path]:
        return list[str]
    return annotation


def _values_of(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def check_values(request_type: type, values: dict[str, Any]) -> dict[str, Any]:
    """Check the parsed option values of ``request_type`` against their declarations (every
    command, whichever parser read the command line) and turn path texts into paths.

    The rules, one for every option (:class:`~specband.core.optionspec.OptionSpec`):
    a string or path is not empty or blank (unless ``allow_empty``); a path, or a string whose
    ``metavar`` names a file, folder, model or profile (:data:`~specband.core.optionspec.NAME_METAVARS`),
    has no part over 230 bytes (:func:`specband.files.fileio.check_name_lengths`); a float is
    finite (unless ``finite=False``) and within ``min``/``max``.

    Returns:
        ``values`` with the :class:`~pathlib.Path` fields' texts as paths.

    Raises:
        ConfigError: one line naming the option.
    """
    import math
    from pathlib import Path

    hints = typing.get_type_hints(request_type)
    out = dict(values)
    for field in dataclasses.fields(request_type):
        spec = option_spec(field)
        if spec is None or field.name not in values or values[field.name] is None:
            continue
        value = values[field.name]
        kinds = _leaf_types(hints[field.name])
        name = spec.flags[0]
        for item in _values_of(value):
            if isinstance(item, str | Path) and not isinstance(item, bool):
                text = str(item)
                if not text.strip() and not spec.allow_empty:
                    give = spec.give or GIVE.get(spec.metavar or "")
                    raise ConfigError(f"{name}: empty" + (f"; give {give}" if give else ""))
                if Path in kinds or spec.metavar in NAME_METAVARS or (spec.argument and name in NAME_METAVARS):
                    check_name_lengths(text, option=name)
            elif isinstance(item, float) and float in kinds:
                if spec.finite and not math.isfinite(item):
                    raise ConfigError(f"{name}: must be a finite number, got {item}")
                shown = " / ".join(f"'{flag}'" for flag in spec.flags)
                if spec.min is not None and item < spec.min:
                    raise ConfigError(f"Invalid value for {shown}: Input should be greater than or equal to {spec.min}")
                if spec.max is not None and item > spec.max:
                    raise ConfigError(f"Invalid value for {shown}: Input should be less than or equal to {spec.max}")
        if spec.parse is not None:
            out[field.name] = spec.parse(value)
        elif Path in kinds and isinstance(value, str):
            out[field.name] = Path(value)
        elif Path in kinds and isinstance(value, list):
            out[field.name] = [Path(v) for v in value]
    return out


def build_request(request_type: type[R], values: dict[str, Any]) -> R:
    """``request_type(**values)`` after :func:`check_values`: the one place the CLI builds a
    request from parsed options (both parsers: typer's and :mod:`specband.cli.plain_options`)."""
    return request_type(**check_values(request_type, values))
