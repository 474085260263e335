"""Compare two recipes: B's effective compute multiplier over A, with bootstrap intervals.

At compute C, recipe B reaches the loss L_B(C) of its compute-optimal frontier; recipe A needs
C_A with L_A(C_A) = L_B(C). The multiplier is C_A / C: 2 means B is worth twice the compute.
It is constant in C when the two laws scale alike, and drifts with C when they do not, so the
comparison also reports the multiplier's trend (d log M / d log C from the smallest budget compared
to the largest, the target by default) and the difference of the frontier exponents a and b.

Each fit's frontier is evaluated through the result itself (``result.frontier``) for every
bootstrap draw; draw i of A is paired with draw i of B (the two fits resample with different
seeds: the sweeps are independent), so every number has an interval. C_A is found on a grid
of 20 points per decade, interpolated in log C and log loss; a loss A's frontier does not
reach within the grid is an infinite (or zero) multiplier, printed as "beyond search" ("below
search") with a note of the grid's ends, never as a number; a trend it makes infinite is withheld. Two
fits whose runs measure different things (tokens against samples, loss against error) are
refused: their losses are not one quantity; so are two picked from one table on different evaluation sets.

A fit is read only through the result it hands back (duck-typed), so this sits below the
approaches; its page and figure are the report's (``report.compare_page``).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.decisions.inference import flop_counts
from flops_fit.fitting.inputs import names_evaluation
from flops_fit.fitting.laws.bootstrap import interval
from flops_fit.fitting.laws.profiles import budget_groups
from flops_fit.fitting.validation.forecast import TARGET_FACTOR
from flops_fit.tables import format_table

PER_DECADE = 20
# |ln M| below this is the search's own error (linear in log C and log loss between grid points 1/20 decade
# apart: up to 1e-4 on the demo's laws), not a difference: a fit against itself read "B is better: ... 1 [1, 1]"
# and "the multiplier grows with scale (8.59e-06 [7.1e-06, 1.03e-05])"
RESOLUTION = 1e-3
REACH = (-4.0, 6.0)  # decades below the smallest and above the largest budget A's compute is searched over
CHUNK = 100  # draws per frontier evaluation (a numeric frontier holds draws x grid x its own search)
HEADERS = ["FLOPs", "{metric} A", "{metric} B", "multiplier (A's compute / B's)", "verdict"]  # ``Comparison.headers``


@dataclass(repr=False)
class Comparison:
    """B against A: the multiplier per budget (``table``), its trend with scale, the exponents' differences."""

    a: Any
    b: Any
    names: tuple[str, str]
    target: float
    table: pd.DataFrame
    trend: tuple[float, float, float]
    exponents: dict[str, tuple[float, float, float]]
    level: float = 0.95
    notes: list[str] = field(default_factory=list)

    @property
    def metric(self) -> str:
        """What both fits minimise, in words: "loss", or the metric's label (top-1 error, bits per byte)."""
        return "loss" if self.a.runs.metric == "loss" else self.a.runs.label

    @property
    def headers(self) -> list[str]:
        return [h.format(metric=self.metric) for h in HEADERS]

    @property
    def at_target(self) -> pd.Series:
        """The target's row: budgets given past it (--budgets 1e40, --target 1e18 below the largest swept) come
        after it, and the last row's multiplier was read as the target's."""
        return self.table.loc[self.table.budget == self.target].iloc[0]

    def verdict(self) -> str:
        """One sentence on the multiplier at the target and how it moves with scale."""
        a, b = self.names
        r = self.at_target
        m = _with_interval(r.multiplier, r.multiplier_lo, r.multiplier_hi)
        pct = f"{100 * self.level:g}%"
        if np.isnan(r.multiplier_lo) or np.isnan(r.multiplier_hi):
            head = (f"The multiplier of {b} over {a} at C = {fmt.flops(self.target)} FLOPs is {m}, with no interval "
                    "to tell a difference from noise.")
        elif r.multiplier_lo <= 1.0 <= r.multiplier_hi:
            head = (f"No measurable difference at C = {fmt.flops(self.target)} FLOPs: the multiplier of {b} over {a} "
                    f"is {m}, and its {pct} interval holds 1.0.")
        elif r.multiplier_lo > 1.0 and np.isinf(r.multiplier):
            least = "" if np.isinf(r.multiplier_lo) else f" (the multiplier's {pct} interval starts at {_times(r.multiplier_lo)})"
            head = (f"{b} is better: at C = {fmt.flops(self.target)} FLOPs {a} does not reach {b}'s {self.metric} within the "
                    f"search{least}.")
        elif r.multiplier_lo > 1.0:
            head = (f"{b} is better: at C = {fmt.flops(self.target)} FLOPs {a} needs {m} times the compute to reach "
                    f"{b}'s {self.metric}.")
        elif r.multiplier == 0:
            head = (f"{b} is worse: at C = {fmt.flops(self.target)} FLOPs {a} reaches {b}'s {self.metric} below the search's "
                    "start.")
        else:
            head = (f"{b} is worse: at C = {fmt.flops(self.target)} FLOPs {a} reaches {b}'s {self.metric} with {m} times the "
                    "compute.")
        slope = _slope(*self.trend)
        if np.isinf(self.trend[0]):
            tail = ("The multiplier's trend with scale is withheld: the multiplier is beyond the search at some "
                    "budgets (see the note).")
        elif len(self.table) < 2:  # it printed "d log M / d log C = nan."
            tail = ("The multiplier's trend with scale is withheld: one budget compared; give two or more "
                    "(budgets=, CLI: --budgets) to see it.")
        elif np.isnan(self.trend[0]):
            tail = ("The multiplier's trend with scale is withheld: the multiplier lies outside the search at both "
                    "ends of the budgets compared (see the note).")
        elif np.isnan(self.trend[1]):
            tail = f"d log M / d log C = {slope}."
        elif self.trend[1] > 0:
            tail = f"The multiplier grows with scale (d log M / d log C = {slope})."
        elif self.trend[2] < 0:
            tail = f"The multiplier shrinks with scale (d log M / d log C = {slope})."
        else:
            tail = f"No measurable change with scale (d log M / d log C = {slope}, interval holds 0)."
        return f"{head} {tail}"

    def rows(self) -> list[list[str]]:
        out = []
        for r in self.table.itertuples():
            loss_a = fmt.with_interval(r.loss_a, r.loss_a_lo, r.loss_a_hi, fmt=fmt.loss)
            loss_b = fmt.with_interval(r.loss_b, r.loss_b_lo, r.loss_b_hi, fmt=fmt.loss)
            out.append([fmt.flops(r.budget) + (" (target)" if r.budget == self.target else ""), loss_a, loss_b,
                        _with_interval(r.multiplier, r.multiplier_lo, r.multiplier_hi), r.verdict])
        return out

    def exponent_rows(self) -> list[list[str]]:
        """The frontier exponents' differences (B - A), each judged by its interval: without draws there is
        none, and "no measurable difference" would be a verdict no interval gave."""
        return [[f"{k} (N_opt ~ C^a)" if k == "a" else f"{k} (D_opt ~ C^b)", fmt.with_interval(*v),
                 _exponent_verdict(*v[1:])] for k, v in self.exponents.items()]

    def summary(self) -> str:
        a, b = self.names
        pct = f"{100 * self.level:g}%"
        lines = [f"{b} (B, {self.b.runs.source}) against {a} (A, {self.a.runs.source}): {self.a.title}, "
                 f"{len(self.a.samples)} / {len(self.b.samples)} bootstrap draws, {pct} intervals", "",
                 self.verdict(), "",
                 format_table(self.rows(), self.headers), "",
                 format_table(self.exponent_rows(), ["exponent", "B - A", "verdict"])]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return (f"<Comparison of {self.names[1]} against {self.names[0]} up to C = {fmt.flops(self.target)}: "
                f"{self.verdict().rstrip('.')}; print() it for the table>")

    def to_dict(self) -> dict[str, Any]:
        return fmt.json_safe({
            "a": {"name": self.names[0], "source": self.a.runs.source, "runs": len(self.a.runs)},
            "b": {"name": self.names[1], "source": self.b.runs.source, "runs": len(self.b.runs)},
            "method": self.a.method, "level": self.level, "target": self.target, "verdict": self.verdict(),
            "table": [{**r, **_searched(r)} for r in self.table.to_dict("records")],
            "trend": dict(zip(("estimate", "lo", "hi"), self.trend, strict=True)),
            "exponent_difference": {k: {**dict(zip(("estimate", "lo", "hi"), v, strict=True)),
                                        "verdict": _exponent_verdict(*v[1:])}  # the text's verdict, as --json's
                                    for k, v in self.exponents.items()},
            "notes": self.notes})

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), indent=kwargs.pop("indent", 2), default=fmt.json_default, **kwargs)


def _with_interval(value: Any, lo: Any, hi: Any) -> str:
    if np.isnan(lo) or np.isnan(hi):
        return _times(value)
    return f"{_times(value)} [{_times(lo)}, {_times(hi)}]"


def _slope(value: Any, lo: Any, hi: Any) -> str:
    """The trend d log M / d log C: a number like any other (0 is no change, not a multiplier "below
    search"); an infinite end is a multiplier beyond the search in some draws."""
    def cell(v: Any) -> str:
        return "beyond search" if np.isinf(v) else fmt.sig(v + 0.0)  # + 0.0: -0.0 reads as 0

    return cell(value) if np.isnan(lo) or np.isnan(hi) else f"{cell(value)} [{cell(lo)}, {cell(hi)}]"


def _columns(result: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    point = {k: np.array([v]) for k, v in result.params.items()}
    draws = result.draws() if len(result.samples) else None
    return point, draws


def _take(columns: dict[str, np.ndarray], rows: slice) -> dict[str, np.ndarray]:
    return {k: v[rows] for k, v in columns.items()}


def compute_to_reach(result: Any, params: dict[str, np.ndarray], loss: np.ndarray,
                     grid: np.ndarray) -> np.ndarray:
    """Per parameter row and target loss (``loss``: (m, c)): the compute at which the frontier reaches
    it, interpolated on ``grid`` in log C and log loss; inf beyond the grid's end, 0 before its start."""
    m = loss.shape[0]
    out = np.empty_like(loss)
    log_c = np.log(grid)
    for start in range(0, m, CHUNK):
        rows = slice(start, min(m, start + CHUNK))
        _, _, curve = result.frontier(_take(params, rows), grid)  # (k, g), falling with C
        with np.errstate(all="ignore"):
            # where a law's frontier rises with C (the interaction law's on the demo's runs climbs from -9.3 at
            # 6e6 FLOPs to its peak at 6e9), it is read where it does not hold: held at the peak there, or A
            # "reached" every loss below the search's start against the same law
            peak = np.where(np.isfinite(curve), curve, -np.inf).argmax(axis=1)[:, None]
            rising = (np.arange(grid.size)[None, :] < peak) & np.isfinite(curve)
            curve = np.where(rising, np.take_along_axis(curve, peak, 1), curve)
            curve = np.minimum.accumulate(np.where(np.isfinite(curve), curve, np.inf), axis=1)
            target = loss[rows]
            above = (curve[:, :, None] > target[:, None, :]).sum(axis=1)  # grid points still above the target
            i = np.clip(above, 1, grid.size - 1)
            y0 = np.log(np.take_along_axis(curve, i - 1, 1))
            y1 = np.log(np.take_along_axis(curve, i, 1))
            share = np.clip((y0 - np.log(target)) / (y0 - y1), 0.0, 1.0)
            share = np.where(np.isfinite(share), share, 0.0)
            value = np.exp(log_c[i - 1] + share * (log_c[i] - log_c[i - 1]))
        value = np.where(above >= grid.size, np.inf, value)
        out[rows] = np.where(above == 0, 0.0, value)
    return out


def check_budgets(target: Any, budgets: Any) -> np.ndarray | None:
    """``budgets`` as an array (None if not given), after refusing a ``target`` or budgets that are not finite
    positive FLOP counts: a budget of 0 ended in a traceback, and a target of 0 fell back to the default."""
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float, np.number))
                               or not (np.isfinite(target) and target > 0)):
        raise FitInputError(f"target must be a finite positive number of FLOPs (e.g. 1e22), got {target!r}")
    if budgets is None:
        return None
    c = flop_counts(budgets)
    if c is None:
        raise FitInputError(f"budgets must be finite positive numbers of FLOPs (e.g. [1e20, 1e21]), got {budgets!r}")
    return c


def compare_results(a: Any, b: Any, *, target: float | None = None,
                    budgets: Sequence[float] | None = None, names: tuple[str, str] = ("A", "B")) -> Comparison:
    """The comparison of two fitted results (the same method, fitted to each recipe's runs)."""
    if a.method != b.method:
        raise FitInputError(f"compare two fits of one method; got {a.method!r} and {b.method!r}")
    given = check_budgets(target, budgets)
    each = [np.unique(budget_groups(r.runs)[0]) for r in (a, b)]
    swept = np.unique(np.concatenate(each))
    target = float(target) if target is not None else float(TARGET_FACTOR * swept.max())
    c = np.unique(np.append(given if given is not None else swept, target))
    grid = np.geomspace(c.min() * 10 ** REACH[0], c.max() * 10 ** REACH[1],
                        int(PER_DECADE * (np.log10(c.max() / c.min()) + REACH[1] - REACH[0])) + 1)
    (pa, da), (pb, db) = _columns(a), _columns(b)
    notes = same_quantity(a.runs, b.runs, names)
    notes += [f"{name} (recipe {side}): {note}" for side, name, result in (("A", names[0], a), ("B", names[1], b))
              for note in result.runs.notes]  # e.g. runs a column flags as outliers, fitted with the others
    draws = min(len(a.samples), len(b.samples))
    if draws and len(a.samples) != len(b.samples):
        notes.append(f"the fits have {len(a.samples)} and {len(b.samples)} draws; the first {draws} of each are paired")
    estimates = {}
    for key, (ca, cb) in {"point": (pa, pb), "draws": (da, db)}.items():
        if ca is None or cb is None or (key == "draws" and not draws):
            continue
        if key == "draws":
            ca, cb = _take(ca, slice(0, draws)), _take(cb, slice(0, draws))
        _, _, loss_b = b.frontier(cb, c)
        _, _, loss_a = a.frontier(ca, c)
        needed = compute_to_reach(a, ca, loss_b, grid)
        with np.errstate(all="ignore"):  # within the search's own interpolation error of 1 is 1
            multiplier = np.where(np.abs(np.log(needed / c[None, :])) < RESOLUTION, 1.0, needed / c[None, :])
        estimates[key] = {"loss_a": loss_a, "loss_b": loss_b, "multiplier": multiplier}
    table = pd.DataFrame({"budget": c})
    level = a.level
    for name in ("loss_a", "loss_b", "multiplier"):
        table[name] = estimates["point"][name][0]
        lo, hi = (_interval(estimates["draws"][name], level) if "draws" in estimates
                  else (np.full(c.size, np.nan),) * 2)
        table[f"{name}_lo"], table[f"{name}_hi"] = lo, hi
    table["verdict"] = [_budget_verdict(lo, hi) for lo, hi in zip(table.multiplier_lo, table.multiplier_hi,
                                                                   strict=True)]
    notes += _unmeasured(table, grid)
    below = c[c < swept.min()]
    if below.size:  # --target 1e3 read "No measurable difference at C = 1e+03 FLOPs" without a word
        notes.append(f"{', '.join(fmt.flops(v) for v in below)} FLOPs lie(s) below every budget either recipe swept "
                     f"(the smallest {fmt.flops(swept.min())}): both laws are read there where no run measured them")
    notes += _below_one(c, each, names)
    span = np.log(c.max() / c.min())  # the budgets compared, smallest to largest (the target by default)
    with np.errstate(all="ignore"):  # a multiplier below or beyond the search (0, inf): an infinite trend, withheld
        slope = {k: np.log(v["multiplier"][:, -1] / v["multiplier"][:, 0]) / span for k, v in estimates.items()}
    # one budget compared has no trend (0 / 0: its draws' interval was numpy's All-NaN warning)
    trend = _estimate(slope["point"][0], slope.get("draws"), level) if c.size > 1 else (np.nan,) * 3
    exponents = {}
    for k in ("a", "b"):
        if k in a.params and k in b.params:
            diff = (b.samples[k].to_numpy(float)[:draws] - a.samples[k].to_numpy(float)[:draws]) if draws else None
            exponents[k] = _estimate(b.params[k] - a.params[k], diff, level)
    if not draws:
        notes.append("no bootstrap draws (bootstrap=0): point estimates only, nothing to tell noise from a difference")
    return Comparison(a=a, b=b, names=names, target=target, table=table, trend=trend, exponents=exponents,
                      level=level, notes=notes)


def _interval(draws: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """``interval`` that keeps infinite draws (A never reaching B's loss) infinite instead of NaN; a
    bound the percentile interpolates toward an infinite draw, past every finite one, is beyond the
    search too (it printed 3.48e+307)."""
    values = np.asarray(draws, float)
    big = np.finfo(float).max / 4
    lo, hi = interval(np.clip(values, -big, big), level)
    finite = np.where(np.isfinite(values), values, np.nan)
    with np.errstate(all="ignore"), warnings.catch_warnings():  # a column of no finite draw: left to ``big``
        warnings.simplefilter("ignore", RuntimeWarning)
        top, bottom = np.nanmax(finite, axis=0), np.nanmin(finite, axis=0)

    def back(v: np.ndarray) -> np.ndarray:
        return np.where((v >= big) | (v > top), np.inf, np.where((v <= -big) | (v < bottom), -np.inf, v))
    return back(lo), back(hi)


def _estimate(point: float, draws: np.ndarray | None, level: float) -> tuple[float, float, float]:
    if draws is None or not np.size(draws):
        return float(point), float("nan"), float("nan")
    lo, hi = _interval(draws, level)
    return float(point), float(lo), float(hi)


def _searched(record: dict[str, Any]) -> dict[str, Any]:
    """A row's multipliers outside the search, as the text says them ("beyond search", "below search"): --json
    gave null (or 0.0) there, the same null as a bound no draws gave."""
    marks = {k: _times(record[k]) for k in ("multiplier", "multiplier_lo", "multiplier_hi")
             if np.isinf(record[k]) or record[k] == 0}
    return {"search": marks} if marks else {}


def _times(value: Any) -> str:
    """A multiplier: "beyond search" where A does not reach B's loss within the search, "below
    search" where A is there before its start, else 3 figures."""
    if np.isinf(value):
        return "beyond search"
    return "below search" if value == 0 else fmt.sig(value)


def _below_one(c: np.ndarray, each: list[np.ndarray], names: tuple[str, str]) -> list[str]:
    """Notes on the budgets below one recipe's sweep but not the other's: there its law is read where
    none of its runs measured it (recipes with no budget in common read "B better" at A's budgets,
    B's loss decades below its runs, without a word)."""
    notes = []
    if each[0].max() < each[1].min() or each[1].max() < each[0].min():
        notes.append(f"the recipes share no budget ({names[0]} swept {fmt.flops(each[0].min())} to "
                     f"{fmt.flops(each[0].max())} FLOPs, {names[1]} {fmt.flops(each[1].min())} to "
                     f"{fmt.flops(each[1].max())}): at every budget one of the two laws is read outside its runs")
    for name, own, other in ((names[0], each[0], each[1]), (names[1], each[1], each[0])):
        below = c[(c < own.min()) & (c >= other.min())]
        if below.size:
            notes.append(f"{', '.join(fmt.flops(v) for v in below)} FLOPs lie(s) below every budget {name} swept "
                         f"(its smallest {fmt.flops(own.min())}): {name}'s law is read there where none of its "
                         "runs measured it")
    return notes


def _unmeasured(table: pd.DataFrame, grid: np.ndarray) -> list[str]:
    """Notes on multipliers the search could not measure (infinite or zero), with its ends."""
    values = table[["multiplier", "multiplier_lo", "multiplier_hi"]].to_numpy(float)
    notes = []
    if np.isinf(values).any():
        notes.append(f"beyond search: A's frontier does not reach B's loss up to {fmt.flops(grid[-1])} FLOPs "
                     f"({10 ** REACH[1]:g}x the largest budget compared): the multiplier is larger than the search "
                     "can measure")
    if (values == 0).any():
        notes.append(f"below search: A's frontier reaches B's loss already at {fmt.flops(grid[0])} FLOPs "
                     f"({10 ** -REACH[0]:g}x below the smallest budget compared): the multiplier is smaller than "
                     "the search can measure")
    return notes


def same_quantity(a: Any, b: Any, names: tuple[str, str]) -> list[str]:
    """FitInputError where the runs ``a`` and ``b`` (``Runs``) measure different things; notes
    where they may not."""
    for what, side_a, side_b in (("metric", a.metric, b.metric), ("unit", a.unit, b.unit)):
        if side_a != side_b:
            raise FitInputError(f"{names[0]} and {names[1]} measure different things ({what}: {side_a} against "
                                f"{side_b}), so their losses are not one quantity and no multiplier relates them: "
                                "compare two sweeps of one kind of model, data and metric")
    sets = [r.metadata.get("evaluation") or {} for r in (a, b)]
    for column in sorted(set(sets[0]) & set(sets[1])):  # each side's own table, or its own rows of one
        if len(sets[0][column]) == len(sets[1][column]) == 1 and sets[0][column] != sets[1][column]:
            raise FitInputError(
                f"recipes {names[0]} and {names[1]} are measured on different evaluation sets ({column}: "
                f"{sets[0][column][0]!r} against {sets[1][column][0]!r}), so their losses are not one quantity and "
                f"no multiplier relates them: compare runs evaluated on one set")
    datasets = [(r.metadata.get("spec") or {}).get("dataset") for r in (a, b)]
    if None not in datasets and datasets[0] != datasets[1]:
        return [f"{names[0]} trained and was evaluated on {datasets[0]!r}, {names[1]} on {datasets[1]!r}: each loss "
                "is on its own held-out data (and tokenizer), so the multiplier compares the recipes only as far "
                "as those losses are comparable"]
    return []


def same_evaluation(where_a: dict[str, Any], where_b: dict[str, Any], names: tuple[str, str]) -> None:
    """FitInputError where the rows picked for A and B (``where``) name different evaluation sets: losses on
    different sets are not one quantity (c4_val against paloma_ptb read as "B worse, 0.08x the compute")."""
    for column in sorted(set(where_a) & set(where_b), key=str):
        if where_a[column] != where_b[column] and names_evaluation(column):
            raise FitInputError(
                f"recipes {names[0]} and {names[1]} are measured on different evaluation sets ({column}: "
                f"{where_a[column]!r} against {where_b[column]!r}), so their losses are not one quantity and no "
                f"multiplier relates them: pick one set for both (--where {column}={where_a[column]}; API: "
                f"where={{{column!r}: {where_a[column]!r}}})")


def _exponent_verdict(lo: float, hi: float) -> str:
    if np.isnan(lo) or np.isnan(hi):
        return "no interval"
    return "differ" if lo > 0 or hi < 0 else "no measurable difference"


def _budget_verdict(lo: float, hi: float) -> str:
    if np.isnan(lo) or np.isnan(hi):
        return "no interval"
    if lo <= 1.0 <= hi:
        return "no measurable difference"
    return "B better" if lo > 1.0 else "B worse"


__all__ = ["Comparison", "check_budgets", "compare_results", "compute_to_reach", "same_evaluation", "same_quantity"]
