"""The emulator's performance model for ``benchmarks/bench_govern.py``: the 8B pair
(Llama-3.1-8B-Instruct + its EAGLE3 head) on a built-in profile, as ``specband emulate
--perf-model govern_models:pair_8b`` loads it (this folder on ``PYTHONPATH``)."""

from __future__ import annotations

from typing import Any

from specband.sim.model import build_model


def pair_8b(hardware: str) -> Any:
    """The calibrated model of the 8B pair on ``hardware``."""
    return build_model(hardware, target_config="llama-3.1-8b-instruct")
