"""The evaluation report's power-limit figure: per batch size, the speed and the energy per
token of the pick at each power limit, with the limits whose pick lands in the band shaded
and the limit ``recommend`` answers marked (``power_limits.png`` and ``power_limits.md``
beside ``report.md``, written when the sweep holds several limits).

The picks are the sweep's :class:`~specband.sweeps.limit_table.LimitTable` (the ``lookup_table``
rule at each limit) and the limit marked is :class:`~specband.sweeps.limit_table.BandWithinSpeedLoss`'s
choice, as ``recommend`` makes it; every number is a mean over the rows behind the pick, and
the figure says where those rows came from (measured, emulated, simulated) and, when their
power rests on no measurement, says that too.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specband.core.errors import ConfigError
from specband.sweeps.limit_table import BandWithinSpeedLoss, limit_table, nvidia_smi_command, speed_loss

if TYPE_CHECKING:
    from specband.sweeps.limit_table import LimitPick, LimitTable

__all__ = [
    "POWER_LIMIT_FIGURE",
    "POWER_LIMIT_NOTES",
    "PowerLimitCurves",
    "power_limit_curves",
    "power_limit_markdown",
    "write_power_limit_report",
]

POWER_LIMIT_FIGURE = "power_limits.png"
POWER_LIMIT_NOTES = "power_limits.md"


@dataclass(frozen=True)
class PowerLimitCurves:
    """Per batch size, the pick at every power limit and the limit recommended.

    Attributes:
        table: the pick at every limit per batch size (:class:`~specband.sweeps.limit_table.LimitTable`).
        chosen: batch size -> the pick at the limit recommended.
        max_speed_loss: the speed loss the choice accepted, fraction.
        source: where the rows came from, e.g. ``"simulated rows"``, plus the start of the
            power label when their power was not measured on this GPU.
        power_label: that label in full (:func:`specband.sim.power.unmeasured_power_note`).
    """

    table: LimitTable
    chosen: dict[int, LimitPick]
    max_speed_loss: float
    source: str
    power_label: str | None = None


def power_limit_curves(
    sweep: Any, max_speed_loss: float = 0.02, config: Any = None, power_label: str | None = None
) -> PowerLimitCurves:
    """The curves of every batch size of a sweep over several limits.

    Args:
        sweep: a :class:`~specband.sweeps.dataset.Sweep` over several ``power_limit_watts``.
        max_speed_loss: as :class:`~specband.sweeps.limit_table.BandWithinSpeedLoss`.
        config: the reward's constants (:func:`~specband.sweeps.limit_table.limit_table`).
        power_label: the caller's label when the rows' power rests on no measurement
            (:func:`specband.sim.power.unmeasured_power_note`), added to the source.

    Raises:
        ConfigError: ``max_speed_loss`` outside [0, 1); DataError: as
            :func:`~specband.sweeps.limit_table.limit_table` (one limit only, a batch size
            without rows at some limit).
    """

    selector = BandWithinSpeedLoss(max_speed_loss)
    table = limit_table(sweep, config)
    chosen = {bs: selector.select(picks) for bs, picks in table.picks.items()}
    source = f"{table.provenance} rows"
    if power_label:  # the label's headline, before its first '(' or ':' (the details are in power_limits.md)
        source += "; " + _headline(power_label) + " (see power_limits.md)"
    return PowerLimitCurves(table, chosen, selector.max_speed_loss, source, power_label)


def _headline(label: str) -> str:
    """``label`` up to its first ``(`` or ``:``, so that a cut never opens a parenthesis it
    does not close (``"power SIMULATED from a published fit"``)."""
    cut = min((i for i in (label.find("("), label.find(":")) if i >= 0), default=len(label))
    return label[:cut].rstrip(" ;,")


def power_limit_markdown(curves: PowerLimitCurves) -> str:
    """``power_limits.md``: one table per batch size (limit, pick, utilisation, speed, J/token)
    and the answer, with the rows' source."""
    lines = ["# Power limit and speculative flags, picked together", "", f"Source: {curves.source}.", ""]
    if curves.power_label:
        lines += [curves.power_label, ""]
    for bs, chosen in curves.chosen.items():
        picks = curves.table.picks[bs]
        lines += [
            f"## Batch size {bs}",
            "",
            f"Answer: `{nvidia_smi_command(chosen.power_limit_w)}` with {chosen.action}: "
            f"{'in' if chosen.in_band else 'NOT in'} the band, {speed_loss(picks, chosen):.1%} below the fastest pick "
            f"(bound {curves.max_speed_loss:.1%}).",
            "",
            "| limit W | pick | utilisation | in band | speed tok/s | J/token | runs |",
            "|---:|---|---:|---|---:|---:|---:|",
        ]
        for p in picks:
            util = "-" if p.utilization is None else f"{p.utilization:.3f}"
            jpt = "-" if p.joules_per_token is None else f"{p.joules_per_token:.4g}"
            lines.append(
                f"| {p.power_limit_w:g} | {p.action} | {util} | {'yes' if p.in_band else 'no'} | "
                f"{p.speed_tok_s:.4g} | {jpt} | {p.runs} |"
            )
        lines.append("")
    return "\n".join(lines)


def _figure(curves: PowerLimitCurves, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    sizes = list(curves.chosen)
    fig, axes = plt.subplots(2, len(sizes), figsize=(3.6 * len(sizes) + 0.6, 6.0), squeeze=False, sharex="col")
    for j, bs in enumerate(sizes):
        picks, chosen = curves.table.picks[bs], curves.chosen[bs]
        limits = [p.power_limit_w for p in picks]
        step = min((b - a for a, b in itertools.pairwise(limits)), default=1.0)
        for row, (attr, label) in enumerate((("speed_tok_s", "speed, tok/s"), ("joules_per_token", "energy, J/token"))):
            ax = axes[row][j]
            for p in picks:
                if p.in_band:
                    ax.axvspan(
                        p.power_limit_w - step / 2, p.power_limit_w + step / 2, color="tab:green", alpha=0.15, lw=0
                    )
            xs = [p.power_limit_w for p in picks if getattr(p, attr) is not None]
            ys = [getattr(p, attr) for p in picks if getattr(p, attr) is not None]
            ax.plot(xs, ys, marker="o", ms=3, color="tab:blue")
            ax.axvline(chosen.power_limit_w, color="tab:red", ls="--", lw=1)
            if row == 0:
                ax.set_title(f"bs {bs}: -pl {chosen.power_limit_w:g} W")
                if not any(p.in_band for p in picks):
                    ax.text(
                        0.5, 0.04, "no limit puts the pick in the band", transform=ax.transAxes, ha="center", fontsize=7
                    )
            if j == 0:
                ax.set_ylabel(label)
            if row == 1:
                ax.set_xlabel("power limit, W")
            ax.grid(alpha=0.3)
    lo, hi = curves.table.band
    fig.suptitle(
        f"pick at each power limit (shaded: the pick's utilisation is in the band {lo:.0%}-{hi:.0%}; "
        "dashed: the limit recommended)",
        fontsize=9,
    )
    import textwrap

    footer = "\n".join(textwrap.wrap(f"source: {curves.source}", int(fig.get_figwidth() * 16)))
    fig.text(0.005, 0.005, footer, ha="left", va="bottom", fontsize=7, color="dimgray")
    fig.tight_layout(rect=(0, (0.2 + 0.14 * (footer.count("\n") + 1)) / fig.get_figheight(), 1, 0.95))
    fig.savefig(path, dpi=110, format="png", metadata={"Source": f"source: {curves.source}"})
    plt.close(fig)


def write_power_limit_report(curves: PowerLimitCurves, out_dir: str | Path) -> list[Path]:
    """Write :data:`POWER_LIMIT_FIGURE` and :data:`POWER_LIMIT_NOTES` into ``out_dir`` (an
    existing report folder), each through a temporary file and an atomic rename.

    Returns:
        the written paths.

    Raises:
        ConfigError: the folder cannot be written.
    """
    out = Path(out_dir)
    written = []
    for name in (POWER_LIMIT_FIGURE, POWER_LIMIT_NOTES):
        try:
            fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=Path(name).suffix, dir=out)
            os.close(fd)
            tmp = Path(tmp_name)
            try:
                if name == POWER_LIMIT_FIGURE:
                    _figure(curves, tmp)
                else:
                    tmp.write_text(power_limit_markdown(curves), encoding="utf-8")
                os.replace(tmp, out / name)
            finally:
                if tmp.exists():
                    tmp.unlink()
        except OSError as exc:
            raise ConfigError(f"--out {out}: cannot write {name} ({exc.strerror})") from None
        written.append(out / name)
    return written
