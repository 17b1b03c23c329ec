"""Issue 21: commands only parse and print, so no function in ``specband/cli/`` is longer
than 60 lines (its ``def`` line to its last line; nested functions are counted on their own
and inside the function holding them)."""

from __future__ import annotations

import ast
from pathlib import Path

import specband.cli

#: The most lines a function of ``specband/cli/`` may take (issue 21).
MAX_LINES = 60


def _function_lengths(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        (f"{path.name}:{node.lineno} {node.name}", node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None
    ]


def test_no_cli_function_is_longer_than_60_lines() -> None:
    files = sorted(Path(specband.cli.__file__).parent.glob("*.py"))
    lengths = [entry for path in files for entry in _function_lengths(path)]
    assert len(files) >= 10 and len(lengths) >= 50  # the walk saw the package
    too_long = {name: lines for name, lines in lengths if lines > MAX_LINES}
    assert too_long == {}


def test_the_count_includes_the_def_line_and_the_last_line(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n\n\ndef g():\n    pass\n")
    assert _function_lengths(tmp_path / "m.py") == [("m.py:1 f", MAX_LINES), (f"m.py:{MAX_LINES + 3} g", 2)]
