"""``recommend`` answers with a power limit from a sweep over several limits: the done-when
of issue 20 on simulated H100 data."""

from __future__ import annotations

import json

import pytest
from tests.servers import one_error_line

from specband.core.errors import ConfigError, DataError
from specband.deploy.answers import PowerLimitAnswer
from specband.deploy.recommend import power_limit_answer
from specband.sim import build_model, simulate_power_limits, simulate_sweep
from specband.sweeps.dataset import Sweep
from specband.sweeps.limit_table import BandWithinSpeedLoss, limit_table

H100_8B = {"target_config": "llama-3.1-8b-instruct", "draft_config": "eagle3-llama-3.1-8b-instruct"}


def recommend_power_limit(sweep: Sweep, batch_size: int, max_speed_loss: float = 0.02, draft: str | None = None):
    """``recommend --data SWEEP``'s answer with a limit: the sweep's table, the selector's choice."""
    selector = BandWithinSpeedLoss(max_speed_loss)
    return power_limit_answer(
        limit_table(sweep, nearest_to=batch_size), batch_size, selector=selector, draft_model=draft
    )


@pytest.fixture(scope="module")
def h100_rows() -> list[dict]:
    model = build_model("h100-sxm", **H100_8B)
    # the simulator's lowest H100 limit is 200 W (NVML's 200-700 W), swept in 5 W steps
    return simulate_power_limits(model, [float(w) for w in range(200, 701, 5)], batch_sizes=(1, 8, 16), repeats=2)


@pytest.mark.parametrize("batch_size", [16])
def test_on_simulated_h100_data_the_limit_is_below_700_w_in_band_within_the_speed_loss(h100_rows, batch_size):
    decided = recommend_power_limit(Sweep.from_records(h100_rows), batch_size)
    chosen = decided.chosen
    assert chosen.power_limit_w < 700.0
    assert chosen.in_band and 0.95 <= chosen.utilization <= 0.98
    assert chosen.speed_tok_s >= 0.98 * decided.fastest.speed_tok_s
    assert decided.default.power_limit_w == 700.0 and not decided.default.in_band  # 8B at 700 W: 25-30 %
    # the lowest such limit: every lower limit's pick is out of the band or too slow
    for pick in decided.picks:
        if pick.power_limit_w < chosen.power_limit_w:
            assert not pick.in_band or pick.speed_tok_s < 0.98 * decided.fastest.speed_tok_s
    answer = recommend_power_limit(Sweep.from_records(h100_rows), batch_size, draft="draft")
    assert isinstance(answer, PowerLimitAnswer) and answer.chosen == chosen
    assert answer.nvidia_smi == f"sudo nvidia-smi -pl {chosen.power_limit_w:g}"
    assert "--speculative-num-steps" in answer.flags and answer.provenance == "simulated"


@pytest.mark.parametrize("batch_size", [1, 8])
def test_where_no_limit_reaches_the_band_the_lowest_is_given_and_said(h100_rows, batch_size):
    # bs 1 and 8 on the published-fit H100 power: ~134 and ~173 W of draw, under 95 % of even 200 W
    decided = recommend_power_limit(Sweep.from_records(h100_rows), batch_size)
    assert decided.chosen.power_limit_w == 200.0 and not decided.chosen.in_band
    assert decided.chosen.utilization < 0.95
    assert any("even the lowest limit swept, 200 W, leaves the pick at" in n for n in decided.notes)


def test_a_tighter_speed_bound_never_picks_a_slower_pair(h100_rows):
    sweep = Sweep.from_records(h100_rows)
    loose = recommend_power_limit(sweep, 16, max_speed_loss=0.2)
    tight = recommend_power_limit(sweep, 16, max_speed_loss=0.0)
    assert loose.chosen.power_limit_w <= tight.chosen.power_limit_w
    assert tight.chosen.speed_tok_s == tight.fastest.speed_tok_s or not tight.chosen.in_band


def test_one_limit_or_a_bad_bound_is_refused():
    rows = simulate_sweep(build_model("h100-sxm"), batch_sizes=(1,), repeats=1)
    with pytest.raises(DataError, match="one power limit"):
        limit_table(Sweep.from_records(rows))
    with pytest.raises(ConfigError, match="max-speed-loss"):
        BandWithinSpeedLoss(1.5)


def test_cli_prints_the_nvidia_smi_line_then_the_flags(run_cli, tmp_path, h100_rows):
    data = tmp_path / "h100.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in h100_rows))
    result = run_cli("recommend", "-b", "16", "--data", data, "--draft-model", "d", "--allow-transfer", "--explain")
    assert result.exit_code == 0, result.stderr
    assert "note: transferred (--allow-transfer): draft d vs the data's" in result.stderr  # issue 18
    lines = result.stdout.splitlines()
    assert lines[0].startswith("sudo nvidia-smi -pl ") and float(lines[0].split()[-1]) < 700
    assert lines[1].startswith("--speculative-algorithm EAGLE3 --speculative-draft-model-path d")
    assert "in the band" in result.stderr and "J/token vs" in result.stderr and "simulated rows" in result.stderr
    assert "power from published fit" in result.stderr
    as_json = json.loads(run_cli("recommend", "-b", "16", "--data", data, "--format", "json").stdout)
    assert as_json["power_limit_w"] == float(lines[0].split()[-1]) and as_json["in_band"] is True
    # issue 18: the origin travels with the answer with a limit too
    assert as_json["origin"]["provenance"] == "simulated" and as_json["origin"]["power_measured"] is False
    assert as_json["transfer"] == {"differences": [], "transferred": False}


def test_simulate_power_limits_cli(run_cli, tmp_path):
    out = tmp_path / "s.jsonl"
    result = run_cli(
        "simulate",
        "--profile",
        "h100-sxm",
        "--power-limits",
        "0.5,1.0",
        "--batch-sizes",
        "1",
        "--repeats",
        "1",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted({r["power_limit_watts"] for r in rows}) == [350.0, 700.0]
    assert "power: published fit" in result.stdout and "on top of the model's power" in result.stderr
    result = run_cli("simulate", "--profile", "h100-sxm", "--power-limits", "50", "--out", tmp_path / "t.jsonl")
    assert result.exit_code == 0 and "using 200 W" in result.stderr
    result = run_cli("simulate", "--power-limits", "a", "--out", tmp_path / "u.jsonl")
    assert result.exit_code == 2 and "--power-limits" in one_error_line(result.stderr)


def test_a_folder_trained_on_several_limits_says_so_and_answers_with_a_limit(run_cli, tmp_path, h100_rows):
    data = tmp_path / "h100.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in h100_rows))
    models = tmp_path / "models"
    result = run_cli("train", data, "--algo", "lookup_table", "--out", models)
    assert result.exit_code == 0, result.stderr
    assert "the policies train on the rows at 700 W" in result.stderr.replace("\n", " ")
    manifest = json.loads((models / "specband.json").read_text())
    table = manifest["power_limits"]
    assert table["limits_w"][0] == 200.0 and table["limits_w"][-1] == 700.0 and table["provenance"] == "simulated"
    assert len(table["picks"]["16"]) == 101
    from_folder = run_cli("recommend", "-b", "16", "--models", models, "--format", "json")
    from_data = run_cli("recommend", "-b", "16", "--data", data, "--format", "json")
    assert from_folder.exit_code == 0, from_folder.stderr
    a, b = json.loads(from_folder.stdout), json.loads(from_data.stdout)
    assert (a["power_limit_w"], a["action"], a["flags"]) == (b["power_limit_w"], b["action"], b["flags"])
    assert a["power_limit_w"] < 700.0 and a["in_band"]


def test_a_manifest_with_a_bad_power_limit_table_is_refused(run_cli, tmp_path, h100_rows):
    from specband.artifacts.folder import load_manifest
    from specband.core.errors import ArtifactError

    data = tmp_path / "h100.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in h100_rows[: 19 * 3 * 2 * 2]))  # 200 and 205 W
    models = tmp_path / "models"
    assert run_cli("train", data, "--algo", "lookup_table", "--out", models).exit_code == 0
    path = models / "specband.json"
    manifest = json.loads(path.read_text())
    manifest["power_limits"]["picks"]["1"][0]["action"] = [9, 9, 9]
    path.write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="bad 'action'"):
        load_manifest(models)
