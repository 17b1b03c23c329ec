"""A first guess says what it rests on (issue 29, item 3): the acceptance first (fitted, bundled
or borrowed, and why), the calibration error of the profile *and* pair simulated, a speed
interval that a borrowed acceptance widens, and one config without its pair is an error."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.deploy.qwen3_configs import write_qwen3_pair
from tests.sim.specbundle_h200 import SPECBUNDLE_H200, write_bench_file

from specband.core.errors import ConfigError
from specband.deploy.firstguess import first_guess


@pytest.fixture
def qwen3(tmp_path: Path) -> tuple[Path, Path]:
    """Qwen3-8B and an EAGLE3 head for it: a pair no bundled profile covers."""
    return write_qwen3_pair(tmp_path)


def _width(pick) -> float:  # type: ignore[no-untyped-def]
    s = pick.speed_interval
    return (s.hi95 - s.lo95) / s.speed_tok_s


def test_the_qwen3_first_guess_names_the_borrowed_acceptance(qwen3: tuple[Path, Path]) -> None:
    target, draft = qwen3
    pick = first_guess(8, "h200", str(target), str(draft))
    # the nearest profiled pair (issue 36): a dense target of 7.5B parameters per token, not the 1B laptop pair
    assert pick.notes[0].startswith(
        "acceptance: BORROWED from pair meta-llama/Llama-3.1-8B-Instruct + lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B "
        "(profile llama-3.1-8b/eagle3-8b/mt-bench, workload mt-bench), because no "
        "profile for Qwen/Qwen3-8B + Tengyunw/qwen3_8b_eagle3"
    )
    # no measured row holds h200 with this pair: nothing quoted (not the Llama-3.1-8B pair's errors)
    assert pick.calibration == {}
    assert pick.notes[1] == (
        "SIMULATED on h200, not measured; no measured row holds h200 with Qwen/Qwen3-8B + Tengyunw/qwen3_8b_eagle3 "
        "to a calibration error"
    )
    assert not any("accept_length median" in note for note in pick.notes)
    assert pick.speed_interval is not None
    assert pick.speed_interval.acceptance_source == "borrowed llama-3.1-8b/eagle3-8b/mt-bench"
    # a borrowed acceptance widens the interval against the 8B pair's own profile
    own = first_guess(8, "h200", "llama-3.1-8b-instruct", "eagle3-llama-3.1-8b-instruct")
    assert own.notes[0] == "acceptance: bundled profile llama-3.1-8b/eagle3-8b/mt-bench (workload mt-bench)"
    assert _width(pick) > 3 * _width(own)
    assert own.calibration is not None and {"step_time", "accept_length", "speed_tok_s"} <= set(own.calibration)
    assert own.calibration["accept_length"].rows == 5


def test_a_first_guess_fitted_from_a_file_names_it(tmp_path: Path) -> None:
    bench = write_bench_file(tmp_path / "he.jsonl", "humaneval", "specforge")
    pick = first_guess(1, "h200", "llama-3.1-8b-instruct", acceptance_from=str(bench))
    assert pick.notes[0].startswith(f"acceptance fitted to 2 configs of {bench} (parameters first_token_accept")
    assert "residuals (3, 1, 4): measured 3.340, fitted 3.340" in pick.notes[0]
    # the published accept-length and speed errors are of MT-bench's acceptance: not quoted
    assert pick.calibration is not None and set(pick.calibration) == {"step_time"}
    assert pick.speed_interval is not None
    assert pick.speed_interval.acceptance_source == f"fitted to 2 configs of {bench}"
    if pick.action in SPECBUNDLE_H200[("humaneval", "specforge")]:  # a measured chain: inside its interval
        speed = SPECBUNDLE_H200[("humaneval", "specforge")][pick.action][0]
        assert pick.speed_interval.lo95 <= speed <= pick.speed_interval.hi95


def test_one_config_alone_brings_its_bundled_pair() -> None:
    pick = first_guess(8, "h200", "llama-3.1-8b-instruct")
    assert pick.origin.data.draft_model == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    pick = first_guess(8, "h200", None, "eagle3-llama-3.1-8b-instruct")
    assert pick.origin.data.target_model == "meta-llama/Llama-3.1-8B-Instruct"


def test_one_config_without_its_pair_is_one_error_naming_the_option(run_cli, qwen3: tuple[Path, Path]) -> None:
    target, draft = qwen3
    res = run_cli("recommend", "--gpu", "h200", "--target-config", target, "-b", "8")
    assert res.exit_code == 2 and res.stdout == "" and len(res.stderr.splitlines()) == 1
    assert res.stderr.startswith("error: --draft-config: needed with --target-config Qwen/Qwen3-8B (no bundled")
    res = run_cli("recommend", "--gpu", "h200", "--draft-config", draft, "-b", "8")
    assert res.exit_code == 2 and res.stdout == "" and len(res.stderr.splitlines()) == 1
    assert res.stderr.startswith("error: --target-config: needed with --draft-config Tengyunw/qwen3_8b_eagle3")
    with pytest.raises(ConfigError, match=r"^--draft-config: needed"):
        first_guess(8, "h200", str(target))


def test_recommend_acceptance_from_prints_the_fit_and_the_interval(run_cli, tmp_path: Path) -> None:
    bench = write_bench_file(tmp_path / "mt.jsonl", "mtbench", "old")
    args = ("recommend", "--gpu", "h200", "--target-config", "llama-3.1-8b-instruct", "-b", "1")
    res = run_cli(*args, "--acceptance-from", bench, "--format", "json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    interval = doc["speed_interval"]
    assert interval["provenance"] == "simulated" and interval["lo95"] < interval["speed_tok_s"] < interval["hi95"]
    assert interval["acceptance_source"] == f"fitted to 2 configs of {bench}"
    assert doc["table"]["speed_tok_s"]["value"] == pytest.approx(interval["speed_tok_s"], rel=1e-3)
    text = run_cli(*args, "--acceptance-from", bench, "--explain")
    title = text.stderr.splitlines()[0]
    assert title.startswith("SIMULATED first guess") and f"acceptance fitted to 2 configs of {bench}" in title
    assert f"\nnote: acceptance fitted to 2 configs of {bench}" in text.stderr  # the first note behind it
    assert "note: SIMULATED speed of the pick at batch size 1: " in text.stderr
    alone = run_cli("recommend", "--acceptance-from", bench, "-b", "1")
    assert alone.exit_code == 2
    assert alone.stderr.strip() == "error: --acceptance-from makes a simulated first guess: give --gpu PROFILE"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("[]\n")
    res = run_cli(*args, "--acceptance-from", bad)
    assert res.exit_code != 0 and res.stderr.splitlines() == [f"error: {bad}:1: expected a JSON object, got list"]


def test_launch_serves_a_first_guess_fitted_from_a_file(run_cli, tmp_path: Path) -> None:
    models = Path(__file__).parents[2] / "src/specband/data/models"
    for name, config in (("target", "llama-3.1-8b-instruct"), ("draft", "eagle3-llama-3.1-8b-instruct")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text((models / f"{config}.json").read_text())
    bench = write_bench_file(tmp_path / "he.jsonl", "humaneval", "old")
    launch = ("launch", "--target", tmp_path / "target", "--draft", tmp_path / "draft", "-b", "1", "--dry-run")
    launch += ("--device", "none", "--sglang-version", "0.5.23", "--log", tmp_path / "s.log")
    res = run_cli(*launch, "--gpu", "h200", "--acceptance-from", bench, "--explain")
    assert res.exit_code == 0, res.stderr
    assert res.stderr.startswith("SIMULATED first guess") and f"acceptance fitted to 2 configs of {bench}" in res.stderr
    assert f"\nnote: acceptance fitted to 2 configs of {bench}" in res.stderr
    assert "--speculative-eagle-topk 1" in res.stdout  # a chain: the trees are slower on the H200 at bs 1
    refused = run_cli(*launch, "--acceptance-from", bench)
    assert refused.exit_code == 2
    assert refused.stderr.strip() == "error: --acceptance-from makes a simulated first guess: give --gpu PROFILE"
    refused = run_cli(*launch, "--gpu", "h200", "--acceptance-from", bench, "--models", tmp_path)
    assert refused.exit_code == 2
    assert refused.stderr.strip() == (
        "error: --acceptance-from makes a simulated first guess for one batch size: not with --models"
    )


def test_a_first_guess_from_a_probe_file_names_it(tmp_path: Path) -> None:
    probe = {
        "format": "specband-probe",
        "version": 1,
        "engine": "vllm",
        "engine_version": "0.32.0",
        "url": "http://127.0.0.1:8000",
        "target": "meta-llama/Llama-3.1-8B-Instruct",
        "draft": "/models/my-head",
        "action": [3, 1, 4],
        "flags": {"num_speculative_tokens": 3},
        "acceptance": {
            "accept_length": 3.05,
            "num_drafts": 5000,
            "verify_steps": None,
            "position_accept": [0.85, 0.69, 0.51],
            "accept_histogram": None,
            "source": "server metrics",
        },
        "batch_sizes_seen": [4],
        "batch_size_source": "vllm:num_requests_running",
        "power": None,
        "power_note": None,
        "requests_sent": 8,
        "max_requests": 64,
        "notes": [],
        "probed_at_unix": 1796212345.0,
        "specband_version": "0",
    }  # fmt: skip (a version-1 file, written before the reading digest: still read)
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(probe))
    pick = first_guess(4, "h200", "llama-3.1-8b-instruct", acceptance_from=str(path))
    assert pick.notes[0].startswith(
        f"acceptance fitted to 1 config of {path} (parameters first_token_accept, depth_decay"
    )
    assert pick.notes[1] == (
        f"{path} measured draft /models/my-head; the model simulates yuhuili/EAGLE3-LLaMA3.1-Instruct-8B with that "
        "acceptance"
    )
    # the same heads to the simulator (one profile covers both): no such note
    probe["draft"] = "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B"
    path.write_text(json.dumps(probe))
    pick = first_guess(4, "h200", "llama-3.1-8b-instruct", acceptance_from=str(path))
    assert pick.notes[1].startswith("SIMULATED on h200, not measured; calibration error of h200 with ")


def _workload_labels(run_cli, *args: str) -> list[str]:
    res = run_cli("recommend", *args, "--explain")  # the origin line and the notes: behind --explain
    assert res.exit_code == 0, res.stderr
    labels = re.findall(r"\bworkload ([^,;)]+)", res.stderr)
    assert labels, res.stderr
    return sorted(set(labels))  # one workload, however many lines name it


def test_one_answer_names_one_workload(run_cli, qwen3: tuple[Path, Path], tmp_path: Path) -> None:
    """Issue 37: the first note said ``workload mt-bench`` and the origin line ``workload not
    recorded`` for the same pick; the simulated rows now record their acceptance's workload."""
    bundled = _workload_labels(run_cli, "-b", "4", "--gpu", "h100-sxm", "--target-config", "llama-3.1-8b-instruct")
    assert bundled == ["mt-bench"]
    target, draft = qwen3
    borrowed = _workload_labels(run_cli, "-b", "8", "--gpu", "h200", "--target-config", str(target),
                                "--draft-config", str(draft))  # fmt: skip
    assert borrowed == ["mt-bench"]  # borrowed from the nearest pair's profile (issue 36), named alike
    bench = write_bench_file(tmp_path / "he.jsonl", "humaneval", "specforge")
    res = run_cli("recommend", "-b", "1", "--gpu", "h200", "--target-config", "llama-3.1-8b-instruct",
                  "--acceptance-from", str(bench), "--explain")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert f"fitted to 2 configs of {bench}" in res.stderr and "workload not recorded" not in res.stderr
