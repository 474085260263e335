"""Whether a fit gives an answer at all: finite, positive and ordered, or failed with a reason.

A weak sweep (few budgets, noisy runs) can drive a fit to NaN coefficients, an optimum of NaN
parameters or 0 tokens, a point estimate outside its own bootstrap interval, or a loss
interval reaching below zero. Such a fit is not an answer with a wide interval: it is no
answer. ``failure`` names the first such defect (None for a usable fit); ``fit`` leaves a failed
method out (``skipped`` with the reason, so out of the forecast, the agreement wording and the
plots), and the held-out check reports a failed refit as a reason, never as numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.laws.profiles import budget_groups

# Fixed by the runs, not estimated (result.CONSTANTS): not checked.
CONSTANTS = ("k", "k_slope", "U")
VALUES = (("N_opt", "N_opt", fmt.count), ("D_opt", "D_opt", fmt.count), ("loss", "loss", fmt.sig))
# Counts of things: a bound below one parameter (or token) is no model, whatever the arithmetic.
COUNTS = {"N_opt": "parameter", "D_opt": "token"}
# Training costs at least 6 FLOPs per parameter per token (forward 2, backward 4): a budget C trains
# at most C / 6 tokens, on a model of one parameter.
FLOPS_PER_TOKEN_PARAM = 6.0
# A point estimate this far (relative) outside its own percentile interval, at a budget inside the
# sweep, means the resamples do not agree with the fit: the estimator is unstable there. Closer than
# this (or beyond the sweep, where skewed extrapolations are expected) is left to the interval.
OUTSIDE = 0.02
# An optimum (N_opt, D_opt) at a budget inside the sweep this many times below the smallest run's size or
# tokens lies where no run was trained: a noisy sweep at chance read N_opt = 1.35 parameters beside runs of
# 1,472 and more. Sound sweeps (the demo's runs, three public ones) put it above their smallest run.
BELOW_RUNS = 100.0


def failure(result: Any, budgets: Sequence[float]) -> str | None:
    """Why ``result`` gives no finite, ordered answer at ``budgets`` (its table's), or None: a
    non-finite fitted parameter, a value or interval bound that is not finite and positive, a size
    or data bound below one parameter or token, a data bound beyond what the budget trains a
    one-parameter model on (C / 6 tokens), or (at a budget within the swept range) a point
    clearly outside its own interval or an optimum ``BELOW_RUNS`` times below every run's size or tokens; last,
    a frontier exponent a or b that is not positive (``shrinking``), or resamples that cannot vary
    (``no_spread``)."""
    swept = budget_groups(result.runs)[0]
    within = (float(np.min(swept)) * (1 - 1e-9), float(np.max(swept)) * (1 + 1e-9))
    bad = [name for name, value in result.params.items() if name not in CONSTANTS and not np.isfinite(value)]
    if bad:
        return "fitted " + ", ".join(f"{name} = {result.params[name]}" for name in bad)
    with np.errstate(all="ignore"):
        table = result.predict(budgets)
    # The swept budgets first, then those above them (the forecast's side), then below: the reason
    # names the defect nearest what the user asked about, and where it lies against the sweep.
    place = {0: "", 1: " (above the swept budgets)", 2: " (below the swept budgets)"}
    metric = result.runs.label.split(" (")[0]  # "loss", or "top-1 error" where the laws fit the error
    side = [0 if within[0] <= b <= within[1] else 1 if b > within[1] else 2 for b in table.budget]
    cells = [(row.budget, f"at {fmt.flops(row.budget)} FLOPs{place[where]}", key, metric if key == "loss" else name,
              show, getattr(row, key), getattr(row, f"{key}_lo"), getattr(row, f"{key}_hi"))
             for where, row in sorted(zip(side, table.itertuples(), strict=True), key=lambda pair: pair[0])
             for key, name, show in VALUES]
    for _, at, _, name, show, value, lo, hi in cells:  # the plainest defect first: not a number
        bounds = [v for v in (lo, hi) if not np.isnan(v)]
        if not (np.isfinite(value) and value > 0):
            return f"{name} {at} is {show(value)}"
        if bounds and (len(bounds) < 2 or not all(np.isfinite(bounds)) or min(bounds) <= 0):
            return f"the {name} interval {at} is [{show(lo)}, {show(hi)}]"
    for budget, at, key, name, show, value, lo, hi in cells:  # then: no model, or unstable
        if np.isnan(lo) and np.isnan(hi):
            continue
        beyond = unphysical(key, lo, hi, budget, result.runs.unit)
        if beyond is not None:
            return f"the {name} interval {at} is [{show(lo)}, {show(hi)}], {beyond}"
        if within[0] <= budget <= within[1] and not lo * (1 - OUTSIDE) <= value <= hi * (1 + OUTSIDE):
            return f"{name} {at} is {show(value)}, outside its own interval [{show(lo)}, {show(hi)}]"
    smallest = {"N_opt": float(result.runs.frame["params"].min()), "D_opt": float(result.runs.frame["tokens"].min())}
    units = {"N_opt": "parameters", "D_opt": result.runs.unit}
    for budget, at, key, name, show, value, _, _ in cells:  # last: an optimum where no run was trained
        if key in COUNTS and within[0] <= budget <= within[1] and value * BELOW_RUNS < smallest[key]:
            return (f"{name} {at} is {show(value)}, over {BELOW_RUNS:g}x below the smallest run's "
                    f"{show(smallest[key])} {units[key]}, where no run was trained")
    return shrinking(result) or no_spread(result)


def shrinking(result: Any) -> str | None:
    """Why the frontier's exponents give no compute-optimal allocation (None if they do): N_opt ~ C^a and
    D_opt ~ C^b with a or b not positive, so more compute would train a smaller model (or on fewer tokens).
    Two budgets let isoflop read a = -0.152 [-0.53, 0.393]; an interval across 0 alone is left to it."""
    for key, grows in (("a", "N_opt"), ("b", "D_opt")):
        value = result.exponents[key][0]
        if np.isfinite(value) and value <= 0:
            return f"exponent {key} is {fmt.sig(value)}: {grows} would shrink as compute grows"
    return None


def unphysical(key: str, lo: float, hi: float, budget: float, unit: str = "tokens") -> str | None:
    """Why bounds [lo, hi] of ``key`` (N_opt, D_opt) at ``budget`` name no model (None if they do):
    below one parameter or token, or more tokens than the budget trains a one-parameter model on
    (``unit``: what D counts, an image sweep's samples)."""
    if key in COUNTS and min(lo, hi) < 1:
        return f"below one {COUNTS[key] if key == 'N_opt' else unit[:-1]}"
    if key == "D_opt" and max(lo, hi) > budget / FLOPS_PER_TOKEN_PARAM:
        return f"more {unit} than the budget trains a one-parameter model on"
    return None


def no_spread(result: Any) -> str | None:
    """Why a fit's resamples cannot be its intervals (None if they can): isoflop keeps a budget's minimum
    only in draws that take each of its 3 sizes once, the runs themselves, so with 3 sizes or fewer at
    every budget its draws differ only in the budgets they drop; N_opt read 591M [583M, 592M] against
    parametric's [560M, 641M] (``details["resamples_vary"]``, set by the approach)."""
    if result.details.get("resamples_vary", True):
        return None
    return ("every budget has 3 sizes or fewer, so a resample keeps a budget's minimum only where it draws each of "
            "them once, the runs themselves: the resamples differ only in the budgets they drop and measure none "
            "of the runs' noise; 4 or more sizes a budget let them vary")


# Draws beyond each end of an interval below which a verdict read off that end is the extremes' alone: a 95%
# interval of 200 resamples sits 5 draws in from each extreme, of 20 half a draw. The weak sweep's parametric fit
# failed on 20 and 50 resamples (D_opt's upper end inf) and answered on 100, 200 and 1000.
TAIL_DRAWS = 5


def tail_note(result: Any, reason: str) -> str:
    """"" or, where ``reason`` reads an interval (a bound, or a point outside it) of fewer resamples than put
    ``TAIL_DRAWS`` draws beyond each end, a note that the verdict rests on the few most extreme draws."""
    n = len(getattr(result, "samples", ()))
    beyond = n * (1 - result.level) / 2 if n else np.inf
    if "interval" not in reason or beyond >= TAIL_DRAWS:
        return ""
    k = max(1, int(np.ceil(beyond)))
    return (f"; on {n} resamples each end of the {100 * result.level:g}% interval is set by its "
            f"{'' if k == 1 else f'{k} '}most extreme draw{'' if k == 1 else 's'}, so more resamples (--bootstrap "
            "1000 or more) may judge it otherwise")


def failed_message(reason: str) -> str:
    """The one line a failed method is skipped (or refused) with."""
    return (f"failed: no finite, ordered answer ({reason}); the runs do not pin this method down "
            f"(more budgets, sizes around each optimum, or less noisy runs help)")


__all__ = ["failed_message", "failure", "no_spread", "shrinking", "tail_note", "unphysical"]
