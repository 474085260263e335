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
from flops_fit.errors import FitInputError, FlopsFitError, OptionError, StoreError
from flops_fit.files import write_atomically
from flops_fit.fitting import check_sampling
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.inputs import divergence
from flops_fit.plugin import api
from flops_fit.store.run_store import STORE_NAME, RunStore
from flops_fit.store.runs import RunSpec
from flops_fit.sweeps.config import SweepConfig, load_config, parse_config
from flops_fit.sweeps.driver import run_plan
from flops_fit.sweeps.hparams import WIDTH_PARAMS
from flops_fit.sweeps.options import SweepOptions
from flops_fit.sweeps.planner import Plan
from flops_fit.sweeps.planner import plan as plan_sweep
from flops_fit.sweeps.tuned import FORMAT, HPARAMS_FILE, grid_flags, stored_grid
from flops_fit.tables import counted, format_table
from flops_fit.tuning.cells import BAND, DIVERGED_NEXT, CellFit, fit_cell
from flops_fit.tuning.forms import MAX_WIDTH, FormFit, Point, choose, fit_forms, form_rows
from flops_fit.tuning.grid import DEFAULT_MULTIPLIERS, check_grid, tune_plan
from flops_fit.tuning.heldout import GOAL, band_of, check_beyond, check_largest, law_from
from flops_fit.tuning.law import LawFit, fit_batch_law, fit_law, rms_text
from flops_fit.tuning.report import write_tune_report

HOLDOUTS = ("largest", "beyond")


def _span(noun: str, bounds: list[Any], spec: str = "") -> str:
    """A grid's range, "sizes 8-24" or, where it is one value, "size 8" ("sizes 8-8" read as a typo)."""
    lo, hi = (format(v, spec) for v in bounds[:2])
    noun = noun.removesuffix("s")
    return f"{noun} {lo}" if lo == hi else f"{noun}s {lo}-{hi}"


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
    width: float | None = None  # None: the model's size is not a width
    nonembedding: float = 0.0  # parameters less the embedding's

    def point(self, best_batch: bool = True) -> Point:
        """The cell as the law's forms see it (``tuning.forms``)."""
        values = {"tokens": float(self.tokens), "params": float(self.params), "flops": float(self.flops),
                  "nonembedding": float(self.nonembedding or self.params), "batch": float(self.batch_size),
                  **({"width": self.width or self.scale} if self.width or self.scale != self.params else {})}
        budget = self.specs[0].budget if self.specs else self.flops
        return Point(values, self.fit.lr_opt, self.fit.samples, budget, self.fit.loss_at, self.fit.loss_opt, best_batch)

    @property
    def key(self) -> tuple[int, int]:
        return (self.size, self.tokens)

    @property
    def largeness(self) -> tuple[float, int, int]:
        """Order of "largest": the budget (the runs' FLOPs agree only to a sequence), then the size."""
        budget = self.specs[0].budget if self.specs else self.flops
        return (budget, self.params, self.tokens)

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "params": self.params, "nonembedding": self.nonembedding, "scale": self.scale,
                "tokens": self.tokens,
                "batch_size": self.batch_size, "beta2": self.beta2, "flops": self.flops, **self.fit.to_dict()}


@dataclass
class TuneResult:
    """What a tune found: its cells, its law (and B*(C)), the held-out check, and its files."""

    out_dir: Path
    cells: list[Cell]
    law: LawFit
    data: dict[str, Any]
    report: Path | None = None
    forms: dict[str, FormFit] | None = None

    @property
    def hparams_path(self) -> Path:
        return self.out_dir / HPARAMS_FILE

    @property
    def holdout(self) -> dict[str, Any] | None:
        return self.data.get("holdout")

    @property
    def units(self) -> str:
        """What the cells' token counts count: "tokens", or "samples" for an image model."""
        return f"{self.data.get('unit', 'token')}s"

    def __str__(self) -> str:
        rows = [[c.size, f"{c.params:,}", f"{c.tokens:,}", c.batch_size, f"{c.beta2:g}",
                 "-" if not c.fit.ok else fmt.with_interval(c.fit.lr_opt, c.fit.lr_lo, c.fit.lr_hi),
                 "-" if not c.fit.ok else f"[{c.fit.band_lo:.3g}, {c.fit.band_hi:.3g}]",
                 f"{c.fit.best_loss:.4f}", c.fit.reason or ""] for c in self.cells]
        lines = [format_table(rows, ["size", "params", self.units, "batch", "beta2", "lr*", "0.5% band",
                                     "best loss", "no optimum because"]),
                 f"law: {self.law.describe()} ({rms_text(self.law.rms_log, self.law.cells)})"]
        if self.units != "tokens":
            lines.append(f"  (the laws' variable named tokens, D, counts the {self.units} each run trains on)")
        lines += [f"  {n}" for n in self.law.notes]
        if self.forms:
            lines += ["law forms (95% intervals of the exponents; held out: fitted without the largest budget, "
                      "the loss its cells' parabolas give at the predicted rate above their best):",
                      format_table(form_rows(self.forms), ["form", "exponent of", "estimate [95%]", "identified",
                                                           "held out"]),
                      f"chosen: {self.data['chosen_because']}"]
            shaky = [f"{n}: {', '.join(f.unidentified)}" for n, f in self.forms.items() if f.unidentified]
            if shaky:
                lines.append("NOT identified (interval crosses zero or wider than "
                             f"{self.data['identified_width']:g}): " + "; ".join(shaky))
        if self.data.get("batch_law"):
            b = self.data["batch_law"]
            lines.append(f"batch law: B* = {b['k']:.4g} * C^{b['e']:.3g} [{b['e_lo']:.3g}, {b['e_hi']:.3g}]")
        cover = self.data.get("coverage")
        if cover:
            lines.append(f"grid: {_span('size', cover['tune_sizes'])} and {_span(self.units, cover['tune_tokens'], ',')}; "
                         f"the sweep plans {_span('size', cover['sweep_sizes'])} and "
                         f"{_span(self.units, cover['sweep_tokens'], ',')} (the planner guards how far past the grid "
                         "the law goes)")
        if self.holdout:
            lines.append(describe_holdout(self.holdout, self.units))
        lines.append(f"wrote {self.hparams_path}" + (f" and {self.report}" if self.report else ""))
        return "\n".join(lines)


def describe_holdout(h: dict[str, Any], units: str = "tokens") -> str:
    verdict = f"{100 * h['excess']:+.2f}%, goal within {100 * GOAL:g}%: {'met' if h['within_goal'] else 'missed'}"
    if h.get("kind") == "beyond":
        rates = ", ".join(f"x{m:g} {v:.4f}" for m, v in zip(h["multipliers"], h["losses"]))
        return (f"held-out cell beyond the grid (size {h['size']}, {h['tokens']:,} {units}: x{h['tokens_factor']:.2f} "
                f"the grid's most): the law predicts lr {h['predicted_lr']:.3g}; loss at its multiples {rates}; "
                f"at x1 {h['loss']:.4f} vs the best {h['best_loss']:.4f} ({verdict}); the cell's own optimum "
                + (f"{h['cell_lr_opt']:.3g} (x{h['cell_lr_opt'] / h['predicted_lr']:.2f} the law's)"
                   if h["cell_reason"] is None else f"not interior ({h['cell_reason']})"))
    return (f"held-out cell (size {h['size']}, {h['tokens']:,} {units}): law without it predicts lr {h['predicted_lr']:.3g} "
            f"(band [{h['band'][0]:.3g}, {h['band'][1]:.3g}]); loss there {h['loss']:.4f} vs the cell's best "
            f"{h['best_loss']:.4f} ({verdict}); the cell's own optimum {h['cell_lr_opt']:.3g} is "
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
         stack_runs: int | None = None, host: Any = None) -> TuneResult:
    """Tune the learning rate of the sweep ``spec`` (a sweep file, its mapping, or
    ``SweepOptions``): its runs at its ``budgets`` smallest budgets (or these budgets; default: its smallest and 8x it, 3 in all), on
    ``sizes`` (default: every size planned there), each at every multiplier of its own rate
    (and each of ``batch_sizes`` / ``beta2s``). Writes ``out_dir/hparams.json`` and the report.
    ``stack_runs`` (default: the sweep's) trains up to that many of a cell's rates in one program
    (``training.stacked``)."""
    check_sampling(bootstrap, seed, 0.95)  # before anything trains: -1 trained every run, then wrote no interval
    config = _config(spec)
    if stack_runs is not None:
        config = dataclasses.replace(config, options=config.options.replace(stack_runs=stack_runs))
    if holdout not in (None, *HOLDOUTS):
        raise OptionError(f"holdout must be one of {list(HOLDOUTS)} (or left out), got {holdout!r}")
    grid = check_grid(config.options, budgets, sizes, multipliers, batch_sizes, beta2s)
    plan = tune_plan(config.options, grid, host=host)
    out = Path(out_dir)
    table, _ = config.options_for(executor)  # a table written for another executor says nothing to this one
    run = {"executor": executor or config.executor, "workers": workers if workers is not None else
           table.get("workers", 1),
           "executor_options": {**{k: v for k, v in table.items() if k != "workers"}, **(executor_options or {})},
           "skip_parity": skip_parity, "skip_preflight": skip_preflight, "show_progress": show_progress,
           "host": host}
    if grid_refused := _other_grid(out, plan, resume):  # a larger grid too: a tune resumes the grid it started
        raise grid_refused
    try:
        run_plan(plan, out, resume=resume, **run)
    except StoreError as exc:
        raise _other_grid(out, plan, resume) or exc from None
    cells = collect_cells(out, plan, bootstrap=bootstrap, seed=seed, host=host)
    result = fit_tune(out, plan, cells, grid, bootstrap=bootstrap, seed=seed)
    result.data["coverage"] = _coverage(config.options, [c for c in cells if c.fit.ok], host)
    _write_law(result)  # before the held-out check: a check that cannot run (or is stopped) keeps the law
    if holdout:
        check = check_largest if holdout == "largest" else check_beyond
        try:
            result.data["holdout"] = check(out, plan, result, bootstrap=bootstrap, seed=seed, resume_run=run)
        except FitInputError as exc:
            if report:
                result.report = write_tune_report(result, out)
            raise FitInputError(f"{exc}; the law, without the check, is in {result.hparams_path}") from None
        _write_law(result)
    if report:
        result.report = write_tune_report(result, out)
    return result


def _other_grid(out: Path, plan: Plan, resume: bool) -> StoreError | None:
    """On a resume, a store holding this folder's tune at another grid (the command run again without its
    --budgets, --sizes or --multipliers): the refusal that names the grid to resume with; None: another cause."""
    if not resume or not (out / STORE_NAME).is_file():
        return None
    with RunStore(out) as store:
        stored = store.planned_runs()
    grid = stored_grid(stored)
    if grid is None or grid == stored_grid(plan.runs):
        return None
    return StoreError(f"{out} holds a tune of another grid ({len(stored)} runs; this call plans {len(plan.runs)}): "
                      f"resume it with the grid it was started with: {grid_flags(grid)} (flops_fit.tune: "
                      + ", ".join(f"{k}={v}" for k, v in grid.items()) + ")")


def _write_law(result: TuneResult) -> None:
    text = json.dumps(fmt.json_safe(result.data), indent=2) + "\n"
    write_atomically(result.hparams_path, lambda path: path.write_text(text))


def _coverage(options: SweepOptions, used: list[Cell], host: Any) -> dict[str, list[float]] | None:
    """The sizes and tokens the sweep plans against those the law was tuned on (None: the
    sweep does not plan on its own, e.g. its law is this very tune)."""
    try:
        sweep = plan_sweep(options, host=host)
    except FlopsFitError:
        return None
    if not used:
        return None
    return {"sweep_sizes": [min(r.size for r in sweep.runs), max(r.size for r in sweep.runs)],
            "tune_sizes": [min(c.size for c in used), max(c.size for c in used)],
            "sweep_tokens": [min(r.tokens for r in sweep.runs), max(r.tokens for r in sweep.runs)],
            "tune_tokens": [min(c.tokens for c in used), max(c.tokens for c in used)]}


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
                          first.flops, fit_cell(rates, losses, bootstrap=bootstrap, seed=seed), specs,
                          float(size) if width_like else None, float(first.params - (first.embedding_params or 0))))
    return cells


def _best_beta2(cells: list[Cell]) -> float:
    """The beta2 whose cells reach the lowest mean best loss (only cells every beta2 measured)."""
    by = {}
    for c in cells:
        by.setdefault(c.beta2, {})[(c.size, c.tokens, c.batch_size)] = c.fit.best_loss
    common = set.intersection(*(set(v) for v in by.values()))

    def mean(b: float) -> float:  # inf, without numpy's warning, where no common cell has a finite best loss
        values = [by[b][k] for k in common if math.isfinite(by[b][k])]
        return float(np.mean(values)) if values else math.inf

    return min(by, key=mean)


def _law_cells(cells: list[Cell], beta2: float) -> list[Cell]:
    return [c for c in cells if c.beta2 == beta2 and c.fit.ok]


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
        failed = _failed(out)
        if failed:  # the runs' own failure is the cause, not the multipliers
            raise FitInputError(f"{exc}: {failed}") from None
        if not bad:  # every cell has its optimum: too few cells, which wider multipliers do not add
            n = len(cells)
            raise FitInputError(
                f"{str(exc).partition(': ')[0]} (every cell of the tune has its optimum; it has {counted(n, 'cell')}"
                f"{f', {len(used)} at its best beta2' if len(used) != n else ''}): tune more sizes or budgets, into a "
                f"new --out folder (a tune resumes only the grid it started with); each run's rate and loss: "
                f"`flops-fit status {out}`") from None
        raise FitInputError(f"{exc} ({_why_none(bad, len(cells))}): {_widen(bad, grid['multipliers'], out)}") from None
    batch_law = None
    if batch_swept:
        best: dict[tuple[int, int], Cell] = {}
        for c in used:
            if c.key not in best or c.fit.loss_opt < best[c.key].fit.loss_opt:
                best[c.key] = c
        batch_law = fit_batch_law([c.flops for c in best.values()], [c.batch_size for c in best.values()],
                                  bootstrap=bootstrap, seed=seed)
    forms = _forms(used, law, scale, batch_swept, bootstrap, seed)
    chosen, because = choose(forms)
    options = plan.options
    data = {
        "format": FORMAT, "model": options.model, "dataset": options.dataset, "unit": plan.unit,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "flops-fit": __version__,
        "setup": {"model_config": options.model_config, "dataset_config": options.dataset_config,
                  "seq_len": options.seq_len, "batch_size": options.batch_size, "schedule": options.schedule,
                  "budgets": list(grid["budgets"]), "centre": plan.runs[0].lr_source.partition(" ")[2],
                  "hparams": options.hparams.to_dict()},
        "tune": {"multipliers": list(grid["multipliers"]), "sizes": grid["sizes"] and list(grid["sizes"]),
                 "batch_sizes": grid["batch_sizes"] and list(grid["batch_sizes"]),
                 "beta2s": grid["beta2s"] and list(grid["beta2s"]), "bootstrap": bootstrap, "seed": seed,
                 "band": BAND},
        "law": {**_law_dict(law, forms[chosen], scale), "band": band_of(used)},
        "chosen": chosen, "chosen_because": because, "identified_width": MAX_WIDTH,
        "forms": {n: f.to_dict() for n, f in forms.items()},
        "range": _ranges(used),
        "batch_law": batch_law,
        "beta2": beta2,
        "cells": [c.to_dict() | {"in_law": c in used} for c in cells],
        "holdout": None,
    }
    return TuneResult(out, cells, law, data, forms=forms)


def _edge(cell: Cell) -> str | None:
    """"lowest" / "highest": the end of its rates a cell's best loss sits at (None: another reason)."""
    reason = cell.fit.reason or ""
    return next((end for end in ("lowest", "highest") if reason.startswith(f"the best loss is at the {end} ")), None)


def _diverged_next(cell: Cell) -> bool:
    """Whether the cell's best loss is next to a rate that diverged (more rates between them help, wider ones not)."""
    return (cell.fit.reason or "").startswith(DIVERGED_NEXT)


def _diverged_above(cell: Cell) -> bool:
    """Whether the cell's rates that trained are fewer than a parabola needs and lie below every one that diverged
    (its rates sit too high: lower ones help)."""
    finite = [r for r, v in zip(cell.fit.rates, cell.fit.losses, strict=True) if math.isfinite(v)]
    blown = [r for r, v in zip(cell.fit.rates, cell.fit.losses, strict=True) if not math.isfinite(v)]
    return len(finite) < 3 and bool(blown) and (not finite or max(finite) < min(blown))


def _trained_end(cell: Cell) -> int | None:
    """The index, in its rates, of the lower of the two rates a ``_diverged_next`` cell's optimum lies between."""
    finite = [i for i, v in enumerate(cell.fit.losses) if math.isfinite(v)]
    best = min(finite, key=lambda i: cell.fit.losses[i])
    step = 1 if best == max(finite) else -1
    nearest = next((i for i in range(best + step, len(cell.fit.losses) if step > 0 else -1, step)
                    if not math.isfinite(cell.fit.losses[i])), None)
    return None if nearest is None else min(best, nearest)


def _failed(out: Path) -> str | None:
    """The tune's failed runs, with the most frequent error and the fix, or None when none failed:
    a cell whose runs failed has no rates to fit, and widening its multipliers does not help."""
    if not (out / STORE_NAME).is_file():  # cells given without their sweep
        return None
    with RunStore(out) as store:
        frame = store.runs_frame()
    failed = frame[frame.status == "failed"]
    # a run that diverged is its rate's verdict, which the cells read (too high: lower multipliers), not a cause to fix
    failed = failed[[divergence(r.error, r.loss, r.curve) is None for r in failed.itertuples()]]
    if failed.empty:
        return None
    errors = failed.error.fillna("no error recorded").astype(str)
    top = errors.value_counts().index[0]
    return (f"{len(failed)} of {len(frame)} runs failed ({top}"
            + (f"; {errors.nunique() - 1} other error(s)" if errors.nunique() > 1 else "")
            + f"): fix that, then tune again into a new --out folder (failed runs are final); each run's error: "
            f"`flops-fit status {out}`")


def _why_none(bad: list[Cell], total: int) -> str:
    """How many cells have no optimum, and why, counted by reason."""
    counts: dict[str, int] = {}
    for c in bad:
        edge = _edge(c)
        why = (f"best at the {edge} rate tried" if edge else
               "best next to a rate that diverged" if _diverged_next(c) else
               "every rate diverged" if not any(math.isfinite(v) for v in c.fit.losses) else c.fit.reason)
        counts[why] = counts.get(why, 0) + 1
    return f"{len(bad)} of {total} cells have none: " + "; ".join(f"{n} {why}" for why, n in counts.items())


def _widen(bad: list[Cell], multipliers: list[float], out: Path) -> str:
    """The fix: multipliers widened where the cells' best rates sat, in a new folder, and where
    each run's rate and loss can be read meanwhile."""
    edges = {_edge(c) or ("lowest" if _diverged_above(c) else None) for c in bad}
    low, high = min(multipliers), max(multipliers)
    ordered = sorted(multipliers)
    if any(not any(math.isfinite(v) for v in c.fit.losses) for c in bad):  # every rate of a cell diverged
        lower = [m * low / (2 * high) for m in ordered]  # the same spread, its highest half the lowest that diverged
        return (f"every rate of a cell diverged (the lowest, x{low:g} the sweep's): tune again with lower rates, "
                f"--multipliers {','.join(f'{m:g}' for m in lower)}, into a new --out folder; each run's error: "
                f"`flops-fit status {out}`")
    between = {math.sqrt(ordered[i] * ordered[i + 1]) for c in bad if _diverged_next(c)
               for i in [_trained_end(c)] if i is not None and len(c.fit.rates) == len(ordered)}
    wider = sorted({*multipliers, *((low / 4, low / 2) if "lowest" in edges else ()),
                    *((high * 2, high * 4) if "highest" in edges else ()), *between})
    fix = (f"tune again with --multipliers {','.join(f'{m:g}' for m in wider)} into a new --out folder (other "
           "multipliers are another sweep)" if wider != sorted(multipliers) else "tune more sizes or budgets")
    return f"{fix}; each run's rate and loss: `flops-fit status {out}`"


def _forms(used: list[Cell], law: LawFit, scale: str, batch_swept: bool, bootstrap: int,
           seed: int) -> dict[str, FormFit]:
    """Each form of the law (``tuning.forms``) on these cells; where batches were swept the
    forms without a batch term see each (size, tokens)'s best batch only."""
    best: dict[tuple[int, int], Cell] = {}
    for c in used:
        if c.key not in best or c.fit.loss_opt < best[c.key].fit.loss_opt:
            best[c.key] = c
    points = [c.point(best_batch=best[c.key] is c) for c in used]

    def refit(subset: list[Point]) -> LawFit:
        return fit_law([p.values[scale] for p in subset], [p.values["tokens"] for p in subset],
                       [p.values["batch"] for p in subset], [p.lr_opt for p in subset], [p.samples for p in subset],
                       scale=scale, bootstrap=0, batch_swept=batch_swept)[0]

    return fit_forms(points, law, refit, batch_swept=batch_swept, bootstrap=bootstrap, seed=seed)


def _law_dict(law: LawFit, form: FormFit, scale: str) -> dict[str, Any]:
    """hparams.json's law: Marin's coefficients (a, b, c), or the chosen form's; signed
    exponents per variable either way (what ``sweeps.tuned`` plans from)."""
    described = form.to_dict()
    if form.name == "marin":
        return {**law.to_dict(), "name": "marin", "exponents": described["exponents"]}
    return {"name": form.name, "form": described["form"], "scale": scale, "m": described["m"],
            "coefficients": {"m": described["m"], **described["exponents"]}, "exponents": described["exponents"],
            "cells": form.cells, "rms_log": form.rms_log, "notes": form.notes}


def _ranges(used: list[Cell]) -> dict[str, list[float]]:
    """Each variable's [min, max] over the law's cells: how far the planner may carry it."""
    points = [c.point() for c in used]
    return {v: [min(p.values[v] for p in points), max(p.values[v] for p in points)]
            for v in points[0].values if all(v in p.values for p in points)}
