"""The learning-rate law across cells, and the batch-size law where batches were swept.

lr* = m * tokens^-a * scale^-b * batch^c (Marin's form; the scale is the width, or the
parameter count for a model whose size is not a width), fitted by least squares in logs to
the cells' optima. A term whose variable does not vary across the cells, or that the cells
cannot tell apart from another (one budget: tokens fall as the size grows), is left out
(its exponent 0, not fitted) and said so. Intervals: each bootstrap replicate moves every
cell's log(lr*) by its own bootstrap draw and adds resampled residuals of the law, then
refits. B*(C) = k * C^e is fitted to each cell's best batch size the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.fitting.laws.bootstrap import interval
from flops_fit.tables import counted

# term -> (exponent's name, sign in log lr*)
TERMS = {"tokens": ("a", -1.0), "scale": ("b", -1.0), "batch": ("c", 1.0)}
FORM = "lr = m * tokens^-a * {scale}^-b * batch^c"
# A term enters the law only if its log varies by this much (RMS) beyond what the terms
# already chosen explain: at one budget the tokens follow the width to within a few percent,
# and a fit that tried to separate them would extrapolate wildly.
MIN_SPREAD = 0.1


@dataclass
class Coefficient:
    value: float
    lo: float = math.nan
    hi: float = math.nan
    fitted: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "fitted": self.fitted}


@dataclass
class LawFit:
    """The fitted law: coefficients with intervals, which terms were left out and why."""

    scale: str
    coefficients: dict[str, Coefficient | None]  # m, a, b, c (c None: one batch size)
    cells: int
    rms_log: float  # root-mean-square residual of log(lr*) over the cells (NaN: no more cells than coefficients)
    notes: list[str] = field(default_factory=list)

    def rate(self, scale: float, tokens: float, batch: float) -> float:
        k = self.coefficients
        value = k["m"].value * tokens ** -k["a"].value * scale ** -k["b"].value
        return value * batch ** k["c"].value if k["c"] is not None else value

    def rates(self, samples: np.ndarray, scale: float, tokens: float, batch: float) -> np.ndarray:
        """The law's rate at one point for each bootstrap coefficient row (log m, a, b, c)."""
        return np.exp(samples[:, 0] - samples[:, 1] * math.log(tokens) - samples[:, 2] * math.log(scale)
                      + samples[:, 3] * math.log(batch))

    def form(self) -> str:
        """The law's form, with the batch term only where a batch exponent was fitted."""
        text = FORM.format(scale=self.scale)
        return text if self.coefficients.get("c") is not None else text.removesuffix(" * batch^c")

    def describe(self) -> str:
        k = self.coefficients
        parts = [f"m = {_fmt(k['m'])}"] + [f"{n} = {_fmt(k[n])}" for n in ("a", "b", "c") if k[n] is not None]
        return f"{self.form()}: " + ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"form": self.form(), "scale": self.scale,
                "coefficients": {n: None if c is None else c.to_dict() for n, c in self.coefficients.items()},
                "cells": self.cells, "rms_log": self.rms_log, "notes": self.notes}


def rms_text(rms_log: float, cells: int) -> str:
    """The law's residual over its cells, or why there is none to state."""
    if rms_log is not None and math.isfinite(rms_log):
        return f"rms {rms_log:.3f} in log lr over {counted(cells, 'cell')}"
    return f"{counted(cells, 'cell')}, no more than its coefficients: no residual"


def _fmt(c: Coefficient) -> str:
    if not c.fitted:
        return f"{c.value:.3g} (not fitted)"
    if math.isfinite(c.lo):
        return f"{c.value:.4g} [{c.lo:.4g}, {c.hi:.4g}]"
    return f"{c.value:.4g}"


def residual_rms(residuals: np.ndarray, cells: int, coefficients: int) -> tuple[float, list[str]]:
    """The rms residual (in log lr) of a fit through ``cells`` cells, and a note where it is an exact
    fit (no more cells than coefficients): NaN then, since its residual (0) says nothing."""
    if cells > coefficients:
        return float(np.sqrt(np.mean(residuals ** 2))), []
    return math.nan, [f"{counted(cells, 'cell')} for {counted(coefficients, 'coefficient')}: no residual to judge the fit by"]


def _independent_spread(values: np.ndarray, others: np.ndarray) -> float:
    """RMS of ``values`` after removing their least-squares fit on the columns ``others``."""
    residuals = values - others @ np.linalg.lstsq(others, values, rcond=None)[0]
    return float(np.sqrt(np.mean(residuals ** 2)))


def _terms(columns: dict[str, np.ndarray], n: int, notes: list[str]) -> list[str]:
    """The terms the cells can fit: varying, independent, and no more than the cells allow."""
    chosen = []
    for term in ("scale", "tokens", "batch"):
        values = columns[term]
        if np.ptp(values) < 1e-12:
            if term != "batch":
                notes.append(f"{TERMS[term][0]} not fitted: every cell has the same {term}")
            continue
        trial = chosen + [term]
        design = np.column_stack([np.ones(n)] + [columns[t] for t in trial])
        if n < design.shape[1] or _independent_spread(values, design[:, :-1]) < MIN_SPREAD:
            notes.append(f"{TERMS[term][0]} not fitted: across these cells, {term} follows "
                         f"{' and '.join(chosen) or 'the intercept'} (tune at more budgets or sizes to separate them)")
            continue
        chosen = trial
    return chosen


def fit_law(scale_values, tokens, batch, lr_opt, samples: list[np.ndarray], *, scale: str, bootstrap: int = 200,
            seed: int = 0, level: float = 0.95, batch_swept: bool = False) -> tuple[LawFit, np.ndarray]:
    """Fit the law to the cells' optima; ``samples[i]`` are cell i's bootstrap log(lr*) draws
    (may be empty). Returns the law and its bootstrap rows (log m, a, b, c)."""
    y = np.log(np.asarray(lr_opt, float))
    n = y.size
    if n < 2:
        raise FitInputError(f"the law needs at least 2 cells with an interior optimum, got {n}: tune more sizes or "
                            f"widen the multipliers so each cell's best rate lies inside them")
    columns = {"scale": np.log(np.asarray(scale_values, float)), "tokens": np.log(np.asarray(tokens, float)),
               "batch": np.log(np.asarray(batch, float))}
    notes: list[str] = []
    terms = _terms(columns, n, notes)
    design = np.column_stack([np.ones(n)] + [columns[t] for t in terms])
    beta = np.linalg.lstsq(design, y, rcond=None)[0]
    residuals = y - design @ beta
    dof = n - design.shape[1]
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(max(bootstrap, 0)):
        moved = y.copy()
        for i, s in enumerate(samples):
            if len(s):
                moved[i] += s[rng.integers(len(s))] - y[i]
        if dof > 0:
            moved += residuals[rng.integers(0, n, n)] * math.sqrt(n / dof)
        rows.append(np.linalg.lstsq(design, moved, rcond=None)[0])
    full = _full(beta, terms)
    boot = np.array([_full(r, terms) for r in rows]) if rows else np.empty((0, 4))
    coefficients: dict[str, Coefficient | None] = {}
    lo, hi = interval(boot, level) if len(boot) else (np.full(4, np.nan), np.full(4, np.nan))
    coefficients["m"] = Coefficient(math.exp(full[0]), math.exp(lo[0]), math.exp(hi[0]))
    for k, term in enumerate(("tokens", "scale", "batch"), start=1):
        name = TERMS[term][0]
        if term == "batch" and not batch_swept:
            coefficients[name] = None
        elif term in terms:
            coefficients[name] = Coefficient(float(full[k]), float(lo[k]), float(hi[k]))
        else:
            coefficients[name] = Coefficient(0.0, fitted=False)
    rms, exact = residual_rms(residuals, n, design.shape[1])
    law = LawFit(scale, coefficients, n, rms, notes + exact)
    return law, boot


def _full(beta: np.ndarray, terms: list[str]) -> np.ndarray:
    """(log m, a, b, c) from the fitted columns, 0 for a term left out."""
    out = np.zeros(4)
    out[0] = beta[0]
    for j, term in enumerate(terms, start=1):
        index = ("tokens", "scale", "batch").index(term) + 1
        out[index] = TERMS[term][1] * beta[j]
    return out


def fit_batch_law(flops, best_batch, *, bootstrap: int = 200, seed: int = 0, level: float = 0.95) -> dict[str, Any] | None:
    """B*(C) = k * C^e over the cells' best batch sizes (None with fewer than 2 distinct budgets)."""
    x, y = np.log(np.asarray(flops, float)), np.log(np.asarray(best_batch, float))
    if x.size < 2 or np.ptp(x) < 1e-12:
        return None
    design = np.column_stack([np.ones_like(x), x])
    beta = np.linalg.lstsq(design, y, rcond=None)[0]
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(max(bootstrap, 0)):
        pick = rng.integers(0, x.size, x.size)
        if np.ptp(x[pick]) > 1e-12:
            rows.append(np.linalg.lstsq(design[pick], y[pick], rcond=None)[0])
    lo, hi = interval(np.array(rows), level) if rows else (np.full(2, np.nan), np.full(2, np.nan))
    return {"form": "B = k * C^e", "k": float(math.exp(beta[0])), "k_lo": float(math.exp(lo[0])),
            "k_hi": float(math.exp(hi[0])), "e": float(beta[1]), "e_lo": float(lo[1]), "e_hi": float(hi[1]),
            "cells": int(x.size)}
