"""A law of the whole loss curve, fitted to every recorded point of every run ("curve").

L(N, t) = E + A N^-alpha + B S1^-beta + F N^-alpha S1^-beta - C S2       (training loss at step t)
held-out loss after the last step = L(N, T) + delta

Tissue et al. 2024 ("Scaling Law with Learning Rate Annealing": L0 + A S1^-alpha - C S2) with
the size terms of the interaction law (``forms.InteractionForm``: a small model stops gaining
from data sooner, which the GPT demo's curves show): S1 is the tokens trained weighted by the
learning-rate factor, S2 the annealing area, 1 - the factor exponentially averaged over tau
steps (``curve_areas``). At a constant rate S1 = D and S2 = 0, so the law is the interaction
law in (N, D); a cooldown adds C S2 (up to C once the rate has been at zero for a few tau).
Rates are factors of each run's own peak: the law describes runs at the sweep's own
learning-rate rule (reported as a power law in N fitted to the runs' rates, ``lr_rule``), and
its frontier is that of runs trained like the sweep's (``curve_result.Schedule``).

The curves are training losses, the fit's targets held-out losses: ``delta`` (free sign) is
the held-out loss minus the training loss the law gives at a run's end, fitted on the runs'
final held-out points (each weighted as its run's curve points together, so the final losses
count as much as the curves). A constant: the held-out text is a fixed sample of the same
source, and the frontier is about final losses, which delta and the final points pin.

``CurveForm`` is a ``forms.LawForm`` (linear in E, A, B, C, delta, F; E, A, B, C >= 0;
exponents alpha, beta and lag = log10(tau) / 2.5 searched), fitted by
``estimators.fit_projection``. Each bootstrap resample (runs drawn with replacement, a run's
points together) is refitted from the full fit's optimum by bounded least squares on all
nine parameters with the analytic Jacobian: a few evaluations each, every resample at once
(``_trf``: scipy's steps for each, so each keeps the answer scipy gives it alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting.approaches.approach import Approach
from flops_fit.fitting.approaches.curve_result import CurveLawResult, Schedule, with_exponents
from flops_fit.fitting.approaches.parametric import flops_rule
from flops_fit.fitting.approaches.result import Diagnostics, FitResult
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws._trf import least_squares_batch
from flops_fit.fitting.laws.bootstrap import resample_weights
from flops_fit.fitting.laws.curve_areas import TAU_GRID, curve_points, s2_at, s2_each
from flops_fit.fitting.laws.estimators import fit_projection
from flops_fit.fitting.laws.forms import Inputs, LawForm

LAG_DECADES = 2.5  # tau = 10^(LAG_DECADES lag): the form's one exponent range [0.02, 2.5] spans tau 1.1 .. 1.8e6
MIN_RUNS = 6
REFIT_EVALUATIONS = 100
REFIT_TOL = 1e-6  # least_squares' ftol and xtol of a refit
BATCH_CELLS = 4_000_000  # Jacobian cells (resamples x points x 9) refitted together: ~32 MB per copy
PARTS_KEPT = 64  # exponents whose terms a problem keeps (``CurveProblem._parts``)


class CurveForm(LawForm):
    """The curve law as a law form over each point's N, S1 samples, S2 table and final flag."""

    name = "curve"
    inputs = ("n", "log_s1", "s2", "final")
    linear = ("E", "A", "B", "C", "delta", "F")
    nonnegative = ("E", "A", "B", "C")
    nonlinear = ("alpha", "beta", "lag")
    bounds = (0.02, 2.5)
    grid = np.arange(0.1, 2.31, 0.3)  # 8^3 starts; Nelder-Mead from the best

    def design(self, theta: np.ndarray, x: Inputs) -> np.ndarray:
        alpha, beta, lag = theta
        size, data = x["n"] ** -alpha, np.exp(-beta * x["log_s1"]).mean(axis=1)
        return np.column_stack([np.ones_like(size), size, data, -s2_at(x["s2"], log_tau(lag)), x["final"], size * data])

    def design_rows(self, theta: np.ndarray, x: Inputs) -> np.ndarray:
        """``design`` of every row of ``theta`` at once, each element computed as ``design`` computes it
        (the variable projection's grid of 512 starts and its Nelder-Mead steps)."""
        theta = np.atleast_2d(theta)
        size = np.stack([x["n"] ** -alpha for alpha in theta[:, 0]])  # a scalar power, as ``design`` takes it
        data = np.exp(-theta[:, 1, None, None] * x["log_s1"]).mean(axis=-1)
        s2 = -s2_each(x["s2"], log_tau(theta[:, 2]))
        final = np.broadcast_to(x["final"], size.shape)
        return np.stack([np.ones_like(size), size, data, s2, final, size * data], axis=-1)

    def loss(self, p: Mapping[str, Any], x: Inputs) -> np.ndarray:
        size, data = np.asarray(x["n"]) ** -p["alpha"], np.exp(-p["beta"] * x["log_s1"]).mean(axis=-1)
        return (p["E"] + p["A"] * size + p["B"] * data + p["F"] * size * data
                - p["C"] * s2_at(x["s2"], log_tau(p["lag"])) + p["delta"] * x["final"])

    def unscale(self, p: dict[str, np.ndarray], scale: Mapping[str, float]) -> dict[str, np.ndarray]:
        nf, sf = scale["n"] ** p["alpha"], scale["s1"] ** p["beta"]
        return {**p, "A": p["A"] * nf, "B": p["B"] * sf, "F": p["F"] * nf * sf}


FORM = CurveForm()


def log_tau(lag: float | np.ndarray) -> float | np.ndarray:
    return np.asarray(lag) * LAG_DECADES * np.log(10.0)


class CurveProblem:
    """The points of some runs, scaled to order one (the form's inputs), and their weights."""

    def __init__(self, runs: Runs) -> None:
        frame = runs.frame
        if len(frame) < MIN_RUNS:
            raise FitInputError(f"the curve law needs at least {MIN_RUNS} runs; got {len(frame)}{runs.left_out()}")
        if not runs.has_curves:
            raise FitInputError("the curve law needs every run's training curve (2 or more points); these runs "
                                "have none: fit a sweep folder, or use another method")
        self.points, self.counts = curve_points(frame)
        p = self.points
        n = frame["params"].to_numpy(float)
        if np.ptp(np.log(n)) == 0:
            raise FitInputError("the curve law needs runs of several model sizes; all runs share one size")
        self.scale = {"n": float(np.exp(np.log(n).mean())), "s1": float(np.exp(p.log_s1[p.final].mean()))}
        self.x = {"n": n[p.run] / self.scale["n"], "log_s1": p.log_s1 - np.log(self.scale["s1"]), "s2": p.s2,
                  "final": p.final.astype(float)}
        self.y = p.loss
        # a run's held-out point weighs as much as its curve points together (at least 1)
        self.base = np.where(p.final, np.maximum(self.counts[p.run], 1), 1.0)
        self._cache: dict[bytes, tuple[np.ndarray, ...]] = {}

    def refit(self, run_weights: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, bool]:
        """A resample's (alpha, beta, lag, E, A, B, C, delta, F) from a nearby optimum ``start``:
        bounded least squares on all nine with the analytic Jacobian."""
        from scipy.optimize import least_squares

        root = np.sqrt(self.base * run_weights[self.points.run])
        x, final, log_n = self.x, self.x["final"], np.log(self.x["n"])
        parts = self._parts

        def residuals(z):
            size, _, data, s2, _ = parts(z)
            E, A, B, C, delta, F = z[3:]
            return root * (E + A * size + B * data - C * s2 + delta * final + F * size * data - self.y)

        def jacobian(z):
            size, power, data, s2, ds2 = parts(z)
            A, B, C, F = z[4], z[5], z[6], z[8]
            columns = [-(A + F * data) * log_n * size, -(B + F * size) * (x["log_s1"] * power).mean(axis=1),
                       -C * ds2, np.ones_like(s2), size, data, -s2, final, size * data]
            return root[:, None] * np.column_stack(columns)

        lo, hi = _box()
        res = least_squares(residuals, np.clip(start, lo, hi), jac=jacobian, bounds=(lo, hi),
                            x_scale="jac", xtol=REFIT_TOL, ftol=REFIT_TOL, max_nfev=REFIT_EVALUATIONS)
        return res.x, res.status > 0

    def refit_many(self, run_weights: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``refit`` of every row of ``run_weights`` (resamples, runs) from ``start``, all at once: the
        same bounded least squares, step for step (``_trf``), with each step's exponent terms computed
        for every resample together."""
        lo, hi = _box()
        per_block = max(1, BATCH_CELLS // (self.y.size * lo.size))  # rows are independent: blocks bound the memory
        estimates, ok = [], []
        for block in range(0, len(run_weights), per_block):
            roots = np.sqrt(self.base * run_weights[block:block + per_block, self.points.run])
            starts = np.repeat(np.clip(start, lo, hi)[None], len(roots), axis=0)
            solved = least_squares_batch(lambda z, rows, roots=roots: self._batch_residuals(z, roots[rows]), starts,
                                         lo, hi, ftol=REFIT_TOL, xtol=REFIT_TOL, max_nfev=REFIT_EVALUATIONS)
            estimates.append(solved.x)
            ok.append(solved.status > 0)
        return np.concatenate(estimates), np.concatenate(ok)

    def _batch_residuals(self, z: np.ndarray, root: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Weighted residuals (k, points) and their Jacobians (k, points, 9) at the rows of ``z``,
        the terms that depend on the exponents computed for every row together."""
        x, final, log_n = self.x, self.x["final"], np.log(self.x["n"])
        alpha, beta, lag = z[:, :1], z[:, 1:2], z[:, 2]
        E, A, B, C, delta, F = (z[:, i:i + 1] for i in range(3, 9))
        size = np.exp(-alpha * log_n)
        power = np.exp(-beta[:, :, None] * x["log_s1"])
        data, weighted_log = power.mean(axis=2), (x["log_s1"] * power).mean(axis=2)
        node = np.log(TAU_GRID[1] / TAU_GRID[0])
        s2 = s2_each(x["s2"], log_tau(lag))
        ds2 = (s2_each(x["s2"], log_tau(lag) + 1e-3 * node) - s2) / (1e-3 * node) * LAG_DECADES * np.log(10.0)
        residuals = root * (E + A * size + B * data - C * s2 + delta * final + F * size * data - self.y)
        columns = [-(A + F * data) * log_n * size, -(B + F * size) * weighted_log, -C * ds2, np.ones_like(s2),
                   size, data, -s2, np.broadcast_to(final, s2.shape), size * data]
        return residuals, root[:, :, None] * np.stack(columns, axis=2)

    def _parts(self, z: np.ndarray) -> tuple[np.ndarray, ...]:
        """What the law's residuals and Jacobian at ``z`` take from its exponents alone (size and
        data terms, S2 and its derivative in lag), kept for the last few exponents seen: every
        resample's refit starts from the same optimum and the Jacobian follows its residuals."""
        key = z[:3].tobytes()
        if key not in self._cache:
            if len(self._cache) >= PARTS_KEPT:
                self._cache.clear()
            x, node = self.x, np.log(TAU_GRID[1] / TAU_GRID[0])
            size, power = np.exp(-z[0] * np.log(x["n"])), np.exp(-z[1] * x["log_s1"])
            s2 = s2_at(x["s2"], log_tau(z[2]))
            ds2 = (s2_at(x["s2"], log_tau(z[2]) + 1e-3 * node) - s2) / (1e-3 * node) * LAG_DECADES * np.log(10.0)
            self._cache[key] = size, power, power.mean(axis=1), s2, ds2
        return self._cache[key]

    def unscale(self, estimates: np.ndarray) -> dict[str, np.ndarray]:
        """Rows of (alpha, beta, lag, *linear) as parameter columns in the runs' units, tau in steps."""
        est = np.atleast_2d(estimates)
        p = {**dict(zip(FORM.nonlinear, est[:, :3].T, strict=True)),
             **dict(zip(FORM.linear, est[:, 3:].T, strict=True))}
        p = FORM.unscale(p, self.scale)
        p["tau"] = np.exp(log_tau(p.pop("lag")))
        return p


def _box() -> tuple[np.ndarray, np.ndarray]:
    """Bounds of (alpha, beta, lag, E, A, B, C, delta, F): the exponents' range, E, A, B, C >= 0."""
    free = len(FORM.linear) - len(FORM.nonnegative)
    lo = np.r_[[FORM.bounds[0]] * 3, [0.0] * len(FORM.nonnegative), [-np.inf] * free]
    hi = np.r_[[FORM.bounds[1]] * 3, [np.inf] * len(FORM.linear)]
    return lo, hi


class CurveLaw(Approach):
    """Every curve point of every run under one law of N and the learning-rate schedule."""

    name = "curve"
    title = "Curve law: every curve point, L = E + A/N^a + B/S1^b + F/(N^a S1^b) - C S2 (Tissue et al. 2024)"

    def fit(self, runs: Runs) -> FitResult:
        problem = CurveProblem(runs)
        frame = runs.frame
        n, d = frame["params"].to_numpy(float), frame["tokens"].to_numpy(float)
        rule = flops_rule(np.log(n), frame["flops"].to_numpy(float), n, d)
        solution = fit_projection(FORM, problem.x, problem.y, problem.base)
        # polished on all nine parameters (Nelder-Mead crawls along the valley A, B and F share)
        est, _ = problem.refit(np.ones(len(frame)), np.r_[solution.theta, solution.coef])
        samples, failed = pd.DataFrame(), 0
        if self.bootstrap:
            draws = resample_weights(len(frame), self.bootstrap, self.seed)
            estimates, ok = problem.refit_many(draws, est)
            failed = int(np.sum(~ok))
            samples = pd.DataFrame(problem.unscale(estimates))
        params = {k: float(v[0]) for k, v in problem.unscale(est).items()}
        schedule = Schedule(frame)
        predicted = FORM.design(est[:3], problem.x) @ est[3:]
        result = self.result(CurveLawResult, params=params, samples=samples, runs=runs,
                             diagnostics=_diagnostics(problem, predicted, frame, runs, solution, failed, params),
                             details={"_schedule": schedule, "_points": problem.points, **schedule.description,
                                      "points": int(problem.y.size), "form": FORM.name, "lr_rule": lr_rule(frame)})
        return with_exponents(result, rule)


def lr_rule(frame: pd.DataFrame) -> dict[str, float] | None:
    """The runs' peak learning rate as c N^e (least squares in logs), the rule the law's frontier assumes."""
    if "lr" not in frame or not np.all(pd.to_numeric(frame["lr"], errors="coerce") > 0):
        return None
    log_n, log_lr = np.log(frame["params"].to_numpy(float)), np.log(frame["lr"].to_numpy(float))
    slope, intercept = np.polyfit(log_n, log_lr, 1) if np.ptp(log_n) > 0 else (0.0, float(log_lr.mean()))
    return {"c": float(np.exp(intercept)), "exponent": float(slope)}


def _diagnostics(problem: CurveProblem, predicted: np.ndarray, frame: pd.DataFrame, runs: Runs, solution,
                 failed: int, params: dict[str, float]) -> Diagnostics:
    pts = problem.points
    residual = pts.loss - predicted
    per_token = (frame["flops"] / frame["tokens"]).to_numpy(float)  # FLOPs spent so far at each point
    table = pd.DataFrame({"run_id": frame["run_id"].to_numpy()[pts.run], "params": frame["params"].to_numpy()[pts.run],
                          "tokens": pts.tokens, "flops": pts.tokens * per_token[pts.run], "loss": pts.loss,
                          "predicted": predicted, "residual": residual, "held_out": pts.final})
    r2 = 1.0 - np.sum(residual ** 2) / np.sum((pts.loss - pts.loss.mean()) ** 2)
    warnings = []
    if solution.status != 0:
        warnings.append(f"Nelder-Mead stopped after {solution.iterations} iterations without converging")
    if failed:
        warnings.append(f"{failed} of the bootstrap refits stopped at their evaluation limit: the intervals "
                        "include them")
    warnings += [f"{name} fitted as 0: the runs do not show that term" for name in ("A", "B", "C")
                 if params[name] <= 1e-12]
    return Diagnostics(residuals=table, r2=float(r2), r2_of="loss, per curve point and held-out point",
                       excluded=list(runs.excluded), warnings=warnings,
                       convergence={"iterations": solution.iterations, "status": solution.status,
                                    "bootstrap_unconverged": failed})


__all__ = ["FORM", "CurveForm", "CurveLaw", "CurveProblem"]
