"""Hostile or broken readings are skipped with a reason, never acted on."""

from __future__ import annotations

import math

import pytest

from specband.engines.base import get_engine
from specband.engines.probing import LiveMetrics, metric_value
from specband.govern.readings import GpuRaw, ServerSample, Skip, check_gpu, check_server

NAMES = {"running": "sglang:num_running_reqs"}


def metrics(running: float | None = 8.0, tokens: float | None = 100.0, **kw: object) -> LiveMetrics:
    return LiveMetrics(running, 0.0, tokens, names=NAMES, **kw)  # type: ignore[arg-type]


def check(m: LiveMetrics, previous: ServerSample | None = None, **kw: object) -> ServerSample | Skip:
    args = {"asked_s": 9.9, "max_age_s": 5.0, "previous": previous, "max_batch_size": 64}
    args.update(kw)
    return check_server(m, 10.0, **args)  # type: ignore[arg-type]


def test_a_good_scrape_is_a_sample():
    s = check(metrics(accept_length=2.5))
    assert isinstance(s, ServerSample) and s.batch_size == 8 and s.output_tokens_total == 100.0


@pytest.mark.parametrize(
    ("m", "reason"),
    [
        (metrics(running=None), "no sglang:num_running_reqs"),
        (metrics(running=-1.0), "outside 0..64"),
        (metrics(running=65.0), "outside 0..64 (the server's max_running_requests)"),
        (metrics(running=1e308), "outside 0..64"),
        (metrics(tokens=-3.0), "output tokens is -3.0"),
        (metrics(tokens=math.inf), "output tokens is inf"),
        (metrics(accept_length=0.5), "accept length 0.5"),
        (LiveMetrics(8.0, 0.0, 1.0, problems=("sglang:num_running_reqs is nan",)), "is nan"),
    ],
)
def test_a_bad_scrape_is_skipped_with_its_reason(m, reason):
    got = check(m)
    assert isinstance(got, Skip) and reason in got.reason


def test_a_late_answer_is_stale():
    got = check(metrics(), asked_s=1.0)
    assert isinstance(got, Skip) and got.reason.startswith("stale")


def test_counters_going_back_are_skipped():
    before = check(metrics(tokens=500.0))
    assert isinstance(before, ServerSample)
    got = check(metrics(tokens=10.0), previous=before)
    assert isinstance(got, Skip) and "went back from 500 to 10" in got.reason


def test_a_frozen_page_is_stale():
    got = check(metrics(), frozen_since_s=-1.0)
    assert isinstance(got, Skip) and "have not moved for 11 s" in got.reason


def test_without_the_servers_bound_the_largest_batch_size_bounds():
    assert isinstance(check(metrics(running=5000.0), max_batch_size=None), ServerSample)
    assert isinstance(check(metrics(running=2.0e6), max_batch_size=None), Skip)


def gpu(power: float | None, energy: float | None = 1000.0, t: float = 2.0, limit: float | None = 400.0) -> GpuRaw:
    return GpuRaw(t, power, energy, limit)


@pytest.mark.parametrize(
    ("raw", "previous", "reason"),
    [
        (gpu(None), None, "no power reading"),
        (gpu(math.nan), None, "is not a power"),
        (gpu(-5.0), None, "is not a power"),
        (gpu(2000.0), None, "over 1.5x the board's highest limit (700 W)"),
        (gpu(300.0, energy=-1.0), None, "not a count"),
        (gpu(300.0, energy=500.0), gpu(300.0, energy=900.0, t=1.0), "went back"),
        (gpu(300.0, energy=5e9), gpu(300.0, energy=1000.0, t=1.0), "implies"),
        (gpu(300.0, energy=1000.0), gpu(300.0, energy=1000.0, t=1.0), "stood still"),
        (gpu(300.0, limit=math.inf), None, "is not a limit"),
    ],
)
def test_a_bad_gpu_reading_is_skipped(raw, previous, reason):
    got = check_gpu(raw, 0, max_limit_w=700.0, previous=previous, limit_w=400.0)
    assert isinstance(got, Skip) and reason in got.reason and got.what == "gpu 0"


def test_a_good_gpu_reading_carries_the_limit_to_compare_with():
    got = check_gpu(gpu(300.0, energy=301_000.0), 0, max_limit_w=700.0, previous=gpu(300.0, t=1.0), limit_w=350.0)
    assert not isinstance(got, Skip) and got.limit_w == 350.0 and got.power_w == 300.0


def test_metric_values_report_what_is_not_a_number():
    page = 'a{tp_rank="0"} 3\na{tp_rank="1"} 3\nb 1e400\nc x\n'
    assert metric_value(page, "a") == (3.0, None)  # rank 1 repeats rank 0
    assert metric_value(page, "b")[1] == "b is 1e400"
    assert "not a number" in (metric_value(page, "c")[1] or "")
    assert metric_value(page, "d") == (None, None)


def test_each_engine_reads_its_own_page():
    sglang = get_engine("sglang").serving.live_metrics(
        'sglang:num_running_reqs{tp_rank="0"} 4\nsglang:generation_tokens_total 10\nsglang:spec_accept_length 0\n'
    )
    assert sglang.running == 4.0 and sglang.output_tokens_total == 10.0 and sglang.accept_length is None
    vllm = get_engine("vllm").serving.live_metrics(
        'vllm:num_requests_running{engine="0"} 2\nvllm:spec_decode_num_drafts_total 10\n'
        "vllm:spec_decode_num_accepted_tokens_total 15\nvllm:generation_tokens_total nan\n"
    )
    assert (
        vllm.running == 2.0 and vllm.drafts_total == 10.0 and vllm.problems == ("vllm:generation_tokens_total is nan",)
    )
