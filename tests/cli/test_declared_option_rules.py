"""The rules every option gets from its declaration (:func:`specband.cli.params.check_values`,
applied where the CLI builds a request, whichever parser read the line): a path or a name of
a file, folder, model or profile has no part over 230 bytes; a string is not empty; a float
is finite and within its bounds. One ``error:`` line each, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import specband.cli

LONG = "x" * 300
TOO_LONG = f"{LONG[:37]}...: file name too long (300 bytes; at most 230)"
SWEEP = ("sweep", "--dry-run", "--target", "m")


def _one_error_line(run_cli: Any, args: tuple[str, ...]) -> str:
    res = run_cli(*args)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.stderr
    assert res.stdout == "" and list(Path().iterdir()) == [], res.stdout
    return lines[0]


@pytest.fixture(autouse=True)
def _in_empty_folder(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("recommend", "-b", "16", "--models", LONG), "--models"),
        (("recommend", "-b", "16", "--data", LONG), "--data"),
        (("recommend", "-b", "16", "--gpu", LONG), "--gpu"),
        (("recommend", "-b", "16", "--target", LONG), "--target"),
        (("recommend", "-b", "16", "--draft-model", LONG), "--draft-model"),
        (("recommend", "-b", "16", "--gpu", "h100-sxm", "--target-config", LONG), "--target-config"),
        (("recommend", "-b", "16", "--models", f"org/{LONG}"), "--models"),  # a hub id's part too
        (("simulate", "--out", "x", "--target-config", LONG), "--target-config"),
        (("simulate", "--out", "x", "--profile", LONG), "--profile"),
        (("schedule", "-e", "sglang", "--models", LONG), "--models"),
        (("launch", "--dry-run", "--target", LONG), "--target"),
        (("train", LONG), "DATA"),
        (("evaluate", LONG), "DATA"),
        (("sweep", "--dry-run", "--target", LONG), "--target"),
    ],
)
def test_a_name_over_255_bytes_is_one_error_line(run_cli: Any, args: tuple[str, ...], option: str) -> None:
    assert _one_error_line(run_cli, args) == f"error: {option} {TOO_LONG}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("recommend", "-b", "16", "--gpu", ""), "--gpu: empty; give a GPU profile name"),
        (("recommend", "-b", "16", "--gpu", " "), "--gpu: empty; give a GPU profile name"),
        (("recommend", "-b", "16", "--models", ""), "--models: empty; give an artifact folder or hub id"),
        (("recommend", "-b", "16", "--data", ""), "--data: empty; give a sweep file or folder"),
        (
            ("recommend", "-b", "16", "--gpu", "h100-sxm", "--target-config", ""),
            "--target-config: empty; give a config.json path or a bundled name",
        ),
        (("recommend", "-b", "16", "--target", ""), "--target: empty; give a model path or hub id"),
        (("simulate", "--out", "x", "--profile", ""), "--profile: empty; give a GPU profile name"),
        ((*SWEEP, "--emulator-hardware", ""), "--emulator-hardware: empty; give a GPU profile name"),
        ((*SWEEP, "--hardware", ""), "--hardware: empty"),
        (("schedule", "-e", "sglang", "--models", ""), "--models: empty; give an artifact folder or hub id"),
    ],
)
def test_an_empty_value_is_one_error_line(run_cli: Any, args: tuple[str, ...], message: str) -> None:
    assert _one_error_line(run_cli, args).startswith(f"error: {message}")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("schedule", "-e", "sglang", "--margin", "inf"), "--margin: must be a finite number, got inf"),
        (("schedule", "-e", "sglang", "--margin", "1e400"), "--margin: must be a finite number, got inf"),
        (("schedule", "-e", "sglang", "--margin", "nan"), "--margin: must be a finite number, got nan"),
        (("recommend", "-b", "16", "--max-speed-loss", "nan"), "--max-speed-loss: must be a finite number, got nan"),
        ((*SWEEP, "--launch-timeout", "nan"), "--launch-timeout: must be a finite number, got nan"),
        ((*SWEEP, "--request-timeout", "nan"), "--request-timeout: must be a finite number, got nan"),
        ((*SWEEP, "--launch-timeout", "0"), "--launch-timeout must be > 0 s, got 0.0"),
        ((*SWEEP, "--request-timeout", "-1"), "--request-timeout must be > 0 s, got -1.0"),
        (
            ("recommend", "-b", "16", "--max-speed-loss", "2"),
            "Invalid value for '--max-speed-loss': Input should be less than or equal to 0.99",
        ),
        (
            ("recommend", "-b", "16", "--max-speed-loss", "-0.5"),
            "Invalid value for '--max-speed-loss': Input should be greater than or equal to 0.0",
        ),
    ],
)
def test_a_float_is_finite_and_in_its_bounds(run_cli: Any, args: tuple[str, ...], message: str) -> None:
    assert _one_error_line(run_cli, args) == f"error: {message}"


def test_a_batch_size_above_the_bound_says_the_number_not_a_python_name(run_cli: Any) -> None:
    line = _one_error_line(run_cli, (*SWEEP, "--batch-sizes", "9999999"))
    assert "batch size 9999999 is above 1048576 (2**20), the largest batch size specband accepts" in line
    assert "specband.core.limits" not in line


@pytest.mark.parametrize(
    "args",
    [
        ["-b", "16", "--gpu", ""],
        ["-b", "16", "--models", LONG],
        ["-b", "16", "--max-speed-loss", "nan"],
        ["-b", "16", "--max-speed-loss", "1e400"],
        ["-b", "16", "--max-speed-loss", "2"],
    ],
)
def test_the_fast_path_and_typer_give_the_same_line(run_cli: Any, monkeypatch: Any, args: list[str]) -> None:
    fast = run_cli("recommend", *args)
    monkeypatch.setattr(specband.cli, "FAST_COMMANDS", frozenset())
    typer_only = run_cli("recommend", *args)
    assert fast.exit_code == 2
    assert (fast.exit_code, fast.stdout, fast.stderr) == (typer_only.exit_code, typer_only.stdout, typer_only.stderr)


def test_a_path_option_still_reaches_the_request_as_a_path(run_cli: Any, tmp_path: Path) -> None:
    from specband.cli.params import check_values
    from specband.deploy.recommend import RecommendRequest

    values = check_values(RecommendRequest, {"models": "m", "data": None, "target": "org/name"})
    assert values == {"models": Path("m"), "data": None, "target": "org/name"}


def test_a_profile_file_whose_base_is_over_255_bytes_is_an_unknown_profile(run_cli: Any, tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(
        '[hardware]\nhardware = "h"\npower_limit_w = 100\nvram_mb = 1000\nmem_bandwidth_gbs = 100\n'
        f'peak_tflops = 10\nidle_power_w = 10\nbase = "{LONG}"\n'
    )
    res = run_cli("simulate", "--out", "o.jsonl", "--profile", str(profile))
    assert res.exit_code == 2 and len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith(f"error: {profile}: field 'hardware.base': unknown profile '{LONG}'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.toml"]
