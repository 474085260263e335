"""Approach 2: per-budget IsoFLOP profiles, their minima, and power laws through the minima.

Each budget's loss is fitted against log N by a parabola (Chinchilla), a Huber-weighted
parabola (robust to a stray run) or Akima interpolation (Porian et al. 2024; follows
asymmetric profiles, but tracks noise). A budget whose lowest run
is the smallest or largest size, or whose fitted minimum falls outside the size grid, has no
interior minimum: it is excluded and reported, never extrapolated.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting.bootstrap import resample_weights
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws import fit_frontier, line_r2, power_frontier
from flops_fit.fitting.result import Diagnostics, FitResult

CURVES = ("parabola", "huber", "akima")
MIN_SIZES = 3
MIN_BUDGETS = 2
FEW_BUDGETS = 4
OFF_CENTRE = 0.25  # optimum within this fraction of either end of the log-size range


def budget_groups(runs: Runs) -> tuple[np.ndarray, list[str]]:
    """Each run's budget: the budget column, else FLOPs rounded to one significant figure."""
    f = runs.frame
    if runs.has_budget:
        return f["budget"].to_numpy(float), []
    flops = f["flops"].to_numpy(float)
    exponent = np.floor(np.log10(flops))
    rounded = np.round(flops / 10.0 ** exponent) * 10.0 ** exponent
    return rounded, ["no budget column: budgets inferred by rounding FLOPs to one significant figure"]


def profile_minimum(log_n: np.ndarray, loss: np.ndarray, weights: np.ndarray, curve: str):
    """(log N at the minimum, loss there, why excluded or None) for one budget's runs."""
    keep = weights > 0
    x, y, w = log_n[keep], loss[keep], weights[keep]
    sizes = np.unique(x)
    if sizes.size < MIN_SIZES:
        return np.nan, np.nan, f"fewer than {MIN_SIZES} model sizes ({sizes.size})"
    lowest = x[np.argmin(y)]
    if lowest == sizes[0] or lowest == sizes[-1]:
        which = "smallest" if lowest == sizes[0] else "largest"
        return np.nan, np.nan, f"edge minimum: the {which} size has the lowest loss"
    if curve in ("parabola", "huber"):
        c2, c1, c0 = (huber_quadratic if curve == "huber" else _quadratic)(x, y, w)
        if c2 <= 0:
            return np.nan, np.nan, "no interior minimum: the fitted parabola opens downward"
        x_opt = -c1 / (2 * c2)
        y_opt = c0 - c1 * c1 / (4 * c2)
    else:
        from scipy.interpolate import Akima1DInterpolator

        means = np.array([np.average(y[x == s], weights=w[x == s]) for s in sizes])
        fine = np.linspace(sizes[0], sizes[-1], 400)
        values = Akima1DInterpolator(sizes, means)(fine)
        x_opt, y_opt = fine[np.argmin(values)], float(values.min())
    if not sizes[0] < x_opt < sizes[-1]:
        return np.nan, np.nan, "edge minimum: the fitted minimum lies outside the size grid"
    return float(x_opt), float(y_opt), None


def _quadratic(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.polyfit(x, y, 2, w=np.sqrt(w))


def huber_quadratic(x: np.ndarray, y: np.ndarray, w: np.ndarray, iterations: int = 30) -> np.ndarray:
    """Quadratic fitted by iteratively reweighted least squares under Huber's loss.

    The threshold is 1.345 robust standard deviations (1.4826 MAD) of the residuals, so a
    diverged or badly tuned run pulls the minimum far less than in a plain parabola.
    """
    coef = _quadratic(x, y, w)
    for _ in range(iterations):
        r = y - np.polyval(coef, x)
        scale = 1.4826 * np.median(np.abs(r - np.median(r)))
        if scale <= 1e-12:
            break
        t = 1.345 * scale
        robust = np.where(np.abs(r) <= t, 1.0, t / np.maximum(np.abs(r), 1e-300))
        new = _quadratic(x, y, w * robust)
        if np.allclose(new, coef, rtol=1e-10, atol=1e-12):
            break
        coef = new
    return coef


def _optima(runs: Runs, budgets: np.ndarray, weights: np.ndarray, curve: str) -> pd.DataFrame:
    f = runs.frame
    log_n, log_d, loss = np.log(f["params"].to_numpy(float)), np.log(f["tokens"].to_numpy(float)), f["loss"].to_numpy(float)
    rows = []
    for c in np.unique(budgets):
        m = budgets == c
        x_opt, y_opt, reason = profile_minimum(log_n[m], loss[m], weights[m], curve)
        log_d_opt = np.nan
        if reason is None:  # tokens at the optimum from the runs' own (N, D) relation at this budget
            slope, intercept = np.polyfit(log_n[m], log_d[m], 1)
            log_d_opt = intercept + slope * x_opt
            lo, hi = log_n[m].min(), log_n[m].max()
            position = (x_opt - lo) / (hi - lo)
        rows.append({"budget": c, "log_n": x_opt, "log_d": log_d_opt, "loss": y_opt, "excluded": reason,
                     "position": position if reason is None else np.nan, "runs": int(m.sum())})
    return pd.DataFrame(rows)


def fit_isoflop(runs: Runs, *, curve: str = "parabola", bootstrap: int = 1000, seed: int | None = 0,
                level: float = 0.95) -> FitResult:
    """Approach 2 with bootstrap intervals (runs resampled within each budget)."""
    if curve not in CURVES:
        raise FitInputError(f"curve must be one of {', '.join(CURVES)}; got {curve!r}")
    budgets, warnings = budget_groups(runs)
    ones = np.ones(len(runs))
    optima = _optima(runs, budgets, ones, curve)
    good = optima[optima["excluded"].isna()]
    if len(good) < MIN_BUDGETS:
        reasons = "; ".join(f"{r.budget:.3g}: {r.excluded}" for r in optima.itertuples() if isinstance(r.excluded, str))
        raise FitInputError(
            f"Approach 2 needs an interior loss minimum at {MIN_BUDGETS} or more budgets; found "
            f"{len(good)} of {len(optima)} ({reasons or 'no budgets'}). Add sizes around each budget's "
            "optimum, or use method='parametric'."
        )
    log_c = np.log(good["budget"].to_numpy(float))
    params = fit_frontier(log_c, good["log_n"].to_numpy(), good["log_d"].to_numpy(), np.log(good["loss"].to_numpy()))

    samples = pd.DataFrame()
    if bootstrap:
        draws = []
        for w in resample_weights(len(runs), bootstrap, seed, groups=budgets):
            o = _optima(runs, budgets, w, curve)
            o = o[o["excluded"].isna()]
            if len(o) >= MIN_BUDGETS:
                draws.append(fit_frontier(np.log(o["budget"].to_numpy(float)), o["log_n"].to_numpy(),
                                          o["log_d"].to_numpy(), np.log(o["loss"].to_numpy())))
        samples = pd.DataFrame(draws)
        if len(draws) < bootstrap:
            warnings.append(f"{bootstrap - len(draws)} of {bootstrap} resamples had interior minima at fewer "
                            f"than {MIN_BUDGETS} budgets and were dropped from the intervals")

    excluded = list(runs.excluded)
    for r in optima.itertuples():
        if isinstance(r.excluded, str):
            excluded.append({"budget": float(r.budget), "runs": r.runs, "reason": r.excluded})
    warnings += _grid_warnings(optima, good)
    residual, r2 = line_r2(log_c, good["log_n"].to_numpy(), params["a"], params["n0"])
    frame = pd.DataFrame({"flops": good["budget"].to_numpy(float), "N_opt": np.exp(good["log_n"].to_numpy()),
                          "predicted": np.exp(good["log_n"].to_numpy() - residual), "residual": residual})
    return FitResult("isoflop", params, samples, power_frontier, runs,
                     Diagnostics(frame, r2, "log N_opt against log C, per budget", excluded, warnings),
                     level, seed, details={"curve": curve, "optima": optima, "budgets_of_runs": budgets})


def _grid_warnings(optima: pd.DataFrame, good: pd.DataFrame) -> list[str]:
    warnings = []
    edge = optima["excluded"].fillna("").str.startswith("edge").sum()
    if edge:
        warnings.append(f"{edge} budget(s) had their minimum on the edge of the size grid and were excluded; "
                        "extend the size grid past the optimum")
    if len(good) < FEW_BUDGETS:
        warnings.append(f"only {len(good)} budgets with interior minima: the exponents rest on few points; "
                        f"sweep {FEW_BUDGETS} or more budgets")
    for r in good.itertuples():
        if r.position < OFF_CENTRE or r.position > 1 - OFF_CENTRE:
            warnings.append(f"off-centre grid at budget {r.budget:.3g}: the optimum sits at {100 * r.position:.0f}% "
                            "of the log-size range; Approach 2 is biased when grids are off-centre, recentre it")
    return warnings
