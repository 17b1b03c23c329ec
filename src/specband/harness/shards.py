"""Shards of a sweep: ``sweep --shard K/N`` measures a deterministic, balanced share of the runs.

A sweep's runs are grouped into *launch units*, the runs one server launch serves, in
launch order (:func:`launch_units`): one run each by default, or every batch size of one
action in one repeat with ``--one-launch-per-config``. Units are never split, so a shard
launches exactly the servers the unsharded sweep would have launched for those runs.

Units are :meth:`specband.harness.pipeline.SweepPlan.units` (the sweep's own launch
units). Partition (:func:`shard_units`): longest-processing-time-first greedy (Graham 1969):
units in decreasing expected cost (ties: launch order) each go to the shard with the least
cost so far (ties: the lowest shard number). Its largest shard costs at most 4/3 of the
best possible split's (plus one unit); it depends only on the run list, so every machine
running ``--shard K/N`` of the same sweep computes the same partition, and every run is in
exactly one shard. A shard keeps its units in launch order (repeats stay full passes over
its share, for their different thermal states).

Cost of a unit (:func:`unit_cost`): one launch plus one per run (a server launch with its
CUDA-graph capture takes about as long as one timed batch; the study's runs: 30-90 s each).

The partition is computed over the *whole* sweep (no run skipped): a resumed shard then
skips the runs already in its file, so resuming never moves a run to another shard.

Reference: R. L. Graham, Bounds on multiprocessing timing anomalies, SIAM J. Appl. Math.
17 (1969) (the LPT rule and its 4/3 bound).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specband.core.errors import ConfigError
from specband.core.limits import MAX_SHARDS
from specband.harness.pipeline import LaunchUnit, SweepPlan

__all__ = ["ShardSpec", "parse_shard", "shard_plan", "shard_runs", "shard_units", "unit_cost"]


@dataclass(frozen=True)
class ShardSpec:
    """Shard ``number`` of ``count`` (1-based, as written ``--shard K/N``).

    Raises:
        ConfigError: ``count < 1`` or ``number`` outside ``[1, count]`` (naming ``--shard``).
    """

    number: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 1 <= self.number <= self.count:
            raise ConfigError(f"--shard: expected K/N with 1 <= K <= N, got {self.number}/{self.count}")
        if self.count > MAX_SHARDS:
            raise ConfigError(f"--shard: at most {MAX_SHARDS} shards, got N = {self.count}")

    def __str__(self) -> str:
        return f"{self.number}/{self.count}"


_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


def parse_shard(text: str) -> ShardSpec:
    """Parse the ``--shard K/N`` option (``"2/4"``: the second of four shards).

    Raises:
        ConfigError: not ``K/N`` with integers ``1 <= K <= N``; one line naming ``--shard``.
    """
    match = _SHARD.fullmatch(text)
    if match is None:
        raise ConfigError(f"--shard: expected K/N (e.g. 1/4: the first of four shards), got {text!r}")
    if max(len(match.group(1)), len(match.group(2))) > len(str(MAX_SHARDS)):  # never int() of a huge string
        raise ConfigError(f"--shard: at most {MAX_SHARDS} shards, got {text.strip()!r}")
    return ShardSpec(int(match.group(1)), int(match.group(2)))


def unit_cost(unit: LaunchUnit) -> float:
    """Expected GPU time of a unit in run-lengths: 1 for the launch plus 1 per run."""
    return 1.0 + len(unit.runs)


def shard_units(
    units: Sequence[LaunchUnit], shard: ShardSpec, cost: Callable[[LaunchUnit], float] = unit_cost
) -> list[LaunchUnit]:
    """The units of ``shard``, in launch order (see the module docstring for the rule).

    Args:
        units: every unit of the sweep in launch order (``SweepPlan.units()`` of the plan
            with nothing done).
        shard: which share.
        cost: expected cost of a unit (> 0), e.g. seconds.

    Returns:
        the share; the shares of ``1/N .. N/N`` are disjoint and together hold every unit.
    """
    loads = [0.0] * shard.count
    mine: list[int] = []
    for position in sorted(range(len(units)), key=lambda i: (-cost(units[i]), i)):
        target = min(range(shard.count), key=lambda k: (loads[k], k))
        loads[target] += cost(units[position])
        if target == shard.number - 1:
            mine.append(position)
    return [units[i] for i in sorted(mine)]


def shard_runs(plan: SweepPlan, shard: ShardSpec) -> set[tuple[int, int]]:
    """``(index, repeat)`` of the runs shard ``shard`` of ``plan``'s whole sweep measures
    (its done runs are ignored: the partition never depends on what a file holds).

    The sweep measures a shard by skipping every other run, as if it were already done.
    """
    units = dataclasses.replace(plan, done=frozenset()).units()
    return {run.key for unit in shard_units(units, shard) for run in unit.runs}


def shard_plan(plan: SweepPlan, shard: ShardSpec | None) -> tuple[SweepPlan, int]:
    """``plan`` restricted to ``shard`` (the other shards' runs marked done), and how many
    runs the shard holds in all (``plan`` unchanged and every run for ``None``)."""
    every = {(p.index, r) for p in plan.points for r in range(plan.repeats)}
    if shard is None:
        return plan, len(every)
    share = shard_runs(plan, shard)
    return dataclasses.replace(plan, done=frozenset(plan.done) | (every - share)), len(share)
