"""Approach 3: L(N, D) = E + A / N^alpha + B / D^beta, and its variable-projection variant.

``fit_parametric`` follows Chinchilla (app. D.2) as Epoch AI re-ran it: Huber loss with
delta 1e-3 on log loss, summed over runs (not averaged: the average stops L-BFGS early),
log-sum-exp parameterisation, the objective at every point of the initialisation grid and
L-BFGS from the GRID_KEEP (128) of them with the lowest (``pruned_grids``: the same optimum as
all 4500 starts, in a tenth of the time).

Bootstrap: the grid search runs once, on all runs; each resample then restarts L-BFGS from
the best few distinct optima of that grid (``starts``) rather than the 4500 grid points.
On the full data this warm start reaches the same optimum as the full grid (a test checks
it), and it is what lets 4000 resamples finish in seconds. Fits made together
(``Parametric.fit_together``: a forward chain's splits) run their searches and their resamples
as rows of the same L-BFGS runs, every row evaluated as it would be alone (``_huber_rows``).

``ParametricResult`` is the result of every law over (N, D) (this module's, and those
``projection.py`` fits: its ``form`` gives the loss and frontier): the law's own IsoFLOP
profiles, frontier and loss surface. Whether the batched L-BFGS converged (on the full data
and in every resample) is a diagnostic.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting.approaches.approach import Approach
from flops_fit.fitting.approaches.result import Diagnostics, FitResult
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws._huber_rows import HuberRows
from flops_fit.fitting.laws._lbfgs import ITERATION_LIMIT, STATUS, BatchResult, minimize_batch
from flops_fit.fitting.laws.bootstrap import resample_weights
from flops_fit.fitting.laws.estimators import HUBER_DELTA, huber_objective
from flops_fit.fitting.laws.focus import check_focus, focus_weights
from flops_fit.fitting.laws.forms import Chinchilla, LawForm
from flops_fit.fitting.laws.laws import Params, frontier_exponents

# Chinchilla's initialisation grid (Hoffmann et al. 2022, app. D.2): 4500 starts.
INIT_GRID = np.array([
    (a, b, e, alpha, beta)
    for alpha, beta, e, a, b in itertools.product(
        np.arange(0.0, 2.01, 0.5), np.arange(0.0, 2.01, 0.5), np.arange(-1.0, 1.01, 0.5),
        np.arange(0.0, 25.1, 5.0), np.arange(0.0, 25.1, 5.0))
])
GRID_FTOL = 1e-6
GRID_KEEP = 128  # grid points L-BFGS starts from: the lowest objectives of the 4500 (``pruned_grids``)
POLISH = 10
POLISH_MAXITER = 2000
BOOTSTRAP_MAXITER = 500
MIN_RUNS = 6  # five parameters need more runs than that to say anything
CHINCHILLA = Chinchilla()


def objective(theta: np.ndarray, log_n: np.ndarray, log_d: np.ndarray, log_l: np.ndarray, weights: np.ndarray,
              delta: float = HUBER_DELTA, floor: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Chinchilla's Approach 3 objective: summed Huber loss on log loss in the log-sum-exp
    parameterisation theta = (a, b, e, alpha, beta) (``estimators.huber_objective``)."""
    return huber_objective(CHINCHILLA, theta, {"n": log_n, "d": log_d}, log_l, weights, delta, floor)


class FlopsRule(NamedTuple):
    """C = k N^slope N D: the runs' FLOPs per parameter per token as a power law in N.

    6ND data give k = 6, slope 0 (Chinchilla). At small sizes the count is not
    proportional to N (the embedding costs no FLOPs, attention's context term and the head
    do), so k falls with N; a single median k would put the frontier's D off by several
    percent at sizes away from the median run's.
    """

    k: float
    slope: float

    def columns(self, rows: int) -> dict[str, np.ndarray]:
        return {"k": np.full(rows, self.k), "k_slope": np.full(rows, self.slope)}


def flops_rule(log_n: np.ndarray, flops: np.ndarray, n: np.ndarray, d: np.ndarray) -> FlopsRule:
    """Least squares of log(C / (N D)) on log N; a constant ratio (6ND data) is exactly (k, 0), also
    where a table rounded N and D to whole numbers (a ratio constant to a millionth)."""
    log_k = np.log(flops / (n * d))
    if np.ptp(log_k) < 1e-6:
        return FlopsRule(float(np.exp(np.median(log_k))), 0.0)
    slope, intercept = np.polyfit(log_n, log_k, 1)
    return FlopsRule(float(np.exp(intercept)), float(slope))


def law_columns(runs: Runs) -> tuple[np.ndarray, np.ndarray, np.ndarray, FlopsRule]:
    """(log N, log D, loss, FLOPs rule) of runs a five-parameter law can be fitted to; refuses too few
    or too uniform runs. The rule is the runs' FLOPs per parameter per token (``FlopsRule``)."""
    f = runs.frame
    if len(f) < MIN_RUNS:
        raise FitInputError(f"a law over (N, D) (parametric, vpnls, interaction, data-limited) needs at least {MIN_RUNS} "
                            f"runs; got {len(f)}{runs.left_out()}")
    n, d = f["params"].to_numpy(float), f["tokens"].to_numpy(float)
    if (points := len(set(zip(n.tolist(), d.tolist(), strict=True)))) < MIN_RUNS:  # seeds repeat a point, not add one
        raise FitInputError(f"a law over (N, D) (parametric, vpnls, interaction, data-limited) needs at least {MIN_RUNS} "
                            f"runs of different (size, tokens); got {points} among {len(f)} runs (repeats of a run, "
                            "such as seeds, measure its noise, not the law's shape): sweep more sizes or budgets")
    if np.ptp(np.log(n)) == 0 or np.ptp(np.log(d)) == 0:
        raise FitInputError("a law over (N, D) (parametric, vpnls, interaction, data-limited) needs runs of several "
                            "model sizes and token counts; "
                            "all runs share one size or one token count")
    return np.log(n), np.log(d), f["loss"].to_numpy(float), flops_rule(np.log(n), f["flops"].to_numpy(float), n, d)


def _theta_params(theta: np.ndarray, rule: FlopsRule) -> dict[str, np.ndarray]:
    p = Chinchilla.from_log_theta(theta)
    a, b = frontier_exponents(p["alpha"], p["beta"], rule.slope)
    return {**p, "a": a, "b": b, **rule.columns(p["E"].size)}


def distinct_optima(x: np.ndarray, f: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` best solutions that differ from each other (rounded parameters)."""
    order = np.argsort(f)
    keys, picked = set(), []
    for i in order:
        if not np.isfinite(f[i]):
            break
        key = tuple(np.round(x[i], 3))
        if key not in keys:
            keys.add(key)
            picked.append(i)
            if len(picked) == count:
                break
    return x[picked]


class Problem(NamedTuple):
    """One Approach-3 fit's data: the runs' logs, their weights (``focus``), Huber's delta and the
    floor factor (``estimators.huber_objective``)."""

    log_n: np.ndarray
    log_d: np.ndarray
    log_l: np.ndarray
    weights: np.ndarray
    delta: float = HUBER_DELTA
    floor: float = 1.0


def _rows(problems: list[Problem], counts: list[int], weights: list[np.ndarray] | None = None) -> HuberRows:
    """One objective for ``counts[i]`` rows of each problem in turn, problem i's rows weighted by
    ``weights[i]`` (rows, runs; default: the problem's own weights)."""
    if weights is None:
        weights = [np.broadcast_to(p.weights, (c, len(p.weights))) for p, c in zip(problems, counts, strict=True)]
    return HuberRows([(p.log_n, p.log_d, p.log_l, p.delta, p.floor) for p in problems], weights)


def pruned_grids(problems: list[Problem], keep: int = GRID_KEEP) -> list[np.ndarray]:
    """Each problem's ``keep`` points of the initialisation grid with the lowest objective, in
    grid order.

    Every grid point's objective of every problem is one vectorised evaluation; L-BFGS from each
    of the 4500 was 90% of a fit's time, and the starts that begin far worse end in the same few
    basins as the best ones (on the Epoch runs and synthetic sweeps the pruned grid reaches the
    full grid's optimum or a lower one: tests/test_fit_speed.py, benchmarks/bench_fit_speed.py).
    """
    grid = len(INIT_GRID)
    values, _ = _rows(problems, [grid] * len(problems))(np.tile(INIT_GRID, (len(problems), 1)),
                                                       np.arange(grid * len(problems)))
    values = np.where(np.isfinite(values), values, np.inf).reshape(len(problems), grid)
    return [INIT_GRID[np.sort(np.argsort(v, kind="stable")[:keep])] for v in values]


def grid_search(problem: Problem, keep: int, starts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, BatchResult]:
    """L-BFGS from the grid's best starts (``pruned_grids``; ``starts`` to choose others, e.g.
    the whole INIT_GRID); returns the ``keep`` best distinct optima, their values, and the
    polishing run (whose first row, once sorted, is the winner).

    Every start runs until its relative decrease per step stays below GRID_FTOL; the best
    POLISH distinct solutions then continue to full precision. All starts end in the same
    few basins long before the loose tolerance stops them, and polishing settles the winner.
    """
    return grid_searches([problem], keep, None if starts is None else [starts])[0]


def grid_searches(problems: list[Problem], keep: int, starts: list[np.ndarray] | None = None) -> list[tuple]:
    """``grid_search`` of several problems in the same two L-BFGS runs, every start a row of its
    own evaluated as it is alone (``HuberRows``: rows never mix), so each problem gets the answer
    it gets alone, and the refits of a forward chain's splits share the optimiser's per-iteration
    work and one objective call per step."""
    starts = pruned_grids(problems) if starts is None else starts
    coarse = _rows_of(problems, starts, maxiter=500, ftol=GRID_FTOL)
    polished = _rows_of(problems, [distinct_optima(r.x, r.f, POLISH) for r in coarse], maxiter=POLISH_MAXITER)
    out = []
    for run in polished:
        order = np.argsort(np.where(np.isfinite(run.f), run.f, np.inf))
        run = BatchResult(*(v[order] for v in run))
        out.append((distinct_optima(run.x, run.f, keep), run.f, run))
    return out


def _rows_of(problems: list[Problem], starts: list[np.ndarray], weights: list[np.ndarray] | None = None,
             **options) -> list[BatchResult]:
    """One ``minimize_batch`` over every problem's starts (weighted as ``_rows`` says); per problem
    its rows' result. The problems' rows are laid out by their number of runs (``HuberRows`` sums
    the rows of problems of one size together); each row's path is its own either way."""
    order = sorted(range(len(problems)), key=lambda i: problems[i].log_n.size)
    counts = [len(starts[i]) for i in order]
    objective = _rows([problems[i] for i in order], counts, None if weights is None else [weights[i] for i in order])
    run = minimize_batch(objective, np.concatenate([starts[i] for i in order]), **options)
    bounds = np.cumsum([0, *counts])
    out: list[BatchResult] = [None] * len(problems)  # type: ignore[list-item]
    for i, lo, hi in zip(order, bounds[:-1], bounds[1:], strict=True):
        out[i] = BatchResult(*(v[lo:hi] for v in run))
    return out


class HuberFit(NamedTuple):
    """Per weight row: the best solution over the starts, its value, and that start's
    iterations and stopping status (``_lbfgs.STATUS``)."""

    theta: np.ndarray
    value: np.ndarray
    iterations: np.ndarray
    status: np.ndarray


def huber_fit(log_n, log_d, log_l, weights, starts, delta=HUBER_DELTA, maxiter: int = BOOTSTRAP_MAXITER,
              floor: float = 1.0) -> HuberFit:
    """Best L-BFGS solution per weight row (R of them) from each start."""
    weights = np.atleast_2d(weights)
    return huber_fits([Problem(log_n, log_d, log_l, weights[0], delta, floor)], [weights], [starts], maxiter)[0]


def huber_fits(problems: list[Problem], weights: list[np.ndarray], starts: list[np.ndarray],
               maxiter: int = BOOTSTRAP_MAXITER) -> list[HuberFit]:
    """``huber_fit`` of each problem (its weight rows ``weights[i]``, from ``starts[i]``) in one
    L-BFGS run: a bootstrap's resamples of every split of a forward chain together."""
    shapes = [(w.shape[0], s.shape[0]) for w, s in zip(weights, starts, strict=True)]
    x0 = [np.repeat(s[None], reps, axis=0).reshape(reps * k, 5) for s, (reps, k) in zip(starts, shapes, strict=True)]
    rows = [np.repeat(w, k, axis=0) for w, (_, k) in zip(weights, shapes, strict=True)]
    out = []
    for run, (reps, k) in zip(_rows_of(problems, x0, rows, maxiter=maxiter), shapes, strict=True):
        f = np.where(np.isfinite(run.f), run.f, np.inf).reshape(reps, k)
        pick = np.arange(reps), f.argmin(1)
        out.append(HuberFit(run.x.reshape(reps, k, 5)[pick], f[pick], run.iterations.reshape(reps, k)[pick],
                            run.status.reshape(reps, k)[pick]))
    return out


def convergence_report(fit_status: int, fit_iterations: int, maxiter: int, boot_status: np.ndarray | None,
                       boot_iterations: np.ndarray | None, boot_maxiter: int, optimizer: str) -> tuple[dict[str, Any], list[str]]:
    """The optimiser's stopping reasons as a diagnostic (JSON-ready) and the warnings they call for.

    Only the iteration limit means "not converged": a line search that finds no lower point
    has reached the floating-point floor of the objective.
    """
    report: dict[str, Any] = {"optimizer": optimizer,
                              "fit": {"status": STATUS[fit_status], "iterations": int(fit_iterations), "maxiter": maxiter}}
    warnings = []
    if fit_status == ITERATION_LIMIT:
        warnings.append(f"{optimizer} stopped at its iteration limit ({maxiter}) on the full data: the point "
                        "estimates may not be converged")
    if boot_status is not None and boot_status.size:
        counts = {name: int(np.sum(boot_status == code)) for code, name in enumerate(STATUS)}
        report["bootstrap"] = {"resamples": int(boot_status.size), "maxiter": boot_maxiter,
                               "median_iterations": float(np.median(boot_iterations)),
                               "max_iterations": int(np.max(boot_iterations)),
                               **{name: n for name, n in counts.items() if n}}
        stuck = counts[STATUS[ITERATION_LIMIT]]
        if stuck:
            warnings.append(f"{optimizer} stopped at its iteration limit ({boot_maxiter}) in {stuck} of "
                            f"{boot_status.size} bootstrap resamples: the intervals include unconverged fits")
    return report, warnings


@dataclass(kw_only=True, repr=False)
class ParametricResult(FitResult):
    """Approach 3's result: a law L(N, D) (``form``; Chinchilla's by default) and the frontier it implies."""

    form: LawForm = CHINCHILLA

    def frontier(self, params: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.form.frontier(params, budgets)

    def law_loss(self, params: Params, n: np.ndarray, d: np.ndarray) -> np.ndarray:
        return self.form.loss(params, {"n": n, "d": d})


class Parametric(Approach):
    """Chinchilla Approach 3 with bootstrap intervals (percentiles of ``bootstrap`` resamples)."""

    name = "parametric"
    title = "Approach 3: parametric fit (Huber, L-BFGS)"
    options = ("starts", "delta", "focus")

    def __init__(self, *, starts: int = 3, delta: float = HUBER_DELTA, focus: str = "all", **settings: Any) -> None:
        super().__init__(**settings)
        self.starts, self.delta, self.focus = starts, delta, check_focus(focus)

    def fit(self, runs: Runs) -> FitResult:
        return self.fit_together([(self, runs)])[0]

    @staticmethod
    def fit_together(jobs: list[tuple[Parametric, Runs]]) -> list[FitResult | FitInputError]:
        """Each (approach, runs) job's ``fit`` (its FitInputError in its place when it has none),
        the grid searches of all of them in one batched L-BFGS (``grid_searches``) and their
        bootstrap resamples in another (``huber_fits``): forward chaining refits the same approach
        on every split, and a search's time is mostly the optimiser's per-iteration work, which
        the splits then share. Every row is evaluated as it is alone: the same answers."""
        problems: list[tuple[Parametric, Runs, tuple] | FitInputError] = []
        for approach, runs in jobs:
            try:
                problems.append((approach, runs, approach._problem(runs)))
            except FitInputError as exc:
                problems.append(exc)
        ready = [p for p in problems if not isinstance(p, FitInputError)]
        clock = time.perf_counter()
        searched = grid_searches([p[2][0] for p in ready], max(p[0].starts for p in ready)) if ready else []
        grid_seconds = (time.perf_counter() - clock) / max(len(ready), 1)
        starts = [found[0][: approach.starts] for (approach, _, _), found in zip(ready, searched, strict=True)]
        resampled = [i for i, (approach, _, _) in enumerate(ready) if approach.bootstrap]
        draws = [resample_weights(ready[i][2][0].log_n.size, ready[i][0].bootstrap, ready[i][0].seed)
                 * ready[i][2][0].weights for i in resampled]
        boots = dict(zip(resampled, huber_fits([ready[i][2][0] for i in resampled], draws,
                                               [starts[i] for i in resampled]) if resampled else [], strict=True))
        done = iter([approach._finish(runs, problem, found, starts[i], boots.get(i), grid_seconds)
                     for i, ((approach, runs, problem), found) in enumerate(zip(ready, searched, strict=True))])
        return [p if isinstance(p, FitInputError) else next(done) for p in problems]

    def _problem(self, runs: Runs) -> tuple[Problem, FlopsRule]:
        log_n, log_d, loss, rule = law_columns(runs)
        weights, floor = focus_weights(runs, self.focus)
        return Problem(log_n, log_d, np.log(loss), weights, self.delta, floor), rule

    def _finish(self, runs: Runs, problem: tuple[Problem, FlopsRule], searched: tuple, best_starts: np.ndarray,
                boot: HuberFit | None, grid_seconds: float) -> FitResult:
        (log_n, log_d, *_), rule = problem
        _, f, polished = searched
        theta, value = best_starts[0], float(np.nanmin(f))
        samples = pd.DataFrame() if boot is None else pd.DataFrame(_theta_params(boot.theta, rule))
        params = {key: float(v[0]) for key, v in _theta_params(theta, rule).items()}
        convergence, warnings = convergence_report(
            int(polished.status[0]), int(polished.iterations[0]), POLISH_MAXITER,
            None if boot is None else boot.status, None if boot is None else boot.iterations, BOOTSTRAP_MAXITER,
            "batched L-BFGS")
        diagnostics = parametric_diagnostics(runs, CHINCHILLA.loss(params, {"n": np.exp(log_n), "d": np.exp(log_d)}), params,
                                             convergence=convergence, warnings=warnings)
        return self.result(ParametricResult, params=params, samples=samples, runs=runs, diagnostics=diagnostics,
                           details={"objective": value, "huber_delta": self.delta, "focus": self.focus,
                                    "starts": int(len(INIT_GRID)), "lbfgs_starts": GRID_KEEP,
                                    "bootstrap_starts": int(len(best_starts)), "grid_seconds": grid_seconds})


def parametric_diagnostics(runs: Runs, predicted: np.ndarray, params: dict[str, float], *,
                           bounds: tuple[float, float] | None = None, convergence: dict[str, Any] | None = None,
                           warnings: list[str] | None = None) -> Diagnostics:
    """Residuals of the log fitted metric (loss, bits per byte, top-1 error) per run, R^2, and warnings about terms the data do not pin down."""
    f = runs.frame
    log_l = np.log(f["loss"].to_numpy(float))
    residual = log_l - np.log(predicted)
    total = np.sum((log_l - log_l.mean()) ** 2)
    r2 = 1.0 - np.sum(residual ** 2) / total if total > 0 else float("nan")  # equal losses: nothing to explain
    frame = f[["run_id", "params", "tokens", "flops", "loss"]].assign(predicted=predicted, residual=residual)
    warnings = list(warnings or [])
    if bounds is not None:
        for name in ("alpha", "beta"):
            if min(abs(params[name] - bounds[0]), abs(params[name] - bounds[1])) < 1e-6:
                warnings.append(f"{name} = {params[name]:.4g} sits on the search bound {bounds}: "
                                "the data do not pin it down")
    for name in ("E", "A", "B"):
        if params[name] <= 1e-12:
            warnings.append(f"{name} fitted as 0: the runs do not show that term; widen the size or token range")
    return Diagnostics(residuals=frame, r2=float(r2), r2_of=f"log {'loss' if runs.metric == 'loss' else runs.label}, per run", excluded=list(runs.excluded),
                       warnings=warnings, convergence=convergence)
