"""Fixtures for the governor's tests: GPUs behind a patched NVML (each index its own
:class:`~tests.devices.conftest.FakeGpu`, drawing a set power whose energy counter grows with
real time), and an sglang- or vLLM-looking HTTP server written here, whose ``/metrics`` page a
test sets (or makes hostile: dripping, silent, huge)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pynvml
import pytest
from tests.devices.conftest import FakeGpu


@dataclass
class FakeGpus:
    """The patched NVML: one :class:`FakeGpu` per index; each draws ``power_mw`` (capped at
    its limit) and its counter grows by that power over real time."""

    gpus: dict[int, FakeGpu] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    energy: dict[int, float] = field(default_factory=dict)
    last: dict[int, float] = field(default_factory=dict)

    def drawn_mw(self, i: int) -> int:
        gpu = self.gpus[i]
        return min(gpu.power_mw, gpu.enforced_mw)

    def counter(self, i: int) -> int:
        now = time.monotonic()
        self.energy[i] = self.energy.get(i, 1_000_000.0) + self.drawn_mw(i) * (
            now - self.last.get(i, now)
        )  # mW x s = mJ
        self.last[i] = now
        return int(self.energy[i])


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> FakeGpus:
    """Two H100-like GPUs (200-700 W, default 700 W, set to 700 W, drawing 300 W) behind NVML;
    the power-limit locks in a folder of this test's own."""
    fake = FakeGpus()
    for i in range(2):
        fake.gpus[i] = FakeGpu(
            power_mw=300_000, enforced_mw=700_000, management_mw=700_000, default_mw=700_000,
            min_limit_mw=200_000, max_limit_mw=700_000, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-fake-h100-{i}",
        )  # fmt: skip
    monkeypatch.setenv("SPECBAND_GPU_LOCK_DIR", str(tmp_path_factory.mktemp("gpu-locks")))

    def g(h: int) -> FakeGpu:
        return fake.gpus[h]

    def get_handle(i: int) -> int:
        if i not in fake.gpus:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return i

    patches: dict[str, Any] = {
        "nvmlInit": lambda: None,
        "nvmlShutdown": lambda: None,
        "nvmlDeviceGetHandleByIndex": get_handle,
        "nvmlDeviceGetName": lambda h: g(h).answer("name", g(h).name),
        "nvmlDeviceGetUUID": lambda h: g(h).answer("uuid", g(h).uuid),
        "nvmlDeviceGetTotalEnergyConsumption": lambda h: g(h).answer("energy", lambda: fake.counter(h)),
        "nvmlDeviceGetPowerUsage": lambda h: g(h).answer("power", lambda: fake.drawn_mw(h)),
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: g(h).answer("enforced", lambda: g(h).enforced_mw),
        "nvmlDeviceGetPowerManagementLimit": lambda h: g(h).answer("management", lambda: g(h).management_mw),
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: g(h).answer("default", lambda: g(h).default_mw),
        "nvmlDeviceGetTemperature": lambda h, sensor: 50,
        "nvmlDeviceGetMemoryInfo": lambda h: None,
        "nvmlDeviceGetUtilizationRates": lambda h: None,
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0,
        "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: 0,
        "nvmlDeviceGetPowerManagementLimitConstraints": lambda h: [g(h).min_limit_mw, g(h).max_limit_mw],
        "nvmlDeviceSetPowerManagementLimit": lambda h, mw: g(h).set_limit(mw),
    }
    for name, fn in patches.items():
        monkeypatch.setattr(pynvml, name, fn)
    return fake


def sglang_page(running: float | str, tokens: float | str = 0.0, accept: float | str = 2.5) -> str:
    """An sglang ``/metrics`` page (``--enable-metrics``) with these values."""
    labels = 'engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"'
    return (
        f"sglang:num_running_reqs{{{labels}}} {running}\n"
        f"sglang:num_queue_reqs{{{labels}}} 0.0\n"
        f'sglang:generation_tokens_total{{model_name="m"}} {tokens}\n'
        f"sglang:spec_accept_length{{{labels}}} {accept}\n"
    )


class FakeServer:
    """An sglang-looking server (``/server_info``, ``/metrics``, ``/health``) on 127.0.0.1.

    Attributes:
        page: the ``/metrics`` text (a test changes it while the governor runs).
        mode: ``"ok"``; ``"drip"`` (headers, then one byte every 0.3 s, never done);
            ``"silent"`` (reads the request and never answers); ``"huge"`` (a 9 MiB page).
        info: the ``/server_info`` object.
        running / tokens: when ``page`` is ``None``, the page is made from these (tokens
            growing by ``tokens_per_s`` from the start).
    """

    def __init__(self, gpus: int = 1, max_running: int = 64) -> None:
        self.page: str | None = None
        self.mode = "ok"
        self.dead = False
        self.running = 8.0
        self.tokens_per_s = 2000.0
        self.started = time.monotonic()
        self.info = {
            "model_path": "m", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "speculative_draft_model_path": "d",
            "max_running_requests": max_running, "tp_size": gpus, "dp_size": 1, "base_gpu_id": 0, "gpu_id_step": 1,
            "enable_metrics": True, "version": "0.5.23",
        }  # fmt: skip
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _send(self, body: bytes, status: int = 200) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if outer.dead:  # a dead server answers nothing, on a new connection or a kept one
                    self.close_connection = True
                    return
                if self.path in ("/server_info", "/get_server_info"):
                    self._send(json.dumps(outer.info).encode())
                elif self.path == "/metrics":
                    outer.serve_metrics(self)
                elif self.path == "/health":
                    self._send(b"")
                else:
                    self._send(b'{"detail": "Not Found"}', 404)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def current_page(self) -> str:
        if self.page is not None:
            return self.page
        tokens = self.tokens_per_s * (time.monotonic() - self.started)
        return sglang_page(self.running, tokens)

    def serve_metrics(self, handler: BaseHTTPRequestHandler) -> None:
        if self.mode == "silent":
            time.sleep(3600)
        if self.mode == "drip":
            handler.send_response(200)
            handler.send_header("Content-Length", "100000000")
            handler.end_headers()
            try:
                while True:
                    handler.wfile.write(b" ")
                    handler.wfile.flush()
                    time.sleep(0.3)
            except OSError:
                return
        body = (b"#" * (9 << 20)) if self.mode == "huge" else self.current_page().encode()
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        try:
            handler.wfile.write(body)
        except OSError:
            return

    def stop(self) -> None:
        self.dead = True
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    """A :class:`FakeServer`, stopped after the test."""
    server = FakeServer()
    yield server
    server.stop()
