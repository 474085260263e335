"""Runs trained together (``training.stacked``) against one at a time, on the GPT demo tune's grid.

For each width of the demo's tune (10, 26, 58: the demo's model, batch 32 x 64 tokens), one
tune cell: the same run at 4 of the tune's rate multipliers, trained (a) one at a time, as the
tune trains them (``training.task.train_family`` per multiplier: each its own family), and
(b) in one program (``train_stacked_families``). Both arms train the same specs in this
process, alternated, on the same threads; the runs are cut to ``--steps`` optimizer steps
(the cell's shapes and rates unchanged) so the benchmark takes minutes. Reported: wall time of
each arm (setup, training and held-out evaluation of all 4 runs), the ratio, and how far each
run's curve and held-out loss trained together lie from the same run alone.

    flock /tmp/cpu-heavy.lock nice -n 5 python benchmarks/bench_stacked.py \\
        [--steps 60] [--threads 1] [--batch-size 32] [--out benchmarks/results/stacked.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time
from pathlib import Path

import torch

from flops_fit.sweeps.demo import demo_tune_spec
from flops_fit.training.stacked import StackedFamilies, train_stacked_families
from flops_fit.training.task import train_family
from flops_fit.training.wsd import families
from flops_fit.tuning.grid import check_grid, tune_plan
from flops_fit.tuning.tune import _config

RUNS = 4


def cell(size: int, steps: int, batch_size: int | None) -> list:
    """The tune's runs of ``size`` at its smallest budget, the first ``RUNS`` multipliers, cut to
    ``steps`` steps (the cooldown at the same share of the run)."""
    config, settings = demo_tune_spec("gpt")
    options = _config(config).options.replace(device="cpu", precision="fp32")
    if batch_size:
        options = options.replace(batch_size=batch_size)
    grid = check_grid(options, settings["budgets"], settings["sizes"], settings["multipliers"], None, None)
    runs = [r for r in tune_plan(options, grid).runs if r.size == size]
    lowest = min(r.budget for r in runs)
    runs = [r for r in runs if r.budget == lowest][:RUNS]
    if not runs:
        raise SystemExit(f"size {size} is not planned at the tune's smallest budget")
    cut = []
    for r in runs:
        share = r.cooldown_start / r.steps
        cut.append(dataclasses.replace(r, steps=steps, tokens=steps * r.batch_size * r.seq_len,
                                       cooldown_start=round(share * steps), warmup_steps=min(r.warmup_steps, steps // 4),
                                       run_id=""))
    return cut


def measure(size: int, steps: int, batch_size: int | None) -> dict:
    runs = cell(size, steps, batch_size)
    group = StackedFamilies(tuple(families(runs)))
    t0 = time.perf_counter()
    alone = [o for f in group.families for o in train_family(f)]
    t_alone = time.perf_counter() - t0
    t0 = time.perf_counter()
    together = train_stacked_families(group)
    t_together = time.perf_counter() - t0
    curve_gap = max(abs(a[1] - b[1]) for x, y in zip(alone, together) for a, b in zip(x.curve, y.curve, strict=True))
    loss_gap = max(abs(x.loss - y.loss) for x, y in zip(alone, together))
    return {"size": size, "params": runs[0].params, "runs": len(runs), "steps": steps,
            "batch_size": runs[0].batch_size, "seq_len": runs[0].seq_len,
            "multipliers_lr": [r.lr for r in runs], "alone_s": t_alone, "together_s": t_together,
            "speedup": t_alone / t_together, "max_curve_gap": curve_gap, "max_loss_gap": loss_gap,
            "all_done": all(r.status == "done" for r in [*alone, *together])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,26,58")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=None, help="default: the demo's (32)")
    parser.add_argument("--out", default="benchmarks/results/stacked.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for size in [int(s) for s in args.sizes.split(",")]:
        row = measure(size, args.steps, args.batch_size)
        rows.append(row)
        print(f"width {size:3d} ({row['params']:,} params, batch {row['batch_size']}x{row['seq_len']}): "
              f"{RUNS} runs alone {row['alone_s']:.1f}s, together {row['together_s']:.1f}s, "
              f"x{row['speedup']:.2f}; max curve gap {row['max_curve_gap']:.1e}, loss gap {row['max_loss_gap']:.1e}")
    total = sum(r["alone_s"] for r in rows) / sum(r["together_s"] for r in rows)
    print(f"all widths: x{total:.2f}")
    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.exists() else {}
    key = f"threads{args.threads}_batch{rows[0]['batch_size']}"
    previous[key] = {"rows": rows, "speedup_all": total, "threads": args.threads,
                     "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                                 "load_1min": os.getloadavg()[0]},
                     "command": f"python benchmarks/bench_stacked.py --steps {args.steps} --threads {args.threads}"
                                + (f" --batch-size {args.batch_size}" if args.batch_size else "")}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(previous, indent=2) + "\n")


if __name__ == "__main__":
    main()
