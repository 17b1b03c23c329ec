"""What ``specband probe`` reads from a running server, in the engines' common terms.

Each engine reads its own endpoints (:meth:`specband.engines.sglang_serving.SglangServing.probe_server`,
:meth:`specband.engines.vllm_serving.VllmServing.probe_server`) into one :class:`ServerReading`: the
config it runs (engine flags and the contract triple), its acceptance
(:class:`AcceptanceReading`), the batch sizes it runs and how they were derived, and how many
requests the probe sent. The probe only reads (``GET``) and sends at most
:attr:`ProbePlan.max_requests` short completion requests; it never changes the server.

This module also holds the pieces both engines use: the Prometheus text parser
(:func:`metric_samples`), the sampling of a running-requests gauge (:func:`watch_gauge`,
:func:`running_requests`), the per-position acceptance of a chain from sglang's accept
histogram (:func:`position_accept_from_histogram`), and the check of a reading against the
bounds its readers hold a probe file to (:func:`check_action`, :func:`check_reading`): a server
that reports a negative, huge or type-confused config, an accept length above steps + 1 or a
running-requests gauge of 1e308 is refused before the probe file is written (hostile trial
P07-P09, P13), never written as "measured" for ``--acceptance-from`` to refuse later.

``specband govern`` reads a server every second: what the server is once
(:class:`ServerFacts`, :meth:`~specband.engines.base.EngineServing.server_facts`) and each scrape of its
``/metrics`` as :class:`LiveMetrics` (:meth:`~specband.engines.base.EngineServing.live_metrics`), whose
values are read with :func:`metric_value`: a sample that is there but not a finite number is
reported as a problem, never dropped silently (the governor logs it and skips the reading).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from specband.contract.actions import Action, validate_action
from specband.core.errors import EngineError, InvalidActionError
from specband.core.limits import (
    MAX_BATCH_SIZE,
    MAX_DRAFT_TOKENS,
    MAX_EAGLE_TOPK,
    MAX_HISTOGRAM_COUNT,
    MAX_SPECULATIVE_STEPS,
    is_int,
)


class ProbedEngine(Protocol):
    """What a reading says of the engine that read it (the :class:`~specband.engines.base.Engine`
    itself: its name, how lines name it, and how it spells a config)."""

    name: str
    display_name: str

    def speculative_flags(self, action: Action, draft_model: str | None) -> list[str]:
        """The engine's flags of ``action``."""
        ...


__all__ = [
    "AcceptanceReading",
    "LiveMetrics",
    "ProbePlan",
    "ServerFacts",
    "ServerReading",
    "check_action",
    "check_reading",
    "metric_samples",
    "metric_value",
    "position_accept_from_histogram",
    "probe_prompts",
    "running_requests",
    "watch_gauge",
]

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ProbePlan:
    """What the probe may do to a server.

    Attributes:
        max_requests: at most this many completion requests are sent (``--max-requests``; 0:
            none, the server is only read).
        max_new_tokens: tokens each request decodes (``--max-new-tokens``).
        prompts: the prompts of ``--prompts`` given the target's name (the server's model path,
            which renders ``messages`` through its chat template), or ``None`` without ``--prompts``.
        builtin_prompts: the prompts sent when no ``--prompts`` is given and the server has no
            acceptance of its own yet.
        watch_s: real seconds over which a running-requests gauge is sampled.
        watch_samples: samples taken over ``watch_s``.
    """

    max_requests: int
    max_new_tokens: int
    prompts: Callable[[str | None], Sequence[str]] | None
    builtin_prompts: Sequence[str]
    watch_s: float = 1.0
    watch_samples: int = 5


@dataclass(frozen=True)
class AcceptanceReading:
    """The acceptance a server showed (the ``acceptance`` object of the probe file).

    Attributes:
        accept_length: tokens per verify step (bonus token included, >= 1).
        num_drafts: vLLM's ``spec_decode_num_drafts`` behind it (``None`` for sglang).
        verify_steps: verify steps behind it (sglang's ``spec_verify_ct``; vLLM's drafts), or
            ``None`` when the server's cumulative figure gives none.
        position_accept: per draft position i = 1..steps, the fraction of verify steps whose
            i-th draft token was accepted (chains only), or ``None``.
        accept_histogram: sglang's ``spec_accept_histogram`` summed over the probe's requests
            (verify steps by draft tokens accepted), or ``None``.
        source: ``"server metrics"`` (the server's own counters since launch) or
            ``"probe requests"`` (the probe's requests alone).
    """

    accept_length: float
    num_drafts: int | None
    verify_steps: int | None
    position_accept: tuple[float, ...] | None
    accept_histogram: tuple[int, ...] | None
    source: str

    def to_json(self) -> dict[str, Any]:
        """The probe file's ``acceptance`` object."""
        return {
            "accept_length": round(self.accept_length, 6),
            "num_drafts": self.num_drafts,
            "verify_steps": self.verify_steps,
            "position_accept": None if self.position_accept is None else [round(p, 6) for p in self.position_accept],
            "accept_histogram": None if self.accept_histogram is None else list(self.accept_histogram),
            "source": self.source,
        }


@dataclass(frozen=True)
class ServerReading:
    """Everything the probe read from one server.

    Attributes:
        engine: the engine that read it (:class:`~specband.engines.base.Engine`).
        engine_version: the release the server reports, or ``None``.
        url: the server's base URL.
        target: the served model (name or path), or ``None``.
        draft: the draft model path, or ``None`` (plain, or not exposed by the engine).
        action: the contract triple ``(steps, topk, num_draft_tokens)`` it runs (``(0, 0, 0)`` plain).
        flags: the speculative flags as the engine reports them.
        acceptance: its acceptance, or ``None`` when it has none (plain decoding, or no draft
            ran yet and no request was sent).
        batch_sizes_seen: the batch sizes it ran, increasing (may be empty).
        batch_size_source: how they were derived (printed and written beside them).
        requests_sent: the completion requests the probe sent.
        notes: what the reading could not see, one line each.
    """

    engine: ProbedEngine
    engine_version: str | None
    url: str
    target: str | None
    draft: str | None
    action: tuple[int, int, int]
    flags: Mapping[str, Any]
    acceptance: AcceptanceReading | None
    batch_sizes_seen: tuple[int, ...]
    batch_size_source: str
    requests_sent: int
    notes: tuple[str, ...] = field(default=())


def metric_samples(text: str, name: str, *, finite_only: bool = True) -> list[tuple[dict[str, str], float]]:
    """The samples of metric ``name`` on a Prometheus text page: ``(labels, value)`` each
    (unparsable values skipped; non-finite ones too unless ``finite_only`` is false)."""
    out: list[tuple[dict[str, str], float]] = []
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        m = _SAMPLE.match(line.strip())
        if m is None or m.group("name") != name:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        if math.isfinite(value) or not finite_only:
            out.append((dict(_LABEL.findall(m.group("labels") or "")), value))
    return out


def running_requests(page: str, name: str) -> float | None:
    """The sum of the samples of the running-requests gauge ``name`` on a ``/metrics``
    page, or ``None`` when the page has none.

    Raises:
        EngineError: a sample is not a whole number of requests in ``[0, MAX_BATCH_SIZE]``
            (NaN, -5, 2.5, 1e308: the gauge counts requests, and a batch size read from it
            is held to :data:`~specband.core.limits.MAX_BATCH_SIZE` like every other).
    """
    samples = metric_samples(page, name, finite_only=False)
    for _, value in samples:
        if not (math.isfinite(value) and 0 <= value <= MAX_BATCH_SIZE and value == int(value)):
            raise EngineError(
                f"metrics_failed: {name} is {value:g}, not a count of running requests in [0, {MAX_BATCH_SIZE}] "
                "(specband.core.limits.MAX_BATCH_SIZE); the server's /metrics is not read further"
            )
    return sum(v for _, v in samples) if samples else None


@dataclass(frozen=True)
class ServerFacts:
    """What a running server is, read once when ``govern`` starts.

    Attributes:
        action: the contract triple it runs (``(0, 0, 0)``: plain; with an adaptive schedule,
            the one it starts from), or ``None`` when the engine does not expose it.
        adaptive: the speculation moves with the batch size (sglang ``--speculative-adaptive``),
            so the action of a window is not known from the server.
        max_batch_size: the most requests it runs at once (sglang's ``max_running_requests``),
            or ``None`` when not reported.
        gpus: the GPU indices it runs on as it reports them (sglang: ``base_gpu_id`` +
            ``i * gpu_id_step`` for ``tp_size * dp_size`` ranks), or ``None`` when not reported.
        target, draft: the models it serves (name or path), or ``None``.
        metrics_enabled: whether it serves ``/metrics`` (sglang needs ``--enable-metrics``).
        notes: what could not be read, one line each.
    """

    action: tuple[int, int, int] | None
    adaptive: bool
    max_batch_size: int | None
    gpus: tuple[int, ...] | None
    target: str | None
    draft: str | None
    metrics_enabled: bool
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class LiveMetrics:
    """One scrape of a server's ``/metrics`` as ``govern`` reads it.

    Attributes:
        running: requests in the running batch (the engine's gauge), or ``None`` when absent.
        waiting: requests queued, or ``None``.
        output_tokens_total: output tokens since launch (counter), or ``None``.
        accept_length: sglang's gauge of the mean accept length over its last log interval
            (``None`` on vLLM, or before any draft).
        drafts_total, draft_tokens_total, accepted_total: vLLM's spec-decode counters (verify
            steps with drafts, draft tokens, accepted draft tokens), or ``None``.
        names: the metric names behind ``running``, ``output_tokens_total`` and the
            acceptance, for messages.
        problems: samples present but unusable (``"sglang:num_running_reqs is nan"``): a
            reading with any is not acted on.
    """

    running: float | None
    waiting: float | None
    output_tokens_total: float | None
    accept_length: float | None = None
    drafts_total: float | None = None
    draft_tokens_total: float | None = None
    accepted_total: float | None = None
    names: Mapping[str, str] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


def metric_value(text: str, name: str, how: str = "sum") -> tuple[float | None, str | None]:
    """The value of metric ``name`` on a Prometheus text page: the sum of its samples (``how``
    ``"sum"``; samples of a tensor-parallel rank other than 0 left out, as they repeat rank
    0's) or their mean (``"mean"``).

    Returns:
        ``(value, None)``; ``(None, None)`` when the page has no such sample; ``(None,
        problem)`` when a sample is there but is not a finite number (``"NAME is nan"``).
    """
    values: list[float] = []
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        m = _SAMPLE.match(line.strip())
        if m is None or m.group("name") != name:
            continue
        labels = dict(_LABEL.findall(m.group("labels") or ""))
        if labels.get("tp_rank", "0") != "0":
            continue
        raw = m.group("value")
        try:
            value = float(raw)
        except ValueError:
            return None, f"{name} is {raw[:40]!r}, not a number"
        if not math.isfinite(value):
            return None, f"{name} is {raw[:40]}"
        values.append(value)
    if not values:
        return None, None
    return (sum(values) if how == "sum" else sum(values) / len(values)), None


def watch_gauge(read: Callable[[], float | None], seconds: float, samples: int) -> list[float]:
    """``samples`` readings of a gauge ``seconds`` apart in all (``None`` readings dropped)."""
    values: list[float] = []
    for i in range(max(1, samples)):
        if i:
            time.sleep(seconds / max(1, samples - 1))
        value = read()
        if value is not None:
            values.append(value)
    return values


def position_accept_from_histogram(histogram: Sequence[int], steps: int) -> tuple[float, ...] | None:
    """Per draft position i = 1..``steps``, the fraction of verify steps that accepted at
    least i draft tokens (a chain accepts position i only when it accepted 1..i-1): sglang's
    ``spec_accept_histogram[j]`` counts the verify steps that accepted j draft tokens. ``None``
    without verify steps."""
    total = sum(histogram)
    if total <= 0 or steps <= 0:
        return None
    return tuple(sum(histogram[i:]) / total for i in range(1, steps + 1))


def probe_prompts(
    plan: ProbePlan, target: str | None, server_has_acceptance: bool
) -> tuple[tuple[str, ...], str | None]:
    """The prompts to send (at most ``plan.max_requests``, cycling) and the note that says why
    (``None`` when nothing needs saying): the first ``max_requests`` of ``--prompts`` when
    given (each once: greedy decoding of one prompt twice shows nothing new), else the
    built-in ones, cycled, when the server has no acceptance of its own yet, else none."""
    if plan.max_requests <= 0:
        return (), None
    if plan.prompts is not None:
        given = tuple(plan.prompts(target))
    elif not server_has_acceptance:
        given = tuple(plan.builtin_prompts)
        note = (
            "the server had decoded no draft yet: the probe's requests used specband's built-in prompts, "
            "not your workload"
        )
        return tuple(given[i % len(given)] for i in range(plan.max_requests)), note
    else:
        return (), None
    return given[: plan.max_requests], None


def check_action(raw: Sequence[Any], names: Sequence[str]) -> tuple[int, int, int]:
    """The contract triple a server reports, checked as a probe file's reader checks it:
    integers (not a string, list or bool), a valid sglang config
    (:func:`~specband.contract.actions.validate_action`: no negative or partly-zero triple, the
    draft budget kept, ``topk == 1`` canonicalised) within
    :data:`~specband.core.limits.MAX_SPECULATIVE_STEPS`, :data:`~specband.core.limits.MAX_EAGLE_TOPK`
    and :data:`~specband.core.limits.MAX_DRAFT_TOKENS`.

    Args:
        raw: the three values as the server gave them.
        names: the server's names for them (the error names the field).

    Raises:
        EngineError: one line naming the field and the value (hostile trial P07, P08).
    """
    bounds = (MAX_SPECULATIVE_STEPS, MAX_EAGLE_TOPK, MAX_DRAFT_TOKENS)
    for name, value, high in zip(names, raw, bounds, strict=True):
        if not is_int(value) or not 0 <= value <= high:
            raise EngineError(
                f"the server reports {name} = {repr(value)[:60]}, not an integer in [0, {high}] "
                "(specband.core.limits); its config cannot be read"
            )
    try:
        action = validate_action(tuple(int(v) for v in raw))
    except InvalidActionError as exc:
        raise EngineError(f"the server reports {tuple(raw)}: not a valid config ({exc})") from None
    return (action[0], action[1], action[2])


def check_reading(reading: ServerReading) -> None:
    """Hold a reading to the bounds the probe file's reader (``--acceptance-from``) and the
    simulator hold it to, before the file is written: the action as :func:`check_action`;
    an acceptance only with a speculative action, its accept length in ``[1, steps + 1]``,
    its per-position fractions in ``[0, 1]`` (at most ``steps`` of them), its accept histogram
    at most ``steps + 1`` bins of counts in ``[0, MAX_HISTOGRAM_COUNT]``; batch sizes in
    ``[1, MAX_BATCH_SIZE]``.

    Raises:
        EngineError: one line naming what the server reported and the bound (hostile trial
            P07-P09, P13).
    """
    steps, topk, draft = check_action(reading.action, ("steps", "topk", "num_draft_tokens"))
    for bs in reading.batch_sizes_seen:
        if not 1 <= bs <= MAX_BATCH_SIZE:
            raise EngineError(f"the server ran batch size {bs}, outside [1, {MAX_BATCH_SIZE}] (MAX_BATCH_SIZE)")
    a = reading.acceptance
    if a is None:
        return
    action = (steps, topk, draft)
    if steps == 0:
        raise EngineError(f"the server reports an acceptance ({a.source}) but runs no speculative config")
    if not (math.isfinite(a.accept_length) and 1.0 <= a.accept_length <= steps + 1.0 + 1e-9):
        raise EngineError(
            f"the server's accept length ({a.source}) {a.accept_length:g} is outside [1, steps + 1 = {steps + 1}] "
            f"for {action}: a chain of {steps} draft steps accepts at most {steps} tokens and the bonus one"
        )
    if a.position_accept is not None and (
        len(a.position_accept) > steps or any(not 0.0 <= p <= 1.0 for p in a.position_accept)
    ):
        raise EngineError(
            f"the server's per-position acceptance ({a.source}) is not {steps} fractions in [0, 1] for {action}"
        )
    for name, count in (("verify steps", a.verify_steps), ("drafts", a.num_drafts)):
        if count is not None and not 0 <= count <= MAX_HISTOGRAM_COUNT:
            raise EngineError(
                f"the server's {name} ({a.source}) {str(count)[:40]} is outside [0, {MAX_HISTOGRAM_COUNT}]"
            )
    hist = a.accept_histogram
    if hist is not None and (len(hist) > steps + 1 or any(not 0 <= n <= MAX_HISTOGRAM_COUNT for n in hist)):
        raise EngineError(
            f"the server's accept histogram ({a.source}) has {len(hist)} bins for {action} (at most steps + 1 = "
            f"{steps + 1}, counts in [0, {MAX_HISTOGRAM_COUNT}])"
        )
