"""Approach 3 on the 240 Epoch runs with 4000 bootstrap resamples (goal: < 60 s on 2 cores).

Side by side, the reference: scipy's L-BFGS-B refitting resamples one at a time from the
same warm starts (timed on a slice, scaled to the full count). Prints wall times, the ratio
and the fitted values with their intervals.

    python benchmarks/bench_fit.py [--resamples 4000] [--reference 40]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "chinchilla_fig4_epoch.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--resamples", type=int, default=4000)
    parser.add_argument("--reference", type=int, default=40, help="resamples refitted by the scipy reference")
    args = parser.parse_args()

    from scipy.optimize import minimize

    from flops_fit.fitting import fit, load_runs
    from flops_fit.fitting.approaches.parametric import law_columns, objective
    from flops_fit.fitting.laws.bootstrap import resample_weights

    runs = load_runs(args.data, params_col="Model Size", flops_col="Training FLOP", loss_col="loss", exclude_top=5)
    print(f"{len(runs)} runs; CPUs visible: {os.cpu_count()}; load average: {os.getloadavg()[0]:.1f}")

    start = time.perf_counter()
    result = fit(runs, method="parametric", bootstrap=args.resamples, seed=0)
    ours = time.perf_counter() - start
    print(f"flops-fit: full init grid (4500 starts) + {args.resamples} resamples: {ours:.1f} s")

    log_n, log_d, loss, _ = law_columns(runs)
    log_l = np.log(loss)
    p = result.params
    warm = np.array([np.log(p["A"]), np.log(p["B"]), np.log(p["E"]), p["alpha"], p["beta"]])
    weights = resample_weights(len(runs), args.reference, seed=0)
    start = time.perf_counter()
    for w in weights:
        minimize(lambda t, w=w: tuple(v[0] for v in objective(t, log_n, log_d, log_l, w)), warm, jac=True,
                 method="L-BFGS-B", options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 2000})
    per_resample = (time.perf_counter() - start) / args.reference
    bootstrap_share = ours - result.details.get("grid_seconds", 0.0)
    print(f"reference (scipy L-BFGS-B, one start per resample): {per_resample * 1e3:.1f} ms per resample, "
          f"{per_resample * args.resamples:.1f} s for {args.resamples} (scaled from {args.reference})")
    print(f"ratio reference / flops-fit bootstrap: {per_resample * args.resamples / bootstrap_share:.1f}x "
          f"(flops-fit uses {result.details['bootstrap_starts']} starts per resample)")
    print()
    print(result.intervals().to_string(float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main()
