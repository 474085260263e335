"""Does the GPT demo's tuned learning-rate law hold at its report's target? (issue 28 item 3)

    python benchmarks/bench_lr_target.py --out lr-target [--law FILE] [--inverse-width FOLDER]

Trains the demo's setup at the report's target (6.8e12 FLOPs, 10x the demo's largest budget,
far past the tune's grid: the law extrapolated as a forecast assumes) in three arms, each a
resumable sweep folder under OUT:

- ``law``: the law's rate at widths 40, 58 and 84 (the forecast's N_opt is width 58);
- ``rates``: x0.5 and x2 the law's rate at width 58;
- ``inverse-width``: the simple rule the first tuned law replaced, 1.46e-2 x 16 / width, at the
  same widths (``--inverse-width FOLDER`` reuses an earlier arm: it does not depend on the law).

Prints every run and the two goals: the law's rate within 0.5% of the best of x0.5 / x1 / x2,
and the law's runs no worse than the inverse-width rule's at each width; writes
OUT/lr_target.json. About 30 minutes of training on 2 free cores (8 runs of 5-7 minutes).
These runs are a test set: no law, rule or constant is tuned on them.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from bench_forecast_target import (
    INVERSE_WIDTH,
    INVERSE_WIDTHS,
    arm_plan,
    arm_runs,
    rates_plan,
    target_budget,
)

GOAL = 0.005
RATE_WIDTH = 58


def train(out: Path, law: str | None, workers: int) -> None:
    planned, config = arm_plan(INVERSE_WIDTHS, law=law)
    arms = (("law", planned), ("rates", rates_plan(planned, RATE_WIDTH)),
            ("inverse-width", arm_plan(INVERSE_WIDTHS, INVERSE_WIDTH)[0]))
    for name, arm in arms:
        print(f"== {name}: {len(arm.runs)} runs at {target_budget():.3g} FLOPs", flush=True)
        arm.run(out / name, resume=True, executor=config.executor, workers=workers,
                executor_options=config.executor_options, show_progress=False, skip_parity=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--law", help="the tuned law (default: the shipped demo_hparams/gpt.json)")
    parser.add_argument("--inverse-width", help="an earlier run's inverse-width arm folder, copied instead of trained")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    out = Path(args.out)
    if args.inverse_width and not (out / "inverse-width").exists():
        shutil.copytree(args.inverse_width, out / "inverse-width")
    train(out, args.law, args.workers)
    arms = {name: arm_runs(out / name) for name in ("law", "rates", "inverse-width")}
    at_law = {r["width"]: r for r in arms["law"]}
    three = [at_law[RATE_WIDTH]] + [r for r in arms["rates"] if r["width"] == RATE_WIDTH]
    best = min(three, key=lambda r: r["loss"])
    result = {"target": target_budget(), **arms,
              "rate_excess": at_law[RATE_WIDTH]["loss"] / best["loss"] - 1, "best_of_three_lr": best["lr"],
              "against_inverse_width": {r["width"]: at_law[r["width"]]["loss"] / r["loss"] - 1
                                        for r in arms["inverse-width"]}}
    (out / "lr_target.json").write_text(json.dumps(result, indent=2))
    for name, runs in arms.items():
        for r in runs:
            print(f"  {name:13s} width {r['width']:4d} ({r['params']:,} params) lr {r['lr']:.3g}: loss {r['loss']:.4f}")
    print(f"law's rate against the best of x0.5 / x1 / x2 at width {RATE_WIDTH}: {100 * result['rate_excess']:+.2f}% "
          f"(goal <= {100 * GOAL:g}%: {'met' if result['rate_excess'] <= GOAL else 'missed'})")
    for width, excess in result["against_inverse_width"].items():
        print(f"law against inverse width at width {width}: {100 * excess:+.2f}% "
              f"({'no worse' if excess <= 0 else 'worse'})")


if __name__ == "__main__":
    main()
