"""Approach 3 by variable projection, for any law form over (N, D).

The runs' N and D are scaled to order one, the form is fitted by ``estimators.fit_projection``
(exponents searched, coefficients solved), the bootstrap restarts from the full fit's exponents
on resampled run weights, and the coefficients go back to the runs' units. ``Vpnls`` (Chinchilla's
form) and ``Interaction`` are this approach with their forms.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd

from flops_fit.fitting.approaches.approach import Approach
from flops_fit.fitting.approaches.parametric import (
    ParametricResult,
    convergence_report,
    law_columns,
    parametric_diagnostics,
)
from flops_fit.fitting.approaches.result import FitResult
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws.bootstrap import resample_weights
from flops_fit.fitting.laws.estimators import (
    NM_MAXITER,
    Solution,
    fit_projection,
    fit_projection_rows,
)
from flops_fit.fitting.laws.focus import check_focus, focus_weights
from flops_fit.fitting.laws.forms import LawForm
from flops_fit.fitting.laws.laws import frontier_exponents


class ProjectionApproach(Approach):
    """A law form fitted by variable projection, with bootstrap intervals."""

    form: ClassVar[LawForm]
    options = ("focus",)

    def __init__(self, *, focus: str = "all", **settings: Any) -> None:
        super().__init__(**settings)
        self.focus = check_focus(focus)

    def fit(self, runs: Runs) -> FitResult:
        log_n, log_d, loss, rule = law_columns(runs)
        weights, floor = focus_weights(runs, self.focus)
        scale = {"n": float(np.exp(log_n.mean())), "d": float(np.exp(log_d.mean()))}
        x = {"n": np.exp(log_n) / scale["n"], "d": np.exp(log_d) / scale["d"]}  # order one: well conditioned
        est = fit_projection(self.form, x, loss, weights, floor=floor)

        def unscale(solutions: list[Solution]) -> dict[str, np.ndarray]:
            coef = np.array([s.coef for s in solutions])
            theta = np.array([s.theta for s in solutions])
            p = {**dict(zip(self.form.linear, coef.T)), **dict(zip(self.form.nonlinear, theta.T))}
            a, b = frontier_exponents(p["alpha"], p["beta"], rule.slope)
            return {**self.form.unscale(p, scale), "a": a, "b": b, **rule.columns(len(solutions))}

        samples, convergence, warnings = self.resampled(self.form, x, loss, weights, floor, est, unscale)
        params = {key: float(v[0]) for key, v in unscale([est]).items()}
        predicted = self.form.loss(params, {"n": np.exp(log_n), "d": np.exp(log_d)})
        diagnostics = parametric_diagnostics(runs, predicted, params, bounds=self.form.bounds,
                                             convergence=convergence, warnings=warnings)
        grid = self.form.grid
        return self.result(ParametricResult, form=self.form, params=params, samples=samples, runs=runs,
                           diagnostics=diagnostics,
                           details={"search": f"grid {grid[0]:g}..{grid[-1]:.3g} step {grid[1] - grid[0]:.3g}, "
                                              "then Nelder-Mead",
                                    "form": self.form.name, "focus": self.focus, "bounds": list(self.form.bounds)})

    def resampled(self, form: LawForm, x: dict[str, np.ndarray], loss: np.ndarray, weights: np.ndarray,
                  floor: float, est: Solution, unscale) -> tuple[pd.DataFrame, dict[str, Any], list[str]]:
        """The bootstrap: ``form`` refitted from the full fit's exponents on resampled run weights
        (``unscale``d to parameter columns), and the optimiser's convergence report and warnings."""
        samples, boot_status, boot_iterations = pd.DataFrame(), None, None
        if self.bootstrap:
            draws = resample_weights(loss.size, self.bootstrap, self.seed) * weights
            solved = fit_projection_rows(form, x, loss, draws, est.theta, floor)  # every resample at once
            samples = pd.DataFrame(unscale(solved))
            boot_iterations = np.array([s.iterations for s in solved])
            boot_status = np.array([s.status for s in solved])
        convergence, warnings = convergence_report(est.status, est.iterations, NM_MAXITER, boot_status,
                                                   boot_iterations, NM_MAXITER, "Nelder-Mead")
        return samples, convergence, warnings


__all__ = ["ProjectionApproach"]
