"""The shape of the source tree (issue 21): no module under src/specband grows past 800 lines
(a file that long holds more than one job; split it at its seams, as emulator/server.py,
harness/server.py, harness/sweep.py and recommend.py were), and no import circle."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def _import_cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(imports.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return sorted(cycles)


def test_the_cycle_finder_finds_a_cycle() -> None:
    imports = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _import_cycles(imports) == [["a", "b", "c"]]
    assert _import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back_through_others() -> None:
    # issue 21: 0 import circles, counting function-local and TYPE_CHECKING imports (grimp's
    # graph, the one import-linter checks the layers on); the floors themselves are the
    # import-linter contracts in pyproject.toml, run by `lint-imports` in CI
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (the lint extra)")
    graph = grimp.build_graph("specband")
    imports = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert len(imports) > 100
    assert _import_cycles(imports) == []
