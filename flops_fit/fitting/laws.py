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
    against ``n`` and ``d``.
    """
    return p["E"] + p["A"] * np.asarray(n) ** -p["alpha"] + p["B"] * np.asarray(d) ** -p["beta"]


def parametric_frontier(p: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimise E + A/N^alpha + B/D^beta subject to k N D = C (Chinchilla eq. 4).

    N_opt = G (C/k)^a, D_opt = (C/k) / N_opt, a = beta / (alpha + beta),
    G = (alpha A / (beta B))^(1 / (alpha + beta)). Shapes: params (m,), budgets (c,) -> (m, c).
    """
    col = {key: np.asarray(p[key], dtype=float)[:, None] for key in ("E", "A", "B", "alpha", "beta", "k")}
    A, B, alpha, beta = col["A"], col["B"], col["alpha"], col["beta"]
    c = np.asarray(budgets, dtype=float)[None, :] / col["k"]
    with np.errstate(all="ignore"):
        log_g = (np.log(alpha * A) - np.log(beta * B)) / (alpha + beta)
        n = np.exp(log_g + beta / (alpha + beta) * np.log(c))
        d = c / n
        loss = law_loss(col, n, d)
    return n, d, loss


def power_frontier(p: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Separate power laws N = exp(n0) C^a, D = exp(d0) C^b, L = exp(l0) C^l (Approaches 1, 2)."""
    log_c = np.log(np.asarray(budgets, dtype=float))[None, :]
    col = {key: np.asarray(p[key], dtype=float)[:, None] for key in ("a", "n0", "b", "d0", "l", "l0")}
    n = np.exp(col["n0"] + col["a"] * log_c)
    d = np.exp(col["d0"] + col["b"] * log_c)
    loss = np.exp(col["l0"] + col["l"] * log_c)
    return n, d, loss


def fit_power(log_c: np.ndarray, log_y: np.ndarray, weights: np.ndarray | None = None) -> tuple[float, float]:
    """Weighted least-squares line log y = intercept + slope log C; returns (slope, intercept)."""
    w = np.ones_like(log_c) if weights is None else weights
    if np.count_nonzero(w) < 2 or np.ptp(log_c[w > 0]) == 0:
        return np.nan, np.nan
    slope, intercept = np.polyfit(log_c, log_y, 1, w=np.sqrt(w))
    return float(slope), float(intercept)


def fit_frontier(log_c: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_l: np.ndarray) -> dict[str, float]:
    """Power laws through compute-optimal points: the parameters ``power_frontier`` reads."""
    a, n0 = fit_power(log_c, log_n)
    b, d0 = fit_power(log_c, log_d)
    lslope, l0 = fit_power(log_c, log_l)
    return {"a": a, "b": b, "n0": n0, "d0": d0, "l": lslope, "l0": l0}


def line_r2(x: np.ndarray, y: np.ndarray, slope: float, intercept: float) -> tuple[np.ndarray, float]:
    """Residuals of y about the line and the line's R^2."""
    residual = y - (intercept + slope * x)
    total = np.sum((y - y.mean()) ** 2)
    return residual, float(1.0 - np.sum(residual ** 2) / total) if total > 0 else float("nan")
