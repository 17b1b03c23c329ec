"""The simulator under a power limit (DVFS on top of the model's power) and the simulated
what-if over limits."""

from __future__ import annotations

import pytest

from specband.contract.actions import ACTIONS
from specband.core.errors import ConfigError
from specband.sim import build_model, simulate_power_limits
from specband.sim.power_capped import (
    PowerLimitedModel,
    clock_fraction_at_limit,
    limited_power_w,
    model_power_limit_range,
    with_power_limit,
)

H100_8B = {"target_config": "llama-3.1-8b-instruct", "draft_config": "eagle3-llama-3.1-8b-instruct"}


def test_the_power_rule():
    assert limited_power_w(300.0, 450.0) == 300.0
    assert limited_power_w(500.0, 450.0) == 450.0
    assert clock_fraction_at_limit(300.0, 100.0, 450.0) == 1.0
    # (450 - 100) / (800 - 100) = 0.5 of the dynamic power: clock 0.5 ** (1/2)
    assert clock_fraction_at_limit(800.0, 100.0, 450.0, 2.0) == pytest.approx(0.5**0.5)
    assert clock_fraction_at_limit(800.0, 100.0, 110.0, 2.0, 0.3) == 0.3


@pytest.mark.parametrize("profile", ["rtx4060-laptop", "h100-sxm"])
def test_power_never_exceeds_the_limit_and_speed_never_rises(profile):
    model = build_model(profile)
    for limit in (0.3 * model.power_limit_w, 0.6 * model.power_limit_w):
        limited = with_power_limit(model, limit)
        for bs in (1, 16):
            for action in (ACTIONS[0], ACTIONS[10], ACTIONS[18]):
                free = model.predict(bs, action, 60.0)
                held = limited.predict(bs, action, 60.0)
                assert held.avg_power_w <= limit + 1e-9
                assert held.power_limit_w == limit
                assert held.speed_tok_s <= free.speed_tok_s + 1e-9
                if free.avg_power_w > limit:
                    assert held.power_capped and held.clock_fraction < free.clock_fraction
                else:
                    assert held.speed_tok_s == free.speed_tok_s and held.avg_power_w == free.avg_power_w


def test_speed_falls_where_the_demand_exceeds_the_limit_on_a_compute_heavy_step():
    model = build_model("h100-sxm", **H100_8B)
    free = model.predict(16, ACTIONS[18], 60.0)
    held = with_power_limit(model, 0.5 * free.avg_power_w).predict(16, ACTIONS[18], 60.0)
    assert held.speed_tok_s < 0.99 * free.speed_tok_s


def test_with_power_limit_at_the_default_is_the_model_itself_and_bad_limits_are_refused():
    model = build_model("h100-sxm")
    assert with_power_limit(model, None) is model and with_power_limit(model, 700.0) is model
    limited = with_power_limit(model, 400.0)
    assert isinstance(limited, PowerLimitedModel) and limited.default_power_limit_w == 700.0
    assert with_power_limit(limited, 300.0).inner is model  # not stacked
    with pytest.raises(ConfigError, match="above the GPU's idle power"):
        with_power_limit(model, model.idle_power_w)
    assert model_power_limit_range(model).default_w == 700.0 and model_power_limit_range(model).min_w == pytest.approx(
        200.0
    )


def test_simulated_sweep_over_limits_records_each_limit_on_every_row():
    model = build_model("h100-sxm")
    rows = simulate_power_limits(model, [300.0, 700.0], batch_sizes=(1, 4), repeats=2, seed=3)
    assert len(rows) == 2 * 2 * 2 * 19
    assert [r["power_limit_watts"] for r in rows] == [300.0] * 76 + [700.0] * 76
    assert len({(r["index"], r["repeat"]) for r in rows}) == len(rows)
    for row in rows:
        assert row["avg_power_watts"] <= row["power_limit_watts"]
        assert row["power_source"].startswith("published fit")  # what the power rests on (issue 19)
    with pytest.raises(ConfigError, match="must not repeat"):
        simulate_power_limits(model, [300.0, 300.0])
