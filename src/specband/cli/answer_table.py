"""How ``recommend``, ``launch --dry-run`` and ``probe`` print the one-table answer
(:class:`specband.deploy.table.AnswerTable`): on stderr a title line (what the figures rest on),
one row per batch size (config, power limit, tok/s with its 95 % interval, utilisation of that
limit, J/token with its interval, where the figures come from), why a row misses the band and
the warnings; on stdout the commands to type (:meth:`~specband.deploy.table.AnswerTable.commands`:
for one batch size the ``sudo nvidia-smi -pl W`` line when a limit was picked, then the flags,
as ``recommend`` always printed them). ``--explain`` adds every note behind the answer;
``--format json`` prints the machine form instead (it carries the notes too).

Plain text (no rich): a cold ``recommend`` stays fast.
"""

from __future__ import annotations

import json

from specband.cli import COMMANDS
from specband.cli.output import note, say
from specband.deploy.jointpick import Figure
from specband.deploy.table import AnswerTable, TableRow
from specband.engines.base import default_engine

__all__ = ["print_answer_table", "print_table_lines", "table_json", "table_lines"]

#: The columns, in order.
COLUMNS = ("bs", "config", "limit", "tok/s per request [95 %]", "utilisation", "J/token [95 %]", "from")


def _number(value: float, digits: int) -> str:
    """``value`` with ``digits`` significant digits (trailing zeros kept), or one decimal from 100 up."""
    if abs(value) >= 100:
        return f"{value:.1f}"
    return f"{value:#.{digits}g}".rstrip(".")


def _figure(fig: Figure | None, digits: int) -> str:
    if fig is None:
        return "-"
    text = _number(fig.value, digits)
    if fig.lo95 is not None and fig.hi95 is not None:
        text += f" [{_number(fig.lo95, digits)}, {_number(fig.hi95, digits)}]"
    return text


def _utilisation(row: TableRow) -> str:
    if row.utilization is None:
        return "- (no power)"
    where = "in band" if row.in_band else "below" if row.utilization.value < 0.95 else "above"
    capped = " (capped)" if row.joint is not None and row.joint.chosen.capped else ""
    return f"{row.utilization.value:.3f} {where}{capped}"


def _sources(row: TableRow) -> str:
    figures = [f for f in (row.speed_tok_s, row.utilization, row.joules_per_token) if f is not None]
    words = list(dict.fromkeys(f.source for f in figures)) or ["-"]
    if len(words) > 1 and row.speed_tok_s is not None:
        text = f"tok/s {row.speed_tok_s.source}, power {row.utilization.source if row.utilization else '-'}"
    else:
        text = words[0]
    basis = "serving power" if row.power_basis == "serving" else "decode window"
    runs = "" if row.runs is None else f", {row.runs} run{'s' if row.runs != 1 else ''}"
    return f"{text}, {basis}{runs}"


def _cells(row: TableRow) -> tuple[str, ...]:
    limit = "-" if row.power_limit_w is None else f"{row.power_limit_w:g} W"
    measured = row.measured_batch_size
    return (
        str(row.batch_size) + ("" if measured in (None, row.batch_size) else f"~{measured}"),
        str(row.action) + (" now" if row.role == "current" else ""),
        limit,
        _figure(row.speed_tok_s, 4),
        _utilisation(row),
        _figure(row.joules_per_token, 3),
        _sources(row),
    )


def table_lines(table: AnswerTable) -> list[str]:
    """The title, the header row and one line per row, columns padded to their widest cell
    (a batch size read from another measured one is shown ``12~16``)."""
    cells = [COLUMNS, *(_cells(row) for row in table.rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    right = {0, 2}
    lines = [table.header]
    for c in cells:
        parts = [c[i].rjust(widths[i]) if i in right else c[i].ljust(widths[i]) for i in range(len(COLUMNS))]
        lines.append("  " + "  ".join(parts).rstrip())
    return lines


def _hints(table: AnswerTable) -> list[str]:
    """What to add to the commands: the draft's path the flags lack, and one limit for a server
    whose batch size moves across rows that ask for different limits."""
    out = []
    if len(table.groups()) == 1 and not table.picks[0].flags:
        out.append("the pick is the non-speculative baseline (0,0,0): launch without speculative flags")
    if table.draft_model is None and any(row.flags for row in table.picks):
        used = f" (the figures are of {table.data_draft})" if table.data_draft else ""
        engine = table.engine or default_engine()
        out.append(
            f"{engine.display_name} needs {engine.draft_flag} for EAGLE3: pass --draft-model PATH to include it{used}"
        )
    trees = [row.batch_size for row in table.picks if row.action.speculative_eagle_topk > 1]
    if trees:
        sizes = ", ".join(map(str, trees))
        out.append(
            f"bs {sizes}: a tree config (topk > 1): `specband schedule` and vLLM switch chain configs (topk 1) only, "
            "so their pick differs there (`specband schedule` prints the best chain beside the best tree and the "
            "reward it gives up)"
        )
    if table.limits_differ:
        highest = max(row.power_limit_w or 0.0 for row in table.picks)
        line = (
            f"one GPU holds one limit at a time: for a server whose batch size moves across these rows, {highest:g} W "
            "(the highest) slows none of them down, and the others then draw below the band"
        )
        if table.mix_answers:
            mix = ",".join(f"{row.batch_size}:1" for row in table.picks)
            line += f"; `specband recommend --batch-mix {mix}` picks one limit for the mix"
        if "govern" in COMMANDS:  # the governor moves the limit per tier while the server runs
            line += "; `specband govern` moves it with the running batch size (see `specband govern --help`)"
        out.append(line)
    return out


def table_json(table: AnswerTable) -> dict[str, object]:
    """``--format json``: for one batch size the answer's own JSON (as before) with the row under
    ``table``; for several, :meth:`~specband.deploy.table.AnswerTable.to_json`."""
    if len(table.rows) == 1:
        row = table.rows[0]
        extra = {"commands": table.commands(), "warnings": list(table.warnings)}
        return {**row.answer.to_json(), "table": {**row.to_json(), **extra}}
    return table.to_json()


def print_table_lines(table: AnswerTable, *, explain: bool = False, table_err: bool = True) -> None:
    """The table on stderr (``table_err``; ``probe`` prints its report on stdout), why a row
    misses the band, the warnings and, with ``explain``, every note behind it (``launch``
    prints its commands itself)."""
    for line in table_lines(table):
        say(line, err=table_err)
    for row in table.rows:
        if row.shortfall:
            note(f"bs {row.batch_size}: {row.shortfall}")
    for line in table.warnings:
        note(line)
    if explain:
        for line in table.notes:
            note(line)


def print_answer_table(
    table: AnswerTable, output_format: str = "flags", *, explain: bool = False, table_err: bool = True
) -> None:
    """Print ``table`` (see the module docstring; ``table_err``: the table on stderr)."""
    if output_format == "json":  # what the answer rests on stays on stderr, as before the table
        for line in table.notes:
            note(line)
        print(json.dumps(table_json(table), indent=2))
        for line in _hints(table):
            note(line)
        return
    print_table_lines(table, table_err=table_err)
    for line in table.commands():
        say(line)
    for line in _hints(table):
        note(line)
    if explain:
        for line in table.notes:
            note(line)
