"""The typed answers (specband.deploy.answers): read by attribute, frozen, and ``to_json()`` in the
shape ``--format json`` documents (its keys, in order; the bytes each command prints are held
to what they were by test_answer_outputs.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specband.deploy.answers import (
    MIX_JSON_KEYS,
    PICK_JSON_KEYS,
    POWER_LIMIT_JSON_KEYS,
    MixAnswer,
    Pick,
    PickOrigin,
    PowerLimitAnswer,
    RowCounts,
    SchedulePick,
)
from specband.deploy.firstguess import first_guess
from specband.deploy.recommend import RecommendRequest, answer, power_limit_answer, recommend
from specband.deploy.table import FIRST_GUESS_JSON_KEYS
from specband.deploy.transfer import TransferCheck
from specband.engines.base import get_engine
from specband.sweeps.origin import DataOrigin

_OPTIONAL = ("calibration", "speed_interval", "action_set")


def test_a_pick_is_typed_frozen_and_its_json_has_the_documented_keys_in_order() -> None:
    pick = recommend(16, draft_model="drafts/eagle3")
    assert isinstance(pick, Pick)
    assert pick.action == (3, 2, 4) and pick.action.speculative_eagle_topk == 2
    assert pick.action_index == 7 and pick.measured_batch_size == 16 and pick.features == "pre"
    assert pick.flags[-2:] == ("--speculative-num-draft-tokens", "4") and pick.kwargs["speculative_num_steps"] == 3
    assert pick.transfer == TransferCheck() and pick.calibration is None and pick.action_set is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        pick.batch_size = 8  # type: ignore[misc]
    out = pick.to_json()
    assert tuple(out) == tuple(k for k in PICK_JSON_KEYS if k not in _OPTIONAL)
    assert out["action"] == [3, 2, 4] and out["flags"] == list(pick.flags) and out["state"] == list(pick.state)
    assert out["transfer"] == {"differences": [], "transferred": False}
    assert json.loads(json.dumps(out)) == out  # plain JSON: lists, not tuples or NamedTuples


def test_a_first_guess_carries_its_joint_pick_and_calibration_before_the_transfer() -> None:
    out = first_guess(4, "a100-sxm4-80gb").to_json()
    assert tuple(out) == FIRST_GUESS_JSON_KEYS and out["kind"] == "first_guess"
    assert out["calibration"] == {} and out["source"].startswith("simulated first guess (a100-sxm4-80gb")
    # the config and its limit, picked together: the limit is the joint pick's, inside the A100 profile's range
    joint = out["joint_pick"]
    assert out["power_limit_w"] == joint["power_limit_w"] and out["action"] == joint["action"]
    assert joint["limit_range_w"][0] <= out["power_limit_w"] <= joint["limit_range_w"][1] == 400.0
    assert out["nvidia_smi"] == f"sudo nvidia-smi -pl {out['power_limit_w']:g}"
    chosen = joint["chosen"]
    assert {chosen[k]["source"] for k in ("speed_tok_s", "utilization", "joules_per_token")} == {"simulated"}
    assert chosen["speed_tok_s"]["lo95"] < chosen["speed_tok_s"]["value"] < chosen["speed_tok_s"]["hi95"]


def test_the_action_set_goes_last_only_when_it_is_not_the_contract() -> None:
    pick = dataclasses.replace(recommend(16), action_set="extended")
    out = pick.to_json()
    assert list(out)[-2:] == ["transfer", "action_set"] and out["action_set"] == "extended"


def test_a_power_limit_answer_mirrors_the_choice_and_its_json_keys(tmp_path) -> None:
    from specband.sim import build_model, simulate_power_limits
    from specband.sweeps.dataset import Sweep
    from specband.sweeps.limit_table import limit_table

    model = build_model("h100-sxm", target_config="llama-3.1-8b-instruct", draft_config="eagle3-llama-3.1-8b-instruct")
    rows = simulate_power_limits(model, [400.0, 550.0, 700.0], batch_sizes=(16,), repeats=1)
    table = limit_table(Sweep.from_records(rows))
    answer_ = power_limit_answer(table, 16, draft_model="d")
    assert isinstance(answer_, PowerLimitAnswer)
    assert answer_.chosen in table.picks[16] and answer_.action == answer_.chosen.action
    assert answer_.default.power_limit_w == answer_.to_json()["default_power_limit_w"] == 700.0
    assert answer_.picks == table.picks[16]
    assert answer_.nvidia_smi == f"sudo nvidia-smi -pl {answer_.power_limit_w:g}" and "d" in answer_.flags
    out = answer_.to_json()
    assert tuple(out) == POWER_LIMIT_JSON_KEYS
    assert [p["power_limit_w"] for p in out["picks"]] == [400.0, 550.0, 700.0]
    assert list(out["picks"][0]) == [
        "power_limit_w", "action", "speed_tok_s", "utilization", "joules_per_token", "in_band", "mean_reward", "runs",
    ]  # fmt: skip
    assert out["origin"] is None and out["transfer"] is None  # neither known to the table alone
    assert json.loads(json.dumps(out)) == out
    told = dataclasses.replace(answer_, origin=PickOrigin(DataOrigin(hardware="H100")), transfer=TransferCheck())
    out = told.to_json()
    assert list(out["origin"])[-1] == "heldout_interval" and "rows" not in out["origin"]  # a limit counts no rows
    assert out["origin"]["hardware"] == "H100" and out["transfer"] == {"differences": [], "transferred": False}


def test_the_origin_json_is_the_data_s_fields_then_the_counts() -> None:
    origin = PickOrigin(DataOrigin(hardware="H100", provenance="simulated"), RowCounts(rows=19, repeats=2))
    out = origin.to_json()
    assert list(out) == [*DataOrigin().to_json(), "rows", "repeats", "heldout_interval"]
    assert (out["hardware"], out["rows"], out["repeats"], out["heldout_interval"]) == ("H100", 19, 2, None)
    assert origin.rows == 19 and PickOrigin(DataOrigin()).rows is None


def test_a_mix_answer_has_the_documented_keys_in_order() -> None:
    mixed = answer(RecommendRequest(batch_mix="1:1,16:1").answer_request())
    assert isinstance(mixed, MixAnswer) and mixed.action == (3, 4, 8)
    out = mixed.to_json()
    assert tuple(out) == MIX_JSON_KEYS
    assert [(r["batch_size"], r["rows"], r["repeats"]) for r in out["per_batch_size"]] == [(1, 4, 1), (16, 17, 5)]
    assert out["origin"]["rows"] is None and out["transfer"] == {"differences": [], "transferred": False}


def test_schedule_picks_for_sglang_and_vllm(tmp_path) -> None:
    from specband.deploy.schedule import auto_schedule, launch_schedule

    notes: list[str] = []
    log = tmp_path / "server.log"
    auto = auto_schedule(get_engine("sglang"), "lookup_table", None, None, notes=notes)
    sglang = launch_schedule(get_engine("sglang"), "auto", auto, notes=notes, log=log)  # a dry run
    assert isinstance(sglang, SchedulePick) and sglang.engine is get_engine("sglang")
    assert sglang.path == tmp_path / "server.log.schedule-XXXXXXXX.json" and not sglang.path.exists()
    assert sorted(sglang.tiers) == [1, 3, 6, 12] and sglang.ranges == () and sglang.speculative_config is None
    assert sglang.extra_args == ("--speculative-adaptive", "--speculative-adaptive-config", str(sglang.path))
    out = sglang.to_json()
    assert list(out) == ["engine", "path", "action", "tiers", "extra_args"]
    assert list(out["tiers"]) == ["1", "3", "6", "12"] and out["path"] == str(sglang.path)
    auto = auto_schedule(get_engine("vllm"), "lookup_table", None, None, notes=notes)
    vllm = launch_schedule(get_engine("vllm"), "auto", auto, "org/draft", notes=notes)
    assert vllm.engine is get_engine("vllm") and vllm.path == "auto" and vllm.tiers == {} and vllm.extra_args == ()
    assert vllm.speculative_config is not None and vllm.speculative_config["model"] == "org/draft"
    k = vllm.speculative_config["num_speculative_tokens"]
    assert vllm.action == (k, 1, k + 1) and max(r[2] for r in vllm.ranges) == k
    out = vllm.to_json()
    assert list(out) == ["engine", "path", "action", "ranges", "speculative_config"]
    assert out["ranges"] == [list(r) for r in vllm.ranges]
    assert json.loads(json.dumps(out)) == out
