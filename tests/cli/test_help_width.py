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
from specband.cli.helpfit import READABLE_HELP
from specband.cli.params import PANEL_TITLES
from specband.core.optionspec import PANELS
from specband.core.tables import NO_BREAK, fit_columns, flag_units, print_table, unit

WIDTHS = (80, 60)
LAYOUT_WIDTHS = (60, 80, 120)
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


def test_every_help_text_reads_as_a_sentence() -> None:
    """Issue 37: a help text built from parts read "instead of a policy,'s acceptance"; no part
    may end in punctuation before a possessive, a doubled space or a doubled comma."""
    bad = re.compile(r"[,;:.)\]]'s\b|  |,,|\s,")
    found = [
        (name, param.opts[0], param.help)
        for name, command in _commands().items()
        for param in _params(command)
        if bad.search(param.help or "")
    ]
    assert found == []
    launch = {p.opts[0]: p.help for p in _params(_commands()["launch"])}
    assert launch["--acceptance-from"].startswith(
        "Fit the acceptance (target, draft, workload) of a simulated first guess for --target/--draft on --gpu "
        "PROFILE (used instead of a policy) to measured accept lengths: "
    )


def test_recommend_groups_the_pick_the_setup_the_model_and_the_output() -> None:
    command = _commands()["recommend"]
    by_panel: dict[str, list[str]] = {}
    for param in _params(command):
        by_panel.setdefault(param.rich_help_panel, []).append(param.opts[0])
    assert by_panel == {
        PANEL_TITLES["pick"]: ["--batch-size", "--state", "--max-speed-loss", "--batch-mix", "--batch-mix-from"],
        PANEL_TITLES["setup"]: [
            "--draft-model", "--target", "--gpu", "--target-config", "--draft-config", "--acceptance-from",
            "--allow-transfer", "--engine", "--prompt-tokens", "--output-tokens",
        ],
        PANEL_TITLES["model"]: ["--algo", "--models", "--data", "--trust-pickle", "--actions", "--allow-modified"],
        PANEL_TITLES["output"]: ["--format", "--explain"],
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
    # the table goes to stderr with the notes (which are one line each, however long)
    table = [line for line in res.stderr.splitlines() if not line.startswith("note: ")]
    _assert_fits("\n".join(table), 60)
    (flags,) = res.stdout.splitlines()
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
    messages = ("wrote ", "sglang flags:", "written for ")  # one line each, as every message (the flags to paste)
    table = [line for line in res.stdout.splitlines() if not line.startswith(messages)]
    _assert_fits("\n".join(table), 60)
    assert _triples(res.stdout)


def _description_starts(text: str) -> list[tuple[int, int, str]]:
    """Per line inside an options panel: (the column its description text starts at, the
    panel's inner right edge, the line). The description is the text after the line's last
    run of two or more spaces (table layout), or the whole text (a stacked line)."""
    out = []
    for line in text.splitlines():
        if not line.startswith("│ ") or not line.rstrip().endswith("│"):
            continue
        inner = line.rstrip()[:-1].rstrip()
        gaps = list(re.finditer(r" {2,}", inner[2:]))
        start = gaps[-1].end() + 2 if gaps else 2
        out.append((start, len(line.rstrip()) - 2, line))
    return out


@pytest.mark.parametrize("width", LAYOUT_WIDTHS)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_panels_keep_a_readable_description_column_or_stack(
    run_cli: Any, monkeypatch: pytest.MonkeyPatch, command: str, width: int
) -> None:
    """Tester's finding (COLUMNS=60: schedule's Pick, launch's Telemetry, sweep's Emulator;
    80: sweep's Grid kept a 17-24 character description column): every description gets
    at least READABLE_HELP columns, beside its flags or beneath them; no title touches the
    panel's corner."""
    monkeypatch.setenv("COLUMNS", str(width))
    text = run_cli(command, "--help").stdout
    _assert_fits(text, width)
    narrow = [line for start, edge, line in _description_starts(text) if edge - start < READABLE_HELP]
    assert narrow == [], f"{command} at {width}: {narrow[:3]}"
    for line in text.splitlines():
        if line.startswith("╭─ "):
            assert re.search(r" ──+╮$", line), (command, width, line)


def test_a_narrow_terminal_stacks_the_panels_that_had_a_narrow_column(
    run_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    text = run_cli("schedule", "--help").stdout
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("╭─ Pick"))
    assert lines[at + 1].rstrip("│ ") == "│ --batch-sizes N,N,..."  # flags alone on their line
    assert lines[at + 2].startswith("│     Comma-separated batch sizes to schedule.")  # the help beneath
    model = next(line for line in lines if line.startswith("╭─ Model"))
    assert model.startswith("╭─ Model ─") and "(the policy asked, or the simulated GPU and pair)" in text


_FLAG_VALUE = re.compile(r"(--speculative-[a-z-]+)(\s*│?\s*)(\S+)")


@pytest.mark.parametrize("width", LAYOUT_WIDTHS)
def test_the_actions_table_never_splits_a_flag_from_its_value(
    run_cli: Any, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    """Tester's finding at 80 columns: ``--speculative-eagle-topk │ 1`` (value on the next line)."""
    monkeypatch.setenv("COLUMNS", str(width))
    text = run_cli("actions").stdout
    _assert_fits(text, width)
    pairs = re.findall(r"--speculative-[a-z-]+ \S+", text)
    assert len(pairs) == 18 * 4  # every flag of the 18 speculative actions, with its value on its line
    for line in text.splitlines():
        assert not re.search(r"--speculative-[a-z-]+\s*│?$", line.rstrip("│ ")), line
    assert NO_BREAK not in text


def test_a_pipe_keeps_one_line_per_row(run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without COLUMNS, a pipe or a file is not wrapped: each row of actions and of evaluate's
    tables is one line, whatever its width, and an estimate stays beside its interval."""
    monkeypatch.delenv("COLUMNS", raising=False)
    rows = [line for line in run_cli("actions").stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 19 and all("--speculative-num-draft-tokens" in row for row in rows[1:])
    res = run_cli("evaluate", "--algo", "lookup_table", "--features", "contract", "--bootstrap", "50")
    assert res.exit_code == 0, res.stderr
    table_rows = [line for line in res.stdout.splitlines() if line.startswith("│")]
    assert table_rows and all(line.rstrip().endswith("│") for line in table_rows)  # no row continues
    assert not re.search(r"\d \[[\d.-]+,\s*(│.*)?$", res.stdout, re.M)


@pytest.mark.parametrize("width", LAYOUT_WIDTHS)
def test_evaluate_never_splits_an_estimate_from_its_interval(
    run_cli: Any, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    res = run_cli("evaluate", "--algo", "lookup_table", "--features", "contract", "--bootstrap", "50")
    assert res.exit_code == 0, res.stderr
    _assert_fits(res.stdout, width)
    intervals = re.findall(r"\d\.\d+ \[\d\.\d+, \d\.\d+\]", res.stdout)
    assert len(intervals) >= 8  # reward, regret, utilisation, oracle, reference... each whole
    for line in res.stdout.splitlines():
        assert not re.search(r"\d\.\d+ \[\d\.\d+,\s*(│.*)?$", line), line  # cut after the low end
    assert re.search(r"band: (below|above|in band)$|│ (below|above|in band) ", res.stdout, re.M)
    assert not re.search(r"band: out$|│ out ", res.stdout, re.M)


def test_print_table_wraps_between_units_only() -> None:
    table = Table(title="t")
    table.add_column("flags")
    cell = flag_units(["--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "1", "--enable-x"])
    assert cell.count(NO_BREAK) == 2 and unit("0.1 [0.0, 0.2]") == "0.1\u00a0[0.0,\u00a00.2]"
    table.add_row(cell)
    console = Console(width=34, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_table(table, console)
    lines = [line.strip("│ ") for line in console.export_text().splitlines() if line.startswith("│")]
    assert lines == ["--speculative-algorithm EAGLE3", "--speculative-eagle-topk 1", "--enable-x"]
