"""The learning-rate law's forms, each fitted to the cells' optima and scored on held-out cells.

A form is a power law lr* = m * prod(v ** e_v) over some of a cell's variables, fitted by least
squares in logs (every exponent fitted: whether the cells pin it down is what its interval
says). The forms the literature uses:

- ``marin``: lr = m * tokens^-a * scale^-b (* batch^c where batches were swept); Marin's form,
  fitted by ``tuning.law`` (which leaves out a term the cells cannot separate);
- ``bjorck``: lr = m * N^e_N * D^e_D, separate exponents in parameters and tokens (Bjorck et
  al. 2025, "Scaling Optimal LR Across Token Horizons");
- ``deepseek``: lr = m * C^e_C and B* = k * C^e (DeepSeek LLM 2024);
- ``steplaw``: lr = m * N_ne^e_N * D^e_D with N_ne the non-embedding parameters, and
  B* = k * D^e (Step Law, Li et al. 2025, "Predictable Scale");
- ``size``: lr = m * N^e_N, the size alone: what the width rules (muP's 1/width, Marin's) say,
  and the law left when a grid cannot tell the tokens' exponent from zero. Carrying an
  unidentified exponent 10-100x past the grid is how the GPT demo's first law lost at its
  target; with this form beside the others the held-out score, not the point estimate of
  that exponent, decides whether the tokens enter the law.

An exponent is *identified* when its bootstrap interval excludes zero and is at most
``MAX_WIDTH`` wide: otherwise the grid cannot tell its sign or size, and a law that uses it
must not be carried far beyond the grid (``sweeps.tuned`` guards the reach). Each form is
scored like the fitting methods: fitted without the cells of the largest budget, it predicts
their rates, and the score is the loss the cells' own parabolas give there above their
optimum (the held-out excess), with the error in log rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flops_fit.fitting.laws.bootstrap import interval
from flops_fit.tables import counted
from flops_fit.tuning.law import MIN_SPREAD, Coefficient, LawFit, fit_batch_law, residual_rms

MAX_WIDTH = 1.0  # an exponent whose 95% interval is wider than this is not identified
VARIABLES = {"tokens": "D", "width": "width", "params": "N", "nonembedding": "N_ne", "flops": "C", "batch": "B"}


@dataclass(frozen=True)
class Form:
    name: str
    title: str
    variables: tuple[str, ...]  # the lr law's variables (keys of VARIABLES)
    batch_variable: str | None  # the B* law's variable, where batches were swept


FORMS = {
    "bjorck": Form("bjorck", "Bjorck et al. 2025", ("params", "tokens"), None),
    "deepseek": Form("deepseek", "DeepSeek LLM 2024", ("flops",), "flops"),
    "steplaw": Form("steplaw", "Step Law (Li et al. 2025)", ("nonembedding", "tokens"), "tokens"),
    "size": Form("size", "the size alone", ("params",), None),
}


@dataclass
class Point:
    """One cell as the forms see it: its variables, its optimum, its bootstrap draws of
    log(lr*), its budget and its parabola (loss at a rate)."""

    values: dict[str, float]
    lr_opt: float
    samples: np.ndarray
    budget: float
    loss_at: Callable[[float], float]
    loss_opt: float
    best_batch: bool = True  # the best batch of its (size, tokens) where batches were swept


def identified(c: Coefficient) -> bool:
    """Whether an exponent's interval excludes zero and is at most ``MAX_WIDTH`` wide."""
    return (c.fitted and math.isfinite(c.lo) and math.isfinite(c.hi) and not c.lo <= 0 <= c.hi
            and c.hi - c.lo <= MAX_WIDTH)


@dataclass
class FormFit:
    """A fitted form: lr = m * prod(values[v] ** exponents[v]) (signed exponents)."""

    name: str
    title: str
    m: Coefficient
    exponents: dict[str, Coefficient]
    cells: int
    rms_log: float
    batch_law: dict[str, Any] | None = None
    heldout: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    dof: int = 1  # cells less coefficients: with none, no exponent counts as identified

    def rate(self, values: dict[str, float]) -> float:
        return self.m.value * math.prod(values[v] ** c.value for v, c in self.exponents.items() if c.fitted)

    @property
    def unidentified(self) -> list[str]:
        return [v for v, c in self.exponents.items() if self.dof <= 0 or not identified(c)]

    def describe(self) -> str:
        terms = " * ".join(f"{VARIABLES[v]}^{c.value:.3g}" for v, c in self.exponents.items() if c.fitted)
        return f"lr = {self.m.value:.4g} * {terms}" if terms else f"lr = {self.m.value:.4g}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "form": self.describe(), "m": self.m.to_dict(),
                "exponents": {v: c.to_dict() | {"identified": v not in self.unidentified}
                              for v, c in self.exponents.items()},
                "cells": self.cells, "rms_log": self.rms_log, "batch_law": self.batch_law, "heldout": self.heldout,
                "unidentified": self.unidentified, "notes": self.notes}


def from_marin(law: LawFit) -> FormFit:
    """``tuning.law``'s fit as a form (its a, b, c as signed exponents of tokens, scale, batch)."""
    k = law.coefficients
    exponents = {}
    for name, var, sign in (("a", "tokens", -1.0), ("b", law.scale, -1.0), ("c", "batch", 1.0)):
        c = k[name]
        if c is not None:
            lo, hi = sorted((sign * c.lo, sign * c.hi))
            exponents[var] = Coefficient(sign * c.value, lo, hi, c.fitted)
    return FormFit("marin", "Marin", k["m"], exponents, law.cells, law.rms_log, notes=list(law.notes))


def fit_form(form: Form, points: list[Point], *, bootstrap: int = 200, seed: int = 0,
             level: float = 0.95) -> FormFit:
    """Least squares in logs with every exponent fitted; intervals from a bootstrap that moves
    each cell's log(lr*) by its own draw and adds resampled residuals (as ``tuning.law``). A
    variable the cells do not vary independently of the others (one budget: FLOPs barely move)
    leaves the form unfitted, its exponents 0 and said so."""
    y = np.log([p.lr_opt for p in points])
    columns = [np.log([p.values[v] for p in points]) for v in form.variables]
    n, k = len(points), len(columns) + 1
    flat = [v for j, v in enumerate(form.variables)
            if _spread(columns[j], [np.ones(n)] + columns[:j] + columns[j + 1:]) < MIN_SPREAD]
    if flat or n < k:
        why = f"{counted(n, 'cell')} for {counted(k, 'coefficient')}" if n < k else _flat_why(flat, dict(zip(form.variables, columns)))
        return FormFit(form.name, form.title, Coefficient(math.exp(float(np.mean(y))), fitted=False),
                       {v: Coefficient(0.0, fitted=False) for v in form.variables}, n, math.nan,
                       notes=[f"not fitted: {why}"], dof=n - k)
    design = np.column_stack([np.ones(n)] + columns)
    beta = np.linalg.lstsq(design, y, rcond=None)[0]
    residuals = y - design @ beta
    dof = n - k
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(max(bootstrap, 0)):
        moved = y.copy()
        for i, p in enumerate(points):
            if len(p.samples):
                moved[i] += p.samples[rng.integers(len(p.samples))] - y[i]
        if dof > 0:
            moved += residuals[rng.integers(0, n, n)] * math.sqrt(n / dof)
        rows.append(np.linalg.lstsq(design, moved, rcond=None)[0])
    lo, hi = interval(np.array(rows), level) if rows else (np.full(k, np.nan),) * 2
    rms, notes = residual_rms(residuals, n, k)
    exponents = {v: Coefficient(float(beta[j]), float(lo[j]), float(hi[j])) for j, v in enumerate(form.variables, 1)}
    m = Coefficient(math.exp(beta[0]), math.exp(lo[0]), math.exp(hi[0]))
    return FormFit(form.name, form.title, m, exponents, n, rms, notes=notes, dof=dof)


# What a variable that takes one value across the cells lacks, and the fix
ONE_VALUE = {"params": ("one size", "tune more sizes"), "nonembedding": ("one size", "tune more sizes"),
             "width": ("one size", "tune more sizes"), "flops": ("one budget", "tune at more budgets"),
             "tokens": ("one token count", "tune at more budgets")}


def _flat_why(flat: list[str], columns: dict[str, np.ndarray]) -> str:
    """Why a form is not fitted: a variable with one value across the cells needs more sizes (N) or budgets (C,
    D); one that follows the others (one budget: D falls as N grows) needs both, to separate them."""
    constant = [v for v in flat if _spread(columns[v], [np.ones(len(columns[v]))]) < MIN_SPREAD]
    if constant:
        v = constant[0]
        what, fix = ONE_VALUE.get(v, ("one value", "tune more sizes or budgets"))
        return f"{VARIABLES[v]} barely varies across these cells ({what}): {fix}"
    names = ", ".join(VARIABLES[v] for v in flat)
    return (f"{names} barely {'vary' if len(flat) > 1 else 'varies'} apart from the other variables across these "
            "cells (tune at more budgets or sizes to separate them)")


def _spread(values: np.ndarray, others: list[np.ndarray]) -> float:
    """RMS of ``values`` after removing their least-squares fit on the columns ``others``."""
    design = np.column_stack(others)
    residuals = values - design @ np.linalg.lstsq(design, values, rcond=None)[0]
    return float(np.sqrt(np.mean(residuals ** 2)))


def score(fit: Callable[[list[Point]], Any], points: list[Point]) -> dict[str, Any] | None:
    """Fit without the largest budget's cells (``fit(points) -> object with rate(values)``) and
    score the prediction on them; None when fewer than two budgets leave nothing to predict."""
    largest = max(p.budget for p in points)
    held = [p for p in points if p.budget >= largest * (1 - 1e-9)]
    rest = [p for p in points if p not in held]
    if not rest or len({p.budget for p in rest}) < 1:
        return None
    try:
        law = fit(rest)
    except (ValueError, np.linalg.LinAlgError, ArithmeticError) as exc:  # FitInputError is a ValueError
        return {"budget": largest, "cells": len(held), "error": str(exc), "fitted_on": len(rest)}
    if law.exponents and not any(c.fitted for c in law.exponents.values()):  # its mean rate, not the form
        return {"budget": largest, "cells": len(held), "fitted_on": len(rest),
                "error": f"once the largest budget is held out, {law.notes[0].removeprefix('not fitted: ')}"}
    excess, errors = [], []
    for p in held:
        predicted = law.rate(p.values)
        excess.append(p.loss_at(predicted) / p.loss_opt - 1)
        errors.append(math.log(predicted / p.lr_opt))
    return {"budget": largest, "cells": len(held), "excess": float(np.mean(excess)), "max_excess": float(max(excess)),
            "rms_log": float(np.sqrt(np.mean(np.square(errors)))), "fitted_on": len(rest)}


def fit_forms(points: list[Point], marin: LawFit, refit_marin: Callable[[list[Point]], LawFit], *,
              batch_swept: bool, bootstrap: int = 200, seed: int = 0) -> dict[str, FormFit]:
    """Every form fitted to ``points`` and scored on held-out cells (``marin``: Marin's form as
    the tune fits it, over every batch; ``refit_marin(points)`` fits it again on fewer)."""
    best = [p for p in points if p.best_batch]
    out = {"marin": from_marin(marin)}
    out["marin"].heldout = score(lambda rest: from_marin(refit_marin(rest)), points)
    for form in FORMS.values():
        result = fit_form(form, best, bootstrap=bootstrap, seed=seed)
        result.heldout = score(lambda rest, f=form: fit_form(f, rest, bootstrap=0), best)
        if batch_swept and form.batch_variable:
            law = fit_batch_law([p.values[form.batch_variable] for p in best], [p.values["batch"] for p in best],
                                bootstrap=bootstrap, seed=seed)
            if law is not None:
                law["form"] = f"B = k * {VARIABLES[form.batch_variable]}^e"
            result.batch_law = law
        out[form.name] = result
    return out


def choose(forms: dict[str, FormFit]) -> tuple[str, str]:
    """The form the planner uses, and why: the lowest held-out excess among the forms whose
    exponents are all identified; Marin's form (saying so) when none is, or when there is no
    held-out budget to compare them on."""
    ok = {n: f for n, f in forms.items() if not f.unidentified and f.exponents}
    scored = {n: f.heldout["excess"] for n, f in ok.items() if f.heldout and "excess" in f.heldout}
    if not scored:
        why = ("no form has all its exponents identified by these cells (an interval crosses zero or is wider than "
               f"{MAX_WIDTH:g})" if not ok else "no form could be scored on a held-out budget (one budget, or too few "
               "cells without the largest to fit it)")
        return "marin", f"marin: {why}; the planner guards how far past the grid it reaches"
    name = min(scored, key=scored.get)
    return name, (f"{name}: every exponent identified and the lowest held-out excess "
                  f"({_percent(scored[name])} on the largest budget's cells)")


def _percent(excess: float) -> str:
    """A held-out excess as text: a loss above its parabola's vertex is never below it, so a rounding error's
    negative excess (-1e-16, printed "-0.00%", as if better than the optimum) reads as the 0 it is."""
    return f"{100 * max(excess, 0.0):+.2f}%"


def form_rows(forms: dict[str, FormFit]) -> list[list[str]]:
    """Rows for a table: form, exponent, estimate [interval], identified, held-out excess."""
    rows = []
    for f in forms.values():
        held = f.heldout or {}
        score_text = _percent(held["excess"]) if "excess" in held else \
            f"not scored: {held['error'].partition(': ')[0].partition(' (')[0]}" if "error" in held else \
            "not scored: one budget (nothing left to predict)"  # score() is None only where every cell is at one
        for j, (v, c) in enumerate(f.exponents.items()):
            interval_text = f"{c.value:.3g} [{c.lo:.3g}, {c.hi:.3g}]" if c.fitted else "not fitted"
            rows.append([f.name if j == 0 else "", VARIABLES[v], interval_text,
                         "NOT identified" if v in f.unidentified else "yes", score_text if j == 0 else ""])
    return rows
