"""Which error model calibrates? The forecast's variants side by side, leave one study out.

    python benchmarks/bench_forecast_variants.py --demo <demo folder> --demo-score <score.json> \
        --out benchmarks/results/forecast_variants.json

The same scoring as ``bench_forecast_calibration.py`` (every public sweep's outer splits, the prior
fitted without the sweep's study; the demo with the shipped prior), repeated for each

- carry of the drift (``drift.CARRIES``: linear in ln r, capped at the chaining's own reach, kept
  only when clearly non-zero, off, or off with the interval stretched over it),
- prior: per candidate label (method and focus) where the prior has one, or pooled only,
- way of answering (``forecast.MODES``: the best candidate, the weighted average, or whichever
  promises less error),
- interval: the reach law (``reach_law``, refitted without the sweep's study on the other studies'
  answers) for the loss (the default, ``reach_law.ANSWERS``) or for both answers, or the
  candidates' error models for both (``laws={}``, the previous rule).

Pooled and per-sweep-mean figures of the four goals (issue 34: loss and N_opt coverage of the 95%
intervals >= 90%, median N_opt hi/lo <= 3x, median loss width <= 6%). The variants are ranked by
coverage first (the smaller of the two coverages, up to the 90% goal), then by width. Each sweep's
chaining and truths are computed once (``forecast_sweeps``): only ``forecast.decide`` is repeated.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench_forecast_calibration import (
    GOALS,
    calibrate,
    per_sweep_mean,
    prepare,
    summarise,
    sweep_arguments,
    sweep_jobs,
)

from flops_fit.fitting.validation.drift import CARRIES
from flops_fit.fitting.validation.forecast import MODES
from flops_fit.fitting.validation.prior import POOLED
from flops_fit.fitting.validation.reach_law import ANSWERS

PRIORS = ("label", "pooled")
INTERVALS = ("reach law: loss", "reach law: both", "error model")


def pooled_only(prior: dict) -> dict:
    return {q: {POOLED: by[POOLED]} for q, by in prior.items()}


def intervals(laws: dict) -> dict:
    return {INTERVALS[0]: {q: law for q, law in laws.items() if q in ANSWERS}, INTERVALS[1]: laws, INTERVALS[2]: {}}


def rank(s: dict) -> tuple:
    """Coverage first (the worse of the two, counted up to the goal), then the widths against their goals."""
    coverage = min(s["loss_coverage"], s["n_opt_coverage"], GOALS["loss_coverage"])
    return (-coverage, s["median_loss_width"] / GOALS["median_loss_width"] + s["median_n_opt_ratio"] / GOALS["median_n_opt_ratio"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sweep_arguments(parser)
    parser.add_argument("--out", default="forecast_variants.json")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--level", type=float, default=0.95)
    parser.add_argument("--carries", nargs="+", default=list(CARRIES), choices=CARRIES)
    args = parser.parse_args()
    clock = time.perf_counter()
    jobs, skipped = sweep_jobs(Path(args.cache), args.workers, args.demo, args.demo_score)
    prepared = prepare(jobs)
    variants = []
    for interval in INTERVALS:
        for carry in args.carries:
            for kind in PRIORS:
                rows = []
                for name, splits, keys, prior, laws in prepared:
                    used = prior if kind == "label" else pooled_only(prior)
                    rows += calibrate(name, splits, keys, (used, {}), args.level, carry=carry,
                                      laws=intervals(laws)[interval], per_label=kind == "label")
                for mode in MODES:
                    mine = [r for r in rows if r["mode"] == mode]
                    sweeps = {n: summarise([r for r in mine if r["sweep"] == n]) for n, *_ in prepared}
                    variants.append({"interval": interval, "carry": carry, "prior": kind, "mode": mode,
                                     "all": summarise(mine), "per_sweep_mean": per_sweep_mean(sweeps), "sweeps": sweeps})
                print(f"{interval} / {carry} / {kind}: done ({time.perf_counter() - clock:.0f} s)", flush=True)
    variants.sort(key=lambda v: rank(v["all"]))
    result = {"level": args.level, "goals": GOALS, "skipped": skipped, "variants": variants,
              "seconds": time.perf_counter() - clock}
    Path(args.out).write_text(json.dumps(result, indent=1, default=float))
    print("\n| interval | carry | prior | mode | loss coverage | N_opt coverage | median loss width | median N_opt hi/lo | "
          "median abs loss error | median abs N_opt error | per-sweep mean (loss cov, N cov, width, hi/lo) |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|")
    for v in variants:
        s, m = v["all"], v["per_sweep_mean"]
        print(f"| {v['interval']} | {v['carry']} | {v['prior']} | {v['mode']} | {100 * s['loss_coverage']:.0f}% | "
              f"{100 * s['n_opt_coverage']:.0f}% | {100 * s['median_loss_width']:.1f}% | {s['median_n_opt_ratio']:.2f}x | "
              f"{100 * s['median_abs_loss_error']:.2f}% | {100 * s['median_abs_n_opt_error']:.1f}% | "
              f"{100 * m['loss_coverage']:.0f}%, {100 * m['n_opt_coverage']:.0f}%, {100 * m['median_loss_width']:.1f}%, "
              f"{m['median_n_opt_ratio']:.2f}x |")


if __name__ == "__main__":
    main()
