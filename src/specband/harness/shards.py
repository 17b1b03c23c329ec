"""Shards of a sweep: ``sweep --shard K/N`` measures a deterministic, balanced share of the runs.

A sweep's runs are grouped into *launch units*, the runs one server launch serves, in
launch order (:func:`launch_units`): one run each by default, or every batch size of one
action in one repeat with ``--one-launch-per-config``. Units are never split, so a shard
launches exactly the servers the unsharded sweep would have launched for those runs.

Partition (:func:`shard_units`): longest-processing-time-first greedy (Graham 1969):
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

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specband.actions import Action
from specband.errors import ConfigError
from specband.harness.sweep import GridPoint, _launch_groups

__all__ = ["LaunchUnit", "ShardSpec", "launch_units", "parse_shard", "shard_runs", "shard_units", "unit_cost"]


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
    return ShardSpec(int(match.group(1)), int(match.group(2)))


@dataclass(frozen=True)
class LaunchUnit:
    """The runs one server launch serves.

    Attributes:
        position: the unit's place in the unsharded sweep's launch order (0-based).
        repeat: the pass.
        points: the grid points it measures, in measuring order (one, or every batch
            size of one action in increasing order with ``--one-launch-per-config``).
    """

    position: int
    repeat: int
    points: tuple[GridPoint, ...]

    @property
    def action(self) -> Action:
        """The action every run of the unit launches with."""
        return self.points[0].action

    @property
    def runs(self) -> tuple[tuple[int, int], ...]:
        """``(index, repeat)`` of each run, the row identity."""
        return tuple((p.index, self.repeat) for p in self.points)


def launch_units(
    points: Sequence[GridPoint], repeats: int, actions: Sequence[Action], one_launch_per_config: bool
) -> list[LaunchUnit]:
    """Every launch unit of the whole sweep, in launch order (the grouping
    :func:`specband.harness.sweep.planned_launches` launches).

    Args:
        points: the grid (:func:`specband.harness.sweep.grid`).
        repeats: passes over the grid.
        actions: the grid's actions, in the order ``--one-launch-per-config`` launches them.
        one_launch_per_config: one launch per action and repeat, serving every batch size.
    """
    groups = _launch_groups(points, repeats, actions, one_launch_per_config, ())
    return [LaunchUnit(i, rep, tuple(group)) for i, (rep, group) in enumerate(groups)]


def unit_cost(unit: LaunchUnit) -> float:
    """Expected GPU time of a unit in run-lengths: 1 for the launch plus 1 per run."""
    return 1.0 + len(unit.points)


def shard_units(
    units: Sequence[LaunchUnit], shard: ShardSpec, cost: Callable[[LaunchUnit], float] = unit_cost
) -> list[LaunchUnit]:
    """The units of ``shard``, in launch order (see the module docstring for the rule).

    Args:
        units: every unit of the sweep (:func:`launch_units`, nothing skipped).
        shard: which share.
        cost: expected cost of a unit (> 0), e.g. seconds.

    Returns:
        the share; the shares of ``1/N .. N/N`` are disjoint and together hold every unit.
    """
    loads = [0.0] * shard.count
    mine: list[LaunchUnit] = []
    for unit in sorted(units, key=lambda u: (-cost(u), u.position)):
        target = min(range(shard.count), key=lambda k: (loads[k], k))
        loads[target] += cost(unit)
        if target == shard.number - 1:
            mine.append(unit)
    return sorted(mine, key=lambda u: u.position)


def shard_runs(
    points: Sequence[GridPoint], repeats: int, actions: Sequence[Action], one_launch_per_config: bool,
    shard: ShardSpec,
) -> set[tuple[int, int]]:  # fmt: skip
    """``(index, repeat)`` of the runs shard ``shard`` measures (all of them for ``1/1``).

    The sweep measures a shard by skipping every other run, as if it were already done:
    pass ``all runs - shard_runs(...)`` with the file's done runs to the plan.
    """
    units = shard_units(launch_units(points, repeats, actions, one_launch_per_config), shard)
    return {run for unit in units for run in unit.runs}
