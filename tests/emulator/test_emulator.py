"""The sglang-compatible emulator: endpoints, JSON shapes, the scheduler, faults."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import httpx
import pytest
from tests.servers import TIME_SCALE, emulator_command, free_port, processes_with

from specband.core.errors import ConfigError
from specband.devices.base import Clock
from specband.emulator.env import MODEL_ENV, STATE_ENV, TIME_SCALE_ENV
from specband.emulator.faults import parse_fault
from specband.emulator.launchargs import parse_launch_args
from specband.engines.client import fetch_server_info, run_batch
from specband.engines.failures import LaunchError, PortInUseError
from specband.engines.serverconfig import SGLANG_ENV, ServerConfig, build_launch_command
from specband.harness.process import ServerProcess
from specband.sim import build_model

#: The performance model behind the emulator in these tests (``SPECBAND_EMULATOR_MODEL=calibrated``).
MODEL = build_model("rtx4060-laptop")


def _start(
    tmp_path: Path,
    port: int,
    action,
    bs: int,
    *,
    options: str = "",
    env_extra: dict | None = None,
    mem: float = 0.65,
    timeout_s: float = 60000.0,  # 600 s real: an emulator's Python start on a busy machine
) -> ServerProcess:
    cfg = ServerConfig(model_path="m", draft_model_path="d", port=port, server_command=emulator_command(options))
    env = {
        **os.environ,
        **SGLANG_ENV,
        STATE_ENV: str(tmp_path / "gpu.json"),
        TIME_SCALE_ENV: str(TIME_SCALE),
        MODEL_ENV: "calibrated",
        **(env_extra or {}),
    }
    server = ServerProcess(
        build_launch_command(cfg, action, bs, mem),
        host="127.0.0.1",
        port=port,
        log_path=tmp_path / "server.log",
        env=env,
        clock=Clock(TIME_SCALE),
    )
    server.start()
    try:
        server.wait_healthy(timeout_s, 0.5)
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="module")
def spec_server(tmp_path_factory):
    """One emulated server, (3,4,8) at max 4 running requests, for the endpoint tests."""
    tmp = tmp_path_factory.mktemp("emu")
    port = free_port()
    server = _start(tmp, port, (3, 4, 8), 4)
    yield server
    server.stop()
    assert processes_with(f"--port {port}") == []


def test_health_models_and_404(spec_server):
    with httpx.Client(trust_env=False) as c:
        assert c.get(spec_server.base_url + "/health").status_code == 200
        models = c.get(spec_server.base_url + "/v1/models").json()
        assert models["object"] == "list" and models["data"][0]["id"] == "m"
        assert models["data"][0]["owned_by"] == "sglang"
        assert c.get(spec_server.base_url + "/get_model_info").json()["is_generation"] is True
        assert c.get(spec_server.base_url + "/nope").status_code == 404


def test_generate_single_batch_and_stream(spec_server):
    url = spec_server.base_url + "/generate"
    params = {"max_new_tokens": 40, "temperature": 0, "ignore_eos": True}
    with httpx.Client(trust_env=False, timeout=30) as c:
        one = c.post(url, json={"text": "hello", "sampling_params": params}).json()
        meta = one["meta_info"]
        assert meta["completion_tokens"] == 40
        assert meta["finish_reason"] == {"type": "length", "length": 40}
        assert 1 <= meta["spec_verify_ct"] <= 40
        assert meta["spec_accept_length"] == pytest.approx(40 / meta["spec_verify_ct"])
        assert meta["e2e_latency"] > 0 and isinstance(one["text"], str)
        many = c.post(url, json={"text": ["a", "b", "c"], "sampling_params": params}).json()
        assert [m["meta_info"]["completion_tokens"] for m in many] == [40, 40, 40]
        stream = c.post(url, json={"text": "x", "sampling_params": params, "stream": True})
        chunks = [ln for ln in stream.text.split("\n\n") if ln]
        assert chunks[-1] == "data: [DONE]"
        assert json.loads(chunks[0][len("data: ") :])["meta_info"]["completion_tokens"] == 40
        assert c.post(url, json={"sampling_params": params}).status_code == 400
        assert c.post(url, content=b"{bad").status_code == 400


def test_server_info_like_sglang(spec_server):
    batch = run_batch(spec_server.base_url, num_requests=8, concurrency=4, max_new_tokens=512, timeout_s=60)
    with httpx.Client(trust_env=False) as c:
        raw = c.get(spec_server.base_url + "/get_server_info").json()
        assert c.get(spec_server.base_url + "/server_info").status_code == 200
    assert raw["speculative_algorithm"] == "EAGLE3"
    assert (raw["speculative_num_steps"], raw["speculative_eagle_topk"], raw["speculative_num_draft_tokens"]) == (
        3,
        4,
        8,
    )
    assert raw["max_running_requests"] == 4 and raw["mem_fraction_static"] == 0.65
    state = raw["internal_states"][0]
    # the mean of floor/ceil draws around the model's accept length (hundreds of verify steps)
    assert state["avg_spec_accept_length"] == pytest.approx(MODEL.predict(4, (3, 4, 8), 50.0).accept_length, abs=0.2)
    assert set(state["step_time_dict"]) <= {"1", "2", "3", "4"}  # JSON keys are strings, as from sglang
    # one value per 40 decode iterations (sglang's decode log interval), as sglang records them
    # (their means: far fewer values than decode iterations)
    at_4 = state["step_time_dict"]["4"]
    assert 0 < len(at_4) <= batch.spec_verify_ct // 4 // 40 + 1 and all(t > 0 for t in at_4)
    info = fetch_server_info(spec_server.base_url)
    assert info.accept_length == state["avg_spec_accept_length"]
    assert all(t > 0 for t in info.step_times[4])


def test_batch_counts_verify_steps(spec_server):
    batch = run_batch(spec_server.base_url, num_requests=6, concurrency=3, max_new_tokens=50, timeout_s=30)
    assert batch.completed == 6 and batch.total_output_tokens == 300
    assert batch.spec_verify_ct is not None
    assert batch.accept_length == pytest.approx(MODEL.predict(3, (3, 4, 8), 50.0).accept_length, abs=0.3)


def test_baseline_has_no_accept_length_and_no_step_times_without_the_env(tmp_path, port):
    env = {"SGLANG_RECORD_STEP_TIME": ""}
    with _start(tmp_path, port, (0, 0, 0), 2, env_extra=env) as server:
        batch = run_batch(server.base_url, num_requests=2, concurrency=2, max_new_tokens=20, timeout_s=30)
        assert batch.spec_verify_ct is None
        info = fetch_server_info(server.base_url)
    assert info.accept_length is None
    assert info.step_times == {}


def test_oom_when_the_model_says_it_does_not_fit(tmp_path, port):
    # the calibrated rtx4060-laptop model: bs16 (5,4,16) exceeds memory, as on the published 8 GB laptop
    assert not MODEL.predict(16, (5, 4, 16), MODEL.ambient_temp_c).fits_in_memory
    with pytest.raises(LaunchError) as info:
        _start(tmp_path, port, (5, 4, 16), 16)
    assert info.value.reason == "out_of_memory_cuda_graph_capture"


@pytest.mark.parametrize(
    ("fault", "reason"),
    [("launch_failure", "exited"), ("oom_at_capture:mem=0.65", "out_of_memory_cuda_graph_capture")],
)
def test_launch_faults(tmp_path, port, fault, reason):
    with pytest.raises(LaunchError) as info:
        _start(tmp_path, port, (1, 1, 2), 1, options=f"--fault {fault}")
    assert info.value.reason == reason and info.value.returncode == 1


def test_fault_filters_only_hit_matching_launches(tmp_path, port):
    with _start(tmp_path, port, (1, 1, 2), 1, options="--fault oom_at_capture:mem=0.65,bs=1", mem=0.55) as s:
        assert s.alive()


def test_slow_health_then_ready(tmp_path, port):
    with _start(tmp_path, port, (0, 0, 0), 1, options="--fault slow_health:delay_s=20") as server:
        assert server.alive()
    log = (tmp_path / "server.log").read_text()
    assert "ready to roll" in log


def test_missing_step_times_fault(tmp_path, port):
    with _start(tmp_path, port, (1, 1, 2), 1, options="--fault missing_step_times") as server:
        # 100 tokens at accept length <= 2: 50+ decode iterations, past sglang's 40-iteration log
        # interval, when it folds the accept length into /server_info's (as sglang 0.5.18 does)
        run_batch(server.base_url, num_requests=1, concurrency=1, max_new_tokens=100, timeout_s=30)
        info = fetch_server_info(server.base_url)
    assert info.step_times == {} and info.accept_length is not None


def test_death_mid_batch(tmp_path, port):
    from specband.engines.client import RequestError

    with _start(tmp_path, port, (1, 1, 2), 2, options="--fault die_mid_batch:after_steps=5") as server:
        run_batch(server.base_url, num_requests=2, concurrency=2, max_new_tokens=30, timeout_s=30)  # warm-up
        with pytest.raises(RequestError, match="server_died_mid_batch"):
            run_batch(
                server.base_url,
                num_requests=4,
                concurrency=2,
                max_new_tokens=200,
                timeout_s=30,
                server_alive=server.alive,
            )
    assert "illegal memory access" in (tmp_path / "server.log").read_text()


def test_port_taken_by_another_server_is_classified(tmp_path, port):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # bound, not listening: the emulator's bind fails
        cfg = ServerConfig(model_path="m", port=port, server_command=emulator_command())
        server = ServerProcess(
            build_launch_command(cfg, (0, 0, 0), 1, 0.65),
            host="127.0.0.1",
            port=port,
            log_path=tmp_path / "s.log",
            clock=Clock(TIME_SCALE),
            env={**os.environ, TIME_SCALE_ENV: str(TIME_SCALE), MODEL_ENV: "calibrated"},
        )
        server.start()
        with server, pytest.raises(PortInUseError, match="could not bind it"):
            server.wait_healthy(60, 0.5)  # the machine, not the configuration: no row, the sweep stops


def test_emulated_gpu_reflects_the_decoding(tmp_path, port):
    from specband.emulator.gpu import EmulatedDevice

    with _start(tmp_path, port, (3, 4, 8), 4) as server:
        dev = EmulatedDevice(tmp_path / "gpu.json", MODEL, "rtx4060-laptop", TIME_SCALE)
        loaded = dev.sample(Clock(TIME_SCALE))
        assert loaded.mem_used_mb > 1000  # the server holds GPU memory
        run_batch(server.base_url, num_requests=8, concurrency=4, max_new_tokens=400, timeout_s=30)
        busy = dev.sample(Clock(TIME_SCALE))
    after = dev.sample(Clock(TIME_SCALE))
    assert busy.temp_c > loaded.temp_c
    assert after.mem_used_mb == 0.0 and after.power_w == MODEL.idle_power_w


def test_parse_fault_and_launch_args_errors():
    f = parse_fault("die_mid_batch:bs=4,after_steps=10")
    assert f.kind == "die_mid_batch" and f.match == {"bs": 4.0} and f.params == {"after_steps": 10.0}
    for bad in ("explode", "oom_at_capture:size=3", "slow_health:delay_s=x", "slow_health:delay_s"):
        with pytest.raises(ConfigError):
            parse_fault(bad)
    with pytest.raises(ConfigError, match="rule 1"):
        parse_launch_args(
            shlex.split(
                "--model-path m --speculative-algorithm EAGLE3 --speculative-num-steps 1 "
                "--speculative-eagle-topk 2 --speculative-num-draft-tokens 8"
            )
        )
    with pytest.raises(ConfigError, match="model-path"):
        parse_launch_args([])
    args = parse_launch_args(
        [
            "--model-path",
            "m",
            "--tp-size",
            "2",
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "8",
        ]
    )
    assert tuple(args.action) == (3, 1, 4)  # topk 1: sglang rewrites draft tokens to steps + 1 (so (3,1,8) runs)


def test_emulate_cli_rejects_bad_flags(run_cli):
    result = run_cli(
        "emulate", "--model-path", "m", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"
    )
    assert result.exit_code == 2
    assert "error:" in result.stderr and "--speculative-eagle-topk" in result.stderr
