"""The ``specband`` command (typer), also ``python -m specband``.

Commands live in one module per area (``core``: train/recommend/actions; ``evaluate``;
``harness``: sweep/emulate/import-bench; ``sim``: simulate; ``launch``), each with a
``register(app)`` function. Modules import only typer and the standard library at the
top, so a cold ``specband recommend`` stays fast; heavy libraries load inside commands.

Errors: a :class:`~specband.errors.SpecbandError` prints ``error: <message>`` on one line
to stderr and exits with status 2, without a traceback; usage errors also exit 2.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

import typer

from specband.errors import SpecbandError

app = typer.Typer(
    name="specband",
    help="Pick sglang EAGLE3 speculative-decoding flags that keep GPU energy utilisation "
    "in a 95-98 % band while decoding fast.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root() -> None:
    """specband: energy-band-aware EAGLE3 flags for sglang."""


def _register_all() -> None:
    from specband.cli import core, doctor, evaluate, harness, launch, sim

    for module in (core, evaluate, harness, sim, launch, doctor):
        module.register(app)
    from specband.cli import schedule

    schedule.register(app)


_register_all()


def main(argv: Sequence[str] | None = None) -> None:
    """Run the CLI and exit: 0 on success, 2 on bad input, 130 on Ctrl-C, 143 on SIGTERM.

    Bad input, whether a :class:`~specband.errors.SpecbandError` from a command or a usage
    error found while parsing options (unknown option, missing or out-of-range value), is
    one line ``error: <message>`` on stderr with exit status 2, never a traceback.

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
        result = app(
            args=list(argv) if argv is not None else sys.argv[1:], prog_name="specband", standalone_mode=False
        )
    except SpecbandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        _stopped_by(received)
    except Exception as exc:
        # typer's (click's) usage errors: BadParameter, MissingParameter, NoSuchOption, ...
        format_message = getattr(exc, "format_message", None)
        exit_code = getattr(exc, "exit_code", None)
        if format_message is None or not isinstance(exit_code, int):
            raise
        if type(exc).__name__ == "Abort":
            print("error: interrupted", file=sys.stderr)
            raise SystemExit(130) from None
        if type(exc).__name__ == "NoArgsIsHelpError":  # `specband` alone: the help text
            text = str(format_message())
            if text.strip():
                print(text, file=sys.stderr)
            raise SystemExit(exit_code) from None
        message = " ".join(str(format_message()).split())
        if message:
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            print(f"error: {message}{hint}", file=sys.stderr)
        raise SystemExit(exit_code) from None
    finally:
        for signum, default in installed.items():
            signal.signal(signum, default)
    if received is not None and result == 130:
        _stopped_by(received)
    raise SystemExit(result if isinstance(result, int) else 0)


def _stopped_by(signum: int | None) -> None:
    """Say why the command stopped and exit: 143 for SIGTERM, 130 for Ctrl-C."""
    if signum == signal.SIGTERM:
        print("error: terminated", file=sys.stderr)
        raise SystemExit(143) from None
    print("error: interrupted", file=sys.stderr)
    raise SystemExit(130) from None
