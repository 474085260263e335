"""The tune's runs: the sweep's plan at its smallest budgets, once per rate multiplier.

A tune is a sweep: its runs are ordinary ``RunSpec``s (the sweep's, at the chosen budgets
and sizes) whose ``lr`` is the sweep's own rate times a multiplier (and, where swept, with
another batch size or beta2), planned by the sweep's planner and trained by its driver,
so the executors, the store, checkpoints, resume, tracking and progress are the sweep's.
Under WSD a size's runs at one multiplier still form one family: the tune pays each
stable phase once per multiplier.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from flops_fit.errors import OptionError
from flops_fit.sweeps.options import SweepOptions
from flops_fit.sweeps.planner import Plan, plan
from flops_fit.sweeps.tuned import exact_text

DEFAULT_MULTIPLIERS = (0.25, 0.5, 1.0, 2.0, 4.0)
# The default grid: 3 budgets from the sweep's smallest to SPAN times it (a factor sqrt(SPAN)
# apart). Budgets a factor 2 apart cannot tell the tokens' exponent from zero (the GPT demo's
# first tune: a in [-0.84, 1.26]); 8x separates it on synthetic cells with 10% noise
# (tests/test_tune.py) and makes the sizes of a ladder span more widths.
SPAN = 8.0
DEFAULT_BUDGETS = 3


def _positive_list(values: Any, name: str, kind: type = float) -> tuple:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise OptionError(f"{name} must be a non-empty list, got {values!r}")
    out = []
    for v in values:
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0
        if not ok or (kind is int and int(v) != v):
            rule = "positive integer" if kind is int else "finite positive number"
            raise OptionError(f"each of {name} must be a {rule}, got {v!r}")
        out.append(kind(v))
    return tuple(sorted(set(out)))


def check_grid(options: SweepOptions, budgets: Any, sizes: Any, multipliers: Any, batch_sizes: Any,
               beta2s: Any) -> dict[str, Any]:
    """The grid's settings, checked (OptionError naming the setting and the fix). ``budgets``:
    how many of the sweep's smallest budgets, or a list (None: the sweep's smallest budget and
    ``SPAN`` times it, ``DEFAULT_BUDGETS`` in all, evenly apart in log)."""
    if budgets is None:
        low = min(options.budgets)
        budgets = [float(f"{low * SPAN ** (k / (DEFAULT_BUDGETS - 1)):.3g}") for k in range(DEFAULT_BUDGETS)]
    if isinstance(budgets, int) and not isinstance(budgets, bool):
        if not 1 <= budgets <= len(options.budgets):
            raise OptionError(f"budgets must count 1 to {len(options.budgets)} of the sweep's smallest budgets "
                              f"(it has {len(options.budgets)}), got {budgets}")
        chosen = tuple(sorted(options.budgets)[:budgets])
    else:
        chosen = _positive_list(budgets, "budgets")
    multipliers = _positive_list(multipliers, "multipliers")
    if len(multipliers) < 3:
        raise OptionError(f"multipliers must hold at least 3 distinct rates (a parabola in log rate needs 3; "
                          f"5 give each cell an interval), got {list(multipliers)}")
    out = {"budgets": chosen, "multipliers": multipliers,
           "sizes": None if sizes is None else _positive_list(sizes, "sizes", int),
           "batch_sizes": None if batch_sizes is None else _positive_list(batch_sizes, "batch_sizes", int),
           "beta2s": None if beta2s is None else _positive_list(beta2s, "beta2s")}
    if out["beta2s"] and any(b >= 1 for b in out["beta2s"]):
        raise OptionError(f"each of beta2s must lie in (0, 1), got {list(out['beta2s'])}")
    return out


def tune_plan(options: SweepOptions, grid: dict[str, Any], *, host: Any = None) -> Plan:
    """Every run of the tune: for each batch size and beta2 the sweep's plan at ``grid``'s
    budgets (and sizes), each run once per multiplier of its planned rate."""
    base = options.replace(budgets=grid["budgets"])
    runs, memory, first = [], {}, None
    for batch in grid["batch_sizes"] or (options.batch_size,):
        for beta2 in grid["beta2s"] or (None,):
            hparams = options.hparams if beta2 is None else dataclasses.replace(options.hparams, beta2=beta2)
            planned = plan(base.replace(batch_size=batch, hparams=hparams), host=host)
            first = first or planned
            cells = [r for r in planned.runs if grid["sizes"] is None or r.size in grid["sizes"]]
            missing = sorted(set(grid["sizes"] or ()) - {r.size for r in cells})
            if missing:
                raise OptionError(f"sizes {missing} are not in the sweep's plan at budgets {list(grid['budgets'])}; "
                                  f"its sizes there: {sorted({r.size for r in planned.runs})}")
            for run in cells:
                for m in grid["multipliers"]:
                    spec = dataclasses.replace(run, lr=run.lr * m, lr_source=f"tune:x{exact_text(m)} {run.lr_source}", run_id="")
                    runs.append(spec)
                    memory[spec.run_id] = planned.memory.get(run.run_id)
    return Plan(runs, first.options, first.unit, first.throughput, memory)
