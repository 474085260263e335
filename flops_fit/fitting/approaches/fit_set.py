"""Several approaches fitted to the same runs, and whether they agree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import pandas as pd

from flops_fit.fitting.approaches.result import FitResult, Presentable
from flops_fit.fitting.validation.holdout import holdout_json

# Without intervals, exponents this far apart count as a disagreement.
POINT_TOLERANCE = 0.05


@dataclass
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
        return self.results[method]

    @property
    def runs(self):
        return next(iter(self.results.values())).runs

    def predict(self, budgets: Any) -> pd.DataFrame:
        return pd.concat([r.predict(budgets).assign(method=m) for m, r in self.results.items()], ignore_index=True)

    def table(self, budgets: Sequence[float] | None = None) -> pd.DataFrame:
        return pd.concat([r.table(budgets).assign(method=m) for m, r in self.results.items()], ignore_index=True)

    def summary(self, budgets: Sequence[float] | None = None) -> str:
        """Each method's summary (without its held-out rows), then one held-out table for all."""
        parts = [self.forecast.summary()] if self.forecast is not None else []
        parts += [r.summary(budgets, with_holdout=False) for r in self.results.values()]
        parts += [f"skipped {m}: {why}" for m, why in self.skipped.items()]
        parts += [f"warning: {w}" for w in self.warnings]
        if self.holdout:
            parts.append(self.holdout_summary())
        return "\n\n".join(parts)

    def to_dict(self, budgets: Sequence[float] | None = None) -> dict[str, Any]:
        out = {"results": {m: r.to_dict(budgets) for m, r in self.results.items()},
               "skipped": self.skipped, "warnings": self.warnings}
        if self.forecast is not None:
            out["forecast"] = self.forecast.to_dict()
        if self.holdout:
            out["holdout"] = {m: holdout_json(checks) for m, checks in self.holdout.items()}
        return out


def disagreements(results: list[FitResult]) -> list[str]:
    """A warning for each pair of approaches whose exponent a differs beyond its intervals."""
    out = []
    for r1, r2 in combinations(results, 2):
        (a1, lo1, hi1), (a2, lo2, hi2) = r1.exponents["a"], r2.exponents["a"]
        with_intervals = len(r1.samples) and len(r2.samples)
        apart = (hi1 < lo2 or hi2 < lo1) if with_intervals else abs(a1 - a2) > POINT_TOLERANCE
        if apart:
            out.append(f"approaches disagree: {r1.method} gives a = {a1:.3f} [{lo1:.3f}, {hi1:.3f}], "
                       f"{r2.method} gives a = {a2:.3f} [{lo2:.3f}, {hi2:.3f}]; check the diagnostics of both")
    return out
