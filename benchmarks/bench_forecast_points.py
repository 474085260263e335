"""How good can the forecast's N_opt point be? Each candidate's and each combination's errors, leave nothing out.

    python benchmarks/bench_forecast_points.py --demo <demo folder> \
        --demo-score benchmarks/results/forecast_target_v5.json --out benchmarks/results/forecast_points.json

An interval that covers 90% of a point's errors cannot be narrower than those errors allow: with a
median |ln error| m, a 90% interval of normal errors spans at least exp(2 x 1.645 m / 0.674) (hi/lo).
The same outer splits as ``bench_forecast_calibration.py`` (every later budget of every split with
two or more inner chaining splits, truths observed on the whole sweep); per prediction, the log
error of N_opt of

- each candidate (method / scale / focus) alone;
- combinations that need no fitted constant: the equal-weight geometric mean of the candidates,
  their median, weights 1 / RMS^2 of each candidate's per-split slopes z_k of its inner chaining
  (drift included), the candidate with the smallest such RMS, and the product's own answer
  (``forecast.decide``, mode average: weights 1 / sd^2 of the error models, drift not counted).

Reports the median |ln error| of each per sweep and pooled, and the narrowest 90% hi/lo it allows.
No choice is made here: this says why the N_opt interval goal (hi/lo <= 3x) is or is not within reach.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import forecast_sweeps as fs
import numpy as np
import pandas as pd
from bench_forecast_calibration import sweep_arguments, sweep_jobs

from flops_fit.errors import FitInputError
from flops_fit.fitting.validation.drift import split_slopes
from flops_fit.fitting.validation.forecast import MIN_SPLITS, decide

Z90 = 1.645 / 0.674  # a 90% half-width in units of the median |error|, for normal errors


def slope_rms(inner, key) -> float:
    z = list(split_slopes([r for r in inner if (r.method, r.scale, r.focus) == key], "n_opt_error").values())
    return float(np.sqrt(np.mean(np.square(z)))) if len(z) >= MIN_SPLITS else np.nan


def errors(name: str, splits: list, keys: list, prior) -> list[dict]:
    rows = []
    for upto, inner, later in splits:
        rms = {k: slope_rms(inner, k) for k in keys}
        for budget, (truth, predictions) in later.items():
            logs = {k: float(np.log(p[1])) for k, p in predictions.items() if np.isfinite(rms.get(k, np.nan))
                    and p[1] > 0 and np.isfinite(p[1])}
            if not logs:
                continue
            truth_log = float(np.log(truth.n_opt))
            ks = list(logs)
            values = np.array([logs[k] for k in ks])
            inverse = np.array([1.0 / max(rms[k], 1e-3) ** 2 for k in ks])
            row = {"sweep": name, "ratio": budget / upto,
                   "equal weights": float(values.mean() - truth_log),
                   "median": float(np.median(values) - truth_log),
                   "weights 1 / RMS^2": float(np.sum(inverse * values) / inverse.sum() - truth_log),
                   "smallest RMS": float(logs[min(ks, key=lambda k: rms[k])] - truth_log)}
            try:
                f = decide(inner, predictions, budget, budget / upto, keys=keys, priors=(prior, {}))
                row["product"] = float(np.log(f.n_opt[0]) - truth_log)
            except FitInputError:
                row["product"] = np.nan
            row.update({"/".join(str(x) for x in k): logs[k] - truth_log for k in ks})
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sweep_arguments(parser)
    parser.add_argument("--out", default="forecast_points.json")
    args = parser.parse_args()
    jobs, skipped = sweep_jobs(Path(args.cache), 1, args.demo, args.demo_score)
    rows = []
    for name, runs, chained, prior in jobs:
        rows += errors(name, list(fs.outer_splits(runs, chained)), fs.keys_of(chained), prior)
    frame = pd.DataFrame(rows)
    answers = [c for c in frame.columns if c not in ("sweep", "ratio")]
    median = frame[answers].abs().median()
    counts = frame[answers].notna().sum()
    by_sweep = frame.groupby("sweep")[answers].agg(lambda x: float(np.nanmedian(np.abs(x))) if x.notna().any()
                                                   else np.nan)
    result = {"predictions": len(frame), "skipped": skipped,
              "pooled": {a: {"median_abs_log_error": float(median[a]), "predictions": int(counts[a]),
                             "narrowest_90pct_hi_lo": float(np.exp(2 * Z90 * median[a]))} for a in answers},
              "by_sweep": {s: {a: v for a, v in row.items() if np.isfinite(v)} for s, row in by_sweep.iterrows()}}
    Path(args.out).write_text(json.dumps(result, indent=1, default=float))
    print(f"{len(frame)} predictions; pooled median |ln error| of N_opt and the narrowest 90% hi/lo it allows:")
    print("| answer | predictions | median abs ln error | narrowest 90% hi/lo |\n|---|---|---|---|")
    for a in sorted(answers, key=lambda a: median[a]):
        print(f"| {a} | {counts[a]} | {median[a]:.3f} | {np.exp(2 * Z90 * median[a]):.2f}x |")


if __name__ == "__main__":
    main()
