"""What the rows already in a sweep file allow: the checks before a sweep resumes into it
or a merge joins it, and the plan a resumed sweep still runs (:func:`planned_sweep`).

One file holds one engine, one target and draft, one grid, one set of run settings, one
logging policy (uniform or ``--adaptive``), one action set and one world
(:data:`WORLD_COLUMNS`); a column a row lacks (an older file) is not compared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specband.contract.record import row_engine, row_error_class
from specband.core.errors import ConfigError
from specband.harness.pipeline import GridPoint, SweepPlan
from specband.harness.runner import MeasureSettings
from specband.harness.shards import ShardSpec, shard_plan, shard_runs

__all__ = [
    "WORLD_COLUMNS",
    "check_resumable",
    "check_same_action_set",
    "check_same_logging",
    "check_same_world",
    "planned_sweep",
]


def planned_sweep(
    existing: Sequence[dict[str, Any]],
    plan: SweepPlan,
    settings: MeasureSettings,
    out_path: Path,
    *,
    resume: bool,
    adaptive: bool,
    shard: ShardSpec | None,
    predicted: bool = False,
) -> tuple[SweepPlan, int]:
    """What a sweep into ``out_path`` still runs, given the rows already there, after every
    check a resumed sweep makes (``sweep`` and ``sweep --dry-run`` alike).

    Args:
        existing: the rows in ``out_path`` (``[]`` for a new file).
        plan: the whole sweep, nothing done.
        settings: this sweep's measurement settings.
        out_path: the output file (named in messages).
        resume: ``--resume`` was given.
        adaptive: ``--adaptive`` was given.
        predicted: ``--plan predict`` was given.
        shard: ``--shard K/N`` (``None``: the whole sweep).

    Returns:
        the plan with the file's runs (and, for a shard, the other shards' runs) done, and
        how many runs the shard holds in all.

    Raises:
        ConfigError: rows without ``--resume``; rows of other settings, grid or logging
            policy; a shard's file that holds runs of another shard (resuming it as this
            shard would mix two shards' runs in one file).
    """
    if existing and not resume:
        raise ConfigError(
            f"{out_path} already has {len(existing)} rows; pass --resume to continue it or choose another --out"
        )
    check_resumable(existing, settings, plan.points, out_path)
    check_same_logging(existing, adaptive, out_path, predicted=predicted)
    if resume:  # environment-class error rows are run again (run_sweep drops them from the file)
        existing = [r for r in existing if row_error_class(r) != "environment"]
    done = frozenset((r.get("index"), r.get("repeat")) for r in existing)
    if shard is not None:
        foreign = sorted(done - shard_runs(plan, shard))
        if foreign:
            raise ConfigError(
                f"{out_path}: cannot resume as shard {shard}: it holds runs of another shard "
                f"((index, repeat) = {foreign[0]}); resume it with the --shard it was written with"
            )
    # the other shards' runs are skipped as if done
    return shard_plan(dataclasses.replace(plan, done=done), shard)


def check_same_logging(
    rows: Sequence[dict[str, Any]], adaptive: bool, where: str | Path, verb: str = "resume", *, predicted: bool = False
) -> None:
    """Refuse to ``verb`` (resume, merge) rows of one logging policy with another's: a uniform
    sweep's rows have no ``propensity``, an adaptive one's have one, a predicted one's
    (``--plan predict``) have one and a ``planned_by``. One file holds one logging policy, so
    that the off-policy estimators read it right.

    Raises:
        ConfigError: ``"<where>: cannot resume: its rows were written with --adaptive ..."``.
    """
    mine = "--plan predict" if predicted else ("--adaptive" if adaptive else None)
    for row in rows:
        theirs = (
            "--plan predict"
            if row.get("planned_by") is not None
            else ("--adaptive" if row.get("propensity") is not None else None)
        )
        if theirs != mine:
            was = "with" if theirs is not None else "without"
            hint = f"; resume {was} it" if verb == "resume" else ""
            raise ConfigError(
                f"{where}: cannot {verb}: its rows were written {was} {theirs or mine}{hint} "
                "(a file mixes no logging policies)"
            )


def check_resumable(
    existing: Sequence[dict[str, Any]],
    settings: MeasureSettings,
    points: Sequence[GridPoint],
    out_path: Path | str,
    *,
    verb: str = "resume",
) -> None:
    """Refuse rows written for another engine (a row without ``engine`` is sglang's), target,
    draft, grid, or with other run settings (dtype, attention backend, max new tokens, number
    of prompts, prompt set, mem fraction, sglang or vLLM version, the emulator's time scale).
    A column a row lacks (an older file) is not compared.

    Args:
        existing: the rows.
        settings: this sweep's settings (``merge`` passes the first rows' settings).
        points: this sweep's grid.
        out_path: named in the message (a file, or ``"<file>:<line>"``).
        verb: what is refused (``"resume"``, ``"merge"``).

    Raises:
        ConfigError: ``"<out>: cannot <verb>: ..."`` naming the first difference.
    """
    check_same_action_set(existing, getattr(settings, "action_set", "contract"), out_path, verb)
    mine_by_key = {
        "target_model": settings.server.model_path,
        "draft_model": settings.server.draft_model_path,
        **settings.run_settings(),
    }
    mine_engine = mine_by_key.pop("engine", None)
    mine_version = mine_by_key.pop("engine_version", None)
    for row in existing:
        theirs, their_version = row_engine(row)  # a row written before the columns: its old ones
        if mine_engine is not None and theirs != mine_engine:
            raise ConfigError(
                f"{out_path}: cannot {verb}: its rows are {theirs} runs, this sweep runs {mine_engine} "
                f"(one file holds one engine's rows)"
            )
        if None not in (their_version, mine_version) and their_version != mine_version:
            raise ConfigError(
                f"{out_path}: cannot {verb}: its rows have engine_version={their_version!r}, "
                f"this sweep has {mine_version!r}"
            )
        for key, mine in mine_by_key.items():
            if key in row and row[key] != mine:
                raise ConfigError(
                    f"{out_path}: cannot {verb}: its rows have {key}={row[key]!r}, this sweep has {mine!r}"
                )
        _check_mem_fraction(row, settings, out_path, verb)
    for row in existing:
        index = row.get("index")
        point = points[index] if isinstance(index, int) and 0 <= index < len(points) else None
        if point is not None and point.power_limit_w is not None:
            got = row.get("power_limit_watts")
            if not isinstance(got, (int, float)) or abs(float(got) - point.power_limit_w) > 0.5:
                raise ConfigError(
                    f"{out_path}: cannot {verb}: its row index={index} was measured at power_limit_watts={got!r}, "
                    f"in this sweep's grid it is {point.power_limit_w:g} W (use the same --power-limits)"
                )
        ident = (row.get("batch_size"), row.get("steps"), row.get("topk"), row.get("num_draft_tokens"))
        if point is None or ident != (point.batch_size, *point.action):
            raise ConfigError(
                f"{out_path}: cannot {verb}: its row index={index} is bs={ident[0]} {tuple(ident[1:])}, but in this "
                f"sweep's grid it is {'nothing' if point is None else f'bs={point.batch_size} {point.action}'} "
                f"(use the same --batch-sizes and --actions)"
            )


def check_same_action_set(existing: Sequence[dict[str, Any]], mine: str, out_path: Path | str, verb: str) -> None:
    """Refuse rows of another action set than ``mine`` (a row without ``action_set`` is a
    contract row): one file never mixes the 19-action contract and the extended set.

    Raises:
        ConfigError: ``"<out>: cannot <verb>: its rows are of the extended action set, ..."``.
    """
    for row in existing:
        theirs = row.get("action_set", "contract")
        if theirs != mine:
            raise ConfigError(
                f"{out_path}: cannot {verb}: its rows are of the {theirs} action set, this sweep's is {mine} "
                f"(one file never mixes action sets; see --actions)"
            )


#: Columns that say which world a row was measured in: one sweep file (resumed or merged)
#: holds one world. ``profile`` names the emulated GPU's performance model.
WORLD_COLUMNS: tuple[str, ...] = ("hardware", "power_limit_watts", "provenance", "profile")


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(float(a) - float(b)) <= 1e-6 * max(1.0, abs(float(a)), abs(float(b)))
    return bool(a == b)


def check_same_world(
    rows: Sequence[dict[str, Any]],
    where: Path | str,
    *,
    verb: str = "resume",
    mine: dict[str, Any] | None = None,
    first: str = "its first row",
    power: bool = True,
) -> None:
    """Refuse rows of more than one world (:data:`WORLD_COLUMNS`: another hardware name,
    power limit, provenance (measured, emulated, simulated) or emulated performance
    model), among themselves or against ``mine`` (this sweep's device), naming the
    difference. A column a row lacks is not compared.

    Raises:
        ConfigError: ``"<where>: cannot <verb>: its rows have hardware='RTX4060_Laptop',
            this sweep has 'H100' (another world: ...)"``.
    """
    reference: dict[str, Any] = {}
    label = first
    if mine is not None:
        reference = {k: v for k, v in mine.items() if v is not None}
        label = "this sweep"
    for row in rows:
        for key in WORLD_COLUMNS:
            if key == "power_limit_watts" and not power:  # a --power-limits sweep sets several
                continue
            value = row.get(key)
            if value is None:
                continue
            if key not in reference:
                reference[key] = value
                continue
            if not _same_value(reference[key], value):
                theirs = f"row index={row.get('index')} repeat={row.get('repeat')}"
                raise ConfigError(
                    f"{where}: cannot {verb}: {theirs} has {key}={value!r}, {label} has {reference[key]!r} "
                    "(rows of another GPU, power limit or provenance never share one file)"
                )


def _check_mem_fraction(row: dict[str, Any], settings: MeasureSettings, out_path: Path | str, verb: str) -> None:
    """Refuse a row launched at another first (or retry) mem fraction.

    Raises:
        ConfigError: ``"<out>: cannot <verb>: its rows have mem_fraction_static=0.7 ..."``.
    """
    retried = row.get("retry_mem_fraction")
    key, mine = (
        ("retry_mem_fraction", settings.retry_mem_fraction)
        if retried is not None
        else ("mem_fraction_static", settings.mem_fraction_static)
    )
    if key in row and row[key] is not None and mine is not None and abs(row[key] - mine) > 1e-9:
        option = "--retry-mem-fraction" if retried is not None else "--mem-fraction-static"
        raise ConfigError(
            f"{out_path}: cannot {verb}: its rows have {key}={row[key]!r}, this sweep has {option} {mine:g}"
        )
