"""``sweep`` and ``sweep --dry-run`` say on stderr, in the one line ``launch`` prints, when the
pair's RoPE check could not run (the target's or the draft's config.json is not readable
here), and say nothing when it ran."""

from __future__ import annotations

import json
from pathlib import Path

from specband.sim.hfconfig import read_model_config

SKIPPED = "note: RoPE check of the target and draft skipped: their config.json could not be read here ("


def _rope_notes(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "RoPE check" in line]


def test_sweep_and_its_dry_run_say_the_note_launch_says(run_cli, sweep_args, tmp_path: Path) -> None:
    grid = ("--batch-sizes", "1", "--actions", "0", "--repeats", "1")
    dry = run_cli(*sweep_args, *grid, "--out", tmp_path / "dry.jsonl", "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    notes = _rope_notes(dry.stderr)
    assert len(notes) == 1 and notes[0].startswith(SKIPPED + "m: "), dry.stderr
    assert "RoPE" not in dry.stdout and "--model-path m" in dry.stdout
    assert not (tmp_path / "dry.jsonl").exists()

    launch = run_cli(
        "launch", "--target", "m", "--draft", "d", "-b", "4", "--device", "none", "--dry-run",
        "--allow-transfer", "--sglang-version", "0.5.6",
    )  # fmt: skip
    assert launch.exit_code == 0, launch.stderr
    assert _rope_notes(launch.stderr) == notes  # the same line, word for word

    out = tmp_path / "run.jsonl"
    run = run_cli(*sweep_args, *grid, "--out", out)
    assert run.exit_code == 0, run.stderr
    assert _rope_notes(run.stderr) == notes
    assert len(out.read_text().splitlines()) == 1  # it measured: the note is not a refusal

    # a refused sweep says its one error line only: notes come once every check passed
    refused = run_cli(*sweep_args, *grid, "--out", out)  # rows there, no --resume
    assert refused.exit_code == 2
    assert refused.stderr.strip().splitlines() == [
        f"error: {out} already has 1 rows; pass --resume to continue it or choose another --out"
    ]


def test_no_note_when_the_check_ran(run_cli, sweep_args, tmp_path: Path) -> None:
    for name in ("llama-3.2-1b-instruct", "eagle3-llama-3.2-1b-instruct"):  # a pair whose RoPE settings match
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(read_model_config(name)[0]))
    args = [*sweep_args]
    args[args.index("m")] = str(tmp_path / "llama-3.2-1b-instruct")
    args[args.index("d")] = str(tmp_path / "eagle3-llama-3.2-1b-instruct")
    res = run_cli(*args, "--batch-sizes", "1", "--actions", "0", "--out", tmp_path / "s.jsonl", "--dry-run")
    assert res.exit_code == 0, res.stderr
    assert _rope_notes(res.stderr) == []
    assert f"--model-path {tmp_path / 'llama-3.2-1b-instruct'}" in res.stdout
