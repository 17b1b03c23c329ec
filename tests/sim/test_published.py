"""The simulator held to published datacenter measurements (issue 19 items 1-4)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from specband.contract.actions import Action
from specband.core.errors import ConfigError
from specband.sim import build_model, simulate_sweep
from specband.sim.acceptance import resolve_acceptance
from specband.sim.power import serving_power_w, unmeasured_power_note
from specband.sim.profile import load_profile
from specband.sim.published import (
    TOLERANCE,
    calibration_errors,
    load_published_reference,
    published_report,
)

PAIR_8B = {"target_config": "llama-3.1-8b-instruct", "draft_config": "eagle3-llama-3.1-8b-instruct"}
#: the simulator page of the docs site, where the README's calibration figures moved (issue 22)
README = Path(__file__).resolve().parents[2] / "docs" / "simulator.md"


@pytest.fixture(scope="module")
def report():
    return published_report()


def test_every_bundled_row_names_its_source_and_method() -> None:
    rows = load_published_reference()
    assert len(rows) == 34 and len({r.id for r in rows}) == len(rows)
    for r in rows:
        assert r.source and r.method, r.id
        assert r.criteria or r.note.startswith("not simulated"), r.id
    speeds = {r.id: r.value for r in rows if r.metric == "speed_tok_s"}
    # copied from published_datacenter.md section 1 and 2
    assert speeds["specbundle-7-1-8-speed"] == 454.7 and speeds["eagle3-t4-baseline-speed"] == 158.34
    power = next(r for r in rows if r.metric == "decode_power_w")
    assert power.range == (137.0, 300.0) and power.profile == "h200"


def test_every_speed_and_accept_length_is_within_ten_percent(report) -> None:
    checked = [c for c in report.comparisons if c.row.metric in ("speed_tok_s", "accept_length", "speedup")]
    simulated = [c for c in checked if c.simulated is not None]
    assert len(simulated) == 16
    for c in simulated:
        assert abs(c.error) <= TOLERANCE, (c.row.id, c.simulated, c.row.value)
        assert c.within is True
    assert report.met


def test_chain_and_tree_ordering_at_bs1_on_h200_matches(report) -> None:
    _measured, _simulated, kept = report.ordering["h200"]
    assert kept
    sim = {
        c.row.action: c.simulated
        for c in report.comparisons
        if c.row.id.startswith("specbundle") and c.row.metric == "speed_tok_s"
    }
    chains = [sim[Action(3, 1, 4)], sim[Action(5, 1, 6)], sim[Action(7, 1, 8)]]
    trees = [sim[Action(5, 3, 6)], sim[Action(7, 4, 8)]]
    assert min(chains) > max(trees) > sim[Action(0, 0, 0)]
    # the measured gap: chains 34-49 % faster than trees
    assert 1.2 < sim[Action(5, 1, 6)] / sim[Action(5, 3, 6)] < 1.6


def test_8b_decode_power_sits_inside_the_published_decode_range(report) -> None:
    row = next(c for c in report.comparisons if c.row.metric == "decode_power_w")
    assert row.within is True and 137.0 <= row.simulated[0] < row.simulated[1] <= 300.0
    model = build_model("h200", **PAIR_8B)
    for bs in (1, 2, 4, 8, 16, 32, 64):
        assert 137.0 <= model.decode_power_w(bs, (0, 0, 0)) <= 300.0, bs
    # far below the 700 W limit: the band needs an operator's power limit
    assert model.predict(1, (5, 1, 6), 55.0).avg_power_w / 700.0 < 0.3


def test_decode_power_is_a_function_a_power_limit_can_act_on() -> None:
    model = build_model("h200", **PAIR_8B)
    full = model.decode_power_w(8, (3, 1, 4))
    slow = model.decode_power_w(8, (3, 1, 4), clock_fraction=0.7)
    assert slow < full and full == pytest.approx(
        model.predict(8, (3, 1, 4), model.profile.reference_temp_c).avg_power_w
    )
    with pytest.raises(ConfigError, match="clock_fraction"):
        model.decode_power_w(8, (3, 1, 4), clock_fraction=0.0)


def test_serving_power_exceeds_decode_power_and_rises_with_batch_size() -> None:
    model = build_model("h100-sxm", **PAIR_8B)
    last = 0.0
    for bs in (8, 32, 128):
        serving = serving_power_w(model, bs, (0, 0, 0))
        assert model.decode_power_w(bs, (0, 0, 0)) < serving
        assert serving > last
        last = serving
    assert 0.65 < serving_power_w(model, 8, (0, 0, 0)) / 700.0 < 0.75  # ML.ENERGY: 486 W (69 %)
    # a GPU without a serving fit borrows the nearest measured class's (the A100: the H100's)
    a100 = build_model("a100-sxm4-80gb", **PAIR_8B)
    assert serving_power_w(a100, 8, (0, 0, 0)) < serving_power_w(model, 8, (0, 0, 0))


def test_calibration_errors_are_readable_per_profile_and_metric(report) -> None:
    errors = calibration_errors("h200")
    assert set(errors) == {"speed_tok_s", "accept_length"}
    assert errors["accept_length"].rows == 5 and errors["accept_length"].worst_abs_error < 0.02
    assert errors["speed_tok_s"].worst_abs_error == pytest.approx(
        max(abs(c.error) for c in report.comparisons if c.row.profile == "h200" and c.row.metric == "speed_tok_s")
    )
    h100 = calibration_errors("h100-sxm")
    assert set(h100) == {"speed_tok_s", "speedup", "serving_power_w"}
    assert calibration_errors("rtx4060-laptop") == {}


def test_acceptance_belongs_to_the_pair_and_workload() -> None:
    h100, rtx = load_profile("h100-sxm"), load_profile("rtx4060-laptop")
    target, draft = "meta-llama/Llama-3.1-8B-Instruct", "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B"
    chosen = resolve_acceptance(h100, target, draft)
    assert chosen.profile == "llama-3.1-8b/eagle3-8b/mt-bench" and not chosen.borrowed
    # the same on another GPU: acceptance is not the GPU's
    assert resolve_acceptance(rtx, target, draft).params == chosen.params
    other = resolve_acceptance(h100, target, draft, "humaneval")
    assert other.borrowed and "borrows llama-3.1-8b/eagle3-8b/mt-bench" in other.note and "humaneval" in other.note
    unknown = resolve_acceptance(h100, "Qwen/Qwen3-8B", "someone/eagle3-qwen3")
    assert unknown.borrowed and unknown.params == h100.accept_params()
    assert "borrows llama-3.2-1b/specforge-eagle3/specband-sweep" in unknown.note
    small = resolve_acceptance(
        rtx, "unsloth/Llama-3.2-1B-Instruct", "rescommons/SpecForge-EAGLE3-Llama-3.2-1B-Instruct"
    )
    assert not small.borrowed and small.params == rtx.accept_params()
    with pytest.raises(ConfigError, match="--workload"):
        resolve_acceptance(h100, target, draft, "MT bench; rm")
    model = build_model("h200", **PAIR_8B)
    assert model.accept_length((3, 1, 4)) == pytest.approx(2.93, rel=0.02)
    assert not model.warnings


def test_rows_of_a_published_fit_profile_say_so() -> None:
    rows = simulate_sweep(build_model("h200", **PAIR_8B), batch_sizes=[1], repeats=1, seed=0)
    assert len(rows) == 19
    for r in rows:
        assert r["power_source"].startswith("published fit (") and "2605.11999" in r["power_source"]
        assert "power_measured" not in r and "power_w_range" not in r
    note = unmeasured_power_note(rows)
    assert note.startswith("power SIMULATED from a published fit (") and "19 row(s)" in note


def test_cli_report_against_published_datacenter(run_cli) -> None:
    res = run_cli("simulate", "--calibration-report", "--against", "published-datacenter")
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    for row in load_published_reference():
        assert row.id in out
    assert "ordering by speed at bs 1 on h200" in out and "[kept]" in out
    assert out.rstrip().endswith("decode power inside the published range): met")
    line = next(ln for ln in out.splitlines() if ln.startswith("specbundle-3-1-4-accept"))
    assert line.split()[-3:-1] == ["2.93", "2.924"]
    res = run_cli(
        "simulate",
        "--calibration-report",
        "--against",
        "published-datacenter",
        "--target-config",
        "llama-3.1-8b-instruct",
    )
    assert res.exit_code == 2 and len(res.stderr.splitlines()) == 1 and "published-datacenter" in res.stderr


def test_simulate_workload_option_borrows_and_says_so(run_cli, tmp_path) -> None:
    out = tmp_path / "h.jsonl"
    args = ("simulate", "--profile", "h200", "--target-config", "llama-3.1-8b-instruct", "--draft-config")
    res = run_cli(
        *args,
        "eagle3-llama-3.1-8b-instruct",
        "--workload",
        "humaneval",
        "--batch-sizes",
        "1",
        "--repeats",
        "1",
        "--out",
        out,
    )
    assert res.exit_code == 0, res.stderr
    assert "borrows llama-3.1-8b/eagle3-8b/mt-bench" in res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    chain = next(r for r in rows if (r["steps"], r["topk"]) == (3, 1))
    assert chain["accept_length"] == pytest.approx(2.93, abs=0.1)


def test_simulator_page_states_the_published_errors(report) -> None:
    text = README.read_text()
    section = text[
        text.index("**Held to published measurements**") : text.index("**Serving power is not decode power.**")
    ]

    def pct(values):
        return f"median {100 * statistics.median(values):.1f} %, worst {100 * max(values):.1f} %"

    for (profile, metric), e in report.errors.items():
        if metric in ("speed_tok_s", "accept_length", "speedup") and e.rows > 1:
            assert f"median {100 * e.median_abs_error:.1f} %, worst {100 * e.worst_abs_error:.1f} %" in section, (
                profile,
                metric,
            )
    speedups = [c for c in report.comparisons if c.row.metric == "speedup"]
    assert "/".join(f"{100 * c.error:+.1f}" for c in speedups) + " %" in section
    everything = [abs(c.error) for c in report.comparisons if c.error is not None and c.row.metric != "serving_power_w"]
    assert pct(everything) + " (criterion: 10 %)" in section
    for role in ("fit", "held-out"):
        serving = [c for c in report.comparisons if c.row.metric == "serving_power_w" and c.row.role == role]
        assert "/".join(f"{100 * c.error:+.1f}" for c in serving) + " %" in section, role
    power = next(c for c in report.comparisons if c.row.metric == "decode_power_w")
    assert f"simulated {power.simulated[0]:.0f}-{power.simulated[1]:.0f} W" in section


def test_simulate_extended_action_set_and_train_refuses_it(run_cli, tmp_path) -> None:
    from specband.contract.actions import EXTENDED_ACTIONS

    out = tmp_path / "ext.jsonl"
    res = run_cli(
        "simulate", "--profile", "h200", *("--target-config", "llama-3.1-8b-instruct"),
        *("--draft-config", "eagle3-llama-3.1-8b-instruct"), "--actions", "extended",
        *("--batch-sizes", "1", "--repeats", "1", "--out", out),
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert "[extended action set: 44 actions]" in res.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["steps"], r["topk"], r["num_draft_tokens"]) for r in rows] == [tuple(a) for a in EXTENDED_ACTIONS]
    speed = {(r["steps"], r["topk"], r["num_draft_tokens"]): r["speed_tok_s"] for r in rows}
    # SpecBundle's best measured chain, which the contract cannot express
    assert speed[(7, 1, 8)] > speed[(3, 1, 4)] and speed[(7, 1, 8)] > speed[(7, 4, 8)]
    # the published model formats stay contract-only: train refuses extended rows in one line
    res = run_cli("train", out, "--out", tmp_path / "models", "--algo", "lookup_table")
    assert res.exit_code == 2 and len(res.stderr.splitlines()) == 1
    assert "not one of the 19 contract actions" in res.stderr and "ext.jsonl:" in res.stderr
    assert not (tmp_path / "models").exists()
    res = run_cli("simulate", "--actions", "all", "--out", tmp_path / "x.jsonl")
    assert res.exit_code == 2 and "--actions must be one of contract, extended" in res.stderr


def test_committed_profiles_hold_what_the_published_fit_gives() -> None:
    from specband.sim.published_fit import fit_all

    fitted = fit_all()
    assert set(fitted) == {"h100-sxm", "h200", "a100-sxm4-80gb"}
    for name, values in fitted.items():
        prof = load_profile(name)
        for key, value in values.items():
            if isinstance(value, str):
                assert getattr(prof, key) == value, (name, key)
            else:
                assert getattr(prof, key) == pytest.approx(value, rel=0.01, abs=1e-9), (name, key)
