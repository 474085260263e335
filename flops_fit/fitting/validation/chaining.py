"""Forward chaining: how wrong each candidate law is as a function of how far it extrapolates.

A forecast is used beyond the sweep (10x its largest budget by default), and leaving one
budget out only tests interpolation. Forward chaining (time-series cross-validation) tests
extrapolation: for each split C_k, fit the budgets up to C_k and predict every larger budget
C_j, recording the error against the ratio r = C_j / C_k. Each candidate is a (method, scale,
focus); its errors give

- its **score**: the mean |error| over the predictions at the largest ratios the sweep can
  test (log r at least SCORE_SHARE of the largest log r), what the forecast is chosen by;
- its **error slope** s: errors modelled as e ~ N(0, (s ln r)^2) (zero when nothing is
  extrapolated, growing with the log of the reach), s^2 the mean of (ln(1 + e) / ln r)^2, so
  that the error expected at the target's ratio r_t is s ln r_t.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws.focus import FOCI
from flops_fit.fitting.scales import rescale
from flops_fit.fitting.validation.holdout import observe_pairs, run_checks, select_budgets, splits

SCORE_SHARE = 0.5  # the score reads predictions with log r >= this share of the largest log r tested


class Approach(Protocol):  # fitting.approach.Approach (not imported: the report imports this module)
    name: str
    bootstrap: int
    options: tuple[str, ...]

    def fit(self, runs: Runs) -> Any: ...


@dataclass(kw_only=True)
class Record:
    """One forward-chaining prediction: a candidate fitted up to ``fitted_upto``, at ``budget``."""

    method: str
    scale: str
    focus: str | None
    fitted_upto: float
    budget: float
    ratio: float
    loss_error: float
    n_opt_error: float
    predicted_loss: float = np.nan  # the prediction itself (N_opt on the candidate's scale)
    predicted_n_opt: float = np.nan

    def to_dict(self) -> dict[str, Any]:
        return fmt.json_safe(asdict(self))


def focus_of(approach: Approach) -> str | None:
    return getattr(approach, "focus", None) if "focus" in approach.options else None


def variants(approach: Approach) -> list[Approach]:
    """The approach once per focus it can take (itself alone if it takes none)."""
    if "focus" not in approach.options:
        return [approach]
    out = []
    for focus in FOCI:
        variant = copy.copy(approach)
        variant.focus = focus
        out.append(variant)
    return out


def point(approach: Approach) -> Approach:
    """The same approach without bootstrap resamples: chaining needs point estimates only."""
    out = copy.copy(approach)
    out.bootstrap = 0
    return out


def forward_chain(approaches: Sequence[Approach], runs: Runs, scales: Sequence[str], *, curve: str,
                  workers: int = 1) -> tuple[list[Record], dict[tuple[str, str, str | None], str]]:
    """Every approach's forward-chaining predictions on every scale (point fits; the refits in
    ``workers`` processes), and why a candidate has none."""
    records, reasons = [], {}
    prepared = []  # per scale that applies: (scale, runs on it, budgets, budgets to observe)
    for scale in scales:
        try:
            scaled = rescale(runs, scale)
        except FitInputError as exc:
            reasons.update({(a.name, scale, focus_of(a)): str(exc) for a in approaches})
            continue
        prepared.append((scale, scaled, *select_budgets(scaled, "forward")))
    seen = iter(observe_pairs([(scaled, budgets, b) for _, scaled, budgets, chosen in prepared for b in chosen],
                              curve=curve, bootstrap=0, seed=None, level=0.95, workers=workers))
    chains = []  # per scale with splits: (scale, runs on it, budgets, splits)
    for scale, scaled, budgets, chosen in prepared:
        observed = [next(seen) for _ in chosen]
        parts = splits(scaled, budgets, "forward", [o for o in observed if o.reason is None])
        if not parts:
            reasons.update({(a.name, scale, focus_of(a)): "no budget beyond the first two has an interior minimum"
                            for a in approaches})
            continue
        chains.append((scale, scaled, budgets, parts))
    # every scale's refits in one dispatch: the pool balances them, and a batched approach's splits on
    # every scale are fitted together
    done = iter(run_checks([(a, scaled, budgets, keep, later) for _, scaled, budgets, parts in chains
                            for a in approaches for keep, later in parts], workers))
    for scale, _, _, parts in chains:
        for approach in approaches:
            key = (approach.name, scale, focus_of(approach))
            checks = [c for _ in parts for c in next(done)]
            good = [c for c in checks if np.isfinite(c.loss_error) and np.isfinite(c.n_opt_error)]
            if not good:
                reasons[key] = "; ".join(sorted({c.reason for c in checks if c.reason})) or "no prediction"
            for c in good:
                upto = max(c.fitted_budgets)
                records.append(Record(method=key[0], scale=scale, focus=key[2], fitted_upto=upto, budget=c.budget,
                                      ratio=c.budget / upto, loss_error=c.loss_error, n_opt_error=c.n_opt_error,
                                      predicted_loss=c.predicted_loss, predicted_n_opt=c.predicted_n_opt))
    return records, reasons


def score_cutoff(records: Sequence[Record]) -> float:
    """The smallest ratio the score reads: log r >= SCORE_SHARE x the largest log r tested."""
    return float(np.exp(SCORE_SHARE * np.log(max(r.ratio for r in records))))


def score(records: Sequence[Record], cutoff: float) -> tuple[float, float, int]:
    """Mean |loss error| and |N_opt error| over the records at ratios >= ``cutoff``, and how many."""
    far = [r for r in records if r.ratio >= cutoff * (1 - 1e-9)]
    if not far:
        return np.nan, np.nan, 0
    return (float(np.mean([abs(r.loss_error) for r in far])), float(np.mean([abs(r.n_opt_error) for r in far])),
            len(far))


def error_slope(records: Sequence[Record], field: str) -> float:
    """s of e ~ N(0, (s ln r)^2) for ``field`` ("loss_error" or "n_opt_error"): the root mean
    square of ln(1 + e) / ln r (NaN without records)."""
    values = [np.log1p(getattr(r, field)) / np.log(r.ratio) for r in records if r.ratio > 1]
    return float(np.sqrt(np.mean(np.square(values)))) if values else np.nan


def ratio_table(records: Sequence[Record]) -> list[tuple[float, float, float, int]]:
    """Per distinct ratio (rounded to 2 significant digits): mean |loss error|, mean |N_opt error|, count."""
    groups: dict[float, list[Record]] = {}
    for r in records:
        groups.setdefault(float(f"{r.ratio:.2g}"), []).append(r)
    return [(ratio, float(np.mean([abs(r.loss_error) for r in rs])), float(np.mean([abs(r.n_opt_error) for r in rs])),
             len(rs)) for ratio, rs in sorted(groups.items())]


__all__ = ["SCORE_SHARE", "Record", "error_slope", "focus_of", "forward_chain", "point", "ratio_table", "score",
           "score_cutoff", "variants"]
