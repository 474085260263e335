"""The curve law predicts a run that was not trained: each size's longest WSD branch from its stable phase.

For a WSD sweep folder (the GPT demo's: `flops-fit demo --out DIR`), hold out each family's
longest branch: its cooldown points and its held-out loss go, its stable phase stays (as if the
stable run had gone on to that branch's cooldown start and no cooldown had been branched
there yet). Fit the curve law on that, predict the branch's held-out loss from its own
schedule, compare. "each": one family at a time (every other run seen); "all at once": every
family's longest branch held out together (the sweep's longest horizon per size never seen).
Beside it, the references that cannot read curves: vpnls (Chinchilla's law by variable
projection) and interaction (the same with F/(N^alpha D^beta)), fitted on the other runs'
final losses, at the held-out run's (N, D).

    python benchmarks/bench_curve_branches.py --out /tmp/curve-demo [--coarsen 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def coarsen(curve, factor: int) -> np.ndarray:
    """A curve as if recorded with 1/``factor`` the points: each ``factor`` consecutive intervals merged
    (their mean losses weighted by their lengths)."""
    curve = np.asarray(curve, float)
    lengths = np.diff(np.r_[0.0, curve[:, 0]])
    out = []
    for i in range(0, len(curve), factor):
        w = lengths[i:i + factor]
        out.append([curve[min(i + factor, len(curve)) - 1, 0], float(w @ curve[i:i + factor, 1] / w.sum())])
    return np.array(out)


def hide(runs, rows):
    """``runs`` with the branches at ``rows`` cut to their stable phase and without a held-out loss."""
    from flops_fit.fitting.inputs import Runs
    from flops_fit.fitting.laws.curve_areas import units_per_step

    frame = runs.frame.copy()
    for i in rows:
        row = frame.loc[i]
        sched = row["schedule"]
        limit = sched["cooldown_start"] * units_per_step(row, sched)
        frame.at[i, "curve"] = np.asarray(row["curve"])[np.asarray(row["curve"])[:, 0] <= limit]
        frame.at[i, "loss"] = np.nan
    return Runs(frame=frame, source=runs.source, metadata=runs.metadata)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/curve-demo", help="a WSD sweep folder")
    parser.add_argument("--coarsen", type=int, default=1,
                        help="merge this many consecutive curve points (5: the demo's 50 points as 10)")
    args = parser.parse_args()

    from flops_fit.fitting import load_runs
    from flops_fit.fitting.approaches.curve_law import CurveLaw
    from flops_fit.fitting.approaches.interaction import Interaction
    from flops_fit.fitting.approaches.vpnls import Vpnls

    runs = load_runs(args.out)
    if args.coarsen > 1:
        runs.frame["curve"] = [coarsen(c, args.coarsen) for c in runs.frame["curve"]]
    frame = runs.frame
    longest = [int(g["tokens"].idxmax()) for _, g in frame.groupby("params") if len(g) >= 2]
    print(f"{len(frame)} runs in {frame['params'].nunique()} families; held out: each family's longest branch")
    header = f"{'case':>12} {'params':>8} {'tokens':>11} {'stable seen':>11} {'observed':>8} " \
             f"{'curve law':>9} {'error':>7} {'vpnls':>7} {'error':>7} {'interaction':>11} {'error':>7}"
    for case, groups in (("each", [[i] for i in longest]), ("all at once", [longest])):
        print(f"\n{case}\n{header}")
        errors, reference, other, start = [], [], [], time.perf_counter()
        for rows in groups:
            law = CurveLaw(bootstrap=0).fit(hide(runs, rows))
            keep = np.ones(len(frame), bool)
            keep[rows] = False
            at = (frame.loc[rows, "params"].to_numpy(float), frame.loc[rows, "tokens"].to_numpy(float))
            predicted = law.final_losses(frame.loc[rows])
            baseline = Vpnls(bootstrap=0).fit(runs.subset(keep)).loss_surface(*at)
            interaction = Interaction(bootstrap=0).fit(runs.subset(keep)).loss_surface(*at)
            for i, p, b, f in zip(rows, predicted, baseline, interaction, strict=True):
                r = frame.loc[i]
                seen = r["schedule"]["cooldown_start"] / r["schedule"]["steps"]
                errors.append(p / r["loss"] - 1)
                reference.append(b / r["loss"] - 1)
                other.append(f / r["loss"] - 1)
                print(f"{case:>12} {int(r['params']):>8} {int(r['tokens']):>11} {seen:>10.0%} {r['loss']:>8.4f} "
                      f"{p:>9.4f} {errors[-1]:>+7.2%} {b:>7.4f} {reference[-1]:>+7.2%} {f:>11.4f} {other[-1]:>+7.2%}")
        print(f"{case}: mean |error| curve law {np.mean(np.abs(errors)):.2%} (max {np.max(np.abs(errors)):.2%}), "
              f"vpnls {np.mean(np.abs(reference)):.2%} (max {np.max(np.abs(reference)):.2%}), "
              f"interaction {np.mean(np.abs(other)):.2%} (max {np.max(np.abs(other)):.2%}); "
              f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
