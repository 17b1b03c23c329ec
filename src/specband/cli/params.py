"""typer options from the request dataclasses' declarations (:mod:`specband.optionspec`):
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

from specband.optionspec import PANELS, OptionSpec, option_spec

__all__ = ["PANEL_TITLES", "request_command", "typer_option"]

R = TypeVar("R")

#: ``--help`` panel titles of :data:`specband.optionspec.PANELS`.
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


def typer_option(spec: OptionSpec, default: Any) -> Any:  # typer.Option's own return type
    """The typer option of ``spec`` with ``default`` (``...``: required)."""
    extra: dict[str, Any] = {}
    if spec.min is not None:
        extra["min"] = spec.min
    if spec.max is not None:
        extra["max"] = spec.max
    if spec.check is not None:
        extra["callback"] = _usage_check(spec.check)
    if spec.envvar is not None:
        extra["envvar"] = spec.envvar
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
        metavar=spec.metavar,
        show_default=spec.show_default and default is not None and default is not ... and default != [],
        rich_help_panel=PANEL_TITLES[spec.panel],
        **extra,
    )


def _usage_check(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``check`` as a typer callback: its ConfigError becomes a usage error (one line, exit 2)."""

    def callback(value: Any) -> Any:
        from specband.errors import ConfigError

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
    :data:`~specband.optionspec.PANELS` order (``--help`` lists its panels in the order their
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
        annotation: Any = hints[field.name]
        if spec.choices is not None:  # typer lists an enum's values in --help and refuses others
            choice: Any = enum.Enum(f"{field.name}_choice", {c: c for c in spec.choices}, type=str)  # type: ignore[misc]
            choices.add(field.name)
            annotation, default = choice, choice(default)
        params.append(
            inspect.Parameter(
                field.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=typer_option(spec, default),
                annotation=annotation,
            )
        )
        panels[field.name] = PANELS.index(spec.panel)
    params.sort(key=lambda param: panels[param.name])  # stable: the fields' order within a panel
    return params, choices


def request_command(request_type: type[R]) -> Callable[[Callable[[R], Any]], Callable[..., Any]]:
    """Decorate ``body(request)`` into a typer command whose options are the fields of the
    dataclass ``request_type`` declared with :func:`specband.optionspec.option`; typer
    parses them (usage errors: one line, exit 2) and ``body`` gets ``request_type(**values)``."""
    params, choices = _request_params(request_type)

    def decorate(body: Callable[[R], Any]) -> Callable[..., Any]:
        @functools.wraps(body)
        def command(**values: Any) -> Any:
            values = {k: v.value if k in choices else v for k, v in values.items()}
            return body(request_type(**values))

        del command.__wrapped__  # typer reads __signature__, not the body's
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate
