"""One pick for a batch-size mix (specband.deploy.mix, `recommend --batch-mix[-from]`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specband.core.batchlist import normalise_mix, parse_batch_mix
from specband.core.errors import ConfigError
from specband.deploy.mix import pick_for_mix, read_running_requests
from specband.deploy.tiers import load_scorer

SCRAPE = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{model_name="m",priority=""}} {a}
sglang:num_running_reqs{{model_name="m",priority="1"}} 99
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{{model_name="m"}} 120.5
"""


def test_parse_batch_mix_normalises():
    assert parse_batch_mix("1:0.2,4:0.5,16:0.3") == pytest.approx({1: 0.2, 4: 0.5, 16: 0.3})
    assert parse_batch_mix("4:6, 1:2") == pytest.approx({1: 0.25, 4: 0.75})
    with pytest.raises(ConfigError, match=r"^--batch-mix: batch size 4 is given twice in '1:1,4:1,4:3'$"):
        parse_batch_mix("1:1,4:1,4:3")  # never summed silently
    for empty in ("", " "):
        with pytest.raises(ConfigError, match=r"^--batch-mix: empty$"):
            parse_batch_mix(empty)
    for bad in ("1", "x:1", "1:nan", "1:"):
        with pytest.raises(ConfigError, match="--batch-mix: expected BATCH_SIZE:WEIGHT"):
            parse_batch_mix(bad)
    with pytest.raises(ConfigError, match=r"--batch-mix: batch sizes must be in \[1, 1048576\], got 0"):
        parse_batch_mix("0:1")
    with pytest.raises(ConfigError, match="no batch size has a positive weight"):
        parse_batch_mix("1:0")
    with pytest.raises(ConfigError, match=">= 0"):
        normalise_mix({1: -1.0, 2: 2.0}, "x")


def test_read_gauge_samples_from_concatenated_scrapes(tmp_path):
    path = tmp_path / "metrics.txt"
    path.write_text("".join(SCRAPE.format(a=a) for a in (3, 0, 8, 8, 3)))
    # zeros are an idle server; the priority breakdown (99) is skipped
    assert read_running_requests(path) == pytest.approx({3: 0.5, 8: 0.5})


def test_read_histogram(tmp_path):
    path = tmp_path / "metrics.txt"
    path.write_text(
        "# TYPE sglang:num_running_reqs histogram\n"
        'sglang:num_running_reqs_bucket{le="1.0"} 2\n'
        'sglang:num_running_reqs_bucket{le="4.0"} 5\n'
        'sglang:num_running_reqs_bucket{le="16.0"} 9\n'
        'sglang:num_running_reqs_bucket{le="+Inf"} 10\n'
        "sglang:num_running_reqs_count 10\nsglang:num_running_reqs_sum 50\n"
    )
    assert read_running_requests(path) == pytest.approx({1: 0.2, 4: 0.3, 16: 0.5})


def _hist(a: object, b: object, c: object) -> str:
    """A histogram of sglang:num_running_reqs with buckets le=1, 4 and +Inf counting a, b, c."""
    buckets = (("1.0", a), ("4.0", b), ("+Inf", c))
    lines = "".join(f'sglang:num_running_reqs_bucket{{le="{le}"}} {n}\n' for le, n in buckets)
    return "# TYPE sglang:num_running_reqs histogram\n" + lines


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # B23: a gauge of 2.5 running requests was read as batch size 2, and non-cumulative buckets
        # (10, 5, 12) as a mix of 0.833 and 0.167
        (SCRAPE.format(a=2.5), r"sample 2\.5 is not a batch size \(a whole number of running requests"),
        (
            _hist(10, 5, 12),
            "bucket le=4 counts 5, fewer than le=1's 10: a Prometheus histogram's buckets are cumulative",
        ),
        (_hist(1, 5, 3), "bucket le=inf counts 3, fewer than le=4's 5"),
        (_hist(-1, 5, 12), "bucket le=1 counts -1, fewer than le=0's 0"),
        (_hist(1, "NaN", 12), "bucket le=4 counts nan, not a count"),
        ("sglang:num_running_reqs{ 3\n", "not Prometheus text"),
        ("# TYPE other gauge\nother 3\n", "no sglang:num_running_reqs samples"),
        (SCRAPE.format(a=0), "never shows a running request"),
    ],
)
def test_read_errors_name_the_file(tmp_path, text, message):
    path = tmp_path / "metrics.txt"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"--batch-mix-from {path}: .*{message}"):
        read_running_requests(path)
    with pytest.raises(ConfigError, match="cannot read"):
        read_running_requests(tmp_path / "missing.txt")


class _Table:
    """A scorer from a table: bs -> (19,) scores."""

    def __init__(self, table):
        self.table = table

    def scores_at(self, bs):
        return bs, np.asarray(self.table[bs], dtype=np.float64)


def test_pick_for_mix_expected_reward_and_regret():
    nan = np.nan
    a = [nan] * 19
    b = [nan] * 19
    a[0], a[1], a[2] = 0.2, 0.9, 0.5
    b[0], b[1], b[2], b[3] = 0.3, 0.1, 0.6, 0.99  # 3 is not scored at bs 1: never the mix pick
    pick = pick_for_mix(_Table({1: a, 8: b}), {1: 0.5, 8: 0.5})
    # expected: 0 -> 0.25, 1 -> 0.5, 2 -> 0.55
    assert pick.index == 2 and pick.expected_reward == pytest.approx(0.55)
    assert [(r.own_index, round(r.regret, 6)) for r in pick.rows] == [(1, 0.4), (3, 0.39)]
    assert pick.expected_regret == pytest.approx(0.395)
    with pytest.raises(ConfigError, match="no config is measured at every batch size"):
        pick_for_mix(_Table({1: [nan] * 18 + [1.0], 8: [1.0] + [nan] * 18}), {1: 0.5, 8: 0.5})


@pytest.mark.parametrize("algo", ["lookup_table", "gbt", "linucb"])
def test_own_picks_are_recommends_picks(algo):
    """The scorer the mix and the schedule use agrees with `specband recommend` at every
    measured batch size (its argmax is recommend's pick)."""
    from specband.deploy.recommend import recommend

    scorer = load_scorer(algo, None)
    for bs in scorer.batch_sizes:
        pick = pick_for_mix(scorer, {bs: 1.0})
        assert pick.rows[0].own_index == pick.index == recommend(bs, algo).action_index


def test_recommend_batch_mix_cli(run_cli, tmp_path):
    res = run_cli("recommend", "--batch-mix", "1:0.2,4:0.5,16:0.3")
    assert res.exit_code == 0, res.stderr
    # stdout is the flags line only (issue 37: the table was printed beside it); the table goes with the notes
    assert res.stdout == (
        "--speculative-algorithm EAGLE3 --speculative-num-steps 3 --speculative-eagle-topk 4 "
        "--speculative-num-draft-tokens 8\n"
    )
    assert "expected regret 0.0369" in res.stderr  # bs 16: (3,2,4) 0.3890 vs (3,4,8) 0.2659, weight 0.3
    res = run_cli("recommend", "--batch-mix", "1:0.2,4:0.5,16:0.3", "-f", "json")
    obj = json.loads(res.stdout)
    assert obj["action"] == [3, 4, 8]
    assert [r["own_action"] for r in obj["per_batch_size"]] == [[3, 4, 8], [3, 4, 8], [3, 2, 4]]
    assert obj["per_batch_size"][2]["regret"] == pytest.approx(0.3890 - 0.2659, abs=2e-4)


def test_recommend_batch_mix_from_metrics(run_cli, tmp_path):
    path = tmp_path / "metrics.txt"
    path.write_text("".join(SCRAPE.format(a=a) for a in (16, 16, 16, 1)))
    res = run_cli("recommend", "--batch-mix-from", path, "-f", "json")
    assert res.exit_code == 0, res.stderr
    obj = json.loads(res.stdout)
    assert obj["batch_mix"] == {"1": 0.25, "16": 0.75}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch-mix", "1:1", "--batch-mix-from", "x"], "alternatives"),
        (["--batch-mix", "1:1", "-b", "4"], "--batch-size is for one batch size"),
        ([], "--batch-size is required"),
    ],
)
def test_recommend_mix_option_errors(run_cli, args, message):
    res = run_cli("recommend", *args)
    assert res.exit_code == 2 and message in res.stderr and res.stderr.count("\n") == 1


# --- the transfer check of a mix (issue 21): the one-batch-size recommend's rules


def recommend_mix(request, setup=None):
    """``recommend --batch-mix``'s answer to ``request`` (the one dispatch), ``setup`` checked."""
    from specband.deploy.answers import MixAnswer
    from specband.deploy.recommend import answer

    mixed = answer(request.answer_request(), setup)
    assert isinstance(mixed, MixAnswer)
    return mixed


def _mix_request(**kwargs):
    from specband.deploy.recommend import RecommendRequest

    return RecommendRequest(batch_mix="1:1,16:1", **kwargs)


def test_a_mix_for_another_target_is_refused_unless_allowed():
    from specband.deploy.recommend import recommend
    from specband.deploy.transfer import TransferError, UserSetup

    setup = UserSetup(target="meta-llama/Llama-3.1-70B-Instruct")
    with pytest.raises(TransferError, match=r"^the embedded study policy answers for another setup: target "):
        recommend_mix(_mix_request(), setup)
    taken = recommend_mix(_mix_request(allow_transfer=True), setup)
    differences = ("target meta-llama/Llama-3.1-70B-Instruct vs the data's unsloth/Llama-3.2-1B-Instruct",)
    assert taken.transfer is not None and taken.transfer.differences == differences
    assert f"transferred (--allow-transfer): {differences[0]}" in taken.notes
    # the same differences, in the same words, as a one-batch-size recommend for that setup
    one = recommend(16, setup=setup, allow_transfer=True)
    assert one.transfer.differences == differences
    assert taken.action == (3, 4, 8)  # the pick itself is the unchecked mix's


def test_a_mix_checks_the_gpu_and_power_limit_of_a_profile():
    from specband.deploy.transfer import TransferError
    from specband.deploy.usersetup import user_setup

    setup = user_setup(gpu="h100-sxm")
    with pytest.raises(TransferError, match=r"GPU H100_SXM5_80GB \(--gpu h100-sxm\) vs the data's RTX4060_Laptop; "):
        recommend_mix(_mix_request(gpu="h100-sxm"), setup)
    taken = recommend_mix(_mix_request(gpu="h100-sxm", allow_transfer=True), setup)
    assert taken.transfer is not None
    assert taken.transfer.differences[-1] == "power limit 700 W vs the data's 80 W"
    # the JSON answer says the differences taken, as a one-batch-size pick's "transfer" does
    assert taken.to_json()["transfer"] == {"differences": list(taken.transfer.differences), "transferred": True}


def test_a_mix_for_the_datas_own_setup_passes_with_the_unchecked_gpu_said():
    from specband.deploy.transfer import UserSetup

    setup = UserSetup(target="meta-llama/Llama-3.2-1B-Instruct", gpu_unchecked="no NVML here")
    answer = recommend_mix(_mix_request(), setup)
    assert answer.transfer is not None and answer.transfer.differences == ()
    gpu = "the GPU could not be checked (no NVML here); the embedded study policy"
    assert answer.notes[0].startswith(gpu)  # the transfer check's line, before the data's notes
    unchecked = recommend_mix(_mix_request())  # no setup: nothing checked, nothing said about it
    assert unchecked.transfer is None and unchecked.notes == answer.notes[1:]
    assert not any(n.startswith(gpu) for n in unchecked.notes)
    assert unchecked.to_json() == answer.to_json()  # the JSON answer is the same either way
    assert answer.to_json()["transfer"] == {"differences": [], "transferred": False}


def test_recommend_batch_mix_cli_passes_the_users_setup(run_cli):
    res = run_cli("recommend", "--batch-mix", "1:1,8:1", "--draft-model", "org/another-draft")
    assert res.exit_code == 2 and res.stdout == "" and res.stderr.count("\n") == 1
    assert res.stderr.startswith("error: the embedded study policy answers for another setup: draft org/another-draft")
    res = run_cli("recommend", "--batch-mix", "1:1,8:1", "--draft-model", "org/another-draft", "--allow-transfer")
    assert res.exit_code == 0 and "note: transferred (--allow-transfer): draft org/another-draft" in res.stderr


# --- what the mix left out and what its rewards rest on (the one-batch-size pick's notes)


def test_a_better_own_pick_left_out_of_the_mix_is_named():
    """The tester's mix: bs 16 carries all the weight, yet the pick is (3,4,8), because bs
    16's own pick (3,2,4) has no lookup-table mean at bs 1."""
    from specband.deploy.recommend import RecommendRequest

    answer = recommend_mix(RecommendRequest(batch_mix="1:1e-300,16:1"))
    assert answer.action == (3, 4, 8)
    assert answer.pick.expected_regret == pytest.approx(0.3890 - 0.2659, abs=2e-4)
    assert [(left.index, left.own_pick_at, left.not_scored_at) for left in answer.pick.left_out] == [(7, (16,), (1,))]
    note = (
        "(3,2,4), bs 16's own pick, was not scored at bs 1: the mix considers only configs scored at every "
        "batch size of it"
    )
    assert answer.notes[-1] == note
    obj = answer.to_json()
    assert obj["left_out"] == [{"action_index": 7, "action": [3, 2, 4], "own_pick_at": [16], "not_scored_at": [1]}]
    # an own pick scored everywhere is not "left out": a mix of bs 1 and 4 picks (3,4,8), both own picks
    both = recommend_mix(RecommendRequest(batch_mix="1:1,4:1"))
    assert both.pick.left_out == () and both.to_json()["left_out"] == []
    assert not any("was not scored at" in n for n in both.notes)


def test_a_mix_says_what_its_rewards_rest_on_as_one_batch_size_does():
    from specband.deploy.explain import origin_line
    from specband.deploy.recommend import RecommendRequest, recommend

    answer = recommend_mix(RecommendRequest(batch_mix="1:1,12:1"))
    one = recommend(16)
    line = (
        "pick rests on published data: RTX4060_Laptop at 80 W, target unsloth/Llama-3.2-1B-Instruct, draft "
        "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct, sglang not recorded, workload not recorded, "
        "power measured"
    )
    assert line in answer.notes and origin_line(one.origin).startswith(line + "; 17 rows, 5 repeat(s)")
    assert "batch size 12 was not measured; picking for the nearest measured batch size 16" in answer.notes
    obj = answer.to_json()
    assert {k: obj["origin"][k] for k in ("provenance", "hardware", "power_limit_w", "power_measured")} == {
        "provenance": "published",
        "hardware": "RTX4060_Laptop",
        "power_limit_w": 80.0,
        "power_measured": True,
    }
    assert obj["origin"]["rows"] is None  # per batch size, below
    assert [(r["batch_size"], r["measured_batch_size"], r["rows"], r["repeats"]) for r in obj["per_batch_size"]] == [
        (1, 1, 4, 1),
        (12, 16, 17, 5),
    ]
    for r, bs in zip(obj["per_batch_size"], (1, 16), strict=True):  # what pick_origin counts for recommend
        origin = recommend(bs).origin
        assert (r["rows"], r["repeats"]) == (origin.rows, origin.repeats)


def test_readings_against_a_contract_policy_are_said_for_a_mix_too(run_cli):
    from specband.deploy.recommend import RecommendRequest, recommend

    res = run_cli("train", "--algo", "lookup_table", "--features", "contract", "--out", "m")
    assert res.exit_code == 0, res.stderr
    state = (60.0, 4000.0, 90.0)
    one = recommend(16, models="m", telemetry=state)
    words = "these policies use the contract state"
    (expected,) = [n for n in one.notes if n.startswith(words)]
    answer = recommend_mix(RecommendRequest(batch_mix="1:1,16:1", models="m", state=state))
    assert [n for n in answer.notes if n.startswith(words)] == [expected]
