"""A loss form beyond Chinchilla's: L(N, D) = E + A/N^alpha + B/D^beta + F/(N^alpha D^beta).

Chinchilla's law adds the size term and the data term; at small scale they interact (a
small model stops gaining from data sooner). The product term is the common variant that
lets them (scaling-laws design note, "Loss forms beyond Chinchilla's"). Given (alpha, beta)
the loss is linear in (E, A, B, F), so the fit is variable projection like ``vpnls``: a
grid, then Nelder-Mead, over the two exponents, with E, A, B >= 0 and F free by least
squares. The frontier has no closed form: each budget's optimum is found on a fine grid in
log N along C = k N D, then refined by a parabola through the three best points.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from flops_fit.fitting._lbfgs import CONVERGED, ITERATION_LIMIT
from flops_fit.fitting.approach import Approach
from flops_fit.fitting.bootstrap import resample_weights
from flops_fit.fitting.focus import check_focus, focus_weights
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws import Params, frontier_exponents
from flops_fit.fitting.parametric import (
    ParametricResult,
    convergence_report,
    law_columns,
    parametric_diagnostics,
)
from flops_fit.fitting.result import FitResult
from flops_fit.fitting.vpnls import floor_solve

BOUNDS = (0.02, 2.5)
NM_MAXITER = 1000
_GRID = np.arange(0.05, 2.01, 0.075)
FRONTIER_POINTS = 241
FRONTIER_DECADES = 8.0  # searched either side of the runs' own sizes scaled to each budget


def interaction_loss(p: Params | dict[str, float], n: np.ndarray, d: np.ndarray) -> np.ndarray:
    """E + A/N^alpha + B/D^beta + F/(N^alpha D^beta), parameters scalars or broadcastable columns."""
    size, data = np.asarray(n) ** -p["alpha"], np.asarray(d) ** -p["beta"]
    return p["E"] + p["A"] * size + p["B"] * data + p["F"] * size * data


def interaction_frontier(p: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per parameter row and budget: N_opt, D_opt and the loss there, minimising along
    C = k N^(1+s) N D (the runs' FLOPs rule; s = ``k_slope``, 0 when absent)."""
    col = {key: np.asarray(p[key], dtype=float)[:, None, None] for key in ("E", "A", "B", "F", "alpha", "beta", "k")}
    slope = np.asarray(p["k_slope"], dtype=float) if "k_slope" in p else np.zeros_like(col["k"][:, 0, 0])
    grow = 1.0 + slope[:, None, None]
    c = np.asarray(budgets, dtype=float)[None, :, None] / col["k"]
    # Chinchilla's optimum of the additive part centres the search.
    with np.errstate(all="ignore"):
        total = col["alpha"] + grow * col["beta"]
        log_g = (np.log(col["alpha"] * col["A"]) - np.log(grow * col["beta"] * col["B"])) / total
        centre = log_g + col["beta"] / total * np.log(c)
    centre = np.where(np.isfinite(centre), centre, 0.5 * np.log(c))
    offsets = np.linspace(-FRONTIER_DECADES, FRONTIER_DECADES, FRONTIER_POINTS) * np.log(10)
    log_n = centre + offsets[None, None, :]
    with np.errstate(all="ignore"):
        loss = interaction_loss(col, np.exp(log_n), c / np.exp(grow * log_n))
    loss = np.where(np.isfinite(loss), loss, np.inf)
    i = np.clip(loss.argmin(-1), 1, FRONTIER_POINTS - 2)
    rows, cols = np.indices(i.shape)
    y0, y1, y2 = loss[rows, cols, i - 1], loss[rows, cols, i], loss[rows, cols, i + 1]
    step = offsets[1] - offsets[0]
    with np.errstate(all="ignore"):
        shift = np.where((y0 - 2 * y1 + y2) > 0, 0.5 * (y0 - y2) / (y0 - 2 * y1 + y2), 0.0)
    best = log_n[rows, cols, i] + np.clip(shift, -1, 1) * step
    n = np.exp(best)
    d = c[..., 0] / n ** grow[..., 0]
    with np.errstate(all="ignore"):
        value = interaction_loss({k: v[..., 0] for k, v in col.items()}, n, d)
    return n, d, value


def _least_squares(columns: np.ndarray, loss: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, float]:
    """(E, A, B, F) by weighted least squares with E, A, B kept >= 0 (a negative one is dropped
    and the rest refitted), and the squared error."""
    active = [0, 1, 2, 3]
    sw = np.sqrt(w)
    while True:
        coef = np.zeros(4)
        sol, *_ = np.linalg.lstsq(columns[:, active] * sw[:, None], loss * sw, rcond=None)
        coef[active] = sol
        negative = [j for j in active if j < 3 and coef[j] < 0]
        if not negative:
            break
        active.remove(min(negative, key=lambda j: coef[j]))
    r = columns @ coef - loss
    return coef, float(np.sum(w * r * r))


def _solve(n: np.ndarray, d: np.ndarray, loss: np.ndarray, w: np.ndarray, ab: np.ndarray,
           floor: float = 1.0) -> tuple[np.ndarray, float]:
    """(E, A, B, F) and the squared error for exponents ``ab`` (``floor``: see ``vpnls.floor_solve``)."""
    alpha, beta = ab
    size, data = n ** -alpha, d ** -beta
    return floor_solve(_least_squares, np.column_stack([np.ones_like(n), size, data, size * data]), loss, w, floor)


def _fit(n, d, loss, w, start=None, floor: float = 1.0) -> tuple[np.ndarray, float, int, int]:
    from scipy.optimize import minimize

    if start is None:
        start = min((_solve(n, d, loss, w, np.array([a, b]), floor)[1], a, b) for a in _GRID for b in _GRID)[1:]
    res = minimize(lambda ab: _solve(n, d, loss, w, ab, floor)[1], np.asarray(start, float), method="Nelder-Mead",
                   bounds=[BOUNDS] * 2, options={"xatol": 1e-6, "fatol": 1e-13, "maxiter": NM_MAXITER})
    coef, ssr = _solve(n, d, loss, w, res.x, floor)
    return np.concatenate([coef, res.x]), ssr, int(res.nit), CONVERGED if res.success else ITERATION_LIMIT


class InteractionResult(ParametricResult):
    """The interaction law's result: its own loss surface and numerically found frontier."""

    def frontier(self, params: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return interaction_frontier(params, budgets)

    def loss_surface(self, n: np.ndarray, d: np.ndarray) -> np.ndarray:
        return interaction_loss(self.params, n, d)

    def law_loss(self, params: Params, n: np.ndarray, d: np.ndarray) -> np.ndarray:
        return interaction_loss(params, n, d)


class Interaction(Approach):
    """Chinchilla's law with an N-D interaction term, by variable projection, with bootstrap intervals."""

    name = "interaction"
    title = "Approach 3 with an N-D interaction term"
    options = ("focus",)

    def __init__(self, *, focus: str = "all", **settings: Any) -> None:
        super().__init__(**settings)
        self.focus = check_focus(focus)

    def fit(self, runs: Runs) -> FitResult:
        log_n, log_d, loss, rule = law_columns(runs)
        weights, floor = focus_weights(runs, self.focus)
        n_scale, d_scale = np.exp(log_n.mean()), np.exp(log_d.mean())
        n, d = np.exp(log_n) / n_scale, np.exp(log_d) / d_scale  # order one: well-conditioned columns
        est, _, iterations, status = _fit(n, d, loss, weights, floor=floor)

        def unscale(v: np.ndarray) -> dict[str, np.ndarray]:
            E, A, B, F, alpha, beta = np.atleast_2d(v).T
            nf, df = n_scale ** alpha, d_scale ** beta
            a, b = frontier_exponents(alpha, beta, rule.slope)  # the additive part's exponents
            return {"E": E, "A": A * nf, "B": B * df, "F": F * nf * df, "alpha": alpha, "beta": beta,
                    "a": a, "b": b, **rule.columns(E.size)}

        samples, boot_status, boot_iterations = pd.DataFrame(), None, None
        if self.bootstrap:
            draws = resample_weights(n.size, self.bootstrap, self.seed) * weights
            solved = [_fit(n, d, loss, w, start=est[4:], floor=floor) for w in draws]
            samples = pd.DataFrame(unscale(np.array([s[0] for s in solved])))
            boot_iterations = np.array([s[2] for s in solved])
            boot_status = np.array([s[3] for s in solved])
        params = {key: float(v[0]) for key, v in unscale(est).items()}
        convergence, warnings = convergence_report(status, iterations, NM_MAXITER, boot_status, boot_iterations,
                                                   NM_MAXITER, "Nelder-Mead")
        diagnostics = parametric_diagnostics(runs, interaction_loss(params, np.exp(log_n), np.exp(log_d)), params,
                                             bounds=BOUNDS, convergence=convergence, warnings=warnings)
        return self.result(InteractionResult, params=params, samples=samples, runs=runs, diagnostics=diagnostics,
                           details={"search": "grid 0.05..2 step 0.075, then Nelder-Mead", "bounds": list(BOUNDS),
                                    "focus": self.focus})


__all__ = ["Interaction", "InteractionResult", "interaction_frontier", "interaction_loss"]
