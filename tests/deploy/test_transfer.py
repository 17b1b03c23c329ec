"""Issue 18 items 2 and 3: no silent transfer (the typed check, its one line, --allow-transfer
as a warning) and the simulated first guess for a named GPU and model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specband.artifacts.folder import embedded_manifest
from specband.deploy.firstguess import first_guess
from specband.deploy.recommend import recommend
from specband.deploy.transfer import TransferError, UserSetup, check_transfer, gpu_key, model_key
from specband.deploy.usersetup import user_gpu
from specband.sim.published import calibration_errors

STUDY = embedded_manifest().origin


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("NVIDIA GeForce RTX 4060 Laptop GPU", "RTX4060_Laptop"),
        ("NVIDIA H100 80GB HBM3", "H100_SXM5_80GB"),
        ("NVIDIA H200", "H200_SXM_141GB"),
        ("NVIDIA A100-SXM4-80GB", "A100_SXM4_80GB"),
    ],
)
def test_nvml_names_match_the_sweep_hardware_labels(a: str, b: str) -> None:
    assert gpu_key(a) == gpu_key(b)


def test_gpu_models_that_differ_do_not_match() -> None:
    assert gpu_key("NVIDIA GeForce RTX 4060 GPU") != gpu_key("RTX4060_Laptop")  # desktop vs laptop
    assert gpu_key("NVIDIA H100 80GB HBM3") != gpu_key("H200_SXM_141GB")


def test_the_study_pair_under_another_org_is_the_same_model() -> None:
    assert model_key("meta-llama/Llama-3.2-1B-Instruct") == model_key("unsloth/Llama-3.2-1B-Instruct")
    check_transfer(STUDY, UserSetup(target="meta-llama/Llama-3.2-1B-Instruct"))


def test_a_70b_target_on_the_study_policy_is_refused_with_the_ways_forward() -> None:
    with pytest.raises(TransferError) as info:
        check_transfer(STUDY, UserSetup(target="meta-llama/Llama-3.1-70B-Instruct"), source="the embedded study policy")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "the embedded study policy answers for another setup: target meta-llama/Llama-3.1-70B-Instruct "
        "vs the data's unsloth/Llama-3.2-1B-Instruct"
    )
    assert "`specband sweep`" in message and "simulate --profile" in message and "--allow-transfer" in message


def test_a_local_model_folder_is_compared_by_config(tmp_path: Path) -> None:
    same = tmp_path / "my-llama"
    same.mkdir()
    same.joinpath("config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 16})
    )
    check_transfer(STUDY, UserSetup(target=str(same)))  # the study's 1B by config: not a transfer
    other = tmp_path / "big"
    other.mkdir()
    other.joinpath("config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "num_hidden_layers": 80})
    )
    with pytest.raises(TransferError, match=r"hidden size 8192 vs 2048, layers 80 vs 16"):
        check_transfer(STUDY, UserSetup(target=str(other)))


def test_allow_transfer_prints_the_difference_as_a_warning() -> None:
    setup = user_gpu("h100-sxm")
    with pytest.raises(TransferError, match=r"GPU H100_SXM5_80GB \(--gpu h100-sxm\) vs the data's RTX4060_Laptop; "):
        check_transfer(STUDY, setup)
    checked = check_transfer(STUDY, setup, allow=True)
    assert checked.differences == (
        "GPU H100_SXM5_80GB (--gpu h100-sxm) vs the data's RTX4060_Laptop",
        "power limit 700 W vs the data's 80 W",
    )
    assert checked.warnings[0].startswith("transferred (--allow-transfer): GPU H100_SXM5_80GB")


def test_without_nvml_the_gpu_is_said_to_be_unchecked() -> None:
    setup = user_gpu(None)  # this machine has no NVML
    assert setup.gpu_name is None and setup.gpu_unchecked == "no NVML here"
    checked = check_transfer(STUDY, setup, source="the embedded study policy")
    assert checked.differences == ()
    assert checked.warnings == (
        "the GPU could not be checked (no NVML here); the embedded study policy is from RTX4060_Laptop at 80 W "
        "(--gpu PROFILE names yours)",
    )


def test_recommend_with_a_setup_checks_and_reports_the_transfer() -> None:
    with pytest.raises(TransferError):
        recommend(16, setup=UserSetup(target="meta-llama/Llama-3.1-70B-Instruct"))
    taken = recommend(16, setup=UserSetup(target="meta-llama/Llama-3.1-70B-Instruct"), allow_transfer=True)
    assert taken.transfer.to_json() == {
        "differences": ["target meta-llama/Llama-3.1-70B-Instruct vs the data's unsloth/Llama-3.2-1B-Instruct"],
        "transferred": True,
    }
    assert any(n.startswith("transferred (--allow-transfer): target") for n in taken.notes)


def test_the_first_guess_is_a_labelled_simulation_with_its_calibration_error() -> None:
    pick = first_guess(16, "h100-sxm", "llama-3.1-8b-instruct", "eagle3-llama-3.1-8b-instruct")
    assert pick.source.startswith("simulated first guess (h100-sxm")
    origin = pick.origin.data
    assert origin.provenance == "simulated" and origin.power_measured is False
    assert origin.hardware == "H100_SXM5_80GB" and origin.power_limit_w == pick.power_limit_w
    assert origin.target_model == "meta-llama/Llama-3.1-8B-Instruct"
    assert pick.origin.repeats is None  # the model's expected figures: no simulated rows, no repeats
    errors = calibration_errors("h100-sxm")
    # the published rows measured this pair on this GPU, and the pair's own acceptance is used:
    # their errors are quoted (one H100 row has both a speed and an accept length: too few for a
    # step-time error, which the H200 first guess quotes)
    assert pick.calibration is not None and set(pick.calibration) == set(errors) and errors
    for metric, err in errors.items():
        assert pick.calibration[metric].median_abs_error == pytest.approx(err.median_abs_error, abs=1e-4)
        assert pick.calibration[metric].rows == err.rows
    assert pick.notes[0] == "acceptance: bundled profile llama-3.1-8b/eagle3-8b/mt-bench (workload mt-bench)"
    assert pick.notes[1].startswith(
        "SIMULATED on h100-sxm, not measured; calibration error of h100-sxm with meta-llama/Llama-3.1-8B-Instruct + "
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: "
    )
    assert "a sweep settles" in pick.notes[-1]
    chosen = pick.joint.chosen
    assert chosen.speed_tok_s.source == "simulated" and pick.joint.provenance == "simulated"
    assert chosen.reward > 0  # faster than the baseline (the reward's speed term is above 0)
    assert pick.action.speculative_eagle_topk == 1  # a chain at bs 16 on H100 (trees cost more there)


def test_a_first_guess_for_a_profile_without_published_rows_says_so() -> None:
    guess = first_guess(4, "a100-sxm4-80gb")
    assert calibration_errors("a100-sxm4-80gb") == {}
    assert guess.calibration == {}
    assert "no measured row holds a100-sxm4-80gb with unsloth/Llama-3.2-1B-Instruct" in guess.notes[1]
