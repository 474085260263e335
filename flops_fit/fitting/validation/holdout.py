"""Does a fitted law predict a budget it has not seen? Fit on the other budgets, compare.

The honest test of a scaling law is extrapolation: fit every method without one budget's
runs, predict that budget's minimum loss and N_opt, and compare them with what the budget's
own IsoFLOP profile shows (its minimum, with a bootstrap interval from resampling the
budget's runs). Reported per method: both values, the relative errors, and whether each
observed value falls inside the predicted interval.
"""

from __future__ import annotations

import copy
import multiprocessing
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws.bootstrap import interval, resample_weights
from flops_fit.fitting.laws.profiles import (
    MIN_SIZES,
    budget_groups,
    profile_minimum,
    slice_minima,
    slice_minima_many,
)
from flops_fit.fitting.laws.slices import slice_residuals
from flops_fit.fitting.validation.validity import failure
from flops_fit.tables import format_table

CHOICES = ("largest", "each", "forward")  # besides a budget in FLOPs
FORWARD_MIN = 2  # budgets every forward-chaining fit sees at least
MATCH_RTOL = 1e-3  # a named budget matches a runs' budget within this relative tolerance


class Fitter(Protocol):
    """What the check needs of an approach: its name and a fit of some runs."""

    name: str

    def fit(self, runs: Runs) -> Any: ...


@dataclass(kw_only=True)
class Observed:
    """A held-out budget's own answer: the minimum of its IsoFLOP profile, with intervals."""

    budget: float
    runs: int
    n_opt: float = np.nan
    n_opt_interval: tuple[float, float] = (np.nan, np.nan)
    loss: float = np.nan
    loss_interval: tuple[float, float] = (np.nan, np.nan)
    reason: str | None = None


@dataclass(kw_only=True)
class HoldoutCheck:
    """One method's prediction for a held-out budget against that budget's observed optimum.

    Errors are relative, (predicted - observed) / observed; ``covered`` says whether each
    observed value lies inside the predicted interval (None when either is missing).
    """

    method: str
    budget: float
    fitted_budgets: list[float]
    predicted_loss: float = np.nan
    loss_interval: tuple[float, float] = (np.nan, np.nan)
    observed_loss: float = np.nan
    observed_loss_interval: tuple[float, float] = (np.nan, np.nan)
    loss_error: float = np.nan
    predicted_n_opt: float = np.nan
    n_opt_interval: tuple[float, float] = (np.nan, np.nan)
    observed_n_opt: float = np.nan
    observed_n_opt_interval: tuple[float, float] = (np.nan, np.nan)
    n_opt_error: float = np.nan
    covered: dict[str, bool | None] = field(default_factory=lambda: {"loss": None, "n_opt": None})
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return fmt.json_safe(asdict(self))


# what "each" and "forward" refuse once the profiles are fitted (so "auto" can fall back to no check, saying it)
NO_MINIMUM = ("no budget's IsoFLOP profile has an interior minimum to compare with (these runs are not an IsoFLOP "
              "sweep, or lack sizes around each budget's optimum)")
NO_SWEEP_HINT = ("fit without a held-out check (holdout=None, --holdout none), or compare the law with the runs "
                 "of the largest budget (holdout='largest', --holdout largest)")


def holdout_refusal(runs: Runs, which: Any) -> tuple[str, str] | None:
    """Why these runs allow no held-out check of kind ``which``, and the options that work; None
    when they allow it."""
    budgets, _ = budget_groups(runs)
    unique = np.unique(budgets)
    if len(unique) < 2:
        return (f"a held-out check needs runs at 2 or more budgets; these runs have {len(unique)}",
                "fit without one (holdout=None, --holdout none)")
    if which == "forward" and len(unique) <= FORWARD_MIN:
        return (f"holdout='forward' fits at least {FORWARD_MIN} budgets and predicts a larger one: it needs "
                f"{FORWARD_MIN + 1} or more budgets; these runs have {len(unique)}",
                "hold out 'largest' or 'each' instead (--holdout largest), or fit without a check (--holdout none)")
    if which in ("each", "forward") and not any(np.unique(runs.frame["params"].to_numpy(float)[budgets == b]).size
                                                >= MIN_SIZES for b in unique):
        return (f"holdout={which!r} compares each budget's IsoFLOP minimum with the law's, and no budget here has "
                f"runs of {MIN_SIZES} or more sizes (these runs are not an IsoFLOP sweep)", NO_SWEEP_HINT)
    return None


def select_budgets(runs: Runs, which: Any) -> tuple[np.ndarray, list[float]]:
    """Each run's budget and the budgets to hold out: "largest", "each" (every budget in
    turn) or a number naming one budget. Refuses a budget the runs do not have."""
    budgets, _ = budget_groups(runs)
    unique = sorted(float(b) for b in np.unique(budgets))
    refused = holdout_refusal(runs, which)
    if refused is not None:
        raise FitInputError(": ".join(refused))
    if which in CHOICES:
        return budgets, {"largest": unique[-1:], "each": unique, "forward": unique[FORWARD_MIN:]}[which]
    try:
        value = float(which)
    except (TypeError, ValueError):
        raise FitInputError(f"holdout must be 'forward', 'largest', 'each', 'auto', 'none' or a budget in FLOPs (e.g. 1e21); "
                           f"got {which!r}") from None
    match = [b for b in unique if np.isclose(b, value, rtol=MATCH_RTOL, atol=0)]
    if not match:
        raise FitInputError(f"holdout={value:g}: no runs at that budget; the runs' budgets are "
                            f"{', '.join(fmt.flops(b) for b in unique)}")
    return budgets, match


def observe(runs: Runs, budgets: np.ndarray, budget: float, *, curve: str, bootstrap: int, seed: int | None,
            level: float) -> Observed:
    """The held-out budget's profile minimum, with percentile intervals from resampling its runs.

    With the slice curve (the default) the budget's own runs set its slice, and every
    budget's runs set the slices' shared exponents (the shape of a profile, not where its
    minimum is): one budget's 5-15 runs cannot fit five parameters alone. Its intervals come
    from a residual bootstrap (``_residual_draws``); other curves resample the budget's runs.
    """
    f = runs.frame
    log_n, loss = np.log(f["params"].to_numpy(float)), f["loss"].to_numpy(float)
    held = budgets == budget
    others = [budgets == c for c in np.unique(budgets) if c != budget]

    def minimum(w: np.ndarray, start=None):
        if curve != "slice":
            return profile_minimum(log_n[held], loss[held], w, curve), None
        groups = [(log_n[held], loss[held], w)] + [(log_n[m], loss[m], np.ones(m.sum())) for m in others]
        minima, exponents = slice_minima(groups, start)
        return minima[0], exponents

    (x, y, reason), exponents = minimum(np.ones(held.sum()))
    if reason is not None:
        return Observed(budget=budget, runs=int(held.sum()), reason=f"the held-out budget has no observed optimum: {reason}")
    n_int = l_int = (np.nan, np.nan)
    if bootstrap and exponents is not None:
        draws = np.array(_residual_draws(log_n, loss, held, others, exponents, bootstrap, seed))
    elif bootstrap:
        draws = np.array([minimum(w, exponents)[0][:2] for w in resample_weights(int(held.sum()), bootstrap, seed)])
    if bootstrap:
        lo, hi = interval(draws, level)
        n_int, l_int = (float(np.exp(lo[0])), float(np.exp(hi[0]))), (float(lo[1]), float(hi[1]))
    return Observed(budget=budget, runs=int(held.sum()), n_opt=float(np.exp(x)), n_opt_interval=n_int,
                    loss=float(y), loss_interval=l_int)


def observe_each(runs: Runs, budgets: np.ndarray, chosen: Sequence[float], *, curve: str, bootstrap: int,
                 seed: int | None, level: float, workers: int = 1) -> list[Observed]:
    """``observe`` at each of ``chosen``, in order; inside ``shared_refits`` with ``workers`` > 1 on the
    shared pool (each budget's bootstrap is its own: the same answers, sooner)."""
    return observe_pairs([(runs, budgets, budget) for budget in chosen], curve=curve, bootstrap=bootstrap, seed=seed,
                         level=level, workers=workers)


def observe_pairs(items: Sequence[tuple[Runs, np.ndarray, float]], *, curve: str, bootstrap: int, seed: int | None,
                  level: float, workers: int = 1) -> list[Observed]:
    """``observe`` at each (runs, their budgets, budget) of ``items``, in order (several runs: forward
    chaining's scales), on the shared pool as ``observe_each``."""
    k = len(items)
    return _map(_observe, [i[0] for i in items], [i[1] for i in items], [i[2] for i in items], [curve] * k,
                [bootstrap] * k, [seed] * k, [level] * k, workers=workers)


def _observe(runs: Runs, budgets: np.ndarray, budget: float, curve: str, bootstrap: int, seed: int | None,
             level: float) -> Observed:
    return observe(runs, budgets, budget, curve=curve, bootstrap=bootstrap, seed=seed, level=level)


def _residual_draws(log_n, loss, held, others, exponents, bootstrap: int, seed: int | None) -> list[tuple[float, float]]:
    """Slice minima of the held-out budget refitted to its fitted slice plus residuals drawn from
    every budget's (a residual bootstrap: 5-15 runs of one budget are too few to resample
    themselves, and a resample of 5 runs often has 2 sizes left)."""
    groups = [(log_n[held], loss[held], np.ones(held.sum()))] + [(log_n[m], loss[m], np.ones(m.sum())) for m in others]
    fitted, residuals = slice_residuals(groups, exponents)
    rng = np.random.default_rng(seed)
    noisy = [fitted[0] + rng.choice(residuals, size=fitted[0].size) for _ in range(bootstrap)]
    solved = slice_minima_many([[(groups[0][0], y, groups[0][2])] + groups[1:] for y in noisy], exponents)
    return [minima[0][:2] for minima, _ in solved]  # every draw's slices fitted at once


def check(approach: Fitter, runs: Runs, budgets: np.ndarray, observed: Observed) -> HoldoutCheck:
    """Fit ``approach`` without the held-out budget's runs and compare its prediction there."""
    return check_many(approach, runs, budgets, budgets != observed.budget, [observed])[0]


def check_many(approach: Fitter, runs: Runs, budgets: np.ndarray, keep: np.ndarray,
               observed: Sequence[Observed]) -> list[HoldoutCheck]:
    """Fit ``approach`` on the runs ``keep`` selects (once) and compare its prediction at each
    observed budget (forward chaining predicts every larger budget from one fit)."""
    return compare(approach.name, budgets, keep, observed, predict(approach, runs, keep, observed))


def predict(approach: Fitter, runs: Runs, keep: np.ndarray, observed: Sequence[Observed]):
    """The refit on the runs ``keep`` selects and its ``predict`` table at the observed budgets,
    or the reason there is none (a string)."""
    try:
        result = approach.fit(runs.subset(keep))
    except FitInputError as exc:
        result = exc
    return prediction(result, observed)


def prediction(result: Any, observed: Sequence[Observed]):
    """A refit's (or its FitInputError's) ``predict`` table at the observed budgets, or the reason
    there is none (a string)."""
    if isinstance(result, FitInputError):
        return f"cannot fit the other budgets: {result}"
    failed = failure(result, [o.budget for o in observed])
    if failed is not None:  # a refit without a finite, ordered answer is a reason, never numbers
        return f"{FAILED}{failed}"
    return result.predict([o.budget for o in observed])


FAILED = "the fit of the other budgets failed: "


def compare(method: str, budgets: np.ndarray, keep: np.ndarray, observed: Sequence[Observed],
            table) -> list[HoldoutCheck]:
    """Each observed budget's check from a refit's ``predict`` table (or the reason it has none)."""
    fitted = sorted(float(b) for b in np.unique(budgets[keep]))
    if isinstance(table, str):
        return [HoldoutCheck(method=method, budget=o.budget, fitted_budgets=fitted, reason=table) for o in observed]
    checks = []
    for o, p in zip(observed, table.itertuples(), strict=True):
        loss_int, n_int = (float(p.loss_lo), float(p.loss_hi)), (float(p.N_opt_lo), float(p.N_opt_hi))
        checks.append(HoldoutCheck(
            method=method, budget=o.budget, fitted_budgets=fitted,
            predicted_loss=float(p.loss), loss_interval=loss_int, observed_loss=o.loss,
            observed_loss_interval=o.loss_interval, loss_error=float(p.loss) / o.loss - 1,
            predicted_n_opt=float(p.N_opt), n_opt_interval=n_int, observed_n_opt=o.n_opt,
            observed_n_opt_interval=o.n_opt_interval, n_opt_error=float(p.N_opt) / o.n_opt - 1,
            covered={"loss": None if fmt.loss_beyond(loss_int[1], o.loss) else _inside(o.loss, loss_int),
                     "n_opt": _inside(o.n_opt, n_int, scale=True)},
            reason=o.reason,
        ))
    return checks


Task = tuple[Fitter, Runs, np.ndarray, np.ndarray, Sequence[Observed]]


class SharedRefits:
    """Refits' predictions kept while a fit lasts (``shared_refits``), so that forward chaining's
    point fits on the runs' own scale reuse the held-out checks' refits of the same approach on
    the same runs: a refit with bootstrap resamples has the point fit's point predictions (the
    resamples only add intervals, dropped here). A refit that failed the validity check is not
    reused for a point fit (it may have failed on its intervals alone). Fits of all the runs
    (``fit_pairs``) are kept the same way: the forecast's point fit of a method on the runs'
    own scale is the method's own fit without its resamples."""

    def __init__(self) -> None:
        self.tables: dict[Any, tuple[int, Any, Runs]] = {}
        self.hits = 0
        self.fits: dict[Any, tuple[int, Any, Runs]] = {}
        self.fit_hits = 0
        self._pool: tuple[int, ProcessPoolExecutor] | None = None

    def pool(self, workers: int) -> ProcessPoolExecutor:
        """One pool of ``workers`` processes for every ``run_checks`` in the block (``worker_context``)."""
        if self._pool is None or self._pool[0] != workers:
            self.close()
            self._pool = workers, ProcessPoolExecutor(workers, mp_context=worker_context())
        return self._pool[1]

    def close(self) -> None:
        if self._pool is not None:
            self._pool[1].shutdown()
            self._pool = None

    @staticmethod
    def key(task: Task) -> Any:
        approach, runs, _, keep, observed = task
        base = _fit_key(approach, runs)
        return None if base is None else (*base, keep.tobytes(), tuple(o.budget for o in observed))

    def get(self, task: Task):
        key = self.key(task)
        if key is None or key not in self.tables:
            return None
        bootstrap, table, _ = self.tables[key]
        wanted = getattr(task[0], "bootstrap", 0)
        if wanted == bootstrap:
            self.hits += 1
            return table
        if wanted or (isinstance(table, str) and table.startswith(FAILED)):
            return None
        self.hits += 1
        return table if isinstance(table, str) else _points_only(table)

    def put(self, task: Task, table) -> None:
        key = self.key(task)
        if key is not None:
            self.tables[key] = (getattr(task[0], "bootstrap", 0), table, task[1])  # holding the runs keeps their id

    def known_fit(self, approach: Fitter, runs: Runs) -> Any:
        """A fit of ``approach`` on ``runs`` already made (without its resamples where it had
        some and ``approach`` has none), or None."""
        key = _fit_key(approach, runs)
        if key is None or key not in self.fits:
            return None
        bootstrap, result, _ = self.fits[key]
        wanted = getattr(approach, "bootstrap", 0)
        if wanted == bootstrap:
            self.fit_hits += 1
            return result
        if wanted or isinstance(result, FitInputError):
            return None
        self.fit_hits += 1
        return _point_fit(result)

    def keep_fit(self, approach: Fitter, runs: Runs, result: Any) -> None:
        key = _fit_key(approach, runs)
        if key is not None:
            self.fits[key] = (getattr(approach, "bootstrap", 0), result, runs)  # holding the runs keeps their id


def _fit_key(approach: Fitter, runs: Runs) -> Any:
    """What makes two fits the same but their resamples: the approach's type and settings, the runs."""
    try:
        settings = tuple(sorted((k, v) for k, v in vars(approach).items() if k != "bootstrap"))
        hash(settings)
    except TypeError:  # an option that is not a plain value: not shared
        return None
    return type(approach), settings, id(runs)


def _point_fit(result: Any) -> Any:
    """A fitted result without its resamples, as the fit without any gives it (the point estimates
    come before the resamples; only the intervals need them)."""
    out = copy.copy(result)
    out.samples = pd.DataFrame()
    return out


def _points_only(table):
    """A predict table with its interval columns blank, as a refit without resamples gives it."""
    out = table.copy()
    for column in [c for c in out.columns if c.endswith(("_lo", "_hi"))]:
        out[column] = np.nan
    return out


def worker_context() -> Any:
    """How refit workers start: forked from a server that has imported the fitting code once (a
    spawned worker spends more than a second importing it before its first refit, every pool
    again), where the platform has one; else spawned. Never forked from the caller, whose
    threads (torch's, a tracker's) a fork would copy mid-flight."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["flops_fit.fitting"])
    return context


_SHARED: ContextVar[SharedRefits | None] = ContextVar("shared_refits", default=None)


@contextmanager
def shared_refits():
    """Within this block, ``run_checks`` shares refits of the same approach on the same runs
    (``SharedRefits``): ``fit`` runs its held-out checks and the forecast's chaining inside one."""
    shared = SharedRefits()
    token = _SHARED.set(shared)
    try:
        yield shared
    finally:
        _SHARED.reset(token)
        shared.close()


def run_checks(tasks: Sequence[Task], workers: int = 1) -> list[list[HoldoutCheck]]:
    """``check_many(*task)`` for every task, in order; with ``workers`` > 1 in that many worker
    processes (each refit is independent, and refitting every method on every split is most
    of a sweep's fitting time). The results are the same either way. Inside ``shared_refits``
    a refit already made is not made again; an approach that fits several run sets together
    (``fit_together``: Approach 3's grid searches) gets all of its tasks at once."""
    shared = _SHARED.get()
    tables = [shared.get(task) if shared is not None else None for task in tasks]
    units = _units([task for task, table in zip(tasks, tables, strict=True) if table is None])
    if workers <= 1 or len(units) < 2:
        made = [_predict_unit(unit) for unit in units]
    elif shared is not None:
        made = _longest_first(shared.pool(workers), _predict_unit, units, [_weight(unit) for unit in units])
    else:
        with ProcessPoolExecutor(min(workers, len(units)), mp_context=worker_context()) as pool:
            made = _longest_first(pool, _predict_unit, units, [_weight(unit) for unit in units])
    by_task = {id(task): table for unit, unit_tables in zip(units, made, strict=True)
               for task, table in zip(unit, unit_tables, strict=True)}
    out = []
    for task, table in zip(tasks, tables, strict=True):
        if table is None:
            table = by_task[id(task)]
            if shared is not None:
                shared.put(task, table)
        approach, _, budgets, keep, observed = task
        out.append(compare(approach.name, budgets, keep, observed, table))
    return out


def fit_each(approaches: Sequence[Fitter], runs: Runs, workers: int = 1) -> list[Any]:
    """Every approach's ``fit(runs)``, in order, its FitInputError in its place; inside
    ``shared_refits`` with ``workers`` > 1 on the shared pool (the same results, sooner)."""
    return fit_pairs([(approach, runs) for approach in approaches], workers)


def fit_pairs(pairs: Sequence[tuple[Fitter, Runs]], workers: int = 1) -> list[Any]:
    """``fit_each`` for (approach, runs) pairs: each approach on its own runs (a scale each). The
    pairs of an approach type with ``fit_together`` are fitted together (one unit of work); inside
    ``shared_refits`` a fit already made is not made again (``SharedRefits.known_fit``)."""
    shared = _SHARED.get()
    out: list[Any] = [None if shared is None else shared.known_fit(a, r) for a, r in pairs]
    units = _units([(approach, runs, i) for i, (approach, runs) in enumerate(pairs) if out[i] is None])
    if shared is None or workers <= 1 or len(units) < 2:
        made = [_fit_unit(unit) for unit in units]
    else:
        made = _longest_first(shared.pool(workers), _fit_unit, units, [_weight(unit) for unit in units])
    for unit, results in zip(units, made, strict=True):
        for (approach, runs, i), result in zip(unit, results, strict=True):
            out[i] = result
            if shared is not None:
                shared.keep_fit(approach, runs, result)
    return out


def _fit_unit(unit: list[tuple[Fitter, Runs, int]]) -> list[Any]:
    together = _together(unit[0][0])
    if together is None or len(unit) == 1:
        return [_fit_or_reason(approach, runs) for approach, runs, _ in unit]
    return together([(approach, runs) for approach, runs, _ in unit])


def _weight(unit: Sequence[tuple]) -> float:
    """A unit's expected cost, to hand out the longest first (a long unit last keeps one worker busy
    while the others idle): a batched unit above the single refits, resamples above point fits."""
    batched = 5.0 if len(unit) > 1 else 1.0
    return batched * sum(1.0 + getattr(item[0], "bootstrap", 0) / 100 for item in unit)


def _longest_first(pool: ProcessPoolExecutor, fn: Any, units: Sequence[Any], weights: Sequence[float]) -> list[Any]:
    """``fn`` over ``units`` on ``pool``, submitted heaviest first, the results in the units' order."""
    order = sorted(range(len(units)), key=lambda i: -weights[i])
    with _named_breakage():
        futures = {i: pool.submit(fn, units[i]) for i in order}
        return [futures[i].result() for i in range(len(units))]


@contextmanager
def _named_breakage():
    """A worker process that dies (a script without a main guard, memory) as one line with the fix."""
    try:
        yield
    except BrokenProcessPool:
        raise FitInputError(
            "a fitting worker process (workers > 1) stopped before it returned. A script "
            "that fits with workers > 1 must start its work under `if __name__ == \"__main__\":` (each worker "
            "imports the script again), and each worker needs memory of its own; or fit with workers=1"
        ) from None


def _map(fn: Any, *columns: Sequence[Any], workers: int) -> list[Any]:
    """``fn`` over the columns' rows, in order: inside ``shared_refits`` with ``workers`` > 1 and two
    rows or more on the shared pool, else here."""
    shared = _SHARED.get()
    if shared is None or workers <= 1 or len(columns[0]) < 2:
        return [fn(*row) for row in zip(*columns, strict=True)]
    with _named_breakage():
        return list(shared.pool(workers).map(fn, *columns))


def _fit_or_reason(approach: Fitter, runs: Runs) -> Any:
    try:
        return approach.fit(runs)
    except FitInputError as exc:
        return exc


def _together(approach: Fitter):
    """The approach's ``fit_together`` if its ``fit`` is the one that function batches, else None."""
    cls = type(approach)
    owner = next((k for k in cls.__mro__ if "fit" in vars(k)), None)
    return getattr(cls, "fit_together", None) if owner is not None and "fit_together" in vars(owner) else None


def _units(tasks: Sequence[Task]) -> list[list[Task]]:
    """Tasks in units of work: one per task, except that the tasks of an approach type with
    ``fit_together`` form one unit."""
    units: list[list[Task]] = []
    grouped: dict[type, list[Task]] = {}
    for task in tasks:
        if _together(task[0]) is None:
            units.append([task])
        else:
            if type(task[0]) not in grouped:
                grouped[type(task[0])] = []
                units.append(grouped[type(task[0])])
            grouped[type(task[0])].append(task)
    return units


def _predict_unit(unit: list[Task]) -> list[Any]:
    together = _together(unit[0][0])
    if together is None or len(unit) == 1:
        return [predict(approach, runs, keep, observed) for approach, runs, _, keep, observed in unit]
    subsets: list[Any] = []
    for _, runs, _, keep, _ in unit:
        try:
            subsets.append(runs.subset(keep))
        except FitInputError as exc:
            subsets.append(exc)
    jobs = [(task[0], runs) for task, runs in zip(unit, subsets, strict=True) if not isinstance(runs, FitInputError)]
    results = iter(together(jobs) if jobs else [])
    return [prediction(runs if isinstance(runs, FitInputError) else next(results), task[4])
            for task, runs in zip(unit, subsets, strict=True)]


def splits(runs: Runs, budgets: np.ndarray, which: Any, observed: Sequence[Observed]) -> list[tuple[np.ndarray, list[Observed]]]:
    """(runs to fit, budgets to predict) pairs: each observed budget alone left out, or with
    "forward" each split C_k (from the FORWARD_MIN-th budget) fitting the budgets up to C_k and
    predicting every larger observed one."""
    if which != "forward":
        return [(budgets != o.budget, [o]) for o in observed]
    unique = sorted(float(b) for b in np.unique(budgets))
    out = []
    for upto in unique[FORWARD_MIN - 1 : -1]:
        later = [o for o in observed if o.budget > upto]
        if later:
            out.append((budgets <= upto, later))
    return out


def holdout_checks(approaches: Sequence[Fitter], runs: Runs, which: Any, *, curve: str, bootstrap: int,
                   seed: int | None, level: float, workers: int = 1) -> dict[str, list[HoldoutCheck]]:
    """Every approach's checks for the budgets ``which`` selects (see ``select_budgets``);
    "forward" fits the budgets up to each C_k and predicts every larger one (``splits``).

    With "each" and "forward", only budgets whose own profile has an interior minimum are
    checked: the others have no observed optimum to compare with.
    """
    budgets, chosen = select_budgets(runs, which)
    observed = observe_each(runs, budgets, chosen, curve=curve, bootstrap=bootstrap, seed=seed, level=level,
                            workers=workers)
    if which in ("each", "forward"):
        observed = [o for o in observed if o.reason is None]
        if not observed:
            raise FitInputError(f"holdout={which!r}: {NO_MINIMUM}: {NO_SWEEP_HINT}")
    parts = splits(runs, budgets, which, observed)
    done = iter(run_checks([(a, runs, budgets, keep, later) for a in approaches for keep, later in parts], workers))
    return {a.name: [c for _ in parts for c in next(done)] for a in approaches}


def furthest_checks(items: Sequence[HoldoutCheck]) -> list[HoldoutCheck]:
    """Per held-out budget, the check fitted on the fewest budgets among those made (forward chaining
    predicts a budget from every earlier split; a figure shows the furthest reach, and the first splits'
    fits can fail); a budget with none made keeps its fewest, whose reason the table gives."""
    best: dict[float, HoldoutCheck] = {}
    for c in items:
        rank = (not _made(c), len(c.fitted_budgets))
        if c.budget not in best or rank < (not _made(best[c.budget]), len(best[c.budget].fitted_budgets)):
            best[c.budget] = c
    return list(best.values())


def _made(check: HoldoutCheck) -> bool:
    """Whether a check compared a prediction with an observation (an error to draw)."""
    return bool(np.isfinite(check.n_opt_error) or np.isfinite(check.loss_error))


def holdout_json(checks: Sequence[HoldoutCheck]) -> dict[str, Any] | list[dict[str, Any]]:
    """One check as a dict, several (``holdout="each"``) as a list of them."""
    dicts = [c.to_dict() for c in checks]
    return dicts[0] if len(dicts) == 1 else dicts


def holdout_rows(checks: Mapping[str, Sequence[HoldoutCheck]]) -> list[list[str]]:
    """Rows of the held-out table (see HOLDOUT_HEADERS), one per method and budget."""
    rows = []
    for method, items in checks.items():
        for c in items:
            reach = (f" from <= {fmt.flops(max(c.fitted_budgets))}"
                     if c.fitted_budgets and max(c.fitted_budgets) < c.budget else "")
            if c.reason:  # no check made: its reason is a note under the table, never a row of nan
                rows.append([method, fmt.flops(c.budget) + reach] + ["-"] * (len(HOLDOUT_HEADERS) - 2))
                continue
            rows.append([method, fmt.flops(c.budget) + reach,
                         fmt.scale_interval(c.predicted_n_opt, *c.n_opt_interval),
                         fmt.scale_interval(c.observed_n_opt, *c.observed_n_opt_interval),
                         fmt.percent(c.n_opt_error), _yes_no(c.covered["n_opt"]),
                         _loss_cell(c.predicted_loss, c.loss_interval, c.observed_loss),
                         fmt.with_interval(c.observed_loss, *c.observed_loss_interval, fmt=fmt.loss),
                         fmt.percent(c.loss_error), _yes_no(c.covered["loss"])])
    return rows


HOLDOUT_HEADERS = ["method", "held out", "N_opt predicted", "N_opt observed", "error", "inside?",
                   "loss predicted", "loss observed", "error", "inside?"]


def holdout_summary(checks: Mapping[str, Sequence[HoldoutCheck]]) -> str:
    """Plain text: the held-out table and any reasons a check could not be made."""
    first = next((c for items in checks.values() for c in items), None)
    if first is None:
        return ""
    lines = ["Held-out check: each method fitted without the held-out budget's runs; its prediction there "
             "against the minimum of that budget's own IsoFLOP profile",
             format_table(holdout_rows(checks), HOLDOUT_HEADERS)]
    return "\n".join(lines + [f"note: {r}" for r in holdout_notes(checks)])


def holdout_notes(checks: Mapping[str, Sequence[HoldoutCheck]]) -> list[str]:
    """Why checks were not made: one line per method, fit and reason, naming the budgets it left unchecked
    together, in order. Forward chaining gives one failed fit's reason to every larger budget, so one line a
    check made the FineWeb/C4 sweep's report list 300 lines (budgets sorted as text, the fit unnamed) for
    15 failed fits."""
    groups: dict[tuple[str, float, str], list[float]] = {}
    for method, items in checks.items():
        for c in items:
            if c.reason:
                reach = max(c.fitted_budgets) if c.fitted_budgets and max(c.fitted_budgets) < c.budget else 0.0
                groups.setdefault((method, reach, c.reason), []).append(c.budget)
    order = list(checks)
    notes = []
    for (method, reach, reason), budgets in sorted(groups.items(), key=lambda g: (order.index(g[0][0]), g[0][1],
                                                                                  min(g[1]), g[0][2])):
        held = sorted(set(budgets))
        at = fmt.flops(held[0]) if len(held) == 1 else \
            f"{len(held)} budgets ({fmt.flops(held[0])} to {fmt.flops(held[-1])})"
        notes.append(f"{method} at {at}{f' from <= {fmt.flops(reach)}' if reach else ''}: {reason}")
    return notes


def _loss_cell(value: float, bounds: tuple[float, float], observed: float) -> str:
    """A predicted loss with its interval, withheld where it reaches far past the held-out budget's own loss
    (``fmt.loss_beyond``)."""
    if why := fmt.loss_beyond(bounds[1], observed):
        return f"{fmt.loss(value)} [withheld: {why}]"
    return fmt.with_interval(value, *bounds, fmt=fmt.loss)


def _yes_no(flag: bool | None) -> str:
    return "-" if flag is None else ("yes" if flag else "NO")


def _inside(value: float, bounds: tuple[float, float], scale: bool = False) -> bool | None:
    """Whether ``value`` lies in ``bounds``; None without an interval, or (``scale``: a size) one
    the tables withhold (``fmt.too_wide``): an interval that spans everything judges nothing."""
    lo, hi = bounds
    if not all(np.isfinite([value, lo, hi])) or (scale and fmt.too_wide(lo, hi)):
        return None
    return bool(lo <= value <= hi)


COUNT_HEADERS = ["method", "checks", "not made", "N_opt outside", "N_opt mean |error|", "N_opt too wide",
                 "loss outside", "loss mean |error|"]
_ANSWERS = (("n_opt", "N_opt"), ("loss", "loss"))  # (key, name) of a check's two answers


class _Tally:
    """One method's checks counted: those made, and per answer how many were outside their interval
    and the absolute errors of those made (finite ones)."""

    def __init__(self, items: Sequence[HoldoutCheck]) -> None:
        self.made = [c for c in items if not c.reason]

    def outside(self, key: str) -> int:
        return sum(1 for c in self.made if c.covered[key] is False)

    def errors(self, key: str) -> np.ndarray:
        errors = np.abs([getattr(c, f"{key}_error") for c in self.made])
        return errors[np.isfinite(errors)]


def holdout_counts(checks: Mapping[str, Sequence[HoldoutCheck]]) -> str:
    """Plain text: per method, how many of its checks (a budget held out in turn, or forward chaining)
    found the observed value outside the predicted interval, and how far off the predictions were on
    average; the checks not made and the N_opt intervals too wide to judge (``fmt.too_wide``) counted
    apart. One line per method where ``holdout_misses``' sentences ran to a paragraph."""
    unmade = any(c.reason for items in checks.values() for c in items)
    return (f"Held-out checks ({count_legend('--verbose' if unmade else None)}):\n"
            + format_table(holdout_count_rows(checks), COUNT_HEADERS))


def holdout_count_rows(checks: Mapping[str, Sequence[HoldoutCheck]]) -> list[list[str]]:
    """``holdout_counts``' rows (``COUNT_HEADERS``), one per method: the text's table and the report's summary."""
    rows = []
    for method, items in checks.items():
        tally = _Tally(items)
        row = [method, str(len(items)), str(len(items) - len(tally.made))]
        for key, _ in _ANSWERS:
            errors = tally.errors(key)
            row += [str(tally.outside(key)), f"{100 * errors.mean():.1f}%" if errors.size else "-"]
            if key == "n_opt":
                row.append(str(len(_too_wide(tally.made))))
        rows.append(row)
    return rows


def count_legend(why: str | None) -> str:
    """What the count table's columns mean, and where ``why`` a check was not made is said (None: none was
    left unmade)."""
    return ("each method refitted without the budgets it predicts; outside: the observed value outside the "
            f"predicted interval; too wide: an N_opt interval over {fmt.SPAN_LIMIT:g}x, not judged"
            + (f"; why a check was not made: {why}" if why else ""))


def holdout_misses(checks: Mapping[str, Sequence[Any]], why: str = "the held-out notes, --verbose") -> list[str]:
    """One phrase per held-out value outside its predicted interval, or a check not made; with
    several budgets held out in turn, one phrase per method and value counting them, pointing to ``why``
    for the checks not made (the text's --verbose; the report's page has them under its table)."""
    out = []
    for method, items in checks.items():
        tally = _Tally(items)
        if len(items) > 1:
            for key, name in _ANSWERS:
                if outside := tally.outside(key):
                    out.append(f"{method}'s {name} falls outside its interval at {outside} of {len(items)} "
                               f"held-out budgets (mean error {100 * tally.errors(key).mean():.1f}%)")
            unmade = len(items) - len(tally.made)
            if unmade:
                out.append(f"{method} could not be checked at {unmade} of {len(items)} (why: {why})")
            out += _unjudged(method, tally.made)
            continue
        for c in items:
            if c.reason:
                out.append(f"{method} at {fmt.flops(c.budget)}: {c.reason}")
                continue
            for key, name in _ANSWERS:
                if c.covered[key] is False:
                    out.append(f"{method}'s predicted {name} at {fmt.flops(c.budget)} FLOPs misses the observed one "
                               f"by {fmt.percent(getattr(c, f'{key}_error'))}, outside its interval")
        out += _unjudged(method, tally.made)
    return out


def _too_wide(made: Sequence[HoldoutCheck]) -> list[HoldoutCheck]:
    """The checks whose N_opt interval spans over ``fmt.SPAN_LIMIT``: not judged."""
    return [c for c in made if c.covered["n_opt"] is None and np.isfinite(c.predicted_n_opt)
            and np.isfinite(c.observed_n_opt) and all(np.isfinite(c.n_opt_interval))]


def _unjudged(method: str, made: Sequence[HoldoutCheck]) -> list[str]:
    """The phrase for checks whose N_opt interval spans over ``fmt.SPAN_LIMIT`` (not judged), if any."""
    wide = _too_wide(made)
    if not wide:
        return []
    return [f"{method}'s N_opt interval spans over {fmt.SPAN_LIMIT:g}x at {len(wide)} of {len(made)} held-out "
            f"budget(s) it could be checked at: too wide to judge"]
