"""``--acceptance-from`` fitted to everything the file measured (issue 35 item 5): the step time
scaled to the measured speeds per batch size; the reader checks every field as ``import-bench``
does, refuses a file mixing engines or measured with emulated rows, and a probe file of another
version."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from specband.core.errors import DataError
from specband.engines.probe_file import reading_sha256
from specband.sim import build_model
from specband.sim.acceptance_file import read_acceptance_file
from specband.sim.cost_fit import COST_FIT_SD
from specband.sim.speed_interval import speed_interval

PAIR = ("--target-config", "llama-3.1-8b-instruct")
#: The brief's bound on (5,1,6) predicted from the baseline, (3,1,4) and (7,1,8).
TOLERANCE = 0.05


def _specbundle() -> dict:
    path = resources.files("specband").joinpath("data/specbundle_h200_8b.json")
    return json.loads(path.read_text(encoding="utf-8"))


def _bench(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _bench_row(action: tuple[int, int, int], accept: float, speed: float, bs: int = 1) -> dict:
    steps, topk, tokens = action
    return {
        "batch_size": bs,
        "steps": steps,
        "topk": topk,
        "num_draft_tokens": tokens,
        "acc_length": accept,
        "speed": speed,
    }


def _pairs() -> list[tuple[str, str]]:
    data = _specbundle()
    return [(wl, dr) for wl, w in data["workloads"].items() for dr in w["drafts"]]


@pytest.mark.parametrize("combo", _pairs(), ids=["-".join(c) for c in _pairs()])
def test_two_chains_and_the_baseline_predict_the_middle_chain_within_five_percent(tmp_path, combo) -> None:
    workload, draft = combo
    w = _specbundle()["workloads"][workload]
    rows = {tuple(int(x) for x in k.split(",")): v for k, v in w["drafts"][draft].items()}
    bench = _bench(
        tmp_path / "b.jsonl",
        [_bench_row((0, 0, 0), 1.0, w["baseline_tok_s"])]
        + [_bench_row(a, rows[a]["accept_length"], rows[a]["speed_tok_s"]) for a in ((3, 1, 4), (7, 1, 8))],
    )
    model = build_model("h200", target_config="llama-3.1-8b-instruct", acceptance_from=bench)
    assert model.cost_correction is not None and model.cost_correction.points[0].configs == 3
    predicted = model.predict(1, (5, 1, 6), 55.0).speed_tok_s
    assert abs(predicted / rows[(5, 1, 6)]["speed_tok_s"] - 1) <= TOLERANCE, (combo, predicted)
    # the measured configs themselves are reproduced within the fit's residual (2 %)
    for action in ((3, 1, 4), (7, 1, 8)):
        got = model.predict(1, action, 55.0).speed_tok_s
        assert abs(got / rows[action]["speed_tok_s"] - 1) < 0.02, (combo, action)


def test_gsm8k_with_the_specforge_draft_no_longer_misses_by_eleven_percent(tmp_path) -> None:
    w = _specbundle()["workloads"]["gsm8k"]
    rows = {tuple(int(x) for x in k.split(",")): v for k, v in w["drafts"]["specforge"].items()}
    lines = [_bench_row(a, rows[a]["accept_length"], rows[a]["speed_tok_s"]) for a in ((3, 1, 4), (7, 1, 8))]
    bench = _bench(tmp_path / "g.jsonl", [_bench_row((0, 0, 0), 1.0, w["baseline_tok_s"]), *lines])
    measured = rows[(5, 1, 6)]["speed_tok_s"]
    fitted = build_model("h200", target_config="llama-3.1-8b-instruct", acceptance_from=bench)
    # the acceptance fit alone (the profile's step time): the measured (3,1,4) runs 11 % slower
    alone = build_model("h200", target_config="llama-3.1-8b-instruct")
    from specband.sim.model import with_fitted_acceptance

    acc_only = with_fitted_acceptance(alone, read_acceptance_file(bench))
    assert acc_only.predict(1, (5, 1, 6), 55.0).speed_tok_s / measured - 1 > 0.10
    assert abs(fitted.predict(1, (5, 1, 6), 55.0).speed_tok_s / measured - 1) < 0.02
    interval = speed_interval(fitted, 1, (5, 1, 6))
    assert interval.contains(measured) and interval.cost_sd == pytest.approx(COST_FIT_SD)


def test_a_file_measuring_speeds_is_reproduced_and_its_neighbours_move(run_cli, tmp_path) -> None:
    # issue 35: (3,1,4) at 260 tok/s and (5,1,6) at 240 picked (5,1,6) at 246.7 and simulated (3,1,4) at 226.7
    bench = _bench(tmp_path / "m.jsonl", [_bench_row((3, 1, 4), 2.9, 260.0, 8), _bench_row((5, 1, 6), 3.5, 240.0, 8)])
    out = tmp_path / "sim.jsonl"
    res = run_cli(
        "simulate", "--profile", "h100-sxm", *PAIR, "--acceptance-from", bench, "--actions", "extended",
        "--batch-sizes", "8", "--repeats", "1", "--out", out,
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert "note: cost fit bs 8: step time x" in res.stderr and "2 configs" in res.stderr
    assert "note: cost fit residual bs 8 (3, 1, 4): measured step 11.154 ms, fitted 11.154 ms (+0.0 %)" in res.stderr
    rows = {(r["steps"], r["topk"], r["num_draft_tokens"]): r for r in map(json.loads, out.read_text().splitlines())}
    assert rows[(3, 1, 4)]["speed_tok_s_expected"] == pytest.approx(260.0, rel=0.005)
    assert rows[(5, 1, 6)]["speed_tok_s_expected"] == pytest.approx(240.0, rel=0.005)
    # the neighbours move with them: the profile has (5,1,6) and (7,1,8) faster than (3,1,4); the
    # measured speeds slow the deeper chain down with the measured one
    uncorrected = build_model("h100-sxm", target_config="llama-3.1-8b-instruct", acceptance_from=None)
    assert uncorrected.predict(8, (7, 1, 8), 55.0).speed_tok_s > 260.0
    assert rows[(7, 1, 8)]["speed_tok_s_expected"] < 245.0
    assert rows[(3, 1, 4)]["speed_tok_s_expected"] > rows[(5, 1, 6)]["speed_tok_s_expected"]


def test_a_batch_size_between_two_measured_ones_interpolates(tmp_path) -> None:
    bench = _bench(
        tmp_path / "two.jsonl",
        [_bench_row((3, 1, 4), 2.9, 300.0, 1), _bench_row((3, 1, 4), 2.9, 150.0, 16)],
    )
    model = build_model("h100-sxm", target_config="llama-3.1-8b-instruct", acceptance_from=bench)
    correction = model.cost_correction
    assert [p.batch_size for p in correction.points] == [1, 16]
    f1, f16, f4 = correction.at(1)[0], correction.at(16)[0], correction.at(4)[0]
    assert min(f1, f16) < f4 < max(f1, f16)
    assert correction.at(64) == correction.at(16) and correction.at(1) == (f1, 0.0)
    assert model.predict(1, (3, 1, 4), 55.0).speed_tok_s == pytest.approx(300.0, rel=1e-3)
    assert model.predict(16, (3, 1, 4), 55.0).speed_tok_s == pytest.approx(150.0, rel=1e-3)


# ----------------------------------------------------------------------------- the reader


def _good_bench() -> dict:
    return _bench_row((3, 1, 4), 2.9, 260.0, 8)


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"batch_size": "one"}, "batch_size", "expected an integer, got 'one'"),
        ({"batch_size": -1}, "batch_size", "must be in [1, 1048576], got -1"),
        ({"batch_size": 0}, "batch_size", "must be in [1, 1048576], got 0"),
        ({"batch_size": True}, "batch_size", "expected an integer, got True"),
        ({"batch_size": 2.5}, "batch_size", "expected an integer, got 2.5"),
        ({"speed": -5}, "speed", "must be > 0 tok/s, got -5"),
        ({"speed": "fast"}, "speed", "expected a finite number, got 'fast'"),
        ({"speed": 0}, "speed", "must be > 0 tok/s, got 0"),
        ({"step_time": -0.01}, "step_time", "must be > 0 s, got -0.01"),
        ({"steps": "3"}, "steps", "expected an integer >= 0, got '3'"),
        ({"acc_length": True}, "acc_length", "expected a finite number, got True"),
        ({"completion_tokens": "many"}, "completion_tokens", "expected a finite number, got 'many'"),
    ],
)
def test_every_bench_field_is_checked(run_cli, tmp_path, change, field, message) -> None:
    bench = _bench(tmp_path / "bad.jsonl", [_bench_row((0, 0, 0), 1.0, 150.0, 8), {**_good_bench(), **change}])
    with pytest.raises(DataError) as info:
        read_acceptance_file(bench)
    assert str(info.value) == f"{bench}:2: field '{field}': {message}"
    out = tmp_path / "o.jsonl"
    res = run_cli("simulate", "--profile", "h100-sxm", *PAIR, "--acceptance-from", bench, "--out", out)
    assert res.exit_code == 2 and res.stderr.splitlines() == [f"error: {bench}:2: field '{field}': {message}"]
    assert not out.exists()


def _sweep_row(action: tuple[int, int, int], **extra: object) -> dict:
    steps, topk, tokens = action
    row = {"batch_size": 4, "steps": steps, "topk": topk, "num_draft_tokens": tokens, "speed_tok_s": 200.0}
    row["accept_length"] = 1.0 if steps == 0 else 2.5
    row.update(extra)
    return row


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ([_sweep_row((3, 1, 4), batch_size=None)], r"s.jsonl:1: field 'batch_size': expected an integer, got None"),
        ([_sweep_row((3, 1, 4), speed_tok_s=-5)], r"s.jsonl:1: field 'speed_tok_s': must be > 0 tok/s, got -5"),
        (
            [_sweep_row((3, 1, 4), engine="sglang"), _sweep_row((5, 1, 6), engine="vllm")],
            r"s.jsonl:2: field 'engine': mixes engines 'sglang' \(line 1\) and 'vllm' \(line 2\)",
        ),
        (
            [_sweep_row((3, 1, 4)), _sweep_row((5, 1, 6), engine="vllm")],
            r"s.jsonl:2: field 'engine': mixes engines 'sglang' \(line 1\) and 'vllm' \(line 2\)",
        ),
        (
            [_sweep_row((3, 1, 4), provenance="measured"), _sweep_row((5, 1, 6), provenance="emulated")],
            r"s.jsonl:2: field 'provenance': mixes rows of 'measured' \(line 1\) and 'emulated' \(line 2\)",
        ),
        ([_sweep_row((3, 1, 4), engine=["vllm"])], r"s.jsonl:1: field 'engine': expected one printable line"),
    ],
)
def test_sweep_files_are_checked_and_never_mix_engines_or_worlds(tmp_path, rows, match) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(DataError, match=match):
        read_acceptance_file(path)


def test_emulated_rows_alone_are_fitted_and_say_so(tmp_path) -> None:
    path = tmp_path / "emu.jsonl"
    rows = [_sweep_row((0, 0, 0), provenance="emulated"), _sweep_row((3, 1, 4), provenance="emulated")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    source = read_acceptance_file(path)
    assert source.provenance == "emulated" and source.label.endswith("(emulated rows)")
    assert [s.action for s in source.speeds] == [(0, 0, 0), (3, 1, 4)] and source.engine == "sglang"
    model = build_model("h100-sxm", target_config="llama-3.1-8b-instruct", acceptance_from=path)
    assert model.acceptance.source.endswith("(emulated rows)")


def _probe(path: Path, **change: object) -> Path:
    data: dict[str, object] = {
        "format": "specband-probe",
        "version": 2,
        "provenance": "measured",
        "engine": "sglang",
        "engine_version": "0.5.18",
        "url": "http://127.0.0.1:30000",
        "target": None,
        "draft": None,
        "action": [3, 1, 4],
        "flags": {},
        "acceptance": {"accept_length": 3.0, "accept_histogram": [10, 20, 30, 40]},
        "batch_sizes_seen": [8],
        "batch_size_source": "sglang:num_running_reqs",
        "power": None,
        "power_note": None,
        "requests_sent": 8,
        "max_requests": 64,
        "notes": [],
        "probed_at_unix": 1796212345.0,
        "specband_version": "0",
    }
    data.update(change)
    data["reading_sha256"] = reading_sha256(data)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"version": 99}, r"p.json: field 'version': version 99 is newer than this specband reads \(probe files of "),
        ({"version": None}, r"field 'version': version None is not one this specband reads"),
        ({"version": True}, r"field 'version': version True is not one this specband reads"),
        ({"version": "1"}, r"field 'version': version '1' is not one this specband reads"),
        ({"provenance": "guessed"}, r"field 'provenance': expected one of measured, emulated, got 'guessed'"),
        ({"batch_sizes_seen": [0]}, r"field 'batch_sizes_seen': must be in \[1, 1048576\], got 0"),
        ({"batch_sizes_seen": "8"}, r"field 'batch_sizes_seen': expected a list of batch sizes"),
        (
            {"acceptance": {"accept_length": 2.0, "accept_histogram": [10, 20, 30, 40]}},
            r"field 'acceptance.accept_histogram': the histogram's mean accept length 3.000 disagrees",
        ),
    ],
)
def test_a_probe_file_of_another_version_or_edited_by_hand_is_refused(tmp_path, change, match) -> None:
    with pytest.raises(DataError, match=match):
        read_acceptance_file(_probe(tmp_path / "p.json", **change))
    assert read_acceptance_file(_probe(tmp_path / "ok.json")).observations[0].accept_length == 3.0
