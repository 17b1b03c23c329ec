"""A folder records the engine its rows were measured on, and a schedule or pick for another
engine says so (hostile trial N57: a vLLM-trained folder said ``sglang not recorded`` and
sglang lines and schedules were built from it without a word)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specband.artifacts.folder import Manifest
from specband.contract.actions import ACTIONS, CHAIN_INDICES
from specband.sim.simulated import simulate_sweep
from specband.sweeps.origin import DataOrigin

NOTE = "targets sglang, but the data were measured on vLLM 0.32.0: the picks and figures are vLLM's"


@pytest.fixture
def vllm_folder(run_cli, tmp_path: Path) -> Path:
    """A folder trained on rows of vLLM's chain configs, written as files were before the
    ``engine_version`` column (engine ``vllm``, its release in ``vllm_version``)."""
    chains = [ACTIONS[i] for i in CHAIN_INDICES]
    rows = simulate_sweep(profile="rtx4060-laptop", batch_sizes=(1, 4), actions=chains, repeats=1, seed=0)
    vllm_rows = [{**r, "engine": "vllm", "vllm_version": "0.32.0", "sglang_version": None} for r in rows]
    data = tmp_path / "v.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in vllm_rows))
    trained = run_cli("train", data, "--out", tmp_path / "vm", "--algo", "lookup_table")
    assert trained.exit_code == 0, trained.stderr
    return tmp_path / "vm"


def test_the_manifest_records_the_engine(vllm_folder: Path) -> None:
    origin = json.loads((vllm_folder / "specband.json").read_text())["origin"]
    assert origin["engine"] == "vllm" and origin["engine_version"] == "0.32.0"  # the old columns were read
    assert "vllm_version" not in origin and "sglang_version" not in origin
    manifest = Manifest.from_json(json.loads((vllm_folder / "specband.json").read_text()), vllm_folder)
    assert manifest.origin is not None and manifest.origin.engine_text() == "vLLM 0.32.0"


def test_a_schedule_or_pick_for_another_engine_is_noted(run_cli, vllm_folder: Path, tmp_path: Path) -> None:
    sglang = run_cli("schedule", "-e", "sglang", "--models", vllm_folder, "-o", tmp_path / "s.json")
    assert sglang.exit_code == 0, sglang.stderr
    assert f"note: this schedule {NOTE}" in sglang.stderr
    assert "vLLM 0.32.0, workload" in sglang.stderr  # the origin line names the engine
    same = run_cli("schedule", "-e", "vllm", "--models", vllm_folder, "-o", tmp_path / "v.json")
    assert same.exit_code == 0, same.stderr
    assert "targets" not in same.stderr
    pick = run_cli("recommend", "--models", vllm_folder, "-b", "1")
    assert pick.exit_code == 0 and f"note: this pick {NOTE}" in pick.stderr
    launch = (
        "launch",
        "--models",
        vllm_folder,
        "-b",
        "1",
        "--target",
        "m",
        "--draft",
        "d",
        "--dry-run",
        "--allow-transfer",
    )
    assert f"note: this pick {NOTE}" in run_cli(*launch).stderr
    assert "targets" not in run_cli(*launch, "--engine", "vllm").stderr


def test_the_study_data_for_vllm_is_noted(run_cli, tmp_path: Path) -> None:
    result = run_cli("schedule", "-e", "vllm", "-o", tmp_path / "v.json")
    assert result.exit_code == 0, result.stderr
    assert "note: this schedule targets vLLM, but the data were measured on sglang (version not recorded)" in (
        result.stderr
    )


def test_a_manifest_written_before_the_engine_was_recorded_still_reads() -> None:
    old = {"hardware": "RTX4060_Laptop", "power_limit_w": 80.0, "provenance": "measured", "sglang_version": "0.5.9"}
    origin = DataOrigin.from_json(old)  # its per-engine column names the engine and its release
    assert origin is not None and (origin.engine, origin.engine_version) == ("sglang", "0.5.9")
    assert origin.engine_text() == "sglang 0.5.9"
    assert origin.engine_note("vllm", "this schedule") == (
        "this schedule targets vLLM, but the data were measured on sglang 0.5.9: the picks and figures are "
        "sglang's, carried to vLLM untested (a sweep with --engine vllm measures vLLM)"
    )
    old_vllm = DataOrigin.from_json({"engine": "vllm", "sglang_version": None, "vllm_version": "0.32.0"})
    assert old_vllm is not None and (old_vllm.engine, old_vllm.engine_version) == ("vllm", "0.32.0")
    unnamed = DataOrigin.from_json({"hardware": "RTX4060_Laptop", "provenance": "measured"})
    assert unnamed is not None and unnamed.engine is None and unnamed.engine_note("vllm", "this pick") is None
    assert unnamed.engine_text() == "sglang not recorded"  # the study's engine, nothing claimed
    new = DataOrigin.from_json({"engine": "vllm", "engine_version": "0.32.0"})
    assert new is not None and new.to_json()["engine_version"] == "0.32.0" and new.engine_text() == "vLLM 0.32.0"
