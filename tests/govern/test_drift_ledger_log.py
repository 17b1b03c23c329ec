"""Windowed acceptance and drift, the run's accounting, the bounded log, the exporter, the
simulated replay."""

from __future__ import annotations

import json

import pytest
from tests.govern.plans import small_plan

from specband.govern.controller import GpuRange, GpuReading
from specband.govern.drift import AcceptanceWindows, DriftCheck, observation_line
from specband.govern.exporter import GovernMetrics
from specband.govern.ledger import Ledger, SlidingUtilization, interval_of
from specband.govern.log import GovernLog
from specband.govern.plan import PlanFigure
from specband.govern.readings import ServerSample
from specband.govern.replay import read_trace, replay
from specband.sim.acceptance_fit import read_acceptance_file
from specband.sim.model import build_model


def sample(t: float, tokens: float = 0.0, accept: float | None = None, drafts: float | None = None,
           accepted: float | None = None, draft_tokens: float | None = None, bs: int = 8) -> ServerSample:  # fmt: skip
    return ServerSample(t, bs, 0, tokens, accept, drafts, draft_tokens, accepted)


def test_vllm_windows_come_from_the_counters_difference():
    w = AcceptanceWindows(10.0, None)
    assert w.add(sample(0.0, drafts=100.0, accepted=50.0, draft_tokens=300.0)) is None
    window = w.add(sample(10.0, drafts=1100.0, accepted=2050.0, draft_tokens=3300.0))
    assert window is not None and window.action == (3, 1, 4)  # K = 3000 / 1000
    assert window.accept_length == pytest.approx(1.0 + 2000 / 1000) and window.weight == 1000.0


def test_sglang_windows_weigh_the_gauge_by_output_tokens():
    w = AcceptanceWindows(10.0, (3, 1, 4))
    w.add(sample(0.0, tokens=0.0))
    w.add(sample(5.0, tokens=1000.0, accept=2.0))
    window = w.add(sample(10.0, tokens=4000.0, accept=3.0))
    assert window is not None and window.accept_length == pytest.approx((2 * 1000 + 3 * 3000) / 4000)


def test_drift_is_the_first_window_outside_the_interval_and_is_said_once():
    check = DriftCheck({(3, 1, 4): PlanFigure(3.0, "simulated", 2.9, 3.1)})
    w = AcceptanceWindows(1.0, (3, 1, 4), min_weight=1.0)
    w.add(sample(0.0, tokens=0.0))
    inside = w.add(sample(1.0, tokens=100.0, accept=3.05))
    assert check.check(inside) == (None, False)
    outside = w.add(sample(2.0, tokens=200.0, accept=2.4))
    assert check.check(outside) == (None, True)
    again = w.add(sample(3.0, tokens=300.0, accept=2.4))
    assert check.check(again) == (None, False) and len(check.outside) == 2
    unknown = DriftCheck({})
    note, drifted = unknown.check(again)
    assert "no acceptance interval for (3, 1, 4)" in (note or "") and not drifted


def test_measured_windows_are_read_back_by_acceptance_from(tmp_path):
    w = AcceptanceWindows(1.0, (5, 1, 6), min_weight=1.0)
    w.add(sample(0.0, tokens=0.0))
    window = w.add(sample(2.0, tokens=500.0, accept=3.2))
    path = tmp_path / "m.jsonl"
    path.write_text(observation_line(window, "t", "d") + "\n")
    source = read_acceptance_file(path)
    assert source.observations[0].action == (5, 1, 6) and source.observations[0].accept_length == pytest.approx(3.2)
    assert source.target == "t"


def test_intervals_count_band_reach_throttle_and_energy():
    rng, band = GpuRange(200.0, 700.0), (0.95, 0.98)
    a, b = GpuReading(0.0, 300.0, 0.0, 310.0), GpuReading(2.0, 300.0, 600_000.0, 310.0)
    part = interval_of(a, b, 310.0, rng, band)
    assert part is not None and part.energy_j == 600.0 and part.utilization == pytest.approx(300 / 310)
    assert part.in_band and part.reachable and not part.throttled
    low = interval_of(a, GpuReading(2.0, 100.0, 200_000.0, 200.0), 200.0, rng, band)
    assert low is not None and not low.reachable  # 100 W: below the band even at the 200 W floor
    capped = interval_of(a, GpuReading(2.0, 700.0, 1_400_000.0, 700.0), 700.0, rng, band)
    assert capped is not None and capped.throttled and not capped.reachable
    ledger = Ledger(["1", "2+"])
    ledger.add(0, 2.0, [(0, part)], 1000.0)
    ledger.add(None, 1.0, [], 0.0)
    total = ledger.to_json()["total"]
    assert total["joules_per_token"] == pytest.approx(0.6) and total["in_band_s"] == 2.0
    assert ledger.to_json()["tiers"]["idle"]["seconds"] == 1.0


def test_the_sliding_window_restarts_at_a_new_limit():
    s = SlidingUtilization(5.0)
    assert s.add(0.0, 1.0, 300.0, 400.0) == pytest.approx(0.75)
    assert s.add(1.0, 2.0, 100.0, 400.0) == pytest.approx(0.5)
    assert s.add(2.0, 3.0, 300.0, 310.0) == pytest.approx(300 / 310)


def test_the_log_is_json_lines_nan_safe_and_bounded(tmp_path):
    capped: list[str] = []
    log = GovernLog(tmp_path / "g.jsonl", max_bytes=300, on_cap=capped.append)
    assert log.write("reading", power_w=float("nan"))
    for _ in range(20):
        log.write("reading", power_w=1.0)
    assert log.write("decision", limit_w=300.0)
    log.close()
    lines = [json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    assert lines[0]["power_w"] == "nan"
    assert [e["event"] for e in lines].count("log_cap") == 1 and lines[-1]["event"] == "decision"
    assert len(capped) == 1 and (tmp_path / "g.jsonl").stat().st_size < 900


def test_the_exporter_serves_its_own_registry_on_loopback():
    m = GovernMetrics([0, 1], (0.95, 0.98))
    m.limit.labels(gpu="1").set(310.0)
    m.drift.set(1)
    m.serve(0)
    try:
        assert m.port is not None and m._server.server_address[0] == "127.0.0.1"
        text = m.text()
    finally:
        m.close()
    assert 'specband_govern_power_limit_watts{gpu="1"} 310.0' in text and "specband_govern_drift 1.0" in text
    assert "python_gc" not in text and "specband_govern_band_low 0.95" in text


def test_the_replay_of_a_steady_trace_holds_the_band_and_beats_the_default(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("# steady\nt_s,batch_size\n" + "".join(f"{t},{8 if t < 120 else 32}\n" for t in range(240)))
    rows = read_trace(trace)
    model = build_model("h100-sxm", target_config="llama-3.1-8b-instruct")
    from specband.govern.firstguess import first_guess_plan

    plan = first_guess_plan("h100-sxm", "llama-3.1-8b-instruct", None, batch_sizes=[8, 32])
    governed = replay(model, plan, rows, "governor")
    default = replay(model, plan, rows, "default")
    assert governed.window_in_band_of_reachable is not None and governed.window_in_band_of_reachable > 0.95
    assert default.in_band_of_reachable == 0.0  # 700 W: far above what the server draws
    assert governed.joules_per_token < default.joules_per_token


def test_a_bad_trace_names_its_line(tmp_path):
    from specband.core.errors import DataError

    path = tmp_path / "t.csv"
    path.write_text("t_s,batch_size\n0,1\n1,x\n")
    with pytest.raises(DataError, match=r"t\.csv:3"):
        read_trace(path)


def test_the_small_plan_is_a_plan():
    assert small_plan().tiers[1].label == "5-16"
