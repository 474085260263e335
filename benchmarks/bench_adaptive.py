"""The adaptive sweep (``flops_fit.sweeps.adaptive``) simulated on public IsoFLOP sweeps.

On each sweep of ../shared/data/isoflops_public.csv (every run; the repository's outlier flags
ignored) the design may only "train" runs that exist there: choosing a budget's sizes adds those
runs and their FLOPs (6 N D). Target: 10x the sweep's largest budget. Every design is fitted by
the public API with the forecast (``flops_fit.fit(..., "all", holdout="forward")``) and read at
the target, N_opt's forecast interval:

- the full grid: every run (the reference: its N_opt and the width of its interval);
- adaptive: the 4 smallest budgets, then the runs expected to shrink the interval most per FLOP,
  until N_opt's interval is as narrow as the full grid's (``n_opt<=Fx`` with F the full grid's
  factor) or the pool is spent;
- smallest first: the grid's budgets in order from the smallest, all sizes, until they have spent
  at least the adaptive design's FLOPs (a fixed grid cut short, for the same money).

Reported per sweep: FLOPs spent as a share of the full grid's, the interval factor reached, N_opt's
distance from the full grid's estimate, and each round's (FLOPs, factor) on the way. The data set
is a test set: the design has no constant fitted to it (the forecast's shipped prior was learned on
public sweeps, these three among them, and reads the same in every design compared here).

    /work/heavy python benchmarks/bench_adaptive.py [--only NAME] [--out benchmarks/results/adaptive.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting.inputs import load_runs
from flops_fit.store.run_store import RunStore
from flops_fit.sweeps.adaptive import (
    StopRule,
    plan_spend,
    run_design,
    table_fitter,
    table_pool,
    table_spend,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "isoflops_public.csv"


def _inside(value: float, lo: float, hi: float) -> bool:
    return bool(math.isfinite(lo) and math.isfinite(hi) and lo <= value <= hi)


def _progress(total: float):
    """Print each round once fitted (a long simulation shows where it is)."""
    def show(design) -> None:
        r = design.rounds[-1]
        if r.note or math.isfinite(r.factor):
            print(f"  round {len(design.rounds)}: {r.spent / total:.1%} of the FLOPs, x{r.factor:.3g} "
                  f"{r.note[:80]}", file=sys.stderr, flush=True)
    return show


def simulate(runs, *, batch: int = 1, spend=None) -> dict:
    """One sweep: ``runs`` a table or ``Runs``; ``spend`` FLOPs of a set of runs (default 6 N D each)."""
    pool, spend = table_pool(runs), spend or table_spend(runs)
    target = 10 * max(pool)
    fit_at = table_fitter(runs, target)
    every = [(b, s) for b, sizes in pool.items() for s in sizes]
    full, full_flops = fit_at(every), spend(every)
    t0 = time.perf_counter()
    design = run_design(pool, spend, target, StopRule(n_opt_factor=full.factor), fit_at, batch=batch,
                        on_round=_progress(full_flops))
    seconds = time.perf_counter() - t0
    last = design.rounds[-1]
    ordered, spent = [], 0.0  # the grid in order, cut where it has spent what the adaptive design spent
    for b in sorted(pool):
        ordered += [(b, s) for s in pool[b]]
        spent = spend(ordered)
        if spent >= design.spent:
            break
    try:
        small, small_error = fit_at(ordered), ""
    except FitInputError as exc:  # a cut grid may not fit; say why
        small, small_error = None, str(exc)
    small_n = (small.n_opt, small.lo, small.hi) if small is not None else (math.nan,) * 3
    return {
        "target": target, "budgets": len(pool), "runs": len(every),
        "full": {"flops": full_flops, "n_opt": full.n_opt, "lo": full.lo, "hi": full.hi, "factor": full.factor},
        "adaptive": {"flops": design.spent, "share": design.spent / full_flops, "runs": len(design.keys),
                     "n_opt": last.n_opt, "lo": last.n_opt_lo, "hi": last.n_opt_hi, "factor": last.factor,
                     "error_vs_full": last.n_opt / full.n_opt - 1,
                     "full_inside": _inside(full.n_opt, last.n_opt_lo, last.n_opt_hi),
                     "budgets": design.budgets, "rounds": len(design.rounds), "stopped": design.stopped,
                     "seconds": seconds,
                     "path": [{"share": r.spent / full_flops, "factor": r.factor,
                               "error_vs_full": r.n_opt / full.n_opt - 1} for r in design.rounds],
                     "history": design.to_dict()["rounds"]},
        "smallest_first": {"flops": spent, "share": spent / full_flops, "budgets": sorted({b for b, _ in ordered}),
                           "n_opt": small_n[0], "lo": small_n[1], "hi": small_n[2],
                           "factor": small.factor if small is not None else math.inf,
                           "error_vs_full": small_n[0] / full.n_opt - 1,
                           "note": small_error or (small.note if small is not None else "")},
    }


def largest_budget_check(runs, spend, start: int = 4) -> dict:
    """Why a design on ``runs`` cannot reach the full grid's interval cheaply when its largest budget
    carries most of the FLOPs (the demo under WSD): the share of the full grid's FLOPs that the
    largest budget's k cheapest sizes cost (alone, and after the first batch), and the forecast's
    interval of grids that leave it out or cut it to 3 sizes."""
    pool = table_pool(runs)
    every = [(b, s) for b, sizes in pool.items() for s in sizes]
    total, largest = spend(every), max(pool)
    first = [(b, s) for b in sorted(pool)[:start] for s in pool[b]]
    fit_at = table_fitter(runs, 10 * largest)
    by_cost = sorted(pool[largest], key=lambda s: (spend(first + [(largest, s)]), s))
    out = {"largest": largest, "first_share": spend(first) / total, "sizes": {}}
    for k in range(3, len(by_cost) + 1):
        keys = [(largest, s) for s in by_cost[:k]]
        out["sizes"][k] = {"alone": spend(keys) / total, "after_first": spend(first + keys) / total}
    grids = {"every run but the largest budget's": [k for k in every if k[0] != largest],
             "the largest budget at 3 sizes, every other run": [k for k in every if k[0] != largest]
             + [(largest, s) for s in pool[largest][-3:]],
             "the first batch and the largest budget at 3 sizes": first + [(largest, s) for s in pool[largest][-3:]]}
    out["grids"] = {}
    for name, keys in grids.items():
        reading = fit_at(keys)
        out["grids"][name] = {"share": spend(keys) / total, "runs": len(keys), "budgets": len({b for b, _ in keys}),
                              "factor": reading.factor, "n_opt": reading.n_opt}
        print(f"  {name}: {spend(keys) / total:.1%} of the FLOPs, x{reading.factor:.3g}", file=sys.stderr, flush=True)
    return out


def time_log(path: str) -> dict:
    """Wall and CPU seconds from ``/usr/bin/time -v``'s report."""
    fields = {"Elapsed (wall clock) time (h:mm:ss or m:ss)": "wall", "User time (seconds)": "user",
              "System time (seconds)": "system"}
    found = {}
    for line in Path(path).read_text().splitlines():
        key, _, value = line.strip().rpartition(": ")
        if key in fields:
            parts = [float(p) for p in value.split(":")]
            found[fields[key]] = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    if len(found) < len(fields):
        raise SystemExit(f"{path}: no /usr/bin/time -v report (wall, user and system time)")
    return {"wall_s": found["wall"], "cpu_s": found["user"] + found["system"]}


def record_real(store_dir: str, log: str) -> dict:
    """An adaptive sweep trained for real (``flops-fit sweep --adaptive``): its rounds from the
    store's meta, the steps its runs trained (each family's stable phase counted where it ran),
    and its time."""
    with RunStore(store_dir) as store:
        meta = store.get_meta("adaptive")
        steps = {row["run_id"]: row["steps_trained"] or 0 for row in store.accounting()}
        planned = store.planned_runs()
    full = plan_spend(planned)([(r.budget, float(r.params)) for r in planned])
    trained = sum(steps[r.run_id] * r.batch_size * r.seq_len * r.flops_per_unit for r in planned)
    return {"store": store_dir, "rule": meta["rule"], "stopped": meta["stopped"],
            "steps_trained": sum(steps.values()), "flops_trained": trained, "flops_designed": meta["spent"],
            "full_grid_flops": full, "share": meta["spent"] / full, **time_log(log),
            "rounds": [{"budgets": r["budgets"], "spent": r["spent"], "share": r["spent"] / full,
                        "n_opt": r["n_opt"], "lo": r["n_opt_lo"], "hi": r["n_opt_hi"], "factor": r["factor"]}
                       for r in meta["rounds"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--only", action="append", help="sweep(s) to simulate (default: every one)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--demo", metavar="STORE",
                        help="also simulate on a finished demo sweep's store (a copy: it is read, not written); "
                             "FLOPs are what its WSD runs execute together")
    parser.add_argument("--no-public", action="store_true", help="skip the public sweeps")
    parser.add_argument("--largest-budget", metavar="STORE",
                        help="only what a finished demo's largest budget costs and the interval without it, stored "
                             "under 'demo_largest_budget' in --out (its other entries kept)")
    parser.add_argument("--drop-outliers", action="store_true",
                        help="an extra check: each public sweep without the runs its repository flags as outliers "
                             "(named NAME__outliers_dropped)")
    parser.add_argument("--out", default="benchmarks/results/adaptive.json")
    parser.add_argument("--table", action="store_true", help="print --out's stored results as the docs' table")
    parser.add_argument("--record-real", metavar="STORE",
                        help="store an adaptive sweep trained for real (benchmarks/adaptive_demo.toml) under "
                             "'demo_real' in --out, with --time-log and --label")
    parser.add_argument("--time-log", help="with --record-real: the sweep's /usr/bin/time -v report")
    parser.add_argument("--label", help="with --record-real: the name of this sweep's entry")
    args = parser.parse_args()
    if args.table:
        print(table_of(json.loads(Path(args.out).read_text())))
        return
    if args.largest_budget:
        stored = json.loads(Path(args.out).read_text()) if Path(args.out).exists() else {}
        with RunStore(args.largest_budget) as store:
            planned = store.planned_runs()
        stored["demo_largest_budget"] = largest_budget_check(load_runs(args.largest_budget), plan_spend(planned))
        Path(args.out).write_text(json.dumps(stored, indent=2, default=float) + "\n")
        return
    if args.record_real:
        if not (args.time_log and args.label):
            raise SystemExit("--record-real needs --time-log and --label")
        stored = json.loads(Path(args.out).read_text())
        stored.setdefault("demo_real", {})[args.label] = record_real(args.record_real, args.time_log)
        Path(args.out).write_text(json.dumps(stored, indent=1, default=float) + "\n")
        print(json.dumps(stored["demo_real"][args.label], indent=1, default=float))
        return
    table = pd.read_csv(args.data)
    if args.drop_outliers:
        table = table[~table.outlier.astype(bool)].assign(experiment=lambda t: t.experiment + "__outliers_dropped")
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    out = json.loads(path.read_text()) if (args.only or args.no_public) and path.exists() else {}
    out.update({"command": f"python benchmarks/bench_adaptive.py --batch {args.batch}", "method":
                "fit(..., 'all', holdout='forward', bootstrap=0): the forecast's N_opt interval"})
    out.setdefault("sweeps", {})
    if args.demo:
        with RunStore(args.demo) as store:
            planned = store.planned_runs()
        row = simulate(load_runs(args.demo), batch=args.batch, spend=plan_spend(planned))
        out["demo"] = {"store": args.demo, **row}
        _print("demo", row)
        path.write_text(json.dumps(out, indent=2, default=float) + "\n")
    for name, runs in table.groupby("experiment"):
        if args.no_public or (args.only and name not in args.only and name.removesuffix("__outliers_dropped")
                                                      not in args.only):
            continue
        runs = runs[["params", "tokens", "budget", "loss"]].reset_index(drop=True)
        row = simulate(runs, batch=args.batch)
        out["sweeps"][name] = row
        _print(name, row)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2, default=float) + "\n")


def table_of(out: dict) -> str:
    """The stored results as docs/validation/adaptive.md's table."""
    rows = [("the GPT demo's 40 runs (WSD)", out["demo"])] if "demo" in out else []
    rows += sorted(out.get("sweeps", {}).items())
    lines = ["| sweep | full grid: N_opt at target (factor) | adaptive: FLOPs, runs | its factor | its N_opt vs "
             "the full grid's (inside its interval?) | stopped | smallest first: FLOPs | factor | N_opt vs full |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows:
        f, a, s = r["full"], r["adaptive"], r["smallest_first"]
        lines.append(f"| {name} | {f['n_opt']:.3g} (x{f['factor']:.2f}) | {a['share']:.0%}, {a['runs']} of {r['runs']} "
                     f"| x{a['factor']:.2f} | {a['error_vs_full']:+.0%} ({'yes' if a['full_inside'] else 'no'}) | "
                     f"{'rule' if 'within' in a['stopped'] else 'pool spent'} | {s['share']:.0%} | x{s['factor']:.2f} "
                     f"| {s['error_vs_full']:+.0%} |")
    lines += ["", "The way there (share of the full grid's FLOPs: the forecast's interval factor, its N_opt vs the "
              "full grid's, whether the full grid's N_opt lies inside; rounds without a forecast left out):", ""]
    for name, r in rows:
        full = r["full"]["n_opt"]
        steps = ", ".join(f"{p['share']:.0%}: x{p['factor']:.2f} {p['error_vs_full']:+.0%} "
                          f"{'in' if _inside(full, h['n_opt_lo'], h['n_opt_hi']) else 'out'}"
                          for p, h in zip(r["adaptive"]["path"], r["adaptive"]["history"], strict=True)
                          if p["factor"] < 1e300)
        lines.append(f"- {name}: {steps}")
    return "\n".join(lines)


def _print(name: str, row: dict) -> None:
    a, f, s = row["adaptive"], row["full"], row["smallest_first"]
    print(f"{name}: full grid {f['flops']:.3g} FLOPs, N_opt {f['n_opt']:.3g} (x{f['factor']:.2f}); adaptive "
          f"{a['share']:.0%} of its FLOPs ({a['runs']} runs, budgets {a['budgets']}), x{a['factor']:.2f}, "
          f"N_opt {a['error_vs_full']:+.1%} ({a['stopped']}); smallest first at {s['share']:.0%}: "
          f"x{s['factor']:.2f}, N_opt {s['error_vs_full']:+.1%}", flush=True)


if __name__ == "__main__":
    main()
