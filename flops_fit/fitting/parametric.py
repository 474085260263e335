"""Approach 3: L(N, D) = E + A / N^alpha + B / D^beta, and its variable-projection variant.

``fit_parametric`` follows Chinchilla (app. D.2) as Epoch AI re-ran it: Huber loss with
delta 1e-3 on log loss, summed over runs (not averaged: the average stops L-BFGS early),
log-sum-exp parameterisation, L-BFGS from every point of the initialisation grid.

Bootstrap: the full grid runs once, on all runs; each resample then restarts L-BFGS from
the best few distinct optima of that grid (``starts``) rather than the 4500 grid points.
On the full data this warm start reaches the same optimum as the full grid (a test checks
it), and it is what lets 4000 resamples finish in seconds.

``fit_vpnls`` searches (alpha, beta) only and solves E, A, B >= 0 by non-negative least
squares on the loss for each candidate: a two-parameter problem far better conditioned
than the five-parameter one.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting._huber import HUBER_DELTA, objective
from flops_fit.fitting._lbfgs import minimize_batch
from flops_fit.fitting.bootstrap import resample_weights
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws import parametric_frontier
from flops_fit.fitting.result import Diagnostics, FitResult

# Chinchilla's initialisation grid (Hoffmann et al. 2022, app. D.2): 4500 starts.
INIT_GRID = np.array([
    (a, b, e, alpha, beta)
    for alpha, beta, e, a, b in itertools.product(
        np.arange(0.0, 2.01, 0.5), np.arange(0.0, 2.01, 0.5), np.arange(-1.0, 1.01, 0.5),
        np.arange(0.0, 25.1, 5.0), np.arange(0.0, 25.1, 5.0))
])
GRID_FTOL = 1e-6
POLISH = 10
MIN_RUNS = 6  # five parameters need more runs than that to say anything


def _columns(runs: Runs) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    f = runs.frame
    if len(f) < MIN_RUNS:
        raise FitInputError(f"the parametric fit needs at least {MIN_RUNS} runs; got {len(f)}")
    n, d = f["params"].to_numpy(float), f["tokens"].to_numpy(float)
    if np.ptp(np.log(n)) == 0 or np.ptp(np.log(d)) == 0:
        raise FitInputError("the parametric fit needs runs of several model sizes and token counts; "
                            "all runs share one size or one token count")
    k = float(np.median(f["flops"].to_numpy(float) / (n * d)))  # FLOPs per parameter per token
    return np.log(n), np.log(d), f["loss"].to_numpy(float), k


def _theta_params(theta: np.ndarray, k: float) -> dict[str, np.ndarray]:
    theta = np.atleast_2d(theta)
    alpha, beta = theta[:, 3], theta[:, 4]
    return {"E": np.exp(theta[:, 2]), "A": np.exp(theta[:, 0]), "B": np.exp(theta[:, 1]),
            "alpha": alpha, "beta": beta, "a": beta / (alpha + beta), "b": alpha / (alpha + beta),
            "k": np.full(theta.shape[0], k)}


def distinct_optima(x: np.ndarray, f: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` best solutions that differ from each other (rounded parameters)."""
    order = np.argsort(f)
    keys, picked = set(), []
    for i in order:
        if not np.isfinite(f[i]):
            break
        key = tuple(np.round(x[i], 3))
        if key not in keys:
            keys.add(key)
            picked.append(i)
            if len(picked) == count:
                break
    return x[picked]


def grid_search(fun, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """L-BFGS from every grid point; returns the ``keep`` best distinct optima and their values.

    Every start runs until its relative decrease per step stays below GRID_FTOL; the best
    POLISH distinct solutions then continue to full precision. All starts end in the same
    few basins long before the loose tolerance stops them, and polishing settles the winner.
    """
    x, f, _ = minimize_batch(fun, INIT_GRID, maxiter=500, ftol=GRID_FTOL)
    x, f, _ = minimize_batch(fun, distinct_optima(x, f, POLISH), maxiter=2000)
    order = np.argsort(np.where(np.isfinite(f), f, np.inf))
    return distinct_optima(x[order], f[order], keep), f[order]


def huber_fit(log_n, log_d, log_l, weights, starts, delta=HUBER_DELTA):
    """Best L-BFGS solution per weight row from each start: returns (theta (R, 5), value (R,))."""
    weights = np.atleast_2d(weights)
    reps, s = weights.shape[0], starts.shape[0]
    x0 = np.repeat(starts[None], reps, axis=0).reshape(reps * s, 5)
    row_weights = np.repeat(weights, s, axis=0)

    def fun(x, rows):
        return objective(x, log_n, log_d, log_l, row_weights[rows] if reps > 1 else row_weights[0], delta)

    x, f, _ = minimize_batch(fun, x0, maxiter=500)
    f = np.where(np.isfinite(f), f, np.inf).reshape(reps, s)
    best = f.argmin(1)
    return x.reshape(reps, s, 5)[np.arange(reps), best], f[np.arange(reps), best]


def fit_parametric(runs: Runs, *, bootstrap: int = 1000, seed: int | None = 0, level: float = 0.95,
                   starts: int = 3, delta: float = HUBER_DELTA) -> FitResult:
    """Chinchilla Approach 3 with bootstrap intervals (percentiles of ``bootstrap`` resamples)."""
    log_n, log_d, loss, k = _columns(runs)
    log_l = np.log(loss)
    ones = np.ones(log_n.size)
    clock = time.perf_counter()
    best_starts, f = grid_search(lambda t, rows: objective(t, log_n, log_d, log_l, ones, delta), starts)
    theta, value = best_starts[0], float(np.nanmin(f))
    grid_seconds = time.perf_counter() - clock
    samples = pd.DataFrame()
    if bootstrap:
        weights = resample_weights(log_n.size, bootstrap, seed)
        thetas, _ = huber_fit(log_n, log_d, log_l, weights, best_starts, delta)
        samples = pd.DataFrame(_theta_params(thetas, k))
    params = {key: float(v[0]) for key, v in _theta_params(theta, k).items()}
    predicted = _predict_loss(params, np.exp(log_n), np.exp(log_d))
    diagnostics = _diagnostics(runs, predicted, params)
    return FitResult("parametric", params, samples, parametric_frontier, runs, diagnostics, level, seed,
                     details={"objective": value, "huber_delta": delta, "starts": int(len(INIT_GRID)),
                              "bootstrap_starts": int(len(best_starts)), "grid_seconds": grid_seconds})


def _predict_loss(p: dict[str, float], n: np.ndarray, d: np.ndarray) -> np.ndarray:
    return p["E"] + p["A"] * n ** -p["alpha"] + p["B"] * d ** -p["beta"]


def _diagnostics(runs: Runs, predicted: np.ndarray, params: dict[str, float],
                 bounds: tuple[float, float] | None = None) -> Diagnostics:
    f = runs.frame
    log_l = np.log(f["loss"].to_numpy(float))
    residual = log_l - np.log(predicted)
    r2 = 1.0 - np.sum(residual ** 2) / np.sum((log_l - log_l.mean()) ** 2)
    frame = f[["run_id", "params", "tokens", "flops", "loss"]].assign(predicted=predicted, residual=residual)
    warnings = []
    if bounds is not None:
        for name in ("alpha", "beta"):
            if min(abs(params[name] - bounds[0]), abs(params[name] - bounds[1])) < 1e-6:
                warnings.append(f"{name} = {params[name]:.4g} sits on the search bound {bounds}: "
                                "the data do not pin it down")
    for name in ("E", "A", "B"):
        if params[name] <= 1e-12:
            warnings.append(f"{name} fitted as 0: the runs do not show that term; widen the size or token range")
    return Diagnostics(frame, float(r2), "log loss, per run", list(runs.excluded), warnings)


# ---- variable projection -----------------------------------------------------------------

ALPHA_BETA_BOUNDS = (0.01, 2.5)
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


def _vp_solve(n, d, loss, w, start=None):
    from scipy.optimize import minimize

    def profile(ab):
        alpha, beta = ab
        X = np.column_stack([np.ones_like(n), n ** -alpha, d ** -beta])
        return _nnls3(X, loss, w)

    if start is None:
        start = min((profile((a, b))[1], a, b) for a in _SEARCH_GRID for b in _SEARCH_GRID)[1:]
    res = minimize(lambda ab: profile(ab)[1], np.asarray(start, float), method="Nelder-Mead",
                   bounds=[ALPHA_BETA_BOUNDS] * 2, options={"xatol": 1e-6, "fatol": 1e-12, "maxiter": 1000})
    coef, ssr = profile(res.x)
    return np.array([coef[0], coef[1], coef[2], res.x[0], res.x[1]]), ssr


def fit_vpnls(runs: Runs, *, bootstrap: int = 1000, seed: int | None = 0, level: float = 0.95) -> FitResult:
    """Variable projection: grid then Nelder-Mead over (alpha, beta); E, A, B by NNLS."""
    log_n, log_d, loss, k = _columns(runs)
    n, d = np.exp(log_n), np.exp(log_d)
    # Scale columns to order one so the normal equations stay well conditioned.
    n_s, d_s = n / np.exp(log_n.mean()), d / np.exp(log_d.mean())
    est, _ = _vp_solve(n_s, d_s, loss, np.ones(n.size))

    def unscale(v):
        E, A, B, alpha, beta = v.T
        return {"E": E, "A": A * np.exp(log_n.mean()) ** alpha, "B": B * np.exp(log_d.mean()) ** beta,
                "alpha": alpha, "beta": beta, "a": beta / (alpha + beta), "b": alpha / (alpha + beta),
                "k": np.full(np.shape(E), k)}

    samples = pd.DataFrame()
    if bootstrap:
        weights = resample_weights(n.size, bootstrap, seed)
        draws = np.array([_vp_solve(n_s, d_s, loss, w, start=est[3:])[0] for w in weights])
        samples = pd.DataFrame(unscale(draws))
    params = {key: float(v) for key, v in unscale(est).items()}
    diagnostics = _diagnostics(runs, _predict_loss(params, n, d), params, ALPHA_BETA_BOUNDS)
    return FitResult("vpnls", params, samples, parametric_frontier, runs, diagnostics, level, seed,
                     details={"search": "grid 0.05..2 step 0.05, then Nelder-Mead", "bounds": list(ALPHA_BETA_BOUNDS)})
