"""The pick's explanation names the contract's trade when a config inside the band lost to a
faster one just outside it (issue 30 item 6).

The rows are the README's emulator loop at batch size 16 (``specband sweep ... --actions
"0 10 7"`` against ``specband emulate``, time scale 0.05): speeds and accept lengths as one run
printed them (89.13, 112.00 and 119.38 tok/s), average power set to the utilisations issue 30
reports for its run ((3,2,4) at 0.944, (3,4,8) at 0.964 of 80 W).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specband.contract.reward import RewardConfig, band_score, throughput_score
from specband.deploy.explain import band_trade, band_trade_line
from specband.sweeps.origin import ActionStats

#: (steps, topk, draft) -> (speed tok/s, accept length, utilisation).
EMULATED_BS16 = {
    (0, 0, 0): (89.13, 1.0, 0.990),
    (3, 4, 8): (112.00, 2.388, 0.964),
    (3, 2, 4): (119.38, 2.132, 0.944),
}
INDEX = {(0, 0, 0): 0, (3, 4, 8): 10, (3, 2, 4): 7}


def _rows() -> list[dict]:
    rows = []
    for i, (action, (speed, accept, util)) in enumerate(EMULATED_BS16.items()):
        power = util * 80.0
        rows.append(
            {
                "hardware": "RTX4060_Laptop",
                "index": i,
                "repeat": 0,
                "batch_size": 16,
                "steps": action[0],
                "topk": action[1],
                "num_draft_tokens": action[2],
                "is_baseline": action == (0, 0, 0),
                "error": None,
                "accept_length": accept,
                "speed_tok_s": speed,
                "speed_source": "step_time",
                "avg_power_watts": power,
                "power_limit_watts": 80.0,
                "joules_per_token": power / (speed * 16),
                "gpu_temp_c_before": 57.0,
                "gpu_temp_c": 57.3,
                "provenance": "emulated",
                "target_model": "m",
                "draft_model": "d",
            }
        )
    return rows


def _reward(action: tuple[int, int, int]) -> float:
    speed, _, util = EMULATED_BS16[action]
    cfg = RewardConfig()
    return (band_score(util, cfg) * throughput_score(speed, EMULATED_BS16[(0, 0, 0)][0], cfg)) ** 0.5


def test_the_trade_gives_both_configs_reward_terms() -> None:
    stats = {INDEX[a]: ActionStats(1, 1, s, u) for a, (s, _, u) in EMULATED_BS16.items()}
    means = {INDEX[a]: _reward(a) for a in EMULATED_BS16}
    trade = band_trade(stats, means, allowed=list(means), action_index=7)
    assert trade is not None
    assert trade.pick.action == (3, 2, 4) and trade.in_band.action == (3, 4, 8)
    # band term: 0.944 / 0.95 below the band, 1 inside; speed term: (speed / 89.13 - 1) / 2
    assert trade.pick.band_term == pytest.approx(0.944 / 0.95, abs=1e-4)
    assert trade.pick.speed_term == pytest.approx((119.38 / 89.13 - 1) / 2, abs=1e-4)
    assert trade.in_band.band_term == 1.0
    assert trade.in_band.speed_term == pytest.approx((112.00 / 89.13 - 1) / 2, abs=1e-4)
    assert trade.pick.mean_reward == pytest.approx(0.4106, abs=2e-4)
    assert trade.in_band.mean_reward == pytest.approx(0.3582, abs=2e-4)
    doc = trade.to_json()
    assert doc["band_term_lost"] == pytest.approx(0.0063, abs=1e-4)
    assert doc["speed_term_gained"] == pytest.approx(0.0414, abs=1e-4)
    line = band_trade_line(trade)
    assert line.startswith("band trade: (3,4,8) is in the 0.95-0.98 band (utilisation 0.964, 112.0 tok/s)")
    assert "the pick (3,2,4) is below it by 0.006 (0.944) and faster (119.4 tok/s)" in line
    assert "speed term gains +0.0414, more than the 0.0063 its band term gives up" in line


def test_no_trade_inside_the_band_or_against_the_baseline() -> None:
    stats = {INDEX[a]: ActionStats(1, 1, s, u) for a, (s, _, u) in EMULATED_BS16.items()}
    means = {INDEX[a]: _reward(a) for a in EMULATED_BS16}
    assert band_trade(stats, means, list(means), action_index=10) is None  # the pick is in the band
    only_baseline_inside = {0: ActionStats(1, 1, 89.13, 0.96), 7: ActionStats(1, 1, 119.38, 0.944)}
    assert band_trade(only_baseline_inside, {0: 0.0, 7: 0.41}, [0, 7], action_index=7) is None


def test_recommend_says_the_trade(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    data = tmp_path / "emulated.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    models = tmp_path / "models"
    assert run_cli("train", str(data), "--algo", "lookup_table", "--out", str(models)).exit_code == 0
    text = run_cli("recommend", "-b", "16", "--models", str(models), "--explain")
    assert text.exit_code == 0
    assert "--speculative-num-steps 3 --speculative-eagle-topk 2 --speculative-num-draft-tokens 4" in text.stdout
    assert "note: band trade: (3,4,8) is in the 0.95-0.98 band (utilisation 0.964" in text.stderr
    doc = json.loads(run_cli("recommend", "-b", "16", "--models", str(models), "--format", "json").stdout)
    trade = doc["explanation"]["band_trade"]
    assert trade["pick"]["action"] == [3, 2, 4] and trade["in_band"]["action"] == [3, 4, 8]
    assert trade["pick"]["energy_utilization"] == pytest.approx(0.944, abs=1e-4)
    assert trade["speed_term_gained"] == pytest.approx(0.0414, abs=1e-4)
