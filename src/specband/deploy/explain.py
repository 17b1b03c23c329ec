"""The answer explained: for a pick at a measured batch size, what its rows showed
(expected tok/s, speed-up over no speculation, energy utilisation and the band status,
joules per token, rows and repeats), the runner-up and what it would give, and whether any
config reaches the band at this power limit (a typed :class:`~specband.deploy.answers.Explanation`).
Built from the manifest's per-action :class:`~specband.sweeps.origin.ActionStats`; the CLI
prints :func:`answer_lines`.

Only the standard library is imported (``recommend`` stays cold-fast).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specband.contract.actions import EXTENDED_ACTIONS, Action  # the contract's 19 first: right for either set
from specband.contract.reward import BAND_HIGH, BAND_LOW, RewardConfig, band_score, throughput_score
from specband.deploy.answers import (
    BandPosition,
    BandTrade,
    Explanation,
    Figures,
    Pick,
    PickOrigin,
    RewardTerms,
    RowCounts,
    RunnerUp,
)
from specband.sweeps.origin import DataOrigin

if TYPE_CHECKING:
    from specband.artifacts.folder import Manifest
    from specband.sweeps.origin import ActionStats

__all__ = [
    "LimitRange",
    "answer_lines",
    "band_note",
    "band_trade",
    "band_trade_line",
    "data_notes",
    "explain_pick",
    "explanation_lines",
    "origin_line",
    "pick_origin",
    "profile_limit_range",
    "unmeasured_notes",
]


def pick_origin(manifest: Manifest, measured_batch_size: int | None) -> PickOrigin:
    """What a pick rests on, as ``recommend --format json`` prints it under ``origin``: the
    data's :class:`~specband.sweeps.origin.DataOrigin` (``provenance`` ``"unknown"`` when the
    folder does not say) and the rows behind the measured batch size (:class:`RowCounts`:
    successful rows; distinct ``(trial, repeat)`` runs, the most of any action there;
    ``None`` without a batch size or when the folder does not count them)."""
    bs = measured_batch_size
    counts = manifest.row_counts.get(bs, {}) if bs is not None else {}
    stats = manifest.stats.get(bs, {}) if bs is not None else {}
    return PickOrigin(
        manifest.origin or DataOrigin(provenance="unknown"),
        RowCounts(
            rows=sum(counts.values()) if counts else None,
            repeats=max((s.repeats for s in stats.values()), default=None),
        ),
    )


def data_notes(manifest: Manifest, source: str, telemetry: tuple[float, float, float] | None) -> list[str]:
    """What a pick from ``manifest``'s data must say beside its origin line
    (:func:`origin_line`), as ``recommend`` and ``recommend --batch-mix`` say it: rows that are
    a simulation (``source`` names the folder), and GPU readings (``telemetry``) read against
    a policy trained on the contract state."""
    notes = []
    if manifest.origin is not None and manifest.origin.simulated:
        notes.append(
            f"{source}: trained on SIMULATED rows ({manifest.origin.profile or 'simulator'}); every figure is a "
            "simulation, not a measurement (a sweep on the GPU settles it)"
        )
    if telemetry is not None and manifest.features == "contract":
        notes.append(
            "these policies use the contract state, whose memory and utilisation were read after each "
            "run; the readings given here are not what they were trained on (train with --features pre "
            "for decisions from the idle GPU)"
        )
    return notes


def unmeasured_notes(manifest: Manifest, batch_sizes: Iterable[int]) -> list[str]:
    """One note per batch size of ``batch_sizes`` that was not measured, naming the nearest
    measured one the pick is made for."""
    notes = []
    for batch_size in batch_sizes:
        measured = manifest.measured_batch_size(batch_size)
        if measured is not None and measured != batch_size:
            notes.append(unmeasured_note(batch_size, measured))
    return notes


def unmeasured_note(batch_size: int, measured: int) -> str:
    """The note of an answer for ``batch_size`` made from the nearest measured one."""
    return f"batch size {batch_size} was not measured; picking for the nearest measured batch size {measured}"


@dataclass(frozen=True)
class LimitRange:
    """The power limits a GPU accepts and where that range was read.

    Attributes:
        min_w, max_w: the lowest and highest limit, W.
        source: where the range comes from (NVML's ``nvmlDeviceGetPowerManagementLimitConstraints``
            on this machine, or a simulator profile's range), said beside any limit suggested.
    """

    min_w: float
    max_w: float
    source: str


def profile_limit_range(name_or_hardware: str | None) -> LimitRange | None:
    """The range of the built-in simulator profile named ``name_or_hardware`` (a profile name,
    or a GPU name as rows record it, e.g. ``H100_SXM5_80GB``), or ``None`` when none matches.

    A profile holds no NVML constraint: its limit is the highest and
    :data:`specband.sim.power_capped.MIN_LIMIT_FRACTION` (2/7, an H100 SXM's NVML 200-700 W) of it
    the lowest (:func:`specband.sim.power_capped.model_power_limit_range`), said in ``source``.
    """
    if not name_or_hardware:
        return None
    # lazy: only when a limit is suggested (off recommend's cold path)
    from specband.sim.power_capped import model_power_limit_range
    from specband.sim.profile import builtin_profiles, load_profile

    wanted = str(name_or_hardware).strip().lower()
    for name in builtin_profiles():
        profile = load_profile(name)
        if wanted in (name.lower(), profile.hardware.lower()):
            limits = model_power_limit_range(profile)
            return LimitRange(
                limits.min_w,
                limits.max_w,
                f"the {name} profile's range, NVML not read: its limit down to 2/7 of it, an H100 SXM's NVML ratio",
            )
    return None


def _limit_for_band(action: int, util: float, limit_w: float, floor: LimitRange | None) -> str:
    """Where ``action``, drawing ``util`` of ``limit_w``, meets the band: the limit that puts it
    mid-band, or, when that is outside the GPU's range, what it draws at the nearest end."""
    mid = (BAND_LOW + BAND_HIGH) / 2
    target_w = util * limit_w / mid
    name = EXTENDED_ACTIONS[action]
    if floor is not None and not floor.min_w <= target_w <= floor.max_w:
        end, side = (floor.min_w, "below its lowest") if target_w < floor.min_w else (floor.max_w, "above its highest")
        at_end = util * limit_w / end
        where = (
            "in the band"
            if BAND_LOW <= at_end <= BAND_HIGH
            else f"{'below' if at_end < BAND_LOW else 'above'} the band by "
            f"{(BAND_LOW - at_end) if at_end < BAND_LOW else (at_end - BAND_HIGH):.3f}"
        )
        return (
            f"{name} would need about {target_w:.0f} W, {side} limit: at {round(end, 1):g} W it would draw "
            f"about {at_end:.3f} of it ({where}) if its power stays as in the data"
        )
    return f"a limit near {target_w:.0f} W (from {limit_w:g} W) would put {name} in the band"


def band_note(
    utils: Mapping[int, float], limit_w: float | None, pick: int | None = None, floor: LimitRange | None = None
) -> str:
    """What to say when no config's mean utilisation is inside the band, naming each config
    it speaks of.

    Args:
        utils: action index -> mean energy utilisation (average power / power limit), none of
            them inside [BAND_LOW, BAND_HIGH]; at least one.
        limit_w: the data's power limit in W (``None``: unknown, no limit is suggested).
        pick: the action picked (its own line follows the closest config's when they differ;
            ``None`` or without a utilisation: not said).
        floor: the GPU's range of limits (no suggestion goes below ``floor.min_w`` or above
            ``floor.max_w``; ``None``: not known, which the note says).

    Returns:
        When every config is below the band: the highest and the limit (W) that would put it
        mid-band; otherwise the lowest config above the band and the limit that would bring it
        down to mid-band, saying so when other configs sit below the band. A limit outside
        ``floor`` is never suggested: the note says what the config draws at the GPU's lowest
        (or highest) limit instead.
    """
    above = {a: u for a, u in utils.items() if u > BAND_HIGH}
    if not above:
        chosen = max(utils, key=lambda a: (utils[a], -a))
        what = f"the highest is {EXTENDED_ACTIONS[chosen]} at {utils[chosen]:.3f} of the limit"
    else:
        chosen = min(above, key=lambda a: (above[a], a))
        what = f"the lowest above it is {EXTENDED_ACTIONS[chosen]} at {above[chosen]:.3f} of the limit"
        if len(above) < len(utils):
            what = "configs sit on both sides of it; " + what
    if limit_w is not None:
        what += "; " + _limit_for_band(chosen, utils[chosen], limit_w, floor)
        if pick is not None and pick != chosen and pick in utils:
            what += f"; the pick {EXTENDED_ACTIONS[pick]} draws {utils[pick]:.3f} of the limit: " + _limit_for_band(
                pick, utils[pick], limit_w, floor
            )
        what += (
            " (the GPU's limits: unknown here, `nvidia-smi -q -d POWER` shows them)"
            if floor is None
            else f" (the GPU's limits: {round(floor.min_w, 1):g}-{round(floor.max_w, 1):g} W, {floor.source})"
        )
    at = "" if limit_w is None else f" ({limit_w:g} W)"
    return f"no config reaches the {BAND_LOW:.2f}-{BAND_HIGH:.2f} band at this power limit{at}: {what}"


def _figures(stats: ActionStats, baseline: ActionStats | None) -> Figures:
    speedup = None if baseline is None or not baseline.speed_tok_s else stats.speed_tok_s / baseline.speed_tok_s
    return Figures(
        speed_tok_s=round(stats.speed_tok_s, 3),
        speedup=None if speedup is None else round(speedup, 3),
        energy_utilization=None if stats.energy_utilization is None else round(stats.energy_utilization, 4),
        band=BandPosition.of(stats.energy_utilization),
        joules_per_token=None if stats.joules_per_token is None else round(stats.joules_per_token, 5),
        rows=stats.rows,
        repeats=stats.repeats,
    )


def _terms(action: int, stats: ActionStats, baseline: ActionStats, mean_reward: float) -> RewardTerms | None:
    util = stats.energy_utilization
    if util is None or not baseline.speed_tok_s:
        return None
    config = RewardConfig()
    return RewardTerms(
        EXTENDED_ACTIONS[action],
        round(float(mean_reward), 4),
        round(band_score(util, config), 4),
        round(throughput_score(stats.speed_tok_s, baseline.speed_tok_s, config), 4),
        round(util, 4),
        round(stats.speed_tok_s, 3),
    )


def band_trade(
    stats: Mapping[int, ActionStats], means: Mapping[int, float], allowed: Iterable[int], action_index: int
) -> BandTrade | None:
    """The contract's trade behind a pick outside the band (:class:`~specband.deploy.answers.BandTrade`).

    Args:
        stats: action index -> the rows' means at the batch size (the baseline 0 among them).
        means: action index -> mean reward there.
        allowed: the configs the policy could pick there.
        action_index: the pick.

    Returns:
        the pick's and the best in-band config's reward terms, or ``None`` when the pick is
        inside the band (or its utilisation unknown), no allowed speculative config is inside
        it (the baseline (0,0,0) scores 0 on speed, so it is never a trade), or there is no
        baseline to score speed against.
    """
    baseline = stats.get(0)
    pick = stats.get(action_index)
    if baseline is None or pick is None or pick.energy_utilization is None or action_index not in means:
        return None
    if BAND_LOW <= pick.energy_utilization <= BAND_HIGH:
        return None
    inside = [
        a
        for a in allowed
        if a in stats
        and a in means
        and a not in (action_index, 0)  # the baseline scores 0 on speed: never a trade
        and (u := stats[a].energy_utilization) is not None
        and BAND_LOW <= u <= BAND_HIGH
    ]
    if not inside:
        return None
    best = min(inside, key=lambda a: (-means[a], a))
    mine, theirs = (
        _terms(action_index, pick, baseline, means[action_index]),
        _terms(best, stats[best], baseline, means[best]),
    )
    return None if mine is None or theirs is None else BandTrade(mine, theirs)


def explain_pick(
    manifest: Manifest,
    measured_batch_size: int | None,
    action_index: int,
    provenance: str | None = None,
    floor: LimitRange | None = None,
    runnable: Collection[int] | None = None,
) -> Explanation | None:
    """The explanation of a pick (what ``recommend --format json`` prints as ``explanation``),
    or ``None`` when the manifest has no per-action figures (a foreign folder, or one written
    before they were recorded).

    Returns:
        an :class:`~specband.deploy.answers.Explanation`: ``pick`` (the pick's figures:
        ``speed_tok_s`` tok/s, ``speedup`` over the baseline (0,0,0) at this batch size,
        ``energy_utilization``, ``band``, ``joules_per_token`` J/token, ``rows``, ``repeats``;
        ``None`` when the pick has no rows), ``runner_up`` (the best other allowed config by
        mean reward, its ``action`` and figures, or ``None``), ``band_reachable`` (some allowed
        config's mean utilisation is inside the band; ``None`` without power), ``band_note``
        (what would reach the band when none does) and ``figures_are`` (the data's provenance
        or ``provenance``: a simulation is never called a measurement). ``floor`` is the
        GPU's range of limits the band note keeps to (``None``: the built-in profile of the
        data's GPU, when one matches, :func:`profile_limit_range`). ``runnable``: the configs
        the engine runs, the only ones compared (``None``: every allowed one).
    """
    if measured_batch_size is None or measured_batch_size not in manifest.stats:
        return None
    stats: Mapping[int, ActionStats] = manifest.stats[measured_batch_size]
    baseline = stats.get(0)
    allowed = [
        a for a in manifest.allowed.get(measured_batch_size, ()) if a in stats and (runnable is None or a in runnable)
    ]
    means = manifest.mean_rewards.get(measured_batch_size, {})
    others = sorted((a for a in allowed if a != action_index and a in means), key=lambda a: (-means[a], a))
    runner = others[0] if others else None
    utils: dict[int, float] = {}
    for a in allowed:
        value = stats[a].energy_utilization
        if value is not None:
            utils[a] = value
    reachable = None if not utils else any(BAND_LOW <= u <= BAND_HIGH for u in utils.values())
    note = None
    if reachable is False:
        limit = manifest.origin.power_limit_w if manifest.origin is not None else None
        if floor is None and limit is not None and manifest.origin is not None:
            floor = profile_limit_range(manifest.origin.hardware)
        note = band_note(utils, limit, action_index, floor)
    return Explanation(
        band_trade=band_trade(stats, means, allowed, action_index),
        batch_size=measured_batch_size,
        pick=_figures(stats[action_index], baseline) if action_index in stats else None,
        runner_up=None
        if runner is None
        else RunnerUp(EXTENDED_ACTIONS[runner], round(float(means[runner]), 4), _figures(stats[runner], baseline)),
        band_reachable=reachable,
        band_note=note,
        figures_are=provenance or (manifest.origin.provenance if manifest.origin is not None else "measured"),
    )


def _band_text(band: BandPosition) -> str:
    if band.status == "unknown":
        return "band unknown (no power)"
    if band.status == "in":
        return f"in the {band.low:.2f}-{band.high:.2f} band"
    return f"{band.status} the {band.low:.2f}-{band.high:.2f} band by {band.by:.3f}"


def _figure_text(fig: Figures) -> str:
    parts = [f"{fig.speed_tok_s:.1f} tok/s"]
    if fig.speedup is not None:
        parts.append(f"{fig.speedup:.2f}x the baseline")
    if fig.energy_utilization is not None:
        parts.append(f"utilisation {fig.energy_utilization:.3f} ({_band_text(fig.band)})")
    else:
        parts.append(_band_text(fig.band))
    if fig.joules_per_token is not None:
        parts.append(f"{fig.joules_per_token:.3f} J/token")
    parts.append(f"{fig.rows} row(s), {fig.repeats} repeat(s)")
    return ", ".join(parts)


def explanation_lines(explanation: Explanation | None, action: Action) -> list[str]:
    """The explanation of the pick ``action`` as lines for stderr (empty for ``None``)."""
    if explanation is None:
        return []
    kind, bs = explanation.figures_are, explanation.batch_size
    lines = []
    if explanation.pick is not None:
        lines.append(f"expected ({kind}, bs {bs}): {action}: {_figure_text(explanation.pick)}")
    runner = explanation.runner_up
    if runner is not None:
        lines.append(
            f"runner-up: {runner.action} (mean reward {runner.mean_reward:.4f}): {_figure_text(runner.figures)}"
        )
    if explanation.band_note:
        lines.append(explanation.band_note)
    if explanation.band_trade is not None:
        lines.append(band_trade_line(explanation.band_trade))
    return lines


def band_trade_line(trade: BandTrade) -> str:
    """One line: which in-band config lost to the pick outside the band, and by how much in
    reward terms (the band term the pick gave up against the speed term it gained)."""
    p, b = trade.pick, trade.in_band
    side = "below" if p.energy_utilization < BAND_LOW else "above"
    off = BAND_LOW - p.energy_utilization if side == "below" else p.energy_utilization - BAND_HIGH
    lost, gained = b.band_term - p.band_term, p.speed_term - b.speed_term
    verdict = (
        f"the pick's speed term gains {gained:+.4f}, more than the {lost:.4f} its band term gives up"
        if p.mean_reward >= b.mean_reward
        else f"in the data the in-band config scores higher ({b.mean_reward:.4f} against {p.mean_reward:.4f}); "
        "this policy's estimate prefers the pick"
    )
    inside = (
        f"{b.action} is in the {BAND_LOW:.2f}-{BAND_HIGH:.2f} band "
        f"(utilisation {b.energy_utilization:.3f}, {b.speed_tok_s:.1f} tok/s)"
    )
    pace = "faster" if p.speed_tok_s >= b.speed_tok_s else "slower"
    outside = f"the pick {p.action} is {side} it by {off:.3f} ({p.energy_utilization:.3f})"
    outside += f" and {pace} ({p.speed_tok_s:.1f} tok/s)"
    terms = " against ".join(
        f"{t.action} band {t.band_term:.4f} x speed {t.speed_term:.4f} (mean reward {t.mean_reward:.4f})"
        for t in (p, b)
    )
    return f"band trade: {inside} but {outside}; reward = band^0.5 x speed^0.5: {terms}: {verdict}"


def origin_line(origin: PickOrigin | None) -> str | None:
    """One line saying what an answer rests on (its ``origin``), or ``None`` without one."""
    if origin is None:
        return None
    data = origin.data
    power = "power measured" if data.power_measured else f"power NOT measured ({data.power_source})"
    rows = "" if origin.rows is None else f"; {origin.rows} rows"
    repeats = "" if origin.repeats is None else f", {origin.repeats} repeat(s)"
    return (
        f"pick rests on {data.provenance} data: {data.hardware or '? GPU'} {data.limit_phrase}, "
        f"target {data.target_model or '?'}, draft {data.draft_model or '?'}, "
        f"{data.engine_text()}, "
        f"workload {data.workload or 'not recorded'}, "
        f"{power}{rows}{repeats}" + (" at this batch size" if rows else "")
    )


def answer_lines(pick: Pick) -> list[str]:
    """What ``recommend`` and ``launch`` print on stderr beside a pick's flags: the origin line
    and the explanation (:func:`explanation_lines`)."""
    line = origin_line(pick.origin)
    return ([] if line is None else [line]) + explanation_lines(pick.explanation, pick.action)
