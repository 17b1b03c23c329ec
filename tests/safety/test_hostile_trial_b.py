"""Regression tests of the hostile trial's second half (issue 30 item 8; the rows' ids are the
trial's, /work/shared/qa/hostile-trial.md): each input is one ``error:`` line or handled."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def _one_line(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    return lines[0]


DATA_COMMANDS = [
    ("recommend", "-b", "1"),
    ("launch", "--target", "m", "--draft", "d", "-b", "1", "--allow-transfer", "--dry-run"),
    ("schedule", "-e", "sglang", "--force", "-o"),
]


@pytest.mark.parametrize("command", DATA_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("kind", ["missing", "fifo", "device"])
def test_data_without_models_that_cannot_be_read_is_an_error(run_cli, tmp_path: Path, command, kind) -> None:
    """N28: ``--data /nonexistent.jsonl`` without ``--models`` was ignored with a note."""
    data = {"missing": tmp_path / "nonexistent.jsonl", "fifo": tmp_path / "f.jsonl", "device": Path("/dev/zero")}[kind]
    if kind == "fifo":
        os.mkfifo(data)
    args = [*command, tmp_path / "s.json"] if command[0] == "schedule" else list(command)
    line = _one_line(run_cli(*args, "--data", data))
    expected = "no such file" if kind == "missing" else "not a regular file"
    assert line == f"error: {data}: {expected}" or line.startswith(f"error: {data}: {expected} ("), line
    assert not (tmp_path / "s.json").exists()


@pytest.fixture(scope="module")
def h100_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated single-limit H100 sweep (700 W): its picks differ from the embedded RTX study's."""
    from specband.cli import main

    out = tmp_path_factory.mktemp("n28") / "h.jsonl"
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--profile", "h100-sxm", "--target-config", "llama-3.1-8b-instruct",
              "--draft-config", "eagle3-llama-3.1-8b-instruct", "--batch-sizes", "1,16", "--repeats", "1",
              "--out", str(out)])  # fmt: skip
    assert not exc.value.code
    return out


@pytest.mark.parametrize("algo", ["lookup_table", "gbt"])
def test_data_without_models_answers_from_the_data(run_cli, tmp_path: Path, h100_sweep: Path, algo: str) -> None:
    """N28: a single-limit sweep given as --data without --models was ignored with a note and the
    answer came from the embedded RTX 4060 study policy; now the data answers (trained in memory),
    as `train DATA` then `--models` would."""
    result = run_cli("recommend", "-b", "1", "--data", h100_sweep, "--algo", algo, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"note: no --models: trained {algo} on {h100_sweep} in memory (seed 0; `specband train` keeps it as a folder)"
    )
    pick = json.loads(result.stdout)
    assert pick["source"] == f"{h100_sweep} (trained in memory)"
    assert pick["origin"]["hardware"] == "H100_SXM5_80GB" and pick["origin"]["provenance"] == "simulated"
    folder = tmp_path / "m"
    assert run_cli("train", h100_sweep, "--out", folder, "--algo", algo).exit_code == 0
    from_folder = json.loads(
        run_cli("recommend", "-b", "1", "--models", folder, "--algo", algo, "--format", "json").stdout
    )
    assert pick["action"] == from_folder["action"]


PROFILE = (
    '[hardware]\nhardware="X\\nerror: injected"\npower_limit_w=450\nvram_mb=24564\nmem_bandwidth_gbs=1008\n'
    "peak_tflops=165\nidle_power_w=30\n"
)


def test_a_profile_whose_hardware_name_holds_a_newline_is_refused(run_cli, tmp_path: Path) -> None:
    """N48: the name labelled every row, and ``train`` printed it raw (``error: injected``, exit 0)."""
    profile = tmp_path / "p_nl.toml"
    profile.write_text(PROFILE)
    line = _one_line(run_cli("simulate", "--profile", profile, "--batch-sizes", "1", "--out", tmp_path / "o.jsonl"))
    assert "hardware.hardware 'X\\nerror: injected' holds a control character" in line
    assert not (tmp_path / "o.jsonl").exists()


def test_a_row_s_hardware_name_with_a_newline_is_printed_escaped(run_cli, tmp_path: Path) -> None:
    """N48, the rows written by hand: every line ``train`` prints stays one line."""
    import json

    unmeasured = tmp_path / "u.toml"
    unmeasured.write_text(PROFILE.replace("X\\nerror: injected", "X"))
    simulated = run_cli("simulate", "--profile", unmeasured, "--batch-sizes", "1", "--out", tmp_path / "o.jsonl")
    assert simulated.exit_code == 0, simulated.stderr
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    (tmp_path / "o.jsonl").write_text("".join(json.dumps({**r, "hardware": "X\nerror: injected"}) + "\n" for r in rows))
    result = run_cli("train", tmp_path / "o.jsonl", "--out", tmp_path / "m", "--algo", "lookup_table")
    assert result.exit_code == 0, result.stderr
    lines = (result.stdout + result.stderr).splitlines()
    assert not [line for line in lines if line.lstrip(" │┃").startswith("error")], lines
    assert any("X\\nerror: injected" in line for line in lines)  # named, escaped
