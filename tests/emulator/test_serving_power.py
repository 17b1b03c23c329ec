"""The emulator serves as a server under ``specband govern`` needs it: its power carries the
prefill bursts of arriving requests, a limit set while it runs holds from the next steps on,
and it answers sglang's ``/metrics`` (with ``--enable-metrics``) and vLLM's token counters."""

from __future__ import annotations

import threading

import httpx
from tests.emulator.test_emulator import MODEL, _start
from tests.servers import TIME_SCALE

from specband.devices.base import Clock
from specband.emulator.gpu import EmulatedDevice
from specband.engines.base import get_engine
from specband.engines.client import run_batch


def energy_per_request(server, dev: EmulatedDevice, prompt: str) -> float:
    before = dev.read_energy_mj()
    run_batch(server.base_url, num_requests=4, concurrency=4, max_new_tokens=64, prompts=(prompt,), timeout_s=60)
    return (dev.read_energy_mj() - before) / 4


def test_long_prompts_draw_prefill_energy_on_arrival(tmp_path, port):
    with _start(tmp_path, port, (3, 1, 4), 4) as server:
        dev = EmulatedDevice(tmp_path / "gpu.json", MODEL, "rtx4060-laptop", TIME_SCALE)
        short = energy_per_request(server, dev, "Hi")
        long = energy_per_request(server, dev, "word " * 3200)  # 4000 tokens to prefill per request
    assert long > 1.2 * short  # the same 64 decoded tokens, plus the prefill of the long prompts


def test_a_limit_set_while_serving_holds_from_the_next_steps(tmp_path, port):
    with _start(tmp_path, port, (3, 1, 4), 4) as server:
        dev = EmulatedDevice(tmp_path / "gpu.json", MODEL, "rtx4060-laptop", TIME_SCALE)
        low = dev.power_limit_range_w().min_w
        dev.set_power_limit_w(low)
        seen: list[float] = []
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                seen.append(dev.sample(Clock(TIME_SCALE)).power_w or 0.0)
                done.wait(0.005)

        watcher = threading.Thread(target=sample)
        watcher.start()
        try:
            run_batch(server.base_url, num_requests=8, concurrency=4, max_new_tokens=200, timeout_s=60)
        finally:
            done.set()
            watcher.join()
    assert seen and max(seen) <= low + 1e-6 and max(seen) > MODEL.idle_power_w


def test_sglang_metrics_only_with_enable_metrics_and_they_count(tmp_path, port):
    with _start(tmp_path, port, (3, 1, 4), 4) as server:
        assert httpx.get(server.base_url + "/metrics").status_code == 404
    with _start(tmp_path, port, (3, 1, 4), 4, options="--enable-metrics") as server:
        run_batch(server.base_url, num_requests=4, concurrency=4, max_new_tokens=200, timeout_s=60)
        page = httpx.get(server.base_url + "/metrics").text
        info = httpx.get(server.base_url + "/server_info").json()
    live = get_engine("sglang").live_metrics(page)
    assert live.running == 0.0 and live.output_tokens_total is not None and live.output_tokens_total >= 800
    assert live.accept_length is not None and 1.0 < live.accept_length <= 4.0 and not live.problems
    assert info["enable_metrics"] is True and info["tp_size"] == 1 and info["base_gpu_id"] == 0
