"""The performance model as a source of the joint pick (:class:`ModelSource`): a first guess
(``recommend --gpu``, ``launch --acceptance-from``) and ``probe``'s simulation ask the model
directly for each config's expected speed (with its 95 % interval,
:func:`specband.sim.speed_interval.speed_interval`), power, utilisation of a limit and J/token,
and score them with the contract's reward (:func:`specband.contract.reward.compute_reward`);
nothing is simulated with noise, nothing is trained.

Each config runs as one sweep row would (``max(16, bs)`` requests of 512 tokens, from the
profile's ambient temperature; :meth:`~specband.sim.model.SpeculativeDecodingModel.run_cost`),
under a limit through :func:`specband.sim.power_capped.with_power_limit`. The power the
utilisation is of is the **server's** where the profile has a serving fit
(:func:`specband.sim.power.serving_power_w`: prefill mixed in, what a server under continuous
batching draws), else the decode window's (labelled so). J/token is that power over the row's
wall clock per output token.

The limits tried at a batch size are the GPU's default and, per config, the limit that puts
its power mid-band (``power / 0.965``, rounded to a watt, kept inside the GPU's range): a
limit above what a config draws does not slow it, so each config's own mid-band limit is the
lowest at which it runs at full speed inside the band. :func:`specband.deploy.jointpick.joint_pick`
then picks among them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specband.contract.actions import Action, as_action
from specband.contract.reward import BAND_HIGH, BAND_LOW, compute_reward
from specband.core.errors import ConfigError
from specband.deploy.explain import LimitRange
from specband.deploy.jointpick import Candidate, Figure, ServingWorkload, range_shortfall
from specband.sim.model import SpeculativeDecodingModel
from specband.sim.power import serving_power_w
from specband.sim.power_capped import model_power_limit_range, with_power_limit
from specband.sim.serving import DEFAULT_OUTPUT_TOKENS, DEFAULT_PROMPT_TOKENS, serving_calibration
from specband.sim.serving import ServingWorkload as SimWorkload
from specband.sim.speed_interval import speed_interval
from specband.sweeps.limit_table import BandWithinSpeedLoss

__all__ = ["MID_BAND", "ModelSource", "profile_range"]

#: The middle of the band, fraction of the limit: the utilisation a picked limit aims at.
MID_BAND = (BAND_LOW + BAND_HIGH) / 2


def profile_range(model: Any) -> LimitRange:
    """The limits a simulated GPU accepts: its profile's limit down to
    :data:`~specband.sim.power_capped.MIN_LIMIT_FRACTION` (2/7) of it (NVML not read), said in ``source``."""
    rng = model_power_limit_range(model)
    return LimitRange(
        rng.min_w,
        rng.max_w,
        f"the {model.profile.name} profile's range, NVML not read: its limit down to 2/7 of it, an H100 SXM's "
        "NVML ratio",
    )


@dataclass(frozen=True)
class _Run:
    """One config at one limit as the model runs it (before scoring)."""

    speed: float
    lo: float
    hi: float
    power_w: float
    joules_per_token: float
    temp_after_c: float
    throttled: bool
    capped: bool


class ModelSource:
    """The performance model's figures for :func:`specband.deploy.jointpick.joint_pick` (see the
    module docstring).

    Args:
        model: the performance model (its profile, pair and acceptance).
        actions: the configs the engine runs (the baseline ``(0, 0, 0)`` is scored against
            whether listed or not).
        workload: the prompt and output lengths the serving power is for (``None``: the fit's).
        limit_range: the GPU's range of limits (NVML's when read; ``None``: the profile's,
            :func:`profile_range`).
        default_limit_w: the GPU's limit now (NVML's; ``None``: the profile's default).
        power: ``"serving"`` (default where the profile has a serving fit) or ``"decode"``.

    Attributes:
        provenance: ``"simulated"``.
        power_basis: ``"serving"`` or ``"decode window"``.
        notes: what the figures rest on (the power basis, the workload).
    """

    provenance = "simulated"
    band = (BAND_LOW, BAND_HIGH)

    def __init__(
        self,
        model: SpeculativeDecodingModel,
        actions: Sequence[Action],
        *,
        workload: ServingWorkload | None = None,
        limit_range: LimitRange | None = None,
        default_limit_w: float | None = None,
        power: str = "serving",
    ) -> None:
        if power not in ("serving", "decode"):
            raise ConfigError(f"power must be 'serving' or 'decode', got {power!r}")
        self.model = model
        self.actions = tuple(dict.fromkeys((Action(0, 0, 0), *(as_action(a) for a in actions))))
        self.workload = workload or ServingWorkload()
        self.limit_range = limit_range or profile_range(model)
        self.default_limit_w = float(default_limit_w if default_limit_w is not None else model.power_limit_w)
        profile = model.profile
        calibration = None
        if power == "serving":
            try:
                calibration = serving_calibration(profile)
            except ConfigError:
                calibration = None  # a profile file without a serving fit, and no measured class to borrow
        serving = calibration is not None
        self.power_basis = "serving" if serving else "decode window"
        self._speed_source = "borrowed" if model.acceptance.borrowed else "simulated"
        self._runs: dict[tuple[int, Action, float], _Run | None] = {}
        self._serving: dict[tuple[int, Action], float] = {}
        self._sim_workload = SimWorkload(
            DEFAULT_PROMPT_TOKENS if self.workload.prompt_tokens is None else self.workload.prompt_tokens,
            DEFAULT_OUTPUT_TOKENS if self.workload.output_tokens is None else self.workload.output_tokens,
            self.workload.source if self.workload.given else SimWorkload().source,
        )
        self.notes: list[str] = []
        if calibration is not None:
            self.notes.append(
                f"power: a server's (prefill mixed in) on {profile.name}, {self._sim_workload.describe()}: "
                f"{calibration.label}"
            )
        else:
            why = "asked" if power == "decode" else f"profile {profile.name} has no serving-power fit"
            self.notes.append(f"power: the decode window's ({why}): a server mixing prefills draws more")

    # --------------------------------------------------------------- the model's figures
    def _serving_w(self, batch_size: int, action: Action) -> float:
        key = (batch_size, action)
        if key not in self._serving:
            watts = serving_power_w(self.model, batch_size, action, workload=self._sim_workload)
            self._serving[key] = float(watts)
        return self._serving[key]

    def _run(self, batch_size: int, action: Action, limit_w: float) -> _Run | None:
        """``action`` at ``limit_w`` as one sweep row runs it (``None``: it does not fit in memory)."""
        key = (batch_size, action, limit_w)
        if key in self._runs:
            return self._runs[key]
        inner = self.model
        p = inner.profile
        at_limit = with_power_limit(inner, limit_w)
        first = at_limit.predict(batch_size, action, p.ambient_temp_c)
        if not first.fits_in_memory:
            self._runs[key] = None
            return None
        wall = at_limit.run_cost(batch_size, action, first).wall_clock_s
        temp_end = inner.advance_temperature(p.ambient_temp_c, first.avg_power_w, wall)
        pred = at_limit.predict(batch_size, action, 0.5 * (p.ambient_temp_c + temp_end))
        cost = at_limit.run_cost(batch_size, action, pred)
        temp_after = inner.advance_temperature(p.ambient_temp_c, pred.avg_power_w, cost.wall_clock_s)
        power = float(pred.avg_power_w)
        capped = bool(pred.power_capped)
        if self.power_basis == "serving":
            serving = self._serving_w(batch_size, action)
            capped = capped or serving > limit_w
            power = min(serving, limit_w)
        interval = speed_interval(at_limit, batch_size, action, prediction=pred)
        run = _Run(
            speed=float(pred.speed_tok_s),
            lo=interval.lo_tok_s,
            hi=interval.hi_tok_s,
            power_w=power,
            joules_per_token=power * cost.wall_clock_s / cost.total_output_tokens,
            temp_after_c=temp_after,
            throttled=bool(pred.thermal_throttled or temp_after > p.throttle_temp_c),
            capped=capped,
        )
        self._runs[key] = run
        return run

    def demand_w(self, batch_size: int, action: Action) -> float | None:
        """What ``action`` draws at ``batch_size`` under the GPU's highest limit (the power the
        utilisation is of), W; ``None`` when it does not fit in memory."""
        run = self._run(batch_size, as_action(action), self.limit_range.max_w)
        return None if run is None else run.power_w

    def figure(self, batch_size: int, action: Action, limit_w: float) -> Candidate | None:
        """``action`` at ``batch_size`` under ``limit_w``, scored with the contract's reward
        against the baseline at the same limit (``None``: it does not fit in memory).

        Raises:
            ConfigError: a bad batch size or limit; InvalidActionError: a bad action.
        """
        act = as_action(action)
        run = self._run(batch_size, act, float(limit_w))
        if run is None:
            return None
        base = self._run(batch_size, Action(0, 0, 0), float(limit_w))
        util = run.power_w / float(limit_w)
        reward = compute_reward(
            speed_tok_s=run.speed,
            baseline_speed_tok_s=run.speed if base is None else base.speed,
            utilization=util,
            gpu_temp_c=run.temp_after_c,
            gpu_throttling=run.throttled,
        ).reward
        jpt = run.joules_per_token
        return Candidate(
            action=act,
            power_limit_w=float(limit_w),
            speed_tok_s=Figure(run.speed, run.lo, run.hi, self._speed_source),
            utilization=Figure(util, source="simulated"),
            joules_per_token=Figure(jpt, jpt * run.speed / run.hi, jpt * run.speed / run.lo, self._speed_source),
            power_w=Figure(run.power_w, source="simulated"),
            reward=reward,
            in_band=BAND_LOW <= util <= BAND_HIGH,
            capped=run.capped,
        )

    # --------------------------------------------------------------- PickSource
    def measured_batch_size(self, batch_size: int) -> int:
        """A model answers every batch size itself."""
        return batch_size

    def _round(self, watts: float) -> float:
        rng = self.limit_range
        step = 1.0 if rng.max_w >= 100 else 0.1
        return min(rng.max_w, max(rng.min_w, round(round(watts / step) * step, 1)))

    def limits_w(self, batch_size: int) -> tuple[float, ...]:
        """The GPU's default limit and each config's mid-band limit, inside the range.

        Raises:
            ConfigError: no config fits in memory at ``batch_size``.
        """
        limits = {self._round(self.default_limit_w)}
        fitted = False
        for action in self.actions:
            demand = self.demand_w(batch_size, action)
            if demand is not None:
                fitted = True
                limits.add(self._round(demand / MID_BAND))
        if not fitted:
            raise ConfigError(
                f"batch size {batch_size}: no config fits in memory on {self.model.profile.name} "
                f"({self.model.target.name} + {self.model.draft.name})"
            )
        return tuple(sorted(limits))

    def candidates(self, batch_size: int, limit_w: float) -> list[Candidate]:
        """Every config of the engine that fits in memory, at ``limit_w``."""
        out = []
        for action in self.actions:
            found = self.figure(batch_size, action, limit_w)
            if found is not None:
                out.append(found)
        return out

    def settle(self, batch_size: int, chosen: Candidate) -> Candidate:
        """``chosen`` at its own mid-band limit when that gives it the same speed inside the band
        (a limit above what it draws costs nothing and keeps it off the band's edges), else itself."""
        demand = self.demand_w(batch_size, chosen.action)
        if demand is None or not chosen.in_band:
            return chosen
        centred = self.figure(batch_size, chosen.action, self._round(demand / MID_BAND))
        if centred is None or not centred.in_band or centred.speed_tok_s.value < chosen.speed_tok_s.value:
            return chosen
        return centred

    def shortfall(self, chosen: Candidate, per_limit: Sequence[Candidate], selector: BandWithinSpeedLoss) -> str | None:
        """Why ``chosen`` is outside the band inside the GPU's range
        (:func:`~specband.deploy.jointpick.range_shortfall`)."""
        return range_shortfall(chosen, self.band, self.limit_range, selector.max_speed_loss, self.power_basis)
