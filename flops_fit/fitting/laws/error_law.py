"""The saturating error law of image classifiers: E(C) = a (C + d)^-b + c (Zhai et al. 2022).

Top-1 error cannot fall below the data's own ambiguity and does not fall at all until a
model has some compute, so Zhai et al. ("Scaling Vision Transformers") fit a power law with
an offset in compute (d) and a floor (c) to the compute frontier: the lowest error reached
at each compute or less. Fitted here by least squares on the error, (log a, log b, log d, c)
from a grid of starts, with bootstrap intervals from resampling the frontier's points (the
point and every resample solved together).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.fitting.formatting import too_wide
from flops_fit.fitting.laws._trf import least_squares_batch
from flops_fit.fitting.laws.bootstrap import interval

MIN_POINTS = 4


@dataclass
class ErrorLaw:
    """The fitted law, its parameters' intervals, and the frontier it was fitted to."""

    params: dict[str, float]
    intervals: dict[str, tuple[float, float]]
    frontier: tuple[np.ndarray, np.ndarray]  # (compute, error) of the frontier's points
    draws: np.ndarray = field(default_factory=lambda: np.empty((0, 4)))  # each resample's (a, b, d, c)
    level: float = 0.95

    def error(self, compute: np.ndarray) -> np.ndarray:
        p = self.params
        return p["a"] * (np.asarray(compute, float) + p["d"]) ** -p["b"] + p["c"]

    def error_interval(self, compute: float) -> tuple[float, float]:
        """The resamples' interval of the error at ``compute`` (NaN without resamples): the report's
        forecast at its target was a bare point where every other number has its interval."""
        if not len(self.draws):
            return np.nan, np.nan
        a, b, d, c = self.draws.T
        with np.errstate(all="ignore"):
            lo, hi = interval(a * (float(compute) + d) ** -b + c, self.level)
        return float(lo), float(hi)

    def determined(self, name: str) -> bool:
        """Whether the resamples pin ``name`` down: a finite interval, and for the scales a and d
        one not ``formatting.too_wide`` (a noisy frontier trades a against d and b: seen a in [4.8,
        1e195], whose ends mean nothing)."""
        lo, hi = self.intervals[name]
        if not (np.isfinite(lo) and np.isfinite(hi)):
            return False
        return name not in ("a", "d") or not too_wide(lo, hi)

    def summary(self) -> str:
        parts = [f"{k} = {v:.4g} [{self.intervals[k][0]:.4g}, {self.intervals[k][1]:.4g}]" if self.determined(k)
                 else f"{k} = {v:.4g} (interval withheld: the resamples do not determine it)"
                 for k, v in self.params.items()]
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


STARTS = [(b0, d0) for b0 in (0.2, 0.5, 1.0) for d0 in (1e-3, 0.1, 1.0)]  # (b, d / median compute)
LOWER, UPPER = np.array([-20.0, -5.0, -20.0, 0.0]), np.array([20.0, 3.0, 10.0, 1.0])  # log a, log b, log d, floor


def _fit_many(c: np.ndarray, e: np.ndarray) -> np.ndarray:
    """(a, b, d, floor) minimising the squared error, per row of (compute, error) problems (k, m):
    each solved from every start of a grid, the lowest cost kept. All rows and starts are one
    batched bounded least-squares solve (``_trf``: scipy's algorithm with ``x_scale="jac"``) with
    the analytic Jacobian: a bootstrap of 100 resamples took 15 s one scipy call at a time."""
    scale = np.median(c, axis=1, keepdims=True)
    x = np.repeat(c / scale, len(STARTS), axis=0)  # compute in units of the median: d and a stay of order one
    y = np.repeat(e, len(STARTS), axis=0)
    spread = np.log(np.maximum(e.max(axis=1) - e.min(axis=1), 1e-3))
    floor = np.maximum(e.min(axis=1) - 0.05, 0.0)
    x0 = np.array([[sp, np.log(b0), np.log(d0), fl] for sp, fl in zip(spread, floor, strict=True)
                   for b0, d0 in STARTS])

    def residuals(theta: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a, b, d = (np.exp(theta[:, i])[:, None] for i in range(3))
        base = x[rows] + d
        term = a * base ** -b
        jac = np.stack([term, -term * np.log(base) * b, -term * b * d / base, np.ones_like(term)], axis=2)
        return term + theta[:, 3:] - y[rows], jac

    solved = least_squares_batch(residuals, x0, LOWER, UPPER, ftol=1e-8, xtol=1e-8, gtol=1e-8, max_nfev=400)
    best = np.argmin(solved.cost.reshape(len(c), len(STARTS)), axis=1)
    theta = solved.x.reshape(len(c), len(STARTS), 4)[np.arange(len(c)), best]
    a, b, d = np.exp(theta[:, 0]), np.exp(theta[:, 1]), np.exp(theta[:, 2])
    s = scale[:, 0]
    return np.stack([a * s ** b, b, d * s, theta[:, 3]], axis=1)  # back to FLOPs: a (C/s + d')^-b = a s^b (C + d' s)^-b


def fit_error_law(flops: np.ndarray, error: np.ndarray, *, bootstrap: int = 200, seed: int | None = 0,
                  level: float = 0.95) -> ErrorLaw:
    """Fit the law to the compute frontier of runs' (FLOPs, top-1 error)."""
    c, e = error_frontier(np.asarray(flops, float), np.asarray(error, float))
    if c.size < MIN_POINTS:
        raise FitInputError(f"the error law needs {MIN_POINTS} or more runs on the compute frontier (each a new "
                            f"lowest error); these runs have {c.size}: sweep more budgets")
    names = ("a", "b", "d", "c")
    rng = np.random.default_rng(seed)
    picks = [np.sort(rng.integers(0, c.size, c.size)) for _ in range(bootstrap)]
    picks = [np.arange(c.size)] + [p for p in picks if np.unique(p).size >= MIN_POINTS]
    fitted = _fit_many(np.stack([c[p] for p in picks]), np.stack([e[p] for p in picks]))
    point, draws = fitted[0], fitted[1:]
    lo, hi = interval(draws, level) if len(draws) else (np.full(4, np.nan), np.full(4, np.nan))
    return ErrorLaw({k: float(v) for k, v in zip(names, point, strict=True)},
                    {k: (float(a), float(b)) for k, a, b in zip(names, lo, hi, strict=True)}, (c, e), draws, level)


__all__ = ["ErrorLaw", "error_frontier", "fit_error_law"]
