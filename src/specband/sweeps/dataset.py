"""Sweep data: one row per measured (batch size, action) run; schema, loading, validation,
rewards and state features.

Three input formats are read (detected from the first row, or forced with ``fmt``):

* ``sweep``: the published ``eagle3-speculative-decoding-energy-sweep`` schema (docs/FACTS.md §3),
  also written by ``specband sweep`` and ``specband simulate``; extra columns are kept;
* ``published_live``: the bundled published live measurements, the sweep schema plus
  ``trial``, ``tag``, ``source``, ``power_limit_watts``, ``energy_utilization`` and
  ``reward_published``;
* ``sglang_bench``: the JSONL of sglang's ``scripts/playground/bench_speculative.py``
  (``batch_size, steps, topk, num_draft_tokens, acc_length, step_time, speed,
  completion_tokens``; ``completion_tokens`` is a per-request average there, so it is kept
  as is, not mapped to ``total_output_tokens``). It has **no energy**: rewards come from
  throughput alone.

Rows whose ``error`` is set are kept (they mark a config that failed at that batch size)
but never trained on; agentic pilot trace rows (``error`` starting with
``agentic_pilot_trace``) are kept and ignored.

State features (docs/FACTS.md §1), 4 floats:

* ``contract``: ``[batch_size / 8, gpu_temp_c_before / 100, gpu_mem_used_mb / 8192,
  gpu_util_pct / 100]``, the published policies' input. Memory and utilisation were read
  *after* the run in the published data (hindsight);
* ``pre``: the same scaling, but only what is known before launch: temperature before,
  memory used and utilisation of the idle GPU (``gpu_mem_used_mb_before``,
  ``gpu_util_pct_before``). Post-run readings are never used.

Missing telemetry is filled as upstream did: 40 C, 0 MB, 0 %.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np

from specband.contract.actions import ACTION_SETS, CONTRACT_SET, Action, ActionSet, action_index
from specband.contract.record import COLUMN_KINDS, NONNEGATIVE_COLUMNS, REQUIRED_COLUMNS, SWEEP_COLUMNS, row_engine
from specband.contract.reward import RewardConfig, RewardParts, compute_reward
from specband.core.engine_table import engine_names
from specband.core.errors import DataError, InvalidActionError
from specband.core.limits import (
    MAX_BATCH_SIZE,
    MAX_DATA_BATCH_SIZES,
    is_int,
    is_number,
)
from specband.files.jsonl import read_jsonl
from specband.sweeps.benchfile import BENCH_COLUMNS, is_bench_record, read_bench
from specband.sweeps.bounds import row_out_of_bounds
from specband.sweeps.speeds import one_speed_source, speed_source_note

__all__ = [
    "AGENTIC_ERROR_PREFIX",
    "DEFAULT_FEATURES",
    "DEFAULT_GPU_MEM_USED_MB",
    "DEFAULT_GPU_TEMP_C",
    "DEFAULT_GPU_UTIL_PCT",
    "FEATURE_KINDS",
    "SWEEP_COLUMNS",
    "FeatureKind",
    "Sweep",
    "SweepRow",
    "TrainingData",
    "bundled_data_path",
    "load_sweep",
    "state_vector",
]

FeatureKind = Literal["contract", "pre"]
FEATURE_KINDS: tuple[str, ...] = ("contract", "pre")
#: What ``specband train`` uses unless told otherwise: decisions from information known
#: before launch. Folders without a manifest (the published ones) are ``contract``.
DEFAULT_FEATURES: str = "pre"

#: Upstream's fill values for missing telemetry (docs/FACTS.md §1).
DEFAULT_GPU_TEMP_C = 40.0
DEFAULT_GPU_MEM_USED_MB = 0.0
DEFAULT_GPU_UTIL_PCT = 0.0
#: Scales of the contract state (docs/FACTS.md §1).
BATCH_SIZE_SCALE = 8.0
TEMP_SCALE_C = 100.0
MEM_SCALE_MB = 8192.0
UTIL_SCALE_PCT = 100.0

#: ``error`` prefix of the agentic pilot trace rows (rows 228-239 of the published sweep).
AGENTIC_ERROR_PREFIX = "agentic_pilot_trace"
#: Tolerance on accept-length bounds (values are printed rounded to 3 decimals upstream).
_ACCEPT_TOL = 1e-6

_INT_FIELDS = tuple(name for name, kind in COLUMN_KINDS.items() if kind is int)
_FLOAT_FIELDS = tuple(name for name, kind in COLUMN_KINDS.items() if kind is float)
_STR_FIELDS = tuple(name for name, kind in COLUMN_KINDS.items() if kind is str)
_BOOL_FIELDS = tuple(name for name, kind in COLUMN_KINDS.items() if kind is bool)


def bundled_data_path() -> Path:
    """Path of the bundled published live measurements (29 rows, RTX 4060 Laptop, 80 W)."""
    return Path(str(resources.files("specband").joinpath("data/rtx4060_published_live.jsonl")))


def state_vector(
    batch_size: int,
    gpu_temp_c: float | None = None,
    gpu_mem_used_mb: float | None = None,
    gpu_util_pct: float | None = None,
) -> np.ndarray:
    """The 4-float contract state ``[bs/8, temp/100, mem/8192, util/100]``, shape (4,), float32.

    ``None`` values get upstream's fills (40 C, 0 MB, 0 %).
    """
    temp = DEFAULT_GPU_TEMP_C if gpu_temp_c is None else gpu_temp_c
    mem = DEFAULT_GPU_MEM_USED_MB if gpu_mem_used_mb is None else gpu_mem_used_mb
    util = DEFAULT_GPU_UTIL_PCT if gpu_util_pct is None else gpu_util_pct
    return np.array(
        [batch_size / BATCH_SIZE_SCALE, temp / TEMP_SCALE_C, mem / MEM_SCALE_MB, util / UTIL_SCALE_PCT],
        dtype=np.float32,
    )


@dataclass(frozen=True)
class SweepRow:
    """One validated sweep row.

    Attributes:
        line: 1-based line in the source file (0 for in-memory rows).
        index, repeat, trial: identity of the run (``(index, repeat)`` is unique in a file).
        batch_size: concurrent requests (``--max-running-requests``).
        action: the canonical action; ``action_index`` its index in the sweep's action set
            (:attr:`Sweep.action_set`: ``ACTIONS`` for a contract sweep).
        error: the failure message, or ``None`` for a successful run.
        accept_length: mean accepted tokens per verify step, in ``[1, steps + 1]`` (or ``None``).
        speed_tok_s: decode speed in tokens/s (``None`` on an error row).
        avg_power_watts, power_limit_watts, energy_utilization: energy of the run as given.
        gpu_temp_c_before, gpu_temp_c: GPU temperature before / after the run, C.
        gpu_mem_used_mb, gpu_util_pct: read after the run (hindsight in the published data).
        gpu_mem_used_mb_before, gpu_util_pct_before: idle GPU before launch (pre-decision state).
        gpu_throttling: power/thermal/slowdown throttling seen during the run.
        propensity: logging probability of the action, when the file has one.
        provenance: ``"measured"`` (the default), ``"simulated"`` (``specband simulate``) or
            ``"emulated"`` (``specband sweep`` against ``specband emulate``), from a
            ``provenance`` column.
        utilization_origin: ``"derived"`` when the file says the utilisation was derived
            (back-computed from a published reward), else the row's provenance; ``None``
            when the row has no energy.
        raw: the row as read, with every column (for writing back and reports).
    """

    line: int
    index: int
    repeat: int | None
    trial: str | None
    batch_size: int
    action: Action
    action_index: int
    error: str | None
    accept_length: float | None
    speed_tok_s: float | None
    avg_power_watts: float | None
    power_limit_watts: float | None
    energy_utilization: float | None
    gpu_temp_c_before: float | None
    gpu_temp_c: float | None
    gpu_mem_used_mb: float | None
    gpu_util_pct: float | None
    gpu_mem_used_mb_before: float | None
    gpu_util_pct_before: float | None
    gpu_throttling: bool | None
    propensity: float | None
    provenance: str
    utilization_origin: str | None
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @property
    def is_baseline(self) -> bool:
        """The row ran the non-speculative baseline ``(0, 0, 0)``."""
        return self.action_index == 0

    @property
    def is_agentic_trace(self) -> bool:
        """An agentic pilot trace row (kept, never trained on, not a failure)."""
        return self.error is not None and self.error.startswith(AGENTIC_ERROR_PREFIX)

    @property
    def failed(self) -> bool:
        """The config failed at this batch size (an error row that is not an agentic trace)."""
        return self.error is not None and not self.is_agentic_trace

    @property
    def trainable(self) -> bool:
        """A successful grid run: no error."""
        return self.error is None

    def group_key(self) -> tuple[str | None, int | None, int]:
        """``(trial, repeat, batch_size)``: rows scored against the same baseline."""
        return (self.trial, self.repeat, self.batch_size)

    def utilization(self, power_limit_w: float | None = None) -> float | None:
        """Average power / power limit, or the file's ``energy_utilization``, or ``None``.

        Args:
            power_limit_w: overrides the row's ``power_limit_watts`` when given (W).
        """
        limit = power_limit_w if power_limit_w is not None else self.power_limit_watts
        if self.avg_power_watts is not None and limit is not None and limit > 0:
            return self.avg_power_watts / limit
        return self.energy_utilization

    def state(self, features: str = "contract") -> np.ndarray:
        """The row's 4-float state, shape (4,), float32 (see the module docstring)."""
        if features == "contract":
            return state_vector(self.batch_size, self.gpu_temp_c_before, self.gpu_mem_used_mb, self.gpu_util_pct)
        if features == "pre":
            return state_vector(
                self.batch_size, self.gpu_temp_c_before, self.gpu_mem_used_mb_before, self.gpu_util_pct_before
            )
        raise ValueError(f"unknown feature kind {features!r}; expected one of {FEATURE_KINDS}")


@dataclass(frozen=True)
class TrainingData:
    """Logged bandit data for the policies: one entry per successful sweep row.

    Attributes:
        states: (n, 4) float32 contexts (``features`` says which kind).
        actions: (n,) int64 action indices into ``action_set``.
        rewards: (n,) float64 rewards in [0, 1].
        batch_sizes: (n,) int64 batch size of each row.
        propensities: (n,) float64 logging probability of each row's action given its
            batch size (uniform over the configs run at that batch size unless the file
            had a ``propensity`` column).
        allowed: batch size -> (19,) bool mask of actions that have successful data there
            and never failed there; picks are made only among these (44 wide for the
            extended set).
        features: ``"contract"`` or ``"pre"``.
        groups: (n,) object array of each row's ``(trial, repeat)``, for held-out splits.
        action_set: the action set the rows were read against (the sweep's): what an index
            means, and the width of every score vector and mask built from this data.
    """

    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    batch_sizes: np.ndarray
    propensities: np.ndarray
    allowed: Mapping[int, np.ndarray]
    features: str = "contract"
    groups: np.ndarray | None = None
    action_set: ActionSet = CONTRACT_SET

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    def allowed_for(self, batch_size: int) -> np.ndarray:
        """(19,) bool mask for a batch size; an unmeasured one takes the nearest measured
        batch size's mask (the larger on a tie, the more memory-constrained one).

        Raises:
            DataError: when there is no data at all.
        """
        if not self.allowed:
            raise DataError("no successful rows to pick from")
        if batch_size in self.allowed:
            return self.allowed[batch_size]
        nearest = min(self.allowed, key=lambda b: (abs(b - batch_size), -b))
        return self.allowed[nearest]


@dataclass(frozen=True)
class Sweep:
    """A validated set of sweep rows.

    Attributes:
        rows: the rows in file order.
        path: source file (``None`` for in-memory data).
        format: ``"sweep"``, ``"published_live"`` or ``"sglang_bench"``.
        power_limit_w: power limit (W) that overrides the rows' own, or ``None``.
        skipped: lines of an sglang bench file whose triple is not a contract action
            (:func:`specband.sweeps.benchfile.read_bench`), ``"line <n>: <triple>: <why>"``.
        action_set: the action set the rows were read against (:func:`load_sweep`'s
            ``action_set``): every row's ``action_index`` is into it.
        wall_clock_batch_sizes: batch sizes whose rows mixed step-time and wall-clock speeds
            and are all read on the wall clock (:func:`specband.sweeps.speeds.one_speed_source`).
        mixed_speed_batch_sizes: batch sizes left mixed (a row without ``wall_clock_tok_s``).
    """

    rows: tuple[SweepRow, ...]
    path: str | None = None
    format: str = "sweep"
    power_limit_w: float | None = None
    skipped: tuple[str, ...] = ()
    action_set: ActionSet = CONTRACT_SET
    wall_clock_batch_sizes: tuple[int, ...] = ()
    mixed_speed_batch_sizes: tuple[int, ...] = ()

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_records(
        cls,
        records: Iterable[Mapping[str, Any]],
        *,
        path: str | Path | None = None,
        fmt: str = "auto",
        power_limit_w: float | None = None,
        action_set: ActionSet = CONTRACT_SET,
    ) -> Sweep:
        """Validate in-memory rows (dicts as in the JSONL) into a :class:`Sweep`, against
        ``action_set`` (see :func:`load_sweep`).

        Line numbers in errors are 1-based positions in ``records``.

        Raises:
            DataError: see :func:`load_sweep`.
        """
        return _validate([(i + 1, dict(r)) for i, r in enumerate(records)], path, fmt, power_limit_w, action_set)

    def subset(self, keep: Callable[[SweepRow], bool]) -> Sweep:
        """Rows for which ``keep(row)`` is true (no re-validation: used for held-out splits)."""
        return Sweep(
            tuple(r for r in self.rows if keep(r)), self.path, self.format, self.power_limit_w, (), self.action_set
        )

    # ----------------------------------------------------------------- queries
    @property
    def energy_measured(self) -> bool:
        """False when no row has energy (e.g. sglang bench output): rewards are throughput only."""
        return any(r.avg_power_watts is not None or r.energy_utilization is not None for r in self.rows if r.trainable)

    @property
    def power_limit_assumed(self) -> bool:
        """Some successful row's energy utilisation uses the assumed limit
        (:attr:`RewardConfig.power_limit_w <specband.contract.reward.RewardConfig>`, 80 W): it has
        ``avg_power_watts`` but no ``power_limit_watts``, and no override was given."""
        return self.power_limit_w is None and any(_assumes_limit(r) for r in self.rows if r.trainable)

    def speed_note(self) -> str | None:
        """The sentence a command prints when a batch size's speeds came from two clocks
        (:func:`specband.sweeps.speeds.one_speed_source`), else ``None``."""
        return speed_source_note(self.path or "<data>", self.wall_clock_batch_sizes, self.mixed_speed_batch_sizes)

    def energy_note(self, config: RewardConfig | None = None) -> str | None:
        """The sentence a command prints about how energy enters the rewards, or ``None``
        when every row carries its own power limit (or the user gave one).

        Args:
            config: reward constants, for the assumed limit (default: :class:`RewardConfig`'s 80 W).
        """
        if not self.energy_measured:
            skipped = f" ({len(self.skipped)} lines skipped: not contract actions)" if self.skipped else ""
            return f"{self.path or '<data>'}: no energy was measured; rewards come from throughput alone{skipped}"
        if self.power_limit_assumed:
            assumed_w = (config or RewardConfig()).power_limit_w
            return (
                f"{self.path or '<data>'}: rows give avg_power_watts but no power_limit_watts; energy "
                f"utilisation uses the assumed {assumed_w:g} W limit of the study's RTX 4060 Laptop "
                "(--power-limit W gives another)"
            )
        return None

    def batch_sizes(self) -> list[int]:
        """Sorted batch sizes that have at least one successful row."""
        return sorted({r.batch_size for r in self.rows if r.trainable})

    def training_rows(self) -> list[SweepRow]:
        """Successful rows (no error), in file order."""
        return [r for r in self.rows if r.trainable]

    def allowed_masks(self) -> dict[int, np.ndarray]:
        """:meth:`allowed_mask` of every batch size with a row, in one pass over the rows
        (one call per batch size would be quadratic in their number)."""
        masks: dict[int, np.ndarray] = {}
        for r in self.rows:
            if r.trainable:
                masks.setdefault(r.batch_size, np.zeros(len(self.action_set), dtype=bool))[r.action_index] = True
        for r in self.rows:
            if r.failed:
                masks.setdefault(r.batch_size, np.zeros(len(self.action_set), dtype=bool))[r.action_index] = False
        return masks

    def allowed_mask(self, batch_size: int) -> np.ndarray:
        """(19,) bool: actions with a successful row at this batch size and no failed row there."""
        mask = np.zeros(len(self.action_set), dtype=bool)
        for r in self.rows:
            if r.batch_size == batch_size and r.trainable:
                mask[r.action_index] = True
        for r in self.rows:
            if r.batch_size == batch_size and r.failed:
                mask[r.action_index] = False
        return mask

    def baseline_speed(self, row: SweepRow) -> float:
        """Speed (tok/s) of the baseline that ``row`` is scored against: the successful
        ``(0,0,0)`` row of the same trial, repeat and batch size; else the mean of the
        batch size's baselines.

        Raises:
            DataError: the batch size has no successful baseline row.
        """
        same = self._baselines().get(row.group_key())
        if same:
            return float(np.mean(same))
        pooled = [s for key, speeds in self._baselines().items() if key[2] == row.batch_size for s in speeds]
        if not pooled:
            raise DataError(
                f"batch size {row.batch_size} has no successful (0,0,0) baseline row to score against",
                path=self.path,
                line=row.line,
                field="batch_size",
            )
        return float(np.mean(pooled))

    def _baselines(self) -> dict[tuple[str | None, int | None, int], list[float]]:
        cache = self.__dict__.get("_baseline_cache")
        if cache is None:
            cache = defaultdict(list)
            for r in self.rows:
                if r.is_baseline and r.trainable and r.speed_tok_s is not None:
                    cache[r.group_key()].append(r.speed_tok_s)
            cache = dict(cache)
            object.__setattr__(self, "_baseline_cache", cache)
        return cache

    def reward_parts(self, row: SweepRow, config: RewardConfig = RewardConfig()) -> RewardParts:
        """The reward of one row and its parts (see :mod:`specband.contract.reward`)."""
        if not row.trainable:
            return compute_reward(
                speed_tok_s=None, baseline_speed_tok_s=1.0, utilization=None, error=True, config=config
            )
        limit = self.power_limit_w or row.power_limit_watts or config.power_limit_w
        utilization = row.utilization(limit)
        return compute_reward(
            speed_tok_s=row.speed_tok_s,
            baseline_speed_tok_s=self.baseline_speed(row),
            utilization=utilization,
            gpu_temp_c=row.gpu_temp_c,
            gpu_throttling=row.gpu_throttling,
            config=config,
        )

    def rewards(self, config: RewardConfig = RewardConfig()) -> np.ndarray:
        """(len(rows),) float64 rewards, 0 for error rows."""
        return np.array([self.reward_parts(r, config).reward for r in self.rows], dtype=np.float64)

    def training_data(self, features: str = "contract", config: RewardConfig = RewardConfig()) -> TrainingData:
        """Logged bandit data of the successful rows (see :class:`TrainingData`).

        Raises:
            DataError: no successful rows.
            ValueError: an unknown feature kind.
        """
        if features not in FEATURE_KINDS:
            raise ValueError(f"unknown feature kind {features!r}; expected one of {FEATURE_KINDS}")
        rows = self.training_rows()
        if not rows:
            raise DataError("no successful rows to train on", path=self.path)
        seen: dict[int, set[int]] = defaultdict(set)
        for r in rows:
            seen[r.batch_size].add(r.action_index)
        propensities = np.array(
            [r.propensity if r.propensity is not None else 1.0 / len(seen[r.batch_size]) for r in rows],
            dtype=np.float64,
        )
        groups = np.empty(len(rows), dtype=object)
        groups[:] = [(r.trial, r.repeat) for r in rows]
        masks = self.allowed_masks()
        return TrainingData(
            states=np.stack([r.state(features) for r in rows]).astype(np.float32),
            actions=np.array([r.action_index for r in rows], dtype=np.int64),
            rewards=np.array([self.reward_parts(r, config).reward for r in rows], dtype=np.float64),
            batch_sizes=np.array([r.batch_size for r in rows], dtype=np.int64),
            propensities=propensities,
            allowed={bs: masks[bs] for bs in sorted(seen)},
            features=features,
            groups=groups,
            action_set=self.action_set,
        )


def load_sweep(
    path: str | Path | None = None,
    *,
    fmt: str = "auto",
    power_limit_w: float | None = None,
    action_set: ActionSet = CONTRACT_SET,
) -> Sweep:
    """Read and validate a sweep JSONL file.

    Args:
        path: the file; ``None`` reads the bundled published measurements.
        fmt: ``"auto"`` (detect from the first row), ``"sweep"``, ``"published_live"`` or
            ``"sglang_bench"``.
        power_limit_w: power limit in W overriding the rows' ``power_limit_watts``.
        action_set: the set the rows are read against (the command's ``--actions``): a
            triple outside it is refused, and the sweep carries it.

    Returns:
        the :class:`Sweep`.

    Raises:
        DataError: naming file, line and field, for: a missing or empty file, a line that is
            not a JSON object, NaN or Infinity in a number, a missing required field, a
            wrong type, batch size <= 0, a triple that is not in ``action_set`` (the 19
            contract actions by default) after canonicalisation, an accept length outside [1, steps + 1], a
            non-positive speed on a successful row, a batch size with rows but no
            successful baseline row, or the same (index, repeat) twice.
    """
    p = bundled_data_path() if path is None else Path(path)
    numbered = read_jsonl(p)
    return _validate(numbered, p, fmt, power_limit_w, action_set)


# --------------------------------------------------------------------------- validation
def _detect_format(record: Mapping[str, Any]) -> str:
    if is_bench_record(record):
        return "sglang_bench"
    if "trial" in record or "reward_published" in record:
        return "published_live"
    return "sweep"


def _check_value(name: str, value: Any, err: Callable[[str, str], DataError]) -> None:
    if value is None:
        return
    if name in _INT_FIELDS:
        if not is_int(value):
            raise err(name, f"expected an integer, got {type(value).__name__} {value!r}")
    elif name in _FLOAT_FIELDS:
        if not is_number(value):
            raise err(name, f"expected a number, got {type(value).__name__} {value!r}")
    elif name in _STR_FIELDS:
        if not isinstance(value, str):
            raise err(name, f"expected a string or null, got {type(value).__name__} {value!r}")
    elif name in _BOOL_FIELDS and not isinstance(value, bool):
        raise err(name, f"expected true, false or null, got {type(value).__name__} {value!r}")


def _find_nonfinite(value: Any, name: str) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return name
    if isinstance(value, dict):
        for k, v in value.items():
            found = _find_nonfinite(v, f"{name}.{k}")
            if found:
                return found
    if isinstance(value, list):
        for i, v in enumerate(value):
            found = _find_nonfinite(v, f"{name}[{i}]")
            if found:
                return found
    return None


def _validate(
    numbered: Sequence[tuple[int, Any]],
    path: str | Path | None,
    fmt: str,
    power_limit_w: float | None,
    action_set: ActionSet,
) -> Sweep:
    if not numbered:
        raise DataError("no rows", path=path)
    if power_limit_w is not None and not (math.isfinite(power_limit_w) and power_limit_w > 0):
        raise DataError(f"power limit must be a positive number of W, got {power_limit_w}", path=path)
    first = numbered[0][1]
    if fmt == "auto":
        fmt = _detect_format(first) if isinstance(first, dict) else "sweep"
    if fmt not in ("sweep", "published_live", "sglang_bench"):
        raise DataError(f"unknown format {fmt!r}; expected sweep, published_live or sglang_bench", path=path)
    skipped: tuple[str, ...] = ()
    if fmt == "sglang_bench":
        bench = read_bench(numbered, path)
        if not bench.records:
            raise DataError("no row is one of the 19 contract actions", path=path)
        numbered = [(line, record.as_row(BENCH_COLUMNS)) for line, record in bench.records]
        skipped = tuple(bench.skipped)
    rows: list[SweepRow] = []
    seen_ids: dict[tuple[int, int | None], int] = {}
    engines: dict[str, int] = {}
    batch_sizes: set[Any] = set()
    for lineno, record in numbered:
        size = record.get("batch_size") if isinstance(record, dict) else None
        if isinstance(size, (int, float, str)) and size not in batch_sizes:  # a bad type is _validate_row's
            batch_sizes.add(size)
            if len(batch_sizes) > MAX_DATA_BATCH_SIZES:
                raise DataError(
                    f"more than {MAX_DATA_BATCH_SIZES} distinct batch sizes in one file (a measured sweep of that "
                    "many is weeks of GPU time; see specband.core.limits.MAX_DATA_BATCH_SIZES)",
                    path=path,
                    line=lineno,
                    field="batch_size",
                )
        row = _validate_row(record, lineno, path, action_set)
        _check_engine(record, lineno, path, engines)
        key = (row.index, row.repeat)
        if key in seen_ids:
            raise DataError(
                f"(index, repeat) = ({row.index}, {row.repeat}) already appears on line {seen_ids[key]}",
                path=path,
                line=lineno,
                field="index",
            )
        seen_ids[key] = lineno
        rows.append(row)
    by_bs: dict[int, list[SweepRow]] = defaultdict(list)
    for r in rows:
        by_bs[r.batch_size].append(r)
    for bs, bs_rows in sorted(by_bs.items()):
        trainable = [r for r in bs_rows if r.trainable]
        if trainable and not any(r.is_baseline for r in trainable):
            raise DataError(
                f"batch size {bs} has {len(trainable)} successful rows but no successful (0,0,0) "
                f"baseline row to score them against",
                path=path,
                line=trainable[0].line,
                field="batch_size",
            )
    if power_limit_w is None:
        _check_assumed_power_limit(rows, path)
    rows, wall_clock, mixed = one_speed_source(rows)
    return Sweep(
        tuple(rows), None if path is None else str(path), fmt, power_limit_w, skipped, action_set, wall_clock, mixed
    )


#: ``hardware`` values of the study's card, whose 80 W limit rows without
#: ``power_limit_watts`` are scored against (lower case, without spaces, - and _).
_ASSUMED_LIMIT_HARDWARE = ("rtx4060laptop", "nvidiageforcertx4060laptopgpu")


def _assumes_limit(row: SweepRow) -> bool:
    return row.avg_power_watts is not None and row.power_limit_watts is None


def _check_assumed_power_limit(rows: Sequence[SweepRow], path: str | Path | None) -> None:
    """Refuse rows whose energy would be scored against the assumed 80 W limit when they
    are evidently not from an 80 W card.

    The rule, for a successful row with ``avg_power_watts`` and no ``power_limit_watts``
    (and no ``--power-limit``): its ``hardware``, when given, must name the study's RTX 4060
    Laptop, and its ``avg_power_watts`` must not exceed 80 W (an average above the limit
    means the limit was higher). Rows of unknown hardware within 80 W keep the assumption
    (the published sweep's rows carry no limit), and the commands say so.

    Raises:
        DataError: naming the first such row, its field, and ``--power-limit``.
    """
    assumed_w = RewardConfig().power_limit_w
    for row in rows:
        if not (row.trainable and _assumes_limit(row)):
            continue
        hardware = row.raw.get("hardware") if isinstance(row.raw, dict) else None
        key = "".join(ch for ch in str(hardware).lower() if ch.isalnum())
        if hardware is not None and key not in _ASSUMED_LIMIT_HARDWARE:
            field_name = "hardware"
            why = f"is {hardware!r}, not the RTX 4060 Laptop whose {assumed_w:g} W limit is assumed"
        elif row.avg_power_watts is not None and row.avg_power_watts > assumed_w:
            field_name = "avg_power_watts"
            why = f"is {row.avg_power_watts:g} W, above the assumed {assumed_w:g} W limit"
        else:
            continue
        raise DataError(
            f"{why}, and the row has no power_limit_watts: give the GPU's power limit with --power-limit W",
            path=path,
            line=row.line,
            field=field_name,
        )


def _check_engine(record: Mapping[str, Any], lineno: int, path: str | Path | None, engines: dict[str, int]) -> None:
    """Refuse an unknown ``engine`` and a file whose rows come from two engines (the first
    line of each is in ``engines``): one engine's speeds and accept lengths are not the other's.

    Raises:
        DataError: naming the file, the line and ``engine``.
    """
    engine, _ = row_engine(record)  # a row without it: the default engine's (the study's)
    if engine not in engine_names():
        raise DataError(
            f"engine must be one of {', '.join(engine_names())}, got {engine!r}", path=path, line=lineno, field="engine"
        )
    if engines and engine not in engines:
        other, first = next(iter(engines.items()))
        raise DataError(
            f"a {engine} row in a file of {other} rows (line {first}): one file holds one engine's runs",
            path=path,
            line=lineno,
            field="engine",
        )
    engines.setdefault(engine, lineno)


def _validate_row(record: Any, lineno: int, path: str | Path | None, action_set: ActionSet) -> SweepRow:  # noqa: C901
    def err(name: str | None, message: str) -> DataError:
        return DataError(message, path=path, line=lineno, field=name)

    if not isinstance(record, dict):
        raise err(None, f"expected a JSON object, got {type(record).__name__}")
    bad = _find_nonfinite(record, "")
    if bad:
        raise err(bad.lstrip("."), "NaN or Infinity is not a valid number")
    rec = dict(record)
    for name in REQUIRED_COLUMNS:
        if name not in rec:
            raise err(name, "required field is missing")
    for name, value in rec.items():
        _check_value(name, value, err)
    for name in ("index", "batch_size", "steps", "topk", "num_draft_tokens"):
        if rec.get(name) is None:
            raise err(name, "required field is null")
    for name in _INT_FIELDS:
        if rec.get(name) is not None and not -(2**63) <= rec[name] < 2**63:
            raise err(name, f"{rec[name]} does not fit in a 64-bit integer")
    if not 0 < rec["batch_size"] <= MAX_BATCH_SIZE:
        raise err("batch_size", f"must be > 0 and <= {MAX_BATCH_SIZE}, got {rec['batch_size']}")
    if rec["index"] < 0:
        raise err("index", f"must be >= 0, got {rec['index']}")
    if rec.get("repeat") is not None and rec["repeat"] < 0:
        raise err("repeat", f"must be >= 0, got {rec['repeat']}")
    for name in NONNEGATIVE_COLUMNS:
        if rec.get(name) is not None and rec[name] < 0:
            raise err(name, f"must be >= 0, got {rec[name]}")
    if (bad_field := row_out_of_bounds(rec, max(rec["steps"], 0))) is not None:  # sweeps/bounds.py (B05, B07)
        raise err(*bad_field)
    if rec.get("propensity") is not None and not 0 < rec["propensity"] <= 1:
        raise err("propensity", f"must be in (0, 1], got {rec['propensity']}")
    if rec.get("action_set", "contract") not in ACTION_SETS:
        raise err("action_set", f"must be one of {', '.join(ACTION_SETS)}, got {rec['action_set']!r}")
    triple = (rec["steps"], rec["topk"], rec["num_draft_tokens"])
    try:
        idx = action_index(triple, action_set)
    except InvalidActionError as exc:
        raise err("steps/topk/num_draft_tokens", str(exc)) from None
    action = action_set[idx]
    error = rec.get("error")
    if error is not None and not error.strip():
        error = "unspecified error"
    if error is None:
        if rec.get("speed_tok_s") is None:
            raise err("speed_tok_s", "required on a row without an error")
        if rec["speed_tok_s"] <= 0:
            raise err("speed_tok_s", f"must be > 0 tok/s on a successful row, got {rec['speed_tok_s']}")
        if rec.get("is_baseline") is not None and rec["is_baseline"] != action.is_baseline:
            raise err("is_baseline", f"is {rec['is_baseline']} but the triple {tuple(action)} says otherwise")
    accept = rec.get("accept_length")
    if accept is not None and error is None:
        high = action.speculative_num_steps + 1
        if not 1.0 - _ACCEPT_TOL <= accept <= high + _ACCEPT_TOL:
            raise err("accept_length", f"{accept} is outside [1, steps + 1] = [1, {high}] for {tuple(action)}")
    origin = rec.get("energy_utilization_origin")
    provenance = rec.get("provenance") or "measured"
    if rec.get("avg_power_watts") is None and rec.get("energy_utilization") is None:
        util_origin = None
    elif origin is not None and origin.startswith("derived"):
        util_origin = "derived"
    else:
        util_origin = provenance
    return SweepRow(
        line=lineno,
        index=rec["index"],
        repeat=rec.get("repeat"),
        trial=rec.get("trial"),
        batch_size=rec["batch_size"],
        action=action,
        action_index=idx,
        error=error,
        accept_length=accept,
        speed_tok_s=rec.get("speed_tok_s"),
        avg_power_watts=rec.get("avg_power_watts"),
        power_limit_watts=rec.get("power_limit_watts"),
        energy_utilization=rec.get("energy_utilization"),
        gpu_temp_c_before=rec.get("gpu_temp_c_before"),
        gpu_temp_c=rec.get("gpu_temp_c"),
        gpu_mem_used_mb=rec.get("gpu_mem_used_mb"),
        gpu_util_pct=rec.get("gpu_util_pct"),
        gpu_mem_used_mb_before=rec.get("gpu_mem_used_mb_before"),
        gpu_util_pct_before=rec.get("gpu_util_pct_before"),
        gpu_throttling=rec.get("gpu_throttling"),
        propensity=rec.get("propensity"),
        provenance=provenance,
        utilization_origin=util_origin,
        raw=record,
    )
