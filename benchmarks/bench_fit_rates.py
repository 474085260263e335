"""``fit_rates`` on a learning-rate sweep flops-fit did not train: the (Mis)Fitting sweep.

Data: ``../shared/data/misfitting_lr_runs.csv`` (Li, Kudugunta and Zettlemoyer 2025; 261 runs,
5 peak rates 4e-4 to 8e-3, 81 (model, tokens) cells). The rule, fixed before measuring: hold
out every cell in the top decade of compute (C >= C_max / 10), fit the law (every form, the
chosen one as ``fit_rates`` chooses) on the cells below, predict each held-out cell's rate, and
read the loss there from that cell's own measured losses over rate (linear in log rate between
the two measured rates around it: ``tuning.from_runs.measured_loss``; a prediction outside the
rates a cell measured is withheld). Goal: each held-out cell within 0.5% of its best measured
loss. No constant is fitted to this data: the forms, the cell fit and the choice are the
tune's. Writes benchmarks/results/fit_rates.json.

    python benchmarks/bench_fit_rates.py [--data ../shared/data/misfitting_lr_runs.csv] [--bootstrap 200]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

from flops_fit.fitting import formatting as fmt
from flops_fit.tuning.from_runs import heldout_check

ROOT = Path(__file__).resolve().parents[1]
GOAL = 0.005
COLUMNS = {"params_col": "N", "tokens_col": "D", "flops_col": "C", "lr_col": "peak_lr", "nonembedding_col": "N_no_emb"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "misfitting_lr_runs.csv"))
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fit_rates.json"))
    args = parser.parse_args()
    start = time.perf_counter()
    largest = float(pd.read_csv(args.data)["C"].max())
    check = heldout_check(args.data, held_flops=largest / 10, bootstrap=args.bootstrap, **COLUMNS)
    measured = [c for c in check["cells"] if c["excess"] is not None]
    excess = [c["excess"] for c in measured]
    forms = sorted({n for c in check["cells"] for n in c["excess_by_form"]})
    by_form = {}
    for name in forms:
        values = [c["excess_by_form"].get(name) for c in check["cells"]]
        got = [v for v in values if v is not None]
        by_form[name] = {"mean": float(np.mean(got)) if got else None, "max": max(got) if got else None,
                         "within_goal": sum(v <= GOAL for v in got), "measured": len(got)}
    summary = {"held_out_cells": len(check["cells"]), "measured": len(measured),
               "withheld": len(check["cells"]) - len(measured),
               "mean_excess": float(np.mean(excess)) if excess else None, "max_excess": max(excess, default=None),
               "within_goal": sum(e <= GOAL for e in excess), "goal": GOAL, "chosen": check["chosen"],
               "law": check["law"], "by_form": by_form, "seconds": time.perf_counter() - start}
    result = {"benchmark": "fit_rates held-out cells of the (Mis)Fitting learning-rate sweep",
              "data": Path(args.data).name, "command": "python benchmarks/bench_fit_rates.py",
              "rule": "held out: cells with C >= C_max / 10; fitted: the cells below", "summary": summary,
              "check": check}
    Path(args.out).write_text(json.dumps(fmt.json_safe(result), indent=1) + "\n")
    print(f"fitted on {check['fitted_cells']} cells ({check['fitted_cells_with_optimum']} with an interior "
          f"optimum); chosen {check['because']}\n  {check['law']}")
    for c in check["cells"]:
        e = "outside the rates measured" if c["excess"] is None else f"{100 * c['excess']:+.2f}%"
        print(f"  N {fmt.count(c['params'])} D {fmt.count(c['tokens'])}: rates {c['rates']} predicted "
              f"{c['predicted_lr']:.3g} (best measured {c['best_lr']:.3g}): loss {e} above the best")
    if excess:
        print(f"mean {100 * summary['mean_excess']:+.2f}%, max {100 * summary['max_excess']:+.2f}%, "
              f"{summary['within_goal']} of {len(excess)} within {100 * GOAL:g}%")
    for name, f in by_form.items():
        if f["mean"] is not None and math.isfinite(f["mean"]):
            print(f"  {name}: mean {100 * f['mean']:+.2f}%, max {100 * f['max']:+.2f}%, "
                  f"{f['within_goal']} of {f['measured']} within 0.5%")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
