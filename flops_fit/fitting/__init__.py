"""Scaling-law fitting: Chinchilla approaches 1-3 with bootstrap intervals, predictions, reports.

``fit(source, method=...)`` is the entry point; ``source`` is a DataFrame, a CSV file or a
sweep output folder.
"""

from __future__ import annotations

from typing import Any

from flops_fit.errors import FitInputError
from flops_fit.fitting.fit_set import FitSet
from flops_fit.fitting.inputs import Runs, load_runs
from flops_fit.fitting.result import FitResult

METHODS = ("envelope", "isoflop", "parametric", "vpnls")
LOAD_OPTIONS = ("params_col", "tokens_col", "flops_col", "loss_col", "budget_col", "curve_col", "run_id_col",
                "exclude_top", "flops_per_param_token")


def fit(source: Any, method: str = "parametric", *, bootstrap: int = 1000, seed: int | None = 0,
        level: float = 0.95, curve: str = "parabola", **options: Any) -> FitResult | FitSet:
    """Fit runs with one approach (a FitResult) or ``method="all"`` (a FitSet of those that apply).

    Methods: "envelope" (Approach 1, needs curves), "isoflop" (Approach 2; ``curve`` is
    "parabola", "huber" or "akima"), "parametric" (Approach 3), "vpnls" (Approach 3 by variable
    projection). ``options`` are ``load_runs`` arguments: column names and ``exclude_top``.
    """
    unknown = sorted(set(options) - set(LOAD_OPTIONS))
    if unknown:
        raise FitInputError(f"unknown option(s) {', '.join(unknown)}; fit() accepts {', '.join(LOAD_OPTIONS)}")
    if method not in METHODS + ("all",):
        raise FitInputError(f"unknown method {method!r}; choose one of {', '.join(METHODS)} or 'all'")
    if not 0 < level < 1:
        raise FitInputError(f"level must lie strictly between 0 and 1 (e.g. 0.95), got {level!r}")
    runs = source if isinstance(source, Runs) else load_runs(source, **options)
    settings = {"bootstrap": bootstrap, "seed": seed, "level": level}
    if method != "all":
        return _run(method, runs, settings, curve)
    results, skipped = {}, {}
    for name in METHODS:
        try:
            results[name] = _run(name, runs, settings, curve)
        except FitInputError as exc:
            skipped[name] = str(exc)
    if not results:
        raise FitInputError("no method could fit these runs: " + "; ".join(f"{m}: {w}" for m, w in skipped.items()))
    return FitSet(results, skipped)


def _run(method: str, runs: Runs, settings: dict[str, Any], curve: str) -> FitResult:
    if method == "envelope":
        from flops_fit.fitting.envelope import fit_envelope

        return fit_envelope(runs, **settings)
    if method == "isoflop":
        from flops_fit.fitting.isoflop import fit_isoflop

        return fit_isoflop(runs, curve=curve, **settings)
    from flops_fit.fitting.parametric import fit_parametric, fit_vpnls

    return (fit_parametric if method == "parametric" else fit_vpnls)(runs, **settings)


__all__ = ["METHODS", "FitInputError", "FitResult", "FitSet", "Runs", "fit", "load_runs"]
