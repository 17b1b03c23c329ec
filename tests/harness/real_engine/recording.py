"""What a real engine answers, reduced to the shapes the tests pin (keys, metric names, labels,
log lines): the recordings under ``recorded/`` are made with these functions against the real
servers, and the real-engine tests check that the live server still answers the same."""

from __future__ import annotations

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
