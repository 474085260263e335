"""The demo's whole fit, the previous code against this checkout, side by side on the same runs.

Each side runs in its own process, one after the other, with one thread: ``fit(store,
method="all", bootstrap=200, holdout="forward")`` as ``flops-fit demo`` and ``flops-fit report``
call it (every method and scale, forward chaining, the forecast), with ``--workers`` processes
for the refits (1 by default: the CPU a fit costs; the demo passes 2), then, each the best of 3,
one Approach-3 point fit of all runs and one curve-law fit with its bootstrap (the part the last
change batched: timed alone, it is steadier than the whole fit on a shared machine), and on a
sweep whose store records its unique tokens (runs that repeat their data) the data-limited law's
fit with its bootstrap. CPU seconds
are the main process's (``whole_fit_cpu_s``) and the worker pool's (``workers_cpu_s``, 0 with
one worker; workers forked by a fork server are counted once the server is stopped after the fit). ``--previous LABEL=PATH`` (repeatable) names a checkout of earlier code, put
first on that side's PYTHONPATH; make one without touching the repository's worktrees with
``mkdir /tmp/fit-prev && git archive d667820 | tar -x -C /tmp/fit-prev``.

Writes the wall and CPU times, their ratios, and how far the answers moved against each
previous side: the forecast's values and interval ends, and every method's N_opt, D_opt and
loss with their interval ends at the forecast's target (and its fitted parameters).

    python benchmarks/bench_fit_speed.py --store COPY_OF_DEMO_STORE \
        --previous d667820=/tmp/fit-prev --previous 2248f99=/tmp/fit-prev-2248f99
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

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "fit_speed.json"
SAME = 5e-4  # relative difference within which two answers agree to 3 significant figures

CHILD = r"""
import json, resource, sys, time
import numpy as np
from flops_fit.fitting import fit, load_runs
from flops_fit.fitting import APPROACHES, Parametric  # both layouts export them
store, bootstrap, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
runs = load_runs(store)
children = lambda: sum(getattr(resource.getrusage(resource.RUSAGE_CHILDREN), f) for f in ("ru_utime", "ru_stime"))
start, cpu, cpu_children = time.perf_counter(), time.process_time(), children()
fitted = fit(store, method="all", bootstrap=bootstrap, holdout="forward", tracking=False, workers=workers)
whole, whole_cpu = time.perf_counter() - start, time.process_time() - cpu
import multiprocessing.forkserver
multiprocessing.forkserver._forkserver._stop()  # workers forked by a fork server are its children: reaped with it
workers_cpu = children() - cpu_children  # the pool's processes, reaped when the fit closes its pool
def best_of_3(approach):
    times = []
    for _ in range(3):
        start = time.perf_counter()
        approach.fit(runs)
        times.append(time.perf_counter() - start)
    return min(times)
point = best_of_3(Parametric.configured(bootstrap=0, seed=0, level=0.95, curve="slice", focus="all",
                                        unique_tokens=None))
curve = best_of_3(APPROACHES["curve"].configured(bootstrap=bootstrap, seed=0, level=0.95, curve="slice", focus="all",
                                                 unique_tokens=None))
unique = runs.metadata.get("unique_tokens")  # a sweep whose runs repeat their data: its law's fit, timed alone too
if unique:
    from flops_fit.fitting.approaches.data_limit import DataLimited
    limited = best_of_3(DataLimited.configured(bootstrap=bootstrap, seed=0, level=0.95, focus="all", unique_tokens=unique))
else:
    limited = None
f = fitted.forecast
answers = {}
for name, result in fitted.results.items():
    answers.update({f"{name}.{key}": float(value) for key, value in result.params.items()
                    if np.isscalar(value) and np.isfinite(value)})
    table = result.predict([f.target])
    for column in ("N_opt", "D_opt", "loss"):
        for suffix in ("", "_lo", "_hi"):
            answers[f"{name}.at_target.{column}{suffix}"] = float(table[column + suffix].iloc[0])
for key in ("n_opt", "d_opt", "loss"):
    for part, value in zip(("value", "lo", "hi"), getattr(f, key)):
        answers[f"forecast.{key}.{part}"] = float(value)
print(json.dumps({"whole_fit_s": whole, "whole_fit_cpu_s": whole_cpu, "workers_cpu_s": workers_cpu,
                  "parametric_point_fit_s": point, "curve_law_fit_s": curve,
                  **({"data_limited_fit_s": limited} if limited is not None else {}),
                  "runs": len(runs), "answers": answers, "summary": fitted.summary(),
                  "version": __import__("flops_fit").__file__}))
"""


def side(pythonpath: str | None, store: str, bootstrap: int, workers: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    start = time.perf_counter()
    # run from a folder without a flops_fit package: ``python -c`` puts the working folder first on sys.path,
    # ahead of PYTHONPATH, and a checkout's own folder would shadow the previous code
    with tempfile.TemporaryDirectory() as elsewhere:
        out = subprocess.run([sys.executable, "-c", CHILD, os.path.abspath(store), str(bootstrap), str(workers)],
                             env=env, capture_output=True, text=True, check=True, cwd=elsewhere)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - start
    return result


def relative_differences(old: dict[str, float], new: dict[str, float]) -> dict[str, float]:
    return {k: abs(new[k] - old[k]) / max(abs(old[k]), 1e-12) for k in old if k in new}


def agreement(old: dict, new: dict) -> dict:
    """How far the new answers moved from ``old``'s: the largest relative differences of the printed
    answers (forecast and every method at the target, interval ends included) and of the parameters."""
    diffs = relative_differences(old["answers"], new["answers"])
    printed = {k: v for k, v in diffs.items() if k.startswith("forecast.") or ".at_target." in k}
    params = {k: v for k, v in diffs.items() if k not in printed}
    missing = sorted(set(old["answers"]) ^ set(new["answers"]))
    return {
        "max_relative_difference_printed_answers": max(printed.values(), default=float("nan")),
        "max_relative_difference_parameters": max(params.values(), default=float("nan")),
        "same_to_3_significant_figures": bool(printed) and all(v <= SAME for v in printed.values()),
        "answers_only_on_one_side": missing,
        "largest_differences": dict(sorted(diffs.items(), key=lambda kv: -kv[1])[:8]),
        "forecast_summary_same": old["summary"].split("\n\n")[0] == new["summary"].split("\n\n")[0],
    }


def medians(results: list[dict]) -> dict:
    """The first round's answers with every timing the median over the rounds."""
    timed = [k for k, v in results[0].items() if k.endswith("_s") and isinstance(v, float)]
    return {**results[0], **{k: float(np.median([r[k] for r in results])) for k in timed}}


def earlier_runs(path: Path) -> list[dict]:
    """The results file's earlier measurements, newest first (each without its own history)."""
    if not path.exists():
        return []
    old = json.loads(path.read_text())
    return [{k: v for k, v in old.items() if k != "history"}, *old.get("history", [])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="a copy of the demo's sweep folder (never the original)")
    parser.add_argument("--previous", action="append", required=True, metavar="LABEL=PATH",
                        help="a checkout of the previous code (its repository root), e.g. d667820=/tmp/fit-prev")
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1, help="processes for the refits on every side")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of every side, taken in turn (new, previous, new, ...); the times are the "
                             "rounds' medians: on a shared machine one round's ratio moves by tens of percent")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    previous = dict(p.split("=", 1) for p in args.previous)
    load = os.getloadavg()[0]
    rounds = []
    for _ in range(args.repeat):
        rounds.append({None: side(None, args.store, args.bootstrap, args.workers),
                       **{label: side(path, args.store, args.bootstrap, args.workers)
                          for label, path in previous.items()}})
    new = medians([r[None] for r in rounds])
    sides = {label: medians([r[label] for r in rounds]) for label in previous}
    for label, old in sides.items():
        if old["version"] == new["version"]:
            raise SystemExit(f"{label} imported {new['version']}, as this checkout does: --previous must be a "
                             "checkout's root")
    keys = tuple(k for k in ("whole_fit_s", "whole_fit_cpu_s", "workers_cpu_s", "parametric_point_fit_s",
                             "curve_law_fit_s", "data_limited_fit_s", "process_s") if k in new)
    report = {
        "command": "python benchmarks/bench_fit_speed.py --store COPY "
                   + " ".join(f"--previous {label}=CHECKOUT" for label in previous)
                   + (f" --bootstrap {args.bootstrap}" if args.bootstrap != 200 else "")
                   + (f" --workers {args.workers}" if args.workers > 1 else "")
                   + (f" --repeat {args.repeat}" if args.repeat > 1 else ""),
        "runs": f"{new['runs']} runs of the store given (--store)",
        "bootstrap": args.bootstrap, "workers": args.workers, "threads": 1, "cpus": os.cpu_count(),
        "load_average_at_start": load, "load_average_at_end": os.getloadavg()[0],
        "repeat": args.repeat,
        "rounds": [{"new" if label is None else label: {k: r[label][k] for k in keys} for label in r} for r in rounds],
        "new": {k: new[k] for k in keys},
        "previous": {label: {k: old[k] for k in keys} for label, old in sides.items()},
        "speedup": {label: {"whole_fit": old["whole_fit_s"] / new["whole_fit_s"],
                            "whole_fit_cpu": old["whole_fit_cpu_s"] / new["whole_fit_cpu_s"],
                            "parametric_point_fit": old["parametric_point_fit_s"] / new["parametric_point_fit_s"],
                            "curve_law_fit": old["curve_law_fit_s"] / new["curve_law_fit_s"],
                            **({"data_limited_fit": old["data_limited_fit_s"] / new["data_limited_fit_s"]}
                               if "data_limited_fit_s" in new and "data_limited_fit_s" in old else {})}
                    for label, old in sides.items()},
        "answers_against": {label: agreement(old, new) for label, old in sides.items()},
        "answers_new": new["answers"],
        "answers_previous": {label: old["answers"] for label, old in sides.items()},
        "forecast_summary_new": new["summary"].split("\n\n")[0],
    }
    report["history"] = earlier_runs(args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"whole fit now {new['whole_fit_s']:.1f} s ({new['whole_fit_cpu_s']:.1f} CPU-s), workers {args.workers}, "
          f"load {load:.1f}")
    for label, old in sides.items():
        same = report["answers_against"][label]
        print(f"  {label}: {old['whole_fit_s']:.1f} s ({old['whole_fit_cpu_s']:.1f} CPU-s): "
              f"{report['speedup'][label]['whole_fit']:.1f}x; printed answers within "
              f"{same['max_relative_difference_printed_answers']:.1e} (3 significant figures: "
              f"{same['same_to_3_significant_figures']})")


if __name__ == "__main__":
    main()
