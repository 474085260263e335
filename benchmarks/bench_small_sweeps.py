"""A small sweep of a user's own: does the forecast at 10x cover the truth?

The public sweeps that fit and check the forecast's intervals (``bench_forecast_calibration.py``)
have 5-24 budgets, so most of their forecasts read 3 or more chaining splits. A lab's first sweep
is often 4 budgets: 2 splits. Here such sweeps are drawn from a known law (Hoffmann et al.'s fitted
Chinchilla law, so the truth at any budget is exact): 4 budgets a factor ~3 apart (``--budgets``),
5 sizes at 0.3-3.3x each budget's optimum, log-normal noise on every loss (``--noise``), one sweep
per seed. Each is fitted as ``flops-fit fit RUNS --method all --holdout forward --target 10x`` does,
and its forecast is scored against the law's optimum at the target. Nothing is tuned on these
sweeps: they only measure (docs/validation/forecast.md quotes the result).

    python benchmarks/bench_small_sweeps.py --noise 0.005 --seeds 20 --out benchmarks/results/small_sweeps.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

import flops_fit

LAW = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
SIZES = (0.3, 0.55, 1.0, 1.8, 3.3)  # times each budget's optimum


def law_loss(n, d):
    return LAW["E"] + LAW["A"] / n ** LAW["alpha"] + LAW["B"] / d ** LAW["beta"]


def optimum(budget: float) -> tuple[float, float]:
    """(N_opt, loss) of the law at ``budget`` (C = 6 N D), on a fine grid."""
    n = np.geomspace(1e5, 1e13, 200_001)
    loss = law_loss(n, budget / (6 * n))
    return float(n[loss.argmin()]), float(loss.min())


def sweep(budgets: list[float], noise: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for c in budgets:
        centre = optimum(c)[0]
        for f in SIZES:
            n = centre * f
            rows.append({"params": n, "tokens": c / (6 * n), "flops": c, "budget": c,
                         "loss": law_loss(n, c / (6 * n)) * float(np.exp(rng.normal(0.0, noise)))})
    return pd.DataFrame(rows)


def score(budgets: list[float], noise: float, seed: int, bootstrap: int) -> dict:
    target = 10 * max(budgets)
    fitted = flops_fit.fit(sweep(budgets, noise, seed), "all", holdout="forward", target=target, bootstrap=bootstrap,
                           tracking=False)
    if fitted.forecast is None:
        return {"seed": seed, "withheld": fitted.withheld}
    n_true, loss_true = optimum(target)
    (loss, l_lo, l_hi), (n, n_lo, n_hi) = fitted.forecast.loss, fitted.forecast.n_opt
    interval = fitted.forecast.answers["loss"].interval
    return {"seed": seed, "loss_error": loss / loss_true - 1, "loss_inside": bool(l_lo <= loss_true <= l_hi),
            "loss_width": l_hi / l_lo - 1, "n_opt_error": n / n_true - 1, "n_opt_inside": bool(n_lo <= n_true <= n_hi),
            "n_opt_ratio": n_hi / n_lo, "own_factor": interval.get("own_factor"), "own_splits": interval.get("own_splits")}


def summarise(rows: list[dict]) -> dict:
    f = pd.DataFrame([r for r in rows if "withheld" not in r])
    if f.empty:
        return {"forecasts": 0, "withheld": len(rows)}
    return {"forecasts": len(f), "withheld": len(rows) - len(f), "loss_coverage": float(f.loss_inside.mean()),
            "n_opt_coverage": float(f.n_opt_inside.mean()), "median_loss_width": float(f.loss_width.median()),
            "median_n_opt_ratio": float(f.n_opt_ratio.median()),
            "median_abs_loss_error": float(f.loss_error.abs().median()),
            "median_abs_n_opt_error": float(f.n_opt_error.abs().median()),
            "missed_loss_own_factors": [round(v, 3) for v in f.own_factor[~f.loss_inside]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=float, nargs="+", default=[1e17, 3e17, 1e18, 3e18])
    parser.add_argument("--noise", type=float, default=0.005, help="log-normal noise on each run's loss")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--out", help="JSON result file (its key for this noise is added or replaced)")
    args = parser.parse_args()
    clock, rows = time.perf_counter(), []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        rows.append(score(args.budgets, args.noise, seed, args.bootstrap))
        print(json.dumps(rows[-1]), flush=True)
    result = {"command": f"python benchmarks/bench_small_sweeps.py --noise {args.noise:g} --seeds {args.seeds}",
              "budgets": args.budgets, "noise": args.noise, "sizes": list(SIZES), "law": LAW,
              "bootstrap": args.bootstrap, "summary": summarise(rows), "rows": rows,
              "seconds": time.perf_counter() - clock}
    print(json.dumps(result["summary"], indent=1))
    if args.out:
        path = Path(args.out)
        stored = json.loads(path.read_text()) if path.exists() else {}
        stored[f"noise {args.noise:g}"] = result
        path.write_text(json.dumps(stored, indent=1) + "\n")


if __name__ == "__main__":
    main()
