"""``sweep --plan predict`` from the command line: option checks, the dry run (the seed), and an
end-to-end sweep against the emulator that measures fewer runs than the grid, writes rows old
readers load, resumes without a row lost or twice, and refuses to mix logging policies."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from tests.servers import one_error_line

from specband.harness.sweepfile import read_rows_for_resume
from specband.sweeps.dataset import load_sweep

#: baseline, (1,1,2), (3,1,4), (3,2,4), (3,4,8), (5,1,6): the seed is 0, 5 and 11.
GRID = ["--batch-sizes", "1", "--actions", "0 1 5 7 10 11"]


@pytest.mark.parametrize(
    "options, message",
    [
        (["--plan", "predict", "--adaptive"], "--plan predict and --adaptive exclude each other"),
        (["--plan", "predict", "--shard", "1/2"], "--plan predict and --shard exclude each other"),
        (["--profile", "h200"], "--profile applies only to --plan predict"),
        (["--acceptance-from", "x.jsonl"], "--acceptance-from applies only to --plan predict"),
        (["--plan", "predict", "--acceptance-from", "no-such-file.jsonl"], "no-such-file.jsonl"),
        (["--plan", "predict", "--profile", "no-such-gpu"], "no-such-gpu"),
        (["--plan", "nope"], "nope"),
    ],
)
def test_predict_combinations_that_make_no_sense(run_cli, sweep_args, tmp_path, options, message):
    result = run_cli(*sweep_args, *options, "--out", tmp_path / "s.jsonl", "--dry-run")
    assert result.exit_code == 2 and message in one_error_line(result.stderr)
    assert list(tmp_path.iterdir()) == []


def test_predict_without_a_gpu_name_needs_a_profile(run_cli, tmp_path):
    args = ["sweep", "--target", "m", "--draft", "d", "--device", "none", "--sglang-version", "0.5.23"]
    result = run_cli(*args, "--plan", "predict", "--out", tmp_path / "s.jsonl", "--dry-run")
    assert result.exit_code == 2 and "--plan predict needs --profile PROFILE here" in one_error_line(result.stderr)
    named = run_cli(*args, "--plan", "predict", "--profile", "h100-sxm", "--out", tmp_path / "s.jsonl", "--dry-run")
    assert named.exit_code == 0, named.stderr


def test_the_dry_run_finds_the_profile_by_the_gpus_name_as_the_run_does(run_cli, tmp_path, monkeypatch):
    """A GPU (here: none readable, so its name is 'unknown') with no built-in profile: the dry
    run refuses as the run does, and says the profile it found when there is one."""
    args = ["sweep", "--target", "m", "--draft", "d", "--sglang-version", "0.5.23", "--plan", "predict"]
    dry = run_cli(*args, "--out", tmp_path / "s.jsonl", "--dry-run")
    real = run_cli(*args, "--out", tmp_path / "s.jsonl")
    message = "--plan predict: no calibrated simulator profile for the GPU 'unknown'"
    assert (dry.exit_code, real.exit_code) == (2, 2)
    assert message in one_error_line(dry.stderr) and message in one_error_line(real.stderr)
    assert list(tmp_path.iterdir()) == []
    import specband.harness.job as job

    monkeypatch.setattr(job.PredictSetup, "profile_for", lambda self, name: "h200")
    found = run_cli(*args, "--out", tmp_path / "s.jsonl", "--dry-run")
    assert found.exit_code == 0, found.stderr
    assert "# --plan predict: simulated on profile h200 (the GPU's)" in found.stdout


def test_dry_run_lists_the_seed_launches_only(run_cli, sweep_args, tmp_path):
    result = run_cli(
        *sweep_args, "--batch-sizes", "1,4", "--plan", "predict", "--out", tmp_path / "s.jsonl", "--dry-run"
    )
    assert result.exit_code == 0, result.stderr
    launches = [ln for ln in result.stdout.splitlines() if "emulate" in ln]
    assert "# --plan predict: the seed runs below" in result.stdout and len(launches) == 6  # 3 per batch size
    steps = Counter(ln.split("--speculative-num-steps ")[1].split()[0] for ln in launches if "num-steps" in ln)
    assert steps == {"3": 2, "5": 2}  # (3,1,4) and (5,1,6) at each batch size, and the two baselines


def test_emulated_predicted_sweep_measures_less_resumes_and_keeps_one_logging_policy(run_cli, sweep_args, tmp_path):
    out = tmp_path / "p.jsonl"
    args = [*sweep_args, *GRID, "--repeats", "2", "--plan", "predict", "--out", out]
    result = run_cli(*args)
    assert result.exit_code == 0, result.stderr
    rows = read_rows_for_resume(out)
    keys = [(r["index"], r["repeat"]) for r in rows]
    assert len(keys) == len(set(keys)) and len(rows) < 12  # fewer than the grid's 6 configs x 2 repeats
    assert {k for k in keys if k[1] == 0} >= {(0, 0), (2, 0), (5, 0)}  # the seed
    assert {r["planned_by"] for r in rows} <= {"seed", "prediction", "remeasure"}
    assert Counter(r["planned_by"] for r in rows)["seed"] == 3
    for r in rows:
        assert 0 < r["propensity"] <= 1
        if r["planned_by"] == "prediction":
            est, low, high = r["predicted_reward"]
            assert low <= est <= high
    assert f"--plan predict: {len(rows)} of 12 runs" in result.stdout and "bs 1: pick (" in result.stdout
    assert load_sweep(out).training_data().rewards.shape[0] == sum(r["error"] is None for r in rows)
    evaluated = run_cli("evaluate", out, "--bootstrap", "20", "--algo", "lookup_table", "--json")
    assert evaluated.exit_code == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["data"]["rows"] == len(rows)
    # resume: the rounds are planned from the file; a settled sweep measures nothing more
    again = run_cli(*args, "--resume")
    assert again.exit_code == 0 and "wrote 0 rows" in again.stdout
    # cut the file after the seed: the resumed sweep keeps those rows and adds none twice
    out.write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    resumed = run_cli(*args, "--resume")
    assert resumed.exit_code == 0, resumed.stderr
    after = read_rows_for_resume(out)
    assert after[:4] == rows[:4] and len({(r["index"], r["repeat"]) for r in after}) == len(after)
    # one file, one logging policy
    plain = run_cli(*sweep_args, *GRID, "--repeats", "2", "--out", out, "--resume", "--dry-run")
    assert plain.exit_code == 2
    assert "its rows were written with --plan predict; resume with it" in one_error_line(plain.stderr)
    adaptive = run_cli(*sweep_args, *GRID, "--repeats", "2", "--adaptive", "--out", out, "--resume", "--dry-run")
    assert adaptive.exit_code == 2 and "written with --plan predict" in one_error_line(adaptive.stderr)
