"""``specband probe`` against sglang: what a running sglang server shows of its speculative
config, its acceptance and its batch sizes (:func:`probe_sglang`, called by
:meth:`specband.engines.sglang_serving.SglangServing.probe_server`).

Read (sglang 0.5.18-0.5.23; ``python/sglang/srt/managers/scheduler.py`` ``get_internal_state``,
``tokenizer_manager.py`` ``_calculate_spec_decoding_metrics``; measured on the CPU build,
../shared/engines/README.md):

* ``GET /server_info`` (``/get_server_info`` before 0.5.x renamed it): the server arguments
  (``speculative_algorithm``, ``speculative_num_steps``, ``speculative_eagle_topk``,
  ``speculative_num_draft_tokens``, ``speculative_draft_model_path``, ``model_path``, ...),
  ``version``, and ``internal_states[0]`` with ``avg_spec_accept_length`` (cumulative since
  launch or ``/flush_cache``, once a draft ran) and, with ``SGLANG_RECORD_STEP_TIME=1``,
  ``step_time_dict`` (decode batch size -> step times);
* ``GET /metrics`` (only with ``--enable-metrics``): the gauge ``sglang:num_running_reqs``;
* ``POST /generate`` (the probe's requests): ``meta_info.spec_verify_ct``,
  ``completion_tokens`` and ``spec_accept_histogram`` (verify steps by draft tokens accepted).

Batch sizes: the keys of ``step_time_dict`` read before the probe's requests (the decode batch
sizes the server ran since launch), else the distinct non-zero values of
``sglang:num_running_reqs`` sampled over the watch window.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from specband.core.errors import EngineError
from specband.core.limits import MAX_BATCH_SIZE, is_int
from specband.engines.client import ProbeHttp, parse_server_info
from specband.engines.probing import (
    AcceptanceReading,
    LiveMetrics,
    ProbePlan,
    ServerFacts,
    ServerReading,
    check_action,
    metric_value,
    position_accept_from_histogram,
    probe_prompts,
    running_requests,
    watch_gauge,
)

if TYPE_CHECKING:
    from specband.engines.base import Engine

__all__ = [
    "SGLANG_LIVE_METRICS",
    "SGLANG_PROBE_FLAGS",
    "probe_sglang",
    "read_sglang_info",
    "sglang_action",
    "sglang_facts",
    "sglang_live_metrics",
]

#: The server arguments the probe file's ``flags`` carries (those present in ``/server_info``).
SGLANG_PROBE_FLAGS: tuple[str, ...] = (
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_draft_model_path",
    "speculative_adaptive",
    "speculative_adaptive_config",
    "max_running_requests",
    "cuda_graph_max_bs",
    "cuda_graph_max_bs_decode",
    "mem_fraction_static",
    "attention_backend",
    "dtype",
)
_SPECULATIVE = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"}
_TRIPLE = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")

#: What ``govern`` reads of sglang's ``/metrics`` (``python/sglang/srt/metrics/collector.py``,
#: ``SchedulerMetricsCollector`` and ``TokenizerMetricsCollector``; ``--enable-metrics``): the
#: running batch, the queue, output tokens since launch and the mean accept length of the last
#: log interval (a gauge, ``decode_log_interval`` decode steps).
SGLANG_LIVE_METRICS: dict[str, str] = {
    "running": "sglang:num_running_reqs",
    "waiting": "sglang:num_queue_reqs",
    "output_tokens_total": "sglang:generation_tokens_total",
    "accept_length": "sglang:spec_accept_length",
}
_RUNNING_GAUGE = "sglang:num_running_reqs"


def read_sglang_info(http: ProbeHttp) -> Mapping[str, Any] | None:
    """``/server_info`` (``/get_server_info`` on 404) as a JSON object, or ``None`` when
    neither answers one (not an sglang server)."""
    info = http.get_json("/server_info")
    if info is None:
        info = http.get_json("/get_server_info")
    return info if isinstance(info, Mapping) else None


def sglang_action(info: Mapping[str, Any]) -> tuple[int, int, int]:
    """The ``(steps, topk, num_draft_tokens)`` a server runs from its arguments: ``(0, 0, 0)``
    without a speculative algorithm or with any of the three missing (null or absent).

    Raises:
        EngineError: a speculative server reports a value that is no config: negative,
            huge, a string, a list (:func:`~specband.engines.probing.check_action`; it was
            read as plain decoding, hostile trial P07, P08).
    """
    algo = info.get("speculative_algorithm")
    triple = [info.get(k) for k in _TRIPLE]
    if not isinstance(algo, str) or algo.upper() not in _SPECULATIVE or any(v is None for v in triple):
        return (0, 0, 0)
    return check_action(triple, _TRIPLE)


def _running_gauge(http: ProbeHttp) -> float | None:
    page = http.get_text("/metrics")
    return None if page is None else running_requests(page, _RUNNING_GAUGE)


def _step_time_sizes(steps: Mapping[int, list[float]]) -> tuple[int, ...]:
    """The decode batch sizes of a ``step_time_dict`` (EngineError: one over MAX_BATCH_SIZE)."""
    sizes = tuple(sorted(bs for bs, times in steps.items() if times and bs >= 1))
    if sizes and sizes[-1] > MAX_BATCH_SIZE:
        raise EngineError(
            f"the server's step_time_dict holds batch size {str(sizes[-1])[:40]}, over {MAX_BATCH_SIZE} "
            "(specband.core.limits.MAX_BATCH_SIZE)"
        )
    return sizes


def _batch_sizes(http: ProbeHttp, info: Mapping[str, Any], plan: ProbePlan) -> tuple[tuple[int, ...], str]:
    steps = parse_server_info(info).step_times
    if steps:
        sizes = _step_time_sizes(steps)
        return sizes, "sglang /server_info step_time_dict: the decode batch sizes it ran since launch"
    if http.get_text("/metrics") is not None:
        seen = watch_gauge(lambda: _running_gauge(http), plan.watch_s, plan.watch_samples)
        sizes = tuple(sorted({round(v) for v in seen if v >= 1}))
        how = f"sglang /metrics {_RUNNING_GAUGE}: {len(seen)} samples over {plan.watch_s:g} s"
        return sizes, how + ("" if sizes else " (all 0: the server was idle)")
    return (), "none: no step_time_dict (SGLANG_RECORD_STEP_TIME unset) and no /metrics (--enable-metrics unset)"


def _send(http: ProbeHttp, prompts: tuple[str, ...], max_new_tokens: int) -> tuple[int, int, list[int]]:
    """Send the prompts one at a time; ``(completion tokens, verify steps, summed histogram)``."""
    tokens = verify = 0
    histogram: list[int] = []
    for prompt in prompts:
        body = {"text": prompt, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0}}
        answer = http.post_json("/generate", body)
        meta = answer.get("meta_info") if isinstance(answer, Mapping) else None
        meta = meta if isinstance(meta, Mapping) else {}
        got, ct = meta.get("completion_tokens"), meta.get("spec_verify_ct")
        if is_int(got) and is_int(ct) and ct > 0:
            if not (0 <= got <= max_new_tokens and ct <= max_new_tokens):
                raise EngineError(
                    f"/generate answered completion_tokens {str(got)[:40]} and spec_verify_ct {str(ct)[:40]} for a "
                    f"request of max_new_tokens {max_new_tokens}: not what it decoded"
                )
            tokens, verify = tokens + int(got), verify + int(ct)
        hist = meta.get("spec_accept_histogram", meta.get("spec_correct_drafts_histogram"))
        if isinstance(hist, list) and all(is_int(n) and n >= 0 for n in hist):
            histogram += [0] * (len(hist) - len(histogram))
            for i, n in enumerate(hist):
                histogram[i] += int(n)
    return tokens, verify, histogram


def probe_sglang(http: ProbeHttp, plan: ProbePlan, engine: Engine) -> ServerReading:
    """Read an sglang server (see the module docstring) and send at most
    ``plan.max_requests`` short ``/generate`` requests.

    Raises:
        EngineError: the server stops answering, or answers an error.
    """
    info = read_sglang_info(http) or {}
    action = sglang_action(info)
    flags = {k: info[k] for k in SGLANG_PROBE_FLAGS if k in info}
    notes: list[str] = []
    server_accept = parse_server_info(info).accept_length
    sizes, how = _batch_sizes(http, info, plan)
    target = info.get("model_path") if isinstance(info.get("model_path"), str) else None
    acceptance: AcceptanceReading | None = None
    sent = 0
    if action != (0, 0, 0):
        prompts, note = probe_prompts(plan, target, server_accept is not None)
        if note:
            notes.append(note)
        if prompts:
            before = http.posts
            tokens, verify, histogram = _send(http, prompts, plan.max_new_tokens)
            sent = http.posts - before
            if verify > 0:
                chain = action[1] == 1
                acceptance = AcceptanceReading(
                    accept_length=tokens / verify,
                    num_drafts=None,
                    verify_steps=verify,
                    position_accept=position_accept_from_histogram(histogram, action[0]) if chain else None,
                    accept_histogram=tuple(histogram) or None,
                    source="probe requests",
                )
            else:
                notes.append("the probe's /generate answers carried no spec_verify_ct: no acceptance from them")
        if acceptance is None and server_accept is not None:
            acceptance = AcceptanceReading(server_accept, None, None, None, None, "server metrics")
        elif acceptance is not None and server_accept is not None:
            notes.append(f"the server's own avg_spec_accept_length since launch: {server_accept:.3f}")
        if not sizes and sent:
            after = parse_server_info(read_sglang_info(http) or {}).step_times
            if after:
                sizes = _step_time_sizes(after)
                how = (
                    "sglang /server_info step_time_dict after the probe's requests (none before them): the batch "
                    "sizes of the probe's own requests, sent one at a time, not of your traffic"
                )
    if info.get("speculative_adaptive"):
        notes.append("the server runs --speculative-adaptive: the steps it runs move with the batch size; "
                     "the action is its initial one")  # fmt: skip
    draft = info.get("speculative_draft_model_path")
    version = info.get("version")
    return ServerReading(
        engine=engine,
        engine_version=version if isinstance(version, str) else None,
        url=http.base_url,
        target=target,
        draft=draft if isinstance(draft, str) and action != (0, 0, 0) else None,
        action=action,
        flags=flags,
        acceptance=acceptance,
        batch_sizes_seen=sizes,
        batch_size_source=how,
        requests_sent=sent,
        notes=tuple(notes),
    )


def _gpu_ids(info: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The GPU indices of an sglang server's ranks: ``base_gpu_id + i * gpu_id_step`` for its
    ``tp_size * pp_size * dp_size`` ranks (``None`` when ``/server_info`` has no ``tp_size``)."""
    sizes = [info.get(k, 1) for k in ("tp_size", "pp_size", "dp_size")]
    if "tp_size" not in info or not all(is_int(v) and 1 <= v <= 1024 for v in sizes):
        return None
    base, step = info.get("base_gpu_id", 0), info.get("gpu_id_step", 1)
    if not (is_int(base) and 0 <= base <= 1024 and is_int(step) and 1 <= step <= 64):
        return None
    ranks = sizes[0] * sizes[1] * sizes[2]
    return tuple(int(base) + i * int(step) for i in range(min(ranks, 1024)))


def sglang_facts(http: ProbeHttp) -> ServerFacts:
    """What an sglang server is (``/server_info``; whether ``/metrics`` answers).

    Raises:
        EngineError: the server does not answer.
    """
    info = read_sglang_info(http) or {}
    notes = []
    metrics = http.get_text("/metrics") is not None
    if not metrics:
        notes.append("sglang serves no /metrics: start it with --enable-metrics (govern reads its running batch there)")
    max_bs = info.get("max_running_requests")
    gpus = _gpu_ids(info)
    if gpus is None:
        notes.append("sglang's /server_info names no tp_size: its GPUs are not known from the server")
    target, draft = info.get("model_path"), info.get("speculative_draft_model_path")
    action = sglang_action(info)
    return ServerFacts(
        action=action,
        adaptive=bool(info.get("speculative_adaptive")),
        max_batch_size=int(max_bs) if is_int(max_bs) and max_bs > 0 else None,
        gpus=gpus,
        target=target if isinstance(target, str) else None,
        draft=draft if isinstance(draft, str) and action != (0, 0, 0) else None,
        metrics_enabled=metrics,
        notes=tuple(notes),
    )


def sglang_live_metrics(page: str) -> LiveMetrics:
    """One ``/metrics`` page of sglang as :class:`~specband.engines.probing.LiveMetrics`
    (:data:`SGLANG_LIVE_METRICS`; the accept-length gauge averaged over data-parallel ranks)."""
    values: dict[str, float | None] = {}
    problems = []
    for key, name in SGLANG_LIVE_METRICS.items():
        values[key], problem = metric_value(page, name, "mean" if key == "accept_length" else "sum")
        if problem:
            problems.append(problem)
    accept = values["accept_length"]
    return LiveMetrics(
        running=values["running"],
        waiting=values["waiting"],
        output_tokens_total=values["output_tokens_total"],
        accept_length=accept if accept is not None and accept > 0 else None,  # 0 before any draft ran
        names=dict(SGLANG_LIVE_METRICS),
        problems=tuple(problems),
    )
