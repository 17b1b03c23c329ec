"""The NumPy-free core of the ``lookup_table`` policy: reading its files and picking.

:class:`specband.policies.lookup_table.LookupTable` and the cold-fast path of
``specband recommend`` both use these functions, so they pick identically.

Files (see :mod:`specband.policies.lookup_table`): ``lookup_table/model.json`` (model card)
and the optional sidecar ``lookup_table/specband.json`` with ``action_mean_rewards``
(batch size -> action index -> observed mean reward).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specband.contract.actions import CONTRACT_SET, ActionSet, action_index
from specband.core.batchlist import nearest_batch_size
from specband.core.errors import ArtifactError, ConfigError, InvalidActionError
from specband.core.limits import is_finite_number, is_int
from specband.policies.files import SIDECAR_FILE, read_json
from specband.policies.registry import REGISTRY

__all__ = ["LookupFiles", "lookup_pick", "parse_action_means", "parse_lookup_table", "read_lookup_folder"]

NAME = "lookup_table"
ARTIFACT_FILE = REGISTRY[NAME].artifact_file


def _is_number(value: Any) -> bool:
    return is_finite_number(value)


def parse_lookup_table(
    table: Any, path: str | Path, action_set: ActionSet = CONTRACT_SET
) -> dict[int, tuple[int, float]]:
    """Validate a ``model.json`` object, its triples read against ``action_set`` (the
    folder's; the 19 contract actions by default).

    Returns:
        batch size -> (action index into ``action_set``, mean reward), sorted by batch size.

    Raises:
        ArtifactError: not a non-empty object keyed by positive batch sizes, an entry
            without ``config``/``mean_reward``, a ``config`` that is not in ``action_set``
            (after sglang's topk=1 canonicalisation), or a ``mean_reward`` that is not a
            finite number.
    """
    if not isinstance(table, dict) or not table:
        raise ArtifactError(
            f'{path}: expected a non-empty JSON object {{"<bs>": {{"config": [...], "mean_reward": ...}}}}'
        )
    picks: dict[int, tuple[int, float]] = {}
    for key, entry in table.items():
        text = str(key).strip()
        if not text.isdigit() or int(text) <= 0:
            raise ArtifactError(f"{path}: key {key!r} must be a batch size (a positive integer)")
        if not isinstance(entry, dict) or "config" not in entry or "mean_reward" not in entry:
            raise ArtifactError(f"{path}: entry {key!r} must be an object with 'config' and 'mean_reward'")
        config = entry["config"]
        if not isinstance(config, list) or len(config) != 3 or not all(is_int(v) for v in config):
            raise ArtifactError(
                f"{path}: entry {key!r}: 'config' must be [steps, topk, num_draft_tokens], got {config!r}"
            )
        try:
            idx = action_index((config[0], config[1], config[2]), action_set)
        except InvalidActionError as exc:
            raise ArtifactError(f"{path}: entry {key!r}: {exc}") from None
        mean = entry["mean_reward"]
        if not _is_number(mean):
            raise ArtifactError(f"{path}: entry {key!r}: 'mean_reward' must be a finite number, got {mean!r}")
        picks[int(text)] = (idx, float(mean))
    return dict(sorted(picks.items()))


def parse_action_means(
    value: Any, where: str | Path, action_set: ActionSet = CONTRACT_SET
) -> dict[int, dict[int, float]]:
    """Validate a sidecar's ``action_mean_rewards`` (batch size -> action index -> mean).

    Raises:
        ArtifactError: wrong types, an index outside ``action_set`` (0..18 for the contract)
            or a non-finite mean.
    """
    if not isinstance(value, dict):
        raise ArtifactError(f"{where}: 'action_mean_rewards' must be an object keyed by batch size")
    out: dict[int, dict[int, float]] = {}
    for key, row in value.items():
        if not str(key).isdigit() or int(key) <= 0 or not isinstance(row, dict):
            raise ArtifactError(f"{where}: 'action_mean_rewards' entry {key!r} must map a batch size to an object")
        means: dict[int, float] = {}
        for a, m in row.items():
            if not (str(a).isdigit() and int(a) < len(action_set)) or not _is_number(m):
                raise ArtifactError(
                    f"{where}: 'action_mean_rewards.{key}' entry {a!r}: {m!r} "
                    "is not an action index with a finite number"
                )
            means[int(a)] = float(m)
        out[int(key)] = means
    return out


@dataclass(frozen=True)
class LookupFiles:
    """What a ``lookup_table`` folder holds.

    Attributes:
        picks: batch size -> (action index, mean reward) from ``model.json``.
        means: batch size -> action index -> observed mean reward (from the sidecar; the
            ``model.json`` pick alone where the sidecar is absent).
        sidecar: the sidecar dict, or ``None``.
    """

    picks: Mapping[int, tuple[int, float]]
    means: Mapping[int, Mapping[int, float]]
    sidecar: Mapping[str, Any] | None


def read_lookup_folder(directory: str | Path, action_set: ActionSet = CONTRACT_SET) -> LookupFiles:
    """Read ``<directory>/lookup_table/model.json`` and its sidecar, if any, against
    ``action_set`` (the folder's: what its triples and indices are read into).

    Raises:
        ArtifactError: see :func:`parse_lookup_table` and :func:`parse_action_means`.
    """
    folder = Path(directory) / NAME
    picks = parse_lookup_table(read_json(folder / ARTIFACT_FILE), folder / ARTIFACT_FILE, action_set)
    sidecar_path = folder / SIDECAR_FILE
    sidecar = read_json(sidecar_path) if sidecar_path.is_file() else None
    if sidecar is not None and not isinstance(sidecar, dict):
        raise ArtifactError(f"{sidecar_path}: expected a JSON object")
    stored = (
        parse_action_means(sidecar["action_mean_rewards"], sidecar_path, action_set)
        if sidecar and "action_mean_rewards" in sidecar
        else {}
    )
    means: dict[int, dict[int, float]] = {}
    for bs, (idx, mean) in picks.items():
        row = dict(stored.get(bs, {}))
        row.setdefault(idx, mean)
        means[bs] = row
    return LookupFiles(picks, means, sidecar)


def lookup_pick(
    means: Mapping[int, Mapping[int, float]],
    batch_size: int,
    allowed: Iterable[int] | None = None,
    action_set: ActionSet = CONTRACT_SET,
) -> int:
    """The lookup table's pick: at the measured batch size nearest to ``batch_size``, the
    allowed action with the highest observed mean reward (ties: the lowest index); when no
    allowed action has a mean there, the lowest allowed index.

    Args:
        means: batch size -> action index -> mean reward.
        batch_size: requested batch size.
        allowed: allowed action indices (``None``: all of ``action_set``).
        action_set: the set the indices are into (the contract's 19 by default).

    Raises:
        ArtifactError: ``means`` is empty.
        ConfigError: ``allowed`` is empty.
    """

    row = means[nearest_batch_size(batch_size, means)]
    allowed_set = set(range(len(action_set))) if allowed is None else {int(a) for a in allowed}
    if not allowed_set:
        raise ConfigError("no action is allowed at this batch size: there is no successful data to pick from")
    candidates = [a for a in sorted(allowed_set) if a in row]
    if not candidates:
        return min(allowed_set)
    return max(candidates, key=lambda a: (row[a], -a))
