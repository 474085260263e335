"""Sweep defaults, measured: the step time of a small run at the previous API default (torch's
own thread count, the cores) against today's default (``executors.threads``), side by side; and
the plan's time estimate (the FLOP/s guess, and the probe's) against the sweep's real wall time.

    python benchmarks/bench_sweep_defaults.py [--out benchmarks/results/sweep_defaults.json]

The sweep is examples/sweep.toml's setup at small budgets (about a minute on 2 cores), trained
in this process (the API's default executor) into a temporary folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "sweep_defaults.json"
SETUP = {"model": "gpt", "dataset": "python-stdlib", "seq_len": 64, "batch_size": 32, "min_steps": 20,
         "eval_tokens": 32768, "model_config": {"n_layer": 2, "head_dim": 8}, "sizes_per_budget": 3, "span": 4.0,
         "budgets": [1e10, 2e10], "checkpoint_seconds": 0}


def step_seconds(spec, threads: int, steps: int) -> float:
    import torch

    from flops_fit.training.loop import train

    torch.set_num_threads(threads)
    short = dataclasses.replace(spec, tokens=steps * spec.batch_size * spec.seq_len, steps=steps, run_id="",
                                warmup_steps=0, curve_points=1, eval_tokens=spec.batch_size * spec.seq_len)
    result = train(short)
    return result.timings["train_s"] / result.steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import flops_fit
    from flops_fit.executors.threads import default_threads

    plan = flops_fit.plan(**SETUP)
    small = min(plan.runs, key=lambda r: r.params)
    cores, chosen = os.cpu_count() or 1, default_threads([small], 1)
    before, after = [], []
    for _ in range(args.repeats):  # alternated, so that a change of load hits both
        before.append(step_seconds(small, cores, args.steps))
        after.append(step_seconds(small, chosen, args.steps))
    guess = plan.estimated_seconds()
    start = time.perf_counter()
    plan.calibrate()
    probe_s = time.perf_counter() - start
    measured = plan.estimated_seconds()
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        plan.run(out, show_progress=False, skip_parity=True)
        real = time.perf_counter() - start
    report = {
        "command": "python benchmarks/bench_sweep_defaults.py", "cpus": cores,
        "load_average": os.getloadavg()[0],
        "small_run": {"params": small.params, "threads_previous_default": cores, "threads_default": chosen,
                      "step_s_previous_default": min(before), "step_s_default": min(after),
                      "ratio": min(before) / min(after)},
        "sweep": {"runs": len(plan.runs), "budgets": SETUP["budgets"], "real_s": real,
                  "estimate_flops_guess_s": guess, "estimate_probe_s": measured, "probe_s": probe_s,
                  "guess_over_real": guess / real, "probe_over_real": measured / real},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
