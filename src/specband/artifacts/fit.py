"""Training orchestration: fit the policies on a sweep and describe the result in a
manifest (:class:`specband.artifacts.folder.Manifest`); the embedded default trained on the
bundled published measurements.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specband import __version__
from specband.artifacts.folder import (
    MANIFEST_FILE,
    DataRecord,
    Manifest,
    SweepRecord,
    file_sha256,
    load_manifest,
    validate_algorithms,
)
from specband.contract.actions import CONTRACT_SET, ActionSet
from specband.contract.reward import RewardConfig
from specband.contract.state import FEATURE_KINDS
from specband.core.errors import ArtifactError, ConfigError
from specband.policies import policy_class
from specband.policies.base import mean_reward_by_cell
from specband.sweeps.dataset import load_sweep
from specband.sweeps.limit_table import limit_table, sweep_power_limits
from specband.sweeps.origin import action_stats, data_origin

if TYPE_CHECKING:
    from specband.contract.reward import RewardConfig
    from specband.policies.base import Policy
    from specband.sweeps.dataset import Sweep, TrainingData
    from specband.sweeps.limit_table import LimitTable

__all__ = [
    "BUNDLED_DATA_LABEL",
    "at_highest_power_limit",
    "build_manifest",
    "compute_embedded_manifest",
    "embedded_policy",
    "representative_states",
    "split_power_limits",
    "train_policies",
]


def representative_states(data: TrainingData) -> dict[int, tuple[float, ...]]:
    """The state picks are made from at each batch size: the element-wise median of the
    training states there (upstream used one "representative" row's state, docs/FACTS.md §5).

    Returns:
        batch size -> 4 floats.
    """
    import numpy as np

    out: dict[int, tuple[float, ...]] = {}
    for bs in sorted(int(b) for b in np.unique(data.batch_sizes)):
        median = np.median(np.asarray(data.states[data.batch_sizes == bs], dtype=np.float64), axis=0)
        out[bs] = tuple(float(v) for v in median)
    return out


def build_manifest(
    data: TrainingData,
    algorithms: Sequence[str],
    *,
    seed: int | None,
    sweep: Sweep | None = None,
    reward_config: RewardConfig | None = None,
) -> Manifest:
    """The manifest of a folder trained on ``data`` (from ``sweep``, when known) with the
    reward constants ``reward_config`` (default: :class:`specband.contract.reward.RewardConfig`)."""
    import numpy as np

    if reward_config is None:
        reward_config = RewardConfig()

    cells = mean_reward_by_cell(data)
    origin = None if sweep is None else data_origin(sweep, sweep.power_limit_w)
    record = None
    if sweep is not None:
        assert origin is not None
        record = SweepRecord(
            path=sweep.path,
            format=sweep.format,
            sha256=file_sha256(sweep.path) if sweep.path and Path(sweep.path).is_file() else None,
            # simulated or emulated power is never "measured" (issue 18): energy in the rewards,
            # measured or not, is ``energy_in_rewards``
            energy_measured=sweep.energy_measured and origin.power_measured,
            energy_in_rewards=sweep.energy_measured,
            provenance=origin.provenance,
        )
    info = DataRecord(rows=len(sweep.rows) if sweep is not None else None, training_rows=len(data), sweep=record)
    return Manifest(
        features=data.features,
        action_set=data.action_set,
        seed=seed,
        algorithms=tuple(validate_algorithms(algorithms)),
        data=info,
        power_limit_w=None if sweep is None else sweep.power_limit_w,
        reward_config=reward_config,
        # a batch size where every config failed at least once has nothing to pick from
        allowed={
            bs: tuple(int(a) for a in np.flatnonzero(mask)) for bs, mask in sorted(data.allowed.items()) if np.any(mask)
        },
        states=representative_states(data),
        mean_rewards={bs: {int(a): float(m[a]) for a in np.flatnonzero(c)} for bs, (m, c) in cells.items()},
        row_counts={bs: {int(a): int(c[a]) for a in np.flatnonzero(c)} for bs, (_, c) in cells.items()},
        specband_version=__version__,
        origin=origin,
        stats={} if sweep is None else action_stats(sweep, sweep.power_limit_w),
    )


def train_policies(
    data: TrainingData,
    algorithms: Sequence[str] | None = None,
    *,
    seed: int = 0,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    on_done: Callable[[str, float], None] | None = None,
) -> dict[str, Policy]:
    """Fit each algorithm on ``data`` with ``seed`` (the same seed gives the same artifacts).

    Args:
        data: logged training data.
        algorithms: names (default all eight).
        seed: training seed.
        overrides: per algorithm, config overrides (see each policy's config).
        on_done: called with (name, seconds) after each fit.

    Raises:
        ConfigError: an unknown algorithm or setting.
        DataError: no rows.
    """
    names = validate_algorithms(algorithms)
    out: dict[str, Policy] = {}
    for name in names:
        start = time.perf_counter()
        policy = policy_class(name).from_config(seed=seed, **dict((overrides or {}).get(name, {})))
        out[name] = policy.fit(data)
        if on_done is not None:
            on_done(name, time.perf_counter() - start)
    return out


#: The ``data.path`` recorded for the bundled published measurements.
BUNDLED_DATA_LABEL = "bundled:rtx4060_published_live.jsonl"


def compute_embedded_manifest(features: str = "pre") -> dict[str, Any]:
    """The manifest (as JSON) of a ``lookup_table`` trained on the bundled published
    measurements: what :data:`specband.policies.embedded.EMBEDDED_MANIFEST` ships, so that
    ``specband recommend`` works before any ``train`` without loading NumPy."""

    sweep = load_sweep(None)
    data = sweep.training_data(features)
    obj = build_manifest(data, ["lookup_table"], seed=0, sweep=sweep).to_json()
    obj["data"]["path"] = BUNDLED_DATA_LABEL
    obj["specband_version"] = None
    return obj


def embedded_policy(name: str = "lookup_table", *, seed: int = 0, features: str = "pre") -> tuple[Policy, Manifest]:
    """A policy trained on the bundled published measurements (the default before any
    ``specband train``) and its manifest.

    Raises:
        ConfigError: an unknown algorithm or feature kind.
    """

    validate_algorithms([name])
    if features not in FEATURE_KINDS:
        raise ConfigError(f"features must be one of {FEATURE_KINDS}, got {features!r}")
    sweep = load_sweep(None)
    data = sweep.training_data(features)
    policy = policy_class(name).from_config(seed=seed).fit(data)
    return policy, build_manifest(data, [name], seed=seed, sweep=sweep)


def data_policy(
    name: str, data: str | Path, *, action_set: ActionSet = CONTRACT_SET, seed: int = 0, features: str = "pre"
) -> tuple[Policy, Manifest]:
    """A policy trained in memory on the sweep ``data`` (``recommend --data FILE`` without
    ``--models``: the answer comes from the data the user named, not from the embedded study
    policy, hostile trial N28) and its manifest; a sweep over several power limits is trained on
    its highest limit's rows, as ``train`` does.

    Raises:
        ConfigError: an unknown algorithm; DataError: the sweep cannot be read.
    """
    validate_algorithms([name])
    sweep, _ = at_highest_power_limit(load_sweep(data, action_set=action_set))
    training = sweep.training_data(features)
    policy = policy_class(name).from_config(seed=seed).fit(training)
    return policy, build_manifest(training, [name], seed=seed, sweep=sweep)


def check_out_folder(out: str | Path, sweep: Sweep, *, force: bool = False, data_label: str | None = None) -> None:
    """Refuse to replace a specband folder trained on other data (``train --out``), checked
    before training: its manifest's data sha256 (else path) differs from ``sweep``'s.

    Args:
        out: the ``--out`` folder.
        sweep: the data about to be trained on.
        force: ``train --force``: replace it anyway.
        data_label: how the user named the data (default: the sweep's path).

    Raises:
        ConfigError: one line naming the folder, the data it was trained on and ``--force``.
    """

    folder = Path(out)
    if force or not (folder / MANIFEST_FILE).is_file():
        return
    try:
        old = load_manifest(folder, sweep.action_set).data
    except ArtifactError:
        return  # an unreadable manifest: save_artifacts decides
    new_sha = file_sha256(sweep.path) if sweep.path and Path(sweep.path).is_file() else None
    recorded = old.sweep or SweepRecord()
    old_sha, old_path = recorded.sha256, recorded.path
    same = old_sha == new_sha if old_sha and new_sha else old_path is not None and str(old_path) == str(sweep.path)
    if same:
        return
    rows = old.rows
    provenance = recorded.provenance
    what = (
        f"{old_path or 'unknown data'}"
        + (f" ({rows} rows" if rows is not None else "")
        + (f", {provenance})" if provenance and rows is not None else (")" if rows is not None else ""))
    )
    raise ConfigError(
        f"{folder}: already holds policies trained on other data ({what}), not on "
        f"{data_label or sweep.path or 'these rows'}; training would replace them: pass --force to replace "
        f"them, or choose another --out"
    )


def at_highest_power_limit(sweep: Sweep, verb: str = "train") -> tuple[Sweep, str | None]:
    """The rows at the highest power limit of a sweep over several limits (the 19-action
    policies' data: the GPU at its default, as swept), with a note saying so; a sweep with
    one limit is returned as it is, with no note.

    Args:
        sweep: the sweep.
        verb: what the policies do with the rows (``"train"``, ``"are evaluated"``), for the note.
    """

    limits = sweep_power_limits(sweep)
    if len(limits) < 2:
        return sweep, None
    top = limits[-1]
    kept = sweep.subset(lambda r: r.power_limit_watts == top or r.power_limit_watts is None)
    note = (
        f"the sweep holds {len(limits)} power limits ({limits[0]:g}-{top:g} W): the policies {verb} on the rows at "
        f"{top:g} W; the pair (limit, flags) is picked at every limit (recommend answers with a limit)"
    )
    return kept, note


def split_power_limits(sweep: Sweep) -> tuple[Sweep, LimitTable | None, str | None]:
    """A sweep over several power limits, split for ``specband train``: the policies train on
    the rows at the highest limit (:func:`at_highest_power_limit`) and the manifest records the
    pick at every limit (:func:`specband.sweeps.limit_table.limit_table`), from which
    ``recommend --models DIR`` answers with a limit.

    Returns:
        ``(sweep to train on, its LimitTable or None, note or None)``; a sweep with one
        limit is returned as it is.

    Raises:
        DataError: as :func:`specband.sweeps.limit_table.limit_table` (a batch size without a
            successful row at some limit).
    """

    kept, note = at_highest_power_limit(sweep)
    if note is None:
        return sweep, None, None
    return kept, limit_table(sweep), note
