"""Are the forecast's intervals calibrated, and narrow, where forecasts are used: beyond the sweep?

    python benchmarks/bench_forecast_calibration.py --demo /tmp/gptdemo --out calibration.json

For each sweep and each split C_k with at least two inner chaining splits (the forecast's minimum
evidence), the forecast answers from the budgets up to C_k alone at every larger budget C_j with an
observed optimum: its own forward chaining inside the split (truths re-observed on those runs),
each candidate fitted up to C_k, and the product's own decision (``forecast.decide``). The truth
at C_j is its own IsoFLOP minimum on the whole sweep (``holdout.observe``). The chaining is
computed once per sweep and cached (``forecast_sweeps``).

The prior a sweep's forecasts use, and the reach laws that size their intervals, are refitted
**without that sweep's study** (leave one study out: the three Chinchilla tables are one paper's
runs, the two (Mis)Fitting tables one lab's setup, the three Gadre corpora one study;
``forecast_sweeps.STUDIES``): a rule that only helps the sweeps it was fitted on is not a result.
The laws are fitted on the other studies' answers made with that same prior
(``forecast_sweeps.outcomes``). The demo's are the shipped prior and laws (public sweeps only).

Goals (issue 34): loss and N_opt coverage of the 95% intervals each >= 90%, median N_opt interval
hi/lo <= 3x, median loss interval width (hi/lo - 1) <= 6%, over every sweep and split. Reported
per sweep and pooled, for each way of answering (``forecast.MODES``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import forecast_sweeps as fs
import numpy as np
import pandas as pd
from fit_forecast_prior import priors_for, public_chains

from flops_fit.errors import FitInputError
from flops_fit.fitting import load_runs
from flops_fit.fitting.validation.drift import CARRY
from flops_fit.fitting.validation.forecast import MODES, PER_LABEL, decide
from flops_fit.fitting.validation.prior import shipped, shipped_laws
from flops_fit.fitting.validation.reach_law import ANSWERS, CAPPED

DEMO = "gpt demo"
GOALS = {"loss_coverage": 0.90, "n_opt_coverage": 0.90, "median_n_opt_ratio": 3.0, "median_loss_width": 0.06}


def calibrate(name: str, splits: list, keys: list, priors, level: float, modes=MODES, carry: str = CARRY,
              laws=None, per_label: bool = PER_LABEL) -> list[dict]:
    """The forecast of every outer split (``forecast_sweeps.outer_splits``, computed once) at each
    later budget, per mode, scored against the truth there."""
    rows = []
    for upto, inner, later in splits:
        for budget, (truth, predictions) in later.items():
            for mode in modes:
                row = {"sweep": name, "mode": mode, "fitted_upto": upto, "budget": budget, "ratio": budget / upto}
                try:
                    f = decide(inner, predictions, budget, budget / upto, keys=keys, level=level, priors=priors,
                               mode=mode, carry=carry, laws=laws, per_label=per_label)
                except FitInputError as exc:
                    rows.append({**row, "reason": str(exc)})
                    continue
                (loss, l_lo, l_hi), (n, n_lo, n_hi) = f.loss, f.n_opt
                rows.append({**row, "loss_source": f.answers["loss"].source, "n_opt_source": f.answers["n_opt"].source,
                             "loss": [loss, l_lo, l_hi], "n_opt": [n, n_lo, n_hi], "true_loss": truth.loss,
                             "true_n_opt": truth.n_opt, "loss_error": loss / truth.loss - 1,
                             "n_opt_error": n / truth.n_opt - 1, "loss_inside": bool(l_lo <= truth.loss <= l_hi),
                             "n_opt_inside": bool(n_lo <= truth.n_opt <= n_hi), "loss_width": l_hi / l_lo - 1,
                             "n_opt_ratio": n_hi / n_lo, "loss_correction": f.answers["loss"].correction,
                             "n_opt_correction": f.answers["n_opt"].correction})
    return rows


def summarise(rows: list[dict]) -> dict:
    answered = [r for r in rows if "reason" not in r]
    if not answered:
        return {"predictions": 0, "refused": len(rows)}
    f = pd.DataFrame(answered)
    out = {"predictions": len(f), "refused": len(rows) - len(f), "splits": int(f.fitted_upto.nunique()),
           "max_ratio": float(f.ratio.max()), "loss_coverage": float(f.loss_inside.mean()),
           "n_opt_coverage": float(f.n_opt_inside.mean()), "median_loss_width": float(f.loss_width.median()),
           "median_n_opt_ratio": float(f.n_opt_ratio.median()),
           "median_abs_loss_error": float(f.loss_error.abs().median()),
           "median_abs_n_opt_error": float(f.n_opt_error.abs().median())}
    out["goals_met"] = {k: bool(out[k] >= v if "coverage" in k else out[k] <= v) for k, v in GOALS.items()}
    return out


def per_sweep_mean(summaries: dict) -> dict:
    """Each sweep weighted alike (the pooled figures are dominated by the sweeps with most splits)."""
    keys = ("loss_coverage", "n_opt_coverage", "median_loss_width", "median_n_opt_ratio")
    have = [s for s in summaries.values() if s.get("predictions")]
    return {k: float(np.mean([s[k] for s in have])) for k in keys} if have else {}


def prepare(jobs: list, spread=fs.SPREAD) -> list:
    """(name, outer splits, keys, prior, reach laws of every answer) per job: the laws fitted without
    the job's study on the other public sweeps' answers made with the job's prior (the answers in
    ``spread`` reading their members' spread); the demo's the shipped ones."""
    prepared = [(name, list(fs.outer_splits(runs, chained)), fs.keys_of(chained), prior)
                for name, runs, chained, prior in jobs]
    out = []
    for name, splits, keys, prior in prepared:
        if name == DEMO:
            out.append((name, splits, keys, prior, shipped_laws()))
            continue
        scored = {other: fs.outcomes(other, s, k, prior) for other, s, k, _ in prepared
                  if other != DEMO and fs.study_of(other) != fs.study_of(name)}
        out.append((name, splits, keys, prior, fs.reach_laws(scored, spread=spread)))
    return out


def sweep_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the sweeps scored (``sweep_jobs``): the demo, its stored chaining, the cache."""
    parser.add_argument("--demo", help="a finished `flops-fit demo` folder (the GPT demo)")
    parser.add_argument("--demo-score", help="bench_forecast_target.py's score.json for --demo: its stored chaining "
                        "instead of chaining the demo again")
    parser.add_argument("--cache", default=str(fs.CACHE))


def demo_chain(score: Path) -> dict:
    """The demo's forward chaining as ``bench_forecast_target.py`` stored it with its forecast (the same
    ``forward_chain`` on the same runs: no need to fit it again)."""
    forecast = json.loads(score.read_text())["forecast"]
    records = [fs.stored_record(r) for r in forecast["records"]]
    return {"records": records, "keys": [[c["method"], c["scale"], c["focus"]] for c in forecast["candidates"]]}


def sweep_jobs(cache: Path, workers: int, demo_folder: str | None = None, demo_score: str | None = None):
    """(name, runs, chaining, prior) per sweep scored (the public ones with the prior fitted without
    their study, the demo with the shipped prior), and why the others are skipped."""
    chains = public_chains(cache, workers)
    sweeps = fs.public_sweeps()
    jobs, skipped = [], {}
    for name, chained in chains.items():
        if not chained["records"]:
            skipped[name] = chained.get("skipped", "no forward-chaining predictions")
            continue
        try:
            jobs.append((name, sweeps[name], chained, priors_for(chains, leave_out=name)))
        except FitInputError as exc:
            skipped[name] = f"no prior without its study: {exc}"
    if demo_folder:
        demo = load_runs(demo_folder)
        chained = (demo_chain(Path(demo_score)) if demo_score else
                   fs.cached_chain(f"gpt demo {Path(demo_folder).resolve()}", demo, cache, workers))
        jobs.append((DEMO, demo, chained, shipped()[0]))
    return jobs, skipped


REACH_BINS = (1, 2, 4, 8, 20, 50, 1000)


def by_reach(path: str, mode: str = "average") -> str:
    """A stored result's N_opt answers by reach C_j / C_k: how many, their median interval hi/lo, the
    share covered (a markdown table): where the intervals are too wide or too narrow."""
    rows = pd.DataFrame([r for r in json.loads(Path(path).read_text())["rows"] if r["mode"] == mode])
    rows = rows[rows.n_opt.notna()]
    bins = pd.cut(rows.ratio, REACH_BINS)
    lines = [f"| reach ({Path(path).name}) | predictions | median N_opt hi/lo | N_opt coverage |", "|---|---|---|---|"]
    for span, g in rows.groupby(bins, observed=True):
        lines.append(f"| {span.left:g}-{span.right:g}x | {len(g)} | {g.n_opt_ratio.median():.3g}x | "
                     f"{100 * g.n_opt_inside.mean():.0f}% |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sweep_arguments(parser)
    parser.add_argument("--out", default="calibration.json")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--spread", nargs="*", default=list(fs.SPREAD), metavar="ANSWER",
                        help="answers whose reach law reads the members' spread (the shipped: none; tried: loss). "
                        "The demo's laws are the shipped file's: refit it with fit_forecast_prior.py --spread too")
    parser.add_argument("--level", type=float, default=0.95)
    parser.add_argument("--by-reach", nargs="+", metavar="RESULT",
                        help="print stored results' N_opt answers by reach (no benchmark run)")
    args = parser.parse_args()
    if args.by_reach:
        print("\n\n".join(by_reach(p) for p in args.by_reach))
        law = shipped_laws()["n_opt"]
        print("\nthe shipped N_opt law's bounds on a 95% interval (hi/lo): "
              + ", ".join(f"{'at least' if r == 1 else 'at most'} {np.exp(2 * law.bounds(r, 0.95)[r > 1]):.3g}x "
                          f"at {r:g}x" for r in (1, 2, 10, 100)))
        return
    clock = time.perf_counter()
    jobs, skipped = sweep_jobs(Path(args.cache), args.workers, args.demo, args.demo_score)
    result = {"level": args.level, "goals": GOALS, "sweeps": {}, "all": {}, "skipped": skipped}
    rows = []
    for name, splits, keys, prior, laws in prepare(jobs, tuple(args.spread)):
        mine = calibrate(name, splits, keys, (prior, {"note": f"leave-one-study-out: fitted without {fs.study_of(name)}"}),
                         args.level, laws={q: law for q, law in laws.items() if q in ANSWERS + CAPPED})
        rows += mine
        result["sweeps"][name] = {mode: summarise([r for r in mine if r["mode"] == mode]) for mode in MODES}
        result["sweeps"][name]["prior"] = {q: {k: vars(p) for k, p in by.items()} for q, by in prior.items()}
        if name != DEMO:
            result["sweeps"][name]["reach_laws"] = {q: {k: v for k, v in law.to_dict().items() if k != "scores"}
                                                   for q, law in laws.items()}
    for mode in MODES:
        result["all"][mode] = summarise([r for r in rows if r["mode"] == mode])
        result["all"][mode]["per_sweep_mean"] = per_sweep_mean({n: v[mode] for n, v in result["sweeps"].items()})
    result["rows"] = rows
    result["seconds"] = time.perf_counter() - clock
    Path(args.out).write_text(json.dumps(result, indent=1, default=float))
    print(f"{'sweep':44s} {'mode':8s} {'preds':>5s} {'splits':>6s} {'max r':>6s} {'loss cov':>8s} {'N cov':>6s} "
          f"{'loss width':>10s} {'N hi/lo':>7s} {'|loss err|':>10s} {'|N err|':>7s}")
    table = [(n, m, v[m]) for n, v in result["sweeps"].items() for m in MODES] + \
            [("all (pooled)", m, result["all"][m]) for m in MODES]
    for name, mode, s in table:
        if not s.get("predictions"):
            print(f"{name:44s} {mode:8s} no predictions ({s.get('refused', 0)} refused)")
            continue
        print(f"{name:44s} {mode:8s} {s['predictions']:5d} {s['splits']:6d} {s['max_ratio']:6.1f} "
              f"{100 * s['loss_coverage']:7.0f}% {100 * s['n_opt_coverage']:5.0f}% {100 * s['median_loss_width']:9.1f}% "
              f"{s['median_n_opt_ratio']:6.2f}x {100 * s['median_abs_loss_error']:9.2f}% "
              f"{100 * s['median_abs_n_opt_error']:6.1f}%")
    print("\n| sweep | mode | predictions (splits, max ratio) | loss coverage | N_opt coverage | median loss width | "
          "median N_opt hi/lo | median abs loss error | median abs N_opt error |\n|---|---|---|---|---|---|---|---|---|")
    for name, why in skipped.items():
        print(f"| {name} | - | none: {why} | | | | | | |")
    for name, mode, s in table:
        if s.get("predictions"):
            print(f"| {name} | {mode} | {s['predictions']} ({s['splits']}, {s['max_ratio']:.3g}x) | "
                  f"{100 * s['loss_coverage']:.0f}% | {100 * s['n_opt_coverage']:.0f}% | {100 * s['median_loss_width']:.1f}% | "
                  f"{s['median_n_opt_ratio']:.2f}x | {100 * s['median_abs_loss_error']:.2f}% | "
                  f"{100 * s['median_abs_n_opt_error']:.1f}% |")


if __name__ == "__main__":
    main()
