"""Hostile HTTP servers on 127.0.0.1 for the probe's and the hub's hostile-trial rows (P02,
P07-P09, P13, E05): each a small ``http.server`` handler in a thread, shut down with the test.

A mode is a dict: ``server_info`` (the JSON ``/server_info`` answers), ``metrics`` (the
``/metrics`` text), ``generate`` (the ``/generate`` JSON), or ``drip``/``driphdr`` (a
slow-loris answer, one byte or one header line every ``DRIP_S`` seconds, for at most
``DRIP_FOR_S`` seconds: a probe that waits it out fails its test instead of hanging it),
or ``stall_get`` (``HEAD`` answers at once, a ``GET`` never: it is held ``DRIP_FOR_S``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DRIP_S = 0.2
DRIP_FOR_S = 40.0


def sglang_info(**overrides: Any) -> dict[str, Any]:
    """An sglang 0.5.23 ``/server_info`` for ``(3, 1, 4)`` with a draft that ran."""
    info: dict[str, Any] = {
        "model_path": "m",
        "version": "0.5.23",
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "speculative_draft_model_path": "d",
        "internal_states": [{"avg_spec_accept_length": 2.5}],
    }
    info.update(overrides)
    return info


class _Handler(BaseHTTPRequestHandler):
    mode: Mapping[str, Any] = {}
    stop: threading.Event

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _json(self, obj: Any, status: int = 200) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _text(self, text: str) -> None:
        body = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _drip(self) -> None:
        end = time.monotonic() + DRIP_FOR_S
        try:
            if "driphdr" in self.mode:
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                n = 0
                while time.monotonic() < end and not self.stop.is_set():
                    self.wfile.write(f"X-Drip-{n}: x\r\n".encode())
                    self.wfile.flush()
                    n += 1
                    time.sleep(DRIP_S)
            else:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n")
                while time.monotonic() < end and not self.stop.is_set():
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(DRIP_S)
        except OSError:
            pass  # the client hung up
        self.close_connection = True

    def do_HEAD(self) -> None:
        self.send_response(501)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        if "drip" in self.mode or "driphdr" in self.mode:
            self._drip()
        elif "stall_get" in self.mode:
            self.stop.wait(DRIP_FOR_S)
            self.close_connection = True
        elif self.path in ("/server_info", "/get_server_info") and "server_info" in self.mode:
            self._json(self.mode["server_info"])
        elif self.path == "/metrics" and "metrics" in self.mode:
            self._text(self.mode["metrics"])
        else:
            self._json({"detail": "Not Found"}, 404)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path == "/generate" and "generate" in self.mode:
            self._json(self.mode["generate"])
        else:
            self._json({"detail": "Not Found"}, 404)


@contextmanager
def hostile_server(mode: Mapping[str, Any]) -> Iterator[str]:
    """Serve ``mode`` on 127.0.0.1 (a free port); yields ``http://127.0.0.1:PORT``."""
    stop = threading.Event()
    handler = type("Handler", (_Handler,), {"mode": dict(mode), "stop": stop})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        stop.set()
        httpd.shutdown()
        httpd.server_close()
