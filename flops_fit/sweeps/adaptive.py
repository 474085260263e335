"""A sweep that designs itself: after each batch, the budget whose runs shrink the interval of
N_opt at the target most per FLOP, until a stopping rule holds.

A grid fixed in advance spends as much on the small budgets that say least about the target
as on the large ones. The design here starts from a small grid (the ``start`` smallest
budgets of the pool) and, after each batch of runs is trained and fitted, chooses the next
budget(s) from the pool (the planned grid's budgets; in a simulation, the budgets a public
sweep trained) by the gain per FLOP of a straight-line extrapolation of log N_opt over log C:
the prediction's standard error at the target, in units of the per-budget noise, is
``sqrt(1/n + (x_t - mean x)^2 / S_xx)`` (x = log C). Adding a budget changes n, the mean and
S_xx; the noise cancels from the comparison, so no constant is fitted to any data. The score
of a candidate is the drop of that factor divided by the FLOPs of the candidate's runs; the
choice's reason (the factor before and after, the FLOPs, the runner-up) is kept with it.

The stopping rule is measured, not predicted: after each batch the runs so far are fitted
with the public fit API (``flops_fit.fit``) and the rule reads the fitted interval of N_opt at
the target (``StopRule``: ``"n_opt<=1.5x"``: the 95% interval lies within a factor 1.5 of the
estimate on both sides; ``"flops<=1e19"``: a FLOPs cap; both may be given, comma-separated,
and the first that holds stops the design).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flops_fit.errors import FitInputError, OptionError

_RULE = re.compile(r"^\s*(n_opt\s*<=\s*(?P<factor>[0-9.eE+-]+)\s*x|flops\s*<=\s*(?P<cap>[0-9.eE+-]+))\s*$")


@dataclass(frozen=True)
class StopRule:
    """When the design stops: N_opt's interval at the target within ``n_opt_factor`` of its
    estimate on both sides, or ``flops_cap`` FLOPs spent (None: that part is not asked)."""

    n_opt_factor: float | None = None
    flops_cap: float | None = None

    @classmethod
    def parse(cls, text: str) -> StopRule:
        """``"n_opt<=1.5x"``, ``"flops<=1e19"`` or both, comma-separated."""
        factor = cap = None
        for part in str(text).split(","):
            match = _RULE.match(part)
            if not match:
                raise OptionError(f"stopping rule {part.strip()!r} is not understood: write n_opt<=1.5x (the interval "
                                  f"of N_opt at the target within 1.5x of its estimate) and/or flops<=1e19 (a FLOPs cap)")
            if match["factor"] is not None:
                factor = float(match["factor"])
                if not (math.isfinite(factor) and factor > 1):
                    raise OptionError(f"n_opt<=Fx needs a factor F above 1, got {match['factor']}")
            else:
                cap = float(match["cap"])
                if not (math.isfinite(cap) and cap > 0):
                    raise OptionError(f"flops<=C needs a positive FLOPs cap, got {match['cap']}")
        return cls(factor, cap)

    def __str__(self) -> str:
        parts = ([f"n_opt<={self.n_opt_factor:g}x"] if self.n_opt_factor else []) + \
            ([f"flops<={self.flops_cap:.3g}"] if self.flops_cap else [])
        return ",".join(parts) or "none (every budget of the pool)"

    def holds(self, factor: float, spent: float) -> str | None:
        """Why the design stops now (None: it goes on)."""
        if self.n_opt_factor is not None and factor <= self.n_opt_factor:
            return f"N_opt's interval at the target is within {factor:.3g}x of its estimate (asked {self.n_opt_factor:g}x)"
        if self.flops_cap is not None and spent >= self.flops_cap:
            return f"{spent:.3g} FLOPs spent (cap {self.flops_cap:.3g})"
        return None


def interval_factor(estimate: float, lo: float, hi: float) -> float:
    """How far the interval reaches from the estimate, as a factor (max of hi/est and est/lo);
    infinite for an interval that is missing or not around a positive estimate."""
    values = (estimate, lo, hi)
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values):
        return math.inf
    return max(hi / estimate, estimate / lo, 1.0)


def extrapolation_factor(budgets: Iterable[float], target: float) -> float:
    """The standard error of a straight line's prediction at log(target), in units of the
    per-point noise, fitted at log(budgets): sqrt(1/n + (x_t - mean)^2 / S_xx); infinite below
    two distinct budgets."""
    xs = [math.log(b) for b in budgets]
    n = len(xs)
    if n < 2:
        return math.inf
    mean = sum(xs) / n
    sxx = sum((x - mean) ** 2 for x in xs)
    if sxx <= 0:
        return math.inf
    return math.sqrt(1 / n + (math.log(target) - mean) ** 2 / sxx)


@dataclass(frozen=True)
class Choice:
    """A budget the design chose, its FLOPs, its score (drop of the extrapolation factor per
    FLOP) and why, in words."""

    budget: float
    flops: float
    score: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "flops": self.flops, "score": self.score, "reason": self.reason}


def initial_budgets(pool: Iterable[float], start: int = 3) -> list[float]:
    """The first batch: the ``start`` smallest budgets of the pool (the cheapest grid that a
    line through the optima can be fitted to with a residual)."""
    budgets = sorted(set(pool))
    if start < 2:
        raise OptionError(f"an adaptive sweep starts from 2 or more budgets (a line needs two), got {start}")
    if len(budgets) < start:
        raise OptionError(f"the pool holds {len(budgets)} budgets; the first batch needs {start}")
    return budgets[:start]


def next_budgets(trained: Iterable[float], costs: Mapping[float, float], target: float, batch: int = 1) -> list[Choice]:
    """Up to ``batch`` budgets of ``costs`` (budget -> FLOPs of its runs) not yet ``trained``,
    chosen one after another by the drop of the extrapolation factor at ``target`` per FLOP."""
    chosen = list(trained)
    out: list[Choice] = []
    for _ in range(batch):
        now = extrapolation_factor(chosen, target)
        left = [b for b in costs if b not in chosen]
        if not left:
            break
        scored = sorted(((now - extrapolation_factor([*chosen, b], target)) / costs[b], b) for b in left)
        score, best = scored[-1]
        after = extrapolation_factor([*chosen, best], target)
        runner = (f"; next best {scored[-2][1]:.3g} at {scored[-2][0] / score:.0%} of its gain per FLOP"
                  if len(scored) > 1 and score > 0 else "")
        reason = (f"budget {best:.3g}: the extrapolation factor at the target {now:.3g} -> {after:.3g} for "
                  f"{costs[best]:.3g} FLOPs, the most per FLOP of {len(left)} untrained budgets{runner}")
        out.append(Choice(best, costs[best], score, reason))
        chosen.append(best)
    return out


@dataclass
class Round:
    """One batch: the budgets trained in it (with why), then the fit's N_opt at the target."""

    choices: list[Choice]
    spent: float
    n_opt: float = math.nan
    n_opt_lo: float = math.nan
    n_opt_hi: float = math.nan
    factor: float = math.inf
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"budgets": [c.budget for c in self.choices], "choices": [c.to_dict() for c in self.choices],
                "spent": self.spent, "n_opt": self.n_opt, "n_opt_lo": self.n_opt_lo, "n_opt_hi": self.n_opt_hi,
                "factor": self.factor, "note": self.note}


@dataclass
class Design:
    """An adaptive design's history: each round's choices and fitted interval; ``stopped`` says why it ended."""

    target: float
    rule: StopRule
    rounds: list[Round] = field(default_factory=list)
    stopped: str = ""

    @property
    def budgets(self) -> list[float]:
        return [c.budget for r in self.rounds for c in r.choices]

    @property
    def spent(self) -> float:
        return self.rounds[-1].spent if self.rounds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "rule": str(self.rule), "rounds": [r.to_dict() for r in self.rounds],
                "stopped": self.stopped, "spent": self.spent, "budgets": self.budgets}


def run_design(costs: Mapping[float, float], target: float, rule: StopRule,
               fit_at: Callable[[list[float]], tuple[float, float, float]], *, start: int = 3,
               batch: int = 1) -> Design:
    """Drive a design over the pool ``costs`` (budget -> FLOPs of its runs): train (``fit_at``
    is called with every budget trained so far, trains what it has not, fits and returns
    N_opt, lo, hi at ``target``), check ``rule``, choose the next batch; until the rule holds
    or the pool is spent."""
    design = Design(target, rule)
    first = [Choice(b, costs[b], math.nan, f"budget {b:.3g}: one of the {start} smallest budgets, the first grid")
             for b in initial_budgets(costs, start)]
    batch_choices = first
    spent = 0.0
    while batch_choices:
        spent += sum(c.flops for c in batch_choices)
        round_ = Round(batch_choices, spent)
        design.rounds.append(round_)
        try:
            round_.n_opt, round_.n_opt_lo, round_.n_opt_hi = fit_at(design.budgets)
            round_.factor = interval_factor(round_.n_opt, round_.n_opt_lo, round_.n_opt_hi)
        except FitInputError as exc:
            round_.note = f"no fit yet: {exc}"
        reason = rule.holds(round_.factor, spent)
        if reason:
            design.stopped = reason
            return design
        batch_choices = next_budgets(design.budgets, costs, target, batch)
    design.stopped = "every budget of the pool is trained"
    return design


def isoflop_fitter(runs: Any, target: float, *, method: str = "isoflop", bootstrap: int = 200,
                   seed: int = 0) -> Callable[[list[float]], tuple[float, float, float]]:
    """``fit_at`` for a table of runs (``params``, ``tokens``, ``budget``, ``loss``): the runs of
    the chosen budgets fitted by ``flops_fit.fit`` (the public API), N_opt at ``target``."""
    from flops_fit.fitting import fit

    def fit_at(budgets: list[float]) -> tuple[float, float, float]:
        chosen = runs[runs.budget.isin(budgets)]
        row = fit(chosen, method, bootstrap=bootstrap, seed=seed, tracking=False).predict(target).iloc[0]
        return float(row.N_opt), float(row.N_opt_lo), float(row.N_opt_hi)

    return fit_at


def budget_costs(runs: Any) -> dict[float, float]:
    """FLOPs of each budget's runs in a table (6 N D per run): what choosing that budget costs."""
    flops = 6.0 * runs.params * runs.tokens
    return {float(b): float(v) for b, v in flops.groupby(runs.budget).sum().items()}
