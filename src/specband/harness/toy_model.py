"""A small, uncalibrated performance model: the emulator's fallback when the calibrated
model of :mod:`specband.sim` is not available (or ``--model toy`` is asked for).

It satisfies :class:`specband.sim.base.PerformanceModel` with closed forms whose
constants were chosen by hand to land near the published RTX 4060 Laptop figures
(FACTS §6: baseline about 97 tok/s at bs 1 and 91 at bs 16, (3,4,8) about 156 tok/s
at bs 1 with accept length 2.4, 80 W limit, bs 16 (5,4,16) out of memory). It is a
stand-in for tests and demos, not a prediction: use ``specband.sim.build_model``.

* accept length: ``1 + sum_{i=1..d} a^i`` with depth ``d = min(steps, draft - 1)`` and
  per-level acceptance ``a = 1 - (1 - p)^sqrt(topk)``, ``p = 0.45``;
* step time: ``t0 * (1 + 0.0047 (bs - 1)) + steps * t_draft * (1 + 0.02 bs topk)``, with
  ``t0 = 10.3 ms`` and ``t_draft = 1.57 ms``, stretched when the power demand exceeds the
  limit (clocks drop) and by 15 % above the throttle temperature;
* power demand: ``60 + 3 log2(1 + bs * draft)`` W (``draft = 1`` for the baseline),
  capped at the limit;
* temperature: first order towards ``ambient + 0.475 C/W * power`` with tau 60 s;
* memory: fits iff ``bs * draft * topk * steps <= 4096``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specband.actions import Action, validate_action
from specband.sim.base import RunPrediction

__all__ = ["ToyPerformanceModel"]


@dataclass(frozen=True)
class ToyPerformanceModel:
    """Hand-set closed-form model (see the module docstring). Deterministic.

    Attributes:
        hardware: profile name it claims to be.
        power_limit_w, vram_mb, idle_power_w, ambient_temp_c, throttle_temp_c: the
            :class:`~specband.sim.base.PerformanceModel` attributes (W, MB, W, C, C).
        thermal_resistance_c_per_w: steady-state heating per W, C/W.
        thermal_tau_s: thermal time constant, s.
    """

    hardware: str = "rtx4060-laptop"
    power_limit_w: float = 80.0
    vram_mb: float = 8188.0
    idle_power_w: float = 12.0
    ambient_temp_c: float = 40.0
    throttle_temp_c: float = 87.0
    thermal_resistance_c_per_w: float = 0.475
    thermal_tau_s: float = 60.0

    def accept_length(self, action: Action) -> float:
        """Mean tokens per verify step, in ``[1, steps + 1]``."""
        steps, topk, draft = action
        if action.is_baseline:
            return 1.0
        a = 1.0 - (1.0 - 0.45) ** math.sqrt(topk)
        depth = min(steps, draft - 1)
        return 1.0 + sum(a**i for i in range(1, depth + 1))

    def predict(
        self, batch_size: int, action: Action, gpu_temp_c: float, mem_fraction_static: float = 0.65
    ) -> RunPrediction:
        """Steady-state decode run at ``batch_size`` (see the module docstring)."""
        act = validate_action(tuple(action))  # type: ignore[arg-type]
        steps, topk, draft = act
        bs = max(1, int(batch_size))
        accept = self.accept_length(act)
        t0 = 0.0103 * (1.0 + 0.0047 * (bs - 1))
        step = t0 + steps * 0.00157 * (1.0 + 0.02 * bs * topk)
        tokens_per_step = bs * (draft if not act.is_baseline else 1)
        demand_w = 60.0 + 3.0 * math.log2(1.0 + tokens_per_step)
        power = min(demand_w, self.power_limit_w)
        capped = demand_w > self.power_limit_w
        if capped:
            step *= (demand_w / self.power_limit_w) ** 0.5
        if gpu_temp_c > self.throttle_temp_c:
            step *= 1.15
        work = bs * max(1, draft) * max(1, topk) * max(1, steps)
        fits = work <= 4096
        mem_used = self.vram_mb * mem_fraction_static + 600.0 + 0.25 * work
        util = min(100.0, 70.0 + 30.0 * (power - self.idle_power_w) / (self.power_limit_w - self.idle_power_w))
        return RunPrediction(
            accept_length=accept,
            step_time_s=step,
            speed_tok_s=accept / step,
            avg_power_w=power,
            power_limit_w=self.power_limit_w,
            gpu_util_pct=util,
            mem_used_mb=min(mem_used, self.vram_mb),
            fits_in_memory=fits,
            power_capped=capped,
        )

    def advance_temperature(self, gpu_temp_c: float, power_w: float, seconds: float) -> float:
        """Exact first-order relaxation towards ``ambient + R * power`` over ``seconds``."""
        target = self.ambient_temp_c + self.thermal_resistance_c_per_w * power_w
        return target + (gpu_temp_c - target) * math.exp(-max(0.0, seconds) / self.thermal_tau_s)
