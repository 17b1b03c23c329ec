"""The answer explained: for a pick at a measured batch size, what its rows showed
(expected tok/s, speed-up over no speculation, energy utilisation and the band status,
joules per token, rows and repeats), the runner-up and what it would give, and whether any
config reaches the band at this power limit. Built from the manifest's per-action
:class:`~specband.sweeps.origin.ActionStats`; the CLI prints :func:`explanation_lines`.

Only the standard library is imported (``recommend`` stays cold-fast).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from specband.contract.actions import EXTENDED_ACTIONS  # the contract's 19 first: right for either set
from specband.contract.reward import BAND_HIGH, BAND_LOW, band_status

if TYPE_CHECKING:
    from specband.artifacts.folder import Manifest
    from specband.sweeps.origin import ActionStats

__all__ = ["Answer", "answer_lines", "explain_pick", "explanation_lines", "origin_line"]


def band_note(utils: Mapping[int, float], limit_w: float | None) -> str:
    """What to say when no config's mean utilisation is inside the band.

    Args:
        utils: action index -> mean energy utilisation (average power / power limit), none of
            them inside [BAND_LOW, BAND_HIGH]; at least one.
        limit_w: the data's power limit in W (``None``: unknown, no limit is suggested).

    Returns:
        When every config is below the band: the highest and the limit (W) that would put it
        mid-band; otherwise the lowest config above the band and the limit that would bring it
        down to mid-band, saying so when other configs sit below the band.
    """
    mid = (BAND_LOW + BAND_HIGH) / 2
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
        target_w = utils[chosen] * limit_w / mid
        what += f"; a power limit near {target_w:.0f} W (from {limit_w:g} W) would put it in the band"
    return f"no config reaches the {BAND_LOW:.2f}-{BAND_HIGH:.2f} band at this power limit: {what}"


def _figures(stats: ActionStats, baseline: ActionStats | None) -> dict[str, Any]:
    speedup = None if baseline is None or not baseline.speed_tok_s else stats.speed_tok_s / baseline.speed_tok_s
    return {
        "speed_tok_s": round(stats.speed_tok_s, 3),
        "speedup": None if speedup is None else round(speedup, 3),
        "energy_utilization": None if stats.energy_utilization is None else round(stats.energy_utilization, 4),
        "band": band_status(stats.energy_utilization),
        "joules_per_token": None if stats.joules_per_token is None else round(stats.joules_per_token, 5),
        "rows": stats.rows,
        "repeats": stats.repeats,
    }


def explain_pick(
    manifest: Manifest, measured_batch_size: int | None, action_index: int, provenance: str | None = None
) -> dict[str, Any] | None:
    """The explanation of a pick (what ``recommend --format json`` prints as ``explanation``),
    or ``None`` when the manifest has no per-action figures (a foreign folder, or one written
    before they were recorded).

    Returns:
        ``pick`` (:func:`_figures` of the pick: ``speed_tok_s`` tok/s, ``speedup`` over the
        baseline (0,0,0) at this batch size, ``energy_utilization``, ``band``,
        ``joules_per_token`` J/token, ``rows``, ``repeats``; ``None`` when the pick has no
        rows), ``runner_up`` (the best other allowed config by mean reward, its ``action``
        and figures, or ``None``), ``band_reachable`` (some allowed config's mean
        utilisation is inside the band; ``None`` without power), ``band_note`` (what would
        reach the band when none does) and ``figures_are`` (the data's provenance: a
        simulation is never called a measurement).
    """
    if measured_batch_size is None or measured_batch_size not in manifest.stats:
        return None
    stats: Mapping[int, ActionStats] = manifest.stats[measured_batch_size]
    baseline = stats.get(0)
    allowed = [a for a in manifest.allowed.get(measured_batch_size, ()) if a in stats]
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
        note = band_note(utils, limit)
    return {
        "batch_size": measured_batch_size,
        "pick": _figures(stats[action_index], baseline) if action_index in stats else None,
        "runner_up": None
        if runner is None
        else {
            "action": list(EXTENDED_ACTIONS[runner]),
            "mean_reward": round(float(means[runner]), 4),
            **_figures(stats[runner], baseline),
        },
        "band_reachable": reachable,
        "band_note": note,
        "figures_are": provenance or (manifest.origin.provenance if manifest.origin is not None else "measured"),
    }


def _band_text(band: Mapping[str, Any]) -> str:
    if band["status"] == "unknown":
        return "band unknown (no power)"
    if band["status"] == "in":
        return f"in the {band['low']:.2f}-{band['high']:.2f} band"
    return f"{band['status']} the {band['low']:.2f}-{band['high']:.2f} band by {band['by']:.3f}"


def _figure_text(fig: Mapping[str, Any]) -> str:
    parts = [f"{fig['speed_tok_s']:.1f} tok/s"]
    if fig["speedup"] is not None:
        parts.append(f"{fig['speedup']:.2f}x the baseline")
    if fig["energy_utilization"] is not None:
        parts.append(f"utilisation {fig['energy_utilization']:.3f} ({_band_text(fig['band'])})")
    else:
        parts.append(_band_text(fig["band"]))
    if fig["joules_per_token"] is not None:
        parts.append(f"{fig['joules_per_token']:.3f} J/token")
    parts.append(f"{fig['rows']} row(s), {fig['repeats']} repeat(s)")
    return ", ".join(parts)


def _triple(action: Any) -> str:
    """``(steps,topk,draft)`` as :class:`specband.contract.actions.Action` prints it."""
    return "(" + ",".join(str(int(v)) for v in action) + ")"


def explanation_lines(explanation: Mapping[str, Any] | None, action: list[int] | tuple[int, ...]) -> list[str]:
    """The explanation as lines for stderr (empty for ``None``)."""
    if explanation is None:
        return []
    kind = explanation["figures_are"]
    bs = explanation["batch_size"]
    lines = []
    if explanation["pick"] is not None:
        lines.append(f"expected ({kind}, bs {bs}): {_triple(action)}: {_figure_text(explanation['pick'])}")
    runner = explanation["runner_up"]
    if runner is not None:
        lines.append(
            f"runner-up: {_triple(runner['action'])} (mean reward {runner['mean_reward']:.4f}): {_figure_text(runner)}"
        )
    if explanation["band_note"]:
        lines.append(explanation["band_note"])
    return lines


def origin_line(origin: Mapping[str, Any] | None) -> str | None:
    """One line saying what a pick rests on (a pick's ``origin``), or ``None`` without one."""
    if not origin:
        return None
    limit = "?" if origin.get("power_limit_w") is None else f"{origin['power_limit_w']:g} W"
    power = "power measured" if origin.get("power_measured") else f"power NOT measured ({origin.get('power_source')})"
    rows = "" if origin.get("rows") is None else f"; {origin['rows']} rows"
    repeats = "" if origin.get("repeats") is None else f", {origin['repeats']} repeat(s)"
    return (
        f"pick rests on {origin.get('provenance')} data: {origin.get('hardware') or '? GPU'} at {limit}, "
        f"target {origin.get('target_model') or '?'}, draft {origin.get('draft_model') or '?'}, "
        f"sglang {origin.get('sglang_version') or 'not recorded'}, "
        f"workload {origin.get('workload') or 'not recorded'}, "
        f"{power}{rows}{repeats}" + (" at this batch size" if rows else "")
    )


class Answer(Protocol):
    """What :func:`answer_lines` reads of a pick (:class:`specband.deploy.answers.Pick` has it)."""

    @property
    def action(self) -> Sequence[int]:
        """The picked triple."""

    @property
    def origin(self) -> Mapping[str, Any] | None:
        """:func:`specband.deploy.recommend.pick_origin`'s fields."""

    @property
    def explanation(self) -> Mapping[str, Any] | None:
        """:func:`explain_pick`'s object."""


def answer_lines(pick: Answer) -> list[str]:
    """What ``recommend`` and ``launch`` print on stderr beside the flags: the origin line and
    the explanation (:func:`explanation_lines`)."""
    line = origin_line(pick.origin)
    return ([] if line is None else [line]) + explanation_lines(pick.explanation, tuple(pick.action))
