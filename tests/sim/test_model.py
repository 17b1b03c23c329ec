"""The performance/energy model: protocol, roofline, power cap, thermal, memory."""

from __future__ import annotations

import math

import pytest

from specband.contract.actions import ACTIONS
from specband.core.errors import ConfigError, InvalidActionError
from specband.sim import PerformanceModel, SpeculativeDecodingModel, build_model


def test_satisfies_the_pinned_protocol(rtx_model) -> None:
    assert isinstance(rtx_model, PerformanceModel)
    assert rtx_model.power_limit_w == 80.0
    assert rtx_model.vram_mb == pytest.approx(8188)
    assert 0 < rtx_model.idle_power_w < rtx_model.power_limit_w
    assert rtx_model.ambient_temp_c < rtx_model.throttle_temp_c


def test_predict_is_deterministic_and_consistent(rtx_model) -> None:
    a = rtx_model.predict(8, (3, 4, 8), 60.0)
    b = rtx_model.predict(8, (3, 4, 8), 60.0)
    assert a == b
    assert a.speed_tok_s == pytest.approx(a.accept_length / a.step_time_s)
    assert 0 < a.gpu_util_pct <= 100
    assert a.power_limit_w == 80.0


def test_published_shape_on_rtx4060(rtx_model) -> None:
    t = 60.0
    # speculation beats the baseline at every measured batch size, by less at bs 16
    for bs in (1, 4, 8, 16):
        base = rtx_model.predict(bs, (0, 0, 0), t).speed_tok_s
        ref = rtx_model.predict(bs, (3, 4, 8), t).speed_tok_s
        assert ref > base
    gain1 = rtx_model.predict(1, (3, 4, 8), t).speed_tok_s / rtx_model.predict(1, (0, 0, 0), t).speed_tok_s
    gain16 = rtx_model.predict(16, (3, 4, 8), t).speed_tok_s / rtx_model.predict(16, (0, 0, 0), t).speed_tok_s
    assert gain1 > gain16
    # bs 16: (3,2,4) is faster than (3,4,8) and inside the band; (3,4,8) overshoots it
    ref16 = rtx_model.predict(16, (3, 4, 8), t)
    pick16 = rtx_model.predict(16, (3, 2, 4), t)
    assert pick16.speed_tok_s > ref16.speed_tok_s
    assert ref16.avg_power_w / 80.0 > 0.98
    assert 0.95 <= pick16.avg_power_w / 80.0 <= 0.98


def test_memory_fit_matches_the_8gb_sweep(rtx_model) -> None:
    for bs in (1, 4, 8, 16):
        for action in ACTIONS:
            fits = rtx_model.fits(bs, action, 0.65)
            assert fits == ((bs, tuple(action)) != (16, (5, 4, 16))), (bs, action)
    assert not rtx_model.fits(16, (5, 4, 16), 0.55)
    assert not rtx_model.predict(16, (5, 4, 16), 50.0).fits_in_memory
    h100 = build_model("h100-sxm")
    assert all(h100.fits(16, a, 0.65) for a in ACTIONS)
    assert rtx_model.predict(4, (3, 4, 8), 50.0).mem_used_mb <= rtx_model.vram_mb


def test_power_cap_lowers_the_clock_and_holds_near_the_limit(rtx_model) -> None:
    capped_profile = rtx_model.profile.with_values(power_limit_w=60.0, cap_tracking=0.1)
    model = SpeculativeDecodingModel(capped_profile, rtx_model.target, rtx_model.draft)
    free = rtx_model.predict(16, (3, 4, 8), 60.0)
    capped = model.predict(16, (3, 4, 8), 60.0)
    assert free.avg_power_w > 60.0 and not free.power_capped
    assert capped.power_capped and capped.clock_fraction < 1.0
    assert capped.step_time_s > free.step_time_s
    demand = free.avg_power_w
    assert capped.avg_power_w == pytest.approx(60.0 + 0.1 * (demand - 60.0), rel=0.05)
    assert capped.avg_power_w > 60.0


def test_thermal_model(rtx_model) -> None:
    p = rtx_model.profile
    steady = rtx_model.steady_temp_c(70.0)
    assert steady == pytest.approx(p.ambient_temp_c + p.thermal_resistance_c_per_w * 70.0)
    warmer = rtx_model.advance_temperature(50.0, 70.0, 30.0)
    assert 50.0 < warmer < steady
    assert rtx_model.advance_temperature(50.0, 70.0, 1e6) == pytest.approx(steady)
    assert rtx_model.advance_temperature(80.0, 0.0, p.thermal_time_constant_s) == pytest.approx(
        p.ambient_temp_c + (80.0 - p.ambient_temp_c) / math.e
    )
    # leakage: a hotter GPU draws more; above the threshold it throttles and slows down
    cool = rtx_model.predict(4, (3, 4, 8), 50.0)
    hot = rtx_model.predict(4, (3, 4, 8), 70.0)
    assert hot.avg_power_w > cool.avg_power_w
    throttled = rtx_model.predict(4, (3, 4, 8), p.throttle_temp_c + 5.0)
    assert throttled.thermal_throttled and throttled.clock_fraction < 1.0
    assert throttled.speed_tok_s < hot.speed_tok_s
    with pytest.raises(ConfigError):
        rtx_model.advance_temperature(50.0, 70.0, -1.0)


def test_bad_inputs(rtx_model) -> None:
    with pytest.raises(ConfigError, match="batch size"):
        rtx_model.predict(0, (3, 4, 8), 50.0)
    with pytest.raises(ConfigError, match="mem_fraction_static"):
        rtx_model.predict(1, (3, 4, 8), 50.0, mem_fraction_static=1.5)
    with pytest.raises(InvalidActionError, match="rule 1"):
        rtx_model.predict(1, (1, 1, 8), 50.0)


def test_datasheet_profiles_scale_with_the_hardware() -> None:
    rtx = build_model("rtx4060-laptop")
    h100 = build_model("h100-sxm")
    h200 = build_model("h200")
    for bs in (1, 16):
        assert h100.predict(bs, (3, 4, 8), 50.0).speed_tok_s > rtx.predict(bs, (3, 4, 8), 50.0).speed_tok_s
        assert h200.predict(bs, (0, 0, 0), 50.0).speed_tok_s > h100.predict(bs, (0, 0, 0), 50.0).speed_tok_s
    # a 1B model leaves a 700 W part far below its limit
    assert h100.predict(16, (3, 4, 8), 50.0).avg_power_w < 0.6 * 700.0
