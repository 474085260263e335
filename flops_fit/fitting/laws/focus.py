"""Which runs a law over (N, D) is fitted to: all alike, or the floor near the frontier.

Chinchilla's Approach 3 weighs every run alike, and a law is only as good as its form: where
the form is wrong (a small model that stops gaining from data sooner than an additive law
allows, a large model that had too few steps to leave its warmup), runs far from the
compute-optimal frontier pull the law away from it, and the frontier is all a forecast reads.
``focus="frontier"`` fits the law where it is used, and to what it is meant to describe:

- each run is weighted by a Gaussian in log10 N around its budget's best run (s.d.
  ``WIDTH_DECADES``, a factor 2): the runs that say where the frontier lies count most;
- residuals above the law count ``FLOOR`` times those below (an asymmetric loss, as the
  ``chinchilla`` toolkit fits): a run's loss is the law plus what its training did not
  achieve (a learning-rate rule tuned elsewhere, a short warmup or cooldown), which only
  adds loss, so the law is the floor of the runs, not their middle.

On runs that follow a law exactly neither changes the fit (tests/test_fit_focus.py).
``focus="all"`` (the default) is Chinchilla's procedure, and the Epoch replication.
"""

from __future__ import annotations

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws.profiles import budget_groups

FOCI = ("all", "frontier")
WIDTH_DECADES = 0.3
FLOOR = 3.0
FOCUS_LABELS = {"all": "every run alike (Chinchilla)",
                "frontier": f"the floor of the runs near each budget's best (weights with s.d. {WIDTH_DECADES} "
                            f"decades in N, residuals above the law x{FLOOR:g})"}


def check_focus(focus: str) -> str:
    if focus not in FOCI:
        raise FitInputError(f"focus must be one of {', '.join(FOCI)}; got {focus!r}")
    return focus


def focus_weights(runs: Runs, focus: str) -> tuple[np.ndarray, float]:
    """Per-run weights and the factor on residuals above the law (1: symmetric) for ``focus``."""
    check_focus(focus)
    f = runs.frame
    if focus == "all":
        return np.ones(len(f)), 1.0
    budgets, _ = budget_groups(runs)
    log_n = np.log10(f["params"].to_numpy(float))
    loss = f["loss"].to_numpy(float)
    weights = np.empty(len(f))
    for budget in np.unique(budgets):
        member = budgets == budget
        centre = log_n[member][np.argmin(loss[member])]
        weights[member] = np.exp(-0.5 * ((log_n[member] - centre) / WIDTH_DECADES) ** 2)
    return weights * (weights.size / weights.sum()), FLOOR


__all__ = ["FLOOR", "FOCI", "FOCUS_LABELS", "WIDTH_DECADES", "check_focus", "focus_weights"]
