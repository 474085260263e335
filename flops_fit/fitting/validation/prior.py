"""The forecast's prior on extrapolation error, learned across public sweeps, shipped as data.

One sweep's 2-20 forward-chaining splits cannot tell how wrong a law is at 10x its largest
budget; other sweeps can. ``fit_prior`` learns, per answer (loss, N_opt), how the error per
unit of ln r varies across (sweep, candidate) pairs: the typical scatter s0 and how much it is
worth (nu0 splits: the scaled inverse chi-square prior whose F-distributed marginal fits the
pairs' own variances best, Smyth 2004), and the spread tau of drifts (method of moments): pooled
over every candidate, and per candidate label (method and focus) where enough pairs have it, since
some methods extrapolate better than others on every sweep. The
shipped prior (``validation/priors/forecast_prior.json``, with its provenance: which sweeps, how many pairs,
the command that regenerates it) is fitted on public sweeps only, by
``benchmarks/fit_forecast_prior.py``; ``drift.error_model`` combines it with a sweep's own chaining.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.fitting.validation.drift import FIELDS, Prior, weighted_moments
from flops_fit.fitting.validation.reach_law import ReachLaw

PRIOR_FILE = "priors/forecast_prior.json"
NU_RANGE = (0.5, 200.0)  # pseudo degrees of freedom searched
TAU_FLOOR = 1e-4
POOLED = "*"  # the prior over every candidate


def fit_prior(units: Sequence[Sequence[float]]) -> Prior:
    """The prior of one answer from per-(sweep, candidate) lists of per-split slopes z_k."""
    from scipy.optimize import minimize
    from scipy.stats import f as f_dist

    moments = [weighted_moments(u) for u in units if len(u)]
    pairs = [(v, n - 1) for _, v, n in moments if np.isfinite(v) and v > 0]
    if len(pairs) < 3:
        raise FitInputError(f"a prior needs 3 or more candidates with 2 or more splits each; got {len(pairs)}")
    var, dof = np.array(pairs).T

    def negative_log_likelihood(theta: np.ndarray) -> float:
        s2, nu = np.exp(theta[0]), np.exp(theta[1])
        return -float(np.sum(f_dist.logpdf(var / s2, dof, nu) - np.log(s2)))

    start = np.array([np.log(np.median(var)), np.log(4.0)])
    bounds = [(np.log(var.min()) - 2, np.log(var.max()) + 2), tuple(np.log(NU_RANGE))]
    found = minimize(negative_log_likelihood, start, method="L-BFGS-B", bounds=bounds)
    s2, nu = float(np.exp(found.x[0])), float(np.exp(found.x[1]))
    tau2 = float(np.mean([m ** 2 - s2 / n for m, _, n in moments]))
    return Prior(s0=float(np.sqrt(s2)), nu0=nu, tau=float(np.sqrt(max(tau2, TAU_FLOOR ** 2))))


def fit_priors(units: Mapping[str, Sequence[Sequence[float]]]) -> dict[str, Prior]:
    """One answer's priors: pooled over every candidate (``POOLED``) and, per candidate label
    (``label``), its own where the label has enough (sweep, candidate) pairs to fit one."""
    out = {POOLED: fit_prior([u for group in units.values() for u in group])}
    for name, group in units.items():
        try:
            out[name] = fit_prior(group)
        except FitInputError:
            continue  # too few pairs: the label answers with the pooled prior
    return out


def label(method: str, focus: str | None) -> str:
    """A candidate's label in the prior: its method and focus (public sweeps have one scale)."""
    return method if focus is None else f"{method}/{focus}"


def prior_for(priors: Mapping[str, Prior], method: str | None, focus: str | None = None) -> Prior:
    """The candidate's own prior where the prior has one, else the pooled one."""
    return priors.get(label(method, focus), priors[POOLED]) if method is not None else priors[POOLED]


def prior_to_dict(priors: Mapping[str, Mapping[str, Prior]], provenance: Mapping[str, Any],
                  laws: Mapping[str, ReachLaw] | None = None) -> dict[str, Any]:
    out = {"answers": {q: {name: asdict(p) for name, p in by.items()} for q, by in priors.items()},
           "provenance": dict(provenance)}
    if laws:
        out["reach_laws"] = {q: law.to_dict() for q, law in laws.items()}
    return out


def priors_from_dict(data: Mapping[str, Any]) -> dict[str, dict[str, Prior]]:
    answers = data.get("answers", {})
    missing = [k for k in FIELDS if POOLED not in answers.get(k, {})]
    if missing:
        raise FitInputError(f"the forecast prior has no pooled entry for {', '.join(missing)}")
    return {q: {name: Prior(**{f: float(p[f]) for f in ("s0", "nu0", "tau")}) for name, p in answers[q].items()}
            for q in FIELDS}


def laws_from_dict(data: Mapping[str, Any]) -> dict[str, ReachLaw]:
    """The reach laws of the answers (``reach_law``), empty where the file has none."""
    return {q: ReachLaw.from_dict(d) for q, d in data.get("reach_laws", {}).items() if q in FIELDS}


@lru_cache(maxsize=1)
def _shipped_data() -> dict[str, Any]:
    return json.loads(resources.files("flops_fit.fitting.validation").joinpath(PRIOR_FILE).read_text())


def shipped() -> tuple[dict[str, dict[str, Prior]], dict[str, Any]]:
    """The packaged prior and its provenance."""
    data = _shipped_data()
    return priors_from_dict(data), dict(data.get("provenance", {}))


def shipped_laws() -> dict[str, ReachLaw]:
    """The packaged reach laws that size the forecast's intervals."""
    return laws_from_dict(_shipped_data())


def beyond_reach(target: float, largest: float) -> str | None:
    """A note when ``target`` FLOPs lies beyond the largest reach (target / ``largest`` budget) at which
    public sweeps measured how far an answer errs (the shipped laws' ``reach``): the README's example
    read 1e21 off a sweep up to 5e11, 2e9x, and printed six methods' points 40x apart without a word."""
    reaches = [law.reach for law in shipped_laws().values() if np.isfinite(law.reach)]
    if not reaches or not largest > 0 or not target / largest > min(reaches):
        return None
    return (f"{target:.3g} FLOPs is {target / largest:.3g}x the largest budget ({largest:.3g}); public sweeps measured "
            f"how far answers err up to {min(reaches):.3g}x: no measured error bounds these points, so read them as "
            "the laws' shapes carried that far, and sweep larger budgets to bring the target nearer")


__all__ = ["POOLED", "beyond_reach", "PRIOR_FILE", "fit_prior", "fit_priors", "label", "laws_from_dict", "prior_for", "prior_to_dict",
           "priors_from_dict", "shipped", "shipped_laws"]
