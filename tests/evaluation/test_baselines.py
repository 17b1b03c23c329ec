"""The engines' defaults as baselines (issue 29 item 5): sglang's default adaptive tiers run to
their steady state, vLLM with a fixed K, against specband's pick, on the bundled laptop data
(published rows where the config was run, simulated where not) and on simulated H100/H200 rows."""

from __future__ import annotations

import json

import pytest

from specband.contract.actions import Action
from specband.engines.schedule_files import SGLANG_DEFAULT_ADAPTIVE_CONFIG
from specband.evaluation.baselines import (
    SGLANG,
    VLLM,
    VLLM_K,
    compare_with_engine_defaults,
    comparison_table,
    settle_adaptive,
)
from specband.sim import build_model, simulate_sweep
from specband.sweeps.dataset import Sweep, load_sweep

ADAPTIVE_MODULE = "sglang.srt.speculative.adaptive_spec_params"
#: The bundled study's picks (lookup_table, every batch size; docs/evaluation.md).
STUDY_PICKS = {1: Action(3, 4, 8), 4: Action(3, 4, 8), 8: Action(3, 4, 8), 16: Action(3, 2, 4)}


def test_sglangs_default_tiers_are_its_own() -> None:
    """The copy specband reads is sglang 0.5.23's DEFAULT_ADAPTIVE_CONFIG (candidate steps per tier)."""
    steps = {k: v["candidate_steps"] for k, v in SGLANG_DEFAULT_ADAPTIVE_CONFIG.items()}
    assert steps == {"1": [1, 3, 5, 7], "8": [0, 1, 3], "32": [0, 1], "64": [0]}


@pytest.mark.parametrize(
    ("tier", "accepted", "settled"),
    [
        ("1", {1: 0.9, 3: 2.7, 5: 3.2, 7: 3.5}, (5,)),  # climbs one tier: 2.7 > 2.5, then 3.2 <= 4.5
        ("1", {1: 0.9, 3: 1.04, 5: 3.2, 7: 3.5}, (3,)),  # the laptop pair's (3,1,4): stays
        ("8", {1: 0.3, 3: 0.4}, (0, 1)),  # drops to 0, probes 1, drops again: alternates
        ("32", {1: 0.8}, (1,)),  # starts at its middle candidate, 1 (3 is not one of its)
    ],
)
def test_the_steady_state_is_where_sglangs_own_controller_ends(tier, accepted, settled, require_module) -> None:
    entry = SGLANG_DEFAULT_ADAPTIVE_CONFIG[tier]
    cycle, trace = settle_adaptive(entry, 3, accepted.get)
    assert cycle == settled and trace[0].startswith("starts at")
    adaptive = require_module(ADAPTIVE_MODULE)
    slot = adaptive.AdaptiveStepSlot(initial_steps=3, cfg=dict(entry))
    visited = []
    for _ in range(600):  # batches of 10 requests whose mean accepted drafts is accepted[steps]
        mean = accepted.get(slot.current_steps, 0.0)
        hi = round((mean - int(mean)) * 10)
        slot.update([int(mean) + 1] * hi + [int(mean)] * (10 - hi))
        visited.append(slot.current_steps)
    assert set(visited[-200:]) == set(settled)


@pytest.fixture(scope="module")
def laptop() -> Sweep:
    return load_sweep(None)


def test_on_the_bundled_laptop_data(laptop: Sweep) -> None:
    comp = compare_with_engine_defaults(laptop, STUDY_PICKS)
    assert comp.batch_sizes() == [1, 4, 8, 16] and len(comp.rows) == 12
    pick16, sglang16, vllm16 = (comp.at(16, w) for w in ("specband", SGLANG, VLLM))
    # the pick at bs 16: the mean of the five published (3,2,4) rows
    assert pick16.figures is not None and pick16.figures.from_data
    assert pick16.figures.speed_tok_s == pytest.approx(118.135, abs=0.01)
    assert pick16.figures.energy_utilization == pytest.approx(0.970, abs=1e-3) and pick16.figures.band == "in"
    assert pick16.figures.source == "published, 5 row(s)"
    # sglang's tier 8 starts at 3 steps and stays there: (3,1,4), never run at bs 16: simulated
    assert sglang16.configs == (Action(3, 1, 4),) and "starts at 3" in sglang16.note
    assert sglang16.figures is not None and not sglang16.figures.from_data
    assert sglang16.figures.source == "simulated (rtx4060-laptop)"
    assert sglang16.figures.speed_tok_s == pytest.approx(113.8, abs=3.0)
    # its interval: the simulator's worst speed error on the data's own 17 configs (3.3 %)
    low, high = sglang16.figures.speed_interval  # type: ignore[misc]
    assert high / sglang16.figures.speed_tok_s - 1 == pytest.approx(0.033, abs=0.005)
    assert low < sglang16.figures.speed_tok_s < high and pick16.figures.speed_interval is None
    assert sglang16.figures.speed_tok_s < pick16.figures.speed_tok_s
    assert vllm16.configs == (Action(VLLM_K, 1, VLLM_K + 1),)
    assert "read as sglang's chain (3,1,4)" in vllm16.note
    # bs 4 ran (3,1,4): the sglang default's figures are the published row's
    sglang4 = comp.at(4, SGLANG)
    assert sglang4.figures is not None and sglang4.figures.from_data
    assert sglang4.figures.speed_tok_s == pytest.approx(129.574, abs=1e-3)
    assert sglang4.figures.energy_utilization == pytest.approx(0.912, abs=1e-3) and sglang4.figures.band == "below"
    assert comp.at(4, "specband").figures.reward > sglang4.figures.reward  # type: ignore[union-attr]
    assert any("on the data's own 17 configs its speed is off by 2.0% (median), 3.3% at worst" in n for n in comp.notes)
    assert any("adaptive_spec_params.py" in n and "0.5.23" in n for n in comp.notes)
    title, headers, rows, notes = comparison_table(comp)
    assert "published data" in title and headers[-1] == "figures from"
    assert rows[10][:3] == ["16", "sglang adaptive (default tiers)", "(3,1,4)"]
    assert (
        "bs 4, sglang tier 1 (candidate steps [1, 3, 5, 7]): starts at 3, accepted drafts 1.04 at 3: stays" in notes[-3]
    )


@pytest.mark.parametrize("profile", ["h100-sxm", "h200"])
def test_on_simulated_datacenter_rows(profile: str) -> None:
    model = build_model(profile, target_config="llama-3.1-8b-instruct", draft_config="eagle3-llama-3.1-8b-instruct")
    sweep = Sweep.from_records(simulate_sweep(model, batch_sizes=(1, 16), repeats=1), path=f"{profile}.jsonl")
    comp = compare_with_engine_defaults(sweep, {1: Action(5, 1, 6), 16: Action(5, 1, 6)})
    assert comp.data == "simulated"
    for r in comp.rows:  # every config is in the simulated rows: labelled simulated, never measured
        assert r.figures is not None and r.figures.source == "simulated, 1 row(s)"
        assert r.figures.energy_utilization is not None and r.figures.energy_utilization < 0.95
    pick, sglang = comp.at(1, "specband"), comp.at(1, SGLANG)
    assert sglang.configs == (Action(3, 1, 4),)  # the 8B pair accepts about 1.9 drafts at 3 steps: stays
    assert pick.figures.speed_tok_s > sglang.figures.speed_tok_s  # type: ignore[union-attr]


def test_evaluate_prints_the_comparison(run_cli, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    res = run_cli("evaluate", "--algo", "lookup_table", "--bootstrap", "50")
    assert res.exit_code == 0, res.stderr
    assert "specband's pick against the engines' defaults (published data)" in res.stdout
    row = next(line for line in res.stdout.splitlines() if line.startswith("│ 16 ") and "sglang adaptive" in line)
    assert "(3,1,4)" in row and "simulated (rtx4060-laptop)" in row and "above" in row
    doc = json.loads(run_cli("evaluate", "--algo", "lookup_table", "--bootstrap", "50", "--json").stdout)
    rows = doc["engine_defaults"]["rows"]
    assert [(r["batch_size"], r["who"]) for r in rows[:3]] == [
        (1, "specband (lookup_table)"),
        (1, "sglang adaptive (default tiers)"),
        (1, "vLLM num_speculative_tokens=3"),
    ]
    assert doc["engine_defaults"]["vllm_k"] == VLLM_K


def test_schedule_explains_against_the_engines_defaults(run_cli, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    res = run_cli("schedule", "-e", "sglang", "--out", "s.json", "--format", "json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)["engine_defaults"]["rows"]
    at4 = {r["who"]: r for r in rows if r["batch_size"] == 4}
    assert at4["specband (lookup_table schedule)"]["configs"] == [[3, 1, 4]]
    sglang4 = at4["sglang adaptive (default tiers)"]
    assert sglang4["configs"] == [[3, 1, 4]] and sglang4["figures"]["from_data"] is True
    assert sglang4["figures"]["speed_tok_s"] == pytest.approx(129.574, abs=1e-3)
    assert sglang4["figures"]["source"] == "published, 1 row(s)"
    at16 = {r["who"]: r for r in rows if r["batch_size"] == 16}
    assert at16["specband (lookup_table schedule)"]["figures"]["reward"] == 0.0  # the baseline: speculation off
    assert at16["sglang adaptive (default tiers)"]["figures"]["source"] == "simulated (rtx4060-laptop)"
    text = run_cli("schedule", "-e", "sglang", "--out", "s.json", "--force")
    assert "specband's pick against the engines' defaults (published data)" in text.stdout
    assert "note: the folder keeps no accept lengths: sglang's controller moves on the simulator's" in text.stderr


def test_emulated_rows_fill_the_gaps_with_the_emulators_own_model() -> None:
    """Emulated rows name the pair as given to the emulator ("m", "d"); the emulator runs the
    bundled 1B pair on the laptop profile, so that is what fills configs the sweep did not run."""
    from tests.deploy.test_band_trade import _rows

    sweep = Sweep.from_records(_rows(), path="emulated.jsonl")
    comp = compare_with_engine_defaults(sweep, {16: Action(3, 2, 4)})
    assert comp.data == "emulated"
    pick, sglang = comp.at(16, "specband"), comp.at(16, SGLANG)
    assert pick.figures is not None and pick.figures.source == "emulated, 1 row(s)"
    assert pick.figures.energy_utilization == pytest.approx(0.944, abs=1e-6)
    assert sglang.figures is not None and sglang.figures.source == "simulated (rtx4060-laptop)"
    assert comp.simulator == "profile rtx4060-laptop, llama-3.2-1b-instruct + eagle3-llama-3.2-1b-instruct"
