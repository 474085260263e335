"""A sweep that designs itself: after each batch, the runs that shrink the forecast's interval
of N_opt at the target most per FLOP, until a stopping rule holds.

A grid fixed in advance spends as much on the small budgets that say least about the target
as on the large ones. The design starts from the ``start`` smallest budgets of the pool (all
their sizes: the forecast needs forward-chaining splits, so 4 budgets with interior minima), and
after each batch fits the runs so far with the public API (``flops_fit.fit(..., "all",
holdout="forward")``) and reads **the forecast's** interval of N_opt at the target. That interval
is the forward-chained error model's (``fitting.validation.forecast``): it grows with the
reach ln(target / largest budget fitted), so, unlike a bootstrap interval, a few small budgets
cannot make it narrow. Without a forecast (too few budgets with an interior minimum to chain)
the rule cannot stop on the interval; the design says so and goes on.

The next runs: each untrained budget of the pool (its ``sizes`` sizes nearest the fitted N_opt
at that budget: a budget's runs far from its optimum say little) and each trained budget's
untrained sizes nearest it, scored by the expected drop of the interval's log half-width per FLOP
they add, read from the machinery that builds the interval (``sweeps.expected``): a budget adds a
split of evidence to the error model (and beyond the largest shortens the reach), sizes make a
budget's observed optimum, which every split's z reads, less noisy. One split may leave the error
model above the reach law's bound where two bring it under, so each candidate is credited with the
cheapest set of candidates it starts; equal gains go to the cheapest. No constant is fitted to any
data. A budget whose trained minimum lies at the edge of its sizes gets its next sizes on that side
first (its optimum is not yet observed). Every choice keeps its reason: the half-width before and
expected after, the FLOPs, the runner-up.

Stopping rule (``StopRule``): ``"n_opt<=2x"``: the forecast's interval lies within a factor 2
of its estimate on both sides (at 95%, never below about 1.74: ``reach_law.CAPPED``);
``"flops<=1e19"``: a FLOPs cap; both may be given, comma-separated, and the first that holds
stops the design.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flops_fit.errors import FitInputError, OptionError
from flops_fit.executors.stopping import request_stop
from flops_fit.fitting import fit
from flops_fit.fitting.inputs import Runs, load_runs
from flops_fit.fitting.validation.drift import FIELDS, Prior, split_slopes
from flops_fit.fitting.validation.prior import POOLED, shipped_laws
from flops_fit.store.lease import Lease
from flops_fit.store.run_store import RunStore
from flops_fit.sweeps.driver import check_run_options, run_plan
from flops_fit.sweeps.expected import Expectation
from flops_fit.tables import shortest
from flops_fit.training.wsd import executed_in_order

_RULE = re.compile(r"^\s*(n_opt\s*<=\s*(?P<factor>[0-9.eE+-]+)\s*x|flops\s*<=\s*(?P<cap>[0-9.eE+-]+))\s*$")
START = 4  # the first batch's budgets: 2 to fit + 2 splits to chain, the fewest a forecast answers from
SIZES = 5  # sizes trained at a budget the design adds: enough for an interior minimum and its curvature
EXTEND = 2  # sizes added on the side where a budget's trained minimum lies at the edge

Key = tuple[float, float]  # (budget, size): one run of the pool


@dataclass(frozen=True)
class StopRule:
    """When the design stops: N_opt's forecast interval at the target within ``n_opt_factor`` of
    its estimate on both sides, or ``flops_cap`` FLOPs spent (None: that part is not asked). The
    cap is a cap: no batch that would take the FLOPs spent past it is started."""

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
        """The rule as parsed back to the same rule (the resume command and the store print it)."""
        parts = ([f"n_opt<={shortest(self.n_opt_factor)}x"] if self.n_opt_factor else []) + \
            ([f"flops<={shortest(self.flops_cap)}"] if self.flops_cap else [])
        return ",".join(parts) or "none (every run of the pool)"

    def describe(self) -> str:
        """When it stops, in words."""
        parts = ([f"the forecast's interval of N_opt at the target is within {self.n_opt_factor:g}x of its estimate"]
                 if self.n_opt_factor else [])
        parts += [f"the next batch would take the FLOPs spent past {self.flops_cap:.3g}"] if self.flops_cap else []
        return " or ".join(parts) or "every run is trained (no rule)"

    def unreachable(self, level: float = 0.95) -> str | None:
        """Why ``n_opt<=Fx`` can never hold (F below the narrowest N_opt interval a forecast states:
        its reach law's bound at no reach, ``reach_law.CAPPED``), or None."""
        law = shipped_laws().get("n_opt")
        if self.n_opt_factor is None or law is None:
            return None
        narrowest = math.exp(law.bounds(1.0, level)[0])
        if self.n_opt_factor >= narrowest:
            return None
        return (f"n_opt<={self.n_opt_factor:g}x is narrower than any forecast's N_opt interval (x{narrowest:.2f} "
                f"either way at {100 * level:g}%: the noise of an observed optimum): only "
                + (f"the cap flops<={self.flops_cap:.3g}" if self.flops_cap else "training every budget")
                + f" can stop this design; ask n_opt<={math.ceil(narrowest * 10) / 10:g}x or more")

    def over_cap(self, first: float) -> str | None:
        """Why the first batch alone (``first`` FLOPs) breaks the cap, with the fix; or None."""
        if self.flops_cap is None or first <= self.flops_cap:
            return None
        return (f"the first batch alone spends {first:.3g} FLOPs, past the cap flops<={self.flops_cap:.3g}: raise "
                "the cap, or start from fewer budgets (--start K, at least 2)")

    def holds(self, factor: float, spent: float) -> str | None:
        """Why the design stops now (None: it goes on)."""
        if self.n_opt_factor is not None and factor <= self.n_opt_factor:
            return (f"the forecast's interval of N_opt at the target is within {factor:.3g}x of its estimate "
                    f"(asked {self.n_opt_factor:g}x)")
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


@dataclass
class Reading:
    """What the fit of the runs so far says: the forecast's N_opt (estimate, lo, hi) at the target,
    or ``note`` (why there is none); ``half(ratio, splits)``: the error model's log half-width at a
    reach ``ratio`` with ``splits`` more splits of evidence; ``optimum(budget)``: the fitted N_opt
    there (to centre a new budget's sizes); ``losses``: each trained run's loss; ``measured``: the
    same whether or not a fit answered (None: not given), so that a batch whose runs all failed stops
    the design."""

    n_opt: float = math.nan
    lo: float = math.nan
    hi: float = math.nan
    ratio: float = math.nan
    note: str = ""
    half: Callable[[float, int], float] | None = None
    optimum: Callable[[float], float] | None = None
    losses: Mapping[Key, float] = field(default_factory=dict)
    measured: Mapping[Key, float] | None = None  # each trained run's loss, fit or not (None: not said): runs failed
    expected: Expectation | None = None  # what a candidate is expected to do to the interval (None: ``half`` alone)

    @property
    def factor(self) -> float:
        return interval_factor(self.n_opt, self.lo, self.hi)


@dataclass(frozen=True)
class Choice:
    """Runs the design chose (one budget, some of its sizes), their FLOPs, their score (expected
    drop of the interval's log half-width per FLOP; NaN when not scored) and why, in words."""

    budget: float
    sizes: tuple[float, ...]
    flops: float
    score: float
    reason: str

    @property
    def keys(self) -> list[Key]:
        return [(self.budget, s) for s in self.sizes]

    def to_dict(self) -> dict[str, Any]:
        return {"budget": self.budget, "sizes": list(self.sizes), "flops": self.flops, "score": self.score,
                "reason": self.reason}


def pool_of(keys: Iterable[Key]) -> dict[float, list[float]]:
    """The pool's sizes by budget, sorted."""
    out: dict[float, list[float]] = {}
    for budget, size in keys:
        out.setdefault(float(budget), []).append(float(size))
    return {b: sorted(set(s)) for b, s in sorted(out.items())}


def initial_choices(pool: Mapping[float, Sequence[float]], spend: Callable[[Iterable[Key]], float],
                    start: int = START) -> list[Choice]:
    """The first batch: every size of the ``start`` smallest budgets of the pool."""
    budgets = sorted(pool)
    if start < 2:
        raise OptionError(f"an adaptive sweep starts from 2 or more budgets (a line needs two), got {start}")
    if len(budgets) < start:
        raise OptionError(f"an adaptive sweep trains its {start} smallest budgets first and chooses among the larger "
                          f"ones, but this sweep lists {len(budgets)}: list more budgets (a factor of 2 apart, say, "
                          "beyond the largest), or sweep the grid as it is without --adaptive")
    return [Choice(b, tuple(pool[b]), spend([(b, s) for s in pool[b]]), math.nan,
                   f"budget {b:.3g}: one of the {start} smallest budgets, the first grid (all {len(pool[b])} sizes)")
            for b in budgets[:start]]


def nearest_sizes(sizes: Sequence[float], centre: float | None, count: int) -> tuple[float, ...]:
    """The ``count`` sizes nearest ``centre`` in log (all of them without a centre), sorted."""
    if centre is None or not (math.isfinite(centre) and centre > 0) or count >= len(sizes):
        return tuple(sorted(sizes))
    return tuple(sorted(sorted(sizes, key=lambda s: abs(math.log(s / centre)))[:count]))


def extensions(trained: Iterable[Key], pool: Mapping[float, Sequence[float]], losses: Mapping[Key, float],
               count: int = EXTEND) -> list[tuple[float, tuple[float, ...], str]]:
    """Budgets whose lowest trained loss lies at the edge of their trained sizes, with untrained
    sizes beyond it: (budget, the next ``count`` sizes on that side, why)."""
    out = []
    for budget, sizes in pool_of(trained).items():
        seen = [(s, losses.get((budget, s), math.nan)) for s in sizes]
        seen = [(s, v) for s, v in seen if math.isfinite(v)]
        if len(seen) < 2:
            continue
        best = min(seen, key=lambda p: p[1])[0]
        if best == seen[-1][0]:
            more, side = [s for s in pool[budget] if s > best][:count], "larger"
        elif best == seen[0][0]:
            more, side = [s for s in pool[budget] if s < best][-count:], "smaller"
        else:
            continue
        if more:
            out.append((budget, tuple(more), f"budget {budget:.3g}: its lowest loss lies at its {side} trained size "
                                             f"{best:.3g}, so its optimum is not observed yet: {len(more)} more "
                                             f"size(s) on that side"))
    return out


def next_choices(trained: Sequence[Key], pool: Mapping[float, Sequence[float]],
                 spend: Callable[[Iterable[Key]], float], target: float, reading: Reading, *, batch: int = 1,
                 sizes: int = SIZES, cap: float | None = None, goal: float | None = None) -> list[Choice]:
    """Up to ``batch`` choices: first the extensions of budgets whose optimum is not observed yet,
    then untrained budgets one after another by the expected drop of the forecast interval's log
    half-width per FLOP they add (without a forecast: the cheapest untrained budget, which adds a
    split to chain). ``spend(keys)``: FLOPs those runs execute together (WSD's shared phases once).
    A choice that would take the FLOPs spent past ``cap`` is not made."""
    def fits(keys: list[Key]) -> bool:
        return cap is None or spend(keys) <= cap

    chosen = list(trained)
    out: list[Choice] = []
    for budget, more, reason in extensions(chosen, pool, reading.losses):
        if len(out) >= batch:
            return out
        keys = [(budget, s) for s in more]
        if not fits([*chosen, *keys]):
            continue
        out.append(Choice(budget, more, spend([*chosen, *keys]) - spend(chosen), math.nan, reason))
        chosen += keys
    while len(out) < batch:
        done = {b for b, _ in chosen}
        left = [b for b in pool if b not in done]
        if reading.expected is not None:  # budgets and sizes ranked alike by what they are expected to do
            best = ranked_choice(chosen, pool, spend, target, reading, sizes=sizes, cap=cap, goal=goal)
            if best is None:
                break
            out.append(best)
            chosen += best.keys
            continue
        if not left:  # every budget trained, the rule not met: more sizes, until the pool is spent
            more = more_sizes(chosen, pool, spend, reading, cap=cap)
            if more is None:
                break
            out.append(more)
            chosen += more.keys
            continue
        base = spend(chosen)
        options = {}
        for b in left:
            picked = nearest_sizes(pool[b], reading.optimum(b) if reading.optimum else None, sizes)
            options[b] = (picked, max(spend([*chosen, *((b, s) for s in picked)]) - base, 1.0))
        left = [b for b in left if cap is None or base + options[b][1] <= cap]
        if not left:
            break
        if reading.half is None:
            b = min(left, key=lambda c: (options[c][1], c))
            picked, cost = options[b]
            why = reading.note.removeprefix("no forecast yet: ").removeprefix("no forecast: ") or "no fit"
            out.append(Choice(b, picked, cost, math.nan,
                              f"budget {b:.3g} ({len(picked)} sizes): no forecast yet ({why}): "
                              f"the cheapest untrained budget, one more split to chain"))
        else:
            largest = max(c for c, _ in chosen)
            now = reading.half(target / largest, 0)
            expected = {c: reading.half(target / max(largest, c), 1) for c in left}
            # equal scores (most often none expected: the interval at its reach-law bound) go to the
            # cheapest budget; they went to the largest, the most expensive
            scored = sorted(((now - expected[c]) / options[c][1], -options[c][1], c) for c in left)
            score, _, b = scored[-1]
            picked, cost = options[b]
            runner = (f"; next best {scored[-2][2]:.3g} at {scored[-2][0] / score:.0%} of its gain per FLOP"
                      if len(scored) > 1 and score > 0 else "")
            why = (f"the most per FLOP of {len(left)} untrained budget{'s' if len(left) != 1 else ''}{runner}"
                   if score > 0 else f"none of {len(left)} untrained budget{'s' if len(left) != 1 else ''} is "
                   "expected to narrow it: the cheapest")
            out.append(Choice(b, picked, cost, score,
                              f"budget {b:.3g} ({len(picked)} sizes around N_opt): the interval's log half-width at "
                              f"the target {now:.3g} -> {expected[b]:.3g} expected for {cost:.3g} FLOPs, {why}"))
        chosen += out[-1].keys
    return out


def ranked_choice(trained: Sequence[Key], pool: Mapping[float, Sequence[float]],
                  spend: Callable[[Iterable[Key]], float], target: float, reading: Reading, *, sizes: int = SIZES,
                  cap: float | None = None, goal: float | None = None) -> Choice | None:
    """The next runs by what they are expected to do to the interval (``reading.expected``): each
    untrained budget (its ``sizes`` sizes nearest the fitted N_opt: a split, and beyond the largest a
    shorter reach) and each trained budget's ``EXTEND`` untrained sizes nearest it (a less noisy
    optimum). Sets are read as each candidate with the j cheapest others (one split may leave the error
    model above the reach law's bound where two bring it under). With ``goal`` (the rule's factor) the
    cheapest set expected to bring the interval within it, its cheapest candidate first (the rest is
    chosen again once its interval is measured: a cheap run may do what was expected of a costly one;
    the costliest first took Epoch's Chinchilla to 62% of the FLOPs); without one, or none expected to
    reach it, the candidate whose set drops the log half-width most per FLOP, equal gains to the
    cheapest. None when nothing is left under ``cap``."""
    expected = reading.expected
    base = spend(trained)
    largest = max(b for b, _ in trained)
    done = pool_of(trained)
    options = []  # (cost, budget, sizes, new budget?, what it takes off the splits' variance of z)
    for b in pool:
        centre = reading.optimum(b) if reading.optimum else None
        new = b not in done
        rest = pool[b] if new else [s for s in pool[b] if s not in done[b]]
        if not rest:
            continue
        picked = nearest_sizes(rest, centre, sizes if new else EXTEND)[:sizes if new else EXTEND]
        cost = max(spend([*trained, *((b, s) for s in picked)]) - base, 1.0)
        if cap is None or base + cost <= cap:
            options.append((cost, b, picked, new, 0.0 if new else expected.less_for(b, picked)))
    if not options:
        return None
    options.sort(key=lambda o: (o[0], o[1]))
    now = expected.half(target / largest)
    aim = math.log(goal) if goal else -math.inf
    meeting: list[tuple[float, float, list[tuple]]] = []  # sets expected to meet the goal: (FLOPs, half, members)

    def plan(first: tuple) -> tuple[float, float, int, float]:
        """The best (gain per FLOP, expected half-width, how many others, FLOPs) of ``first`` with the j
        cheapest others."""
        best = (0.0, now, 0, first[0])
        members = [first]
        for other in [None, *(o for o in options if o is not first)]:
            if other is not None:
                members.append(other)
            reach = target / max([largest, *(m[1] for m in members if m[3])])
            half = expected.half(reach, sum(m[3] for m in members), sum(m[4] for m in members))
            keys = [*trained, *((m[1], s) for m in members for s in m[2])]
            flops = max(spend(keys) - base, 1.0)
            if half <= aim + 1e-12:
                meeting.append((flops, half, list(members)))
            if (now - half) / flops > best[0] * (1 + 1e-9):
                best = ((now - half) / flops, half, len(members) - 1, flops)
        return best

    scored = sorted(((*plan(o), o) for o in options), key=lambda p: (-p[0], p[4][0], p[4][1]))
    gain, half, others, flops, (cost, b, picked, new, _) = scored[0]
    if meeting:
        flops, half, members = min(meeting, key=lambda m: (m[0], m[1]))
        cost, b, picked, new, _ = min(members, key=lambda m: (m[0], m[1]))
        gain = next(p[0] for p in scored if p[4][1] == b)
    what = (f"budget {b:.3g} ({len(picked)} sizes around N_opt)" if new else
            f"budget {b:.3g}: {len(picked)} more of its sizes, nearest its fitted N_opt (a less noisy optimum)")
    if meeting:
        rest = [_option_name(m) for m in members if m[1] != b]
        why = (f"the interval's log half-width at the target {now:.3g} -> {half:.3g} expected "
               + (f"with {', '.join(rest)} ({flops:.3g} FLOPs together)" if rest else f"for {cost:.3g} FLOPs")
               + f": the cheapest of the sets of {len(options)} candidates expected to bring it within the rule's "
               f"x{goal:g} ({aim:.3g})" + (", its cheapest first (the rest is chosen again once its interval is measured)" if rest else ""))
    elif gain > 0:
        runner = next((p for p in scored[1:]), None)
        with_ = (f" with the {others} cheapest other candidate{'s' if others != 1 else ''} ({flops:.3g} FLOPs "
                 "together: more per FLOP than alone)" if others else "")
        why = (f"the interval's log half-width at the target {now:.3g} -> {half:.3g} expected{with_}, for "
               f"{cost:.3g} FLOPs: the most per FLOP of {len(options)} candidate{'s' if len(options) != 1 else ''}"
               + (f"; next best {_option_name(runner[4])} at {runner[0] / gain:.0%} of its gain per FLOP"
                  if runner is not None else ""))
    else:
        why = (f"the interval's log half-width at the target {now:.3g}: none of {len(options)} candidate"
               f"{'s' if len(options) != 1 else ''} is expected to narrow it: the cheapest, {cost:.3g} FLOPs")
    return Choice(b, tuple(picked), cost, gain, f"{what}: {why}")


def _option_name(option: tuple) -> str:
    return f"budget {option[1]:.3g}" if option[3] else f"{len(option[2])} sizes at {option[1]:.3g}"


def more_sizes(trained: Sequence[Key], pool: Mapping[float, Sequence[float]],
               spend: Callable[[Iterable[Key]], float], reading: Reading, *, count: int = EXTEND,
               cap: float | None = None) -> Choice | None:
    """Every budget trained and the rule not met: the ``count`` untrained sizes nearest the fitted
    N_opt of the trained budget where they cost least (the error model reads budgets and reach, not
    sizes, so no expected gain ranks them; a minimum read from more sizes is less noisy). None when
    no run of the pool is left, or none fits under ``cap``. (The design stopped here, "every budget
    trained", with Epoch's Chinchilla at 86 of its 123 runs and the rule unmet.)"""
    base = spend(trained)
    options = []
    for budget, sizes in pool_of(trained).items():
        rest = [s for s in pool[budget] if s not in sizes]
        if not rest:
            continue
        centre = reading.optimum(budget) if reading.optimum else None
        picked = nearest_sizes(rest, centre, count)[:count]  # without a centre: the smallest
        cost = spend([*trained, *((budget, s) for s in picked)]) - base
        if cap is None or base + cost <= cap:
            options.append((cost, budget, picked, len(rest)))
    if not options:
        return None
    cost, budget, picked, rest = min(options)
    return Choice(budget, picked, cost, math.nan,
                  f"budget {budget:.3g}: every budget is trained and the rule does not hold: {len(picked)} more of "
                  f"its {rest} untrained sizes, nearest its fitted N_opt, the cheapest of {len(options)} budget"
                  f"{'s' if len(options) != 1 else ''} with sizes left (no expected gain ranks sizes)")


@dataclass
class Round:
    """One batch: the runs trained in it (with why), then the forecast's N_opt at the target."""

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
    """An adaptive design's history: each round's choices and forecast interval; ``stopped`` says why it ended."""

    target: float
    rule: StopRule
    rounds: list[Round] = field(default_factory=list)
    stopped: str = ""

    @property
    def keys(self) -> list[Key]:
        return [k for r in self.rounds for c in r.choices for k in c.keys]

    @property
    def budgets(self) -> list[float]:
        """The budgets trained, in the order first chosen."""
        return list(dict.fromkeys(c.budget for r in self.rounds for c in r.choices))

    @property
    def spent(self) -> float:
        return self.rounds[-1].spent if self.rounds else 0.0

    def round_lines(self, n: int) -> list[str]:
        """Round ``n`` (from 1): FLOPs spent and the forecast's interval after it, then why its runs were chosen."""
        r = self.rounds[n - 1]
        fitted = (f"forecast N_opt {r.n_opt:.3g} [{r.n_opt_lo:.3g}, {r.n_opt_hi:.3g}] (x{r.factor:.2f})"
                  if math.isfinite(r.factor) else (r.note or "no interval"))
        return [f"  round {n}: {r.spent:.3g} FLOPs spent; {fitted}", *(f"    {c.reason}" for c in r.choices)]

    def __str__(self) -> str:
        lines = [f"adaptive design, target {self.target:.3g} FLOPs, rule {self.rule}:"]
        for n in range(1, len(self.rounds) + 1):
            lines += self.round_lines(n)
        lines.append(f"stopped: {self.stopped}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "rule": str(self.rule), "rounds": [r.to_dict() for r in self.rounds],
                "stopped": self.stopped, "spent": self.spent, "budgets": self.budgets}


def run_design(pool: Mapping[float, Sequence[float]], spend: Callable[[Iterable[Key]], float], target: float,
               rule: StopRule, fit_at: Callable[[list[Key]], Reading], *, start: int = START, batch: int = 1,
               sizes: int = SIZES, on_round: Callable[[Design], None] | None = None) -> Design:
    """Drive a design over ``pool`` (sizes by budget; ``spend``: FLOPs of a set of runs):
    ``fit_at`` is called with every run chosen so far, trains what it has not, fits and returns
    the ``Reading``; then ``rule`` is checked and the next batch chosen, until the rule holds or
    nothing is left. ``on_round`` hears the design after each batch is chosen and after each fit
    (a sweep records it in its store)."""
    rule = _checked(rule, start, batch, sizes)
    pool = {float(b): sorted(set(map(float, s))) for b, s in sorted(pool.items())}
    design = Design(target, rule)
    batch_choices = initial_choices(pool, spend, start)
    over = rule.over_cap(spend([k for c in batch_choices for k in c.keys]))
    if over:
        raise OptionError(over)
    while batch_choices:
        round_ = Round(batch_choices, spend([*design.keys, *(k for c in batch_choices for k in c.keys)]))
        design.rounds.append(round_)
        if on_round is not None:
            on_round(design)
        try:
            reading = fit_at(design.keys)
        except FitInputError as exc:
            reading = Reading(note=f"no forecast yet: {exc}")
        round_.n_opt, round_.n_opt_lo, round_.n_opt_hi, round_.factor = (reading.n_opt, reading.lo, reading.hi,
                                                                         reading.factor)
        if not math.isfinite(round_.factor):
            round_.note = f"{reading.note or 'no forecast'}; the rule cannot stop on the interval"
        batch_keys = [k for c in batch_choices for k in c.keys]
        reason = rule.holds(round_.factor, round_.spent)
        measured = reading.measured
        if not reason and measured is not None and not any(math.isfinite(measured.get(k, math.nan))
                                                           for k in batch_keys):
            # runs that fail tell the design nothing: choosing more would train the grid into the same failure
            reason = (f"none of round {len(design.rounds)}'s {len(batch_keys)} runs has a loss (they failed): fix "
                      "the cause, then resume with --retry-failed")
        if reason:
            design.stopped = reason
        else:
            batch_choices = next_choices(design.keys, pool, spend, target, reading, batch=batch, sizes=sizes,
                                         cap=rule.flops_cap, goal=rule.n_opt_factor)
            if not batch_choices:
                untrained = {(b, s) for b in pool for s in pool[b]} - set(design.keys)
                design.stopped = ("every run of the pool is trained" if not untrained else
                                  f"no untrained run fits under the cap ({round_.spent:.3g} of "
                                  f"{rule.flops_cap:.3g} FLOPs spent)")
        if on_round is not None:
            on_round(design)
        if design.stopped:
            return design
    return design


def _checked(rule: Any, start: Any, batch: Any, sizes: Any) -> StopRule:
    """The rule (parsed from its text) and the design's counts, refused before anything trains:
    a wrong type failed deep in the first round, and ``batch`` < 1 stopped the design at once
    saying every budget was trained."""
    if isinstance(rule, str):
        rule = StopRule.parse(rule)
    if not isinstance(rule, StopRule):
        raise OptionError(f"the stopping rule must be a StopRule or its text (e.g. 'n_opt<=2x', 'flops<=1e19'), "
                          f"got {rule!r}")
    for value, least, what in ((start, 2, "starts from 2 or more budgets (a line needs two)"),
                               (batch, 1, "adds 1 or more budgets per round (batch)"),
                               (sizes, 3, "trains 3 or more sizes at each budget it adds (the fewest that place a "
                                          "minimum)")):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise OptionError(f"an adaptive sweep {what}, got {value!r}")
    return rule


# ------------------------------------------------------------------ reading the forecast of a fit
def forecast_reading(fitted: Any, target: float, losses: Mapping[Key, float]) -> Reading:
    """The ``Reading`` of ``fit(..., "all", holdout="forward", target=target)``: its forecast's
    N_opt and error model, or why there is none."""
    forecast = getattr(fitted, "forecast", None)
    optimum = _optimum(fitted, forecast)
    if forecast is None:
        note = getattr(fitted, "withheld", None) or "no forecast"
        return Reading(note=note, optimum=optimum, losses=losses)
    answer, level = forecast.answers["n_opt"], forecast.level
    model = answer.model

    def half(ratio: float, more: int) -> float:
        """The error model's, with ``more`` splits, within the reach law's bounds as the forecast's."""
        grown = (dataclasses.replace(model, dof=model.dof + more)
                 if more and dataclasses.is_dataclass(model) and hasattr(model, "dof") else model)
        return float(answer.bounded(float(grown.log_interval(ratio, level)[2]), ratio))

    n_opt, lo, hi = forecast.n_opt
    return Reading(float(n_opt), float(lo), float(hi), float(forecast.ratio), half=half, optimum=optimum,
                   losses=losses, expected=_expectation(forecast, losses))


def _expectation(forecast: Any, losses: Mapping[Key, float]) -> Expectation | None:
    """The ``Expectation`` of the forecast's N_opt answer: its error model and pooled prior, and the
    splits its members share (each split's predictions: budget, ratio), as ``forecast._average`` reads them."""
    answer = forecast.answers["n_opt"]
    prior = (forecast.prior.get("answers", {}).get("n_opt", {}) or {}).get(POOLED)
    if prior is None or not dataclasses.is_dataclass(answer.model):
        return None
    members = {(m["method"], m["scale"], m["focus"]) for m in answer.members}
    mine = [r for r in forecast.records if (r.method, r.scale, r.focus) in members]
    common = set.intersection(*(set(split_slopes([r for r in mine if (r.method, r.scale, r.focus) == key],
                                                 FIELDS["n_opt"])) for key in members))
    splits: dict[float, dict[float, float]] = {}
    for r in mine:
        if r.fitted_upto in common:
            splits.setdefault(float(r.fitted_upto), {})[float(r.budget)] = float(r.ratio)
    return Expectation(answer.model, Prior(**prior), forecast.level, answer.bounded,
                       {k: sorted(v.items()) for k, v in splits.items()}, losses)


def _optimum(fitted: Any, forecast: Any) -> Callable[[float], float] | None:
    """N_opt at a budget, to centre its sizes: approach 2's (a line through the observed IsoFLOP
    minima: what the next budget's minimum is nearest), else the forecast's N_opt source, else any
    fit. (Centred on approach 3's, Chinchilla's larger budgets had their minima at the smaller edge.)"""
    results = getattr(fitted, "results", None) or {}
    members = forecast.answers["n_opt"].members if forecast is not None else []
    names = ["isoflop", *(m["method"] for m in sorted(members, key=lambda m: -m["weight"])), *results]
    name = next((n for n in names if n in results), None)
    if name is None:
        return None
    return lambda budget: float(results[name].predict(budget).iloc[0].N_opt)


def fit_forecast(source: Any, target: float) -> Any:
    """The public fit with the forecast at ``target`` (point fits: the interval is the forecast's)."""
    return fit(source, "all", holdout="forward", bootstrap=0, target=target, tracking=False)


def read_forecast(runs: Callable[[], Any], target: float, losses: Mapping[Key, float]) -> Reading:
    """The ``Reading`` of ``fit_forecast`` on ``runs()`` (the chosen runs, loaded when called), or why
    there is no forecast yet; either way with the runs' ``losses`` as measured."""
    try:
        fitted = fit_forecast(runs(), target)
    except FitInputError as exc:  # no forecast yet, but the runs' losses are known
        return Reading(note=f"no forecast yet: {exc}", measured=losses)
    return dataclasses.replace(forecast_reading(fitted, target, losses), measured=losses)


def table_fitter(runs: Any, target: float) -> Callable[[list[Key]], Reading]:
    """``fit_at`` for runs already trained: a table (``params``, ``tokens``, ``budget``, ``loss``) or
    ``Runs`` (``load_runs`` of a sweep folder: curves and scales kept); the chosen runs (budget,
    params) fitted by ``flops_fit.fit`` with the forecast, read at ``target``."""
    frame = runs.frame if isinstance(runs, Runs) else runs
    keys = list(zip(frame.budget.astype(float), frame.params.astype(float), strict=True))
    loss_of = dict(zip(keys, frame.loss.astype(float), strict=True))

    def fit_at(chosen: list[Key]) -> Reading:
        wanted = set(chosen)
        mask = np.array([k in wanted for k in keys])
        subset = runs.subset(mask) if isinstance(runs, Runs) else runs[mask].reset_index(drop=True)
        return read_forecast(lambda: subset, target, {k: loss_of[k] for k in wanted})

    return fit_at


def table_pool(runs: Any) -> dict[float, list[float]]:
    """The sizes (params) of each budget of a table of runs (or ``Runs``)."""
    frame = runs.frame if isinstance(runs, Runs) else runs
    return pool_of(zip(frame.budget.astype(float), frame.params.astype(float), strict=True))


def table_spend(runs: Any) -> Callable[[Iterable[Key]], float]:
    """FLOPs of a set of a table's runs (6 N D each: runs that cost what they cost alone)."""
    cost = {(float(b), float(n)): 6.0 * float(n) * float(d)
            for b, n, d in zip(runs.budget, runs.params, runs.tokens, strict=True)}
    return lambda keys: sum(cost[k] for k in set(keys))


# ------------------------------------------------------------------ a planned sweep, designed as it trains
DEFAULT_RULE = "n_opt<=2x"  # at 95% the forecast's N_opt interval is never within 1.74x (reach_law.CAPPED)


def plan_keys(plan: Any) -> dict[Key, Any]:
    """The plan's runs (or a list of them) by (budget, params): the pool an adaptive sweep chooses from."""
    return {(float(run.budget), float(run.params)): run for run in getattr(plan, "runs", plan)}


def plan_spend(plan: Any) -> Callable[[Iterable[Key]], float]:
    """FLOPs the plan's runs (budget, size) execute when trained in the order given, each once (WSD:
    a family goes on from the furthest stable state it reached and keeps its state at the plan's
    branch points it passes, so a budget added below one already trained costs its cooldowns:
    ``wsd.executed_in_order``). ``plan``: a Plan or its runs (``RunStore.planned_runs()``)."""
    by = plan_keys(plan)

    def spend(keys: Iterable[Key]) -> float:
        runs = [by[k] for k in dict.fromkeys(keys)]
        return float(sum(executed_in_order(runs).values())) if runs else 0.0

    return spend


def design_target(pool: Mapping[float, Sequence[float]], target: float | None, sizes: int) -> float:
    """The design's target (default 10x the pool's largest budget) and its sizes per added budget,
    refused before anything trains unless the target lies beyond the budgets (the design shortens
    the reach to it) and each added budget gets the 3 sizes an IsoFLOP minimum needs."""
    if isinstance(sizes, bool) or not isinstance(sizes, int) or sizes < 3:
        raise OptionError(f"an adaptive sweep trains 3 or more sizes at each budget it adds (the fewest that place a "
                          f"minimum), got {sizes!r}")
    largest = max(pool)
    if target is None:
        return 10 * largest
    try:
        value = float(target)
        shown = f"{value:.3g}"
    except (TypeError, ValueError):
        value, shown = math.nan, f"{target!r:.40}"
    if not (math.isfinite(value) and value > largest):
        raise OptionError(f"the target must be a budget in FLOPs beyond the plan's largest, {largest:.3g} (the "
                          f"forecast aims past the sweep; default 10x it, {10 * largest:.3g}), got {shown}")
    return value


def describe_start(plan: Any, rule: StopRule, *, target: float | None = None, start: int = START,
                   sizes: int = SIZES) -> str:
    """What ``flops-fit plan --adaptive`` prints: the first batch, how the rest is chosen, the rule."""
    pool = pool_of(plan_keys(plan))
    target = design_target(pool, target, sizes)
    spend = plan_spend(plan)
    first = initial_choices(pool, spend, start)
    keys = [k for c in first for k in c.keys]
    total = spend(plan_keys(plan))
    rest = [b for b in pool if b not in {c.budget for c in first}]
    most = max((len(pool[b]) for b in rest), default=sizes)  # a budget planned with fewer sizes gives them all
    each = f"{sizes} sizes around the fitted N_opt" if most > sizes else f"its {most} planned sizes"
    aim = (f"the cheapest expected to bring the forecast's interval of N_opt at the target {target:.3g} within "
           f"{rule.n_opt_factor:g}x, else the most" if rule.n_opt_factor else
           f"the one expected to shrink the forecast's interval of N_opt at the target {target:.3g} most")
    then = (f"one budget at a time of the other {len(rest)} ({each}) or {EXTEND} more sizes at a budget already "
            f"trained (a less noisy optimum): {aim} per FLOP" if rest else
            f"nothing: the first batch is every budget, so there is nothing left to choose (list more budgets, or "
            f"--start fewer than {len(pool)}); the forecast aims at the target {target:.3g}")
    return (f"adaptive: first batch: the {start} smallest budgets {', '.join(f'{c.budget:.3g}' for c in first)}: "
            f"{len(keys)} runs, {spend(keys):.3g} FLOPs ({spend(keys) / total:.0%} of the grid's {total:.3g}); then "
            f"{then}; stops "
            + (f"({rule}) when {rule.describe()} (the interval read from the forward-chained forecast after each "
               "batch; no forecast, no stop), or " if rule.n_opt_factor or rule.flops_cap else "")
            + "when every run is trained"
            + "".join(f". Note: {note}" for note in (rule.over_cap(spend(keys)), rule.unreachable()) if note))


def adaptive_sweep(plan: Any, out_dir: Any, rule: StopRule | str = DEFAULT_RULE, *, target: float | None = None,
                   start: int = START, batch: int = 1, sizes: int = SIZES, resume: bool = False,
                   on_round: Callable[[Design], None] | None = None, **run: Any) -> Design:
    """Train ``plan``'s runs as the design chooses them (``run_plan`` with ``only=``, into
    ``out_dir``), fitting with the forecast after each batch until ``rule``. The whole plan is
    recorded; the store's meta ``adaptive`` holds the design (each choice's reason, its run ids,
    each round's interval, why it stopped). Resumable: the design is deterministic given its
    runs, so ``resume=True`` replays the rounds (trained runs are not trained again) and goes
    on. ``on_round`` hears the design after each batch is chosen and after each fit (the CLI
    prints each round as it ends); ``run`` are ``run_plan``'s options (executor, workers, ...)."""
    rule = _checked(rule, start, batch, sizes)
    out_dir = Path(out_dir)
    by = plan_keys(plan)
    pool = pool_of(by)
    target = design_target(pool, target, sizes)
    # refused before the store is made (a bad executor left an empty runs.sqlite behind): the first batch, the
    # options run_plan takes
    first = initial_choices(pool, plan_spend(plan), start)
    if over := rule.over_cap(plan_spend(plan)([k for c in first for k in c.keys])):
        raise OptionError(over)
    check_run_options(plan, "adaptive_sweep", **run)
    started = [resume]

    def fit_at(keys: list[Key]) -> Reading:
        chosen = {by[k].run_id for k in keys}
        run_plan(plan, out_dir, resume=started[0], only=chosen, **run)
        started[0] = True
        with RunStore(out_dir) as store:
            frame = store.runs_frame(include_failed=False).set_index("run_id")
        losses = {k: float(frame.loss[by[k].run_id]) for k in keys if by[k].run_id in frame.index}

        def chosen_runs() -> Runs:
            """The chosen runs only: a resumed store holds later rounds' runs too, and a replayed
            round that fitted them would read (and record) another round's forecast."""
            runs = load_runs(str(out_dir))
            return runs.subset(runs.frame.run_id.isin(chosen).to_numpy())

        return read_forecast(chosen_runs, target, losses)

    def record(design: Design) -> None:
        data = design.to_dict()
        data["run_ids"] = [[by[k].run_id for k in c.keys] for r in design.rounds for c in r.choices]
        data["start"], data["batch"], data["sizes"] = start, batch, sizes
        with RunStore(out_dir) as store:
            if store.get_meta("plan") is None:
                return  # the first batch is recorded once its sweep's plan is
            store.set_meta(adaptive=data)
        if on_round is not None:
            on_round(design)

    with RunStore(out_dir, create=True) as store:  # the folder checked and its store made, as run_plan does
        path = store.path
    # one lease for the whole design, its batches' run_plan joining it: status sees one driver, fits included
    with Lease(path, on_lost=lambda message: request_stop(), shared=True):
        return run_design(pool, plan_spend(plan), target, rule, fit_at, start=start, batch=batch, sizes=sizes,
                          on_round=record)
