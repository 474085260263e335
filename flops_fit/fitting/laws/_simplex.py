"""Nelder-Mead for many independent small problems at once (one row each), in numpy.

A bootstrap refits hundreds of resamples from one start, and a grid search probes thousands of
exponents: one scipy ``minimize`` per problem spends most of its time in Python. This runs
scipy's own algorithm (``scipy.optimize`` Nelder-Mead, non-adaptive, bounds by clipping: the
same initial simplex, steps, tie-breaking and stopping rule) on every row together, evaluating
each step's trial points of all rows in one call of a batched objective. A row follows the
same path as scipy's would, up to the last bits of its objective's arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from flops_fit.fitting.laws._lbfgs import CONVERGED, ITERATION_LIMIT

# fun(points (m, q), rows (m,)) -> values (m,): each point's objective for problem ``rows``.
BatchObjective = Callable[[np.ndarray, np.ndarray], np.ndarray]

RHO, CHI, PSI, SIGMA = 1.0, 2.0, 0.5, 0.5  # scipy's non-adaptive coefficients
NONZDELT, ZDELT = 0.05, 0.00025  # scipy's initial simplex steps


class SimplexResult(NamedTuple):
    """Per row: the best vertex, its value, iterations (counted as scipy's ``nit``) and status
    (``_lbfgs`` codes: converged or iteration limit)."""

    x: np.ndarray
    f: np.ndarray
    iterations: np.ndarray
    status: np.ndarray


def initial_simplex(x0: np.ndarray, bounds: tuple[float, float] | None = None) -> np.ndarray:
    """scipy's starting simplex for each row of ``x0`` (k, q): x0 clipped into ``bounds``, then
    each coordinate in turn times 1.05 (0.00025 where it is 0), vertices past the upper bound
    reflected into it. Shape (k, q + 1, q)."""
    x0 = np.atleast_2d(np.asarray(x0, dtype=float))
    if bounds is not None:
        x0 = np.clip(x0, *bounds)
    k, q = x0.shape
    sim = np.repeat(x0[:, None, :], q + 1, axis=1)
    for j in range(q):
        sim[:, j + 1, j] = np.where(x0[:, j] != 0, (1 + NONZDELT) * x0[:, j], ZDELT)
    if bounds is not None:
        sim = np.clip(np.where(sim > bounds[1], 2 * bounds[1] - sim, sim), *bounds)
    return sim


@np.errstate(invalid="ignore")  # a row whose objective is inf at several vertices compares inf - inf: no convergence
def minimize_simplex(fun: BatchObjective, simplex: np.ndarray, *, xatol: float, fatol: float, maxiter: int,
                     bounds: tuple[float, float] | None = None) -> SimplexResult:
    """Minimise each row's problem from its starting ``simplex`` (k, q + 1, q) (``initial_simplex``
    gives scipy's default). A row stops, as scipy's does, when its vertices lie within ``xatol``
    of the best and their values within ``fatol``, or after ``maxiter`` iterations."""
    sim = np.array(simplex, dtype=float, copy=True)
    k, n1, q = sim.shape
    clip = (lambda v: np.clip(v, *bounds)) if bounds is not None else (lambda v: v)
    rows = np.arange(k)
    fsim = fun(sim.reshape(k * n1, q), np.repeat(rows, n1)).reshape(k, n1).astype(float)
    sim, fsim = _sorted(sim, fsim)
    iterations = np.ones(k, dtype=int)
    active = np.ones(k, dtype=bool)
    status = np.full(k, ITERATION_LIMIT)
    while True:
        active &= iterations < maxiter
        idx = rows[active]
        if idx.size:
            s, f = sim[idx], fsim[idx]
            done = ((np.abs(s[:, 1:] - s[:, :1]).reshape(idx.size, -1).max(1) <= xatol)
                    & (np.abs(f[:, :1] - f[:, 1:]).max(1) <= fatol))
            status[idx[done]] = CONVERGED
            active[idx[done]] = False
            idx = idx[~done]
        if idx.size == 0:
            break
        s, f = sim[idx], fsim[idx]
        worst = s[:, -1]
        xbar = np.add.reduce(s[:, :-1], 1) / q
        xr = clip((1 + RHO) * xbar - RHO * worst)
        fxr = fun(xr, idx)
        expand = fxr < f[:, 0]
        accept = ~expand & (fxr < f[:, -2])
        outside = ~expand & ~accept & (fxr < f[:, -1])
        inside = ~expand & ~accept & ~outside
        trial = np.empty_like(xr)
        trial[expand] = clip((1 + RHO * CHI) * xbar[expand] - RHO * CHI * worst[expand])
        trial[outside] = clip((1 + PSI * RHO) * xbar[outside] - PSI * RHO * worst[outside])
        trial[inside] = clip((1 - PSI) * xbar[inside] + PSI * worst[inside])
        second = ~accept
        ft = np.full(idx.size, np.nan)
        if second.any():
            ft[second] = fun(trial[second], idx[second])
        take_trial = (expand & (ft < fxr)) | (outside & (ft <= fxr)) | (inside & (ft < f[:, -1]))
        take_r = (expand & ~(ft < fxr)) | accept
        shrink = (outside | inside) & ~take_trial
        new_worst, new_f = worst.copy(), f[:, -1].copy()
        new_worst[take_r], new_f[take_r] = xr[take_r], fxr[take_r]
        new_worst[take_trial], new_f[take_trial] = trial[take_trial], ft[take_trial]
        s[:, -1], f[:, -1] = new_worst, new_f
        if shrink.any():
            best = s[shrink, :1]
            moved = clip(best + SIGMA * (s[shrink, 1:] - best))
            s[shrink, 1:] = moved
            f[shrink, 1:] = fun(moved.reshape(-1, q), np.repeat(idx[shrink], q)).reshape(-1, q)
        sim[idx], fsim[idx] = _sorted(s, f)
        iterations[idx] += 1
    return SimplexResult(sim[:, 0], fsim.min(1), iterations, status)


def _sorted(sim: np.ndarray, fsim: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices ordered by value, ties in place (scipy's argsort on so few values is stable)."""
    order = np.argsort(fsim, axis=1, kind="stable")
    return np.take_along_axis(sim, order[:, :, None], 1), np.take_along_axis(fsim, order, 1)


__all__ = ["SimplexResult", "initial_simplex", "minimize_simplex"]
