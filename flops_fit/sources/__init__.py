"""Runs from the experiment trackers labs already use: W&B, MLflow, TensorBoard.

Each reader (one module per tracker, its library imported inside its functions) turns what
the tracker stored into ``TrackedRun`` values: a run's id, status, parameters (config,
hyperparameters), final metrics and metric histories. ``table`` makes them one row per run,
the columns ``fitting.inputs.load_runs`` maps and validates like a CSV's; a run's training
curve is the history of ``curve_metric`` with its steps put on tokens (step / last step x the
run's tokens, so a curve logged at tokens seen stays as it is), and its learning-rate schedule
(``run_store.SCHEDULE_FIELDS``, what the whole-curve law needs) is read from its parameters
when they hold it (as flops-fit's own tracking logs them).

``read(path)`` picks the reader from what the path holds (None: not a tracker's).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.sources import mlflow_runs, tensorboard_runs, wandb_runs
from flops_fit.sources.base import TrackedRun
from flops_fit.store.run_store import SCHEDULE_FIELDS

CURVE_METRICS = ("train_loss", "train/loss")  # tried in turn when no curve_metric is named
# What flops-fit's own tracking logs on a sweep's run (the plan, how the runs ended, the fits) and
# never on a training run: that run is left out, so a sweep's tracker folder fits as its store does.
SWEEP_RUN_METRIC = "plan/runs"
# flops-fit's own training runs (``tracking.base.RunTracker``, marked by ``run/tokens``) log their spec as
# parameters, ``loss`` among them as the loss function's name, and their held-out results as eval/
# metrics: read as the sweep's store reads them (under the store's run ids; the loss function's name
# kept as ``loss_function``).
OWN_RUN_METRIC = "run/tokens"
OWN_RESULTS = {"eval/loss": "loss", "eval/bpb": "bpb", "eval/top1_error": "top1_error"}
# The schedule fields a run may leave out, at RunSpec's defaults; the rest (steps, warmup_steps,
# min_lr_ratio, batch_size, seq_len) must be logged as parameters for the whole-curve law.
SCHEDULE_DEFAULTS = {"schedule": "cosine", "cooldown_start": 0, "cooldown_shape": "1-sqrt"}


def detect(source: Any) -> str | None:
    """The tracker whose files ``source`` is ("wandb", "mlflow", "tensorboard"), or None."""
    if isinstance(source, str) and "://" in source:
        return "mlflow"
    path = Path(source)
    if path.is_file():
        return "wandb" if path.suffix == ".wandb" else None
    if not path.is_dir():
        return None
    if wandb_runs.run_files(path):
        return "wandb"
    if mlflow_runs.is_store(path):
        return "mlflow"
    if tensorboard_runs.run_folders(path):
        return "tensorboard"
    return None


def read(source: Any, *, curve_metric: str | None = None, tokens_col: str = "tokens",
         experiment: str | None = None, params_col: str = "params", flops_col: str = "flops",
         flops_per_param_token: float = 6.0) -> tuple[pd.DataFrame, str, dict[str, Any]] | None:
    """``(frame, name, metadata)`` of a tracker's runs, or None when ``source`` is no tracker's. A run
    without ``tokens_col`` has its curve put on flops / (``flops_per_param_token`` x params) tokens, as
    ``load_runs`` counts its tokens."""
    kind = detect(source)
    if kind is None:
        return None
    if kind == "wandb":
        runs = wandb_runs.read_offline(Path(source))
    elif kind == "mlflow":
        runs = mlflow_runs.read_store(source, experiment=experiment)
    else:
        runs = tensorboard_runs.read_logs(Path(source))
    name = f"{source} ({kind})"
    if not runs:
        raise FitInputError(f"{name}: no runs found; point at the folder that holds the {kind} runs")
    return table(runs, name, curve_metric=curve_metric, tokens_col=tokens_col, params_col=params_col,
                 flops_col=flops_col, flops_per_param_token=flops_per_param_token), name, {"tracker": kind}


def table(runs: list[TrackedRun], name: str, *, curve_metric: str | None, tokens_col: str, params_col: str = "params",
          flops_col: str = "flops", flops_per_param_token: float = 6.0) -> pd.DataFrame:
    """One row per training run (a flops-fit sweep's own run left out): run_id, status, its parameters,
    its final metrics and ``curve`` where ``curve_metric`` was logged. A name that is both a parameter and a
    metric is the parameter where that is a number (``lr`` configured at its peak and logged as it decays: the
    run's rate is its peak, not its last value), else the metric (a ``loss`` parameter naming the function)."""
    runs = [r for r in runs if SWEEP_RUN_METRIC not in r.metrics]
    if not runs:
        raise FitInputError(f"{name}: only a sweep's own run (its plan and fits) is logged here, no training run")
    series = {k for r in runs for k in r.series}
    wanted = curve_metric or next((m for m in CURVE_METRICS if m in series), None)
    if curve_metric and curve_metric not in series:
        raise FitInputError(f"{name}: no run logged the curve metric {curve_metric!r}; logged series: "
                            f"{', '.join(map(repr, sorted(series))) or 'none'}. Name the right one with "
                            f"curve_metric= (CLI: --curve-metric)")
    rows = []
    for r in runs:
        metrics = {k: v for k, v in r.metrics.items() if not _setting(r.params.get(k))}
        row: dict[str, Any] = {**r.params, **metrics, "run_id": r.run_id, "status": r.status}
        if OWN_RUN_METRIC in r.metrics:
            row["loss_function"], row["run_id"] = r.params.get("loss"), r.params.get("run_id", r.run_id)
            row.update({ours: r.metrics.get(logged, math.nan) for logged, ours in OWN_RESULTS.items()})
            if r.metrics.get("run/failed") == 1.0:
                row["status"] = "failed"
        points = r.series.get(wanted) if wanted else None
        if points:  # steps put on tokens: the run's own, else its FLOPs' (a run that logged params and flops only)
            tokens = _number(row.get(tokens_col))
            if math.isnan(tokens):
                flops, params = _number(row.get(flops_col)), _number(row.get(params_col))
                tokens = flops / (flops_per_param_token * params) if params > 0 and flops_per_param_token > 0 \
                    else math.nan
            row["curve"] = _on_tokens(points, tokens)
        schedule = {k: r.params.get(k, SCHEDULE_DEFAULTS.get(k)) for k in SCHEDULE_FIELDS}
        if all(v is not None for v in schedule.values()):  # what the whole-curve law reads (``curve_areas``)
            row["schedule"] = schedule
        rows.append(row)
    return pd.DataFrame(rows)


def _setting(value: Any) -> bool:
    """Whether a parameter is a finite number: a run's setting, which a metric of its name must not replace."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out if math.isfinite(out) else math.nan


def _on_tokens(points: list[tuple[float, float]], tokens: float) -> list[list[float]]:
    """(step, loss) as [tokens seen, loss]: steps scaled so the last is the run's tokens."""
    points = sorted((float(s), float(v)) for s, v in points if math.isfinite(float(v)))
    last = points[-1][0] if points else 0.0
    factor = tokens / last if last > 0 and math.isfinite(tokens) else 1.0
    return [[s * factor, v] for s, v in points if s > 0]


__all__ = ["CURVE_METRICS", "TrackedRun", "detect", "read", "table"]
