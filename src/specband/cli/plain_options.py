"""Parse a command's plain options without typer's coercion, for a cold-fast start.

typer (0.16 and later) coerces every option value through a pydantic ``TypeAdapter``,
and importing pydantic and building the adapters costs ~0.07-0.15 s on the 2-core
development machine: a cold ``specband recommend -b 16`` took 0.109 s median through this
parser and 0.177 s through typer alone (11 runs each, 1-minute load 1.4; 0.15 s and 0.30 s
under more load), against the 0.15 s target of issue 21.

Why it is still here (typer 0.29.2, read from its source): typer has no supported way to
skip pydantic for an option. Every parameter's value goes through
``_TyperParameter.get_runtime_param()`` -> ``typer._coercion.build_runtime_param``, which
imports ``typer._adapters`` (``from pydantic import ...`` at module level) for every
annotation, bool flags given a default included; ``typer.Option(parser=...)`` is wrapped
in a ``TypeAdapter`` too (``_adapters.build_leaf_adapter``), and ``click_type=`` is gone
(typer 0.29 vendors its own click, ``typer._click``). Replacing the private
``_TyperParameter.get_runtime_param`` with plain converters did skip pydantic (0.105 s
median, same runs) but patches a private method of typer that any release may change, so
this standard-library parser stays, held to typer's answers by
``tests/cli/test_command_table.py``. For the commands in
:data:`specband.cli.FAST_COMMANDS` this module reads the options from the command typer
built (its click parameters: names, ``nargs``, defaults, ``min``/``max``) with the
standard library's :mod:`argparse`, and converts the plain types itself (``int``,
``float``, ``str``, :class:`~pathlib.Path`, tuples of them, flags).

It only ever says "parsed" for a command line typer would accept with the same values:
anything else (``--help``, an unknown or repeated-unusual option, a value that is not a
plain decimal number, a value outside ``min``/``max``, a parameter of another type) gives
``None``, and the caller runs typer, whose message the user then sees.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, get_args, get_origin

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_PLAIN = (int, float, str, Path)


class _Unparsed(Exception):
    """The command line needs typer (raised by the parser instead of exiting)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage and exit
        raise _Unparsed(message)


def _convert(text: str, kind: type) -> Any:
    if kind is int:
        if not _INT.fullmatch(text):
            raise _Unparsed(text)
        return int(text)
    if kind is float:
        if not _FLOAT.fullmatch(text):
            raise _Unparsed(text)
        return float(text)
    return kind(text)


def _kinds(param: Any) -> tuple[type, ...] | None:
    """The plain type of each of the parameter's values, or ``None`` when it is not plain."""
    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    if get_origin(annotation) is tuple:
        kinds = get_args(annotation)
        return kinds if len(kinds) == param.nargs and all(k in _PLAIN for k in kinds) else None
    if annotation in _PLAIN and param.nargs == 1:
        return (annotation,)
    return None


def _bounds(param: Any) -> tuple[Any, Any]:
    info = getattr(getattr(param, "type_descriptor", None), "parameter_info", None)
    return getattr(info, "min", None), getattr(info, "max", None)


def parse_plain(command: Any, args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments of ``command``'s callback for ``args``, or ``None`` when typer
    must parse them.

    Args:
        command: the click command typer built for one specband command.
        args: the arguments after the command name.

    Returns:
        parameter name -> value (defaults filled), or ``None``: a parameter that is not a
        plain option or flag, or a command line this parser does not accept exactly.
    """
    parser = _Parser(add_help=False, allow_abbrev=False, exit_on_error=False)
    kinds: dict[str, tuple[type, ...]] = {}
    for param in command.params:
        if param.param_type_name != "option" or param.multiple or param.callback is not None or param.envvar:
            return None
        if getattr(param, "is_flag", False):
            annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
            if param.secondary_opts or param.default or annotation is not bool:
                return None
            parser.add_argument(*param.opts, dest=param.name, action="store_true")
            continue
        param_kinds = _kinds(param)
        if param_kinds is None:
            return None
        kinds[param.name] = param_kinds
        parser.add_argument(*param.opts, dest=param.name, nargs=None if param.nargs == 1 else param.nargs)
    try:
        parsed = vars(parser.parse_args(args))
        values: dict[str, Any] = {}
        for param in command.params:
            raw = parsed[param.name]
            if param.name not in kinds:  # a flag
                values[param.name] = bool(raw)
            elif raw is None:
                if param.required:
                    return None
                values[param.name] = param.default
            else:
                texts = [raw] if param.nargs == 1 else raw
                converted = [_convert(t, k) for t, k in zip(texts, kinds[param.name], strict=True)]
                low, high = _bounds(param)
                if any((low is not None and v < low) or (high is not None and v > high) for v in converted):
                    return None
                values[param.name] = converted[0] if param.nargs == 1 else tuple(converted)
    except (_Unparsed, argparse.ArgumentError, ValueError, TypeError):
        return None
    return values
