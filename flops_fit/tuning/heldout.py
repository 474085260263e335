"""The tune's held-out checks: does the law's rate hold where it was not fitted?

``largest`` fits the law's chosen form without the largest cell (the largest size at the
largest budget), trains that cell once at the rate it predicts (its own one-run sweep in
``out_dir/holdout-<run>``) and compares the loss with the best of the cell's own runs.
``beyond`` trains a cell the tune never saw, ``BEYOND`` (4) times further in tokens than any
cell of the grid (the tune's smallest size, the one with the most tokens), at the law's rate
times each of ``MULTIPLIERS`` (``out_dir/holdout-beyond``): the law's own rate (x1) against
the best of them is what extrapolating the law costs. Goal either way: within ``GOAL`` (0.5%).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.store.run_store import RunStore
from flops_fit.sweeps.driver import run_plan
from flops_fit.sweeps.planner import Plan, plan
from flops_fit.tuning.cells import fit_cell
from flops_fit.tuning.forms import FORMS, fit_form, from_marin
from flops_fit.tuning.law import LawFit, fit_law

GOAL = 0.005  # the held-out cell's loss at the predicted rate: within 0.5% of its best
BEYOND = 4.0  # the ``beyond`` cell's tokens over the grid's most
MULTIPLIERS = (0.25, 0.5, 1.0, 2.0, 4.0)  # of the law's rate, at the ``beyond`` cell


def law_from(cells: list[Any], *, scale: str, batch_swept: bool, bootstrap: int, seed: int) -> tuple[LawFit, Any]:
    """Marin's form fitted to these cells (``tuning.law``)."""
    if not cells:
        raise FitInputError("no cell has its best rate inside the multipliers")
    return fit_law([c.scale for c in cells], [c.tokens for c in cells], [c.batch_size for c in cells],
                   [c.fit.lr_opt for c in cells], [c.fit.samples for c in cells], scale=scale,
                   bootstrap=bootstrap, seed=seed, batch_swept=batch_swept)


def band_of(cells: list[Any]) -> float:
    """The median half-width, in log rate, of the cells' near-optimal bands."""
    return float(np.median([math.log(c.fit.band_hi / c.fit.lr_opt) for c in cells]))


def refit(result: Any, cells: list[Any], *, bootstrap: int, seed: int):
    """The tune's chosen form fitted to ``cells`` (an object with ``rate(values)`` and ``to_dict()``)."""
    chosen = result.data.get("chosen", "marin")
    if chosen == "marin":
        law, _ = law_from(cells, scale=result.law.scale, batch_swept=result.law.coefficients["c"] is not None,
                          bootstrap=bootstrap, seed=seed)
        return from_marin(law), law.to_dict()
    fitted = fit_form(FORMS[chosen], [c.point() for c in cells], bootstrap=bootstrap, seed=seed)
    return fitted, fitted.to_dict()


def _used(result: Any) -> list[Any]:
    return [c for c in result.cells if c.fit.ok and c.beta2 == result.data["beta2"]]


def check_largest(out: Path, planned: Plan, result: Any, *, bootstrap: int, seed: int,
                  resume_run: dict[str, Any]) -> dict[str, Any]:
    """The largest cell predicted by the law fitted without it, trained once at that rate."""
    used = _used(result)
    keys = sorted({c.key for c in used}, key=lambda k: next(c.largeness for c in used if c.key == k))
    if len(keys) < 3:
        raise FitInputError(f"holdout='largest' needs at least 3 cells with an interior optimum, the largest held "
                            f"out and the law fitted on the others (found {len(keys)}): tune at more sizes or budgets")
    held = keys[-1]
    rest = [c for c in used if c.key != held]
    target = min((c for c in used if c.key == held), key=lambda c: c.fit.best_loss)
    law, described = refit(result, rest, bootstrap=bootstrap, seed=seed)
    predicted = law.rate(target.point().values)
    half = band_of(rest)
    band = (predicted * math.exp(-half), predicted * math.exp(half))
    base = target.specs[0]
    spec = dataclasses.replace(base, lr=predicted, lr_source="tuned:holdout (the law fitted without this cell)",
                               run_id="")
    folder = out / f"holdout-{spec.run_id[:8]}"
    single = Plan([spec], planned.options, planned.unit, planned.throughput,
                  {spec.run_id: planned.memory.get(base.run_id)})
    run_plan(single, folder, resume=True, **resume_run)
    with RunStore(folder) as store:
        loss = float(store.runs_frame().loss.iloc[0])
    best = target.fit.best_loss
    return {"kind": "largest", "size": target.size, "params": target.params, "tokens": target.tokens,
            "batch_size": target.batch_size, "law": described, "predicted_lr": predicted, "band": list(band),
            "loss": loss, "best_loss": best, "excess": (loss - best) / best, "within_goal": (loss - best) / best <= GOAL,
            "parabola_loss": target.fit.loss_at(predicted), "cell_lr_opt": target.fit.lr_opt,
            "optimum_in_band": band[0] <= target.fit.lr_opt <= band[1], "run_id": spec.run_id,
            "folder": folder.name}


def check_beyond(out: Path, planned: Plan, result: Any, *, bootstrap: int, seed: int,
                 resume_run: dict[str, Any], factor: float = BEYOND) -> dict[str, Any]:
    """A cell ``factor`` times further in tokens than the grid, trained at the law's rate (fitted
    on every cell) times each of ``MULTIPLIERS``."""
    used = _used(result)
    sizes = sorted({c.size for c in result.cells})
    if len(sizes) < 3:
        raise FitInputError(f"holdout='beyond' plans its cell with the tune's sizes and needs at least 3 "
                            f"(found {sizes}): tune at more sizes")
    top = max(used, key=lambda c: (c.tokens, -c.fit.best_loss))
    base = top.specs[0]
    budget = (factor * top.tokens + base.seq_len) * base.flops_per_unit
    options = planned.options.replace(budgets=[budget], sizes=sizes, batch_size=top.batch_size,
                                      hparams=dataclasses.replace(planned.options.hparams, beta2=top.beta2))
    ahead = plan(options)
    spec = next(r for r in ahead.runs if r.size == top.size)
    law, described = refit(result, used, bootstrap=0, seed=seed)
    values = {**top.point().values, "tokens": float(spec.tokens), "flops": float(spec.flops)}
    predicted = law.rate(values)
    runs = [dataclasses.replace(spec, lr=predicted * m, lr_source=f"tune:x{m:g} tuned:beyond (the law's rate x{m:g})",
                                run_id="") for m in MULTIPLIERS]
    folder = out / "holdout-beyond"
    run_plan(Plan(runs, ahead.options, ahead.unit, ahead.throughput, {r.run_id: ahead.memory.get(spec.run_id)
                                                                      for r in runs}),
             folder, resume=True, **resume_run)
    with RunStore(folder) as store:
        frame = store.runs_frame()
    loss = dict(zip(frame.run_id, frame.loss))
    losses = [float(loss.get(r.run_id, math.nan)) for r in runs]
    cell = fit_cell([r.lr for r in runs], losses, bootstrap=bootstrap, seed=seed)
    at_law = losses[MULTIPLIERS.index(1.0)]
    best = cell.best_loss
    return {"kind": "beyond", "size": top.size, "params": top.params, "tokens": spec.tokens,
            "tokens_factor": spec.tokens / max(c.tokens for c in result.cells), "batch_size": spec.batch_size,
            "law": described, "predicted_lr": predicted, "multipliers": list(MULTIPLIERS), "losses": losses,
            "loss": at_law, "best_loss": best, "excess": (at_law - best) / best, "within_goal": (at_law - best) / best
            <= GOAL, "cell_lr_opt": cell.lr_opt, "cell_reason": cell.reason, "folder": folder.name}
