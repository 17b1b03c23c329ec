"""An sglang-compatible HTTP server driven by a performance model (``specband emulate``).

It accepts exactly the flags sglang accepts (sglang's own parser when sglang is
importable, else a strict copy of it: an unknown or ambiguous flag exits 2 with sglang's
message), resolves the speculative ones as sglang does (:func:`parse_launch_args`), uses
those it models and serves, like sglang 0.5.23:

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
  keyed by the number of running requests, one value per :data:`DECODE_LOG_INTERVAL`
  decode iterations, their mean (the time since the previous value over the interval,
  so the first value after an idle gap includes the gap), as sglang's
  ``metrics_reporter.py`` records it;
* ``GET /v1/models``, ``GET /get_model_info``, ``POST /flush_cache``.

A scheduler thread emulates continuous batching: at most ``--max-running-requests``
requests decode together; each decode step takes the model's ``step_time_s`` for the
current batch size and temperature (with 2 % log-normal noise) and gives each request
``floor(a)`` or ``ceil(a)`` tokens so that the mean is the model's accept length ``a``.
Step times are recorded as sglang's scheduler records them (above). Power,
utilisation, memory and heat go to the emulated GPU's state file
(:mod:`specband.emulator.gpu`), which persists across launches.

Time runs ``1 / time_scale`` times faster than real time (``--time-scale``, or
``SPECBAND_TIME_SCALE``); every figure it reports (step times, latencies) is in emulated
seconds. Loading takes ``--load-time-s`` emulated seconds.

Faults (``--fault KIND[:key=value,...]``, repeatable, or ``SPECBAND_EMULATOR_FAULTS``
separated by ``;``): ``launch_failure``, ``oom_at_capture``, ``die_mid_batch``
(parameter ``after_steps``, default 50 decode steps after the first
``max_running_requests`` requests finished), ``missing_step_times``, ``slow_health``
(parameter ``delay_s``, emulated seconds of 503 before /health answers 200; default
never), ``hung_requests`` (``/generate`` never answers), ``draft_rejected`` (every draft
token rejected: accept length 1, as with a rope mismatch); ``oom_at_capture:hang=1``
logs the out-of-memory and keeps running without ever becoming healthy, as sglang can.
Keys ``bs`` (max running requests), ``steps``, ``topk``, ``draft`` and ``mem``
(mem fraction) restrict a fault to matching launches. A model that says the
configuration does not fit in memory fails like ``oom_at_capture``.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from specband.actions import Action
from specband.emulator.env import FAULTS_ENV
from specband.emulator.gpu import EmulatedGpu, reasons_for
from specband.emulator.launchargs import SGLANG_PARSER_ENV, LaunchArgs, _log, parse_launch_args
from specband.errors import ConfigError
from specband.schedule import AdaptiveController, chain_action

__all__ = [
    "FAULT_KINDS",
    "SGLANG_PARSER_ENV",
    "EmulatorOptions",
    "Fault",
    "LaunchArgs",
    "parse_fault",
    "parse_launch_args",
    "serve",
]

#: Faults ``--fault`` can inject.
FAULT_KINDS: tuple[str, ...] = (
    "launch_failure",
    "oom_at_capture",
    "die_mid_batch",
    "missing_step_times",
    "slow_health",
    "hung_requests",
    "draft_rejected",
)
_MATCH_KEYS = {
    "bs": "max_running_requests",
    "steps": "steps",
    "topk": "topk",
    "draft": "draft",
    "mem": "mem_fraction_static",
}
_PARAM_KEYS = {"after_steps", "delay_s", "hang"}
_VERSION = "0.5.23"  # the sglang release whose flags and answers it emulates
#: Decode iterations per ``step_time_dict`` value (sglang's ``--decode-log-interval``
#: default, 40).
DECODE_LOG_INTERVAL = 40


@dataclass(frozen=True)
class Fault:
    """One injected fault.

    Attributes:
        kind: one of :data:`FAULT_KINDS`.
        match: launch attribute filters (``bs``, ``steps``, ``topk``, ``draft``, ``mem``).
        params: ``after_steps`` (die_mid_batch), ``delay_s`` (slow_health).
    """

    kind: str
    match: Mapping[str, float] = field(default_factory=dict)
    params: Mapping[str, float] = field(default_factory=dict)

    def applies_to(self, launch: LaunchArgs) -> bool:
        """True when every filter equals the launch's value."""
        values = {
            "bs": launch.max_running_requests,
            "steps": launch.action.speculative_num_steps,
            "topk": launch.action.speculative_eagle_topk,
            "draft": launch.action.speculative_num_draft_tokens,
            "mem": launch.mem_fraction_static,
        }
        return all(abs(values[k] - v) < 1e-9 for k, v in self.match.items())


def parse_fault(text: str) -> Fault:
    """Parse ``KIND[:key=value,...]`` (e.g. ``oom_at_capture:bs=16,steps=5``).

    Raises:
        ConfigError: an unknown kind or key, or a non-numeric value.
    """
    kind, _, rest = text.strip().partition(":")
    if kind not in FAULT_KINDS:
        raise ConfigError(f"unknown fault {kind!r}; expected one of {', '.join(FAULT_KINDS)}")
    match: dict[str, float] = {}
    params: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"fault {text!r}: expected key=value, got {item!r}")
        try:
            number = float(value)
        except ValueError:
            raise ConfigError(f"fault {text!r}: {key} must be a number, got {value!r}") from None
        if key in _MATCH_KEYS:
            match[key] = number
        elif key in _PARAM_KEYS:
            params[key] = number
        else:
            raise ConfigError(
                f"fault {text!r}: unknown key {key!r}; expected {', '.join([*_MATCH_KEYS, *sorted(_PARAM_KEYS)])}"
            )
    return Fault(kind, match, params)


@dataclass(frozen=True)
class EmulatorOptions:
    """Emulator settings that are not sglang flags.

    Attributes:
        hardware: performance-model profile.
        model_spec: ``calibrated`` (the calibrated :func:`specband.sim.build_model`) or
            ``module:function`` (a user-supplied PerformanceModel factory); see
            :mod:`specband.emulator.models`.
        state_file: the emulated GPU's state file (``None``: a private temporary one).
        time_scale: real seconds per emulated second.
        load_time_s: emulated seconds from start to a bound, healthy server.
        seed: noise seed.
        step_noise: log-normal sigma of step times.
        faults: injected faults.
        record_step_time: serve ``step_time_dict`` (sglang needs
            ``SGLANG_RECORD_STEP_TIME``).
        idle_hold_s: emulated seconds the GPU keeps its busy power after the last
            request finished (at least 20 ms real), so that the gap between back-to-back
            requests, stretched by the time scale, does not read as idle.
    """

    hardware: str = "rtx4060-laptop"
    model_spec: str = "calibrated"
    state_file: str | None = None
    time_scale: float = 1.0
    load_time_s: float = 30.0
    seed: int = 0
    step_noise: float = 0.02
    faults: tuple[Fault, ...] = ()
    record_step_time: bool = True
    idle_hold_s: float = 1.0
    engine: str = "sglang"

    @classmethod
    def from_env(cls, **overrides: Any) -> EmulatorOptions:
        """``overrides`` (``None`` values are ignored: the defaults stay), plus the faults of
        :data:`~specband.emulator.env.FAULTS_ENV` (``;``-separated) and sglang's own
        ``SGLANG_RECORD_STEP_TIME``. (``specband emulate`` reads the other ``SPECBAND_*``
        variables as its options' defaults: typer's ``envvar``.)

        Raises:
            ConfigError: a malformed fault.
        """
        env = os.environ
        values: dict[str, Any] = {}
        faults = [parse_fault(f) for f in env.get(FAULTS_ENV, "").split(";") if f.strip()]
        flag = env.get("SGLANG_RECORD_STEP_TIME", "")
        values["record_step_time"] = flag.lower() in ("1", "true", "yes")
        for key, value in overrides.items():
            if value is None:
                continue
            if key == "faults":
                faults += list(value)
            else:
                values[key] = value
        values["faults"] = tuple(faults)
        return cls(**values)


@dataclass
class _Request:
    max_new_tokens: int
    prompt_tokens: int
    arrived_real: float
    generated: float = 0.0
    verify_ct: int = 0
    #: verify steps by draft tokens accepted (sglang's ``spec_correct_drafts_histogram``)
    histogram: list[int] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    finished_real: float = 0.0
    error: str | None = None


class Engine:
    """The emulated scheduler (continuous batching) and its decode loop.

    Args:
        model: the performance model.
        gpu: the emulated GPU (state file).
        launch: the launch flags.
        options: emulator settings.
        die_after_steps: decode steps after the warm-up at which the process dies
            (``None``: never).
    """

    def __init__(
        self, model: Any, gpu: EmulatedGpu, launch: LaunchArgs, options: EmulatorOptions, die_after_steps: int | None
    ) -> None:
        self.model = model
        self.gpu = gpu
        self.launch = launch
        self.options = options
        self.scale = options.time_scale
        self.rng = random.Random(hash((options.seed, launch.max_running_requests, tuple(launch.action))) & 0xFFFFFFFF)
        self.cond = threading.Condition()
        self.waiting: deque[_Request] = deque()
        self.running: list[_Request] = []
        self.step_time_dict: dict[int, list[float]] = {}
        self.decode_ct = 0
        #: emulated seconds since the last step_time_dict value: decode steps, prefills and
        #: idle gaps (the model's times, never the loop's own lag on a busy machine)
        self.emul_since_tic = 0.0
        self.cum_accept_tokens = 0
        self.cum_accept_count = 0
        self.completed = 0
        self.steps_after_warmup = 0
        self.last_gen_throughput = 0.0
        self.die_after_steps = die_after_steps
        self.stopped = False
        self.adaptive = None if launch.adaptive is None else AdaptiveController(launch.adaptive, launch.action[0])
        self.steps_by_batch_size: dict[int, set[int]] = {}
        #: vLLM's spec-decode counters (cumulative since launch; per request and verify step)
        self.spec_counts = {"num_drafts": 0.0, "num_draft_tokens": 0.0, "num_accepted_tokens": 0.0}
        self.spec_per_pos = [0.0] * max(0, launch.action.speculative_num_draft_tokens - 1)
        self.mem_used_mb = float(
            model.predict(
                launch.max_running_requests, launch.action, model.ambient_temp_c, launch.mem_fraction_static
            ).mem_used_mb
        )
        self.thread = threading.Thread(target=self._loop, name="specband-emulated-scheduler", daemon=True)

    def start(self) -> None:
        """Start the scheduler thread."""
        self.thread.start()

    def stop(self) -> None:
        """Stop the scheduler; waiting requests fail."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    def submit(self, max_new_tokens: int, prompt_tokens: int) -> _Request:
        """Queue one request; wait on ``request.done``."""
        req = _Request(max_new_tokens, prompt_tokens, time.monotonic())
        with self.cond:
            self.waiting.append(req)
            self.cond.notify_all()
        return req

    def internal_state(self) -> dict[str, Any]:
        """``internal_states[0]`` as sglang's ``Scheduler.get_internal_state`` builds it."""
        with self.cond:
            state: dict[str, Any] = {
                "last_gen_throughput": self.last_gen_throughput,
                "memory_usage": {"weight": None, "kvcache": None, "token_capacity": None},
                "load": len(self.running) + len(self.waiting),
            }
            if not self.launch.action.is_baseline and self.cum_accept_count > 0:
                state["avg_spec_accept_length"] = self.cum_accept_tokens / self.cum_accept_count
            if self.adaptive is not None:  # emulator only: the step counts run at each batch size
                state["adaptive_steps_by_batch_size"] = {
                    str(k): sorted(v) for k, v in sorted(self.steps_by_batch_size.items())
                }
            if self.options.record_step_time and not self._fault("missing_step_times"):
                state["step_time_dict"] = {str(k): list(v) for k, v in self.step_time_dict.items()}
        return state

    def flush_cache(self) -> bool:
        """sglang's ``/flush_cache``: resets the accept-length counters when idle."""
        with self.cond:
            if self.running or self.waiting:
                return False
            self.cum_accept_tokens = 0
            self.cum_accept_count = 0
            return True

    def _fault(self, kind: str) -> bool:
        return any(f.kind == kind and f.applies_to(self.launch) for f in self.options.faults)

    def _set_idle(self) -> None:
        temp = self.gpu.read().temp_c
        self.gpu.update(
            power_w=float(self.model.idle_power_w),
            util_pct=0.0,
            clock_event_reasons=reasons_for(False, temp, self.model.throttle_temp_c, False),
            mem_used_mb=self.mem_used_mb,
            owner_pid=os.getpid(),
        )

    def _loop(self) -> None:  # noqa: C901, PLR0915
        """Decode loop. Emulated time is pinned to real time by an anchor set when the GPU
        becomes busy: step ``k`` ends at ``anchor_real + emul_k * time_scale``. The loop
        never runs more than ~1 ms (real) ahead of that schedule, and a request that
        arrives while it waits is admitted at the next step, so concurrent clients fill
        the batch as they would on sglang even when time is compressed."""
        max_running = self.launch.max_running_requests
        chunk_s = max(0.25, 0.004 / self.scale)  # re-predict (temperature) this often, emulated s
        sigma = self.options.step_noise
        busy = False
        idle_from: float | None = time.monotonic()
        anchor_real = 0.0
        emul = 0.0
        while True:
            with self.cond:
                if busy and not self.stopped and not self.waiting and not self.running:
                    idle_from = time.monotonic()
                    # hold the busy power briefly: GPU clocks (and NVML's averaged power) do
                    # not drop between back-to-back requests
                    self.cond.wait(max(0.02, self.options.idle_hold_s * self.scale))
                while not self.stopped and not self.waiting and not self.running:
                    idle_from = idle_from or time.monotonic()
                    if busy:
                        busy = False
                        self._set_idle()
                    self.cond.wait()
                if self.stopped:
                    for r in [*self.running, *self.waiting]:
                        r.error = "server shutting down"
                        r.done.set()
                    return
                admitted = 0
                while self.waiting and len(self.running) < max_running:
                    self.running.append(self.waiting.popleft())
                    admitted += 1
                running = list(self.running)
            now = time.monotonic()
            if not busy or anchor_real + emul * self.scale < now - 0.002:
                anchor_real, emul = now, 0.0  # (re)pin emulated time to real time
            busy = True
            temp = self.gpu.read().temp_c
            n = len(running)
            action = self._action_for(n)
            pred = self.model.predict(n, action, temp, self.launch.mem_fraction_static)
            self.gpu.update(
                power_w=float(pred.avg_power_w),
                util_pct=float(pred.gpu_util_pct),
                clock_event_reasons=reasons_for(bool(pred.power_capped), temp, self.model.throttle_temp_c, True),
                mem_used_mb=self.mem_used_mb,
                owner_pid=os.getpid(),
            )
            rejected = action.is_baseline or self._fault("draft_rejected")
            accept = 1.0 if rejected else min(float(pred.accept_length), action.speculative_num_steps + 1.0)
            base, frac = math.floor(accept), accept - math.floor(accept)
            chunk_start = emul
            emul += 0.02 * admitted  # prefill of the newly admitted requests (not a decode step)
            self.emul_since_tic += 0.02 * admitted
            if idle_from is not None:  # the idle gap goes into the next step_time_dict value, as in sglang
                self.emul_since_tic += (time.monotonic() - idle_from) / self.scale
                idle_from = None
            finished: list[_Request] = []
            tokens_out = 0
            while True:
                dt = float(pred.step_time_s) * math.exp(sigma * self.rng.gauss(0.0, 1.0) - 0.5 * sigma * sigma)
                emul += dt
                self._count_decode(n, dt)
                accepted: list[int] = []
                for r in running:
                    got = base + (1 if self.rng.random() < frac else 0)
                    accepted.append(got - 1)
                    r.generated += got
                    r.verify_ct += 1
                    if not action.is_baseline:
                        self._count_draft(action, got - 1)
                        if len(r.histogram) < got:
                            r.histogram.extend([0] * (got - len(r.histogram)))
                        r.histogram[got - 1] += 1
                    self.cum_accept_tokens += got
                    self.cum_accept_count += 1
                    tokens_out += got
                    if r.generated >= r.max_new_tokens:
                        finished.append(r)
                if self.completed >= max_running:
                    self.steps_after_warmup += 1
                    if self.die_after_steps is not None and self.steps_after_warmup >= self.die_after_steps:
                        self._die()
                switched = self.adaptive is not None and self.adaptive.on_verify(accepted, n) is not None
                if finished or switched or emul - chunk_start >= chunk_s:
                    break
                ahead = anchor_real + emul * self.scale - time.monotonic()
                if ahead > 0.001:
                    with self.cond:
                        if not self.stopped and not (self.waiting and n < max_running):
                            self.cond.wait(ahead)
                        if self.stopped or (self.waiting and n < max_running):
                            break
                elif self.waiting and n < max_running:
                    break
            # finished requests answer when real time reaches their emulated finish
            delay = anchor_real + emul * self.scale - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            span = emul - chunk_start
            self.last_gen_throughput = tokens_out / span if span > 0 else 0.0
            now = time.monotonic()
            with self.cond:
                for r in finished:
                    self.running.remove(r)
                    r.finished_real = now
                    self.completed += 1
                for r in finished:
                    r.done.set()

    def _count_decode(self, running: int, dt: float) -> None:
        """One decode iteration of ``dt`` emulated seconds; every
        :data:`DECODE_LOG_INTERVAL`-th appends the mean since the previous value."""
        self.decode_ct += 1
        self.emul_since_tic += dt
        if self.decode_ct % DECODE_LOG_INTERVAL:
            return
        value, self.emul_since_tic = self.emul_since_tic / DECODE_LOG_INTERVAL, 0.0
        with self.cond:
            self.step_time_dict.setdefault(running, []).append(value)

    def _count_draft(self, action: Action, accepted: int) -> None:
        """vLLM's ``observe_draft`` for one request's verify step: ``K`` draft tokens,
        ``accepted`` of them accepted, the first ``accepted`` positions counted."""
        k = action.speculative_num_draft_tokens - 1
        with self.cond:
            self.spec_counts["num_drafts"] += 1
            self.spec_counts["num_draft_tokens"] += k
            self.spec_counts["num_accepted_tokens"] += accepted
            if len(self.spec_per_pos) < k:
                self.spec_per_pos += [0.0] * (k - len(self.spec_per_pos))
            for i in range(min(accepted, k)):
                self.spec_per_pos[i] += 1

    def spec_decode_counts(self) -> tuple[dict[str, float], list[float]]:
        """A copy of the spec-decode counters (``/metrics``)."""
        with self.cond:
            return dict(self.spec_counts), list(self.spec_per_pos)

    def _action_for(self, batch_size: int) -> Action:
        """The action a decode step at ``batch_size`` runs: the launch's, or with
        ``--speculative-adaptive`` the chain config of the step count the batch size's tier
        is at (sglang 0.5.23 ``activate_step_by_batch``; no CUDA-graph padding)."""
        if self.launch.vllm_schedule is not None:
            from specband.emulator.vllm import action_at

            act = action_at(self.launch.vllm_schedule, self.launch.action, batch_size)
            with self.cond:
                self.steps_by_batch_size.setdefault(batch_size, set()).add(act.speculative_num_steps)
            return act
        if self.adaptive is None:
            return self.launch.action
        steps = self.adaptive.steps_for(batch_size)
        with self.cond:  # internal_state() reads it from the HTTP threads
            self.steps_by_batch_size.setdefault(batch_size, set()).add(steps)
        return chain_action(steps)

    def _die(self) -> None:
        sys.stderr.write(
            "[emulator] Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access was "
            "encountered (fault injected: die_mid_batch)\n"
        )
        sys.stderr.flush()
        try:
            self.gpu.release()
        finally:
            os._exit(1)


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj).encode()


class _Handler(BaseHTTPRequestHandler):
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
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _read_json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw or b"{}")

    def do_GET(self) -> None:
        em = self.emulator
        path = self.path.split("?", 1)[0]
        if em.launch.engine == "vllm" and path != "/health":
            self._vllm_get(path)
        elif path == "/health":
            if em.healthy():
                self._send(200)
            else:
                self._send(503, _json_bytes({"detail": "not ready"}))
        elif path == "/health_generate":
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
                "owned_by": "sglang",
                "root": em.launch.model_path,
                "max_model_len": em.launch.context_length,
            }
            self._send(200, _json_bytes({"object": "list", "data": [model]}))
        elif path == "/get_model_info":
            info = {"model_path": em.launch.model_path, "tokenizer_path": em.launch.model_path, "is_generation": True}
            self._send(200, _json_bytes(info))
        else:
            self._send(404, _json_bytes({"detail": "Not Found"}))

    def _vllm_get(self, path: str) -> None:
        """vLLM's GET endpoints (:mod:`specband.emulator.vllm`)."""
        from specband.emulator import vllm

        em = self.emulator
        launch = em.launch
        if path == "/version":
            self._send(200, _json_bytes(vllm.version_response()))
        elif path == "/v1/models":
            body = vllm.models_response(launch.model_path, int(em.started_unix), launch.context_length)
            self._send(200, _json_bytes(body))
        elif path == "/metrics" and not launch.action.is_baseline:
            counts, per_pos = em.engine.spec_decode_counts()
            page = vllm.metrics_page(launch.model_path, em.started_unix, counts, per_pos)
            self._send(200, page.encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/metrics":
            self._send(200, b"# no speculative decoding\n", "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(404, _json_bytes({"detail": "Not Found"}))

    def _vllm_completions(self, body: Any) -> None:
        """``POST /v1/completions`` (``prompt`` a string, ``max_tokens``; non-streaming)."""
        from specband.emulator import vllm

        em = self.emulator
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            self._send(400, _json_bytes({"error": {"message": "prompt must be a string", "code": 400}}))
            return
        try:
            max_tokens = int(body.get("max_tokens", 16))
        except (TypeError, ValueError):
            max_tokens = 0
        if max_tokens <= 0:
            self._send(400, _json_bytes({"error": {"message": "max_tokens must be at least 1", "code": 400}}))
            return
        if em.engine._fault("hung_requests"):
            _log("request received (fault injected: hung_requests): never answering")
            threading.Event().wait()
        prompt_tokens = _prompt_tokens(body["prompt"])
        req = em.engine.submit(max_tokens, prompt_tokens)
        req.done.wait()
        if req.error:
            self._send(503, _json_bytes({"error": {"message": req.error, "code": 503}}))
            return
        self._send(200, _json_bytes(vllm.completion_response(em.launch.model_path, prompt_tokens, max_tokens)))

    def do_POST(self) -> None:
        em = self.emulator
        path = self.path.split("?", 1)[0]
        try:
            body = self._read_json()
        except (ValueError, UnicodeDecodeError):
            self._send(400, _json_bytes({"error": {"message": "body is not JSON"}}))
            return
        if em.launch.engine == "vllm":
            if path == "/v1/completions":
                self._vllm_completions(body)
            else:
                self._send(404, _json_bytes({"detail": "Not Found"}))
            return
        if path == "/flush_cache":
            ok = em.engine.flush_cache()
            self._send(200 if ok else 400, b"Cache flushed.\n" if ok else b"Cache not flushed.\n", "text/plain")
            return
        if path != "/generate":
            self._send(404, _json_bytes({"detail": "Not Found"}))
            return
        if not isinstance(body, dict):
            self._send(400, _json_bytes({"error": {"message": "body must be a JSON object"}}))
            return
        text = body.get("text", body.get("input_ids"))
        if text is None:
            self._send(400, _json_bytes({"error": {"message": "Either text or input_ids should be provided."}}))
            return
        batch = isinstance(text, list) and (not text or not isinstance(text[0], int))
        prompts = text if batch else [text]
        params = body.get("sampling_params") or {}
        try:
            max_new = int(params.get("max_new_tokens", 128))
        except (TypeError, ValueError):
            self._send(400, _json_bytes({"error": {"message": "max_new_tokens must be an integer"}}))
            return
        if max_new <= 0:
            self._send(400, _json_bytes({"error": {"message": "max_new_tokens must be > 0"}}))
            return
        if em.engine._fault("hung_requests"):
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
            self.end_headers()
            self.wfile.write(payload)
            return
        self._send(200, _json_bytes(outs if batch else outs[0]))


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

    def response(self, r: _Request) -> dict[str, Any]:
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
        return {"text": " emulated" * tokens, "meta_info": meta}


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _parse_launch(argv: Sequence[str], engine: str) -> LaunchArgs:
    """The launch flags of ``engine`` (sglang's, or vLLM's: :mod:`specband.emulator.vllm`)."""
    if engine == "vllm":
        from specband.emulator.vllm import parse_vllm_launch_args

        return parse_vllm_launch_args(argv)
    return parse_launch_args(argv)


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
    from specband.emulator.models import load_performance_model

    launch = _parse_launch(argv, options.engine)
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
    from specband.sim.power_limit import with_power_limit

    model = with_power_limit(model, gpu.read().power_limit_w)
    faults = [f for f in options.faults if f.applies_to(launch)]
    kinds = {f.kind for f in faults}
    httpd: ThreadingHTTPServer | None = None
    engine: Engine | None = None
    try:
        _log(
            f"emulated {launch.engine} server: {options.hardware} ({type(model).__name__}), action {launch.action}, "
            f"max running {launch.max_running_requests}, mem fraction {launch.mem_fraction_static:g}, "
            f"time scale {options.time_scale:g}"
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

            class Handler(_Handler):
                pass

            class Server(ThreadingHTTPServer):
                request_queue_size = 1024  # the default backlog of 5 drops bursts of connections

            httpd = Server((launch.host, launch.port), Handler)
            httpd.daemon_threads = True
        except OSError as exc:
            sys.stderr.write(
                f"ERROR: [Errno {exc.errno}] error while attempting to bind on address "
                f"('{launch.host}', {launch.port}): {exc.strerror.lower() if exc.strerror else exc}\n"
            )
            return 1
        Handler.emulator = _Emulator(launch, options, engine, health_delay)
        engine._set_idle()
        engine.start()
        if launch.engine == "vllm":  # uvicorn's line, as the real vLLM server logs it
            print("INFO:     Application startup complete.", flush=True)
        else:
            _log(f"The server is fired up and ready to roll! (http://{launch.host}:{launch.port})")
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
