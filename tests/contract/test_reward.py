"""The reward reproduces every published reward; its parts and config checks."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specband.contract.reward import (
    RewardConfig,
    band_score,
    compute_reward,
    energy_utilization,
    thermal_multiplier,
    throughput_score,
)
from specband.core.errors import ConfigError
from specband.sweeps.dataset import load_sweep


def test_reproduces_every_published_reward(published_records: list[dict[str, Any]]) -> None:
    """Each row scored against the baseline row of its own trial and batch size (docs/FACTS.md §2)."""
    sweep = load_sweep()
    baselines = {(r["trial"], r["batch_size"]): r["speed_tok_s"] for r in published_records if r["tag"] == "baseline"}
    checked = 0
    for row in sweep.rows:
        published = row.raw["reward_published"]
        if published is None:
            assert row.is_baseline
            assert sweep.reward_parts(row).reward == 0.0
            continue
        assert sweep.baseline_speed(row) == baselines[(row.trial, row.batch_size)]
        assert sweep.reward_parts(row).reward == pytest.approx(published, abs=2e-3)
        checked += 1
    assert checked == 21


def test_published_example_by_hand() -> None:
    # bs 16, seed2 reference: util 1.005, throttled, 112.762 vs 90.435 tok/s -> 0.0911 published
    parts = compute_reward(speed_tok_s=112.762, baseline_speed_tok_s=90.435, utilization=1.005, gpu_throttling=True)
    assert parts.band_score == pytest.approx(0.75)
    assert parts.throughput_score == pytest.approx((112.762 / 90.435 - 1) / 2)
    assert parts.thermal_multiplier == pytest.approx(0.3)
    assert parts.reward == pytest.approx(0.0911, abs=5e-4)
    assert parts.in_band is False


@pytest.mark.parametrize(
    ("u", "expected"),
    [
        (0.0, 0.0),
        (0.475, 0.5),
        (0.95, 1.0),
        (0.965, 1.0),
        (0.98, 1.0),
        (0.99, 0.9),
        (1.03, 0.5),
        (1.08, 0.0),
        (2.0, 0.0),
    ],
)
def test_band_score(u: float, expected: float) -> None:
    assert band_score(u) == pytest.approx(expected)


def test_throughput_score_clips_and_baseline_scores_zero() -> None:
    assert throughput_score(90.0, 90.0) == 0.0
    assert throughput_score(80.0, 90.0) == 0.0
    assert throughput_score(135.0, 90.0) == pytest.approx(0.25)
    assert throughput_score(900.0, 90.0) == 1.0
    with pytest.raises(ConfigError, match="baseline speed"):
        throughput_score(100.0, 0.0)


@pytest.mark.parametrize(
    ("temp", "throttled", "expected"),
    [
        (None, None, 1.0),
        (70.0, False, 1.0),
        (75.0, False, 1.0),
        (76.0, False, 0.8),
        (80.0, None, 0.8),
        (81.0, False, 0.5),
        (81.0, True, 0.15),
        (None, True, 0.3),
    ],
)
def test_thermal_multiplier(temp: float | None, throttled: bool | None, expected: float) -> None:
    assert thermal_multiplier(temp, throttled) == pytest.approx(expected)


def test_error_row_scores_zero_and_missing_energy_is_throughput_only() -> None:
    assert compute_reward(speed_tok_s=150.0, baseline_speed_tok_s=90.0, utilization=0.96, error=True).reward == 0.0
    parts = compute_reward(speed_tok_s=135.0, baseline_speed_tok_s=90.0, utilization=None)
    assert parts.energy_measured is False
    assert parts.band_score is None and parts.in_band is None
    assert parts.reward == pytest.approx(0.25)


@given(
    st.floats(min_value=1.0, max_value=1000.0),
    st.floats(min_value=1.0, max_value=1000.0),
    st.floats(min_value=0.0, max_value=2.0),
    st.one_of(st.none(), st.floats(min_value=0.0, max_value=110.0)),
    st.one_of(st.none(), st.booleans()),
)
def test_reward_is_bounded_and_monotone_in_speed(
    speed: float, base: float, u: float, temp: float | None, throttled: bool | None
) -> None:
    parts = compute_reward(
        speed_tok_s=speed, baseline_speed_tok_s=base, utilization=u, gpu_temp_c=temp, gpu_throttling=throttled
    )
    assert 0.0 <= parts.reward <= 1.0
    faster = compute_reward(
        speed_tok_s=speed * 1.1, baseline_speed_tok_s=base, utilization=u, gpu_temp_c=temp, gpu_throttling=throttled
    )
    assert faster.reward >= parts.reward


def test_energy_utilization() -> None:
    assert energy_utilization(76.0, 80.0) == pytest.approx(0.95)
    with pytest.raises(ConfigError):
        energy_utilization(76.0, 0.0)
    with pytest.raises(ConfigError):
        energy_utilization(-1.0, 80.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"band_low": 0.99, "band_high": 0.98},
        {"band_low": 0.0},
        {"energy_weight": 1.5},
        {"overshoot_slope": 0.0},
        {"speedup_scale": -1.0},
        {"warm_temp_c": 90.0},
        {"hot_factor": 1.2},
        {"power_limit_w": 0.0},
        {"power_limit_w": float("nan")},
        {"band_low": "0.95"},
    ],
)
def test_reward_config_rejects(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        RewardConfig(**kwargs)


def test_energy_weight_changes_reward() -> None:
    band_only = compute_reward(
        speed_tok_s=150.0, baseline_speed_tok_s=100.0, utilization=0.96, config=RewardConfig(energy_weight=1.0)
    )
    speed_only = compute_reward(
        speed_tok_s=150.0, baseline_speed_tok_s=100.0, utilization=0.50, config=RewardConfig(energy_weight=0.0)
    )
    assert band_only.reward == pytest.approx(1.0)
    assert speed_only.reward == pytest.approx(0.25)
