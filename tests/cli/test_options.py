"""Shared option choices: the request fields' choices are the library's kinds."""

from __future__ import annotations

import dataclasses

from specband.dataset import FEATURE_KINDS
from specband.devices import DEVICE_KINDS
from specband.harness.launch import LaunchRequest
from specband.harness.request import SweepRequest
from specband.optionspec import option_spec
from specband.train import TrainRequest


def _choices(request: type, name: str) -> tuple[str, ...] | None:
    spec = option_spec(next(f for f in dataclasses.fields(request) if f.name == name))
    assert spec is not None
    return spec.choices


def test_the_device_choices_are_the_device_kinds() -> None:
    assert _choices(SweepRequest, "device") == DEVICE_KINDS
    assert set(_choices(LaunchRequest, "device") or ()) <= set(DEVICE_KINDS)


def test_the_feature_choices_are_the_feature_kinds() -> None:
    assert _choices(TrainRequest, "features") == FEATURE_KINDS
