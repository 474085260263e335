"""A law of the whole loss curve, fitted to every recorded point of every run ("curve").

L(N, t) = E + A N^-alpha + B S1(t)^-beta + F N^-alpha S1(t)^-beta - C S2(t)   (training loss at step t)
held-out loss after the last step = L(N, T) + delta

Tissue et al. 2024 ("Scaling Law with Learning Rate Annealing": L0 + A S1^-alpha - C S2) with
a model-size term: S1 is the tokens trained weighted by the learning-rate factor, S2 the
annealing area, 1 - the factor exponentially averaged over tau steps (``curve_areas``). At a
constant rate S1 = D and S2 = 0, so the law is Chinchilla's; a cooldown adds C S2 (up to C
once the rate has been at zero for a few tau). Rates are factors of each run's own peak: the
law describes runs at the sweep's learning-rate rule (reported as a power law in N fitted to
the runs' rates), and its frontier is that of runs trained like the sweep's, with its
schedule (warmup, stable phase, cooldown share and shape).

The curves are training losses, the fit's targets held-out losses: ``delta`` (free sign) is
the held-out loss minus the training loss the law gives at a run's end, fitted on the runs'
final held-out points (each weighted as its run's curve points together). A constant: the
held-out text is a fixed sample of the same source, so the gap does not grow with N or D
(the docs report it and the residuals).

Linear in (E, A, B, C, delta), with E, A, B, C >= 0: the nonlinear (alpha, beta, log tau) are
searched (a grid, then Nelder-Mead; variable projection). The bootstrap resamples runs (a
run's points go together) and refits each resample from the full fit's optimum.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting.approach import Approach
from flops_fit.fitting.bootstrap import resample_weights
from flops_fit.fitting.curve_areas import (
    TAU_GRID,
    annealed,
    curve_points,
    factors,
    s2_at,
    units_per_step,
)
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws import Params
from flops_fit.fitting.parametric import flops_rule
from flops_fit.fitting.result import Diagnostics, FitResult

LINEAR = ("E", "A", "B", "C", "delta", "F")  # the first NONNEGATIVE kept >= 0
NONNEGATIVE = 4
BOUNDS = {"alpha": (0.02, 2.5), "beta": (0.02, 2.5), "log_tau": (np.log(TAU_GRID[0]), np.log(TAU_GRID[-1]))}
GRID = (np.arange(0.1, 1.31, 0.2), np.arange(0.1, 1.31, 0.2), np.log(np.geomspace(3.0, 3e4, 9)))
MIN_RUNS = 6
MAXITER = 600
KAPPA = np.geomspace(1e-4, 1e4, 161)  # run steps / tau, the frontier's table of a run's final S2
SHAPE_STEPS = 4000  # the sweep's schedule on this many normalised steps, for the frontier


def _lsq(G: np.ndarray, h: np.ndarray, yy: float) -> tuple[np.ndarray, float]:
    """min |y - X c|^2 from its normal equations (G, h, y.y) with c[:4] (E, A, B, C) >= 0."""
    best, best_ssr = None, np.inf
    size = len(h)
    for drop in itertools.chain.from_iterable(itertools.combinations(range(NONNEGATIVE), r)
                                              for r in range(NONNEGATIVE + 1)):
        keep = [j for j in range(size) if j not in drop]
        try:
            c = np.linalg.solve(G[np.ix_(keep, keep)], h[keep])
        except np.linalg.LinAlgError:
            continue
        if np.all(c[[keep.index(j) for j in range(NONNEGATIVE) if j in keep]] >= 0):
            ssr = yy - float(c @ h[keep])
            if ssr < best_ssr:
                best, best_ssr = np.zeros(size), ssr
                best[keep] = c
            if not drop:  # the unconstrained optimum is feasible: nothing beats it
                break
    return (np.zeros(size) if best is None else best), best_ssr


class CurveProblem:
    """The points of some runs, scaled to order one, and the variable-projection objective."""

    def __init__(self, runs: Runs) -> None:
        frame = runs.frame
        if len(frame) < MIN_RUNS:
            raise FitInputError(f"the curve law needs at least {MIN_RUNS} runs; got {len(frame)}")
        if not runs.has_curves:
            raise FitInputError("the curve law needs every run's training curve (2 or more points); these runs "
                                "have none: fit a sweep folder, or use another method")
        self.points, self.counts = curve_points(frame)
        p = self.points
        n = frame["params"].to_numpy(float)
        if np.ptp(np.log(n)) == 0:
            raise FitInputError("the curve law needs runs of several model sizes; all runs share one size")
        self.n0, self.s0 = float(np.exp(np.log(n).mean())), float(np.exp(p.log_s1[p.final].mean()))
        self.log_n = np.log(n[p.run] / self.n0)
        self.log_s1 = p.log_s1 - np.log(self.s0)
        self.y = p.loss
        # a run's held-out point weighs as much as its curve points together (at least 1)
        self.base = np.where(p.final, np.maximum(self.counts[p.run], 1), 1.0)

    def design(self, theta: np.ndarray) -> np.ndarray:
        alpha, beta, log_tau = theta
        size, data = np.exp(-alpha * self.log_n), np.exp(-beta * self.log_s1).mean(axis=1)
        return np.column_stack([np.ones_like(self.y), size, data, -s2_at(self.points.s2, log_tau),
                                self.points.final.astype(float), size * data])

    def solve(self, theta: np.ndarray, run_weights: np.ndarray) -> tuple[np.ndarray, float]:
        X, w = self.design(theta), self.base * run_weights[self.points.run]
        Xw = X * w[:, None]
        return _lsq(Xw.T @ X, Xw.T @ self.y, float((w * self.y) @ self.y))

    def residuals(self, theta: np.ndarray, run_weights: np.ndarray) -> np.ndarray:
        """sqrt(w) (y - X c): the residuals left once the linear coefficients are solved at theta."""
        coef, _ = self.solve(theta, run_weights)
        return np.sqrt(self.base * run_weights[self.points.run]) * (self.y - self.design(theta) @ coef)

    def minimise(self, run_weights: np.ndarray, start: np.ndarray | None = None) -> tuple[np.ndarray, int, bool]:
        """(alpha, beta, log tau, E, A, B, C, delta) in scaled units, evaluations, converged.

        Without ``start``: the grid's best point, then Nelder-Mead. Then (and from ``start``, a
        bootstrap refit) trust-region least squares on the projected residuals, a few
        evaluations from a nearby optimum."""
        from scipy.optimize import least_squares, minimize

        bounds = [BOUNDS["alpha"], BOUNDS["beta"], BOUNDS["log_tau"]]
        evaluations, converged = 0, True
        if start is None:
            start = min(itertools.product(*GRID), key=lambda t: self.solve(np.array(t), run_weights)[1])
            res = minimize(lambda t: self.solve(t, run_weights)[1], np.asarray(start, float), method="Nelder-Mead",
                           bounds=bounds, options={"xatol": 1e-4, "fatol": 1e-12, "maxiter": MAXITER})
            start, evaluations, converged = res.x, int(res.nfev), bool(res.success)
        lo, hi = np.array(bounds).T
        res = least_squares(self.residuals, np.clip(np.asarray(start, float), lo + 1e-9, hi - 1e-9),
                            bounds=(lo, hi), args=(run_weights,), x_scale=np.array([0.1, 0.1, 1.0]),
                            xtol=1e-8, ftol=1e-12, max_nfev=200)
        coef, _ = self.solve(res.x, run_weights)
        return np.r_[res.x, coef], evaluations + int(res.nfev), converged and res.status > 0

    def refit(self, run_weights: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, int, bool]:
        """A bootstrap resample's fit from a nearby optimum ``start`` (all 8 parameters): bounded
        least squares with the analytic Jacobian, a few evaluations each."""
        from scipy.optimize import least_squares

        root = np.sqrt(self.base * run_weights[self.points.run])
        final = self.points.final.astype(float)
        step = np.log(TAU_GRID[1] / TAU_GRID[0])

        def parts(z):
            alpha, beta, log_tau = z[:3]
            size = np.exp(-alpha * self.log_n)
            power = np.exp(-beta * self.log_s1)
            return size, power, s2_at(self.points.s2, log_tau), log_tau

        def residuals(z):
            size, power, s2, _ = parts(z)
            E, A, B, C, delta, F = z[3:]
            data = power.mean(axis=1)
            return root * (E + A * size + B * data - C * s2 + delta * final + F * size * data - self.y)

        def jacobian(z):
            size, power, s2, log_tau = parts(z)
            A, B, C, F = z[4], z[5], z[6], z[8]
            data, d_data = power.mean(axis=1), -(self.log_s1 * power).mean(axis=1)
            slope = (s2_at(self.points.s2, log_tau + 1e-3 * step) - s2) / (1e-3 * step)
            columns = [-(A + F * data) * self.log_n * size, (B + F * size) * d_data, -C * slope,
                       np.ones_like(s2), size, data, -s2, final, size * data]
            return root[:, None] * np.column_stack(columns)

        lo = np.r_[[BOUNDS[k][0] for k in ("alpha", "beta", "log_tau")], [0.0] * NONNEGATIVE,
                   [-np.inf] * (len(LINEAR) - NONNEGATIVE)]
        hi = np.r_[[BOUNDS[k][1] for k in ("alpha", "beta", "log_tau")], [np.inf] * len(LINEAR)]
        res = least_squares(residuals, np.clip(start, lo, hi), jac=jacobian, bounds=(lo, hi),
                            x_scale=np.r_[0.1, 0.1, 1.0, [0.1] * len(LINEAR)], xtol=1e-8, ftol=1e-10, max_nfev=100)
        return res.x, int(res.nfev), res.status > 0

    def unscale(self, est: np.ndarray) -> dict[str, np.ndarray]:
        est = np.atleast_2d(est)
        alpha, beta, log_tau, E, A, B, C, delta, F = est.T
        return {"E": E, "A": A * self.n0 ** alpha, "B": B * self.s0 ** beta, "C": C, "delta": delta,
                "F": F * self.n0 ** alpha * self.s0 ** beta, "alpha": alpha, "beta": beta, "tau": np.exp(log_tau)}


class Schedule:
    """The sweep's schedule on normalised steps: a run's final S1 (per token) and S2 (by steps / tau)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        scheds = list(frame["schedule"])
        steps = np.array([s["steps"] for s in scheds], float)
        kind = pd.Series([s.get("schedule", "cosine") for s in scheds]).mode()[0]
        shape = pd.Series([s.get("cooldown_shape", "1-sqrt") for s in scheds]).mode()[0]
        warm = float(np.median([s.get("warmup_steps") or 0 for s in scheds] / steps))
        cool = float(np.median([(s["steps"] - s.get("cooldown_start", 0)) for s in scheds] / steps))
        ratio = float(np.median([s.get("min_lr_ratio", 0.0) for s in scheds]))
        total = SHAPE_STEPS
        self.description = {"schedule": kind, "warmup_fraction": warm, "min_lr_ratio": ratio}
        if kind == "wsd":
            self.description |= {"cooldown_fraction": cool, "cooldown_shape": shape}
        g = factors({"schedule": kind, "steps": total, "warmup_steps": max(1, round(warm * total)),
                     "cooldown_start": total - max(1, round(cool * total)), "cooldown_shape": shape,
                     "min_lr_ratio": ratio})
        self.s1_per_token = float(g.mean())
        self.s2_table = annealed(g, total / KAPPA)[:, -1]
        self.per_step = float(np.median([units_per_step(r, s) for (_, r), s in zip(frame.iterrows(), scheds,
                                                                                      strict=True)]))

    def final_s2(self, steps: np.ndarray, tau: np.ndarray) -> np.ndarray:
        kappa = np.log(np.clip(steps / tau, KAPPA[0], KAPPA[-1]))
        return np.interp(kappa, np.log(KAPPA), self.s2_table)


def held_out(p: Params, n: np.ndarray, data: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """The law's held-out loss after a run: N, its S1^-beta (``data``) and its final S2."""
    size = n ** -p["alpha"]
    return p["E"] + p["delta"] + p["A"] * size + p["B"] * data + p["F"] * size * data - p["C"] * s2


def final_loss(p: Params, schedule: Schedule, n: np.ndarray, d: np.ndarray) -> np.ndarray:
    """The held-out loss after a run of the sweep's schedule at (N, D); p's columns broadcast."""
    s2 = schedule.final_s2(d / schedule.per_step, p["tau"])
    return held_out(p, n, (schedule.s1_per_token * d) ** -p["beta"], s2)


class CurveLawResult(FitResult):
    """The curve law's result: the final loss of runs like the sweep's, minimised over N."""

    @property
    def schedule(self) -> Schedule:
        return self.details["_schedule"]

    def _col(self, params: Params) -> dict[str, np.ndarray]:
        keys = (*LINEAR, "alpha", "beta", "tau", "k")
        col = {k: np.asarray(params[k], float)[:, None, None] for k in keys}
        col["k_slope"] = np.asarray(params.get("k_slope", np.zeros_like(params["k"])), float)[:, None, None]
        return col

    def frontier(self, params: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        col = self._col(params)
        c = np.asarray(budgets, float)[None, :, None]
        n_runs = self.runs.frame["params"].to_numpy(float)
        grid = np.geomspace(n_runs.min() / 1e3, n_runs.max() * 1e4, 600)[None, None, :]
        with np.errstate(all="ignore"):
            d = c / (col["k"] * grid ** (1 + col["k_slope"]))
            loss = final_loss(col, self.schedule, grid, d)
            loss = np.where(np.isfinite(loss), loss, np.inf)
            i = np.clip(np.argmin(loss, axis=2), 1, grid.size - 2)
            take = lambda a, j: np.take_along_axis(a, j[..., None], axis=2)[..., 0]  # noqa: E731
            l0, l1, l2 = take(loss, i - 1), take(loss, i), take(loss, i + 1)
            step = np.log(grid[0, 0, 1] / grid[0, 0, 0])
            shift = np.clip(0.5 * (l0 - l2) / (l0 - 2 * l1 + l2), -1, 1)  # parabola through the three
            shift = np.where(np.isfinite(shift), shift, 0.0)
            n = np.exp(np.log(grid[0, 0, i]) + shift * step)
            d = c[..., 0] / (col["k"][..., 0] * n ** (1 + col["k_slope"][..., 0]))
            sq = {k: v[..., 0] for k, v in col.items()}
            return n, d, final_loss(sq, self.schedule, n, d)

    def final_losses(self, frame: pd.DataFrame) -> np.ndarray:
        """The held-out loss after each run of ``frame`` (params, tokens, schedule; no curve or loss
        needed): a run that was not trained, predicted from its own schedule."""
        rows = frame.assign(curve=[None] * len(frame), loss=np.nan)
        points, _ = curve_points(rows, with_final=True)
        p = self.params
        n = rows["params"].to_numpy(float)[points.run]
        return held_out(p, n, np.exp(-p["beta"] * points.log_s1).mean(axis=1), s2_at(points.s2, np.log(p["tau"])))

    def loss_surface(self, n: np.ndarray, d: np.ndarray) -> np.ndarray:
        return final_loss(self.params, self.schedule, np.asarray(n, float), np.asarray(d, float))

    def draw_profiles(self, ax: Any) -> None:
        pts, frame = self.details["_points"], self.runs.frame
        predicted = self.diagnostics.residuals["predicted"].to_numpy()
        import matplotlib

        sizes = np.unique(frame["params"])
        colours = dict(zip(sizes, matplotlib.colormaps["viridis"](np.linspace(0, 0.9, sizes.size)), strict=True))
        labelled = set()
        for i, run in frame.iterrows():
            m = (pts.run == i) & ~pts.final
            colour, size = colours[run["params"]], run["params"]
            label = None if size in labelled else f"N = {size:,.0f}"
            labelled.add(size)
            ax.scatter(pts.tokens[m], pts.loss[m], s=4, color=colour, label=label)
            ax.plot(pts.tokens[m], predicted[m], lw=0.8, color=colour)
        ax.set_xscale("log")
        ax.set_xlabel("tokens seen")
        ax.set_ylabel("training loss")
        ax.set_title("Training curves (points) and the fitted curve law (lines), one colour per size")


class CurveLaw(Approach):
    """Every curve point of every run under one law of N and the learning-rate schedule."""

    name = "curve"
    title = "Curve law: L = E + A/N^alpha + B/S1^beta - C S2 (every curve point; Tissue et al. 2024)"

    def fit(self, runs: Runs) -> FitResult:
        problem = CurveProblem(runs)
        frame = runs.frame
        n, d = frame["params"].to_numpy(float), frame["tokens"].to_numpy(float)
        rule = flops_rule(np.log(n), frame["flops"].to_numpy(float), n, d)
        ones = np.ones(len(frame))
        est, iterations, converged = problem.minimise(ones)
        samples, failed = pd.DataFrame(), 0
        if self.bootstrap:
            draws = resample_weights(len(frame), self.bootstrap, self.seed)
            solved = [problem.refit(w, est) for w in draws]
            failed = sum(not s[2] for s in solved)
            samples = pd.DataFrame(problem.unscale(np.array([s[0] for s in solved])))
        params = {k: float(v[0]) for k, v in problem.unscale(est).items()}
        schedule = Schedule(frame)
        result = self.result(CurveLawResult, params=params, samples=samples, runs=runs,
                             diagnostics=_diagnostics(problem, est, frame, runs, converged, iterations, failed),
                             details={"_schedule": schedule, "_points": problem.points, **schedule.description,
                                      "points": int(problem.y.size), "lr_rule": lr_rule(frame)})
        return _with_exponents(result, rule)


def _with_exponents(result: CurveLawResult, rule) -> CurveLawResult:
    """Add k, k_slope (the runs' FLOPs rule) and the frontier's local exponents a, b (the slopes of
    N_opt and D_opt in C between the runs' smallest and largest budgets) to params and draws."""
    flops = result.runs.frame["flops"].to_numpy(float)
    span = np.array([flops.min(), flops.max()])
    result.params.update(k=rule.k, k_slope=rule.slope)
    for key, value in rule.columns(len(result.samples)).items():
        result.samples[key] = value
    for target in (result.params, result.samples):
        if len(target) == 0 or (isinstance(target, pd.DataFrame) and target.empty):
            continue
        n_opt, d_opt, _ = result.frontier({k: np.atleast_1d(np.asarray(target[k], float)) for k in target}, span)
        a = np.log(n_opt[:, 1] / n_opt[:, 0]) / np.log(span[1] / span[0])
        b = np.log(d_opt[:, 1] / d_opt[:, 0]) / np.log(span[1] / span[0])
        target["a"], target["b"] = (float(a[0]), float(b[0])) if isinstance(target, dict) else (a, b)
    return result


def lr_rule(frame: pd.DataFrame) -> dict[str, float] | None:
    """The runs' peak learning rate as c N^e (least squares in logs), the rule the law's frontier assumes."""
    if "lr" not in frame or not np.all(pd.to_numeric(frame["lr"], errors="coerce") > 0):
        return None
    log_n, log_lr = np.log(frame["params"].to_numpy(float)), np.log(frame["lr"].to_numpy(float))
    slope, intercept = np.polyfit(log_n, log_lr, 1) if np.ptp(log_n) > 0 else (0.0, float(log_lr.mean()))
    return {"c": float(np.exp(intercept)), "exponent": float(slope)}


def _diagnostics(problem: CurveProblem, est: np.ndarray, frame: pd.DataFrame, runs: Runs, converged: bool,
                 iterations: int, failed: int) -> Diagnostics:
    pts = problem.points
    predicted = problem.design(est[:3]) @ est[3:]
    residual = pts.loss - predicted
    per_token = (frame["flops"] / frame["tokens"]).to_numpy(float)  # FLOPs spent so far at each point
    table = pd.DataFrame({"run_id": frame["run_id"].to_numpy()[pts.run], "params": frame["params"].to_numpy()[pts.run],
                          "tokens": pts.tokens, "flops": pts.tokens * per_token[pts.run], "loss": pts.loss, "predicted": predicted, "residual": residual,
                          "held_out": pts.final})
    r2 = 1.0 - np.sum(residual ** 2) / np.sum((pts.loss - pts.loss.mean()) ** 2)
    warnings = []
    if not converged:
        warnings.append(f"Nelder-Mead stopped after {iterations} iterations without converging")
    if failed:
        warnings.append(f"{failed} of the bootstrap refits did not converge: the intervals include them")
    for name, j in (("A", 4), ("B", 5), ("C", 6)):
        if est[j] <= 1e-12:
            warnings.append(f"{name} fitted as 0: the runs do not show that term")
    return Diagnostics(residuals=table, r2=float(r2), r2_of="loss, per curve point and held-out point",
                       excluded=list(runs.excluded), warnings=warnings,
                       convergence={"iterations": iterations, "converged": converged, "bootstrap_unconverged": failed})


__all__ = ["CurveLaw", "CurveLawResult"]
