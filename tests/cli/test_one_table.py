"""Issue 35: one table by default. `recommend -b 1,8,32,64` answers every batch size asked in one
table (stderr) and the commands to type (stdout); the notes wait for --explain; a bundled model
name with --gpu and no data gets a labelled first guess with its limit instead of a refusal."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

ROW = re.compile(r"^ +(\d+)(~\d+)? +(\(\d+,\d+,\d+\)) +([\d.]+) W +")
H100 = ("--gpu", "h100-sxm")


def _rows(stderr: str) -> list[tuple[int, str, float, float]]:
    """(batch size, config, limit W, utilisation) of each table row."""
    out = []
    for line in stderr.splitlines():
        m = ROW.match(line)
        if m:
            rest = line[m.end() :].split()  # tok/s [lo, hi] utilisation ...
            util = float(rest[3] if rest[1].startswith("[") else rest[1])
            out.append((int(m.group(1)), m.group(3), float(m.group(4)), util))
    return out


def test_a_list_of_batch_sizes_is_one_table_and_grouped_commands(run_cli: Any) -> None:
    res = run_cli("recommend", "-b", "1,4,8,16")
    assert res.exit_code == 0, res.stderr
    lines = res.stderr.splitlines()
    assert lines[0].startswith("published data: RTX4060_Laptop at 80 W") and "tok/s per request [95 %]" in lines[1]
    rows = _rows(res.stderr)
    assert [(bs, cfg, limit) for bs, cfg, limit, _ in rows] == [
        (1, "(3,4,8)", 80.0), (4, "(3,4,8)", 80.0), (8, "(3,4,8)", 80.0), (16, "(3,2,4)", 80.0),
    ]  # fmt: skip
    assert [u for *_, u in rows] == [0.888, 0.939, 0.981, 0.970]
    assert all("published, decode window" in line for line in lines[2:6])
    # one limit in the data: nothing to set; each miss of the band says where a limit would put it
    assert "note: bs 1: the data holds one limit, 80 W: (3,4,8) draws 0.888 of it" in res.stderr
    assert res.stdout.splitlines() == [
        "# bs 1, 4, 8",
        "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 4 "
        "--speculative-num-draft-tokens 8",
        "# bs 16",
        "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 2 "
        "--speculative-num-draft-tokens 4",
    ]
    # the notes behind the answer wait for --explain (the origin line, the runner-up, the band notes)
    assert "runner-up" not in res.stderr and "pick rests on" not in res.stderr
    explained = run_cli("recommend", "-b", "1,4,8,16", "--explain")
    assert explained.stdout == res.stdout and "note: runner-up: " in explained.stderr
    assert len(explained.stderr) > 2 * len(res.stderr)


def test_the_json_of_several_batch_sizes_carries_every_row_and_its_answer(run_cli: Any) -> None:
    doc = json.loads(run_cli("recommend", "-b", "1,16", "--format", "json").stdout)
    assert list(doc) == ["header", "batch_sizes", "commands", "warnings", "notes"]
    first, last = doc["batch_sizes"]
    assert (first["batch_size"], last["batch_size"]) == (1, 16)
    assert first["answer"]["action"] == first["action"] == [3, 4, 8] and first["power_limit_w"] == 80.0
    assert first["speed_tok_s"]["source"] == "published" and first["power_basis"] == "decode window"
    assert first["nvidia_smi"] is None and first["role"] == "pick"
    assert doc["commands"][0] == "# bs 1" and any("runner-up" in n for n in doc["notes"])


@pytest.mark.parametrize(
    "target", ["llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct", "META-LLAMA/llama-3.1-8b-instruct"]
)
def test_a_bundled_name_with_a_gpu_gets_a_first_guess_with_its_limit(run_cli: Any, target: str) -> None:
    res = run_cli("recommend", *H100, "--target", target, "-b", "1,8,32,64")
    assert res.exit_code == 0, res.stderr
    assert res.stderr.startswith("SIMULATED first guess, not measured: H100_SXM5_80GB (h100-sxm)")
    rows = _rows(res.stderr)
    assert [r[0] for r in rows] == [1, 8, 32, 64]
    assert all(200 <= limit <= 700 and 0.95 <= util <= 0.98 for _, _, limit, util in rows), rows
    assert "a simulated first guess for the models named instead" in res.stderr
    smi = [line for line in res.stdout.splitlines() if line.startswith("sudo nvidia-smi -pl ")]
    assert [float(line.split()[-1]) for line in smi] == [r[2] for r in rows]
    assert "one GPU holds one limit at a time" in res.stderr  # four limits for one GPU: said


def test_a_name_not_bundled_or_named_data_keeps_the_refusal(run_cli: Any, tmp_path: Any) -> None:
    other = run_cli("recommend", *H100, "--target", "someorg/Other-70B", "-b", "8")
    assert other.exit_code == 2 and other.stderr.startswith("error: the embedded study policy answers for another")
    no_gpu = run_cli("recommend", "--target", "llama-3.1-8b-instruct", "-b", "8")
    assert no_gpu.exit_code == 2 and "another setup" in no_gpu.stderr


def test_launch_dry_run_prints_the_picked_limit_it_does_not_set(run_cli: Any, tmp_path: Any) -> None:
    res = run_cli("launch", "--dry-run", *H100, "--target", "meta-llama/Llama-3.1-8B-Instruct",
                  "--draft", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "-b", "8", "--device", "none",
                  "--sglang-version", "0.5.23", "--log", tmp_path / "s.log")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    version, limit, line = res.stdout.splitlines()
    assert version == "# sglang 0.5.23 (--sglang-version)"
    (row,) = _rows(res.stderr)
    assert limit == f"# sudo nvidia-smi -pl {row[2]:g}" and "--speculative-num-steps 5" in line
    assert "SIMULATED first guess" in res.stderr and not (tmp_path / "s.log").exists()
