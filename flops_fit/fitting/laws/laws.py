"""The compute-optimal frontier each fitted law implies: C -> (N_opt, D_opt, loss).

Functions take parameter columns as arrays (one entry per bootstrap draw), so a prediction
and its interval come from one vectorised call.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

Params = Mapping[str, np.ndarray]


def law_loss(p: Mapping[str, float | np.ndarray], n: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Chinchilla's law L(N, D) = E + A / N^alpha + B / D^beta: the one place it is written.

    Parameters may be scalars or columns (one per bootstrap draw); numpy broadcasts them
    against ``n`` and ``d``. A draw whose coefficient is unbounded (inf) gives inf or nan here,
    quietly: intervals read non-finite draws as failed, and the user's terminal gets no warning.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return p["E"] + p["A"] * np.asarray(n) ** -p["alpha"] + p["B"] * np.asarray(d) ** -p["beta"]


def parametric_frontier(p: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimise E + A/N^alpha + B/D^beta subject to C = k N^s N D (Chinchilla eq. 4 when s = 0).

    k N^s is the runs' FLOPs per parameter per token (``k_slope`` s; 0, i.e. k constant, when
    absent): at small sizes attention and the output head make it fall with N. Then
    N_opt = G (C/k)^a with a = beta / (alpha + (1+s) beta),
    G = (alpha A / ((1+s) beta B))^(1 / (alpha + (1+s) beta)), and D_opt = C / (k N_opt^(1+s)).
    Shapes: params (m,), budgets (c,) -> (m, c).
    """
    col = {key: np.asarray(p[key], dtype=float)[:, None] for key in ("E", "A", "B", "alpha", "beta", "k")}
    A, B, alpha, beta = col["A"], col["B"], col["alpha"], col["beta"]
    grow = 1.0 + k_slope(p)
    c = np.asarray(budgets, dtype=float)[None, :] / col["k"]
    with np.errstate(all="ignore"):
        total = alpha + grow * beta
        log_g = (np.log(alpha * A) - np.log(grow * beta * B)) / total
        n = np.exp(log_g + beta / total * np.log(c))
        d = c / n ** grow
        loss = law_loss(col, n, d)
    return n, d, loss


def k_slope(p: Params) -> np.ndarray | float:
    """The exponent s of FLOPs per parameter-token k N^s, as a column (0 without one)."""
    return np.asarray(p["k_slope"], dtype=float)[:, None] if "k_slope" in p else 0.0


def frontier_exponents(alpha: np.ndarray, beta: np.ndarray, slope: float) -> tuple[np.ndarray, np.ndarray]:
    """a and b of N_opt ~ C^a, D_opt ~ C^b for C = k N^(1+s) D: beta / (alpha + (1+s) beta) and
    alpha / (alpha + (1+s) beta) (Chinchilla's beta / (alpha + beta), alpha / (alpha + beta) at s = 0)."""
    total = alpha + (1.0 + slope) * beta
    return beta / total, alpha / total


def power_frontier(p: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Power laws N = exp(n0) C^a, D = exp(d0) C^b and the loss L = l_inf + exp(l0) C^l
    (Approaches 1, 2); ``l_inf``, the irreducible loss, is 0 in results from before it existed."""
    log_c = np.log(np.asarray(budgets, dtype=float))[None, :]
    col = {key: np.asarray(p[key], dtype=float)[:, None] for key in ("a", "n0", "b", "d0", "l", "l0")}
    l_inf = np.asarray(p["l_inf"], dtype=float)[:, None] if "l_inf" in p else 0.0
    n = np.exp(col["n0"] + col["a"] * log_c)
    d = np.exp(col["d0"] + col["b"] * log_c)
    loss = l_inf + np.exp(col["l0"] + col["l"] * log_c)
    return n, d, loss


def fit_power(log_c: np.ndarray, log_y: np.ndarray, weights: np.ndarray | None = None) -> tuple[float, float]:
    """Weighted least-squares line log y = intercept + slope log C; returns (slope, intercept)."""
    return line_fitter(log_c, weights)(log_y)


def line_fitter(log_c: np.ndarray, weights: np.ndarray | None = None):
    """``fit_power`` at these ``log_c`` for any ``log_y``, what does not depend on y computed once:
    the normal equations about the weighted means (np.polyfit's answer without its SVD; the
    envelope and IsoFLOP bootstraps fit thousands of these lines, most inside a 1-D search)."""
    w = np.ones_like(log_c) if weights is None else weights
    if np.count_nonzero(w) < 2 or np.ptp(log_c[w > 0]) == 0:
        return lambda log_y: (np.nan, np.nan)
    total = w.sum()
    x_mean = (w @ log_c) / total
    wdx = w * (log_c - x_mean)
    denominator = wdx @ (log_c - x_mean)

    def fit(log_y: np.ndarray) -> tuple[float, float]:
        y_mean = (w @ log_y) / total
        slope = wdx @ (log_y - y_mean) / denominator
        return float(slope), float(y_mean - slope * x_mean)

    return fit


def fit_loss_law(log_c: np.ndarray, loss: np.ndarray, slope: float | None = None) -> dict[str, float]:
    """L(C) = l_inf + exp(l0) C^l through compute-optimal losses, least squares in log L.

    The irreducible term matters: at a Chinchilla law's optimum L(C) = E + K C^-g exactly,
    and a pure power law (l_inf = 0) bends the wrong way, forecasting too low a loss beyond
    the sweep. With ``slope`` (-g, known from the profiles' shape) l_inf and exp(l0) are
    linear, found from 2 or more points; otherwise l_inf is profiled over [0, min loss), and
    with fewer than MIN_LOSS_POINTS points (or a rising loss) it is 0.
    """
    from scipy.optimize import minimize_scalar

    if slope is not None and np.isfinite(slope) and slope < 0 and loss.size >= 2:
        columns = np.column_stack([np.ones_like(log_c), np.exp(slope * log_c)])
        (l_inf, k), *_ = np.linalg.lstsq(columns, loss, rcond=None)
        if l_inf < 0 or k <= 0:
            l_inf, k = 0.0, float(np.exp(np.mean(np.log(loss) - slope * log_c)))
        return {"l": float(slope), "l0": float(np.log(k)), "l_inf": float(l_inf)}
    lslope, l0 = fit_power(log_c, np.log(loss))
    if loss.size < MIN_LOSS_POINTS or not lslope < 0:
        return {"l": lslope, "l0": l0, "l_inf": 0.0}
    floor = float(loss.min())
    line, log_loss = line_fitter(log_c), np.log(loss)

    def sse(l_inf: float) -> float:
        slope, intercept = line(np.log(loss - l_inf))
        return float(np.sum((np.log(l_inf + np.exp(intercept + slope * log_c)) - log_loss) ** 2))

    best = minimize_scalar(sse, bounds=(0.0, floor * (1 - 1e-9)), method="bounded", options={"xatol": floor * 1e-7})
    l_inf = float(best.x) if best.fun < sse(0.0) else 0.0
    lslope, l0 = fit_power(log_c, np.log(loss - l_inf))
    return {"l": lslope, "l0": l0, "l_inf": l_inf}


MIN_LOSS_POINTS = 3  # compute-optimal losses needed to fit an irreducible term beside the power law


def fit_frontier(log_c: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_l: np.ndarray,
                 loss_points: tuple[np.ndarray, np.ndarray] | None = None,
                 loss_slope: float | None = None) -> dict[str, float]:
    """Power laws through compute-optimal points: the parameters ``power_frontier`` reads.
    ``loss_points`` (log C, loss) fit the loss law instead of (log_c, exp(log_l));
    ``loss_slope`` fixes its exponent (see ``fit_loss_law``)."""
    a, n0 = fit_power(log_c, log_n)
    b, d0 = fit_power(log_c, log_d)
    lc, ls = loss_points if loss_points is not None else (log_c, np.exp(log_l))
    return {"a": a, "b": b, "n0": n0, "d0": d0, **fit_loss_law(lc, ls, loss_slope)}


def line_r2(x: np.ndarray, y: np.ndarray, slope: float, intercept: float) -> tuple[np.ndarray, float]:
    """Residuals of y about the line and the line's R^2."""
    residual = y - (intercept + slope * x)
    total = np.sum((y - y.mean()) ** 2)
    return residual, float(1.0 - np.sum(residual ** 2) / total) if total > 0 else float("nan")
