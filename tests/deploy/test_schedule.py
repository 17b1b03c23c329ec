"""Per-batch-size schedules (specband.deploy.tiers, `specband schedule`) held to the engines'
own rules: sglang's loader and controller when sglang is importable, vLLM's rules as read
from its source (vllm-project/vllm, vllm/v1/spec_decode/dynamic/utils.py, commit 14b450ca590c)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from specband.contract.actions import ACTIONS, CHAIN_INDICES, TREE_INDICES
from specband.core.errors import ConfigError
from specband.deploy.tiers import PolicyScorer, TierPick, load_scorer, merge_tiers, pick_chain_tiers
from specband.emulator.controller import AdaptiveController
from specband.engines.base import get_engine
from specband.engines.schedule_files import (
    SGLANG_DEFAULT_ADAPTIVE_CONFIG,
    check_sglang_adaptive_config,
    check_vllm_schedule,
    read_sglang_adaptive_config,
    sglang_adaptive_config,
    sglang_initial_steps,
    sglang_schedule_flags,
    vllm_speculative_config,
)

ADAPTIVE_MODULE = "sglang.srt.speculative.adaptive_spec_params"


@pytest.fixture
def adaptive(require_module):
    """sglang's adaptive module: skips without sglang, fails under SPECBAND_REQUIRE_SGLANG=1
    (CI installs sglang; this checkout may not)."""
    return require_module(ADAPTIVE_MODULE)


def test_chain_configs_are_the_topk1_actions_and_the_baseline():
    assert [ACTIONS[i] for i in CHAIN_INDICES] == [(0, 0, 0), (1, 1, 2), (3, 1, 4), (5, 1, 6)]
    assert len(TREE_INDICES) == 15 and all(ACTIONS[i][1] > 1 for i in TREE_INDICES)


class _FixedScorer(PolicyScorer):
    """Scores from a table: batch size -> {action index: reward}."""

    def __init__(self, table):
        super().__init__("fixed", "test", None)
        self.table = table

    @property
    def batch_sizes(self):
        return sorted(self.table)

    def scores_at(self, batch_size):
        from specband.core.batchlist import nearest_batch_size

        measured = nearest_batch_size(batch_size, self.table)
        return measured, np.array([self.table[measured].get(i, np.nan) for i in range(19)])


# (0,0,0)=0, (1,1,2)=1, (3,1,4)=5, (5,1,6)=11, (3,4,8)=10
TABLE = {
    1: {0: 0.1, 1: 0.40, 5: 0.50, 11: 0.48, 10: 0.60},
    2: {0: 0.1, 1: 0.40, 5: 0.50, 11: 0.30, 10: 0.55},
    8: {0: 0.3, 1: 0.45, 5: 0.20, 10: 0.40},
    32: {0: 0.5, 1: 0.20, 10: 0.30},
}


def test_pick_chain_tiers_margin_and_chain_cost():
    picks = pick_chain_tiers(_FixedScorer(TABLE), margin=0.05, engine=get_engine("sglang"))
    assert [(p.batch_size, p.steps, p.best_steps) for p in picks] == [
        (1, (3, 5), 3),
        (2, (3,), 3),
        (8, (1,), 1),
        (32, (0,), 0),
    ]
    assert picks[0].chain_cost == pytest.approx(0.10)  # (3,4,8) 0.60 vs (3,1,4) 0.50
    assert picks[2].chain_cost == pytest.approx(-0.05)  # the chain config beats every tree config
    assert picks[3].tree_index == 10 and picks[3].chain_reward == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="--margin"):
        pick_chain_tiers(_FixedScorer(TABLE), margin=-1, engine=get_engine("sglang"))
    with pytest.raises(ConfigError, match="no estimate for any chain config"):
        pick_chain_tiers(_FixedScorer({4: {10: 0.5}}), engine=get_engine("sglang"))


def test_merge_tiers_uses_nearest_batch_size_boundaries():
    picks = pick_chain_tiers(_FixedScorer(TABLE), engine=get_engine("sglang"))
    tiers = merge_tiers(picks)
    # 1 and 2 share (3,); 8 starts at ceil((2+8)/2)=5, 32 at ceil((8+32)/2)=20
    assert [(t.start, t.end, t.steps, t.batch_sizes) for t in tiers] == [
        (1, 4, (3,), (1, 2)),
        (5, 19, (1,), (8,)),
        (20, None, (0,), (32,)),
    ]
    sglang = sglang_adaptive_config(tiers)
    assert sglang == {"1": {"candidate_steps": [3]}, "5": {"candidate_steps": [1]}, "20": {"candidate_steps": [0]}}
    vllm = vllm_speculative_config(tiers, "draft")
    assert vllm == {
        "method": "eagle3",
        "model": "draft",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 19, 1], [20, 32, 0]],
    }
    # every batch size routes (sglang: largest key <= bs) to the tier of its nearest scheduled one
    controller = AdaptiveController(check_sglang_adaptive_config(sglang), 3)
    for bs in range(1, 60):
        nearest = min(TABLE, key=lambda b: (abs(b - bs), -b))
        assert controller.steps_for(bs) == next(p.best_steps for p in picks if p.batch_size == nearest)


def test_vllm_never_speculating_is_refused():
    tiers = merge_tiers([TierPick(1, 1, (0,), 0.1, None, None, get_engine("vllm"))])
    with pytest.raises(ConfigError, match="never speculates"):
        vllm_speculative_config(tiers, None)


# vLLM's rules (validate_and_normalize_dynamic_sd_schedule, build_dynamic_sd_schedule_lookup)
VLLM_BAD = [
    ((1, 2, 4), "non-empty list"),  # not a list
    ([], "non-empty list"),
    ([(1, 2)], r"\[start, end, K\]"),
    ([(0, 2, 1)], "positive"),
    ([(4, 2, 1)], "start must be <= end"),
    ([(1, 2, -1)], "K must be >= 0"),
    ([(1, 2, 4), (2, 3, 1)], "non-overlapping"),
    ([(2, 4, 2)], "start at 1"),
]


@pytest.mark.parametrize(("schedule", "message"), VLLM_BAD)
def test_vllm_rules_reject_what_vllm_rejects(schedule, message):
    with pytest.raises(ConfigError, match=message):
        check_vllm_schedule(schedule, 4)


def test_vllm_rules_accept_gaps_and_sort_and_need_positive_num_tokens():
    assert check_vllm_schedule([[5, 8, 1], [1, 2, 4]], 4) == [(1, 2, 4), (5, 8, 1)]
    with pytest.raises(ConfigError, match="num_speculative_tokens"):
        check_vllm_schedule([[1, 2, 0]], 0)


# sglang's rules (_load_adaptive_config, sglang 0.5.23)
SGLANG_CASES = [
    ({"1": {"candidate_steps": [1, 3]}}, True),
    ({"1": {"candidate_steps": [0]}, "ema_alpha": 0.5}, True),
    ({"1": {"candidate_steps": []}}, False),
    ({"1": {"candidate_steps": [-1]}}, False),
    ({"1": {"candidate_steps": [1.5]}}, False),
    ({"1": {"candidate_steps": "13"}}, False),
    ({"1": {}}, False),
    ({"default": {"candidate_steps": [1]}}, False),
    ({}, False),
]


@pytest.mark.parametrize(("obj", "ok"), SGLANG_CASES)
def test_sglang_rules_mirror(obj, ok):
    if ok:
        assert check_sglang_adaptive_config(obj)
    else:
        with pytest.raises(ConfigError):
            check_sglang_adaptive_config(obj)


@pytest.mark.parametrize(("obj", "ok"), SGLANG_CASES)
def test_sglang_rules_match_sglangs_loader(obj, ok, tmp_path, adaptive):
    module = adaptive
    path = tmp_path / "c.json"
    path.write_text(json.dumps(obj))
    if ok:
        _, entries = module._load_adaptive_config(str(path))
        assert sorted(entries) == sorted(check_sglang_adaptive_config(obj))
    else:
        with pytest.raises(ValueError):
            module._load_adaptive_config(str(path))


def test_default_config_is_sglangs(adaptive):
    module = adaptive
    assert module.DEFAULT_ADAPTIVE_CONFIG == SGLANG_DEFAULT_ADAPTIVE_CONFIG
    assert sorted(read_sglang_adaptive_config(None)) == [1, 8, 32, 64]


@pytest.mark.parametrize("seed", range(4))
def test_controller_switches_like_sglangs(seed, tmp_path, adaptive):
    """Same verify results and batch sizes -> the same step count as sglang's own
    AdaptiveSpeculativeParams, at every verify."""
    module = adaptive
    cfg = {
        "1": {"candidate_steps": [1, 3, 5], "warmup_batches": 2, "update_interval": 2},
        "4": {"candidate_steps": [0, 1, 3], "down_hysteresis": 0.0, "ceiling_coeff": 1.5, "warmup_batches": 1},
        "16": {"candidate_steps": [0]},
        "ema_alpha": 0.4,
    }
    entries = check_sglang_adaptive_config(cfg)
    initial = sglang_initial_steps(entries)
    ours = AdaptiveController(entries, initial)
    theirs = module.AdaptiveSpeculativeParams(initial, cfg_path=_dump(cfg, tmp_path))
    rng = random.Random(seed)
    for _ in range(400):
        bs = rng.choice([1, 2, 5, 9, 20])
        steps = ours.steps_for(bs)
        assert steps == theirs.get_steps_for_batch(bs)
        accepted = [rng.randint(0, steps) for _ in range(bs)]
        assert ours.on_verify(accepted, bs) == theirs.on_verify_complete(accepted, bs)


def _dump(obj, folder: Path) -> str:
    path = folder / "adaptive.json"
    path.write_text(json.dumps(obj))
    return str(path)


def test_launch_flags_follow_sglangs_resolution():
    entries = check_sglang_adaptive_config({"1": {"candidate_steps": [1, 3, 5]}, "8": {"candidate_steps": [0, 1]}})
    assert sglang_initial_steps(entries) == 3  # union [0,1,3,5] -> element 4 // 2
    flags = sglang_schedule_flags("s.json", entries, "d")
    assert flags == [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "d",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--speculative-adaptive",
        "--speculative-adaptive-config",
        "s.json",
    ]
    with pytest.raises(ConfigError, match="never speculates"):
        sglang_schedule_flags("s.json", check_sglang_adaptive_config({"1": {"candidate_steps": [0]}}), None)


def test_read_config_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"1": {"candidate_steps": [1]},\n oops}')
    with pytest.raises(ConfigError, match=r"bad.json: line 2: not JSON"):
        read_sglang_adaptive_config(bad)
    bad.write_text('{"1": {"candidate_steps": []}}')
    with pytest.raises(ConfigError, match=r"bad.json: field '1.candidate_steps': candidate_steps"):
        read_sglang_adaptive_config(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        read_sglang_adaptive_config(tmp_path / "missing.json")


def test_embedded_scorer_restricts_to_measured_configs():
    scorer = load_scorer("lookup_table", None)
    measured, scores = scorer.scores_at(4)
    assert measured == 4
    assert sorted(np.flatnonzero(~np.isnan(scores))) == [0, 5, 10, 18]


# ------------------------------------------------------------------ CLI


def test_schedule_cli_sglang_writes_what_sglang_loads(run_cli, tmp_path, require_module):
    out = tmp_path / "s.json"
    res = run_cli("schedule", "--engine", "sglang", "--out", out, "--draft-model", "D", "--allow-transfer")
    assert res.exit_code == 0, res.stderr
    obj = json.loads(out.read_text())
    # bundled data: only (3,1,4) at 4 and (1,1,2) at 8 are measured chain configs
    assert obj == {
        "1": {"candidate_steps": [0]},
        "3": {"candidate_steps": [3]},
        "6": {"candidate_steps": [1]},
        "12": {"candidate_steps": [0]},
    }
    assert "+0.0799" in res.stdout  # (3,4,8) 0.4975 vs (3,1,4) 0.4176 at batch size 4
    assert "--speculative-adaptive --speculative-adaptive-config" in res.stdout
    try:
        module = require_module(ADAPTIVE_MODULE)
    except pytest.skip.Exception:
        return
    _, entries = module._load_adaptive_config(str(out))
    assert sorted(entries) == [1, 3, 6, 12]
    assert "sglang's _load_adaptive_config accepts it" in res.stdout


def test_schedule_cli_vllm(run_cli, tmp_path):
    out = tmp_path / "v.json"
    res = run_cli("schedule", "-e", "vllm", "-o", out, "-a", "gbt", "--include-unmeasured", "--batch-sizes", "1,4,8,16")
    assert res.exit_code == 0, res.stderr
    obj = json.loads(out.read_text())
    assert obj["method"] == "eagle3" and obj["num_speculative_tokens"] >= 1
    check_vllm_schedule(obj["num_speculative_tokens_per_batch_size"], obj["num_speculative_tokens"])
    assert obj["num_speculative_tokens_per_batch_size"][0][0] == 1
    assert "--speculative-config" in res.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine", "trt"], "--engine must be one of sglang, vllm"),
        (["--engine", "sglang", "--batch-sizes", "1,x"], "--batch-sizes: 'x' is not a whole number"),
        (["--engine", "sglang", "--batch-sizes", "0"], "--batch-sizes: batch sizes must be in [1, 1048576], got 0"),
        (["--engine", "sglang", "--margin", "-0.1"], "--margin must be >= 0"),
    ],
)
def test_schedule_cli_errors(run_cli, tmp_path, args, message):
    out = tmp_path / "s.json"
    res = run_cli("schedule", *args, "--out", out)
    assert res.exit_code == 2
    assert res.stderr.strip() == f"error: {message}" or message in res.stderr
    assert res.stderr.count("\n") == 1 and not out.exists()


def test_write_is_refused_when_sglang_rejects(monkeypatch, tmp_path, adaptive):
    """The engine check runs on the temporary file: a rejected schedule writes nothing."""
    from specband.engines.schedule_files import validate_with_sglang
    from specband.files.fileio import write_text_atomic

    out = tmp_path / "s.json"
    with pytest.raises(ConfigError, match="_load_adaptive_config rejects it"):
        write_text_atomic(out, '{"1": {"candidate_steps": []}}', error=ConfigError, check=validate_with_sglang)
    assert not out.exists() and list(Path(tmp_path).iterdir()) == []
