"""What a fit hands back: point estimates, bootstrap draws, predictions, diagnostics.

``FitResult`` is the interface every approach's result implements: ``frontier`` (the law
C -> N_opt, D_opt, loss for columns of parameters), ``observed_optima`` and ``law_loss``.
Everything else (intervals, predictions, tables, text, JSON) is shared and written here once.
Drawing sits above, in the report (``report.profile_plots.draw_profiles``, ``report.plots``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.decisions.inference import (
    SIZING_FIELDS,
    TOTAL_FIELDS,
    check_budgets,
    inference_sizing,
    json_rows,
    law_of,
    sizing_notes,
    sizing_summary,
    total_sizing,
)
from flops_fit.fitting.decisions.planned import EXTRAPOLATION_SLOPE, PlannedLoss, loss_at
from flops_fit.fitting.inputs import METRICS, Runs
from flops_fit.fitting.laws.bootstrap import interval
from flops_fit.fitting.laws.focus import FOCUS_LABELS
from flops_fit.fitting.laws.laws import Params, power_frontier
from flops_fit.fitting.scales import COLUMN_NAMES
from flops_fit.fitting.validation.holdout import HoldoutCheck, holdout_json, holdout_summary
from flops_fit.fitting.validation.validity import unphysical
from flops_fit.tables import format_table

# Fixed by the runs, not estimated: k, the FLOPs per parameter per token of the frontier, and U.
CONSTANTS = ("k", "k_slope", "U")  # U: the unique tokens a data-constrained law was given
# The irreducible loss of each law's form. Bounded below by 0, where a fit that finds no floor
# leaves it at the optimizer's leftovers (3e-17 [1.5e-315, 2.2e-14]): digits that mean 0.
LOSS_FLOORS = ("E", "l_inf")
AT_ZERO = 1e-9  # a loss floor under this share of the runs' smallest loss is reported as 0


@dataclass(kw_only=True)
class Diagnostics:
    """How far to trust a fit: residuals, R^2, what was left out and why, warnings, and
    (for iterative fits) whether the optimiser converged."""

    residuals: pd.DataFrame
    r2: float
    r2_of: str
    excluded: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    convergence: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"r2": fmt.json_safe(self.r2), "r2_of": self.r2_of, "excluded": self.excluded, "warnings": self.warnings,
               "residual_rms": float(np.sqrt(np.mean(np.square(self.residuals["residual"]))))
               if len(self.residuals) else None}
        if self.convergence is not None:
            out["convergence"] = self.convergence
        return out


def fitted_results(fitted: Any, caller: str) -> dict[str, Any]:
    """``fitted.results`` of what ``flops_fit.fit`` returns; a path, a table or a comparison given in
    its place is refused naming the fix (it failed deep inside with an AttributeError)."""
    if not isinstance(fitted, Presentable):
        raise FitInputError(f"{caller} takes what flops_fit.fit returns, got {type(fitted).__name__}: fit first, "
                            f"e.g. {caller}(flops_fit.fit(SOURCE, method='all'), OUT)")
    return fitted.results


class Presentable:
    """Printing, JSON, plots and the HTML report, shared by one fit and a set of fits.

    ``results`` (method -> FitResult), ``skipped`` (method -> why) and ``warnings`` are
    what the report reads.
    """

    results: dict[str, FitResult]
    skipped: dict[str, str]
    warnings: list[str]

    def summary(self, budgets: Sequence[float] | None = None) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        """One line (a dataclass's own repr would print every draw): what this is, how to see more."""
        methods = ", ".join(self.results) or "no method"
        forecast = getattr(self, "forecast", None)
        answer = f"; {forecast!r}" if forecast is not None else ""
        runs = len(next(iter(self.results.values())).runs) if self.results else 0
        return f"<{type(self).__name__} of {methods} on {runs} runs{answer}; print() it for the summary, .to_json() for all>"

    def to_dict(self, budgets: Sequence[float] | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.summary()

    @property
    def holdout(self) -> dict[str, list[HoldoutCheck]]:
        """Each method's held-out checks (empty unless fitted with ``holdout=``)."""
        return {m: r.holdout_checks for m, r in self.results.items() if r.holdout_checks}

    def holdout_summary(self) -> str:
        """The held-out checks as a plain-text table ("" without any)."""
        return holdout_summary(self.holdout)

    def to_json(self, budgets: Sequence[float] | None = None, *, inference_tokens: float | None = None,
                totals: Sequence[float] | None = None, planned: PlannedLoss | None = None, **kwargs: Any) -> str:
        out = self.to_dict(budgets)
        if planned is not None:  # the loss of planned runs (``loss_at``)
            out["planned"] = planned.to_dict()
        if inference_tokens is not None:
            out["inference"] = {r.method: _sizing_json(r, _budgets(r, budgets), inference_tokens, totals)
                                for r in self.sizable()}
        return json.dumps(out, indent=kwargs.pop("indent", 2), default=fmt.json_default, **kwargs)

    def sizable(self) -> list[FitResult]:
        """The results with a law over (N, D), which sizing for inference needs (FitInputError if none)."""
        results = [r for r in self.results.values() if r.law_loss(_point(r), np.ones((1, 1)), np.ones((1, 1)))
                   is not None]
        if not results:
            law_of(next(iter(self.results.values())))  # raises the one-line reason
        return results

    def sizing_summary(self, budgets: Sequence[float] | None, inference_tokens: float,
                       totals: Sequence[float] | None = None) -> str:
        """Plain text: each law's sizing for ``inference_tokens`` served (``inference.sizing_summary``)."""
        return "\n\n".join(sizing_summary(r, _budgets(r, budgets), inference_tokens, totals) for r in self.sizable())


@dataclass(kw_only=True, repr=False)
class FitResult(Presentable):
    """One method's fit. ``params`` are point estimates, ``samples`` one row per resample."""

    method: str
    title: str
    params: dict[str, float]
    samples: pd.DataFrame
    runs: Runs
    diagnostics: Diagnostics
    level: float = 0.95
    seed: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    holdout_checks: list[HoldoutCheck] = field(default_factory=list)

    # ---- what each approach's result provides -------------------------------------------
    def frontier(self, params: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(N_opt, D_opt, loss), each (draws, budgets), for parameter columns ``params``."""
        raise NotImplementedError

    def observed_optima(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(C, N, D) of the optima the frontier was fitted through, if it has any."""
        return None

    def law_loss(self, params: Params, n: np.ndarray, d: np.ndarray) -> np.ndarray | None:
        """The law's loss at (N, D) for parameter columns ``params`` (one per draw, shape (m, 1)
        against n, d), for a law that gives one (None for approaches 1-2)."""
        return None

    # ---- shared -----------------------------------------------------------------------------
    def loss_surface(self, n: np.ndarray, d: np.ndarray) -> np.ndarray | None:
        """The fitted loss at (N, D), for a law that gives one."""
        return self.law_loss(self.params, n, d)

    def draws(self) -> dict[str, np.ndarray]:
        """The bootstrap samples as parameter columns (empty without a bootstrap)."""
        return {k: self.samples[k].to_numpy(float) for k in self.samples}

    @property
    def results(self) -> dict[str, FitResult]:
        return {self.method: self}

    @property
    def skipped(self) -> dict[str, str]:
        return {}

    @property
    def warnings(self) -> list[str]:
        return []

    def intervals(self) -> pd.DataFrame:
        """Every parameter (and the exponents a, b): estimate, interval bounds, bootstrap s.e."""
        rows = []
        for name in (n for n in self.params if n not in CONSTANTS):
            draws = self.samples[name].to_numpy(float) if name in self.samples else np.array([])
            lo, hi = interval(draws, self.level) if draws.size else (np.nan, np.nan)
            with np.errstate(all="ignore"):  # wild draws (unidentified terms) may overflow: inf is honest
                se = float(np.nanstd(draws, ddof=1)) if draws.size > 1 else np.nan
            row = {"estimate": float(self.params[name]), "lo": float(lo), "hi": float(hi), "se": se}
            if name in LOSS_FLOORS:
                zero = AT_ZERO * float(self.runs.frame["loss"].min())
                row = {k: 0.0 if abs(v) < zero else v for k, v in row.items()}
            rows.append({"param": name, **row})
        return pd.DataFrame(rows).set_index("param")

    @property
    def exponents(self) -> dict[str, tuple[float, float, float]]:
        """Frontier exponents: N_opt ~ C^a, D_opt ~ C^b, as (estimate, lo, hi)."""
        table = self.intervals()
        return {k: tuple(float(v) for v in table.loc[k, ["estimate", "lo", "hi"]]) for k in ("a", "b")}

    def predict(self, budgets: float | Iterable[float], *, inference_tokens: float | None = None) -> pd.DataFrame:
        """N_opt, D_opt, loss and tokens per parameter at each budget C, with interval bounds.

        With ``inference_tokens`` T: the N and D that reach the compute-optimal model's loss at C
        with the least training + inference FLOPs (``inference.inference_sizing``)."""
        if inference_tokens is not None:
            return inference_sizing(self, budgets, inference_tokens)
        c = check_budgets(budgets, "budgets")
        n, d, loss = self.frontier({k: np.array([v]) for k, v in self.params.items()}, c)
        point = (n, d, loss, d / n)
        draws = None
        if len(self.samples):
            n, d, loss = self.frontier(self.draws(), c)
            draws = (n, d, loss, d / n)
        out = pd.DataFrame({"budget": c})
        for i, name in enumerate(("N_opt", "D_opt", "loss", "tokens_per_param")):
            out[name] = point[i][0]
            lo, hi = interval(draws[i], self.level) if draws is not None else (np.full(c.size, np.nan),) * 2
            out[f"{name}_lo"], out[f"{name}_hi"] = lo, hi
        return out

    def loss_at(self, n: Any, d: Any, *, forms: dict[str, FitResult] | None = None,
                slope: float = EXTRAPOLATION_SLOPE) -> PlannedLoss:
        """The loss of planned runs of ``n`` parameters on ``d`` tokens, with an interval of the bootstrap,
        the comparable law forms (``forms``, fitted to the same runs; by default the built-in ones are
        fitted here) and the extrapolation error by distance from the runs (``planned``)."""
        return loss_at(self, n, d, forms=forms, slope=slope)

    def predict_total(self, total_flops: float | Iterable[float], *, inference_tokens: float = 0.0) -> pd.DataFrame:
        """The lowest loss a total budget of training + ``inference_tokens`` served buys, and its N and D
        (``inference.total_sizing``)."""
        return total_sizing(self, total_flops, inference_tokens)

    def table_budgets(self, target: float | None = None) -> list[float]:
        """The budgets a table reads by default (``default_budgets``), with ``target`` among them."""
        return sorted({*default_budgets(self.runs), *([float(target)] if target else [])})

    def table(self, budgets: Sequence[float] | None = None) -> pd.DataFrame:
        """A Chinchilla-style table: compute, parameters, tokens, tokens/param, loss (+ intervals)."""
        return self.predict(default_budgets(self.runs) if budgets is None else budgets)

    def below_note(self, budgets: Sequence[float] | None = None) -> list[str]:
        """The note on the table's rows below every run's compute (``below_swept``), if any."""
        return [n for n in [below_swept(self.table(budgets)["budget"], self.runs)] if n]

    def summary(self, budgets: Sequence[float] | None = None, *, with_holdout: bool = True) -> str:
        """Plain text: parameters with intervals, predictions, warnings, held-out checks."""
        pct = f"{100 * self.level:g}%"
        lines = [f"{self.title}  ({len(self.runs)} runs from {self.runs.source}, "
                 f"{len(self.samples)} bootstrap resamples, seed {self.seed})",
                 f"fitted metric: {METRICS[self.runs.metric]}", *(f"note: {n}" for n in self.runs.notes), ""]
        lines.append(format_table(param_rows(self.intervals(), self.details.get("on_bound", ())),
                                  ["param", "estimate", f"{pct} interval",
                                                                 "bootstrap s.e."]))
        unit = self.runs.unit
        lines += ["", format_table(prediction_rows(self.table(budgets), unit, self.runs.loss_range),
                                   ["FLOPs", f"{COLUMN_NAMES[self.runs.scale]} N_opt", f"{unit} D_opt",
                                    f"{unit}/param", self.runs.label])]
        lines += [f"note: {n}" for n in self.below_note(budgets)]
        d = self.diagnostics
        if "k" in self.params:
            slope = self.params.get("k_slope", 0.0)
            rule = f"k N^{slope:+.3g} N D" if slope else "k N D"
            lines += ["", f"frontier with C = {rule}, k = {self.params['k']:.4g} FLOPs per parameter per "
                      f"{self.runs.unit[:-1]} (from the runs)"]
        if "focus" in self.details:
            lines.append(f"fitted to: {FOCUS_LABELS[self.details['focus']]} (focus={self.details['focus']!r})")
        lines += ["", f"R^2 ({d.r2_of}): {fmt.r2(d.r2)}; exclusions: {len(d.excluded)}"]
        lines += [f"warning: {w}" for w in d.warnings]
        if with_holdout and self.holdout_checks:
            lines += ["", self.holdout_summary()]
        return "\n".join(lines)

    def to_dict(self, budgets: Sequence[float] | None = None) -> dict[str, Any]:
        par = self.intervals()
        out = {
            "method": self.method,
            "title": self.title,
            "source": self.runs.source,
            "metric": self.runs.metric,
            "runs": len(self.runs),
            "bootstrap": len(self.samples),
            "seed": self.seed,
            "level": self.level,
            "params": param_json(par, self.details.get("on_bound", ())),
            "table": prediction_json(self.table(budgets), self.runs.unit, self.runs.loss_range),
            # the notes its summary prints (the runs', a table row below every run): --json left them out
            "notes": [*self.runs.notes, *self.below_note(budgets)],
            "diagnostics": self.diagnostics.to_dict(),
            "details": {k: v for k, v in self.details.items() if isinstance(v, (str, int, float, list, dict))},
        }
        if self.holdout_checks:
            out["holdout"] = {self.method: holdout_json(self.holdout_checks)}
        return out


class PowerLawResult(FitResult):
    """Approaches 1 and 2: separate power laws in C for N_opt, D_opt and the loss."""

    def frontier(self, params: Params, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return power_frontier(params, budgets)


# Coefficients of a power law: positive scales, whose interval over ``fmt.SPAN_LIMIT`` is withheld
# as N_opt's is (a weak sweep's bootstrap reads A as [137, 3.9e277]).
COEFFICIENTS = ("A", "B")
# Coefficients that may take either sign (the interaction term F of the interaction and curve laws): an
# interval is judged by ``fmt.signed_span`` (F read [5.871e+14, 6.77e+21] beside A and B withheld).
SIGNED_COEFFICIENTS = ("F",)


def param_rows(table: pd.DataFrame, on_bound: Sequence[str] = ()) -> list[list[str]]:
    """Rows of param, estimate, "[lo, hi]", bootstrap s.e., each interval and s.e. ``param_withheld``
    withholds given as withheld with the reason; an interval that misses its estimate says so."""
    rows = []
    for name, r in table.iterrows():
        if np.isnan(r.lo) and np.isnan(r.hi):  # no bootstrap
            rows.append([name, fmt.sig(r.estimate, 4), "-", "-"])
            continue
        gone = param_withheld(name, r, on_bound)
        span, se = f"[{fmt.sig(r.lo, 4)}, {fmt.sig(r.hi, 4)}]", fmt.sig(r.se, 4)
        if fmt.outside(r.estimate, r.lo, r.hi, lambda v: fmt.sig(v, 4)):
            span += " (the estimate lies outside it)"
        if "lo" in gone:
            span = f"[withheld: {gone['lo']}]"
        if "se" in gone:
            se = f"withheld: {gone['se']}" if gone["se"] in SAID_OF_SE else "withheld"
        rows.append([name, fmt.sig(r.estimate, 4), span, se])
    return rows


SAID_OF_SE = ("outlying draws", "draws diverge")  # an s.e. withheld for its own reason says it; else "withheld"


def param_withheld(name: str, row: Any, on_bound: Sequence[str] = ()) -> dict[str, str]:
    """Which of a parameter's ``lo``, ``hi`` and ``se`` its table withholds, with the reason: a coefficient's
    interval over the span limit (``fmt.signed_span`` for one of either sign), the interval of a parameter fitted
    on its search bound (``on_bound``: the runs do not pin it down) or of resamples that do not vary, an s.e. set
    by a few outlying draws (``outlying_se``), draws that diverged. ``--json`` nulls the same fields."""
    if np.isnan(row["lo"]) and np.isnan(row["hi"]):  # no bootstrap: nothing to withhold
        return {}
    out: dict[str, str] = {}

    def withhold(why: str, keys: Sequence[str] = ("lo", "hi", "se")) -> None:
        out.update(dict.fromkeys(keys, why))

    value, lo, hi, se = (row[k] for k in ("estimate", "lo", "hi", "se"))
    if name in on_bound:
        withhold("fitted on its search bound")
        return out
    if fmt.still(value, lo, hi):
        withhold(fmt.STILL_REASON)
    if name in COEFFICIENTS and fmt.too_wide(lo, hi):
        withhold(f"spans over {fmt.SPAN_LIMIT:g}x")
    if name in SIGNED_COEFFICIENTS and (why := fmt.signed_span(value, lo, hi)):
        withhold(why)
    if outlying_se(se, lo, hi) and "se" not in out:
        withhold("outlying draws", ("se",))
    if not (np.isfinite(lo) and np.isfinite(hi)):
        withhold("draws diverge", ("lo", "hi"))
    if not np.isfinite(se):
        withhold("draws diverge", ("se",))
    return out


def param_json(table: pd.DataFrame, on_bound: Sequence[str] = ()) -> dict[str, Any]:
    """A parameter table for JSON: each bound and s.e. the text withholds null, and ``withheld`` giving why."""
    out = {}
    for name, r in table.iterrows():
        gone = param_withheld(name, r, on_bound)
        values = {k: (None if k in gone else v) for k, v in r.to_dict().items()}
        out[name] = fmt.json_safe({**values, **({"withheld": gone} if gone else {})})
    return out


def outlying_se(se: float, lo: float, hi: float) -> bool:
    """Whether a bootstrap s.e. exceeds its own interval's width (a normal spread's is a quarter of it): a few
    outlying draws set it, and it says nothing the interval does not (vpnls read B 1.378e+05 beside [113.3, 5504])."""
    return bool(np.isfinite([se, lo, hi]).all() and se > abs(hi - lo))


def prediction_rows(table: pd.DataFrame, unit: str = "tokens", losses: tuple[float, float] | None = None) -> list[list[str]]:
    """Rows of FLOPs, N_opt, D_opt, tokens/param, loss, each "value [lo, hi]" (``scale_cells``); a budget
    whose optimum itself names no model has its tokens/param and loss withheld too (``--predict 1e3``
    read 0.315 parameters on 236 tokens at a loss of 415.6 nats)."""
    return [[fmt.flops(r.budget)] + scale_cells(r, unit, losses) for _, r in table.iterrows()]


PREDICTED = (("N_opt", fmt.count), ("D_opt", fmt.count), ("tokens_per_param", fmt.sig))


def withheld_fields(row: Any, unit: str = "tokens", losses: tuple[float, float] | None = None) -> dict[str, str]:
    """Each field of a prediction row its text withholds, with the reason (``--json`` nulls the same): a
    value that names no model (with its bounds; an optimum that names none takes its tokens/param and loss
    with it), bounds that name none, span over ``fmt.SPAN_LIMIT`` or do not vary; a loss far under the runs'
    lowest or far over their highest (``fmt.loss_point``), or an interval reaching far from their losses
    (``losses``: ``Runs.loss_range``; ``fmt.loss_bounds``). ``unit``: what D counts (tokens, an image sweep's
    samples)."""
    lowest, highest = losses if losses is not None else (None, None)
    out: dict[str, str] = {}
    for k, _ in (*PREDICTED, ("loss", None)):
        value, lo, hi = row[k], row[f"{k}_lo"], row[f"{k}_hi"]
        alone = bounds = None
        if k in ("N_opt", "D_opt"):
            alone = unphysical(k, value, value, row["budget"], unit)  # the value itself names no model
        if k != "loss":
            bounds = unphysical(k, lo, hi, row["budget"], unit) if np.isfinite([lo, hi]).all() else None
            if bounds is None and fmt.too_wide(lo, hi):
                bounds = f"spans over {fmt.SPAN_LIMIT:g}x"
        else:
            alone, bounds = fmt.loss_point(value, lowest, highest), fmt.loss_bounds(lo, hi, lowest, highest)
        if k in ("tokens_per_param", "loss") and ("N_opt" in out or "D_opt" in out):
            alone = "no model"  # the optimum names none: its ratio and loss are no model's, whatever else they are
        if alone is not None:
            out.update({k: alone, f"{k}_lo": alone, f"{k}_hi": alone})
            continue
        if bounds is None and np.isfinite([lo, hi]).all() and fmt.still(value, lo, hi):
            bounds = fmt.STILL_REASON
        if bounds is not None:
            out.update({f"{k}_lo": bounds, f"{k}_hi": bounds})
    return out


def prediction_json(table: pd.DataFrame, unit: str = "tokens", losses: tuple[float, float] | None = None) -> list[dict[str, Any]]:
    """A prediction table's rows for JSON: each field the text withholds null, and ``withheld`` giving why."""
    rows = []
    for record in table.to_dict("records"):
        gone = withheld_fields(record, unit, losses)
        record = {k: (None if k in gone else v) for k, v in record.items()}
        rows.append(fmt.json_safe({**record, **({"withheld": gone} if gone else {})}))
    return rows


def scale_cells(row: Any, unit: str = "tokens", losses: tuple[float, float] | None = None) -> list[str]:
    """N_opt, D_opt, tokens/param and the loss of a prediction row, each "value [lo, hi]" (an interval over
    ``fmt.SPAN_LIMIT`` withheld, and one that names no model: --predict 1e3 read N_opt 1.34 [0.168, 5.23]
    parameters)."""
    gone = withheld_fields(row, unit, losses)
    cells = []
    for k, f in (*PREDICTED, ("loss", fmt.loss)):
        value, lo, hi = row[k], row[f"{k}_lo"], row[f"{k}_hi"]
        if k in gone:
            cells.append("withheld" if gone[k] == "no model" else f"withheld: {gone[k]}")
        elif f"{k}_lo" in gone:
            cells.append(f"{f(value)} [withheld: {gone[f'{k}_lo']}]")
        else:
            cells.append(fmt.with_interval(value, lo, hi, fmt=f))
    return cells


def below_swept(budgets: Sequence[float], runs: Runs) -> str | None:
    """A note naming a table's rows below the smallest run's FLOPs (None if none is): the default table
    starts at the decade under it (1e16 for a sweep from 8.46e16) and read those rows like swept ones."""
    smallest = float(runs.frame["flops"].min())
    below = [float(c) for c in budgets if float(c) < smallest * (1 - 1e-9)]
    if not below:
        return None
    return (f"{'the row' if len(below) == 1 else 'the rows'} at {', '.join(fmt.flops(c) for c in below)} FLOPs "
            f"{'lies' if len(below) == 1 else 'lie'} below the smallest run's compute ({fmt.flops(smallest)} FLOPs): "
            "the law read where no run was trained")


def default_budgets(runs: Runs) -> list[float]:
    """Decades from the smallest run's FLOPs up to 100x beyond the largest."""
    lo = np.floor(np.log10(runs.frame["flops"].min()))
    hi = np.ceil(np.log10(runs.frame["flops"].max())) + 2
    return [float(10.0 ** e) for e in np.arange(lo, hi + 1)]


def _budgets(result: FitResult, budgets: Sequence[float] | None) -> Sequence[float]:
    return default_budgets(result.runs) if budgets is None else budgets


def _sizing_json(result: FitResult, budgets: Sequence[float], tokens: float,
                 totals: Sequence[float] | None) -> dict[str, Any]:
    """One law's sizing as ``--json`` gives it: the tables' rows, and the lines the text prints under them
    (why a row is withheld, sizings below the fitted runs), so a row of nulls carries its reason."""
    sizing = result.predict(budgets, inference_tokens=tokens)
    table = result.predict_total(totals, inference_tokens=tokens) if totals else None
    return {"sizing": json_rows(sizing, SIZING_FIELDS),
            **({"totals": json_rows(table, TOTAL_FIELDS)} if table is not None else {}),
            "notes": sizing_notes(result, sizing, table)}


def _point(result: FitResult) -> dict[str, np.ndarray]:
    return {k: np.array([[v]]) for k, v in result.params.items()}
