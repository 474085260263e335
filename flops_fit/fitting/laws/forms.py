"""Law forms: what a loss law is, apart from how it is fitted.

A form declares its inputs (run columns such as N and D), the coefficients the loss is
linear in (solved exactly for given exponents), the exponents searched (with bounds and a
starting grid), its loss and its compute-optimal frontier. The estimators in
``estimators`` fit any form; a new law is one small class here (or in its own module).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from flops_fit.fitting.laws.laws import Params, law_loss, parametric_frontier

Inputs = Mapping[str, np.ndarray]
FRONTIER_POINTS = 241
FRONTIER_DECADES = 8.0  # searched either side of the additive law's optimum


class LawForm:
    """A loss law L(inputs; linear coefficients, exponents)."""

    name: ClassVar[str]
    inputs: ClassVar[tuple[str, ...]] = ("n", "d")
    linear: ClassVar[tuple[str, ...]]
    nonnegative: ClassVar[tuple[str, ...]]
    nonlinear: ClassVar[tuple[str, ...]]
    bounds: ClassVar[tuple[float, float]]  # every exponent's search bounds
    grid: ClassVar[np.ndarray]  # starting values of each exponent (one 1-D grid, used for all)
    fatol: ClassVar[float] = 1e-12  # Nelder-Mead's tolerance on the squared error

    def unscale(self, p: dict[str, np.ndarray], scale: Mapping[str, float]) -> dict[str, np.ndarray]:
        """Coefficients fitted on inputs divided by ``scale`` (order one) in the inputs' own units."""
        raise NotImplementedError

    def design(self, theta: np.ndarray, x: Inputs) -> np.ndarray:
        """The columns the loss is linear in at exponents ``theta``: (runs, len(linear))."""
        raise NotImplementedError

    def design_rows(self, theta: np.ndarray, x: Inputs) -> np.ndarray:
        """``design`` for each row of ``theta`` (m, exponents): (m, runs, len(linear)). A form whose
        columns are simple powers overrides it with one vectorised expression."""
        return np.stack([self.design(t, x) for t in np.atleast_2d(theta)])

    def loss(self, p: Mapping[str, Any], x: Inputs) -> np.ndarray:
        """The law at ``x`` for parameters ``p`` (scalars, or columns broadcast against ``x``)."""
        raise NotImplementedError

    def frontier(self, p: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(N_opt, D_opt, loss), each (draws, budgets), along C = k N^(1+s) D; numeric by default."""
        return numeric_frontier(lambda q, n, d: self.loss(q, {"n": n, "d": d}), p, budgets)

    @property
    def parameters(self) -> tuple[str, ...]:
        return self.linear + self.nonlinear


class Chinchilla(LawForm):
    """E + A / N^alpha + B / D^beta (Hoffmann et al. 2022); closed-form frontier."""

    name = "chinchilla"
    linear = ("E", "A", "B")
    nonnegative = ("E", "A", "B")
    nonlinear = ("alpha", "beta")
    bounds = (0.01, 2.5)
    grid = np.arange(0.05, 2.01, 0.05)

    def design(self, theta: np.ndarray, x: Inputs) -> np.ndarray:
        alpha, beta = theta
        return np.column_stack([np.ones_like(x["n"]), x["n"] ** -alpha, x["d"] ** -beta])

    def design_rows(self, theta: np.ndarray, x: Inputs) -> np.ndarray:
        theta = np.atleast_2d(theta)
        size, data = x["n"] ** -theta[:, 0:1], x["d"] ** -theta[:, 1:2]
        return np.stack([np.ones_like(size), size, data], -1)

    def loss(self, p: Mapping[str, Any], x: Inputs) -> np.ndarray:
        return law_loss(p, x["n"], x["d"])

    def frontier(self, p: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return parametric_frontier(p, budgets)

    def unscale(self, p: dict[str, np.ndarray], scale: Mapping[str, float]) -> dict[str, np.ndarray]:
        return {**p, "A": p["A"] * scale["n"] ** p["alpha"], "B": p["B"] * scale["d"] ** p["beta"]}

    # Chinchilla's own procedure (Huber on log loss, L-BFGS) in the log-sum-exp parameterisation
    # theta = (a, b, e, alpha, beta): log L = LSE(a - alpha log N, b - beta log D, e).
    def log_predict(self, theta: np.ndarray, logs: Inputs):
        """log L for each row of ``theta`` (k, 5) and a function taking dObjective/dlogL (k, n) to
        the gradient (k, 5): the Huber estimator's view of this form."""
        log_n, log_d = logs["n"], logs["d"]
        x1 = theta[:, 0:1] - theta[:, 3:4] * log_n
        x2 = theta[:, 1:2] - theta[:, 4:5] * log_d
        e = theta[:, 2:3]
        # Shift by the row's largest exponent only where exp could overflow (rare: wild starts).
        shift = np.maximum(np.maximum(x1.max(1, keepdims=True), x2.max(1, keepdims=True)), e)
        shift = np.where(shift > 600.0, shift, 0.0)
        p1, p2, p3 = np.exp(x1 - shift), np.exp(x2 - shift), np.exp(e - shift)
        total = p1 + p2 + p3

        def backward(g: np.ndarray) -> np.ndarray:
            psi = g / total
            g1, g2 = psi * p1, psi * p2
            grad = np.empty((theta.shape[0], 5))
            grad[:, 0], grad[:, 1], grad[:, 2] = g1.sum(1), g2.sum(1), psi.sum(1) * p3[:, 0]
            grad[:, 3], grad[:, 4] = -(g1 @ log_n), -(g2 @ log_d)
            return grad

        return np.log(total) + shift, backward

    @staticmethod
    def from_log_theta(theta: np.ndarray) -> dict[str, np.ndarray]:
        """(E, A, B, alpha, beta) columns from rows of the log-sum-exp parameters.

        A log coefficient beyond ~709 (a term the runs do not bound: a resample of a weak sweep
        drives it off) is inf, which is what it is; ``validity.failure`` turns such a fit or
        interval into a reason, so numpy's overflow warning would only repeat it to the terminal."""
        theta = np.atleast_2d(theta)
        with np.errstate(over="ignore"):
            return {"E": np.exp(theta[:, 2]), "A": np.exp(theta[:, 0]), "B": np.exp(theta[:, 1]),
                    "alpha": theta[:, 3], "beta": theta[:, 4]}


class InteractionForm(LawForm):
    """E + A/N^alpha + B/D^beta + F/(N^alpha D^beta): a small model stops gaining from data
    sooner (the scaling-laws design note, "Loss forms beyond Chinchilla's"); F may be negative."""

    name = "interaction"
    linear = ("E", "A", "B", "F")
    nonnegative = ("E", "A", "B")
    nonlinear = ("alpha", "beta")
    bounds = (0.02, 2.5)
    grid = np.arange(0.05, 2.01, 0.075)
    fatol = 1e-13

    def unscale(self, p: dict[str, np.ndarray], scale: Mapping[str, float]) -> dict[str, np.ndarray]:
        nf, df = scale["n"] ** p["alpha"], scale["d"] ** p["beta"]
        return {**p, "A": p["A"] * nf, "B": p["B"] * df, "F": p["F"] * nf * df}

    def design(self, theta: np.ndarray, x: Inputs) -> np.ndarray:
        alpha, beta = theta
        size, data = x["n"] ** -alpha, x["d"] ** -beta
        return np.column_stack([np.ones_like(size), size, data, size * data])

    def design_rows(self, theta: np.ndarray, x: Inputs) -> np.ndarray:
        theta = np.atleast_2d(theta)
        size, data = x["n"] ** -theta[:, 0:1], x["d"] ** -theta[:, 1:2]
        return np.stack([np.ones_like(size), size, data, size * data], -1)

    def loss(self, p: Mapping[str, Any], x: Inputs) -> np.ndarray:
        size, data = np.asarray(x["n"]) ** -p["alpha"], np.asarray(x["d"]) ** -p["beta"]
        return p["E"] + p["A"] * size + p["B"] * data + p["F"] * size * data


def numeric_frontier(loss, p: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per parameter row and budget: N_opt, D_opt and ``loss(p, N, D)`` there, minimising along
    C = k N^(1+s) D (s = ``k_slope``, 0 when absent) on a fine grid in log N centred on the
    additive (Chinchilla) part's optimum, refined by a parabola through the three best points."""
    keys = [k for k in p if k not in ("a", "b")]
    col = {k: np.asarray(p[k], dtype=float)[:, None, None] for k in keys}
    slope = col["k_slope"] if "k_slope" in col else np.zeros_like(col["k"])
    grow = 1.0 + slope
    c = np.asarray(budgets, dtype=float)[None, :, None] / col["k"]
    centre = 0.5 * np.log(c)
    if all(k in col for k in ("A", "B", "alpha", "beta")):
        with np.errstate(all="ignore"):
            total = col["alpha"] + grow * col["beta"]
            log_g = (np.log(col["alpha"] * col["A"]) - np.log(grow * col["beta"] * col["B"])) / total
            additive = log_g + col["beta"] / total * np.log(c)
        centre = np.where(np.isfinite(additive), additive, centre)
    offsets = np.linspace(-FRONTIER_DECADES, FRONTIER_DECADES, FRONTIER_POINTS) * np.log(10)
    log_n = centre + offsets[None, None, :]
    with np.errstate(all="ignore"):
        values = loss(col, np.exp(log_n), c / np.exp(grow * log_n))
    values = np.where(np.isfinite(values), values, np.inf)
    i = np.clip(values.argmin(-1), 1, FRONTIER_POINTS - 2)
    rows, cols = np.indices(i.shape)
    y0, y1, y2 = values[rows, cols, i - 1], values[rows, cols, i], values[rows, cols, i + 1]
    step = offsets[1] - offsets[0]
    with np.errstate(all="ignore"):
        shift = np.where((y0 - 2 * y1 + y2) > 0, 0.5 * (y0 - y2) / (y0 - 2 * y1 + y2), 0.0)
    best = log_n[rows, cols, i] + np.clip(shift, -1, 1) * step
    n = np.exp(best)
    with np.errstate(all="ignore"):  # a draw whose frontier runs off to 0 or infinity: judged by the caller
        d = c[..., 0] / n ** grow[..., 0]
        value = loss({k: v[..., 0] for k, v in col.items()}, n, d)
    return n, d, value


FORMS: dict[str, LawForm] = {f.name: f for f in (Chinchilla(), InteractionForm())}

__all__ = ["FORMS", "Chinchilla", "InteractionForm", "LawForm", "numeric_frontier"]
