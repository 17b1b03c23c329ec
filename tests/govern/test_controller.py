"""The feedback loop as a pure object (no GPU, no server): tiers, bounded steps, hysteresis,
dwell, the floor and the default limit, and what one tier teaches the others."""

from __future__ import annotations

import pytest

from specband.core.errors import ConfigError
from specband.govern.controller import BandController, ControlSettings, GpuRange, GpuReading, TierTracker

RANGE = GpuRange(200.0, 700.0)
SETTINGS = ControlSettings(window_s=5.0, dwell_s=5.0, max_step_w=70.0)


def feed(c: BandController, power_w: float, seconds: int, t0: float = 0.0, energy0: float = 0.0) -> list:
    """One reading a second drawing ``power_w`` (capped at the limit, as a GPU is)."""
    decisions, energy = [], energy0
    for k in range(1, seconds + 1):
        drawn = min(power_w, c.current_w)
        energy += drawn * 1000.0
        d = c.observe(GpuReading(t0 + k, drawn, energy, c.current_w))
        if d is not None:
            decisions.append(d)
    return decisions


def controller(limits=(300.0, 400.0, 600.0)) -> BandController:
    c = BandController(SETTINGS, RANGE, limits, 700.0)
    c.observe(GpuReading(0.0, 100.0, 0.0, 700.0))
    return c


def test_entering_a_tier_sets_its_planned_limit():
    c = controller()
    d = c.enter(1, 0.0)
    assert d is not None and d.kind == "tier" and d.limit_w == 400.0 and d.previous_w == 700.0
    assert c.enter(1, 0.0) is None  # already there


def test_below_the_band_the_limit_comes_down_in_bounded_steps_to_the_bands_middle():
    c = controller()
    c.enter(1, 0.0)
    moves = feed(c, 300.0, 40)
    assert [m.kind for m in moves] == ["lower", "lower"]
    assert moves[0].limit_w == 330.0  # 400 - 70: the step bound
    assert moves[1].limit_w == pytest.approx(300.0 / 0.965, abs=0.01)
    assert feed(c, 300.0, 30, t0=40, energy0=c._last.energy_mj) == []  # in the band: nothing more


def test_a_throttled_gpu_gets_the_whole_step_up():
    c = controller()
    c.enter(1, 0.0)
    moves = feed(c, 600.0, 12)
    assert moves[0].kind == "raise" and moves[0].limit_w == 470.0
    assert "throttled" in moves[0].reason


def test_inside_the_band_with_hysteresis_nothing_moves():
    c = controller()
    c.enter(1, 0.0)
    assert feed(c, 0.947 * 400.0, 30) == []  # 0.947: below 0.95 by less than the 0.005 hysteresis


def test_the_dwell_holds_a_new_limit():
    slow = BandController(ControlSettings(window_s=2.0, dwell_s=10.0, max_step_w=70.0), RANGE, [400.0], 700.0)
    slow.observe(GpuReading(0.0, 100.0, 0.0, 700.0))
    slow.enter(0, 0.0)
    moves = feed(slow, 200.0, 30)
    times = [m.limit_w for m in moves]
    assert len(moves) == 3 and times == [330.0, 260.0, 207.254]  # one move per 10 s dwell at most


def test_the_floor_holds_and_says_so_once_per_tier():
    c = controller()
    c.enter(0, 0.0)
    moves = feed(c, 120.0, 60)
    kinds = [m.kind for m in moves]
    assert kinds[-1] == "floor" and set(kinds[:-1]) == {"lower"}
    assert all(a.previous_w - a.limit_w <= 70.0 for a in moves[:-1])
    assert moves[-1].limit_w == 200.0 and "cannot be reached" in moves[-1].reason
    assert c.current_w == 200.0


def test_the_default_limit_is_never_passed_and_is_said_once():
    c = controller()
    c.enter(2, 0.0)
    moves = feed(c, 900.0, 60)
    kinds = [m.kind for m in moves]
    assert kinds[-1] == "ceiling" and set(kinds[:-1]) == {"raise"}
    assert max(m.limit_w for m in moves) == 700.0


def test_what_one_tier_learned_moves_the_tiers_not_seen_yet():
    c = controller()
    c.enter(1, 0.0)
    feed(c, 300.0, 12)  # the plan said 400 W for what draws 300 W: 310.9 W puts it mid-band, x 0.777
    d = c.enter(2, 13.0)
    assert d is not None and d.limit_w == pytest.approx(600.0 * 0.75 / 0.965, abs=0.5)
    assert "learned" in d.reason


def test_a_window_over_a_moving_batch_size_does_not_act():
    c = controller()
    energy = 0.0
    c.enter(0, 0.0)
    for k in range(1, 40):
        tier = k % 3
        c.enter(tier, float(k))
        energy += 150.0 * 1000.0
        assert c.observe(GpuReading(float(k), 150.0, energy, c.current_w)) is None


def test_idle_holds_the_limit():
    c = controller()
    c.enter(1, 0.0)
    assert c.enter(None, 1.0) is None
    assert feed(c, 50.0, 30) == [] and c.current_w == 400.0


def test_the_tier_switches_at_once_and_zero_is_idle():
    tracker = TierTracker(lambda bs: None if bs == 0 else (0 if bs < 8 else 1), 1)
    assert tracker.observe(3) == (0, True)
    assert tracker.observe(9) == (1, True)
    assert tracker.observe(9) == (1, False)
    assert tracker.observe(0) == (None, True)
    patient = TierTracker(lambda bs: 0 if bs < 8 else 1, 2)
    patient.observe(3)
    assert patient.observe(9) == (0, False) and patient.observe(9) == (1, True)


def test_settings_are_checked():
    with pytest.raises(ConfigError, match="band"):
        ControlSettings(band_low=0.99, band_high=0.95)
    with pytest.raises(ConfigError, match="max_step_w"):
        ControlSettings(max_step_w=0.0)
