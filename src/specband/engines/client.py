"""The workload client and the ``/get_server_info`` parser.

Workload (docs/FACTS.md §4, sglang ``scripts/playground/bench_speculative.py``): ``n`` requests to
``POST /generate`` at concurrency ``bs`` (at most ``bs`` in flight; a new one is sent as
soon as one finishes), cycling over :data:`PROMPTS`, each with ``max_new_tokens=512``,
``temperature=0`` and ``ignore_eos=true`` so every request decodes exactly 512 tokens.

Server info: sglang answers ``GET /get_server_info`` (``/server_info`` in newer versions)
with the server arguments plus ``internal_states``, one dict per data-parallel rank with
``avg_spec_accept_length`` (only once a speculative step ran) and, when the server runs
with ``SGLANG_RECORD_STEP_TIME=1``, ``step_time_dict`` (decode batch size -> list of step
times, s; JSON turns the int keys into strings). Older versions put ``step_time_dict`` at
the top level; a PD-disaggregated router nests the decode server under ``"decode"``.
Source: sglang ``python/sglang/srt/managers/scheduler.py`` (``get_internal_state``),
``python/sglang/bench_serving.py``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specband.core.errors import ConfigError, EngineError
from specband.core.limits import MAX_PROBE_BODY_BYTES, is_number

__all__ = [
    "EMULATOR_HEADER",
    "PROMPTS",
    "BatchResult",
    "ProbeHttp",
    "RequestError",
    "ServerInfo",
    "emulator_time_scale",
    "fetch_server_info",
    "new_client",
    "p20",
    "parse_server_info",
    "run_batch",
]

#: The header every answer of ``specband emulate`` carries: its time scale (real seconds per
#: emulated second). A real engine sends none, so a sweep tells an emulated server by it.
EMULATOR_HEADER = "X-Specband-Emulator-Time-Scale"

#: The four fixed prompts of the workload (long, open-ended answers so that with
#: ``ignore_eos`` every request decodes ``max_new_tokens`` tokens of natural text).
PROMPTS: tuple[str, ...] = (
    "Human: Write a complete, well-commented Python implementation of a command-line todo "
    "application that stores tasks in a JSON file, with add, list, complete and delete "
    "commands. Show the full code.\n\nAssistant:",
    "Human: Explain step by step how a transformer language model turns a prompt into its next "
    "token, from tokenisation and embeddings through attention and the feed-forward layers to "
    "sampling. Be detailed.\n\nAssistant:",
    "Human: Write a long travel story about a week spent walking along the coast of Portugal, "
    "describing the towns, the food and the people met on the way.\n\nAssistant:",
    "Human: Solve the equation x^2 - 5x + 6 = 0 in three different ways, explaining every step, "
    "then discuss when each method is the best choice.\n\nAssistant:",
)


class RequestError(EngineError):
    """A ``/generate`` request failed (connection refused or reset, HTTP error, bad JSON)."""


def p20(values: Sequence[float]) -> float:
    """The 20th percentile (numpy's linear interpolation), as sglang's bench script uses
    instead of the median ("on purpose": robust to the slow first steps).

    Raises:
        ValueError: no values.
    """
    if len(values) == 0:
        raise ValueError("p20 of no values")
    ordered = sorted(float(v) for v in values)
    position = (len(ordered) - 1) * 0.2  # numpy's "linear" method: between the two nearest ranks
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class ServerInfo:
    """The parts of ``/get_server_info`` the sweep uses.

    Attributes:
        accept_length: ``avg_spec_accept_length`` (cumulative since launch), or ``None``
            when absent, null, non-finite or below 1 (never replaced by 1.0 here).
        step_times: decode batch size -> step times, s (``{}`` when not recorded).
        raw: the JSON as received.
    """

    accept_length: float | None
    step_times: dict[int, list[float]]
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)


def _finite(value: Any) -> float | None:
    if not is_number(value):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _parse_step_time_dict(obj: Any) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    if not isinstance(obj, Mapping):
        return out
    for key, values in obj.items():
        try:
            bs = int(key)
        except (TypeError, ValueError):
            continue
        if not isinstance(values, (list, tuple)):
            continue
        times = [t for t in (_finite(v) for v in values) if t is not None and t > 0]
        out.setdefault(bs, []).extend(times)
    return out


def parse_server_info(info: Any) -> ServerInfo:
    """Parse a ``/get_server_info`` JSON body robustly.

    Handles: ``internal_states`` missing, null or empty; ``step_time_dict`` inside
    ``internal_states[0]`` or at the top level; keys as str or int; a ``"decode"`` list
    (PD disaggregation). A missing accept length stays ``None``.
    """
    if not isinstance(info, Mapping):
        return ServerInfo(None, {}, {})
    raw = info
    decode = info.get("decode")
    if isinstance(decode, list) and decode and isinstance(decode[0], Mapping):
        info = decode[0]
    states = info.get("internal_states")
    state: Mapping[str, Any] = {}
    if isinstance(states, list) and states and isinstance(states[0], Mapping):
        state = states[0]
    elif isinstance(states, Mapping):
        state = states
    accept = _finite(state.get("avg_spec_accept_length"))
    if accept is None:
        accept = _finite(info.get("avg_spec_accept_length"))
    if accept is not None and accept < 1.0:
        accept = None
    step_times = _parse_step_time_dict(state.get("step_time_dict"))
    if not step_times:
        step_times = _parse_step_time_dict(info.get("step_time_dict"))
    return ServerInfo(accept, step_times, raw)


def fetch_server_info(base_url: str, timeout_s: float = 30.0) -> ServerInfo:
    """``GET /get_server_info`` (falling back to ``/server_info`` on 404) and parse it.

    Raises:
        EngineError: the server cannot be reached or answers an error or not JSON.
    """
    import httpx

    try:
        with httpx.Client(timeout=timeout_s, trust_env=False) as client:
            resp = client.get(base_url + "/get_server_info")
            if resp.status_code == 404:
                resp = client.get(base_url + "/server_info")
            resp.raise_for_status()
            return parse_server_info(resp.json())
    except httpx.HTTPError as exc:
        raise EngineError(f"server_info_failed: {type(exc).__name__}: {exc}") from None
    except ValueError as exc:
        raise EngineError(f"server_info_failed: not JSON ({exc})") from None


def emulator_time_scale(base_url: str, timeout_s: float = 30.0) -> float | None:
    """The time scale ``specband emulate`` announces in :data:`EMULATOR_HEADER` (on its
    ``GET /health`` answer), or ``None`` when the server is not the emulator (no header, or
    one that is not a positive finite number).

    Raises:
        EngineError: the server cannot be reached.
    """
    import httpx

    try:
        with httpx.Client(timeout=timeout_s, trust_env=False) as client:
            value = client.get(base_url + "/health").headers.get(EMULATOR_HEADER)
    except httpx.HTTPError as exc:
        raise EngineError(f"server_unreachable: {type(exc).__name__}: {exc}") from None
    try:
        scale = float(str(value)[:32]) if value is not None else None
    except ValueError:
        return None
    return scale if scale is not None and math.isfinite(scale) and scale > 0 else None


@dataclass(frozen=True)
class BatchResult:
    """One batch of requests.

    Attributes:
        completed: requests that finished.
        total_output_tokens: sum of ``meta_info.completion_tokens``.
        elapsed_real_s: real seconds from the first send to the last answer.
        spec_verify_ct: sum of ``meta_info.spec_verify_ct`` (verify steps), or ``None``
            when a response lacked it (non-speculative server).
    """

    completed: int
    total_output_tokens: int
    elapsed_real_s: float
    spec_verify_ct: int | None

    @property
    def accept_length(self) -> float | None:
        """Tokens per verify step over the batch (``None`` without ``spec_verify_ct``)."""
        if not self.spec_verify_ct:
            return None
        return self.total_output_tokens / self.spec_verify_ct


def run_batch(  # noqa: C901, PLR0913, PLR0915
    base_url: str,
    *,
    num_requests: int,
    concurrency: int,
    max_new_tokens: int = 512,
    prompts: Sequence[str] = PROMPTS,
    timeout_s: float = 600.0,
    server_alive: Callable[[], bool] | None = None,
    client: Any | None = None,
    on_first_send: Callable[[], None] | None = None,
    on_last_done: Callable[[], None] | None = None,
    openai_model: str | None = None,
) -> BatchResult:
    """Send ``num_requests`` requests to ``POST /generate`` with at most ``concurrency``
    in flight; prompt ``i`` is ``prompts[i % len(prompts)]``. With ``openai_model`` (vLLM)
    they go to the OpenAI completions endpoint instead, ``POST /v1/completions`` with
    ``model``, ``prompt``, ``max_tokens``, ``temperature: 0`` and ``ignore_eos: true``
    (vLLM's extra sampling parameter), and the tokens are ``usage.completion_tokens``.

    The first ``min(concurrency, num_requests)`` requests are released together (a
    barrier), so the batch starts full; ``on_first_send`` runs at that release and
    ``on_last_done`` when the last response has arrived, so that a measurement window
    brackets the requests and nothing else (thread and connection set-up excluded).

    Args:
        base_url: ``http://host:port``.
        num_requests: requests to send (the sweep uses ``max(num_prompts, bs)``).
        concurrency: requests in flight (the batch size).
        max_new_tokens: tokens each request decodes (``ignore_eos``).
        prompts: the prompt cycle.
        timeout_s: real seconds one request may take.
        server_alive: called on a failure to tell a dead server from a bad request.
        client: an ``httpx.Client`` to reuse (keeps the warm-up's connections open);
            ``None``: a new one for this batch.
        on_first_send: called once, just before the first wave is sent.
        on_last_done: called once, when the last request has completed successfully.
        openai_model: the ``model`` of an OpenAI completions request (``None``: sglang's
            ``/generate``).

    Raises:
        RequestError: a request failed; the message starts with
            ``server_died_mid_batch`` when ``server_alive()`` says the server is gone.
        ConfigError: non-positive counts.
    """
    import threading  # the timed batch's threads: only a sweep sends one, not recommend or --help
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    import httpx

    if num_requests <= 0 or concurrency <= 0 or max_new_tokens <= 0:
        raise ConfigError("num_requests, concurrency and max_new_tokens must be > 0")
    if not prompts:
        raise ConfigError("the workload needs at least one prompt")
    sampling = {"max_new_tokens": max_new_tokens, "temperature": 0.0, "ignore_eos": True}
    lock = threading.Lock()
    totals = {"tokens": 0, "verify": 0, "has_verify": True, "completed": 0}
    times = {"start": 0.0, "end": 0.0}
    stop = threading.Event()
    first_wave = min(concurrency, num_requests)

    def release() -> None:
        times["start"] = time.monotonic()
        if on_first_send is not None:
            on_first_send()

    barrier = threading.Barrier(first_wave, action=release)

    def one(i: int, http: Any) -> None:
        if i < first_wave:
            try:
                barrier.wait(timeout=max(30.0, timeout_s))
            except threading.BrokenBarrierError:
                stop.set()
                raise RequestError(f"request {i}: the first wave could not start together") from None
        if stop.is_set():
            return
        path, body = _request_body(prompts[i % len(prompts)], sampling, openai_model)
        try:
            resp = http.post(base_url + path, json=body)
            resp.raise_for_status()
            data = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            stop.set()
            barrier.abort()
            raise RequestError(f"request {i} failed: {type(exc).__name__}: {str(exc)[:200]}") from None
        key = "meta_info" if openai_model is None else "usage"
        meta = data.get(key, {}) if isinstance(data, Mapping) else {}
        meta = meta if isinstance(meta, Mapping) else {}
        tokens = meta.get("completion_tokens")
        if not isinstance(tokens, int) or isinstance(tokens, bool):
            stop.set()
            raise RequestError(f"request {i}: response has no {key}.completion_tokens")
        verify = meta.get("spec_verify_ct")
        with lock:
            totals["tokens"] += tokens
            totals["completed"] += 1
            if isinstance(verify, int) and verify > 0:
                totals["verify"] += verify
            else:
                totals["has_verify"] = False
            last = totals["completed"] == num_requests
            if last:
                times["end"] = time.monotonic()
        if last and on_last_done is not None:
            on_last_done()

    own = client is None
    http = new_client(concurrency, timeout_s) if client is None else client
    try:
        pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="specband-req")
        try:
            futures = [pool.submit(one, i, http) for i in range(num_requests)]
            wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in futures if f.done() and f.exception() is not None]
            if failed:
                stop.set()
                barrier.abort()
                for f in futures:
                    f.cancel()
                exc = failed[0].exception()
                if server_alive is not None:
                    deadline = time.monotonic() + 2.0  # a crashing server may take a moment to exit
                    while server_alive() and time.monotonic() < deadline:
                        time.sleep(0.02)
                    if not server_alive():
                        raise RequestError(f"server_died_mid_batch: {exc}") from None
                assert exc is not None  # a failed future holds its exception
                raise exc
        except KeyboardInterrupt:
            # Ctrl-C / SIGTERM: do not wait for requests in flight (a hung server answers
            # none); their threads end once the caller stops the server
            stop.set()
            barrier.abort()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        else:
            pool.shutdown(wait=True, cancel_futures=True)
    finally:
        if own:
            http.close()
    return BatchResult(
        completed=int(totals["completed"]),
        total_output_tokens=int(totals["tokens"]),
        elapsed_real_s=max(0.0, times["end"] - times["start"]),
        spec_verify_ct=int(totals["verify"]) if totals["has_verify"] else None,
    )


def _request_body(prompt: str, sampling: Mapping[str, Any], openai_model: str | None) -> tuple[str, dict[str, Any]]:
    """``(path, body)`` of one request: sglang's ``/generate``, or the OpenAI completions
    endpoint for ``openai_model``."""
    if openai_model is None:
        return "/generate", {"text": prompt, "sampling_params": dict(sampling)}
    body = {
        "model": openai_model,
        "prompt": prompt,
        "max_tokens": sampling["max_new_tokens"],
        "temperature": sampling["temperature"],
        "ignore_eos": sampling["ignore_eos"],
    }
    return "/v1/completions", body


class _Deadline:
    """A timer that shuts a request's socket down ``seconds`` after it starts (see
    :class:`ProbeHttp`); :meth:`trace` is the request's httpcore ``trace`` callback."""

    def __init__(self, seconds: float) -> None:
        import threading  # a probe's or a sweep's request only, not recommend or --help

        self.expired = False
        self._lock = threading.Lock()
        self._socket: Any = None
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        if event != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        with self._lock:
            self._socket = sock
            late = self.expired
        if late:
            _shutdown(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sock = self._socket
        _shutdown(sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shutdown(sock: Any) -> None:
    """Shut ``sock`` down both ways (a blocked read returns at once); nothing when gone."""
    import socket

    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by httpx


def new_client(concurrency: int, timeout_s: float) -> Any:
    """An ``httpx.Client`` sized for ``concurrency`` requests in flight (no proxies from
    the environment: the server is local)."""
    import httpx

    limits = httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency + 2)
    return httpx.Client(timeout=timeout_s, limits=limits, trust_env=False)


class ProbeHttp:
    """Read-only HTTP to a running server for ``specband probe``: every answer read in
    chunks up to ``max_bytes`` (a larger one is an error, never read whole), one deadline per
    request, no proxies from the environment, no redirects followed.

    The deadline bounds the whole request (connect, headers and body): httpx's timeouts
    bound each read, so a server that drips a byte every half second (its headers or its
    body) would hold a request forever (hostile trial P02). A timer shuts the request's
    socket down at the deadline (captured through httpcore's documented ``trace``
    extension when the connection is made; connections are not kept alive, so every
    request has its own), which ends a read in progress at once.

    Args:
        base_url: ``http://host:port`` (no trailing slash).
        timeout_s: seconds one request may take, all of it.
        max_bytes: the largest answer body read (:data:`~specband.core.limits.MAX_PROBE_BODY_BYTES`).

    Attributes:
        posts: the ``POST`` requests sent so far (the probe's requests, counted where they are sent).
        emulated: an answer carried :data:`EMULATOR_HEADER` (the server is ``specband emulate``:
            what it shows is emulated, not measured).

    Raises (its methods):
        EngineError: the server does not answer (``<url> does not answer: ConnectError ...``),
            answers an error status other than 404, a body over ``max_bytes``, or JSON that
            does not parse where JSON was asked for.
    """

    def __init__(self, base_url: str, timeout_s: float, max_bytes: int = MAX_PROBE_BODY_BYTES) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.posts = 0
        self.emulated = False
        self._client = httpx.Client(
            timeout=timeout_s,
            trust_env=False,
            follow_redirects=False,
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    def close(self) -> None:
        """Close the connections."""
        self._client.close()

    def __enter__(self) -> ProbeHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        import httpx

        url = self.base_url + path
        deadline = _Deadline(self.timeout_s)
        data = bytearray()
        try:
            with self._client.stream(method, url, json=body, extensions={"trace": deadline.trace}) as resp:
                self.emulated = self.emulated or EMULATOR_HEADER in resp.headers
                for chunk in resp.iter_bytes():
                    data += chunk
                    if len(data) > self.max_bytes:
                        raise EngineError(f"{url}: answer larger than {self.max_bytes} bytes; not read further")
                status = resp.status_code
        except httpx.HTTPError as exc:
            if deadline.expired:
                raise EngineError(
                    f"{url} did not answer in full within --timeout {self.timeout_s:g} s "
                    f"({len(data)} bytes of its body read): --timeout bounds the whole request"
                ) from None
            raise EngineError(f"{self.base_url} does not answer: {type(exc).__name__}: {str(exc)[:200]}") from None
        finally:
            deadline.cancel()
        if status >= 400 and status != 404:
            raise EngineError(f"{url} answered HTTP {status}: {bytes(data[:200]).decode('utf-8', 'replace')}")
        return status, bytes(data)

    def get_text(self, path: str) -> str | None:
        """``GET path`` as text, or ``None`` on 404."""
        status, data = self._send("GET", path)
        return None if status == 404 else data.decode("utf-8", "replace")

    def get_json(self, path: str) -> Any:
        """``GET path`` as JSON, or ``None`` on 404 (EngineError: not JSON)."""
        text = self.get_text(path)
        return None if text is None else self._json(path, text)

    def post_json(self, path: str, body: Mapping[str, Any]) -> Any:
        """``POST path`` with a JSON body; the JSON answer (EngineError: 404 or not JSON)."""
        self.posts += 1
        status, data = self._send("POST", path, dict(body))
        if status == 404:
            raise EngineError(f"{self.base_url}{path}: not found (HTTP 404)")
        return self._json(path, data.decode("utf-8", "replace"))

    def _json(self, path: str, text: str) -> Any:
        import json

        try:
            return json.loads(text)
        except ValueError as exc:
            raise EngineError(f"{self.base_url}{path}: answer is not JSON ({exc})") from None
