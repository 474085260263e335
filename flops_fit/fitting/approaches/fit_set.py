"""Several approaches fitted to the same runs, and whether they agree."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from itertools import combinations
from typing import Any

import pandas as pd

from flops_fit.errors import FitInputError, UnknownEntryError
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.approaches.result import FitResult, Presentable, scale_cells
from flops_fit.fitting.decisions.planned import (
    EXTRAPOLATION_SLOPE,
    PlannedLoss,
    has_law,
    rms_residual,
)
from flops_fit.fitting.scales import SCALES
from flops_fit.fitting.validation.forecast import BELOW_SWEPT, BEYOND_MEASURED
from flops_fit.fitting.validation.holdout import holdout_counts, holdout_json, holdout_misses
from flops_fit.fitting.validation.prior import beyond_reach
from flops_fit.tables import format_table

# Without intervals, exponents this far apart count as a disagreement.
POINT_TOLERANCE = 0.05


@dataclass(repr=False)
class FitSet(Presentable):
    """Every applicable approach's FitResult, the ones skipped (and why), cross-checks."""

    results: dict[str, FitResult]
    skipped: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    forecast: Any = None  # forecast.Forecast: set by fit(method="all", holdout="forward")

    def __post_init__(self) -> None:
        self.warnings.extend(disagreements(list(self.results.values())))
        for result in self.results.values():
            result.diagnostics.warnings.extend(w for w in self.warnings if result.method in w)

    def __getitem__(self, method: str) -> FitResult:
        """One method's fit; an unknown or skipped method names the fitted ones (and why it was skipped)."""
        if isinstance(method, str) and method in self.results:
            return self.results[method]
        why = f"{method!r} was skipped: {self.skipped[method]}" if method in self.skipped else \
            f"no method {method!r} in this fit"
        raise UnknownEntryError(f"{why}; pick one of the methods fitted: {', '.join(map(repr, self.results))} "
                                f"(e.g. fitted[{_example(self.results)!r}])")

    def __contains__(self, method: object) -> bool:
        return method in self.results

    def __iter__(self) -> Iterator[str]:
        """The fitted methods' names, as a dict's keys (without it ``in`` and ``for`` asked ``fitted[0]``)."""
        return iter(self.results)

    def __getattr__(self, name: str) -> Any:
        """One method's attribute asked of the set (``fitted.intervals()``) names how to reach it; still an
        AttributeError, so ``hasattr`` and ``getattr(..., default)`` hold."""
        results = self.__dict__.get("results")
        if name.startswith("_") or not results or not hasattr(FitResult, name) and \
                name not in {f.name for f in fields(FitResult)}:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        raise AttributeError(f"{name!r} is one method's: this FitSet holds {len(results)}, so pick one, e.g. "
                             f"fitted[{_example(results)!r}].{name} (methods: {', '.join(map(repr, results))})")

    @property
    def runs(self):
        return next(iter(self.results.values())).runs

    def loss_at(self, n: Any, d: Any, *, slope: float = EXTRAPOLATION_SLOPE) -> PlannedLoss:
        """The loss of planned runs (N, D) from the law that fits the runs best (lowest RMS log residual),
        the other laws as its comparable forms (``planned.loss_at``)."""
        laws = {m: r for m, r in self.results.items() if has_law(r)}
        if not laws:
            raise FitInputError("the loss of a planned run needs a law over (N, D); none of "
                                f"{', '.join(self.results)} gives one (fit parametric, vpnls or interaction)")
        best = min(laws, key=lambda m: (_finite_or_inf(rms_residual(laws[m])), m))
        return laws[best].loss_at(n, d, forms=laws, slope=slope)

    def predict(self, budgets: Any) -> pd.DataFrame:
        return pd.concat([r.predict(budgets).assign(method=m) for m, r in self.results.items()], ignore_index=True)

    def table(self, budgets: Sequence[float] | None = None) -> pd.DataFrame:
        return pd.concat([r.table(budgets).assign(method=m) for m, r in self.results.items()], ignore_index=True)

    def summary(self, budgets: Sequence[float] | None = None, *, verbose: bool = False) -> str:
        """The answer first: the forecast (if any), one row per method at each of ``budgets`` (by
        default the forecast's target, or the largest run's compute), the held-out verdict in a line.
        ``verbose``: every method's own summary, the warnings and the held-out table instead."""
        skipped = [f"skipped {m}: {why}" for m, why in self.skipped.items()]
        if verbose:
            parts = [self.forecast.summary()] if self.forecast is not None else []
            parts += [r.summary(budgets, with_holdout=False) for r in self.results.values()]
            parts += skipped + [f"warning: {w}" for w in self.warnings]
            return "\n\n".join(parts + ([self.holdout_summary()] if self.holdout else []))
        withheld = self.withheld  # a forecast asked for and withheld: its reason is said first
        if self.forecast is not None:
            parts = [forecast_headline(self.forecast)]
            parts += [f"Note: {w}." for w in self.warnings if w.startswith(CAVEATS)]
            parts += [f"Note: {n}." for n in [self.forecast.calibration_note()] if n]
        else:  # no forecast: the caveats on the methods' own answers (the runs' repeats) still stand
            parts = [withheld[0].upper() + withheld[1:]] if withheld else []
            parts += [f"Note: {w}." for w in self.warnings if w.startswith(CAVEATS)]
        parts += [f"Note: {n}." for n in self.runs.notes]
        parts += [self.answer_table(budgets), *skipped]
        if self.holdout and max(len(items) for items in self.holdout.values()) > 1:  # budgets held out in turn
            parts.append(holdout_counts(self.holdout))
        elif self.holdout:
            misses = holdout_misses(self.holdout)
            parts.append("Held-out check: " + ("; ".join(misses) if misses else
                                               "every observed value at the held-out budget lies inside its interval") + ".")
        others = len([w for w in self.warnings if not w.startswith((NO_FORECAST, *CAVEATS))])
        if others:
            parts.append(f"{others} warning(s) and every method's details: --verbose, or the report")
        return "\n\n".join(parts)

    @property
    def withheld(self) -> str | None:
        """Why the forecast asked for is withheld (its ``NO_FORECAST`` warning), or None."""
        return next((w for w in self.warnings if w.startswith(NO_FORECAST)), None)

    def answer_table(self, budgets: Sequence[float] | None = None) -> str:
        """Every method's N_opt, D_opt and loss at each of ``budgets`` (the ones asked for), by default
        the forecast's target, else the largest run's compute."""
        largest = float(self.runs.frame["flops"].max())
        default = self.forecast.target if self.forecast is not None else largest
        label = self.runs.label
        headers = [h.format(loss=label, unit=self.runs.unit, size=SCALES[self.runs.scale]) for h in ANSWER_HEADERS]
        note = (" (bootstrap intervals over these runs only, without the extrapolation error the forecast's include)"
                if self.forecast is not None else "")
        said = self.forecast.target if self.forecast is not None else None  # its own caveat says it (beyond_measured)
        return "\n\n".join(f"Every method at C = {fmt.flops(at)} FLOPs{note}:\n"
                           + format_table(answer_rows(self.results, at), headers)
                           + "".join(f"\nNote: {n}." for n in [beyond_reach(at, largest)] if n and at != said)
                           for at in (list(budgets) if budgets else [default]))

    def to_dict(self, budgets: Sequence[float] | None = None) -> dict[str, Any]:
        out = {"results": {m: r.to_dict(budgets) for m, r in self.results.items()},
               "skipped": self.skipped, "warnings": self.warnings}
        if self.forecast is not None:
            out["forecast"] = self.forecast.to_dict()
        if self.holdout:
            out["holdout"] = {m: holdout_json(checks) for m, checks in self.holdout.items()}
        return out


NO_FORECAST = "no forecast: "  # the warning that says why a forecast asked for is withheld
FRESH_DATA = "the forecast assumes fresh data: "  # the warning of a forecast whose D_opt outruns the data
REPEATS = "the runs repeat their data: "  # the warning of answers that all read repeated tokens as fresh
CAVEATS = (FRESH_DATA, BEYOND_MEASURED, BELOW_SWEPT, REPEATS)  # said with the answer, not counted with the others


def repeats_caveat(tokens: float, unique: float) -> str:
    """The warning of a set of answers none of which prices repeated data: the runs trained up to
    ``tokens`` on ``unique`` tokens, and the data-limited law gave no answer."""
    return (f"{REPEATS}up to {tokens / unique:.3g} epochs of the {fmt.count(unique)} unique tokens they drew from, and "
            "the data-limited law, which prices the repeats, gives no answer for them (skipped); every answer here "
            "reads each token as fresh data, so a larger dataset (or runs within it) is what makes them hold")


def fresh_data_caveat(forecast: Any, unique: float, results: dict[str, FitResult],
                      skipped: dict[str, str] | None = None) -> str | None:
    """The forecast's candidates read tokens as fresh data: a warning when its D_opt at the target
    exceeds the ``unique`` tokens the runs drew from, with the data-constrained law's answer there
    (or that it gave none: ``skipped`` holds it)."""
    tokens = float(forecast.d_opt[0])
    if not tokens > unique:
        return None
    text = (f"{FRESH_DATA}its D_opt at the target, {fmt.count(tokens)} tokens, is {tokens / unique:.3g}x the "
            f"{fmt.count(unique)} unique tokens these runs drew from")
    limited = results.get("data-limited")
    if limited is None and "data-limited" in (skipped or {}):
        return text + "; the data-limited law, which prices the repeats, gives no answer for these runs (skipped)"
    if limited is None:
        return text + ("; a fit with the data budget (unique_tokens=U, --unique-tokens U) adds the data-limited "
                       "law, which prices the repeats")
    p = limited.predict(forecast.target).iloc[0]
    return (text + f"; the data-limited law, which prices the repeats, gives N_opt {fmt.count(p['N_opt'])}, loss "
            f"{fmt.with_interval(p['loss'], p['loss_lo'], p['loss_hi'], fmt=fmt.loss)} there")


ANSWER_HEADERS = ["method", "N_opt ({size})", "D_opt ({unit})", "{unit} / parameter", "{loss}", "exponent a"]


def answer_rows(results: dict[str, FitResult], target: float) -> list[list[str]]:
    """One row per method: its answer at ``target`` with intervals (the report's and the summary's table)."""
    rows = []
    for method, result in results.items():
        rows.append([method] + scale_cells(result.predict(target).iloc[0], result.runs.unit, result.runs.loss_range)
                    + [fmt.with_interval(*result.exponents["a"])])
    return rows


def forecast_headline(forecast: Any) -> str:
    """The forecast's answer and where each part comes from, in four lines (its candidates and chaining
    records: ``forecast.summary()``)."""
    return "\n".join(forecast.summary().split("\n")[:4])


def disagreements(results: list[FitResult]) -> list[str]:
    """A warning for each pair of approaches whose exponent a differs beyond its intervals."""
    out = []
    for r1, r2 in combinations(results, 2):
        (a1, lo1, hi1), (a2, lo2, hi2) = r1.exponents["a"], r2.exponents["a"]
        with_intervals = len(r1.samples) and len(r2.samples)
        apart = (hi1 < lo2 or hi2 < lo1) if with_intervals else abs(a1 - a2) > POINT_TOLERANCE
        if apart:
            out.append(f"approaches disagree: {r1.method} gives a = {fmt.with_interval(a1, lo1, hi1)}, "
                       f"{r2.method} gives a = {fmt.with_interval(a2, lo2, hi2)}; check the diagnostics of both")
    return out


def _example(results: dict[str, FitResult]) -> str:
    """The method an example names: vpnls where it was fitted (a law over (N, D): every attribute answers)."""
    return "vpnls" if "vpnls" in results else next(iter(results))


def _finite_or_inf(value: float) -> float:
    return value if value == value and abs(value) != float("inf") else float("inf")
