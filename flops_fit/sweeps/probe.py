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
import time
from typing import Any

import torch

from flops_fit.executors.threads import default_threads
from flops_fit.store.runs import RunSpec
from flops_fit.sweeps.estimate import Timing
from flops_fit.training.loop import train

PROBE_STEPS = 12  # steps per probed size: the mean step time includes the first, slower steps


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


__all__ = ["PROBE_STEPS", "probe", "probe_specs"]
