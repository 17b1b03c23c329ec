"""The interface between the performance/energy model and its users (the simulator's
sweep, the sglang-compatible emulator and its emulated GPU device).

A :class:`PerformanceModel` answers, for one batch size, action and GPU temperature,
what one steady-state decode run looks like (:class:`RunPrediction`), and how the GPU
temperature moves while drawing a given power.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from specband.contract.actions import Action

__all__ = ["PerformanceModel", "RunPrediction"]


@dataclass(frozen=True)
class RunPrediction:
    """One steady-state decode run at a fixed batch size and action.

    Attributes:
        accept_length: mean tokens accepted per verify step, in ``[1, steps + 1]``.
        step_time_s: wall time of one decode step (draft + verify + overhead), s, after
            any power-cap clock reduction.
        speed_tok_s: decode speed per request, ``accept_length / step_time_s`` (tokens/s),
            the quantity sglang's bench script reports.
        avg_power_w: average board power while decoding, W.
        power_limit_w: the power limit the run was capped at, W.
        gpu_util_pct: GPU utilisation while decoding, %.
        mem_used_mb: GPU memory in use while the server is up, MB.
        fits_in_memory: False when weights + KV cache + speculative buffers exceed
            VRAM x mem fraction (the launch fails with out-of-memory).
        power_capped: True when the clock had to be lowered to hold the power limit.
        clock_fraction: core clock relative to full clock after power capping and thermal
            slowdown (1.0 = unchanged).
        thermal_throttled: True when the temperature was above the throttle threshold
            (thermal slowdown lowered the clock).
        mem_needed_mb: memory the launch needs against VRAM x mem fraction, MB (0 when
            the model does not say).
    """

    accept_length: float
    step_time_s: float
    speed_tok_s: float
    avg_power_w: float
    power_limit_w: float
    gpu_util_pct: float
    mem_used_mb: float
    fits_in_memory: bool
    power_capped: bool
    clock_fraction: float = 1.0
    thermal_throttled: bool = False
    mem_needed_mb: float = 0.0


@runtime_checkable
class PerformanceModel(Protocol):
    """What the emulator and the simulated sweep need from a performance model.

    Attributes:
        power_limit_w: the GPU's power limit, W.
        vram_mb: total GPU memory, MB.
        idle_power_w: board power of the idle GPU with a server loaded, W.
        ambient_temp_c: temperature the GPU cools towards when idle, C.
        throttle_temp_c: above this temperature the GPU throttles (thermal slowdown), C.
    """

    power_limit_w: float
    vram_mb: float
    idle_power_w: float
    ambient_temp_c: float
    throttle_temp_c: float

    def predict(
        self,
        batch_size: int,
        action: Action,
        gpu_temp_c: float,
        mem_fraction_static: float = 0.65,
    ) -> RunPrediction:
        """Predict a steady-state run; deterministic (noise is the caller's business)."""
        ...

    def advance_temperature(self, gpu_temp_c: float, power_w: float, seconds: float) -> float:
        """GPU temperature (C) after drawing ``power_w`` for ``seconds`` from ``gpu_temp_c``
        (first-order: relaxes towards the power's steady-state temperature)."""
        ...
