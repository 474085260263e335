"""What a candidate's runs are expected to do to the forecast's interval of N_opt at the target.

The adaptive design (``sweeps.adaptive``) ranks candidates by the expected drop of that interval's
log half-width per FLOP, read from the machinery that builds it: the answer's error model of
z = ln error / ln r per forward-chaining split, moderated by the prior (``drift``), bounded by the
reach law (``forecast.Answer.bounded``). Two kinds of candidate narrow it:

- **a budget** adds a split (one more fit up to a budget, predicting the larger ones) and, beyond
  the largest, shortens the reach. A split is evidence: the error model moves from the prior's
  scatter toward the sweep's own and its Student's quantile shrinks (``drift.expected_model``);
- **sizes at a budget already trained** make its observed optimum less noisy. That noise is part of
  each split's z: the split's fit (a line through the optima in log C, as approach 2's) carries a
  budget's optimum to every prediction by its leverage, and a prediction at that budget is
  compared with it. Its variance is the vertex's of a parabola through the budget's losses in
  log N, from the sizes alone (the design: ``(X'X)^-1``) and the sweeps' residual variance, so the
  sizes' losses are not needed to say how much they would shrink it. The drop in the splits' mean
  variance of z is taken off their own variance.

A budget's split may not bring the error model under the reach law's bound while two do (Epoch's
Chinchilla: x2.71, the bound, then x2.55 and x2.31 with 1e20 and 6e20): ``best_plan`` credits each
candidate with the gain per FLOP of the cheapest set of candidates it starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from flops_fit.fitting.validation.drift import (
    MIN_RATIO,
    ErrorModel,
    Prior,
    expected_model,
    split_weights,
)

Key = tuple[float, float]  # (budget, size)


def _design(log_n: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones_like(log_n), log_n, log_n ** 2])


def profile_fit(sizes: Sequence[float], losses: Sequence[float]) -> tuple[float, float, float] | None:
    """A budget's parabola of loss in log N: its curvature (NaN without an interior vertex), its
    vertex (the lowest loss's size where the parabola has none inside its sizes) and its residual
    variance (NaN with 3 sizes); None with fewer than 3 sizes."""
    log_n = np.log(np.asarray(sizes, float))
    y = np.asarray(losses, float)
    if log_n.size < 3 or not np.all(np.isfinite(y)):
        return None
    centre = float(log_n.mean())
    x = _design(log_n - centre)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    rss = float(np.sum((y - x @ coef) ** 2))
    noise = rss / (log_n.size - 3) if log_n.size > 3 else np.nan
    vertex = centre - coef[1] / (2 * coef[2]) if coef[2] > 0 else np.nan
    if not log_n.min() <= vertex <= log_n.max():
        return np.nan, float(log_n[np.argmin(y)]), noise
    return float(coef[2]), float(vertex), noise


def vertex_variance(sizes: Sequence[float], vertex: float, curvature: float, noise: float) -> float:
    """Variance of a parabola's vertex (ln N_opt of the budget) fitted to runs at ``sizes``, of that
    ``curvature`` and ``vertex``, with loss noise ``noise`` (a variance), by the delta method: the
    sizes decide it, not their losses."""
    log_n = np.log(np.asarray(sizes, float))
    x = _design(log_n - vertex)  # centred at the vertex: the linear term is 0 there
    grad = np.array([0.0, -1.0 / (2 * curvature), 0.0])
    try:
        inverse = np.linalg.inv(x.T @ x)
    except np.linalg.LinAlgError:
        return np.inf
    return float(noise * grad @ inverse @ grad)


def sensitivities(splits: Mapping[float, Sequence[tuple[float, float]]], budgets: Sequence[float]
                  ) -> dict[float, dict[float, float]]:
    """d z_k / d ln(observed optimum at budget i) for each split k (fitted up to ``k``: its
    predictions (budget, ratio)): z_k = sum x y / sum x^2 over its predictions (x = ln r, y the log
    error), y = the split's line in log C at that budget (through the optima up to k, by leverage)
    minus the optimum observed there."""
    u = {b: float(np.log(b)) for b in budgets}
    out: dict[float, dict[float, float]] = {}
    for upto, predicted in splits.items():
        fitted = [b for b in budgets if b <= upto]
        pairs = [(b, float(np.log(r))) for b, r in predicted if r >= MIN_RATIO]
        if len(fitted) < 2 or not pairs:
            continue
        mean = float(np.mean([u[b] for b in fitted]))
        sxx = float(sum((u[b] - mean) ** 2 for b in fitted))
        norm = sum(x * x for _, x in pairs)
        grads: dict[float, float] = {}
        for i in fitted:
            grads[i] = sum(x * (1 / len(fitted) + (u[i] - mean) * (float(np.log(b)) - mean) / sxx)
                           for b, x in pairs) / norm
        for b, x in pairs:
            grads[b] = grads.get(b, 0.0) - x / norm
        out[upto] = grads
    return out


class Expectation:
    """The interval's expected log half-width at the target after a candidate: ``half(ratio, more,
    less)`` with ``more`` splits and ``less`` off the splits' own variance of z; ``less_for(budget,
    sizes)`` what adding ``sizes`` at a trained budget takes off."""

    def __init__(self, model: ErrorModel, prior: Prior, level: float, bounded: Callable[[float, float], float],
                 splits: Mapping[float, Sequence[tuple[float, float]]], trained: Mapping[Key, float]):
        self.model, self.prior, self.level, self.bounded = model, prior, level, bounded
        by_budget: dict[float, list[tuple[float, float]]] = {}
        for (budget, size), loss in trained.items():
            if np.isfinite(loss):
                by_budget.setdefault(float(budget), []).append((float(size), float(loss)))
        self.sizes = {b: sorted(p) for b, p in sorted(by_budget.items())}
        self.fits = {b: profile_fit(*zip(*p, strict=True)) for b, p in self.sizes.items()}
        fits = [f for f in self.fits.values() if f is not None]
        noise = [f[2] for f in fits if np.isfinite(f[2])]
        curvature = [f[0] for f in fits if np.isfinite(f[0])]
        # the budgets' typical residual and curvature: one budget's 5 sizes place its own poorly (a
        # flat profile's vertex variance is unbounded)
        self.noise = float(np.median(noise)) if noise else np.nan
        self.curvature = float(np.median(curvature)) if curvature else np.nan
        grads = sensitivities(splits, list(self.sizes))
        weights = split_weights(len(grads))
        self.weights = dict(zip(sorted(grads), weights / weights.sum(), strict=True))
        self.grads = grads
        # the variance of z the optima's noise explains, by the profiles' design: at most the splits' own
        # (what the sizes take off is that share of it)
        self.implied = sum(self._carried(b, self._variance(b, [s for s, _ in p])) for b, p in self.sizes.items())
        own = model.own_scatter ** 2 if model.splits > 1 and np.isfinite(model.own_scatter) else 0.0
        self.share = min(1.0, own / self.implied) if self.implied > 0 and np.isfinite(self.implied) else 0.0

    def _variance(self, budget: float, sizes: Sequence[float]) -> float:
        """The budget's optimum's variance (ln N) with runs at ``sizes`` (NaN where it cannot be read)."""
        fitted = self.fits.get(float(budget))
        if fitted is None or not (np.isfinite(self.noise) and np.isfinite(self.curvature)):
            return np.nan
        return vertex_variance(sizes, fitted[1], self.curvature, self.noise)

    def _carried(self, budget: float, variance: float) -> float:
        """The splits' expected own (weighted) variance of z from ``variance`` in the budget's optimum:
        the part of it that moves the splits' z apart; the part that moves them alike moves the drift,
        not the scatter (``drift.weighted_moments``' reliability weights)."""
        if not np.isfinite(variance) or len(self.weights) < 2:
            return 0.0
        w = np.array(list(self.weights.values()))
        g = np.array([self.grads[k].get(float(budget), 0.0) for k in self.weights])
        mean = float(np.sum(w * g))  # the weights sum to 1
        return float(variance * np.sum(w * (g - mean) ** 2) / (1.0 - np.sum(w * w)))

    def less_for(self, budget: float, sizes: Sequence[float]) -> float:
        """What adding ``sizes`` at the trained ``budget`` is expected to take off the splits' own
        variance of z: its optimum's variance drop, carried to each split by d z / d optimum, times the
        share of that variance the optima's noise explains (``share``)."""
        if float(budget) not in self.sizes or self.model.splits < 2:
            return 0.0
        now = [s for s, _ in self.sizes[float(budget)]]
        drop = self._variance(budget, now) - self._variance(budget, [*now, *sizes])
        return self.share * self._carried(budget, drop) if np.isfinite(drop) and drop > 0 else 0.0

    def half(self, ratio: float, more: int = 0, less: float = 0.0) -> float:
        """The expected log half-width at ``ratio`` (the reach law's bounds as the forecast's)."""
        grown = expected_model(self.model, self.prior, more=more, less=less)
        return float(self.bounded(float(grown.log_interval(ratio, self.level)[2]), ratio))


__all__ = ["Expectation", "profile_fit", "sensitivities", "vertex_variance"]
