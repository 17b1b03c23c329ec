"""What a probed server's config gives, and what the best config per batch size would give, on
the GPU's calibrated profile (simulated): the second half of ``specband probe``.

The acceptance is fitted to the probe file as ``--acceptance-from`` fits it
(:func:`specband.sim.model.build_model` with ``acceptance_from``), starting from the pair's
bundled acceptance; a plain server gives no measured
acceptance, so the bundled (or borrowed) one is used and named. For every batch size the
server was seen running, each config the engine runs is predicted by the performance model
(:class:`specband.sim.model.SpeculativeDecodingModel`, deterministic: no noise) at a grid of
power limits (:func:`specband.sim.power_capped.with_power_limit`) as one sweep row would run
(``max(16, bs)`` requests of 512 tokens from a cool GPU, :meth:`~specband.sim.model.SpeculativeDecodingModel.run_cost`):

* **current**: the server's own config at the current limit (NVML's when read, else the profile's);
* **best**: the best reward (:func:`specband.contract.reward.compute_reward`, the band reward)
  among the engine's configs at the current limit;
* **suggested**: at the limit :class:`~specband.sweeps.limit_table.BandWithinSpeedLoss` picks
  among the limits' best configs (the lowest within 2 % of the fastest that lands in the band).

Each speed carries the 95 % interval of :func:`specband.sim.speed_interval.speed_interval`
(the acceptance's interval on that config's accept length, widened by the profile's
step-time calibration error); energy per token the same interval inverted (it scales with
the time a token takes); what they rest on is noted
(:func:`~specband.sim.speed_interval.acceptance_notes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.contract.actions import EXTENDED_ACTIONS, as_action
from specband.contract.reward import BAND_HIGH, BAND_LOW, band_status, compute_reward
from specband.core.errors import ConfigError, SpecbandError
from specband.engines.base import Engine
from specband.engines.probing import ServerReading
from specband.sim.model import SpeculativeDecodingModel, build_model
from specband.sim.power_capped import model_power_limit_range, with_power_limit
from specband.sim.profile import builtin_profiles, load_profile
from specband.sim.speed_interval import acceptance_notes, speed_interval
from specband.sweeps.limit_table import BandWithinSpeedLoss, LimitPick

__all__ = ["LIMIT_STEPS", "BatchAnswer", "ProbeSimulation", "SimFigure", "profile_for_gpu", "simulate_probe"]

#: Power limits tried between the profile's lowest and its default (both included), besides
#: the current one: 12 steps of ~1/12 of the range (an H200's 200-700 W in ~42 W steps).
LIMIT_STEPS = 12


@dataclass(frozen=True)
class SimFigure:
    """One config at one batch size and power limit, simulated.

    Attributes:
        action: ``(steps, topk, num_draft_tokens)``.
        power_limit_w: the limit, W.
        speed_tok_s: decode speed per request, tokens/s, with ``speed_lo``/``speed_hi`` (95 %).
        total_tok_s: ``batch_size x speed_tok_s``, tokens/s.
        joules_per_token: energy per output token, J, with ``jpt_lo``/``jpt_hi`` (95 %).
        utilization: average power / limit (fraction).
        band: ``"in"``, ``"below"`` or ``"above"`` the 95-98 % band.
        reward: the band reward (0..1).
        accept_length: the accept length used (and its 95 % interval ``accept_lo``/``accept_hi``).
    """

    action: tuple[int, int, int]
    power_limit_w: float
    speed_tok_s: float
    speed_lo: float
    speed_hi: float
    total_tok_s: float
    joules_per_token: float
    jpt_lo: float
    jpt_hi: float
    utilization: float
    band: str
    reward: float
    accept_length: float
    accept_lo: float
    accept_hi: float

    def to_json(self) -> dict[str, Any]:
        """The figure as JSON (rounded; ``provenance: simulated``)."""
        return {
            "action": list(self.action),
            "power_limit_w": round(self.power_limit_w, 1),
            "speed_tok_s": [round(self.speed_tok_s, 2), round(self.speed_lo, 2), round(self.speed_hi, 2)],
            "total_tok_s": round(self.total_tok_s, 1),
            "joules_per_token": [round(self.joules_per_token, 5), round(self.jpt_lo, 5), round(self.jpt_hi, 5)],
            "utilization": round(self.utilization, 4),
            "band": self.band,
            "reward": round(self.reward, 4),
            "accept_length": [round(self.accept_length, 3), round(self.accept_lo, 3), round(self.accept_hi, 3)],
            "provenance": "simulated",
        }


@dataclass(frozen=True)
class BatchAnswer:
    """The three figures of one batch size (module docstring); ``current`` is ``None`` when
    the server's config is not one the model can run (a note says why)."""

    batch_size: int
    current: SimFigure | None
    best: SimFigure
    suggested: SimFigure


@dataclass(frozen=True)
class ProbeSimulation:
    """What ``specband probe`` prints as simulated.

    Attributes:
        profile: the profile's name; hardware: its GPU.
        acceptance: where the acceptance comes from (``"fitted to 1 config of probe.json"``,
            ``"profile NAME"``, ``"borrowed NAME"``).
        residuals: one line per fitted config (measured vs fitted accept length).
        current_limit_w: the current limit, W, and ``limit_source`` where it came from.
        answers: one :class:`BatchAnswer` per batch size.
        notes: lines to print beside them (calibration error, what was assumed).
    """

    profile: str
    hardware: str
    acceptance: str
    residuals: tuple[str, ...]
    current_limit_w: float
    limit_source: str
    answers: tuple[BatchAnswer, ...]
    notes: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """JSON of the simulation (every figure labelled simulated)."""
        return {
            "provenance": "simulated",
            "profile": self.profile,
            "hardware": self.hardware,
            "acceptance": self.acceptance,
            "current_limit_w": self.current_limit_w,
            "limit_source": self.limit_source,
            "batch_sizes": [
                {
                    "batch_size": a.batch_size,
                    "current": None if a.current is None else a.current.to_json(),
                    "best": a.best.to_json(),
                    "suggested": a.suggested.to_json(),
                }
                for a in self.answers
            ],
            "notes": list(self.notes),
        }


def profile_for_gpu(gpu_name: str | None) -> str | None:
    """The built-in profile whose GPU model (the first part of its ``hardware``: ``H200`` of
    ``H200_SXM_141GB``, ``RTX4060`` of ``RTX4060_Laptop``) is in the name NVML reports
    (``"NVIDIA H200"`` -> ``h200``; letters and digits compared, case ignored), or ``None``."""
    if not gpu_name:
        return None
    name = "".join(c for c in gpu_name.lower() if c.isalnum())
    for profile in builtin_profiles():
        model = load_profile(profile).hardware.split("_")[0].lower()
        if model and model in name:
            return profile
    return None


def _local_config(path: str | None) -> str | None:
    if path and (Path(path) / "config.json").is_file():
        return path
    return None


def _configs(
    reading: ServerReading, target: str | None, draft: str | None
) -> tuple[str | None, str | None, str | None]:
    """The pair to simulate and the note about it: ``--target-config``/``--draft-config`` when
    given (one alone only of a bundled pair, :func:`specband.sim.model.model_pair`), else the
    server's own folders when both are local, else the bundled pair."""
    if target is not None or draft is not None:
        return target, draft, None
    local_target, local_draft = _local_config(reading.target), _local_config(reading.draft)
    if local_target and local_draft:
        return local_target, local_draft, f"simulated pair: the server's own folders ({local_target}, {local_draft})"
    return (
        None,
        None,
        (
            "simulated pair: the bundled Llama-3.2-1B pair (the server's "
            + ("draft is not named" if reading.draft is None else "models are not local folders")
            + "; pass --target-config and --draft-config for its sizes)"
        ),
    )


def _figure(
    model: Any,
    inner: SpeculativeDecodingModel,
    bs: int,
    action: Any,
    baseline: float | None,
) -> tuple[SimFigure | None, float]:
    """One config's figure (``None`` when it does not fit in memory) and its speed."""
    p = inner.profile
    first = model.predict(bs, action, p.ambient_temp_c)
    if not first.fits_in_memory:
        return None, 0.0
    wall = model.run_cost(bs, action, first).wall_clock_s
    temp_end = inner.advance_temperature(p.ambient_temp_c, first.avg_power_w, wall)
    pred = model.predict(bs, action, 0.5 * (p.ambient_temp_c + temp_end))
    cost = model.run_cost(bs, action, pred)
    temp_after = inner.advance_temperature(p.ambient_temp_c, pred.avg_power_w, cost.wall_clock_s)
    limit = float(model.power_limit_w)
    util = pred.avg_power_w / limit
    interval = speed_interval(model, bs, action, prediction=pred)
    est, lo, hi = interval.accept_length
    speed = pred.speed_tok_s
    base = speed if baseline is None else baseline
    reward = compute_reward(
        speed_tok_s=speed,
        baseline_speed_tok_s=base,
        utilization=util,
        gpu_temp_c=temp_after,
        gpu_throttling=bool(pred.thermal_throttled or temp_after > p.throttle_temp_c),
    ).reward
    jpt = cost.joules_per_token
    figure = SimFigure(
        action=tuple(int(x) for x in action),  # type: ignore[arg-type]
        power_limit_w=limit,
        speed_tok_s=speed,
        speed_lo=interval.lo_tok_s,
        speed_hi=interval.hi_tok_s,
        total_tok_s=bs * speed,
        joules_per_token=jpt,
        jpt_lo=jpt * speed / interval.hi_tok_s,
        jpt_hi=jpt * speed / interval.lo_tok_s,
        utilization=util,
        band=str(band_status(util)["status"]),
        reward=reward,
        accept_length=est,
        accept_lo=lo,
        accept_hi=hi,
    )
    return figure, speed


def _at_limit(inner: SpeculativeDecodingModel, engine: Engine, bs: int, limit: float) -> list[SimFigure]:
    model = with_power_limit(inner, limit)
    baseline, base_speed = _figure(model, inner, bs, (0, 0, 0), None)
    figures = [] if baseline is None else [baseline]
    for action in engine.actions:
        if tuple(action) == (0, 0, 0):
            continue
        figure, _ = _figure(model, inner, bs, action, base_speed if baseline is not None else None)
        if figure is not None:
            figures.append(figure)
    return figures


def _best(figures: list[SimFigure]) -> SimFigure:
    return max(figures, key=lambda f: (f.reward, f.speed_tok_s))


def _pick(figure: SimFigure) -> LimitPick:
    index = EXTENDED_ACTIONS.index(figure.action) if figure.action in EXTENDED_ACTIONS else -1
    return LimitPick(
        power_limit_w=figure.power_limit_w,
        action_index=index,
        action=figure.action,
        mean_reward=figure.reward,
        speed_tok_s=figure.speed_tok_s,
        avg_power_w=figure.utilization * figure.power_limit_w,
        utilization=figure.utilization,
        joules_per_token=figure.joules_per_token,
        in_band=BAND_LOW <= figure.utilization <= BAND_HIGH,
        runs=1,
    )


def simulate_probe(
    reading: ServerReading,
    probe_file: Path,
    engine: Engine,
    profile: str,
    *,
    current_limit_w: float | None = None,
    target_config: str | None = None,
    draft_config: str | None = None,
) -> ProbeSimulation:
    """Simulate the probed server's configs on ``profile`` (see the module docstring).

    Args:
        reading: what the probe read; probe_file: the probe file written from it (its
            acceptance is fitted through ``--acceptance-from``'s reader).
        engine: the server's engine (the configs it can run).
        profile: a built-in profile or a profile file.
        current_limit_w: the GPU's limit as NVML read it (``None``: the profile's).
        target_config, draft_config: the pair's configs (both or neither).

    Raises:
        ConfigError: a bad profile or config, or one of the two configs alone.
    """
    target, draft, pair_note = _configs(reading, target_config, draft_config)
    measured = reading.acceptance is not None and reading.action != (0, 0, 0)
    inner = build_model(
        profile, target_config=target, draft_config=draft, acceptance_from=probe_file if measured else None
    )
    notes = [pair_note] if pair_note else []
    notes += list(inner.warnings)
    fit = inner.acceptance.fit
    acceptance = inner.acceptance.source
    limits = model_power_limit_range(inner)
    source = "the profile's default"
    current = limits.default_w
    if current_limit_w is not None and limits.min_w <= current_limit_w <= limits.max_w:
        current, source = float(current_limit_w), "NVML (measured)"
    elif current_limit_w is not None:
        notes.append(f"NVML's limit {current_limit_w:g} W is outside profile {inner.profile.name}'s "
                     f"{limits.min_w:g}-{limits.max_w:g} W: the profile's default is used")  # fmt: skip
    step = (limits.max_w - limits.min_w) / LIMIT_STEPS
    grid = sorted({round(limits.min_w + i * step, 1) for i in range(LIMIT_STEPS + 1)} | {current})
    sizes = reading.batch_sizes_seen or (1,)
    if not reading.batch_sizes_seen:
        notes.append("no batch size was seen: batch size 1 is simulated")
    answers = []
    for bs in sizes:
        at_current = _at_limit(inner, engine, bs, current)
        if not at_current:
            notes.append(f"batch size {bs}: no config fits in memory on {inner.profile.name}")
            continue
        mine = next((f for f in at_current if f.action == tuple(reading.action)), None)
        if mine is None:
            try:
                mine, _ = _figure(with_power_limit(inner, current), inner, bs, as_action(reading.action), None)
            except SpecbandError as exc:
                notes.append(f"the server's config {tuple(reading.action)} cannot be simulated: {exc}")
        picks = {current: _best(at_current)}
        for limit in grid:
            figures = at_current if limit == current else _at_limit(inner, engine, bs, limit)
            if figures:
                picks[limit] = _best(figures)
        chosen = BandWithinSpeedLoss().select([_pick(f) for f in picks.values()])
        answers.append(BatchAnswer(bs, mine, _best(at_current), picks[chosen.power_limit_w]))
    notes += [line for line in acceptance_notes(inner) if not line.startswith("fit residual")]
    if not inner.profile.power_measured:
        notes.append(f"power of profile {inner.profile.name}: "
                     + (inner.profile.power_source or "UNMEASURED, the utilisation figures are guesses"))  # fmt: skip
    if not math.isfinite(current):
        raise ConfigError(f"profile {profile}: no power limit")
    return ProbeSimulation(
        profile=inner.profile.name,
        hardware=inner.profile.hardware,
        acceptance=acceptance,
        residuals=tuple(fit.residual_lines()) if fit is not None else (),
        current_limit_w=current,
        limit_source=source,
        answers=tuple(answers),
        notes=tuple(notes),
    )
