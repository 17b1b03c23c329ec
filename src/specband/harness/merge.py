"""``specband merge OUT SHARD...``: join the files of a sharded sweep into one sweep file.

Each shard file is read with the reader ``sweep --resume`` uses
(:func:`specband.harness.sweepfile.parse_rows`, read-only: a merge never rewrites its inputs;
a shard that ends in a partial line, its sweep killed mid-write, is refused). Every row is
held to the settings of the rows before it with the comparison ``--resume`` makes
(:func:`specband.harness.resume.check_resumable`): the same target and draft model, sglang
version, dtype, attention backend, max new tokens, number of prompts, workload and its
SHA-256, first and retry mem fraction, and the same grid (an ``index`` means the same
batch size and action in every file). For each setting, the reference is the first row
(in the order the files are given) that has that column; a column a row lacks (an older
file) is not compared. An ``(index, repeat)`` found twice, in one file or in two, is
refused. Power limits (:func:`_check_power_limits`): the shards' rows are at one limit, or
they are a ``--power-limits`` sweep's grid (each limit a block of indices over the same batch
sizes and actions); rows at another limit than their grid's block are refused (docs/safety.md).
Every check runs before anything is written; the merged rows, in ``(repeat,
index)`` order, then replace ``OUT`` all or nothing (:func:`specband.files.fileio.write_jsonl_atomic`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from math import gcd
from pathlib import Path
from typing import Any, cast

from specband.contract.actions import validate_action
from specband.contract.record import row_engine
from specband.core.errors import ConfigError, DataError, InvalidActionError
from specband.core.limits import is_int
from specband.engines.serverconfig import ServerConfig
from specband.files.fileio import write_jsonl_atomic
from specband.harness.pipeline import GridPoint
from specband.harness.resume import check_resumable, check_same_logging, check_same_world
from specband.harness.runner import MeasureSettings
from specband.harness.sweepfile import parse_rows
from specband.sim.simulated import check_out_path

__all__ = ["MergeSummary", "merge_shards"]


@dataclass(frozen=True)
class MergeSummary:
    """What a merge wrote.

    Attributes:
        path: the merged file.
        rows: rows written.
        rows_per_file: rows taken from each shard, in the order given.
        missing: ``(index, repeat)`` of the grid the rows span (every index up to the
            largest, every repeat up to the largest) that no shard holds: a shard not
            given or not finished.
    """

    path: Path
    rows: int
    rows_per_file: tuple[int, ...]
    missing: tuple[tuple[int, int], ...] = field(default=())


@dataclass(frozen=True)
class _Server:
    model_path: Any
    draft_model_path: Any


@dataclass(frozen=True)
class _RowSettings:
    """The settings the first rows of a merge carry, shaped like the parts of
    :class:`~specband.harness.runner.MeasureSettings` the ``--resume`` comparison reads."""

    server: _Server
    settings: dict[str, Any]
    mem_fraction_static: float | None
    retry_mem_fraction: float | None
    action_set: str = "contract"

    def run_settings(self) -> dict[str, Any]:
        return dict(self.settings)


@cache
def _run_setting_keys() -> tuple[str, ...]:
    """The columns :meth:`MeasureSettings.run_settings` writes into every row."""
    return tuple(MeasureSettings(server=ServerConfig(model_path="-")).run_settings())


def _first(rows: Sequence[dict[str, Any]], key: str, *, when: str | None = None, retried: bool = False) -> Any:
    """``row[key]`` of the first row that has it (and, with ``when``, whose ``when``
    column is set iff ``retried``); ``None`` when none has."""
    for row in rows:
        if key in row and (when is None or (row.get(when) is not None) == retried):
            return row[key]
    return None


def _reference(rows: Sequence[dict[str, Any]]) -> MeasureSettings:
    first_mem = _first(rows, "mem_fraction_static", when="retry_mem_fraction", retried=False)
    shared = {key: _first(rows, key) for key in _run_setting_keys() if any(key in r for r in rows)}
    if rows:  # the engine as the first row names it, in its columns or a file's older ones
        shared["engine"], shared["engine_version"] = row_engine(rows[0])
    settings = _RowSettings(
        server=_Server(_first(rows, "target_model"), _first(rows, "draft_model")),
        settings=shared,
        mem_fraction_static=first_mem,
        retry_mem_fraction=_first(rows, "retry_mem_fraction", when="retry_mem_fraction", retried=True),
        action_set=rows[0].get("action_set", "contract") if rows else "contract",
    )
    return cast(MeasureSettings, settings)  # the comparison reads only what _RowSettings has


def _identity(row: dict[str, Any], name: str, path: Path, line: int) -> int:
    """``row[name]``, an integer >= 0.

    Raises:
        DataError: naming the file, line and field otherwise.
    """
    value: Any = row.get(name)
    if not is_int(value) or value < 0:
        raise DataError(f"expected an integer >= 0, got {value!r}", path=path, line=line, field=name)
    return int(value)


def _grid(numbered: Sequence[tuple[Path, int, dict[str, Any]]]) -> list[GridPoint]:
    """The grid point of each index, as its first row says (the comparison then holds every
    other row with that index to it). Indices no row has are never looked up."""
    points: dict[int, GridPoint] = {}
    for path, line, row in numbered:
        index = _identity(row, "index", path, line)
        _identity(row, "repeat", path, line)
        if index not in points:
            triple = (row.get("steps"), row.get("topk"), row.get("num_draft_tokens"))
            try:
                action = validate_action(triple)  # type: ignore[arg-type]
            except (InvalidActionError, TypeError) as exc:
                raise DataError(str(exc), path=path, line=line, field="steps/topk/num_draft_tokens") from None
            points[index] = GridPoint(index, row.get("batch_size"), action)  # type: ignore[arg-type]
    return cast(list[GridPoint], [points.get(i) for i in range(max(points, default=-1) + 1)])


def _limit_of(row: dict[str, Any]) -> float | None:
    value = row.get("power_limit_watts")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _check_power_limits(numbered: Sequence[tuple[Path, int, dict[str, Any]]]) -> None:
    """Refuse rows measured at another power limit than the sweep's grid puts them at.

    One limit in every row (that has one) is one sweep's GPU. Several limits are only a
    ``--power-limits`` sweep's grid (:func:`specband.harness.pipeline.grid`: index
    ``k * P + p``, limit ``k`` of ``P`` grid points, the limit changing least often): the same
    batch size and action recur every ``P`` indices, so ``P`` divides the index distance of
    every two rows with the same batch size and action (``P`` is taken as their gcd), every
    block of ``P`` indices is at one limit and index ``i`` is the same batch size and action
    as ``i mod P``. Rows of two sweeps at two limits (no batch size and action measured at two
    indices) are refused.

    Raises:
        ConfigError: ``"<shard>:<line>: cannot merge: row index=3 repeat=0 has
            power_limit_watts=700.0, ..."``, naming the other row.
    """
    limited: list[tuple[Path, int, dict[str, Any], float]] = []
    for path, line, row in numbered:
        limit = _limit_of(row)
        if limit is not None:
            limited.append((path, line, row, limit))
    if not limited or all(abs(entry[3] - limited[0][3]) <= 0.5 for entry in limited):
        return
    keys = ("batch_size", "steps", "topk", "num_draft_tokens")
    index_of: dict[tuple[Any, ...], int] = {}
    period = 0
    for _, _, row, _ in limited:
        seen = index_of.setdefault(tuple(row.get(k) for k in keys), row["index"])
        period = gcd(period, abs(row["index"] - seen))
    by_block: dict[int, tuple[Path, int, dict[str, Any], float]] = {}
    by_slot: dict[int, tuple[Path, int, dict[str, Any], float]] = {}
    for entry in limited:
        path, line, row, limit = entry
        where = f"{path}:{line}: cannot merge: row index={row['index']} repeat={row['repeat']}"
        if period == 0:
            if abs(limit - limited[0][3]) <= 0.5:
                continue
            other = limited[0]
            raise ConfigError(
                f"{where} has power_limit_watts={limit:g}, {other[0]}:{other[1]} has {other[3]:g}, and no batch size "
                "and action is measured at both: rows of another power limit never share one file (a "
                "--power-limits sweep measures every grid point at each limit)"
            )
        block = by_block.setdefault(row["index"] // period, entry)
        if abs(block[3] - limit) > 0.5:
            raise ConfigError(
                f"{where} has power_limit_watts={limit:g}, {block[0]}:{block[1]} (index={block[2]['index']}, in the "
                f"same block of {period} grid points of a --power-limits sweep) has {block[3]:g}: rows of another "
                "power limit never share one file"
            )
        slot = by_slot.setdefault(row["index"] % period, entry)
        if any(slot[2].get(k) != row.get(k) for k in keys):
            raise ConfigError(
                f"{where} is not the grid point of {slot[0]}:{slot[1]} (index={slot[2]['index']}), as every "
                f"{period}th index of one --power-limits sweep is: rows of another power limit never share one file"
            )


def _read_shard(path: Path) -> list[tuple[Path, int, dict[str, Any]]]:
    """``(path, line, row)`` of every row of one shard file.

    Raises:
        DataError: no such file, a line that is not a JSON object, an ``(index, repeat)``
            twice, or a partial last line.
        HarnessError: the file cannot be read.
    """
    if not path.exists():
        raise DataError("no such file", path=path)
    numbered, complete = parse_rows(path, verb="merge")
    if complete is not None:
        raise DataError(
            "ends in a partial line (its sweep was stopped mid-write): run that shard again with --resume, "
            "which drops it",
            path=path,
            line=complete.count(b"\n") + 1,
        )
    return [(path, line, row) for line, row in numbered]


def merge_shards(out: Path, shards: Sequence[Path], *, force: bool = False) -> MergeSummary:
    """Merge shard files of one sweep into ``out`` (see the module docstring).

    Args:
        out: the merged file; an existing one is replaced only with ``force``.
        shards: the shard files (at least one), in the order their settings are
            referenced by.
        force: replace an existing ``out``.

    Returns:
        the :class:`MergeSummary`.

    Raises:
        ConfigError: ``out`` exists without ``force``, is a folder or its folder is
            missing; no shard given; a row with another setting or another grid
            (``"<shard>:<line>: cannot merge: its rows have dtype='bfloat16', this sweep
            has 'float16' (...)"``), naming the shard, line and column; rows at another power
            limit than their grid's (:func:`_check_power_limits`).
        DataError: a shard cannot be read as rows, ends in a partial line, or repeats an
            ``(index, repeat)`` (``"<shard>:<line>: field 'index': ..."``).
        HarnessError: a shard cannot be read.
    """
    out = check_out_path(out, overwrite=force, option="OUT")
    if not shards:
        raise ConfigError("merge: give at least one SHARD file")
    per_file = [_read_shard(Path(path)) for path in shards]
    numbered = [entry for entries in per_file for entry in entries]
    if not numbered:
        raise ConfigError(f"merge: the shards ({', '.join(map(str, shards))}) hold no rows; nothing to merge")
    rows = [row for _, _, row in numbered]
    reference, points = _reference(rows), _grid(numbered)
    first_file = Path(shards[0])
    seen: dict[tuple[int, int], tuple[Path, int]] = {}
    for path, line, row in numbered:
        try:
            check_resumable([row], reference, points, f"{path}:{line}", verb="merge")
            check_same_logging(
                [row], rows[0].get("propensity") is not None, f"{path}:{line}", verb="merge",
                predicted=rows[0].get("planned_by") is not None,
            )  # fmt: skip
            check_same_world(
                [rows[0], row], f"{path}:{line}", verb="merge", first=f"{first_file}'s first row", power=False
            )
        except ConfigError as exc:
            raise ConfigError(f"{exc} (the merge's first rows, from {first_file} on)") from None
        key = (row["index"], row["repeat"])
        if key in seen:
            where = seen[key]
            raise DataError(
                f"(index, repeat) = {key} is also on {where[0]}:{where[1]}: merge each shard once",
                path=path,
                line=line,
                field="index",
            )
        seen[key] = (path, line)
    _check_power_limits(numbered)
    merged = sorted(rows, key=lambda r: (r["repeat"], r["index"]))
    write_jsonl_atomic(out, merged, error=ConfigError)
    span = [(i, r) for r in range(1 + max((k[1] for k in seen), default=-1)) for i in range(len(points))]
    counts = tuple(len(entries) for entries in per_file)
    return MergeSummary(out, len(merged), counts, tuple(k for k in span if k not in seen))
