"""A run's wall time from a probe's measurements (``sweeps.probe``): setup + steps x step time +
evaluation, each interpolated in log parameters between the probed sizes. No torch here: the
planner reads it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from flops_fit.store.runs import RunSpec


@dataclass(frozen=True)
class Timing:
    """One probed size: parameters, seconds of setup, per optimizer step, and of evaluation."""

    params: int
    setup_s: float
    step_s: float
    eval_s: float


def run_seconds(spec: RunSpec, executed_steps: float, timings: list[Timing]) -> float:
    """A run's estimated wall time from the probe: setup + steps x step time + evaluation, each
    interpolated in log parameters (held flat beyond the probed sizes)."""
    setup, step, evaluation = (_interpolate(spec.params, timings, key) for key in ("setup_s", "step_s", "eval_s"))
    return setup + executed_steps * step + evaluation


def _interpolate(params: float, timings: list[Timing], key: str) -> float:
    points = sorted((math.log(t.params), max(getattr(t, key), 1e-9)) for t in timings)
    x = math.log(params)
    if x <= points[0][0]:
        return points[0][1]
    if x >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x0 <= x <= x1:
            t = 0.0 if x1 == x0 else (x - x0) / (x1 - x0)
            return math.exp((1 - t) * math.log(y0) + t * math.log(y1))
    return points[-1][1]


__all__ = ["Timing", "run_seconds"]
