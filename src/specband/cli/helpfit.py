"""``--help`` that fits the terminal without cutting a flag.

typer lays each options panel out as a rich table whose columns rich shrinks below their
longest word when the terminal is narrow, cutting flag names (``--one-launch-per-…``) and
the flags inside help texts with an ellipsis. :func:`install` wraps typer's panel printer
(``typer.rich_utils._print_options_panel``, typer 0.29) so that the panel's table gets
column widths that hold every word (:func:`specband.core.tables.fit_columns`), and where even
that cannot fit (a long flag, its value and the longest word of its help side by side),
each option is printed as its flags line with its help beneath, indented.

Imported only when a help text is printed (it loads rich).
"""

from __future__ import annotations

import io
from typing import Any

from specband.core.tables import fit_columns, longest_word

__all__ = ["install"]

#: Columns the help of one option is indented by when it goes beneath its flags.
INDENT = 4

#: The narrowest help column kept beside the flags (characters): a narrower one reads as a
#: few words a line, so the panel stacks its options (help beneath the flags) instead.
READABLE_HELP = 30

#: A panel title keeps ``╭─ `` before it and `` ──╮`` after it (a space and at least one
#: rule character besides the corner's); a longer title moves its tail into the panel.
TITLE_FRAME = 7


def install() -> None:
    """Replace typer's options-panel printer by :func:`_print_options_panel` (once)."""
    from typer import rich_utils

    if getattr(rich_utils._print_options_panel, "specband", False):
        return
    original = rich_utils._print_options_panel

    def print_options_panel(*, name: str, params: Any, ctx: Any, markup_mode: Any, console: Any) -> None:
        captured: list[Any] = []
        capture: Any = _Capture(captured)
        original(name=name, params=params, ctx=ctx, markup_mode=markup_mode, console=capture)
        for panel in captured:
            console.print(_fitted(panel, params, ctx, markup_mode, console))

    print_options_panel.specband = True  # type: ignore[attr-defined]
    rich_utils._print_options_panel = print_options_panel


class _Capture:
    """A console stand-in that keeps what typer prints (the panel) instead of printing it."""

    def __init__(self, into: list[Any]) -> None:
        self._into = into

    def print(self, renderable: Any, *args: Any, **kwargs: Any) -> None:
        self._into.append(renderable)


def _help_words(cell: Any) -> int:
    """The longest word of a help cell (typer's Markdown inside Columns, which rich cannot
    measure), from its text rendered on one long line."""
    from rich.console import Console

    text = io.StringIO()
    Console(file=text, width=10_000, color_system=None, legacy_windows=False).print(cell)
    return longest_word(text.getvalue())


def _measure(console: Any, cell: Any, *, whole: bool) -> int:
    """A flag column's cell: its one-line width (``whole``), else its longest word."""
    from rich.measure import Measurement

    measured = Measurement.get(console, console.options, cell)
    return measured.maximum if whole else measured.minimum


def _fitted(panel: Any, params: Any, ctx: Any, markup_mode: Any, console: Any) -> Any:
    """``panel`` (typer's options panel) with a table that fits ``console`` and leaves its
    help column at least :data:`READABLE_HELP` wide, or else its options stacked (flags,
    then the help beneath); a title too long for the panel's top rule keeps its head there
    and its tail as the panel's first line."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    table = panel.renderable
    if not isinstance(table, Table) or not table.columns:
        return panel
    tail = _fit_title(panel, console.width)
    width = console.width - 4  # the panel's border and padding
    *flag_columns, help_column = table.columns
    minimums: list[int | None] = [  # flag names on one line; the type column wraps between its words
        max((_measure(console, cell, whole=index < len(flag_columns) - 1) for cell in col.cells), default=0)
        for index, col in enumerate(flag_columns)
    ]
    minimums.append(max((_help_words(cell) for cell in help_column.cells), default=0))
    if fit_columns(table, width, minimums) and (help_column.width or 0) >= READABLE_HELP:
        body: list[Any] = [table]
    else:
        body = []
        for row in range(table.row_count):
            parts = [col_cells[row] for col_cells in (list(col.cells) for col in flag_columns)]
            line = Text(" ").join(p if isinstance(p, Text) else Text(str(p)) for p in parts if str(p).strip())
            body += [line, Padding(list(help_column.cells)[row], (0, 0, 0, INDENT))]
    panel.renderable = Group(*([Text(tail)] if tail else []), *body)
    return panel


def _fit_title(panel: Any, width: int) -> str:
    """Shorten ``panel``'s title (a str) to the words that fit its top rule of ``width``
    characters with :data:`TITLE_FRAME` around them, preferring a cut before a
    parenthesis; return the words cut off (``""`` when the whole title fits)."""
    title = panel.title
    if not isinstance(title, str) or len(title) + TITLE_FRAME <= width:
        return ""
    room = width - TITLE_FRAME
    cuts = [i for i, ch in enumerate(title) if ch == " " and i <= room]
    if not cuts:
        return ""  # not even the first word fits: rich shortens it
    parenthesis = [i for i in cuts if title[i + 1 : i + 2] == "("]
    cut = parenthesis[-1] if parenthesis else cuts[-1]
    panel.title = title[:cut]
    return title[cut + 1 :]
