"""The held-out splits of a sweep (by repeat, by trial, or in-sample) and the provenance
labels of their rows; used by :mod:`specband.evaluation.holdout`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specband.core.errors import ConfigError
from specband.sweeps.dataset import Sweep, SweepRow

if TYPE_CHECKING:
    pass

__all__ = ["HELD_OUT", "HOLDOUT_KINDS", "IN_SAMPLE", "Split", "make_splits", "provenance_label", "resolve_holdout"]

#: Accepted ``holdout`` values; ``auto`` picks ``repeat``, else ``trial``, else ``none``.
HOLDOUT_KINDS: tuple[str, ...] = ("auto", "repeat", "trial", "none")
#: Label of in-sample results, printed wherever they are.
IN_SAMPLE = "in-sample"
HELD_OUT = "held-out"


# ----------------------------------------------------------------------------- splits
@dataclass(frozen=True)
class Split:
    """One train/held-out split.

    Attributes:
        name: ``"repeat=0"``, ``"trial=seed0"`` or ``"in-sample"``.
        train: the rows trained on.
        test: the rows scored (the same rows as ``train`` for the in-sample split).
    """

    name: str
    train: Sweep
    test: Sweep


def _usable(row: SweepRow) -> bool:
    return not row.is_agentic_trace


def _group_name(kind: str, value: Any) -> str:
    return f"{kind}={'null' if value is None else value}"


def resolve_holdout(sweep: Sweep, holdout: str) -> tuple[str, str]:
    """The holdout kind to use and why.

    Args:
        sweep: the data.
        holdout: one of :data:`HOLDOUT_KINDS`.

    Returns:
        ``(kind, reason)``: kind is ``repeat``, ``trial`` or ``none``.

    Raises:
        ConfigError: an unknown kind, or ``repeat``/``trial`` on data with fewer than two
            distinct values of that column (nothing could be held out).
    """
    if holdout not in HOLDOUT_KINDS:
        raise ConfigError(f"unknown holdout {holdout!r}; expected one of: {', '.join(HOLDOUT_KINDS)}")
    rows = [r for r in sweep.rows if _usable(r)]
    repeats = {r.repeat for r in rows}
    trials = {r.trial for r in rows}
    if holdout == "auto":
        if len(repeats) > 1:
            return "repeat", f"auto: the data has {len(repeats)} repeats"
        if len(trials) > 1:
            return "trial", f"auto: the data has no repeats but {len(trials)} trials"
        return "none", "auto: the data has a single repeat and trial, nothing can be held out"
    if holdout == "none":
        return "none", "requested"
    values = repeats if holdout == "repeat" else trials
    if len(values) < 2:
        only = next(iter(values)) if values else None
        shown = "null" if only is None else repr(only)
        raise ConfigError(
            f"--holdout {holdout}: every row has {holdout} {shown}, so nothing "
            f"can be held out by {holdout}; use "
            + ("--holdout trial or none" if holdout == "repeat" else "--holdout repeat or none")
        )
    return holdout, "requested"


def make_splits(sweep: Sweep, kind: str) -> list[Split]:
    """The splits of a resolved holdout kind (``repeat``, ``trial`` or ``none``), in order
    of first appearance of each group in the file (agentic trace rows dropped).

    Raises:
        ConfigError: an unknown kind.
    """
    data = sweep.subset(_usable)
    if kind == "none":
        return [Split(IN_SAMPLE, data, data)]
    if kind not in ("repeat", "trial"):
        raise ConfigError(f"unknown holdout kind {kind!r}; expected repeat, trial or none")
    key: Callable[[SweepRow], Any] = (lambda r: r.repeat) if kind == "repeat" else (lambda r: r.trial)
    groups = list(dict.fromkeys(key(r) for r in data.rows))

    def split_for(g: Any) -> Split:
        return Split(_group_name(kind, g), data.subset(lambda r: key(r) != g), data.subset(lambda r: key(r) == g))

    return [split_for(g) for g in groups]


# ----------------------------------------------------------------------------- labels
def _row_label(row: SweepRow) -> str:
    if row.provenance in ("simulated", "emulated"):
        return row.provenance
    if row.utilization_origin == "derived":
        return "derived"
    return "measured"


def provenance_label(rows: Sequence[SweepRow]) -> str:
    """``"measured"``, ``"derived"``, ``"simulated"`` or ``"emulated"`` when every row
    agrees, else e.g. ``"mixed: 3 measured, 1 derived"``; ``"none"`` for no rows.

    A row is simulated (``specband simulate``) or emulated (``specband sweep`` against
    ``specband emulate``) when its ``provenance`` says so, derived when its utilisation was
    derived (e.g. back-computed from a published reward), measured otherwise.
    """
    counts = Counter(_row_label(r) for r in rows)
    if not counts:
        return "none"
    if len(counts) == 1:
        return next(iter(counts))
    order = ("measured", "derived", "simulated", "emulated")
    return "mixed: " + ", ".join(f"{counts[k]} {k}" for k in order if counts[k])
