"""Issue 35: the joint pick of config and power limit (deploy/jointpick.joint_pick) over any
source, the performance model as a source (deploy/modelsource.ModelSource), and a first guess
that reads the model's figures instead of simulating rows and training on them."""

from __future__ import annotations

import pytest

from specband.contract.actions import Action
from specband.contract.reward import BAND_HIGH, BAND_LOW
from specband.core.errors import ConfigError
from specband.deploy.explain import LimitRange
from specband.deploy.jointpick import Candidate, Figure, FixedSource, ServingWorkload, TableSource, joint_pick
from specband.deploy.modelsource import MID_BAND, ModelSource
from specband.engines.base import get_engine
from specband.sim.model import build_model
from specband.sim.power import serving_power_w
from specband.sweeps.limit_table import BandWithinSpeedLoss, LimitPick, LimitTable

A, B = Action(3, 1, 4), Action(5, 1, 6)


def _pick(limit: float, action: Action, speed: float, util: float) -> LimitPick:
    index = {A: 5, B: 11}[action]
    return LimitPick(limit, index, tuple(action), 0.5, speed, util * limit, util, 0.1, BAND_LOW <= util <= BAND_HIGH, 3)


def _table(picks: list[LimitPick]) -> LimitTable:
    return LimitTable(tuple(p.power_limit_w for p in picks), (BAND_LOW, BAND_HIGH), "measured", {8: tuple(picks)})


def test_a_table_source_gives_the_selectors_choice() -> None:
    picks = [_pick(200, A, 98.0, 1.0), _pick(250, B, 99.5, 0.965), _pick(700, B, 100.0, 0.35)]
    joint = joint_pick(TableSource(_table(picks)), 8)
    assert joint.chosen.limit_pick() == BandWithinSpeedLoss().select(picks) == picks[1]
    assert joint.power_limit_w == 250 and joint.in_band and joint.shortfall is None
    assert joint.nvidia_smi == "sudo nvidia-smi -pl 250" and joint.provenance == "measured"
    assert joint.chosen.speed_tok_s.source == "measured" and joint.power_basis == "decode window"
    # borrowed data (another setup's, --allow-transfer) says so on every figure
    borrowed = joint_pick(TableSource(_table(picks), borrowed=True), 8).chosen
    assert {borrowed.speed_tok_s.source, borrowed.utilization.source} == {"borrowed"}  # type: ignore[union-attr]


def test_no_limit_in_the_band_gives_the_lowest_within_the_speed_loss_and_says_why() -> None:
    picks = [_pick(200, A, 99.0, 0.7), _pick(700, B, 100.0, 0.2)]
    joint = joint_pick(TableSource(_table(picks)), 8)
    assert joint.power_limit_w == 200 and not joint.in_band
    assert joint.shortfall is not None and "even the lowest limit swept, 200 W" in joint.shortfall


def test_allowed_keeps_to_the_configs_a_schedule_can_switch() -> None:
    picks = [_pick(250, B, 99.5, 0.965), _pick(700, A, 100.0, 0.35)]
    joint = joint_pick(TableSource(_table(picks)), 8, allowed=lambda a: a == A)
    assert joint.action == A and joint.power_limit_w == 700
    with pytest.raises(ConfigError, match="no config to pick from at batch size 8"):
        joint_pick(TableSource(_table(picks)), 8, allowed=lambda a: False)


def test_a_fixed_source_cannot_move_its_limit_and_says_where_the_band_would_be() -> None:
    util, limit = 0.888, 80.0
    candidate = Candidate(A, limit, Figure(156.2, source="published"), Figure(util, source="published"), None,
                          Figure(util * limit, source="published"), 0.5, in_band=False, runs=1)  # fmt: skip
    joint = joint_pick(FixedSource(candidate, 1, "published", LimitRange(22.9, 80.0, "test range")), 1)
    assert joint.power_limit_w == 80 and joint.nvidia_smi is None and not joint.limit_moves
    want = util * limit / ((BAND_LOW + BAND_HIGH) / 2)  # 73.6 W
    assert joint.shortfall is not None and f"a limit near {want:.0f} W would put it mid-band" in joint.shortfall
    floor = LimitRange(75.0, 80.0, "test range")
    low = joint_pick(FixedSource(candidate, 1, "published", floor), 1).shortfall
    assert low is not None and "below the lowest limit: at 75 W it would draw about 0.947" in low


@pytest.fixture(scope="module")
def h100() -> ModelSource:
    model = build_model("h100-sxm", target_config="llama-3.1-8b-instruct")
    return ModelSource(model, get_engine("sglang").actions)


@pytest.mark.parametrize("bs", [1, 8, 32, 64])
def test_the_model_source_puts_the_pick_mid_band_on_the_servers_power(h100: ModelSource, bs: int) -> None:
    joint = joint_pick(h100, bs)
    chosen = joint.chosen
    serving = serving_power_w(h100.model, bs, chosen.action)
    # a limit above the server's power: the pick runs at full speed, mid-band (to the watt it is rounded to)
    assert abs(chosen.power_limit_w - serving / MID_BAND) <= 0.5 + 1e-6
    assert chosen.utilization is not None and chosen.utilization.value == pytest.approx(serving / chosen.power_limit_w)
    assert BAND_LOW <= chosen.utilization.value <= BAND_HIGH and not chosen.capped
    fastest = max(c.speed_tok_s.value for c in joint.per_limit)
    assert chosen.speed_tok_s.value >= (1 - joint.max_speed_loss) * fastest
    assert chosen.speed_tok_s.lo95 < chosen.speed_tok_s.value < chosen.speed_tok_s.hi95  # type: ignore[operator]
    assert joint.power_basis == "serving" and joint.limit_range is not None and joint.limit_range.min_w == 200


def test_the_decode_window_draws_less_than_the_server(h100: ModelSource) -> None:
    decode = ModelSource(h100.model, get_engine("sglang").actions, power="decode")
    assert decode.power_basis == "decode window"
    # the figures: decode power 175-256 W at 8-64 sequences, the server's 480-640 W (with
    # (5,1,6) at 64 sequences: 307 W against 504 W, specband.sim.serving's fit to ML.ENERGY's rows)
    for bs in (8, 32, 64):
        assert decode.demand_w(bs, B) < 0.65 * h100.demand_w(bs, B)  # type: ignore[operator]
    # at bs 8 the decode window would put the limit at the GPU's floor, below the band
    joint = joint_pick(decode, 8)
    assert joint.power_limit_w == 200 and not joint.in_band
    assert joint.shortfall is not None
    assert joint.shortfall.startswith("the band cannot be reached: even the GPU's lowest")


def test_a_limit_below_the_servers_power_is_capped_and_above_the_band(h100: ModelSource) -> None:
    figure = h100.figure(8, B, 300.0)
    assert figure is not None and figure.capped and figure.utilization is not None
    assert figure.utilization.value == pytest.approx(1.0) and not figure.in_band


def test_a_workload_moves_the_serving_power_and_is_named(h100: ModelSource) -> None:
    long = ModelSource(h100.model, get_engine("sglang").actions, workload=ServingWorkload(4096, 256, "test"))
    short = ModelSource(h100.model, get_engine("sglang").actions, workload=ServingWorkload(64, 256, "test"))
    assert any("4096 prompt / 256 output tokens (test)" in n for n in long.notes), long.notes
    action = Action(3, 1, 4)
    assert long.demand_w(32, action) != pytest.approx(short.demand_w(32, action), rel=1e-3)


def test_a_first_guess_neither_simulates_rows_nor_trains(monkeypatch: pytest.MonkeyPatch) -> None:
    import specband.artifacts.fit as fit
    import specband.sim.simulated as simulated
    from specband.deploy.firstguess import first_guess

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a first guess reads the model's figures")

    monkeypatch.setattr(simulated, "simulate_sweep", refused)
    monkeypatch.setattr(fit, "build_manifest", refused)
    guess = first_guess(8, "h100-sxm", "llama-3.1-8b-instruct")
    assert guess.origin.rows is None and guess.origin.repeats is None  # no "3 row(s), 3 repeat(s)" of a simulation
    assert guess.action == B and guess.joint.in_band
    assert guess.speed_interval.speed_tok_s == pytest.approx(guess.joint.chosen.speed_tok_s.value, abs=0.01)


def test_vllm_scores_its_chains_only() -> None:
    from specband.deploy.firstguess import first_guess

    guess = first_guess(1, "h100-sxm", "llama-3.1-8b-instruct", engine=get_engine("vllm"))
    assert guess.engine.name == "vllm" and guess.action.speculative_eagle_topk <= 1
    assert {c.action for c in guess.joint.per_limit} <= set(get_engine("vllm").actions)
