"""The one parser of batch-size lists given on the command line: ``--batch-sizes``
(``sweep``, ``simulate``, ``schedule``) and ``--batch-mix`` (``recommend``,
``schedule``, ``evaluate``), so that every command refuses the same lists the same way.

Items are separated by commas and/or spaces. A list is refused, naming the option, when
it is empty (``"<option>: empty"``), has an empty item (``1,,4``), an item that is not a
whole number (or, for a mix, not ``BATCH_SIZE:WEIGHT`` with a finite weight), a batch
size outside ``[1, MAX_BATCH_SIZE]`` (:data:`specband.core.limits.MAX_BATCH_SIZE`), or a batch
size given twice (naming it: a mix never adds two weights up silently).

Only the standard library is imported (a cold ``specband recommend`` stays fast).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping
from collections.abc import Set as AbstractSet

from specband.core.errors import ArtifactError, ConfigError
from specband.core.limits import MAX_BATCH_SIZE

__all__ = ["parse_batch_sizes", "parse_weighted_batch_sizes"]

_EXAMPLE = "e.g. '1,4,8,16'"
_MIX_EXAMPLE = "e.g. 1:0.2,4:0.5"


def _items(text: str, option: str, example: str) -> list[str]:
    """The items of ``text``; raises ConfigError for an empty list or an empty item."""
    stripped = text.strip()
    if not stripped:
        raise ConfigError(f"{option}: empty")
    items = re.split(r"\s*,\s*|\s+", stripped)
    if "" in items:
        raise ConfigError(f"{option}: empty entry in {text!r}, {example}")
    return items


def _batch_size(part: str, option: str, example: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", part):
        raise ConfigError(f"{option}: {part!r} is not a whole number, {example}")
    value = int(part)
    if not 1 <= value <= MAX_BATCH_SIZE:
        raise ConfigError(f"{option}: batch sizes must be in [1, {MAX_BATCH_SIZE}], got {value}")
    return value


def _once(value: int, seen: Collection[int], text: str, option: str) -> None:
    if value in seen:
        raise ConfigError(f"{option}: batch size {value} is given twice in {text!r}")


def parse_batch_sizes(text: str, option: str = "--batch-sizes") -> list[int]:
    """``"1,4,8,16"`` (commas and/or spaces) -> ``[1, 4, 8, 16]``, in the given order.

    Raises:
        ConfigError: as the module docstring says, naming ``option``.
    """
    sizes: list[int] = []
    for part in _items(text, option, _EXAMPLE):
        value = _batch_size(part, option, _EXAMPLE)
        _once(value, sizes, text, option)
        sizes.append(value)
    return sizes


def parse_weighted_batch_sizes(text: str, option: str = "--batch-mix") -> dict[int, float]:
    """``"1:0.2,4:0.5,16:0.3"`` -> ``{1: 0.2, 4: 0.5, 16: 0.3}`` (weights as given, not
    normalised; in the given order).

    Raises:
        ConfigError: as the module docstring says, or an item that is not
            ``BATCH_SIZE:WEIGHT`` with a finite weight, naming ``option``.
    """
    weights: dict[int, float] = {}
    for item in _items(text, option, _MIX_EXAMPLE):
        bs_text, sep, weight_text = item.partition(":")
        try:
            weight = float(weight_text)
        except ValueError:
            weight = math.nan
        if not sep or not re.fullmatch(r"[+-]?[0-9]+", bs_text) or not math.isfinite(weight):
            raise ConfigError(f"{option}: expected BATCH_SIZE:WEIGHT items ({_MIX_EXAMPLE}), got {item!r}")
        value = _batch_size(bs_text, option, _MIX_EXAMPLE)
        _once(value, weights, text, option)
        weights[value] = weight
    return weights


def check_batch_size_bound(value: str) -> str:
    """Refuse a batch-size list entry above :data:`~specband.core.limits.MAX_BATCH_SIZE` without
    converting a huge digit string (the option check of ``--batch-sizes``; the list's other
    rules are :func:`parse_batch_sizes`'s).

    Returns:
        ``value`` unchanged.

    Raises:
        ConfigError: naming the entry and the bound.
    """
    for part in value.replace(",", " ").split():
        digits = part.lstrip("+")
        if digits.isdigit() and (len(digits) > len(str(MAX_BATCH_SIZE)) or int(digits) > MAX_BATCH_SIZE):
            raise ConfigError(
                f"batch size {part} is above {MAX_BATCH_SIZE} (2**20), the largest batch size specband accepts"
            )
    return value


def normalise_mix(counts: Mapping[int, float], where: str) -> dict[int, float]:
    """Weights summing to 1, sorted by batch size; entries of weight 0 dropped.

    Raises:
        ConfigError: a negative or non-finite weight, or no positive weight (names ``where``).
    """
    if any(not math.isfinite(w) or w < 0 for w in counts.values()):
        raise ConfigError(f"{where}: weights must be finite and >= 0, got {dict(counts)}")
    total = sum(counts.values())
    if not math.isfinite(total):  # each finite, their sum not (1e308 + 1e308)
        raise ConfigError(
            f"{where}: the weights sum to more than a float holds; give relative weights (e.g. 1:0.5,4:0.5)"
        )
    if total <= 0:
        raise ConfigError(f"{where}: no batch size has a positive weight")
    return {bs: w / total for bs, w in sorted(counts.items()) if w > 0}


def parse_batch_mix(text: str) -> dict[int, float]:
    """``"1:0.2,4:0.5,16:0.3"`` -> ``{1: 0.2, 4: 0.5, 16: 0.3}``, normalised
    (:func:`specband.core.batchlist.parse_weighted_batch_sizes`: a batch size given twice is
    refused, naming it).

    Raises:
        ConfigError: an empty list, a malformed item, a batch size out of range or given
            twice, a bad weight, or no positive weight (``--batch-mix``).
    """
    return normalise_mix(parse_weighted_batch_sizes(text, "--batch-mix"), "--batch-mix")


def nearest_batch_size(batch_size: int, available: Iterable[int]) -> int:
    """The measured batch size closest to ``batch_size``; the larger on a tie (the more
    memory-constrained one), as :meth:`specband.sweeps.dataset.TrainingData.allowed_for`.

    A batch size found in a mapping or set (the callers' measured batch sizes) is answered
    without a scan: ``train`` asks for every measured batch size, and a scan each would be
    quadratic in their number (hostile trial N45).

    Raises:
        ArtifactError: ``available`` is empty.
    """
    if isinstance(available, (AbstractSet, Mapping)) and batch_size in available:
        return int(batch_size)
    choices = sorted({int(b) for b in available})
    if not choices:
        raise ArtifactError("no measured batch size to pick for")
    return min(choices, key=lambda b: (abs(b - batch_size), -b))
