"""A candidate's extrapolation error as drift plus scatter, pooled with what other sweeps show.

Forward chaining records, per split k (the fit up to C_k) and larger budget C_j, the log error
e = ln(predicted / observed) at the ratio r = C_j / C_k. Errors grow with the reach, so the unit
of evidence is z = e / ln r. Predictions made from one split share its fit: they are one piece of
evidence, not several, so each split gives one z_k (least squares through the origin over its
predictions at ratios of MIN_RATIO or more, ``split_slopes``). The model: z_k ~ N(b, s^2), with b the candidate's **drift** (a
law that under-predicts N_opt more the further it reaches: one sign, growing with ln r) and s its
**scatter**. A sweep has 2-20 splits, too few to know s or b alone, so both are combined with a
prior learned across public sweeps (``prior``; empirical Bayes):

- the splits' mean zbar and variance S^2 weigh later splits more (``split_weights``: the
  budgets each fitted), with K the effective number of splits;
- the scatter is moderated toward the prior's s0 with nu0 pseudo degrees of freedom (Smyth 2004):
  s^2 = (nu0 s0^2 + (K - 1) S^2) / (nu0 + K - 1), with nu0 + K - 1 degrees of freedom;
- the drift is shrunk toward 0 by the prior b ~ N(0, tau^2): b = zbar tau^2 / (tau^2 + s^2 / K),
  variance v = tau^2 (s^2 / K) / (tau^2 + s^2 / K). A drift large against its standard error is
  kept almost whole (reported, and by a correcting ``carry`` taken off the point), one the splits cannot tell from scatter is
  mostly dropped.

At the target's ratio r_t the log error is N(b ln r_t, (s^2 + v) ln^2 r_t): the interval is
Student's t with the moderated degrees of freedom. How much of the drift the point is corrected by
is the ``carry`` (``CARRIES``): a drift measured over the sweep's own reach (2-50x) need not go on
growing linearly to the target, and the public sweeps say which carry calibrates
(``benchmarks/bench_forecast_variants.py``, leave one study out; ``CARRY``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from flops_fit.fitting import formatting as fmt

FIELDS = {"loss": "loss_error", "n_opt": "n_opt_error"}  # an answer and its chaining error's field
# Predictions closer than this ratio measure the truth's own noise more than the law's reach: a 1%
# error in an observed optimum at r = 1.1 would read as 0.1 per unit of ln r. (Budgets rounded from
# FLOPs can lie a factor 1.1 apart; a designed sweep's are 1.4-3x apart.)
MIN_RATIO = 1.3
# How the drift b is carried to the target's reach ln r_t (the point corrected by -shift, the log error
# expected there): "linear" b ln r_t; "reach" b min(ln r_t, R), R the largest ln r the chaining measured
# (a drift is not extrapolated past the evidence for it); "significant" b ln r_t only where |b| exceeds
# its own interval's half-width (t quantile x its sd), else none; "off" none; "count" none, the drift
# counted as error like the scatter (``ErrorModel.sd``); "widen" none, the interval stretched to reach
# the drift-corrected point (the drift as uncertainty, not as a correction).
CARRIES = ("linear", "reach", "significant", "off", "count", "widen")
CARRY = "off"  # the best calibrated leaving one study out (benchmarks/bench_forecast_variants.py)


@dataclass(frozen=True)
class Prior:
    """What other sweeps say of one answer's z = ln error / ln r: typical scatter ``s0`` (worth
    ``nu0`` splits of evidence) and the spread ``tau`` of drifts across candidates and sweeps."""

    s0: float
    nu0: float
    tau: float


@dataclass(kw_only=True)
class ErrorModel:
    """One candidate's error model for one answer (see the module's docstring)."""

    splits: int
    own_drift: float  # zbar: the splits' mean z, before shrinkage
    own_scatter: float  # S: the splits' standard deviation of z (NaN with one split)
    drift: float  # b after shrinkage toward 0
    drift_sd: float  # sqrt(v)
    scatter: float  # s after moderation toward s0
    dof: float
    reach: float = np.inf  # R: the largest ln r the splits' predictions measured
    carry: str = CARRY

    @property
    def sd(self) -> float:
        """Standard deviation of z for a new split: scatter and the drift's own uncertainty, and with
        carry "count" the drift itself (not corrected, so an error like the scatter: a drifting
        candidate ranks lower, weighs less and answers with a wider interval)."""
        drift = self.drift if self.carry == "count" else 0.0
        return float(np.sqrt(self.scatter ** 2 + self.drift_sd ** 2 + drift ** 2))

    def quantile(self, level: float) -> float:
        from scipy.stats import t

        return float(t.ppf(0.5 + level / 2, self.dof))

    def shift(self, reach: np.ndarray | float, level: float) -> tuple[np.ndarray, np.ndarray]:
        """The drift's part of the log error at ``reach`` = ln r (``carry``): (lo, hi), equal but
        for "widen", whose span runs from no drift to the whole linear one."""
        reach = np.asarray(reach, float)
        linear = self.drift * reach
        if self.carry == "linear":
            return linear, linear
        if self.carry == "reach":
            capped = self.drift * np.minimum(reach, self.reach)
            return capped, capped
        if self.carry == "significant":
            kept = linear if abs(self.drift) > self.quantile(level) * self.drift_sd else 0.0 * linear
            return kept, kept
        if self.carry in ("off", "count"):
            return 0.0 * linear, 0.0 * linear
        if self.carry == "widen":
            return np.minimum(linear, 0.0), np.maximum(linear, 0.0)
        raise ValueError(f"carry must be one of {', '.join(CARRIES)}; got {self.carry!r}")

    def log_interval(self, ratio: float, level: float) -> tuple[float, float, float]:
        """(correction, lo, hi) of the log error at ``ratio``: the point is corrected by
        ``correction`` (the drift carried there, negated), and the truth lies within [lo, hi] of
        the corrected point."""
        reach = float(np.log(ratio)) if ratio > 1 else 0.0
        half = self.quantile(level) * self.sd * reach
        low, high = (float(v) for v in self.shift(reach, level))
        correction = -(low + high) / 2 if self.carry != "widen" else 0.0
        return correction, -high - correction - half, -low - correction + half

    def band(self, ratios: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The expected relative error (predicted / observed - 1) at each ratio and its ``level``
        band, in ratio space: the log error's band mapped back, so never below -100%."""
        reach = np.log(np.maximum(np.asarray(ratios, float), 1.0))
        half = self.quantile(level) * self.sd * reach
        low, high = self.shift(reach, level)
        return np.expm1((low + high) / 2), np.expm1(low - half), np.expm1(high + half)

    def to_dict(self) -> dict[str, Any]:
        return fmt.json_safe({**asdict(self), "sd": self.sd})


def split_slopes(records: Sequence[Any], field: str) -> dict[float, float]:
    """Per split (``fitted_upto``): z_k, the least-squares slope through the origin of
    ln(1 + error) against ln r over that split's predictions (ratios >= MIN_RATIO, finite errors)."""
    groups: dict[float, list[tuple[float, float]]] = {}
    for r in records:
        error = getattr(r, field)
        if r.ratio >= MIN_RATIO and np.isfinite(error) and error > -1:
            groups.setdefault(float(r.fitted_upto), []).append((float(np.log(r.ratio)), float(np.log1p(error))))
    out = {}
    for upto, pairs in sorted(groups.items()):
        x, y = np.array(pairs).T
        out[upto] = float(np.sum(x * y) / np.sum(x * x))
    return out


def split_weights(k: int) -> np.ndarray:
    """Weights of a candidate's k splits, in order: the budgets each fitted (at least 2, 3, ...). The
    forecast's own fit has the most budgets; the splits most like it say most about its error (the
    first splits, fitted to two or three budgets, err far more per unit of ln r than the last)."""
    return np.arange(2.0, k + 2.0)


def weighted_moments(slopes: Sequence[float]) -> tuple[float, float, float]:
    """The slopes' weighted mean, weighted variance (reliability weights; NaN for one split) and
    effective number of splits (sum w)^2 / sum w^2."""
    z = np.asarray(slopes, float)
    w = split_weights(z.size)
    mean = float(np.sum(w * z) / w.sum())
    n_eff = float(w.sum() ** 2 / np.sum(w * w))
    if z.size < 2:
        return mean, np.nan, n_eff
    var = float(np.sum(w * (z - mean) ** 2) / (w.sum() - np.sum(w * w) / w.sum()))
    return mean, var, n_eff


def reach(records: Sequence[Any], field: str) -> float:
    """R: ln of the largest ratio among the predictions ``split_slopes`` reads (-inf without any)."""
    ratios = [r.ratio for r in records if r.ratio >= MIN_RATIO and np.isfinite(getattr(r, field))
              and getattr(r, field) > -1]
    return float(np.log(max(ratios))) if ratios else -np.inf


def error_model(slopes: Sequence[float], prior: Prior, *, reach: float = np.inf, carry: str = CARRY) -> ErrorModel:
    """The moderated, shrunk model of z from one candidate's per-split slopes (at least one, in
    split order: later splits weigh more, ``split_weights``), measured out to ln r = ``reach``."""
    if carry not in CARRIES:
        raise ValueError(f"carry must be one of {', '.join(CARRIES)}; got {carry!r}")
    z = np.asarray(slopes, float)
    mean, own_var, n_eff = weighted_moments(z)
    return moderated(mean, own_var, int(z.size), n_eff, prior, reach=reach, carry=carry)


def moderated(mean: float, own_var: float, k: int, n_eff: float, prior: Prior, *, reach: float = np.inf,
              carry: str = CARRY) -> ErrorModel:
    """The error model from its splits' weighted mean and variance of z (``k`` splits, ``n_eff``
    effective): ``error_model``'s moderation and shrinkage, shared with ``expected_model``."""
    dof_own = n_eff - 1 if k > 1 else 0.0
    var = (prior.nu0 * prior.s0 ** 2 + (dof_own * own_var if k > 1 else 0.0)) / (prior.nu0 + dof_own)
    se2 = var / n_eff
    tau2 = prior.tau ** 2
    shrink = tau2 / (tau2 + se2) if tau2 > 0 else 0.0
    return ErrorModel(splits=k, own_drift=mean, own_scatter=float(np.sqrt(own_var)) if k > 1 else np.nan,
                      drift=mean * shrink, drift_sd=float(np.sqrt(shrink * se2)), scatter=float(np.sqrt(var)),
                      dof=float(prior.nu0 + dof_own), reach=float(reach), carry=carry)


def expected_model(model: ErrorModel, prior: Prior, *, more: int = 0, less: float = 0.0) -> ErrorModel:
    """The model expected after ``more`` splits and with ``less`` taken off the splits' own variance of
    z (the noise of observed optima that more sizes remove): new splits are expected to spread as the
    splits so far (their own variance kept, or the moderated scatter with one split), so what they add
    is evidence: more own degrees of freedom, the scatter moved from the prior's toward the sweep's own,
    the drift's sd and Student's quantile smaller. With neither, the model as it is (an adaptive design
    reads what a candidate's runs are expected to do to the interval from the same moderation)."""
    k = model.splits + int(more)
    if k == model.splits and not less:
        return model
    own = model.own_scatter ** 2 if model.splits > 1 and np.isfinite(model.own_scatter) else model.scatter ** 2
    w = split_weights(k)
    n_eff = float(w.sum() ** 2 / np.sum(w * w))
    return moderated(model.own_drift, max(own - float(less), 0.0), k, n_eff, prior, reach=model.reach,
                     carry=model.carry)


__all__ = ["CARRIES", "CARRY", "FIELDS", "MIN_RATIO", "ErrorModel", "Prior", "error_model", "expected_model", "moderated",
           "reach", "split_slopes", "split_weights", "weighted_moments"]
