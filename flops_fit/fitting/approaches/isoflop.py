"""Approach 2: per-budget IsoFLOP profiles, their minima, and power laws through the minima.

The profiles and their minima are ``profiles.py``'s; this module fits N_opt(C), D_opt(C)
and L(C) through the interior minima, bootstraps runs within each budget, and warns about
grids that bias the answer (edge minima, off-centre grids, few budgets).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting.approaches.approach import Approach
from flops_fit.fitting.approaches.result import Diagnostics, FitResult, PowerLawResult
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws.bootstrap import resample_weights
from flops_fit.fitting.laws.laws import fit_frontier, line_r2
from flops_fit.fitting.laws.profiles import (
    CURVES,
    budget_groups,
    check_curve,
    interior_optima_many,
    profile_optima,
)

MIN_BUDGETS = 2
FEW_BUDGETS = 4
OFF_CENTRE = 0.25  # optimum within this fraction of either end of the log-size range


class IsoflopResult(PowerLawResult):
    """Approach 2's result: its profiles are each budget's fitted curve and minimum."""


    def observed_optima(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        good = self.details["optima"].dropna(subset=["log_n"])
        return good["budget"].to_numpy(float), np.exp(good["log_n"].to_numpy()), np.exp(good["log_d"].to_numpy())


def excluded_budgets(optima: pd.DataFrame) -> str:
    """Why budgets have no interior minimum, one clause per reason with its budgets (a table of 26
    budgets one size each is one clause, not 26)."""
    groups: dict[str, list[float]] = {}
    for row in optima.itertuples():
        if isinstance(row.excluded, str):
            groups.setdefault(row.excluded.split(" (")[0], []).append(float(row.budget))
    clauses = []
    for why, budgets in groups.items():
        shown = (", ".join(f"{b:.3g}" for b in budgets) if len(budgets) <= 3
                 else f"{budgets[0]:.3g}, {budgets[1]:.3g}, ..., {budgets[-1]:.3g}")
        clauses.append(f"{why}: {len(budgets)} budget{'s' if len(budgets) > 1 else ''} ({shown})")
    return "; ".join(clauses)


class Isoflop(Approach):
    """Approach 2 with bootstrap intervals (runs resampled within each budget)."""

    name = "isoflop"
    title = "Approach 2: IsoFLOP profiles"
    options = ("curve",)

    def __init__(self, *, curve: str = "slice", **settings: Any) -> None:
        super().__init__(**settings)
        self.curve = check_curve(curve)

    def fit(self, runs: Runs) -> FitResult:
        budgets, warnings = budget_groups(runs)
        optima = profile_optima(runs, budgets, np.ones(len(runs)), self.curve)
        good = optima[optima["excluded"].isna()]
        if len(optima) < MIN_BUDGETS:  # no sizes added to one budget give a second one
            raise FitInputError(
                f"Approach 2 needs an interior loss minimum at {MIN_BUDGETS} or more budgets; these runs have "
                f"one budget ({float(optima.budget.iloc[0]):.3g} FLOPs). "
                "Sweep more budgets, or use method='parametric'."
            )
        if len(good) < MIN_BUDGETS:
            raise FitInputError(
                f"Approach 2 needs an interior loss minimum at {MIN_BUDGETS} or more budgets; found "
                f"{len(good)} of {len(optima)} ({excluded_budgets(optima) or 'no budgets'}). Add sizes around each budget's "
                "optimum, or use method='parametric'."
            )
        params = _frontier_through(good)
        samples = pd.DataFrame()
        if self.bootstrap:
            draws = []
            start = optima.attrs["exponents"]
            resamples = resample_weights(len(runs), self.bootstrap, self.seed, groups=budgets)
            for budget, log_n, log_d, loss in interior_optima_many(runs, budgets, resamples, self.curve, start):
                if len(budget) >= MIN_BUDGETS:  # all draws at once, each without a table of its own
                    draws.append(fit_frontier(np.log(budget), log_n, log_d, np.log(loss)))
            samples = pd.DataFrame(draws)
            if len(draws) < self.bootstrap:
                warnings.append(f"{self.bootstrap - len(draws)} of {self.bootstrap} resamples had interior minima at "
                                f"fewer than {MIN_BUDGETS} budgets and were dropped from the intervals")
            if len(draws) > 1 and samples.nunique().max() <= 1:
                warnings.append(f"the {len(draws)} resamples kept all give the fit itself (only those that drew "
                                "every size of a budget kept its minimum): its intervals are withheld")
        excluded = list(runs.excluded)
        for r in optima.itertuples():
            if isinstance(r.excluded, str):
                excluded.append({"budget": float(r.budget), "runs": r.runs, "reason": r.excluded})
        warnings += _grid_warnings(optima, good)
        log_c, log_n = np.log(good["budget"].to_numpy(float)), good["log_n"].to_numpy()
        residual, r2 = line_r2(log_c, log_n, params["a"], params["n0"])
        frame = pd.DataFrame({"flops": good["budget"].to_numpy(float), "N_opt": np.exp(log_n),
                              "predicted": np.exp(log_n - residual), "residual": residual})
        diagnostics = Diagnostics(residuals=frame, r2=r2, r2_of="log N_opt against log C, per budget",
                                  excluded=excluded, warnings=warnings)
        return self.result(IsoflopResult, params=params, samples=samples, runs=runs, diagnostics=diagnostics,
                           details={"curve": self.curve, "optima": optima, "budgets_of_runs": budgets,
                                    # 3 sizes or fewer at every budget: a draw keeps a minimum only with each
                                    # size once, so the resamples cannot vary (``validity.no_spread``)
                                    **({"resamples_vary": bool(good["runs"].max() > 3)} if self.bootstrap else {})})


def _frontier_through(optima: pd.DataFrame) -> dict[str, float]:
    return fit_frontier(np.log(optima["budget"].to_numpy(float)), optima["log_n"].to_numpy(),
                        optima["log_d"].to_numpy(), np.log(optima["loss"].to_numpy()))


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


__all__ = ["CURVES", "Isoflop", "IsoflopResult"]
