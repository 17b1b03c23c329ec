"""``recommend``'s and ``launch``'s answer when the data holds several power limits: the
limit (and its ``nvidia-smi -pl`` command) and the flags at it, with the data's origin and
the user's setup checked against it (:mod:`specband.deploy.transfer`); the decision itself is
:func:`specband.sweeps.limit_table.recommend_power_limit`. Split from :mod:`specband.deploy.recommend`
(the one-limit pick), which it reads the request of. Only the standard library is imported
at module level: a cold ``recommend`` without ``--data``/``--models`` loads none of the
power-limit code.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specband.deploy.answers import PowerLimitPick
    from specband.deploy.recommend import RecommendRequest
    from specband.deploy.transfer import UserSetup
    from specband.sweeps.limit_table import PowerLimitRecommendation

__all__ = [
    "folder_power_limits",
    "power_limit_pick",
    "power_limit_recommendation",
    "power_limit_summary",
    "power_limit_with_origin",
    "power_limits_of_file",
]


def power_limit_pick(decided: PowerLimitRecommendation, draft_model: str | None = None) -> PowerLimitPick:
    """The answer of ``recommend`` when the data holds several power limits (its
    ``to_json()`` is what ``--format json`` prints): the limit and its command, the flags,
    and the pick at every limit (:meth:`specband.deploy.answers.PowerLimitPick.of`)."""
    from specband.deploy.answers import PowerLimitPick

    return PowerLimitPick.of(decided, draft_model)


def power_limit_summary(decided: PowerLimitRecommendation) -> str:
    """One line saying what the chosen limit does against the default, with where the data
    came from (``recommend`` prints it beside the ``nvidia-smi -pl`` line)."""
    chosen, default = decided.chosen, decided.default

    def pct(value: float | None) -> str:
        return "?" if value is None else f"{value:.1%}"

    def jpt(value: float | None) -> str:
        return "?" if value is None else f"{value:.4g} J/token"

    band = f"{decided.band[0]:.0%}-{decided.band[1]:.0%}"
    return (
        f"power limit {chosen.power_limit_w:g} W (default as swept: {default.power_limit_w:g} W): "
        f"pick {chosen.action} at {pct(chosen.utilization)} of the limit "
        f"({'in' if chosen.in_band else 'NOT in'} the band {band}); {chosen.speed_tok_s:.4g} tok/s, "
        f"{decided.speed_loss:.1%} below the fastest pick (bound {decided.max_speed_loss:.1%}); "
        f"energy {jpt(chosen.joules_per_token)} vs {jpt(default.joules_per_token)} at {default.power_limit_w:g} W "
        f"(utilisation there {pct(default.utilization)}); from {decided.provenance} rows"
    )


def power_limits_of_file(path: str | Path) -> tuple[float, ...]:
    """The distinct ``power_limit_watts`` of a sweep file's rows (read through the bounded
    sweep reader; a hub id is resolved first), increasing."""
    from specband.files.hub import resolve_data_file
    from specband.sweeps.dataset import load_sweep
    from specband.sweeps.limit_table import sweep_power_limits

    return sweep_power_limits(load_sweep(resolve_data_file(path)))


def folder_power_limits(models: str | Path) -> dict[str, Any] | None:
    """The ``power_limits`` of a specband folder's manifest (a folder trained on a sweep over
    several limits), or ``None`` (one limit, a foreign folder, no manifest).

    Raises:
        ArtifactError: an unreadable or invalid manifest; HubError: a hub id not found.
    """
    from specband.artifacts.folder import MANIFEST_FILE, load_manifest
    from specband.files.hub import resolve_folder

    folder = Path(resolve_folder(models))
    if not (folder / MANIFEST_FILE).is_file():
        return None
    table = load_manifest(folder).power_limits
    return None if table is None else dict(table)


def power_limit_recommendation(
    request: RecommendRequest, setup: UserSetup | None = None
) -> PowerLimitRecommendation | None:
    """``recommend``'s answer with a power limit, when there is one to give: ``--data SWEEP``
    (without ``--models``) over several limits, or ``--models DIR`` trained on several
    (its manifest's ``power_limits``); ``None`` otherwise (the ordinary pick).

    Raises:
        DataError, ArtifactError, HubError, ConfigError: as the sweep or folder reading and
            :func:`~specband.sweeps.limit_table.recommend_power_limit`.
    """
    if request.batch_size is None or (request.data is None and request.models is None):
        return None  # the embedded default holds one limit (and the power-limit code is not imported)
    from specband.sweeps.limit_table import recommend_power_limit, recommend_power_limit_from_table, sweep_power_limits

    if request.data is not None and request.models is None:
        from specband.files.hub import resolve_data_file
        from specband.sweeps.dataset import load_sweep

        sweep = load_sweep(resolve_data_file(request.data))
        if len(sweep_power_limits(sweep)) < 2:
            return None
        from specband.sweeps.origin import data_origin

        decided = recommend_power_limit(sweep, request.batch_size, max_speed_loss=request.max_speed_loss)
        return power_limit_with_origin(decided, data_origin(sweep), str(request.data), setup, request.allow_transfer)
    if request.models is not None:
        table = folder_power_limits(request.models)
        if table is not None:
            from specband.artifacts.folder import load_manifest
            from specband.files.hub import resolve_folder

            decided = recommend_power_limit_from_table(table, request.batch_size, max_speed_loss=request.max_speed_loss)
            origin = load_manifest(resolve_folder(request.models)).origin
            return power_limit_with_origin(decided, origin, str(request.models), setup, request.allow_transfer)
    return None


def power_limit_with_origin(
    decided: PowerLimitRecommendation,
    origin: Any,
    source: str,
    setup: UserSetup | None,
    allow_transfer: bool,
) -> PowerLimitRecommendation:
    """The answer with a limit, with the data's origin (``origin``: a
    :class:`~specband.sweeps.origin.DataOrigin` or ``None``) and the user's ``setup`` checked
    against it (:func:`specband.deploy.transfer.check_transfer`; the power limit is not compared:
    it is the answer's lever). ``setup`` ``None``: the origin only.

    Raises:
        TransferError: the data is from another setup and ``allow_transfer`` is False.
    """
    import dataclasses

    from specband.deploy.transfer import check_transfer

    fields = None if origin is None else {**origin.to_json(), "heldout_interval": None}
    if setup is None:
        return dataclasses.replace(decided, origin=fields)
    checked = check_transfer(
        origin, dataclasses.replace(setup, power_limit_w=None), allow=allow_transfer, source=source
    )
    return dataclasses.replace(
        decided, origin=fields, transfer=checked.to_json(), notes=(*decided.notes, *checked.warnings)
    )
