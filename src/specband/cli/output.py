"""How every command prints: one line per message, unprintable characters escaped.
Standard library only (a cold ``recommend`` imports it)."""

from __future__ import annotations

import sys

from specband.core.errors import one_line

__all__ = ["note", "print_power_label", "say", "warn"]


def say(text: str, *, err: bool = False) -> None:
    """Print ``text`` as one line (on stderr with ``err``), its unprintable characters
    escaped (:func:`specband.core.errors.one_line`): the one way every success, note and
    warning line that names a path or a value from the user is printed, so that a file
    name holding a newline cannot split it or pose as a second line."""

    print(one_line(text), file=sys.stderr if err else sys.stdout)


def note(message: str) -> None:
    """``note: <message>`` on stderr."""
    say(f"note: {message}", err=True)


def warn(message: str | None) -> None:
    """``warning: <message>`` on stderr (nothing for ``None``)."""
    if message is not None:
        say(f"warning: {message}", err=True)


def print_power_label(rows: object) -> None:
    """Label the printed band figures when the rows' power rests on no measurement
    (:func:`specband.sim.power.unmeasured_power_note`)."""
    from specband.sim.power import unmeasured_power_note  # lazy: off the cold path (recommend, --help)

    label = unmeasured_power_note(rows)  # type: ignore[arg-type]
    if label:
        say(label)  # it names the rows' hardware, read from a file
