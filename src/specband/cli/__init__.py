"""The ``specband`` command (typer), also ``python -m specband``.

Commands live in one module per area (``core``: train/recommend/actions; ``evaluate``;
``harness``: sweep/emulate/import-bench; ``sim``: simulate; ``launch``), each with a
``register(app)`` function, and :data:`COMMANDS` names each command's module; a run
registers only its own command's module (the command table is a seam of laziness), and the
imports that would bring NumPy, torch or scikit-learn onto a cold ``specband recommend`` or a
``--help`` load inside the commands, so both stay fast. ``recommend``'s ordinary command
lines skip typer's pydantic-based option coercion (:mod:`specband.cli.plain_options`).

Errors: a :class:`~specband.core.errors.SpecbandError` prints ``error: <message>`` on one line
to stderr and exits, without a traceback, with the status of its cause
(:data:`specband.core.exitcodes.EXIT_CODES`: 2 bad input, 3 the engine failed, 4 the GPU
failed, 5 a download failed); usage errors exit 2.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from typing import Any

import typer

from specband import __version__
from specband.cli.plain_options import parse_plain
from specband.core.errors import SpecbandError, one_line
from specband.core.exitcodes import ExitCode, exit_code_for
from specband.harness.interrupts import received_signal

#: Every command: name -> the module of :mod:`specband.cli` whose ``register(app)`` adds it.
#: Adding a command is one line here (plus its module's ``register``). A run registers
#: only its own command's module, so a cold start imports no other command's code.
COMMANDS: dict[str, str] = {
    "actions": "core",
    "train": "train",
    "recommend": "core",
    "evaluate": "evaluate",
    "sweep": "harness",
    "emulate": "harness",
    "import-bench": "harness",
    "simulate": "sim",
    "launch": "launch",
    "schedule": "schedule",
    "doctor": "doctor",
    "merge": "merge",
    "probe": "probe",
    "govern": "govern",
}

#: Commands whose plain options are parsed without typer's (pydantic) coercion when the
#: command line is an ordinary one (:mod:`specband.cli.plain_options`): those a user or
#: a script runs cold and often.
FAST_COMMANDS = frozenset({"recommend"})


def build_app(command: str | None = None) -> typer.Typer:
    """The ``specband`` typer app with ``command``'s module registered, or every module
    (in :data:`COMMANDS` order) when ``command`` is ``None`` or not a known command."""
    import importlib

    app = typer.Typer(
        name="specband",
        help="Pick sglang EAGLE3 speculative-decoding flags that keep GPU energy utilisation "
        "in a 95-98 % band while decoding fast.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="markdown",
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    _flags_without_type()
    _help_that_fits()
    modules = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for module in modules:
        importlib.import_module(f"specband.cli.{module}").register(app)
    for info in app.registered_commands:  # each command under its stage in --help
        if info.name in STAGES:
            info.rich_help_panel = STAGES[info.name]
    order = list(dict.fromkeys(STAGES.values()))
    app.registered_commands.sort(key=lambda info: order.index(STAGES.get(info.name or "", "Tools")))
    return app


#: ``--help`` panel of each command: the stage of the work it belongs to.
STAGES: dict[str, str] = {
    "sweep": "Measure",
    "emulate": "Measure",
    "import-bench": "Measure",
    "merge": "Measure",
    "train": "Learn",
    "evaluate": "Learn",
    "simulate": "Learn",
    "recommend": "Deploy",
    "schedule": "Deploy",
    "launch": "Deploy",
    "probe": "Measure",
    "govern": "Deploy",
    "actions": "Tools",
    "doctor": "Tools",
}


def _flags_without_type() -> None:
    """``--help`` shows a flag as its name alone (typer's rich help writes ``<bool>`` beside
    it, a Python type that tells a reader nothing)."""
    from typer.core import TyperOption

    original = TyperOption.display_type_rich
    if getattr(original, "specband", False):
        return

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        return None if self.is_flag else original(self, ctx)

    display_type_rich.specband = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


def _help_that_fits() -> None:
    """``--help`` fits the terminal and cuts no flag (:mod:`specband.cli.helpfit`, which loads
    rich: installed when a help text is printed, not at start-up)."""
    from typer.core import TyperCommand, TyperGroup

    for cls in (TyperCommand, TyperGroup):
        original = cls.format_help
        if getattr(original, "specband", False):
            continue

        def format_help(self: Any, ctx: Any, formatter: Any, _original: Any = original) -> None:
            from specband.cli.helpfit import install  # lazy: only when a help text is printed (it loads rich)

            install()
            return _original(self, ctx, formatter)

        format_help.specband = True  # type: ignore[attr-defined]
        cls.format_help = format_help  # type: ignore[method-assign]


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"specband {version('specband')}")
        except PackageNotFoundError:
            print(f"specband {__version__}")
        raise typer.Exit(0)


def _root(
    version: bool = typer.Option(
        False, "--version", "-V", help="Print specband's version and exit.", callback=_version, is_eager=True
    ),
) -> None:
    """specband: energy-band-aware EAGLE3 flags for sglang."""


def _run(args: list[str]) -> Any:
    """Run one command line: the plain-option fast path for :data:`FAST_COMMANDS`, else typer."""
    command = args[0] if args else None
    app = build_app(command)
    if not args:  # `specband` alone: the help text on stderr, exit 2 (a usage error)
        import contextlib

        with contextlib.redirect_stdout(sys.stderr):
            app(args=["--help"], prog_name="specband", standalone_mode=False)
        return ExitCode.BAD_INPUT
    if command in FAST_COMMANDS:
        from typer.core import TyperGroup
        from typer.main import get_command

        group = get_command(app)
        assert isinstance(group, TyperGroup)  # an app of several commands
        click_command = group.commands[command]
        values = parse_plain(click_command, args[1:])
        if values is not None and click_command.callback is not None:
            return click_command.callback(**values)
    return app(args=args, prog_name="specband", standalone_mode=False)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the CLI and exit: 0 on success, 2 on bad input, 3/4/5 when the engine, the GPU or a
    download failed, 130 on Ctrl-C, 143 on SIGTERM (:class:`~specband.core.exitcodes.ExitCode`).

    A :class:`~specband.core.errors.SpecbandError` from a command, or a usage error found
    while parsing options (unknown option, missing or out-of-range value), is one line
    ``error: <message>`` on stderr, never a traceback; the error's class gives the status
    (:func:`~specband.core.exitcodes.exit_code_for`), a usage error exits 2.

    Args:
        argv: arguments without the program name; ``None`` reads ``sys.argv``.

    Raises:
        SystemExit: always, with the exit status.
    """
    received: int | None = None

    def on_signal(signum: int, frame: object) -> None:
        nonlocal received
        received = signum
        raise KeyboardInterrupt

    # Ctrl-C and SIGTERM unwind the command (so that half-written temporary files are
    # removed) and say why it stopped; typer alone turns Ctrl-C into a silent exit 130 and
    # SIGTERM would kill the process on the spot. Commands that handle the signals themselves
    # (sweep, launch) replace these handlers while they run.
    installed = {}
    for signum, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(signum) is default:
            installed[signum] = default
            signal.signal(signum, on_signal)
    try:
        result = _run(list(argv) if argv is not None else sys.argv[1:])
    except SpecbandError as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        raise SystemExit(exit_code_for(exc)) from None
    except KeyboardInterrupt:
        # the sweep and launch install their own handlers: they record the signal
        _stopped_by(received or received_signal())
    except Exception as exc:
        _usage_error(exc)
    finally:
        for signum, default in installed.items():
            signal.signal(signum, default)
    if result == ExitCode.INTERRUPTED and (received or received_signal()) is not None:
        _stopped_by(received or received_signal())  # typer's silent 130 for a KeyboardInterrupt
    raise SystemExit(result if isinstance(result, int) else ExitCode.OK)


def _usage_error(exc: Exception) -> None:
    """Exit on typer's (click's) usage errors (BadParameter, MissingParameter, NoSuchOption,
    ...) with one ``error:`` line; anything else is re-raised."""
    format_message = getattr(exc, "format_message", None)
    exit_code = getattr(exc, "exit_code", None)
    if format_message is None or not isinstance(exit_code, int):
        raise exc
    if type(exc).__name__ == "Abort":
        print("error: interrupted", file=sys.stderr)
        raise SystemExit(ExitCode.INTERRUPTED) from None
    if type(exc).__name__ == "NoArgsIsHelpError":  # a group alone: the help text
        text = str(format_message())
        if text.strip():
            print(text, file=sys.stderr)
        raise SystemExit(exit_code) from None
    message = " ".join(str(format_message()).split())
    if message:
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        print(f"error: {one_line(message)}{hint}", file=sys.stderr)
    raise SystemExit(exit_code) from None


def _stopped_by(signum: int | None) -> None:
    """Say why the command stopped and exit: 143 for SIGTERM, 130 for Ctrl-C."""
    if signum == signal.SIGTERM:
        print("error: terminated", file=sys.stderr)
        raise SystemExit(ExitCode.TERMINATED) from None
    print("error: interrupted", file=sys.stderr)
    raise SystemExit(ExitCode.INTERRUPTED) from None
