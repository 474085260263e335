"""L-BFGS for many independent small problems at once (one row each), in numpy.

Chinchilla's Approach 3 starts L-BFGS from 4500 grid points, and a bootstrap refits
thousands of resamples: running them as rows of one array turns ~10^5 tiny scipy calls
into a few hundred vectorised objective evaluations. Two-loop recursion per row, a
backtracking (Armijo) line search, curvature pairs kept only when s.y > 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

# fun(x, rows) -> (values (k,), gradients (k, p)) for the problems ``rows`` at points ``x``.
BatchObjective = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]

# Why a row stopped (``BatchResult.status``): index into STATUS.
CONVERGED, NO_DESCENT, ITERATION_LIMIT, NOT_FINITE = range(4)
STATUS = ("converged", "no descent step", "iteration limit", "not finite")


class BatchResult(NamedTuple):
    """Per row: the solution, its value, iterations taken and why it stopped (STATUS codes).

    "converged": the relative decrease stayed below ftol or the gradient below gtol;
    "no descent step": the line search found no lower point (usually the floating-point
    floor of a flat optimum); "iteration limit": stopped by maxiter, not converged.
    """

    x: np.ndarray
    f: np.ndarray
    iterations: np.ndarray
    status: np.ndarray


def minimize_batch(fun: BatchObjective, x0: np.ndarray, *, memory: int = 10, maxiter: int = 1000,
                   ftol: float = 1e-11, gtol: float = 1e-12, max_halvings: int = 40) -> BatchResult:
    """Minimise each row's problem from ``x0`` (k, p).

    A row stops when its relative decrease falls below ``ftol`` for two iterations in a
    row, its largest gradient component below ``gtol``, or the line search fails.
    """
    x = np.array(x0, dtype=float, copy=True)
    k, p = x.shape
    rows = np.arange(k)
    f, g = fun(x, rows)
    S = np.zeros((k, memory, p))
    Y = np.zeros((k, memory, p))
    newest = np.zeros(k, dtype=int)  # where each row's newest pair is: a ring, the older ones before it
    back = np.arange(memory)
    count = np.zeros(k, dtype=int)  # stored pairs
    iters = np.zeros(k, dtype=int)
    slow = np.zeros(k, dtype=int)
    active = np.isfinite(f) & (np.abs(g).max(1) > gtol)
    status = np.where(np.isfinite(f), CONVERGED, NOT_FINITE)
    for _ in range(maxiter):
        idx = rows[active]
        if idx.size == 0:
            break
        gi = g[idx]
        order = (newest[idx, None] - back) % memory  # newest first
        d = _direction(gi, S[idx[:, None], order], Y[idx[:, None], order], count[idx])
        slope = (d * gi).sum(1)
        ascent = ~(slope < 0)
        if ascent.any():  # lost descent: restart from steepest descent
            d[ascent] = -gi[ascent] / np.maximum(np.abs(gi[ascent]).max(1, keepdims=True), 1e-300)
            count[idx[ascent]] = 0
            slope = (d * gi).sum(1)
        step = np.ones(idx.size)
        first = count[idx] == 0
        step[first] = np.minimum(1.0, 1.0 / np.maximum(np.linalg.norm(gi[first], axis=1), 1e-300))
        x_new = np.empty((idx.size, p))
        f_new = np.full(idx.size, np.inf)
        g_new = np.empty((idx.size, p))
        xi, fi = x[idx], f[idx]
        todo = np.arange(idx.size)
        for _ in range(max_halvings):
            trial = xi[todo] + step[todo, None] * d[todo]
            ft, gt = fun(trial, idx[todo])
            ok = np.isfinite(ft) & (ft <= fi[todo] + 1e-4 * step[todo] * slope[todo])
            done = todo[ok]
            x_new[done], f_new[done], g_new[done] = trial[ok], ft[ok], gt[ok]
            todo = todo[~ok]
            if todo.size == 0:
                break
            step[todo] *= 0.5
        failed = np.zeros(idx.size, dtype=bool)
        failed[todo] = True
        went = ~failed
        moved = idx[went]
        s = x_new[went] - xi[went]
        y = g_new[went] - gi[went]
        sy = (s * y).sum(1)
        good = sy > 1e-300
        keep = moved[good]
        newest[keep] = (newest[keep] + 1) % memory
        S[keep, newest[keep]], Y[keep, newest[keep]] = s[good], y[good]
        count[keep] = np.minimum(count[keep] + 1, memory)
        decrease = fi[went] - f_new[went]
        x[moved], g[moved] = x_new[went], g_new[went]
        f_prev, f[moved] = fi[went], f_new[went]
        iters[idx] += 1
        small = decrease <= ftol * np.maximum(np.abs(f_prev), 1e-300)
        slow[moved] = np.where(small, slow[moved] + 1, 0)
        active[idx[failed]] = False
        status[idx[failed]] = NO_DESCENT
        active[moved] &= (slow[moved] < 2) & (np.abs(g[moved]).max(1) > gtol)
    status[active] = ITERATION_LIMIT
    return BatchResult(x, f, iters, status)


def _direction(g: np.ndarray, S: np.ndarray, Y: np.ndarray, count: np.ndarray) -> np.ndarray:
    """-H g by the two-loop recursion, each row with its own history (newest first)."""
    q = g.copy()
    m = S.shape[1]
    alphas = np.zeros((g.shape[0], m))
    sy = (S * Y).sum(2)
    rho = np.where(sy > 0, 1.0 / np.where(sy > 0, sy, 1.0), 0.0)
    for i in range(m):
        use = count > i
        alphas[:, i] = np.where(use, rho[:, i] * (S[:, i] * q).sum(1), 0.0)
        q -= alphas[:, i, None] * Y[:, i]
    yy = (Y[:, 0] * Y[:, 0]).sum(1)
    gamma = np.where(count > 0, sy[:, 0] / np.where(yy > 0, yy, 1.0), 1.0)
    r = gamma[:, None] * q
    for i in reversed(range(m)):
        use = count > i
        beta = np.where(use, rho[:, i] * (Y[:, i] * r).sum(1), 0.0)
        r += (alphas[:, i] - beta)[:, None] * S[:, i]
    return -r
