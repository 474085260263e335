"""The sweep bar's "about X left" against the time the sweep then took.

Runs ``flops-fit sweep CONFIG`` (or ``flops-fit demo``) in a fresh folder, stamps every line it
prints on stderr, and for each finished run's line that says a time left, compares it with the
seconds until its last run finished (the fit and report after it are not what the bar claims). Stores each line's claim and truth, and the median and largest
ratio (said / actual) from the first claim on and once a third of the runs are done:

    python benchmarks/bench_time_left.py --config examples/external-trainer/sweep.toml \\
        [--out benchmarks/results/time_left.json --label NAME]
    python benchmarks/bench_time_left.py --demo gpt [--out ... --label NAME]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0}
MIN_ACTUAL_S = 5.0
CLAIM = re.compile(r"(\d+)/(\d+) runs.*about ([0-9.]+)(s|min|h) left \| run \w+ size")


def stamped(command: list[str], cwd: Path) -> tuple[list[tuple[float, str]], float]:
    """stderr's lines with the seconds since the start, and the whole wall time."""
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=cwd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines = [(time.monotonic() - start, line.rstrip()) for line in proc.stderr]
    if proc.wait():
        raise SystemExit(f"{' '.join(command)} exited {proc.returncode}")
    return lines, time.monotonic() - start


def claims(lines: list[tuple[float, str]]) -> tuple[list[dict], float]:
    """Each claim against the seconds until the sweep's last run finished (what it claims: the
    fit and report after it are not counted), and that moment."""
    finished = [at for at, line in lines if re.search(r"(\d+)/\1 runs.* \| run \w+ size", line)]
    if not finished:
        raise SystemExit("the sweep printed no line for its last run")
    wall = finished[-1]
    out = []
    for at, line in lines:
        match = CLAIM.search(line)
        if match:
            done, total, value, unit = match.groups()
            said = float(value) * UNITS[unit]
            out.append({"at_s": round(at, 1), "runs_done": int(done), "runs": int(total), "said_s": said,
                        "actual_s": round(wall - at, 1), "ratio": said / max(wall - at, 1e-9)})
    return out, wall


def summary(rows: list[dict]) -> dict:
    """The median ratio said / actual and the one furthest from 1 (in log), over claims made 5 s
    or more before the last run finished (a run's line seconds before the end says about 0)."""
    ratios = [r["ratio"] for r in rows if r["actual_s"] >= MIN_ACTUAL_S]
    return {"claims": len(ratios), "median_ratio": statistics.median(ratios) if ratios else None,
            "worst_ratio": max(ratios, key=lambda r: abs(math.log(r)) if r > 0 else math.inf) if ratios else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--config", type=Path, help="a sweep file")
    what.add_argument("--demo", choices=("gpt", "vit"))
    parser.add_argument("--out", type=Path, help="a JSON file to add this measurement to (under --label)")
    parser.add_argument("--label", default="latest")
    args = parser.parse_args()
    cli = [sys.executable, "-m", "flops_fit"]
    with tempfile.TemporaryDirectory() as scratch:
        if args.config:
            config = args.config.resolve()
            command = [*cli, "sweep", str(config), "--out", str(Path(scratch) / "out")]
            lines, wall = stamped(command, cwd=config.parent)
        else:
            command = [*cli, "demo", "--model", args.demo, "--out", str(Path(scratch) / "out")]
            lines, wall = stamped(command, cwd=Path(scratch))
    rows, trained = claims(lines)
    third = [r for r in rows if r["runs_done"] >= r["runs"] / 3]
    shown = [Path(c).resolve().relative_to(Path.cwd()).as_posix() if c.endswith(".toml") and
             Path(c).resolve().is_relative_to(Path.cwd()) else c for c in command[3:-2]]
    result = {"command": " ".join(["flops-fit", *shown]), "wall_s": round(wall, 1),
              "last_run_finished_s": round(trained, 1), "claims": rows,
              "all": summary(rows), "from_a_third_of_the_runs": summary(third)}
    for r in rows:
        print(f"{r['at_s']:7.1f}s  {r['runs_done']:3d}/{r['runs']} runs  said {r['said_s']:7.1f}s  "
              f"actual {r['actual_s']:7.1f}s  x{r['ratio']:.2f}")
    print(json.dumps({k: v for k, v in result.items() if k != "claims"}, indent=1))
    if args.out:
        stored = json.loads(args.out.read_text()) if args.out.is_file() else {}
        stored[args.label] = result
        args.out.write_text(json.dumps(stored, indent=1) + "\n")


if __name__ == "__main__":
    main()
