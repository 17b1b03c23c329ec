"""The physical bounds of a sweep row's measured columns, checked when a row is read
(:func:`specband.sweeps.dataset.load_sweep`: ``train``, ``evaluate``, ``recommend --data``,
``import-bench``'s check of what it wrote).

A crafted or corrupted row (1e300 W, an energy utilisation of 7.5, 1e308 tok/s, a step of
0 s, a request of -1e308 tokens) was trained on and could win every pick (hostile trial B05,
B07); each bound and its basis is in :mod:`specband.core.limits`
(:data:`~specband.core.limits.ROW_FIELD_RANGES`, :data:`~specband.core.limits.MAX_DECODE_STEPS_PER_S`,
:data:`~specband.core.limits.MAX_ENERGY_UTILIZATION`, :data:`~specband.core.limits.MAX_BOARD_POWER_W`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specband.core.limits import (
    MAX_BOARD_POWER_W,
    MAX_DECODE_STEPS_PER_S,
    MAX_ENERGY_UTILIZATION,
    ROW_FIELD_RANGES,
    out_of_range,
)

__all__ = ["row_out_of_bounds"]

#: Slack on the relations between columns (a row's figures are rounded when written).
_REL_TOL = 1e-3


def row_out_of_bounds(rec: Mapping[str, Any], steps: int) -> tuple[str, str] | None:
    """The first measured column of ``rec`` (a row whose types are checked) outside its bound,
    as ``(field, message)``, or ``None``.

    Args:
        rec: the row.
        steps: its action's draft steps (a verify step yields at most ``steps + 1`` tokens).
    """
    for name, (low, high, basis) in ROW_FIELD_RANGES.items():
        problem = None if rec.get(name) is None else out_of_range(rec[name], low, high)
        if problem is not None:
            return name, f"{problem} ({basis})"
    power, limit = rec.get("avg_power_watts"), rec.get("power_limit_watts")
    if power is not None and limit is not None and power > MAX_ENERGY_UTILIZATION * limit * (1 + _REL_TOL):
        return "avg_power_watts", (
            f"{power:g} W is {power / limit:.2f}x the row's power_limit_watts {limit:g} W, over "
            f"{MAX_ENERGY_UTILIZATION:g}x (MAX_ENERGY_UTILIZATION: a GPU holds its limit)"
        )
    speed, bs = rec.get("speed_tok_s"), rec.get("batch_size")
    if speed is not None and bs is not None:
        top = bs * (steps + 1) * MAX_DECODE_STEPS_PER_S
        if speed > top:
            return "speed_tok_s", (
                f"{speed:g} tok/s is over {top:g} (batch size {bs} x {steps + 1} tokens a step x "
                f"{MAX_DECODE_STEPS_PER_S:g} steps/s, MAX_DECODE_STEPS_PER_S)"
            )
    energy, wall = rec.get("energy_joules"), rec.get("wall_clock_s")
    if energy is not None and wall is not None and energy > MAX_BOARD_POWER_W * wall * (1 + _REL_TOL):
        return "energy_joules", (
            f"{energy:g} J over {wall:g} s is more than {MAX_BOARD_POWER_W:g} W (MAX_BOARD_POWER_W) drew"
        )
    return None
