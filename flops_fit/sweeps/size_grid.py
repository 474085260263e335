"""A model's valid sizes for planning: analytic parameter counts and FLOPs per unit (no model is
built), the sizes around a budget's prior optimum or on one ladder, and why a budget cannot be
swept with them (the refusal names the smallest budget that could)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable

from flops_fit.errors import PlanError
from flops_fit.plugin.contracts import ModelEntry
from flops_fit.sweeps.options import SweepOptions

# SizeGrid.around or SizeGrid.ladder: (centre params, span, count) -> indices of the sizes chosen
Chooser = Callable[[float, float, int], list[int]]


class SizeGrid:
    """Valid sizes with their analytic parameter counts and FLOPs per unit (cached)."""

    def __init__(self, entry: ModelEntry, config: dict, max_size: int, accounting: str) -> None:
        self.entry, self.config, self.accounting = entry, config, accounting
        self.sizes = entry.sizes(1, max_size, **config)
        if not self.sizes:
            raise PlanError(f"model {entry.name!r} has no valid size in [1, {max_size}] with config {config}")
        self.params = [entry.params(s, **config) for s in self.sizes]
        if any(b <= a for a, b in zip(self.params, self.params[1:], strict=False)):
            raise PlanError(f"model {entry.name!r}: parameter count does not grow with size")
        self._flops_per_unit: dict[int, float] = {}

    def flops_per_unit(self, i: int) -> float:
        """Training FLOPs per token (or sample) of the i-th size, under the plan's accounting."""
        if i not in self._flops_per_unit:
            if self.accounting == "6nd":
                self._flops_per_unit[i] = 6.0 * self.params[i]
            else:
                self._flops_per_unit[i] = self.entry.flops_per_unit(self.sizes[i], **self.config)
        return self._flops_per_unit[i]

    def nearest(self, params: float) -> int:
        """Index of the size whose parameter count is nearest ``params`` in log space."""
        j = bisect.bisect_left(self.params, params)
        candidates = [k for k in (j - 1, j) if 0 <= k < len(self.sizes)]
        return min(candidates, key=lambda k: abs(math.log(self.params[k] / params)))

    def around(self, centre: float, span: float, count: int) -> list[int]:
        """Up to ``count`` distinct sizes log-spaced over ``span`` around ``centre`` (params):
        each target takes the nearest unused size within the span's ends."""
        lo, hi = self.nearest(centre / math.sqrt(span)), self.nearest(centre * math.sqrt(span))
        targets = [centre * span ** (k / (count - 1) - 0.5) for k in range(count)]
        free, chosen = set(range(lo, hi + 1)), []
        for t in targets:
            if free:
                best = min(free, key=lambda k: abs(math.log(self.params[k] / t)))
                free.discard(best)
                chosen.append(best)
        return sorted(chosen)

    def ladder(self, centre: float, span: float, count: int) -> list[int]:
        """``count`` consecutive rungs of one ladder, centred on ``centre`` (params): rung k is
        the size nearest ``params[0] * span ** (k / (count - 1))``, the same for every
        budget, so neighbouring budgets share most of their sizes (a WSD sweep trains each
        size's stable phase once for all of them). Rungs that snap to one size count once."""
        step = math.log(span) / (count - 1)
        first = round(math.log(centre / self.params[0]) / step - (count - 1) / 2)
        return sorted({self.nearest(self.params[0] * math.exp((first + k) * step)) for k in range(count)})

    def prior_optimum(self, budget: float, tokens_per_param: float) -> float:
        """Parameters N with flops_per_unit(N) * tokens_per_param * N = budget (interpolated in log space)."""
        costs = [self.flops_per_unit(i) * tokens_per_param * self.params[i] for i in range(len(self.sizes))]
        j = bisect.bisect_left(costs, budget)
        if j == 0:
            return float(self.params[0])
        if j == len(costs):
            return float(self.params[-1])
        t = math.log(budget / costs[j - 1]) / math.log(costs[j] / costs[j - 1])
        return math.exp((1 - t) * math.log(self.params[j - 1]) + t * math.log(self.params[j]))


def _round_up(value: float) -> str:
    """``value`` rounded up to 3 significant digits, so a suggested budget is enough."""
    exponent = math.floor(math.log10(value)) - 2
    return f"{math.ceil(value / 10**exponent) * 10**exponent:.3g}"


def too_few_sizes(budget: float, grid: SizeGrid, centre: float, options: SweepOptions, found: int,
                  unit: str = "token", choose: Chooser | None = None) -> str:
    """Why a budget's span holds too few sizes, and the fix; ``unit``: what the model's FLOPs are per;
    ``choose``: how the plan picks a budget's sizes (``SizeGrid.around``, the default, or ``ladder``)."""
    span, tokens_per_param, model = options.span, options.tokens_per_param, options.model
    # prior_optimum stops at the smallest size: a budget below that size's own is not an optimum of that size
    below = budget < grid.flops_per_unit(0) * tokens_per_param * grid.params[0]
    optimum = "below the smallest size" if below else f"{centre:,.0f} params"
    where = (
        f"budget {budget:.3g} FLOPs: the span of {span:g}x around its prior optimum ({optimum} at "
        f"{tokens_per_param:g} {unit}s/param) holds only {found} valid size(s) of model {model!r}"
    )
    need = smallest_budget(grid, choose or grid.around, options, budget)
    if need is not None:
        return f"{where}, next to its smallest size ({grid.params[0]:,} params); use budgets >= {_round_up(need)} FLOPs, a wider span, or pass sizes=[...]"
    return f"{where}; widen span, or pass sizes=[...]"


def smallest_budget(grid: SizeGrid, choose: Chooser, options: SweepOptions, budget: float) -> float | None:
    """The smallest budget above ``budget`` whose span holds 3 sizes as ``choose`` picks them, or None
    (a larger budget does not help). Found by trying the planner's own choice, not by a formula: one named
    3-4x the budget needed (for the sizes around the optimum and for WSD's ladder alike)."""
    tokens_per_param, span, count = options.tokens_per_param, options.span, options.sizes_per_budget

    def enough(b: float) -> bool:
        return len(choose(grid.prior_optimum(b, tokens_per_param), span, count)) >= 3

    costs = sorted(c for c in (grid.flops_per_unit(i) * tokens_per_param * p for i, p in enumerate(grid.params))
                   if c > budget)
    high = next((c for c in costs if enough(c)), None)  # the first size's own budget that holds 3
    if high is None:
        return None
    low = max([budget] + [c for c in costs if c < high])
    for _ in range(40):  # between two sizes' budgets, in log space
        middle = math.sqrt(low * high)
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


def refusal(budget: float, grid: SizeGrid, chosen: list[int], feasible: list[int], min_units: int,
             options: SweepOptions) -> str:
    """Why a budget cannot be swept, and the smallest budget that could."""
    min_steps, batch_size, seq_len, model = options.min_steps, options.batch_size, options.seq_len, options.model
    need_smallest = grid.flops_per_unit(0) * min_units
    third = chosen[2] if len(chosen) >= 3 else min(2, len(grid.sizes) - 1)
    need_three = grid.flops_per_unit(third) * min_units
    how = f"{min_steps} steps x batch {batch_size} x seq_len {seq_len}"
    if budget < need_smallest:
        return (
            f"budget {budget:.3g} FLOPs is too small for model {model!r}: its smallest size "
            f"({grid.sizes[0]}, {grid.params[0]:,} params) needs {need_smallest:.3g} FLOPs for {how}; "
            f"use budgets >= {_round_up(need_three)} FLOPs (3 sizes), or lower batch_size / min_steps"
        )
    return (
        f"budget {budget:.3g} FLOPs leaves only {len(feasible)} of the planned sizes "
        f"{[grid.sizes[i] for i in chosen]} with at least {how}; an IsoFLOP curve needs 3 or more. "
        f"Raise the budget (>= {_round_up(need_three)} FLOPs fits 3 of them), lower span, "
        f"batch_size or min_steps, or pass sizes=[...]"
    )


def grid_notes(budget: float, grid: SizeGrid, centre: float | None, chosen: list[int], feasible: list[int],
               options: SweepOptions, unit: str = "token") -> list[str]:
    """What a user should know about a budget's planned sizes: fewer than ``sizes_per_budget``
    (and why), or sizes whose tokens per parameter miss ``tokens_per_param`` (the prior optimum
    lies outside them). ``centre`` is the prior optimum in parameters (None: explicit sizes)."""
    notes, head = [], f"budget {budget:.3g} FLOPs"
    asked = len(options.sizes) if options.sizes is not None else options.sizes_per_budget
    if len(chosen) < asked and centre is not None:
        lo, hi = centre / math.sqrt(options.span), centre * math.sqrt(options.span)
        notes.append(f"{head}: {len(feasible)} of the {asked} sizes asked for; the span of {options.span:g}x around "
                     f"its prior optimum ({lo:,.0f}-{hi:,.0f} params) holds only {len(chosen)} distinct valid sizes of "
                     f"model {options.model!r} (sizes are snapped to the nearest valid one); widen span, or pass "
                     "sizes=[...]")
    dropped = [grid.sizes[i] for i in chosen if i not in feasible]
    if dropped:
        notes.append(f"{head}: sizes {dropped} left out, fewer than min_steps = {options.min_steps} optimizer steps "
                     f"at batch {options.batch_size}; {len(feasible)} sizes remain (raise the budget or lower "
                     "min_steps / batch_size)")
    if feasible:
        ratios = [budget / grid.flops_per_unit(i) / grid.params[i] for i in feasible]
        low, high = min(ratios), max(ratios)
        target = options.tokens_per_param
        if not low <= target <= high:
            fewer = high < target  # the target's optimum is a smaller model than every planned one
            edge = 0 if fewer else len(grid.sizes) - 1
            clamped = centre is not None and centre == grid.params[edge]
            if clamped and fewer:
                why, fix = (f"the model's smallest size ({grid.params[0]:,} params) is larger than the optimum the "
                            "target puts at this budget", "use larger budgets")
            elif clamped:
                why, fix = (f"the largest size considered ({grid.params[-1]:,} params, max_size "
                            f"{options.max_size}) is smaller than that optimum", "raise max_size or use smaller budgets")
            else:
                why, fix = "the sizes planned do not reach the target's optimum", "pass sizes around it"
            notes.append(f"{head}: every planned size trains on {'fewer' if fewer else 'more'} {unit}s per parameter "
                         f"({low:.3g}-{high:.3g}) than the target {target:g}: {why}; its IsoFLOP minimum is likely on "
                         f"the grid's edge ({fix})")
    return notes
