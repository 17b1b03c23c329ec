"""The ``specband`` command (typer), also ``python -m specband``.

Commands live in one module per area (``core``: train/recommend/actions; ``evaluate``;
``harness``: sweep/emulate/import-bench; ``sim``: simulate; ``launch``), each with a
``register(app)`` function. Modules import only typer and the standard library at the
top, so a cold ``specband recommend`` stays fast; heavy libraries load inside commands.

Errors: a :class:`~specband.errors.SpecbandError` prints ``error: <message>`` on one line
to stderr and exits with status 2, without a traceback; usage errors also exit 2.
"""

from __future__ import annotations

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
    from specband.cli import core, evaluate, harness, launch, sim

    for module in (core, evaluate, harness, sim, launch):
        module.register(app)


_register_all()


def main(argv: Sequence[str] | None = None) -> None:
    """Run the CLI and exit: 0 on success, 2 on bad input (usage error or
    :class:`~specband.errors.SpecbandError`), 130 on Ctrl-C.

    Args:
        argv: arguments without the program name; ``None`` reads ``sys.argv``.

    Raises:
        SystemExit: always, with the exit status.
    """
    try:
        app(args=list(argv) if argv is not None else None, prog_name="specband")
    except SpecbandError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
