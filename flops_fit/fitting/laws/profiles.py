"""IsoFLOP profiles: loss against log N within one budget, and where each has its minimum.

Approach 2 fits power laws through these minima, the held-out check reads a budget's
observed optimum from its profile, and the report draws them. Each budget's loss is fitted
against log N by its IsoFLOP slice (the default: the curve a Chinchilla law traces at fixed
compute, exponents shared across budgets; unbiased where a parabola is not, see
``slices``), a parabola (Chinchilla's paper), a Huber-weighted parabola (robust to a stray
run) or Akima interpolation (Porian et al. 2024; follows asymmetric profiles, but tracks noise).
A budget whose lowest run is the smallest or largest size, or whose fitted minimum falls
outside the size grid, has no interior minimum: it is excluded and reported, never
extrapolated.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws.slices import fit_slices, fit_slices_many

CURVES = ("slice", "parabola", "huber", "akima")
SLICE_SPARE = 3  # residual degrees of freedom the slices need to fit their two shared exponents
MIN_SIZES = 3


def check_curve(curve: str) -> str:
    if curve not in CURVES:
        raise FitInputError(f"curve must be one of {', '.join(CURVES)}; got {curve!r}")
    return curve


def budget_groups(runs: Runs) -> tuple[np.ndarray, list[str]]:
    """Each run's budget: the budget column, else FLOPs rounded to one significant figure."""
    f = runs.frame
    if runs.has_budget:
        return f["budget"].to_numpy(float), []
    flops = f["flops"].to_numpy(float)
    exponent = np.floor(np.log10(flops))
    rounded = np.round(flops / 10.0 ** exponent) * 10.0 ** exponent
    return rounded, ["no budget column: budgets inferred by rounding FLOPs to one significant figure"]


def edge_reason(log_n: np.ndarray, loss: np.ndarray, weights: np.ndarray) -> str | None:
    """Why one budget's runs cannot show an interior minimum, or None if they can."""
    keep = weights > 0
    x, y = log_n[keep], loss[keep]
    sizes = np.unique(x)
    if sizes.size < MIN_SIZES:
        return f"fewer than {MIN_SIZES} model sizes ({sizes.size})"
    lowest = x[np.argmin(y)]
    if lowest == sizes[0] or lowest == sizes[-1]:
        which = "smallest" if lowest == sizes[0] else "largest"
        return f"edge minimum: the {which} size has the lowest loss"
    return None


def _checked(x_opt: float, y_opt: float, sizes: np.ndarray):
    if not sizes[0] < x_opt < sizes[-1]:
        return np.nan, np.nan, "edge minimum: the fitted minimum lies outside the size grid"
    if not y_opt > 0:
        return np.nan, np.nan, "no interior minimum: the fitted profile dips below zero loss"
    return float(x_opt), float(y_opt), None


def profile_minimum(log_n: np.ndarray, loss: np.ndarray, weights: np.ndarray, curve: str):
    """(log N at the minimum, loss there, why excluded or None) for one budget's runs, fitted
    alone (a slice fitted alone needs 6 or more sizes; see ``slice_minima`` for several budgets)."""
    reason = edge_reason(log_n, loss, weights)
    if reason is not None:
        return np.nan, np.nan, reason
    keep = weights > 0
    x, y, w = log_n[keep], loss[keep], weights[keep]
    sizes = np.unique(x)
    if curve == "slice":
        return slice_minima([(log_n, loss, weights)])[0][0]
    if curve in ("parabola", "huber"):
        c2, c1, c0 = (huber_quadratic if curve == "huber" else _quadratic)(x, y, w)
        if c2 <= 0:
            return np.nan, np.nan, "no interior minimum: the fitted parabola opens downward"
        x_opt = -c1 / (2 * c2)
        y_opt = c0 - c1 * c1 / (4 * c2)
    else:
        fine = np.linspace(sizes[0], sizes[-1], 400)
        values = profile_curve(x, y, w, curve, fine)
        x_opt, y_opt = fine[np.argmin(values)], float(values.min())
    return _checked(x_opt, y_opt, sizes)


def slice_minima(groups: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
                 start: tuple[float, float] | None = None
                 ) -> tuple[list[tuple[float, float, str | None]], tuple[float, float] | None]:
    """Each budget's (log N, loss, why excluded) at its IsoFLOP slice's minimum, the slices'
    exponents fitted jointly over the budgets that can show an interior minimum, and those
    exponents (a bootstrap passes them back as ``start``). Too few runs to fit the exponents
    (fewer than 3 spare degrees of freedom) falls back to parabolas (exponents None)."""
    reasons, fitted = _slice_inputs(groups)
    if fitted is None:
        return [profile_minimum(*g, "parabola") for g in groups], None
    alpha, beta, optima = fit_slices(fitted, start)
    return _slice_outcome(groups, reasons, optima), (alpha, beta)


def slice_minima_many(draws: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]], start: tuple[float, float]
                      ) -> list[tuple[list[tuple[float, float, str | None]], tuple[float, float] | None]]:
    """``slice_minima(groups, start)`` for each of a bootstrap's ``draws``, the slice fits of all
    of them at once (``slices.fit_slices_many``)."""
    prepared = [_slice_inputs(groups) for groups in draws]
    batch = [i for i, (_, fitted) in enumerate(prepared) if fitted is not None]
    solved = dict(zip(batch, fit_slices_many([prepared[i][1] for i in batch], start) if batch else [], strict=True))
    out = []
    for i, groups in enumerate(draws):
        if i not in solved:
            out.append(([profile_minimum(*g, "parabola") for g in groups], None))
            continue
        alpha, beta, optima = solved[i]
        out.append((_slice_outcome(groups, prepared[i][0], optima), (alpha, beta)))
    return out


def _slice_inputs(groups):
    """Each budget's edge reason, and the runs of those that can show a minimum (None when too
    few are left to fit the shared exponents)."""
    reasons = [edge_reason(*g) for g in groups]
    fitted = [(x[w > 0], y[w > 0], w[w > 0]) for (x, y, w), r in zip(groups, reasons) if r is None]
    spare = sum(np.unique(x).size - 3 for x, _, _ in fitted)
    return reasons, (fitted if spare >= SLICE_SPARE else None)


def _slice_outcome(groups, reasons, optima) -> list[tuple[float, float, str | None]]:
    out, it = [], iter(optima)
    for (x, _, w), reason in zip(groups, reasons):
        if reason is not None:
            out.append((np.nan, np.nan, reason))
            continue
        x_opt, y_opt = next(it)
        if not np.isfinite(x_opt):
            out.append((np.nan, np.nan, "no interior minimum: the fitted slice has no minimum"))
            continue
        out.append(_checked(x_opt, y_opt, np.unique(x[w > 0])))
    return out


def profile_curve(log_n: np.ndarray, loss: np.ndarray, weights: np.ndarray, curve: str,
                  at: np.ndarray) -> np.ndarray:
    """The fitted profile (loss at log N = ``at``) of one budget's runs (a slice: pass every
    budget's runs to ``slice_curve``; alone, it is drawn as the parabola)."""
    if curve == "akima":
        from scipy.interpolate import Akima1DInterpolator

        sizes = np.unique(log_n)
        means = np.array([np.average(loss[log_n == s], weights=weights[log_n == s]) for s in sizes])
        return Akima1DInterpolator(sizes, means)(at)
    fitter = huber_quadratic if curve == "huber" else _quadratic
    return np.polyval(fitter(log_n, loss, weights), at)


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


def profile_optima(runs: Runs, budgets: np.ndarray, weights: np.ndarray, curve: str,
                   start: tuple[float, float] | None = None) -> pd.DataFrame:
    """Per budget: log N and log D at the profile's minimum, the loss there, or why excluded.

    Slices' shared exponents are in ``.attrs["exponents"]`` (None for other curves);
    ``start`` warm-starts them (bootstrap draws of the same runs).
    ``position`` is where the minimum sits in the budget's log-size range (0 smallest,
    1 largest); D at the minimum comes from the runs' own (log N, log D) line at that
    budget, so FLOPs that are not 6ND are respected.
    """
    return profile_optima_many(runs, budgets, weights[None], curve, start)[0]


def profile_optima_many(runs: Runs, budgets: np.ndarray, weights: np.ndarray, curve: str,
                        start: tuple[float, float] | None = None) -> list[pd.DataFrame]:
    """``profile_optima`` for each row of run weights ``weights`` (a bootstrap's resamples); warm
    slices (``start`` given) are fitted for every row at once (``slice_minima_many``)."""
    frames = []
    for rows, exponents in _optima_rows(runs, budgets, weights, curve, start):
        frame = pd.DataFrame([dict(zip(OPTIMA_COLUMNS, row)) for row in rows])
        frame.attrs["exponents"] = exponents
        frames.append(frame)
    return frames


OPTIMA_COLUMNS = ("budget", "log_n", "log_d", "loss", "excluded", "position", "runs")
EXCLUDED = OPTIMA_COLUMNS.index("excluded")  # the columns before it are the optimum's values


def interior_optima_many(runs: Runs, budgets: np.ndarray, weights: np.ndarray, curve: str,
                         start: tuple[float, float] | None = None) -> list[tuple[np.ndarray, ...]]:
    """Per row of ``weights``, the (budget, log N, log D, loss) columns of the budgets whose profile
    has an interior minimum: ``profile_optima_many``'s kept rows without a table per resample (a
    bootstrap's hundreds of small tables cost more than its fits)."""
    out = []
    for rows, _ in _optima_rows(runs, budgets, weights, curve, start):
        kept = [row for row in rows if row[EXCLUDED] is None]
        out.append(tuple(np.array([row[i] for row in kept], dtype=float) for i in range(EXCLUDED)))
    return out


def _optima_rows(runs: Runs, budgets: np.ndarray, weights: np.ndarray, curve: str,
                 start: tuple[float, float] | None) -> list[tuple[list[tuple], Any]]:
    """Per row of ``weights``: each budget's OPTIMA_COLUMNS values, and the slices' exponents."""
    f = runs.frame
    log_n, log_d = np.log(f["params"].to_numpy(float)), np.log(f["tokens"].to_numpy(float))
    loss = f["loss"].to_numpy(float)
    masks = [budgets == c for c in np.unique(budgets)]
    draws = [[(log_n[m], loss[m], w[m]) for m in masks] for w in weights]
    if curve != "slice":
        found = [([profile_minimum(*g, curve) for g in groups], None) for groups in draws]
    elif start is None:
        found = [slice_minima(groups) for groups in draws]
    else:
        found = slice_minima_many(draws, start)
    lines = {}  # each budget's (log N, log D) line, shared by every row
    out = []
    for minima, exponents in found:
        rows = []
        for c, m, (x_opt, y_opt, reason) in zip(np.unique(budgets), masks, minima):
            log_d_opt = position = np.nan
            if reason is None:
                if c not in lines:
                    lines[c] = np.polyfit(log_n[m], log_d[m], 1)
                slope, intercept = lines[c]
                log_d_opt = intercept + slope * x_opt
                lo, hi = log_n[m].min(), log_n[m].max()
                position = (x_opt - lo) / (hi - lo)
            rows.append((c, x_opt, log_d_opt, y_opt, reason, position, int(m.sum())))
        out.append((rows, exponents))
    return out


__all__ = ["CURVES", "budget_groups", "edge_reason", "huber_quadratic", "profile_curve", "profile_minimum",
           "interior_optima_many", "profile_optima_many", "slice_minima_many",
           "profile_optima", "slice_minima"]
