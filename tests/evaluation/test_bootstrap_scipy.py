"""`bootstrap_interval` runs on scipy.stats.bootstrap (issue 12, item 4): its bounds are
those of the hand-written percentile bootstrap it replaced, draw for draw."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from specband.evaluation.ope import bootstrap_interval


def _hand_percentile_bootstrap(
    values: Any, weights: Any, alpha: Any, n_bootstrap: Any, seed: Any, block: Any = 2_000_000
) -> Any:
    """The replaced implementation (specband before issue 12), kept here as the reference:
    index blocks of rng.integers(0, n, (rows, n)), sums per column, resamples with a zero
    denominator dropped, np.percentile, the estimate clamped inside."""
    rng = np.random.default_rng(seed)
    terms = values[:, None] if weights is None else np.stack([values, weights], axis=1)
    n = terms.shape[0]
    sums = np.empty((n_bootstrap, terms.shape[1]))
    per_block = max(1, block // n)
    for start in range(0, n_bootstrap, per_block):
        stop = min(n_bootstrap, start + per_block)
        idx = rng.integers(0, n, size=(stop - start, n))
        for k in range(terms.shape[1]):
            sums[start:stop, k] = terms[idx, k].sum(axis=1)
    if weights is None:
        stats, estimate = sums[:, 0] / n, values.mean()
    else:
        ok = sums[:, 1] != 0
        stats, estimate = sums[ok, 0] / sums[ok, 1], values.sum() / weights.sum()
    low, high = np.percentile(stats, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return min(float(low), estimate), max(float(high), estimate), int(stats.size)


@pytest.mark.parametrize(
    ("n", "with_weights", "alpha", "n_bootstrap", "seed"),
    [
        (50, False, 0.05, 1000, 0),
        (7, False, 0.1, 333, 3),
        (200, True, 0.05, 1000, 1),
        (4, True, 0.05, 500, 2),  # zero-weight rounds: some resamples have a zero denominator
        (3000, False, 0.05, 1000, 5),  # more than one index block: scipy's batches draw the same
    ],
)
def test_scipy_bounds_equal_the_hand_bootstrap(
    n: int, with_weights: bool, alpha: float, n_bootstrap: int, seed: int
) -> None:
    data = np.random.default_rng(100 + n)
    values = data.normal(0.5, 0.2, n)
    weights = None
    if with_weights:
        weights = data.choice([0.0, 1.0, 2.5], size=n)
        weights[0] = 1.0  # the full-sample ratio is defined
    got = bootstrap_interval(values, weights=weights, alpha=alpha, n_bootstrap=n_bootstrap, random_state=seed)
    low, high, used = _hand_percentile_bootstrap(values, weights, alpha, n_bootstrap, seed)
    assert got.low == pytest.approx(low, rel=1e-12, abs=1e-15)
    assert got.high == pytest.approx(high, rel=1e-12, abs=1e-15)
    assert got.n_bootstrap == used
    if with_weights and n == 4:
        assert used < n_bootstrap  # the zero-denominator guard was exercised
