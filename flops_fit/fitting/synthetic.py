"""Runs drawn from a known law, for recovery tests, demos and trying the fitters offline.

Loss follows L(N, D) = E + A/N^alpha + B/D^beta with multiplicative log-normal noise; each
budget gets a size grid centred (in log N) on the law's optimum, and each run a training
curve of the same law at the tokens seen so far.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from flops_fit.fitting.approaches.data_limit import data_limited_loss
from flops_fit.fitting.laws.laws import law_loss, parametric_frontier

DEFAULT_LAW = {"E": 1.8, "A": 400.0, "B": 1200.0, "alpha": 0.34, "beta": 0.37}


def optimal_size(law: dict[str, float], budget: float, k: float = 6.0) -> float:
    n, _, _ = parametric_frontier({**{key: np.array([v]) for key, v in law.items()}, "k": np.array([k])},
                                  np.array([budget]))
    return float(n[0, 0])


def synthetic_runs(
    law: dict[str, float] | None = None,
    budgets: Sequence[float] = (1e17, 1e18, 1e19, 1e20, 1e21),
    sizes_per_budget: int = 9,
    span: float = 1.0,
    noise: float = 0.005,
    curve_points: int = 20,
    offset: float = 0.0,
    seed: int = 0,
    unique_tokens: float | None = None,
) -> pd.DataFrame:
    """A runs table (the run store's columns) for an IsoFLOP sweep over ``budgets``.

    Sizes span ``span`` decades either side of the optimum, shifted by ``offset`` decades
    (to make off-centre grids); ``noise`` is the s.d. of log loss. With ``unique_tokens`` U the
    runs repeat a corpus of U tokens and follow the data-constrained law at the law's ``r_star``
    (``data_limit``).
    """
    law = dict(DEFAULT_LAW if law is None else law)
    loss_of = law_loss
    if unique_tokens is not None:
        law["U"] = unique_tokens
        loss_of = data_limited_loss
    rng = np.random.default_rng(seed)
    rows = []
    for budget in budgets:
        centre = np.log10(optimal_size(law, budget)) + offset
        for i, log_n in enumerate(np.linspace(centre - span, centre + span, sizes_per_budget)):
            n = 10.0 ** log_n
            d = budget / (6.0 * n)
            seen = d * np.geomspace(0.02, 1.0, curve_points)
            curve_loss = loss_of(law, n, seen) * np.exp(rng.normal(0.0, noise, curve_points))
            loss = float(loss_of(law, n, d) * np.exp(rng.normal(0.0, noise)))
            rows.append({"run_id": f"b{budget:.0e}-s{i}", "model": "synthetic", "size": int(n), "params": n,
                         "tokens": d, "flops": budget, "budget": budget, "loss": loss, "status": "done",
                         "curve": [[float(t), float(v)] for t, v in zip(seen, curve_loss, strict=True)]})
    return pd.DataFrame(rows)


__all__ = ["DEFAULT_LAW", "law_loss", "optimal_size", "synthetic_runs"]
