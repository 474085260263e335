"""``flops_fit.tune``: find the learning-rate law of a sweep before the sweep.

Train the sweep's runs at its smallest budgets at several multipliers of its own rate
(``tuning.grid``; a sweep like any other, into ``out_dir``), fit each cell's best rate
(``tuning.cells``), fit the law across cells (``tuning.law``), and write
``out_dir/hparams.json`` (what ``hparams = "DIR"`` reads, ``sweeps.tuned``) and
``out_dir/report.html``. ``holdout="largest"`` fits the law without the largest cell,
trains that cell once at the rate the law predicts (its own one-run sweep in
``out_dir/holdout-<run>``) and compares its loss with the best of the cell's own runs.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flops_fit._version import __version__
from flops_fit.errors import FitInputError, OptionError
from flops_fit.files import write_atomically
from flops_fit.fitting import formatting as fmt
from flops_fit.plugin import api
from flops_fit.store.run_store import RunStore
from flops_fit.store.runs import RunSpec
from flops_fit.sweeps.config import SweepConfig, load_config, parse_config
from flops_fit.sweeps.driver import run_plan
from flops_fit.sweeps.hparams import WIDTH_PARAMS
from flops_fit.sweeps.options import SweepOptions
from flops_fit.sweeps.planner import Plan
from flops_fit.sweeps.tuned import FORMAT, HPARAMS_FILE
from flops_fit.tables import format_table
from flops_fit.tuning.cells import BAND, CellFit, fit_cell
from flops_fit.tuning.grid import DEFAULT_MULTIPLIERS, check_grid, tune_plan
from flops_fit.tuning.law import LawFit, fit_batch_law, fit_law
from flops_fit.tuning.report import write_tune_report

HOLDOUTS = ("largest",)
GOAL = 0.005  # the held-out cell's loss at the predicted rate: within 0.5% of its best


@dataclass
class Cell:
    """One (size, tokens, batch, beta2) cell: what it is and its fitted optimum."""

    size: int
    params: int
    scale: float  # width, or parameters
    tokens: int
    batch_size: int
    beta2: float
    flops: float
    fit: CellFit
    specs: list[RunSpec]

    @property
    def key(self) -> tuple[int, int]:
        return (self.size, self.tokens)

    @property
    def largeness(self) -> tuple[float, int, int]:
        """Order of "largest": the budget (the runs' FLOPs agree only to a sequence), then the size."""
        budget = self.specs[0].budget if self.specs else self.flops
        return (budget, self.params, self.tokens)

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "params": self.params, "scale": self.scale, "tokens": self.tokens,
                "batch_size": self.batch_size, "beta2": self.beta2, "flops": self.flops, **self.fit.to_dict()}


@dataclass
class TuneResult:
    """What a tune found: its cells, its law (and B*(C)), the held-out check, and its files."""

    out_dir: Path
    cells: list[Cell]
    law: LawFit
    data: dict[str, Any]
    report: Path | None = None

    @property
    def hparams_path(self) -> Path:
        return self.out_dir / HPARAMS_FILE

    @property
    def holdout(self) -> dict[str, Any] | None:
        return self.data.get("holdout")

    def __str__(self) -> str:
        rows = [[c.size, f"{c.params:,}", f"{c.tokens:,}", c.batch_size, f"{c.beta2:g}",
                 "-" if not c.fit.ok else fmt.with_interval(c.fit.lr_opt, c.fit.lr_lo, c.fit.lr_hi),
                 "-" if not c.fit.ok else f"[{c.fit.band_lo:.3g}, {c.fit.band_hi:.3g}]",
                 f"{c.fit.best_loss:.4f}", c.fit.reason or ""] for c in self.cells]
        lines = [format_table(rows, ["size", "params", "tokens", "batch", "beta2", "lr*", "0.5% band",
                                     "best loss", "no optimum because"]),
                 f"law: {self.law.describe()} (rms {self.law.rms_log:.3f} in log lr over {self.law.cells} cells)"]
        lines += [f"  {n}" for n in self.law.notes]
        if self.data.get("batch_law"):
            b = self.data["batch_law"]
            lines.append(f"batch law: B* = {b['k']:.4g} * C^{b['e']:.3g} [{b['e_lo']:.3g}, {b['e_hi']:.3g}]")
        if self.holdout:
            lines.append(describe_holdout(self.holdout))
        lines.append(f"wrote {self.hparams_path}" + (f" and {self.report}" if self.report else ""))
        return "\n".join(lines)


def describe_holdout(h: dict[str, Any]) -> str:
    return (f"held-out cell (size {h['size']}, {h['tokens']:,} tokens): law without it predicts lr {h['predicted_lr']:.3g} "
            f"(band [{h['band'][0]:.3g}, {h['band'][1]:.3g}]); loss there {h['loss']:.4f} vs the cell's best "
            f"{h['best_loss']:.4f} ({100 * h['excess']:+.2f}%, goal within {100 * GOAL:g}%: "
            f"{'met' if h['within_goal'] else 'missed'}); the cell's own optimum {h['cell_lr_opt']:.3g} is "
            f"{'inside' if h['optimum_in_band'] else 'outside'} the predicted band")


def _config(spec: Any) -> SweepConfig:
    if isinstance(spec, SweepConfig):
        return spec
    if isinstance(spec, SweepOptions):
        return SweepConfig(spec)
    if isinstance(spec, Mapping):
        return parse_config(dict(spec), "tune spec")
    if isinstance(spec, (str, Path)):
        return load_config(spec)
    raise OptionError(f"spec must be a sweep file, a sweep configuration mapping or SweepOptions, got {spec!r}")


def tune(spec: Any, out_dir: str | Path = "flops-fit-tune", *, budgets: int | list[float] | None = None,
         sizes: list[int] | None = None, multipliers: list[float] = DEFAULT_MULTIPLIERS,
         batch_sizes: list[int] | None = None, beta2s: list[float] | None = None, holdout: str | None = None,
         bootstrap: int = 200, seed: int = 0, resume: bool = False, executor: str | None = None,
         workers: int | None = None, executor_options: dict[str, Any] | None = None, skip_parity: bool = False,
         skip_preflight: bool = False, show_progress: bool = True, report: bool = True,
         host: Any = None) -> TuneResult:
    """Tune the learning rate of the sweep ``spec`` (a sweep file, its mapping, or
    ``SweepOptions``): its runs at its ``budgets`` smallest budgets (default 2; or these budgets), on
    ``sizes`` (default: every size planned there), each at every multiplier of its own rate
    (and each of ``batch_sizes`` / ``beta2s``). Writes ``out_dir/hparams.json`` and the report."""
    config = _config(spec)
    if holdout not in (None, *HOLDOUTS):
        raise OptionError(f"holdout must be one of {list(HOLDOUTS)} (or left out), got {holdout!r}")
    grid = check_grid(config.options, budgets, sizes, multipliers, batch_sizes, beta2s)
    plan = tune_plan(config.options, grid, host=host)
    out = Path(out_dir)
    run = {"executor": executor or config.executor, "workers": workers if workers is not None else
           config.executor_options.get("workers", 1),
           "executor_options": {**{k: v for k, v in config.executor_options.items() if k != "workers"},
                                **(executor_options or {})},
           "skip_parity": skip_parity, "skip_preflight": skip_preflight, "show_progress": show_progress,
           "host": host}
    run_plan(plan, out, resume=resume, **run)
    cells = collect_cells(out, plan, bootstrap=bootstrap, seed=seed, host=host)
    result = fit_tune(out, plan, cells, grid, bootstrap=bootstrap, seed=seed)
    if holdout:
        result.data["holdout"] = check_holdout(out, plan, result, bootstrap=bootstrap, seed=seed,
                                               resume_run=run)
    text = json.dumps(fmt.json_safe(result.data), indent=2) + "\n"
    write_atomically(result.hparams_path, lambda path: path.write_text(text))
    if report:
        result.report = write_tune_report(result, out)
    return result


def collect_cells(out: Path, plan: Plan, *, bootstrap: int, seed: int, host: Any = None) -> list[Cell]:
    """The stored runs grouped into cells, each cell's optimum fitted."""
    with RunStore(out) as store:
        frame = store.runs_frame()
    loss = dict(zip(frame.run_id, frame.loss))
    entry = api.model_info(plan.runs[0].model, host=host)
    width_like = entry.size_param in WIDTH_PARAMS
    groups: dict[tuple, list[RunSpec]] = {}
    for spec in plan.runs:
        groups.setdefault((spec.size, spec.tokens, spec.batch_size, spec.beta2), []).append(spec)
    cells = []
    for (size, tokens, batch, beta2), specs in sorted(groups.items()):
        rates = [s.lr for s in specs]
        losses = [float(loss.get(s.run_id, math.nan)) for s in specs]
        first = specs[0]
        cells.append(Cell(size, first.params, float(size if width_like else first.params), tokens, batch, beta2,
                          first.flops, fit_cell(rates, losses, bootstrap=bootstrap, seed=seed), specs))
    return cells


def _best_beta2(cells: list[Cell]) -> float:
    """The beta2 whose cells reach the lowest mean best loss (only cells every beta2 measured)."""
    by = {}
    for c in cells:
        by.setdefault(c.beta2, {})[(c.size, c.tokens, c.batch_size)] = c.fit.best_loss
    common = set.intersection(*(set(v) for v in by.values()))
    return min(by, key=lambda b: float(np.nanmean([by[b][k] for k in common])) if common else math.inf)


def _law_cells(cells: list[Cell], beta2: float) -> list[Cell]:
    return [c for c in cells if c.beta2 == beta2 and c.fit.ok]


def law_from(cells: list[Cell], *, scale: str, batch_swept: bool, bootstrap: int, seed: int):
    if not cells:
        raise FitInputError("no cell has its best rate inside the multipliers: widen them (the report and "
                            "`flops-fit status` show each cell's losses)")
    return fit_law([c.scale for c in cells], [c.tokens for c in cells], [c.batch_size for c in cells],
                   [c.fit.lr_opt for c in cells], [c.fit.samples for c in cells], scale=scale,
                   bootstrap=bootstrap, seed=seed, batch_swept=batch_swept)


def _band(cells: list[Cell]) -> float:
    """The median half-width, in log rate, of the cells' near-optimal bands."""
    return float(np.median([math.log(c.fit.band_hi / c.fit.lr_opt) for c in cells]))


def fit_tune(out: Path, plan: Plan, cells: list[Cell], grid: dict[str, Any], *, bootstrap: int,
             seed: int) -> TuneResult:
    """The law (and B*(C)) from the cells, and hparams.json's content."""
    beta2 = _best_beta2(cells)
    used = _law_cells(cells, beta2)
    batch_swept = bool(grid["batch_sizes"]) and len(grid["batch_sizes"]) > 1
    scale = "width" if cells[0].scale == cells[0].size and cells[0].size != cells[0].params else "params"
    bad = [c for c in cells if not c.fit.ok]
    try:
        law, _ = law_from(used, scale=scale, batch_swept=batch_swept, bootstrap=bootstrap, seed=seed)
    except FitInputError as exc:
        reasons = "; ".join(f"size {c.size} x {c.tokens:,} tokens: {c.fit.reason}" for c in bad[:3])
        raise FitInputError(f"{exc} ({reasons})") from None
    batch_law = None
    if batch_swept:
        best: dict[tuple[int, int], Cell] = {}
        for c in used:
            if c.key not in best or c.fit.loss_opt < best[c.key].fit.loss_opt:
                best[c.key] = c
        batch_law = fit_batch_law([c.flops for c in best.values()], [c.batch_size for c in best.values()],
                                  bootstrap=bootstrap, seed=seed)
    options = plan.options
    data = {
        "format": FORMAT, "model": options.model, "dataset": options.dataset,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "flops-fit": __version__,
        "setup": {"model_config": options.model_config, "dataset_config": options.dataset_config,
                  "seq_len": options.seq_len, "batch_size": options.batch_size, "schedule": options.schedule,
                  "budgets": list(grid["budgets"]), "centre": plan.runs[0].lr_source.partition(" ")[2],
                  "hparams": options.hparams.to_dict()},
        "tune": {"multipliers": list(grid["multipliers"]), "sizes": grid["sizes"] and list(grid["sizes"]),
                 "batch_sizes": grid["batch_sizes"] and list(grid["batch_sizes"]),
                 "beta2s": grid["beta2s"] and list(grid["beta2s"]), "bootstrap": bootstrap, "seed": seed,
                 "band": BAND},
        "law": {**law.to_dict(), "band": _band(used)},
        "batch_law": batch_law,
        "beta2": beta2,
        "cells": [c.to_dict() | {"in_law": c in used} for c in cells],
        "holdout": None,
    }
    return TuneResult(out, cells, law, data)


def check_holdout(out: Path, plan: Plan, result: TuneResult, *, bootstrap: int, seed: int,
                  resume_run: dict[str, Any]) -> dict[str, Any]:
    """Fit the law without the largest cell (the largest size at the largest budget), train that
    cell once at the predicted rate, and compare with the best loss of the cell's own runs."""
    used = [c for c in result.cells if c.fit.ok and c.beta2 == result.data["beta2"]]
    keys = sorted({c.key for c in used}, key=lambda k: next(c.largeness for c in used if c.key == k))
    if len(keys) < 3:
        raise FitInputError(f"holdout='largest' needs at least 3 cells with an interior optimum besides none held "
                            f"out (found {len(keys)}): tune at more sizes or budgets")
    held = keys[-1]
    rest = [c for c in used if c.key != held]
    target = min((c for c in used if c.key == held), key=lambda c: c.fit.best_loss)
    law, _ = law_from(rest, scale=result.law.scale, batch_swept=result.law.coefficients["c"] is not None,
                      bootstrap=bootstrap, seed=seed)
    predicted = law.rate(target.scale, target.tokens, target.batch_size)
    half = _band(rest)
    band = (predicted * math.exp(-half), predicted * math.exp(half))
    base = target.specs[0]
    spec = dataclasses.replace(base, lr=predicted, lr_source="tuned:holdout (the law fitted without this cell)",
                               run_id="")
    folder = out / f"holdout-{spec.run_id[:8]}"
    single = Plan([spec], plan.options, plan.unit, plan.throughput, {spec.run_id: plan.memory.get(base.run_id)})
    run_plan(single, folder, resume=True, **resume_run)
    with RunStore(folder) as store:
        loss = float(store.runs_frame().loss.iloc[0])
    best = target.fit.best_loss
    return {"size": target.size, "params": target.params, "tokens": target.tokens,
            "batch_size": target.batch_size, "law": law.to_dict(), "predicted_lr": predicted, "band": list(band),
            "loss": loss, "best_loss": best, "excess": (loss - best) / best, "within_goal": (loss - best) / best <= GOAL,
            "parabola_loss": target.fit.loss_at(predicted), "cell_lr_opt": target.fit.lr_opt,
            "optimum_in_band": band[0] <= target.fit.lr_opt <= band[1], "run_id": spec.run_id,
            "folder": folder.name}
