"""The loss of a planned run: "I will train N parameters on D tokens: what loss will it reach?"

A law over (N, D) answers anywhere; how far to trust it depends on how far the planned run
lies from the runs it was fitted to. The stated interval combines, per side and in logs (root
sum of squares):

- the **bootstrap**: the percentile interval of the law's loss at (N, D) over its resamples;
- the **law forms**: the other forms fitted to the same runs (Chinchilla's by variable
  projection, the interaction law) whose residuals are comparable (``FORM_TOLERANCE``): forms
  that fit the runs equally well can part beyond them;
- the **extrapolation error**: ``z * EXTRAPOLATION_SLOPE * distance``, where ``distance`` is the
  Euclidean distance in (ln N, ln D) from the planned run to the convex hull of the fitted runs
  (0 inside it) and ``EXTRAPOLATION_SLOPE`` the log error per unit of that distance that the
  bootstrap and the forms leave uncovered: the smallest slope at which the combined interval holds
  the truth at the stated level on public runs that are not the test set
  (``benchmarks/bench_planned_runs.py`` fits small runs of Chinchilla's Figure 4 and of the public
  IsoFLOP sweeps and predicts their larger runs; its result file records the value shipped here).
  The test set (Gadre et al.'s over-trained models) fitted nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from flops_fit.checks import is_real
from flops_fit.errors import FitInputError
from flops_fit.fitting import formatting as fmt
from flops_fit.tables import format_table

# The log error per unit distance in (ln N, ln D) beyond the fitted runs that the bootstrap and the
# forms leave uncovered, from `python benchmarks/bench_planned_runs.py` (its "calibration" block:
# the Chinchilla Figure 4 runs and the three public IsoFLOP sweeps, never the Gadre test set).
EXTRAPOLATION_SLOPE = 0.0126
# The farthest of those predictions from its fitted runs (its "max_distance"): beyond it the slope is
# extended, not measured, and the planned run gets a note that says so.
MEASURED_DISTANCE = 4.31
# A form counts as comparable when its RMS log residual is within this factor of the best form's.
FORM_TOLERANCE = 1.5
# A fit without bootstrap draws printed its bootstrap part as "0.0%", a noise it never measured.
NO_DRAWS = ("no bootstrap draws (bootstrap=0): the interval leaves out the runs' noise (its bootstrap part is "
            "unmeasured, '-'); fit with bootstrap resamples (e.g. --bootstrap 1000) for it")

Triple = tuple[float, float, float]


@dataclass(kw_only=True)
class PlannedLoss:
    """The predicted loss of each planned run (N, D): ``table`` has N, D, loss, loss_lo,
    loss_hi, distance (ln units beyond the fitted runs) and each part's log half-widths."""

    method: str
    level: float
    table: pd.DataFrame
    forms: dict[str, float] = field(default_factory=dict)  # comparable form -> its RMS log residual
    slope: float = EXTRAPOLATION_SLOPE
    label: str = "loss"
    unit: str = "tokens"  # what D counts (``Runs.unit``)
    notes: list[str] = field(default_factory=list)  # what the reader must know about some of the runs
    losses: tuple[float, float] = (np.nan, np.nan)  # the fitted runs' lowest and highest loss

    def to_dict(self) -> dict[str, Any]:
        """The answer for JSON: each run's loss or interval the table withholds null, ``withheld`` giving why."""
        runs = []
        for r, record in zip(self.table.itertuples(), self.table.to_dict("records")):
            gone = self.withheld(r)
            runs.append({**{k: (None if k in gone else v) for k, v in record.items()}, **({"withheld": gone} if gone else {})})
        return fmt.json_safe({"method": self.method, "level": self.level, "forms": self.forms,
                              "extrapolation_slope": self.slope, "runs": runs, "notes": self.notes})

    def rows(self) -> list[list[str]]:
        """The table's cells (the text's and the report's): N, D, the loss with its interval (withheld
        when it spans over ``fmt.SPAN_LIMIT``: far from the runs it read [7.487e-100, 2.43e+10]), the
        distance and each part of the interval."""
        return [[fmt.count(r.N), fmt.count(r.D), self._loss_cell(r), f"{r.distance:.2f}", _pct(r.boot),
                 _pct(r.form), _pct(r.extrapolation)] for r in self.table.itertuples()]

    def withheld(self, r: Any) -> dict[str, str]:
        """Which of a run's loss, loss_lo, loss_hi are withheld, with why (the text and ``to_dict`` alike): the
        loss far under the runs' lowest or far over their highest (``fmt.loss_point``: --at 10:100 on Gadre's
        runs read 326.9 nats); its interval where an end reaches that far (``fmt.loss_bounds``: --at 10:100 on the
        demo's runs read 139.3 [76.59, 1127] nats, 1e12:1e14 read 1.26 [0.00567, 2.35]), spans over
        ``fmt.SPAN_LIMIT`` or is the point itself."""
        lowest, highest = self.losses
        if why := fmt.loss_point(r.loss, lowest, highest):
            return {"loss": why, "loss_lo": why, "loss_hi": why}
        why = fmt.loss_bounds(r.loss_lo, r.loss_hi, lowest, highest)
        if not (np.isfinite(r.loss_lo) and np.isfinite(r.loss_hi)):  # a part unknown (``_unknown_notes``)
            why = "a part of it is unknown (see the note)"
        elif fmt.too_wide(r.loss_lo, r.loss_hi):  # one over 1000x says so, as every table's does
            why = f"spans over {fmt.SPAN_LIMIT:g}x"
        elif why is None and fmt.still(r.loss, r.loss_lo, r.loss_hi):
            why = fmt.STILL_REASON
        return {"loss_lo": why, "loss_hi": why} if why else {}

    def _loss_cell(self, r: Any) -> str:
        """A run's loss "value [lo, hi]", or what of it is withheld with the reason (``withheld``)."""
        gone = self.withheld(r)
        if "loss" in gone:
            return f"withheld: {gone['loss']}"
        if "loss_lo" in gone:
            return f"{fmt.loss(r.loss)} [withheld: {gone['loss_lo']}]"
        return fmt.with_interval(r.loss, r.loss_lo, r.loss_hi, fmt=fmt.loss)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        """One line, as a fit's: the dataclass's own printed the raw table (NaN where the text says '-' or
        withholds a loss) and every field."""
        return (f"<PlannedLoss of {len(self.table)} planned run(s) from {self.method}'s law; print() it for the "
                "table, .to_dict() for all>")

    def summary(self) -> str:
        rows = self.rows()
        others = len(self.forms) - (self.method in self.forms)  # "1 comparable form" counted the chosen law itself
        head = (f"Planned runs ({self.method}; {100 * self.level:g}% interval = bootstrap + spread of "
                f"{others} other law form(s) that fit as well + extrapolation error {100 * self.slope:.2f}% per unit "
                "of distance in (ln N, ln D) beyond the fitted runs):")
        return "\n".join([head, format_table(rows, ["params N", f"{self.unit} D", self.label, "distance",
                                                    "bootstrap +-", "forms +-", "extrapolation +-"]),
                          *(f"note: {n}" for n in self.notes)])


def _unknown_notes(n: np.ndarray, d: np.ndarray, boot: np.ndarray, silent: list[tuple[int, str]],
                   method: str) -> list[str]:
    """Why a planned run's interval is withheld: every resample's law, or a law form that fits the runs as well
    as ``method``'s, gives no finite positive loss there, so a part of the interval is unknown (it was read as
    0, an interval narrower than the evidence)."""
    notes = [f"{fmt.count(n[i])}:{fmt.count(d[i])}: no resample's law gives a finite loss there, so the runs' "
             "noise is unknown and its interval withheld" for i in np.flatnonzero(np.isnan(boot[0]))]
    notes += [f"{fmt.count(n[i])}:{fmt.count(d[i])}: the {other} law fits the runs as well as {method}'s but gives "
              "no finite loss there, so the forms' spread is unknown and its interval withheld" for i, other in silent]
    return notes


def hull_distance(log_points: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Euclidean distance of each query point (ln N, ln D) to the convex hull of ``log_points``
    (0 inside); runs on a line or at one point are their own hull."""
    from scipy.spatial import ConvexHull, QhullError

    pts = np.unique(np.asarray(log_points, dtype=float), axis=0)
    query = np.atleast_2d(np.asarray(query, dtype=float))
    try:
        hull = ConvexHull(pts)
        edges = [(pts[i], pts[j]) for i, j in hull.simplices]
        inside = np.all(query @ hull.equations[:, :2].T + hull.equations[:, 2] <= 1e-9, axis=1)
    except (QhullError, ValueError):  # collinear or too few points: distance to the segments between them
        order = np.lexsort(pts.T[::-1])
        ends = pts[order]
        edges = [(ends[0], ends[-1])] if len(ends) > 1 else [(ends[0], ends[0])]
        inside = np.zeros(len(query), dtype=bool)
    out = np.array([min(_segment_distance(q, a, b) for a, b in edges) for q in query])
    return np.where(inside, 0.0, out)


def _segment_distance(q: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    ab = b - a
    t = 0.0 if not ab.any() else float(np.clip(np.dot(q - a, ab) / np.dot(ab, ab), 0.0, 1.0))
    return float(np.linalg.norm(q - (a + t * ab)))


def check_planned(n: Any, d: Any) -> tuple[np.ndarray, np.ndarray]:
    """Planned sizes and token counts as equal-length arrays of finite positive numbers (a word, a table
    or True is refused by name, not left to numpy's ValueError or read as one parameter)."""
    n_arr, d_arr = _numbers(n, "N"), _numbers(d, "D")
    if n_arr.size == 1 and d_arr.size > 1:
        n_arr = np.full(d_arr.size, n_arr[0])
    if d_arr.size == 1 and n_arr.size > 1:
        d_arr = np.full(n_arr.size, d_arr[0])
    if n_arr.size == 0 or d_arr.size == 0:
        raise FitInputError(f"loss_at takes at least one planned run (N and D), e.g. loss_at(1.4e9, 2.8e10); got "
                            f"N={n!r}, D={d!r}")
    if n_arr.size != d_arr.size:
        raise FitInputError(f"loss_at takes as many token counts as sizes; got {n_arr.size} sizes and "
                            f"{d_arr.size} token counts")
    # counts: a run of 1e-300 parameters read a loss of 6e+104 [5e+85, 1e+201] nats
    if not (np.all(np.isfinite(n_arr) & (n_arr >= 1)) and np.all(np.isfinite(d_arr) & (d_arr >= 1))):
        raise FitInputError(f"a planned run is a positive number of parameters N and tokens D, at least one of each; "
                            f"got N={n!r}, D={d!r}")
    return n_arr, d_arr


def _numbers(values: Any, what: str) -> np.ndarray:
    """``values`` (``what``: N or D) as a 1-D float array; FitInputError unless numbers, not booleans."""
    try:
        arr = np.atleast_1d(np.asarray(values, dtype=float))
        bad = arr.ndim != 1 or np.asarray(values).dtype == bool
    except (TypeError, ValueError):
        bad = True
    if bad:
        raise FitInputError(f"a planned run is a positive number of parameters N and tokens D (one number or a list "
                            f"of each, e.g. loss_at(1.4e9, 2.8e10)); got {what}={values!r}")
    return arr


def rms_residual(result: Any) -> float:
    """The RMS log-loss residual of a law's fit to its runs (in-sample)."""
    residual = result.diagnostics.residuals["residual"].to_numpy(float)
    return float(np.sqrt(np.mean(residual ** 2))) if residual.size else np.nan


def has_law(result: Any) -> bool:
    """Whether ``result`` gives a loss at any (N, D) (a law over N and D)."""
    point = {k: np.array([[v]]) for k, v in result.params.items()}
    return result.law_loss(point, np.ones((1, 1)), np.ones((1, 1))) is not None


# The approaches that fit a law form by variable projection (``Vpnls``, ``Interaction``), each
# registered by ``law_form`` where it is defined: the comparable forms a lone result is checked against.
FORM_APPROACHES: list[type] = []


def law_form(approach: type) -> type:
    """Class decorator: ``approach`` fits a law form that ``loss_at`` compares a result with."""
    FORM_APPROACHES.append(approach)
    return approach


def other_forms(result: Any) -> dict[str, Any]:
    """The law forms fitted to ``result``'s runs besides its own (point fits, same focus), for the spread."""
    focus = result.details.get("focus", "all")
    out = {}
    for kind in FORM_APPROACHES:
        if kind.name == result.method or "U" in result.params:  # a data budget: the others ignore it
            continue
        try:
            out[kind.name] = kind(bootstrap=0, focus=focus).fit(result.runs)
        except FitInputError:
            continue
    return out


def loss_at(result: Any, n: Any, d: Any, *, forms: dict[str, Any] | None = None,
            slope: float = EXTRAPOLATION_SLOPE) -> PlannedLoss:
    """``result``'s law at each planned (N, D) with the combined interval (module docstring).

    ``forms`` are other laws fitted to the same runs (method -> FitResult); by default the built-in
    forms are fitted here. Only those whose RMS log residual is within FORM_TOLERANCE of the best's
    count as comparable.
    """
    if not has_law(result):
        raise FitInputError(f"{result.method} fits power laws in compute, not a loss L(N, D): the loss of a planned "
                            "run needs a law over (N, D) (methods parametric, vpnls, interaction)")
    if result.runs.scale != "params":
        raise FitInputError(f"loss_at reads N as total parameters, and this law was fitted on {result.runs.scale}: "
                            "fit with scale='params' (--scale params) to ask for the loss of a planned run")
    if not is_real(slope) or not (math.isfinite(slope) and slope >= 0):  # nan read "nan%", -1 "-100.00%" per unit
        raise FitInputError(f"slope is the extrapolation error per unit of distance beyond the fitted runs, a number "
                            f">= 0 (default {EXTRAPOLATION_SLOPE}), got {slope!r}")
    n_arr, d_arr = check_planned(n, d)
    point = np.asarray(result.loss_surface(n_arr, d_arr), dtype=float).ravel()
    if not np.all(np.isfinite(point) & (point > 0)):
        raise FitInputError(f"{result.method}'s law gives no finite positive loss at these runs: "
                            f"{fmt.sig(float(np.nanmin(point)), 4)}; fit another method")
    boot = np.zeros((2, point.size))
    if len(result.samples):
        with np.errstate(all="ignore"):
            columns = {k: v[:, None] for k, v in result.draws().items()}
            draws = np.asarray(result.law_loss(columns, n_arr[None, :], d_arr[None, :]), dtype=float)
        draws = np.where(np.isfinite(draws) & (draws > 0), draws, np.nan)
        tail = 50.0 * (1.0 - result.level)
        kept = np.isfinite(draws).any(axis=0)
        lo, hi = np.nanpercentile(draws[:, kept], [tail, 100.0 - tail], axis=0) if kept.any() else np.empty((2, 0))
        boot = np.full((2, point.size), np.nan)  # no resample's law gives a loss there: the noise is unknown
        boot[:, kept] = np.maximum(np.vstack([np.log(point[kept] / lo), np.log(hi / point[kept])]), 0.0)
    candidates = {result.method: result, **(other_forms(result) if forms is None else
                                            {m: f for m, f in forms.items() if m != result.method})}
    residuals = {m: rms_residual(f) for m, f in candidates.items() if has_law(f)}
    best = min(v for v in residuals.values() if np.isfinite(v))
    comparable = {m: v for m, v in residuals.items() if np.isfinite(v) and v <= FORM_TOLERANCE * best}
    comparable.setdefault(result.method, residuals[result.method])
    form = np.zeros((2, point.size))
    silent: list[tuple[int, str]] = []  # (run, a comparable form with no loss at it)
    for method in comparable:
        if method == result.method:
            continue
        with np.errstate(all="ignore"):
            other = np.log(np.asarray(candidates[method].loss_surface(n_arr, d_arr), dtype=float).ravel() / point)
        # a form fitted as well that gives no loss there leaves the spread unknown (NaN), not 0: it read 0.0%
        form = np.vstack([np.fmax(form[0], -other), np.fmax(form[1], other)])
        silent += [(i, method) for i in np.flatnonzero(~np.isfinite(other))]
    form[:, [i for i, _ in silent]] = np.nan
    runs = result.runs.frame
    fitted = np.column_stack([np.log(runs["params"].to_numpy(float)), np.log(runs["tokens"].to_numpy(float))])
    distance = hull_distance(fitted, np.column_stack([np.log(n_arr), np.log(d_arr)]))
    from scipy.stats import norm

    ext = float(norm.ppf(0.5 + result.level / 2)) * slope * distance
    below = np.sqrt(boot[0] ** 2 + form[0] ** 2 + ext ** 2)
    above = np.sqrt(boot[1] ** 2 + form[1] ** 2 + ext ** 2)
    # without draws the runs' noise is unmeasured, not zero: its part is NaN ("-"), and a note says so
    table = pd.DataFrame({"N": n_arr, "D": d_arr, "loss": point, "loss_lo": point * np.exp(-below),
                          "loss_hi": point * np.exp(above), "distance": distance,
                          "boot": np.maximum(*boot) if len(result.samples) else np.nan,
                          "form": np.maximum(*form), "extrapolation": ext})
    unmeasured = [] if len(result.samples) else [NO_DRAWS]
    unmeasured += _unknown_notes(n_arr, d_arr, boot, silent, result.method)
    return PlannedLoss(method=result.method, level=result.level, table=table, forms=comparable, slope=slope,
                       label=result.runs.label, unit=result.runs.unit,
                       losses=result.runs.loss_range,
                       notes=unmeasured + _below_notes(n_arr, d_arr, runs, result.runs.unit)
                       + _beyond_notes(n_arr, d_arr, distance))


def _beyond_notes(n: np.ndarray, d: np.ndarray, distance: np.ndarray) -> list[str]:
    """A note for planned runs farther from the fitted runs than any prediction the extrapolation
    error was measured on (``MEASURED_DISTANCE``): their interval extends it, unchecked."""
    far = [f"{fmt.count(a)} x {fmt.count(b)} ({r:.2f})" for a, b, r in zip(n, d, distance) if r > MEASURED_DISTANCE]
    if not far:
        return []
    return [f"{', '.join(far)} lie(s) farther from the fitted runs than {MEASURED_DISTANCE:g}, the farthest distance at "
            "which the extrapolation error was measured on public runs: the interval extends that error, unchecked; "
            "a sweep of larger runs brings them nearer"]


def _below_notes(n: np.ndarray, d: np.ndarray, runs: pd.DataFrame, unit: str = "tokens") -> list[str]:
    """A note for planned runs smaller (in N or D) than every fitted run: the extrapolation error was
    measured on larger runs (``EXTRAPOLATION_SLOPE``), and toward small N and D a law's power terms
    grow without bound while a real model's loss levels off (a law fitted on Chinchilla's IsoFLOP runs
    of 57M parameters and up read a 1M model on 10M tokens at 32.6 nats). ``unit``: what D counts (an image
    sweep's samples)."""
    smallest_n, smallest_d = float(runs["params"].min()), float(runs["tokens"].min())
    below = [f"{fmt.count(a)} x {fmt.count(b)}" for a, b in zip(n, d) if a < smallest_n or b < smallest_d]
    if not below:
        return []
    return [f"{', '.join(below)} lie(s) below the fitted runs (smallest {fmt.count(smallest_n)} parameters, "
            f"{fmt.count(smallest_d)} {unit}): the extrapolation error was measured beyond them, toward larger runs, "
            "and below them a law's power terms grow without bound while a real model's loss levels off: read it "
            "as an upper bound at best"]


def _pct(log_half_width: float) -> str:
    """A part of the interval as a percentage; from 10,000% in 3 figures (it printed 100 digits)."""
    if not np.isfinite(log_half_width):
        return "-"
    share = 100 * np.expm1(log_half_width)
    return f"{share:.1f}%" if share < 1e4 else f"{fmt.sig(share)}%"


__all__ = ["EXTRAPOLATION_SLOPE", "FORM_APPROACHES", "MEASURED_DISTANCE", "FORM_TOLERANCE", "PlannedLoss", "check_planned", "hull_distance",
           "law_form", "loss_at"]
