"""The sweeps the forecast is validated on, and their forward chaining, computed once and cached.

Used by ``fit_forecast_prior.py`` (the shipped prior: public sweeps only) and
``bench_forecast_calibration.py`` (coverage and width, leave-one-sweep-out). The expensive part of
a forecast is fitting every candidate on every split; ``chain`` does it once per sweep (point
fits, the product's own ``chaining.forward_chain``) and stores every prediction, so that each
outer split's forecast (``outer_splits``) is the product's own ``forecast.decide`` on the records
that split could have seen, with its truths re-observed on the runs up to that split.

Public sweeps (../shared/data/, README there): the three IsoFLOP sweeps of isoflops_public.csv
(every run; the source's outlier flags ignored), Chinchilla's Figure 4 runs (Epoch's extraction;
budgets by rounding FLOPs to one significant figure, the 5 highest losses excluded as in Epoch's
fit), gadre_overtraining.csv (c4_val loss, per training corpus; budgets by rounding FLOPs) and
misfitting_lr_runs.csv (each (model, tokens) cell's best peak learning rate; budgets by rounding).
An IsoFLOP sweep of more than MAX_BUDGETS budgets is thinned to every k-th (``thinned``; the
sweeps with budgets by rounding keep every run: their budgets are the rounding's, not a design's).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting import APPROACHES, load_runs
from flops_fit.fitting.laws.profiles import budget_groups
from flops_fit.fitting.scales import SCALES, rescale, to_params
from flops_fit.fitting.validation.chaining import Record, focus_of, forward_chain, point, variants
from flops_fit.fitting.validation.drift import FIELDS
from flops_fit.fitting.validation.forecast import answer_chaining, decide, members_spread
from flops_fit.fitting.validation.holdout import observe
from flops_fit.fitting.validation.reach_law import OWN_WEIGHTS, SPREAD, Outcome, fit_reach_law

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
# The public sweeps' forward chaining as today's fits make it (fit_forecast_prior.py writes it when absent)
CACHE = Path(__file__).resolve().parent / "results" / "forecast_chaining_v3.json"
MAX_BUDGETS = 13
PUBLIC = ("epochai_chinchilla__massivetext__chinchilla", "ml_scalefit__massivetext__chinchilla",
          "misfitting__fineweb_c4__transformer", "epoch chinchilla fig4", "gadre c4_original", "gadre rpj",
          "gadre rw_original", "misfitting lr cells")
# Sweeps of one study share runs or setup (the three Chinchilla tables are extractions of one paper's
# runs): leave-one-out validation leaves out the whole study, not one of its tables.
STUDIES = {"chinchilla": PUBLIC[:2] + PUBLIC[3:4], "misfitting": (PUBLIC[2], PUBLIC[7]), "gadre": PUBLIC[4:7]}
FILES = {"isoflops_public.csv": PUBLIC[:3], "chinchilla_fig4_epoch.csv": PUBLIC[3:4],
         "gadre_overtraining.csv": PUBLIC[4:7], "misfitting_lr_runs.csv": PUBLIC[7:]}


def study_of(name: str) -> str:
    return next((study for study, names in STUDIES.items() if name in names), name)


def public_sweeps() -> dict:
    """Every public sweep as Runs (empty if ../shared/data is absent), the IsoFLOP ones thinned."""
    return {name: thinned(runs) if name in FILES["isoflops_public.csv"] else runs
            for name, runs in _public_sweeps().items()}


def _public_sweeps() -> dict:
    out = {}
    public = DATA / "isoflops_public.csv"
    if public.exists():
        frame = pd.read_csv(public)
        for name, group in frame.groupby("experiment"):
            out[name] = load_runs(group[["params", "tokens", "budget", "loss"]].reset_index(drop=True))
    epoch = DATA / "chinchilla_fig4_epoch.csv"
    if epoch.exists():
        out["epoch chinchilla fig4"] = load_runs(str(epoch), params_col="Model Size", flops_col="Training FLOP",
                                                 loss_col="loss", exclude_top=5)
    gadre = DATA / "gadre_overtraining.csv"
    if gadre.exists():
        frame = pd.read_csv(gadre)
        frame = frame[frame.eval_data == "c4_val"]
        for corpus, group in frame.groupby("train_data"):
            out[f"gadre {corpus}"] = load_runs(pd.DataFrame({"params": group.params.astype(float),
                                                             "tokens": group.tokens.astype(float),
                                                             "loss": group.loss.astype(float)}))
    cells = DATA / "misfitting_lr_runs.csv"
    if cells.exists():
        frame = pd.read_csv(cells)
        best = frame.loc[frame.groupby(["model", "D"])["loss"].idxmin()]
        out["misfitting lr cells"] = load_runs(pd.DataFrame({"params": best.N.astype(float),
                                                             "tokens": best.D.astype(float),
                                                             "loss": best.loss.astype(float)}))
    return out


def candidates() -> list:
    """Every method x focus, point fits (as ``forecast.forecasts`` chains them)."""
    approaches = [a.configured(bootstrap=0, seed=0, level=0.95, curve="slice", focus="all") for a in APPROACHES.values()]
    return [point(v) for a in approaches for v in variants(a)]


def thinned(runs):
    """The sweep with at most MAX_BUDGETS budgets: every k-th budget counted down from the largest
    (k = ceil(n / MAX_BUDGETS)), the others' runs left out. Forward chaining refits every candidate
    once per budget; on 2 shared cores 26-31 budgets cost too much, and budgets a factor 1.25
    apart add little reach. A rule fixed before any result, the same for every sweep."""
    budgets, _ = budget_groups(runs)
    unique = sorted(float(b) for b in np.unique(budgets))
    step = -(-len(unique) // MAX_BUDGETS)
    if step == 1:
        return runs
    keep = set(unique[::-1][::step])
    return runs.subset(np.isin(budgets, list(keep)))


def interior_budgets(runs) -> list[float]:
    budgets, _ = budget_groups(runs)
    unique = sorted(float(b) for b in np.unique(budgets))
    return [b for b in unique if observe(runs, budgets, b, curve="slice", bootstrap=0, seed=None,
                                         level=0.95).reason is None]


def chain(runs, workers: int) -> dict:
    """The sweep's forward chaining on every scale the runs allow: records with predictions. A sweep
    with fewer than 2 budgets with an interior minimum beyond its first two has nothing to predict."""
    clock = time.perf_counter()
    budgets, _ = budget_groups(runs)
    unique = sorted(float(b) for b in np.unique(budgets))
    inside = interior_budgets(runs)
    if len([b for b in inside if b > unique[1]]) < 2:
        return {"records": [], "keys": [], "reasons": [], "seconds": time.perf_counter() - clock,
                "skipped": f"{len(inside)} of its {len(unique)} budgets have an interior minimum "
                           f"({', '.join(f'{b:.3g}' for b in inside) or 'none'}): nothing to forward-chain"}
    options = candidates()
    records, reasons = forward_chain(options, runs, tuple(SCALES), curve="slice", workers=workers)
    keys = [(v.name, s, focus_of(v)) for s in SCALES for v in options]
    return {"records": [asdict(r) for r in records], "keys": keys,
            "reasons": [[list(k), v] for k, v in reasons.items()], "seconds": time.perf_counter() - clock}


def cached_chain(name: str, runs, cache: Path, workers: int) -> dict:
    """``chain`` of the sweep, read from ``cache`` (a JSON file per sweep name) when there."""
    data = json.loads(cache.read_text()) if cache.exists() else {}
    if name not in data:
        print(f"chaining {name} ({len(runs)} runs) ...", flush=True)
        data[name] = chain(runs, workers)
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(data, default=float))
        print(f"  {len(data[name]['records'])} records in {data[name]['seconds']:.0f} s", flush=True)
    return data[name]


def stored_record(data: dict) -> dict:
    """A record as ``Forecast.to_dict`` stored it: JSON null back to NaN in its numbers (a focus of
    None stays None: the candidate's key says None, and a NaN focus would match no key)."""
    return {k: (np.nan if v is None and k != "focus" else v) for k, v in data.items()}


def records_of(chained: dict) -> list[Record]:
    return [Record(**r) for r in chained["records"]]


def keys_of(chained: dict) -> list[tuple]:
    return [tuple(k) for k in chained["keys"]]


def outer_splits(runs, chained: dict, min_inner: int = 2):
    """Per outer split C_k with ``min_inner`` or more inner splits: (C_k, inner records re-scored
    against truths observed on the runs up to C_k, {budget: (truth, {key: (loss, N params, nan)})})."""
    budgets, _ = budget_groups(runs)
    unique = sorted(float(b) for b in np.unique(budgets))
    records = records_of(chained)
    truths = {b: observe(runs, budgets, b, curve="slice", bootstrap=0, seed=None, level=0.95) for b in unique}
    fits = sorted({r.fitted_upto for r in records})
    for upto in fits:
        inner_fits = [f for f in fits if f < upto]
        later = [b for b in unique if b > upto and truths[b].reason is None]
        if len(inner_fits) < min_inner or not later:
            continue
        inner = _rescored([r for r in records if r.fitted_upto < upto and r.budget <= upto], runs, budgets, upto)
        if len({r.fitted_upto for r in inner}) < min_inner:
            continue
        subsets = {}
        predictions = {b: {} for b in later}
        for r in records:
            if r.fitted_upto == upto and r.budget in predictions:
                if r.scale not in subsets:
                    subsets[r.scale] = rescale(runs.subset(budgets <= upto), r.scale)
                n = float(to_params(subsets[r.scale], np.array([r.predicted_n_opt]))[0])
                predictions[r.budget][(r.method, r.scale, r.focus)] = (r.predicted_loss, n, np.nan)
        yield upto, inner, {b: (truths[b], predictions[b]) for b in later if predictions[b]}


def _rescored(records: list[Record], runs, budgets, upto: float) -> list[Record]:
    """The records with their errors against each budget's optimum observed on the runs up to ``upto``."""
    keep = budgets <= upto
    out, seen, scaled = [], {}, {}
    for r in records:
        if r.scale not in scaled:
            scaled[r.scale] = rescale(runs.subset(keep), r.scale)
        if (r.scale, r.budget) not in seen:
            sub_budgets, _ = budget_groups(scaled[r.scale])
            seen[(r.scale, r.budget)] = observe(scaled[r.scale], sub_budgets, r.budget, curve="slice", bootstrap=0,
                                                seed=None, level=0.95)
        o = seen[(r.scale, r.budget)]
        if o.reason is None:
            out.append(Record(**{**asdict(r), "loss_error": r.predicted_loss / o.loss - 1,
                                 "n_opt_error": r.predicted_n_opt / o.n_opt - 1}))
    return out


def outcomes(name: str, splits: list, keys: list, priors) -> dict[str, list[Outcome]]:
    """Per answer, the product's answer (``forecast.decide``, its point only: the interval plays no
    part) at every later budget of every outer split (``outer_splits``, computed once), scored
    against the truth there, with the same answer's chaining inside the split."""
    out = {q: [] for q in FIELDS}
    for upto, inner, later in splits:
        for budget, (truth, predictions) in later.items():
            try:
                f = decide(inner, predictions, budget, budget / upto, keys=keys, priors=(priors, {}), laws={})
            except FitInputError:
                continue
            for q, field in FIELDS.items():
                a, true = f.answers[q], truth.loss if q == "loss" else truth.n_opt
                out[q].append(Outcome(name, budget / upto, float(np.log(a.value / true)),
                                      tuple(answer_chaining(inner, a.members, field)),
                                      members_spread(a.members, f.candidates, q)))
    return out


def reach_laws(scored: dict[str, dict[str, list[Outcome]]], answers=tuple(FIELDS), spread=SPREAD) -> dict:
    """The reach law of each of ``answers`` from the outcomes of every sweep in ``scored`` (those in
    ``spread`` reading the members' spread: ``reach_law.SPREAD``)."""
    return {q: fit_reach_law([o for by in scored.values() for o in by[q]], OWN_WEIGHTS[q], q in spread)
            for q in answers}
