"""Simulated sweeps: schema, determinism, memory errors, thermal drift, the recipe."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from specband.contract.actions import ACTIONS, Action
from specband.core.errors import ConfigError
from specband.sim import simulate_sweep, write_sweep
from specband.sweeps.dataset import SWEEP_COLUMNS, load_sweep

EXTRA = ("power_limit_watts", "provenance", "profile", "seed", "gpu_mem_used_mb_before", "gpu_util_pct_before")


def test_schema_and_size(rtx_sweep_rows) -> None:
    rows = rtx_sweep_rows
    assert len(rows) == 3 * 4 * 19
    for row in rows:
        for col in SWEEP_COLUMNS + EXTRA:
            assert col in row, col
        assert row["provenance"] == "simulated" and row["profile"] == "rtx4060-laptop" and row["seed"] == 0
    assert [r["index"] for r in rows] == list(range(228))
    assert {r["repeat"] for r in rows} == {0, 1, 2}
    ok = [r for r in rows if r["error"] is None]
    for r in ok:
        assert 1.0 <= r["accept_length"] <= r["steps"] + 1
        assert r["energy_joules"] == pytest.approx(r["avg_power_watts"] * r["wall_clock_s"], rel=1e-3)
        assert r["joules_per_token"] == pytest.approx(r["energy_joules"] / r["total_output_tokens"], rel=1e-3)
        assert r["total_output_tokens"] == 16 * 512


def test_out_of_memory_rows(rtx_sweep_rows) -> None:
    errors = [r for r in rtx_sweep_rows if r["error"] is not None]
    assert [(r["batch_size"], r["steps"], r["topk"], r["num_draft_tokens"]) for r in errors] == [(16, 5, 4, 16)] * 3
    for r in errors:
        assert "out of memory" in r["error"]
        assert r["speed_tok_s"] is None and r["avg_power_watts"] is None and r["accept_length"] is None


def test_load_sweep_accepts_the_output(rtx_sweep_rows, tmp_path) -> None:
    path = write_sweep(rtx_sweep_rows, tmp_path / "sim.jsonl")
    sweep = load_sweep(path)
    assert len(sweep.rows) == 228
    assert all(r.provenance == "simulated" for r in sweep.rows)
    assert all(r.utilization_origin == "simulated" for r in sweep.rows if r.trainable)
    data = sweep.training_data(features="pre")
    assert len(data) == 225
    assert not data.allowed_for(16)[ACTIONS.index(Action(5, 4, 16))]
    assert not list(tmp_path.glob(".*.tmp"))


def test_same_seed_same_rows_other_seed_other_rows(rtx_model, rtx_sweep_rows) -> None:
    again = simulate_sweep(rtx_model, seed=0)
    assert json.dumps(again) == json.dumps(rtx_sweep_rows)
    other = simulate_sweep(rtx_model, seed=1)
    assert json.dumps(other) != json.dumps(rtx_sweep_rows)


def test_noise_and_thermal_drift(rtx_sweep_rows) -> None:
    by_cell = defaultdict(list)
    for r in rtx_sweep_rows:
        if r["error"] is None:
            by_cell[(r["batch_size"], r["steps"], r["topk"], r["num_draft_tokens"])].append(r)
    ref = by_cell[(16, 3, 4, 8)]
    speeds = [r["speed_tok_s"] for r in ref]
    assert len(set(speeds)) == 3  # repeats differ
    assert np.std(speeds) / np.mean(speeds) < 0.03
    for r in rtx_sweep_rows:
        if r["error"] is None:
            # a run heats the GPU towards its steady state at the run's power
            assert r["gpu_temp_c"] > r["gpu_temp_c_before"] - 2.0
    temps = [r["gpu_temp_c_before"] for r in rtx_sweep_rows if r["error"] is None]
    assert max(temps) - min(temps) > 5.0
    # consistent with the published rewards: no run ends above 75 C or throttles on this profile
    assert max(r["gpu_temp_c"] for r in rtx_sweep_rows if r["error"] is None) <= 75.0
    assert not any(r["gpu_throttling"] for r in rtx_sweep_rows)


def _recipe(rows) -> dict[int, tuple[int, int, int]]:
    from specband.policies import create_policy
    from specband.sweeps.dataset import Sweep

    sweep = Sweep.from_records(rows)
    policy = create_policy("lookup_table").fit(sweep.training_data())
    return {bs: tuple(ACTIONS[idx]) for bs, (idx, _mean) in policy.picks.items()}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lookup_table_on_simulated_rtx4060_reproduces_the_published_recipe(rtx_model, seed) -> None:
    rows = simulate_sweep(rtx_model, seed=seed)
    assert _recipe(rows) == {1: (3, 4, 8), 4: (3, 4, 8), 8: (3, 4, 8), 16: (3, 2, 4)}


def test_custom_grid_and_bad_arguments(rtx_model) -> None:
    rows = simulate_sweep(rtx_model, batch_sizes=[2], repeats=1, actions=[(0, 0, 0), (3, 4, 8)], seed=5)
    assert [(r["batch_size"], r["steps"]) for r in rows] == [(2, 0), (2, 3)]
    with pytest.raises(ConfigError, match="repeats"):
        simulate_sweep(rtx_model, repeats=0)
    with pytest.raises(ConfigError, match="batch sizes"):
        simulate_sweep(rtx_model, batch_sizes=[0])
    with pytest.raises(ConfigError, match=r"batch sizes must not repeat .*got \[4\] more than once"):
        simulate_sweep(rtx_model, batch_sizes=[4, 1, 4])
    with pytest.raises(ConfigError, match="does not exist"):
        write_sweep(rows, "/nonexistent-folder/x.jsonl")


def test_write_sweep_keeps_an_existing_file_unless_overwrite(rtx_model, tmp_path) -> None:
    rows = simulate_sweep(rtx_model, batch_sizes=[1], repeats=1, actions=[(0, 0, 0)], seed=0)
    path = tmp_path / "sweep.jsonl"
    path.write_text("measured\n")
    with pytest.raises(ConfigError, match=r"output file exists \(pass --force to replace it\)"):
        write_sweep(rows, path)
    assert path.read_text() == "measured\n"
    write_sweep(rows, path, overwrite=True)
    assert [json.loads(line)["batch_size"] for line in path.read_text().splitlines()] == [1]
