"""Issue 18 items 1, 4 and 6: the origin travels with the pick (manifest, recommend's pick,
model card), simulated data is never "measured", the answer is explained (speed, speed-up,
utilisation with the band status, J/token, runner-up), and train does not silently replace
a folder trained on other data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specband.artifacts.fit import check_out_folder
from specband.artifacts.folder import embedded_manifest, load_manifest
from specband.contract.reward import band_status
from specband.core.errors import ConfigError
from specband.deploy.explain import band_note, explain_pick
from specband.deploy.recommend import recommend
from specband.sim.simulated import simulate_sweep
from specband.sweeps.dataset import Sweep, load_sweep
from specband.sweeps.origin import DataOrigin, data_origin


def _simulated_file(tmp_path: Path) -> Path:
    rows = simulate_sweep(profile="h100-sxm", batch_sizes=[1, 16], repeats=2, seed=0)
    path = tmp_path / "sim.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_bundled_origin_names_the_study_setup() -> None:
    origin = embedded_manifest().origin
    assert origin == DataOrigin(
        hardware="RTX4060_Laptop",
        power_limit_w=80.0,
        target_model="unsloth/Llama-3.2-1B-Instruct",
        draft_model="rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct",
        provenance="published",
        power_measured=True,
        engine="sglang",
    )


def test_recommend_json_carries_the_origin_and_explanation() -> None:
    pick = recommend(16)
    origin = pick.origin.data
    assert origin.hardware == "RTX4060_Laptop" and origin.power_limit_w == 80.0
    assert origin.provenance == "published" and origin.power_measured is True
    assert origin.target_model == "unsloth/Llama-3.2-1B-Instruct"
    assert pick.origin.rows == 17 and pick.origin.repeats == 5  # the bs-16 rows of the bundled file
    assert origin.engine_version is None and origin.workload is None  # not recorded in the study's rows
    expl = pick.explanation
    assert expl is not None and pick.action == (3, 2, 4)
    rows = [r for r in load_sweep(None).rows if r.batch_size == 16 and r.trainable]
    picked = [r.speed_tok_s for r in rows if tuple(r.action) == (3, 2, 4)]
    base = [r.speed_tok_s for r in rows if r.is_baseline]
    assert expl.pick is not None and expl.pick.rows == len(picked) == 5
    assert expl.pick.speed_tok_s == pytest.approx(sum(picked) / 5, abs=1e-3)
    assert expl.pick.speedup == pytest.approx(sum(picked) / 5 / (sum(base) / len(base)), abs=1e-3)
    assert expl.runner_up is not None and expl.runner_up.action != (3, 2, 4)
    assert expl.figures_are == "published"
    # the JSON of the typed parts: the origin's fields, then the counts
    assert list(pick.to_json()["origin"])[-3:] == ["rows", "repeats", "heldout_interval"]
    assert pick.to_json()["explanation"]["pick"]["band"] == band_status(expl.pick.energy_utilization)


def test_band_status_says_in_below_or_above_and_by_how_much() -> None:
    assert band_status(0.96)["status"] == "in"
    assert band_status(0.895) == {"status": "below", "by": 0.055, "low": 0.95, "high": 0.98}
    assert band_status(0.99)["status"] == "above" and band_status(0.99)["by"] == pytest.approx(0.01)
    assert band_status(None)["status"] == "unknown"


def test_a_bs1_pick_below_the_band_says_so_and_no_config_reaches_it() -> None:
    manifest = embedded_manifest()
    index = recommend(1).action_index
    expl = explain_pick(manifest, 1, index)
    assert expl is not None and expl.pick is not None and expl.pick.energy_utilization is not None
    assert expl.pick.band.status == "below" and expl.pick.energy_utilization < 0.95
    assert expl.band_reachable is False and expl.band_note is not None
    assert expl.band_note.startswith("no config reaches the 0.95-0.98 band at this power limit")
    # the pick (3,4,8) draws 0.888 of 80 W, the highest (5,4,16) 0.921: each limit is u * 80 / 0.965,
    # inside the RTX 4060 Laptop profile's range (80 W down to 2/7 of it, 22.9 W), said with its source
    assert "the highest is (5,4,16) at 0.921 of the limit; a limit near 76 W (from 80 W) would put (5,4,16)" in (
        expl.band_note
    )
    assert "the pick (3,4,8) draws 0.888 of the limit: a limit near 74 W (from 80 W)" in expl.band_note
    assert "(the GPU's limits: 22.9-80 W, the rtx4060-laptop profile's range" in expl.band_note


def test_the_band_note_names_the_highest_below_or_the_lowest_above() -> None:
    below = band_note({0: 0.80, 7: 0.90}, 80.0)
    assert "the highest is (3,2,4) at 0.900" in below and "near 75 W (from 80 W)" in below
    both = band_note({0: 0.90, 7: 0.99, 8: 1.0}, 100.0)
    assert "configs sit on both sides of it; the lowest above it is (3,2,4) at 0.990" in both
    assert "near 103 W (from 100 W)" in both
    assert band_note({7: 0.99}, None).endswith("the lowest above it is (3,2,4) at 0.990 of the limit")


def test_simulated_rows_are_never_measured(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    data = _simulated_file(tmp_path)
    origin = data_origin(load_sweep(data))
    assert origin.provenance == "simulated" and not origin.power_measured and origin.simulated
    assert origin.power_source is not None and origin.power_source.startswith("published fit")
    res = run_cli("train", str(data), "--algo", "lookup_table", "--out", "sim-models")
    assert res.exit_code == 0, res.stderr
    assert "best simulated" in res.stdout and "best measured" not in res.stdout
    assert "SIMULATED, not measured" in res.stdout
    manifest = json.loads(Path("sim-models/specband.json").read_text())
    assert manifest["data"]["energy_measured"] is False and manifest["data"]["provenance"] == "simulated"
    assert manifest["origin"]["hardware"] == "H100_SXM5_80GB" and manifest["origin"]["power_measured"] is False
    card = Path("sim-models/README.md").read_text()
    assert "Trained on SIMULATED rows" in card and "- energy measured: no: the power is simulated" in card
    assert "(SIMULATED figures)." in card and "| band | tok/s | speed-up | rows | repeats |" in card
    bs16 = next(line for line in card.splitlines() if line.startswith("| lookup_table | 16 |"))
    assert bs16.split(" | ")[5].startswith("below by ")  # the simulated H100 is far below the band at 700 W
    assert bs16.rstrip(" |").endswith("| 2")  # two repeats
    picked = recommend(16, models="sim-models")
    assert picked.origin.data.provenance == "simulated"
    assert any("trained on SIMULATED rows" in n for n in picked.notes)
    assert picked.explanation is not None and picked.explanation.figures_are == "simulated"
    # a batch-size mix says it too, in the same words, and its JSON origin says "simulated"
    from specband.deploy.answers import MixAnswer
    from specband.deploy.recommend import RecommendRequest, answer

    mixed = answer(RecommendRequest(batch_mix="1:1,16:1", models="sim-models").answer_request())
    assert isinstance(mixed, MixAnswer)
    simulated = [n for n in picked.notes if "SIMULATED" in n]
    assert len(simulated) == 1 and [n for n in mixed.notes if "SIMULATED" in n] == simulated
    assert mixed.to_json()["origin"]["provenance"] == "simulated"
    assert any(n.startswith("pick rests on simulated data: H100_SXM5_80GB") for n in mixed.notes)


def test_the_manifest_round_trips_origin_and_stats(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    assert run_cli("train", "--algo", "lookup_table", "--out", "m").exit_code == 0
    manifest = load_manifest("m")
    assert manifest.origin == embedded_manifest().origin
    assert manifest.stats[16][7].rows == 5
    assert manifest.to_json()["batch_sizes"]["16"]["stats"]["7"]["rows"] == 5


def test_train_refuses_to_replace_a_folder_trained_on_other_data(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    data = _simulated_file(tmp_path)
    assert run_cli("train", str(data), "--algo", "lookup_table", "--out", "models").exit_code == 0
    before = Path("models/specband.json").read_bytes()
    res = run_cli("train", "--out", "models")  # the README's set-up line, re-run
    assert res.exit_code == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: models: already holds policies trained on other data")
    assert "--force" in lines[0] and "the bundled published measurements" in lines[0]
    assert Path("models/specband.json").read_bytes() == before
    # the same data again is no loss; --force replaces
    assert run_cli("train", str(data), "--algo", "lookup_table", "--out", "models").exit_code == 0
    assert run_cli("train", "--algo", "lookup_table", "--out", "models", "--force").exit_code == 0
    assert load_manifest("models").origin == embedded_manifest().origin


def test_the_out_check_runs_before_training(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    assert run_cli("train", "--algo", "lookup_table", "--out", "models").exit_code == 0
    other = Sweep.from_records(
        [{"index": 0, "batch_size": 1, "steps": 0, "topk": 0, "num_draft_tokens": 0, "error": "oom"}]
    )
    with pytest.raises(ConfigError, match="already holds policies trained on other data"):
        check_out_folder("models", other)
    check_out_folder("models", other, force=True)
