"""What the curve law (``curve_law``) answers: the final loss of a run trained like the sweep's.

A run of N parameters at budget C trains D = C / (k N^(1+s)) tokens (the runs' own FLOPs
rule) with the sweep's schedule (its warmup share, cooldown share and shape, the median over
the runs), so its S1 = D x the schedule's mean factor and its final S2 depends only on its
steps / tau (tabulated once per fit on a normalised copy of the schedule). Its held-out loss is
the law there plus delta; the frontier minimises it over N (``forms.numeric_frontier``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from flops_fit.fitting.approaches.result import FitResult
from flops_fit.fitting.laws.curve_areas import (
    annealed,
    curve_points,
    factors,
    s2_at,
    units_per_step,
)
from flops_fit.fitting.laws.forms import numeric_frontier
from flops_fit.fitting.laws.laws import Params

KAPPA = np.geomspace(1e-4, 1e4, 161)  # run steps / tau: the table of a run's final S2
SHAPE_STEPS = 4000  # the sweep's schedule on this many normalised steps
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
    """The curve law's result: the final loss of runs like the sweep's, minimised over N; any run's
    final loss from its own schedule (``final_losses``: a run that was not trained)."""

    @property
    def schedule(self) -> Schedule:
        return self.details["_schedule"]

    def frontier(self, params: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return numeric_frontier(lambda q, n, d: final_loss(q, self.schedule, n, d), params, budgets)

    def final_losses(self, frame: pd.DataFrame) -> np.ndarray:
        """The held-out loss after each run of ``frame`` (params, tokens, schedule; no curve or loss
        needed): a run that was not trained, predicted from its own schedule."""
        rows = frame.assign(curve=[None] * len(frame), loss=np.nan)
        points, _ = curve_points(rows, with_final=True)
        p = self.params
        n = rows["params"].to_numpy(float)[points.run]
        return held_out(p, n, np.exp(-p["beta"] * points.log_s1).mean(axis=1), s2_at(points.s2, np.log(p["tau"])))

    def law_loss(self, params: Params, n: np.ndarray, d: np.ndarray) -> np.ndarray:
        return final_loss(params, self.schedule, np.asarray(n, float), np.asarray(d, float))


def with_exponents(result: CurveLawResult, rule) -> CurveLawResult:
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
        with np.errstate(all="ignore"):  # a frontier of 0 or infinity: NaN, which the fit's checks refuse
            a = np.log(n_opt[:, 1] / n_opt[:, 0]) / np.log(span[1] / span[0])
            b = np.log(d_opt[:, 1] / d_opt[:, 0]) / np.log(span[1] / span[0])
        target["a"], target["b"] = (float(a[0]), float(b[0])) if isinstance(target, dict) else (a, b)
    return result


__all__ = ["CurveLawResult", "Schedule", "final_loss", "held_out", "with_exponents"]
