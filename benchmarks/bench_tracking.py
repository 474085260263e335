"""What experiment tracking costs a sweep: the same small sweep untracked and tracked by
each backend, side by side in one process.

The plan is the GPT demo's model and data at tiny budgets (6 runs of about a second each,
so the per-run cost of tracking shows rather than hides behind long runs; real runs take
minutes to hours). Each variant trains into its own folder, in one process (workers=1, one
torch thread: on a busy small CPU idle threads spin and swamp what is measured); the first
untracked pass warms the imports of torch and the data, and each backend's first use pays
its own import (reported apart: a sweep pays it once per process). The variants then take
turns ``--repeat`` times and each keeps its fastest wall time. Prints those, untracked /
tracked (1.0: no cost) and the seconds each backend adds per run.

    python benchmarks/bench_tracking.py [--out bench-tracking] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

import flops_fit
from flops_fit.sweeps.demo import demo_plan

VARIANTS = (None, "tensorboard", "mlflow", "wandb")


def timed_sweep(plan, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    plan.run(out, show_progress=False, skip_parity=True, executor_options={"threads": 1})
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench-tracking")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    demo, _ = demo_plan("gpt")
    options = demo.options.replace(budgets=[3e9, 6e9], sizes=[16, 24, 32], schedule="cosine", batch_size=8)
    plans = {v: flops_fit.plan(options, tracking=[v] if v else None) for v in VARIANTS}
    runs = len(plans[None].runs)
    out = Path(args.out)
    timed_sweep(plans[None], out / "warm-up")
    first = {v: timed_sweep(plans[v], out / f"{v}-first") for v in VARIANTS[1:]}  # pays the import
    walls = {v: float("inf") for v in VARIANTS}
    for _ in range(args.repeat):
        for v in VARIANTS:
            walls[v] = min(walls[v], timed_sweep(plans[v], out / str(v)))
    steps = sum(r.steps for r in plans[None].runs)
    print(f"{runs} runs of {options.model} ({steps} steps; budgets {list(options.budgets)}), in one process")
    print(f"{'backend':12} {'wall s':>8} {'untracked/tracked':>18} {'s per run':>10} {'first use s':>12}")
    for variant in VARIANTS:
        wall = walls[variant]
        extra = (wall - walls[None]) / runs
        first_use = f"{first[variant]:.2f}" if variant else "-"
        print(f"{variant or 'none':12} {wall:8.2f} {walls[None] / wall:18.2f} {extra:10.3f} {first_use:>12}")


if __name__ == "__main__":
    main()
