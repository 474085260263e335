"""Bootstrap resampling as run weights, and percentile intervals.

A resample is a vector of multiplicities (how often each run was drawn), so every method
refits a resample by weighting its objective: no copies, and many resamples batch together.
"""

from __future__ import annotations

import numpy as np

from flops_fit.errors import FitInputError


def resample_weights(n: int, resamples: int, seed: int | None, groups: np.ndarray | None = None) -> np.ndarray:
    """(resamples, n) counts: runs drawn with replacement, within each group if given."""
    if not isinstance(resamples, (int, np.integer)) or resamples < 0:
        raise FitInputError(f"bootstrap must be a non-negative number of resamples, got {resamples!r}")
    rng = np.random.default_rng(seed)
    if groups is None:
        return rng.multinomial(n, np.full(n, 1.0 / n), size=resamples).astype(float)
    weights = np.zeros((resamples, n))
    for g in np.unique(groups):
        members = np.flatnonzero(groups == g)
        weights[:, members] = rng.multinomial(members.size, np.full(members.size, 1.0 / members.size),
                                              size=resamples)
    return weights


def interval(samples: np.ndarray, level: float, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval at ``level`` (e.g. 0.95 -> 2.5th and 97.5th percentiles), NaN-aware."""
    tail = 50.0 * (1.0 - level)
    with np.errstate(all="ignore"):
        lo, hi = np.nanpercentile(samples, [tail, 100.0 - tail], axis=axis)
    return lo, hi
