"""Is a budget's observed optimum unbiased, and do its intervals cover the truth?

Synthetic IsoFLOP sweeps are drawn from a known Chinchilla law (Hoffmann et al.'s fitted
exponents alpha 0.34, beta 0.28) with 5-15 sizes per budget over spans of 4x-100x in
parameters and log-normal noise of 0-2%; the held-out check's estimator (``holdout.observe``)
reads each budget's optimum from its runs, and the table reports, per grid, the median
relative error of N_opt and of the minimum loss against the law's closed form, and how often
the 95% bootstrap intervals contain the truth (and how wide N_opt's is). The slice (default) is compared with the
parabola through the whole grid. docs/validation/fitting.md quotes the table. Without noise the error is
the estimator's bias; with noise the median also carries sampling error (its standard error
is printed beside it).

    python benchmarks/bench_observed_optimum.py --sweeps 20
"""

from __future__ import annotations

import argparse

import numpy as np

from flops_fit.fitting.inputs import load_runs
from flops_fit.fitting.laws.laws import law_loss
from flops_fit.fitting.synthetic import optimal_size, synthetic_runs
from flops_fit.fitting.validation.holdout import observe
from flops_fit.tables import format_table

LAW = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
BUDGETS = (1e18, 1e19, 1e20, 1e21)


def study(sizes: int, span: float, noise: float, curve: str, sweeps: int, bootstrap: int) -> dict[str, float]:
    """Median errors and interval coverage of the held-out (largest) budget's observed optimum."""
    budget = BUDGETS[-1]
    n_true = optimal_size(LAW, budget)
    l_true = float(law_loss(LAW, n_true, budget / (6 * n_true)))
    n_err, l_err, n_cover, l_cover, n_ratio = [], [], [], [], []
    for seed in range(sweeps):
        frame = synthetic_runs(LAW, budgets=BUDGETS, sizes_per_budget=sizes, span=np.log10(span) / 2,
                               noise=noise, seed=seed, curve_points=2)
        runs = load_runs(frame)
        budgets = runs.frame["budget"].to_numpy(float)
        o = observe(runs, budgets, budget, curve=curve, bootstrap=bootstrap, seed=seed, level=0.95)
        if o.reason is not None:
            continue
        n_err.append(o.n_opt / n_true - 1)
        l_err.append(o.loss / l_true - 1)
        n_cover.append(o.n_opt_interval[0] <= n_true <= o.n_opt_interval[1])
        l_cover.append(o.loss_interval[0] <= l_true <= o.loss_interval[1])
        n_ratio.append(o.n_opt_interval[1] / o.n_opt_interval[0])
    found = len(n_err)
    spread = 1.2533 * float(np.std(n_err)) / np.sqrt(found) if found > 1 else np.nan  # s.e. of a median
    return {"found": found, "n_se": spread, "n_bias": float(np.median(n_err)) if found else np.nan,
            "loss_bias": float(np.median(l_err)) if found else np.nan,
            "n_cover": float(np.mean(n_cover)) if found else np.nan,
            "n_ratio": float(np.median(n_ratio)) if found else np.nan,
            "loss_cover": float(np.mean(l_cover)) if found else np.nan}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=20, help="synthetic sweeps per grid")
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--curves", default="slice,parabola")
    args = parser.parse_args()
    rows = []
    for curve in args.curves.split(","):
        for sizes in (5, 9, 15):
            for span in (4, 10, 100):
                for noise in (0.0, 0.005, 0.02):
                    r = study(sizes, span, noise, curve, args.sweeps if noise else 1, args.bootstrap)
                    rows.append([curve, sizes, f"{span}x", f"{100 * noise:g}%", f"{r['found']}",
                                 f"{100 * r['n_bias']:+.1f}%" + ("" if not noise else f" ± {100 * r['n_se']:.1f}%"),
                                 f"{100 * r['loss_bias']:+.2f}%",
                                 "-" if not noise else f"{100 * r['n_cover']:.0f}%",
                                 "-" if not noise else f"{r['n_ratio']:.2f}x",
                                 "-" if not noise else f"{100 * r['loss_cover']:.0f}%"])
                    print(" | ".join(map(str, rows[-1])), flush=True)
    print(format_table(rows, ["curve", "sizes", "span", "noise", "sweeps", "N_opt error (median ± s.e.)",
                              "loss bias (median)", "N_opt covered", "N_opt hi/lo (median)", "loss covered"]))


if __name__ == "__main__":
    main()
