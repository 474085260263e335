"""A plan's time, measured: a few optimizer steps of the plan's own runs, timed here.

FLOPs divided by a guessed throughput miss small models by far: their steps are dominated by
per-step overhead (a 10k-parameter model reaches a small share of the core's FLOP/s), and each
run also pays its setup and its held-out evaluation. The probe trains ``PROBE_STEPS`` steps of
the plan's smallest, middle and largest size (the runs' own configuration, the threads a sweep
would give them: ``executors.threads``) and times setup, a step and the evaluation; every run's
estimate is then setup + its executed steps x the step time + evaluation, each interpolated
in log parameters between the probed sizes. It costs a few seconds.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from flops_fit.store.runs import RunSpec

PROBE_STEPS = 12  # the first TIMING_SKIP steps warm caches and allocators and are not timed
TIMING_SKIP = 2


@dataclass(frozen=True)
class Timing:
    """One probed size: parameters, seconds of setup, per optimizer step, and of evaluation."""

    params: int
    setup_s: float
    step_s: float
    eval_s: float


def probe_specs(runs: list[RunSpec]) -> list[RunSpec]:
    """The runs the probe trains: the smallest, middle and largest size (one run each), cut to
    PROBE_STEPS cosine steps without checkpoints."""
    by_size = {}
    for r in sorted(runs, key=lambda r: r.params):
        by_size.setdefault(r.params, r)
    sizes = sorted(by_size)
    picked = sorted({sizes[0], sizes[len(sizes) // 2], sizes[-1]})
    out = []
    for p in picked:
        r = by_size[p]
        steps = min(PROBE_STEPS, r.steps)
        out.append(dataclasses.replace(r, tokens=steps * r.batch_size * r.seq_len, steps=steps, warmup_steps=0,
                                       schedule="cosine", cooldown_start=0, run_id="",
                                       curve_points=1))
    return out


def probe(runs: list[RunSpec], *, host: Any = None, threads: int | None = None) -> list[Timing]:
    """Train the probe runs here (``threads`` torch threads; default: a sweep's) and time them."""
    import time

    import torch

    from flops_fit.executors.threads import default_threads
    from flops_fit.training.loop import train

    specs = probe_specs(runs)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads or default_threads(runs, 1))
    timings = []
    try:
        for spec in specs:
            start = time.perf_counter()
            result = train(spec, host=host)
            total = time.perf_counter() - start
            train_s, setup_s = result.timings.get("train_s", 0.0), result.timings.get("setup_s", 0.0)
            eval_s = result.timings.get("eval_s", max(0.0, total - setup_s - train_s))
            step_s = train_s / max(1, result.steps)
            timings.append(Timing(spec.params, setup_s, step_s, eval_s))
    finally:
        torch.set_num_threads(previous)
    return timings


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


__all__ = ["PROBE_STEPS", "Timing", "probe", "probe_specs", "run_seconds"]
