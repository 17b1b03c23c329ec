"""The emulator serves as a server under ``specband govern`` needs it: its power carries the
prefill bursts of arriving requests, a limit set while it runs holds from the next steps on,
and it answers sglang's ``/metrics`` (with ``--enable-metrics``) and vLLM's token counters."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from tests.emulator.test_emulator import MODEL, _start
from tests.servers import TIME_SCALE

from specband.devices.base import Clock
from specband.emulator.engine import Engine, EngineRequest
from specband.emulator.gpu import EmulatedDevice
from specband.emulator.launchargs import parse_launch_args
from specband.emulator.options import EmulatorOptions
from specband.engines.base import get_engine
from specband.engines.client import run_batch
from specband.sim import build_model
from specband.sim.power_capped import prefill_burst, with_power_limit


class _Recorder:
    """Stands for the emulated GPU's state file: records every update."""

    def __init__(self) -> None:
        self.updates: list[dict] = []

    def update(self, **changes: object) -> None:
        self.updates.append(changes)


def test_admitted_requests_are_prefilled_as_one_burst_at_prefill_power():
    """The 8B pair on the H100 profile: 4 requests of 1000 prompt tokens are one forward of 4000
    tokens at the model's prefill power (above its decode power), lasting the burst's time."""
    model = build_model("h100-sxm", target_config="llama-3.1-8b-instruct")
    gpu = _Recorder()
    engine = Engine(model, gpu, parse_launch_args(["--model-path", "m"]), EmulatorOptions(time_scale=1e-4), None)
    requests = [EngineRequest(64, 1000, time.monotonic()) for _ in range(4)]
    emul = engine._prefill(requests, time.monotonic(), 0.0, 55.0)
    seconds, power, capped = prefill_burst(model, 4000)
    assert emul == pytest.approx(seconds) and gpu.updates[-1]["power_w"] == pytest.approx(power)
    assert power > 2 * model.decode_power_w(4, (3, 1, 4)) and not capped
    assert engine.token_counts()[1] == 4000  # the prompt-token counter
    limited = Engine(with_power_limit(model, 300.0), _Recorder(), parse_launch_args(["--model-path", "m"]),
                     EmulatorOptions(time_scale=1e-4), None)  # fmt: skip
    slow = limited._prefill(requests, time.monotonic(), 0.0, 55.0)
    assert slow > emul and limited.gpu.updates[-1]["power_w"] <= 300.0  # throttled under the limit


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
    live = get_engine("sglang").serving.live_metrics(page)
    assert live.running == 0.0 and live.output_tokens_total is not None and live.output_tokens_total >= 800
    assert live.accept_length is not None and 1.0 < live.accept_length <= 4.0 and not live.problems
    assert info["enable_metrics"] is True and info["tp_size"] == 1 and info["base_gpu_id"] == 0
