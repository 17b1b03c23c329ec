"""A 95 % interval on a simulated speed: what the acceptance and the profile's cost side leave open.

``speed = accept_length / step_time``. The accept length's interval is the acceptance's own
(:meth:`~specband.sim.acceptance.AcceptanceChoice.accept_length_interval`: a fit to the user's
measurements, a profile on its own workload, or a borrowed profile); the step time's is the
profile's calibration error against measured rows (:func:`specband.sim.cost_error.cost_error`),
or, where the step time was fitted to the user's speeds (:mod:`specband.sim.cost_fit`), that
fit's (:meth:`~specband.sim.cost_fit.CostCorrection.step_sd`), ``1.96 x sd`` either way. The
two are combined at their ends (the interval of a ratio of two independent positive intervals),
which is conservative.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specband.contract.actions import as_action
from specband.sim.base import RunPrediction
from specband.sim.cost_error import cost_error

__all__ = ["FITTED_SPEED_SCALE", "Z95", "SpeedInterval", "acceptance_notes", "speed_interval"]

#: Two-sided 95 % normal quantile.
Z95 = 1.959964
#: Factor on the log half-width of a speed interval whose step time was fitted to the user's
#: speeds (:mod:`specband.sim.cost_fit`): the ends' combination is conservative, and this factor,
#: calibrated split-conformally (level 0.95) on 154 held-out published speeds (SpecBundle, H200,
#: Llama-3.1-8B, 7 workloads x 2 drafts; :func:`specband.sim.interval_check.calibrate`), narrows it
#: to what holds them: 95.5 % left out by workload. An interval on the profile's step time keeps 1.
FITTED_SPEED_SCALE = 0.663831


@dataclass(frozen=True)
class SpeedInterval:
    """The simulated speed of one (batch size, config) and its 95 % interval.

    Attributes:
        expected_tok_s: the model's speed without measurement noise, tok/s.
        lo_tok_s, hi_tok_s: the 95 % interval, tok/s.
        accept_length: ``(estimate, lo95, hi95)`` of the accept length.
        step_time_s: the simulated step time, s.
        cost_sd: relative sd of the step time (the profile's calibration error).
        acceptance_source: where the acceptance comes from (``AcceptanceChoice.source``).
    """

    expected_tok_s: float
    lo_tok_s: float
    hi_tok_s: float
    accept_length: tuple[float, float, float]
    step_time_s: float
    cost_sd: float
    acceptance_source: str

    def contains(self, speed_tok_s: float) -> bool:
        """Whether ``speed_tok_s`` lies inside the interval."""
        return self.lo_tok_s <= speed_tok_s <= self.hi_tok_s

    def as_list(self, digits: int = 3) -> list[float]:
        """``[lo, hi]`` rounded (a row's ``speed_tok_s_interval``)."""
        return [round(self.lo_tok_s, digits), round(self.hi_tok_s, digits)]


def speed_interval(
    model: Any,
    batch_size: int,
    action: Sequence[int],
    *,
    gpu_temp_c: float | None = None,
    prediction: RunPrediction | None = None,
    scales: Mapping[str, float] | None = None,
    speed_scale: float | None = None,
) -> SpeedInterval:
    """The speed of ``action`` at ``batch_size`` on ``model`` with its 95 % interval.

    Args:
        model: a :class:`~specband.sim.model.SpeculativeDecodingModel` (or one wrapping it, such as
            a power-limited model): it needs ``acceptance``, ``profile`` and ``predict``.
        batch_size: concurrent requests (>= 1).
        action: ``(steps, topk, num_draft_tokens)``.
        gpu_temp_c: the temperature to predict at (default: the profile's ``reference_temp_c``).
        prediction: a prediction already made for this batch size and action (its speed and
            step time are used; ``gpu_temp_c`` is then unused).
        scales: the acceptance intervals' factors (default: the shipped, calibrated ones).
        speed_scale: the factor on a cost-fitted interval (default :data:`FITTED_SPEED_SCALE`).

    Raises:
        ConfigError: a bad batch size or temperature; InvalidActionError: a bad action.
    """
    act = as_action(action)
    if prediction is None:
        temp = model.profile.reference_temp_c if gpu_temp_c is None else gpu_temp_c
        prediction = model.predict(batch_size, act, temp)
    est, lo, hi = model.acceptance.accept_length_interval(act, scales)
    sd = cost_error(model.profile).sd
    correction = getattr(model, "cost_correction", None)
    scale = 1.0
    if correction is not None:  # the step time fitted to the user's speeds
        sd = correction.step_sd(batch_size, act, sd)
        scale = FITTED_SPEED_SCALE if speed_scale is None else speed_scale
    speed = prediction.speed_tok_s
    return SpeedInterval(
        expected_tok_s=speed,
        lo_tok_s=speed * math.exp(-scale * (math.log(est / lo) + Z95 * sd)),
        hi_tok_s=speed * math.exp(scale * (math.log(hi / est) + Z95 * sd)),
        accept_length=(est, lo, hi),
        step_time_s=prediction.step_time_s,
        cost_sd=sd,
        acceptance_source=model.acceptance.source,
    )


def acceptance_notes(model: Any) -> list[str]:
    """What a simulation's figures rest on, one line each: the acceptance (its note: a
    profile, a borrowed one, or the fit), the residual of every fitted config, and the
    profile's step-time calibration error (the interval's cost side)."""
    choice = model.acceptance
    lines = [choice.note if choice.note.startswith("acceptance") else f"acceptance: {choice.note}"]
    if choice.fit is not None:
        lines += [f"fit residual {line}" for line in choice.fit.residual_lines()]
    correction = getattr(model, "cost_correction", None)
    if correction is not None:
        lines += correction.lines()
    lines.append(f"speed intervals (95 %): {cost_error(model.profile).describe()}")
    return lines
