"""The forecast: one answer at the target, chosen by extrapolation, with an honest interval.

Several methods on several scales give several answers, and the target lies beyond the
sweep. Every candidate (method x scale x focus) is scored by forward chaining
(``chaining``): fit the budgets up to C_k, predict the larger ones, and read the error at
the largest ratios the sweep can test. The forecast is the candidate with the lowest loss
error there (errors within TIE of the best are a tie, broken by the N_opt error: a forecast
is a size as well as a loss), refitted on all runs with its bootstrap.

Its interval says what is not known, per side and in logs, as the root sum of squares of
- the bootstrap's (the runs' noise),
- the spread of the law forms that forecast comparably (``FORM_TOLERANCE``): forms that fit
  a sweep equally well can part far beyond it,
- the extrapolation error forward chaining measured, grown to the target's ratio
  (t s ln r_t, ``chaining.error_slope``; Student's t over the chaining errors it rests on).
Its calibration is measured, not assumed (docs/fitting.md, benchmarks/bench_forecast_calibration.py).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws.profiles import budget_groups
from flops_fit.fitting.scales import SCALES, rescale, to_params
from flops_fit.fitting.validation.chaining import (
    Approach,
    Record,
    error_slope,
    focus_of,
    forward_chain,
    point,
    ratio_table,
    score,
    score_cutoff,
    variants,
)
from flops_fit.tables import format_table

TIE = 0.1  # loss errors within this fraction of the best one are a tie
# The law forms whose forward-chaining loss error is within twice the best one (or 0.5 points
# of it) count as fitting comparably: their spread at the target joins the interval.
FORM_TOLERANCE, FORM_POINTS = 1.0, 0.005

Triple = tuple[float, float, float]

TARGET_FACTOR = 10.0  # default target: this many times the largest swept budget



def default_target(runs: Any) -> float:
    """TARGET_FACTOR times the largest budget swept."""
    budgets, _ = budget_groups(runs)
    return float(TARGET_FACTOR * np.max(budgets))


@dataclass(kw_only=True)
class Candidate:
    """One (method, scale, focus)'s forward-chaining errors: mean |relative error| over the
    ``predictions`` at the largest ratios, and the error slopes s (``chaining.error_slope``).
    ``focus`` is None for a method without that option; ``near`` marks the forms within
    FORM_TOLERANCE of the best, with their point forecast at the target."""

    method: str
    scale: str
    focus: str | None = None
    loss_error: float = np.nan
    n_opt_error: float = np.nan
    predictions: int = 0
    loss_slope: float = np.nan
    n_opt_slope: float = np.nan
    slope_records: int = 0
    near: bool = False
    target_loss: float = np.nan
    target_n_opt: float = np.nan
    reason: str | None = None

    @property
    def key(self) -> tuple[str, str, str | None]:
        return self.method, self.scale, self.focus


@dataclass(kw_only=True)
class Forecast:
    """The chosen candidate's answer at ``target``, ``ratio`` times the largest budget; ``n_opt``
    in parameters (the scale's own optimum is ``scale_opt``). Each value is (estimate, lo, hi)
    with the combined interval; ``parts`` holds its sources (``bootstrap``, ``forms``, and
    ``extrapolation`` as the expected error at the target's ratio)."""

    method: str
    scale: str
    target: float
    ratio: float
    focus: str | None = None
    level: float = 0.95
    n_opt: Triple
    scale_opt: Triple
    d_opt: Triple
    loss: Triple
    loss_error: float
    n_opt_error: float
    predictions: int
    score_cutoff: float
    parts: dict[str, Any] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)

    def __repr__(self) -> str:
        """One line: the answer (the dataclass's own repr would print every chaining record)."""
        return (f"<Forecast at C = {fmt.flops(self.target)}: N_opt {fmt.count(self.n_opt[0])}, "
                f"loss {fmt.sig(self.loss[0], 4)} ({self.method})>")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("n_opt", "scale_opt", "d_opt", "loss"):
            value, lo, hi = out[key]
            out[key] = {"value": value, "interval": [lo, hi]}
        return fmt.json_safe(out)

    def summary(self) -> str:
        how = self.method if self.focus is None else f"{self.method}, focus {self.focus},"
        ext = self.parts.get("extrapolation", {})
        head = (f"Forecast at C = {fmt.flops(self.target)} FLOPs, {self.ratio:.3g}x the largest budget ({how} on "
                f"{SCALES[self.scale]}; chosen by forward chaining: mean error of {self.predictions} predictions at "
                f">= {self.score_cutoff:.3g}x beyond their fit: loss {_pct(self.loss_error, 2)}, N_opt "
                f"{_pct(self.n_opt_error, 1)}):\n  N_opt {_triple(self.n_opt, fmt.count)} parameters, "
                f"D_opt {_triple(self.d_opt, fmt.count)} tokens, loss {_triple(self.loss, lambda v: fmt.sig(v, 4))}\n"
                f"  {100 * self.level:g}% interval = bootstrap + spread of {self.parts.get('near', 1)} comparable law "
                f"forms + extrapolation error grown to {self.ratio:.3g}x (loss {_pct(ext.get('loss', np.nan), 1)}, "
                f"N_opt {_pct(ext.get('n_opt', np.nan), 0)})")
        lines = [head, format_table(candidate_rows(self.candidates), CANDIDATE_HEADERS)]
        chosen = [r for r in self.records if (r.method, r.scale, r.focus) == (self.method, self.scale, self.focus)]
        if chosen:
            lines += ["Forward-chaining error of the chosen candidate against how far it extrapolated:",
                      format_table(chain_rows(chosen, self), CHAIN_HEADERS)]
        return "\n".join(lines)


CANDIDATE_HEADERS = ["method", "focus", "scale", "predictions", "loss error", "N_opt error",
                     "loss error / ln r", "N_opt error / ln r", "note"]
CHAIN_HEADERS = ["ratio C / C_k", "predictions", "mean |loss error|", "mean |N_opt error|"]


def candidate_rows(candidates: Sequence[Candidate]) -> list[list[str]]:
    return [[c.method, c.focus or "-", c.scale, str(c.predictions), _pct(c.loss_error, 2), _pct(c.n_opt_error, 1),
             _pct(c.loss_slope, 2), _pct(c.n_opt_slope, 1),
             c.reason or ("comparable form" if c.near else "")] for c in sorted(candidates, key=_rank)]


def chain_rows(records: Sequence[Record], forecast: Forecast) -> list[list[str]]:
    rows = [[f"{ratio:g}", str(n), _pct(loss, 2), _pct(n_opt, 1)] for ratio, loss, n_opt, n in ratio_table(records)]
    ext = forecast.parts.get("extrapolation", {})
    rows.append([f"{forecast.ratio:.3g} (target, trend)", "-", _pct(ext.get("loss_expected", np.nan), 2),
                 _pct(ext.get("n_opt_expected", np.nan), 1)])
    return rows


def _rank(c: Candidate) -> tuple[float, float]:
    return (c.loss_error if np.isfinite(c.loss_error) else np.inf,
            c.n_opt_error if np.isfinite(c.n_opt_error) else np.inf)


def candidates_of(records: Sequence[Record], reasons: dict, keys: Sequence[tuple]) -> tuple[list[Candidate], float]:
    """Each candidate's score at the largest ratios, its error slopes, and the score's cutoff."""
    cutoff = score_cutoff(records) if records else np.nan
    out = []
    for key in keys:
        mine = [r for r in records if (r.method, r.scale, r.focus) == key]
        loss_err, n_err, count = score(mine, cutoff) if mine else (np.nan, np.nan, 0)
        out.append(Candidate(method=key[0], scale=key[1], focus=key[2], loss_error=loss_err, n_opt_error=n_err,
                             predictions=count, loss_slope=error_slope(mine, "loss_error"),
                             n_opt_slope=error_slope(mine, "n_opt_error"), slope_records=len(mine),
                             reason=reasons.get(key) if not count else None))
    return out, cutoff


def forecast(approaches: Sequence[Approach], runs: Runs, target: float, *, curve: str,
             scales: Sequence[str] = tuple(SCALES), workers: int = 1, level: float = 0.95) -> Forecast:
    """Forward-chain every (method, scale, focus) (point fits), refit the best on all runs with
    the approach's own bootstrap, and answer at ``target`` with the combined interval."""
    return forecasts(approaches, runs, [target], curve=curve, scales=scales, workers=workers, level=level)[0]


def forecasts(approaches: Sequence[Approach], runs: Runs, targets: Sequence[float], *, curve: str,
              scales: Sequence[str] = tuple(SCALES), workers: int = 1, level: float = 0.95) -> list[Forecast]:
    """``forecast`` at several targets from one chaining and one set of refits."""
    options = [v for a in approaches for v in variants(a)]
    records, reasons = forward_chain([point(v) for v in options], runs, scales, curve=curve, workers=workers)
    keys = [(v.name, s, focus_of(v)) for s in scales for v in options]
    candidates, cutoff = candidates_of(records, reasons, keys)
    scored = [c for c in candidates if np.isfinite(c.loss_error)]
    if not scored:
        why: dict[str, list[str]] = {}
        for c in candidates:
            if c.reason and f"{c.method}/{c.scale}" not in why.setdefault(c.reason, []):
                why[c.reason].append(f"{c.method}/{c.scale}")
        raise FitInputError("no method could be forward-chained on these runs (it fits the budgets up to each one "
                            "and predicts the larger ones): " +
                            "; ".join(f"{', '.join(names)}: {reason}" for reason, names in why.items()))
    floor = min(c.loss_error for c in scored)
    best = min((c for c in scored if c.loss_error <= floor * (1 + TIE)), key=lambda c: _rank(c)[::-1])
    by_key = {(v.name, focus_of(v)): v for v in options}
    targets = np.asarray(targets, dtype=float)
    scaled = rescale(runs, best.scale)
    table = by_key[(best.method, best.focus)].fit(scaled).predict(targets)  # with its bootstrap
    near_tables = {}
    for c in scored:  # the comparable forms' point forecasts at the targets (the best's from its own fit)
        if c is best or c.loss_error <= max(floor * (1 + FORM_TOLERANCE), floor + FORM_POINTS):
            try:
                own = rescale(runs, c.scale)
                found = table if c is best else point(by_key[(c.method, c.focus)]).fit(own).predict(targets)
            except FitInputError as exc:
                c.reason = f"cannot fit all runs: {exc}"
                continue
            c.near = True
            near_tables[c.key] = (found["loss"].to_numpy(float), to_params(own, found["N_opt"].to_numpy(float)))
    budgets, _ = budget_groups(runs)
    out = []
    for i, target in enumerate(targets):
        for c in candidates:
            if c.key in near_tables:
                c.target_loss, c.target_n_opt = float(near_tables[c.key][0][i]), float(near_tables[c.key][1][i])
        out.append(_answer(best, table.iloc[i], scaled, float(target), float(target / np.max(budgets)), level,
                           copy.deepcopy(candidates), records, cutoff))
    return out


def _answer(best: Candidate, row: Any, scaled: Runs, target: float, ratio: float, level: float,
            candidates: list[Candidate], records: list[Record], cutoff: float) -> Forecast:
    """The chosen candidate's prediction ``row`` at ``target`` with the combined interval."""
    reach = spread_quantile(level, best.slope_records) * np.log(ratio) if ratio > 1 else 0.0
    near = [c for c in candidates if c.near and np.isfinite(c.target_loss)]
    loss, loss_parts = combine((float(row.loss), float(row.loss_lo), float(row.loss_hi)),
                               [c.target_loss for c in near], reach * best.loss_slope)
    n_best = float(to_params(scaled, np.array([row.N_opt]))[0])
    scale_opt, n_parts = combine((float(row.N_opt), float(row.N_opt_lo), float(row.N_opt_hi)),
                                 [float(row.N_opt) * c.target_n_opt / n_best for c in near], reach * best.n_opt_slope)
    n_opt = tuple(float(v) for v in to_params(scaled, np.array(scale_opt)))
    d = float(row.D_opt)  # the budget fixes N D: D's interval mirrors N's in logs
    d_opt = (d, d * scale_opt[0] / scale_opt[2], d * scale_opt[0] / scale_opt[1])
    expected = np.log(ratio) if ratio > 1 else 0.0
    parts = {"near": len(near), "bootstrap": {"loss": [float(row.loss_lo), float(row.loss_hi)],
                                              "n_opt": list(to_params(scaled, np.array([row.N_opt_lo, row.N_opt_hi])))},
             "forms": {"loss": [min(c.target_loss for c in near), max(c.target_loss for c in near)],
                       "n_opt": [min(c.target_n_opt for c in near), max(c.target_n_opt for c in near)]},
             "extrapolation": {"loss": float(np.expm1(reach * best.loss_slope)),
                               "n_opt": float(np.expm1(reach * best.n_opt_slope)),
                               "loss_expected": float(np.expm1(expected * best.loss_slope)),
                               "n_opt_expected": float(np.expm1(expected * best.n_opt_slope))},
             "log_half_widths": {"loss": loss_parts, "n_opt": n_parts}}
    return Forecast(method=best.method, scale=best.scale, focus=best.focus, target=target, ratio=ratio,
                    level=level, n_opt=n_opt, scale_opt=scale_opt, d_opt=d_opt, loss=loss,
                    loss_error=best.loss_error, n_opt_error=best.n_opt_error, predictions=best.predictions,
                    score_cutoff=cutoff, parts=fmt.json_safe(parts), candidates=candidates, records=records)


def spread_quantile(level: float, records: int) -> float:
    """The two-sided ``level`` quantile of Student's t with ``records`` degrees of freedom: the
    error slope is a root mean square of that many chaining errors, so with few of them it is
    barely known (one error: 12.7 at 95%, against the normal's 1.96)."""
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2, max(records, 1)))


def combine(estimate: Triple, forms: Sequence[float], extrapolation: float) -> tuple[Triple, dict[str, list[float]]]:
    """(value, lo, hi) whose log half-widths are the root sum of squares of the bootstrap's, the
    forms' spread about the value, and ``extrapolation`` (a log error, both sides); and the parts."""
    value, lo, hi = estimate
    spread = [v for v in forms if np.isfinite(v) and v > 0]
    boot = [np.log(value / lo) if np.isfinite(lo) and lo > 0 else 0.0, np.log(hi / value) if np.isfinite(hi) else 0.0]
    form = [max(0.0, np.log(value / min(spread))) if spread else 0.0,
            max(0.0, np.log(max(spread) / value)) if spread else 0.0]
    ext = float(extrapolation) if np.isfinite(extrapolation) else 0.0
    below, above = (float(np.sqrt(b * b + f * f + ext * ext)) for b, f in zip(boot, form))
    parts = {"bootstrap": [float(v) for v in boot], "forms": [float(v) for v in form], "extrapolation": [ext, ext]}
    return (value, value * np.exp(-below), value * np.exp(above)), parts


def _pct(value: float, digits: int) -> str:
    return "-" if not np.isfinite(value) else f"{100 * value:.{digits}f}%"


def _triple(t: Triple, f) -> str:
    return fmt.with_interval(t[0], t[1], t[2], fmt=f)


__all__ = ["CANDIDATE_HEADERS", "CHAIN_HEADERS", "Candidate", "Forecast", "candidate_rows", "chain_rows", "combine",
           "forecast", "forecasts"]
