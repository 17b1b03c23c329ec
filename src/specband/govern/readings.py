"""Readings are checked before anything acts on them: a hostile or broken ``/metrics`` or NVML
answer is logged and skipped, never obeyed.

:func:`check_server` turns one scrape (:class:`~specband.engines.probing.LiveMetrics`) into a
:class:`ServerSample`, or a :class:`Skip` saying why not: the running batch missing, not a
finite number, negative, or over the server's own bound (``max_running_requests``, else
:data:`~specband.core.limits.MAX_BATCH_SIZE`); a counter that is not a finite number, negative
or going backwards (a restarted server: the next reading starts afresh); an answer that
arrived too late (stale); counters that have not moved for :data:`FROZEN_AFTER_S` seconds while
requests run (a frozen page). :func:`check_gpu` does the same for a GPU: power missing, not
finite, negative or over :data:`ABSURD_POWER_FACTOR` times the board's highest limit; an
energy counter going backwards, standing still while power is drawn, or implying such a power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specband.core.limits import MAX_BATCH_SIZE
from specband.engines.probing import LiveMetrics
from specband.govern.controller import GpuReading

__all__ = [
    "ABSURD_POWER_FACTOR",
    "FROZEN_AFTER_S",
    "GpuRaw",
    "ServerSample",
    "Skip",
    "check_gpu",
    "check_server",
]

#: A power reading above this many times the board's highest limit is absurd, not a spike.
#: Basis: NVML's power is averaged (over ~1 s on most boards, 25 ms "instant" on Hopper);
#: boards draw short transients above their limit (an H100 SXM's are bounded by its 700 W
#: cap plus the power brake), never 1.5x it for a reading.
ABSURD_POWER_FACTOR = 1.5
#: Seconds a server's output-token counter may stand still while its gauge says requests
#: run before its readings count as stale (a frozen page): sglang updates its gauges every
#: ``decode_log_interval`` (40) decode steps, well under a second on a GPU.
FROZEN_AFTER_S = 10.0


@dataclass(frozen=True)
class Skip:
    """A reading that was not acted on, and why (``what`` names the source: ``server`` or
    ``gpu N``)."""

    what: str
    reason: str


@dataclass(frozen=True)
class ServerSample:
    """One checked scrape of the server.

    Attributes:
        t_s: when its answer arrived, s (the governor's clock).
        batch_size: requests in the running batch.
        waiting: requests queued, or ``None``.
        output_tokens_total: output tokens since launch, or ``None`` (not exposed).
        accept_length: sglang's accept-length gauge, or ``None``.
        drafts_total, draft_tokens_total, accepted_total: vLLM's spec-decode counters, or ``None``.
    """

    t_s: float
    batch_size: int
    waiting: int | None
    output_tokens_total: float | None
    accept_length: float | None
    drafts_total: float | None
    draft_tokens_total: float | None
    accepted_total: float | None


def _bad(value: float | None) -> bool:
    return value is not None and (not math.isfinite(value) or value < 0)


def check_server(
    metrics: LiveMetrics,
    t_s: float,
    *,
    asked_s: float,
    max_age_s: float,
    previous: ServerSample | None,
    max_batch_size: int | None,
    frozen_since_s: float | None = None,
) -> ServerSample | Skip:
    """Check one scrape.

    Args:
        metrics: the parsed page.
        t_s: when the answer arrived, s.
        asked_s: when it was asked for, s.
        max_age_s: the oldest answer acted on (asked this long before it arrived: stale).
        previous: the last sample acted on (its counters must not go backwards), or ``None``.
        max_batch_size: the server's own bound on the running batch, or ``None``.
        frozen_since_s: since when the output-token counter has stood still while requests
            ran (kept by the caller), or ``None``.

    Returns:
        the :class:`ServerSample`, or a :class:`Skip` naming the reason.
    """
    name = metrics.names.get("running", "the running-requests gauge")
    if metrics.problems:
        return Skip("server", "; ".join(metrics.problems))
    if t_s - asked_s > max_age_s:
        return Skip("server", f"stale: the answer took {t_s - asked_s:.1f} s (more than {max_age_s:g} s)")
    running = metrics.running
    if running is None:
        return Skip("server", f"no {name} on /metrics")
    bound = max_batch_size or MAX_BATCH_SIZE
    if running < 0 or running > bound:
        where = "the server's max_running_requests" if max_batch_size else "the largest batch size specband takes"
        return Skip("server", f"{name} is {running:g}, outside 0..{bound} ({where})")
    counters = {
        "output tokens": metrics.output_tokens_total,
        "drafts": metrics.drafts_total,
        "draft tokens": metrics.draft_tokens_total,
        "accepted tokens": metrics.accepted_total,
        "queued requests": metrics.waiting,
    }
    for label, value in counters.items():
        if _bad(value):
            return Skip("server", f"{label} is {value!r}: not a count")
    if metrics.accept_length is not None and not 1.0 <= metrics.accept_length <= 1025.0:
        return Skip("server", f"accept length {metrics.accept_length:g} is not >= 1")
    if previous is not None:
        pairs = (
            ("output tokens", metrics.output_tokens_total, previous.output_tokens_total),
            ("drafts", metrics.drafts_total, previous.drafts_total),
            ("draft tokens", metrics.draft_tokens_total, previous.draft_tokens_total),
            ("accepted tokens", metrics.accepted_total, previous.accepted_total),
        )
        for label, now, before in pairs:
            if now is not None and before is not None and now < before:
                return Skip("server", f"the {label} counter went back from {before:g} to {now:g} (a restarted server?)")
    if frozen_since_s is not None and t_s - frozen_since_s > FROZEN_AFTER_S:
        return Skip(
            "server",
            f"stale: output tokens have not moved for {t_s - frozen_since_s:.0f} s while {running:g} requests run",
        )
    return ServerSample(
        t_s=t_s,
        batch_size=round(running),
        waiting=None if metrics.waiting is None else round(metrics.waiting),
        output_tokens_total=metrics.output_tokens_total,
        accept_length=metrics.accept_length,
        drafts_total=metrics.drafts_total,
        draft_tokens_total=metrics.draft_tokens_total,
        accepted_total=metrics.accepted_total,
    )


@dataclass(frozen=True)
class GpuRaw:
    """What a GPU answered, before it is checked: power (W), energy counter (mJ) and the limit
    in force (W), each ``None`` when the backend gave nothing; whether it reported a power or
    thermal cap (``None``: unknown)."""

    t_s: float
    power_w: float | None
    energy_mj: float | None
    limit_w: float | None
    throttled: bool | None = None


def check_gpu(
    raw: GpuRaw, index: int, *, max_limit_w: float, previous: GpuRaw | None, limit_w: float
) -> GpuReading | Skip:
    """Check one GPU reading.

    Args:
        raw: what the GPU answered.
        index: the GPU's index, for messages.
        max_limit_w: the board's highest limit (NVML's constraint), W.
        previous: its last reading acted on, or ``None``.
        limit_w: the limit to compute utilisation against (in force; in a dry run, the one the
            loop would have set), W.

    Returns:
        the :class:`~specband.govern.controller.GpuReading`, or a :class:`Skip`.
    """
    what = f"gpu {index}"
    absurd = ABSURD_POWER_FACTOR * max_limit_w
    p = raw.power_w
    if p is None:
        return Skip(what, "no power reading")
    if not math.isfinite(p) or p < 0:
        return Skip(what, f"power {p!r} W is not a power")
    if p > absurd:
        return Skip(
            what, f"power {p:g} W is over {ABSURD_POWER_FACTOR:g}x the board's highest limit ({max_limit_w:g} W)"
        )
    energy = raw.energy_mj
    if energy is not None and (not math.isfinite(energy) or energy < 0):
        return Skip(what, f"energy counter {energy!r} mJ is not a count")
    if energy is not None and previous is not None and previous.energy_mj is not None:
        dt = raw.t_s - previous.t_s
        delta = energy - previous.energy_mj
        if delta < 0:
            return Skip(what, f"the energy counter went back from {previous.energy_mj:g} to {energy:g} mJ")
        if dt > 0 and delta / 1000.0 / dt > absurd:
            return Skip(what, f"the energy counter implies {delta / 1000.0 / dt:.0f} W, over {absurd:g} W")
        if dt > 0 and delta == 0 and p > 1.0 and previous.power_w is not None and previous.power_w > 1.0:
            return Skip(what, f"stale: the energy counter stood still for {dt:.1f} s while {p:g} W was drawn")
    if raw.limit_w is not None and (not math.isfinite(raw.limit_w) or raw.limit_w <= 0):
        return Skip(what, f"power limit {raw.limit_w!r} W is not a limit")
    return GpuReading(t_s=raw.t_s, power_w=p, energy_mj=energy, limit_w=limit_w)
