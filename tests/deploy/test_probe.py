"""``specband probe --url``: against the emulator answering as sglang and as vLLM, the probe file
(read back by ``--acceptance-from``'s reader), the bounded requests, the simulated part, and
one error line when the server does not answer or the input is bad."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.servers import TIME_SCALE, emulator_command, free_port

from specband.deploy.probe import read_local_power
from specband.deploy.probe_sim import profile_for_gpu
from specband.devices.power_limit import PowerLimitRange
from specband.engines.probe_file import check_probe_file
from specband.engines.serverconfig import ServerConfig, build_launch_command
from specband.harness.process import ServerProcess
from specband.sim.acceptance_fit import read_acceptance_file

TIME = str(TIME_SCALE)


def _server(tmp_path: Path, port: int, action: tuple[int, int, int], engine: str, bs: int = 4) -> ServerProcess:
    config = ServerConfig(
        model_path="/m/target",
        draft_model_path="/m/draft",
        server_command=emulator_command("--engine", engine, "--time-scale", TIME),
        port=port,
        engine=engine,
    )
    command = build_launch_command(config, action, bs, 0.65)
    return ServerProcess(command, host="127.0.0.1", port=port, log_path=tmp_path / f"{engine}.log")


@pytest.fixture
def sglang_server(tmp_path: Path, port: int) -> Iterator[ServerProcess]:
    with _server(tmp_path, port, (3, 1, 4), "sglang") as server:
        server.start()
        server.wait_healthy(60)
        yield server


@pytest.fixture
def vllm_server(tmp_path: Path, port: int) -> Iterator[ServerProcess]:
    with _server(tmp_path, port, (3, 1, 4), "vllm") as server:
        server.start()
        server.wait_healthy(60)
        yield server


def _probe(run_cli: Any, url: str, out: Path, *args: str) -> tuple[Any, dict[str, Any]]:
    result = run_cli("probe", "--url", url, "--out", out, "--watch", "0.2", *args)
    assert result.exit_code == 0, result.stderr
    return result, json.loads(out.read_text())


def test_probe_reads_an_emulated_sglang_server(run_cli: Any, sglang_server: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    result, data = _probe(run_cli, sglang_server.base_url, out, "--max-requests", "3", "--max-new-tokens", "48",
                          "--gpu", "h200")  # fmt: skip
    assert data["format"] == "specband-probe" and data["version"] == 2
    # the emulator's answers carry its header: what it shows is emulated, and said so (A07)
    assert data["provenance"] == "emulated" and "config (emulated): action (3, 1, 4)" in result.stdout
    check_probe_file(data, str(out))  # the frame the readers check, the reading's digest included
    assert (data["engine"], data["engine_version"]) == ("sglang", "0.5.23")
    assert data["action"] == [3, 1, 4] and data["draft"] == "/m/draft" and data["target"] == "/m/target"
    assert data["flags"]["speculative_num_steps"] == 3 and data["flags"]["speculative_eagle_topk"] == 1
    # a fresh server has no acceptance: the built-in prompts, 3 requests (the bound), one at a time
    assert data["requests_sent"] == 3 == data["max_requests"]
    assert "requests sent: 3 (at most 3)" in result.stdout
    acc = data["acceptance"]
    assert acc["source"] == "probe requests"
    assert sum(acc["accept_histogram"]) == acc["verify_steps"] > 0
    # 3 requests of 48 tokens: tokens / verify steps
    assert acc["accept_length"] == pytest.approx(3 * 48 / acc["verify_steps"], rel=1e-5)
    pos = acc["position_accept"]
    assert len(pos) == 3 and all(a >= b for a, b in itertools.pairwise(pos))
    # the server's own figure counts the same requests, but (as sglang's) only the decode iterations
    # of its completed 40-iteration log intervals: close to the probe's exact count, not equal
    info = httpx.get(sglang_server.base_url + "/server_info", timeout=30, trust_env=False).json()
    assert info["internal_states"][0]["avg_spec_accept_length"] == pytest.approx(acc["accept_length"], rel=0.05)
    # no batch size before the probe's requests; then its own (batch size 1), said so
    assert data["batch_sizes_seen"] == [1] and "probe's own requests" in data["batch_size_source"]
    assert data["power"] is None and data["power_note"]
    # --acceptance-from's reader takes the file
    source = read_acceptance_file(out)
    assert [o.action for o in source.observations] == [(3, 1, 4)]
    assert source.observations[0].accept_length == pytest.approx(acc["accept_length"], abs=1e-5)
    assert source.observations[0].weight == acc["verify_steps"]
    # the simulated part: labelled, the fit named, three figures for batch size 1 with intervals
    header = next(ln for ln in result.stdout.splitlines() if ln.startswith("SIMULATED on h200"))
    assert "acceptance fitted to 1 config of" in header and "probe.json" in header
    # one table: per batch size (the engine's tiers and the one seen) the server's config now and the
    # config picked with its power limit, each figure labelled; a limit inside the band or a note why not
    rows = [ln.split() for ln in result.stdout.splitlines() if re.match(r"^ +\d+ +\(\d,\d,\d\)", ln)]
    assert [int(r[0]) for r in rows] == [1, 1, 8, 8, 32, 32, 64, 64]
    assert all(r[2] == "now" and r[3] == "700" for r in rows[::2])  # the server's (3,1,4) at the limit now
    for row in rows[1::2]:
        limit, util = float(row[2]), float(row[7])
        assert 200 <= limit <= 700 and "simulated," in " ".join(row)
        assert 0.95 <= util <= 0.98 or f"bs {row[0]}: the band cannot be reached" in result.stderr, row
    assert any(ln.startswith("sudo nvidia-smi -pl ") for ln in result.stdout.splitlines())
    # a first guess from the probe file names it, first
    guess = run_cli("recommend", "--gpu", "h200", "-b", "4", "--acceptance-from", out, "--explain")
    assert guess.exit_code == 0, guess.stderr
    title = guess.stderr.splitlines()[0]
    assert title.startswith("SIMULATED first guess") and f"acceptance fitted to 1 config of {out}" in title
    explained = guess.stderr.split("note: acceptance", 1)  # --explain: the first note behind the answer
    assert len(explained) == 2
    first = "note: acceptance" + explained[1].splitlines()[0]
    assert first.startswith("note: acceptance fitted to 1 config of") and str(out) in first


def test_a_second_probe_without_prompts_reads_the_servers_counters_and_sends_nothing(
    run_cli: Any, sglang_server: ServerProcess, tmp_path: Path
) -> None:
    # 200 tokens: more than the 40 decode iterations of one step_time_dict value
    body = {"text": "Hello", "sampling_params": {"max_new_tokens": 200, "temperature": 0}}
    answer = httpx.post(sglang_server.base_url + "/generate", json=body, timeout=60, trust_env=False).json()
    _, data = _probe(run_cli, sglang_server.base_url, tmp_path / "p.json")
    assert data["requests_sent"] == 0
    assert data["acceptance"]["source"] == "server metrics"
    # the server's figure covers its completed 40-iteration log intervals, the request's meta_info all of it
    assert data["acceptance"]["accept_length"] == pytest.approx(answer["meta_info"]["spec_accept_length"], rel=0.02)
    info = httpx.get(sglang_server.base_url + "/server_info", timeout=30, trust_env=False).json()
    assert data["acceptance"]["accept_length"] == pytest.approx(info["internal_states"][0]["avg_spec_accept_length"])
    assert data["batch_sizes_seen"] == [1] and "since launch" in data["batch_size_source"]


def test_probe_reads_an_emulated_vllm_server_with_your_prompts(
    run_cli: Any, vllm_server: ServerProcess, tmp_path: Path
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in ("Write a haiku.", "Explain caching.")) + "\n")
    out = tmp_path / "probe.json"
    result, data = _probe(run_cli, vllm_server.base_url, out, "--prompts", prompts, "--max-requests", "8",
                          "--max-new-tokens", "40")  # fmt: skip
    assert (data["engine"], data["engine_version"]) == ("vllm", "0.32.0")
    # K from the per-position counters; vLLM names no draft
    assert data["action"] == [3, 1, 4] and data["flags"]["num_speculative_tokens"] == 3 and data["draft"] is None
    assert data["requests_sent"] == 2  # each of the two prompts once, under the bound of 8
    acc = data["acceptance"]
    assert acc["source"] == "probe requests" and acc["num_drafts"] == acc["verify_steps"] > 0
    # 1 + accepted / drafts, and accepted is the sum over positions
    assert acc["accept_length"] == pytest.approx(1 + sum(acc["position_accept"]), abs=1e-5)
    # 2 requests of 40 tokens: tokens = drafts x accept length (each verify step yields its accept length)
    assert acc["num_drafts"] * acc["accept_length"] == pytest.approx(80, abs=1e-3)
    assert "pass --gpu PROFILE" in result.stderr and "SIMULATED" not in result.stdout  # nothing simulated
    assert read_acceptance_file(out).observations[0].position_accept == pytest.approx(tuple(acc["position_accept"]))


def test_probe_sees_the_batch_size_a_vllm_server_is_running(
    run_cli: Any, vllm_server: ServerProcess, tmp_path: Path
) -> None:
    url = vllm_server.base_url
    body = {"model": "/m/target", "prompt": "Tell a long story.", "max_tokens": 30000, "temperature": 0}
    send = {"json": body, "timeout": 120, "trust_env": False}
    threads = [threading.Thread(target=httpx.post, args=(url + "/v1/completions",), kwargs=send) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and 'vllm:num_requests_running{engine="0",model_name="/m/target"} 3.0' not in (
        httpx.get(url + "/metrics", timeout=30, trust_env=False).text
    ):
        time.sleep(0.02)
    _, data = _probe(run_cli, url, tmp_path / "p.json", "--max-requests", "0")
    for t in threads:
        t.join()
    assert data["batch_sizes_seen"] == [3]
    assert "vllm:num_requests_running" in data["batch_size_source"] and data["requests_sent"] == 0


def test_a_plain_vllm_server_has_no_acceptance_and_gets_no_request(run_cli: Any, tmp_path: Path, port: int) -> None:
    with _server(tmp_path, port, (0, 0, 0), "vllm") as server:
        server.start()
        server.wait_healthy(60)
        _, data = _probe(run_cli, server.base_url, tmp_path / "p.json")
    assert data["action"] == [0, 0, 0] and data["acceptance"] is None and data["requests_sent"] == 0


def test_a_url_that_does_not_answer_is_one_error_line_and_writes_nothing(run_cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    result = run_cli("probe", "--url", f"http://127.0.0.1:{free_port()}", "--out", out, "--timeout", "5")
    assert result.exit_code == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "does not answer" in lines[0]
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--url", "127.0.0.1:30000"), "--url must be http://HOST:PORT"),
        (("--url", "http://127.0.0.1:30000/generate"), "without a path"),
        (("--url", "http://127.0.0.1:1", "--engine", "trt"), "--engine must be one of"),
        (("--url", "http://127.0.0.1:1", "--gpu", "no-such-gpu"), "no-such-gpu"),
    ],
)
def test_bad_input_is_one_error_line_before_the_server_is_read(
    run_cli: Any, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    result = run_cli("probe", *args, "--out", tmp_path / "p.json")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert not (tmp_path / "p.json").exists()


def test_a_target_config_without_its_draft_is_refused_unless_bundled(run_cli: Any, tmp_path: Path) -> None:
    bundled = Path(__file__).parents[2] / "src" / "specband" / "data" / "models" / "llama-3.2-1b-instruct.json"
    config = json.loads(bundled.read_text())
    config["_name_or_path"] = "my-org/my-1b"
    mine = tmp_path / "target"
    mine.mkdir()
    (mine / "config.json").write_text(json.dumps(config))
    result = run_cli("probe", "--url", "http://127.0.0.1:1", "--target-config", mine, "--out", tmp_path / "p.json")
    assert result.exit_code == 2 and result.stderr.startswith("error: --draft-config: needed with --target-config")
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "p.json").exists()
    # the bundled target alone brings its head: the server is then read (and here does not answer, exit 3)
    out = tmp_path / "q.json"
    port = free_port()
    result = run_cli(
        "probe", "--url", f"http://127.0.0.1:{port}", "--target-config", "llama-3.2-1b-instruct", "--out", out
    )
    assert result.exit_code == 3 and "does not answer" in result.stderr


def test_an_existing_out_needs_force(run_cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    out.write_text("{}")
    result = run_cli("probe", "--url", f"http://127.0.0.1:{free_port()}", "--out", out)
    assert result.exit_code == 2 and "--force" in result.stderr and out.read_text() == "{}"


def test_more_requests_than_the_bound_are_refused(run_cli: Any, tmp_path: Path) -> None:
    result = run_cli("probe", "--url", "http://127.0.0.1:1", "--max-requests", "65", "--out", tmp_path / "p.json")
    assert result.exit_code == 2 and "--max-requests" in result.stderr


@pytest.mark.parametrize(
    ("gpu", "profile"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA GeForce RTX 4060 Laptop GPU", "rtx4060-laptop"),
        ("Tesla T4", None),
    ],
)
def test_nvmls_gpu_name_picks_the_profile(gpu: str, profile: str | None) -> None:
    assert profile_for_gpu(gpu) == profile


class _FakeNvml:
    """NVML as :class:`specband.devices.nvml.NvmlDevice` answers it on an H200 (700 W default,
    200-700 W range), for the probe's power reading."""

    closed = False

    def __init__(self, index: int) -> None:
        assert index == 0
        self.name, self.power_limit_w = "NVIDIA H200", 700.0

    def power_limit_range_w(self) -> PowerLimitRange:
        return PowerLimitRange(700.0, 200.0, 700.0)

    def read_power_w(self) -> float:
        return 412.5

    def close(self) -> None:
        _FakeNvml.closed = True


def test_a_local_servers_gpu_power_is_read_through_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    import specband.devices.nvml as nvml
    from specband.deploy import probe

    monkeypatch.setattr(nvml, "NvmlDevice", _FakeNvml)
    monkeypatch.setattr(probe, "_DRIVER_PATHS", (__file__,))  # a driver is present
    power, why = read_local_power("http://127.0.0.1:30000", 0)
    assert why is None and power is not None and _FakeNvml.closed
    assert power.to_json() == {
        "power_w": 412.5,
        "power_limit_w": 700.0,
        "min_limit_w": 200.0,
        "max_limit_w": 700.0,
        "gpu": "NVIDIA H200",
    }
    power, why = read_local_power("http://10.0.0.5:30000", 0)
    assert power is None and why is not None and "not local (10.0.0.5)" in why


def test_a_plain_server_is_simulated_with_the_bundled_acceptance(run_cli: Any, tmp_path: Path, port: int) -> None:
    with _server(tmp_path, port, (0, 0, 0), "sglang") as server:
        server.start()
        server.wait_healthy(60)
        result, data = _probe(run_cli, server.base_url, tmp_path / "p.json", "--gpu", "h100-sxm")
    assert data["action"] == [0, 0, 0] and data["acceptance"] is None and data["requests_sent"] == 0
    header = next(ln for ln in result.stdout.splitlines() if ln.startswith("SIMULATED on h100-sxm"))
    assert "acceptance profile" in header or "acceptance borrowed" in header
    current = next(ln for ln in result.stdout.splitlines() if re.match(r"^ +1 +\(0,0,0\) now +700 W ", ln))
    assert "simulated, serving power" in current
