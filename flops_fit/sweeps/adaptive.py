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
from pathlib import Path
from typing import Any

from flops_fit.errors import FitInputError, OptionError
from flops_fit.fitting import fit
from flops_fit.store.run_store import STORE_NAME, RunStore
from flops_fit.sweeps.driver import run_plan
from flops_fit.training.wsd import executed_flops

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


def additive(costs: Mapping[float, float]) -> Callable[[Iterable[float]], float]:
    """``spend`` for budgets whose runs cost what they cost alone (cosine runs, a public sweep)."""
    return lambda budgets: sum(costs[b] for b in budgets)


def next_budgets(trained: Iterable[float], pool: Iterable[float], spend: Callable[[Iterable[float]], float],
                 target: float, batch: int = 1) -> list[Choice]:
    """Up to ``batch`` budgets of ``pool`` not yet ``trained``, chosen one after another by the
    drop of the extrapolation factor at ``target`` per FLOP they add (``spend(budgets)``: the
    FLOPs the runs of those budgets execute together, so WSD's shared stable phases count once)."""
    chosen = list(trained)
    out: list[Choice] = []
    for _ in range(batch):
        now, base = extrapolation_factor(chosen, target), spend(chosen)
        left = [b for b in pool if b not in chosen]
        if not left:
            break
        added = {b: max(spend([*chosen, b]) - base, 1.0) for b in left}
        scored = sorted(((now - extrapolation_factor([*chosen, b], target)) / added[b], b) for b in left)
        score, best = scored[-1]
        after = extrapolation_factor([*chosen, best], target)
        runner = (f"; next best {scored[-2][1]:.3g} at {scored[-2][0] / score:.0%} of its gain per FLOP"
                  if len(scored) > 1 and score > 0 else "")
        reason = (f"budget {best:.3g}: the extrapolation factor at the target {now:.3g} -> {after:.3g} for "
                  f"{added[best]:.3g} FLOPs, the most per FLOP of {len(left)} untrained budgets{runner}")
        out.append(Choice(best, added[best], score, reason))
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

    def __str__(self) -> str:
        lines = [f"adaptive design, target {self.target:.3g} FLOPs, rule {self.rule}:"]
        for n, r in enumerate(self.rounds, 1):
            fitted = (f"N_opt {r.n_opt:.3g} [{r.n_opt_lo:.3g}, {r.n_opt_hi:.3g}] (x{r.factor:.2f})"
                      if math.isfinite(r.factor) else (r.note or "no interval"))
            lines.append(f"  round {n}: {r.spent:.3g} FLOPs spent; {fitted}")
            lines += [f"    {c.reason}" for c in r.choices]
        lines.append(f"stopped: {self.stopped}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "rule": str(self.rule), "rounds": [r.to_dict() for r in self.rounds],
                "stopped": self.stopped, "spent": self.spent, "budgets": self.budgets}


def run_design(pool: Iterable[float], spend: Callable[[Iterable[float]], float], target: float, rule: StopRule,
               fit_at: Callable[[list[float]], tuple[float, float, float]], *, start: int = 3, batch: int = 1,
               on_round: Callable[[Design], None] | None = None) -> Design:
    """Drive a design over the budgets of ``pool`` (``spend``: FLOPs of a set of budgets' runs):
    ``fit_at`` is called with every budget chosen so far, trains what it has not, fits and
    returns N_opt, lo, hi at ``target``; then ``rule`` is checked and the next batch chosen, until
    the rule holds or the pool is spent. ``on_round`` hears the design after each batch is chosen
    and after each fit (a sweep records it in its store)."""
    pool = sorted(set(pool))
    design = Design(target, rule)
    batch_choices = [Choice(b, spend([b]), math.nan, f"budget {b:.3g}: one of the {start} smallest budgets, "
                            "the first grid") for b in initial_budgets(pool, start)]
    while batch_choices:
        round_ = Round(batch_choices, spend([*design.budgets, *(c.budget for c in batch_choices)]))
        design.rounds.append(round_)
        if on_round is not None:
            on_round(design)
        try:
            round_.n_opt, round_.n_opt_lo, round_.n_opt_hi = fit_at(design.budgets)
            round_.factor = interval_factor(round_.n_opt, round_.n_opt_lo, round_.n_opt_hi)
        except FitInputError as exc:
            round_.note = f"no fit yet: {exc}"
        reason = rule.holds(round_.factor, round_.spent)
        if reason:
            design.stopped = reason
        else:
            batch_choices = next_budgets(design.budgets, pool, spend, target, batch)
            if not batch_choices:
                design.stopped = "every budget of the pool is trained"
        if on_round is not None:
            on_round(design)
        if design.stopped:
            return design
    return design


def isoflop_fitter(runs: Any, target: float, *, method: str = "isoflop", bootstrap: int = 200,
                   seed: int = 0) -> Callable[[list[float]], tuple[float, float, float]]:
    """``fit_at`` for a table of runs (``params``, ``tokens``, ``budget``, ``loss``): the runs of
    the chosen budgets fitted by ``flops_fit.fit`` (the public API), N_opt at ``target``."""
    def fit_at(budgets: list[float]) -> tuple[float, float, float]:
        chosen = runs[runs.budget.isin(budgets)]
        row = fit(chosen, method, bootstrap=bootstrap, seed=seed, tracking=False).predict(target).iloc[0]
        return float(row.N_opt), float(row.N_opt_lo), float(row.N_opt_hi)

    return fit_at


def budget_costs(runs: Any) -> dict[float, float]:
    """FLOPs of each budget's runs in a table (6 N D per run): what choosing that budget costs."""
    flops = 6.0 * runs.params * runs.tokens
    return {float(b): float(v) for b, v in flops.groupby(runs.budget).sum().items()}


# ------------------------------------------------------------------ a planned sweep, designed as it trains
DEFAULT_RULE = "n_opt<=1.5x"


def plan_budgets(plan: Any) -> dict[float, list[Any]]:
    """The plan's runs by budget: the pool an adaptive sweep chooses from."""
    out: dict[float, list[Any]] = {}
    for run in plan.runs:
        out.setdefault(float(run.budget), []).append(run)
    return out


def plan_spend(plan: Any) -> Callable[[Iterable[float]], float]:
    """FLOPs the runs of a set of the plan's budgets execute together (WSD: each stable phase once)."""
    by = plan_budgets(plan)

    def spend(budgets: Iterable[float]) -> float:
        runs = [r for b in budgets for r in by[b]]
        return float(sum(executed_flops(runs).values())) if runs else 0.0

    return spend


def describe_start(plan: Any, rule: StopRule, *, target: float | None = None, start: int = 3) -> str:
    """What ``flops-fit plan --adaptive`` prints: the first batch, how the rest is chosen, the rule."""
    by = plan_budgets(plan)
    target = target or 10 * max(by)
    spend = plan_spend(plan)
    first = initial_budgets(by, start)
    total = spend(list(by))
    runs = sum(len(by[b]) for b in first)
    return (f"adaptive: first batch: the {start} smallest budgets {', '.join(f'{b:.3g}' for b in first)}: {runs} runs, "
            f"{spend(first):.3g} FLOPs ({spend(first) / total:.0%} of the grid's {total:.3g}); then one budget at a "
            f"time of the other {len(by) - start}, the one whose runs shrink the extrapolation factor of N_opt at the "
            f"target {target:.3g} most per FLOP; stops when {rule} holds (read from the fitted interval after each "
            f"batch) or every budget is trained")


def adaptive_sweep(plan: Any, out_dir: Any, rule: StopRule | str = DEFAULT_RULE, *, target: float | None = None,
                   start: int = 3, batch: int = 1, method: str = "isoflop", bootstrap: int = 200, seed: int = 0,
                   resume: bool = False, **run: Any) -> Design:
    """Train ``plan``'s budgets as the design chooses them (``run_plan`` with ``only=``, into
    ``out_dir``), fitting after each batch (``flops_fit.fit(out_dir, method)``) until ``rule``.
    The whole plan is recorded; the store's meta ``adaptive`` holds the design (each budget's
    reason, its run ids, each round's interval, why it stopped). Resumable: the design is
    deterministic given its runs, so ``resume=True`` replays the rounds (trained runs are not
    trained again) and goes on. ``run`` are ``run_plan``'s options (executor, workers, ...)."""
    rule = StopRule.parse(rule) if isinstance(rule, str) else rule
    out_dir = Path(out_dir)
    by = plan_budgets(plan)
    target = target or 10 * max(by)
    started = [resume]

    def fit_at(budgets: list[float]) -> tuple[float, float, float]:
        ids = {r.run_id for b in budgets for r in by[b]}
        run_plan(plan, out_dir, resume=started[0], only=ids, **run)
        started[0] = True
        row = fit(str(out_dir), method, bootstrap=bootstrap, seed=seed, tracking=False).predict(target).iloc[0]
        return float(row.N_opt), float(row.N_opt_lo), float(row.N_opt_hi)

    def record(design: Design) -> None:
        if not (out_dir / STORE_NAME).exists():
            return  # the first batch is recorded once its sweep has a store
        data = design.to_dict()
        data["run_ids"] = {f"{b:.6g}": [r.run_id for r in by[b]] for b in design.budgets}
        data["method"], data["start"], data["batch"] = method, start, batch
        with RunStore(out_dir) as store:
            store.set_meta(adaptive=data)

    return run_design(list(by), plan_spend(plan), target, rule, fit_at, start=start, batch=batch, on_round=record)
