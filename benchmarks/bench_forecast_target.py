"""Does the demo's forecast come true? Train the demo's setup at the budget its report forecasts.

    python benchmarks/bench_forecast_target.py --sweep /tmp/gptdemo --out /tmp/forecast-target

1. Trains the GPT demo's own setup (its model, data, schedule and learning-rate rule, every
   option as ``flops-fit demo``) at the report's target budget, 10x the demo's largest, at
   ``--widths`` spanning the forecast's interval (``OUT/truth``). The truth there: the minimum
   of a parabola in log N through the three lowest runs (and the lowest run itself).
2. Checks the learning-rate rule where it is used (issue 28): at the width nearest the forecast's
   N_opt, the planned rate x0.5 and x2 (``OUT/rates``; x1 is the truth run), and the simple
   inverse-width rule the tuned law replaced at three widths (``OUT/inverse-width``).
3. Fits the demo's sweep (``--sweep``, a finished ``flops-fit demo`` folder) as the demo does
   (every method, ``holdout="forward"``) and scores its forecast: loss and N_opt errors, and
   whether each lies inside its interval (goals, issue 34: inside both, N_opt error <= 25%, loss
   error <= 3%). Writes ``OUT/score.json`` and prints a table. ``--truth-from`` scores against
   the truth runs a stored result recorded, without training.

The target runs are a test set: nothing in the fit reads them (the fit sees ``--sweep`` only).
Training is resumable (each arm is a sweep folder); ``--skip-train`` scores what is there.
About 15-25 minutes of training on 2 free cores for the truth, as much again for the arms.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from flops_fit.fitting import fit, load_runs
from flops_fit.sweeps.config import parse_config
from flops_fit.sweeps.demo import DEMOS
from flops_fit.sweeps.planner import Plan, plan

WIDTHS = (40, 48, 58, 70, 84, 102)  # 52k-290k parameters: the old forecast's interval and the old truth inside
INVERSE_WIDTH = {"lr_rule": "inverse-width", "base_lr": 1.46e-2, "base_width": 16}  # the rule the law replaced
INVERSE_WIDTHS = (40, 58, 84)
MULTIPLIERS = (0.5, 2.0)


TARGET: list[float] = []  # --target, where given


def target_budget() -> float:
    """The demo report's target: 10x its largest budget (``report.default_target``), or ``--target``."""
    return TARGET[0] if TARGET else 10 * max(DEMOS["gpt"]["sweep"]["budgets"])


def arm_plan(widths, hparams=None, law=None) -> tuple[Plan, object]:
    """The demo's setup at the target: its tuned law (or the law file ``law``) extrapolated as the
    demo's forecast assumes (``beyond = "extrapolate"``: the law's rates, each run's ``lr_source``
    saying how far past the tune's grid), or ``hparams`` (the inverse-width arm)."""
    demo = copy.deepcopy(DEMOS["gpt"])
    demo["sweep"].update(budgets=[target_budget()], sizes=list(widths))
    tuned = {**demo["hparams"], **({"tuned": str(law)} if law else {}), "beyond": "extrapolate"}
    demo["hparams"] = tuned if hparams is None else hparams
    config = parse_config(demo, "forecast target")
    return plan(config.options), config


def rates_plan(planned: Plan, width: int) -> Plan:
    """``planned``'s run at ``width`` at each of ``MULTIPLIERS`` times its rate (x1 is the run itself)."""
    base = next(r for r in planned.runs if r.size == width)
    runs = [dataclasses.replace(base, lr=base.lr * m, lr_source=f"x{m:g} {base.lr_source}", run_id="")
            for m in MULTIPLIERS]
    return Plan(runs, planned.options, planned.unit, planned.throughput, {})


def train(out: Path, widths, rate_width: int | None, workers: int, law=None, truth_folder="truth",
          truth_only: bool = False) -> None:
    truth, config = arm_plan(widths, law=law)
    arms = [(truth_folder, truth)]
    if rate_width is not None and not truth_only:
        arms.append(("rates", rates_plan(arm_plan(sorted({*widths, rate_width}), law=law)[0], rate_width)))
    if not truth_only:
        arms.append(("inverse-width", arm_plan(INVERSE_WIDTHS, INVERSE_WIDTH)[0]))
    for name, arm in arms:
        print(f"== {name}: {len(arm.runs)} runs at {target_budget():.3g} FLOPs", flush=True)
        arm.run(out / name, resume=True, executor=config.executor, workers=workers,
                executor_options=config.executor_options, show_progress=False, skip_parity=True)


def observed_optimum(frame) -> dict:
    """The truth: a parabola in log N through the three lowest runs (its vertex), and the lowest run."""
    f = frame.sort_values("params")
    n, loss = f["params"].to_numpy(float), f["loss"].to_numpy(float)
    i = int(np.argmin(loss))
    out = {"lowest_params": float(n[i]), "lowest_loss": float(loss[i]), "interior": 0 < i < len(n) - 1}
    if out["interior"]:
        x, y = np.log(n[i - 1 : i + 2]), loss[i - 1 : i + 2]
        c2, c1, c0 = np.polyfit(x, y, 2)
        vertex = -c1 / (2 * c2)
        out.update(n_opt=float(np.exp(vertex)), loss=float(c0 + c1 * vertex + c2 * vertex ** 2))
    else:
        out.update(n_opt=float(n[i]), loss=float(loss[i]))
    return out


def score(sweep: Path, out: Path, workers: int, bootstrap: int, stored: Path | None = None) -> dict:
    """Fit ``sweep`` as the demo does and score its forecast against the truth: the runs in
    ``out``'s truth folders, or the runs ``stored`` (a result file of this script) recorded."""
    if stored is not None:
        kept = json.loads(stored.read_text())
        truth_runs = kept["truth_runs"]
        truth = observed_optimum(pd.DataFrame(truth_runs))
        if not np.isclose(truth["loss"], kept["truth"]["loss"]) or not np.isclose(truth["n_opt"], kept["truth"]["n_opt"]):
            raise SystemExit(f"{stored}: its truth_runs do not give its recorded truth")
    else:
        truth = observed_optimum(pd.concat([load_runs(p).frame for p in sorted(out.glob("truth*"))]))
        truth_runs = sorted((r for p in sorted(out.glob("truth*")) for r in arm_runs(p)), key=lambda r: r["width"])
    fitted = fit(sweep, method="all", holdout="forward", bootstrap=bootstrap, workers=workers, tracking=False,
                 target=target_budget())
    fc = fitted.forecast
    result = {"target": target_budget(), "truth": truth, "forecast": fc.to_dict()}
    n, n_lo, n_hi = fc.n_opt
    loss, l_lo, l_hi = fc.loss
    result["score"] = {"loss_error": loss / truth["loss"] - 1, "n_opt_error": n / truth["n_opt"] - 1,
                       "loss_inside": bool(l_lo <= truth["loss"] <= l_hi),
                       "n_opt_inside": bool(n_lo <= truth["n_opt"] <= n_hi)}
    result["methods"] = {}
    for name, r in fitted.results.items():
        row = r.predict(target_budget()).iloc[0]
        result["methods"][name] = {"loss": float(row.loss), "n_opt": float(row.N_opt),
                                   "loss_error": float(row.loss) / truth["loss"] - 1,
                                   "n_opt_error": float(row.N_opt) / truth["n_opt"] - 1}
    result["truth_runs"] = truth_runs
    result["truth_source"] = str(stored) if stored is not None else str(out)
    for arm in ("rates", "inverse-width"):
        if stored is None and (out / arm / "runs.sqlite").exists():
            result[f"{arm}_runs"] = arm_runs(out / arm)
    result["goals"] = goals(result["score"])
    return result


def redecide(stored: Path) -> dict:
    """A scored result with its forecast decided again from its own chaining records and candidates'
    fits (``forecast.decide``, the shipped prior): the fits do not depend on the prior, so this is
    the forecast a fit would give now, without refitting."""
    from forecast_sweeps import stored_record

    from flops_fit.fitting.validation.chaining import Record
    from flops_fit.fitting.validation.forecast import decide

    result = json.loads(stored.read_text())
    old = result["forecast"]
    records = [Record(**stored_record(r)) for r in old["records"]]
    keys = [(c["method"], c["scale"], c["focus"]) for c in old["candidates"]]
    predictions = {(c["method"], c["scale"], c["focus"]): (c["target_loss"], c["target_n_opt"], c["target_d_opt"])
                   for c in old["candidates"] if c["target_loss"] is not None and c["target_n_opt"] is not None}
    reasons = {(c["method"], c["scale"], c["focus"]): c["reason"] for c in old["candidates"] if c["reason"]}
    fc = decide(records, predictions, old["target"], old["ratio"], keys=keys, reasons=reasons, level=old["level"])
    truth = result["truth"]
    result["forecast"] = fc.to_dict()
    n, n_lo, n_hi = fc.n_opt
    loss, l_lo, l_hi = fc.loss
    result["score"] = {"loss_error": loss / truth["loss"] - 1, "n_opt_error": n / truth["n_opt"] - 1,
                       "loss_inside": bool(l_lo <= truth["loss"] <= l_hi),
                       "n_opt_inside": bool(n_lo <= truth["n_opt"] <= n_hi)}
    result["goals"] = goals(result["score"])
    result["redecided_from"] = str(stored)
    return result


def goals(s: dict) -> dict:
    return {"inside_both": s["loss_inside"] and s["n_opt_inside"], "n_opt_error_within_25pct": abs(s["n_opt_error"]) <= 0.25,
            "loss_error_within_3pct": abs(s["loss_error"]) <= 0.03}


def arm_runs(folder: Path) -> list[dict]:
    """Each finished run's width, parameters, learning rate and held-out loss (read-only)."""
    with sqlite3.connect(f"file:{folder / 'runs.sqlite'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT size, params, spec, loss FROM runs WHERE status = 'done' ORDER BY size").fetchall()
    return [{"width": size, "params": params, "lr": json.loads(spec)["lr"], "loss": loss}
            for size, params, spec, loss in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", required=True, help="a finished `flops-fit demo` folder (the GPT demo)")
    parser.add_argument("--out", required=True, help="folder for the target runs and score.json")
    parser.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS))
    parser.add_argument("--rate-width", type=int, default=58, help="width for the x0.5 / x2 rate runs "
                        "(the one nearest the forecast's N_opt; 0 skips them)")
    parser.add_argument("--law", help="the tuned law the demo's setup trains at (default: the shipped "
                        "demo_hparams/gpt.json; benchmarks/results/gpt-law-v1.json is the law the stored truth and "
                        "the demo sweep it scores were trained with)")
    parser.add_argument("--truth-folder", default="truth", help="the truth arm's folder under OUT (widths trained "
                        "later go to another, e.g. truth-more: every OUT/truth* folder counts)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--redecide", help="a score.json of this script: decide its forecast again from its stored "
                        "chaining (after the prior changed) and score it; writes OUT/score.json")
    parser.add_argument("--truth-from", help="score against the truth runs a stored result recorded (e.g. "
                        "benchmarks/results/forecast_target_law2.json) instead of OUT's truth folders; implies "
                        "--skip-train")
    parser.add_argument("--train-only", action="store_true")
    parser.add_argument("--truth-only", action="store_true", help="train the truth arm only (no rate or "
                        "inverse-width arms)")
    parser.add_argument("--target", type=float, help="the budget to train the truth at and score the forecast "
                        "at (default 10x the demo's largest; a smaller sweep's own, e.g. 2.4e12 for its first 5 budgets)")
    args = parser.parse_args()
    TARGET[:] = [args.target] if args.target else []
    out = Path(args.out)
    if args.redecide:
        result = redecide(Path(args.redecide))
        out.mkdir(parents=True, exist_ok=True)
        (out / "score.json").write_text(json.dumps(result, indent=2, default=float))
        report(result)
        return
    stored = Path(args.truth_from) if args.truth_from else None
    if not args.skip_train and stored is None:
        train(out, args.widths, args.rate_width or None, args.workers, args.law, args.truth_folder, args.truth_only)
    if args.train_only:
        return
    result = score(Path(args.sweep), out, args.workers, args.bootstrap, stored)
    out.mkdir(parents=True, exist_ok=True)
    (out / "score.json").write_text(json.dumps(result, indent=2, default=float))
    report(result)


def report(result: dict) -> None:
    s, t, fc = result["score"], result["truth"], result["forecast"]
    print(f"truth at {result['target']:.3g} FLOPs: loss {t['loss']:.4f}, N_opt {t['n_opt']:,.0f}")
    print(f"forecast: loss {fc['loss']['value']:.4f} {fc['loss']['interval']} from {fc['loss']['source']}, "
          f"N_opt {fc['n_opt']['value']:,.0f} {fc['n_opt']['interval']} from {fc['n_opt']['source']}")
    print(f"loss error {100 * s['loss_error']:+.1f}% (inside: {s['loss_inside']}), "
          f"N_opt error {100 * s['n_opt_error']:+.0f}% (inside: {s['n_opt_inside']})")
    for name, m in result["methods"].items():
        print(f"  {name:12s} loss {100 * m['loss_error']:+6.1f}%  N_opt {100 * m['n_opt_error']:+5.0f}%")
    for arm in ("truth", "rates", "inverse-width"):
        for r in result.get(f"{arm}_runs", []):
            print(f"  {arm:13s} width {r['width']:4d} ({r['params']:,} params) lr {r['lr']:.3g}: loss {r['loss']:.4f}")


if __name__ == "__main__":
    main()
