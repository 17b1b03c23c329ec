"""Sweep data: formats, validation of every bad input, rewards, features, allowed actions."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specband.contract.actions import REFERENCE_INDEX, action_index
from specband.core.errors import DataError, SpecbandError
from specband.sweeps.dataset import SWEEP_COLUMNS, Sweep, load_sweep, state_vector

WriteJsonl = Callable[..., Path]


def sweep_row(index: int, bs: int, triple: tuple[int, int, int], **extra: Any) -> dict[str, Any]:
    """A row of the published sweep schema (docs/FACTS.md §3) with plausible values."""
    steps, topk, draft = triple
    row: dict[str, Any] = {column: None for column in SWEEP_COLUMNS}
    row.update(
        hardware="RTX4060_Laptop",
        index=index,
        repeat=0,
        batch_size=bs,
        steps=steps,
        topk=topk,
        num_draft_tokens=draft,
        is_baseline=triple == (0, 0, 0),
        error=None,
        accept_length=1.0 if steps == 0 else 2.0,
        speed_tok_s=100.0 if steps == 0 else 130.0,
        speed_source="step_time",
        avg_power_watts=76.0,
        gpu_temp_c_before=55.0,
        gpu_temp_c=62.0,
        gpu_util_pct=97.0,
        gpu_mem_used_mb=6100.0,
        gpu_throttling=False,
    )
    row.update(extra)
    return row


def small_sweep() -> list[dict[str, Any]]:
    return [
        sweep_row(0, 4, (0, 0, 0)),
        sweep_row(1, 4, (3, 4, 8), speed_tok_s=140.0, avg_power_watts=77.0),
        sweep_row(2, 4, (3, 2, 4), speed_tok_s=130.0, avg_power_watts=70.0),
        sweep_row(3, 4, (5, 4, 16), error="launch failed: CUDA out of memory", speed_tok_s=None, accept_length=None),
    ]


# --------------------------------------------------------------------- formats
def test_bundled_published_measurements() -> None:
    sweep = load_sweep()
    assert sweep.format == "published_live"
    assert len(sweep.rows) == 29
    assert sweep.batch_sizes() == [1, 4, 8, 16]
    assert sweep.energy_measured
    derived = [r.index for r in sweep.rows if r.utilization_origin == "derived"]
    assert derived == [1, 5, 9, 13]  # the four reference rows of the first trial
    assert {r.trial for r in sweep.rows} == {"validate", "seed0", "seed1", "seed2", "seed3"}
    bs16 = sweep.allowed_mask(16)
    assert [i for i in np.flatnonzero(bs16)] == [0, 3, 7, 10, 14]


def test_published_sweep_schema_roundtrip(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl(small_sweep())
    sweep = load_sweep(path, power_limit_w=80.0)
    assert sweep.format == "sweep"
    assert len(sweep.rows) == 4
    assert len(sweep.training_rows()) == 3
    failed = sweep.rows[3]
    assert failed.failed and not failed.trainable
    # (5,4,16) failed at bs 4: never allowed there; the others are
    assert list(np.flatnonzero(sweep.allowed_mask(4))) == [0, action_index((3, 2, 4)), REFERENCE_INDEX]
    rewards = sweep.rewards()
    assert rewards[0] == 0.0 and rewards[3] == 0.0
    parts = sweep.reward_parts(sweep.rows[1])
    assert parts.energy_utilization == pytest.approx(77.0 / 80.0)
    assert parts.throughput_score == pytest.approx(0.2)


def test_energy_utilization_instead_of_power(write_jsonl: WriteJsonl) -> None:
    rows = small_sweep()[:2]
    rows[1]["avg_power_watts"] = None
    rows[1]["energy_utilization"] = 0.97
    sweep = load_sweep(write_jsonl(rows))
    assert sweep.reward_parts(sweep.rows[1]).energy_utilization == pytest.approx(0.97)
    assert sweep.reward_parts(sweep.rows[1]).band_score == 1.0


def test_power_limit_precedence(write_jsonl: WriteJsonl) -> None:
    rows = small_sweep()[:2]
    rows[1]["power_limit_watts"] = 100.0
    path = write_jsonl(rows)
    assert load_sweep(path).reward_parts(load_sweep(path).rows[1]).energy_utilization == pytest.approx(0.77)
    forced = load_sweep(path, power_limit_w=77.0)
    assert forced.reward_parts(forced.rows[1]).energy_utilization == pytest.approx(1.0)
    rows[1]["power_limit_watts"] = None
    default = load_sweep(write_jsonl(rows, "default.jsonl"))
    assert default.reward_parts(default.rows[1]).energy_utilization == pytest.approx(77.0 / 80.0)


def test_sglang_bench_format_has_no_energy(write_jsonl: WriteJsonl) -> None:
    rows = [
        {
            "batch_size": 1,
            "steps": 0,
            "topk": 0,
            "num_draft_tokens": 0,
            "acc_length": 1.0,
            "step_time": 0.0103,
            "speed": 97.1,
            "completion_tokens": 8192,
        },
        {
            "batch_size": 1,
            "steps": 3,
            "topk": 4,
            "num_draft_tokens": 8,
            "acc_length": 2.4,
            "step_time": 0.0154,
            "speed": 155.8,
            "completion_tokens": 8192,
        },
        {
            "batch_size": 1,
            "steps": 3,
            "topk": 1,
            "num_draft_tokens": 4,
            "acc_length": 2.0,
            "step_time": 0.0150,
            "speed": 133.3,
            "completion_tokens": 8192,
        },
    ]
    sweep = load_sweep(write_jsonl(rows))
    assert sweep.format == "sglang_bench"
    assert not sweep.energy_measured
    assert [r.index for r in sweep.rows] == [0, 10, 5]  # grid index: bs position x 19 + action index
    parts = sweep.reward_parts(sweep.rows[1])
    assert parts.energy_measured is False
    assert parts.reward == pytest.approx((155.8 / 97.1 - 1) / 2)


def test_a_bench_file_reads_as_import_bench_writes_it(write_jsonl: WriteJsonl, tmp_path) -> None:
    """One reading of sglang's bench output: a repeated config is a repeat of the same grid
    index, and a triple outside the 19 (the bench script's default grid has them) is
    skipped and counted, in load_sweep exactly as in import-bench."""
    from specband.harness.import_bench import import_bench

    base = {"batch_size": 2, "steps": 0, "topk": 0, "num_draft_tokens": 0, "acc_length": 1.0, "speed": 90.0}
    spec = {"batch_size": 2, "steps": 3, "topk": 4, "num_draft_tokens": 8, "acc_length": 2.5, "speed": 150.0}
    outside = {"batch_size": 2, "steps": 7, "topk": 8, "num_draft_tokens": 32, "acc_length": 3.0, "speed": 160.0}
    path = write_jsonl([base, spec, outside, dict(spec, speed=151.0)], "bench.jsonl")
    direct = load_sweep(path)
    assert [(r.index, r.repeat, r.line) for r in direct.rows] == [(0, 0, 1), (10, 0, 2), (10, 1, 4)]
    assert len(direct.skipped) == 1 and direct.skipped[0].startswith("line 3: (7, 8, 32): ")
    assert "(1 lines skipped: not contract actions)" in str(direct.energy_note())
    result = import_bench(path, tmp_path / "imported.jsonl")
    imported = load_sweep(result.out_path)
    assert result.skipped == list(direct.skipped)
    assert [{**r.raw, "hardware": None} for r in imported.rows] == [dict(r.raw) for r in direct.rows]


def test_agentic_trace_rows_are_kept_but_not_trained_or_failed(write_jsonl: WriteJsonl) -> None:
    rows = small_sweep()[:3] + [
        sweep_row(
            228, 4, (3, 4, 8), error="agentic_pilot_trace: swebench", speed_source="swebench_pilot", is_baseline=False
        )
    ]
    sweep = load_sweep(write_jsonl(rows))
    trace = sweep.rows[3]
    assert trace.is_agentic_trace and not trace.failed and not trace.trainable
    assert len(sweep.training_rows()) == 3
    assert sweep.allowed_mask(4)[REFERENCE_INDEX]


def test_retry_row_is_kept(write_jsonl: WriteJsonl) -> None:
    rows = small_sweep()[:2]
    rows[1]["retry_mem_fraction"] = 0.55
    sweep = load_sweep(write_jsonl(rows))
    assert sweep.rows[1].raw["retry_mem_fraction"] == 0.55
    assert sweep.rows[1].trainable


# --------------------------------------------------------------------- features
def test_state_vector_contract_and_fills() -> None:
    np.testing.assert_allclose(state_vector(16, 62.0, 4096.0, 50.0), [2.0, 0.62, 0.5, 0.5])
    np.testing.assert_allclose(state_vector(8), [1.0, 0.4, 0.0, 0.0])
    assert state_vector(1).dtype == np.float32


def test_pre_features_never_use_post_run_readings(write_jsonl: WriteJsonl) -> None:
    rows = small_sweep()[:2]
    rows[1].update(gpu_mem_used_mb_before=512.0, gpu_util_pct_before=3.0)
    sweep = load_sweep(write_jsonl(rows))
    contract = sweep.rows[1].state("contract")
    pre = sweep.rows[1].state("pre")
    np.testing.assert_allclose(contract, [0.5, 0.55, 6100 / 8192, 0.97], rtol=1e-6)
    np.testing.assert_allclose(pre, [0.5, 0.55, 512 / 8192, 0.03], rtol=1e-6)
    # a row without pre-launch telemetry gets the fills, not the post-run values
    np.testing.assert_allclose(sweep.rows[0].state("pre"), [0.5, 0.55, 0.0, 0.0])


def test_training_data_shapes_and_propensities() -> None:
    data = load_sweep().training_data()
    assert data.states.shape == (29, 4) and data.states.dtype == np.float32
    assert data.actions.shape == data.rewards.shape == data.propensities.shape == (29,)
    # bs 16 ran 5 distinct configs, bs 1 ran 4
    np.testing.assert_allclose(data.propensities[data.batch_sizes == 16], 0.2)
    np.testing.assert_allclose(data.propensities[data.batch_sizes == 1], 0.25)
    assert data.allowed_for(16)[7] and not data.allowed_for(16)[18]
    # an unmeasured batch size takes the nearest measured one (ties: the larger)
    np.testing.assert_array_equal(data.allowed_for(12), data.allowed_for(16))
    np.testing.assert_array_equal(data.allowed_for(64), data.allowed_for(16))
    np.testing.assert_array_equal(data.allowed_for(2), data.allowed_for(1))
    pre = load_sweep().training_data("pre")
    np.testing.assert_array_equal(pre.actions, data.actions)
    with pytest.raises(ValueError, match="feature kind"):
        load_sweep().training_data("hindsight")  # type: ignore[arg-type]


def test_propensity_column_is_used(write_jsonl: WriteJsonl) -> None:
    rows = small_sweep()[:3]
    for r, p in zip(rows, (0.5, 0.3, 0.2), strict=True):
        r["propensity"] = p
    data = load_sweep(write_jsonl(rows)).training_data()
    np.testing.assert_allclose(data.propensities, [0.5, 0.3, 0.2])


def test_baseline_of_other_repeat_is_pooled(write_jsonl: WriteJsonl) -> None:
    rows = [
        sweep_row(0, 4, (0, 0, 0), repeat=0, speed_tok_s=100.0),
        sweep_row(1, 4, (3, 4, 8), repeat=0, speed_tok_s=150.0),
        sweep_row(0, 4, (0, 0, 0), repeat=1, error="server died", speed_tok_s=None),
        sweep_row(1, 4, (3, 4, 8), repeat=1, speed_tok_s=150.0),
    ]
    sweep = load_sweep(write_jsonl(rows))
    assert sweep.baseline_speed(sweep.rows[3]) == 100.0


# --------------------------------------------------------------------- bad input
def _replace(index: int, **changes: Any) -> list[Any]:
    rows: list[Any] = small_sweep()
    rows[index] = {**rows[index], **changes}
    return rows


def _drop(index: int, field: str) -> list[Any]:
    rows: list[Any] = small_sweep()
    rows[index] = {k: v for k, v in rows[index].items() if k != field}
    return rows


BAD_INPUTS: list[tuple[str, list[Any], int | None, str | None, str]] = [
    ("empty file", [], None, None, "empty"),
    ("blank lines only", ["", "   "], None, None, "empty"),
    ("not JSON", small_sweep()[:2] + ["{this is not json"], 3, None, "not valid JSON"),
    ("not an object", small_sweep()[:1] + ["[1, 2, 3]"], 2, None, "JSON object"),
    (
        "NaN",
        small_sweep()[:1] + [json.dumps(small_sweep()[1]).replace('"avg_power_watts": 77.0', '"avg_power_watts": NaN')],
        2,
        "avg_power_watts",
        "NaN or Infinity",
    ),
    (
        "Infinity",
        small_sweep()[:1] + [json.dumps(small_sweep()[1]).replace('"speed_tok_s": 140.0', '"speed_tok_s": Infinity')],
        2,
        "speed_tok_s",
        "NaN or Infinity",
    ),
    ("missing field", _drop(1, "batch_size"), 2, "batch_size", "missing"),
    ("missing speed", _replace(1, speed_tok_s=None), 2, "speed_tok_s", "required"),
    ("wrong type str", _replace(2, batch_size="4"), 3, "batch_size", "integer"),
    ("wrong type bool", _replace(2, steps=True), 3, "steps", "integer"),
    ("wrong type float field", _replace(2, avg_power_watts="70 W"), 3, "avg_power_watts", "number"),
    ("wrong type error", _replace(2, error=5), 3, "error", "string"),
    ("batch size zero", _replace(1, batch_size=0), 2, "batch_size", "> 0"),
    ("batch size negative", _replace(1, batch_size=-4), 2, "batch_size", "> 0"),
    ("batch size huge", _replace(1, batch_size=10**30), 2, "batch_size", "64-bit integer"),
    ("batch size above the limit", _replace(1, batch_size=2**40), 2, "batch_size", "<= 1048576"),
    ("repeat negative", _replace(1, repeat=-1), 2, "repeat", ">= 0"),
    ("index huge", small_sweep()[:1] + [{**small_sweep()[1], "index": 2**70}], 2, "index", "64-bit integer"),
    (
        "triple not in contract",
        _replace(2, steps=2, topk=2, num_draft_tokens=2),
        3,
        "steps/topk/num_draft_tokens",
        "not one of the 19",
    ),
    (
        "triple breaks rule 1",
        _replace(2, steps=3, topk=4, num_draft_tokens=16),
        3,
        "steps/topk/num_draft_tokens",
        "rule 1",
    ),
    (
        "triple breaks rule 3",
        _replace(2, steps=3, topk=0, num_draft_tokens=4),
        3,
        "steps/topk/num_draft_tokens",
        "rule 3",
    ),
    ("accept length above steps+1", _replace(2, accept_length=4.5), 3, "accept_length", "outside"),
    ("accept length below 1", _replace(1, accept_length=0.9), 2, "accept_length", "outside"),
    ("baseline accept length", _replace(0, accept_length=1.2), 1, "accept_length", "outside"),
    ("no baseline", small_sweep()[1:], 1, "batch_size", "no successful (0,0,0) baseline"),
    ("failed baseline only", _replace(0, error="oom", speed_tok_s=None), 2, "batch_size", "baseline"),
    ("duplicate index repeat", small_sweep() + [sweep_row(1, 4, (3, 4, 8))], 5, "index", "line 2"),
    ("negative power", _replace(1, avg_power_watts=-3.0), 2, "avg_power_watts", ">= 0"),
    ("zero speed", _replace(1, speed_tok_s=0.0), 2, "speed_tok_s", "> 0"),
    ("is_baseline contradicts triple", _replace(1, is_baseline=True), 2, "is_baseline", "says otherwise"),
    ("propensity out of range", _replace(1, propensity=1.5), 2, "propensity", "(0, 1]"),
    (
        "power limit zero",
        _replace(1, power_limit_watts=0.0),
        2,
        "power_limit_watts",
        "must be a number in [1, 2000], got 0.0",
    ),
]


@pytest.mark.parametrize(("case", "rows", "line", "field", "message"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_names_file_line_field(
    write_jsonl: WriteJsonl, case: str, rows: list[Any], line: int | None, field: str | None, message: str
) -> None:
    path = write_jsonl(rows)
    with pytest.raises(DataError) as info:
        load_sweep(path)
    error = info.value
    assert isinstance(error, SpecbandError)
    assert error.path == str(path)
    assert error.line == line
    assert error.field == field
    text = str(error)
    assert message in text
    assert "\n" not in text
    assert text.startswith(f"{path}:{line}: " if line else f"{path}: ")


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file"):
        load_sweep(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="directory"):
        load_sweep(tmp_path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DataError, match="UTF-8"):
        load_sweep(path)


def test_bad_power_limit_and_format(write_jsonl: WriteJsonl) -> None:
    path = write_jsonl(small_sweep())
    with pytest.raises(DataError, match="power limit"):
        load_sweep(path, power_limit_w=-1.0)
    with pytest.raises(DataError, match="unknown format"):
        load_sweep(path, fmt="csv")


def test_from_records_in_memory() -> None:
    sweep = Sweep.from_records(small_sweep())
    assert sweep.path is None and len(sweep.rows) == 4
    with pytest.raises(DataError, match=r"<data>:2: field 'batch_size'"):
        Sweep.from_records(_replace(1, batch_size=0))
    assert sweep.subset(lambda r: r.trainable).rows == sweep.rows[:3]


def test_a_utf8_bom_is_not_data(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(json.dumps(r) for r in small_sweep()).encode())
    sweep = load_sweep(path)
    assert len(sweep.rows) == 4 and sweep.rows[0].line == 1
