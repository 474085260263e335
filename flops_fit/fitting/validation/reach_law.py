"""The forecast's interval: how far an answer's log error spreads at reach r, learned on public sweeps.

A candidate's own chaining is a poor ruler for its answer's interval: a sweep has 2-20 splits,
the first of them fits of 2-3 budgets that err far more than the forecast's own fit, and a
Student's t with so few degrees of freedom gives intervals 20-50x wider than the errors
(bench_forecast_calibration.py, before this law). What other sweeps show is steadier: the
product's own answers (the weighted candidates, ``forecast``), scored at every later budget of
every split of the public sweeps, err by a log error e whose spread grows with the reach r:

    sigma(r)^2 = floor^2 + (slope ln r)^2

``floor`` the error with no reach (the observed optimum's own noise and the fit's), ``slope`` its
growth. A law fitted with ``spread`` also reads how far the answer's members disagree at the
target, s (their weighted log standard deviation, ``forecast.members_spread``), as a known part of
each answer's variance: e ~ N(0, (f sigma(r))^2 + s^2), so that candidates who disagree widen the
interval; the shipped laws do not (``SPREAD``). Where the law says so (``own_weight``, the loss's),
sigma is scaled by the sweep's own chaining of the same answer: f^2 = (nu0 + K u) / (nu0 + K), u
the weighted mean of (e / sigma(r))^2 per inner split (later splits, fitted to more budgets, weigh more: ``drift.split_weights``), K the
effective splits (one piece of evidence each: a split's predictions share its fit), nu0 what the
law is worth in splits. The interval is e within +-k f sigma(r_t), k a quantile of the public
answers' own scores |e| / (f sigma(r)) (``scores``: any level). Scoring each sweep by the law
fitted without it instead gave intervals 1.25-1.3x wider for the same coverage leaving one study out.
For N_opt the inner splits' errors did not predict the later ones, and its law, fitted on one
study, under-covered the other: N_opt's interval is the candidates' error model, bounded by its
law (``CAPPED``: at least the law's interval at no reach, at most its interval at the reach).

No law-sized interval is wider than the largest error any of the law's answers made (``largest``),
up to the largest reach they were made at (``reach``; beyond it the bound grows as sigma(r) does,
since no public answer measured the error there): a sweep whose first splits, fits of 2-3 budgets, erred 36x the law scaled
the loss's sigma by f = 36, and a loss interval of [0.27, 33.5] around 3.0 where no public
answer erred by more than 12%. Bounded by the law's tail at each reach instead (its 99% score
times sigma(r)), the (Mis)Fitting sweep's loss was covered 47% of the time (98% without), leaving
one study out: its early splits err 4-5 sigma at short reach, and f says so.

Fitted by ``benchmarks/fit_forecast_prior.py`` on the public sweeps only, shipped in the prior's
file; validated leaving one study out by ``benchmarks/bench_forecast_calibration.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.fitting.validation.drift import MIN_RATIO, split_weights

Inner = Sequence[tuple[float, float, float]]  # (fitted up to, ratio, log error) of an answer's own chaining
# nu0 per answer: the loss's law weighs a tenth of a split of the sweep's own chaining (its shape and
# multiplier carry over between sweeps, its scale much less); N_opt's answers alone (its sweeps' own
# chaining did not predict their later errors). Chosen leaving one study out, coverage first, then
# width (2, 1, 0.5, 0.25, 0.1 for the loss; none, 5, 20 for N_opt: docs/validation/forecast.md).
OWN_WEIGHTS: dict[str, float | None] = {"loss": 0.1, "n_opt": None}
# The answers whose interval the law sizes by default. N_opt's law, fitted on one study and scored on
# the other, covered 85% at 2.94x (the candidates' error models 91% at 11.5x): it does not size N_opt.
ANSWERS = ("loss",)
# The answers whose interval stays the candidates' error model, bounded by the law: at least the law's
# error at no reach (k floor: the observed optimum's own noise, which an error per unit of ln r misses
# near r = 1) and at most the law's interval at the reach (k sigma(r): a drift estimated from a few
# splits grows the error model 20-50x beyond the public answers' errors at long reach).
CAPPED = ("n_opt",)
# The answers whose shipped law reads the members' spread at the target (``Outcome.spread``): none. Tried
# for the loss (stop 48, ``--spread loss`` in fit_forecast_prior.py and bench_forecast_calibration.py),
# leaving one study out it covered 91% at a median 5.4% (95% at 5.5% without), the demo's own splits 8
# of 10 (5), (Mis)Fitting's sweep 36 of 45 (44), and widened the demo's loss interval at its target from
# 8.1% to 30%: not shipped (docs/validation/forecast.md).
SPREAD: tuple[str, ...] = ()
# The law's scores are its own answers'. Leaving one study out, the other study's tail was about 5x as
# heavy: N_opt's law read at the 99% quantile covered 94.5% of the other study's answers, read at 95%
# 84% (benchmarks/results/forecast_reach_variants.json). A bound reads the law where its tail is
# 1/CAP_TAIL of the stated level's (99% for a 95% interval).
CAP_TAIL = 5.0


def cap_level(level: float) -> float:
    """The quantile of the law's scores that bounds a ``level`` interval (``CAP_TAIL``)."""
    return 1.0 - (1.0 - level) / CAP_TAIL


@dataclass(frozen=True)
class Outcome:
    """One scored answer: the ``sweep`` it forecast, its ``ratio`` C_j / C_k, its log ``error``
    ln(predicted / observed), and the same answer's chaining inside the split (``inner``)."""

    sweep: str
    ratio: float
    error: float
    inner: Inner = ()
    spread: float = 0.0


@dataclass(frozen=True)
class ReachLaw:
    """sigma(r) = sqrt(floor^2 + (slope ln r)^2), the public answers' scores that size k, and nu0."""

    floor: float
    slope: float
    scores: tuple[float, ...]
    own_weight: float | None = None
    sweeps: tuple[str, ...] = field(default=())
    spread: bool = False
    largest: float = np.inf  # the largest |log error| of the answers it was fitted on: the widest half-width
    reach: float = np.inf  # the largest ratio of those answers: where the law stops being measured

    def cap(self, ratio: np.ndarray | float) -> np.ndarray | float:
        """The widest log half-width at ``ratio``: ``largest`` up to ``reach``, grown as sigma(r) beyond it."""
        if not np.isfinite(self.reach):
            return self.largest
        return self.largest * np.maximum(1.0, self.sigma(ratio) / self.sigma(self.reach))

    def sigma(self, ratio: np.ndarray | float) -> np.ndarray:
        reach = np.log(np.maximum(np.asarray(ratio, float), 1.0))
        return np.sqrt(self.floor ** 2 + (self.slope * reach) ** 2)

    def multiplier(self, level: float) -> float:
        """k: the ``level`` quantile of the transfer scores (the next one up: never fewer covered)."""
        if not 0 < level < 1:
            raise FitInputError(f"the interval's level must lie between 0 and 1; got {level}")
        return float(np.quantile(self.scores, level, method="higher"))

    def states(self, level: float) -> bool:
        """Whether the scores are enough to read k at ``level``: one score or more beyond it."""
        return 0 < level < 1 and (1 - level) * len(self.scores) >= 1

    def own_factor(self, inner: Inner) -> tuple[float, int]:
        """(f, K): the sweep's own chaining against the law, moderated by ``own_weight``; (1, K)
        when the law answers alone or the sweep measured nothing at MIN_RATIO or more."""
        by_split: dict[float, list[float]] = {}
        for upto, ratio, error in inner:
            if ratio >= MIN_RATIO and np.isfinite(error):
                by_split.setdefault(float(upto), []).append(float(error / self.sigma(ratio)) ** 2)
        k = len(by_split)
        if self.own_weight is None or k == 0:
            return 1.0, k
        per_split = np.array([np.mean(v) for _, v in sorted(by_split.items())])
        w = split_weights(k)
        u, n_eff = float(np.sum(w * per_split) / w.sum()), float(w.sum() ** 2 / np.sum(w * w))
        return float(np.sqrt((self.own_weight + n_eff * u) / (self.own_weight + n_eff))), k

    def bounds(self, ratio: float, level: float) -> tuple[float, float]:
        """(least, most) log half-width of a ``CAPPED`` answer's ``level`` interval at ``ratio``: the
        law's at no reach and at the reach, read at ``cap_level(level)``."""
        k = self.multiplier(cap_level(level))
        return k * self.floor, k * float(self.sigma(ratio))

    def scale(self, ratio: np.ndarray | float, factor: float = 1.0, spread: float = 0.0) -> np.ndarray:
        """The answer's log sd at ``ratio``: f sigma(r), and the members' spread s in quadrature where
        the law was fitted with it (a law fitted without it never reads it)."""
        own = factor * self.sigma(ratio)
        return np.hypot(own, spread) if self.spread else own

    def half_width(self, ratio: float, level: float, inner: Inner = (), spread: float = 0.0) -> tuple[float, float, int]:
        """(half-width of the log interval at ``ratio``, at most ``cap``; the own factor f, its splits K)."""
        factor, k = self.own_factor(inner)
        return min(self.multiplier(level) * float(self.scale(ratio, factor, spread)), float(self.cap(ratio))), factor, k

    def to_dict(self) -> dict[str, Any]:
        return {"floor": self.floor, "slope": self.slope, "own_weight": self.own_weight, "spread": self.spread,
                "sweeps": list(self.sweeps), "scores": list(self.scores), "largest": self.largest, "reach": self.reach}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReachLaw:
        weight = data.get("own_weight")
        return cls(floor=float(data["floor"]), slope=float(data["slope"]), scores=tuple(float(s) for s in data["scores"]),
                   own_weight=None if weight is None else float(weight), sweeps=tuple(data.get("sweeps", ())),
                   spread=bool(data.get("spread", False)), largest=float(data.get("largest", np.inf)),
                   reach=float(data.get("reach", np.inf)))


def fit_spread(errors: np.ndarray, ratios: np.ndarray, known: np.ndarray | None = None) -> tuple[float, float]:
    """(floor, slope) by maximum likelihood of e ~ N(0, sigma(r)^2 + s^2), ``known`` the s of each
    error (0 by default), from a small grid of starts."""
    from scipy.optimize import minimize

    e, reach = np.asarray(errors, float), np.log(np.asarray(ratios, float))
    extra = np.zeros_like(e) if known is None else np.asarray(known, float) ** 2

    def negative_log_likelihood(theta: np.ndarray) -> float:
        var = np.exp(2 * theta[0]) + (np.exp(theta[1]) * reach) ** 2 + extra
        return float(np.sum(0.5 * np.log(var) + 0.5 * e ** 2 / var))

    starts = [np.log([a, b]) for a in (0.003, 0.03, 0.3) for b in (0.003, 0.03, 0.3)]
    best = min((minimize(negative_log_likelihood, s, method="Nelder-Mead") for s in starts), key=lambda r: r.fun)
    return float(np.exp(best.x[0])), float(np.exp(best.x[1]))


def fit_reach_law(outcomes: Sequence[Outcome], own_weight: float | None = None, spread: bool = False) -> ReachLaw:
    """The law of one answer from scored outcomes of two or more sweeps: (floor, slope) on all of
    them, and the scores |e| / scale they take under it (``spread``: the members' spread read too)."""
    usable = [o for o in outcomes if np.isfinite(o.error) and o.ratio > 1]
    sweeps = sorted({o.sweep for o in usable})
    if len(sweeps) < 2:
        raise FitInputError(f"a reach law needs scored forecasts of 2 or more sweeps; got {len(sweeps)}")

    known = np.array([o.spread for o in usable]) if spread else None
    floor, slope = fit_spread(np.array([o.error for o in usable]), np.array([o.ratio for o in usable]), known)
    law = ReachLaw(floor=floor, slope=slope, scores=(1.0,), own_weight=own_weight, sweeps=tuple(sweeps), spread=spread)
    scores = sorted(abs(o.error) / float(law.scale(o.ratio, law.own_factor(o.inner)[0], o.spread)) for o in usable)
    return ReachLaw(floor=floor, slope=slope, scores=tuple(scores), own_weight=own_weight, sweeps=tuple(sweeps),
                    spread=spread, largest=float(max(abs(o.error) for o in usable)),
                    reach=float(max(o.ratio for o in usable)))


__all__ = ["ANSWERS", "CAPPED", "CAP_TAIL", "OWN_WEIGHTS", "SPREAD", "cap_level", "Inner", "Outcome", "ReachLaw", "fit_reach_law", "fit_spread"]
