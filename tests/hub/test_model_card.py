"""The model card ``specband train`` writes (issue 9 item 3), read back with
huggingface_hub's own ``ModelCard`` (what the hub renders)."""

from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub import ModelCard

from specband.sweeps.dataset import bundled_data_path

from .conftest import DATASET_REPO, add_snapshot


def test_train_writes_a_model_card_the_hub_reads(run_cli) -> None:
    res = run_cli("train", "--out", "m", "--algo", "lookup_table", "--algo", "gbt")
    assert res.exit_code == 0, res.stderr
    card = ModelCard.load("m/README.md")
    meta = card.data.to_dict()
    assert meta["library_name"] == "specband" and meta["license"] == "apache-2.0"
    assert {"speculative-decoding", "eagle3", "sglang", "energy"} <= set(meta["tags"])
    assert meta["base_model"] == ["unsloth/Llama-3.2-1B-Instruct", "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct"]
    assert "datasets" not in meta  # the bundled file is not a hub dataset: nothing invented
    text = card.text
    assert "- GPU: RTX4060_Laptop" in text and "- power limit: 80.0 W" in text
    # the bs-16 pick and its figures come from the data: (3,2,4), mean reward and utilisation
    manifest = json.loads(Path("m/specband.json").read_text())
    mean = manifest["batch_sizes"]["16"]["mean_reward"]["7"]
    # issue 18: the band status, decode speed, speed-up and repeats beside the reward
    assert f"| lookup_table | 16 | (3, 2, 4) | {mean:.4f} | 0.970 | in | 118.1 | 1.30x | 5 | 5 |" in text
    assert "| `gbt/model.joblib` |" in text and "gbt/model.skops" in text
    assert manifest["data"]["sha256"] in text and "29 measured" in text and "4 row(s) is derived" in text


def test_model_card_names_the_hub_dataset_and_what_the_data_lacks(run_cli, hub_cache: Path, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in bundled_data_path().read_text().splitlines() if line.strip()]
    for row in rows:
        row.pop("hardware"), row.pop("target_model"), row.pop("draft_model")
    jsonl = "".join(json.dumps(r) + "\n" for r in rows).encode()
    add_snapshot(hub_cache, DATASET_REPO, {"data/sweep.jsonl": jsonl}, repo_type="dataset")
    res = run_cli("train", f"hf://datasets/{DATASET_REPO}", "--out", "m", "--algo", "lookup_table")
    assert res.exit_code == 0, res.stderr
    card = ModelCard.load("m/README.md")
    assert card.data.to_dict()["datasets"] == [DATASET_REPO]
    assert "base_model" not in card.data.to_dict()
    assert "- target: not recorded in the data" in card.text and "- GPU: not recorded in the data" in card.text
    assert f"`hf://datasets/{DATASET_REPO}`" in card.text


def test_retraining_replaces_the_card(run_cli) -> None:
    assert run_cli("train", "--out", "m", "--algo", "lookup_table").exit_code == 0
    assert run_cli("train", "--out", "m", "--algo", "linucb").exit_code == 0
    assert "# specband policies: linucb" in Path("m/README.md").read_text()
