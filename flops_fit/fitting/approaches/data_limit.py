"""The data-constrained law (Muennighoff et al. 2023, "Scaling Data-Constrained Language Models").

With U unique tokens, a run on D > U tokens repeats its data R = D/U - 1 times, and repeated
tokens are worth less than new ones: the law reads Chinchilla's E + A/N^alpha + B/D'^beta at the
effective data D' = U + U R* (1 - exp(-R / R*)) (D' = D while D <= U). R*, the repeats' decay
constant, is fitted (the paper's 15.4: about 4 epochs are nearly as good as new data, returns
vanish by about 16). Their excess-parameter term is left out: our sweeps' sizes stay near their
budgets' optima.

The law is a ``LawForm`` (``DataLimitedForm``): Chinchilla's at D' (``laws.law_loss``; nothing
is written out twice), so given (alpha, beta, R*) the loss is linear in E, A, B >= 0 and
``estimators.fit_projection`` fits it like any form (R* searched as r = ln(R*) / 4, inside the
forms' common exponent bounds). When no run repeats its data R* cannot be fitted and is fixed at
the paper's value, so the forecast and the sizing for inference still respect U beyond the runs.
The frontier has no closed form: the forms' numeric one (``forms.numeric_frontier``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.approaches.parametric import (
    ParametricResult,
    law_columns,
    parametric_diagnostics,
)
from flops_fit.fitting.approaches.projection import ProjectionApproach
from flops_fit.fitting.approaches.result import FitResult
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws.estimators import Solution, fit_projection
from flops_fit.fitting.laws.focus import check_focus, focus_weights
from flops_fit.fitting.laws.forms import Chinchilla, Inputs
from flops_fit.fitting.laws.laws import frontier_exponents, law_loss

PAPER_R_STAR = 15.4  # Muennighoff et al. 2023's fitted decay constant for repeated data
R_SCALE = 4.0  # R* = exp(R_SCALE r): r in the forms' exponent bounds (0.01, 2.5) spans R* from 1.04 to 22,000


def check_unique_tokens(value: Any) -> float:
    """``unique_tokens`` as a float; FitInputError unless a positive number."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not (np.isfinite(number) and number >= 1):
        raise FitInputError(f"unique_tokens must be a number of tokens, at least 1 (the dataset's unique training "
                            f"tokens), got {value!r}")
    return number


def effective_data(d: np.ndarray, unique: Any, r_star: Any) -> np.ndarray:
    """D' = min(D, U) + U R* (1 - exp(-R / R*)) with R = max(D/U - 1, 0): repeated tokens decay in worth."""
    d = np.asarray(d, dtype=float)
    repeats = np.maximum(d / unique - 1.0, 0.0)
    return np.minimum(d, unique) + unique * r_star * -np.expm1(-repeats / r_star)


def _inverse_power(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """base ** -exponent for a column of exponents, as one scalar exponent gives it: numpy takes
    1 / base for a scalar -1 (a grid point), which can differ from the power in the last bit."""
    return np.where(exponent == 1.0, 1.0 / base, base ** -exponent)


class DataLimitedForm(Chinchilla):
    """E + A/N^alpha + B/D'^beta at the effective data D' of U unique tokens (input ``u``, in the
    units of ``d``); R* = exp(4 r), r searched with the exponents. With ``r_star`` set, R* is held
    there and only (alpha, beta) are searched."""

    name = "data-limited"
    inputs = ("n", "d", "u")
    grid = np.arange(0.1, 1.51, 0.1)

    def __init__(self, r_star: float | None = None) -> None:
        self.r_star = r_star
        self.nonlinear = ("alpha", "beta") if r_star is not None else ("alpha", "beta", "r")

    def _r_star(self, p: Mapping[str, Any]) -> Any:
        if "r_star" in p:
            return p["r_star"]
        return self.r_star if self.r_star is not None else np.exp(R_SCALE * p["r"])

    def design(self, theta: np.ndarray, x: Inputs) -> np.ndarray:
        r_star = self.r_star if self.r_star is not None else np.exp(R_SCALE * theta[2])
        return super().design(theta[:2], {"n": x["n"], "d": effective_data(x["d"], x["u"], r_star)})

    def design_rows(self, theta: np.ndarray, x: Inputs) -> np.ndarray:
        """``design`` for each row of ``theta`` at once: each row's R* gives its own data column D'
        (element for element the row's own ``design``: a bootstrap's simplex asks for thousands)."""
        theta = np.atleast_2d(theta)
        r_star = self.r_star if self.r_star is not None else np.exp(R_SCALE * theta[:, 2:3])
        data = effective_data(x["d"][None, :], x["u"][None, :], r_star)
        size, data = _inverse_power(x["n"], theta[:, 0:1]), _inverse_power(data, theta[:, 1:2])
        return np.stack([np.ones_like(size), size, data], -1)

    def loss(self, p: Mapping[str, Any], x: Inputs) -> np.ndarray:
        unique = x["u"] if "u" in x else p["U"]
        return law_loss(p, x["n"], effective_data(x["d"], unique, self._r_star(p)))

    def frontier(self, p, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return super(Chinchilla, self).frontier(p, budgets)  # numeric: no closed form at D'

    def unscale(self, p: dict[str, np.ndarray], scale: Mapping[str, float]) -> dict[str, np.ndarray]:
        out = super().unscale(p, scale)  # D' scales with D and U alike: B as Chinchilla's
        out["r_star"] = np.full_like(p["alpha"], self.r_star) if self.r_star is not None else np.exp(R_SCALE * p["r"])
        out.pop("r", None)
        return out


def data_limited_loss(p: Mapping[str, Any], n: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The data-constrained law at (N, D) for parameters with ``U`` and ``r_star``."""
    return DataLimitedForm().loss(p, {"n": n, "d": d})


class DataLimited(ProjectionApproach):
    """Approach 3 at the effective data of repeated tokens, by variable projection with bootstrap intervals."""

    name = "data-limited"
    title = "Approach 3 with repeated data (Muennighoff et al. 2023), variable projection"
    options = ("focus", "unique_tokens")

    def __init__(self, *, unique_tokens: float | None = None, focus: str = "all", **settings: Any) -> None:
        super().__init__(focus=focus, **settings)
        if unique_tokens is None:
            raise FitInputError("the data-constrained law needs the dataset's unique tokens: fit(..., "
                                "unique_tokens=U) (a sweep folder records them)")
        self.unique, self.focus = check_unique_tokens(unique_tokens), check_focus(focus)

    def fit(self, runs: Runs) -> FitResult:
        log_n, log_d, loss, rule = law_columns(runs)
        weights, floor = focus_weights(runs, self.focus)
        repeated = int(np.sum(np.exp(log_d) > self.unique))
        form = DataLimitedForm(None if repeated else PAPER_R_STAR)  # no repeats: R* cannot be measured
        scale = {"n": float(np.exp(log_n.mean())), "d": float(np.exp(log_d.mean()))}
        x = {"n": np.exp(log_n) / scale["n"], "d": np.exp(log_d) / scale["d"],
             "u": np.full(log_n.size, self.unique / scale["d"])}  # order one: well conditioned
        est = fit_projection(form, x, loss, weights, floor=floor)

        def unscale(solutions: list[Solution]) -> dict[str, np.ndarray]:
            coef, theta = np.array([s.coef for s in solutions]), np.array([s.theta for s in solutions])
            p = form.unscale({**dict(zip(form.linear, coef.T)), **dict(zip(form.nonlinear, theta.T))}, scale)
            a, b = frontier_exponents(p["alpha"], p["beta"], rule.slope)  # the unconstrained law's
            return {**p, "a": a, "b": b, "U": np.full(len(solutions), self.unique), **rule.columns(len(solutions))}

        samples, convergence, warnings = self.resampled(form, x, loss, weights, floor, est, unscale)
        params = {key: float(v[0]) for key, v in unscale([est]).items()}
        if not repeated:
            warnings.append(f"no run trains on more than the {fmt.count(self.unique)} unique tokens: R* is not measured "
                            f"here and is fixed at Muennighoff et al.'s {PAPER_R_STAR}")
        on_bound = bool(repeated) and min(abs(est.theta[2] - bound) for bound in form.bounds) < 1e-6  # r = ln(R*) / 4
        if on_bound:
            low, high = (np.exp(R_SCALE * bound) for bound in form.bounds)
            warnings.append(f"R* = {params['r_star']:.4g} sits on its search bound ({low:.3g} to {high:,.0f}): the "
                            f"{repeated} run(s) past the {fmt.count(self.unique)} unique tokens do not pin down how "
                            "repeated data lose worth, so R* and its interval say nothing; train runs at several "
                            "epochs, or check unique_tokens")
        predicted = form.loss(params, {"n": np.exp(log_n), "d": np.exp(log_d)})
        diagnostics = parametric_diagnostics(runs, predicted, params, bounds=form.bounds, convergence=convergence,
                                             warnings=warnings)
        return self.result(ParametricResult, form=form, params=params, samples=samples, runs=runs,
                           diagnostics=diagnostics,
                           details={"form": form.name, "unique_tokens": self.unique, "repeated_runs": repeated,
                                    "max_epochs": float(np.exp(log_d).max() / self.unique), "focus": self.focus,
                                    "r_star": "fitted" if repeated else "fixed",
                                    "on_bound": ["r_star"] if on_bound else [],
                                    "search": "grid over alpha, beta (and r), then Nelder-Mead"})


__all__ = ["DataLimited", "DataLimitedForm", "data_limited_loss", "effective_data"]
