"""Are the forecast's intervals calibrated where forecasts are used: beyond the fitted budgets?

    python benchmarks/bench_forecast_calibration.py --demo /tmp/gptdemo --out calibration.json

For each sweep and each split C_k (at least 3 budgets fitted, so that the forecast can
forward-chain inside them), the whole forecast runs on the budgets up to C_k alone (its own
chaining, choice and interval) and answers at every larger budget C_j; the truth there is
C_j's own IsoFLOP minimum (``holdout.observe``). Reported per sweep: how often the stated
interval holds the truth (coverage; goal >= 90% for a stated 95%), the interval's median width,
and the same for the bootstrap interval alone (what the forecast stated before).

Sweeps: the GPT demo's (``--demo``, a finished demo folder), the three public IsoFLOP sweeps
(../shared/data/isoflops_public.csv; every run used, the source's outlier flags ignored) and
Chinchilla's runs as extracted by Epoch (../shared/data/chinchilla_fig4_epoch.csv; budgets by
rounding FLOPs to one significant figure, the 5 highest losses excluded as in Epoch's fit).
At most ``--splits`` splits per sweep, spread over the valid ones, keep it to minutes.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting import APPROACHES, load_runs
from flops_fit.fitting.laws.profiles import budget_groups
from flops_fit.fitting.scales import SCALES
from flops_fit.fitting.validation.forecast import forecasts
from flops_fit.fitting.validation.holdout import observe

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
MIN_FIT = 3


def sweeps(demo: str | None) -> dict:
    out = {}
    if demo:
        out["gpt demo"] = load_runs(demo)
    public = DATA / "isoflops_public.csv"
    if public.exists():
        frame = pd.read_csv(public)
        for name, group in frame.groupby("experiment"):
            out[name] = load_runs(group[["params", "tokens", "budget", "loss"]].reset_index(drop=True))
    epoch = DATA / "chinchilla_fig4_epoch.csv"
    if epoch.exists():
        out["epoch chinchilla fig4"] = load_runs(str(epoch), params_col="Model Size", flops_col="Training FLOP",
                                                 loss_col="loss", exclude_top=5)
    return out


def calibrate(runs, splits: int, bootstrap: int, workers: int) -> list[dict]:
    budgets, _ = budget_groups(runs)
    unique = sorted(float(b) for b in np.unique(budgets))
    truths = {b: observe(runs, budgets, b, curve="slice", bootstrap=0, seed=None, level=0.95) for b in unique}
    valid = [k for k in range(MIN_FIT, len(unique)) if any(truths[b].reason is None for b in unique[k:])]
    chosen = sorted({valid[int(i)] for i in np.linspace(0, len(valid) - 1, min(splits, len(valid)))}) if valid else []
    approaches = [a.configured(bootstrap=bootstrap, seed=0, level=0.95, curve="slice", focus="all")
                  for a in APPROACHES.values()]
    rows = []
    for k in chosen:
        upto = unique[k - 1]
        fitted = runs.subset(budgets <= upto)
        later = [b for b in unique[k:] if truths[b].reason is None]
        try:
            answers = forecasts(approaches, fitted, later, curve="slice", scales=tuple(SCALES), workers=workers)
        except FitInputError as exc:
            print(f"  split <= {upto:.3g}: no forecast ({exc})")
            continue
        for b, f in zip(later, answers, strict=True):
            t = truths[b]
            boot = f.parts["bootstrap"]
            rows.append({"fitted_upto": upto, "budget": b, "ratio": b / upto, "method": f.method, "scale": f.scale,
                         "focus": f.focus, "loss": f.loss, "n_opt": f.n_opt, "true_loss": t.loss,
                         "true_n_opt": t.n_opt, "loss_error": f.loss[0] / t.loss - 1,
                         "n_opt_error": f.n_opt[0] / t.n_opt - 1,
                         "loss_inside": bool(f.loss[1] <= t.loss <= f.loss[2]),
                         "n_opt_inside": bool(f.n_opt[1] <= t.n_opt <= f.n_opt[2]),
                         "boot_loss_inside": bool(boot["loss"][0] <= t.loss <= boot["loss"][1]),
                         "boot_n_opt_inside": bool(boot["n_opt"][0] <= t.n_opt <= boot["n_opt"][1]),
                         "loss_width": f.loss[2] / f.loss[1] - 1, "n_opt_width": f.n_opt[2] / f.n_opt[1] - 1})
        print(f"  split <= {upto:.3g}: {f.method}/{f.focus}/{f.scale} predicts {len(later)} budgets", flush=True)
    return rows


def summarise(rows: list[dict]) -> dict:
    if not rows:
        return {"predictions": 0}
    f = pd.DataFrame(rows)
    return {"predictions": len(f), "max_ratio": float(f.ratio.max()),
            "loss_coverage": float(f.loss_inside.mean()), "n_opt_coverage": float(f.n_opt_inside.mean()),
            "bootstrap_loss_coverage": float(f.boot_loss_inside.mean()),
            "bootstrap_n_opt_coverage": float(f.boot_n_opt_inside.mean()),
            "median_loss_width": float(f.loss_width.median()), "median_n_opt_width": float(f.n_opt_width.median()),
            "median_abs_loss_error": float(f.loss_error.abs().median()),
            "median_abs_n_opt_error": float(f.n_opt_error.abs().median())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--demo", help="a finished `flops-fit demo` folder (the GPT demo)")
    parser.add_argument("--out", default="calibration.json")
    parser.add_argument("--splits", type=int, default=4, help="at most this many splits per sweep")
    parser.add_argument("--bootstrap", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    result = {}
    for name, runs in sweeps(args.demo).items():
        clock = time.perf_counter()
        print(f"{name}: {len(runs)} runs", flush=True)
        rows = calibrate(runs, args.splits, args.bootstrap, args.workers)
        result[name] = {"summary": summarise(rows), "rows": rows, "seconds": time.perf_counter() - clock}
        Path(args.out).write_text(json.dumps(result, indent=2, default=float))
    all_rows = [r for v in result.values() for r in v["rows"]]
    result["all"] = {"summary": summarise(all_rows)}
    Path(args.out).write_text(json.dumps(result, indent=2, default=float))
    print(f"{'sweep':44s} {'preds':>5s} {'max r':>6s} {'loss cov':>8s} {'N cov':>6s} {'boot loss':>9s} "
          f"{'boot N':>6s} {'loss width':>10s} {'N width':>8s}")
    for name, v in result.items():
        s = v["summary"]
        if not s["predictions"]:
            print(f"{name:44s} no predictions")
            continue
        print(f"{name:44s} {s['predictions']:5d} {s['max_ratio']:6.1f} {100 * s['loss_coverage']:7.0f}% "
              f"{100 * s['n_opt_coverage']:5.0f}% {100 * s['bootstrap_loss_coverage']:8.0f}% "
              f"{100 * s['bootstrap_n_opt_coverage']:5.0f}% {100 * s['median_loss_width']:9.1f}% "
              f"{100 * s['median_n_opt_width']:7.0f}%")


if __name__ == "__main__":
    main()
