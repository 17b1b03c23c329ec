"""The NVML backend against a patched NVML: every capability case of issue 4."""

from __future__ import annotations

import sys
import time

import pynvml
import pytest

from specband.core.errors import DeviceError
from specband.devices import NullDevice, open_device
from specband.devices.base import THROTTLE_REASON_MASK, Clock, DeviceWarning, TelemetryWindow, is_throttling
from specband.devices.nvml import NvmlDevice


def _window(device, seconds: float = 0.25, period: float = 0.02):
    window = TelemetryWindow(device, Clock(), sample_period_s=period)
    window.start()
    time.sleep(seconds)
    return window.stop()


def _sampled_window(device, fake_gpu, samples: int = 5):
    """A window held open until the background sampler read the power ``samples`` times
    (a busy machine may starve the sampler thread: a fixed sleep could see none), and the
    real seconds its power samples span at least and at most (clock reads around
    ``start()`` and ``stop()``, which take the first and last sample)."""
    window = TelemetryWindow(device, Clock(), sample_period_s=0.02)
    before_start = time.monotonic()
    window.start()
    after_start = time.monotonic()
    enough = fake_gpu.calls.get("power", 0) + samples
    deadline = time.monotonic() + 60
    time.sleep(0.25)
    while fake_gpu.calls.get("power", 0) < enough and time.monotonic() < deadline:
        time.sleep(0.02)
    before_stop = time.monotonic()
    result = window.stop()
    after_stop = time.monotonic()
    return result, before_stop - after_start, after_stop - before_start


def test_energy_counter_is_used_when_supported(fake_gpu):
    fake_gpu.energy_mj = [4_000_000, 5_000_000, 5_012_500]  # probe, window start, window end
    dev = NvmlDevice(0)
    assert dev.energy_method == "counter"
    assert dev.name == "NVIDIA GeForce RTX 4060 Laptop GPU"
    result = _window(dev)
    assert result.energy_method == "counter"
    assert result.energy_j == pytest.approx(12.5)
    assert result.energy_flag is None
    assert result.avg_power_w == pytest.approx(12.5 / result.elapsed_s)


def test_no_counter_falls_back_to_integrating_sampled_power(fake_gpu):
    fake_gpu.unsupported = {"energy"}
    fake_gpu.power_mw = 64_000
    with pytest.warns(DeviceWarning, match="power_integration"):
        dev = NvmlDevice(0)
    assert dev.energy_method == "power_integration"
    assert dev.read_energy_mj() is None
    result, shortest, longest = _sampled_window(dev, fake_gpu)
    assert result.energy_method == "power_integration"
    assert result.samples >= 5
    # constant 64 W: the trapezoid integral over the samples spans the whole window
    assert 64.0 * shortest * (1 - 1e-9) <= result.energy_j <= 64.0 * longest * (1 + 1e-9)
    assert shortest <= result.elapsed_s <= longest
    assert result.avg_power_w == pytest.approx(result.energy_j / result.elapsed_s)


def test_counter_going_backwards_is_a_flagged_window_not_negative_energy(fake_gpu):
    fake_gpu.energy_mj = [9_000_000, 9_000_000, 1_000]  # probe, window start, window end (driver reload)
    fake_gpu.power_mw = 40_000
    dev = NvmlDevice(0)
    assert dev.energy_method == "counter"
    result, shortest, longest = _sampled_window(dev, fake_gpu)
    assert result.energy_flag == "counter_went_backwards"
    assert result.energy_method == "power_integration"
    assert 40.0 * shortest * (1 - 1e-9) <= result.energy_j <= 40.0 * longest * (1 + 1e-9)
    assert result.avg_power_w == pytest.approx(result.energy_j / result.elapsed_s)


def test_neither_counter_nor_power_gives_no_energy_never_zero(fake_gpu):
    fake_gpu.unsupported = {"energy", "power"}
    with pytest.warns(DeviceWarning, match="energy_method=none"):
        dev = NvmlDevice(0)
    assert dev.energy_method == "none"
    result = _window(dev, seconds=0.05)
    assert result.energy_j is None
    assert result.avg_power_w is None
    assert result.energy_method == "none"


def test_power_limit_prefers_the_enforced_limit(fake_gpu):
    dev = NvmlDevice(0, power_limit_w=55.0)
    assert (dev.power_limit_w, dev.power_limit_source) == (80.0, "enforced")


@pytest.mark.parametrize(
    ("unsupported", "cli", "expected"),
    [
        ({"enforced"}, None, (90.0, "management")),
        ({"enforced", "management"}, None, (100.0, "default")),
        ({"enforced", "management", "default"}, 80.0, (80.0, "cli")),
    ],
)
def test_power_limit_chain(fake_gpu, unsupported, cli, expected):
    fake_gpu.unsupported = set(unsupported)
    dev = NvmlDevice(0, power_limit_w=cli)
    assert (dev.power_limit_w, dev.power_limit_source) == expected


def test_laptop_gpu_without_any_limit_warns_and_reports_none(fake_gpu):
    fake_gpu.unsupported = {"enforced", "management", "default"}
    with pytest.warns(DeviceWarning, match="--power-limit"):
        dev = NvmlDevice(0)
    assert dev.power_limit_w is None
    assert dev.power_limit_source == "none"


def test_a_zero_limit_counts_as_unsupported(fake_gpu):
    fake_gpu.enforced_mw = 0
    dev = NvmlDevice(0)
    assert (dev.power_limit_w, dev.power_limit_source) == (90.0, "management")


def test_readings_and_units(fake_gpu):
    dev = NvmlDevice(0)
    s = dev.sample(Clock())
    assert s.power_w == 50.0
    assert s.temp_c == 61.0
    assert s.mem_used_mb == 3072.0
    assert s.util_pct == 97.0
    assert s.clock_event_reasons == 0
    assert s.throttling is False


def test_not_supported_reading_is_none_and_not_asked_again(fake_gpu):
    fake_gpu.unsupported = {"temp", "util"}
    dev = NvmlDevice(0)
    for _ in range(3):
        s = dev.sample(Clock())
        assert s.temp_c is None and s.util_pct is None
        assert s.power_w == 50.0
    assert fake_gpu.calls["temp"] == 1
    assert fake_gpu.calls["util"] == 1


# Throttling: only power cap, hardware slowdown, thermal slowdowns and power brake count.
_NOT_THROTTLING = {
    "GpuIdle": pynvml.nvmlClocksEventReasonGpuIdle,
    "ApplicationsClocksSetting": pynvml.nvmlClocksEventReasonApplicationsClocksSetting,
    "SyncBoost": pynvml.nvmlClocksEventReasonSyncBoost,
    "DisplayClockSetting": pynvml.nvmlClocksEventReasonDisplayClockSetting,
}
_THROTTLING = {
    "SwPowerCap": pynvml.nvmlClocksEventReasonSwPowerCap,
    "HwSlowdown": pynvml.nvmlClocksEventReasonHwSlowdown,
    "SwThermalSlowdown": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
    "HwThermalSlowdown": pynvml.nvmlClocksEventReasonHwThermalSlowdown,
    "HwPowerBrakeSlowdown": pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
}


@pytest.mark.parametrize("name", sorted(_THROTTLING))
def test_power_and_thermal_reasons_are_throttling(fake_gpu, name):
    fake_gpu.reasons = _THROTTLING[name] | pynvml.nvmlClocksEventReasonGpuIdle
    s = NvmlDevice(0).sample(Clock())
    assert s.throttling is True


@pytest.mark.parametrize("name", sorted(_NOT_THROTTLING))
def test_idle_and_clock_setting_reasons_are_not_throttling(fake_gpu, name):
    fake_gpu.reasons = _NOT_THROTTLING[name]
    s = NvmlDevice(0).sample(Clock())
    assert s.throttling is False


def test_mask_is_exactly_the_five_throttle_bits():
    assert sum(_THROTTLING.values()) == THROTTLE_REASON_MASK
    assert is_throttling(sum(_NOT_THROTTLING.values())) is False
    assert is_throttling(None) is None


def test_old_drivers_fall_back_to_clocks_throttle_reasons(fake_gpu):
    fake_gpu.errors = {"event_reasons": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}
    fake_gpu.reasons = pynvml.nvmlClocksThrottleReasonHwThermalSlowdown
    dev = NvmlDevice(0)
    assert dev.read_clock_event_reasons() == pynvml.nvmlClocksThrottleReasonHwThermalSlowdown
    assert dev.read_clock_event_reasons() == pynvml.nvmlClocksThrottleReasonHwThermalSlowdown
    assert fake_gpu.calls["event_reasons"] == 1  # not asked again
    assert fake_gpu.calls["throttle_reasons"] == 2


def test_reasons_unsupported_means_throttling_unknown(fake_gpu):
    fake_gpu.unsupported = {"event_reasons", "throttle_reasons"}
    window = _window(NvmlDevice(0), seconds=0.05)
    assert window.throttling is None
    assert window.clock_event_reasons is None


def test_window_records_throttling_seen_during_the_batch(fake_gpu):
    dev = NvmlDevice(0)
    window = TelemetryWindow(dev, Clock(), sample_period_s=0.01)
    window.start()
    time.sleep(0.05)
    fake_gpu.reasons = pynvml.nvmlClocksEventReasonSwPowerCap
    # until the background sampler read the cap at least once (not a fixed sleep: on a
    # busy machine the sampler thread may not run for a while)
    seen = fake_gpu.calls.get("event_reasons", 0) + 2  # the next read may have begun before the cap
    deadline = time.monotonic() + 60
    while fake_gpu.calls.get("event_reasons", 0) < seen and time.monotonic() < deadline:
        time.sleep(0.01)
    fake_gpu.reasons = 0
    result = window.stop()
    assert result.throttling is True
    assert result.temp_c_end == 61.0 and result.mem_used_mb_max == 3072.0


def test_nvml_init_failure_turns_telemetry_off_with_a_warning(fake_gpu):
    fake_gpu.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    with pytest.raises(DeviceError, match="nvmlInit failed"):
        NvmlDevice(0)
    with pytest.warns(DeviceWarning, match="telemetry is off"):
        dev = open_device("auto", power_limit_w=80.0)
    assert isinstance(dev, NullDevice)
    assert dev.power_limit_w == 80.0 and dev.energy_method == "none"


def test_missing_nvidia_ml_py_turns_telemetry_off(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with pytest.warns(DeviceWarning, match="cannot import pynvml"):
        dev = open_device("auto")
    assert isinstance(dev, NullDevice)
    assert dev.sample(Clock()).power_w is None


def test_nvml_asked_for_explicitly_is_an_error_without_nvml(fake_gpu, monkeypatch):
    import warnings

    fake_gpu.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no silent (or warned) fallback
        with pytest.raises(
            DeviceError,
            match=r"^--device nvml: NVML is not available: nvmlInit failed: .*"
            r"\(--device auto goes on without telemetry\)$",
        ):
            open_device("nvml", power_limit_w=80.0)
        monkeypatch.setitem(sys.modules, "pynvml", None)
        with pytest.raises(DeviceError, match=r"^--device nvml: NVML is not available: cannot import pynvml"):
            open_device("nvml")


def test_close_shuts_nvml_down_once(fake_gpu):
    dev = NvmlDevice(0)
    dev.close()
    dev.close()
    assert fake_gpu.calls["shutdown"] == 1
    assert dev.read_temp_c() is None


@pytest.mark.parametrize("bad", [0, 0.0, -5, float("nan"), float("inf"), True])
def test_a_power_limit_given_by_hand_must_be_finite_and_positive(fake_gpu, bad):
    from specband.core.errors import ConfigError

    message = r"--power-limit must be a power limit in W in \[1, 2000\], got "
    for make in (
        lambda: NvmlDevice(0, power_limit_w=bad),
        lambda: NullDevice(power_limit_w=bad),
        lambda: open_device("none", power_limit_w=bad),
        lambda: open_device("nvml", power_limit_w=bad),
    ):
        with pytest.raises(ConfigError, match=message):
            make()
    assert "init" not in fake_gpu.calls  # refused before NVML is touched
    assert NullDevice(power_limit_w=80).power_limit_w == 80.0


def test_a_pynvml_without_the_energy_counter_function_integrates_power(fake_gpu, monkeypatch):
    """An old pynvml lacks nvmlDeviceGetTotalEnergyConsumption: the probe treats the missing
    function like an unsupported counter (no AttributeError), and energy comes from power."""
    monkeypatch.delattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption")
    with pytest.warns(DeviceWarning, match="nvmlDeviceGetTotalEnergyConsumption is missing from this pynvml"):
        dev = NvmlDevice(0)
    assert dev.energy_method == "power_integration"
    assert dev.read_energy_mj() is None and dev.read_power_w() == pytest.approx(50.0)


def test_a_pynvml_without_energy_or_power_functions_measures_no_energy(fake_gpu, monkeypatch):
    monkeypatch.delattr(pynvml, "nvmlDeviceGetTotalEnergyConsumption")
    monkeypatch.delattr(pynvml, "nvmlDeviceGetPowerUsage")
    with pytest.warns(DeviceWarning, match="nvmlDeviceGetPowerUsage is missing from this pynvml"):
        dev = NvmlDevice(0)
    assert dev.energy_method == "none" and dev.read_power_w() is None
