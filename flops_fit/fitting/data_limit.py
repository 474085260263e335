"""The data-constrained law (Muennighoff et al. 2023, "Scaling Data-Constrained Language Models").

With U unique tokens, a run on D > U tokens repeats its data R = D/U - 1 times, and repeated
tokens are worth less than new ones: the law reads Chinchilla's E + A/N^alpha + B/D'^beta at the
effective data D' = U + U R* (1 - exp(-R / R*)) (D' = D while D <= U). R*, the repeats' decay
constant, is fitted (the paper's 15.4: about 4 epochs are nearly as good as new data, returns
vanish by about 16). Their excess-parameter term is left out: our sweeps' sizes stay near their
budgets' optima.

The law is Chinchilla's at D' (``laws.law_loss``; nothing is written out twice), so given
(alpha, beta, R*) the loss is linear in E, A, B >= 0: variable projection as in ``vpnls``, over
three nonlinear parameters (a grid, then Nelder-Mead within bounds). When no run repeats its data
R* cannot be fitted and is fixed at the paper's value, so the forecast and the sizing for
inference still respect U beyond the runs. The frontier has no closed form: each budget's
optimum is found on a grid in log N along the runs' FLOPs rule, refined by a parabola.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting._lbfgs import CONVERGED, ITERATION_LIMIT
from flops_fit.fitting.approach import Approach
from flops_fit.fitting.bootstrap import resample_weights
from flops_fit.fitting.focus import check_focus, focus_weights
from flops_fit.fitting.inference import refine_minimum
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws import Params, frontier_exponents, law_loss, parametric_frontier
from flops_fit.fitting.parametric import (
    ParametricResult,
    convergence_report,
    law_columns,
    parametric_diagnostics,
)
from flops_fit.fitting.result import FitResult
from flops_fit.fitting.vpnls import ALPHA_BETA_BOUNDS, _nnls3, floor_solve

PAPER_R_STAR = 15.4  # Muennighoff et al. 2023's fitted decay constant for repeated data
R_STAR_BOUNDS = (0.3, 1e4)
NM_MAXITER = 2000
_GRID = list(itertools.product(np.arange(0.1, 1.51, 0.1), np.arange(0.1, 1.51, 0.1),
                               np.log([1.0, 3.0, 8.0, 20.0, 60.0, 200.0])))
FRONTIER_POINTS = 161
FRONTIER_DECADES = 4.0


def check_unique_tokens(value: Any) -> float:
    """``unique_tokens`` as a float; FitInputError unless a positive number."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not (np.isfinite(number) and number > 0):
        raise FitInputError(f"unique_tokens must be a positive number of tokens (the dataset's unique training "
                            f"tokens), got {value!r}")
    return number


def effective_data(d: np.ndarray, unique: Any, r_star: Any) -> np.ndarray:
    """D' = min(D, U) + U R* (1 - exp(-R / R*)) with R = max(D/U - 1, 0): repeated tokens decay in worth."""
    d = np.asarray(d, dtype=float)
    repeats = np.maximum(d / unique - 1.0, 0.0)
    return np.minimum(d, unique) + unique * r_star * -np.expm1(-repeats / r_star)


def data_limited_loss(p: Params | dict[str, float], n: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Chinchilla's law at the effective data: E + A/N^alpha + B/D'^beta (``p`` has U and r_star)."""
    return law_loss(p, n, effective_data(d, p["U"], p["r_star"]))


def data_limited_frontier(p: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per parameter row and budget: (N_opt, D_opt, loss) along C = k N^(1+s) D, on a grid in log N
    centred on the unconstrained law's optimum, refined by a parabola."""
    centre, _, _ = parametric_frontier(p, budgets)  # (m, c)
    col = {k: np.asarray(v, dtype=float)[:, None, None] for k, v in p.items()}
    grow = 1.0 + col.get("k_slope", 0.0)
    c = np.asarray(budgets, dtype=float)[None, :, None] / col["k"]
    with np.errstate(all="ignore"):
        log_n = np.log(centre)[..., None] + np.linspace(-FRONTIER_DECADES, FRONTIER_DECADES,
                                                        FRONTIER_POINTS) * np.log(10)
        loss = data_limited_loss(col, np.exp(log_n), c / np.exp(grow * log_n))
        n = np.exp(refine_minimum(log_n, loss))
        d = c[..., 0] / n ** grow[..., 0]
        value = data_limited_loss({k: v[..., 0] for k, v in col.items()}, n, d)
    return n, d, value


class DataLimitedResult(ParametricResult):
    """The data-constrained law's result: its surface (at the effective data) and numeric frontier."""

    def frontier(self, params: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return data_limited_frontier(params, budgets)

    def loss_surface(self, n: np.ndarray, d: np.ndarray) -> np.ndarray:
        return data_limited_loss(self.params, n, d)

    def law_loss(self, params: Params, n: np.ndarray, d: np.ndarray) -> np.ndarray:
        return data_limited_loss(params, n, d)


def _solve(n, d, loss, w, unique, start=None, fixed=None, floor: float = 1.0):
    """(E, A, B, alpha, beta, log R*), the squared error, iterations and status; ``fixed`` holds R*."""
    from scipy.optimize import minimize

    def profile(theta):
        alpha, beta = theta[0], theta[1]
        log_r = np.log(fixed) if fixed is not None else theta[2]
        X = np.column_stack([np.ones_like(n), n ** -alpha, effective_data(d, unique, np.exp(log_r)) ** -beta])
        return floor_solve(_nnls3, X, loss, w, floor)

    size = 2 if fixed is not None else 3
    if start is None:
        grid = {tuple(g[:size]) for g in _GRID}
        start = min((profile(np.array(g))[1], g) for g in grid)[1]
    bounds = [ALPHA_BETA_BOUNDS] * 2 + [tuple(np.log(R_STAR_BOUNDS))][: size - 2]
    res = minimize(lambda t: profile(t)[1], np.asarray(start, float)[:size], method="Nelder-Mead", bounds=bounds,
                   options={"xatol": 1e-6, "fatol": 1e-13, "maxiter": NM_MAXITER})
    coef, ssr = profile(res.x)
    log_r = np.log(fixed) if fixed is not None else res.x[2]
    return (np.array([*coef, res.x[0], res.x[1], log_r]), ssr, int(res.nit),
            CONVERGED if res.success else ITERATION_LIMIT)


class DataLimited(Approach):
    """Approach 3 at the effective data of repeated tokens: (alpha, beta, R*) searched, E, A, B by NNLS."""

    name = "data-limited"
    title = "Approach 3 with repeated data (Muennighoff et al. 2023), variable projection"
    options = ("focus", "unique_tokens")

    def __init__(self, *, unique_tokens: float | None = None, focus: str = "all", **settings: Any) -> None:
        super().__init__(**settings)
        if unique_tokens is None:
            raise FitInputError("the data-constrained law needs the dataset's unique tokens: fit(..., "
                                "unique_tokens=U) (a sweep folder records them)")
        self.unique, self.focus = check_unique_tokens(unique_tokens), check_focus(focus)

    def fit(self, runs: Runs) -> FitResult:
        log_n, log_d, loss, rule = law_columns(runs)
        n, d = np.exp(log_n), np.exp(log_d)
        weights, floor = focus_weights(runs, self.focus)
        n_scale, d_scale = np.exp(log_n.mean()), np.exp(log_d.mean())  # order-one columns
        repeated = int(np.sum(d > self.unique))
        fixed = None if repeated else PAPER_R_STAR
        est, _, iterations, status = _solve(n / n_scale, d / d_scale, loss, weights, self.unique / d_scale,
                                            fixed=fixed, floor=floor)

        def unscale(v: np.ndarray) -> dict[str, np.ndarray]:
            E, A, B, alpha, beta, log_r = np.atleast_2d(v).T
            a, b = frontier_exponents(alpha, beta, rule.slope)
            return {"E": E, "A": A * n_scale ** alpha, "B": B * d_scale ** beta, "alpha": alpha, "beta": beta,
                    "r_star": np.exp(log_r), "a": a, "b": b, "U": np.full(E.size, self.unique),
                    **rule.columns(E.size)}

        samples, boot_status, boot_iterations = pd.DataFrame(), None, None
        if self.bootstrap:
            draws = resample_weights(n.size, self.bootstrap, self.seed) * weights
            solved = [_solve(n / n_scale, d / d_scale, loss, w, self.unique / d_scale, start=est[3:], fixed=fixed,
                             floor=floor) for w in draws]
            samples = pd.DataFrame(unscale(np.array([s[0] for s in solved])))
            boot_iterations = np.array([s[2] for s in solved])
            boot_status = np.array([s[3] for s in solved])
        params = {key: float(v[0]) for key, v in unscale(est).items()}
        convergence, warnings = convergence_report(status, iterations, NM_MAXITER, boot_status, boot_iterations,
                                                   NM_MAXITER, "Nelder-Mead")
        if fixed is not None:
            warnings.append(f"no run trains on more than the {self.unique:,.0f} unique tokens: R* is not measured "
                            f"here and is fixed at Muennighoff et al.'s {PAPER_R_STAR}")
        diagnostics = parametric_diagnostics(runs, data_limited_loss(params, n, d), params, bounds=ALPHA_BETA_BOUNDS,
                                             convergence=convergence, warnings=warnings)
        return self.result(DataLimitedResult, params=params, samples=samples, runs=runs, diagnostics=diagnostics,
                           details={"unique_tokens": self.unique, "repeated_runs": repeated,
                                    "max_epochs": float(d.max() / self.unique), "focus": self.focus,
                                    "r_star": "fixed" if fixed is not None else "fitted",
                                    "search": "grid over alpha, beta, log R*, then Nelder-Mead"})


__all__ = ["DataLimited", "DataLimitedResult", "data_limited_frontier", "data_limited_loss", "effective_data"]
