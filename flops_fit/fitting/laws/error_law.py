"""The saturating error law of image classifiers: E(C) = a (C + d)^-b + c (Zhai et al. 2022).

Top-1 error cannot fall below the data's own ambiguity and does not fall at all until a
model has some compute, so Zhai et al. ("Scaling Vision Transformers") fit a power law with
an offset in compute (d) and a floor (c) to the compute frontier: the lowest error reached
at each compute or less. Fitted here by least squares on the error, (log a, log b, log d, c)
from a grid of starts, with bootstrap intervals from resampling the frontier's points.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.fitting.laws.bootstrap import interval

MIN_POINTS = 4


@dataclass
class ErrorLaw:
    """The fitted law, its parameters' intervals, and the frontier it was fitted to."""

    params: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    frontier: tuple[np.ndarray, np.ndarray]  # (compute, error) of the frontier's points

    def error(self, compute: np.ndarray) -> np.ndarray:
        p = self.params
        return p["a"] * (np.asarray(compute, float) + p["d"]) ** -p["b"] + p["c"]

    def summary(self) -> str:
        parts = [f"{k} = {v:.4g} [{self.intervals[k][0]:.4g}, {self.intervals[k][1]:.4g}]" for k, v in self.params.items()]
        return "Top-1 error law E = a (C + d)^-b + c (Zhai et al. 2022): " + ", ".join(parts)


def error_frontier(flops: np.ndarray, error: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runs that set a new lowest error as compute grows: (compute, error), ascending."""
    order = np.argsort(flops, kind="stable")
    keep, best = [], np.inf
    for i in order:
        if error[i] < best:
            best = error[i]
            keep.append(i)
    return flops[keep], error[keep]


def _fit(c: np.ndarray, e: np.ndarray) -> np.ndarray:
    """(log a, log b, log d, floor) minimising the squared error, from a grid of starts."""
    from scipy.optimize import least_squares

    scale = np.median(c)
    x = c / scale  # compute in units of the frontier's median: d and a stay of order one

    def residual(theta: np.ndarray) -> np.ndarray:
        a, b, d, floor = np.exp(theta[0]), np.exp(theta[1]), np.exp(theta[2]), theta[3]
        return a * (x + d) ** -b + floor - e

    best = None
    for b0 in (0.2, 0.5, 1.0):
        for d0 in (1e-3, 0.1, 1.0):
            start = np.array([np.log(max(e.max() - e.min(), 1e-3)), np.log(b0), np.log(d0), max(e.min() - 0.05, 0.0)])
            fitted = least_squares(residual, start, bounds=([-20, -5, -20, 0.0], [20, 3, 10, 1.0]))
            if best is None or fitted.cost < best.cost:
                best = fitted
    a, b, d, floor = np.exp(best.x[0]), np.exp(best.x[1]), np.exp(best.x[2]), best.x[3]
    return np.array([a * scale ** b, b, d * scale, floor])  # back to FLOPs: a (C/s + d')^-b = a s^b (C + d' s)^-b


def fit_error_law(flops: np.ndarray, error: np.ndarray, *, bootstrap: int = 200, seed: int | None = 0,
                  level: float = 0.95) -> ErrorLaw:
    """Fit the law to the compute frontier of runs' (FLOPs, top-1 error)."""
    c, e = error_frontier(np.asarray(flops, float), np.asarray(error, float))
    if c.size < MIN_POINTS:
        raise FitInputError(f"the error law needs {MIN_POINTS} or more runs on the compute frontier (each a new "
                            f"lowest error); these runs have {c.size}: sweep more budgets")
    names = ("a", "b", "d", "c")
    point = _fit(c, e)
    draws = []
    rng = np.random.default_rng(seed)
    for _ in range(bootstrap):
        pick = np.sort(rng.integers(0, c.size, c.size))
        if np.unique(pick).size >= MIN_POINTS:
            draws.append(_fit(c[pick], e[pick]))
    lo, hi = interval(np.array(draws), level) if draws else (np.full(4, np.nan), np.full(4, np.nan))
    return ErrorLaw({k: float(v) for k, v in zip(names, point, strict=True)},
                    {k: (float(a), float(b)) for k, a, b in zip(names, lo, hi, strict=True)}, (c, e))


__all__ = ["ErrorLaw", "error_frontier", "fit_error_law"]
