"""The parts of specband's answers (:mod:`specband.deploy.answers`): where a pick's data
comes from (:class:`PickOrigin`, :class:`RowCounts`), how a pick is explained
(:class:`Explanation`, :class:`Figures`, :class:`RunnerUp`, :class:`BandPosition`), the
user's setup against the data's (:class:`TransferCheck`) and a first guess's error bars
(:class:`CalibrationError`, :class:`SimulatedSpeed`).

Frozen dataclasses read by attribute, each with ``to_json()``; only the standard library and
the contract are imported (``recommend`` stays cold-fast). :mod:`specband.deploy.answers`
re-exports every name here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from specband.contract.actions import Action
from specband.contract.reward import band_status
from specband.deploy.trade import BandTrade

if TYPE_CHECKING:
    from specband.sweeps.origin import DataOrigin

__all__ = [
    "BandPosition",
    "CalibrationError",
    "Explanation",
    "Figures",
    "PickOrigin",
    "RowCounts",
    "RunnerUp",
    "SimulatedSpeed",
    "TransferCheck",
]


@dataclass(frozen=True)
class TransferCheck:
    """The user's setup against the data's (:func:`specband.deploy.transfer.check_transfer`),
    when it does not stop.

    Attributes:
        differences: every difference (empty when the setup matches), each ``"what: user's vs data's"``.
        warnings: lines to print on stderr (the differences of an allowed transfer, an unchecked GPU).
    """

    differences: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        """``{"differences": [...], "transferred": bool}`` for ``--format json`` (``transferred``:
        the pick was taken from data of another setup, with ``--allow-transfer``)."""
        return {"differences": list(self.differences), "transferred": bool(self.differences)}


@dataclass(frozen=True)
class RowCounts:
    """The rows behind a pick's batch size.

    Attributes:
        rows: successful rows there (``None``: not known, e.g. a mix's origin, which is
            for no one batch size).
        repeats: distinct ``(trial, repeat)`` runs, the most of any action there (``None``:
            not known).
    """

    rows: int | None = None
    repeats: int | None = None

    def to_json(self) -> dict[str, int | None]:
        """``{"rows": ..., "repeats": ...}``."""
        return {"rows": self.rows, "repeats": self.repeats}


@dataclass(frozen=True)
class PickOrigin:
    """What an answer rests on (:func:`specband.deploy.explain.pick_origin`).

    Attributes:
        data: the data's :class:`~specband.sweeps.origin.DataOrigin` (hardware, power limit,
            models, sglang version, workload, provenance, how the power was obtained).
        counts: the rows behind the batch size answered (:class:`RowCounts`), or ``None``
            for an answer that counts none (a power limit's, a schedule's: no ``rows`` and
            ``repeats`` keys in its JSON).
    """

    data: DataOrigin
    counts: RowCounts | None = None

    @property
    def rows(self) -> int | None:
        """Successful rows behind the batch size, or ``None``."""
        return None if self.counts is None else self.counts.rows

    @property
    def repeats(self) -> int | None:
        """Runs behind the batch size, or ``None``."""
        return None if self.counts is None else self.counts.repeats

    def to_json(self) -> dict[str, Any]:
        """The :class:`~specband.sweeps.origin.DataOrigin`'s fields, then ``rows`` and
        ``repeats`` (when counted) and ``heldout_interval`` (always ``None``: ``specband
        evaluate`` reports one; a folder records none)."""
        counts = {} if self.counts is None else self.counts.to_json()
        return {**self.data.to_json(), **counts, "heldout_interval": None}


@dataclass(frozen=True)
class BandPosition:
    """Where a utilisation sits against the band (:func:`specband.contract.reward.band_status`).

    Attributes:
        status: ``"in"``, ``"below"``, ``"above"`` or ``"unknown"`` (no power).
        by: the distance outside the band, fraction of the limit (0 inside; ``None``: unknown).
        low, high: the band, fractions of the limit.
    """

    status: str
    by: float | None
    low: float
    high: float

    @classmethod
    def of(cls, utilization: float | None) -> BandPosition:
        """The position of ``utilization`` (average power / limit) against the reward's band."""

        got = band_status(utilization)
        return cls(got["status"], got["by"], got["low"], got["high"])

    def to_json(self) -> dict[str, Any]:
        """``status``, ``by``, ``low``, ``high``."""
        return asdict(self)


@dataclass(frozen=True)
class Figures:
    """What the rows of one config at one batch size showed (means over rows).

    Attributes:
        speed_tok_s: decode speed, tokens/s (3 decimals).
        speedup: speed over the baseline (0,0,0) at this batch size (``None``: no baseline).
        energy_utilization: average power / limit, fraction (``None``: no power).
        band: its :class:`BandPosition`.
        joules_per_token: J per output token (``None``: not measured).
        rows, repeats: the rows and the distinct runs behind the means.
    """

    speed_tok_s: float
    speedup: float | None
    energy_utilization: float | None
    band: BandPosition
    joules_per_token: float | None
    rows: int
    repeats: int

    def to_json(self) -> dict[str, Any]:
        """Every field, in order (``band`` as :meth:`BandPosition.to_json`)."""
        return {
            "speed_tok_s": self.speed_tok_s,
            "speedup": self.speedup,
            "energy_utilization": self.energy_utilization,
            "band": self.band.to_json(),
            "joules_per_token": self.joules_per_token,
            "rows": self.rows,
            "repeats": self.repeats,
        }


@dataclass(frozen=True)
class RunnerUp:
    """The best other allowed config by mean reward, and what its rows showed.

    Attributes:
        action: its triple.
        mean_reward: its mean reward (4 decimals).
        figures: its :class:`Figures`.
    """

    action: Action
    mean_reward: float
    figures: Figures

    def to_json(self) -> dict[str, Any]:
        """``action``, ``mean_reward``, then the figures' keys."""
        return {"action": list(self.action), "mean_reward": self.mean_reward, **self.figures.to_json()}


@dataclass(frozen=True)
class Explanation:
    """A pick explained (:func:`specband.deploy.explain.explain_pick`).

    Attributes:
        batch_size: the measured batch size the figures are from.
        pick: the pick's :class:`Figures` (``None``: the pick has no rows there).
        runner_up: the :class:`RunnerUp` (``None``: no other allowed config was scored).
        band_reachable: some allowed config's mean utilisation is inside the band (``None``:
            no power in the rows).
        band_note: what would reach the band when none does (``None`` otherwise).
        figures_are: the data's provenance (a simulation is never called a measurement).
        band_trade: when the pick is outside the band and a config inside it lost to it, the
            :class:`BandTrade` (``None`` otherwise).
    """

    batch_size: int
    pick: Figures | None
    runner_up: RunnerUp | None
    band_reachable: bool | None
    band_note: str | None
    figures_are: str
    band_trade: BandTrade | None = None

    def to_json(self) -> dict[str, Any]:
        """Every field, in order (the figures as :meth:`Figures.to_json`); ``band_trade`` only
        when there is one (:meth:`BandTrade.to_json`)."""
        return {
            "batch_size": self.batch_size,
            "pick": None if self.pick is None else self.pick.to_json(),
            "runner_up": None if self.runner_up is None else self.runner_up.to_json(),
            "band_reachable": self.band_reachable,
            "band_note": self.band_note,
            "figures_are": self.figures_are,
        } | ({} if self.band_trade is None else {"band_trade": self.band_trade.to_json()})


@dataclass(frozen=True)
class CalibrationError:
    """A simulator profile's error on one metric against published measurements
    (:func:`specband.sim.published.calibration_errors`).

    Attributes:
        median_abs_error, worst_abs_error: relative errors, fractions (4 decimals).
        rows: published rows compared.
    """

    median_abs_error: float
    worst_abs_error: float
    rows: int

    def to_json(self) -> dict[str, Any]:
        """``median_abs_error``, ``worst_abs_error``, ``rows``."""
        return asdict(self)


@dataclass(frozen=True)
class SimulatedSpeed:
    """A first guess's simulated speed of its pick and the 95 % interval on it
    (:func:`specband.sim.speed_interval.speed_interval`; never a measurement).

    Attributes:
        speed_tok_s: the simulated per-request decode speed, tok/s.
        lo95, hi95: the 95 % interval, tok/s.
        acceptance_source: where the acceptance comes from (``"fitted to N configs of FILE"``,
            ``"profile NAME"``, ``"borrowed NAME"``).
        step_time_sd: the profile's relative step-time calibration error behind the interval.
    """

    speed_tok_s: float
    lo95: float
    hi95: float
    acceptance_source: str
    step_time_sd: float

    def to_json(self) -> dict[str, Any]:
        """The fields, and ``provenance: "simulated"``."""
        return {**asdict(self), "provenance": "simulated"}
