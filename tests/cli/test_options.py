"""Shared CLI options (specband.cli.options)."""

from __future__ import annotations

from specband.cli.core import FeatureChoice
from specband.cli.options import DeviceKind, IdleStateDevice
from specband.dataset import FEATURE_KINDS
from specband.devices import DEVICE_KINDS


def test_the_device_choices_are_the_device_kinds() -> None:
    assert tuple(k.value for k in DeviceKind) == DEVICE_KINDS
    assert {k.value for k in IdleStateDevice} <= set(DEVICE_KINDS)


def test_the_feature_choices_are_the_feature_kinds() -> None:
    assert tuple(k.value for k in FeatureChoice) == FEATURE_KINDS
