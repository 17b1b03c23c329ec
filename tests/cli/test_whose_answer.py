"""Issue 18 at the command line: the 70B launch refused with its message, the origin fields
of ``recommend --format json``, the simulated first guess, and ``schedule``'s origin and the
reasons it turns speculation off."""

from __future__ import annotations

import json
import os
from pathlib import Path

ORIGIN_FIELDS = {
    "hardware",
    "power_limit_w",
    "target_model",
    "draft_model",
    "workload",
    "provenance",
    "power_measured",
    "power_source",
    "profile",
    "engine",
    "engine_version",
    "rows",
    "repeats",
    "heldout_interval",
}


def test_a_70b_launch_on_the_study_policy_is_refused_in_a_fresh_folder(run_cli) -> None:  # type: ignore[no-untyped-def]
    assert os.listdir(".") == []  # a fresh folder: no ./specband-models, the embedded study policy answers
    res = run_cli(
        "launch", "-b", "8", "--target", "meta-llama/Llama-3.1-70B-Instruct",
        "--draft", "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", "--dry-run",
    )  # fmt: skip
    assert res.exit_code == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0] == (
        "error: the embedded study policy answers for another setup: target meta-llama/Llama-3.1-70B-Instruct vs "
        "the data's unsloth/Llama-3.2-1B-Instruct; draft yuhuili/EAGLE3-LLaMA3.3-Instruct-70B vs the data's "
        "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct. Ways forward: `specband sweep` on this GPU (then "
        "`specband train` on it), `specband recommend --gpu PROFILE --target-config CONFIG --draft-config CONFIG` "
        "or `specband simulate --profile PROFILE` for a simulated first guess, or --allow-transfer to take this "
        "pick anyway"
    )
    assert os.listdir(".") == []  # nothing written (not even the log)
    taken = run_cli(
        "launch", "-b", "8", "--target", "meta-llama/Llama-3.1-70B-Instruct",
        "--draft", "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", "--dry-run", "--allow-transfer", "--sglang-version", "0.5.6",
        "--explain",
    )  # fmt: skip
    assert taken.exit_code == 0, taken.stderr
    assert "note: transferred (--allow-transfer): target meta-llama/Llama-3.1-70B-Instruct vs" in taken.stderr
    assert "note: pick rests on published data: RTX4060_Laptop at 80 W" in taken.stderr


def test_launch_with_the_study_pair_is_no_transfer(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(
        "launch", "-b", "8", "--target", "meta-llama/Llama-3.2-1B-Instruct",
        "--draft", "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct", "--dry-run", "--sglang-version", "0.5.6",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert "transferred" not in res.stderr
    assert "note: the GPU could not be checked (no NVML here)" in res.stderr


def test_recommend_json_carries_the_origin_fields(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli("recommend", "-b", "16", "--format", "json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert set(doc["origin"]) == ORIGIN_FIELDS
    assert doc["origin"]["hardware"] == "RTX4060_Laptop" and doc["origin"]["provenance"] == "published"
    assert doc["explanation"]["pick"]["band"] == {"status": "in", "by": 0.0, "low": 0.95, "high": 0.98}
    assert doc["transfer"] == {"differences": [], "transferred": False}
    # text form: the flags alone on stdout, the table on stderr, the origin and explanation with --explain
    text = run_cli("recommend", "-b", "16", "--explain")
    assert len(text.stdout.splitlines()) == 1
    assert "note: expected (published, bs 16): (3,2,4):" in text.stderr
    assert "note: runner-up: " in text.stderr


def test_recommend_gpu_profile_of_another_gpu_is_refused(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli("recommend", "-b", "16", "--gpu", "h100-sxm")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith(
        "error: the embedded study policy answers for another setup: GPU H100_SXM5_80GB (--gpu h100-sxm) vs the "
        "data's RTX4060_Laptop; power limit 700 W vs the data's 80 W. Ways forward:"
    )


def test_the_first_guess_command(run_cli) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(
        "recommend", "--gpu", "h100-sxm", "--target-config", "llama-3.1-8b-instruct",
        "--draft-config", "eagle3-llama-3.1-8b-instruct", "-b", "16", "--format", "json",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    # simulated rows also record their models' architectures and config identities (issue 30)
    identity = {"target_architecture", "target_config_sha256", "draft_architecture", "draft_config_sha256"}
    assert set(doc["origin"]) == ORIGIN_FIELDS | identity and doc["origin"]["provenance"] == "simulated"
    assert (
        doc["origin"]["target_architecture"] == "LlamaForCausalLM" and len(doc["origin"]["target_config_sha256"]) == 64
    )
    assert doc["calibration"]["speedup"]["rows"] >= 1
    assert res.stderr.startswith("note: acceptance: bundled profile llama-3.1-8b/eagle3-8b/mt-bench")
    assert "note: SIMULATED on h100-sxm, not measured; calibration error of h100-sxm with " in res.stderr
    assert doc["speed_interval"]["lo95"] < doc["speed_interval"]["speed_tok_s"] < doc["speed_interval"]["hi95"]
    assert "a sweep settles what this cannot" in res.stderr
    missing = run_cli("recommend", "--target-config", "llama-3.1-8b-instruct", "-b", "16")
    assert missing.exit_code == 2
    assert missing.stderr.strip() == (
        "error: --target-config/--draft-config make a simulated first guess: give --gpu PROFILE"
    )


def test_schedule_says_whose_it_is_and_why_speculation_is_off(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "s.json"
    res = run_cli("schedule", "--engine", "sglang", "--out", str(out), "--format", "json", "--no-engine-check")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["origin"]["hardware"] == "RTX4060_Laptop" and doc["transfer"]["transferred"] is False
    off = {b["batch_size"]: b["speculation_off"] for b in doc["batch_sizes"]}
    assert off[4] is None and off[8] is None
    assert off[1] == (
        "batch size 1: speculation off: no chain config (topk 1) was measured at batch size 1, and sglang's "
        "adaptive tiers run chains only"
    )
    assert off[16] is not None and off[16].startswith("batch size 16: speculation off")
    text = run_cli("schedule", "--engine", "sglang", "--out", str(out), "--force", "--no-engine-check")
    assert "note: batch size 16: speculation off: no chain config" in text.stderr
    vllm = run_cli("schedule", "--engine", "vllm", "--out", str(tmp_path / "k.json"), "--format", "json")
    assert vllm.exit_code == 0, vllm.stderr
    off_vllm = {b["batch_size"]: b["speculation_off"] for b in json.loads(vllm.stdout)["batch_sizes"]}
    assert off_vllm[1] == (  # the vLLM schedule names vLLM's K, not sglang's tiers
        "batch size 1: speculation off: no chain config (topk 1) was measured at batch size 1, and vLLM's "
        "per-batch-size K runs chains only"
    )
    refused = run_cli("schedule", "--engine", "vllm", "--out", str(tmp_path / "v.json"), "--gpu", "h200")
    assert refused.exit_code == 2 and "GPU H200_SXM_141GB (--gpu h200) vs the data's RTX4060_Laptop" in refused.stderr
    assert not (tmp_path / "v.json").exists()  # refused before anything is written
