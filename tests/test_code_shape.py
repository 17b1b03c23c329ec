"""The shape of the source tree: no module under src/specband grows past 800 lines (issue 21:
a file that long holds more than one job; split it at its seams, as emulator/server.py,
harness/server.py and harness/sweep.py were)."""

from __future__ import annotations

from pathlib import Path

#: The most lines one module may hold (``wc -l``).
MAX_MODULE_LINES = 800
SRC = Path(__file__).resolve().parents[1] / "src" / "specband"


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def test_no_module_is_over_800_lines() -> None:
    modules = sorted(SRC.rglob("*.py"))
    assert len(modules) > 100  # the package itself, not an empty or wrong folder
    too_long = {str(p.relative_to(SRC)): n for p in modules if (n := _lines(p)) > MAX_MODULE_LINES}
    assert too_long == {}, f"split these at their seams (at most {MAX_MODULE_LINES} lines each): {too_long}"


def test_the_line_count_is_wc_l(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert _lines(path) == MAX_MODULE_LINES + 1
    path.write_text("x = 1\ny = 2")  # a last line without its newline is not counted, as wc -l
    assert _lines(path) == 1
