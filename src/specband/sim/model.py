"""The roofline performance, power, thermal and memory model of EAGLE3 decoding on one GPU or
``tp`` GPUs in tensor parallelism.

One decode step at batch size ``bs`` and action ``(s, k, N)``:

* **draft**: ``s`` forwards of the draft head (one draft-extend forward of ``bs`` tokens
  after the previous verify, then ``s - 1`` forwards of ``bs x k`` tokens; sglang
  ``eagle_worker.py``), each streaming the head's weights and its KV cache;
* **verify**: one target forward over ``bs x N`` tokens (``bs`` for the baseline), streaming
  the weights and the KV cache of ``bs`` contexts;
* each forward takes ``(t_mem^p + t_compute^p)^(1/p)`` (a smoothed roofline: bytes over
  achieved bandwidth, FLOPs over achieved tensor throughput at the current clock);
* plus host time the GPU sits idle for (scheduling, tree building, verification, per draft
  forward and per verified token; sglang runs speculative decoding without the overlap
  scheduler).

With ``tp`` GPUs (:mod:`specband.sim.parallel`) every figure above is one GPU's: it reads its
share of the weights and KV cache and does its share of the FLOPs, and each forward adds its
collectives (two all-reduces per layer, one after the embedding, one all-gather of the logits)
over the profile's interconnect; the draft head runs at the same degree. A mixture-of-experts
target (:mod:`specband.sim.moe`) reads the distinct experts its ``bs x tokens`` routings touch,
so its verify grows with the tokens it verifies; the fused MoE kernel streams them at
``moe_bandwidth_efficiency`` of the dense kernels' bandwidth.
Power, utilisation and the power limit are per GPU; the energy of a run (and J/token) is
over all ``tp`` GPUs.

Power: ``idle + activity_power x (busy_frac x busy x clock^g + mem_frac x bandwidth/peak +
compute_frac x flops/peak x clock^(g-1))``, with static parts growing with temperature
(leakage). Above the limit the clock is lowered until the power is
``limit + cap_tracking x (demand - limit)``: a power-capping controller that tracks the limit
with a small steady overshoot, which lengthens compute-bound parts of the step. Above
``throttle_temp_c`` the clock is also lowered (thermal slowdown).

Temperature: first order, ``dT/dt = (ambient + R x P - T) / tau``.

Memory (per GPU): the launch fits when weights + KV cache of ``bs`` contexts + speculative buffers
(``bs x N`` verified tokens) + runtime reservations <= VRAM x ``mem_fraction_static``;
:meth:`SpeculativeDecodingModel.require_fit` refuses, in one line naming the degree it needs, a
model whose smallest launch fits on no GPU.

Accept length: :mod:`specband.sim.draft_tree`. Model sizes: :mod:`specband.sim.hfconfig`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.contract.actions import Action, as_action
from specband.core.errors import ConfigError
from specband.core.limits import is_finite_number, is_int
from specband.sim.acceptance import AcceptanceChoice, fitted_choice, pair_profile, resolve_acceptance
from specband.sim.acceptance_fit import AcceptanceObservation, AcceptanceSource, fit_acceptance, read_acceptance_file
from specband.sim.base import RunPrediction
from specband.sim.cost_fit import CostCorrection, fit_cost
from specband.sim.draft_tree import accept_length
from specband.sim.hfconfig import (
    BUNDLED_DRAFT_CONFIG,
    BUNDLED_TARGET_CONFIG,
    ModelSpec,
    load_model_spec,
    rope_mismatch,
)
from specband.sim.parallel import (
    ACTIVATION_BYTES,
    MAX_TP,
    allgather_time_s,
    allreduce_time_s,
    check_tp,
    collectives_per_forward,
    per_gpu_expert_bytes,
    per_gpu_flops,
    per_gpu_kv_bytes_per_token,
    per_gpu_read_bytes,
    per_gpu_weight_bytes,
    valid_tp_sizes,
)
from specband.sim.profile import DEFAULT_PROFILE, HardwareProfile, load_profile

__all__ = [
    "BUNDLED_PAIRS",
    "MAX_NEW_TOKENS",
    "NUM_PROMPTS",
    "TREE_REFERENCE_LAYERS",
    "RunCost",
    "SpeculativeDecodingModel",
    "StepCost",
    "build_model",
    "model_pair",
    "with_fitted_acceptance",
]

#: Decoder layers of the target the profiles' tree costs were fitted on (Llama-3.1-8B: 32 layers;
#: specband.sim.published_fit): the fixed tree cost scales with the target's layers from there.
TREE_REFERENCE_LAYERS = 32
#: Workload of one sweep row (docs/FACTS.md §4, sglang bench_speculative.py): max(16, bs) requests of 512 tokens.
NUM_PROMPTS = 16
MAX_NEW_TOKENS = 512
_MIB = 1024.0 * 1024.0


@dataclass(frozen=True)
class StepCost:
    """Work of one decode step at full clock.

    Attributes:
        bytes_moved: bytes read from GPU memory (weights + KV), B.
        flops: FLOPs (dense + attention).
        kernel_time_s: GPU-busy time at clock fraction 1, s.
        compute_time_s: part of ``kernel_time_s`` that scales with the clock (from the
            roofline's compute side), s.
        host_time_s: host time with the GPU idle, s.
        forwards: (label, tokens, memory time s, compute time s) per forward pass.
    """

    bytes_moved: float
    flops: float
    kernel_time_s: float
    compute_time_s: float
    host_time_s: float
    forwards: tuple[tuple[str, int, float, float], ...]


@dataclass(frozen=True)
class RunCost:
    """A whole sweep row's run: wall clock and energy.

    Attributes:
        total_output_tokens: tokens generated, ``max(16, bs) x 512``.
        decode_s: decode time at the step speed, s.
        wall_clock_s: measured window, s.
        energy_j: energy over the window, all ``tp`` GPUs together, J.
        joules_per_token: J per output token, all GPUs together.
        wall_clock_tok_s: tokens/s over the window (all requests).
    """

    total_output_tokens: int
    decode_s: float
    wall_clock_s: float
    energy_j: float
    joules_per_token: float
    wall_clock_tok_s: float


class SpeculativeDecodingModel:
    """Deterministic performance/energy model of sglang EAGLE3 decoding; satisfies
    :class:`~specband.sim.base.PerformanceModel`.

    Args:
        profile: hardware profile.
        target: target model spec.
        draft: EAGLE3 draft head spec.
        workload: the acceptance profile's workload (``None``: the pair's default).
        acceptance: the acceptance to use instead of the pair's profile (e.g. a fit,
            :func:`~specband.sim.acceptance.fitted_choice`); ``workload`` is then unused.
        cost_correction: the step time fitted to measured speeds
            (:func:`~specband.sim.cost_fit.fit_cost`), or ``None``.
        tp: tensor-parallel degree: GPUs of the profile's kind the target and the draft head
            are split over (:mod:`specband.sim.parallel`).

    Raises:
        ConfigError: a degree the models' heads or intermediate sizes do not split, or
            ``tp > 1`` on a profile without an interconnect (``"--tp N: ..."``).

    Attributes:
        profile, target, draft, tp: as given.
        workload: the acceptance workload (``None``: the pair's default, e.g. ``mt-bench`` for the
            Llama-3.1-8B pair; see :mod:`specband.sim.acceptance`).
        acceptance: the :class:`~specband.sim.acceptance.AcceptanceChoice` in use.
        cost_correction: the :class:`~specband.sim.cost_fit.CostCorrection` in use, or ``None``.
        warnings: configuration warnings (e.g. a RoPE mismatch between draft and target).
    """

    def __init__(
        self,
        profile: HardwareProfile,
        target: ModelSpec,
        draft: ModelSpec,
        workload: str | None = None,
        acceptance: AcceptanceChoice | None = None,
        cost_correction: CostCorrection | None = None,
        tp: int = 1,
    ) -> None:
        self.profile = profile
        self.target = target
        self.draft = draft
        self.cost_correction = cost_correction
        self.tp = check_tp(tp, target, draft, profile=profile)
        self.warnings: list[str] = []
        mismatch = rope_mismatch(target, draft)
        if mismatch:
            self.warnings.append(mismatch)
        if acceptance is None:
            acceptance = resolve_acceptance(profile, target.name, draft.name, workload, like=target)
        self.acceptance = acceptance
        if self.acceptance.borrowed:
            self.warnings.append(self.acceptance.note)
        self._accept = self.acceptance.params

    # ------------------------------------------------------------- protocol attributes
    @property
    def power_limit_w(self) -> float:
        """Power limit, W."""
        return self.profile.power_limit_w

    @property
    def vram_mb(self) -> float:
        """GPU memory, MiB."""
        return self.profile.vram_mb

    @property
    def idle_power_w(self) -> float:
        """Board power of the idle GPU with a server loaded, W."""
        return self.profile.idle_power_w

    @property
    def ambient_temp_c(self) -> float:
        """Temperature the idle GPU cools towards, C."""
        return self.profile.ambient_temp_c

    @property
    def throttle_temp_c(self) -> float:
        """Thermal slowdown threshold, C."""
        return self.profile.throttle_temp_c

    # ------------------------------------------------------------- pieces
    def accept_length(self, action: Action | tuple[int, int, int]) -> float:
        """Expected accept length of an action (:func:`specband.sim.draft_tree.accept_length`).

        Raises:
            InvalidActionError: the triple breaks an sglang rule.
        """
        return accept_length(as_action(action), self._accept)

    def context_tokens(self) -> float:
        """Mean context length during decode: prompt + half the generated tokens."""
        return self.profile.prompt_tokens + MAX_NEW_TOKENS / 2.0

    def _times(self, nbytes: float, flops: float) -> tuple[float, float]:
        p = self.profile
        t_mem = nbytes / (p.mem_bandwidth_gbs * 1e9 * p.bandwidth_efficiency)
        t_cmp = flops / (p.peak_tflops * 1e12 * p.compute_efficiency)
        return t_mem, t_cmp

    def _forward_work(
        self, spec: ModelSpec, batch_size: int, tokens: int, ctx: float
    ) -> tuple[float, float, float, float]:
        """(bytes, FLOPs, memory time s, compute time s) of one GPU's share of one forward of
        ``tokens`` tokens over ``batch_size`` contexts of ``ctx`` tokens (its collectives and MoE
        routing apart: :meth:`_forward_parts`)."""
        kv = batch_size * ctx * per_gpu_kv_bytes_per_token(spec, self.tp)
        nbytes = per_gpu_read_bytes(spec, tokens, self.tp) + kv
        flops = per_gpu_flops(spec, tokens, ctx, self.tp)
        t_mem, t_cmp = self._times(nbytes, flops)
        experts = per_gpu_expert_bytes(spec, tokens, self.tp)
        if experts:  # the fused MoE kernel streams its experts at its own efficiency
            t_mem += self._times(experts, 0.0)[0] * (1.0 / self.profile.moe_bandwidth_efficiency - 1.0)
        return nbytes, flops, t_mem, t_cmp

    def collective_time_s(self, spec: ModelSpec, tokens: int) -> float:
        """Time of one forward's collectives over ``tokens`` tokens at the model's degree, s (0 at
        ``tp`` 1): :func:`~specband.sim.parallel.collectives_per_forward` all-reduces of the hidden
        states and the all-gather of the logits."""
        if self.tp <= 1:
            return 0.0
        reduces, gathers = collectives_per_forward(spec)
        hidden = tokens * spec.hidden_size * ACTIVATION_BYTES
        logits = tokens * spec.vocab_size * ACTIVATION_BYTES
        return reduces * allreduce_time_s(self.profile, hidden, self.tp) + gathers * allgather_time_s(
            self.profile, logits, self.tp
        )

    def _forward_parts(
        self, label: str, spec: ModelSpec, batch_size: int, tokens: int, ctx: float
    ) -> tuple[float, float, list[tuple[str, int, float, float]]]:
        """(bytes, FLOPs, parts) of one forward: the roofline kernel and its collectives as
        separate parts (label, tokens, memory-side time s, compute time s)."""
        nbytes, flops, t_mem, t_cmp = self._forward_work(spec, batch_size, tokens, ctx)
        parts = [(label, tokens, t_mem, t_cmp)]
        coll = self.collective_time_s(spec, tokens)
        if coll > 0:
            parts.append((f"{label}:collectives", tokens, coll, 0.0))
        return nbytes, flops, parts

    def forward_time_s(self, spec: ModelSpec, batch_size: int, tokens: int) -> float:
        """GPU time of one forward pass at full clock, s: ``tokens`` query tokens (``bs`` for a
        decode, ``bs x num_draft_tokens`` for a verify) over ``batch_size`` contexts of
        :meth:`context_tokens` tokens, on the smoothed roofline, with its collectives at the
        model's degree (no host time).

        Raises:
            ConfigError: ``batch_size`` or ``tokens`` below 1.
        """
        for name, value in (("batch size", batch_size), ("tokens", tokens)):
            if not is_int(value) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        _b, _f, parts = self._forward_parts("forward", spec, batch_size, tokens, self.context_tokens())
        return self._kernel_time(parts, 1.0)[0]

    def tree_time_s(self, steps: int, topk: int) -> float:
        """The extra time of a tree draft (``topk > 1``) per speculative step, s:
        ``tree_overhead_s x L / TREE_REFERENCE_LAYERS + steps x topk**2 x tree_node_overhead_s``.

        sglang (``eagle_utils``: ``select_top_k_tokens`` over ``topk**2`` candidates per step,
        ``build_tree_kernel_efficient`` and the tree mask once per step) runs these as batched GPU
        ops, so their time grows with the tree, not with the batch; the fixed part, which the
        target's masked verify attention pays in every layer, grows with the target's ``L`` layers.
        Both were fitted at batch size 1 on the 32-layer Llama-3.1-8B (unchanged there); the
        scalings are assumptions that hold the SpecBundle H200 bs-8 rows of a 48- and an 80-layer
        target within 10 % (:mod:`specband.sim.fleet_fit`).
        """
        p = self.profile
        layers = self.target.num_layers or TREE_REFERENCE_LAYERS
        return p.tree_overhead_s * layers / TREE_REFERENCE_LAYERS + steps * topk * topk * p.tree_node_overhead_s

    def step_cost(
        self, batch_size: int, action: Action | tuple[int, int, int], *, context_tokens: float | None = None
    ) -> StepCost:
        """Bytes, FLOPs and times of one decode step at full clock, one GPU's share at the
        model's tensor-parallel degree.

        Args:
            batch_size: concurrent requests (>= 1).
            action: ``(steps, topk, num_draft_tokens)``.
            context_tokens: mean context of the running requests, tokens (KV cache read per
                request); ``None``: :meth:`context_tokens`, a sweep row's (a server's workload
                has its own: :mod:`specband.sim.serving`).

        Raises:
            ConfigError: batch size < 1, a context below 1 token.
            InvalidActionError: a bad action.
        """
        if not is_int(batch_size) or batch_size < 1:
            raise ConfigError(f"batch size must be an integer >= 1, got {batch_size!r}")
        if context_tokens is not None and not (is_finite_number(context_tokens) and context_tokens >= 1):
            raise ConfigError(f"context tokens must be a number >= 1, got {context_tokens!r}")
        steps, topk, draft_tokens = as_action(action)
        p = self.profile
        ctx = self.context_tokens() if context_tokens is None else float(context_tokens)
        forwards: list[tuple[str, int, float, float]] = []
        total_bytes = 0.0
        total_flops = 0.0

        def forward(label: str, spec: ModelSpec, tokens: int) -> None:
            nonlocal total_bytes, total_flops
            nbytes, flops, parts = self._forward_parts(label, spec, batch_size, tokens, ctx)
            forwards.extend(parts)
            total_bytes += nbytes
            total_flops += flops

        host = p.host_overhead_base_s
        if steps == 0:
            forward("target", self.target, batch_size)
        else:
            forward("draft_extend", self.draft, batch_size)
            for i in range(steps - 1):
                forward(f"draft_{i + 1}", self.draft, batch_size * topk)
            forward("verify", self.target, batch_size * draft_tokens)
            host += (
                p.host_overhead_spec_s
                + steps * (p.host_overhead_draft_step_s + p.spec_draft_step_overhead_s)
                + batch_size * draft_tokens * p.host_overhead_verify_token_s
            )
            if topk > 1:
                host += self.tree_time_s(steps, topk)
        kernel, compute = self._kernel_time(forwards, 1.0)
        cost = StepCost(total_bytes, total_flops, kernel, compute, host, tuple(forwards))
        if self.cost_correction is not None:
            return self.cost_correction.adjust(batch_size, (steps, topk, draft_tokens), cost)
        return cost

    def _kernel_time(self, forwards: list[tuple[str, int, float, float]] | tuple, clock: float) -> tuple[float, float]:
        sharp = self.profile.roofline_sharpness
        total = 0.0
        compute_part = 0.0
        for _label, _tokens, t_mem, t_cmp in forwards:
            t_c = t_cmp / clock
            t = (t_mem**sharp + t_c**sharp) ** (1.0 / sharp)
            total += t
            compute_part += t * (t_c**sharp) / (t_mem**sharp + t_c**sharp)
        return total, compute_part

    def _power(self, cost: StepCost, clock: float, gpu_temp_c: float) -> tuple[float, float, float]:
        """(power W, step time s, busy fraction) at a clock fraction and temperature."""
        p = self.profile
        kernel, _ = self._kernel_time(cost.forwards, clock)
        step = kernel + cost.host_time_s
        busy = kernel / step
        leak = max(0.0, 1.0 + p.leakage_per_c * (gpu_temp_c - p.reference_temp_c))
        headroom = p.activity_scale_w
        g = p.clock_exponent
        activity = (
            p.busy_power_frac * busy * clock**g * leak
            + p.mem_power_frac * (cost.bytes_moved / step) / (p.mem_bandwidth_gbs * 1e9)
            + p.compute_power_frac * (cost.flops / step) / (p.peak_tflops * 1e12) * clock ** (g - 1.0)
        )
        return p.idle_power_w * leak + headroom * activity, step, busy

    def decode_power_w(
        self,
        batch_size: int,
        action: Action | tuple[int, int, int],
        *,
        clock_fraction: float = 1.0,
        gpu_temp_c: float | None = None,
    ) -> float:
        """Average board power of a steady decode (no prefill), W, before any power limit.

        A clean function of (profile, batch size, action, clock, temperature): a power limit
        (DVFS) is applied on top by lowering ``clock_fraction`` until the power fits.

        Args:
            batch_size: concurrent requests (>= 1).
            action: ``(steps, topk, num_draft_tokens)``.
            clock_fraction: core clock relative to full clock, in (0, 1].
            gpu_temp_c: temperature, C (leakage); ``None``: the profile's ``reference_temp_c``.

        Raises:
            ConfigError: a bad batch size or clock fraction; InvalidActionError: a bad action.
        """
        if not (is_finite_number(clock_fraction) and 0.0 < clock_fraction <= 1.0):
            raise ConfigError(f"clock_fraction must be in (0, 1], got {clock_fraction!r}")
        temp = self.profile.reference_temp_c if gpu_temp_c is None else float(gpu_temp_c)
        return self._power(self.step_cost(batch_size, action), float(clock_fraction), temp)[0]

    def _clock_limit(self, gpu_temp_c: float) -> tuple[float, bool]:
        p = self.profile
        if gpu_temp_c <= p.throttle_temp_c:
            return 1.0, False
        drop = p.throttle_clock_drop_per_c * (gpu_temp_c - p.throttle_temp_c)
        return max(p.min_clock_fraction, 1.0 - drop), True

    # ------------------------------------------------------------- memory
    def memory_needed_mb(self, batch_size: int, action: Action | tuple[int, int, int]) -> float:
        """Static-pool memory a launch needs on each GPU: its share of the weights + the KV
        cache of ``bs`` full contexts + speculative buffers (``bs x N`` verified tokens) +
        runtime reservations, MiB."""
        steps, _topk, draft_tokens = as_action(action)
        p = self.profile
        weights = per_gpu_weight_bytes(self.target, self.tp)
        kv_token = per_gpu_kv_bytes_per_token(self.target, self.tp)
        if steps:
            weights += per_gpu_weight_bytes(self.draft, self.tp)
            kv_token += per_gpu_kv_bytes_per_token(self.draft, self.tp)
        verify = batch_size * (draft_tokens if steps else 1)
        kv_tokens = batch_size * (p.prompt_tokens + MAX_NEW_TOKENS) + verify
        spec = verify * p.spec_buffer_mb_per_verify_token if steps else 0.0
        return (weights + kv_tokens * kv_token) / _MIB + spec + p.runtime_reserved_mb

    def gpus_needed(self, mem_fraction_static: float = 0.65) -> int | None:
        """The smallest tensor-parallel degree (one the models split into, up to
        :data:`~specband.sim.parallel.MAX_TP`) at which a launch of one request without
        speculation fits in ``VRAM x mem_fraction_static`` of each GPU, or ``None`` when none does."""
        for tp in valid_tp_sizes(self.target):
            if tp not in valid_tp_sizes(self.draft, tp):
                continue
            probe = copy.copy(self)
            probe.tp = tp
            if probe.fits(1, (0, 0, 0), mem_fraction_static):
                return tp
        return None

    def require_fit(self, mem_fraction_static: float = 0.65) -> None:
        """Refuse, in one line, a model whose smallest launch (one request, no speculation) does
        not fit on its GPUs at ``mem_fraction_static`` (larger launches that do not fit are
        out-of-memory rows, as on a real GPU).

        Raises:
            ConfigError: ``"--tp N: TARGET needs X GiB per GPU ...; it needs --tp M"`` (or, on a
                profile without an interconnect, that it needs M GPUs of this kind).
        """
        if self.fits(1, (0, 0, 0), mem_fraction_static):
            return
        need = self.memory_needed_mb(1, (0, 0, 0)) / 1024.0
        room = self.profile.vram_mb * mem_fraction_static / 1024.0
        gpus = self.gpus_needed(mem_fraction_static)
        where = f"{self.tp} x {self.profile.name}" if self.tp > 1 else f"one {self.profile.name}"
        if gpus is None:
            advice = f"no degree up to {MAX_TP} fits it"
        elif self.profile.interconnect_bandwidth_gbs <= 0:
            advice = f"it needs {gpus} GPUs of this kind, and profile '{self.profile.name}' states no interconnect"
        else:
            advice = f"it needs --tp {gpus}"
        raise ConfigError(
            f"--tp {self.tp}: {self.target.name} does not fit on {where}: the smallest launch needs {need:.1f} GiB per "
            f"GPU (weights, one context, runtime), {room:.1f} GiB usable (VRAM x mem_fraction_static "
            f"{mem_fraction_static:g}); {advice}"
        )

    def fits(self, batch_size: int, action: Action | tuple[int, int, int], mem_fraction_static: float = 0.65) -> bool:
        """Whether the launch fits in ``VRAM x mem_fraction_static``."""
        return self.memory_needed_mb(batch_size, action) <= self.profile.vram_mb * mem_fraction_static

    def mem_used_mb(self, batch_size: int, action: Action | tuple[int, int, int], mem_fraction_static: float) -> float:
        """GPU memory in use (NVML) while the server is up: context + the static pool +
        CUDA-graph memory, MiB, at most the VRAM."""
        steps, _topk, draft_tokens = as_action(action)
        p = self.profile
        verify = batch_size * (draft_tokens if steps else 1)
        used = p.cuda_context_mb + p.vram_mb * mem_fraction_static + verify * p.graph_mb_per_token
        return min(p.vram_mb, used)

    # ------------------------------------------------------------- protocol
    def predict(
        self,
        batch_size: int,
        action: Action | tuple[int, int, int],
        gpu_temp_c: float,
        mem_fraction_static: float = 0.65,
    ) -> RunPrediction:
        """Steady-state decode run (deterministic).

        Args:
            batch_size: concurrent requests (>= 1).
            action: ``(steps, topk, num_draft_tokens)``.
            gpu_temp_c: GPU temperature during the run, C (leakage, thermal slowdown).
            mem_fraction_static: sglang ``--mem-fraction-static`` in (0, 1].

        Returns:
            the :class:`RunPrediction`; when ``fits_in_memory`` is False the other numbers
            are what the run would do if it fitted.

        Raises:
            ConfigError: a bad batch size, temperature or memory fraction.
            InvalidActionError: a bad action.
        """
        if not (isinstance(gpu_temp_c, (int, float)) and math.isfinite(gpu_temp_c)):
            raise ConfigError(f"gpu_temp_c must be a finite number, got {gpu_temp_c!r}")
        if not (isinstance(mem_fraction_static, (int, float)) and 0.0 < mem_fraction_static <= 1.0):
            raise ConfigError(f"mem_fraction_static must be in (0, 1], got {mem_fraction_static!r}")
        action = as_action(action)
        cost = self.step_cost(batch_size, action)
        p = self.profile
        clock_max, thermal = self._clock_limit(float(gpu_temp_c))
        power, step, busy = self._power(cost, clock_max, gpu_temp_c)
        clock = clock_max
        capped = False
        if power > p.power_limit_w:
            capped = True
            target = p.power_limit_w + p.cap_tracking * (power - p.power_limit_w)
            lo, hi = p.min_clock_fraction, clock_max
            p_lo = self._power(cost, lo, gpu_temp_c)[0]
            if p_lo >= target:
                clock = lo
            else:
                for _ in range(60):
                    mid = 0.5 * (lo + hi)
                    if self._power(cost, mid, gpu_temp_c)[0] > target:
                        hi = mid
                    else:
                        lo = mid
                    if hi - lo < 1e-12:
                        break
                clock = 0.5 * (lo + hi)
            power, step, busy = self._power(cost, clock, gpu_temp_c)
        accept = accept_length(action, self._accept)
        return RunPrediction(
            accept_length=accept,
            step_time_s=step,
            speed_tok_s=accept / step,
            avg_power_w=power,
            power_limit_w=p.power_limit_w,
            gpu_util_pct=100.0 * busy,
            mem_used_mb=self.mem_used_mb(batch_size, action, mem_fraction_static),
            fits_in_memory=self.fits(batch_size, action, mem_fraction_static),
            power_capped=capped,
            clock_fraction=clock,
            thermal_throttled=thermal,
            mem_needed_mb=self.memory_needed_mb(batch_size, action),
        )

    def run_cost(self, batch_size: int, action: Action | tuple[int, int, int], prediction: RunPrediction) -> RunCost:
        """Wall clock and energy of one sweep row's measured window (``max(16, bs)`` requests
        of 512 tokens at concurrency ``bs``).

        ``wall = decode x (1 + (1 - 1/bs) x (ragged + ragged_per_step x steps)) + fixed``:
        step-time speed is the 20th percentile of step times (docs/FACTS.md §4), and batches turn
        ragged as requests finish and prefills interleave; ``fixed`` is prefill and request
        handling. Energy = average power x wall clock.
        """
        steps = as_action(action)[0]
        p = self.profile
        total = max(NUM_PROMPTS, batch_size) * MAX_NEW_TOKENS
        decode = total / (batch_size * prediction.speed_tok_s)
        ragged = (1.0 - 1.0 / batch_size) * (p.ragged_overhead + p.ragged_overhead_per_step * steps)
        wall = decode * (1.0 + ragged) + p.fixed_overhead_s
        energy = prediction.avg_power_w * self.tp * wall
        return RunCost(total, decode, wall, energy, energy / total, total / wall)

    def steady_temp_c(self, power_w: float) -> float:
        """Steady-state temperature at a constant power, C."""
        return self.profile.ambient_temp_c + self.profile.thermal_resistance_c_per_w * power_w

    def advance_temperature(self, gpu_temp_c: float, power_w: float, seconds: float) -> float:
        """Temperature after drawing ``power_w`` W for ``seconds`` s from ``gpu_temp_c`` C
        (first-order relaxation towards :meth:`steady_temp_c`).

        Raises:
            ConfigError: negative seconds or non-finite inputs.
        """
        for name, value in (("gpu_temp_c", gpu_temp_c), ("power_w", power_w), ("seconds", seconds)):
            if not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise ConfigError(f"{name} must be a finite number, got {value!r}")
        if seconds < 0:
            raise ConfigError(f"seconds must be >= 0, got {seconds}")
        target = self.steady_temp_c(power_w)
        return target + (gpu_temp_c - target) * math.exp(-seconds / self.profile.thermal_time_constant_s)


#: The bundled (target config, EAGLE3 head config) pairs: one named alone brings the other.
BUNDLED_PAIRS: tuple[tuple[str, str], ...] = (
    (BUNDLED_TARGET_CONFIG, BUNDLED_DRAFT_CONFIG),
    ("llama-3.1-8b-instruct", "eagle3-llama-3.1-8b-instruct"),
    ("llama-3.3-70b-instruct", "eagle3-llama-3.3-70b-instruct"),
    ("qwen3-30b-a3b-instruct-2507", "eagle3-qwen3-30b-a3b-instruct-2507"),
    ("llama-4-scout-17b-16e-instruct", "eagle3-llama-4-scout-17b-16e-instruct"),
    ("kimi-k2-instruct", "eagle3-kimi-k2-instruct"),
)


def _partner(given: Any, spec: ModelSpec, draft: bool) -> str | None:
    """The bundled config paired with ``spec`` (``draft``: ``spec`` is the head), or ``None``."""
    for target_name, draft_name in BUNDLED_PAIRS:
        mine, other = (draft_name, target_name) if draft else (target_name, draft_name)
        if given == mine or spec.name == load_model_spec(mine, draft=draft).name:
            return other
    return None


def model_pair(
    target_config: str | Path | dict[str, Any] | ModelSpec | None,
    draft_config: str | Path | dict[str, Any] | ModelSpec | None,
) -> tuple[ModelSpec, ModelSpec]:
    """The target and draft specs of a pair: both given, neither (the bundled Llama-3.2-1B
    pair), or one of a bundled pair (:data:`BUNDLED_PAIRS`: the other comes with it, matched by
    bundled name or by the config's ``_name_or_path``).

    Raises:
        ConfigError: an unreadable or invalid config (first); one config given that is not
            part of a bundled pair: ``"--draft-config: ..."`` (or ``--target-config``), since
            simulating a target with another pair's head borrows a draft of another shape.
    """
    target = load_model_spec(target_config, draft=False, default=BUNDLED_TARGET_CONFIG)
    draft = load_model_spec(draft_config, draft=True, default=BUNDLED_DRAFT_CONFIG)
    if (target_config is None) == (draft_config is None):
        return target, draft
    if draft_config is None:
        partner = _partner(target_config, target, draft=False)
        if partner is None:
            raise ConfigError(
                f"--draft-config: needed with --target-config {target.name} (no bundled EAGLE3 head is paired with "
                f"it; the bundled pairs: {', '.join(t for t, _ in BUNDLED_PAIRS)}): give its draft head's config.json"
            )
        return target, load_model_spec(partner, draft=True)
    partner = _partner(draft_config, draft, draft=True)
    if partner is None:
        raise ConfigError(
            f"--target-config: needed with --draft-config {draft.name} (no bundled target is paired with it; "
            f"the bundled heads: {', '.join(d for _, d in BUNDLED_PAIRS)}): give its target's config.json"
        )
    return load_model_spec(partner, draft=False), draft


def build_model(
    profile: str | Path | HardwareProfile = DEFAULT_PROFILE,
    *,
    target_config: str | Path | dict[str, Any] | ModelSpec | None = None,
    draft_config: str | Path | dict[str, Any] | ModelSpec | None = None,
    workload: str | None = None,
    acceptance_from: str | Path | None = None,
    tp: int = 1,
) -> SpeculativeDecodingModel:
    """The performance model for a hardware profile and a target/draft pair on ``tp`` GPUs.

    Args:
        profile: a built-in profile name (``rtx4060-laptop``, ``a100-sxm4-80gb``,
            ``h100-sxm``, ``h200``), a TOML/JSON profile file, or a :class:`HardwareProfile`.
        target_config: the target's Hugging Face ``config.json`` (path or dict) or a
            :class:`ModelSpec`; ``None``: bundled Llama-3.2-1B-Instruct (or the target of a
            bundled ``draft_config``, :func:`model_pair`).
        draft_config: the EAGLE3 draft head's ``config.json`` or spec; ``None``: the
            bundled SpecForge EAGLE3 head for Llama-3.2-1B-Instruct (or the head of a bundled
            ``target_config``); one given alone must be part of a bundled pair.
        workload: the acceptance workload (``mt-bench``, ...); ``None``: the pair's default
            (:mod:`specband.sim.acceptance`; an uncovered pair or workload borrows a profile
            and says so in ``model.warnings``).
        acceptance_from: a file of measured accept lengths (sweep JSONL, bench_speculative
            JSONL, probe file; :mod:`specband.sim.acceptance_file`): the acceptance is fitted to
            it, starting from the pair's profile (``model.acceptance.fit``: the fit and its
            residuals), and, where the file has speeds, the step time too
            (``model.cost_correction``, :mod:`specband.sim.cost_fit`); a file naming another
            target or draft adds a warning.
        tp: tensor-parallel degree (``--tp``): the target and the draft head split over ``tp``
            GPUs of the profile's kind; predictions' power is per GPU, J/token over all of them
            (:mod:`specband.sim.parallel`). The memory of the launch is not checked here
            (:meth:`SpeculativeDecodingModel.require_fit` refuses a model that fits nowhere).

    Returns:
        a :class:`SpeculativeDecodingModel` (satisfies :class:`PerformanceModel`).

    Raises:
        ConfigError: unknown profile, unreadable or invalid profile or model config, one
            config given alone that no bundled pair holds (:func:`model_pair`), a ``tp`` the
            models or the profile do not allow (``"--tp N: ..."``, :func:`~specband.sim.parallel.check_tp`).
        DataError: an unreadable or malformed ``acceptance_from`` file, or one without a
            measured speculative config.
    """
    prof = load_profile(profile)
    target, draft = model_pair(target_config, draft_config)
    if acceptance_from is None:
        return SpeculativeDecodingModel(prof, target, draft, workload, tp=tp)
    source = read_acceptance_file(acceptance_from)
    base = resolve_acceptance(prof, target.name, draft.name, workload, like=target)
    choice = fitted_choice(base, fit_acceptance(source, prior=base.params))
    model = SpeculativeDecodingModel(prof, target, draft, acceptance=choice, tp=tp)
    if source.speeds:
        configs = len({(s.batch_size, s.action) for s in source.speeds})
        label = f"speeds of {configs} config{'s' if configs != 1 else ''} of {source.path}"
        correction = fit_cost(model, source.speeds, label=label)
        model = SpeculativeDecodingModel(prof, target, draft, acceptance=choice, cost_correction=correction, tp=tp)
    measured = pair_profile(source.target or target.name, source.draft or draft.name)
    if measured is not None and measured == pair_profile(target.name, draft.name):
        return model  # the file's pair is the simulated one to the simulator (e.g. the lmsys and yuhuili 8B heads)
    for what, named, simulated in (("target", source.target, target.name), ("draft", source.draft, draft.name)):
        if named and named != simulated:
            model.warnings.append(
                f"{source.path} measured {what} {named}; the model simulates {simulated} with that acceptance"
            )
    return model


def with_fitted_acceptance(
    model: SpeculativeDecodingModel,
    measured: AcceptanceSource | Iterable[AcceptanceObservation],
    *,
    label: str | None = None,
) -> SpeculativeDecodingModel:
    """The same model with its acceptance fitted to ``measured`` (a file read with
    :func:`~specband.sim.acceptance_fit.read_acceptance_file`, or observations made as a sweep
    goes), starting from the pair's profile (a model fitted before is refitted from that
    profile, not from its earlier fit).

    Args:
        model: the performance model (its profile, pair and acceptance).
        measured: the measured accept lengths.
        label: the fit's label (default: the source's, or ``"fitted to N configs"``).

    Raises:
        DataError: no speculative observation.
    """
    base = model.acceptance
    prior = base.params if base.fit is None else base.fit.prior
    fit = fit_acceptance(measured, prior=prior, label=label)
    return SpeculativeDecodingModel(
        model.profile,
        model.target,
        model.draft,
        acceptance=fitted_choice(base, fit),
        cost_correction=model.cost_correction,
        tp=model.tp,
    )
