"""Approach 3 by variable projection: search (alpha, beta) only; E, A, B >= 0 by NNLS.

For each candidate (alpha, beta) the loss is linear in E, A and B, so they are solved
exactly by non-negative least squares on the loss: a two-parameter problem far better
conditioned than the five-parameter one. A 0.05 grid, then Nelder-Mead within bounds.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd

from flops_fit.fitting._lbfgs import CONVERGED, ITERATION_LIMIT
from flops_fit.fitting.approach import Approach
from flops_fit.fitting.bootstrap import resample_weights
from flops_fit.fitting.focus import check_focus, focus_weights
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws import frontier_exponents, law_loss
from flops_fit.fitting.parametric import (
    ParametricResult,
    convergence_report,
    law_columns,
    parametric_diagnostics,
)
from flops_fit.fitting.result import FitResult

ALPHA_BETA_BOUNDS = (0.01, 2.5)
NM_MAXITER = 1000
_SEARCH_GRID = np.arange(0.05, 2.01, 0.05)


def _nnls3(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, float]:
    """Weighted non-negative least squares for three columns, exactly, by trying each support."""
    G = (X * w[:, None]).T @ X
    h = (X * w[:, None]).T @ y
    yy = float((w * y) @ y)
    try:
        c = np.linalg.solve(G, h)
        if np.all(c >= 0):  # the usual case: the unconstrained optimum is feasible
            return c, yy - float(c @ h)
    except np.linalg.LinAlgError:
        pass
    best, best_ssr = np.zeros(3), yy
    for support in _SUPPORTS[1:]:
        sub = np.ix_(support, support)
        try:
            c = np.linalg.solve(G[sub], h[support])
        except np.linalg.LinAlgError:
            continue
        if np.all(c >= 0):
            ssr = yy - float(c @ h[support])  # at the LS solution of a support, c.G.c = c.h
            if ssr < best_ssr:
                best_ssr, best = ssr, np.zeros(3)
                best[support] = c
    return best, best_ssr


_SUPPORTS = [list(s) for r in (3, 2, 1) for s in itertools.combinations(range(3), r)]
FLOOR_ITERATIONS = 30


def floor_solve(solve, X: np.ndarray, y: np.ndarray, w: np.ndarray, floor: float) -> tuple[np.ndarray, float]:
    """``solve(X, y, weights)`` with residuals where the law lies above a run weighted ``floor``
    times (asymmetric least squares, an expectile: iteratively reweighted until the sides settle).
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


def _vp_solve(n, d, loss, w, start=None, floor: float = 1.0) -> tuple[np.ndarray, float, int, int]:
    """(E, A, B, alpha, beta), the squared error, Nelder-Mead's iterations and status code."""
    from scipy.optimize import minimize

    def profile(ab):
        alpha, beta = ab
        X = np.column_stack([np.ones_like(n), n ** -alpha, d ** -beta])
        return floor_solve(_nnls3, X, loss, w, floor)

    if start is None:
        start = min((profile((a, b))[1], a, b) for a in _SEARCH_GRID for b in _SEARCH_GRID)[1:]
    res = minimize(lambda ab: profile(ab)[1], np.asarray(start, float), method="Nelder-Mead",
                   bounds=[ALPHA_BETA_BOUNDS] * 2, options={"xatol": 1e-6, "fatol": 1e-12, "maxiter": NM_MAXITER})
    coef, ssr = profile(res.x)
    status = CONVERGED if res.success else ITERATION_LIMIT
    return np.array([coef[0], coef[1], coef[2], res.x[0], res.x[1]]), ssr, int(res.nit), status


class Vpnls(Approach):
    """Variable projection: grid then Nelder-Mead over (alpha, beta); E, A, B by NNLS."""

    name = "vpnls"
    title = "Approach 3, variable projection (NNLS)"
    options = ("focus",)

    def __init__(self, *, focus: str = "all", **settings: Any) -> None:
        super().__init__(**settings)
        self.focus = check_focus(focus)

    def fit(self, runs: Runs) -> FitResult:
        log_n, log_d, loss, rule = law_columns(runs)
        n, d = np.exp(log_n), np.exp(log_d)
        weights, floor = focus_weights(runs, self.focus)
        # Scale columns to order one so the normal equations stay well conditioned.
        n_s, d_s = n / np.exp(log_n.mean()), d / np.exp(log_d.mean())
        est, _, iterations, status = _vp_solve(n_s, d_s, loss, weights, floor=floor)

        def unscale(v):
            E, A, B, alpha, beta = np.atleast_2d(v).T
            a, b = frontier_exponents(alpha, beta, rule.slope)
            return {"E": E, "A": A * np.exp(log_n.mean()) ** alpha, "B": B * np.exp(log_d.mean()) ** beta,
                    "alpha": alpha, "beta": beta, "a": a, "b": b, **rule.columns(E.size)}

        samples = pd.DataFrame()
        boot_status = boot_iterations = None
        if self.bootstrap:
            draws = resample_weights(n.size, self.bootstrap, self.seed) * weights
            solved = [_vp_solve(n_s, d_s, loss, w, start=est[3:], floor=floor) for w in draws]
            samples = pd.DataFrame(unscale(np.array([s[0] for s in solved])))
            boot_iterations = np.array([s[2] for s in solved])
            boot_status = np.array([s[3] for s in solved])
        params = {key: float(v[0]) for key, v in unscale(est).items()}
        convergence, warnings = convergence_report(status, iterations, NM_MAXITER, boot_status, boot_iterations,
                                                   NM_MAXITER, "Nelder-Mead")
        diagnostics = parametric_diagnostics(runs, law_loss(params, n, d), params, bounds=ALPHA_BETA_BOUNDS,
                                             convergence=convergence, warnings=warnings)
        return self.result(ParametricResult, params=params, samples=samples, runs=runs, diagnostics=diagnostics,
                           details={"search": "grid 0.05..2 step 0.05, then Nelder-Mead", "focus": self.focus,
                                    "bounds": list(ALPHA_BETA_BOUNDS)})


__all__ = ["Vpnls"]
