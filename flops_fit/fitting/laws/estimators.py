"""Estimators that fit any law form (``forms.LawForm``).

- ``fit_projection``: variable projection. For given exponents the loss is linear in the
  form's coefficients, solved exactly by weighted least squares with the form's sign
  constraints; only the exponents are searched (a grid, then Nelder-Mead within bounds).
  A few-parameter problem, far better conditioned than the full one.
- ``huber_objective``: Chinchilla's objective (summed Huber loss on log loss) for a form that
  gives its log prediction and gradient (``log_predict``), evaluated for many parameter rows
  and run weightings at once; ``parametric`` runs batched L-BFGS on it from a grid.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import cache
from typing import NamedTuple

import numpy as np

from flops_fit.fitting.laws._lbfgs import CONVERGED, ITERATION_LIMIT
from flops_fit.fitting.laws.forms import Inputs, LawForm

NM_MAXITER = 1000
FLOOR_ITERATIONS = 30
HUBER_DELTA = 1e-3
CHUNK = 64


class Solution(NamedTuple):
    """The exponents, the linear coefficients, the weighted squared error, Nelder-Mead's
    iterations and its status (``_lbfgs.STATUS`` codes)."""

    theta: np.ndarray
    coef: np.ndarray
    ssr: float
    iterations: int
    status: int


@cache
def _supports(columns: int, nonnegative: tuple[bool, ...]) -> list[list[int]]:
    """Column subsets to try when the unconstrained solution breaks a sign: every free column
    always, any subset of the constrained ones, largest first."""
    free = [j for j in range(columns) if not nonnegative[j]]
    held = [j for j in range(columns) if nonnegative[j]]
    return [sorted(free + list(s)) for r in range(len(held) - 1, -1, -1) for s in itertools.combinations(held, r)]


def constrained_lstsq(X: np.ndarray, y: np.ndarray, w: np.ndarray,
                      nonnegative: tuple[bool, ...]) -> tuple[np.ndarray, float]:
    """Weighted least squares with the flagged coefficients >= 0, exactly (the best feasible
    support), and its squared error. Columns should be of order one (normal equations)."""
    Xw = X * w[:, None]
    G, h, yy = Xw.T @ X, Xw.T @ y, float((w * y) @ y)
    try:
        c = np.linalg.solve(G, h)
        if all(c[j] >= 0 for j in range(c.size) if nonnegative[j]):  # the usual case
            return c, yy - float(c @ h)
    except np.linalg.LinAlgError:
        pass
    best, best_ssr = np.zeros(X.shape[1]), yy
    for support in _supports(X.shape[1], nonnegative):
        if not support:
            continue
        sub = np.ix_(support, support)
        try:
            c = np.linalg.solve(G[sub], h[support])
        except np.linalg.LinAlgError:
            continue
        if all(c[i] >= 0 for i, j in enumerate(support) if nonnegative[j]):
            ssr = yy - float(c @ h[support])  # at the LS solution of a support, c.G.c = c.h
            if ssr < best_ssr:
                best_ssr, best = ssr, np.zeros(X.shape[1])
                best[support] = c
    return best, best_ssr


def floor_solve(solve: Callable, X: np.ndarray, y: np.ndarray, w: np.ndarray, floor: float) -> tuple[np.ndarray, float]:
    """``solve(X, y, weights)`` with residuals where the law lies above a run weighted ``floor``
    times (asymmetric least squares, an expectile: reweighted until the sides settle).
    ``floor`` 1 is plain weighted least squares."""
    coef, ssr = solve(X, y, w)
    if floor == 1.0:
        return coef, ssr
    side = np.ones_like(w)
    for _ in range(FLOOR_ITERATIONS):
        new = np.where(X @ coef > y, floor, 1.0)
        if np.array_equal(new, side):
            break
        side = new
        coef, ssr = solve(X, y, w * side)
    return coef, ssr


def fit_projection(form: LawForm, x: Inputs, loss: np.ndarray, weights: np.ndarray, *,
                   start: np.ndarray | None = None, floor: float = 1.0) -> Solution:
    """Variable projection of ``form`` on runs ``x`` (inputs of order one keep it well conditioned):
    the best exponents on the form's grid (or from ``start``), then Nelder-Mead within its bounds."""
    from scipy.optimize import minimize

    signs = tuple(name in form.nonnegative for name in form.linear)

    def profile(theta: np.ndarray) -> tuple[np.ndarray, float]:
        return floor_solve(lambda X, y, w: constrained_lstsq(X, y, w, signs), form.design(theta, x), loss,
                           weights, floor)

    if start is None:
        grid = itertools.product(form.grid, repeat=len(form.nonlinear))
        start = min((profile(np.array(t))[1], t) for t in grid)[1]
    res = minimize(lambda t: profile(t)[1], np.asarray(start, float), method="Nelder-Mead",
                   bounds=[form.bounds] * len(form.nonlinear),
                   options={"xatol": 1e-6, "fatol": form.fatol, "maxiter": NM_MAXITER})
    coef, ssr = profile(res.x)
    return Solution(np.asarray(res.x, float), coef, ssr, int(res.nit), CONVERGED if res.success else ITERATION_LIMIT)


def huber_objective(form: LawForm, theta: np.ndarray, logs: Inputs, log_l: np.ndarray, weights: np.ndarray,
                    delta: float = HUBER_DELTA, floor: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Summed (weighted) Huber loss of log loss and its gradient for each row of ``theta`` (k, p).

    ``logs`` are the form's inputs in logs; ``weights`` is (k, n) or (n,): run multiplicities
    (1 for a plain fit, bootstrap counts). ``floor`` multiplies the loss of residuals where the
    law lies above the run (1: Chinchilla's symmetric loss; more fits the floor of the runs;
    still continuously differentiable, as Huber's loss is flat at zero).
    """
    theta = np.atleast_2d(theta)
    if theta.shape[0] > CHUNK:  # small blocks stay in cache and avoid re-faulting big temporaries
        parts = [huber_objective(form, theta[i : i + CHUNK], logs, log_l,
                                 weights if weights.ndim == 1 else weights[i : i + CHUNK], delta, floor)
                 for i in range(0, theta.shape[0], CHUNK)]
        return np.concatenate([v for v, _ in parts]), np.concatenate([g for _, g in parts])
    with np.errstate(all="ignore"):
        predicted, backward = form.log_predict(theta, logs)
        r = predicted - log_l
        c = np.clip(r, -delta, delta)  # Huber's derivative; its value is c (r - c/2)
        if floor != 1.0:
            weights = weights * np.where(r > 0, floor, 1.0)
        return ((c * (r - 0.5 * c)) * weights).sum(1), backward(c * weights)


__all__ = ["HUBER_DELTA", "Solution", "constrained_lstsq", "fit_projection", "floor_solve", "huber_objective"]
