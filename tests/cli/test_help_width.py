"""Issue 21, item 5: a CLI a person can read. Every option is described and sits in a
panel, panels come in one order, and ``--help`` and the result tables fit the terminal
(``COLUMNS``) without cutting a flag or a triple: no printed line is longer than the
width, nothing is cut with an ellipsis, and every flag appears whole."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table
from typer.main import get_command

from specband.cli import COMMANDS, build_app
from specband.cli.params import PANEL_TITLES
from specband.optionspec import PANELS
from specband.tables import fit_columns, print_table

WIDTHS = (80, 60)
_ORDER = [PANEL_TITLES[key] for key in PANELS]


def _commands() -> dict[str, Any]:
    return dict(get_command(build_app()).commands)  # type: ignore[attr-defined]


def _params(command: Any) -> list[Any]:
    return [p for p in command.params if p.name != "help"]


def test_every_option_of_every_command_is_described_and_in_a_panel() -> None:
    commands = _commands()
    assert set(commands) == set(COMMANDS)
    for name, command in commands.items():
        for param in _params(command):
            assert (param.help or "").strip(), (name, param.opts)
            panel = getattr(param, "rich_help_panel", None)
            if param.param_type_name == "option":
                assert panel in PANEL_TITLES.values(), (name, param.opts, panel)
            else:  # an argument: a panel of ours, or typer's own "Arguments" panel
                assert panel is None or panel in PANEL_TITLES.values(), (name, param.opts, panel)


def test_each_command_lists_its_panels_in_the_one_order() -> None:
    for name, command in _commands().items():
        panels = [p.rich_help_panel for p in _params(command) if p.param_type_name == "option"]
        positions = [_ORDER.index(panel) for panel in panels]
        assert positions == sorted(positions), (name, panels)


def test_recommend_groups_the_pick_the_setup_the_model_and_the_output() -> None:
    command = _commands()["recommend"]
    by_panel: dict[str, list[str]] = {}
    for param in _params(command):
        by_panel.setdefault(param.rich_help_panel, []).append(param.opts[0])
    assert by_panel == {
        PANEL_TITLES["pick"]: ["--batch-size", "--state", "--max-speed-loss", "--batch-mix", "--batch-mix-from"],
        PANEL_TITLES["setup"]: [
            "--draft-model", "--target", "--gpu", "--target-config", "--draft-config", "--allow-transfer",
        ],
        PANEL_TITLES["model"]: ["--algo", "--models", "--data", "--trust-pickle", "--actions", "--allow-modified"],
        PANEL_TITLES["output"]: ["--format"],
    }  # fmt: skip


def _assert_fits(text: str, width: int) -> None:
    lines = text.splitlines()
    assert lines, "nothing printed"
    too_long = [line for line in lines if len(line) > width]
    assert too_long == [], f"{len(too_long)} lines over {width} columns: {too_long[:3]}"
    assert "…" not in text


def _flag_whole(flag: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_fits_the_terminal_and_shows_every_flag_whole(
    run_cli: Any, monkeypatch: pytest.MonkeyPatch, command: str, width: int
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    res = run_cli(command, "--help")
    assert res.exit_code == 0, res.stderr
    _assert_fits(res.stdout, width)
    for param in _params(_commands()[command]):
        for flag in (*param.opts, *param.secondary_opts):
            if flag.startswith("-"):
                assert _flag_whole(flag, res.stdout), (command, width, flag)


def test_the_longest_sweep_flags_are_whole_at_60_columns(run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    text = run_cli("sweep", "--help").stdout
    for flag in ("--one-launch-per-config", "--mem-fraction-static", "--allow-rope-mismatch", "--emulator-hardware"):
        assert _flag_whole(flag, text), flag
    # and the flags inside help texts
    assert _flag_whole("--server-command", text) and "vllm.entrypoints.openai.api_server" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_the_actions_table_fits_and_keeps_flags_and_triples_whole(
    run_cli: Any, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    res = run_cli("actions")
    assert res.exit_code == 0, res.stderr
    _assert_fits(res.stdout, width)
    for flag in ("--speculative-num-draft-tokens", "--speculative-eagle-topk", "--speculative-num-steps"):
        assert _flag_whole(flag, res.stdout)
    triples = re.findall(r"\(\d+,\d+,\d+\)", res.stdout)
    assert len(triples) == 19 and "(3,4,8)" in triples
    assert re.search(r"\(\d+, \d+, \d+\)|\[\d+, \d+, \d+\]", res.stdout) is None  # one spelling


@pytest.mark.parametrize("width", WIDTHS)
def test_the_evaluation_report_and_the_profiles_fit(run_cli: Any, monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    res = run_cli("evaluate", "--algo", "lookup_table", "--features", "contract", "--bootstrap", "50")
    assert res.exit_code == 0, res.stderr
    _assert_fits(res.stdout, width)
    assert "(3,2,4)" in res.stdout and re.search(r"\(\d+, \d+, \d+\)", res.stdout) is None
    res = run_cli("simulate", "--list-profiles")
    assert res.exit_code == 0, res.stderr
    _assert_fits(res.stdout, width)
    assert "rtx4060-laptop" in res.stdout and "a100-sxm4-80gb" in res.stdout


def test_the_schedule_tables_fit(run_cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    res = run_cli("recommend", "--batch-mix", "1:1,4:2,16:3")
    assert res.exit_code == 0, res.stderr
    table, flags = res.stdout.splitlines()[:-1], res.stdout.splitlines()[-1]
    _assert_fits("\n".join(table), 60)
    assert flags.startswith("--speculative-algorithm EAGLE3")  # the line to paste stays one line


def _words_of(table_text: str) -> set[str]:
    return {word for word in re.split(r"[\s│┃|]+", table_text) if word}


def test_fit_columns_wraps_between_words_and_never_cuts_one() -> None:
    table = Table(title="t")
    for header in ("flag", "help"):
        table.add_column(header)
    table.add_row("--speculative-num-draft-tokens", "the number of draft tokens, e.g. --speculative-eagle-topk 4")
    # words: 30 + 24 characters; padding 4 and borders 3: fits in 61, not in 60
    assert not fit_columns(table, 60)
    assert fit_columns(table, 64)
    console = Console(width=64, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 64
    assert {"--speculative-num-draft-tokens", "--speculative-eagle-topk"} <= _words_of(text)


def test_a_table_too_wide_for_its_longest_words_is_printed_as_blocks() -> None:
    table = Table(title="picks")
    for header in ("algorithm", "flags"):
        table.add_column(header)
    table.add_row("lookup_table", "--speculative-num-draft-tokens 4")
    assert not fit_columns(table, 44)  # words of 12 and 30 characters, padding and borders: 49
    console = Console(width=44, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_table(table, console)
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    assert lines == ["picks", "algorithm: lookup_table", "  flags: --speculative-num-draft-tokens 4"]


def _triples(text: str) -> list[str]:
    return re.findall(r"\(\d+,\d+,\d+\)", text)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_calibration_reports_fit_and_keep_every_triple(
    run_cli: Any, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    for against in ("published", "aic", "published-datacenter"):
        monkeypatch.delenv("COLUMNS", raising=False)
        wide = run_cli("simulate", "--calibration-report", "--against", against)
        monkeypatch.setenv("COLUMNS", str(width))
        narrow = run_cli("simulate", "--calibration-report", "--against", against)
        assert wide.exit_code == narrow.exit_code == 0, narrow.stderr
        assert max(len(line) for line in wide.stdout.splitlines()) > 80  # a file keeps one line per row
        _assert_fits(narrow.stdout, width)
        assert _triples(narrow.stdout) == _triples(wide.stdout), against  # none cut, none lost
        assert narrow.stdout.count("[MISSED]") == wide.stdout.count("[MISSED]"), against


def test_the_schedule_table_fits(run_cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    res = run_cli("schedule", "-e", "sglang", "--out", tmp_path / "s.json")
    assert res.exit_code == 0, res.stderr
    messages = ("wrote ", "sglang flags:")  # one line each, as every message (the flags to paste)
    table = [line for line in res.stdout.splitlines() if not line.startswith(messages)]
    _assert_fits("\n".join(table), 60)
    assert _triples(res.stdout)
