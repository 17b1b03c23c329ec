"""The emulator's HTTP side answers hostile requests as the engines do (hostile trial B43,
B44, N14): sglang's and vLLM's status and error shape, no traceback, a bounded body, and the
launch flags bounded (N15). The handlers run in-process on 127.0.0.1 with a recording engine
(the decode itself is tested in test_emulator.py)."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest

from specband.core.errors import ConfigError
from specband.emulator.launchargs import parse_launch_args
from specband.emulator.server import MAX_REQUEST_BODY_BYTES, handler_for
from specband.emulator.vllm_answers import parse_vllm_launch_args
from specband.engines.base import get_engine

CONTEXT = 1000


class _Engine:
    """Records what it is asked to decode and answers at once."""

    def __init__(self) -> None:
        self.submitted: list[tuple[int, int]] = []

    def has_fault(self, kind: str) -> bool:
        return False

    def submit(self, max_new_tokens: int, prompt_tokens: int) -> Any:
        self.submitted.append((max_new_tokens, prompt_tokens))
        done = threading.Event()
        done.set()
        return SimpleNamespace(done=done, error=None)


def _serve(engine_name: str) -> Iterator[tuple[str, int, _Engine]]:
    engine = _Engine()
    handler = type("Handler", (handler_for(get_engine(engine_name)),), {})
    handler.emulator = SimpleNamespace(  # type: ignore[attr-defined]
        engine=engine,
        launch=SimpleNamespace(model_path="m", context_length=CONTEXT),
        # every answer carries the emulator's time-scale header; models are owned by the engine
        options=SimpleNamespace(time_scale=1.0, engine=get_engine(engine_name)),
        healthy=lambda: True,
    )
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield engine_name, httpd.server_address[1], engine
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(params=["sglang", "vllm"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, int, _Engine]]:
    yield from _serve(request.param)


@pytest.fixture
def sglang_server() -> Iterator[tuple[str, int, _Engine]]:
    yield from _serve("sglang")


@pytest.fixture
def vllm_server() -> Iterator[tuple[str, int, _Engine]]:
    yield from _serve("vllm")


def _post(port: int, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.putrequest("POST", path)
        for key, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
            conn.putheader(key, value)
        conn.endheaders()
        conn.send(body)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def _path(engine: str) -> str:
    return "/generate" if engine == "sglang" else "/v1/completions"


def _message(engine: str, body: bytes) -> str:
    error = json.loads(body)["error"]
    if engine == "vllm":
        assert set(error) == {"message", "type", "param", "code"}, error
    return error if isinstance(error, str) else error["message"]


def test_a_huge_content_length_is_413_without_reading(server) -> None:
    engine, port, recorded = server
    status, body = _post(port, _path(engine), b"x", {"Content-Length": "99999999999"})
    assert status == 413 and "over the emulator's 67108864 bytes" in _message(engine, body)
    assert MAX_REQUEST_BODY_BYTES == 64 * 1024 * 1024 and recorded.submitted == []


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000 + b"1" + b"}" * 50_000, b"{"])
def test_deep_or_broken_json_is_400(server, body: bytes) -> None:
    engine, port, recorded = server
    status, answer = _post(port, _path(engine), body)
    assert status == 400 and _message(engine, answer).startswith("body is not JSON")
    assert recorded.submitted == []


def _sp(params: str) -> bytes:
    return b'{"text":"hi","sampling_params":{' + params.encode() + b"}}"


CONTEXT_SGLANG = "Requested token count exceeds the model's maximum context length of 1000 tokens"
SGLANG = {
    "max_new_tokens 1e400": (_sp('"max_new_tokens":1e400'), "invalid type: floating point `inf`, expected i64"),
    "max_new_tokens 4.0": (_sp('"max_new_tokens":4.0'), "invalid type: floating point `4.0`, expected i64"),
    "max_new_tokens string": (_sp('"max_new_tokens":"4"'), 'invalid type: string "4", expected i64'),
    "text int": (b'{"text":12345}', "invalid type: integer `12345`, expected a value or an array of values"),
    "NaN temperature": (_sp('"temperature":NaN'), "temperature must be a non-negative finite number, got nan."),
    "max_new_tokens -5": (_sp('"max_new_tokens":-5'), "max_new_tokens must be at least 0, got -5."),
    "max_new_tokens 1e9": (_sp('"max_new_tokens":1000000000'), CONTEXT_SGLANG),
    "prompt over the context": (
        json.dumps({"text": "abcd" * 2000}).encode(),
        "The input (2000 tokens) is longer than the model's context length (1000 tokens).",
    ),
    "not an object": (b"[1, 2]", "Request body must be a JSON object."),
}


@pytest.mark.parametrize("case", list(SGLANG))
def test_sglang_refuses_as_sglang(sglang_server, case: str) -> None:
    engine, port, recorded = sglang_server
    body, message = SGLANG[case]
    status, answer = _post(port, "/generate", body)
    assert status == 400 and _message(engine, answer).startswith(message), answer[:300]
    assert recorded.submitted == []


def _c(extra: str) -> bytes:
    return b'{"model":"m","prompt":"hi",' + extra.encode() + b"}"


VLLM = {
    "max_tokens 1e400": (_c('"max_tokens":1e400'), 400, "max_tokens: Input should be a valid integer"),
    "wrong model": (b'{"model":"x","prompt":"hi","max_tokens":4}', 404, "The model `x` does not exist."),
    "NaN temperature": (_c('"max_tokens":4,"temperature":NaN'), 400, "temperature must be a finite number, got nan."),
    "n 1e6": (_c('"max_tokens":4,"n":1000000'), 400, "n must be at least 1 and at most 16384"),
    "max_tokens -5": (_c('"max_tokens":-5'), 400, "max_tokens must be at least 1, got -5."),
    "prompt over the context": (
        json.dumps({"model": "m", "prompt": "abcd" * 2000}).encode(),
        400,
        "This model's maximum context length is 1000 tokens. However, your prompt contains 2000 input tokens",
    ),
    "prompt int": (b'{"model":"m","prompt":5}', 400, "prompt must be a string"),
}


@pytest.mark.parametrize("case", list(VLLM))
def test_vllm_refuses_as_vllm(vllm_server, case: str) -> None:
    engine, port, recorded = vllm_server
    body, code, message = VLLM[case]
    status, answer = _post(port, "/v1/completions", body)
    assert status == code and message in _message(engine, answer), answer[:300]
    assert json.loads(answer)["error"]["code"] == code and recorded.submitted == []


def test_vllm_lowers_max_tokens_to_the_context_and_streams(vllm_server) -> None:
    _, port, recorded = vllm_server
    status, answer = _post(port, "/v1/completions", b'{"model":"m","prompt":"abcdefgh","max_tokens":1000000000}')
    assert status == 200 and json.loads(answer)["usage"]["completion_tokens"] == CONTEXT - 2
    status, answer = _post(port, "/v1/completions", b'{"prompt":"abcd","max_tokens":"3","stream":true}')
    assert status == 200 and answer.endswith(b"data: [DONE]\n\n")
    chunk = json.loads(answer.split(b"\n\n")[0].removeprefix(b"data: "))
    assert chunk["usage"]["completion_tokens"] == 3
    assert recorded.submitted == [(CONTEXT - 2, 2), (3, 1)]


SPEC = ["--model-path", "m", "--speculative-algorithm", "EAGLE3"]
STEPS = [
    "--speculative-num-steps",
    "1000000000",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "9",
]
TOPK = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "100", "--speculative-num-draft-tokens", "8"]


@pytest.mark.parametrize(
    "argv, message",
    [
        ([*SPEC, *STEPS], "--speculative-num-steps 1000000000 is over 64"),
        ([*SPEC, *TOPK], "--speculative-eagle-topk 100 is over 64"),
        (["--model-path", "m", "--max-running-requests", "99999999"], "is over 1048576"),
    ],
)
def test_sglang_launch_flags_are_bounded(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_launch_args(argv)


EAGLE = '{"method":"eagle3","model":"d","num_speculative_tokens":'


@pytest.mark.parametrize(
    "config, message",
    [
        (EAGLE + "1000000000}", "num_speculative_tokens 1000000000 is over 64"),
        ('{"a":' * 30_000 + "1" + "}" * 30_000, "not JSON: nested too deeply"),
        (EAGLE + '3,"num_speculative_tokens_per_batch_size":[[1,4,100]]}', "K 100 is over 64"),
    ],
)
def test_vllm_launch_flags_are_bounded(config: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_vllm_launch_args(["--model", "m", "--speculative-config", config])
