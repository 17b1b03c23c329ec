"""The simulator held to published measurements on datacenter GPUs
(``specband simulate --calibration-report --against published-datacenter``).

Reference: ``specband/data/published_datacenter.json``, copied from
``published_datacenter.md`` (SpecForge SpecBundle on H200, the EAGLE-3 paper on H100,
ML.ENERGY Leaderboard v3 on H100, a pure-decode power study on H200); every row names its
source and how it was measured. The Llama-3.1-8B pair is simulated with the bundled configs
(``llama-3.1-8b-instruct``, ``eagle3-llama-3.1-8b-instruct``: the EAGLE-3 paper's head, the same
shape as the lmsys head SpecBundle measured) and the acceptance profile of
:mod:`specband.sim.acceptance`, at the profile's ``reference_temp_c``.

Metrics of a row and what is simulated for it:

* ``speed_tok_s``: per-request decode speed (``RunPrediction.speed_tok_s``);
* ``accept_length``: expected accept length;
* ``speedup``: speed of the action over the baseline's at the same batch size (the paper's
  throughput ratio; at a fixed batch size the two are the same ratio);
* ``serving_power_w``: serving power with prefill mixed in, under the GPU's default limit
  (:func:`specband.sim.serving.serving_estimate`, the default chat workload) at ``batch_size`` =
  vLLM's ``max_num_seqs``; rows whose ``role`` is ``"held-out"`` were seen by no fit and must
  be within :data:`TOLERANCE`;
* ``decode_power_w``: a published *range*; the simulated decode power (:meth:`decode_power_w`)
  of the baseline at each of ``batch_sizes`` and of every contract action (and (7,1,8)) at each
  of ``spec_batch_sizes`` must lie inside it.

Rows with ``criteria: false`` are printed with their reason and not simulated. The
acceptance criteria (issue 19): every bundled speed, speed-up and accept length within
:data:`TOLERANCE`; the chain/tree ordering of the H200 rows at bs 1 kept; the decode power
inside the published range. :func:`calibration_errors` gives the per-metric median and worst
error of a profile for other modules (a first guess on a named GPU quotes it).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from specband.contract.actions import ACTIONS, Action
from specband.core.errors import ConfigError
from specband.core.tables import text_table, wrap_lines
from specband.sim.model import SpeculativeDecodingModel, build_model
from specband.sim.profile import HardwareProfile, load_profile
from specband.sim.published_rows import DRAFT_CONFIG, TARGET_CONFIG, PublishedRow, load_published_reference
from specband.sim.serving import serving_estimate

__all__ = [
    "DRAFT_CONFIG",
    "REFERENCE_NAME",
    "TARGET_CONFIG",
    "TOLERANCE",
    "MetricError",
    "PublishedComparison",
    "PublishedReport",
    "PublishedRow",
    "calibration_errors",
    "format_published_report",
    "load_published_reference",
    "published_report",
    "simulate_row",
]

#: The ``--against`` name of the reference.
REFERENCE_NAME = "published-datacenter"
#: Largest |simulated / measured - 1| of a speed, speed-up or accept length (issue 19).
TOLERANCE = 0.10
#: Measured speeds closer than this (relative) are a tie for the ordering criterion: SpecBundle's
#: (7,1,8) and (5,1,6) differ by 0.2 %, well inside run-to-run noise.
ORDER_TIE = 0.05
_CRITERIA_METRICS = ("speed_tok_s", "accept_length", "speedup")


def _model(profile: str | HardwareProfile, workload: str | None) -> SpeculativeDecodingModel:

    wl = workload if workload in ("mt-bench", None) else None  # serving prompts: the pair's default
    return build_model(profile, target_config=TARGET_CONFIG, draft_config=DRAFT_CONFIG, workload=wl)


def simulate_row(row: PublishedRow, profile: str | HardwareProfile | None = None) -> float | tuple[float, float] | None:
    """The simulated counterpart of a published row.

    Args:
        row: the row.
        profile: the hardware profile to simulate (default: the row's).

    Returns:
        a number; ``(lowest, highest)`` W for a ``decode_power_w`` range row; ``None`` for a
        row that is not simulated (``criteria`` false).
    """
    if not row.criteria or row.profile is None:
        return None

    model = _model(profile if profile is not None else row.profile, row.workload)
    temp = model.profile.reference_temp_c
    if row.metric == "decode_power_w":
        points = [(bs, Action(0, 0, 0)) for bs in row.batch_sizes]
        points += [(bs, action) for bs in row.spec_batch_sizes for action in (*ACTIONS, Action(7, 1, 8))]
        powers = [model.decode_power_w(bs, action) for bs, action in points if model.fits(bs, action)]
        return min(powers), max(powers)
    assert row.action is not None and row.batch_size is not None
    bs = int(row.batch_size)
    if row.metric == "serving_power_w":
        return serving_estimate(model, bs, row.action).power_w
    pred = model.predict(bs, row.action, temp)
    if row.metric == "speed_tok_s":
        return pred.speed_tok_s
    if row.metric == "accept_length":
        return pred.accept_length
    if row.metric == "speedup":
        return pred.speed_tok_s / model.predict(bs, Action(0, 0, 0), temp).speed_tok_s
    raise ConfigError(f"published_datacenter.json: row {row.id}: unknown metric {row.metric!r}")


@dataclass(frozen=True)
class PublishedComparison:
    """A published row beside its simulation.

    Attributes:
        row: the published row.
        simulated: the simulated value (``(low, high)`` for a range row; ``None``: not simulated).
        error: ``simulated / measured - 1`` (``None`` for range rows and unsimulated rows).
        within: whether the row meets its criterion (``None`` when it has none).
    """

    row: PublishedRow
    simulated: float | tuple[float, float] | None
    error: float | None
    within: bool | None


@dataclass(frozen=True)
class MetricError:
    """Median and worst |relative error| of one metric over a profile's criteria rows."""

    metric: str
    rows: int
    median_abs_error: float
    worst_abs_error: float


@dataclass(frozen=True)
class PublishedReport:
    """The comparison of every row, the per-metric errors and the criteria.

    Attributes:
        comparisons: one per row, in file order.
        errors: per (profile, metric) :class:`MetricError`.
        ordering: per profile, ``(measured order, simulated order, kept)`` of the bs-1 rows'
            actions by speed.
        met: whether every criterion holds.
    """

    comparisons: tuple[PublishedComparison, ...]
    errors: dict[tuple[str, str], MetricError]
    ordering: dict[str, tuple[tuple[Action, ...], tuple[Action, ...], bool]]
    met: bool


def _compare(row: PublishedRow, profile: str | HardwareProfile | None) -> PublishedComparison:
    sim = simulate_row(row, profile)
    if sim is None:
        return PublishedComparison(row, None, None, None)
    if isinstance(sim, tuple):
        assert row.range is not None
        return PublishedComparison(row, sim, None, row.range[0] <= sim[0] and sim[1] <= row.range[1])
    assert row.value is not None
    error = sim / row.value - 1.0
    held_out_power = row.metric == "serving_power_w" and row.role == "held-out"
    within = abs(error) <= TOLERANCE if row.metric in _CRITERIA_METRICS or held_out_power else None
    return PublishedComparison(row, sim, error, within)


def _errors(comparisons: Sequence[PublishedComparison]) -> dict[tuple[str, str], MetricError]:
    groups: dict[tuple[str, str], list[float]] = {}
    for c in comparisons:
        if c.error is not None and c.row.profile is not None:
            groups.setdefault((c.row.profile, c.row.metric), []).append(abs(c.error))
    return {key: MetricError(key[1], len(v), statistics.median(v), max(v)) for key, v in sorted(groups.items())}


def _ordering(
    comparisons: Sequence[PublishedComparison],
) -> dict[str, tuple[tuple[Action, ...], tuple[Action, ...], bool]]:
    out: dict[str, tuple[tuple[Action, ...], tuple[Action, ...], bool]] = {}
    by_profile: dict[str, list[PublishedComparison]] = {}
    for c in comparisons:
        r = c.row
        if r.metric == "speed_tok_s" and r.batch_size == 1 and c.error is not None and r.action and r.profile:
            by_profile.setdefault(r.profile, []).append(c)
    for name, rows in by_profile.items():
        if len(rows) < 3:
            continue
        measured = tuple(c.row.action for c in sorted(rows, key=lambda c: -(c.row.value or 0.0)) if c.row.action)
        simulated = tuple(c.row.action for c in sorted(rows, key=lambda c: -float(c.simulated)) if c.row.action)  # type: ignore[arg-type]
        kept = all(
            (float(a.simulated) > float(b.simulated)) == ((a.row.value or 0.0) > (b.row.value or 0.0))  # type: ignore[arg-type]
            for a in rows
            for b in rows
            if a is not b and abs((a.row.value or 0.0) / (b.row.value or 1.0) - 1.0) > ORDER_TIE
        )
        out[name] = (measured, simulated, kept)
    return out


def published_report(profile: str | HardwareProfile | None = None) -> PublishedReport:
    """Simulated vs published for every bundled row.

    Args:
        profile: simulate every row on this profile instead of the row's own (a what-if:
            e.g. a refitted profile file); ``None``: each row on its own profile.

    Raises:
        ConfigError: a bad profile.
    """
    comparisons = tuple(_compare(row, profile) for row in load_published_reference())
    ordering = _ordering(comparisons)
    met = all(c.within is not False for c in comparisons) and all(kept for _m, _s, kept in ordering.values())
    return PublishedReport(comparisons, _errors(comparisons), ordering, met)


def calibration_errors(profile: str) -> dict[str, MetricError]:
    """Per-metric median/worst |relative error| of a built-in profile against the published
    rows measured on its GPU (empty when none were: the profile is not held to any).

    Args:
        profile: a built-in profile name (``h100-sxm``, ``h200``, ...).

    Returns:
        metric name (``speed_tok_s``, ``accept_length``, ``speedup``, ``serving_power_w``) ->
        :class:`MetricError` (fractions: 0.05 = 5 %).
    """
    name = load_profile(profile).name
    report = published_report()
    return {metric: err for (prof, metric), err in report.errors.items() if prof == name}


def _fmt_action(action: Action | None) -> str:
    return "-" if action is None else ("baseline" if action.is_baseline else str(action))


_PUBLISHED_HEADERS = ("row", "profile", "bs", "action", "metric", "measured", "simulated", "error")


def format_published_report(report: PublishedReport, width: int | None = None) -> str:
    """The report as text: a line per row, the per-metric errors, the ordering and the
    criteria; within ``width`` columns when given (:mod:`specband.core.tables`)."""

    h = _PUBLISHED_HEADERS
    lines = [
        "SIMULATED vs PUBLISHED (datacenter GPUs): every row names its source; simulated = specband.sim",
        f"{h[0]:34} {h[1]:9} {h[2]:>4} {h[3]:9} {h[4]:16} {h[5]:>13} {h[6]:>15} {h[7]:>7}",
    ]
    if width is not None:
        lines.pop()
    cells: list[list[str]] = []
    for c in report.comparisons:
        r = c.row
        bs = "-" if r.batch_size is None else str(r.batch_size)
        if r.range is not None:
            measured = f"{r.range[0]:g}-{r.range[1]:g}"
        else:
            measured = "-" if r.value is None else f"{r.value:g}"
        if c.simulated is None:
            sim, err = "not simulated", ""
        elif isinstance(c.simulated, tuple):
            sim, err = f"{c.simulated[0]:.0f}-{c.simulated[1]:.0f}", "inside" if c.within else "OUTSIDE"
        else:
            sim, err = f"{c.simulated:.3f}", f"{100 * (c.error or 0.0):+.1f}%"
        note = f"({r.note})" if c.simulated is None and r.note else ""
        if width is not None:
            cells.append([r.id, r.profile or "-", bs, _fmt_action(r.action), r.metric, measured, f"{sim} {note}", err])
            continue
        lines.append(
            f"{r.id:34} {r.profile or '-':9} {bs:>4} {_fmt_action(r.action):9} {r.metric:16} {measured:>13} "
            f"{sim:>15} {err:>7}"
        )
        if note:
            lines.append(f"{'':34}   {note}")
    if width is not None:
        lines += text_table(_PUBLISHED_HEADERS, [[cell.strip() for cell in row] for row in cells], width)
    lines.append("")
    lines.append("errors (|simulated / measured - 1|):")
    for (prof, metric), e in report.errors.items():
        lines.append(
            f"  {prof:9} {metric:16} {e.rows:2} rows: median {100 * e.median_abs_error:.1f} %, "
            f"worst {100 * e.worst_abs_error:.1f} %"
        )
    everything = [abs(c.error) for c in report.comparisons if c.error is not None and c.row.metric in _CRITERIA_METRICS]
    if everything:
        lines.append(
            f"  all speeds, speed-ups and accept lengths ({len(everything)} rows): median "
            f"{100 * statistics.median(everything):.1f} %, worst {100 * max(everything):.1f} %"
        )
    for role, what in (("fit", "the serving fit used"), ("held-out", "held out from every fit")):
        errs = [
            abs(c.error)
            for c in report.comparisons
            if c.error is not None and c.row.metric == "serving_power_w" and c.row.role == role
        ]
        if errs:
            lines.append(
                f"  serving power, rows {what} ({len(errs)}): median {100 * statistics.median(errs):.1f} %, "
                f"worst {100 * max(errs):.1f} %"
            )
    lines.append("")
    for prof, (order_measured, order_simulated, kept) in report.ordering.items():
        lines.append(
            f"ordering by speed at bs 1 on {prof}: measured {' > '.join(_fmt_action(a) for a in order_measured)}; "
            f"simulated {' > '.join(_fmt_action(a) for a in order_simulated)} [{'kept' if kept else 'NOT kept'}]"
        )
    bad = [c.row.id for c in report.comparisons if c.within is False]
    verdict = "met" if report.met else "NOT met: " + ", ".join(bad)
    lines.append(
        f"criteria (speeds, speed-ups, accept lengths and held-out serving powers within {100 * TOLERANCE:.0f} %; "
        f"bs-1 ordering; decode power inside the published range): {verdict}"
    )
    return "\n".join(wrap_lines(lines, width))
