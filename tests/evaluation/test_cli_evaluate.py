"""``specband evaluate`` through the real entry point."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specband.evaluation import holdout

from .conftest import MeanTablePolicy


@pytest.fixture
def table_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Evaluate the transparent test policy under every algorithm name (CLI plumbing tests)."""
    monkeypatch.setattr(holdout, "_default_factory", lambda name, seed: MeanTablePolicy(seed))


def test_json_on_bundled_data(run_cli: Callable[..., Any], table_policies: None) -> None:
    res = run_cli("evaluate", "--json", "--algo", "lookup_table", "--algo", "gbt", "--bootstrap", "50")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["algorithms"] == ["lookup_table", "gbt"]
    assert doc["holdout"]["kind"] == "trial" and doc["intervals"]["n_bootstrap"] == 50
    assert list(doc["features"]) == ["contract", "pre"]


def test_tables_and_report_folder(run_cli: Callable[..., Any], table_policies: None, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    res = run_cli(
        "evaluate", "--holdout", "none", "--algo", "cql", "--features", "pre", "--out", out, "--bootstrap", "20"
    )
    assert res.exit_code == 0, res.stderr
    assert "pre features - IN-SAMPLE" in res.stdout and "contract features" not in res.stdout
    assert f"wrote {out / 'report.md'}" in res.stdout
    assert (out / "utilization.png").stat().st_size > 10_000


def test_repeat_sweep_file(run_cli: Callable[..., Any], table_policies: None, repeat_sweep_path: Path) -> None:
    res = run_cli("evaluate", repeat_sweep_path, "--json", "--algo", "linucb", "--bootstrap", "20")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["holdout"]["kind"] == "repeat" and doc["holdout"]["splits"] == ["repeat=0", "repeat=1", "repeat=2"]
    assert [b["batch_size"] for b in doc["features"]["contract"]["batch_sizes"]] == [1, 4, 8, 16]
    assert doc["in_sample_fallback"] is None


@pytest.mark.parametrize(
    "args, message",
    [
        (["--holdout", "repeat"], "error: --holdout repeat: every row has repeat null"),
        (["--holdout", "fold"], "error: unknown holdout 'fold'"),
        (["--algo", "sarsa"], "error: unknown algorithm 'sarsa'"),
        (["--features", "post"], "error: unknown feature kind 'post'"),
        (["/nonexistent/sweep.jsonl"], "error: /nonexistent/sweep.jsonl: no such file"),
    ],
)
def test_bad_input_exits_2(run_cli: Callable[..., Any], table_policies: None, args: list[str], message: str) -> None:
    res = run_cli("evaluate", *args)
    assert res.exit_code == 2
    assert res.stderr.strip().startswith(message), res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""


def test_sglang_bench_file_without_energy(
    run_cli: Callable[..., Any], table_policies: None, write_jsonl: Callable[..., Path]
) -> None:
    speeds = {(0, 0, 0): 100.0, (3, 4, 8): 150.0, (3, 2, 4): 160.0}
    rows = [
        {
            "batch_size": bs,
            "steps": s,
            "topk": k,
            "num_draft_tokens": d,
            "acc_length": 1.0 if s == 0 else 2.0,
            "step_time": 0.01,
            "speed": v / bs,
            "completion_tokens": 512,
        }
        for bs in (1, 4)
        for (s, k, d), v in speeds.items()
    ]
    path = write_jsonl(rows, "bench.jsonl")
    res = run_cli("evaluate", path, "--json", "--algo", "gbt", "--features", "contract", "--bootstrap", "20")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["data"]["energy_measured"] is False and doc["holdout"]["kind"] == "none"
    for pick in doc["features"]["contract"]["picks"]:
        assert pick["pick"]["action"] == [3, 2, 4] and pick["utilization"] is None and pick["in_band"] is None
        assert pick["reward"]["estimate"] == pytest.approx(0.3)  # throughput only: (1.6 - 1) / 2
    assert doc["features"]["contract"]["summary"][0]["batch_sizes_in_band"] is None
    tables = run_cli("evaluate", path, "--algo", "gbt", "--features", "contract", "--bootstrap", "20")
    assert "rewards are throughput only" in tables.stdout


def _one_error_line(res: Any) -> str:
    """The single ``error: ...`` line of a refused call (exit 2, nothing on stdout, no traceback)."""
    assert res.exit_code == 2, (res.stdout, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert res.stdout == ""
    return lines[0]


def test_out_refuses_a_non_empty_folder_that_is_not_a_report(
    run_cli: Callable[..., Any], table_policies: None, tmp_path: Path
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my notes")
    (mine / "evaluation.json").write_text('{"schema": "someone-else/1"}')
    line = _one_error_line(run_cli("evaluate", "--algo", "gbt", "--bootstrap", "5", "--out", mine))
    assert line.startswith(f"error: --out {mine}: exists, is not empty and is not a specband report folder")
    assert (mine / "report.md").read_text() == "my notes"
    assert sorted(p.name for p in mine.iterdir()) == ["evaluation.json", "report.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no temp folder left


def test_out_replaces_a_previous_report_folder(
    run_cli: Callable[..., Any], table_policies: None, tmp_path: Path
) -> None:
    out = tmp_path / "rep"
    args = ("evaluate", "--holdout", "none", "--algo", "gbt", "--features", "contract", "--bootstrap", "5", "--out")
    assert run_cli(*args, out).exit_code == 0
    (out / "evaluation.json").write_text(json.dumps({"schema": "specband.evaluate/1", "stale": True}))
    res = run_cli(*args, out, "--seed", "3")
    assert res.exit_code == 0, res.stderr
    doc = json.loads((out / "evaluation.json").read_text())
    assert "stale" not in doc and doc["intervals"]["seed"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]


@pytest.mark.parametrize("value", ["", "  "])
def test_out_empty_name_is_refused(
    run_cli: Callable[..., Any], table_policies: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.chdir(tmp_path)
    line = _one_error_line(run_cli("evaluate", "--algo", "gbt", "--bootstrap", "5", "--out", value))
    assert line == "error: --out: empty"
    assert list(tmp_path.iterdir()) == []


def test_power_limit_option(run_cli: Callable[..., Any], table_policies: None, repeat_sweep_path: Path) -> None:
    """``--power-limit W`` (the name train and sweep use) overrides the rows' limit: halving
    it doubles the utilisation of the reference config at every batch size."""
    args = (
        "evaluate",
        repeat_sweep_path,
        "--json",
        "--holdout",
        "none",
        "--algo",
        "gbt",
        "--features",
        "contract",
        "--bootstrap",
        "5",
    )
    base = json.loads(run_cli(*args).stdout)
    res = run_cli(*args, "--power-limit", "40")  # half the rows' 80 W
    assert res.exit_code == 0, res.stderr
    half = json.loads(res.stdout)
    pairs = list(
        zip(base["features"]["contract"]["batch_sizes"], half["features"]["contract"]["batch_sizes"], strict=True)
    )
    assert len(pairs) == 4
    for a, b in pairs:
        assert b["reference_utilization"]["estimate"] == pytest.approx(2 * a["reference_utilization"]["estimate"])


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_power_limit_must_be_finite_and_positive(run_cli: Callable[..., Any], table_policies: None, value: str) -> None:
    line = _one_error_line(run_cli("evaluate", "--algo", "gbt", "--power-limit", value))
    assert line.startswith("error: --power-limit must be a power limit in W in [1, 2000], got ")


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--bootstrap", "0"],
            "error: Invalid value for '--bootstrap': Input should be greater than or equal to 1 "
            "(see 'specband evaluate --help')",
        ),
        (
            ["--bootstrap", "-3"],
            "error: Invalid value for '--bootstrap': Input should be greater than or equal to 1 "
            "(see 'specband evaluate --help')",
        ),
        (["--seed", "-1"], "error: --seed must be a whole number >= 0, got -1"),
    ],
)
def test_range_checks_are_one_error_line(
    run_cli: Callable[..., Any], table_policies: None, args: list[str], message: str
) -> None:
    assert _one_error_line(run_cli("evaluate", "--algo", "gbt", *args)) == message


def test_usage_error_is_one_error_line(run_cli: Callable[..., Any], table_policies: None) -> None:
    """A value typer itself cannot parse is one ``error:`` line too (the entry point's job)."""
    line = _one_error_line(run_cli("evaluate", "--bootstrap", "many"))
    assert "--bootstrap" in line


def test_help_shows_metavars(run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    res = run_cli("evaluate", "--help")
    assert res.exit_code == 0
    assert "Usage: specband evaluate [OPTIONS] [DATA]" in res.stdout
    for python_type in ("<str>", "<list[str]>", "<int", "<float>", "[data]"):
        assert python_type not in res.stdout, python_type
    for option in (
        "--holdout KIND",
        "--algo NAME",
        "--features KIND",
        "--out DIR",
        "--seed N",
        "--bootstrap N",
        "--power-limit W",
    ):
        flag, metavar = option.split()  # the rich help's columns: flag, then its metavar on the line
        assert re.search(rf"{flag}\s+{metavar}\s", res.stdout), option
