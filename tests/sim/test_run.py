"""``specband simulate``'s library calls (:mod:`specband.sim.run`): the plan checks the
output before any model loads, the run writes the rows it returns, and the summary line
carries the labels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specband.core.errors import ConfigError
from specband.sim.request import SimulateRequest
from specband.sim.run import plan_simulation, run_simulation


def test_a_simulated_sweep_writes_the_rows_it_returns_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "sim.jsonl"
    plan = plan_simulation(SimulateRequest(out=str(out), batch_sizes="1,4", repeats=1, seed=3))
    assert plan.out_path == out and plan.batch_sizes == [1, 4] and len(plan.actions) == 19
    written = run_simulation(plan)
    lines = out.read_text().splitlines()
    assert len(written.rows) == len(lines) == 2 * 19
    assert {json.loads(line)["provenance"] for line in lines} == {"simulated"}
    acceptance, cost = written.notes
    assert acceptance == "acceptance profile llama-3.2-1b/specforge-eagle3/specband-sweep"
    assert cost.startswith("speed intervals (95 %): step time of profile rtx4060-laptop given the measured accept")
    assert "over 29 rows (the published RTX 4060 Laptop live rows" in cost
    assert written.summary() == (
        f"SIMULATED sweep: 38 rows ({written.error_rows} error rows) from profile rtx4060-laptop"
        f"{written.labels()}, seed 3 -> {out}"
    )


def test_power_limits_add_their_note_and_rows_per_limit(tmp_path: Path) -> None:
    plan = plan_simulation(
        SimulateRequest(out=str(tmp_path / "pl.jsonl"), batch_sizes="4", repeats=1, power_limits="0.8,1.0")
    )
    written = run_simulation(plan)
    assert len(written.rows) == 2 * 19
    assert len({row["power_limit_watts"] for row in written.rows}) == 2
    assert written.notes[-1].startswith("2 power limit(s) ")


def test_an_existing_out_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    out = tmp_path / "sim.jsonl"
    out.write_text("keep\n")
    with pytest.raises(ConfigError, match="output file exists"):
        plan_simulation(SimulateRequest(out=str(out), profile="no-such-profile"))
    assert out.read_text() == "keep\n"


def test_extended_actions_are_labelled(tmp_path: Path) -> None:
    plan = plan_simulation(
        SimulateRequest(out=str(tmp_path / "x.jsonl"), batch_sizes="1", repeats=1, actions="extended")
    )
    assert "[extended action set: 44 actions]" in run_simulation(plan).labels()
