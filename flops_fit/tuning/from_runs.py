"""``flops_fit.fit_rates``: the learning-rate law of a sweep the lab ran itself.

A tune trains its own grid; a lab often has one already: runs at several peak rates for each
(size, tokens[, batch]) cell, in a CSV, a tracker or a sweep folder. This module groups those
runs into cells, fits each cell's best rate (``tuning.cells``), every form of the law
(``tuning.forms``, Marin's through ``tuning.law``), chooses one as a tune does, and writes the
same ``hparams.json`` a tune writes, so ``hparams = "DIR"`` plans from it.

Repeated runs of one cell at one rate are averaged (their mean is the cell's measured loss
there). Cells are grouped into budgets by the ``budget`` column where the runs have one,
else each cell's own FLOPs: the forms' held-out score predicts the cells of the largest one.
``measured_excess`` reads a cell's loss at any rate from its own measured curve over rate
(linear in log rate between measured rates), not from a fitted parabola: what the held-out
check of ``benchmarks/bench_fit_rates.py`` reports.
"""

from __future__ import annotations

import datetime
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flops_fit._version import __version__
from flops_fit.errors import FitInputError
from flops_fit.files import write_atomically
from flops_fit.fitting import LOAD_OPTIONS, check_sampling
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.inputs import FLOPS_PER_PARAM_TOKEN, load_runs
from flops_fit.sweeps.tuned import FORMAT, HPARAMS_FILE, hparams_path
from flops_fit.tables import counted, format_table
from flops_fit.tuning.cells import BAND, CellFit, fit_cell
from flops_fit.tuning.forms import MAX_WIDTH, FormFit, Point, choose, fit_forms, form_rows
from flops_fit.tuning.law import LawFit, fit_batch_law, fit_law


@dataclass
class RateCell:
    """One (params, tokens[, batch]) cell of the runs: its variables and its fitted optimum."""

    params: float
    tokens: float
    batch: float | None
    flops: float
    budget: float
    nonembedding: float
    fit: CellFit
    run_ids: list[str]

    def values(self) -> dict[str, float]:
        return {"params": self.params, "tokens": self.tokens, "flops": self.flops,
                "nonembedding": self.nonembedding, "batch": self.batch or 1.0}

    def point(self, best_batch: bool = True) -> Point:
        return Point(self.values(), self.fit.lr_opt, self.fit.samples, self.budget, self.fit.loss_at,
                     self.fit.loss_opt, best_batch)

    def to_dict(self) -> dict[str, Any]:
        return {"params": self.params, "nonembedding": self.nonembedding, "tokens": self.tokens,
                "batch_size": self.batch, "flops": self.flops, "budget": self.budget, "scale": self.params,
                "runs": len(self.run_ids), **self.fit.to_dict()}


@dataclass
class RateFit:
    """What ``fit_rates`` found: the cells, every form (``forms``), the chosen law and the
    ``hparams.json`` content (``data``)."""

    cells: list[RateCell]
    law: LawFit  # Marin's form
    forms: dict[str, FormFit]
    chosen: str
    because: str
    data: dict[str, Any]
    source: str
    flops_per_param_token: float
    notes: list[str] = field(default_factory=list)  # what loading the runs left out, and why

    @property
    def law_form(self) -> FormFit:
        """The chosen form (what ``rate`` evaluates and the planner reads)."""
        return self.forms[self.chosen]

    def rate(self, params: float, tokens: float, batch: float | None = None, *,
             nonembedding: float | None = None, flops: float | None = None) -> float:
        """The chosen law's rate at ``params`` and ``tokens`` (and ``batch`` where the law uses it;
        FLOPs default to k * params * tokens with the runs' own k)."""
        form = self.law_form
        if "batch" in {v for v, c in form.exponents.items() if c.fitted} and batch is None:
            raise FitInputError(f"the {self.chosen} law's rate depends on the batch size: give batch=")
        values = {"params": float(params), "tokens": float(tokens), "batch": float(batch or 1.0),
                  "nonembedding": float(nonembedding if nonembedding is not None else params),
                  "flops": float(flops if flops is not None else self.flops_per_param_token * params * tokens)}
        return form.rate(values)

    def write(self, where: str | Path) -> Path:
        """Write ``hparams.json`` (into the folder ``where``, or to ``where`` if it ends in .json)."""
        path = hparams_path(where)
        _check_overwrite(path, self.source)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(fmt.json_safe(self.data), indent=2) + "\n"
        write_atomically(path, lambda p: p.write_text(text))
        return path

    def __str__(self) -> str:
        rows = [[fmt.count(c.params), fmt.count(c.tokens), "-" if c.batch is None else f"{c.batch:g}",
                 len(c.fit.rates), "-" if not c.fit.ok else fmt.with_interval(c.fit.lr_opt, c.fit.lr_lo, c.fit.lr_hi),
                 f"{c.fit.best_loss:.4f}", c.fit.reason or ""] for c in self.cells]
        used = sum(c.fit.ok for c in self.cells)
        lines = [f"{counted(len(self.cells), 'cell')} from {self.source}; {used} with their best rate inside the rates tried",
                 *(f"note: {note}" for note in self.notes),
                 format_table(rows, ["params", "tokens", "batch", "rates", "lr* [95%]", "best loss",
                                     "no optimum because"]),
                 "law forms (95% intervals of the exponents; held out: fitted without the largest budget, the loss "
                 "its cells' parabolas give at the predicted rate above their best):",
                 format_table(form_rows(self.forms), ["form", "exponent of", "estimate [95%]", "identified",
                                                      "held out"]),
                 f"chosen: {self.because}", f"law: {self.law_form.describe()}"]
        return "\n".join(lines)


def _check_overwrite(path: Path, source: str) -> None:
    """Refuse to replace a law that runs cannot give again: a tune's (the law of its trained grid) or one written
    by hand. A law fitted from runs (these or others, still where they were) is replaced."""
    if not path.is_file():
        return
    try:
        old = json.loads(path.read_text())
        from_runs = bool(old.get("tune", {}).get("from_runs"))
    except (ValueError, AttributeError, OSError):  # unreadable, or not a law
        from_runs = False
    if not from_runs:
        raise FitInputError(f"{path} holds a tune's law (or one written by hand), not one fitted from runs: write the "
                            f"law of {source} into another folder (--out), or remove the file to replace it")


def _cells(frame: pd.DataFrame, *, bootstrap: int, seed: int, level: float) -> list[RateCell]:
    keys = ["params", "tokens"] + (["batch"] if "batch" in frame else [])
    cells = []
    for key, group in frame.groupby(keys, sort=True):
        by_rate = group.groupby("lr")["loss"].mean()
        fit = fit_cell(list(by_rate.index), list(by_rate.values), bootstrap=bootstrap, seed=seed, level=level)
        params, tokens = float(key[0]), float(key[1])
        cells.append(RateCell(params, tokens, float(key[2]) if len(keys) == 3 else None,
                              float(group["flops"].mean()),
                              float(group["budget"].iloc[0]) if "budget" in group else float(group["flops"].mean()),
                              float(group["nonembedding"].mean()) if "nonembedding" in group else params,
                              fit, list(group["run_id"])))
    return cells


def _averaged(frame: pd.DataFrame) -> list[str]:
    """The note where a cell's rate was trained more than once with different losses (``_cells`` averages them):
    seeds, or a setting the fit does not read (a batch size not given as ``batch_col``), which mixes runs."""
    keys = ["params", "tokens"] + (["batch"] if "batch" in frame else []) + ["lr"]
    finite = frame[np.isfinite(frame["loss"])]
    groups = [(key, g["loss"]) for key, g in finite.groupby(keys, sort=True) if g["loss"].nunique() > 1]
    if not groups:
        return []
    (params, tokens, *_, lr), losses = groups[0]
    return [f"{len(groups)} rate(s) of a cell were trained more than once and their losses averaged (e.g. "
            f"{fmt.count(params)} x {fmt.count(tokens)} at lr {lr:.3g}: " + ", ".join(f"{v:.4g}" for v in losses[:4])
            + "): where those runs differ in a setting (a batch size, a corpus), fit them apart (--batch-col COLUMN, "
            "--where COLUMN=VALUE)"]


def _read(source: Any, *, lr_col: str, batch_col: str | None, nonembedding_col: str | None,
          load: dict[str, Any]) -> tuple[pd.DataFrame, str, list[str]]:
    """The runs as a frame with lr (and batch, nonembedding) beside load_runs' columns, their source's
    name and the notes loading them made (runs left out)."""
    unknown = sorted(set(load) - set(LOAD_OPTIONS) - {"metric"} | ({"all_rates"} & set(load)))
    if unknown:
        raise FitInputError(f"unknown option(s) {', '.join(unknown)}; fit_rates() also accepts "
                            f"{', '.join(o for o in LOAD_OPTIONS if o not in ('flops_per_param_token', 'all_rates'))}, metric")
    keep = {lr_col: "lr", **({batch_col: "batch"} if batch_col else {}),
            **({nonembedding_col: "nonembedding"} if nonembedding_col else {})}
    # a missing column is refused by load_runs, naming the source's own columns (not the fit's renamed ones)
    runs = load_runs(source, keep={column: f"{canonical}_col" for column, canonical in keep.items()},
                     all_rates=True, **load)
    frame = runs.frame.copy()
    notes, used = [], set()
    if runs.diverged is not None and len(runs.diverged):  # a rate that diverged bounds its cell's best
        rates = {c: pd.to_numeric(runs.diverged[c], errors="coerce") for c in keep}
        known = np.logical_and.reduce([np.isfinite(v) & (v > 0) for v in rates.values()])
        frame = pd.concat([frame, runs.diverged.loc[known]], ignore_index=True)
        # a store's diverged run trained no FLOPs it recorded: its cell's (so the cell's compute stays theirs)
        cell = frame.groupby(["params", "tokens"])["flops"].transform("mean")
        frame["flops"] = frame["flops"].fillna(cell).fillna(
            load["flops_per_param_token"] * frame["params"] * frame["tokens"])
        blown = runs.diverged.loc[known]
        used = set(blown["run_id"])
        if len(blown):  # said "left out" of these too, though each counts as its cell's rate that diverged
            named = "; ".join(f"{r.run_id}: {r.read_as}" for r in blown.iloc[:3].itertuples()) + \
                ("; ..." if len(blown) > 3 else "")
            notes.append(f"{len(blown)} run(s) have no finite loss (diverged) and count as their cells' rates that "
                         f"diverged: no parabola goes through them, and a best loss beside one reads as the optimum "
                         f"lying between them ({named})")
    diverged = set(runs.diverged["run_id"]) if runs.diverged is not None else set()
    crashed = [x for x in runs.excluded if str(x.get("reason", "")).startswith("status ")
               and x.get("run_id") not in diverged]
    if crashed:  # a crash (out of memory, a missing file) is no verdict on its rate: said apart from the diverged
        named = "; ".join(f"{x['run_id']}: {x['reason']}" for x in crashed[:3]) + ("; ..." if len(crashed) > 3 else "")
        notes.append(f"{len(crashed)} unfinished run(s) record no loss that blew up (no infinite or rising loss, no "
                     f"error naming one) and are left out, not read as their rates diverging ({named})")
    gone = used | {x.get("run_id") for x in crashed}
    notes += replace(runs, excluded=[x for x in runs.excluded if x.get("run_id") not in gone]).notes
    for column, canonical in keep.items():
        values = pd.to_numeric(frame[column], errors="coerce")
        if not (values.notna() & np.isfinite(values) & (values > 0)).all():
            raise FitInputError(f"{runs.source}: column {column!r} ({canonical}) must hold finite positive values "
                                f"in every run; drop or fix the runs without one")
        frame[canonical] = values.astype(float)
    return frame, runs.source, notes


def fit_rates(source: Any, *, lr_col: str = "lr", batch_col: str | None = None, nonembedding_col: str | None = None,
              model: str | None = None, bootstrap: int = 200, seed: int = 0, level: float = 0.95,
              flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN, **columns: Any) -> RateFit:
    """Fit the learning-rate law of runs swept over rates: ``source`` is anything
    ``load_runs`` reads (a CSV, a DataFrame, a sweep folder, a tracker's export), ``columns``
    its column options (``params_col``, ``tokens_col``, ``flops_col``, ``loss_col``,
    ``budget_col``, ``run_id_col``, ``metric``, the trackers' options). ``lr_col`` holds each
    run's peak rate; ``batch_col`` its batch size where batches were swept; ``nonembedding_col``
    its non-embedding parameters (Step Law's form). ``model``: the flops-fit model the law
    plans for (``hparams.json`` records it; None: any)."""
    level = check_sampling(bootstrap, seed, level)  # -1 wrote a law with no interval at all
    frame, name, notes = _read(source, lr_col=lr_col, batch_col=batch_col, nonembedding_col=nonembedding_col,
                               load={"flops_per_param_token": flops_per_param_token, **columns})
    cells = _cells(frame, bootstrap=bootstrap, seed=seed, level=level)
    notes += _averaged(frame)
    used = [c for c in cells if c.fit.ok]
    if len(used) < 2:  # the cells without an optimum named with why; every cell has one: too few cells swept
        failed = [c for c in cells if not c.fit.ok]
        reasons = "; ".join(f"{fmt.count(c.params)} x {fmt.count(c.tokens)}: {c.fit.reason}" for c in failed[:3])
        raise FitInputError(f"{name}: {len(used)} of {len(cells)} cells have their best rate inside the rates tried "
                            "(the law needs 2): " + (f"sweep at least 3 rates per (params, tokens) cell around its best "
                            f"({reasons}{'; ...' if len(failed) > 3 else ''})" if failed else "sweep the rates at a "
                            "second size or token count: one cell's best rate says nothing of how it moves with them"))
    batch_swept = "batch" in frame and frame["batch"].nunique() > 1
    law = _marin(used, batch_swept, bootstrap, seed)
    best: dict[tuple[float, float], RateCell] = {}
    for c in used:
        if (c.params, c.tokens) not in best or c.fit.loss_opt < best[(c.params, c.tokens)].fit.loss_opt:
            best[(c.params, c.tokens)] = c
    points = [c.point(best_batch=best[(c.params, c.tokens)] is c) for c in used]
    forms = fit_forms(points, law, lambda subset: _marin_points(subset, batch_swept), batch_swept=batch_swept,
                      bootstrap=bootstrap, seed=seed)
    chosen, because = choose(forms)
    batch_law = (fit_batch_law([c.flops for c in best.values()], [c.batch for c in best.values()],
                               bootstrap=bootstrap, seed=seed) if batch_swept else None)
    ratio = float(np.median(frame["flops"] / (frame["params"] * frame["tokens"])))
    data = _hparams(name, model, frame, cells, used, law, forms, chosen, because, batch_law,
                    {"bootstrap": bootstrap, "seed": seed, "band": BAND, "lr_col": lr_col})
    return RateFit(cells, law, forms, chosen, because, data, name, ratio, notes)


def _marin(cells: list[RateCell], batch_swept: bool, bootstrap: int, seed: int) -> LawFit:
    return fit_law([c.params for c in cells], [c.tokens for c in cells], [c.batch or 1.0 for c in cells],
                   [c.fit.lr_opt for c in cells], [c.fit.samples for c in cells], scale="params",
                   bootstrap=bootstrap, seed=seed, batch_swept=batch_swept)[0]


def _marin_points(points: list[Point], batch_swept: bool) -> LawFit:
    return fit_law([p.values["params"] for p in points], [p.values["tokens"] for p in points],
                   [p.values["batch"] for p in points], [p.lr_opt for p in points], [p.samples for p in points],
                   scale="params", bootstrap=0, batch_swept=batch_swept)[0]


def _hparams(name: str, model: str | None, frame: pd.DataFrame, cells: list[RateCell], used: list[RateCell],
             law: LawFit, forms: dict[str, FormFit], chosen: str, because: str, batch_law: dict[str, Any] | None,
             tune: dict[str, Any]) -> dict[str, Any]:
    """hparams.json as a tune writes it (``sweeps.tuned`` reads it), with ``source`` naming the runs.
    A law without a batch term and one batch size in the runs holds at that batch only."""
    form = forms[chosen]
    described = form.to_dict()
    batches = sorted(frame["batch"].unique()) if "batch" in frame else []
    if chosen == "marin":
        law_dict = {**law.to_dict(), "name": "marin", "exponents": described["exponents"]}
    else:
        law_dict = {"name": chosen, "form": described["form"], "scale": "params", "m": described["m"],
                    "coefficients": {"m": described["m"], **described["exponents"]},
                    "exponents": described["exponents"], "cells": form.cells, "rms_log": form.rms_log,
                    "notes": form.notes}
    law_dict["band"] = float(np.median([math.log(c.fit.band_hi / c.fit.lr_opt) for c in used]))
    points = [c.point() for c in used]
    variables = ("params", "tokens", "flops", "nonembedding") + (("batch",) if batches else ())
    return {
        "format": FORMAT, "model": model, "dataset": None, "source": name,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "flops-fit": __version__,
        "setup": {"batch_size": int(batches[0]) if len(batches) == 1 else None, "hparams": None,
                  "budgets": sorted({c.budget for c in cells})},
        "tune": {"from_runs": True, **tune},
        "law": law_dict, "chosen": chosen, "chosen_because": because, "identified_width": MAX_WIDTH,
        "forms": {n: f.to_dict() for n, f in forms.items()},
        "range": {v: [min(p.values[v] for p in points), max(p.values[v] for p in points)] for v in variables},
        "batch_law": batch_law, "beta2": None,
        "cells": [c.to_dict() | {"in_law": c.fit.ok} for c in cells],
        "holdout": None,
    }


def measured_loss(cell: RateCell, rate: float) -> float:
    """The cell's loss at ``rate`` read from its measured losses, linear in log rate between the two
    measured rates around it; NaN outside the rates measured (nothing there to read)."""
    pairs = [(math.log(r), v) for r, v in zip(cell.fit.rates, cell.fit.losses, strict=True) if math.isfinite(v)]
    if len(pairs) < 2:
        return math.nan
    x, y = zip(*pairs, strict=True)
    at = math.log(rate)
    if not min(x) - 1e-12 <= at <= max(x) + 1e-12:
        return math.nan
    return float(np.interp(at, x, y))


def measured_excess(cell: RateCell, rate: float) -> float:
    """(loss at ``rate`` on the cell's measured curve) / (its best measured loss) - 1."""
    return measured_loss(cell, rate) / cell.fit.best_loss - 1


def heldout_check(source: Any, *, held_flops: float, lr_col: str = "lr", batch_col: str | None = None,
                  nonembedding_col: str | None = None, bootstrap: int = 200, seed: int = 0,
                  **columns: Any) -> dict[str, Any]:
    """Fit the law on the cells below ``held_flops`` FLOPs, predict every cell at or above it,
    and read each one's loss at the predicted rate from its own measured curve."""
    frame, name, _ = _read(source, lr_col=lr_col, batch_col=batch_col, nonembedding_col=nonembedding_col,
                           load=columns)
    cell_flops = frame.groupby(["params", "tokens"])["flops"].transform("mean")
    train, held = frame.loc[cell_flops < held_flops], frame.loc[cell_flops >= held_flops]
    if train.empty or held.empty:
        raise FitInputError(f"{name}: held_flops={held_flops:g} leaves no cells on one side")
    fitted = fit_rates(train.reset_index(drop=True), batch_col="batch" if batch_col else None,
                       nonembedding_col="nonembedding" if nonembedding_col else None, bootstrap=bootstrap, seed=seed,
                       **({"budget_col": "budget"} if "budget" in train else {}))
    rows = []
    for c in _cells(held.reset_index(drop=True), bootstrap=0, seed=0, level=0.95):
        rate = fitted.rate(c.params, c.tokens, c.batch, nonembedding=c.nonembedding, flops=c.flops)
        excess = measured_excess(c, rate)
        finite = [i for i, v in enumerate(c.fit.losses) if math.isfinite(v)]
        by_form = {n: measured_excess(c, f.rate(c.values())) for n, f in fitted.forms.items() if f.exponents
                   and all(e.fitted for e in f.exponents.values())}
        rows.append({"params": c.params, "tokens": c.tokens, "flops": c.flops, "rates": c.fit.rates,
                     "losses": c.fit.losses, "predicted_lr": rate,
                     "excess_by_form": {n: None if math.isnan(v) else v for n, v in by_form.items()},
                     "best_lr": c.fit.rates[min(finite, key=lambda i: c.fit.losses[i])],
                     "loss_at_predicted": measured_loss(c, rate), "best_loss": c.fit.best_loss,
                     "excess": None if math.isnan(excess) else excess})
    return {"source": name, "held_flops": held_flops, "fitted_cells": len(fitted.cells),
            "fitted_cells_with_optimum": sum(c.fit.ok for c in fitted.cells), "chosen": fitted.chosen,
            "because": fitted.because, "law": fitted.law_form.describe(),
            "forms": {n: f.to_dict() for n, f in fitted.forms.items()}, "cells": rows}


__all__ = ["HPARAMS_FILE", "RateCell", "RateFit", "fit_rates", "heldout_check", "measured_excess", "measured_loss"]
