"""Acceptance fitted to measured accept lengths (specband.sim.acceptance_fit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.sim.specbundle_h200 import (
    CHAINS_PREDICTED,
    COMBOS,
    MEASURED,
    SPECBUNDLE_H200,
    TREES_PREDICTED,
    write_bench_file,
)

from specband.core.errors import DataError
from specband.engines.probe_file import reading_sha256
from specband.sim.acceptance import resolve_acceptance
from specband.sim.acceptance_fit import (
    AcceptanceObservation,
    fit_acceptance,
    histogram_position_accept,
    read_acceptance_file,
)
from specband.sim.draft_tree import AcceptParams, accept_length, tree_node_values
from specband.sim.profile import load_profile

PAIR = ("meta-llama/Llama-3.1-8B-Instruct", "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B")


@pytest.fixture(scope="module")
def prior() -> AcceptParams:
    """The bundled MT-bench profile of the Llama-3.1-8B pair."""
    return resolve_acceptance(load_profile("h200"), *PAIR).params


@pytest.mark.parametrize("combo", COMBOS)
def test_two_chains_predict_the_middle_chain_and_bound_the_trees(
    tmp_path: Path, prior: AcceptParams, combo: tuple[str, str]
) -> None:
    path = write_bench_file(tmp_path / "bench.jsonl", *combo)
    source = read_acceptance_file(path)
    assert source.kind == "bench" and source.label == f"fitted to 2 configs of {path}"
    fit = fit_acceptance(source, prior=prior)
    assert fit.n_configs == 2 and fit.free == ("first_token_accept", "depth_decay")
    for r in fit.residuals:
        assert abs(r.relative_error) < 1e-3  # two numbers, two parameters
    rows = SPECBUNDLE_H200[combo]
    for action in CHAINS_PREDICTED:
        est, lo, hi = fit.accept_length_interval(action)
        measured = rows[action][1]
        assert abs(est / measured - 1) < 0.02
        assert lo <= measured <= hi
        assert (hi - lo) / est < 0.06  # tight between measured depths
    for action in TREES_PREDICTED:
        est, lo, hi = fit.accept_length_interval(action)
        measured = rows[action][1]
        assert lo <= measured <= hi
        assert (hi - lo) / est > 0.3  # wide: no tree was measured


def test_interval_widens_outside_the_measured_depths(prior: AcceptParams) -> None:
    rows = SPECBUNDLE_H200[("mtbench", "old")]
    fit = fit_acceptance([AcceptanceObservation(a, rows[a][1]) for a in MEASURED], prior=prior)
    inside = fit.accept_length_interval((5, 1, 6))
    outside = fit.accept_length_interval((1, 1, 2))
    assert (outside[2] - outside[1]) / outside[0] > 1.5 * (inside[2] - inside[1]) / inside[0]
    assert fit.accept_length_interval((0, 0, 0)) == (1.0, 1.0, 1.0)
    for action in ((1, 1, 2), (7, 1, 8), (7, 4, 8), (5, 8, 32)):
        _, lo, hi = fit.accept_length_interval(action)
        assert 1.0 <= lo <= hi <= action[0] + 1


def test_measured_trees_free_tree_parameters_and_tighten(prior: AcceptParams) -> None:
    rows = SPECBUNDLE_H200[("humaneval", "specforge")]
    obs = [AcceptanceObservation(a, rows[a][1]) for a in (*MEASURED, *TREES_PREDICTED)]
    fit = fit_acceptance(obs, prior=prior)
    assert "chain_factor" in fit.free and "rank2_ratio" in fit.free
    chains_only = fit_acceptance(obs[:2], prior=prior)
    for action in TREES_PREDICTED:
        est, lo, hi = fit.accept_length_interval(action)
        assert abs(est / rows[action][1] - 1) < 0.05
        _, lo2, hi2 = chains_only.accept_length_interval(action)
        assert hi - lo < 0.5 * (hi2 - lo2)


def test_per_position_acceptance_is_fitted(prior: AcceptParams) -> None:
    truth = AcceptParams(first_token_accept=0.7, depth_decay=0.9, chain_factor=1.1)
    action = (5, 1, 6)
    positions = tree_node_values(action, truth)
    obs = [AcceptanceObservation(action, accept_length(action, truth), 100.0, positions)]
    fit = fit_acceptance(obs, prior=prior)
    assert fit.free == ("first_token_accept", "depth_decay")
    assert fit.params.first_token_accept == pytest.approx(0.7, abs=0.02)
    assert abs(fit.accept_length((7, 1, 8)) / accept_length((7, 1, 8), truth) - 1) < 0.03


def test_histogram_to_positions() -> None:
    # 10 steps accepted 0 tokens, 30 one, 60 two: P(>=1) = 0.9, P(>=2) = 0.6, P(>=3) = 0
    assert histogram_position_accept([10, 30, 60], 3) == pytest.approx((0.9, 0.6, 0.0))
    with pytest.raises(ValueError, match="more than steps"):
        histogram_position_accept([1, 2, 3, 4, 5], 3)
    with pytest.raises(ValueError, match="no verify step"):
        histogram_position_accept([0, 0], 3)


def _probe(path: Path, **acceptance: object) -> Path:
    data = {
        "format": "specband-probe",
        "version": 2,
        "provenance": "measured",
        "engine": "vllm",
        "engine_version": None,
        "url": "http://127.0.0.1:8000",
        "target": "meta-llama/Llama-3.1-8B-Instruct",
        "draft": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "action": [3, 1, 4],
        "flags": {},
        "acceptance": {
            "accept_length": 2.9,
            "num_drafts": 1234,
            "verify_steps": None,
            "position_accept": None,
            "accept_histogram": None,
            "source": "server metrics",
            **acceptance,
        },
        "batch_sizes_seen": [8],
        "batch_size_source": "vllm:num_requests_running",
        "power": None,
        "power_note": None,
        "requests_sent": 8,
        "max_requests": 64,
        "notes": [],
        "probed_at_unix": 1796212345.0,
        "specband_version": "0",
    }
    data["reading_sha256"] = reading_sha256(data)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def test_probe_file(tmp_path: Path) -> None:
    src = read_acceptance_file(_probe(tmp_path / "p.json", position_accept=[0.8, 0.6, 0.5]))
    assert src.kind == "probe" and src.engine == "vllm" and src.draft == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    (obs,) = src.observations
    assert obs.action == (3, 1, 4) and obs.accept_length == 2.9 and obs.weight == 1234.0
    assert obs.position_accept == (0.8, 0.6, 0.5) and obs.batch_size == 8
    src = read_acceptance_file(_probe(tmp_path / "h.json", accept_histogram=[10, 20, 30, 40]))
    assert src.observations[0].position_accept == pytest.approx((0.9, 0.7, 0.4))
    assert src.label == f"fitted to 1 config of {tmp_path / 'h.json'}"


def test_sweep_file_skips_baseline_and_failed_rows(tmp_path: Path) -> None:
    rows = [
        {"batch_size": 4, "steps": 0, "topk": 0, "num_draft_tokens": 0, "accept_length": 1.0, "speed_tok_s": 50},
        {
            "batch_size": 4,
            "steps": 3,
            "topk": 1,
            "num_draft_tokens": 4,
            "accept_length": 2.5,
            "speed_tok_s": 80,
            "target_model": "t",
            "draft_model": "d",
        },
        {"batch_size": 8, "steps": 3, "topk": 1, "num_draft_tokens": 4, "accept_length": 2.7, "speed_tok_s": 90},
        {"batch_size": 8, "steps": 5, "topk": 4, "num_draft_tokens": 8, "accept_length": None, "error": "oom"},
    ]
    path = tmp_path / "sweep.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    src = read_acceptance_file(path)
    assert src.kind == "sweep" and len(src.observations) == 2 and (src.target, src.draft) == ("t", "d")
    assert src.label == f"fitted to 1 config of {path}"
    fit = fit_acceptance(src, prior=AcceptParams())
    (res,) = fit.residuals
    assert res.measured == pytest.approx(2.6) and res.observations == 2
    assert res.fitted == pytest.approx(2.6, rel=1e-3)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty file"),
        (
            '{"batch_size": 1, "steps": 3, "topk": 1, "num_draft_tokens": 4, "speed": 3}\n',
            r"bench.jsonl:1: field 'acc_length': required field is missing",
        ),
        (
            '{"batch_size": 1, "steps": 3, "topk": 1, "num_draft_tokens": 4, "acc_length": 9, "speed": 3}\n',
            r":1: field 'acc_length': accept length 9 is outside \[1, steps \+ 1 = 4\]",
        ),
        (
            '{"batch_size": 1, "steps": 3, "topk": 1, "num_draft_tokens": 9, "acc_length": 2, "speed": 3}\n',
            r":1: field 'steps': \(3, 1, 9\) is not a valid sglang config",
        ),
        (
            '{"batch_size": 1, "steps": 0, "topk": 0, "num_draft_tokens": 0, "acc_length": 1, "speed": 3}\n',
            "no measured speculative config",
        ),
        ('{"format": "other"}', "field 'format': unknown format 'other'"),
        ("not json\n", r":1: not valid JSON"),
    ],
)
def test_bad_files_are_one_error_naming_file_line_field(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bench.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=match):
        read_acceptance_file(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file"):
        read_acceptance_file(tmp_path / "nope.jsonl")


def test_a_model_refitted_as_a_sweep_goes(prior: AcceptParams) -> None:
    from specband.sim import build_model
    from specband.sim.model import with_fitted_acceptance

    model = build_model("h200", target_config="llama-3.1-8b-instruct")
    rows = SPECBUNDLE_H200[("humaneval", "old")]
    first = with_fitted_acceptance(model, [AcceptanceObservation((3, 1, 4), rows[(3, 1, 4)][1])], label="first")
    assert first.acceptance.source == "first" and first.accept_length((3, 1, 4)) == pytest.approx(3.047, rel=1e-3)
    both = [AcceptanceObservation(a, rows[a][1]) for a in MEASURED]
    second = with_fitted_acceptance(first, both, label="second")
    assert second.acceptance.fit is not None and second.acceptance.fit.prior == model.acceptance.params
    assert second.accept_length((7, 1, 8)) == pytest.approx(4.096, rel=1e-3)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"action": "abc"}, r"p.json: field 'action': expected \[steps, topk, num_draft_tokens\], got 'abc'"),
        ({"acceptance": None}, r"p.json: field 'acceptance': expected an object"),
        (
            {"acceptance": {"accept_length": 2.5, "accept_histogram": [1, "x"]}},
            r"p.json: field 'acceptance.accept_histogram': expected a finite number, got 'x'$",
        ),
        (
            {"acceptance": {"accept_length": 2.5, "accept_histogram": [1, 2, 3, 4, 5]}},
            r"p.json: field 'acceptance.accept_histogram': has 5 bins, more than steps \+ 1 = 4$",
        ),
        ({"acceptance": {"accept_length": float("nan")}}, r"field 'acceptance.accept_length': expected a finite"),
    ],
)
def test_a_bad_probe_file_is_one_error_naming_the_field(tmp_path: Path, change: dict, match: str) -> None:
    path = _probe(tmp_path / "p.json")
    data = json.loads(path.read_text())
    data.update(change)
    path.write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"field 'reading_sha256': does not match the reading"):
        read_acceptance_file(path)  # edited after the probe: refused by its digest first
    data["reading_sha256"] = reading_sha256(data)
    path.write_text(json.dumps(data))
    with pytest.raises(DataError, match=match):
        read_acceptance_file(path)  # digest rewritten too: the value itself is still checked


def _per_position(first: float, ratio: float, steps: int) -> float:
    """Accept length of a chain whose i-th position is accepted with ``first * ratio**(i-1)``
    (the two-parameter per-position model of issue 29)."""
    total, path = 1.0, 1.0
    for depth in range(1, steps + 1):
        path *= first * ratio ** (depth - 1)
        total += path
    return total


@pytest.mark.parametrize("first", [0.4, 0.55, 0.7, 0.85])
@pytest.mark.parametrize("ratio", [0.85, 0.95, 1.0])
def test_two_chains_of_any_workload_pin_the_others(prior: AcceptParams, first: float, ratio: float) -> None:
    # workloads from low acceptance ((3,1,4) ~ 1.6, as FinanceQA's 1.72) to high (~3.3)
    obs = [AcceptanceObservation(a, _per_position(first, ratio, a[0])) for a in MEASURED]
    fit = fit_acceptance(obs, prior=prior)
    for action, tolerance in (((5, 1, 6), 0.02), ((1, 1, 2), 0.05)):
        truth = _per_position(first, ratio, action[0])
        est, lo, hi = fit.accept_length_interval(action)
        assert abs(est / truth - 1) < tolerance and lo <= truth <= hi


def test_a_device_is_refused_with_its_article() -> None:
    """``/dev/zero`` is not read (a device): one line naming the file and what to give."""
    from specband.sim.acceptance_fit import read_acceptance_file

    with pytest.raises(DataError) as caught:
        read_acceptance_file(Path("/dev/zero"))
    assert str(caught.value) == "/dev/zero: not a regular file (a device, FIFO or socket); give an acceptance file"
