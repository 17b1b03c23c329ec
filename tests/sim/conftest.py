"""Fixtures of the simulator tests."""

from __future__ import annotations

from typing import Any

import pytest

from specband.sim import SpeculativeDecodingModel, build_model, simulate_sweep


@pytest.fixture(scope="session")
def rtx_model() -> SpeculativeDecodingModel:
    """The calibrated RTX 4060 Laptop model with the bundled Llama-3.2-1B + EAGLE3 configs."""
    return build_model("rtx4060-laptop")


@pytest.fixture(scope="session")
def rtx_sweep_rows(rtx_model: SpeculativeDecodingModel) -> list[dict[str, Any]]:
    """A default 228-row simulated sweep (seed 0)."""
    return simulate_sweep(rtx_model, seed=0)
