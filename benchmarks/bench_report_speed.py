"""The report's drawing, the previous code against this checkout, side by side on one fit.

Fits the demo's store once (as ``flops-fit demo`` does: every method, forward chaining, 200
resamples), pickles the fit, then times ``write_report`` in fresh processes, the sides in turn
(``--repeat`` rounds): each side imports its own code (``--previous LABEL=PATH`` puts a checkout
first on PYTHONPATH; ``git archive COMMIT | tar -x -C PATH`` makes one) and writes the page with
``--workers`` (1 on a side whose ``write_report`` has no ``workers``). The pages are compared
without the moment each was written: the same page, or the benchmark says where they differ.

    python benchmarks/bench_report_speed.py --store COPY_OF_DEMO_STORE --previous facd169=/tmp/report-prev
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "report_speed.json"
CHILD = r"""
import inspect, pickle, sys, time
from flops_fit.fitting.report.html_report import write_report
if __name__ == "__main__":
    fitted = pickle.load(open(sys.argv[1], "rb"))
    options = {"workers": int(sys.argv[3])} if "workers" in inspect.signature(write_report).parameters else {}
    start = time.perf_counter()
    write_report(fitted, sys.argv[2], **options)
    print(time.perf_counter() - start, options.get("workers", 1))
"""


def page(folder: Path) -> str:
    return re.sub(r"&quot;written&quot;: &quot;[^&]*&quot;", "", (folder / "report.html").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True, help="a copy of a finished demo folder")
    parser.add_argument("--previous", action="append", default=[], metavar="LABEL=PATH")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    from flops_fit.fitting import fit

    fitted = fit(args.store, method="all", bootstrap=200, holdout="forward", workers=2, tracking=False)
    sides = {"now": str(ROOT)} | dict(p.split("=", 1) for p in args.previous)
    times: dict[str, list[float]] = {label: [] for label in sides}
    with tempfile.TemporaryDirectory() as tmp:
        blob = Path(tmp) / "fit.pkl"
        blob.write_bytes(pickle.dumps(fitted))
        script = Path(tmp) / "child.py"
        script.write_text(CHILD)
        for round_ in range(args.repeat):
            for label, path in sides.items():
                out = Path(tmp) / label
                env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
                done = subprocess.run([sys.executable, str(script), str(blob), str(out), str(args.workers)], env=env,
                                      check=True, capture_output=True, text=True)
                seconds, workers = done.stdout.split()
                times[label].append(float(seconds))
                print(f"round {round_ + 1}: {label} {float(seconds):.1f} s ({workers} worker(s))", flush=True)
        same = {label: page(Path(tmp) / label) == page(Path(tmp) / "now") for label in sides if label != "now"}
    medians = {label: statistics.median(t) for label, t in times.items()}
    result = {"command": "python benchmarks/bench_report_speed.py " + " ".join(sys.argv[1:]), "workers": args.workers,
              "seconds": times, "median_s": medians,
              "speedup": {label: medians[label] / medians["now"] for label in sides if label != "now"},
              "same_page": same}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("median_s", "speedup", "same_page")}))


if __name__ == "__main__":
    main()
