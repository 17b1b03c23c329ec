"""One clock per batch size: a sweep's speeds from sglang's step times and from the wall
clock are not compared with each other (:func:`one_speed_source`, hostile trial N58)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

from specband.core.limits import is_number

__all__ = ["one_speed_source", "speed_source_note"]


def one_speed_source(rows: list[Any]) -> tuple[list[Any], tuple[int, ...], tuple[int, ...]]:
    """The rows with one speed source per batch size, and the batch sizes changed or left mixed.

    A run's speed comes from sglang's recorded step times (``speed_source: step_time``) or,
    when its timed batch recorded none (a short run: sglang records one value per 40 decode
    iterations, :func:`specband.engines.sglang.timed_batch_step_times`), from the wall clock.
    With a short ``--max-new-tokens`` the baseline (one token per iteration) may get step
    times while a speculative config (several tokens per iteration) does not (hostile trial
    N58): their ratio then compares two clocks. At such a batch size every successful row's
    speed is its ``wall_clock_tok_s`` (every sweep row records it), so the batch size is
    compared on one clock; where a row lacks it the batch size stays mixed (a note says so).

    Returns:
        ``(rows, batch sizes now on the wall clock, batch sizes left mixed)``.
    """
    sources: dict[int, set[str]] = defaultdict(set)
    for r in rows:
        source = r.raw.get("speed_source")
        if r.trainable and isinstance(source, str):
            sources[r.batch_size].add(source)
    mixed = {bs for bs, found in sources.items() if {"step_time", "wall_clock"} <= found}
    if not mixed:
        return rows, (), ()
    changed: set[int] = set()
    for bs in sorted(mixed):
        mine = [r for r in rows if r.batch_size == bs and r.trainable]
        if all(is_number(r.raw.get("wall_clock_tok_s")) and r.raw["wall_clock_tok_s"] > 0 for r in mine):
            changed.add(bs)
    out = [
        replace(r, speed_tok_s=float(r.raw["wall_clock_tok_s"])) if r.batch_size in changed and r.trainable else r
        for r in rows
    ]
    return out, tuple(sorted(changed)), tuple(sorted(mixed - changed))


def speed_source_note(where: str, wall_clock: tuple[int, ...], mixed: tuple[int, ...]) -> str | None:
    """The sentence a command prints about :func:`one_speed_source`'s batch sizes (``where``:
    the file), a ``warning:`` when some were left mixed; ``None`` when there is none."""
    if mixed:
        sizes = ", ".join(map(str, mixed))
        return (
            f"warning: {where}: at batch size(s) {sizes} some speeds come from sglang's step times and others "
            "from the wall clock (runs too short for step times, e.g. a small --max-new-tokens) and not every "
            "row records wall_clock_tok_s: their speed-ups compare two clocks"
        )
    if wall_clock:
        sizes = ", ".join(map(str, wall_clock))
        return (
            f"{where}: at batch size(s) {sizes} some runs were too short for sglang's step times (one per 40 "
            "decode iterations; raise --max-new-tokens): every speed there is read on the wall clock, so that "
            "the configs are compared on one clock"
        )
    return None
