"""The joint pick: the speculative config *and* the GPU power limit for one batch size, from any
source of figures (a performance model's first guess, a sweep or a folder over several power
limits, a pick from data at one limit), in one function (:func:`joint_pick`).

A source (:class:`PickSource`) offers, for a batch size, the power limits worth trying and, at
each, every config it can speak for as a :class:`Candidate` (tok/s with its 95 % interval,
utilisation of that limit, J/token, each a :class:`Figure` that says where it comes from, and
the contract's reward scored at that limit). The pick is the rule of
:class:`~specband.sweeps.limit_table.BandWithinSpeedLoss` (Zeus's ``MaxSlowdownConstraint``
with the band added) over the best config by reward at each limit: the lowest limit whose
best config is within ``max_speed_loss`` of the fastest and inside the band, else the lowest
within the speed loss, and then the answer says why the band is out of reach
(:attr:`JointPick.shortfall`).

Sources here: :class:`TableSource` (a :class:`~specband.sweeps.limit_table.LimitTable`, a
sweep's or a folder's, measured or simulated rows over several limits) and
:class:`FixedSource` (one config at the data's one limit: a policy's pick); the performance
model's is :class:`specband.deploy.modelsource.ModelSource` (a first guess, ``probe``). The
governor's plan and ``schedule``'s per-tier plan take the same function with their own
source (``allowed`` keeps to the configs an engine can switch between at runtime).

Only the standard library, the contract and the limit table are imported (``recommend``
stays cold-fast).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from specband.contract.actions import EXTENDED_ACTIONS, Action
from specband.contract.reward import BAND_HIGH, BAND_LOW
from specband.core.errors import ConfigError
from specband.core.limits import DEFAULT_MAX_SPEED_LOSS, MAX_NEW_TOKENS
from specband.core.optionspec import option
from specband.deploy.explain import LimitRange
from specband.sweeps.limit_table import BandWithinSpeedLoss, LimitPick, LimitTable, nvidia_smi_command

__all__ = [
    "FIGURE_SOURCES",
    "POWER_BASES",
    "Candidate",
    "Figure",
    "FixedSource",
    "JointPick",
    "PickSource",
    "ServingWorkload",
    "TableSource",
    "band_words",
    "joint_pick",
    "range_shortfall",
    "workload_field",
]

#: Where a figure comes from (the brief's terms): measured on a GPU, emulated by ``specband
#: emulate``, simulated by the performance model, published by a study, or borrowed (taken from
#: another setup's data with ``--allow-transfer``, or simulated on another pair's acceptance).
FIGURE_SOURCES: tuple[str, ...] = ("measured", "emulated", "simulated", "published", "borrowed")

#: What a utilisation is of: ``"serving"`` (a server's power under continuous batching,
#: prefill mixed in: :func:`specband.sim.power.serving_power_w`) or ``"decode window"`` (the
#: decode-heavy window a sweep row measures).
POWER_BASES: tuple[str, ...] = ("serving", "decode window")


@dataclass(frozen=True)
class ServingWorkload:
    """The workload a server's power is modelled for.

    Attributes:
        prompt_tokens, output_tokens: mean tokens per request in and out (``None``: the
            power model's own fit).
        source: where they come from (``"--prompt-tokens/--output-tokens"``, a probe file).
    """

    prompt_tokens: int | None = None
    output_tokens: int | None = None
    source: str = "given"

    @property
    def given(self) -> bool:
        """Some length is given."""
        return self.prompt_tokens is not None or self.output_tokens is not None

    def describe(self) -> str:
        """``"prompts 512 / outputs 256 tokens (--prompt-tokens/--output-tokens)"``."""
        prompts = "prompts as fitted" if self.prompt_tokens is None else f"prompts {self.prompt_tokens}"
        outputs = "outputs as fitted" if self.output_tokens is None else f"outputs {self.output_tokens}"
        parts = [prompts, outputs]
        return f"{' / '.join(parts)} tokens ({self.source})"


def workload_field(which: str) -> Any:
    """``--prompt-tokens`` or ``--output-tokens`` (``which``: ``"prompt"`` or ``"output"``): the
    workload's mean tokens per request, for a first guess's serving power (:class:`ServingWorkload`)."""
    what = "prompt (input)" if which == "prompt" else "output (generated)"
    return option(
        None,
        f"--{which}-tokens",
        help=f"Mean {what} tokens per request of your workload, for the server's power (prefill mixed in) of a "
        "simulated first guess. Default: the power model's own fit.",
        panel="setup",
        metavar="N",
        min=1,
        max=MAX_NEW_TOKENS,
        show_default=False,
    )


@dataclass(frozen=True)
class Figure:
    """One figure of an answer and where it comes from.

    Attributes:
        value: the expected value (tok/s, a fraction of the limit, J/token, W).
        lo95, hi95: its 95 % interval (``None``: none is known, e.g. a folder keeps means only).
        source: one of :data:`FIGURE_SOURCES`.
    """

    value: float
    lo95: float | None = None
    hi95: float | None = None
    source: str = "measured"

    def __post_init__(self) -> None:
        if self.source not in FIGURE_SOURCES:
            raise ValueError(f"figure source must be one of {FIGURE_SOURCES}, got {self.source!r}")

    @property
    def has_interval(self) -> bool:
        """Both ends of the 95 % interval are known."""
        return self.lo95 is not None and self.hi95 is not None

    def to_json(self, digits: int = 4) -> dict[str, Any]:
        """``value``, ``lo95``, ``hi95`` (rounded to ``digits`` significant digits; ``None``
        kept) and ``source``."""

        def rounded(v: float | None) -> float | None:
            return None if v is None else float(f"{v:.{digits}g}")

        return {"value": rounded(self.value), "lo95": rounded(self.lo95), "hi95": rounded(self.hi95),
                "source": self.source}  # fmt: skip


@dataclass(frozen=True)
class Candidate:
    """One config at one power limit, with what the source says it gives there.

    Attributes:
        action: ``(steps, topk, draft tokens)``.
        power_limit_w: the limit, W.
        speed_tok_s: decode speed per request, tok/s.
        utilization: average power / the limit (``None``: no power known).
        joules_per_token: energy per output token, J (``None``: not known).
        power_w: average power, W (``None``: not known).
        reward: the contract's reward scored at this limit (:func:`specband.contract.reward.compute_reward`).
        in_band: ``utilization`` lies inside the band.
        runs: the rows behind measured means (``None``: a model's figures).
        capped: the limit is below what the config draws (the GPU slows it down to fit).
    """

    action: Action
    power_limit_w: float
    speed_tok_s: Figure
    utilization: Figure | None
    joules_per_token: Figure | None
    power_w: Figure | None
    reward: float
    in_band: bool
    runs: int | None = None
    capped: bool = False

    @property
    def action_index(self) -> int:
        """The config's index in the extended action set (the contract's 19 first)."""
        return EXTENDED_ACTIONS.index(self.action)

    def limit_pick(self) -> LimitPick:
        """The candidate as the limit selector reads it (:class:`~specband.sweeps.limit_table.LimitPick`)."""
        steps, topk, draft = self.action
        return LimitPick(
            power_limit_w=self.power_limit_w,
            action_index=self.action_index,
            action=(steps, topk, draft),
            mean_reward=self.reward,
            speed_tok_s=self.speed_tok_s.value,
            avg_power_w=None if self.power_w is None else self.power_w.value,
            utilization=None if self.utilization is None else self.utilization.value,
            joules_per_token=None if self.joules_per_token is None else self.joules_per_token.value,
            in_band=self.in_band,
            runs=self.runs or 0,
        )

    def to_json(self) -> dict[str, Any]:
        """``action``, ``power_limit_w``, the figures (:meth:`Figure.to_json` or ``None``),
        ``reward``, ``in_band``, ``runs`` and ``capped``."""
        return {
            "action": list(self.action),
            "power_limit_w": self.power_limit_w,
            "speed_tok_s": self.speed_tok_s.to_json(),
            "utilization": None if self.utilization is None else self.utilization.to_json(),
            "joules_per_token": None if self.joules_per_token is None else self.joules_per_token.to_json(),
            "power_w": None if self.power_w is None else self.power_w.to_json(),
            "reward": round(self.reward, 4),
            "in_band": self.in_band,
            "runs": self.runs,
            "capped": self.capped,
        }


class PickSource(Protocol):
    """Figures of configs at power limits, for :func:`joint_pick`.

    Attributes:
        provenance: what the figures rest on (``measured``, ``simulated``, ... joined by ``+``).
        power_basis: one of :data:`POWER_BASES`.
        band: ``(low, high)`` of the reward's band, fractions of the limit.
        limit_range: the limits the GPU accepts when the limit may move anywhere in a range
            (NVML's constraints, or a simulator profile's range); ``None`` when only the
            source's own limits are known (data: the limits swept).
        default_limit_w: the GPU's default limit (the highest limit swept, for data), W, or
            ``None`` when not known.
    """

    @property
    def provenance(self) -> str: ...

    @property
    def power_basis(self) -> str: ...

    @property
    def band(self) -> tuple[float, float]: ...

    @property
    def limit_range(self) -> LimitRange | None: ...

    @property
    def default_limit_w(self) -> float | None: ...

    def measured_batch_size(self, batch_size: int) -> int | None:
        """The batch size the figures for ``batch_size`` are of (data: the nearest measured;
        a model: ``batch_size`` itself; ``None``: not known)."""
        ...

    def limits_w(self, batch_size: int) -> tuple[float, ...]:
        """The limits worth trying at ``batch_size``, W, increasing."""
        ...

    def candidates(self, batch_size: int, limit_w: float) -> Sequence[Candidate]:
        """Every config the source speaks for at ``batch_size`` and ``limit_w``."""
        ...

    def settle(self, batch_size: int, chosen: Candidate) -> Candidate:
        """The picked config at the limit the source prefers for it among limits where it
        gives the same (a model: its mid-band limit, where it runs as fast; data: ``chosen``)."""
        ...

    def shortfall(self, chosen: Candidate, per_limit: Sequence[Candidate], selector: BandWithinSpeedLoss) -> str | None:
        """Why ``chosen`` is outside the band (``None``: it is inside)."""
        ...


@dataclass(frozen=True)
class JointPick:
    """The config and the power limit for one batch size (:func:`joint_pick`).

    Attributes:
        batch_size: the batch size asked for; ``measured_batch_size`` the one the figures are
            of (``None``: not known).
        chosen: the picked config at the picked limit (:class:`Candidate`).
        per_limit: the best config by reward at every limit tried, by increasing limit.
        provenance, power_basis, band, limit_range, default_limit_w: the source's.
        max_speed_loss: the speed a lower limit may cost against the fastest, fraction.
        shortfall: why ``chosen`` is outside the band (the band cannot be reached, or not
            within the speed loss), ``None`` when it is inside.
    """

    batch_size: int
    measured_batch_size: int | None
    chosen: Candidate
    per_limit: tuple[Candidate, ...]
    provenance: str
    power_basis: str
    band: tuple[float, float]
    max_speed_loss: float
    limit_range: LimitRange | None = None
    default_limit_w: float | None = None
    shortfall: str | None = None

    @property
    def action(self) -> Action:
        """The picked config."""
        return self.chosen.action

    @property
    def power_limit_w(self) -> float:
        """The picked limit, W."""
        return self.chosen.power_limit_w

    @property
    def in_band(self) -> bool:
        """The pick's utilisation is inside the band."""
        return self.chosen.in_band

    @property
    def limit_moves(self) -> bool:
        """The limit was picked (the source spoke for more than one limit); ``False``: the
        data's one limit."""
        return self.limit_range is not None or len(self.per_limit) > 1

    @property
    def nvidia_smi(self) -> str | None:
        """The command that sets the picked limit, or ``None`` when the limit did not move."""
        return nvidia_smi_command(self.power_limit_w) if self.limit_moves else None

    def to_json(self) -> dict[str, Any]:
        """What ``--format json`` carries of the joint pick: the batch sizes, ``action``,
        ``power_limit_w``, ``nvidia_smi``, ``in_band``, ``shortfall``, ``chosen`` and
        ``per_limit`` (:meth:`Candidate.to_json`), ``provenance``, ``power_basis``, ``band``,
        ``max_speed_loss``, ``limit_range_w`` (``[min, max]`` or ``None``), its ``limit_range_source``
        and ``default_limit_w``."""
        rng = self.limit_range
        return {
            "batch_size": self.batch_size,
            "measured_batch_size": self.measured_batch_size,
            "action": list(self.action),
            "power_limit_w": self.power_limit_w,
            "nvidia_smi": self.nvidia_smi,
            "in_band": self.in_band,
            "shortfall": self.shortfall,
            "chosen": self.chosen.to_json(),
            "per_limit": [c.to_json() for c in self.per_limit],
            "provenance": self.provenance,
            "power_basis": self.power_basis,
            "band": list(self.band),
            "max_speed_loss": self.max_speed_loss,
            "limit_range_w": None if rng is None else [rng.min_w, rng.max_w],
            "limit_range_source": None if rng is None else rng.source,
            "default_limit_w": self.default_limit_w,
        }


def _best(candidates: Sequence[Candidate]) -> Candidate:
    """The best config by reward (ties: the faster, then the lower index)."""
    return max(candidates, key=lambda c: (c.reward, c.speed_tok_s.value, -c.action_index))


def band_words(util: float, band: tuple[float, float]) -> str:
    """``"in the band"``, ``"below the band by 0.082"`` or ``"above the band by 0.020"``."""
    if util < band[0]:
        return f"below the band by {band[0] - util:.3f}"
    if util > band[1]:
        return f"above the band by {util - band[1]:.3f}"
    return "in the band"


def range_shortfall(
    chosen: Candidate, band: tuple[float, float], rng: LimitRange, max_speed_loss: float, power_basis: str
) -> str | None:
    """Why ``chosen``, picked among limits anywhere in the GPU's range ``rng``, is outside the
    band: the band cannot be reached at this batch size (even the lowest limit leaves the pick
    below it, or it draws more than the highest), or not within the speed loss. ``None`` when
    it is inside."""
    if chosen.in_band or chosen.utilization is None:
        return None
    util = chosen.utilization.value
    power = "" if chosen.power_w is None else f" ({chosen.power_w.value:.0f} W, {power_basis} power)"
    where = f"{chosen.action} at {chosen.power_limit_w:g} W draws {util:.3f} of the limit{power}, "
    where += band_words(util, band)
    limits = f"the GPU's limits: {round(rng.min_w, 1):g}-{round(rng.max_w, 1):g} W, {rng.source}"
    if util < band[0] and chosen.power_limit_w <= rng.min_w + 0.5:
        return f"the band cannot be reached: even the GPU's lowest limit leaves the pick below it: {where} ({limits})"
    if util > band[1] and chosen.power_limit_w >= rng.max_w - 0.5:
        return f"the band cannot be reached: the pick draws more than the GPU's highest limit: {where} ({limits})"
    return (
        f"no limit puts a config within {max_speed_loss:.1%} of the fastest inside the band: {where} "
        f"(--max-speed-loss allows more; {limits})"
    )


def joint_pick(
    source: PickSource,
    batch_size: int,
    *,
    max_speed_loss: float = DEFAULT_MAX_SPEED_LOSS,
    allowed: Callable[[Action], bool] | None = None,
) -> JointPick:
    """The config and the power limit for ``batch_size``, picked together from ``source``.

    At each limit the source offers (:meth:`PickSource.limits_w`), the config with the best
    reward there (the contract's reward scored at that limit; ties: the faster, then the
    lower index); among limits, :class:`~specband.sweeps.limit_table.BandWithinSpeedLoss`:
    the lowest limit whose config is within ``max_speed_loss`` of the fastest and inside the
    band, else the lowest within the speed loss, with :attr:`JointPick.shortfall` saying why.

    Args:
        source: the figures (:class:`PickSource`: :class:`TableSource`, :class:`FixedSource`,
            :class:`specband.deploy.modelsource.ModelSource`).
        batch_size: concurrent requests (>= 1).
        max_speed_loss: fraction in [0, 1) (``--max-speed-loss``).
        allowed: keep only the configs it accepts (e.g. chains for an engine's per-batch-size
            schedule); ``None``: every config the source offers.

    Returns:
        the :class:`JointPick`.

    Raises:
        ConfigError: ``max_speed_loss`` outside [0, 1), or no config at any limit (none the
            source speaks for passes ``allowed``).
    """
    selector = BandWithinSpeedLoss(max_speed_loss)
    per_limit: list[Candidate] = []
    for limit in source.limits_w(batch_size):
        found = [c for c in source.candidates(batch_size, limit) if allowed is None or allowed(c.action)]
        if found:
            per_limit.append(_best(found))
    if not per_limit:
        raise ConfigError(f"no config to pick from at batch size {batch_size} ({source.provenance} figures)")
    picks = [c.limit_pick() for c in per_limit]
    chosen = source.settle(batch_size, per_limit[picks.index(selector.select(picks))])
    return JointPick(
        batch_size=batch_size,
        measured_batch_size=source.measured_batch_size(batch_size),
        chosen=chosen,
        per_limit=tuple(per_limit),
        provenance=source.provenance,
        power_basis=source.power_basis,
        band=source.band,
        max_speed_loss=float(max_speed_loss),
        limit_range=source.limit_range,
        default_limit_w=source.default_limit_w,
        shortfall=source.shortfall(chosen, per_limit, selector),
    )


def _source_word(provenance: str, borrowed: bool = False) -> str:
    """The figure source of rows of ``provenance`` (several joined by ``+``: the least
    measured of them), or ``"borrowed"`` for data taken from another setup."""
    if borrowed:
        return "borrowed"
    kinds = [k.strip() for k in provenance.split("+")]
    for word in ("simulated", "emulated", "published", "measured"):
        if word in kinds:
            return word
    return "measured"


def _candidate_of(pick: LimitPick, source: str) -> Candidate:
    def fig(value: float | None) -> Figure | None:
        return None if value is None else Figure(value, source=source)

    return Candidate(
        action=EXTENDED_ACTIONS[pick.action_index],
        power_limit_w=pick.power_limit_w,
        speed_tok_s=Figure(pick.speed_tok_s, source=source),
        utilization=fig(pick.utilization),
        joules_per_token=fig(pick.joules_per_token),
        power_w=fig(pick.avg_power_w),
        reward=pick.mean_reward,
        in_band=pick.in_band,
        runs=pick.runs,
    )


class TableSource:
    """The figures of a :class:`~specband.sweeps.limit_table.LimitTable` (a sweep's or a folder's
    over several limits): at each limit, the table's pick there (the ``lookup_table`` rule over
    the rows of that limit). Decode-window figures (sweep rows), with no interval (a table keeps
    means only).

    Args:
        table: the table.
        borrowed: the data is from another setup, taken with ``--allow-transfer`` (its figures
            are labelled ``borrowed``).
    """

    power_basis = "decode window"
    limit_range: LimitRange | None = None

    def __init__(self, table: LimitTable, *, borrowed: bool = False) -> None:
        self.table = table
        self.provenance = table.provenance
        self.band = table.band
        self.default_limit_w = max(table.limits_w) if table.limits_w else None
        self._source = _source_word(table.provenance, borrowed)

    def measured_batch_size(self, batch_size: int) -> int:
        """The table's nearest measured batch size."""
        return self.table.measured_batch_size(batch_size)

    def limits_w(self, batch_size: int) -> tuple[float, ...]:
        """The limits of the measured batch size's row."""
        return tuple(sorted(p.power_limit_w for p in self.table.picks[self.measured_batch_size(batch_size)]))

    def candidates(self, batch_size: int, limit_w: float) -> list[Candidate]:
        """The table's pick at ``limit_w``."""
        row = self.table.picks[self.measured_batch_size(batch_size)]
        return [_candidate_of(p, self._source) for p in row if p.power_limit_w == limit_w]

    def settle(self, batch_size: int, chosen: Candidate) -> Candidate:
        """The limits swept are all there is: ``chosen``."""
        return chosen

    def shortfall(self, chosen: Candidate, per_limit: Sequence[Candidate], selector: BandWithinSpeedLoss) -> str | None:
        """The selector's words (:meth:`~specband.sweeps.limit_table.BandWithinSpeedLoss.shortfall`)."""
        return selector.shortfall([c.limit_pick() for c in per_limit], chosen.limit_pick(), self.band)


class FixedSource:
    """One config at the data's one power limit: a policy's pick (the limit cannot move by
    data measured at one limit; :meth:`shortfall` says where a limit would put the pick if
    its power stays as measured).

    Args:
        candidate: the pick with its figures at the data's limit.
        measured_batch_size: the batch size the figures are of.
        provenance: what they rest on.
        floor: the GPU's range of limits, for what :meth:`shortfall` suggests (``None``: not known).
    """

    power_basis = "decode window"
    band = (BAND_LOW, BAND_HIGH)
    limit_range: LimitRange | None = None

    def __init__(
        self, candidate: Candidate, measured_batch_size: int | None, provenance: str, floor: LimitRange | None = None
    ) -> None:
        self.candidate = candidate
        self.floor = floor
        self.provenance = provenance
        self.default_limit_w = candidate.power_limit_w
        self._measured = measured_batch_size

    def measured_batch_size(self, batch_size: int) -> int | None:
        """The batch size the pick's figures are of."""
        return self._measured

    def limits_w(self, batch_size: int) -> tuple[float, ...]:
        """The data's one limit."""
        return (self.candidate.power_limit_w,)

    def candidates(self, batch_size: int, limit_w: float) -> list[Candidate]:
        """The pick."""
        return [self.candidate]

    def settle(self, batch_size: int, chosen: Candidate) -> Candidate:
        """The data's one limit: ``chosen``."""
        return chosen

    def shortfall(self, chosen: Candidate, per_limit: Sequence[Candidate], selector: BandWithinSpeedLoss) -> str | None:
        """Where a limit would put the pick mid-band if its power stays as measured (a limit
        above what it draws does not change its draw), kept inside :attr:`floor`; or that no
        limit of the GPU's range does (``None``: it is inside the band, or no power is known)."""
        if chosen.in_band or chosen.power_w is None or chosen.utilization is None:
            return None
        util, power = chosen.utilization.value, chosen.power_w.value
        mid = (self.band[0] + self.band[1]) / 2
        at = f"the data holds one limit, {chosen.power_limit_w:g} W: {chosen.action} draws {util:.3f} of it, "
        at += band_words(util, self.band)
        if util > self.band[1]:
            return f"{at}; a lower limit cannot bring it into the band (it is held at it); no higher one is measured"
        want = power / mid
        rng = self.floor
        if rng is not None and want < rng.min_w:
            end = power / rng.min_w
            return (
                f"{at}; it would need about {want:.0f} W, below the lowest limit: at {round(rng.min_w, 1):g} W it "
                f"would draw about {end:.3f} of it ({band_words(end, self.band)}) if its power stays as measured "
                f"({rng.source})"
            )
        return (
            f"{at}; a limit near {want:.0f} W would put it mid-band if its power stays as measured "
            "(`specband sweep --power-limits` measures it)"
        )
