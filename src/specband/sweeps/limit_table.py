"""The pair "power limit + speculative flags" over several power limits, in the shape of Zeus's
power-limit optimizer (``zeus/optimizer/power_limit.py``: typed measurements per limit and a
pure selector over them):

* :class:`LimitPick` -- the pick at one limit and what its rows showed there (Zeus's
  ``PowerLimitMeasurement``);
* :class:`LimitTable` -- per measured batch size, the pick at every limit: built from a sweep's
  rows (:func:`limit_table`) or read from a folder's manifest (:meth:`LimitTable.from_json`,
  the ``power_limits`` of ``specband.json`` that ``specband train`` writes with
  :meth:`LimitTable.to_json`);
* :class:`OptimumSelector` and :class:`BandWithinSpeedLoss` -- the rule (Zeus's
  ``OptimumSelector`` and ``MaxSlowdownConstraint``): the lowest limit whose pick stays within
  a speed loss of the fastest pick and lands in the band.

``recommend``'s and ``launch``'s answer with a limit (:class:`specband.deploy.answers.PowerLimitAnswer`)
is the selector's choice over one batch size's row of the table, whichever way the table was
built; ``specband evaluate``'s power-limit figure reads the same table. NumPy, the dataset and
the reward are imported inside :func:`limit_table` (reading a manifest stays cold-fast).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specband.contract.actions import EXTENDED_ACTIONS
from specband.contract.reward import RewardConfig
from specband.core.batchlist import nearest_batch_size
from specband.core.errors import ConfigError, DataError, SpecbandError
from specband.core.limits import DEFAULT_MAX_SPEED_LOSS, is_finite_number, is_int

if TYPE_CHECKING:
    from specband.contract.reward import RewardConfig
    from specband.sweeps.dataset import Sweep, SweepRow

__all__ = [
    "DEFAULT_MAX_SPEED_LOSS",
    "BandWithinSpeedLoss",
    "LimitPick",
    "LimitTable",
    "MixAtLimit",
    "MixLimitRow",
    "OptimumSelector",
    "fastest",
    "limit_table",
    "mix_limit_picks",
    "nvidia_smi_command",
    "power_label_lines",
    "speed_loss",
    "sweep_power_limits",
    "unmeasured_power_line",
]


@dataclass(frozen=True)
class LimitPick:
    """The pick at one power limit and what the data says it does there.

    Attributes:
        power_limit_w: the limit, W.
        action_index, action: the pick (the ``lookup_table`` rule: the best mean reward of
            the actions measured at this batch size and limit); ``action`` is the plain
            ``(steps, topk, draft tokens)`` tuple.
        mean_reward: its mean reward over its rows at this limit.
        speed_tok_s: its mean decode speed, tokens/s.
        avg_power_w: its mean average power, W (``None`` when not measured).
        utilization: ``avg_power_w / power_limit_w`` (``None`` when not measured).
        joules_per_token: its mean energy per output token, J (``None`` when not measured).
        in_band: the utilisation is inside the reward's band.
        runs: rows behind the means.
    """

    power_limit_w: float
    action_index: int
    action: tuple[int, int, int]
    mean_reward: float
    speed_tok_s: float
    avg_power_w: float | None
    utilization: float | None
    joules_per_token: float | None
    in_band: bool
    runs: int

    def to_json(self) -> dict[str, Any]:
        """The pick as a manifest's ``power_limits.picks`` holds it (every field, in order;
        ``action`` a list)."""
        return {
            "power_limit_w": self.power_limit_w,
            "action_index": self.action_index,
            "action": list(self.action),
            "mean_reward": self.mean_reward,
            "speed_tok_s": self.speed_tok_s,
            "avg_power_w": self.avg_power_w,
            "utilization": self.utilization,
            "joules_per_token": self.joules_per_token,
            "in_band": self.in_band,
            "runs": self.runs,
        }

    @classmethod
    def from_json(cls, obj: Any, bad: Callable[[str], SpecbandError], where: str) -> LimitPick:
        """Parse :meth:`to_json`'s object.

        Raises:
            the error ``bad`` makes (``where``: the key path named in it): not exactly the
            fields of :meth:`to_json`, a field of the wrong type (``action`` must be
            ``action_index``'s triple), or a limit or speed that is not > 0.
        """

        if not isinstance(obj, dict) or set(obj) != set(_PICK_FIELDS):
            raise bad(f"{where}: each pick has exactly {sorted(_PICK_FIELDS)}")
        for name, nullable in _PICK_FIELDS.items():
            v = obj[name]
            if name == "in_band":
                ok = isinstance(v, bool)
            elif name == "action":
                index = obj["action_index"]
                ok = is_int(index) and 0 <= index < len(EXTENDED_ACTIONS) and v == list(EXTENDED_ACTIONS[index])
            elif name in ("action_index", "runs"):
                ok = is_int(v) and v >= 0
            else:
                ok = (nullable and v is None) or (is_finite_number(v) and not isinstance(v, bool))
            if not ok:
                raise bad(f"{where}: bad {name!r}: {v!r}")
        if not obj["power_limit_w"] > 0 or not obj["speed_tok_s"] > 0:
            raise bad(f"{where}: power_limit_w and speed_tok_s must be > 0")

        def number(name: str) -> float | None:
            return None if obj[name] is None else float(obj[name])

        steps, topk, draft = obj["action"]
        return cls(
            power_limit_w=float(obj["power_limit_w"]),
            action_index=int(obj["action_index"]),
            action=(int(steps), int(topk), int(draft)),
            mean_reward=float(obj["mean_reward"]),
            speed_tok_s=float(obj["speed_tok_s"]),
            avg_power_w=number("avg_power_w"),
            utilization=number("utilization"),
            joules_per_token=number("joules_per_token"),
            in_band=bool(obj["in_band"]),
            runs=int(obj["runs"]),
        )


#: The fields of one :class:`LimitPick` in a manifest and whether each may be null.
_PICK_FIELDS: dict[str, bool] = {
    "power_limit_w": False,
    "action_index": False,
    "action": False,
    "mean_reward": False,
    "speed_tok_s": False,
    "avg_power_w": True,
    "utilization": True,
    "joules_per_token": True,
    "in_band": False,
    "runs": False,
}


@dataclass(frozen=True)
class LimitTable:
    """Per measured batch size, the pick at every power limit of the data.

    Attributes:
        limits_w: the limits, W, increasing.
        band: ``(band_low, band_high)`` of the reward the picks were scored with, fractions
            of the limit (``in_band`` of each pick is against it).
        provenance: where the rows came from (``measured``, ``emulated``, ``simulated``,
            joined with ``+`` when mixed).
        picks: measured batch size -> the pick at every limit, by increasing limit.
        power_unmeasured_rows: rows whose power rests on no measurement (``power_measured:
            false``), for :func:`unmeasured_power_line`.
        power_sources: the published fits the rows' power comes from (``power_source``).
    """

    limits_w: tuple[float, ...]
    band: tuple[float, float]
    provenance: str
    picks: Mapping[int, tuple[LimitPick, ...]]
    power_unmeasured_rows: int = 0
    power_sources: tuple[str, ...] = ()

    def measured_batch_size(self, batch_size: int) -> int:
        """The measured batch size the table answers ``batch_size`` with (itself, else the
        nearest, the larger on a tie)."""
        return nearest_batch_size(batch_size, self.picks)

    def power_notes(self) -> list[str]:
        """What the rows' power rests on (:func:`power_label_lines`), for an answer's notes."""
        return power_label_lines(self.power_unmeasured_rows, list(self.power_sources))

    def to_json(self) -> dict[str, Any]:
        """The ``power_limits`` of a folder's ``specband.json``: ``limits_w``, ``band``,
        ``provenance``, ``power_unmeasured_rows``, ``power_sources`` and ``picks`` (batch size
        as a string -> :meth:`LimitPick.to_json` per limit)."""
        return {
            "limits_w": list(self.limits_w),
            "band": list(self.band),
            "provenance": self.provenance,
            "power_unmeasured_rows": self.power_unmeasured_rows,
            "power_sources": list(self.power_sources),
            "picks": {str(bs): [p.to_json() for p in picks] for bs, picks in self.picks.items()},
        }

    @classmethod
    def from_json(cls, value: Any, bad: Callable[[str], SpecbandError]) -> LimitTable:
        """Parse :meth:`to_json`'s object (a manifest's ``power_limits``).

        Raises:
            the error ``bad`` makes: not an object with ``limits_w``, ``band``, ``provenance``
            and ``picks``, a band that is not ``[low, high]``, a count or list of the wrong
            type, or a bad pick (:meth:`LimitPick.from_json`).
        """
        where = "'power_limits'"
        if not isinstance(value, dict) or not isinstance(value.get("picks"), dict) or not value["picks"]:
            raise bad(f"{where} must be an object with 'limits_w', 'band', 'provenance' and 'picks'")
        band = value.get("band")
        if not isinstance(band, list) or len(band) != 2 or not all(is_finite_number(v) for v in band):
            raise bad(f"{where}.band must be [low, high]")
        if not band[0] < band[1]:
            raise bad(f"{where}.band must be [low, high]")
        limits = value.get("limits_w")
        if not isinstance(limits, list) or not all(is_finite_number(v) and v > 0 for v in limits):
            raise bad(f"{where}.limits_w must be a list of limits in W")
        if not isinstance(value.get("provenance"), str):
            raise bad(f"{where}.provenance must be a string")
        unmeasured = value.get("power_unmeasured_rows", 0)
        if not is_int(unmeasured) or unmeasured < 0:
            raise bad(f"{where}.power_unmeasured_rows must be a count")
        sources = value.get("power_sources", [])
        if not isinstance(sources, list) or not all(isinstance(x, str) for x in sources):
            raise bad(f"{where}.power_sources must be a list of strings")
        picks: dict[int, tuple[LimitPick, ...]] = {}
        for key, row in value["picks"].items():
            if not str(key).isdigit() or int(key) <= 0 or not isinstance(row, list) or not row:
                raise bad(f"{where}.picks: {key!r} must be a batch size with a list of picks")
            picks[int(key)] = tuple(LimitPick.from_json(p, bad, f"{where}.picks.{key}") for p in row)
        return cls(
            limits_w=tuple(float(v) for v in limits),
            band=(float(band[0]), float(band[1])),
            provenance=value["provenance"],
            picks=picks,
            power_unmeasured_rows=int(unmeasured),
            power_sources=tuple(sources),
        )


def sweep_power_limits(sweep: Sweep) -> tuple[float, ...]:
    """The distinct ``power_limit_watts`` of a sweep's successful rows, increasing."""
    return tuple(sorted({float(r.power_limit_watts) for r in sweep.rows if r.trainable and r.power_limit_watts}))


def limit_table(sweep: Sweep, config: RewardConfig | None = None, *, nearest_to: int | None = None) -> LimitTable:
    """The :class:`LimitTable` of a sweep over several limits.

    At each limit the rows of that limit alone are scored (their own baseline, their own
    limit) and the ``lookup_table`` rule picks the action: the best mean reward of the
    actions measured there without failure; its figures are means over its rows.

    Args:
        sweep: a :class:`~specband.sweeps.dataset.Sweep` whose rows hold two or more
            ``power_limit_watts``.
        config: the reward's constants (:class:`~specband.contract.reward.RewardConfig`;
            default constants when ``None``).
        nearest_to: tabulate only the measured batch size nearest this one (the larger on a
            tie); default: every batch size of the sweep.

    Raises:
        DataError: fewer than two limits, or no successful row at a batch size at some limit.
    """

    config = config or RewardConfig()
    limits = sweep_power_limits(sweep)
    if len(limits) < 2:
        raise DataError("the sweep holds one power limit; a limit is picked from sweeps over several", path=sweep.path)
    sizes = list(sweep.batch_sizes())
    if nearest_to is not None:
        sizes = [nearest_batch_size(nearest_to, sizes)]
    picks = {bs: tuple(_pick_at(sweep, bs, limit, config) for limit in limits) for bs in sizes}
    trained = [r for r in sweep.rows if r.trainable]
    return LimitTable(
        limits_w=limits,
        band=(config.band_low, config.band_high),
        provenance="+".join(sorted({r.provenance for r in trained})),
        picks=picks,
        power_unmeasured_rows=sum(1 for r in trained if r.raw.get("power_measured") is False),
        power_sources=tuple(sorted({str(r.raw["power_source"]) for r in trained if r.raw.get("power_source")})),
    )


def _pick_at(sweep: Sweep, batch_size: int, limit: float, config: RewardConfig) -> LimitPick:
    """The ``lookup_table`` pick among the rows at ``batch_size`` and ``limit``.

    Raises:
        DataError: no successful row there.
    """
    import numpy as np

    part = sweep.subset(lambda r: r.power_limit_watts == limit and r.batch_size == batch_size)
    rows = part.training_rows()
    if not rows:
        raise DataError(f"no successful row at batch size {batch_size} and {limit:g} W", path=sweep.path)
    allowed = part.allowed_mask(batch_size)
    by_action: dict[int, list[SweepRow]] = {}
    for row in rows:
        if allowed[row.action_index]:
            by_action.setdefault(row.action_index, []).append(row)
    means = {i: float(np.mean([part.reward_parts(r, config).reward for r in rs])) for i, rs in by_action.items()}
    best = max(sorted(means), key=lambda i: means[i])
    chosen = by_action[best]

    def mean(values: list[float | None]) -> float | None:
        got = [float(v) for v in values if v is not None]
        return float(np.mean(got)) if got else None

    utilization = mean([r.utilization(limit) for r in chosen])
    steps, topk, draft = EXTENDED_ACTIONS[best]
    return LimitPick(
        power_limit_w=limit,
        action_index=best,
        action=(steps, topk, draft),
        mean_reward=means[best],
        speed_tok_s=float(np.mean([r.speed_tok_s for r in chosen])),
        avg_power_w=mean([r.avg_power_watts for r in chosen]),
        utilization=utilization,
        joules_per_token=mean([r.raw.get("joules_per_token") for r in chosen]),
        in_band=utilization is not None and config.band_low <= utilization <= config.band_high,
        runs=len(chosen),
    )


@dataclass(frozen=True)
class MixLimitRow:
    """One batch size of a mix at one power limit, running the mix's one config.

    Attributes:
        batch_size: the batch size of the mix; ``measured_batch_size`` the nearest the sweep holds.
        weight: its share of the mix (normalised).
        speed_tok_s: the config's mean decode speed there, tokens/s.
        utilization: its mean average power / the limit (``None``: no power in the rows).
        in_band: ``utilization`` is inside the reward's band.
        mean_reward: its mean reward there.
    """

    batch_size: int
    measured_batch_size: int
    weight: float
    speed_tok_s: float
    utilization: float | None
    in_band: bool
    mean_reward: float


@dataclass(frozen=True)
class MixAtLimit:
    """A mix's one config at one power limit: ``pick`` is a :class:`LimitPick` whose figures
    are the mix's (speed and utilisation weighted by the mix; ``in_band``: the weighted
    utilisation, the GPU's average draw over the mix, is in the band), so that a selector
    (:class:`BandWithinSpeedLoss`) chooses among limits as for one batch size; ``rows``: each
    batch size of the mix with that config there."""

    pick: LimitPick
    rows: tuple[MixLimitRow, ...]


def _at(limit: float, batch_size: int) -> Callable[[SweepRow], bool]:
    """A row filter: the rows at ``limit`` W and ``batch_size``."""
    return lambda r: r.power_limit_watts == limit and r.batch_size == batch_size


def mix_limit_picks(
    sweep: Sweep, mix: Mapping[int, float], config: RewardConfig | None = None
) -> tuple[MixAtLimit, ...]:
    """Per power limit of ``sweep``, the one config with the best expected reward over ``mix``
    (weights normalised) among those measured without failure at every batch size of the mix
    at that limit (each batch size read at the nearest the sweep holds; ties: the lowest index),
    with its figures per batch size.

    Raises:
        DataError: fewer than two limits, or a limit at which no config is measured at every
            batch size of the mix.
    """
    import numpy as np

    config = config or RewardConfig()
    limits = sweep_power_limits(sweep)
    if len(limits) < 2:
        raise DataError("the sweep holds one power limit; a limit is picked from sweeps over several", path=sweep.path)
    sizes = sweep.batch_sizes()
    total = float(sum(mix.values()))
    out = []
    for limit in limits:
        per_bs: list[tuple[int, int, float, dict[int, list[SweepRow]], Sweep]] = []
        for bs, weight in sorted(mix.items()):
            measured = nearest_batch_size(bs, sizes)
            part = sweep.subset(_at(limit, measured))
            allowed = part.allowed_mask(measured)
            by_action: dict[int, list[SweepRow]] = {}
            for row in part.training_rows():
                if allowed[row.action_index]:
                    by_action.setdefault(row.action_index, []).append(row)
            per_bs.append((bs, measured, float(weight) / total, by_action, part))
        common = sorted(set.intersection(*(set(b[3]) for b in per_bs)))
        if not common:
            raise DataError(
                f"no config is measured at every batch size of the mix at {limit:g} W (measure them, or a mix of "
                "batch sizes measured with a common config)",
                path=sweep.path,
            )

        def reward(rows: list[SweepRow], part: Sweep) -> float:
            return float(np.mean([part.reward_parts(r, config).reward for r in rows]))

        expected = {a: sum(w * reward(by[a], part) for _, _, w, by, part in per_bs) for a in common}
        best = max(common, key=lambda a: (expected[a], -a))
        rows = []
        for bs, measured, weight, by_action, part in per_bs:
            chosen = by_action[best]
            utils = [u for u in (r.utilization(limit) for r in chosen) if u is not None]
            util = float(np.mean(utils)) if utils else None
            rows.append(
                MixLimitRow(
                    bs, measured, weight, float(np.mean([r.speed_tok_s for r in chosen])), util,
                    util is not None and config.band_low <= util <= config.band_high, reward(chosen, part),
                )
            )  # fmt: skip
        utils_all = [r.utilization for r in rows]
        util_all = (
            None
            if any(u is None for u in utils_all)
            else sum(r.weight * float(u) for r, u in zip(rows, utils_all, strict=True) if u is not None)
        )
        jpts = [[r.raw.get("joules_per_token") for r in by[best]] for *_, by, _ in per_bs]
        jpt = [float(np.mean([v for v in vs if v is not None])) for vs in jpts if any(v is not None for v in vs)]
        steps, topk, draft = EXTENDED_ACTIONS[best]
        pick = LimitPick(
            power_limit_w=limit,
            action_index=best,
            action=(steps, topk, draft),
            mean_reward=expected[best],
            speed_tok_s=sum(r.weight * r.speed_tok_s for r in rows),
            avg_power_w=None if util_all is None else util_all * limit,
            utilization=util_all,
            joules_per_token=sum(w * j for w, j in zip((r.weight for r in rows), jpt, strict=True))
            if len(jpt) == len(rows)
            else None,
            in_band=util_all is not None and config.band_low <= util_all <= config.band_high,
            runs=sum(len(by[best]) for *_, by, _ in per_bs),
        )
        out.append(MixAtLimit(pick, tuple(rows)))
    return tuple(out)


def power_label_lines(unmeasured_rows: int, sources: list[str]) -> list[str]:
    """What the rows' power rests on, for the notes of an answer: a ``power UNMEASURED`` line
    (:func:`unmeasured_power_line`) and one line per published fit (``power_source``)."""
    lines = [unmeasured_power_line(unmeasured_rows)] if unmeasured_rows else []
    lines += [f"power from {source}: a fit to published figures, not a measurement of this GPU" for source in sources]
    return lines


def unmeasured_power_line(rows: int) -> str:
    """The note for picks made from rows whose power rests on no measurement (``power_measured:
    false``: a simulated datacenter profile, :mod:`specband.sim.power`)."""
    return (
        f"power UNMEASURED: {rows} row(s) come from a profile whose power model rests on no measurement of that "
        "GPU; the limit and the utilisation figures are guesses, not predictions"
    )


def fastest(picks: Sequence[LimitPick]) -> LimitPick:
    """The fastest pick (the lowest limit among equals)."""
    return max(sorted(picks, key=lambda p: p.power_limit_w), key=lambda p: p.speed_tok_s)


def speed_loss(picks: Sequence[LimitPick], chosen: LimitPick) -> float:
    """Speed ``chosen`` gives up against the fastest of ``picks``, fraction (>= 0)."""
    return max(0.0, 1.0 - chosen.speed_tok_s / fastest(picks).speed_tok_s)


def nvidia_smi_command(power_limit_w: float) -> str:
    """The command that sets a GPU's power limit (``nvidia-smi -pl W``, root)."""
    return f"sudo nvidia-smi -pl {power_limit_w:g}"


class OptimumSelector(ABC):
    """Chooses the limit among the picks at every limit of one batch size (Zeus's
    ``OptimumSelector``: a pure function of the measurements)."""

    @abstractmethod
    def select(self, picks: Sequence[LimitPick]) -> LimitPick:
        """The chosen pick (one of ``picks``, at least one)."""

    def shortfall(self, picks: Sequence[LimitPick], chosen: LimitPick, band: tuple[float, float]) -> str | None:
        """What the answer must say when ``chosen`` falls short of the rule's aim (``None``:
        it does not)."""
        return None


@dataclass(frozen=True)
class BandWithinSpeedLoss(OptimumSelector):
    """The lowest limit whose pick is within ``max_speed_loss`` of the fastest pick (at any
    limit) and in the band; when no limit's pick is in the band, the lowest limit within the
    speed loss (:meth:`shortfall` says why). Zeus's ``MaxSlowdownConstraint`` with the band
    added.

    Attributes:
        max_speed_loss: the speed that may be given up against the fastest pick, fraction in
            [0, 1) (``--max-speed-loss``; default
            :data:`~specband.core.limits.DEFAULT_MAX_SPEED_LOSS`).

    Raises:
        ConfigError: ``max_speed_loss`` outside [0, 1).
    """

    max_speed_loss: float = DEFAULT_MAX_SPEED_LOSS

    def __post_init__(self) -> None:
        bound = self.max_speed_loss
        if not (isinstance(bound, (int, float)) and math.isfinite(bound) and 0 <= bound < 1):
            raise ConfigError(f"--max-speed-loss must be a fraction in [0, 1), got {bound!r}")

    def _quick(self, picks: Sequence[LimitPick]) -> list[LimitPick]:
        floor = (1.0 - self.max_speed_loss) * fastest(picks).speed_tok_s
        return [p for p in sorted(picks, key=lambda p: p.power_limit_w) if p.speed_tok_s >= floor]

    def select(self, picks: Sequence[LimitPick]) -> LimitPick:
        """The lowest limit within the speed loss and in the band, else the lowest within it."""
        quick = self._quick(picks)
        return next((p for p in quick if p.in_band), quick[0])

    def shortfall(self, picks: Sequence[LimitPick], chosen: LimitPick, band: tuple[float, float]) -> str | None:
        """Why no limit within the speed loss lands in the band (``None`` when ``chosen`` is in it)."""
        if chosen.in_band:
            return None
        lowest = min(picks, key=lambda p: p.power_limit_w)
        util = chosen.utilization
        if util is not None and util < band[0] and chosen.power_limit_w == lowest.power_limit_w:
            why = (
                f"even the lowest limit swept, {chosen.power_limit_w:g} W, leaves the pick at {util:.1%} of "
                "it (the GPU draws less than the band of any limit swept; below it only a lower limit, if the GPU "
                "allows one, would reach the band)"
            )
        else:
            why = "the limits swept step over the band (sweep finer limits)"
        return (
            f"no limit's pick lands in the band {band[0]:.0%}-{band[1]:.0%} within {self.max_speed_loss:.1%} of the "
            f"fastest; the lowest limit within that speed loss is given: {why}"
        )
