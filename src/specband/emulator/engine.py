"""The emulated sglang scheduler: continuous batching and the decode loop (:class:`Engine`).

At most ``--max-running-requests`` requests decode together; each decode step takes the
performance model's ``step_time_s`` for the current batch size and temperature (with 2 %
log-normal noise) and gives each request ``floor(a)`` or ``ceil(a)`` tokens so that the
mean is the model's accept length ``a``. Requests admitted to the batch are prefilled first,
as one burst: a compute-bound forward over their prompt tokens at the prefill power of the
model (:func:`specband.sim.power_capped.prefill_burst`; a user's model without the roofline
keeps 20 ms per request at decode power), so a server whose requests keep arriving draws
prefill power mixed into its decode power, as the simulator's serving-power model says. The
power limit in the GPU's state file is read again every chunk of steps: a limit set while the
server runs (``specband govern``) holds from the next chunk on. Step times are recorded as sglang's scheduler
records them (``step_time_dict``: one value per :data:`DECODE_LOG_INTERVAL` decode
iterations). Power, utilisation, memory and heat go to the emulated GPU's state file
(:mod:`specband.emulator.gpu`). The HTTP side is :mod:`specband.emulator.server`.
"""

from __future__ import annotations

import math
import os
import random
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from specband.contract.actions import Action, chain_action
from specband.emulator.controller import AdaptiveController
from specband.emulator.gpu import EmulatedGpu, reasons_for
from specband.emulator.launchargs import LaunchArgs
from specband.emulator.options import EmulatorOptions
from specband.emulator.vllm_answers import action_at
from specband.sim.power_capped import PowerLimitedModel, prefill_burst, with_power_limit

__all__ = ["DECODE_LOG_INTERVAL", "Engine", "EngineRequest"]

#: Decode iterations per ``step_time_dict`` value (sglang's ``--decode-log-interval``
#: default, 40).
DECODE_LOG_INTERVAL = 40
#: The graph phases of ``memory_usage.graph`` and ``startup_time.cuda_graph`` in sglang 0.5.18's
#: ``internal_states[0]`` (``srt/model_executor/graph_memory_usage.py``, a stable base schema).
GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")


@dataclass
class EngineRequest:
    """One ``/generate`` prompt (or vLLM completion) in the scheduler: queued, decoding, then
    done (``done`` set; ``error`` when the server stopped first). Times are real
    :func:`time.monotonic` seconds."""

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
        self.base_model = model.inner if isinstance(model, PowerLimitedModel) else model
        self.limit_w = float(model.power_limit_w)
        self.gpu = gpu
        self.launch = launch
        self.options = options
        self.scale = options.time_scale
        self.rng = random.Random(hash((options.seed, launch.max_running_requests, tuple(launch.action))) & 0xFFFFFFFF)
        self.cond = threading.Condition()
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.step_time_dict: dict[int, list[float]] = {}
        self.decode_ct = 0
        #: emulated seconds since the last step_time_dict value: decode steps, prefills and
        #: idle gaps (the model's times, never the loop's own lag on a busy machine)
        self.emul_since_tic = 0.0
        self.cum_accept_tokens = 0
        self.cum_accept_count = 0
        #: accepted tokens and verify steps not yet folded into the cumulative counts: sglang
        #: folds them at each decode log interval (metrics_reporter.py), so /server_info's
        #: ``avg_spec_accept_length`` appears only after the first DECODE_LOG_INTERVAL iterations
        self.pending_accept_tokens = 0
        self.pending_accept_count = 0
        self.completed = 0
        #: output and prompt tokens since launch (the engines' generation/prompt token counters)
        self.output_tokens_total = 0
        self.prompt_tokens_total = 0
        #: mean accept length over the last decode log interval (sglang's spec_accept_length gauge)
        self.last_accept_length = 0.0
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

    def submit(self, max_new_tokens: int, prompt_tokens: int) -> EngineRequest:
        """Queue one request; wait on ``request.done``."""
        req = EngineRequest(max_new_tokens, prompt_tokens, time.monotonic())
        with self.cond:
            self.waiting.append(req)
            self.cond.notify_all()
        return req

    def internal_state(self) -> dict[str, Any]:
        """``internal_states[0]``'s runtime fields as sglang 0.5.18's ``Scheduler.get_internal_state``
        adds them (keys, types and structure recorded from the real server:
        tests/harness/real_engine/recorded/sglang-0.5.18-eagle3.json). The emulator has no weights,
        KV pool or graphs: ``memory_usage`` holds the emulated GPU's memory in use as ``kvcache``
        (GB) and 0.0 for the rest; ``startup_time`` is 0.0 throughout."""
        graph = dict.fromkeys(GRAPH_PHASES, 0.0)
        with self.cond:
            state: dict[str, Any] = {
                "last_gen_throughput": self.last_gen_throughput,
                "memory_usage": {
                    "weight": 0.0,
                    "kvcache": round(self.mem_used_mb / 1024.0, 3),
                    "startup_available": 0.0,
                    "token_capacity": int(self.launch.context_length),
                    "token_capacity_swa": None,
                    "graph": dict(graph),
                },
                "startup_time": {
                    "load_weight": 0.0,
                    "kv_cache_allocation": 0.0,
                    "scheduler_e2e": 0.0,
                    "cuda_graph": graph,
                },
                "effective_max_running_requests_per_dp": int(self.launch.max_running_requests),
            }
            if not self.launch.action.is_baseline and self.cum_accept_count > 0:
                state["avg_spec_accept_length"] = self.cum_accept_tokens / self.cum_accept_count
            if self.adaptive is not None:  # emulator only: the step counts run at each batch size
                state["adaptive_steps_by_batch_size"] = {
                    str(k): sorted(v) for k, v in sorted(self.steps_by_batch_size.items())
                }
            if self.options.record_step_time and not self.has_fault("missing_step_times"):
                state["step_time_dict"] = {str(k): list(v) for k, v in self.step_time_dict.items()}
        return state

    def request_counts(self) -> tuple[int, int]:
        """``(running, waiting)``: requests in the decode batch and in the queue now."""
        with self.cond:
            return len(self.running), len(self.waiting)

    def flush_cache(self) -> bool:
        """sglang's ``/flush_cache``: resets the accept-length counters when idle."""
        with self.cond:
            if self.running or self.waiting:
                return False
            self.cum_accept_tokens = self.pending_accept_tokens = 0
            self.cum_accept_count = self.pending_accept_count = 0
            return True

    def has_fault(self, kind: str) -> bool:
        """True when a fault of ``kind`` applies to this launch."""
        return any(f.kind == kind and f.applies_to(self.launch) for f in self.options.faults)

    def set_idle(self) -> None:
        """Put the emulated GPU at idle power (model weights still in memory)."""
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
                        self.set_idle()
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
            state = self.gpu.read()
            temp = state.temp_c
            self._follow_limit(state.power_limit_w)
            n = len(running)
            if admitted:
                emul = self._prefill(running[-admitted:], anchor_real, emul, temp)
            action = self._action_for(n)
            pred = self.model.predict(n, action, temp, self.launch.mem_fraction_static)
            self.gpu.update(
                power_w=float(pred.avg_power_w),
                util_pct=float(pred.gpu_util_pct),
                clock_event_reasons=reasons_for(bool(pred.power_capped), temp, self.model.throttle_temp_c, True),
                mem_used_mb=self.mem_used_mb,
                owner_pid=os.getpid(),
            )
            rejected = action.is_baseline or self.has_fault("draft_rejected")
            accept = 1.0 if rejected else min(float(pred.accept_length), action.speculative_num_steps + 1.0)
            base, frac = math.floor(accept), accept - math.floor(accept)
            chunk_start = emul
            if idle_from is not None:  # the idle gap goes into the next step_time_dict value, as in sglang
                self.emul_since_tic += (time.monotonic() - idle_from) / self.scale
                idle_from = None
            finished: list[EngineRequest] = []
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
                    self.pending_accept_tokens += got
                    self.pending_accept_count += 1
                    self.output_tokens_total += got
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
            if self.pending_accept_count:
                self.last_accept_length = self.pending_accept_tokens / self.pending_accept_count
            self.cum_accept_tokens += self.pending_accept_tokens
            self.cum_accept_count += self.pending_accept_count
            self.pending_accept_tokens = self.pending_accept_count = 0

    def _follow_limit(self, limit_w: float) -> None:
        """Run under the limit in the GPU's state file (set by another process since)."""
        if abs(float(limit_w) - self.limit_w) > 5e-4:
            self.model = with_power_limit(self.base_model, float(limit_w))
            self.limit_w = float(limit_w)

    def _prefill(self, admitted: list[EngineRequest], anchor_real: float, emul: float, temp: float) -> float:
        """Prefill the requests just admitted as one burst (module docstring): the GPU draws
        the burst's power until real time reaches its emulated end; returns the emulated time
        after it."""
        tokens = sum(max(1, r.prompt_tokens) for r in admitted)
        with self.cond:
            self.prompt_tokens_total += tokens
        burst = prefill_burst(self.model, tokens)
        if burst is None:
            seconds = 0.02 * len(admitted)  # a model without the roofline: a fixed prefill at decode power
        else:
            seconds, power, capped = burst
            self.gpu.update(
                power_w=float(power),
                util_pct=100.0,
                clock_event_reasons=reasons_for(capped, temp, self.model.throttle_temp_c, True),
                mem_used_mb=self.mem_used_mb,
                owner_pid=os.getpid(),
            )
        self.emul_since_tic += seconds
        emul += seconds
        delay = anchor_real + emul * self.scale - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        return emul

    def token_counts(self) -> tuple[int, int, float]:
        """``(output tokens, prompt tokens, last log interval's accept length)`` since launch."""
        with self.cond:
            return self.output_tokens_total, self.prompt_tokens_total, self.last_accept_length

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
