"""The top-1 error law's fit with its bootstrap, the previous code against this checkout, side by side.

``flops-fit report`` fits the error law of an image-classifier sweep with 100 resamples
(``html_report._error_section``). Each side runs in its own process with one thread, in turn,
``--repeat`` rounds (the fastest kept), on two frontiers of 12 budgets from a known law
(a = 40, b = 0.35, d = 2e9 FLOPs, floor c = 0.08): exact, and with 1% noise (seeded). Writes
each side's seconds, the ratio previous / now, and every fitted parameter and interval end with
how far it moved (``d`` is poorly determined by a noisy frontier, so it moves most).

    python benchmarks/bench_error_law.py --previous a09fd57=/work/prev-a09 \\
        [--repeat 2] [--out benchmarks/results/error_law_speed.json]

Make a previous checkout with ``mkdir /tmp/prev && git archive REV | tar -x -C /tmp/prev``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "error_law_speed.json"
HERE = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import numpy as np
import torch  # noqa: F401 - imported by flops_fit anyway; keep it out of the timing
from flops_fit.fitting.laws.error_law import fit_error_law

flops = np.geomspace(1e10, 1e14, 12)
best = 40.0 * (flops + 2e9) ** -0.35 + 0.08
noisy = best * (1 + 0.01 * np.random.default_rng(3).standard_normal(best.size))
repeat = int(sys.argv[1])
out = {}
for name, error in (("exact", best), ("noisy", noisy)):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        law = fit_error_law(flops, error, bootstrap=100, seed=0)
        times.append(time.perf_counter() - t0)
    out[name] = {"seconds": min(times), "params": law.params, "intervals": law.intervals}
print(json.dumps(out))
"""


def run_side(path: Path, repeat: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(path), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(repeat)], env=env, capture_output=True, text=True,
                          check=True, cwd=path)
    return json.loads(done.stdout.strip().splitlines()[-1])


def moved(now: dict, before: dict) -> dict:
    """Relative change of every parameter and interval end, per frontier."""
    out = {}
    for name in now:
        values = {k: (now[name]["params"][k], before[name]["params"][k]) for k in now[name]["params"]}
        for k, (lo, hi) in now[name]["intervals"].items():
            values[f"{k} lo"] = (lo, before[name]["intervals"][k][0])
            values[f"{k} hi"] = (hi, before[name]["intervals"][k][1])
        out[name] = {k: abs(a - b) / abs(b) if b else abs(a - b) for k, (a, b) in values.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--previous", action="append", required=True, help="LABEL=PATH of an earlier checkout")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    sides = {"now": HERE} | {label: Path(p) for label, p in (s.split("=", 1) for s in args.previous)}
    results = {label: run_side(path, args.repeat) for label, path in sides.items()}
    record = {"command": "python benchmarks/bench_error_law.py " + " ".join(f"--previous {p}" for p in args.previous)
              + f" --repeat {args.repeat}", "sides": results, "ratio_previous_over_now": {}, "moved": {}}
    for label in sides:
        if label == "now":
            continue
        record["ratio_previous_over_now"][label] = {
            name: results[label][name]["seconds"] / results["now"][name]["seconds"] for name in results["now"]}
        record["moved"][label] = moved(results["now"], results[label])
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for label, ratios in record["ratio_previous_over_now"].items():
        for name, ratio in ratios.items():
            worst = max(record["moved"][label][name].items(), key=lambda kv: kv[1])
            print(f"{name}: now {results['now'][name]['seconds']:.2f} s, {label} {results[label][name]['seconds']:.2f} s "
                  f"({ratio:.1f}x); largest change {worst[0]} {worst[1]:.2e}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
