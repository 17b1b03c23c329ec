"""sglang's ``GET /metrics`` as the emulator serves it (with ``--enable-metrics``, as sglang):
what ``specband govern`` and ``probe`` read of a running sglang server (names and labels of
sglang 0.5.x ``python/sglang/srt/metrics/collector.py``)."""

from __future__ import annotations

__all__ = ["sglang_metrics_page"]


def sglang_metrics_page(model: str, running: int, waiting: int, tokens: tuple[int, int, float], spec: bool) -> str:
    """sglang's ``GET /metrics`` (``--enable-metrics``) as the emulator serves it: the gauges
    ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``, the counters
    ``sglang:prompt_tokens_total``, ``sglang:generation_tokens_total`` and, with speculation,
    the gauge ``sglang:spec_accept_length`` (mean over the last decode log interval, 0 before
    one closed); labels as sglang 0.5.x's ``SchedulerMetricsCollector`` writes them.
    ``tokens`` is ``(output, prompt, accept length)``."""
    output, prompt, accept = tokens
    labels = f'engine_type="unified",model_name="{model}",pp_rank="0",tp_rank="0"'
    lines = [
        "# HELP sglang:num_running_reqs The number of running requests.",
        "# TYPE sglang:num_running_reqs gauge",
        f"sglang:num_running_reqs{{{labels}}} {float(running)!r}",
        "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.",
        "# TYPE sglang:num_queue_reqs gauge",
        f"sglang:num_queue_reqs{{{labels}}} {float(waiting)!r}",
        "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE sglang:prompt_tokens_total counter",
        f'sglang:prompt_tokens_total{{model_name="{model}"}} {float(prompt)!r}',
        "# HELP sglang:generation_tokens_total Number of generation tokens processed.",
        "# TYPE sglang:generation_tokens_total counter",
        f'sglang:generation_tokens_total{{model_name="{model}"}} {float(output)!r}',
    ]
    if spec:
        lines += [
            "# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.",
            "# TYPE sglang:spec_accept_length gauge",
            f"sglang:spec_accept_length{{{labels}}} {float(accept)!r}",
        ]
    return "\n".join(lines) + "\n"
