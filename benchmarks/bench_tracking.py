"""What experiment tracking costs a sweep: the same small sweep untracked and tracked by
each backend, side by side in one process.

The plan is the GPT demo's first budgets (WSD, tiny widths: seconds per run, so the
per-run cost of tracking shows rather than hides behind long runs). Each variant trains
into its own folder, in one process (workers=1); the first untracked pass warms the imports
of torch and the data, and each backend's first use pays its own import (reported apart:
a sweep pays it once per process). Prints wall time, untracked / tracked (>= 1.0 would mean
no cost) and the added seconds per run.

    python benchmarks/bench_tracking.py [--out bench-tracking] [--budgets 1]
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
    plan.run(out, show_progress=False, skip_parity=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench-tracking")
    parser.add_argument("--budgets", type=int, default=1, help="how many of the demo's budgets to sweep")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    demo, _ = demo_plan("gpt")
    options = demo.options.replace(budgets=demo.options.budgets[:args.budgets])
    plans = {v: flops_fit.plan(options, tracking=[v] if v else None) for v in VARIANTS}
    runs = len(plans[None].runs)
    out = Path(args.out)
    timed_sweep(plans[None], out / "warm-up")
    first = {v: timed_sweep(plans[v], out / f"{v}-first") for v in VARIANTS[1:]}  # pays the import
    walls = {v: timed_sweep(plans[v], out / str(v)) for v in VARIANTS}
    print(f"{runs} runs of {options.model} (budgets {list(options.budgets)}), in one process")
    print(f"{'backend':12} {'wall s':>8} {'untracked/tracked':>18} {'s per run':>10} {'first use s':>12}")
    for variant in VARIANTS:
        wall = walls[variant]
        extra = (wall - walls[None]) / runs
        first_use = f"{first[variant]:.2f}" if variant else "-"
        print(f"{variant or 'none':12} {wall:8.2f} {walls[None] / wall:18.2f} {extra:10.3f} {first_use:>12}")


if __name__ == "__main__":
    main()
