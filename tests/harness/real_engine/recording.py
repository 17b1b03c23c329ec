"""What a real engine answers, reduced to the shapes the tests pin (keys, metric names, labels,
log lines): the recordings under ``recorded/`` are made with these functions against the real
servers, and the real-engine tests check that the live server still answers the same."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

_SPEC_SAMPLE = re.compile(r"^(vllm:spec_decode_[A-Za-z0-9_:]*)(?:\{([^}]*)\})?\s")
_PID_PREFIX = re.compile(r"^\([A-Za-z0-9_-]+ pid=\d+\)\s*")


def vllm_answers(url: str, model: str, log_text: str) -> dict[str, Any]:
    """The shapes of a live vLLM server's answers: spec-decode metric names and their label
    keys, ``/v1/completions``' keys, ``/version``, the status of ``/server_info`` and the log's
    lines (without the ``(APIServer pid=N)`` prefixes)."""
    body = {"model": model, "prompt": "Hello", "max_tokens": 4, "temperature": 0, "ignore_eos": True}
    with httpx.Client(timeout=300, trust_env=False) as client:
        completion = client.post(url + "/v1/completions", json=body).json()
        metrics = client.get(url + "/metrics").text
        version = client.get(url + "/version").json()
        server_info_status = client.get(url + "/server_info").status_code
    names: dict[str, list[str]] = {}
    for line in metrics.splitlines():
        m = _SPEC_SAMPLE.match(line)
        if m:
            labels = sorted(k for k, _ in re.findall(r'([A-Za-z_]+)="([^"]*)"', m.group(2) or ""))
            names[m.group(1)] = labels
    return {
        "metric_names": sorted(names),
        "metric_labels": dict(sorted(names.items())),
        "completion_keys": sorted(completion),
        "choice_keys": sorted(completion["choices"][0]),
        "usage_keys": sorted(completion["usage"]),
        "version": version,
        "server_info_status": server_info_status,
        "log_lines": sorted({_PID_PREFIX.sub("", ln).strip() for ln in log_text.splitlines() if ln.strip()}),
    }


def spec_relations(meta: dict[str, Any], num_draft_tokens: int, steps: int) -> dict[str, bool]:
    """Whether one speculative ``/generate`` answer's ``meta_info`` keeps sglang 0.5.18's
    accept-length semantics (``tokenizer_manager.py``, ``_calculate_spec_decoding_metrics``):
    accept length = completion tokens / verify steps (bonus token included), the histogram
    counts verify steps by draft tokens accepted (at most ``steps``), correct drafts = sum of
    i x histogram[i], proposed drafts = verify steps x (draft tokens - 1)."""
    verify, hist = meta["spec_verify_ct"], meta["spec_accept_histogram"]
    return {
        "accept_length_is_completion_tokens_per_verify": abs(
            meta["spec_accept_length"] - meta["completion_tokens"] / verify
        )
        < 1e-9,
        "histogram_sums_to_verify_ct": sum(hist) == verify,
        "histogram_len_at_most_steps_plus_one": len(hist) <= steps + 1,
        "histogram_aliases_equal": hist == meta.get("spec_correct_drafts_histogram"),
        "correct_drafts_from_histogram": meta["spec_num_correct_drafts"] == sum(i * n for i, n in enumerate(hist)),
        "proposed_drafts_is_verify_times_draft_tokens_minus_one": meta["spec_num_proposed_drafts"]
        == verify * (num_draft_tokens - 1),
        "accept_rate_is_correct_over_proposed": abs(
            meta["spec_accept_rate"] - meta["spec_num_correct_drafts"] / meta["spec_num_proposed_drafts"]
        )
        < 1e-9,
    }


def _type_tree(value: Any) -> Any:
    """The structure of ``value`` with its leaves as type names (dict keys kept, lists as the
    sorted set of their elements' trees): what stays the same from machine to machine."""
    if isinstance(value, dict):
        return {str(k): _type_tree(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return {"list_of": sorted({json.dumps(_type_tree(v), sort_keys=True) for v in value})}
    return type(value).__name__


#: What sglang 0.5.18's ``Scheduler.get_internal_state`` adds to the server arguments in
#: ``internal_states[0]`` (``srt/managers/scheduler.py``; the elastic-EP ones only with that backend).
RUNTIME_STATE_KEYS = frozenset({
    "last_gen_throughput", "memory_usage", "startup_time", "effective_max_running_requests_per_dp",
    "avg_spec_accept_length", "step_time_dict", "is_scaling_elastic_ep", "effective_ep_size", "pending_ep_size",
    "scale_phase", "elastic_ep_last_error",
})  # fmt: skip
#: the server arguments a recording keeps as values
_SPEC_ARGS = (
    "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
    "attention_backend", "device", "dtype",
)  # fmt: skip


def sglang_answers(
    url: str, action: tuple[int, int, int], *, prompt: str = "Hello there", tokens: int = 200
) -> dict[str, Any]:
    """The shapes of a live sglang server's answers to one greedy ``/generate`` (``tokens`` new
    tokens, ``ignore_eos``; 200: at least 50 decode iterations at accept length 4, so that sglang
    has logged one 40-iteration interval, which is when it records a step time and its
    ``avg_spec_accept_length``) and the ``/server_info`` read after it, with the values that vary by
    machine (latencies, step times, memory, timestamps) reduced to their types and checked for
    range here; the speculative counts (deterministic on the predictable pair) and the
    accept-length relations (:func:`spec_relations`) kept as values.

    Args:
        url: the server; action: its ``(steps, topk, num_draft_tokens)`` (``(0, 0, 0)``: plain).
    """
    body = {"text": prompt, "sampling_params": {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True}}
    with httpx.Client(timeout=300, trust_env=False) as client:
        answer = client.post(url + "/generate", json=body)
        answer.raise_for_status()
        generated = answer.json()
        info = client.get(url + "/server_info").json()
    meta = generated["meta_info"]
    state = info["internal_states"][0]
    # ranges of the values that vary by machine
    assert meta["e2e_latency"] > 0 and meta["response_sent_to_client_ts"] > 1.6e9, meta
    steps_recorded = state.get("step_time_dict", {})
    assert all(t > 0 for times in steps_recorded.values() for t in times), steps_recorded
    server_args = {k: v for k, v in info.items() if k not in ("internal_states", "version")}
    shapes: dict[str, Any] = {
        "generate_keys": sorted(generated),
        "output_ids_len": len(generated.get("output_ids", [])),
        "meta_info_keys": sorted(meta),
        "meta_info_types": {k: type(v).__name__ for k, v in sorted(meta.items())},
        "finish_reason": meta["finish_reason"],
        "completion_tokens": meta["completion_tokens"],
        "server_info_keys": sorted(k for k in info if k not in server_args),
        "server_args_types": {k: type(v).__name__ for k, v in sorted(server_args.items())},
        "internal_state_runtime_keys": sorted(k for k in state if k in RUNTIME_STATE_KEYS),
        "internal_state_runtime_types": {
            k: _type_tree(v) for k, v in sorted(state.items()) if k in RUNTIME_STATE_KEYS and k != "step_time_dict"
        },
        "step_time_dict": {
            "key_types": sorted({type(k).__name__ for k in steps_recorded}),
            "keys_are_batch_sizes": all(k.isdigit() for k in steps_recorded),
            "value_types": sorted({type(v).__name__ for v in steps_recorded.values()}),
            "element_types": sorted({type(t).__name__ for v in steps_recorded.values() for t in v}),
        },
        "server_info_version": info.get("version"),
        "speculative_args": {k: info.get(k) for k in _SPEC_ARGS},
    }
    if any(action):
        shapes["spec"] = {
            "spec_accept_length": meta["spec_accept_length"],
            "spec_verify_ct": meta["spec_verify_ct"],
            "spec_accept_histogram": meta["spec_accept_histogram"],
            "avg_spec_accept_length": state.get("avg_spec_accept_length"),
            "relations": spec_relations(meta, action[2], action[0]),
        }
    return shapes


def action_key(action: tuple[int, int, int]) -> str:
    """``"(3,1,4)"``: an action as the recording's key."""
    return "({},{},{})".format(*action)


#: ``internal_states[0]`` keys only the emulator answers (documented in specband.emulator.engine).
EMULATOR_ONLY_STATE_KEYS = frozenset({"adaptive_steps_by_batch_size"})


def assert_emulator_matches(emulated: dict[str, Any], real: dict[str, Any]) -> None:
    """The emulator's answers (:func:`sglang_answers` of a ``specband emulate`` server) have real
    sglang's keys, types and structure, and keep its accept-length semantics: the same
    ``/generate`` keys, ``meta_info`` keys and types, finish reason and token count; server
    arguments that real sglang has, with its types; the same runtime keys of
    ``internal_states[0]`` (with their type trees) and ``step_time_dict``'s structure; every
    relation of :func:`spec_relations` true in both. Counts are not compared: the emulator draws
    its acceptance from its model, real sglang from the predictable pair."""
    assert emulated["generate_keys"] == real["generate_keys"]
    assert emulated["output_ids_len"] == emulated["completion_tokens"]
    assert emulated["meta_info_keys"] == real["meta_info_keys"]
    assert emulated["meta_info_types"] == real["meta_info_types"]
    assert emulated["finish_reason"] == real["finish_reason"]
    assert emulated["completion_tokens"] == real["completion_tokens"]
    assert emulated["server_info_keys"] == real["server_info_keys"]
    extra = set(emulated["server_args_types"]) - set(real["server_args_types"])
    assert not extra, f"server_info keys real sglang does not answer: {sorted(extra)}"
    types = {k: (t, real["server_args_types"][k]) for k, t in emulated["server_args_types"].items()}
    differ = {k: t for k, t in types.items() if t[0] != t[1]}
    assert not differ, f"server_info types (emulated, real) differ: {differ}"
    state_keys = set(emulated["internal_state_runtime_keys"]) - EMULATOR_ONLY_STATE_KEYS
    assert state_keys == set(real["internal_state_runtime_keys"])
    emulated_types = {
        k: v for k, v in emulated["internal_state_runtime_types"].items() if k not in EMULATOR_ONLY_STATE_KEYS
    }
    assert emulated_types == real["internal_state_runtime_types"]
    assert emulated["step_time_dict"] == real["step_time_dict"]
    assert emulated["speculative_args"]["speculative_algorithm"] == real["speculative_args"]["speculative_algorithm"]
    if "spec" in real:
        assert set(emulated["spec"]) == set(real["spec"])
        assert all(real["spec"]["relations"].values()), real["spec"]["relations"]
        assert emulated["spec"]["relations"] == real["spec"]["relations"]
