"""Scaling-law fitting: Chinchilla approaches 1-3 with bootstrap intervals, predictions, reports.

``fit(source, method=...)`` is the entry point; ``source`` is a DataFrame, a CSV file or a
sweep output folder. Each method is an ``Approach`` class in ``APPROACHES`` (name -> class);
a new method subclasses ``Approach`` and is added there.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from flops_fit.checks import is_real
from flops_fit.errors import FitInputError, NoFitError
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.approaches.approach import Approach
from flops_fit.fitting.approaches.curve_law import CurveLaw
from flops_fit.fitting.approaches.data_limit import DataLimited, check_unique_tokens
from flops_fit.fitting.approaches.envelope import Envelope
from flops_fit.fitting.approaches.fit_set import (
    FRESH_DATA,
    NO_FORECAST,
    FitSet,
    fresh_data_caveat,
    repeats_caveat,
)
from flops_fit.fitting.approaches.interaction import Interaction
from flops_fit.fitting.approaches.isoflop import Isoflop
from flops_fit.fitting.approaches.parametric import Parametric
from flops_fit.fitting.approaches.result import FitResult, default_budgets
from flops_fit.fitting.approaches.vpnls import Vpnls
from flops_fit.fitting.decisions.compare import (
    Comparison,
    check_budgets,
    compare_results,
    same_evaluation,
    same_quantity,
)
from flops_fit.fitting.inputs import METRICS, Runs, check_varies, load_runs
from flops_fit.fitting.laws.focus import FOCI, check_focus
from flops_fit.fitting.laws.profiles import CURVES, budget_groups, check_curve
from flops_fit.fitting.report.compare_page import write_comparison
from flops_fit.fitting.report.html_report import write_report
from flops_fit.fitting.scales import SCALES, check_scale, rescale
from flops_fit.fitting.validation.forecast import Forecast, default_target, forecast
from flops_fit.fitting.validation.holdout import (
    NO_MINIMUM,
    NO_SWEEP_HINT,
    HoldoutCheck,
    fit_each,
    holdout_checks,
    holdout_refusal,
    select_budgets,
    shared_refits,
)
from flops_fit.fitting.validation.validity import failed_message, failure, tail_note
from flops_fit.machine import resolve_workers
from flops_fit.tracking.base import log_fit, sweep_destination
from flops_fit.tracking.options import Destination, destination, parse_tracking

APPROACHES: dict[str, type[Approach]] = {a.name: a for a in (Envelope, Isoflop, Parametric, Vpnls, Interaction,
                                                              CurveLaw)}
METHODS = tuple(APPROACHES)  # the built-in methods' names
LOAD_OPTIONS = ("params_col", "tokens_col", "flops_col", "loss_col", "budget_col", "curve_col", "run_id_col",
                "exclude_top", "flops_per_param_token", "curve_metric", "experiment",
                "all_rates", "where")
# what a single method's refusal suggests; compare fits one method, so it names another one instead
TRY_ALL = "other methods may answer: method='all' (--method all) fits each and keeps those that do"


def fit(source: Any, method: str = "parametric", *, bootstrap: int = 1000, seed: int | None = 0,
        level: float = 0.95, curve: str = "slice", holdout: str | float | None = None,
        metric: str | None = None, scale: str = "params", focus: str = "all", target: float | None = None,
        tracking: Any = None, workers: int | None = None, unique_tokens: float | None = None,
        progress: Callable[[str], None] | None = None, **options: Any) -> FitResult | FitSet:
    """Fit runs with one approach (a FitResult) or ``method="all"`` (a FitSet of those that apply).

    Methods: "envelope" (Approach 1, needs curves), "isoflop" (Approach 2; ``curve`` is
    "slice", "parabola", "huber" or "akima"), "parametric" (Approach 3), "vpnls" (Approach 3 by variable
    projection). ``holdout`` ("largest", a budget in FLOPs, or "each") also fits every method
    without that budget's runs and compares its prediction there with the budget's own
    IsoFLOP minimum (``result.holdout``); "forward" fits the budgets up to each one and
    predicts every larger one; "auto" is "forward" where the runs allow it and otherwise checks
    nothing, saying why in the warnings (what ``flops-fit report`` does by default); None (or "none")
    checks nothing. ``metric`` is what the laws fit: ``"loss"`` (default:
    the held-out loss per token) or ``"bpb"`` (held-out bits per byte, comparable across
    tokenizers); given ``Runs``, theirs. ``scale`` is what N is: "params" (default),
    "non_embedding_params" or "flops_per_token" (DeepSeek's M; ``scales``). ``focus`` is which runs
    the laws over (N, D) (parametric, vpnls, interaction) fit: "all" alike (default, Chinchilla's
    procedure) or "frontier" (the floor of the runs near each budget's optimum; ``focus``). ``options`` are
    ``load_runs`` arguments: column names and ``exclude_top``.

    ``method="all"`` with ``holdout="forward"`` also chooses **the forecast** (``fitted.forecast``,
    ``forecast``): every method on every scale is scored by forward chaining (fit the budgets up
    to each C_k, predict every larger one) at the largest ratios the sweep can test, and the best
    answers at ``target`` (default 10x the largest budget) with an interval that adds the spread of
    comparable law forms and the extrapolation error measured to the bootstrap.

    ``tracking`` logs the fitted parameters and predictions (docs/guide/tracking.md): by default a
    sweep folder's fit goes to the trackers its sweep was run with; ``False`` logs nothing;
    backends (``["mlflow"]``, or a ``[tracking]``-style mapping) log any source's fit, under
    ``tracking/`` beside a CSV or in the sweep folder.

    ``workers`` > 1 fits the methods, refits the held-out checks and the forecast's cross-validation
    in that many processes, one pool for the whole fit (the same results, sooner); None (default) the
    cores free now, where worker processes can start (``flops_fit.machine``: not from a script
    without an ``if __name__ == "__main__":`` guard, which each worker would run again), else 1.

    ``unique_tokens`` (U) is the data budget (a sweep folder's store records its dataset's, used when
    this is None and some run repeats its data): given it, "parametric" and "vpnls" fit the
    data-constrained law instead
    (``data_limit``, Muennighoff et al. 2023: repeated tokens decay in worth), "all" adds it, and
    that law's forecasts and sizing read it. The forward-chained forecast weighs every method, most
    of which read tokens as fresh data: when its D_opt at the target exceeds U (given or recorded),
    a warning says so with the data-limited law's answer there (``fit_set.fresh_data_caveat``).

    ``progress(stage)`` hears each stage as it starts (the fits, the held-out checks, the
    forecast's chaining): what the CLI shows while a long fit runs.
    """
    if isinstance(holdout, str) and holdout.lower() == "none":  # the CLI's --holdout none
        holdout = None
    unknown = sorted(set(options) - set(LOAD_OPTIONS))
    if unknown:
        raise FitInputError(f"unknown option(s) {', '.join(unknown)}; fit() accepts {', '.join(LOAD_OPTIONS)}")
    if method == DataLimited.name:
        raise FitInputError(f"method {method!r} is chosen by the data budget: fit with method 'vpnls' (or "
                            "'parametric', 'all') and unique_tokens=U")
    if method not in (*APPROACHES, "all"):
        raise FitInputError(f"unknown method {method!r}; choose one of {', '.join(APPROACHES)} or 'all'")
    if unique_tokens is not None and method not in DATA_BUDGET_METHODS:  # it was dropped without a word
        raise FitInputError(f"unique_tokens fits the data-constrained law in place of parametric's or vpnls's "
                            f"(method='all' adds it as {DataLimited.name!r}); {method} reads every token as fresh "
                            "data and would ignore it: fit with method 'vpnls', 'parametric' or 'all' "
                            "(--method), or leave out unique_tokens (--unique-tokens)")
    level = check_sampling(bootstrap, seed, level)
    if progress is not None and not callable(progress):  # it would fail at the first stage, as a TypeError
        raise FitInputError(f"progress must be a function that takes each stage's line (e.g. print), got {progress!r}")
    check_curve(curve)
    check_scale(scale)
    check_focus(focus)
    workers = resolve_workers(workers, "workers", FitInputError)
    if isinstance(source, Runs):
        if metric not in (None, source.metric):
            raise FitInputError(f"these runs were loaded with metric={source.metric!r}; load them again with "
                                f"load_runs(..., metric={metric!r})")
        if options:  # they are load_runs' and were dropped without a word: exclude_top=5 fitted every run
            given = ", ".join(f"{k}={v!r}" for k, v in options.items())
            raise FitInputError(f"these runs are already loaded, and {given} applies as they are read: pass it to "
                                f"load_runs(SOURCE, {given}), or give fit the table or folder itself")
        runs = source
    else:
        runs = load_runs(source, metric=metric or "loss", **options)
    check_varies(runs)
    if target is not None and not (is_real(target) and np.isfinite(target) and target > 0):  # np.float32 is one
        raise FitInputError(f"target must be a positive budget in FLOPs (e.g. 1e22), got {target!r}")
    target = None if target is None else float(target)
    runs = rescale(runs, scale)
    unique = data_budget(runs, unique_tokens)
    logged_to = fit_destination(runs, tracking)  # a bad tracking= is refused before any fitting
    auto = holdout == "auto"
    refused = holdout_refusal(runs, "forward") if auto else None
    if auto:  # forward chaining where the runs allow it (the report's default), else none, saying why
        holdout = None if refused else "forward"
    if holdout is not None:
        select_budgets(runs, holdout)  # refuse a bad choice before any fitting
    names = tuple(APPROACHES) if method == "all" else (method,)
    kinds = {**APPROACHES, DataLimited.name: DataLimited}
    if unique is not None:  # the data budget: the laws over (N, D) read the effective data
        names = ((*names, DataLimited.name) if method == "all" else
                 tuple(DataLimited.name if m in ("parametric", "vpnls") else m for m in names))
    approaches = [kinds[m].configured(bootstrap=bootstrap, seed=seed, level=level, curve=curve, focus=focus,
                                      unique_tokens=unique) for m in names]
    progress = progress or (lambda stage: None)
    with shared_refits():  # one pool of workers for the fits and refits; the chaining reuses the checks' refits
        for note in runs.notes:  # before a long fit, not only in its summary: a user may mean to fit fewer runs
            progress(f"note: {note}")
        progress(f"fitting {len(approaches)} method(s) to {len(runs.frame)} runs"
                 + (f" with {bootstrap} bootstrap resamples" if bootstrap else ""))
        results, skipped = {}, {}
        own = {*default_budgets(runs), *budget_groups(runs)[0].tolist()}  # the tables' budgets and the swept ones
        asked = float(target) if target is not None and float(target) not in own else None
        checked = sorted({*own, *([asked] if asked is not None else [])})
        fits = list(zip(approaches, fit_each(approaches, runs, workers), strict=True))
        fallback = None
        if method != "all" and names[0] != method and unique_tokens is None and \
                (why := not_fitted(fits[0][1], checked, asked)) is not None:
            # the store's data budget chose the data-limited law and it cannot fit these runs: the law asked for stands
            approaches = [kinds[method].configured(bootstrap=bootstrap, seed=seed, level=level, curve=curve,
                                                   focus=focus)]
            names = (method,)
            fits = list(zip(approaches, fit_each(approaches, runs, workers), strict=True))
            fallback = (f"this is {method}'s law, which reads every token as fresh data: the runs repeat their data "
                        f"({fmt.count(unique)} unique tokens recorded), and the data-limited law {why}")
        for approach, result in fits:
            why = not_fitted(result, checked, asked)  # no finite, ordered answer: left out, with its reason
            if why is not None:
                if method == "all":
                    skipped[approach.name] = why
                    continue
                if isinstance(result, FitInputError):
                    raise result
                if why.startswith(AT_TARGET):  # the target, not the runs or the method, is what to change
                    raise no_fit(f"{approach.name}: {why}", runs)
                data_hint = ("; without unique_tokens (--unique-tokens) the fit reads every token as fresh data"
                             if approach.name == DataLimited.name else "")
                raise no_fit(f"{approach.name}: {why}{data_hint}; {TRY_ALL}", runs)
            results[approach.name] = result
        if fallback is not None:
            results[method].diagnostics.warnings.append(fallback)
        if not results:
            lead = ("no method answers at the target" if any(w.startswith(AT_TARGET) for w in skipped.values())
                    else "no method could fit these runs")
            raise no_fit(f"{lead}: " + "; ".join(f"{m}: {str(w).rstrip('.')}" for m, w in skipped.items()), runs)
        if holdout is not None:
            progress(f"held-out checks ({holdout}): each method refitted without the budgets it predicts")
            try:
                checks = holdout_checks([a for a in approaches if a.name in results], runs, holdout, curve=curve,
                                        bootstrap=bootstrap, seed=seed, level=level, workers=workers)
            except FitInputError as exc:  # "auto": the profiles to predict have no minimum, so no check, saying why
                if not (auto and NO_MINIMUM in str(exc)):
                    raise
                checks, holdout, refused = {}, None, (f"holdout='forward': {NO_MINIMUM}", NO_SWEEP_HINT)
            for name, items in checks.items():
                results[name].holdout_checks = items
        fitted = FitSet(results, skipped) if method == "all" else results[names[0]]
        if refused:
            (fitted.warnings if method == "all" else fitted.diagnostics.warnings).append(
                f"{NO_FORECAST}no held-out check was possible ({refused[0]}); the methods' own fits stand")
        if method == "all" and holdout == "forward":
            chosen = float(target) if target is not None else default_target(runs)
            base = runs if runs.scale == "params" else load_runs(source, metric=metric or "loss", **options)
            progress(f"the forecast at {chosen:.3g} FLOPs: every method on every scale scored by forward chaining")
            try:
                fitted.forecast = forecast([a for a in approaches if a.name in results], base, chosen, curve=curve,
                                           workers=workers, level=level)
            except FitInputError as exc:  # the fits stand without it; say why there is no forecast
                fitted.warnings.append(f"{NO_FORECAST}{exc}")
            if fitted.forecast is not None and (beyond := fitted.forecast.beyond_measured()) is not None:
                fitted.warnings.append(beyond)
            if fitted.forecast is not None and \
                    (below := fitted.forecast.below_swept(float(np.min(budget_groups(runs)[0])))) is not None:
                fitted.warnings.append(below)
            data = unique if unique is not None else runs.metadata.get("unique_tokens")  # a sweep records it
            if fitted.forecast is not None and data is not None and \
                    (caveat := fresh_data_caveat(fitted.forecast, float(data), results, skipped)) is not None:
                fitted.warnings.append(caveat)
        elif method == "all" and holdout == "each":
            fitted.warnings.append(f"{NO_FORECAST}leaving one budget out tests interpolation; the forecast is chosen by "
                                   "forward chaining (holdout='forward', --holdout forward)")
        longest = float(runs.frame["tokens"].max())
        if method == "all" and DataLimited.name in skipped and unique is not None and longest > unique and \
                not any(w.startswith(FRESH_DATA) for w in fitted.warnings):  # the forecast's caveat says it
            fitted.warnings.append(repeats_caveat(longest, unique))
    if logged_to is not None:
        log_fit(fitted, logged_to)
    return fitted


AT_TARGET = "no finite, ordered answer at the target"


def not_fitted(result: Any, budgets: list[float], target: float | None = None) -> str | None:
    """Why a method's fit (its result, or the FitInputError in its place) gives no answer, or None. A fit
    that answers everywhere but at ``target`` (one of ``budgets``, none of the fit's own) names the target
    as what to change: a target of 1e3 FLOPs said the runs did not pin the method down."""
    if isinstance(result, FitInputError):
        return str(result)
    reason = failure(result, budgets)
    if reason is None:
        return None
    if target is not None and failure(result, [b for b in budgets if b != target]) is None:
        swept = budget_groups(result.runs)[0]
        return (f"{AT_TARGET} {fmt.flops(target)} FLOPs ({reason}), though it answers at the swept budgets: "
                f"give a target in FLOPs nearer them ({fmt.flops(float(np.min(swept)))} to "
                f"{fmt.flops(float(np.max(swept)))}; --target C)")
    return failed_message(reason) + tail_note(result, reason)


# The fewest resamples an interval is read from: `--bootstrap 1` on the demo's runs gave intervals of one draw,
# such as N_opt 32.1k [32.4k, 32.4k], and refused four sound methods as if their runs could not pin them down.
def no_fit(why: str, runs: Runs) -> NoFitError:
    """No usable answer, with what the table itself suggests reading with care: runs of two projects or
    corpora fitted as one sweep may be why no law fits them, and the note naming the column that tells
    them apart was printed only beside an answer. ``unfinished`` counts the runs read that have not
    finished yet (pending, running): the report's page says to train them before sweeping more."""
    error = NoFitError(why + "".join(f"; note: {c}" for c in runs.cautions))
    error.unfinished = sum(str(x.get("reason", "")).startswith(("status 'pending'", "status 'running'"))
                           for x in runs.excluded)
    return error


MIN_RESAMPLES = 10
# The most: `--bootstrap 1e20` ended in numpy's "Maximum allowed dimension exceeded" (a traceback) and 1e9 asked
# for gigabytes; a tune took it and trained for hours before its fit failed. 1000 already reads each end of a 95%
# interval to within half a percentile point (sqrt(0.025 * 0.975 / 1000) = 0.005).
MAX_RESAMPLES = 100_000


def check_sampling(bootstrap: Any, seed: Any, level: Any) -> float:
    """Refuse a bad ``bootstrap``, ``seed`` or ``level`` before any fitting: numpy's own errors, deep in a
    resample, would not say which argument was wrong. Returns ``level`` as a float (``np.float32(0.9)`` was
    refused as if it lay outside (0, 1))."""
    def whole(v: Any) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0
    if not whole(bootstrap):
        raise FitInputError(f"bootstrap must be a non-negative number of resamples (e.g. 1000; 0: none), got {bootstrap!r}")
    if seed is not None and not whole(seed):
        raise FitInputError(f"seed must be a non-negative integer, or None for fresh randomness, got {seed!r}")
    if not is_real(level) or not 0 < level < 1:
        raise FitInputError(f"level must lie strictly between 0 and 1 (e.g. 0.95), got {level!r}")
    if 0 < bootstrap < MIN_RESAMPLES:
        raise FitInputError(f"bootstrap must be 0 (no intervals) or at least {MIN_RESAMPLES} resamples (e.g. 1000): an "
                            f"interval of fewer is read off one or two draws, and misses the fit's own point; got "
                            f"{bootstrap!r}")
    if bootstrap > MAX_RESAMPLES:
        raise FitInputError(f"bootstrap must be at most {MAX_RESAMPLES} resamples (e.g. 1000, which reads each end of a "
                            f"95% interval to within half a percentile point); got {bootstrap!r}")
    return float(level)


# The methods a data budget (unique_tokens) changes: the data-constrained law takes their place ("all" adds it).
DATA_BUDGET_METHODS = ("parametric", "vpnls", "all")


# Epochs of its data that even the shortest run would train on under a given U, past which U is in other
# units (millions, billions of tokens): the tiny corpora a sweep may repeat give tens to hundreds.
UNITS_EPOCHS = 1e4


def data_budget(runs: Runs, unique_tokens: Any) -> float | None:
    """The unique tokens a fit respects: the given ones, else a sweep's recorded ones (None: unknown)."""
    if unique_tokens is not None:
        unique = check_unique_tokens(unique_tokens)
        fewest = float(runs.frame["tokens"].min())
        if fewest > UNITS_EPOCHS * unique:
            raise FitInputError(f"unique_tokens={unique:g} would have every run repeat its data over {UNITS_EPOCHS:g} "
                                f"times (the shortest trained {fmt.count(fewest)} tokens); is it in other units "
                                "(millions, billions)? Give the dataset's unique tokens as a plain count")
        return unique
    recorded = runs.metadata.get("unique_tokens")  # a sweep's: used once its runs repeat their data
    if recorded is None or not (runs.frame["tokens"].to_numpy(float) > float(recorded)).any():
        return None
    return check_unique_tokens(recorded)


def compare(a: Any, b: Any, method: str = "parametric", *, target: float | None = None,
            budgets: Any = None, bootstrap: int = 1000, seed: int | None = 0, level: float = 0.95,
            names: tuple[str, str] | None = None, where_a: Mapping[str, Any] | None = None,
            where_b: Mapping[str, Any] | None = None, **options: Any) -> Comparison:
    """Recipe B against recipe A: B's effective compute multiplier over A at each swept budget and at
    ``target`` (default 10x the largest swept), with bootstrap intervals (``fitting.compare``).

    ``a`` and ``b`` are what ``fit`` reads (sweep folders, CSVs, DataFrames, Runs) or fitted results of
    one method; both are fitted with ``method`` (the two fits resample with seeds ``seed`` and
    ``seed + 1``: the sweeps are independent). ``options`` go to ``fit`` (``scale``, ``focus``, columns;
    ``where`` selects rows on both sides). ``where_a`` / ``where_b`` select each side's rows besides
    it: two recipes logged in one table (``compare(t, t, where_a={"recipe": "base"}, where_b={"recipe":
    "muon"})``).
    """
    if method not in APPROACHES:
        raise FitInputError(f"compare fits one method; choose one of {', '.join(APPROACHES)}, got {method!r}")
    fit_options = inspect.signature(fit).parameters
    unknown = sorted(set(options) - set(fit_options) - set(LOAD_OPTIONS))
    if unknown:
        raise FitInputError(f"unknown option(s) {', '.join(unknown)}; compare() passes on fit()'s options and "
                            f"{', '.join(LOAD_OPTIONS)}")
    if names is not None and (not isinstance(names, (tuple, list)) or len(names) != 2
                              or not all(isinstance(n, str) for n in names)):
        raise FitInputError(f"names must be two names, A's and B's (e.g. names=('base', 'muon')), got {names!r}")
    check_budgets(target, budgets)  # before either recipe is fitted
    level = check_sampling(bootstrap, seed, level)  # seed='x' ended in "can only concatenate str" at seed + 1
    for option, rows in (("where", options.get("where")), ("where_a", where_a), ("where_b", where_b)):
        if rows is not None and not isinstance(rows, Mapping):  # "'str' object is not a mapping"
            raise FitInputError(f"{option} must map columns to values, e.g. {option}={{'recipe': 'muon'}} (CLI: "
                                f"--{option.replace('_', '-')} COLUMN=VALUE), got {rows!r}")
    shared = options.pop("where", None) or {}
    same_evaluation({**shared, **(where_a or {})}, {**shared, **(where_b or {})}, names or ("A", "B"))
    sides = ((a, where_a), (b, where_b))
    if names is None:
        names = tuple(_name(s, d, own) for (s, own), d in zip(sides, ("A", "B"), strict=True))
        names = names if names[0] != names[1] else ("A", "B")
    fitting = {k: v for k, v in options.items() if k in fit_options}
    loading = {k: v for k, v in options.items() if k not in fitting}  # column names, exclude_top, ...
    recipes = []  # each side read once: its runs checked against the other's before any fit, then fitted
    for i, (source, own) in enumerate(sides):
        if isinstance(source, FitSet):  # it read "cannot read runs from a FitSet"
            raise FitInputError(f"recipe {'AB'[i]} is a FitSet of several methods ({', '.join(source.results)}), and "
                                f"compare fits one: pass one method's fit, e.g. fitted[{method!r}], or the runs")
        if isinstance(source, FitResult) and own:
            raise FitInputError(f"where_{'ab'[i]} selects runs to fit, and recipe {'AB'[i]} is a fitted result: "
                                "pass its runs (a folder, a table or Runs) instead")
        recipes.append(source if isinstance(source, FitResult) else load_runs(
            source, metric=options.get("metric") or "loss", where={**shared, **(own or {})} or None, **loading))
    same_quantity(*(r.runs if isinstance(r, FitResult) else r for r in recipes), names)
    fitted = []
    for i, r in enumerate(recipes):
        try:
            fitted.append(r if isinstance(r, FitResult) else fit(
                r, method, bootstrap=bootstrap, seed=None if seed is None else seed + i, level=level,
                tracking=False, **fitting))
        except NoFitError as e:  # its hint, method='all', is no option of compare's
            others = ", ".join(m for m in APPROACHES if m != method)
            side = "AB"[i] if names[i] == "AB"[i] else f"{'AB'[i]} ({names[i]})"
            raise NoFitError(f"recipe {side}: " + str(e).replace(
                TRY_ALL, f"compare with another method (--method: {others}); `flops-fit fit SOURCE --method all` "
                         "(fit(..., method='all')) shows which methods answer")) from None
    result = compare_results(*fitted, target=target, budgets=budgets, names=names)
    if _same_source(a, b) and (where_a or {}) == (where_b or {}):
        result.notes.append("A and B are the same runs (one source, the same rows): to compare two recipes logged "
                            "in one table, pick each side's rows with where_a= / where_b= (CLI: --where-a "
                            "COLUMN=VALUE / --where-b COLUMN=VALUE)")
    return result


def _name(source: Any, default: str, where: Mapping[str, Any] | None = None) -> str:
    """A recipe's name: its file's stem or folder's name, or the rows it was picked by in a shared table."""
    if where:
        return ", ".join(f"{k}={v}" for k, v in where.items())
    if isinstance(source, (str, Path)):
        path = Path(source)
        return path.stem if path.is_file() else path.name or default
    return default


def _same_source(a: Any, b: Any) -> bool:
    if isinstance(a, (str, Path)) and isinstance(b, (str, Path)):
        return Path(a).resolve() == Path(b).resolve()
    return a is b


def fit_destination(runs: Runs, tracking: Any) -> Destination | None:
    """Where a fit of ``runs`` is logged: its sweep's trackers (``tracking`` None or True, or
    other backends for the same sweep), trackers beside a CSV, or nowhere (False)."""
    if tracking is False:
        return None
    if "created" in runs.metadata:  # a sweep folder's store
        options = None if tracking in (None, True) else parse_tracking(tracking, "tracking", FitInputError)
        target = sweep_destination(runs.metadata, runs.source, options)
        if target is None and tracking is True:
            raise FitInputError(f"tracking=True: the sweep in {runs.source} was run without [tracking]; "
                                "name the backends instead, e.g. tracking=['tensorboard']")
        return target
    if tracking is None:
        return None
    if tracking is True:
        raise FitInputError(f"tracking=True logs to a sweep's own trackers, and {runs.source} is not a sweep "
                            "folder; name the backends instead, e.g. tracking=['tensorboard']")
    options = parse_tracking(tracking, "tracking", FitInputError)
    if options is None:
        return None
    path = Path(runs.source)
    if path.is_file():
        return destination(options, path.parent, f"fit of {path.resolve()}", path.stem)
    return destination(options, Path.cwd(), f"fit of {runs.source}", "fit")


__all__ = ["APPROACHES", "CURVES", "Comparison", "compare", "FOCI", "METHODS", "METRICS", "SCALES", "Approach", "FitInputError", "FitResult", "FitSet",
           "Forecast", "HoldoutCheck",
           "Runs", "fit", "load_runs", "write_comparison", "write_report"]
