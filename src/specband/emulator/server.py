"""An sglang-compatible HTTP server driven by a performance model (``specband emulate``).

It accepts exactly the flags sglang accepts (sglang's own parser when sglang is
importable, else a strict copy of it: an unknown or ambiguous flag exits 2 with sglang's
message), resolves the speculative ones as sglang does
(:func:`~specband.emulator.launchargs.parse_launch_args`), uses those it models and
serves, like sglang 0.5.23:

* ``GET /health`` (200 once loaded), ``GET /health_generate``;
* ``POST /generate`` (``text`` str or list, ``sampling_params.max_new_tokens``,
  non-streaming JSON or ``stream: true`` server-sent events) with ``meta_info``
  (``completion_tokens``, ``prompt_tokens``, ``finish_reason``, ``e2e_latency``, and for a
  speculative request sglang 0.5.18's ``spec_verify_ct``, ``spec_accept_length``,
  ``spec_accept_rate``, ``spec_num_correct_drafts``, ``spec_num_proposed_drafts``, their
  aliases ``spec_accepted_drafts``/``spec_proposed_drafts``, and ``spec_correct_drafts_histogram``
  with its alias ``spec_accept_histogram``: verify steps by draft tokens accepted);
* ``GET /server_info`` (and the deprecated ``/get_server_info``): the server arguments
  plus ``internal_states[0]`` with ``avg_spec_accept_length`` (cumulative since launch
  or ``/flush_cache``) and, when ``SGLANG_RECORD_STEP_TIME`` is set, ``step_time_dict``:
  keyed by the number of running requests, one value per
  :data:`~specband.emulator.engine.DECODE_LOG_INTERVAL` decode iterations, their mean
  (the time since the previous value over the interval, so the first value after an idle
  gap includes the gap), as sglang's ``metrics_reporter.py`` records it;
* ``GET /v1/models``, ``GET /get_model_info``, ``POST /flush_cache``.

The scheduler behind it (continuous batching, decode steps timed by the performance
model, step times recorded as sglang's scheduler records them, power and heat on the
emulated GPU's state file) is :class:`specband.emulator.engine.Engine`.

Time runs ``1 / time_scale`` times faster than real time (``--time-scale``, or
``SPECBAND_TIME_SCALE``); every figure it reports (step times, latencies) is in emulated
seconds. Loading takes ``--load-time-s`` emulated seconds.

Faults (``--fault KIND[:key=value,...]``, repeatable, or ``SPECBAND_EMULATOR_FAULTS``
separated by ``;``) are :mod:`specband.emulator.faults`. A model that says the
configuration does not fit in memory fails like ``oom_at_capture``.
"""

from __future__ import annotations

import abc
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from specband.core.errors import ConfigError
from specband.core.limits import is_int, is_number
from specband.emulator import vllm_answers as vllm
from specband.emulator.engine import Engine, EngineRequest
from specband.emulator.gpu import EmulatedGpu
from specband.emulator.launchargs import LaunchArgs, _log, parse_launch_args
from specband.emulator.models import load_performance_model
from specband.emulator.options import EmulatorOptions
from specband.emulator.sglang_metrics import sglang_metrics_page
from specband.emulator.vllm_answers import parse_vllm_launch_args
from specband.engines.base import Engine as ServingEngine
from specband.engines.client import EMULATOR_HEADER
from specband.engines.sglang import SglangEngine
from specband.engines.vllm import VllmEngine
from specband.sim.power_capped import with_power_limit

__all__ = ["serve"]

_VERSION = "0.5.23"  # the sglang release whose flags and answers it emulates


#: Largest request body the emulator reads: 64 MiB (413 above it, before reading). Basis: a
#: prompt of the default 131072-token context is about 0.5 MB of text (4 characters per
#: token); 64 MiB holds a batch of over a hundred such prompts, while a crafted
#: ``Content-Length: 99999999999`` made the read itself fail (MemoryError). uvicorn, under
#: sglang and vLLM, sets no bound of its own.
MAX_REQUEST_BODY_BYTES = 64 * 1024 * 1024


class _BadRequest(Exception):
    """A request the engine refuses: its HTTP status, message and (vLLM) parameter."""

    def __init__(self, status: int, message: str, param: str | None = None, contract: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.contract = contract  # sglang's JSON contract gate: {"error": "<text>"}


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _serde_kind(value: Any) -> str:
    """How serde (sglang's JSON contract decoder) names a JSON value in ``invalid type`` errors."""
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f"string {json.dumps(value[:50])}"
    if value is None:
        return "null"
    return "sequence" if isinstance(value, list) else "map"


class _Handler(BaseHTTPRequestHandler, abc.ABC):
    protocol_version = "HTTP/1.1"
    server_version = "specband-emulator"
    disable_nagle_algorithm = True  # headers and body are separate writes: avoid the 40 ms delayed-ACK stall
    emulator: _Emulator  # set on the subclass

    def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per request is noise
        return

    def _send(self, status: int, body: bytes = b"", content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header(EMULATOR_HEADER, repr(self.emulator.options.time_scale))  # not a real engine: say so
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _read_json(self) -> Any:
        """The request's JSON body, read only up to :data:`MAX_REQUEST_BODY_BYTES`.

        Raises:
            _BadRequest: 400 for a ``Content-Length`` that is not a count, a body that is
                not JSON or is nested too deeply; 413 for a body over the bound (not read:
                the connection is closed after the answer).
        """
        text = (self.headers.get("Content-Length") or "0").strip()
        if not (text.isascii() and text.isdigit() and len(text) <= 20):
            self.close_connection = True
            raise _BadRequest(400, f"Content-Length {text[:30]!r} is not a byte count")
        length = int(text)
        if length > MAX_REQUEST_BODY_BYTES:
            self.close_connection = True  # the body is not read: the connection cannot be reused
            raise _BadRequest(
                413, f"request body of {length} bytes is over the emulator's {MAX_REQUEST_BODY_BYTES} bytes"
            )
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"{}")
        except RecursionError:
            raise _BadRequest(400, "body is not JSON (nested too deeply)") from None
        except (ValueError, UnicodeDecodeError):
            raise _BadRequest(400, "body is not JSON") from None

    def _refuse(self, error: _BadRequest) -> None:
        """Answer ``error`` in the engine's error shape (:meth:`error_body`)."""
        self._send(error.status, _json_bytes(self.error_body(error)))

    @staticmethod
    @abc.abstractmethod
    def error_body(error: _BadRequest) -> dict[str, Any]:
        """The engine's JSON error answer for ``error``."""

    def do_GET(self) -> None:
        em = self.emulator
        path = self.path.split("?", 1)[0]
        if path == "/health":
            if em.healthy():
                self._send(200)
            else:
                self._send(503, _json_bytes({"detail": "not ready"}))
        else:
            self._get(path)

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        try:
            self._post(path, self._read_json())
        except _BadRequest as error:
            self._refuse(error)

    @staticmethod
    @abc.abstractmethod
    def parse_launch(argv: Sequence[str]) -> LaunchArgs:
        """The engine's launch flags as the emulator's :class:`~specband.emulator.launchargs.LaunchArgs`."""

    @staticmethod
    @abc.abstractmethod
    def ready(launch: LaunchArgs) -> None:
        """Say, as the engine does, that the server is ready."""

    @abc.abstractmethod
    def _get(self, path: str) -> None:
        """The engine's GET endpoints other than ``/health``."""

    @abc.abstractmethod
    def _post(self, path: str, body: Any) -> None:
        """The engine's POST endpoints (``body``: the request's JSON)."""


class _SglangHandler(_Handler):
    """sglang's endpoints (the module docstring)."""

    @staticmethod
    def parse_launch(argv: Sequence[str]) -> LaunchArgs:
        """sglang's launch flags (:func:`~specband.emulator.launchargs.parse_launch_args`)."""
        return parse_launch_args(argv)

    @staticmethod
    def error_body(error: _BadRequest) -> dict[str, Any]:
        """sglang 0.5.23's: ``{"error": "<text>"}`` from its JSON contract gate
        (``entrypoints/api_contract.py``), else ``{"error": {"message": ...}}``
        (``http_server._create_error_response``)."""
        return {"error": error.message} if error.contract else {"error": {"message": error.message}}

    @staticmethod
    def ready(launch: LaunchArgs) -> None:
        """sglang's line once it serves."""
        _log(f"The server is fired up and ready to roll! (http://{launch.host}:{launch.port})")

    def _get(self, path: str) -> None:
        em = self.emulator
        if path == "/health_generate":
            req = em.engine.submit(1, 1)
            req.done.wait()
            self._send(200 if req.error is None else 503)
        elif path in ("/get_server_info", "/server_info"):
            info = {**em.launch.server_args(), "internal_states": [em.engine.internal_state()], "version": _VERSION}
            self._send(200, _json_bytes(info))
        elif path == "/v1/models":
            model = {
                "id": em.launch.model_path,
                "object": "model",
                "created": int(em.started_unix),
                "owned_by": em.options.engine.name,
                "root": em.launch.model_path,
                "max_model_len": em.launch.context_length,
            }
            self._send(200, _json_bytes({"object": "list", "data": [model]}))
        elif path == "/get_model_info":
            info = {"model_path": em.launch.model_path, "tokenizer_path": em.launch.model_path, "is_generation": True}
            self._send(200, _json_bytes(info))
        elif path == "/metrics" and em.launch.enable_metrics:
            page = sglang_metrics_page(
                em.launch.model_path,
                *em.engine.request_counts(),
                em.engine.token_counts(),
                not em.launch.action.is_baseline,
            )
            self._send(200, page.encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(404, _json_bytes({"detail": "Not Found"}))

    def _post(self, path: str, body: Any) -> None:
        em = self.emulator
        if path == "/flush_cache":
            ok = em.engine.flush_cache()
            self._send(200 if ok else 400, b"Cache flushed.\n" if ok else b"Cache not flushed.\n", "text/plain")
            return
        if path != "/generate":
            self._send(404, _json_bytes({"detail": "Not Found"}))
            return
        prompts, max_new, batch = _sglang_generate_request(body, em.launch.context_length)
        if em.engine.has_fault("hung_requests"):
            _log("request received (fault injected: hung_requests): never answering")
            threading.Event().wait()
        reqs = [em.engine.submit(max_new, _prompt_tokens(p)) for p in prompts]
        for r in reqs:
            r.done.wait()
        if any(r.error for r in reqs):
            self._send(503, _json_bytes({"error": {"message": next(r.error for r in reqs if r.error)}}))
            return
        outs = [em.response(r) for r in reqs]
        if body.get("stream"):
            payload = b"".join(b"data: " + _json_bytes(o) + b"\n\n" for o in outs) + b"data: [DONE]\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header(EMULATOR_HEADER, repr(self.emulator.options.time_scale))
            self.end_headers()
            self.wfile.write(payload)
            return
        self._send(200, _json_bytes(outs if batch else outs[0]))


class _VllmHandler(_Handler):
    """vLLM's endpoints (:mod:`specband.emulator.vllm_answers`): ``/version``, ``/v1/models``,
    ``/metrics`` and ``POST /v1/completions``."""

    @staticmethod
    def parse_launch(argv: Sequence[str]) -> LaunchArgs:
        """vLLM's launch flags (:func:`~specband.emulator.vllm_answers.parse_vllm_launch_args`)."""

        launch: LaunchArgs = parse_vllm_launch_args(argv)
        return launch

    @staticmethod
    def error_body(error: _BadRequest) -> dict[str, Any]:
        """vLLM 0.32's ``ErrorResponse``: ``{"error": {"message", "type", "param", "code"}}``
        (``entrypoints/serve/exception_handling/error_response.py``)."""
        kinds = {400: "BadRequestError", 404: "NotFoundError", 413: "Request Entity Too Large"}
        return {
            "error": {
                "message": error.message,
                "type": kinds.get(error.status, "BadRequestError"),
                "param": error.param,
                "code": error.status,
            }
        }

    @staticmethod
    def ready(launch: LaunchArgs) -> None:
        """uvicorn's line, as the real vLLM server logs it."""
        print("INFO:     Application startup complete.", flush=True)

    def _get(self, path: str) -> None:

        em = self.emulator
        launch = em.launch
        if path == "/version":
            self._send(200, _json_bytes(vllm.version_response()))
        elif path == "/v1/models":
            body = vllm.models_response(
                launch.model_path, int(em.started_unix), launch.context_length, em.options.engine.name
            )
            self._send(200, _json_bytes(body))
        elif path == "/metrics":
            page = ""  # the spec-decode families first, then the request gauges, in vLLM 0.32.0's order
            if not launch.action.is_baseline:
                counts, per_pos = em.engine.spec_decode_counts()
                page += vllm.metrics_page(launch.model_path, em.started_unix, counts, per_pos)
            page += vllm.requests_gauges(launch.model_path, *em.engine.request_counts())
            output, prompt, _accept = em.engine.token_counts()
            page += vllm.token_counters(launch.model_path, prompt, output)
            self._send(200, page.encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(404, _json_bytes({"detail": "Not Found"}))

    def _post(self, path: str, body: Any) -> None:
        if path == "/v1/completions":
            self._completions(body)
        else:
            self._send(404, _json_bytes({"detail": "Not Found"}))

    def _completions(self, body: Any) -> None:
        """``POST /v1/completions`` (``prompt`` a string, ``max_tokens``; non-streaming)."""

        em = self.emulator
        prompt_tokens, max_tokens = _vllm_completion_request(body, em.launch.model_path, em.launch.context_length)
        if em.engine.has_fault("hung_requests"):
            _log("request received (fault injected: hung_requests): never answering")
            threading.Event().wait()
        req = em.engine.submit(max_tokens, prompt_tokens)
        req.done.wait()
        if req.error:
            self._send(503, _json_bytes({"error": {"message": req.error, "code": 503}}))
            return
        answer = vllm.completion_response(em.launch.model_path, prompt_tokens, max_tokens)
        if body.get("stream") is True:  # vLLM's server-sent events: the completion, then [DONE]
            payload = b"data: " + _json_bytes(answer) + b"\n\ndata: [DONE]\n\n"
            self._send(200, payload, "text/event-stream")
            return
        self._send(200, _json_bytes(answer))


#: The endpoints the emulator answers with, per kind of engine (``--engine``: an engine that
#: serves as sglang does, a :class:`~specband.engines.sglang.SglangEngine`, gets sglang's): its
#: launch flags, its ready line and its HTTP answers.
ENGINE_HANDLERS: tuple[tuple[type, type[_Handler]], ...] = ((VllmEngine, _VllmHandler), (SglangEngine, _SglangHandler))


def handler_for(engine: ServingEngine) -> type[_Handler]:
    """The endpoints the emulator answers with as ``engine`` (:data:`ENGINE_HANDLERS`).

    Raises:
        ConfigError: an engine whose answers the emulator does not know.
    """
    for kind, handler in ENGINE_HANDLERS:
        if isinstance(engine, kind):
            return handler
    raise ConfigError(f"--engine {engine.name}: the emulator answers as sglang or vLLM only")


#: ``VLLM_MAX_N_SEQUENCES``'s default (vllm/envs.py, vLLM 0.32): the largest ``n``.
VLLM_MAX_N_SEQUENCES = 16384


def _sglang_generate_request(body: Any, context_length: int) -> tuple[list[Any], int, bool]:
    """``(prompts, max_new_tokens, batch)`` of a ``POST /generate`` body, refused as sglang
    0.5.23 refuses it: its JSON contract (``sglang.api.v1.api_types.GenerateRequest``:
    ``text`` a string or list of strings, ``max_new_tokens`` an i64, the sampling numbers
    numbers), ``SamplingParams.verify`` (a finite temperature >= 0, ``max_new_tokens`` >= 0)
    and ``TokenizerManager._validate_one_request`` (input and input + new tokens within the
    context length; ``validate_total_tokens`` is on by default).

    Raises:
        _BadRequest: 400 with sglang's message.
    """
    if not isinstance(body, dict):
        raise _BadRequest(400, "Request body must be a JSON object.", contract=True)
    text = body.get("text")
    if text is not None and not (
        isinstance(text, str) or (isinstance(text, list) and all(isinstance(t, str) for t in text))
    ):
        raise _BadRequest(
            400,
            f"invalid type: {_serde_kind(text)}, expected a value or an array of values for StringOrList",
            contract=True,
        )
    params = body.get("sampling_params")
    if params is not None and not isinstance(params, dict):
        raise _BadRequest(400, f"invalid type: {_serde_kind(params)}, expected struct SamplingParams", contract=True)
    params = params or {}
    max_new = params.get("max_new_tokens", 128)
    if max_new is None:
        max_new = 128
    if not is_int(max_new) or not -(2**63) <= max_new < 2**63:
        raise _BadRequest(400, f"invalid type: {_serde_kind(max_new)}, expected i64", contract=True)
    temperature = params.get("temperature", 1.0)
    if temperature is not None and not is_number(temperature):
        raise _BadRequest(400, f"invalid type: {_serde_kind(temperature)}, expected f64", contract=True)
    if temperature is not None and not (math.isfinite(temperature) and temperature >= 0.0):
        raise _BadRequest(400, f"temperature must be a non-negative finite number, got {temperature}.")
    if max_new < 0:
        raise _BadRequest(400, f"max_new_tokens must be at least 0, got {max_new}.")
    if max_new == 0:
        raise _BadRequest(400, "max_new_tokens must be > 0 (the emulator decodes at least one token)")
    prompt = text if text is not None else body.get("input_ids")
    if prompt is None:
        raise _BadRequest(400, "Either text or input_ids should be provided.")
    batch = isinstance(prompt, list) and (not prompt or not isinstance(prompt[0], int))
    prompts: list[Any] = list(prompt) if batch else [prompt]
    for one in prompts:
        tokens = _prompt_tokens(one)
        if tokens >= context_length:
            raise _BadRequest(
                400, f"The input ({tokens} tokens) is longer than the model's context length ({context_length} tokens)."
            )
        if tokens + max_new > context_length:
            raise _BadRequest(
                400,
                "Requested token count exceeds the model's maximum context length "
                f"of {context_length} tokens. You requested a total of {tokens + max_new} "
                f"tokens: {tokens} tokens from the input messages and "
                f"{max_new} tokens for the completion. Please reduce the number "
                "of tokens in the input messages or the completion to fit within the limit.",
            )
    return prompts, max_new, batch


def _vllm_int(body: dict[str, Any], name: str, default: int | None) -> int | None:
    """``body[name]`` as pydantic's lax ``int`` reads it (an int, an integral finite float,
    a string of digits), else a 400 naming the parameter."""
    value = body.get(name, default)
    if value is None or is_int(value):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit() and len(value) <= 20:
        return int(value)
    raise _BadRequest(400, f"1 validation error: {name}: Input should be a valid integer, got {value!r}", param=name)


def _vllm_completion_request(body: Any, served: str, context_length: int) -> tuple[int, int]:
    """``(prompt tokens, max_tokens)`` of a ``POST /v1/completions`` body, refused as vLLM
    0.32 refuses it: another model than the one served (404, ``OpenAIServingModels.check_model``),
    a prompt that is not a string, ``max_tokens``/``n`` that are not ints, ``n`` outside
    [1, 16384] and a temperature outside [0, 2] or not finite (``SamplingParams._verify_args``),
    a prompt at or over the context length (``renderers/params.py``); ``max_tokens`` over what
    the context leaves is lowered to it (``get_max_tokens``), as vLLM does.

    Raises:
        _BadRequest: 400 or 404 with vLLM's message and parameter.
    """
    if not isinstance(body, dict):
        raise _BadRequest(400, "1 validation error: Input should be a valid dictionary")
    model = body.get("model")
    if model and model != served:
        raise _BadRequest(404, f"The model `{model}` does not exist.", param="model")
    if not isinstance(body.get("prompt"), str):
        raise _BadRequest(400, "prompt must be a string", param="prompt")
    max_tokens = _vllm_int(body, "max_tokens", 16)
    n = _vllm_int(body, "n", 1)
    assert n is not None
    if not 1 <= n <= VLLM_MAX_N_SEQUENCES:
        raise _BadRequest(400, f"n must be at least 1 and at most {VLLM_MAX_N_SEQUENCES}, got {n}.", param="n")
    temperature = body.get("temperature")
    if temperature is not None:
        if not is_number(temperature):
            raise _BadRequest(
                400, f"1 validation error: temperature: Input should be a valid number, got {temperature!r}"
            )
        if not math.isfinite(temperature):
            raise _BadRequest(400, f"temperature must be a finite number, got {temperature}.", param="temperature")
        if not 0.0 <= temperature <= 2.0:
            raise _BadRequest(400, f"temperature must be in [0, 2], got {temperature}.", param="temperature")
    if max_tokens is not None and max_tokens < 1:
        raise _BadRequest(400, f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
    prompt_tokens = _prompt_tokens(body["prompt"])
    if prompt_tokens >= context_length:
        raise _BadRequest(
            400,
            f"This model's maximum context length is {context_length} tokens. However, your prompt contains "
            f"{prompt_tokens} input tokens, which exceeds this limit even without any output tokens. Please reduce "
            "the length of the input prompt.",
            param="input_tokens",
        )
    room = context_length - prompt_tokens
    return prompt_tokens, room if max_tokens is None else min(max_tokens, room)


def _prompt_tokens(prompt: Any) -> int:
    if isinstance(prompt, list):
        return len(prompt)
    return max(1, len(str(prompt)) // 4)


class _Emulator:
    def __init__(self, launch: LaunchArgs, options: EmulatorOptions, engine: Engine, health_delay_s: float | None):
        self.launch = launch
        self.options = options
        self.engine = engine
        self.started_unix = time.time()
        self.bound_real = time.monotonic()
        self.health_delay_s = health_delay_s

    def healthy(self) -> bool:
        if self.health_delay_s is None:
            return True
        return (time.monotonic() - self.bound_real) / self.options.time_scale >= self.health_delay_s

    def response(self, r: EngineRequest) -> dict[str, Any]:
        tokens = r.max_new_tokens
        meta: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "finish_reason": {"type": "length", "length": tokens},
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": tokens,
            "cached_tokens": 0,
            "e2e_latency": (r.finished_real - r.arrived_real) / self.options.time_scale,
            # the rest of real sglang 0.5.18's answer (recorded: tests/harness/real_engine/recorded/)
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "cached_tokens_details": None,
            "dp_rank": None,
            "response_sent_to_client_ts": time.time(),
        }
        action = self.launch.action
        if not action.is_baseline and r.verify_ct > 0:
            # sglang 0.5.18's fields (tokenizer_manager.py, _calculate_spec_decoding_metrics):
            # accept length includes the bonus token; correct drafts do not
            correct = sum(i * n for i, n in enumerate(r.histogram))
            proposed = r.verify_ct * (action.speculative_num_draft_tokens - 1)
            meta["spec_verify_ct"] = r.verify_ct
            meta["spec_accept_length"] = tokens / r.verify_ct
            if proposed > 0:
                meta["spec_accept_rate"] = correct / proposed
                meta["spec_num_correct_drafts"] = meta["spec_accepted_drafts"] = correct
                meta["spec_num_proposed_drafts"] = meta["spec_proposed_drafts"] = proposed
            if r.histogram:
                meta["spec_correct_drafts_histogram"] = list(r.histogram)
                meta["spec_accept_histogram"] = list(r.histogram)
        # sglang answers the generated token ids beside the text (recorded); the emulator's text is
        # one word per token, its id 0
        return {"text": " emulated" * tokens, "output_ids": [0] * tokens, "meta_info": meta}


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def serve(argv: Sequence[str], options: EmulatorOptions) -> int:  # noqa: C901
    """Run the emulator until SIGTERM/SIGINT.

    Args:
        argv: sglang launch flags.
        options: emulator settings.

    Returns:
        the exit status (0 after a clean stop; 1 on an emulated launch failure, with
        sglang-like messages on stderr).

    Raises:
        ConfigError: bad flags or options.
    """

    answers = handler_for(options.engine)  # the engine it answers as, chosen once
    launch = answers.parse_launch(argv)
    model = load_performance_model(options.model_spec, options.hardware)
    signal.signal(signal.SIGTERM, _raise_exit)
    own_state = options.state_file is None
    state_path = (
        Path(options.state_file)
        if options.state_file
        else Path(tempfile.mkdtemp(prefix="specband-emulator-")) / "gpu-state.json"
    )
    gpu = EmulatedGpu(state_path, model, options.hardware, options.time_scale)
    # the limit set on the GPU (``sweep --power-limits``, ``launch --set-power-limit``) holds for this server

    model = with_power_limit(model, gpu.read().power_limit_w)
    faults = [f for f in options.faults if f.applies_to(launch)]
    kinds = {f.kind for f in faults}
    httpd: ThreadingHTTPServer | None = None
    engine: Engine | None = None
    try:
        _log(
            f"emulated {options.engine.name} server: {options.hardware} ({type(model).__name__}), "
            f"action {launch.action}, max running {launch.max_running_requests}, "
            f"mem fraction {launch.mem_fraction_static:g}, time scale {options.time_scale:g}"
        )
        pred = model.predict(launch.max_running_requests, launch.action, gpu.read().temp_c, launch.mem_fraction_static)
        gpu.update(mem_used_mb=float(pred.mem_used_mb) * 0.5, owner_pid=os.getpid())
        time.sleep(options.load_time_s * 0.6 * options.time_scale)  # loading weights
        if "launch_failure" in kinds:
            sys.stderr.write("RuntimeError: Initialization failed (fault injected: launch_failure)\n")
            return 1
        time.sleep(options.load_time_s * 0.4 * options.time_scale)  # capturing CUDA graphs
        if "oom_at_capture" in kinds or not pred.fits_in_memory:
            sys.stderr.write(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB.\n"
                "Exception: Capture cuda graph failed: CUDA out of memory.\n"
                "Possible solutions:\n1. set --mem-fraction-static to a smaller value\n"
                "2. set --cuda-graph-max-bs to a smaller value\n"
            )
            sys.stderr.flush()
            if any(f.kind == "oom_at_capture" and f.params.get("hang") for f in faults):
                threading.Event().wait()  # the scheduler died, the HTTP side hangs: until SIGTERM
            return 1
        die_after = None
        for f in faults:
            if f.kind == "die_mid_batch":
                die_after = int(f.params.get("after_steps", 50))
        health_delay = None
        for f in faults:
            if f.kind == "slow_health":
                health_delay = float(f.params.get("delay_s", math.inf))
        engine = Engine(model, gpu, launch, options, die_after)
        try:
            handler: type[_Handler] = type("Handler", (answers,), {})  # its own class: the emulator is set on it

            class Server(ThreadingHTTPServer):
                request_queue_size = 1024  # the default backlog of 5 drops bursts of connections

            httpd = Server((launch.host, launch.port), handler)
            httpd.daemon_threads = True
        except OSError as exc:
            sys.stderr.write(
                f"ERROR: [Errno {exc.errno}] error while attempting to bind on address "
                f"('{launch.host}', {launch.port}): {exc.strerror.lower() if exc.strerror else exc}\n"
            )
            return 1
        handler.emulator = _Emulator(launch, options, engine, health_delay)
        engine.set_idle()
        engine.start()
        answers.ready(launch)
        httpd.serve_forever(poll_interval=0.05)
        return 0
    except (SystemExit, KeyboardInterrupt):
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finish cleaning up
        if engine is not None:
            engine.stop()
        if httpd is not None:
            httpd.server_close()
        try:
            gpu.release()
        except Exception:  # never mask the exit
            pass
        if own_state:
            for p in (state_path, Path(str(state_path) + ".lock")):
                try:
                    p.unlink()
                except OSError:
                    pass
            try:
                state_path.parent.rmdir()
            except OSError:
                pass
