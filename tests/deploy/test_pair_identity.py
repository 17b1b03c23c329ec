"""Issue 30 item 3: a model is identified by what its config.json says, not by how it was
spelt. A Qwen3-8B folder simulated by specband is accepted by `recommend --target` given as the
same folder, its absolute path and the bundled name of the same config; a folder named like the
study's model holding an 8B config is not the study's model (hostile trial)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from tests.deploy.qwen3_configs import QWEN3_8B_EAGLE3

from specband.sim.hfconfig import bundled_model_config_path, config_sha256


def _qwen3_folder(root: Path, *, full: bool = True) -> Path:
    """A Qwen3-8B folder: the bundled Qwen/Qwen3-8B config.json as the hub ships it (no
    ``_name_or_path``), or (``full=False``) only its shape fields, as a hand-made copy."""
    config = json.loads(bundled_model_config_path("qwen3-8b").read_text())
    del config["_name_or_path"]
    if not full:
        keep = ("architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "torch_dtype")  # fmt: skip
        config = {k: config[k] for k in keep}
    folder = root / "Qwen3-8B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


@pytest.fixture
def simulated(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`specband simulate --target-config ./Qwen3-8B` and `specband train` on it, in tmp_path."""
    monkeypatch.chdir(tmp_path)
    _qwen3_folder(tmp_path)
    (tmp_path / "qwen3-head.json").write_text(json.dumps(QWEN3_8B_EAGLE3))  # Qwen3-8B's own EAGLE3 head
    res = run_cli("simulate", "--profile", "h100-sxm", "--target-config", "./Qwen3-8B",
                  "--draft-config", "qwen3-head.json", "--batch-sizes", "1,16", "--repeats", "1",
                  "--out", "q.jsonl")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert run_cli("train", "q.jsonl", "--algo", "lookup_table", "--out", "qm").exit_code == 0
    return tmp_path


def test_rows_keep_the_name_given_and_the_architecture(simulated: Path) -> None:
    rows = [json.loads(line) for line in (simulated / "q.jsonl").read_text().splitlines()]
    bundled = json.loads(bundled_model_config_path("qwen3-8b").read_text())
    assert {r["target_model"] for r in rows} == {"./Qwen3-8B"}  # was "Qwen3ForCausalLM"
    assert {r["target_architecture"] for r in rows} == {"Qwen3ForCausalLM"}
    # the folder's config is the bundled one less its name: one identity
    assert {r["target_config_sha256"] for r in rows} == {config_sha256(bundled)}
    manifest = json.loads((simulated / "qm" / "specband.json").read_text())
    assert manifest["origin"]["target_config_sha256"] == config_sha256(bundled)


@pytest.mark.parametrize("given", ["./Qwen3-8B", "Qwen3-8B", "ABSOLUTE", "qwen3-8b"])
def test_the_simulated_folder_is_accepted_however_it_is_spelt(run_cli, simulated: Path, given: str) -> None:
    target = str(simulated / "Qwen3-8B") if given == "ABSOLUTE" else given
    res = run_cli("recommend", "-b", "16", "--models", "qm", "--target", target)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.startswith("--speculative-algorithm EAGLE3") and "transferred" not in res.stderr
    # launch runs the same check first, and the pair's own check passes (Qwen3-8B with its own head)
    res = run_cli("launch", "--dry-run", "-b", "16", "--device", "none", "--models", "qm", "--target", target,
                  "--draft", "qwen3-head.json", "--sglang-version", "0.5.23")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert "--speculative-draft-model-path qwen3-head.json" in res.stdout and "transferred" not in res.stderr


@pytest.mark.parametrize("command", ["simulate", "recommend-first-guess", "recommend", "launch"])
def test_a_pair_doctor_calls_an_error_is_refused_alike(run_cli, tmp_path: Path, command: str) -> None:
    """Issue 35 item 7: Qwen3-8B with the Llama-3.1-8B EAGLE3 head (another vocabulary) is refused by
    simulate, recommend (first guess and data) and launch with doctor's own line, exit 2, nothing written."""
    from specband.doctor.pairs import config_checks, pair_refusal, read_model_config

    os.chdir(tmp_path)
    t, d = read_model_config("qwen3-8b")[0], read_model_config("eagle3-llama-3.1-8b-instruct")[0]
    line = pair_refusal(config_checks(t, d))
    assert line == (
        "vocab: vocab_size: target 151936, draft 128256; fix: use the draft head trained for this target "
        "(its tokenizer)"
    )
    (tmp_path / "doctor").mkdir()
    os.chdir(tmp_path / "doctor")  # doctor writes a RoPE-fixed copy of the draft beside you
    doctor = run_cli("doctor", "--target", "qwen3-8b", "--draft", "eagle3-llama-3.1-8b-instruct")
    assert f"error {line}" in doctor.stdout  # doctor's own words
    os.chdir(tmp_path)
    shutil.rmtree(tmp_path / "doctor")
    args = {
        "simulate": ("simulate", "--profile", "h200", "--target-config", "qwen3-8b", "--draft-config",
                     "eagle3-llama-3.1-8b-instruct", "--out", "s.jsonl"),
        "recommend-first-guess": ("recommend", "--gpu", "h200", "--target-config", "qwen3-8b", "--draft-config",
                                  "eagle3-llama-3.1-8b-instruct", "-b", "8"),
        "recommend": ("recommend", "-b", "8", "--target", "qwen3-8b", "--draft-model", "eagle3-llama-3.1-8b-instruct"),
        "launch": ("launch", "--dry-run", "-b", "8", "--target", "qwen3-8b", "--draft", "eagle3-llama-3.1-8b-instruct",
                   "--device", "none", "--gpu", "h200"),
    }[command]  # fmt: skip
    res = run_cli(*args)
    assert (res.exit_code, res.stdout, res.stderr) == (2, "", f"error: {line}\n")
    assert list(tmp_path.iterdir()) == []


def test_a_hub_id_in_the_local_cache_is_read_by_its_config(run_cli, simulated: Path, monkeypatch) -> None:
    """A hub id whose config.json is cached matches by that config (never looked up online)."""
    import specband.deploy.transfer as transfer

    cached = simulated / "cached-config.json"
    cached.write_text((simulated / "Qwen3-8B" / "config.json").read_text())
    monkeypatch.setattr("huggingface_hub.try_to_load_from_cache", lambda repo, name, revision=None: str(cached))
    assert transfer._given_config("someorg/renamed-model") is not None
    res = run_cli("recommend", "-b", "16", "--models", "qm", "--target", "someorg/renamed-model")
    assert res.exit_code == 0, res.stderr
    # the same hub id with another config cached is another model, whatever its name
    other = json.loads(bundled_model_config_path("llama-3.1-8b-instruct").read_text())
    cached.write_text(json.dumps(other))
    res = run_cli("recommend", "-b", "16", "--models", "qm", "--target", "someorg/Qwen3-8B")
    assert res.exit_code == 2 and "target someorg/Qwen3-8B vs the data's ./Qwen3-8B" in res.stderr


def test_a_hand_made_copy_of_the_shape_matches_by_shape(run_cli, simulated: Path, tmp_path: Path) -> None:
    """A folder whose config.json holds only the model's shape (another hash) still matches by
    architecture, hidden size and layers."""
    (simulated / "copy").mkdir()
    _qwen3_folder(simulated / "copy", full=False)
    res = run_cli("recommend", "-b", "16", "--models", "qm", "--target", simulated / "copy" / "Qwen3-8B")
    assert res.exit_code == 0, res.stderr


def test_a_folder_named_like_the_studys_model_with_an_8b_config_is_refused(run_cli, tmp_path: Path) -> None:
    """Hostile trial: ./Llama-3.2-1B-Instruct holding Llama-3.1-8B's config.json passed the
    embedded study policy's check by its name."""
    os.chdir(tmp_path)
    folder = tmp_path / "Llama-3.2-1B-Instruct"
    folder.mkdir()
    config = json.loads(bundled_model_config_path("llama-3.1-8b-instruct").read_text())
    del config["_name_or_path"]
    (folder / "config.json").write_text(json.dumps(config))
    res = run_cli("recommend", "-b", "16", "--target", "./Llama-3.2-1B-Instruct")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith("error: the embedded study policy answers for another setup: target "
                                 "./Llama-3.2-1B-Instruct vs the data's unsloth/Llama-3.2-1B-Instruct "
                                 "(hidden size 4096 vs 2048, layers 32 vs 16)")  # fmt: skip
    # the study's own 1B config in that folder is the study's model
    config = json.loads(bundled_model_config_path("llama-3.2-1b-instruct").read_text())
    (folder / "config.json").write_text(json.dumps(config))
    assert run_cli("recommend", "-b", "16", "--target", "./Llama-3.2-1B-Instruct").exit_code == 0


def test_measured_rows_of_a_local_pair_match_the_same_folder_by_its_config(tmp_path: Path) -> None:
    """Measured rows record the model's path and no config hash (the real-vLLM sweep of a tiny
    pair): the same folder is the data's model, read from the rows' path; another config in a
    folder of the same name is not; and with nothing readable on either side, the name decides."""
    from specband.deploy.transfer import _model_difference

    draft = tmp_path / "pair" / "draft"
    draft.mkdir(parents=True)
    config = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 128, "num_hidden_layers": 1}
    (draft / "config.json").write_text(json.dumps(config))
    assert _model_difference("draft", str(draft), str(draft)) is None
    other = tmp_path / "other" / "draft"
    other.mkdir(parents=True)
    (other / "config.json").write_text(json.dumps({**config, "hidden_size": 256}))
    got = _model_difference("draft", str(other), str(draft))
    assert got == f"draft {other} vs the data's {draft} (hidden size 256 vs 128)"
    gone = str(tmp_path / "gone" / "draft")  # the rows' path is not on this machine: the name decides
    assert _model_difference("draft", str(draft), gone) is None
    assert _model_difference("draft", "org/unreadable-model", "org/unreadable-model") is None
