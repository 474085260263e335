"""WSD with reused cooldowns against the cosine grid, on the GPT demo's plan.

Trains the demo's plan twice, side by side in one process: as planned (schedule "wsd":
one stable phase per size, a cooldown branched at each token count) and the same grid
(same sizes, tokens and learning rates) with one cosine run per point. Prints the FLOPs
each executed (counted from the steps each run actually trained), the training time, and
the fitted exponent a (N_opt ~ C^a) of approaches 2 and 3 with 95% bootstrap intervals:
the goal is >= 40% of the FLOPs saved and each exponent inside the other's interval.

    python benchmarks/bench_wsd.py [--out bench-wsd] [--workers 2] [--bootstrap 200]

Interrupted? Run it again: both sweeps resume from their stores.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import flops_fit
from flops_fit.sweeps.demo import demo_plan

METHODS = ("isoflop", "parametric")


def executed_flops(frame, plan) -> float:
    """FLOPs the sweep ran: each run's trained FLOPs, less the stable steps it took over."""
    specs = {r.run_id: r for r in plan.runs}
    total = 0.0
    for r in frame.itertuples():
        spec = specs[r.run_id]
        reused = r.timings.get("stable_steps_reused", 0.0)
        total += r.flops - reused * spec.batch_size * spec.seq_len * spec.flops_per_unit
    return total


def sweep(plan, out: Path, workers: int, executor_options: dict):
    t0 = time.perf_counter()
    result = plan.run(out, resume=True, workers=workers, executor_options=executor_options, show_progress=False)
    return result, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench-wsd")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--bootstrap", type=int, default=200)
    args = parser.parse_args()
    wsd_plan, config = demo_plan("gpt")
    cosine_plan = flops_fit.plan(wsd_plan.options, schedule="cosine", size_ladder=True)
    assert [(r.budget, r.size, r.tokens) for r in wsd_plan.runs] == \
        [(r.budget, r.size, r.tokens) for r in cosine_plan.runs], "the two plans must share their grid"
    print(f"plan: {len(wsd_plan.runs)} runs, {len(wsd_plan.budgets)} budgets; planned FLOPs: wsd "
          f"{wsd_plan.total_flops:.3e}, cosine {cosine_plan.total_flops:.3e} ({wsd_plan.saved_fraction:.1%} saved)")
    rows = {}
    for name, plan in (("wsd", wsd_plan), ("cosine", cosine_plan)):
        result, wall = sweep(plan, Path(args.out) / name, args.workers, config.executor_options)
        frame = result.runs
        fits = {m: result.fit(method=m, bootstrap=args.bootstrap) for m in METHODS}
        rows[name] = {"flops": executed_flops(frame, plan), "train_s": sum(t["train_s"] for t in frame.timings),
                      "wall": wall, "a": {m: f.exponents["a"] for m, f in fits.items()},
                      "done": int((frame.status == "done").sum())}
        print(f"{name}: {rows[name]['done']} runs done, executed {rows[name]['flops']:.3e} FLOPs, training "
              f"{rows[name]['train_s']:.0f} CPU-s (this call's wall time {wall:.0f} s)", flush=True)
    saved = 1 - rows["wsd"]["flops"] / rows["cosine"]["flops"]
    saved_s = 1 - rows["wsd"]["train_s"] / rows["cosine"]["train_s"]
    print(f"FLOPs saved by WSD: {saved:.1%} (goal >= 40%); training time saved: {saved_s:.1%}")
    for m in METHODS:
        (w, wlo, whi), (c, clo, chi) = rows["wsd"]["a"][m], rows["cosine"]["a"][m]
        inside = clo <= w <= chi and wlo <= c <= whi
        print(f"{m}: a = {w:.3f} [{wlo:.3f}, {whi:.3f}] (wsd) vs {c:.3f} [{clo:.3f}, {chi:.3f}] (cosine); "
              f"each inside the other's interval: {inside}")


if __name__ == "__main__":
    main()
