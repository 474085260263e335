"""The demo's whole fit, the previous code against this checkout, side by side on the same runs.

Each side runs in its own process (``--previous``: a checkout of the code before the speed-up,
e.g. ``git worktree add /tmp/fit-prev 2248f99``, put first on its PYTHONPATH) with one thread:
``fit(store, method="all", bootstrap=200, holdout="forward")`` as ``flops-fit demo`` calls it
(every method and scale, forward chaining, the forecast), and one Approach-3 point fit of all
runs (the 4500-start grid before, the pruned grid now). Prints and writes the wall times, their
ratio, and how far the answers moved (largest relative difference of every method's point
estimates and of the forecast's values and interval ends).

    python benchmarks/bench_fit_speed.py --store COPY_OF_DEMO_STORE --previous /tmp/fit-prev
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "fit_speed.json"

CHILD = r"""
import json, sys, time
import numpy as np
from flops_fit.fitting import fit, load_runs
from flops_fit.fitting import Parametric  # both layouts export it
store, bootstrap = sys.argv[1], int(sys.argv[2])
runs = load_runs(store)
start, cpu = time.perf_counter(), time.process_time()
fitted = fit(store, method="all", bootstrap=bootstrap, holdout="forward", tracking=False)
whole, whole_cpu = time.perf_counter() - start, time.process_time() - cpu
point = []
for _ in range(3):
    start = time.perf_counter()
    Parametric.configured(bootstrap=0, seed=0, level=0.95, curve="slice", focus="all", unique_tokens=None).fit(runs)
    point.append(time.perf_counter() - start)
f = fitted.forecast
answers = {f"{name}.{key}": float(value) for name, result in fitted.results.items()
           for key, value in result.params.items() if np.isscalar(value) and np.isfinite(value)}
for key in ("n_opt", "d_opt", "loss"):
    for part, value in zip(("value", "lo", "hi"), getattr(f, key)):
        answers[f"forecast.{key}.{part}"] = float(value)
print(json.dumps({"whole_fit_s": whole, "whole_fit_cpu_s": whole_cpu, "parametric_point_fit_s": min(point), "answers": answers,
                  "forecast": {k: getattr(f, k, None) for k in ("method", "scale", "focus")},  # older forecasts name one
                  "version": __import__("flops_fit").__file__}))
"""


def side(pythonpath: str | None, store: str, bootstrap: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    start = time.perf_counter()
    # run from a folder without a flops_fit package: ``python -c`` puts the working folder first on sys.path,
    # ahead of PYTHONPATH, and a checkout's own folder would shadow the previous code
    with tempfile.TemporaryDirectory() as elsewhere:
        out = subprocess.run([sys.executable, "-c", CHILD, os.path.abspath(store), str(bootstrap)], env=env,
                             capture_output=True, text=True, check=True, cwd=elsewhere)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - start
    return result


def relative_differences(old: dict[str, float], new: dict[str, float]) -> dict[str, float]:
    return {k: abs(new[k] - old[k]) / max(abs(old[k]), 1e-12) for k in old if k in new}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="a copy of the demo's sweep folder (never the original)")
    parser.add_argument("--previous", required=True, help="the previous code's checkout (its repository root)")
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    new = side(None, args.store, args.bootstrap)
    old = side(args.previous, args.store, args.bootstrap)
    if old["version"] == new["version"]:
        raise SystemExit(f"both sides imported {new['version']}: --previous must be a checkout's root")
    diffs = relative_differences(old["answers"], new["answers"])
    # every method's point estimates (the forecast's own values also move with changes to how it is chosen)
    point = {k: v for k, v in diffs.items() if not k.endswith((".lo", ".hi")) and not k.startswith("forecast.")}
    report = {
        "command": "python benchmarks/bench_fit_speed.py --store COPY --previous /tmp/fit-prev (2248f99)",
        "runs": "the GPT demo store (40 runs, 8 budgets)", "bootstrap": args.bootstrap,
        "cpus": os.cpu_count(), "load_average_at_start": load, "threads": 1,
        "previous": {k: old[k] for k in ("whole_fit_s", "whole_fit_cpu_s", "parametric_point_fit_s", "version")},
        "new": {k: new[k] for k in ("whole_fit_s", "whole_fit_cpu_s", "parametric_point_fit_s", "version")},
        "speedup_whole_fit": old["whole_fit_s"] / new["whole_fit_s"],
        "speedup_whole_fit_cpu": old["whole_fit_cpu_s"] / new["whole_fit_cpu_s"],
        "speedup_parametric_point_fit": old["parametric_point_fit_s"] / new["parametric_point_fit_s"],
        "forecast_previous": old["forecast"], "forecast_new": new["forecast"],
        "max_relative_difference_point_estimates": max(point.values()),
        "max_relative_difference_with_interval_ends": max(diffs.values()),
        "same_to_3_significant_figures": all(v < 5e-4 for v in point.values()),
        "largest_differences": dict(sorted(diffs.items(), key=lambda kv: -kv[1])[:8]),
        "answers_previous": old["answers"], "answers_new": new["answers"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"whole fit: previous {old['whole_fit_s']:.1f} s, now {new['whole_fit_s']:.1f} s "
          f"({report['speedup_whole_fit']:.1f}x); Approach-3 point fit: {old['parametric_point_fit_s']:.2f} s -> "
          f"{new['parametric_point_fit_s']:.2f} s ({report['speedup_parametric_point_fit']:.1f}x); load {load:.1f}")
    print(f"forecast {old['forecast']} -> {new['forecast']}; largest relative change of a point estimate "
          f"{report['max_relative_difference_point_estimates']:.2e}, with interval ends "
          f"{report['max_relative_difference_with_interval_ends']:.2e}")


if __name__ == "__main__":
    main()
