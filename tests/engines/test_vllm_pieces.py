"""``specband.engines.vllm_server``: the launch command and the ``/metrics`` spec-decode parser (the
real server's page is held in ``test_engine_recordings.py``)."""

from __future__ import annotations

import json

import pytest

from specband.core.errors import ConfigError, HarnessError
from specband.engines.vllm_server import SpecDecodeCounters, build_vllm_command, parse_spec_decode_metrics


def test_the_command_is_the_api_server_module_with_the_config_as_one_json_flag() -> None:
    spec = {"method": "eagle3", "model": "/d", "num_speculative_tokens": 3}
    cmd = build_vllm_command("/v/bin/python", "/t", port=8001, speculative_config=spec, extra_args=["--enforce-eager"])
    assert cmd[:5] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/t"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "8001"
    assert json.loads(cmd[cmd.index("--speculative-config") + 1]) == spec
    assert cmd[-1] == "--enforce-eager"
    assert "--speculative-config" not in build_vllm_command("p", "/t", port=1)


@pytest.mark.parametrize(("model", "port"), [("", 8000), ("/t", 0), ("/t", 70000)])
def test_bad_command_input_is_a_config_error(model: str, port: int) -> None:
    with pytest.raises(ConfigError):
        build_vllm_command("p", model, port=port)


def test_counters_sum_over_engines_and_a_window_subtracts() -> None:
    page = "\n".join(
        [
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0',
            'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 6.0',
            'vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09',
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 48.0',
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 24.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 8.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 16.0',
        ]
    )
    c = parse_spec_decode_metrics(page)
    assert c == SpecDecodeCounters(16.0, 48.0, 24.0, {0: 16.0, 1: 8.0})
    assert c.accept_length == 2.5
    w = c.minus(SpecDecodeCounters(6.0, 18.0, 4.0, {0: 4.0}))
    assert (w.num_drafts, w.accept_length, w.accepted_per_pos) == (10.0, 3.0, {0: 12.0, 1: 8.0})
    assert SpecDecodeCounters().accept_length is None


@pytest.mark.parametrize("value", ["NaN", "+Inf", "x"])
def test_a_bad_counter_value_is_an_error(value: str) -> None:
    with pytest.raises(HarnessError, match="metrics_failed"):
        parse_spec_decode_metrics(f'vllm:spec_decode_num_drafts_total{{engine="0"}} {value}\n')
