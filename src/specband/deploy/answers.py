"""The typed answers of ``recommend`` and ``launch``: :class:`Pick` (one algorithm's pick for a
batch size), :class:`PowerLimitPick` (the pair "power limit + flags" from data over several
limits) and :class:`SchedulePick` (the per-batch-size schedule ``launch --schedule`` starts).

Each is a frozen dataclass read by attribute; ``to_json()`` gives what ``--format json``
prints (key order included). Only the standard library and :mod:`specband.contract.actions` are
imported here (``recommend`` stays cold-fast).

Two parts stay JSON objects on purpose: a pick's ``origin`` (:func:`specband.deploy.recommend.pick_origin`:
the typed :class:`~specband.sweeps.origin.DataOrigin`'s own JSON plus the row counts behind the batch
size, the one shape ``recommend``, ``schedule --format json`` and the power-limit answer share,
and what :func:`specband.deploy.explain.origin_line` reads) and ``explanation``
(:func:`specband.deploy.explain.explain_pick`'s nested figures). Both are documented where they are built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specband.contract.actions import Action

if TYPE_CHECKING:
    from specband.deploy.transfer import TransferCheck
    from specband.sweeps.limit_table import LimitPick, PowerLimitRecommendation

__all__ = ["PICK_JSON_KEYS", "POWER_LIMIT_PICK_JSON_KEYS", "Pick", "PowerLimitPick", "SchedulePick"]

#: The keys of :meth:`Pick.to_json`, in order (``calibration`` only in a first guess,
#: ``action_set`` only under an action set other than ``contract``).
PICK_JSON_KEYS = (
    "algorithm",
    "batch_size",
    "measured_batch_size",
    "features",
    "state",
    "source",
    "action_index",
    "action",
    "flags",
    "kwargs",
    "mean_reward",
    "origin",
    "explanation",
    "calibration",
    "transfer",
    "action_set",
)

#: The keys of :meth:`PowerLimitPick.to_json`, in order.
POWER_LIMIT_PICK_JSON_KEYS = (
    "batch_size",
    "measured_batch_size",
    "power_limit_w",
    "nvidia_smi",
    "action_index",
    "action",
    "flags",
    "kwargs",
    "in_band",
    "utilization",
    "speed_tok_s",
    "speed_loss",
    "max_speed_loss",
    "joules_per_token",
    "default_power_limit_w",
    "default_joules_per_token",
    "default_utilization",
    "band",
    "provenance",
    "origin",
    "transfer",
    "picks",
)


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
            speculative_num_draft_tokens)``.
        flags: sglang ``launch_server`` flags of the pick (none for the baseline).
        kwargs: the same as ``ServerArgs`` keyword arguments.
        mean_reward: observed mean reward of the pick at ``measured_batch_size``, or ``None``.
        origin: what the pick rests on (:func:`specband.deploy.recommend.pick_origin`: the data's
            :class:`~specband.sweeps.origin.DataOrigin` fields, ``rows``, ``repeats``,
            ``heldout_interval``).
        explanation: :func:`specband.deploy.explain.explain_pick` (figures of the pick and the
            runner-up), or ``None`` without per-action figures.
        transfer: the transfer check (:class:`~specband.deploy.transfer.TransferCheck`: the
            differences taken with ``--allow-transfer``; empty when matched or unchecked).
        calibration: a simulated first guess only: per metric ``median_abs_error``,
            ``worst_abs_error`` (fractions) and ``rows`` against published measurements
            (empty when none exist); ``None`` for a pick from data.
        action_set: the action set in force when it is not ``contract`` (else ``None``).
    """

    algorithm: str
    batch_size: int
    measured_batch_size: int | None
    features: str
    state: tuple[float, ...]
    source: str
    action_index: int
    action: Action
    flags: tuple[str, ...]
    kwargs: Mapping[str, Any]
    mean_reward: float | None
    origin: Mapping[str, Any]
    explanation: Mapping[str, Any] | None
    transfer: TransferCheck
    calibration: Mapping[str, Mapping[str, Any]] | None = None
    action_set: str | None = None

    def to_json(self) -> dict[str, Any]:
        """What ``recommend --format json`` prints (the keys of :data:`PICK_JSON_KEYS`, in
        order; ``calibration`` and ``action_set`` only when set)."""
        out: dict[str, Any] = {
            "algorithm": self.algorithm,
            "batch_size": self.batch_size,
            "measured_batch_size": self.measured_batch_size,
            "features": self.features,
            "state": list(self.state),
            "source": self.source,
            "action_index": self.action_index,
            "action": list(self.action),
            "flags": list(self.flags),
            "kwargs": dict(self.kwargs),
            "mean_reward": self.mean_reward,
            "origin": dict(self.origin),
            "explanation": None if self.explanation is None else dict(self.explanation),
        }
        if self.calibration is not None:
            out["calibration"] = {metric: dict(errors) for metric, errors in self.calibration.items()}
        out["transfer"] = self.transfer.to_json()
        if self.action_set is not None:
            out["action_set"] = self.action_set
        return out


def _limit_pick_json(p: LimitPick) -> dict[str, Any]:
    """One limit's row of :meth:`PowerLimitPick.to_json` (``picks``)."""
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


@dataclass(frozen=True)
class PowerLimitPick:
    """``recommend``'s answer when the data holds several power limits: "set the limit to
    ``power_limit_w`` and use these flags" (:func:`specband.deploy.power_answer.power_limit_pick`).

    Attributes:
        batch_size: the batch size asked for; ``measured_batch_size`` the one the data has.
        power_limit_w: the chosen limit, W.
        nvidia_smi: the command that sets it (``sudo nvidia-smi -pl W``).
        action_index, action: the pick at the chosen limit (index; steps, topk, draft tokens).
        flags, kwargs: its sglang flags and ``ServerArgs`` keyword arguments.
        in_band: its utilisation is inside the reward's band.
        utilization: its average power / the limit, fraction (``None``: power not measured).
        speed_tok_s: its mean decode speed, tokens/s.
        speed_loss: speed given up against the fastest pick at any limit, fraction.
        max_speed_loss: the speed loss accepted (``--max-speed-loss``), fraction.
        joules_per_token: its mean energy per output token, J (``None``: not measured).
        default_power_limit_w: the highest limit in the data (the GPU's default, as swept), W.
        default_joules_per_token, default_utilization: the pick's figures there.
        band: ``(band_low, band_high)`` of the reward, fractions of the limit.
        provenance: where the rows came from (``measured``, ``simulated``, ... joined by ``+``).
        origin: the data's :class:`~specband.sweeps.origin.DataOrigin` fields and
            ``heldout_interval``, or ``None`` when not known.
        transfer: the transfer check's JSON (:meth:`specband.deploy.transfer.TransferCheck.to_json`;
            the power limit is not compared: it is the answer's lever), or ``None`` when not
            checked. A mapping, not the check itself: it travels on
            :class:`~specband.sweeps.limit_table.PowerLimitRecommendation`, whose module sits beside
            :mod:`specband.artifacts.fit` and must not import :mod:`specband.deploy.transfer`.
        picks: the pick at every limit (:class:`~specband.sweeps.limit_table.LimitPick`), by
            increasing limit.
    """

    batch_size: int
    measured_batch_size: int
    power_limit_w: float
    nvidia_smi: str
    action_index: int
    action: Action
    flags: tuple[str, ...]
    kwargs: Mapping[str, Any]
    in_band: bool
    utilization: float | None
    speed_tok_s: float
    speed_loss: float
    max_speed_loss: float
    joules_per_token: float | None
    default_power_limit_w: float
    default_joules_per_token: float | None
    default_utilization: float | None
    band: tuple[float, float]
    provenance: str
    origin: Mapping[str, Any] | None
    transfer: Mapping[str, Any] | None
    picks: tuple[LimitPick, ...]

    @classmethod
    def of(cls, decided: PowerLimitRecommendation, draft_model: str | None = None) -> PowerLimitPick:
        """The answer of ``decided``, its flags carrying ``--speculative-draft-model-path
        draft_model`` (``None``: without)."""
        from specband.contract.actions import EXTENDED_ACTIONS, server_args_kwargs, sglang_cli_args

        chosen, default = decided.chosen, decided.default
        action = EXTENDED_ACTIONS[chosen.action_index]  # the contract's 19 first: right for either set
        return cls(
            batch_size=decided.batch_size,
            measured_batch_size=decided.measured_batch_size,
            power_limit_w=chosen.power_limit_w,
            nvidia_smi=decided.nvidia_smi_command,
            action_index=chosen.action_index,
            action=action,
            flags=tuple(sglang_cli_args(action, draft_model)),
            kwargs=server_args_kwargs(action, draft_model),
            in_band=chosen.in_band,
            utilization=chosen.utilization,
            speed_tok_s=chosen.speed_tok_s,
            speed_loss=decided.speed_loss,
            max_speed_loss=decided.max_speed_loss,
            joules_per_token=chosen.joules_per_token,
            default_power_limit_w=default.power_limit_w,
            default_joules_per_token=default.joules_per_token,
            default_utilization=default.utilization,
            band=decided.band,
            provenance=decided.provenance,
            origin=decided.origin,
            transfer=decided.transfer,
            picks=decided.picks,
        )

    def to_json(self) -> dict[str, Any]:
        """What ``recommend --format json`` prints for data over several limits (the keys of
        :data:`POWER_LIMIT_PICK_JSON_KEYS`, in order; ``picks``: ``power_limit_w``,
        ``action``, ``speed_tok_s``, ``utilization``, ``joules_per_token``, ``in_band``,
        ``mean_reward``, ``runs`` per limit)."""
        return {
            "batch_size": self.batch_size,
            "measured_batch_size": self.measured_batch_size,
            "power_limit_w": self.power_limit_w,
            "nvidia_smi": self.nvidia_smi,
            "action_index": self.action_index,
            "action": list(self.action),
            "flags": list(self.flags),
            "kwargs": dict(self.kwargs),
            "in_band": self.in_band,
            "utilization": self.utilization,
            "speed_tok_s": self.speed_tok_s,
            "speed_loss": self.speed_loss,
            "max_speed_loss": self.max_speed_loss,
            "joules_per_token": self.joules_per_token,
            "default_power_limit_w": self.default_power_limit_w,
            "default_joules_per_token": self.default_joules_per_token,
            "default_utilization": self.default_utilization,
            "band": list(self.band),
            "provenance": self.provenance,
            "origin": None if self.origin is None else dict(self.origin),
            "transfer": None if self.transfer is None else dict(self.transfer),
            "picks": [_limit_pick_json(p) for p in self.picks],
        }


@dataclass(frozen=True)
class SchedulePick:
    """The adaptive-speculation part of ``launch --schedule FILE|auto``
    (:func:`specband.deploy.schedule.schedule_for_launch`, :func:`~specband.deploy.schedule.vllm_schedule_for_launch`).

    Attributes:
        engine: ``"sglang"`` or ``"vllm"``.
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

    engine: str
    path: Path | str
    action: Action
    tiers: Mapping[int, Mapping[str, Any]]
    ranges: tuple[tuple[int, int, int], ...] = ()
    extra_args: tuple[str, ...] = ()
    speculative_config: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """``engine``, ``path`` (a string), ``action`` and the engine's part: sglang's ``tiers``
        (keys as strings) and ``extra_args``, or vLLM's ``ranges`` (``[start, end, K]``) and
        ``speculative_config``."""
        from specband.engines.base import get_engine  # here: the engine registry stays off recommend's cold path

        out: dict[str, Any] = {"engine": self.engine, "path": str(self.path), "action": list(self.action)}
        return {**out, **get_engine(self.engine).schedule_json(self)}
