"""A load that moves a server's concurrency through phases (``1 -> 8 -> 32 -> 8 -> 1``): each
phase holds N requests in flight for its duration (a closed loop: a slot sends its next request
as soon as its last one is answered), so the server's running batch size follows the phases.
Used by ``benchmarks/bench_govern.py`` and the governor's tests against the emulator.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["LoadResult", "run_phases"]


@dataclass(frozen=True)
class LoadResult:
    """What the load did: requests answered and failed, real seconds it ran."""

    completed: int
    failed: int
    elapsed_real_s: float


def run_phases(
    url: str,
    phases: Sequence[tuple[int, float]],
    *,
    prompt_tokens: int = 1024,
    max_new_tokens: int = 256,
    time_scale: float = 1.0,
    openai_model: str | None = None,
    timeout_s: float = 600.0,
) -> LoadResult:
    """Run the phases against ``url`` and return when the last one ends (requests in flight
    then are left to finish in their threads, unanswered ones counted as neither).

    Args:
        url: the server's base URL.
        phases: ``(concurrency, seconds)`` each, seconds of the server's clock.
        prompt_tokens: prompt length, tokens (4 characters a token, as the emulator counts).
        max_new_tokens: tokens each request decodes.
        time_scale: real seconds per server second (the emulator's ``--time-scale``).
        openai_model: the model of vLLM's ``/v1/completions`` (``None``: sglang's ``/generate``).
        timeout_s: real seconds one request may take.
    """
    import httpx  # lazy: only a benchmark or a test sends load

    width = max(c for c, _ in phases)
    state = {"active": 0, "stop": False, "completed": 0, "failed": 0}
    lock = threading.Lock()
    prompt = "word " * max(1, prompt_tokens * 4 // 5)
    if openai_model is None:
        path = "/generate"
        body: dict[str, object] = {"text": prompt, "sampling_params": {"max_new_tokens": max_new_tokens}}
    else:
        path = "/v1/completions"
        body = {"model": openai_model, "prompt": prompt, "max_tokens": max_new_tokens, "ignore_eos": True}

    def slot(i: int) -> None:
        with httpx.Client(timeout=timeout_s, trust_env=False) as http:
            while not state["stop"]:
                if i >= state["active"]:
                    time.sleep(0.01)
                    continue
                try:
                    http.post(url + path, json=body).raise_for_status()
                    key = "completed"
                except httpx.HTTPError:
                    key = "failed"
                with lock:
                    state[key] += 1

    threads = [threading.Thread(target=slot, args=(i,), daemon=True) for i in range(width)]
    for t in threads:
        t.start()
    start = time.monotonic()
    try:
        for concurrency, seconds in phases:
            state["active"] = concurrency
            time.sleep(seconds * time_scale)
    finally:
        state["stop"] = True
    return LoadResult(int(state["completed"]), int(state["failed"]), time.monotonic() - start)
