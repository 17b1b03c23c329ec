"""Where a pick comes from: the hardware, power limit, models, engine and its version, workload and
provenance of the data a folder was trained on (:class:`DataOrigin`), and per batch size
and action what the rows showed (:class:`ActionStats`: speed, utilisation, joules per
token, repeats). ``specband train`` records both in the manifest; ``recommend``, ``launch``
and ``schedule`` print them beside the pick and check them against the user's setup
(:mod:`specband.deploy.transfer`).

Only the standard library and the lowest floors are imported at module level (``recommend``
stays cold-fast). An origin names its engine (``engine``, ``engine_version``); a manifest
written before ``engine_version`` (its ``sglang_version``/``vllm_version``) still reads.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from specband.core.engine_table import default_engine_name, display_name_of, row_engine
from specband.core.limits import is_finite_number

if TYPE_CHECKING:
    from specband.sweeps.dataset import Sweep, SweepRow

__all__ = [
    "PROVENANCES",
    "ActionStats",
    "DataOrigin",
    "action_stats",
    "data_origin",
]

#: What a figure can rest on (the brief's terms): measured on a GPU, emulated by
#: ``specband emulate``, simulated by ``specband simulate``, or published by a study.
PROVENANCES: tuple[str, ...] = ("measured", "emulated", "simulated", "published")

#: Formats whose rows are a study's published measurements (not measured by the user).
_PUBLISHED_FORMATS = ("published_live",)


def _joined(values: Iterable[Any]) -> str | None:
    """The distinct non-empty values, the most frequent first, joined by ``" + "``
    (``None`` when there is none)."""
    counts = Counter(str(v) for v in values if v is not None and str(v).strip())
    if not counts:
        return None
    return " + ".join(v for v, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _number(value: Any) -> float | None:
    """``value`` as a float when it is a finite JSON number (not a bool), else ``None``."""

    return float(value) if is_finite_number(value) else None


@dataclass(frozen=True)
class DataOrigin:
    """What the data behind a pick rests on.

    Attributes:
        hardware: the rows' ``hardware`` (GPU name as the sweep wrote it; several joined by
            ``" + "``), or ``None`` when the rows do not say.
        power_limit_w: the power limit the utilisation is relative to, W (the override of
            ``train --power-limit``, else the rows' ``power_limit_watts``), or ``None``.
        target_model, draft_model: the rows' ``target_model`` / ``draft_model``.
        workload: the rows' ``workload`` (``None`` when unrecorded).
        provenance: one of :data:`PROVENANCES` (several joined by ``" + "``).
        power_measured: True only when some row's power was read from a GPU (by the user,
            or by the study for published rows); False for simulated and emulated power.
        power_source: how the power was obtained when it was not measured (a simulated
            profile's ``power_source``, ``"unmeasured"``), else ``None``.
        profile: the simulator profile of simulated rows, else ``None``.
        power_limit_range_w: ``(lowest, highest)`` limit of rows swept over several power
            limits (``sweep``/``simulate --power-limits``), W; ``None`` for one limit (then
            ``power_limit_w`` is it; over several, ``power_limit_w`` is their median).
        target_architecture, draft_architecture: the rows' config architectures (simulated
            rows record them beside the name the model was given by).
        target_config_sha256, draft_config_sha256: the rows' config identities
            (:func:`specband.sim.hfconfig.config_sha256`; several joined by ``" + "``): what the
            models are, however they were named; ``None`` for rows that do not record them.
        engine: the name of the engine the rows were measured on (several joined by ``" + "``):
            the rows' ``engine`` (:func:`specband.core.engine_table.row_engine`: a row without it
            is the default engine's when it carries an older per-engine version column or is
            published, the study's), else ``None``. A manifest written before it was recorded
            reads as ``None``.
        engine_version: the rows' engine release (several joined by ``" + "``), or ``None``
            when unrecorded.
    """

    hardware: str | None = None
    power_limit_w: float | None = None
    target_model: str | None = None
    draft_model: str | None = None
    workload: str | None = None
    provenance: str = "measured"
    power_measured: bool = False
    power_source: str | None = None
    profile: str | None = None
    power_limit_range_w: tuple[float, float] | None = None
    target_architecture: str | None = None
    target_config_sha256: str | None = None
    draft_architecture: str | None = None
    draft_config_sha256: str | None = None

    @property
    def limit_text(self) -> str:
        """The data's power limit as a label: ``"80 W"``, ``"200-700 W"`` for rows over several
        limits, ``"?"`` when unknown."""
        if self.power_limit_range_w is not None:
            low, high = self.power_limit_range_w
            return f"{low:g}-{high:g} W"
        return "?" if self.power_limit_w is None else f"{self.power_limit_w:g} W"

    @property
    def limit_phrase(self) -> str:
        """``"at 80 W"``, ``"over 200-700 W"`` (rows swept over several limits), or ``"at ?"``."""
        return ("over " if self.power_limit_range_w is not None else "at ") + self.limit_text

    engine: str | None = None
    engine_version: str | None = None

    @property
    def simulated(self) -> bool:
        """Some of the rows are simulated (every figure from them is a simulation)."""
        return "simulated" in self.provenance.split(" + ")

    @property
    def measured(self) -> bool:
        """Every row was measured on a GPU (by the user, or published by a study)."""
        return all(p in ("measured", "published") for p in self.provenance.split(" + "))

    def engine_text(self) -> str:
        """The engine and its version as a line names them: ``"vLLM 0.32.0"``, ``"sglang
        0.5.23"``, ``"sglang not recorded"`` (an origin that names no engine is read as the
        default engine's, the study's; rows of several engines: ``"engines sglang + vllm"``)."""
        engine = self.engine or default_engine_name()
        if " + " in engine:
            return f"engines {engine} ({self.engine_version or 'versions not recorded'})"
        return f"{display_name_of(engine)} {self.engine_version or 'not recorded'}"

    def engine_note(self, engine: str, what: str) -> str | None:
        """A note when ``what`` (``"this launch line"``, ``"this schedule"``) runs the engine
        named ``engine`` while the rows were measured on another engine, else ``None`` (no engine
        recorded: nothing is claimed). The picks then carry one engine's measurements to another;
        engines schedule and verify drafts differently (vLLM runs chains only)."""
        if self.engine is None or self.engine == engine:
            return None
        mine, theirs = display_name_of(engine), display_name_of(self.engine)
        version = self.engine_version
        measured_on = f"{theirs} {version}" if version else f"{theirs} (version not recorded)"
        return (
            f"{what} targets {mine}, but the data were measured on {measured_on}: the picks and figures are "
            f"{theirs}'s, carried to {mine} untested (a sweep with --engine {engine} measures {mine})"
        )

    def describe(self) -> str:
        """One line: ``"published rows: RTX4060_Laptop at 80 W, unsloth/... + rescommons/...,
        sglang ?, workload ?, power measured"``."""
        power = "power measured" if self.power_measured else f"power not measured ({self.power_source or 'none'})"
        return (
            f"{self.provenance} rows: {self.hardware or '? GPU'} {self.limit_phrase}, "
            f"{self.target_model or '? target'} + {self.draft_model or '? draft'}, "
            f"{self.engine_text()}, workload {self.workload or '?'}, {power}"
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready dict (every field, ``None`` kept; the fields of :data:`_OPTIONAL_KEYS`
        only when known, so that a folder written without them keeps its manifest's keys)."""
        out = asdict(self)
        for key in _OPTIONAL_KEYS:  # absent while unknown: a folder's manifest keeps its keys
            if out[key] is None:
                del out[key]
        if self.power_limit_range_w is not None:
            out["power_limit_range_w"] = list(self.power_limit_range_w)
        return out

    @classmethod
    def from_json(cls, obj: Any) -> DataOrigin | None:
        """Parse :meth:`to_json`'s dict; ``None`` for anything that is not a dict (a manifest
        written before origins were recorded). Unknown keys are ignored; a value of the wrong
        type is read as unknown (``None``)."""
        if not isinstance(obj, dict):
            return None

        def text(key: str) -> str | None:
            value = obj.get(key)
            return value if isinstance(value, str) else None

        limit = _number(obj.get("power_limit_w"))
        span = obj.get("power_limit_range_w")
        low_high = None
        if isinstance(span, list) and len(span) == 2:
            low, high = _number(span[0]), _number(span[1])
            if low is not None and high is not None and 0 < low < high:
                low_high = (low, high)
        return cls(
            hardware=text("hardware"),
            power_limit_w=limit if limit is not None and limit > 0 else None,
            target_model=text("target_model"),
            draft_model=text("draft_model"),
            workload=text("workload"),
            provenance=text("provenance") or "measured",
            power_measured=obj.get("power_measured") is True,
            power_source=text("power_source"),
            profile=text("profile"),
            power_limit_range_w=low_high,
            target_architecture=text("target_architecture"),
            target_config_sha256=text("target_config_sha256"),
            draft_architecture=text("draft_architecture"),
            draft_config_sha256=text("draft_config_sha256"),
            # an origin written before engine_version: its per-engine column (sglang_version, ...)
            engine=row_engine(obj, default=False)[0],
            engine_version=row_engine(obj, default=False)[1],
        )


#: :class:`DataOrigin` fields written to JSON only when known.
_OPTIONAL_KEYS = (
    "power_limit_range_w",
    "target_architecture",
    "target_config_sha256",
    "draft_architecture",
    "draft_config_sha256",
)


def _row_provenance(row: SweepRow, fmt: str) -> str:
    if row.provenance in ("simulated", "emulated"):
        return row.provenance
    return "published" if fmt in _PUBLISHED_FORMATS else "measured"


def data_origin(sweep: Sweep, power_limit_w: float | None = None) -> DataOrigin:
    """The :class:`DataOrigin` of a sweep's successful rows.

    Args:
        sweep: the loaded sweep.
        power_limit_w: the limit that overrides the rows' own (``train --power-limit``), W.
    """
    rows = [r for r in sweep.rows if r.trainable] or list(sweep.rows)
    provenance = _joined(_row_provenance(r, sweep.format) for r in rows) or "measured"
    with_power = [r for r in rows if r.avg_power_watts is not None or r.energy_utilization is not None]
    measured_power = [
        r
        for r in with_power
        if _row_provenance(r, sweep.format) in ("measured", "published") and r.raw.get("power_measured") is not False
    ]
    if measured_power:
        power_source = None
    elif with_power:
        power_source = _joined(r.raw.get("power_source") for r in with_power) or (
            "unmeasured (simulated)" if any(r.provenance == "simulated" for r in with_power) else "emulated"
        )
    else:
        power_source = "none (no power in the rows)"
    limits = [r.power_limit_watts for r in rows if r.power_limit_watts is not None]
    limit = power_limit_w if power_limit_w is not None else (statistics.median(limits) if limits else None)
    return DataOrigin(
        hardware=_joined(r.raw.get("hardware") for r in rows),
        power_limit_w=None if limit is None else float(limit),
        target_model=_joined(r.raw.get("target_model") for r in rows),
        draft_model=_joined(r.raw.get("draft_model") for r in rows),
        workload=_joined(r.raw.get("workload") for r in rows),
        provenance=provenance,
        power_measured=bool(measured_power),
        power_source=power_source,
        profile=_joined(r.raw.get("profile") for r in rows if r.provenance == "simulated"),
        target_architecture=_joined(r.raw.get("target_architecture") for r in rows),
        target_config_sha256=_joined(r.raw.get("target_config_sha256") for r in rows),
        draft_architecture=_joined(r.raw.get("draft_architecture") for r in rows),
        draft_config_sha256=_joined(r.raw.get("draft_config_sha256") for r in rows),
        power_limit_range_w=(min(limits), max(limits)) if power_limit_w is None and len(set(limits)) > 1 else None,
        engine=_joined(_row_engine(r, sweep.format) for r in rows),
        engine_version=_joined(row_engine(r.raw)[1] for r in rows),
    )


def _row_engine(row: SweepRow, fmt: str) -> str | None:
    """The engine a row was measured on (:attr:`DataOrigin.engine`): the row's own
    (:func:`specband.core.engine_table.row_engine`), the default engine's for published rows and
    sglang bench files (the study and the bench script ran it), else ``None``."""
    engine, _ = row_engine(row.raw, default=fmt in (*_PUBLISHED_FORMATS, "sglang_bench"))
    return engine


@dataclass(frozen=True)
class ActionStats:
    """What the successful rows of one action at one batch size showed (means over rows).

    Attributes:
        rows: successful rows.
        repeats: distinct ``(trial, repeat)`` runs among them.
        speed_tok_s: mean decode speed, tokens/s.
        energy_utilization: mean average power / power limit (fraction), or ``None``.
        joules_per_token: mean J/token (the row's own, else power / speed), or ``None``.
        avg_power_w: mean average power, W, or ``None``.
    """

    rows: int
    repeats: int
    speed_tok_s: float
    energy_utilization: float | None = None
    joules_per_token: float | None = None
    avg_power_w: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready dict, floats to 6 significant digits."""
        out: dict[str, Any] = {}
        for key, value in asdict(self).items():
            out[key] = float(f"{value:.6g}") if isinstance(value, float) else value
        return out

    @classmethod
    def from_json(cls, obj: Any) -> ActionStats | None:
        """Parse :meth:`to_json`'s dict; ``None`` when it is malformed."""
        if not isinstance(obj, dict):
            return None

        def num(key: str) -> float | None:
            return _number(obj.get(key))

        speed, rows, repeats = num("speed_tok_s"), obj.get("rows"), obj.get("repeats")
        if speed is None or not isinstance(rows, int) or not isinstance(repeats, int):
            return None
        return cls(rows, repeats, speed, num("energy_utilization"), num("joules_per_token"), num("avg_power_w"))


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def action_stats(sweep: Sweep, power_limit_w: float | None = None) -> dict[int, dict[int, ActionStats]]:
    """Per batch size and action index, the :class:`ActionStats` of the sweep's successful
    rows (utilisation relative to ``power_limit_w`` when given, else each row's own)."""
    groups: dict[tuple[int, int], list[SweepRow]] = defaultdict(list)
    for r in sweep.rows:
        if r.trainable and r.speed_tok_s is not None:
            groups[(r.batch_size, r.action_index)].append(r)
    out: dict[int, dict[int, ActionStats]] = {}
    for (bs, a), rows in sorted(groups.items()):
        utils = [u for u in (r.utilization(power_limit_w) for r in rows) if u is not None]
        jpt: list[float] = []
        for r in rows:
            given = r.raw.get("joules_per_token")
            if isinstance(given, (int, float)) and not isinstance(given, bool) and given > 0:
                jpt.append(float(given))
            elif r.avg_power_watts is not None and r.speed_tok_s:
                jpt.append(r.avg_power_watts / r.speed_tok_s)
        powers = [r.avg_power_watts for r in rows if r.avg_power_watts is not None]
        out.setdefault(bs, {})[a] = ActionStats(
            rows=len(rows),
            repeats=len({(r.trial, r.repeat) for r in rows}),
            speed_tok_s=statistics.fmean(float(r.speed_tok_s or 0.0) for r in rows),
            energy_utilization=_mean(utils),
            joules_per_token=_mean(jpt),
            avg_power_w=_mean([float(p) for p in powers]),
        )
    return out


def stats_to_json(stats: Mapping[int, Mapping[int, ActionStats]]) -> dict[str, dict[str, Any]]:
    """``{"<bs>": {"<action>": ActionStats.to_json()}}``."""
    return {str(bs): {str(a): s.to_json() for a, s in sorted(m.items())} for bs, m in sorted(stats.items())}
