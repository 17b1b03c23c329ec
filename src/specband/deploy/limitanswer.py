"""The answer with a power limit from data over several limits (a sweep's or a folder's
:class:`~specband.sweeps.limit_table.LimitTable`): :func:`power_limit_answer`, the joint pick
(:func:`specband.deploy.jointpick.joint_pick`) over one batch size's row of the table, as a
:class:`~specband.deploy.answers.PowerLimitAnswer`. Beside :mod:`specband.deploy.recommend`
(which re-exports it and decides when it answers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specband.deploy.answers import PickOrigin, PowerLimitAnswer, TransferCheck
from specband.deploy.explain import unmeasured_note
from specband.deploy.jointpick import TableSource, joint_pick
from specband.engines.base import Engine, default_engine
from specband.sweeps.limit_table import BandWithinSpeedLoss

if TYPE_CHECKING:
    from specband.sweeps.limit_table import LimitTable
    from specband.sweeps.origin import DataOrigin

__all__ = ["power_limit_answer"]


def power_limit_answer(
    table: LimitTable,
    batch_size: int,
    *,
    selector: BandWithinSpeedLoss | None = None,
    draft_model: str | None = None,
    origin: DataOrigin | None = None,
    transfer: TransferCheck | None = None,
    engine: Engine | None = None,
) -> PowerLimitAnswer:
    """The answer with a limit from ``table`` (a sweep's or a folder's): the joint pick
    (:func:`specband.deploy.jointpick.joint_pick` over a :class:`~specband.deploy.jointpick.TableSource`)
    among the picks at every limit of the measured batch size nearest ``batch_size``.

    Args:
        table: the pick at every limit per batch size (:class:`~specband.sweeps.limit_table.LimitTable`).
        batch_size: the batch size asked for.
        selector: the rule (:class:`~specband.sweeps.limit_table.BandWithinSpeedLoss`; default:
            at :data:`~specband.core.limits.DEFAULT_MAX_SPEED_LOSS`).
        draft_model: the draft its flags carry.
        origin: what the data rests on (``None``: not known).
        transfer: the user's setup checked against ``origin`` (``None``: not checked); its
            warnings end the notes.
        engine: the engine its flags are for (``None``: the default engine).

    Raises:
        ArtifactError: a table without batch sizes.
    """

    selector = selector if selector is not None else BandWithinSpeedLoss()
    measured = table.measured_batch_size(batch_size)
    picks = tuple(sorted(table.picks[measured], key=lambda p: p.power_limit_w))
    joint = joint_pick(TableSource(table), batch_size, max_speed_loss=selector.max_speed_loss)
    chosen = next(p for p in picks if p.power_limit_w == joint.power_limit_w)
    shortfall = joint.shortfall
    notes = [unmeasured_note(batch_size, measured)] if measured != batch_size else []
    notes += [*table.power_notes(), *([shortfall] if shortfall else [])]
    return PowerLimitAnswer(
        batch_size=batch_size,
        measured_batch_size=measured,
        chosen=chosen,
        picks=picks,
        max_speed_loss=float(selector.max_speed_loss),
        band=table.band,
        provenance=table.provenance,
        engine=engine or default_engine(),
        draft_model=draft_model,
        origin=None if origin is None else PickOrigin(origin),
        transfer=transfer,
        notes=(*notes, *(() if transfer is None else transfer.warnings)),
    )
