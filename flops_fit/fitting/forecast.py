"""The forecast: one answer at the target, from the method and scale that forecast best.

Several methods on several scales give several answers. Which to act on is an empirical
question with a measurable answer: leave out each budget whose IsoFLOP profile has an
interior minimum in turn, refit every method on every scale without it, and score each
(method, scale) by its mean absolute error on the held-out minimum loss (and N_opt). A
method that takes ``focus`` (which runs its law fits: ``focus.FOCI``) is scored with each:
whether the floor near the frontier forecasts better than every run alike is measured, not
assumed. The forecast is the candidate with the lowest cross-validated loss error, refitted on all
runs with bootstrap intervals at the target, its cross-validated errors beside it. Loss
errors within TIE of the best count as a tie, broken by the N_opt error: a forecast is a size
as well as a loss.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.focus import FOCI
from flops_fit.fitting.holdout import observe, run_checks, select_budgets
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.scales import SCALES, rescale, to_params
from flops_fit.tables import format_table


class Approach(Protocol):  # fitting.approach.Approach (not imported: the report imports this module)
    name: str
    bootstrap: int
    options: tuple[str, ...]

    def fit(self, runs: Runs) -> Any: ...


TIE = 0.1  # cross-validated loss errors within this fraction of the best one are a tie


@dataclass(kw_only=True)
class Candidate:
    """One (method, scale, focus)'s cross-validated errors: mean |relative error| over the held-out
    budgets. ``focus`` is None for a method without that option."""

    method: str
    scale: str
    focus: str | None = None
    cv_loss_error: float = np.nan
    cv_n_opt_error: float = np.nan
    folds: int = 0
    reason: str | None = None


@dataclass(kw_only=True)
class Forecast:
    """The chosen (method, scale)'s answer at ``target``; ``n_opt`` in parameters (the scale's
    own optimum is ``scale_opt``), each value with its bootstrap interval."""

    method: str
    scale: str
    target: float
    focus: str | None = None
    n_opt: tuple[float, float, float]
    scale_opt: tuple[float, float, float]
    d_opt: tuple[float, float, float]
    loss: tuple[float, float, float]
    cv_loss_error: float
    cv_n_opt_error: float
    folds: int
    candidates: list[Candidate] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("n_opt", "scale_opt", "d_opt", "loss"):
            value, lo, hi = out[key]
            out[key] = {"value": value, "interval": [lo, hi]}
        return fmt.json_safe(out)

    def summary(self) -> str:
        how = self.method if self.focus is None else f"{self.method}, focus {self.focus},"
        head = (f"Forecast at C = {fmt.flops(self.target)} FLOPs ({how} on {SCALES[self.scale]}, chosen by "
                f"leave-one-budget-out error over {self.folds} budgets: loss {100 * self.cv_loss_error:.2f}%, "
                f"N_opt {100 * self.cv_n_opt_error:.1f}%): N_opt {_triple(self.n_opt, fmt.count)} parameters, "
                f"D_opt {_triple(self.d_opt, fmt.count)} tokens, loss {_triple(self.loss, lambda v: fmt.sig(v, 4))}")
        return head + "\n" + format_table(candidate_rows(self.candidates), CANDIDATE_HEADERS)


CANDIDATE_HEADERS = ["method", "focus", "scale", "held-out budgets", "CV loss error", "CV N_opt error", "note"]


def candidate_rows(candidates: Sequence[Candidate]) -> list[list[str]]:
    return [[c.method, c.focus or "-", c.scale, str(c.folds), _pct(c.cv_loss_error, 2), _pct(c.cv_n_opt_error, 1),
             c.reason or ""] for c in sorted(candidates, key=_rank)]


def _rank(c: Candidate) -> tuple[float, float]:
    return (c.cv_loss_error if np.isfinite(c.cv_loss_error) else np.inf,
            c.cv_n_opt_error if np.isfinite(c.cv_n_opt_error) else np.inf)


def cross_validate(approaches: Sequence[Approach], runs: Runs, scales: Sequence[str], *,
                   curve: str, workers: int = 1) -> list[Candidate]:
    """Leave-one-budget-out errors of every approach on every scale (point fits, no bootstrap;
    the refits in ``workers`` processes)."""
    candidates = []
    for scale in scales:
        try:
            scaled = rescale(runs, scale)
        except FitInputError as exc:
            candidates += [Candidate(method=a.name, scale=scale, focus=_focus(a), reason=str(exc)) for a in approaches]
            continue
        budgets, chosen = select_budgets(scaled, "each")
        observed = [observe(scaled, budgets, b, curve=curve, bootstrap=0, seed=None, level=0.95) for b in chosen]
        observed = [o for o in observed if o.reason is None]
        done = iter(run_checks([(a, scaled, budgets, o) for a in approaches for o in observed], workers))
        for approach in approaches:
            name, focus = approach.name, _focus(approach)
            checks = [next(done) for _ in observed]
            errors = [(abs(c.loss_error), abs(c.n_opt_error)) for c in checks if np.isfinite(c.loss_error)]
            if not errors:
                reasons = sorted({c.reason for c in checks if c.reason}) or ["no budget with an interior minimum"]
                candidates.append(Candidate(method=name, scale=scale, focus=focus, reason="; ".join(reasons)))
                continue
            loss_err, n_err = np.nanmean(errors, axis=0)
            candidates.append(Candidate(method=name, scale=scale, focus=focus, cv_loss_error=float(loss_err),
                                        cv_n_opt_error=float(n_err), folds=len(errors)))
    return candidates


def forecast(approaches: Sequence[Approach], runs: Runs, target: float, *, curve: str,
             scales: Sequence[str] = tuple(SCALES), workers: int = 1) -> Forecast:
    """Cross-validate every (method, scale) (point fits), refit the best on all runs with the
    approach's own bootstrap, and answer at ``target``."""
    select_budgets(runs, "each")  # refuses runs at fewer than 2 budgets
    variants = [v for a in approaches for v in _variants(a)]
    candidates = cross_validate([_point(v) for v in variants], runs, scales, curve=curve, workers=workers)
    scored = [c for c in candidates if np.isfinite(c.cv_loss_error)]
    if not scored:
        raise FitInputError("no method could be cross-validated on these runs: " +
                            "; ".join(f"{c.method}/{c.scale}: {c.reason}" for c in candidates))
    floor = min(c.cv_loss_error for c in scored)
    best = min((c for c in scored if c.cv_loss_error <= floor * (1 + TIE)), key=lambda c: _rank(c)[::-1])
    scaled = rescale(runs, best.scale)
    chosen = next(v for v in variants if v.name == best.method and _focus(v) == best.focus)
    row = chosen.fit(scaled).predict(target).iloc[0]
    scale_opt = (float(row.N_opt), float(row.N_opt_lo), float(row.N_opt_hi))
    n_opt = tuple(float(v) for v in to_params(scaled, np.array(scale_opt)))
    return Forecast(method=best.method, scale=best.scale, focus=best.focus, target=float(target), n_opt=n_opt,
                    scale_opt=scale_opt,
                    d_opt=(float(row.D_opt), float(row.D_opt_lo), float(row.D_opt_hi)),
                    loss=(float(row.loss), float(row.loss_lo), float(row.loss_hi)),
                    cv_loss_error=best.cv_loss_error, cv_n_opt_error=best.cv_n_opt_error, folds=best.folds,
                    candidates=candidates)


def _focus(approach: Approach) -> str | None:
    return getattr(approach, "focus", None) if "focus" in approach.options else None


def _variants(approach: Approach) -> list[Approach]:
    """The approach once per focus it can take (itself alone if it takes none)."""
    if "focus" not in approach.options:
        return [approach]
    variants = []
    for focus in FOCI:
        variant = copy.copy(approach)
        variant.focus = focus
        variants.append(variant)
    return variants


def _point(approach: Approach) -> Approach:
    """The same approach without bootstrap resamples: cross-validation needs point estimates only."""
    point = copy.copy(approach)
    point.bootstrap = 0
    return point


def _pct(value: float, digits: int) -> str:
    return "-" if not np.isfinite(value) else f"{100 * value:.{digits}f}%"


def _triple(t: tuple[float, float, float], f) -> str:
    return fmt.with_interval(t[0], t[1], t[2], fmt=f)


__all__ = ["CANDIDATE_HEADERS", "Candidate", "Forecast", "candidate_rows", "cross_validate", "forecast"]
