"""Tables that fit the terminal: column widths that wrap each cell between its words and
never cut a word (a flag, a triple, a path), or, where even that cannot fit, one block per
row. Rich's own table layout shrinks columns below their longest word when the terminal is
narrow and then cuts the words with an ellipsis; :func:`fit_columns` gives every column at
least its longest word and shares the rest of the width by what each column lacks.

The width is the console's: ``COLUMNS`` when set, else the terminal's, else 80. A pipe or a
file without ``COLUMNS`` gets one line per row (:func:`table_console`).

A cell may hold units that must stay on one line (a flag and its value, an estimate and its
interval): :func:`unit` joins a unit's words with no-break spaces, which :func:`print_table`
never breaks at and prints as plain spaces.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from specband.core.errors import one_line

__all__ = [
    "NO_BREAK",
    "fit_columns",
    "flag_units",
    "longest_word",
    "print_table",
    "table_console",
    "terminal_width",
    "text_table",
    "unit",
    "wrap_lines",
]

#: Joins the words of one unit in a cell (:func:`unit`); printed as a plain space.
NO_BREAK = "\u00a0"


def unit(text: str) -> str:
    """``text`` as one unbreakable unit for :func:`print_table` (``"--speculative-eagle-topk 1"``,
    ``"0.123 [0.070, 0.209]"``): its spaces become :data:`NO_BREAK`, so that the table wraps
    the cell only between units and prints the unit on one line with plain spaces."""
    return text.replace(" ", NO_BREAK)


def flag_units(args: Sequence[str]) -> str:
    """A command line's ``args`` as one cell text in which each ``--flag value`` pair is a
    :func:`unit` (``["--speculative-eagle-topk", "1"]`` never wraps between the two); a flag
    with no value, or a lone value, is a unit of its own."""
    units: list[str] = []
    for arg in args:
        if units and not arg.startswith("-") and units[-1].startswith("-") and NO_BREAK not in units[-1]:
            units[-1] += NO_BREAK + arg
        else:
            units.append(unit(arg))
    return " ".join(units)


def longest_word(text: str) -> int:
    """Characters of the longest whitespace-separated word of ``text`` (0 when empty); a
    :func:`unit` counts as one word."""
    return max((len(word) for word in re.split(r"[ \t\n\r\f\v]+", text)), default=0)


def _padding(table: Any, index: int) -> int:
    """The left + right padding of column ``index`` (as rich's Table lays it out)."""
    _top, right, _bottom, left = table.padding
    last = len(table.columns) - 1
    if table.collapse_padding and index > 0:
        left = max(0, left - right)
    if not table.pad_edge:
        left = left if index > 0 else 0
        right = right if index < last else 0
    return left + right


def fit_columns(table: Any, width: int, minimums: Sequence[int | None] | None = None) -> bool:
    """Fix the widths of ``table``'s columns so that it fits in ``width`` characters with no
    word cut: each column gets at least its longest word (or ``minimums[i]``, for cells
    whose words rich cannot measure, e.g. Markdown), and the rest of the width goes to the
    columns by how much each lacks of its one-line width.

    Args:
        table: a :class:`rich.table.Table` with its rows added.
        width: the characters it may take, borders included.
        minimums: the narrowest each column may be (content only, no padding); ``None``
            (for all, or for one column): the longest word of its cells.

    Returns:
        ``False`` (and ``table`` unchanged) when not even the longest words fit side by side;
        else ``True``.
    """
    from rich.console import Console
    from rich.measure import Measurement

    console = Console(width=max(width, 1))
    options = console.options
    lows, highs = [], []
    for index, column in enumerate(table.columns):
        cells = [column.header, *column.cells] if table.show_header else list(column.cells)
        measured = [Measurement.get(console, options, cell) for cell in cells if cell is not None]
        given = None if minimums is None else minimums[index]
        low = max((m.minimum for m in measured), default=0) if given is None else given
        high = max((m.maximum for m in measured), default=0)
        lows.append(max(low, 1))
        highs.append(max(high, low, 1))
    pads = [_padding(table, index) for index in range(len(table.columns))]
    room = width - table._extra_width - sum(pads)  # borders and the padding of every column
    if sum(lows) > room:
        return False
    if sum(highs) <= room:
        widths = highs
    else:
        spare = room - sum(lows)
        lacks = [high - low for low, high in zip(lows, highs, strict=True)]
        widths = [low + spare * lack // sum(lacks) for low, lack in zip(lows, lacks, strict=True)]
        for index in sorted(range(len(widths)), key=lambda i: lacks[i], reverse=True)[: room - sum(widths)]:
            widths[index] += 1  # the rounding's remainder, to the columns that lack most
    for column, column_width in zip(table.columns, widths, strict=True):
        column.width = column_width
        column.overflow = "fold"  # never reached for a word: every column holds its longest
    return True


def terminal_width() -> int | None:
    """The width a text report is laid out for: ``COLUMNS`` when set, else the terminal's
    when stdout is one; ``None`` (one line per row, as wide as it takes) for a pipe or file."""
    import os
    import shutil
    import sys

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[str]:
    """``headers`` and ``rows`` as the lines of a borderless table within ``width``
    characters (:func:`print_table`: wrapped between words, or one block per row)."""
    import io

    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_edge=False, header_style="", collapse_padding=True)
    for header in headers:
        table.add_column(header)
    for row in rows:
        table.add_row(*(one_line(str(cell)) for cell in row))  # a cell read from a file stays on its line
    text = io.StringIO()
    print_table(table, Console(file=text, width=width, color_system=None, highlight=False, legacy_windows=False))
    return [line.rstrip() for line in text.getvalue().splitlines()]


def wrap_lines(lines: Sequence[str], width: int | None, hang: int = 2) -> list[str]:
    """``lines`` with each one longer than ``width`` wrapped between words (a word longer
    than the width stays whole), its continuation indented ``hang`` more than the line;
    ``width`` ``None``: unchanged."""
    import textwrap

    if width is None:
        return list(lines)
    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out += textwrap.wrap(
            line.strip(),
            width,
            initial_indent=indent,
            subsequent_indent=indent + " " * hang,
            break_long_words=False,
            break_on_hyphens=False,
        )
    return out


def table_console(*, stderr: bool = False, piped_width: int | None = None) -> Any:
    """A rich console for a result table: the terminal's width (``COLUMNS`` when set); for
    a pipe or a file without ``COLUMNS``, ``piped_width`` columns, or (``None``, the default)
    no limit: one line per row, as wide as it takes."""
    import os
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if os.environ.get("COLUMNS", "").isdigit() or stream.isatty() else (piped_width or _UNLIMITED)
    return Console(stderr=stderr, width=width, soft_wrap=False)


#: The console width that stands for "no limit" (a pipe or a file keeps one line per row).
_UNLIMITED = 100_000


def print_table(table: Any, console: Any = None) -> None:
    """Print ``table`` within the console's width (:func:`fit_columns`); where not even its
    longest words fit side by side, each row is printed as a block of ``header: value``
    lines instead (wrapped between words). A :func:`unit` in a cell is never broken."""
    from rich.console import Console

    console = console or Console()
    columns = table.columns
    has_units = [any(isinstance(c, str) and NO_BREAK in c for c in col.cells) for col in columns]
    minimums = [
        max((longest_word(str(c)) for c in [col.header, *col.cells] if isinstance(c, str)), default=0)
        if units
        else None
        for col, units in zip(columns, has_units, strict=True)
    ]
    if fit_columns(table, console.width, minimums if any(has_units) else None):
        for col, units in zip(columns, has_units, strict=True):
            if units:  # wrapped here between units (rich would break a unit at its no-break spaces)
                col._cells = [_wrap_units(c, col.width) if isinstance(c, str) else c for c in col.cells]
        console.print(table)
        return
    _print_blocks(table, console)


def _wrap_units(text: str, width: int | None) -> str:
    """``text`` wrapped within ``width`` between its words and units (a unit stays whole), its
    no-break spaces printed as spaces."""
    import textwrap

    if NO_BREAK not in text:
        return text
    lines = textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) if width else [text]
    return "\n".join(lines).replace(NO_BREAK, " ")


def _print_blocks(table: Any, console: Any) -> None:
    """``table`` as one block per row: its title, then per row ``header: value`` lines."""
    from rich.padding import Padding
    from rich.text import Text

    if table.title:
        console.print(Text(str(table.title)))
    headers = [str(column.header) for column in table.columns]
    cells = [list(column.cells) for column in table.columns]
    for row in range(table.row_count):
        for index, header in enumerate(headers):
            value = cells[index][row]
            if not str(value).strip():
                continue  # an empty cell (e.g. a name not repeated under itself)
            if isinstance(value, str) and NO_BREAK in value:
                indent = 0 if index == 0 else 2
                value = _wrap_units(f"{header}: {value}", console.width - indent)
                console.print(Padding(Text(value), (0, 0, 0, indent), expand=False))
                continue
            line = Text(f"{header}: ") + (value if isinstance(value, Text) else Text(str(value)))
            console.print(Padding(line, (0, 0, 0, 0 if index == 0 else 2), expand=False))
    if table.caption:
        console.print(Text(str(table.caption)))
