"""Fixtures of the policy tests: the bundled published measurements as training data,
and the eight policies fitted on them once per session."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from specband.policies import ALGORITHMS, create_policy
from specband.policies.base import Policy
from specband.sweeps.dataset import TrainingData, load_sweep


@pytest.fixture(scope="session")
def bundled_data() -> TrainingData:
    """Training data of the 29 bundled rows, contract features."""
    return load_sweep(None).training_data("contract")


@pytest.fixture(scope="session")
def fitted(bundled_data: TrainingData) -> dict[str, Policy]:
    """Each of the eight fitted on the bundled data with seed 0."""
    return {name: create_policy(name, seed=0).fit(bundled_data) for name in ALGORITHMS}


@pytest.fixture(scope="session")
def state_at() -> Callable[[int], np.ndarray]:
    """The bundled data's state at a batch size (its telemetry is missing: upstream fills)."""
    from specband.sweeps.dataset import state_vector

    return lambda bs: state_vector(bs)
