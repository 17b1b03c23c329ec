"""One config for a batch-size mix: the pick with the best expected reward when the
running batch size moves, and the regret of using it everywhere.

The mix comes from ``recommend --batch-mix 1:0.2,4:0.5,16:0.3`` (weights normalised) or
from sglang's Prometheus metrics text (``recommend --batch-mix-from FILE``): the samples of
the gauge ``sglang:num_running_reqs`` (sglang 0.5.23,
``srt/observability/metrics_collector.py``; one sample per scrape, so a file of
concatenated scrapes is a sample of the running batch size), or a histogram family of that
name. The text is parsed with ``prometheus_client``'s own parser. The pick is a
:class:`~specband.deploy.answers.MixPick`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from specband.contract.reward import BAND_HIGH, BAND_LOW
from specband.core.batchlist import normalise_mix
from specband.core.errors import ConfigError
from specband.core.limits import MAX_BATCH_SIZE, MAX_CONFIG_FILE_BYTES
from specband.deploy.answers import LeftOut, MixAnswer, MixPick, MixRow, PickOrigin
from specband.deploy.explain import data_notes, origin_line, pick_origin, unmeasured_note, unmeasured_notes
from specband.deploy.mixlimit import MixPowerLimitAnswer
from specband.engines.base import Engine, default_engine

if TYPE_CHECKING:
    from specband.artifacts.load import ModelFolder
    from specband.contract.actions import ActionSet
    from specband.deploy.tiers import PolicyScorer
    from specband.deploy.transfer import UserSetup
    from specband.sweeps.dataset import Sweep
    from specband.sweeps.limit_table import MixLimitRow
from specband.deploy.transfer import check_scorer_transfer, check_transfer
from specband.files.fileio import read_text_bounded
from specband.sweeps.limit_table import BandWithinSpeedLoss, mix_limit_picks, power_label_lines
from specband.sweeps.origin import data_origin

__all__ = [
    "RUNNING_REQS_METRIC",
    "mix_answer",
    "mix_power_limit_answer",
    "pick_for_mix",
    "read_running_requests",
]

#: sglang's gauge of running requests (the decode batch size), sglang 0.5.23.
RUNNING_REQS_METRIC = "sglang:num_running_reqs"


def read_running_requests(path: str | Path, metric: str = RUNNING_REQS_METRIC) -> dict[int, float]:
    """The running-batch-size mix in a Prometheus metrics text file.

    Gauge samples of ``metric`` count one observation each at their value rounded to an
    integer (per-priority breakdowns, ``priority`` label not empty, are skipped; 0 running
    requests is an idle server, not a batch size). A histogram of that name gives each
    bucket's count to its upper bound (the ``+Inf`` bucket's to the largest finite bound).

    Raises:
        ConfigError: unreadable file, text the parser rejects, no sample of ``metric`` or
            no non-zero batch size (the message names the file).
    """
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = read_text_bounded(path, limit=MAX_CONFIG_FILE_BYTES, kind="Prometheus metrics file", error=ConfigError)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--batch-mix-from {path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    counts: dict[int, float] = {}
    seen = False
    try:
        for family in text_string_to_metric_families(text):
            if family.name != metric:
                continue
            seen = True
            if family.type == "histogram":
                _add_histogram(
                    counts,
                    [(s.labels.get("le", ""), s.value) for s in family.samples if s.name.endswith("_bucket")],
                    f"--batch-mix-from {path}: {metric}",
                )
                continue
            for sample in family.samples:
                if sample.name == metric and not sample.labels.get("priority"):
                    value = sample.value
                    if not math.isfinite(value) or not 0 <= value <= MAX_BATCH_SIZE or value != int(value):
                        raise ConfigError(
                            f"--batch-mix-from {path}: {metric} sample {value!r} is not a batch size "
                            f"(a whole number of running requests, 0..{MAX_BATCH_SIZE})"
                        )
                    bs = round(sample.value)
                    if bs > 0:
                        counts[bs] = counts.get(bs, 0.0) + 1.0
    except ValueError as exc:
        raise ConfigError(f"--batch-mix-from {path}: not Prometheus text ({exc})") from None
    if not seen:
        raise ConfigError(
            f"--batch-mix-from {path}: no {metric} samples (scrape sglang's /metrics, started with --enable-metrics)"
        )
    if not counts:
        raise ConfigError(f"--batch-mix-from {path}: {metric} never shows a running request")
    return normalise_mix(counts, f"--batch-mix-from {path}")


def _add_histogram(counts: dict[int, float], buckets: list[tuple[str, float]], what: str) -> None:
    """Add a cumulative histogram's bucket counts to ``counts`` at each upper bound.

    Raises:
        ConfigError: a count that is negative or not finite, or buckets that are not
            cumulative (a count below the one of a smaller ``le``: read as a distribution, 10,
            5, 12 became a mix of 0.833 and 0.167, hostile trial B23).
    """
    finite = sorted(
        (float(le), v)
        for le, v in buckets
        if le not in ("+Inf", "inf", "") and math.isfinite(float(le)) and 0 <= float(le) <= MAX_BATCH_SIZE
    )
    total = max((v for le, v in buckets if le in ("+Inf", "inf")), default=None)
    previous = 0.0
    ordered = [*finite, *([(math.inf, total)] if total is not None else [])]
    for (le_low, low), (le_high, high) in zip([(0.0, 0.0), *ordered], ordered, strict=False):
        if not math.isfinite(high) or high < 0 or high < low:
            raise ConfigError(
                f"{what} bucket le={le_high:g} counts {high:g}, "
                + (f"fewer than le={le_low:g}'s {low:g}" if high < low else "not a count")
                + ": a Prometheus histogram's buckets are cumulative counts"
            )
    for le, cumulative in finite:
        bs = math.floor(le)
        if bs > 0 and cumulative > previous:
            counts[bs] = counts.get(bs, 0.0) + cumulative - previous
        previous = max(previous, cumulative)
    if finite and total is not None and total > previous and int(finite[-1][0]) > 0:
        bs = int(finite[-1][0])
        counts[bs] = counts.get(bs, 0.0) + total - previous


class Scorer(Protocol):
    """What :func:`pick_for_mix` asks (:class:`specband.deploy.tiers.PolicyScorer`)."""

    def scores_at(self, batch_size: int) -> tuple[int, np.ndarray]:
        """``(measured batch size used, (19,) estimated reward, NaN: not scored)``."""
        ...


def pick_for_mix(scorer: Scorer, mix: Mapping[int, float]) -> MixPick:
    """The action with the best expected estimated reward over ``mix`` among those scored
    at every batch size of it (ties: the lowest index), with each batch size's own pick.

    Args:
        scorer: a :class:`specband.deploy.tiers.PolicyScorer` (``scores_at(bs)``).
        mix: batch size -> weight (normalised, see :func:`normalise_mix`).

    Raises:
        ConfigError: no action is scored at every batch size of the mix.
    """
    rows = [(bs, w, *scorer.scores_at(bs)) for bs, w in sorted(mix.items())]
    matrix = np.vstack([scores for _, _, _, scores in rows])  # (n_bs, 19), NaN: not scored
    weights = np.array([w for _, w, _, _ in rows])
    common = [a for a in range(matrix.shape[1]) if not np.isnan(matrix[:, a]).any()]
    if not common:
        raise ConfigError(
            "no config is measured at every batch size of the mix; ask a model-based --algo, or a mix of "
            "measured batch sizes"
        )
    expected = {a: float(weights @ matrix[:, a]) for a in common}
    best = max(common, key=lambda a: (expected[a], -a))
    out = []
    for (bs, w, measured, _scores), row in zip(rows, matrix, strict=True):
        own = max((a for a in range(matrix.shape[1]) if not math.isnan(row[a])), key=lambda a: (row[a], -a))
        out.append(MixRow(bs, measured, float(w), own, float(row[own]), float(row[best])))
    left_out = tuple(
        LeftOut(
            a,
            tuple(r.batch_size for r in out if r.own_index == a),
            tuple(bs for (bs, *_), scores in zip(rows, matrix, strict=True) if np.isnan(scores[a])),
        )
        for a in sorted({r.own_index for r in out} - set(common))
    )
    return MixPick(best, expected[best], tuple(out), left_out)


def mix_answer(
    scorer: PolicyScorer,
    mix: Mapping[int, float],
    setup: UserSetup | None = None,
    *,
    state: tuple[float, float, float] | None = None,
    draft_model: str | None = None,
    allow: bool = False,
    engine: Engine | None = None,
) -> MixAnswer:
    """``recommend --batch-mix``'s answer (rule 2 of :func:`specband.deploy.recommend.answer`):
    the single config with the best expected reward over ``mix`` (:func:`pick_for_mix`), the
    user's ``setup`` checked against the data's first as ``recommend`` checks it
    (:func:`specband.deploy.transfer.check_scorer_transfer`; ``allow`` takes another setup's
    pick, its differences as notes; ``None``: not checked), the policy asked from ``state``;
    its flags are ``engine``'s (``None``: the default engine).

    Raises:
        ConfigError: no config is scored at every batch size of the mix; TransferError: the
        data is from another setup and ``allow`` is False.
    """
    import dataclasses

    transfer = None
    if setup is not None:  # before picking, as for one batch size: a refused transfer picks nothing
        transfer = check_scorer_transfer(scorer, setup, allow=allow)
    pick = pick_for_mix(dataclasses.replace(scorer, telemetry=state), mix)
    manifest = scorer.manifest
    origin = pick_origin(manifest, None)
    line = origin_line(origin)  # a one-batch-size pick's origin line, for the mix
    notes = (
        *scorer.notes,
        *(() if transfer is None else transfer.warnings),
        *data_notes(manifest, scorer.source, state),
        *unmeasured_notes(manifest, sorted(mix)),
        *(() if line is None else (line,)),
        *(left.note() for left in pick.left_out),
    )
    counts = {row.measured_batch_size: pick_origin(manifest, row.measured_batch_size).counts for row in pick.rows}
    return MixAnswer(
        algorithm=scorer.algorithm,
        source=scorer.source,
        mix=mix,
        pick=pick,
        engine=engine or default_engine(),
        draft_model=draft_model,
        notes=notes,
        transfer=transfer,
        origin=origin,
        counts={bs: c for bs, c in counts.items() if c is not None},
    )


def mix_power_limit_answer(
    sweep: Sweep,
    mix: Mapping[int, float],
    *,
    max_speed_loss: float,
    source: str,
    setup: UserSetup | None = None,
    draft_model: str | None = None,
    allow: bool = False,
    engine: Engine | None = None,
) -> MixPowerLimitAnswer:
    """``recommend --batch-mix --data SWEEP``'s answer when the sweep holds several power limits:
    per limit the mix's one config (:func:`specband.sweeps.limit_table.mix_limit_picks`), and
    among limits the selector's choice
    (:class:`~specband.sweeps.limit_table.BandWithinSpeedLoss`: the lowest limit whose mix
    config is within ``max_speed_loss`` of the fastest limit's and draws, averaged over the mix,
    inside the band). The user's setup is checked against the sweep's origin, the power limit
    not compared (it is the answer's lever).

    Raises:
        ConfigError: a bad ``max_speed_loss``; DataError: a limit at which no config is
        measured at every batch size of the mix; TransferError: another setup, not allowed.
    """
    import dataclasses

    selector = BandWithinSpeedLoss(max_speed_loss)
    origin = data_origin(sweep)
    transfer = None
    if setup is not None:
        transfer = check_transfer(origin, dataclasses.replace(setup, power_limit_w=None), allow=allow, source=source)
    at_limits = mix_limit_picks(sweep, mix)
    picks = tuple(m.pick for m in at_limits)
    chosen = selector.select(picks)
    rows = next(m.rows for m in at_limits if m.pick is chosen)
    band = (BAND_LOW, BAND_HIGH)
    shortfall = selector.shortfall(picks, chosen, band)
    trained = [r for r in sweep.rows if r.trainable]
    notes = (
        *unmeasured_mix_notes(rows),
        *power_label_lines(
            sum(1 for r in trained if r.raw.get("power_measured") is False),
            sorted({str(r.raw["power_source"]) for r in trained if r.raw.get("power_source")}),
        ),
        *([shortfall] if shortfall else []),
        *(() if transfer is None else transfer.warnings),
    )
    return MixPowerLimitAnswer(
        mix=mix,
        chosen=chosen,
        rows=rows,
        picks=picks,
        max_speed_loss=float(selector.max_speed_loss),
        band=band,
        provenance="+".join(sorted({r.provenance for r in trained})),
        engine=engine or default_engine(),
        draft_model=draft_model,
        origin=PickOrigin(origin),
        transfer=transfer,
        notes=notes,
    )


def unmeasured_mix_notes(rows: tuple[MixLimitRow, ...]) -> list[str]:
    """One note per batch size of a mix the sweep does not hold (answered at the nearest)."""
    return [unmeasured_note(r.batch_size, r.measured_batch_size) for r in rows if r.measured_batch_size != r.batch_size]


def mix_power_limit_for(
    data: str | Path | None,
    folder: ModelFolder | None,
    mix: Mapping[int, float],
    setup: UserSetup | None,
    *,
    max_speed_loss: float,
    action_set: ActionSet,
    draft_model: str | None = None,
    allow: bool = False,
    engine: Engine | None = None,
) -> MixPowerLimitAnswer | None:
    """A mix over data with several power limits (rule 2 of
    :func:`specband.deploy.recommend.answer`): one limit and one config for the whole mix
    (:func:`mix_power_limit_answer`), from the rows of a ``--data`` sweep without ``--models``,
    or of the sweep a ``--models`` folder trained over several limits was trained on (``data``,
    else the file its manifest names, when it is here unchanged); ``None`` for data over one
    limit (the policy answers the mix).

    Raises:
        ConfigError: a folder over several limits whose sweep is not here (or changed since).
    """
    from specband.artifacts.folder import file_sha256
    from specband.files.hub import resolve_data_file
    from specband.sweeps.dataset import load_sweep
    from specband.sweeps.limit_table import sweep_power_limits

    if folder is not None and not folder.manifest.power_limits:
        return None  # a folder over one limit: its policy answers the mix
    given = data
    if given is None:
        assert folder is not None and folder.manifest.power_limits is not None
        recorded = folder.manifest.data.sweep
        path = None if recorded is None or recorded.path is None else Path(recorded.path)
        limits = folder.manifest.power_limits.limits_w
        span = f"{min(limits):g}-{max(limits):g} W"
        if path is None or not path.is_file():
            raise ConfigError(
                f"{folder.given} was trained over several power limits ({span}); one limit for a batch-size mix is "
                f"chosen from its sweep's rows: give --data SWEEP (the file it was trained on, "
                f"{path if path is not None else 'not recorded'}, is not here)"
            )
        if recorded is not None and recorded.sha256 is not None and file_sha256(path) != recorded.sha256:
            raise ConfigError(
                f"{path} changed since {folder.given} was trained on it ({span}); give --data SWEEP for the mix's limit"
            )
        given = path
    sweep = load_sweep(resolve_data_file(given), action_set=action_set)
    if len(sweep_power_limits(sweep)) < 2:
        return None
    return mix_power_limit_answer(
        sweep, mix, max_speed_loss=max_speed_loss, source=str(folder.given if folder else given), setup=setup,
        draft_model=draft_model, allow=allow, engine=engine,
    )  # fmt: skip
