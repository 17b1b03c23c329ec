"""Schedule files are checked against what the engines accept and specband's bounds (hostile
trial N16, N49, B32): one line naming the file and the field, nothing passed on to a server."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from specband.core.limits import MAX_SPECULATIVE_STEPS

VLLM = {
    "method": "eagle3",
    "model": "d",
    "num_speculative_tokens": 3,
    "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 8, 1]],
}
RANGES = "num_speculative_tokens_per_batch_size"

MAX = MAX_SPECULATIVE_STEPS
VLLM_BAD = {
    "extra keys": (
        {**VLLM, "draft_tensor_parallel_size": 8, "quantization": "evil"},
        "draft_tensor_parallel_size",
        "not a key of a schedule file",
    ),
    "K 1000": (
        {**VLLM, "num_speculative_tokens": 1000, RANGES: [[1, 4, 1000]]},
        "num_speculative_tokens",
        f"over {MAX}",
    ),
    "range K over the bound": (
        {**VLLM, "num_speculative_tokens": 64, RANGES: [[1, 4, 65]]},
        RANGES,
        f"K 65 is over {MAX}",
    ),
    "ngram": ({**VLLM, "method": "ngram"}, "method", "a schedule runs EAGLE3"),
    "unsorted": ({**VLLM, RANGES: [[5, 8, 3], [1, 4, 1]]}, RANGES, "in order of their start"),
    "end 1e20": ({**VLLM, RANGES: [[1, 10**20, 3]]}, RANGES, "ends over 1048576"),
    "all zero": ({**VLLM, RANGES: [[1, 4, 0], [5, 8, 0]]}, RANGES, "never speculates"),
    "K over num_speculative_tokens": ({**VLLM, RANGES: [[1, 4, 5]]}, RANGES, "over num_speculative_tokens 3"),
    "many ranges": ({**VLLM, RANGES: [[i, i, 1] for i in range(1, 5000)]}, RANGES, "over 4096"),
}


def _steps(steps: list[int], key: str = "1") -> dict[str, dict[str, list[int]]]:
    return {key: {"candidate_steps": steps}}


FULL_WIDTH = "\uff11\uff16"
SGLANG_BAD = {
    "100000 steps": (_steps(list(range(1, 100_001))), "1.candidate_steps", "over 64"),
    "steps 99": (_steps([99]), "1.candidate_steps", "candidate step 99 is over 64"),
    "repeated steps": (_steps([3, 3, 3]), "1.candidate_steps", "names a step count twice"),
    "tier 0": (_steps([3], "0"), "0", "must be in [1, 1048576]"),
    "tier 1e20": (_steps([3], "9" * 20), "9" * 20, "must be in [1"),
    "tier 5000 digits": (_steps([3], "9" * 5000), "9" * 5000, "must be in [1"),
    "tier +16": ({**_steps([3]), **_steps([3], "+16")}, "+16", "ASCII digits"),
    "tier full-width": ({**_steps([3]), **_steps([3], FULL_WIDTH)}, FULL_WIDTH, "ASCII digits"),
    "unknown tier key": ({"1": {"candidate_steps": [3], "evil": 1}}, "1.evil", "unknown key"),
    "unknown top key": ({**_steps([3]), "evil": 1}, "evil", "unknown key"),
    "NaN knob": ({"1": {"candidate_steps": [3], "ema_alpha": float("nan")}}, "1.ema_alpha", "must be a number in"),
    "200000 tiers": ({str(i): {"candidate_steps": [1]} for i in range(1, 200_001)}, None, "over 4096"),
}


def _launch(run_cli, schedule: Path, *engine: str):
    return run_cli(
        "launch", *engine, "--target", "m", "--draft", "d", "--schedule", schedule, "--dry-run", "--allow-transfer"
    )


def _error(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stderr[-1500:])
    errors = [line for line in result.stderr.splitlines() if not line.startswith(("note:", "warning:"))]
    assert len(errors) == 1 and errors[0].startswith("error: "), result.stderr[-1500:]
    return errors[0]


def test_a_vllm_schedule_specband_writes_launches(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "v.json"
    path.write_text(json.dumps(VLLM))
    result = _launch(run_cli, path, "--engine", "vllm")
    assert result.exit_code == 0, result.stderr
    assert '"num_speculative_tokens_per_batch_size":[[1,4,3],[5,8,1]]' in result.stdout


@pytest.mark.parametrize("case", list(VLLM_BAD))
def test_a_hostile_vllm_schedule_is_one_line_naming_file_and_field(run_cli, tmp_path: Path, case: str) -> None:
    obj, field, message = VLLM_BAD[case]
    path = tmp_path / "v.json"
    path.write_text(json.dumps(obj))
    line = _error(_launch(run_cli, path, "--engine", "vllm"))
    assert line.startswith(f"error: --schedule {path}: field '{field}': ") and message in line, line


@pytest.mark.parametrize("case", list(SGLANG_BAD))
def test_a_hostile_sglang_schedule_is_one_line_naming_file_and_field(run_cli, tmp_path: Path, case: str) -> None:
    obj, field, message = SGLANG_BAD[case]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(obj))
    line = _error(_launch(run_cli, path))
    where = f"error: {path}: " + ("" if field is None else f"field {field!r}: ")
    assert line.startswith(where) and message in line, line[:300]


def test_a_tier_key_given_twice_is_refused(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"1": {"candidate_steps": [3]}, "1": {"candidate_steps": [5]}}')
    assert _error(_launch(run_cli, path)) == f"error: {path}: field '1': given twice (JSON keeps only the last one)"


def test_an_sglang_schedule_within_the_bounds_launches(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"1": {"candidate_steps": [1, 3], "ema_alpha": 0.3}, "16": {"candidate_steps": [0, 1]}}))
    result = _launch(run_cli, path)
    assert result.exit_code == 0, result.stderr
    assert "--speculative-num-steps 1 " in result.stdout and f"--speculative-adaptive-config {path}" in result.stdout


def test_a_schedule_path_that_starts_with_a_dash_keeps_its_dot_slash(run_cli, tmp_path, monkeypatch) -> None:
    """SCH4: './--config=evil.json' went on the server line as '--config=evil.json' (pathlib drops
    the './'), which sglang's parser read as an option; the path keeps its './'."""
    monkeypatch.chdir(tmp_path)
    Path("--config=evil.json").write_text(json.dumps(_steps([3])))
    result = _launch(run_cli, Path("./--config=evil.json"))
    assert result.exit_code == 0, result.stderr
    (line,) = [ln for ln in result.stdout.splitlines() if "--speculative-adaptive-config" in ln]
    argv = shlex.split(line)
    assert argv[argv.index("--speculative-adaptive-config") + 1] == "./--config=evil.json"
    assert "--config=evil.json" not in argv
