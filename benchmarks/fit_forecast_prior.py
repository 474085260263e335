"""Regenerate the forecast's shipped prior (flops_fit/fitting/validation/priors/forecast_prior.json).

    python benchmarks/fit_forecast_prior.py --cache benchmarks/results/forecast_chaining_v3.json

Forward-chains every candidate (method x focus x scale) on every public sweep in
../shared/data/ (``forecast_sweeps.PUBLIC``: nothing else, and never the demo or the runs
trained at its target), takes each (sweep, candidate)'s per-split slopes z_k = ln error / ln r
(``drift.split_slopes``), and fits the prior of each answer (``prior.fit_prior``): the scatter
s0 and its weight nu0, and the spread tau of drifts. The chaining is cached (``--cache``);
``bench_forecast_calibration.py`` reads the same cache and refits the prior without the sweep
it scores (leave one sweep out).

Then the reach laws that size the forecast's intervals (``reach_law``): the product's answers,
made with this prior, at every later budget of every outer split of those sweeps, scored against
the truths there (``forecast_sweeps.outcomes``), and per answer sigma(r) fitted on them, its
multiplier read from the answers' own scores |e| / (f sigma(r)) (``reach_law.fit_reach_law``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import forecast_sweeps as fs

from flops_fit.fitting.validation.drift import FIELDS, split_slopes
from flops_fit.fitting.validation.prior import POOLED, PRIOR_FILE, fit_priors, label, prior_to_dict

ROOT = Path(__file__).resolve().parents[1]


def units(chained: dict, field: str) -> dict[str, list[list[float]]]:
    """Per candidate label (method and focus), the per-split slopes of ``field`` of each of the
    sweep's candidates with that label (one per scale)."""
    records = fs.records_of(chained)
    out: dict[str, list[list[float]]] = {}
    for key in sorted({(r.method, r.scale, r.focus) for r in records}, key=str):
        mine = [r for r in records if (r.method, r.scale, r.focus) == key]
        out.setdefault(label(key[0], key[2]), []).append(list(split_slopes(mine, field).values()))
    return out


def priors_for(chains: dict[str, dict], leave_out: str | None = None) -> dict:
    """Each answer's priors (pooled and per label) from every sweep in ``chains`` except those of
    ``leave_out``'s study (``forecast_sweeps.STUDIES``)."""
    left = fs.study_of(leave_out) if leave_out is not None else None
    out = {}
    for q, field in FIELDS.items():
        merged: dict[str, list[list[float]]] = {}
        for name, c in chains.items():
            if left is None or fs.study_of(name) != left:
                for key, group in units(c, field).items():
                    merged.setdefault(key, []).extend(group)
        out[q] = fit_priors(merged)
    return out


def public_chains(cache: Path, workers: int) -> dict[str, dict]:
    sweeps = fs.public_sweeps()
    return {name: fs.cached_chain(name, runs, cache, workers) for name, runs in sweeps.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", default=str(fs.CACHE))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--spread", nargs="*", default=list(fs.SPREAD), metavar="ANSWER",
                        help="answers whose reach law reads the members' spread (the shipped: none; tried: loss)")
    parser.add_argument("--out", default=str(ROOT / "flops_fit" / "fitting" / "validation" / PRIOR_FILE))
    args = parser.parse_args()
    chains = public_chains(Path(args.cache), args.workers)
    if not chains:
        raise SystemExit("no public sweeps found under ../shared/data: nothing to fit the prior on")
    priors = priors_for(chains)
    sweeps = fs.public_sweeps()
    scored = {name: fs.outcomes(name, list(fs.outer_splits(sweeps[name], c)), fs.keys_of(c), priors)
              for name, c in chains.items() if c["records"]}
    laws = fs.reach_laws(scored, spread=tuple(args.spread))
    used = {name: sum(1 for g in units(c, "loss_error").values() for u in g if len(u) > 1) for name, c in chains.items()}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    provenance = {
        "sweeps": sorted(n for n, k in used.items() if k),
        "candidates_with_2_or_more_splits": used,
        "files": {f: list(names) for f, names in fs.FILES.items()},
        "data": "../shared/data/ (README there: sources, repositories and commits)",
        "method": "per (sweep, candidate), candidates labelled by method and focus: z_k = least-squares slope of ln(1 + error) on ln r per forward-chaining "
                  "split; s0, nu0 by the F-distribution marginal likelihood of the candidates' variances of z "
                  "(Smyth 2004); tau^2 = mean(zbar^2 - s0^2 / K) (method of moments); pooled over every candidate ('*') and per label with 3 or more pairs",
        "reach_laws": "per answer, the forecast's log errors on the sweeps above (answers made with this prior at every "
                      "later budget of every split with 2 or more inner splits): sigma(r)^2 = floor^2 + (slope ln r)^2 "
                      "by maximum likelihood, scaled by f from each answer's own chaining (reach_law.OWN_WEIGHTS); "
                      "scores |e| / (f sigma(r)) of the same answers, whose quantile is the multiplier k",
        "outcomes": {name: len(by["loss"]) for name, by in scored.items()},
        "command": "python benchmarks/fit_forecast_prior.py",
        "code_commit": commit.strip(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }
    Path(args.out).write_text(json.dumps(prior_to_dict(priors, provenance, laws), indent=2) + "\n")
    for q, by in priors.items():
        for name, p in by.items():
            print(f"{q} {'pooled' if name == POOLED else name}: s0 {p.s0:.4f} per ln r, nu0 {p.nu0:.2f}, tau {p.tau:.4f}")
    for q, law in laws.items():
        print(f"{q} reach law: floor {law.floor:.4f}, slope {law.slope:.4f} per ln r, k(95%) {law.multiplier(0.95):.2f} "
              f"from {len(law.scores)} scores, own weight {law.own_weight}")
    print(f"wrote {args.out} from {', '.join(provenance['sweeps'])}")


if __name__ == "__main__":
    main()
