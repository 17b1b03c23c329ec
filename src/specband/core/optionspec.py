"""One declaration per command-line option: :class:`OptionSpec` metadata on the fields of
the typed request dataclasses (as sglang's ``ServerArgs`` does), read by the CLI to build
the typer options (:func:`specband.cli.params.typer_params`). Standard library only, so
any floor may declare a request.

A field is an option when it is declared with :func:`option`; its ``help`` is the one
place the option is described (``--help``, the README's tables come from it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "GIVE",
    "NAME_METAVARS",
    "OPTION_KEY",
    "PANELS",
    "OptionSpec",
    "acceptance_from_field",
    "option",
    "option_spec",
]

#: Key of a field's metadata holding its :class:`OptionSpec`.
OPTION_KEY = "specband.option"
#: ``--help`` panels of options, in the order every command lists them (sweep: grid, server,
#: telemetry, fleet, emulator; recommend: pick, setup, model, output; ...).
PANELS: tuple[str, ...] = (
    "input",
    "pick",
    "setup",
    "model",
    "grid",
    "server",
    "telemetry",
    "fleet",
    "emulator",
    "calibration",
    "output",
)

#: What to give instead of an empty value, by ``metavar`` (the ``"; give ..."`` of the message).
GIVE: dict[str, str] = {
    "MODEL": "a model path or hub id",
    "PATH": "a path or hub id",
    "PROFILE": "a GPU profile name (h100-sxm, h200, a100-sxm4-80gb, rtx4060-laptop) or a profile file",
    "CONFIG": "a config.json path or a bundled name",
    "SWEEP": "a sweep file or folder",
    "FILE|auto": "a file or 'auto'",
    "CMD": "the server launcher (e.g. 'python -m sglang.launch_server')",
}
#: ``metavar`` of the string options whose value names a file, a folder, a model or a profile:
#: each part of the value is at most :data:`specband.files.fileio.NAME_MAX` bytes (a path option's
#: is, whatever its metavar).
NAME_METAVARS = frozenset({"FILE", "DIR", "SWEEP", "MODEL", "PATH", "PROFILE", "CONFIG", "DATA", "FILE|auto"})


@dataclass(frozen=True)
class OptionSpec:
    """How a request field is spelled on the command line.

    Attributes:
        flags: the long flag first, then at most one short flag (``("--batch-size", "-b")``).
        help: the one description of the option (one or two sentences).
        panel: its ``--help`` panel (:data:`PANELS`).
        metavar: the value's name in ``--help`` (``None`` for a flag).
        min, max: inclusive bounds of a number (checked by the parser: a usage error).
        choices: the allowed values of a string.
        show_default: show the default in ``--help``.
        check: a check of the value made while parsing (raises
            :class:`~specband.core.errors.ConfigError`: a usage error naming the option).
        argument: a positional argument (``flags`` is then its one name, e.g. ``("DATA",)``).
        envvar: the environment variable giving the default.
        allow_empty: a string or path value may be empty or blank (otherwise refused as
            ``"<option>: empty; give <give>"`` by the CLI, for every command).
        give: what to give instead of an empty value (``None``: from :data:`GIVE`, by
            ``metavar``).
        finite: a float value must be finite (otherwise ``"<option>: must be a finite
            number, got nan"``); ``False`` lets ``inf``/``nan`` through to the request's own
            check (one that names what the number is, e.g. ``--power-limit``'s range in W).
        parse: turns the text given into the field's value (``--engine``: the resolved engine,
            :func:`specband.engines.base.get_engine`); the command line takes text, and the
            request holds what ``parse`` made of it (ConfigError: a usage error, one line).
    """

    flags: tuple[str, ...]
    help: str
    panel: str
    metavar: str | None = None
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    show_default: bool = True
    check: Callable[[Any], Any] | None = None
    argument: bool = False
    envvar: str | None = None
    allow_empty: bool = False
    give: str | None = None
    finite: bool = True
    parse: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if not self.flags or not (self.argument or self.flags[0].startswith("--")) or not self.help.strip():
            raise ValueError(f"an option needs a long flag and a help text: {self.flags}")
        if self.panel not in PANELS:
            raise ValueError(f"{self.flags[0]}: unknown panel {self.panel!r}; one of {PANELS}")


def option(default: Any, *flags: str, help: str, panel: str, **spec: Any) -> Any:
    """A dataclass field that is a command-line option: ``default``, and its
    :class:`OptionSpec` (``flags``, ``help``, ``panel``, and ``metavar``/``min``/``max``/
    ``choices``/``show_default``). A list default is copied per instance."""
    metadata = {OPTION_KEY: OptionSpec(tuple(flags), help, panel, **spec)}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def option_spec(field: dataclasses.Field[Any]) -> OptionSpec | None:
    """The :class:`OptionSpec` of a dataclass field (``None``: not an option)."""
    spec = field.metadata.get(OPTION_KEY)
    return spec if isinstance(spec, OptionSpec) else None


def acceptance_from_field(what: str, panel: str = "model") -> Any:
    """``--acceptance-from FILE``: measured accept lengths that ``what`` fits its acceptance to
    (:mod:`specband.sim.acceptance_fit`); declared once for ``simulate``, the first guess of
    ``recommend`` and the sweep's planner."""

    return option(
        None,
        "--acceptance-from",
        help=f"Fit the acceptance (target, draft, workload) of {what} to measured accept lengths: a specband sweep "
        "JSONL, an sglang bench_speculative.py JSONL or a `specband probe` file; the residual of every fitted "
        "config is printed and simulated figures say 'fitted to N configs of FILE'.",
        panel=panel,
        metavar="FILE",
        show_default=False,
        give="a sweep JSONL, a bench_speculative JSONL or a probe file",
    )
