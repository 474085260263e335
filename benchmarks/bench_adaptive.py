"""The adaptive sweep (``flops_fit.sweeps.adaptive``) simulated on public IsoFLOP sweeps.

On each sweep of ../shared/data/isoflops_public.csv the design may only "train" runs that
exist there: choosing a budget adds that budget's runs and their FLOPs (6 N D). Target: 10x
the sweep's largest budget. Three designs, all fitted by the public API (approach 2,
``flops_fit.fit(..., "isoflop")``, the same bootstrap and seed) and read at the target:

- the full grid: every budget (the reference: its N_opt and the width of its interval);
- adaptive: the 3 smallest budgets, then one budget at a time chosen by the drop of the
  extrapolation factor per FLOP, until N_opt's interval is as narrow as the full grid's
  (``n_opt<=Fx`` with F the full grid's factor) or the pool is spent;
- smallest first: the grid's budgets in order from the smallest, until they have spent at
  least the adaptive design's FLOPs (what a fixed grid cut short gets for the same money).

Reported per sweep: FLOPs spent as a share of the full grid's, the interval factor reached,
and N_opt's distance from the full grid's estimate. The data set is a test set: nothing here
is tuned on it (the design has no fitted constant).

    flock /tmp/cpu-heavy.lock nice -n 5 python benchmarks/bench_adaptive.py [--bootstrap 200] \\
        [--out benchmarks/results/adaptive.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from flops_fit.sweeps.adaptive import (
    StopRule,
    additive,
    budget_costs,
    interval_factor,
    isoflop_fitter,
    run_design,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "isoflops_public.csv"


def simulate(runs: pd.DataFrame, bootstrap: int, seed: int) -> dict:
    costs = budget_costs(runs)
    target = 10 * max(costs)
    fit_at = isoflop_fitter(runs, target, bootstrap=bootstrap, seed=seed)
    full = fit_at(sorted(costs))
    full_factor = interval_factor(*full)
    full_flops = sum(costs.values())
    t0 = time.perf_counter()
    design = run_design(costs, additive(costs), target, StopRule(n_opt_factor=full_factor), fit_at)
    seconds = time.perf_counter() - t0
    last = design.rounds[-1]
    # the grid in order, cut where it has spent what the adaptive design spent
    ordered, spent = [], 0.0
    for b in sorted(costs):
        ordered.append(b)
        spent += costs[b]
        if spent >= design.spent:
            break
    try:
        small = fit_at(ordered)
    except Exception as exc:  # noqa: BLE001 - a cut grid may not fit; say why
        small, small_error = (float("nan"),) * 3, str(exc)
    else:
        small_error = ""
    return {
        "target": target, "budgets": len(costs), "runs": len(runs),
        "full": {"flops": full_flops, "n_opt": full[0], "lo": full[1], "hi": full[2], "factor": full_factor},
        "adaptive": {"flops": design.spent, "share": design.spent / full_flops, "n_opt": last.n_opt,
                     "lo": last.n_opt_lo, "hi": last.n_opt_hi, "factor": last.factor,
                     "error_vs_full": last.n_opt / full[0] - 1, "budgets": design.budgets,
                     "rounds": len(design.rounds), "stopped": design.stopped, "seconds": seconds,
                     "history": design.to_dict()["rounds"]},
        "smallest_first": {"flops": spent, "share": spent / full_flops, "budgets": ordered, "n_opt": small[0],
                           "lo": small[1], "hi": small[2], "factor": interval_factor(*small),
                           "error_vs_full": small[0] / full[0] - 1, "error": small_error},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/adaptive.json")
    args = parser.parse_args()
    table = pd.read_csv(args.data)
    out = {"command": f"python benchmarks/bench_adaptive.py --bootstrap {args.bootstrap} --seed {args.seed}",
           "method": "isoflop", "sweeps": {}}
    for name, runs in table.groupby("experiment"):
        runs = runs[["params", "tokens", "budget", "loss"]].reset_index(drop=True)
        row = simulate(runs, args.bootstrap, args.seed)
        out["sweeps"][name] = row
        a, f, s = row["adaptive"], row["full"], row["smallest_first"]
        print(f"{name}: full grid {f['flops']:.3g} FLOPs, N_opt {f['n_opt']:.3g} (x{f['factor']:.2f}); adaptive "
              f"{a['share']:.0%} of its FLOPs ({len(a['budgets'])} of {row['budgets']} budgets), x{a['factor']:.2f}, "
              f"N_opt {a['error_vs_full']:+.1%}; smallest first at {s['share']:.0%}: x{s['factor']:.2f}, "
              f"N_opt {s['error_vs_full']:+.1%}")
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2, default=float) + "\n")


if __name__ == "__main__":
    main()
