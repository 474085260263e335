"""`flops-fit fit CSV --method all --holdout forward` at its default workers against --workers 1 (the
default before), side by side, on public sweeps a user might fit first.

Each round runs both arms as separate commands, one after the other (the order swapped every
other round), times their wall clock and checks that they print the same text. The default takes
the cores free when it starts (``flops_fit.machine.free_cores``), so run it on an otherwise quiet
machine: the figure is what a user with those cores gets.

    python benchmarks/bench_fit_workers.py [--rounds 2] [--out benchmarks/results/fit_workers.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "isoflops_public.csv"
SWEEPS = ("epochai_chinchilla", "ml_scalefit")  # (Mis)Fitting's rows hold several studies: not one sweep


def timed(csv: Path, workers: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "flops_fit", "fit", str(csv), "--method", "all", "--holdout",
                           "forward", *workers], capture_output=True, text=True, check=True)
    return time.perf_counter() - start, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/fit_workers.json")
    args = parser.parse_args()
    table = pd.read_csv(DATA)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for source in SWEEPS:
            runs = table[(table["source"] == source) & ~table["outlier"]]
            csv = Path(folder) / f"{source}.csv"
            runs.to_csv(csv, index=False)
            arms = {"workers_1": ["--workers", "1"], "default": []}
            seconds: dict[str, list[float]] = {name: [] for name in arms}
            printed = set()
            for round_ in range(args.rounds):
                for name in (arms if round_ % 2 == 0 else reversed(list(arms))):
                    wall, out = timed(csv, arms[name])
                    seconds[name].append(round(wall, 2))
                    printed.add(out)
            row = {"sweep": source, "runs": len(runs), "seconds": seconds, "same_output": len(printed) == 1,
                   "speedup": min(seconds["workers_1"]) / min(seconds["default"])}
            rows.append(row)
            print(json.dumps(row))
    result = {"command": f"python benchmarks/bench_fit_workers.py --rounds {args.rounds}",
              "data": "../shared/data/isoflops_public.csv, one source each, outlier rows left out",
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_1min": os.getloadavg()[0]},
              "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
