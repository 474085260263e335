"""Sizing for inference (Sardana et al. 2024, "Beyond Chinchilla-Optimal"): training plus serving.

A model that will serve T tokens costs its training, k N^(1+s) D FLOPs (6ND when the runs
are 6ND, otherwise the runs' own FLOPs rule ``FlopsRule``), plus its forward passes, a third of
that per token: (k/3) N^(1+s) T (2N per token at k = 6). Two questions, both answered by the
fitted law itself (``result.law_loss``, for every bootstrap draw, so each answer has an interval):

- ``inference_sizing``: the N and D that reach the loss of the compute-optimal model at
  training compute C with the least total FLOPs. Along each N the D that reaches that loss is
  found by bisection in log D (the law falls with D), and the total is minimised over a grid in
  log N refined by a parabola: no inverse of any law is written out, so every law with a
  surface (Chinchilla's, the interaction law, the data-constrained law) works unchanged.
- ``total_sizing``: the converse, the lowest loss for a total budget F of training plus T
  tokens of inference: along each N the training tokens F leaves, the loss minimised over N.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd

from flops_fit.checks import is_real
from flops_fit.errors import FitInputError
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.laws.bootstrap import interval
from flops_fit.tables import format_table

GRID_POINTS = 161
SEARCH_DECADES = 5.0  # N searched this far below the compute-optimal size (a heavy load shrinks it)
D_DECADES = (-3.0, 12.0)  # D searched this far around the compute-optimal tokens (decades)
BISECTIONS = 48
DATA_STEP = 1.1  # the step in D over which a law must fall to be read there (``falls_with_data``)
FORWARD_SHARE = 1.0 / 3.0  # a forward pass is a third of a training step's FLOPs (2ND of 6ND)
SIZING_COLUMNS = ("N", "D", "tokens_per_param", "train_flops", "inference_flops", "total_flops",
                  "chinchilla_total_flops", "saving")
TOTAL_COLUMNS = ("N", "D", "tokens_per_param", "loss", "train_flops", "inference_flops", "chinchilla_loss")


def check_tokens(tokens: Any, name: str = "inference_tokens") -> float:
    """The inference tokens as a float; FitInputError unless a finite whole number >= 0 (0.5 tokens,
    accepted before, is a unit mix-up: 2 meant as 2 trillion, not a count)."""
    try:
        value = float(tokens)
    except (TypeError, ValueError):
        value = float("nan")
    if isinstance(tokens, bool) or not (np.isfinite(value) and value >= 0 and value == np.floor(value)):
        raise FitInputError(f"{name} must be a whole number of tokens >= 0 (e.g. 2e12 for 2 trillion), "
                            f"got {tokens!r}")
    return value


def flop_counts(values: Any) -> np.ndarray | None:
    """``values`` (one number or a list) as a 1-D float array of FLOP counts, or None unless finite positive
    numbers: a word, a bool, a string ("1e11", read as a number before) or a 2-D array is none."""
    try:
        c = np.atleast_1d(np.asarray(values, dtype=float))
    except (TypeError, ValueError):  # a word was numpy's ValueError
        return None
    written = np.asarray(values, dtype=object).ravel()  # as given: 10**22 is an int past int64, not a string
    if c.size == 0 or c.ndim != 1 or any(isinstance(v, (str, bytes, bool, np.bool_)) for v in written) \
            or not np.all(np.isfinite(c) & (c > 0)):
        return None
    return c


def check_target(target: Any) -> float | None:
    """A target budget (None: the default) as a float, else FitInputError: plot_fit took "1e21" into a numpy
    UFuncTypeError, inf into a RuntimeWarning, and write_report drew the page at -1e21, nan or "1e21"."""
    if target is None:
        return None
    if not (is_real(target) and np.isfinite(target) and target > 0):
        raise FitInputError(f"target must be a positive budget in FLOPs (e.g. 1e22), or None for 10x the largest "
                            f"swept, got {target!r}")
    return float(target)


def check_budgets(values: Any, what: str) -> np.ndarray:
    """``values`` as a 1-D array of FLOP counts (``flop_counts``); FitInputError naming ``what`` otherwise."""
    c = flop_counts(values)
    if c is None:
        raise FitInputError(f"{what} must be finite positive FLOP counts, got {values!r}")
    return c


def columns(result: Any) -> list[dict[str, np.ndarray]]:
    """The point estimate's parameter columns, then (if any) the bootstrap draws', each (m, 1)."""
    rows = [{k: np.array([[v]]) for k, v in result.params.items()}]
    if len(result.samples):
        rows.append({k: v[:, None] for k, v in result.draws().items()})
    return rows


def law_of(result: Any):
    """``result.law_loss`` when the result has a law over (N, D); FitInputError otherwise."""
    probe = {k: np.array([[v]]) for k, v in result.params.items()}
    if "k" not in result.params or result.law_loss(probe, np.ones((1, 1)), np.ones((1, 1))) is None:
        raise FitInputError(f"method {result.method!r} fits no law over (N, D); sizing for inference needs one: "
                            "fit with method 'parametric', 'vpnls' or 'interaction'")
    check_scale(result.runs.scale)
    return result.law_loss


def check_scale(scale: str) -> None:
    """FitInputError unless N is total parameters: a sizing is a model to train and serve, its N printed as
    parameters (non-embedding N was sized and labelled "parameters"), refused as ``loss_at`` refuses it."""
    if scale != "params":
        raise FitInputError(f"sizing for inference reads N as total parameters, and this law was fitted on {scale}: "
                            "fit with scale='params' (--scale params) to size a model for inference")


def flops_per_token(p: dict[str, np.ndarray], n: np.ndarray) -> np.ndarray:
    """Training FLOPs per token of a model of N parameters under the runs' rule: k N^(1+s)."""
    slope = p.get("k_slope", 0.0)
    return p["k"] * n ** (1.0 + slope)


def tokens_for_loss(law, p, n: np.ndarray, target: np.ndarray, d_centre: np.ndarray) -> np.ndarray:
    """D with law(N, D) = target, by bisection in log D (inf where no D reaches it)."""
    lo = np.log(d_centre) + D_DECADES[0] * np.log(10) + 0 * n
    hi = np.log(d_centre) + D_DECADES[1] * np.log(10) + 0 * n
    with np.errstate(all="ignore"):
        reachable = law(p, n, np.exp(hi)) <= target
        for _ in range(BISECTIONS):
            mid = 0.5 * (lo + hi)
            above = law(p, n, np.exp(mid)) > target
            lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    return np.where(reachable, np.exp(hi), np.inf)


def falls_with_data(law, p, n: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Where the law still falls with D at (N, D): a law whose interaction term F is negative rises
    with D below some N (its data term turns negative), where no model is read; the sizing searches
    only where more data lowers the loss, as every law's bisection in D assumes."""
    with np.errstate(all="ignore"):
        return law(p, n, d * DATA_STEP) < law(p, n, d)


def refine_minimum(log_x: np.ndarray, value: np.ndarray) -> np.ndarray:
    """The minimum of ``value`` over the last axis, refined by a parabola through the three best points."""
    value = np.where(np.isfinite(value), value, np.inf)
    i = np.clip(value.argmin(-1), 1, value.shape[-1] - 2)
    take = np.take_along_axis
    y0, y1, y2 = (take(value, (i + o)[..., None], -1)[..., 0] for o in (-1, 0, 1))
    x1 = take(log_x, i[..., None], -1)[..., 0]
    step = log_x[..., 1] - log_x[..., 0]
    with np.errstate(all="ignore"):
        curve = y0 - 2 * y1 + y2
        shift = np.where(np.isfinite(curve) & (curve > 0), 0.5 * (y0 - y2) / curve, 0.0)
    return x1 + np.clip(shift, -1, 1) * step


def _sizing(result: Any, law, p: dict[str, np.ndarray], budgets: np.ndarray, tokens: float) -> dict[str, np.ndarray]:
    n0, d0, target = result.frontier({k: v[:, 0] for k, v in p.items()}, budgets)  # (m, c)
    share = FORWARD_SHARE * tokens
    cols = {k: v[:, :, None] for k, v in p.items()}  # (m, 1, 1): broadcast over budgets and the grid
    log_n = np.log(n0)[..., None] + np.linspace(-SEARCH_DECADES, 0.1, GRID_POINTS) * np.log(10)  # (m, c, g)
    n = np.exp(log_n)
    d = tokens_for_loss(law, cols, n, target[..., None], d0[..., None])
    with np.errstate(all="ignore"):  # a model has at least one parameter (1e3 FLOPs read 0.418 parameters)
        total = np.where(falls_with_data(law, cols, n, d) & (n >= 1.0), flops_per_token(cols, n) * (d + share), np.inf)
        best = np.exp(refine_minimum(log_n, np.log(total)))
    cols2 = {k: v[:, :, 0] for k, v in cols.items()}  # (m, 1)
    # no answer where no size searched reaches the loss where the law is read, or where the compute-optimal
    # model itself sits where the law rises with data or has under one parameter (a draw of that kind names
    # no model to compare with)
    found = np.isfinite(total).any(-1) & falls_with_data(law, cols2, n0, d0) & (n0 >= 1.0)
    best = np.where(found, best, np.nan)
    d_best = np.where(found, tokens_for_loss(law, cols2, best, target, d0), np.nan)
    chinchilla = budgets[None, :] + flops_per_token(cols2, n0) * share
    with np.errstate(all="ignore"):  # the compute-optimal model reaches the loss by definition: a grid that
        # finds nothing cheaper (its points straddle it) keeps it, never a model that costs more
        dearer = found & (flops_per_token(cols2, best) * (d_best + share) > chinchilla)
    best, d_best = np.where(dearer, n0, best), np.where(dearer, d0, d_best)
    per_token = flops_per_token(cols2, best)
    train, serve = per_token * d_best, per_token * share
    with np.errstate(all="ignore"):
        return {"loss": target, "N": best, "D": d_best, "tokens_per_param": d_best / best, "train_flops": train,
                "inference_flops": serve, "total_flops": train + serve, "chinchilla_N": n0,
                "chinchilla_total_flops": chinchilla, "saving": 1.0 - (train + serve) / chinchilla}


def _total(result: Any, law, p: dict[str, np.ndarray], totals: np.ndarray, tokens: float) -> dict[str, np.ndarray]:
    n0, _, chinchilla_loss = result.frontier({k: v[:, 0] for k, v in p.items()}, totals)  # no inference: C = F
    share = FORWARD_SHARE * tokens
    cols = {k: v[:, :, None] for k, v in p.items()}

    def loss_at(log_n: np.ndarray) -> np.ndarray:
        """The loss of each N on the training tokens the total leaves it (inf where none, or not read)."""
        n = np.exp(log_n)
        d = totals[None, :, None] / flops_per_token(cols, n) - share
        trained = np.where(d > 0, d, 1.0)
        # a model has at least one parameter: below that the law answered 0.2 "parameters" for a total
        # that serving takes on any real model
        read = (n >= 1.0) & (d > 0) & falls_with_data(law, cols, n, trained)
        return np.where(read, law(cols, n, trained), np.inf)

    log_n = np.log(n0)[..., None] + np.linspace(-SEARCH_DECADES, 0.1, GRID_POINTS) * np.log(10)
    with np.errstate(all="ignore"):
        loss = loss_at(log_n)
        # the best grid point's neighbours searched again, finely: next to the size whose serving takes the
        # whole total the loss rises steeply, and a parabola through the coarse points read 326 parameters
        # on 5.91M tokens where 321 on 11.3M reach a lower loss (outside the draws' interval)
        i = np.clip(loss.argmin(-1), 1, GRID_POINTS - 2)[..., None]
        lo, hi = np.take_along_axis(log_n, i - 1, -1), np.take_along_axis(log_n, i + 1, -1)
        fine = lo + (hi - lo) * np.linspace(0.0, 1.0, GRID_POINTS)
        best = np.exp(refine_minimum(fine, loss_at(fine)))
        cols2 = {k: v[:, :, 0] for k, v in cols.items()}
        per_token = flops_per_token(cols2, best)
        d_best = totals[None, :] / per_token - share
        # serving takes the whole total on every N searched (no answer, not D < 0), or the law falls with data on
        # no N that trains (a law of runs that repeat their data, flat in D there): no size is best
        grid_n = np.exp(log_n)
        trainable = (grid_n >= 1.0) & (totals[None, :, None] / flops_per_token(cols, grid_n) - share > 0)
        flat = trainable.any(-1) & ~np.isfinite(loss).any(-1)
        trains = np.isfinite(loss).any(-1) & (d_best > 0)
        value = np.where(trains, law(cols2, best, np.where(trains, d_best, 1.0)), np.nan)

        def answer(v: np.ndarray) -> np.ndarray:
            return np.where(trains, v, np.nan)

        return {"N": answer(best), "D": answer(d_best), "tokens_per_param": answer(d_best / best), "loss": value,
                "train_flops": answer(per_token * d_best), "inference_flops": answer(per_token * share),
                "chinchilla_loss": chinchilla_loss, "flat": flat.astype(float)}


def _table(result: Any, first: str, values: np.ndarray, tokens: float, solve, names, flags=()) -> pd.DataFrame:
    law = law_of(result)
    rows = [solve(result, law, p, values, tokens) for p in columns(result)]
    out = pd.DataFrame({first: values, "inference_tokens": tokens})
    for flag in flags:  # the point estimate's, without an interval: why a row has no answer
        out[flag] = rows[0][flag][0] > 0
    for name in names:
        out[name] = rows[0][name][0]
        with warnings.catch_warnings():  # a withheld row's draws are all NaN: its interval is NaN, said once
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, hi = interval(rows[1][name], result.level) if len(rows) > 1 else (np.full(values.size, np.nan),) * 2
        out[f"{name}_lo"], out[f"{name}_hi"] = lo, hi
    return out


def inference_sizing(result: Any, budgets: Any, inference_tokens: Any) -> pd.DataFrame:
    """Per training budget C: the compute-optimal model's loss, and the N, D reaching it with the least
    training + inference FLOPs for ``inference_tokens`` served, against the compute-optimal model's total."""
    tokens = check_tokens(inference_tokens)
    return _table(result, "budget", check_budgets(budgets, "budgets"), tokens, _sizing, ("loss", *SIZING_COLUMNS))


def total_sizing(result: Any, totals: Any, inference_tokens: Any) -> pd.DataFrame:
    """Per total budget F (training + serving ``inference_tokens``): the N and D with the lowest loss, and
    the loss the compute-optimal model of training compute F would reach (no inference paid). NaN where
    serving alone takes all of F on every model searched (``unserved``)."""
    tokens = check_tokens(inference_tokens)
    return _table(result, "total_flops", check_budgets(totals, "total budgets"), tokens, _total, TOTAL_COLUMNS,
                  ("flat",))


SIZING_HEADERS = ["training FLOPs C", "{loss} to reach", "N", "D", "{unit}/param", "total FLOPs",
                  "compute-optimal model's total", "saved"]
TOTAL_HEADERS = ["total FLOPs", "N", "D", "{unit}/param", "best {loss}", "{loss} without inference"]


def headers(template: list[str], runs: Any) -> list[str]:
    """A table's headers in the runs' own words: what D counts (tokens, an image model's samples) and
    the fitted metric (the loss, a top-1 error)."""
    return [h.format(loss=runs.label, unit=runs.unit) for h in template]


def sizing_rows(table: pd.DataFrame) -> list[list[str]]:
    """``inference_sizing``'s table as "value [lo, hi]" cells (``SIZING_HEADERS``)."""
    cells = (("loss", fmt.loss), ("N", fmt.count), ("D", fmt.count), ("tokens_per_param", fmt.sig),
             ("total_flops", fmt.flops), ("chinchilla_total_flops", fmt.flops), ("saving", _share))
    rows = []
    for _, r in table.iterrows():
        row = [fmt.flops(r.budget)] + [_cell(r, k, f) if np.isfinite(r.N) or k in ("loss", "chinchilla_total_flops")
                                       else "withheld" for k, f in cells]
        if r.inference_tokens == 0 and np.isfinite(r.N):
            # nothing served: both totals are the budget itself, and nothing is saved; the draws' float noise
            # decided which read "1e+21 [1e+21, 1e+21]" and which "[withheld: resamples all equal]"
            row[-3:] = [fmt.flops(r.budget), fmt.flops(r.budget), "none"]
        rows.append(row)
    return rows


def nothing_served(table: pd.DataFrame) -> list[str]:
    """What a sizing for zero inference tokens is: the training-only optimum (``nothing_served``)."""
    if not (table["inference_tokens"] == 0).any():
        return []
    return ["with 0 inference tokens nothing is served: each sizing is the compute-optimal model of its training "
            "budget (N_opt, D_opt), its total FLOPs the budget itself, nothing saved"]


def unreached(table: pd.DataFrame) -> list[str]:
    """Why ``inference_sizing``'s rows without an answer have none: the law rises with data where it is read."""
    return [f"withheld at {fmt.flops(r.budget)} FLOPs: the law does not fall with data at the compute-optimal model "
            f"there, or that model has under one parameter, or no model of the sizes searched (down to "
            f"1e-{SEARCH_DECADES:g} x the compute-optimal size, and one parameter) reaches its loss where it does; the "
            "law is read beyond what its runs support there"
            for _, r in table.iterrows() if not np.isfinite(r.N)]


def total_rows(table: pd.DataFrame) -> list[list[str]]:
    """``total_sizing``'s table as cells (``TOTAL_HEADERS``)."""
    cells = (("N", fmt.count), ("D", fmt.count), ("tokens_per_param", fmt.sig), ("loss", fmt.loss),
             ("chinchilla_loss", fmt.loss))
    return [[fmt.flops(r.total_flops)] + [_cell(r, k, f) if np.isfinite(r.loss) or k == "chinchilla_loss"
                                          else "withheld" for k, f in cells] for _, r in table.iterrows()]


def _cell(row: Any, key: str, show) -> str:
    """"value [lo, hi]"; for N, D and tokens per parameter an interval spanning over ``fmt.SPAN_LIMIT``
    withheld, as in the fit's own table (at 1e40 FLOPs tokens/param read 6.98e+03 [0.00346, 2.25e+08])."""
    fill = fmt.scale_interval if key in ("N", "D", "tokens_per_param") else fmt.with_interval
    return fill(row[key], row[f"{key}_lo"], row[f"{key}_hi"], fmt=show)


SIZING_FIELDS = ("loss", "N", "D", "tokens_per_param", "total_flops", "chinchilla_total_flops")
TOTAL_FIELDS = ("N", "D", "tokens_per_param", "loss", "chinchilla_loss")


def json_rows(table: pd.DataFrame, fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """A sizing table for ``--json``: each interval the text withholds (``_cell``: spanning over
    ``fmt.SPAN_LIMIT``, or the point itself) null, and ``withheld`` giving why. --json gave tokens/param
    22.5 to 2.83e+04 where the text read "336 [withheld: spans over 1000x]"."""
    rows = []
    for record in table.to_dict("records"):
        gone = {}
        served = record.get("inference_tokens", 1) != 0  # nothing served: the text prints the totals as the budget
        for key in (f for f in fields if served or f not in ("total_flops", "chinchilla_total_flops")):
            value, lo, hi = record[key], record[f"{key}_lo"], record[f"{key}_hi"]
            why = (f"spans over {fmt.SPAN_LIMIT:g}x" if key in ("N", "D", "tokens_per_param") and fmt.too_wide(lo, hi)
                   else fmt.STILL_REASON if fmt.still(value, lo, hi) else None)
            if why:
                gone.update({f"{key}_lo": why, f"{key}_hi": why})
        rows.append(fmt.json_safe({**{k: None if k in gone else v for k, v in record.items()},
                                   **({"withheld": gone} if gone else {})}))
    return rows


def unserved(table: pd.DataFrame, unit: str = "tokens") -> list[str]:
    """Why ``total_sizing``'s rows without an answer have none: serving takes the whole total, or the law
    falls with data on no model that trains (it read a best loss of 3.7e6 on 8.48 parameters there)."""
    return [f"withheld at {fmt.flops(r.total_flops)} total FLOPs: " + (
            f"the law falls with data on no model searched that trains (down to 1e-{SEARCH_DECADES:g} x the "
            f"compute-optimal size, and one parameter), so no size is best; the law is read beyond what its runs "
            f"support there (runs that repeat their data flatten it in {unit})" if r.get("flat", False) else
            f"serving {fmt.count(r.inference_tokens)} {unit} takes all of it on every model searched (down to "
            f"1e-{SEARCH_DECADES:g} x the compute-optimal size, and one parameter), leaving nothing to train: give a "
            f"larger total budget or fewer inference {unit}")
            for _, r in table.iterrows() if not np.isfinite(r.loss)]


def below_runs(result: Any, table: pd.DataFrame, first: str = "budget") -> list[str]:
    """A note for each sizing whose N or D lies below every fitted run's: the law is read where no run
    measured it (a law whose terms turn there answered 404 tokens for a 2.18k-parameter model). A row
    whose sizing is withheld or above the runs still prints the compute-optimal model's loss at its
    FLOPs (the loss to reach; the loss without inference): noted too where that model lies below them."""
    runs, unit = result.runs.frame, result.runs.unit  # what D counts: tokens, an image model's samples
    smallest_n, smallest_d = float(runs["params"].min()), float(runs["tokens"].min())
    smallest = f"smallest {fmt.count(smallest_n)} parameters, {fmt.count(smallest_d)} {unit}"
    optimal = result.predict(table[first].to_numpy(float))  # the model whose loss the row prints: C = its FLOPs
    column = f"{result.runs.label.split(' (')[0]} {'to reach' if first == 'budget' else 'without inference'}"
    kind = "total FLOPs" if first == "total_flops" else "FLOPs"  # a total is training plus serving, said so
    notes = []
    for (_, r), n, d in zip(table.iterrows(), optimal.N_opt, optimal.D_opt, strict=True):
        if r.N < smallest_n or r.D < smallest_d:
            notes.append(f"at {fmt.flops(r[first])} {kind} the sizing's {fmt.count(r.N)} parameters on "
                         f"{fmt.count(r.D)} {unit} lie below the fitted runs ({smallest}): the law is read where no "
                         "run measured it, and toward small N and D a law's terms can bend where a real model's loss "
                         "does not; train runs that small before acting on it")
        elif n < smallest_n or d < smallest_d:
            notes.append(f"at {fmt.flops(r[first])} {kind} the {column} is the compute-optimal model's, "
                         f"{fmt.count(n)} parameters on {fmt.count(d)} {unit}, below the fitted runs ({smallest}): "
                         "the law is read where no run measured it; train runs that small before acting on it")
    return notes


def sizing_notes(result: Any, sizing: pd.DataFrame, totals: pd.DataFrame | None = None) -> list[str]:
    """The lines under the tables: why a row is withheld, and each sizing below every fitted run (notes).
    ``--json`` gives them too: its rows of nulls said nothing of why."""
    lines = [*nothing_served(sizing), *unreached(sizing), *(f"note: {n}" for n in below_runs(result, sizing))]
    if totals is not None:
        lines += [*unserved(totals, result.runs.unit), *(f"note: {n}" for n in below_runs(result, totals, "total_flops"))]
    return lines


def sizing_summary(result: Any, budgets: Any, inference_tokens: Any, totals: Any = None) -> str:
    """Plain text: the sizing at ``budgets`` (and, given ``totals``, the converse) for one fit."""
    tokens = check_tokens(inference_tokens)
    sizing = inference_sizing(result, budgets, tokens)
    table = total_sizing(result, totals, tokens) if totals is not None else None
    notes = sizing_notes(result, sizing)
    unit = result.runs.unit
    lines = [f"{result.method}: sizing for {fmt.count(tokens)} inference {unit} (training k N D plus a forward pass, "
             f"k/3 N, per {unit[:-1]} served; Sardana et al. 2024)",
             format_table(sizing_rows(sizing), headers(SIZING_HEADERS, result.runs)), *notes]
    if table is not None:
        lines += ["", f"{result.method}: the lowest {result.runs.label.split(' (')[0]} for a total budget (training + "
                  f"{fmt.count(tokens)} {unit} served)", format_table(total_rows(table), headers(TOTAL_HEADERS, result.runs)),
                  *sizing_notes(result, sizing, table)[len(notes):]]
    return "\n".join(lines)


def _share(value: Any) -> str:
    """A share as a percentage; a saving that rounds to nothing reads 0.0%, not -0.0% (no inference served)."""
    return f"{100 * float(value):.1f}%".replace("-0.0%", "0.0%") if np.isfinite(value) else "nan"


__all__ = ["SIZING_FIELDS", "TOTAL_FIELDS", "below_runs", "check_budgets", "falls_with_data", "flop_counts", "headers",
           "inference_sizing", "json_rows", "nothing_served",
           "sizing_notes",
           "sizing_rows", "sizing_summary", "total_rows", "total_sizing", "unreached", "unserved"]
