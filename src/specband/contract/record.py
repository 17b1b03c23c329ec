"""The sweep row, defined once: :class:`SweepRecord`.

Every writer of sweep rows (``specband sweep``'s runner, ``specband simulate``,
``specband import-bench``) fills a :class:`SweepRecord` and writes
:meth:`SweepRecord.as_row`; the reader (:func:`specband.sweeps.dataset.load_sweep`) checks each
column's JSON type, non-negativity and presence against the same fields
(:data:`COLUMN_KINDS`, :data:`NONNEGATIVE_COLUMNS`, :data:`REQUIRED_COLUMNS`).

Field order is column order: first the published schema (docs/FACTS.md §3,
:data:`SWEEP_COLUMNS`), then the columns specband's sweep adds (:data:`EXTRA_COLUMNS`),
then those of the published live file, of simulated rows and of imported bench rows.
A file keeps the columns its writer names (:data:`RUN_COLUMNS` for a measured sweep), in
that order; columns the record does not know are kept by the reader and never checked.

The engine a row ran on is ``engine`` (its name, :mod:`specband.core.engine_table`) and
``engine_version`` (its release); rows written before ``engine_version`` carry the release in a
per-engine column (``sglang_version``, ``vllm_version``), which :func:`row_engine` still reads
(:func:`specband.core.engine_table.row_engine`, re-exported here).

This module imports only the standard library and :mod:`specband.core` (``recommend`` stays
fast without it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from specband.core.engine_table import row_engine

__all__ = [
    "COLUMN_KINDS",
    "ERROR_CLASSES",
    "EXTRA_COLUMNS",
    "NONNEGATIVE_COLUMNS",
    "REQUIRED_COLUMNS",
    "RUN_COLUMNS",
    "SWEEP_COLUMNS",
    "SweepRecord",
    "error_class_of",
    "row_engine",
    "row_error_class",
]

#: Classes of an error row (column ``error_class``): ``config`` (this configuration fails
#: on this GPU: out of memory, CUDA-graph capture, refused flags), ``environment`` (the
#: machine, not the configuration: the port taken, a launch or request timeout, a request
#: that failed; ``sweep --resume`` runs these again) and ``server_crash`` (the server
#: exited or died mid-batch).
ERROR_CLASSES: tuple[str, ...] = ("config", "environment", "server_crash")

_CONFIG_REASONS = ("out_of_memory", "cuda_graph_capture_failed", "bad_arguments")
_ENVIRONMENT_REASONS = ("port_in_use", "launch_timeout")


def error_class_of(error: str) -> str:
    """The class (:data:`ERROR_CLASSES`) of an ``error`` text as the sweep writes it
    (``launch_failed: <reason>...`` from :class:`specband.engines.failures.LaunchError`,
    ``server_died_mid_batch: ...``, or a failed request)."""
    text = error.strip()
    if text.startswith("launch_failed: "):
        reason = text.removeprefix("launch_failed: ").split(" ", 1)[0].split(":", 1)[0]
        if reason.startswith(_CONFIG_REASONS):
            return "config"
        if reason in _ENVIRONMENT_REASONS:
            return "environment"
        return "server_crash"
    if text.startswith("server_died_mid_batch"):
        return "server_crash"
    return "environment"


def row_error_class(row: dict[str, Any]) -> str | None:
    """The class of a row's error (its ``error_class`` column, else from its ``error``
    text, for files written before the column existed); ``None`` for a measured row."""
    error = row.get("error")
    if not error:
        return None
    given = row.get("error_class")
    if isinstance(given, str) and given in ERROR_CLASSES:
        return given
    return error_class_of(str(error))


def _col(kind: type, *, nonnegative: bool = False) -> Any:
    """A nullable column of JSON type ``kind`` (``int``, ``float``, ``str``, ``bool``; ``list``
    is kept unchecked); ``nonnegative`` numbers must be >= 0 when present."""
    return field(default=None, metadata={"kind": kind, "nonnegative": nonnegative})


@dataclass
class SweepRecord:
    """One sweep row as written: every column specband knows, ``None`` when not known.

    Units are in the names (``_s`` seconds, ``_w``/``_watts`` W, ``_joules`` J, ``_mb``
    MiB, ``_c`` Celsius, ``_pct`` percent). Durations of an emulated run are emulated
    seconds. See docs/FACTS.md §3 for the published columns and
    :mod:`specband.harness.runner` for how a measured sweep fills them.
    """

    # the published schema (docs/FACTS.md §3), in its order
    hardware: str | None = _col(str)
    index: int | None = _col(int)
    repeat: int | None = _col(int)
    batch_size: int | None = _col(int)
    steps: int | None = _col(int)
    topk: int | None = _col(int)
    num_draft_tokens: int | None = _col(int)
    is_baseline: bool | None = _col(bool)
    error: str | None = _col(str)
    retry_mem_fraction: float | None = _col(float)
    accept_length: float | None = _col(float)
    speed_tok_s: float | None = _col(float)
    speed_source: str | None = _col(str)
    step_time_s: float | None = _col(float, nonnegative=True)
    wall_clock_s: float | None = _col(float, nonnegative=True)
    wall_clock_tok_s: float | None = _col(float, nonnegative=True)
    total_output_tokens: int | None = _col(int, nonnegative=True)
    energy_joules: float | None = _col(float, nonnegative=True)
    avg_power_watts: float | None = _col(float, nonnegative=True)
    joules_per_token: float | None = _col(float, nonnegative=True)
    gpu_temp_c_before: float | None = _col(float)
    gpu_temp_c: float | None = _col(float)
    gpu_power_w: float | None = _col(float, nonnegative=True)
    gpu_util_pct: float | None = _col(float, nonnegative=True)
    gpu_mem_used_mb: float | None = _col(float, nonnegative=True)
    gpu_throttling: bool | None = _col(bool)
    # specband's sweep columns (EXTRA_COLUMNS); engine .. time_scale are the
    # settings a resumed sweep must share; draft_flag is "all_rejected" for a draft whose
    # every token was rejected (specband.harness.draft_health)
    power_limit_watts: float | None = _col(float)
    energy_method: str | None = _col(str)
    gpu_mem_used_mb_before: float | None = _col(float, nonnegative=True)
    gpu_util_pct_before: float | None = _col(float, nonnegative=True)
    provenance: str | None = _col(str)
    target_model: str | None = _col(str)
    draft_model: str | None = _col(str)
    mem_fraction_static: float | None = _col(float)
    accept_length_source: str | None = _col(str)
    energy_flag: str | None = _col(str)
    step_time_count: int | None = _col(int)
    launch_wall_s: float | None = _col(float)
    started_at: str | None = _col(str)
    engine: str | None = _col(str)  # the engine's name (core.engine_table); a row without it: row_engine
    engine_version: str | None = _col(str)  # its release (older rows: a per-engine column, row_engine)
    dtype: str | None = _col(str)
    attention_backend: str | None = _col(str)
    max_new_tokens: int | None = _col(int)
    num_prompts: int | None = _col(int)
    workload: str | None = _col(str)
    workload_sha256: str | None = _col(str)
    time_scale: float | None = _col(float)  # real s per emulated s of the run (1: real time)
    draft_flag: str | None = _col(str)
    error_class: str | None = _col(str)  # of an error row: ERROR_CLASSES (error_class_of)
    action_set: str | None = _col(str)  # "extended" on rows of the extended grid; absent on contract rows
    # the published live file's columns (docs/FACTS.md §3)
    trial: str | None = _col(str)
    tag: str | None = _col(str)
    source: str | None = _col(str)
    energy_utilization: float | None = _col(float, nonnegative=True)
    energy_utilization_origin: str | None = _col(str)
    reward_published: float | None = _col(float)
    propensity: float | None = _col(float)
    # a predicted sweep's rows (specband.harness.predict): why the run was measured ("seed",
    # "prediction", "remeasure") and the simulated reward interval [estimate, low, high] it was planned on
    planned_by: str | None = _col(str)
    predicted_reward: list[float] | None = _col(list)  # noqa: RUF009 (a dataclasses.field, default None)
    # simulated rows (specband.sim.simulated)
    power_w_range: list[float] | None = _col(list)  # noqa: RUF009 (a dataclasses.field, default None)
    power_measured: bool | None = _col(bool)
    power_source: str | None = _col(str)
    profile: str | None = _col(str)
    seed: int | None = _col(int)
    target_architecture: str | None = _col(str)  # the config's architectures[0]; target_model: the name given
    target_config_sha256: str | None = _col(str)  # specband.sim.hfconfig.config_sha256: what the model is
    draft_architecture: str | None = _col(str)
    draft_config_sha256: str | None = _col(str)
    # imported bench rows (specband.sweeps.benchfile)
    avg_output_tokens: float | None = _col(float)
    source_line: int | None = _col(int)

    @property
    def triple(self) -> tuple[int, int, int]:
        """``(steps, topk, num_draft_tokens)``.

        Raises:
            ValueError: one of them is not set.
        """
        if self.steps is None or self.topk is None or self.num_draft_tokens is None:
            raise ValueError("the record has no action yet")
        return self.steps, self.topk, self.num_draft_tokens

    def as_row(self, columns: Iterable[str] | None = None, *, omit_null: Iterable[str] = ()) -> dict[str, Any]:
        """The row to write: ``columns`` (default :data:`RUN_COLUMNS`) in that order, a
        NaN or infinite float as ``None`` (JSON has neither); a column in ``omit_null`` (and
        ``action_set``: contract rows keep the published columns) is left out while it is ``None``."""
        omit = {"action_set", *omit_null}
        out: dict[str, Any] = {}
        for name in RUN_COLUMNS if columns is None else columns:
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):
                value = None
            if value is None and name in omit:
                continue
            out[name] = value
        return out


_FIELDS = fields(SweepRecord)
_NAMES = [f.name for f in _FIELDS]
#: The published schema's columns, in the published order (docs/FACTS.md §3).
SWEEP_COLUMNS: tuple[str, ...] = tuple(_NAMES[: _NAMES.index("gpu_throttling") + 1])
#: Columns ``specband sweep`` writes after the published ones.
EXTRA_COLUMNS: tuple[str, ...] = tuple(_NAMES[len(SWEEP_COLUMNS) : _NAMES.index("error_class") + 1])
#: Every column of a measured sweep row, in order (``action_set`` last, written only on rows of
#: the extended grid: a contract row has the published columns and specband's, as before).
RUN_COLUMNS: tuple[str, ...] = (*SWEEP_COLUMNS, *EXTRA_COLUMNS, "action_set")
#: Column -> its JSON type (``int``, ``float``, ``str``, ``bool`` or ``list``).
COLUMN_KINDS: dict[str, type] = {f.name: f.metadata["kind"] for f in _FIELDS}
#: Numeric columns that must be >= 0 when present.
NONNEGATIVE_COLUMNS: tuple[str, ...] = tuple(f.name for f in _FIELDS if f.metadata["nonnegative"])
#: Columns a row in the sweep schema must have (non-null).
REQUIRED_COLUMNS: tuple[str, ...] = ("index", "batch_size", "steps", "topk", "num_draft_tokens")
