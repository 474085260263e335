"""Approach 1: the lower envelope of training curves across runs.

Every curve point (tokens seen, loss) is placed at the FLOPs spent so far (tokens seen times
the run's FLOPs per token). At each of many log-spaced FLOP values, the run with the lowest
interpolated loss gives N_opt(C) and D_opt(C). Points won by the smallest or largest model
are excluded: the optimum may lie beyond the sizes trained. The loss law comes from the
runs' final losses on the lower envelope of loss against compute (``pareto_losses``).
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
from flops_fit.fitting.laws.profiles import budget_groups

GRID_POINTS = 200
MIN_SIZES = 3
MIN_POINTS = 5


def loss_matrix(runs: Runs, points: int = GRID_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs grid (g,), loss (runs, g)): each curve interpolated in log FLOPs, NaN off its range."""
    f = runs.frame
    per_token = (f["flops"] / f["tokens"]).to_numpy(float)
    curves = []
    for curve, k in zip(f["curve"], per_token, strict=True):
        c = np.asarray(curve, float)
        c = c[(c[:, 0] > 0) & np.isfinite(c[:, 1])]
        order = np.argsort(c[:, 0])
        curves.append((np.log(c[order, 0] * k), c[order, 1]))
    lo = min(x[0] for x, _ in curves)
    hi = max(x[-1] for x, _ in curves)
    grid = np.linspace(lo, hi, points)
    matrix = np.full((len(curves), points), np.nan)
    for i, (x, y) in enumerate(curves):
        inside = (grid >= x[0]) & (grid <= x[-1])
        matrix[i, inside] = np.interp(grid[inside], x, y)
    return np.exp(grid), matrix


def envelope_points(grid: np.ndarray, matrix: np.ndarray, runs: Runs, use: np.ndarray) -> pd.DataFrame:
    """Envelope of the runs in ``use``: per grid FLOPs, the winning run, its N, D, loss and status."""
    winner, n, d, loss, covered, edge = _envelope(grid, matrix, *_run_columns(runs), use)
    status = np.where(~covered, "fewer than 2 runs reach this FLOP count",
                      np.where(edge, "edge: won by the smallest or largest model", ""))
    return pd.DataFrame({"flops": grid, "run": winner, "N": n, "D": d, "loss": loss, "excluded": status})


def _run_columns(runs: Runs) -> tuple[np.ndarray, np.ndarray]:
    f = runs.frame
    return f["params"].to_numpy(float), (f["flops"] / f["tokens"]).to_numpy(float)


def _envelope(grid: np.ndarray, matrix: np.ndarray, params: np.ndarray, per_token: np.ndarray, use: np.ndarray):
    """``envelope_points`` as arrays: winner, N, D, loss, covered (2 or more runs reach it), edge."""
    m = np.where(use[:, None] & np.isfinite(matrix), matrix, np.inf)
    winner = m.argmin(0)
    loss = m[winner, np.arange(grid.size)]
    covered = np.isfinite(loss) & ((np.isfinite(m)).sum(0) >= 2)
    sizes = params[use]
    edge = (params[winner] == sizes.min()) | (params[winner] == sizes.max())
    return winner, params[winner], grid / per_token[winner], loss, covered, edge


def pareto_losses(runs: Runs, use: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log C, loss) of the lower envelope of final loss against compute: each budget's best
    run, kept if no smaller budget's best run reached a lower loss.

    The loss law is fitted through these, not through the curves' envelope: a curve is
    training loss (not the held-out metric), and mid-run points of a WSD or cosine run are
    not cooled down, so the curves' envelope sits above the loss a run of that length reaches.
    """
    budgets, _ = budget_groups(runs)
    loss = runs.frame["loss"].to_numpy(float)
    best_c, best_l = [], []
    for c in np.unique(budgets[use]):
        lowest = loss[use & (budgets == c)].min()
        if not best_l or lowest < best_l[-1]:
            best_c.append(np.log(c))
            best_l.append(lowest)
    return np.array(best_c), np.array(best_l)


def _fit_points(points: pd.DataFrame, losses: tuple[np.ndarray, np.ndarray]) -> dict[str, float] | None:
    p = points[points["excluded"] == ""]
    return _fit_arrays(p["flops"].to_numpy(), p["N"].to_numpy(), p["D"].to_numpy(), p["loss"].to_numpy(), losses)


def _fit_arrays(flops, n, d, loss, losses: tuple[np.ndarray, np.ndarray]) -> dict[str, float] | None:
    """The frontier through the interior envelope points (None: too few, or one size wins all)."""
    if len(n) < MIN_POINTS or np.unique(n).size < 2:
        return None
    return fit_frontier(np.log(flops), np.log(n), np.log(d), np.log(loss), loss_points=losses)


def _resampled_fit(grid: np.ndarray, matrix: np.ndarray, columns, runs: Runs, use: np.ndarray):
    """One bootstrap draw's frontier (``_fit_points`` of ``envelope_points``, without the frames)."""
    _, n, d, loss, covered, edge = _envelope(grid, matrix, *columns, use)
    keep = covered & ~edge
    return _fit_arrays(grid[keep], n[keep], d[keep], loss[keep], pareto_losses(runs, use))


class EnvelopeResult(PowerLawResult):
    """Approach 1's result: its profiles are the training curves and their lower envelope."""


    def observed_optima(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        good = self.details["envelope"].query("excluded == ''")
        return good["flops"].to_numpy(), good["N"].to_numpy(), good["D"].to_numpy()


class Envelope(Approach):
    """Approach 1 with bootstrap intervals (runs, with their whole curves, resampled)."""

    name = "envelope"
    title = "Approach 1: envelope of training curves"
    options = ("points",)

    def __init__(self, *, points: int = GRID_POINTS, **settings: Any) -> None:
        super().__init__(**settings)
        self.points = points

    def fit(self, runs: Runs) -> FitResult:
        if not runs.has_curves:
            raise FitInputError(
                "Approach 1 needs a training curve (list of [tokens_seen, loss] pairs, 2 or more) for every "
                "run in the 'curve' column; these runs have none. Use method='isoflop' or 'parametric'."
            )
        if runs.frame["params"].nunique() < MIN_SIZES:
            raise FitInputError(f"Approach 1 needs curves from at least {MIN_SIZES} model sizes; "
                                f"got {runs.frame['params'].nunique()}")
        grid, matrix = loss_matrix(runs, self.points)
        everyone = np.ones(len(runs), dtype=bool)
        env = envelope_points(grid, matrix, runs, everyone)
        params = _fit_points(env, pareto_losses(runs, everyone))
        if params is None:
            raise FitInputError(
                f"Approach 1 found fewer than {MIN_POINTS} envelope points won by an interior model size "
                "(or only one size wins): train sizes on both sides of the optimum, with curves that overlap in FLOPs"
            )
        samples = pd.DataFrame()
        warnings = []
        if self.bootstrap:
            columns = _run_columns(runs)
            draws = [_resampled_fit(grid, matrix, columns, runs, w > 0)
                     for w in resample_weights(len(runs), self.bootstrap, self.seed)]
            kept = [d for d in draws if d is not None]
            samples = pd.DataFrame(kept)
            if len(kept) < self.bootstrap:
                warnings.append(f"{self.bootstrap - len(kept)} of {self.bootstrap} resamples left too few interior "
                                "envelope points and were dropped from the intervals")
        good = env[env["excluded"] == ""]
        winners = good["N"].nunique()
        if winners < 4:
            warnings.append(f"only {winners} model sizes win the envelope: N_opt(C) is a staircase of {winners} "
                            "steps; train more sizes")
        log_c, log_n = np.log(good["flops"].to_numpy()), np.log(good["N"].to_numpy())
        residual, r2 = line_r2(log_c, log_n, params["a"], params["n0"])
        frame = pd.DataFrame({"flops": good["flops"].to_numpy(), "N_opt": good["N"].to_numpy(),
                              "predicted": np.exp(log_n - residual), "residual": residual})
        excluded = list(runs.excluded)
        for reason, count in env.loc[env["excluded"] != "", "excluded"].value_counts().items():
            excluded.append({"envelope_points": int(count), "reason": reason})
        diagnostics = Diagnostics(residuals=frame, r2=r2, r2_of="log N_opt against log C, envelope points",
                                  excluded=excluded, warnings=warnings)
        return self.result(EnvelopeResult, params=params, samples=samples, runs=runs, diagnostics=diagnostics,
                           details={"envelope": env})
