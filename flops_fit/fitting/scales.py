"""The scale a law is fitted on: total parameters, non-embedding parameters, or FLOPs per token.

Chinchilla fits total parameters N; Kaplan et al. (2020) non-embedding parameters; DeepSeek
LLM (2024) M, the non-embedding training FLOPs per token (attention's context term included,
the embedding and output head left out), with C = M D. At small sizes the embedding is a
large share of N (a byte vocabulary at widths 6-60: up to half), which bends a law fitted on
N. ``rescale`` puts the chosen scale in the runs' ``params`` column, so every method fits it
unchanged; N_opt is then in that scale's units, and ``to_params`` maps it back to parameters
along the runs' own sizes.
"""

from __future__ import annotations

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.fitting.inputs import Runs
from flops_fit.plugin import api

SCALES = {
    "params": "parameters",
    "non_embedding_params": "non-embedding parameters",
    "flops_per_token": "non-embedding training FLOPs per token (M)",
}
# A table column's name for N_opt on each scale: a non-embedding fit's sizes read as "params" were no model's
COLUMN_NAMES = {"params": "params", "non_embedding_params": "non-embedding params", "flops_per_token": "M"}
_COLUMNS = {"non_embedding_params": "embedding_params", "flops_per_token": "non_embedding_flops_per_unit"}


def check_scale(scale: str) -> str:
    if scale not in SCALES:
        raise FitInputError(f"scale must be one of {', '.join(SCALES)}; got {scale!r}")
    return scale


def _column(runs: Runs, name: str) -> np.ndarray:
    """A per-run count the store records, or the model entry's analytic value for runs stored
    before it did; FitInputError naming the runs that have neither."""
    f = runs.frame
    values = f[name].to_numpy(float, copy=True) if name in f else np.full(len(f), np.nan)
    for i in np.flatnonzero(~np.isfinite(values)):
        row = f.iloc[i]
        try:
            entry = api.model_info(str(row["model"]))
            config = row["model_config"] if isinstance(row.get("model_config"), dict) else {}
            method = entry.embedding_param_count if name == "embedding_params" else entry.non_embedding_flops_per_unit
            value = method(int(row["size"]), **config)
        except (KeyError, LookupError, TypeError, ValueError):
            value = None
        values[i] = np.nan if value is None else value
    if not np.isfinite(values).all():
        raise FitInputError(
            f"{runs.source}: {int((~np.isfinite(values)).sum())} run(s) have no {name} (a CSV needs a {name!r} "
            "column; a sweep's model must report it); fit with scale='params'")
    return values


def rescale(runs: Runs, scale: str) -> Runs:
    """The runs with their ``params`` column replaced by ``scale`` (the original kept as ``total_params``)."""
    check_scale(scale)
    if scale == runs.scale:
        return runs
    if runs.scale != "params":
        raise FitInputError(f"these runs are already on scale {runs.scale!r}; load them again to use {scale!r}")
    frame = runs.frame.copy()
    frame["total_params"] = frame["params"]
    if scale == "non_embedding_params":
        frame["params"] = frame["params"] - _column(runs, "embedding_params")
    else:
        frame["params"] = _column(runs, "non_embedding_flops_per_unit")
    if not (frame["params"] > 0).all():
        raise FitInputError(f"{runs.source}: scale {scale!r} is not positive for every run")
    return runs.derived(frame, scale=scale)


def to_params(runs: Runs, values: np.ndarray) -> np.ndarray:
    """Values of the runs' scale as total parameters, interpolated (log-log, extrapolated
    linearly beyond the ends) along the runs' own (scale, parameters) pairs."""
    values = np.asarray(values, dtype=float)
    if runs.scale == "params":
        return values
    pairs = runs.frame.groupby("params")["total_params"].first()
    x, y = np.log(pairs.index.to_numpy(float)), np.log(pairs.to_numpy(float))
    if x.size == 1:
        return values * float(np.exp(y[0] - x[0]))
    lx = np.log(values)
    slope_lo = (y[1] - y[0]) / (x[1] - x[0])
    slope_hi = (y[-1] - y[-2]) / (x[-1] - x[-2])
    inside = np.interp(lx, x, y)
    out = np.where(lx < x[0], y[0] + slope_lo * (lx - x[0]), np.where(lx > x[-1], y[-1] + slope_hi * (lx - x[-1]), inside))
    return np.exp(out)


__all__ = ["COLUMN_NAMES", "SCALES", "check_scale", "rescale", "to_params"]
