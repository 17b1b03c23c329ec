"""Shared CLI options (specband.cli.options)."""

from __future__ import annotations

from specband.cli.options import DeviceKind, IdleStateDevice
from specband.devices import DEVICE_KINDS


def test_the_device_choices_are_the_device_kinds() -> None:
    assert tuple(k.value for k in DeviceKind) == DEVICE_KINDS
    assert {k.value for k in IdleStateDevice} <= set(DEVICE_KINDS)
