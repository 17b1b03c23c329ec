"""Every answer ``recommend``, ``launch`` and ``schedule`` give, typed: what
:func:`specband.deploy.recommend.answer` returns (:data:`Answer`) and the parts they are made of.

* :class:`Pick` -- one algorithm's pick for a batch size (and a simulated first guess);
* :class:`PowerLimitAnswer` -- "set the limit to W and use these flags", from data over
  several power limits (a sweep's or a folder's :class:`~specband.sweeps.limit_table.LimitTable`);
* :class:`MixAnswer` -- one config for a batch-size mix (:class:`MixPick`, :class:`MixRow`,
  :class:`LeftOut`);
* :class:`ScheduleAnswer` -- the chain pick per batch size a schedule is written from
  (:class:`~specband.deploy.tiers.TierPick`), and :class:`SchedulePick`, the schedule
  ``launch --schedule`` starts;
* their parts: :class:`PickOrigin` (what the data rests on: the typed
  :class:`~specband.sweeps.origin.DataOrigin` and the rows behind a batch size,
  :class:`RowCounts`), :class:`Explanation` (:class:`Figures` of the pick and the
  :class:`RunnerUp`, :class:`BandPosition`), :class:`TransferCheck` (the user's setup
  against the data's), :class:`CalibrationError` (a first guess against published
  measurements).

Each is a frozen dataclass read by attribute; ``to_json()`` is the one serialiser of
``--format json`` (key order included); ``notes`` are the lines printed on stderr beside
an answer, in order. Every answer carries the :class:`~specband.engines.base.Engine` it is for:
its ``flags`` and ``kwargs`` are that engine's spelling of the pick
(:meth:`~specband.engines.base.Engine.speculative_flags`). Only the standard library and
:mod:`specband.contract.actions` are imported here (``recommend`` stays cold-fast).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, Union

from specband.contract.actions import EXTENDED_ACTIONS, Action
from specband.deploy.answer_parts import (
    BandPosition,
    CalibrationError,
    Explanation,
    Figures,
    PickOrigin,
    RowCounts,
    RunnerUp,
    SimulatedSpeed,
    TransferCheck,
)
from specband.deploy.trade import BandTrade, RewardTerms
from specband.sweeps.limit_table import fastest, nvidia_smi_command, speed_loss

if TYPE_CHECKING:
    from specband.deploy.tiers import TierPick
    from specband.engines.base import Engine
    from specband.sweeps.limit_table import LimitPick

__all__ = [
    "MIX_JSON_KEYS",
    "PICK_JSON_KEYS",
    "POWER_LIMIT_JSON_KEYS",
    "Answer",
    "BandPosition",
    "BandTrade",
    "CalibrationError",
    "ChosenLimit",
    "Explanation",
    "Figures",
    "JsonObject",
    "LeftOut",
    "MixAnswer",
    "MixPick",
    "MixRow",
    "Pick",
    "PickOrigin",
    "PowerLimitAnswer",
    "RewardTerms",
    "RowCounts",
    "RunnerUp",
    "ScheduleAnswer",
    "SchedulePick",
    "SimulatedSpeed",
    "TransferCheck",
]

#: A JSON value, as an engine's own configuration objects hold them (sglang's adaptive
#: config entries, vLLM's ``--speculative-config``).
JsonValue: TypeAlias = Union[bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"], None]  # noqa: UP007
#: A JSON object.
JsonObject: TypeAlias = Mapping[str, JsonValue]

# fmt: off
#: The keys of :meth:`Pick.to_json`, in order (``calibration`` and ``speed_interval`` only in a first guess,
#: ``action_set`` only under an action set other than ``contract``).
PICK_JSON_KEYS = (
    "algorithm", "batch_size", "measured_batch_size", "features", "state", "source", "action_index", "action",
    "engine", "flags", "kwargs", "mean_reward", "origin", "explanation", "calibration", "speed_interval", "transfer",
    "action_set",
)

#: The keys of :meth:`PowerLimitAnswer.to_json`, in order.
POWER_LIMIT_JSON_KEYS = (
    "batch_size", "measured_batch_size", "power_limit_w", "nvidia_smi", "action_index", "action", "engine",
    "flags", "kwargs", "in_band", "utilization", "speed_tok_s", "speed_loss", "max_speed_loss", "joules_per_token",
    "default_power_limit_w", "default_joules_per_token", "default_utilization", "band", "provenance", "origin",
    "transfer", "picks",
)

#: The keys of :meth:`MixAnswer.to_json`, in order.
MIX_JSON_KEYS = (
    "algorithm", "source", "batch_mix", "action_index", "action", "engine", "flags", "kwargs", "expected_reward",
    "expected_regret", "per_batch_size", "left_out", "origin", "transfer",
)
# fmt: on


# --------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class Pick:
    """One algorithm's pick for a batch size and GPU state (:func:`specband.deploy.recommend.recommend`,
    :func:`specband.deploy.firstguess.first_guess`).

    Attributes:
        algorithm: model card algorithm name.
        batch_size: the batch size asked for (concurrent requests).
        measured_batch_size: the measured batch size the pick comes from (the nearest one), or
            ``None`` when the folder records none (a foreign folder).
        features: the decision state's kind (``"pre"`` or ``"contract"``).
        state: the state the policy decided from, ``(temp_c, mem_used_mb, util_pct, ...)`` as
            the folder's features define it (float32 precision, 7 significant digits).
        source: where the policy came from (a folder, the embedded default, a first guess).
        action_index: index of the pick in the action set (the contract's 19 first).
        action: the pick ``(speculative_num_steps, speculative_eagle_topk,
            speculative_num_draft_tokens)``, one the engine runs.
        engine: the engine its flags are for (:class:`~specband.engines.base.Engine`).
        draft_model: the draft model its flags carry (``None``: none).
        mean_reward: observed mean reward of the pick at ``measured_batch_size``, or ``None``.
        origin: what the pick rests on (:class:`PickOrigin`, counted at ``measured_batch_size``).
        explanation: the figures of the pick and the runner-up (:class:`Explanation`), or
            ``None`` without per-action figures.
        transfer: the transfer check (:class:`TransferCheck`: the differences taken with
            ``--allow-transfer``; empty when matched or unchecked).
        calibration: a simulated first guess only: per metric its :class:`CalibrationError`
            against measurements of this profile and pair (empty when none exist); ``None`` for a
            pick from data.
        speed_interval: a simulated first guess only: the pick's simulated speed and its 95 %
            interval (:class:`SimulatedSpeed`); ``None`` for a pick from data.
        action_set: the action set the command named (``--actions``) when it is not ``contract``
            (else ``None``).
        notes: what to tell the user beside the pick, in order (which folder was used, an
            unmeasured batch size, a transfer taken, ...).
    """

    algorithm: str
    batch_size: int
    measured_batch_size: int | None
    features: str
    state: tuple[float, ...]
    source: str
    action_index: int
    action: Action
    engine: Engine
    draft_model: str | None
    mean_reward: float | None
    origin: PickOrigin
    explanation: Explanation | None
    transfer: TransferCheck
    calibration: Mapping[str, CalibrationError] | None = None
    action_set: str | None = None
    notes: tuple[str, ...] = ()
    speed_interval: SimulatedSpeed | None = None

    @property
    def flags(self) -> tuple[str, ...]:
        """The engine's server flags of the pick (none for the baseline)."""
        return tuple(self.engine.speculative_flags(self.action, self.draft_model))

    @property
    def kwargs(self) -> dict[str, object]:
        """The same as the engine's Python keyword arguments (sglang's ``ServerArgs``)."""
        return self.engine.speculative_kwargs(self.action, self.draft_model)

    def to_json(self) -> dict[str, Any]:
        """What ``recommend --format json`` prints (the keys of :data:`PICK_JSON_KEYS`, in
        order; ``calibration``, ``speed_interval`` and ``action_set`` only when set)."""
        out: dict[str, Any] = {
            "algorithm": self.algorithm,
            "batch_size": self.batch_size,
            "measured_batch_size": self.measured_batch_size,
            "features": self.features,
            "state": list(self.state),
            "source": self.source,
            "action_index": self.action_index,
            "action": list(self.action),
            "engine": self.engine.name,
            "flags": list(self.flags),
            "kwargs": self.kwargs,
            "mean_reward": self.mean_reward,
            "origin": self.origin.to_json(),
            "explanation": None if self.explanation is None else self.explanation.to_json(),
        }
        if self.calibration is not None:
            out["calibration"] = {metric: error.to_json() for metric, error in self.calibration.items()}
        if self.speed_interval is not None:
            out["speed_interval"] = self.speed_interval.to_json()
        out["transfer"] = self.transfer.to_json()
        if self.action_set is not None:
            out["action_set"] = self.action_set
        return out


def _limit_pick_json(p: LimitPick) -> dict[str, Any]:
    """One limit's row of :meth:`PowerLimitAnswer.to_json` (``picks``)."""
    return {
        "power_limit_w": p.power_limit_w,
        "action": list(p.action),
        "speed_tok_s": p.speed_tok_s,
        "utilization": p.utilization,
        "joules_per_token": p.joules_per_token,
        "in_band": p.in_band,
        "mean_reward": p.mean_reward,
        "runs": p.runs,
    }


class ChosenLimit:
    """What an answer with one chosen power limit derives from its ``chosen``
    :class:`~specband.sweeps.limit_table.LimitPick`, ``engine`` and ``draft_model`` (the limit,
    the command that sets it, the config and the engine's flags for it): shared by
    :class:`PowerLimitAnswer` and :class:`specband.deploy.mixlimit.MixPowerLimitAnswer`."""

    chosen: LimitPick
    engine: Engine
    draft_model: str | None

    @property
    def power_limit_w(self) -> float:
        """The chosen limit, W."""
        return self.chosen.power_limit_w

    @property
    def nvidia_smi(self) -> str:
        """The command that sets it (``sudo nvidia-smi -pl W``)."""
        return nvidia_smi_command(self.chosen.power_limit_w)

    @property
    def action(self) -> Action:
        """The config at the chosen limit."""
        return EXTENDED_ACTIONS[self.chosen.action_index]  # the contract's 19 first: right for either set

    @property
    def flags(self) -> tuple[str, ...]:
        """The engine's flags of the config."""
        return tuple(self.engine.speculative_flags(self.action, self.draft_model))

    @property
    def kwargs(self) -> dict[str, object]:
        """The same as the engine's Python keyword arguments (sglang's ``ServerArgs``)."""
        return self.engine.speculative_kwargs(self.action, self.draft_model)


@dataclass(frozen=True)
class PowerLimitAnswer(ChosenLimit):
    """``recommend``'s (and ``launch --set-power-limit auto``'s) answer when the data holds
    several power limits: "set the limit to ``power_limit_w`` and use these flags"
    (:func:`specband.deploy.recommend.power_limit_answer`: the selector's choice over one
    batch size's row of a :class:`~specband.sweeps.limit_table.LimitTable`).

    Attributes:
        batch_size: the batch size asked for; ``measured_batch_size`` the one the data has.
        chosen: the pick at the chosen limit: the lowest limit whose pick is within
            ``max_speed_loss`` of the fastest pick (at any limit) and in the band; when no
            limit's pick is in the band, the lowest limit within the speed loss
            (``in_band`` False says so, and a note why).
        picks: the pick at every limit (:class:`~specband.sweeps.limit_table.LimitPick`), by
            increasing limit.
        max_speed_loss: the speed loss accepted (``--max-speed-loss``), fraction.
        band: ``(band_low, band_high)`` of the reward, fractions of the limit.
        provenance: where the rows came from (``measured``, ``simulated``, ... joined by ``+``).
        engine: the engine its flags are for.
        draft_model: the draft model its flags carry (``None``: none).
        origin: what the data rests on (:class:`PickOrigin`, no rows counted), or ``None``
            when not known.
        transfer: the transfer check (:class:`TransferCheck`; the power limit is not
            compared: it is the answer's lever), or ``None`` when not checked.
        notes: what to tell the user, in order (an unmeasured batch size, what the power
            rests on, why no limit lands in the band, the transfer check's warnings).
    """

    batch_size: int
    measured_batch_size: int
    chosen: LimitPick
    picks: tuple[LimitPick, ...]
    max_speed_loss: float
    band: tuple[float, float]
    provenance: str
    engine: Engine
    draft_model: str | None = None
    origin: PickOrigin | None = None
    transfer: TransferCheck | None = None
    notes: tuple[str, ...] = ()

    @property
    def default(self) -> LimitPick:
        """The pick at the highest limit in the data (the GPU's default, as swept)."""
        return self.picks[-1]

    @property
    def fastest(self) -> LimitPick:
        """The fastest pick over all limits."""

        return fastest(self.picks)

    @property
    def speed_loss(self) -> float:
        """Speed given up against the fastest pick, fraction (>= 0)."""

        return speed_loss(self.picks, self.chosen)

    @property
    def action_index(self) -> int:
        """The pick's index at the chosen limit."""
        return self.chosen.action_index

    def summary(self) -> str:
        """One line saying what the chosen limit does against the default, with where the
        data came from (``recommend`` prints it beside the ``nvidia-smi -pl`` line)."""
        chosen, default = self.chosen, self.default

        def pct(value: float | None) -> str:
            return "?" if value is None else f"{value:.1%}"

        def jpt(value: float | None) -> str:
            return "?" if value is None else f"{value:.4g} J/token"

        band = f"{self.band[0]:.0%}-{self.band[1]:.0%}"
        return (
            f"power limit {chosen.power_limit_w:g} W (default as swept: {default.power_limit_w:g} W): "
            f"pick {chosen.action} at {pct(chosen.utilization)} of the limit "
            f"({'in' if chosen.in_band else 'NOT in'} the band {band}); {chosen.speed_tok_s:.4g} tok/s, "
            f"{self.speed_loss:.1%} below the fastest pick (bound {self.max_speed_loss:.1%}); "
            f"energy {jpt(chosen.joules_per_token)} vs {jpt(default.joules_per_token)} at "
            f"{default.power_limit_w:g} W (utilisation there {pct(default.utilization)}); from {self.provenance} rows"
        )

    def to_json(self) -> dict[str, Any]:
        """What ``recommend --format json`` prints for data over several limits (the keys of
        :data:`POWER_LIMIT_JSON_KEYS`, in order; ``picks``: ``power_limit_w``, ``action``,
        ``speed_tok_s``, ``utilization``, ``joules_per_token``, ``in_band``, ``mean_reward``,
        ``runs`` per limit)."""
        chosen, default = self.chosen, self.default
        return {
            "batch_size": self.batch_size,
            "measured_batch_size": self.measured_batch_size,
            "power_limit_w": self.power_limit_w,
            "nvidia_smi": self.nvidia_smi,
            "action_index": self.action_index,
            "action": list(self.action),
            "engine": self.engine.name,
            "flags": list(self.flags),
            "kwargs": self.kwargs,
            "in_band": chosen.in_band,
            "utilization": chosen.utilization,
            "speed_tok_s": chosen.speed_tok_s,
            "speed_loss": self.speed_loss,
            "max_speed_loss": self.max_speed_loss,
            "joules_per_token": chosen.joules_per_token,
            "default_power_limit_w": default.power_limit_w,
            "default_joules_per_token": default.joules_per_token,
            "default_utilization": default.utilization,
            "band": list(self.band),
            "provenance": self.provenance,
            "origin": None if self.origin is None else self.origin.to_json(),
            "transfer": None if self.transfer is None else self.transfer.to_json(),
            "picks": [_limit_pick_json(p) for p in self.picks],
        }


@dataclass(frozen=True)
class MixRow:
    """One batch size of a mix.

    Attributes:
        batch_size: running batch size; measured_batch_size: the one its scores come from.
        weight: its share of the mix (sums to 1 over the rows).
        own_index: the batch size's own pick (the best-scored allowed action there).
        own_reward, mix_reward: estimated reward of its own pick and of the mix pick there.
    """

    batch_size: int
    measured_batch_size: int
    weight: float
    own_index: int
    own_reward: float
    mix_reward: float

    @property
    def regret(self) -> float:
        """Reward lost here by running the mix pick instead of the own pick (>= 0)."""
        return self.own_reward - self.mix_reward


@dataclass(frozen=True)
class LeftOut:
    """A batch size's own pick that the mix could not consider: it is not scored at every
    batch size of the mix (the lookup table has no mean for it there).

    Attributes:
        index: its action index.
        own_pick_at: the batch sizes whose own pick it is (ascending).
        not_scored_at: the batch sizes of the mix where it has no score (ascending).
    """

    index: int
    own_pick_at: tuple[int, ...]
    not_scored_at: tuple[int, ...]

    def note(self) -> str:
        """The line ``recommend --batch-mix`` prints, e.g. ``"(3,2,4), bs 16's own pick, was
        not scored at bs 1: the mix considers only configs scored at every batch size of it"``."""
        own = " and ".join(f"bs {bs}'s" for bs in self.own_pick_at)
        at = ", ".join(str(bs) for bs in self.not_scored_at)
        return (
            f"{EXTENDED_ACTIONS[self.index]}, {own} own pick, was not scored at bs {at}: "
            "the mix considers only configs scored at every batch size of it"
        )


@dataclass(frozen=True)
class MixPick:
    """The single config for a mix (:func:`specband.deploy.mix.pick_for_mix`).

    Attributes:
        index: action index with the best expected reward over the mix.
        expected_reward: ``sum(weight * reward)`` of it.
        rows: one :class:`MixRow` per batch size.
        left_out: the batch sizes' own picks other than ``index`` that were not scored at
            every batch size of the mix, so not considered (:class:`LeftOut`), by index.
    """

    index: int
    expected_reward: float
    rows: tuple[MixRow, ...]
    left_out: tuple[LeftOut, ...] = ()

    @property
    def expected_regret(self) -> float:
        """``sum(weight * regret)``: what one config for all costs against per-batch-size picks."""
        return float(sum(r.weight * r.regret for r in self.rows))


@dataclass(frozen=True)
class MixAnswer:
    """``recommend --batch-mix``'s answer: one config for a batch-size mix.

    Attributes:
        algorithm: model card algorithm name.
        source: where the policy came from (a folder, ``"embedded"``).
        mix: batch size -> weight (normalised).
        pick: the :class:`MixPick` (expected reward and regret, per-batch-size rows).
        engine: the engine its flags are for.
        draft_model: ``--draft-model`` (or ``None``).
        notes: the loading notes, the transfer check's warnings, the data's notes, the origin
            line and what the mix left out, in order.
        transfer: the transfer check (:class:`TransferCheck`: the differences taken with
            ``--allow-transfer``), or ``None`` when not checked.
        origin: what the rewards rest on (:class:`PickOrigin` of the data; no one batch
            size: its counts are ``None``, those per batch size are in ``counts``).
        counts: measured batch size -> the :class:`RowCounts` behind it.
    """

    algorithm: str
    source: str
    mix: Mapping[int, float]
    pick: MixPick
    engine: Engine
    draft_model: str | None = None
    notes: tuple[str, ...] = ()
    transfer: TransferCheck | None = None
    origin: PickOrigin | None = None
    counts: Mapping[int, RowCounts] = field(default_factory=dict)

    @property
    def action(self) -> Action:
        """The one config for the mix."""
        return EXTENDED_ACTIONS[self.pick.index]

    @property
    def flags(self) -> tuple[str, ...]:
        """The engine's flags of :attr:`action`."""
        return tuple(self.engine.speculative_flags(self.action, self.draft_model))

    def to_json(self) -> dict[str, Any]:
        """What ``recommend --batch-mix --format json`` prints (the keys of
        :data:`MIX_JSON_KEYS`, in order): ``per_batch_size`` holds each row's fields, its
        ``own_action``, ``regret``, and the ``rows``/``repeats`` measured there; ``left_out``
        the own picks not scored at every batch size (``action_index``, ``action``,
        ``own_pick_at``, ``not_scored_at``); ``origin`` as a one-batch-size pick's (or
        ``null``); ``transfer`` as a pick's (not checked: no differences)."""
        return {
            "algorithm": self.algorithm,
            "source": self.source,
            "batch_mix": {str(bs): w for bs, w in self.mix.items()},
            "action_index": self.pick.index,
            "action": list(self.action),
            "engine": self.engine.name,
            "flags": list(self.flags),
            "kwargs": self.engine.speculative_kwargs(self.action, self.draft_model),
            "expected_reward": self.pick.expected_reward,
            "expected_regret": self.pick.expected_regret,
            "per_batch_size": [
                {
                    **asdict(r),
                    "own_action": list(EXTENDED_ACTIONS[r.own_index]),
                    "regret": r.regret,
                    **self.counts.get(r.measured_batch_size, RowCounts()).to_json(),
                }
                for r in self.pick.rows
            ],
            "left_out": [
                {
                    "action_index": left.index,
                    "action": list(EXTENDED_ACTIONS[left.index]),
                    "own_pick_at": list(left.own_pick_at),
                    "not_scored_at": list(left.not_scored_at),
                }
                for left in self.pick.left_out
            ],
            "origin": None if self.origin is None else self.origin.to_json(),
            "transfer": (self.transfer or TransferCheck()).to_json(),
        }


@dataclass(frozen=True)
class ScheduleAnswer:
    """The chain pick (topk 1) per batch size that a schedule is written from
    (``specband schedule``, ``launch --schedule auto``).

    Attributes:
        algorithm: model card algorithm name.
        source: where the policy came from (a folder, ``"embedded"``).
        picks: per batch size the chain pick beside the best tree config
            (:class:`~specband.deploy.tiers.TierPick`), by batch size.
        origin: what the scores rest on (:class:`PickOrigin`; no rows counted).
        transfer: the transfer check (:class:`TransferCheck`; its warnings say when the data
            is simulated), or ``None`` when not checked.
        notes: the loading notes and the transfer check's warnings, in order.
        manifest: the folder's :class:`~specband.artifacts.folder.Manifest` the picks were
            scored from (its per-config means explain the schedule against the engines'
            defaults; not in :meth:`to_json`), or ``None``.
    """

    algorithm: str
    source: str
    picks: tuple[TierPick, ...]
    origin: PickOrigin
    transfer: TransferCheck | None = None
    notes: tuple[str, ...] = ()
    manifest: Any = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        """``batch_sizes`` (per batch size: ``batch_size``, ``measured_batch_size``,
        ``chain_pick``, ``candidate_steps`` and why speculation is off, ``speculation_off``,
        ``None`` where it is on), ``origin`` and ``transfer``."""
        return {
            "batch_sizes": [
                {
                    "batch_size": p.batch_size,
                    "measured_batch_size": p.measured_batch_size,
                    "chain_pick": list(EXTENDED_ACTIONS[p.chain[0]]),
                    "candidate_steps": list(p.steps),
                    "speculation_off": p.off_reason,
                }
                for p in self.picks
            ],
            "origin": self.origin.to_json(),
            "transfer": None if self.transfer is None else self.transfer.to_json(),
        }


@dataclass(frozen=True)
class SchedulePick:
    """The adaptive-speculation part of ``launch --schedule FILE|auto``
    (:func:`specband.deploy.schedule.launch_schedule`).

    Attributes:
        engine: the engine that runs it.
        path: sglang: the ``--speculative-adaptive-config`` file; vLLM: ``--schedule`` as
            given (a file, or ``"auto"``: the object goes on the command line).
        action: the config the server starts from (sglang: the chain of sglang's own initial
            ``--speculative-num-steps``; vLLM: the chain of the largest K).
        tiers: sglang: tier (batch size) -> its checked entry (``{**defaults, **entry}``);
            empty for vLLM.
        ranges: vLLM: ``(start, end, K)`` batch-size ranges; empty for sglang.
        extra_args: sglang: ``--speculative-adaptive --speculative-adaptive-config FILE``;
            empty for vLLM.
        speculative_config: vLLM: the whole ``--speculative-config`` object (``model`` set to
            the draft); ``None`` for sglang.
    """

    engine: Engine
    path: Path | str
    action: Action
    tiers: Mapping[int, JsonObject]
    ranges: tuple[tuple[int, int, int], ...] = ()
    extra_args: tuple[str, ...] = ()
    speculative_config: JsonObject | None = None

    def to_json(self) -> dict[str, Any]:
        """``engine``, ``path`` (a string), ``action`` and the engine's part: sglang's ``tiers``
        (keys as strings) and ``extra_args``, or vLLM's ``ranges`` (``[start, end, K]``) and
        ``speculative_config``."""

        out: dict[str, Any] = {"engine": self.engine.name, "path": str(self.path), "action": list(self.action)}
        return {**out, **self.engine.serving.schedule_json(self)}


#: What :func:`specband.deploy.recommend.answer` returns.
Answer: TypeAlias = Union[Pick, PowerLimitAnswer, MixAnswer, ScheduleAnswer]  # noqa: UP007
