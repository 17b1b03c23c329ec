"""The power limit lever against a patched NVML: reading the range, setting (clamped),
refusing without permission, and restoring on every exit path."""

from __future__ import annotations

import os
import signal

import pynvml
import pytest

from specband.core.errors import ConfigError
from specband.devices.nvml import NvmlDevice
from specband.devices.power_limit import (
    PowerLimitError,
    PowerLimitGuard,
    PowerLimitPermissionError,
    PowerLimitRange,
    parse_power_limits,
    resolve_power_limits,
)
from specband.harness.interrupts import interrupts_as_keyboard_interrupt


def test_range_and_set_go_through_nvml_in_milliwatts(fake_gpu):
    dev = NvmlDevice(0)
    assert dev.power_limit_range_w() == PowerLimitRange(100.0, 30.0, 100.0)
    assert dev.set_power_limit_w(45.5) == 45.5
    assert fake_gpu.limits_set == [45_500]
    assert (dev.power_limit_w, dev.power_limit_source) == (45.5, "set")


def test_a_limit_outside_the_range_is_clamped_before_nvml_sees_it(fake_gpu):
    dev = NvmlDevice(0)
    assert dev.set_power_limit_w(10.0) == 30.0
    assert dev.set_power_limit_w(500.0) == 100.0
    assert fake_gpu.limits_set == [30_000, 100_000]


def test_no_permission_is_one_line_naming_the_fix(fake_gpu):
    fake_gpu.errors = {"set_limit": pynvml.NVML_ERROR_NO_PERMISSION}
    dev = NvmlDevice(0)
    with pytest.raises(PowerLimitPermissionError) as info:
        dev.set_power_limit_w(50.0)
    message = str(info.value)
    assert "\n" not in message and "no permission" in message and "nvidia-smi -pl" in message
    assert dev.power_limit_w == 80.0 and fake_gpu.limits_set == []


def test_not_supported_is_a_power_limit_error(fake_gpu):
    fake_gpu.unsupported = {"constraints"}
    dev = NvmlDevice(0)
    with pytest.raises(PowerLimitError, match="does not support setting power limits"):
        dev.set_power_limit_w(50.0)


def test_guard_restores_the_original_limit_at_the_end(fake_gpu):
    dev = NvmlDevice(0)
    with PowerLimitGuard(dev) as guard:
        guard.set(40.0)
        guard.set(40.0)  # already set: NVML is not asked again
        guard.set(60.0)
    # the management limit found (90 W, what was set), not the enforced 80 W an external cap gives
    assert fake_gpu.limits_set == [40_000, 60_000, 90_000]
    assert dev.power_limit_w == 90.0


@pytest.mark.parametrize("ending", [RuntimeError("crash"), KeyboardInterrupt()])
def test_guard_restores_after_a_crash_and_ctrl_c(fake_gpu, ending):
    dev = NvmlDevice(0)
    with pytest.raises(type(ending)), PowerLimitGuard(dev) as guard:
        guard.set(40.0)
        raise ending
    assert fake_gpu.limits_set == [40_000, 90_000]


def test_guard_restores_after_sigterm(fake_gpu):
    dev = NvmlDevice(0)
    with pytest.raises(KeyboardInterrupt), interrupts_as_keyboard_interrupt(), PowerLimitGuard(dev) as guard:
        guard.set(40.0)
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10**6):
            pass
    assert fake_gpu.limits_set == [40_000, 90_000]


def test_guard_does_not_restore_what_it_never_set(fake_gpu):
    fake_gpu.errors = {"set_limit": pynvml.NVML_ERROR_NO_PERMISSION}
    dev = NvmlDevice(0)
    with pytest.raises(PowerLimitPermissionError), PowerLimitGuard(dev) as guard:
        guard.set(40.0)
    assert fake_gpu.calls["set_limit"] == 1  # the refused set; no restore attempt


def test_a_failed_restore_is_a_warning_not_a_hidden_error(fake_gpu):
    dev = NvmlDevice(0)
    with pytest.warns(RuntimeWarning, match="nvidia-smi -pl 90"), PowerLimitGuard(dev) as guard:
        guard.set(40.0)
        fake_gpu.errors = {"set_limit": pynvml.NVML_ERROR_UNKNOWN}


def test_parse_power_limits():
    assert parse_power_limits("300, 450,700") == (300.0, 450.0, 700.0)
    assert parse_power_limits("0.6,0.8,1.0") == (0.6, 0.8, 1.0)
    for bad, why in [
        ("", "give watts"),
        ("300,,700", "give watts"),
        ("300,abc", "not a number"),
        ("0.5,300", "do not mix"),
        ("300,300", "twice"),
        ("-1", "positive"),
        ("nan", "positive"),
        ("9000", "above 5000"),
    ]:
        with pytest.raises(ConfigError, match=why):
            parse_power_limits(bad)


def test_resolve_fractions_and_clamping():
    limits = PowerLimitRange(default_w=700.0, min_w=200.0, max_w=700.0)
    assert resolve_power_limits((0.5, 1.0), limits) == ((350.0, 700.0), ())
    watts, notes = resolve_power_limits((100.0, 450.0), limits)
    assert watts == (200.0, 450.0) and len(notes) == 1 and "100 W is outside" in notes[0]
    with pytest.raises(ConfigError, match="both give 200 W"):
        resolve_power_limits((100.0, 150.0), limits)
