"""The pair "power limit + speculative flags" from a sweep over several power limits: the
pick at each limit (the ``lookup_table`` rule on that limit's rows) and the lowest limit whose
pick stays within a speed loss of the fastest and lands in the band.

Used by ``specband recommend`` (:mod:`specband.deploy.recommend` re-exports these names), by
``specband train`` (the manifest's ``power_limits``, :mod:`specband.artifacts.fit`) and by the
evaluation report's power-limit figure. NumPy, the dataset and the reward are imported inside
the functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specband.core.limits import DEFAULT_MAX_SPEED_LOSS

__all__ = [
    "DEFAULT_MAX_SPEED_LOSS",
    "LimitPick",
    "PowerLimitRecommendation",
    "choose_power_limit",
    "power_label_lines",
    "power_limit_table",
    "recommend_power_limit",
    "recommend_power_limit_from_table",
    "sweep_power_limits",
    "unmeasured_power_line",
]


@dataclass(frozen=True)
class LimitPick:
    """The pick at one power limit and what the data says it does there.

    Attributes:
        power_limit_w: the limit, W.
        action_index, action: the pick (the ``lookup_table`` rule: the best mean reward of
            the actions measured at this batch size and limit).
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


@dataclass(frozen=True)
class PowerLimitRecommendation:
    """``recommend``'s answer when the data holds several power limits: "set the limit to W
    and use these flags".

    Attributes:
        batch_size: the batch size asked for; ``measured_batch_size`` the one the data has.
        chosen: the pick at the chosen limit: the lowest limit whose pick is within
            ``max_speed_loss`` of the fastest pick (at any limit) and in the band; when no
            limit's pick is in the band, the lowest limit within the speed loss
            (``in_band`` False says so).
        default: the pick at the highest limit in the data (the GPU's default, as swept).
        fastest: the fastest pick over all limits.
        max_speed_loss: the speed loss accepted, fraction.
        picks: the pick at every limit, by increasing limit.
        band: ``(band_low, band_high)`` of the reward.
        provenance: where the rows came from (``measured``, ``emulated``, ``simulated``, joined
            with ``+`` when mixed).
        notes: one-line notes.
        origin: what the data rests on (:func:`specband.deploy.recommend.pick_origin`'s fields), or
            ``None`` when not known.
        transfer: the transfer check's JSON (:meth:`specband.deploy.transfer.TransferCheck.to_json`),
            or ``None`` when not checked.
    """

    batch_size: int
    measured_batch_size: int
    chosen: LimitPick
    default: LimitPick
    fastest: LimitPick
    max_speed_loss: float
    picks: tuple[LimitPick, ...]
    band: tuple[float, float]
    provenance: str
    notes: tuple[str, ...] = ()
    origin: dict[str, Any] | None = None
    transfer: dict[str, Any] | None = None

    @property
    def speed_loss(self) -> float:
        """Speed lost against the fastest pick, fraction (>= 0)."""
        return max(0.0, 1.0 - self.chosen.speed_tok_s / self.fastest.speed_tok_s)

    @property
    def nvidia_smi_command(self) -> str:
        """The command that sets the chosen limit (``nvidia-smi -pl W``, root)."""
        return f"sudo nvidia-smi -pl {self.chosen.power_limit_w:g}"


def sweep_power_limits(sweep: Any) -> tuple[float, ...]:
    """The distinct ``power_limit_watts`` of a sweep's successful rows, increasing."""
    return tuple(sorted({float(r.power_limit_watts) for r in sweep.rows if r.trainable and r.power_limit_watts}))


def recommend_power_limit(
    sweep: Any,
    batch_size: int,
    *,
    max_speed_loss: float = DEFAULT_MAX_SPEED_LOSS,
    config: Any = None,
) -> PowerLimitRecommendation:
    """Pick the pair (power limit, action) for a batch size from a sweep over several limits.

    At each limit the rows of that limit alone are scored (their own baseline, their own
    limit) and the ``lookup_table`` rule picks the action; the limit is then the lowest whose
    pick stays within ``max_speed_loss`` of the fastest pick and lands in the band.

    Args:
        sweep: a :class:`~specband.sweeps.dataset.Sweep` whose rows hold two or more
            ``power_limit_watts``.
        batch_size: concurrent requests; an unmeasured one uses the nearest measured one.
        max_speed_loss: fraction in [0, 1) of the fastest pick's speed that may be given up.
        config: :class:`~specband.contract.reward.RewardConfig` (default constants when ``None``).

    Returns:
        the :class:`PowerLimitRecommendation`.

    Raises:
        ConfigError: ``max_speed_loss`` outside [0, 1); DataError: fewer than two limits, or
            no successful row (or baseline) at the batch size at some limit.
    """
    import math

    import numpy as np

    from specband.contract.actions import EXTENDED_ACTIONS
    from specband.contract.reward import RewardConfig
    from specband.core.batchlist import nearest_batch_size
    from specband.core.errors import ConfigError, DataError

    config = config or RewardConfig()
    if not (isinstance(max_speed_loss, (int, float)) and math.isfinite(max_speed_loss) and 0 <= max_speed_loss < 1):
        raise ConfigError(f"--max-speed-loss must be a fraction in [0, 1), got {max_speed_loss!r}")
    limits = sweep_power_limits(sweep)
    if len(limits) < 2:
        raise DataError("the sweep holds one power limit; a limit is picked from sweeps over several", path=sweep.path)
    measured = nearest_batch_size(batch_size, sweep.batch_sizes())
    notes: list[str] = []
    if measured != batch_size:
        notes.append(
            f"batch size {batch_size} was not measured; picking for the nearest measured batch size {measured}"
        )
    picks: list[LimitPick] = []
    for limit in limits:
        part = sweep.subset(lambda r, w=limit: r.power_limit_watts == w and r.batch_size == measured)
        rows = part.training_rows()
        if not rows:
            raise DataError(f"no successful row at batch size {measured} and {limit:g} W", path=sweep.path)
        allowed = part.allowed_mask(measured)
        by_action: dict[int, list[Any]] = {}
        for row in rows:
            if allowed[row.action_index]:
                by_action.setdefault(row.action_index, []).append(row)
        means = {i: float(np.mean([part.reward_parts(r, config).reward for r in rs])) for i, rs in by_action.items()}
        best = max(sorted(means), key=lambda i: means[i])
        chosen = by_action[best]

        def mean(values: list[float | None]) -> float | None:
            got = [float(v) for v in values if v is not None]
            return float(np.mean(got)) if got else None

        power = mean([r.avg_power_watts for r in chosen])
        utilization = mean([r.utilization(limit) for r in chosen])
        joules = mean([r.raw.get("joules_per_token") for r in chosen])
        picks.append(
            LimitPick(
                power_limit_w=limit,
                action_index=best,
                action=tuple(EXTENDED_ACTIONS[best]),  # type: ignore[arg-type]
                mean_reward=means[best],
                speed_tok_s=float(np.mean([r.speed_tok_s for r in chosen])),
                avg_power_w=power,
                utilization=utilization,
                joules_per_token=joules,
                in_band=utilization is not None and config.band_low <= utilization <= config.band_high,
                runs=len(chosen),
            )
        )
    provenance = "+".join(sorted({r.provenance for r in sweep.rows if r.trainable}))
    notes += power_label_lines(_power_unmeasured_rows(sweep), _power_sources(sweep))
    return choose_power_limit(
        picks,
        batch_size=batch_size,
        measured_batch_size=measured,
        max_speed_loss=max_speed_loss,
        band=(config.band_low, config.band_high),
        provenance=provenance,
        notes=notes,
    )


def _power_unmeasured_rows(sweep: Any) -> int:
    return sum(1 for r in sweep.rows if r.trainable and r.raw.get("power_measured") is False)


def _power_sources(sweep: Any) -> list[str]:
    return sorted({str(r.raw["power_source"]) for r in sweep.rows if r.trainable and r.raw.get("power_source")})


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


def choose_power_limit(
    picks: list[LimitPick],
    *,
    batch_size: int,
    measured_batch_size: int,
    max_speed_loss: float,
    band: tuple[float, float],
    provenance: str,
    notes: list[str] | None = None,
) -> PowerLimitRecommendation:
    """The rule of :func:`recommend_power_limit` over the picks at each limit (by increasing
    limit): the lowest limit whose pick is within ``max_speed_loss`` of the fastest and in the
    band; else the lowest within the speed loss, with a note."""
    notes = list(notes or [])
    picks = sorted(picks, key=lambda p: p.power_limit_w)
    fastest = max(picks, key=lambda p: p.speed_tok_s)
    floor = (1.0 - max_speed_loss) * fastest.speed_tok_s
    quick = [p for p in picks if p.speed_tok_s >= floor]
    in_band = [p for p in quick if p.in_band]
    if in_band:
        chosen_pick = in_band[0]
    else:
        chosen_pick = quick[0]
        util = chosen_pick.utilization
        if util is not None and util < band[0] and chosen_pick is picks[0]:
            why = (
                f"even the lowest limit swept, {chosen_pick.power_limit_w:g} W, leaves the pick at {util:.1%} of "
                "it (the GPU draws less than the band of any limit swept; below it only a lower limit, if the GPU "
                "allows one, would reach the band)"
            )
        else:
            why = "the limits swept step over the band (sweep finer limits)"
        notes.append(
            f"no limit's pick lands in the band {band[0]:.0%}-{band[1]:.0%} within {max_speed_loss:.1%} of the "
            f"fastest; the lowest limit within that speed loss is given: {why}"
        )
    return PowerLimitRecommendation(
        batch_size=batch_size,
        measured_batch_size=measured_batch_size,
        chosen=chosen_pick,
        default=picks[-1],
        fastest=fastest,
        max_speed_loss=float(max_speed_loss),
        picks=tuple(picks),
        band=band,
        provenance=provenance,
        notes=tuple(notes),
    )


def power_limit_table(sweep: Any, config: Any = None) -> dict[str, Any]:
    """What a model folder trained on several power limits records in its manifest
    (``power_limits``): the limits, the band, the rows' provenance and, per batch size, the
    pick at every limit (:class:`LimitPick` fields), so that ``recommend --models DIR``
    answers with a limit as ``recommend --data SWEEP`` does.

    Raises:
        DataError: as :func:`recommend_power_limit`.
    """
    import dataclasses

    answers = {bs: recommend_power_limit(sweep, bs, config=config) for bs in sweep.batch_sizes()}
    first = next(iter(answers.values()))
    return {
        "limits_w": [p.power_limit_w for p in first.picks],
        "band": list(first.band),
        "provenance": first.provenance,
        "power_unmeasured_rows": _power_unmeasured_rows(sweep),
        "power_sources": _power_sources(sweep),
        "picks": {
            str(bs): [{**dataclasses.asdict(p), "action": list(p.action)} for p in a.picks] for bs, a in answers.items()
        },
    }


def recommend_power_limit_from_table(
    table: dict[str, Any], batch_size: int, *, max_speed_loss: float = DEFAULT_MAX_SPEED_LOSS
) -> PowerLimitRecommendation:
    """:func:`recommend_power_limit` from a manifest's ``power_limits`` (see
    :func:`power_limit_table`; validated when the manifest was read)."""
    import math

    from specband.core.batchlist import nearest_batch_size
    from specband.core.errors import ConfigError

    if not (isinstance(max_speed_loss, (int, float)) and math.isfinite(max_speed_loss) and 0 <= max_speed_loss < 1):
        raise ConfigError(f"--max-speed-loss must be a fraction in [0, 1), got {max_speed_loss!r}")
    measured = nearest_batch_size(batch_size, [int(k) for k in table["picks"]])
    notes = []
    notes += power_label_lines(int(table.get("power_unmeasured_rows", 0)), list(table.get("power_sources", [])))
    if measured != batch_size:
        notes.append(
            f"batch size {batch_size} was not measured; picking for the nearest measured batch size {measured}"
        )
    picks = [LimitPick(**{**p, "action": tuple(p["action"])}) for p in table["picks"][str(measured)]]
    return choose_power_limit(
        picks,
        batch_size=batch_size,
        measured_batch_size=measured,
        max_speed_loss=max_speed_loss,
        band=(float(table["band"][0]), float(table["band"][1])),
        provenance=str(table["provenance"]),
        notes=notes,
    )
