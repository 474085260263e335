"""Tracking a sweep: each flops-fit run, and the sweep itself, as one tracked run on every
backend of its ``Destination``.

``Trackers`` fans each call out to the backends and isolates them: a backend that fails to
import, open or write is reported once (``TrackingWarning``) and switched off for the rest of
the sweep in that process; tracking never stops a sweep. ``RunTracker`` is what a training
run logs (its spec, its curve as it trains, its held-out metrics); ``SweepTracker`` what the
driver logs (the plan, then how the runs ended); ``log_fit`` what a fit adds to the sweep's
run (fitted parameters with intervals, and predictions).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from flops_fit.errors import TrackingWarning
from flops_fit.tracking.mlflow_backend import MlflowTracker
from flops_fit.tracking.options import (
    SWEEP_KEY,
    Destination,
    TrackedRun,
    destination,
    parse_tracking,
)
from flops_fit.tracking.tensorboard_backend import TensorBoardTracker
from flops_fit.tracking.wandb_backend import WandbTracker


class Tracker(Protocol):
    """One tracked run on one backend, opened as ``cls(destination, run, restart_at)``.
    ``restart_at`` (for training runs) is the first step this attempt logs: what an earlier
    attempt of the same run logged from there on is superseded, as far as the backend allows.
    None (the sweep's run) adds to what is there."""

    def log_params(self, params: Mapping[str, Any]) -> None: ...

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_text(self, name: str, text: str, step: int = 0) -> None: ...

    def close(self, status: str) -> None: ...  # "done", "failed" or "interrupted"


OPENERS: dict[str, Callable[[Destination, TrackedRun, int | None], Tracker]] = {
    "tensorboard": TensorBoardTracker,
    "mlflow": MlflowTracker,
    "wandb": WandbTracker,
}
_SWITCHED_OFF: set[tuple[str, str]] = set()  # (sweep id, backend) that failed in this process


def _switch_off(destination: Destination, backend: str, action: str, exc: Exception) -> None:
    """Warn once about ``backend`` failing in this sweep, and keep it off from now on."""
    if (destination.sweep_id, backend) in _SWITCHED_OFF:
        return
    _SWITCHED_OFF.add((destination.sweep_id, backend))
    reason = (str(exc).strip().splitlines() or [""])[0][:300]
    hint = "; install it with pip install 'flops-fit[tracking]'" if isinstance(exc, ImportError) else ""
    warnings.warn(f"tracking backend {backend!r} failed to {action} ({type(exc).__name__}: {reason}){hint}; "
                  "it is switched off and flops-fit goes on without it", TrackingWarning, stacklevel=4)


class Trackers:
    """One run tracked on every working backend of ``destination``."""

    def __init__(self, destination: Destination, run: TrackedRun, restart_at: int | None = None) -> None:
        self.destination = destination
        self.handles: dict[str, Tracker] = {}
        for backend in destination.backends:
            if (destination.sweep_id, backend) not in _SWITCHED_OFF:
                self._guard(backend, "open its run",
                            lambda b=backend: self.handles.__setitem__(b, OPENERS[b](destination, run, restart_at)))

    @property
    def backends(self) -> list[str]:
        """The backends still working."""
        return list(self.handles)

    def _guard(self, backend: str, action: str, call: Callable[[], Any]) -> None:
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - a tracking failure never stops a sweep
            self.handles.pop(backend, None)
            _switch_off(self.destination, backend, action, exc)

    def _each(self, action: str, call: Callable[[Tracker], Any]) -> None:
        for backend, handle in list(self.handles.items()):
            self._guard(backend, action, lambda h=handle: call(h))

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._each("log parameters", lambda h: h.log_params(params))

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        clean = {k: float(v) for k, v in metrics.items() if v is not None}
        self._each("log metrics", lambda h: h.log_metrics(clean, int(step)))

    def log_text(self, name: str, text: str, step: int = 0) -> None:
        self._each(f"log {name}", lambda h: h.log_text(name, text, int(step)))

    def close(self, status: str) -> None:
        self._each("close its run", lambda h: h.close(status))
        self.handles.clear()


def _status(exc: BaseException | None) -> str:
    if exc is None:
        return "done"
    return "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"


def flat_params(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as ``a.b`` keys, lists as JSON: what every backend takes as parameters."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping) and value:
            out.update(flat_params(value, f"{prefix}{key}."))
        elif isinstance(value, (list, tuple, Mapping)):
            out[f"{prefix}{key}"] = json.dumps(value, default=str)
        else:
            out[f"{prefix}{key}"] = value
    return out


# --------------------------------------------------------------- one training run
def run_name(spec: Any) -> str:
    return f"{spec.model} size {spec.size} budget {spec.budget:.3g} ({spec.run_id[:8]})"


class RunTracker:
    """A training run on every backend: its spec, its curve as it trains (step = tokens
    seen), its held-out metrics when it ends. The trainer calls ``begin`` once the attempt
    knows where it starts and ``point`` at each curve point; ``finish`` logs the result."""

    def __init__(self, destination: Destination, spec: Any) -> None:
        self.destination, self.spec = destination, spec
        self.trackers: Trackers | None = None

    def begin(self, tokens: int, points: Iterable[tuple[int, Mapping[str, float]]] = ()) -> None:
        """Open the run's trackers for an attempt that starts ``tokens`` in, with the curve
        ``points`` so far (restored from a checkpoint, or a WSD family's stable phase)."""
        points = list(points)
        restart_at = points[0][0] if points else tokens + 1
        spec = self.spec
        run = TrackedRun(spec.run_id, run_name(spec), "run", {"flops_fit.run_id": spec.run_id})
        self.trackers = Trackers(self.destination, run, restart_at)
        self.trackers.log_params(flat_params({**spec.to_dict(), "flops": spec.flops, "family": spec.family}))
        for step, metrics in points:
            self.trackers.log_metrics(metrics, step)

    def point(self, tokens: int, metrics: Mapping[str, float]) -> None:
        if self.trackers is not None:
            self.trackers.log_metrics(metrics, tokens)

    def finish(self, result: Any) -> None:
        """Log the held-out metrics, tokens, FLOPs and timings of ``result``, and close."""
        if self.trackers is None:
            self.begin(0)
        metrics = {"eval/loss": result.loss, "eval/bpb": result.bpb, "eval/top1_error": result.top1_error,
                   "run/tokens": result.tokens, "run/flops": result.flops,
                   "run/steps": result.steps, "run/failed": float(result.status != "done"),
                   **{(f"time/{k}" if k.endswith("_s") else f"run/{k}"): v for k, v in result.timings.items()}}
        if result.tokens and result.timings.get("train_s"):
            metrics["time/tokens_per_s"] = result.tokens / result.timings["train_s"]
        self.trackers.log_metrics({k: v for k, v in metrics.items() if not math.isnan(v)}, result.tokens)
        if result.error:
            self.trackers.log_text("error.txt", result.error, result.tokens)
        self.close(result.status)

    def close(self, status: str) -> None:
        if self.trackers is not None:
            self.trackers.close(status)
            self.trackers = None

    def __enter__(self) -> RunTracker:
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        self.close(_status(exc))


# ------------------------------------------------------------------ the sweep's run
def sweep_run(destination: Destination) -> TrackedRun:
    return TrackedRun(SWEEP_KEY, destination.sweep_name, "sweep")


def sweep_destination(meta: Mapping[str, Any], folder: Any, options: Any = None) -> Destination | None:
    """A sweep folder's tracking from its store's meta table (``spec``, ``created``), or
    ``options`` (anything ``parse_tracking`` takes) instead of the recorded ones; None
    without tracking."""
    if options is None:
        options = (meta.get("spec") or {}).get("tracking")
    options = parse_tracking(options)
    if options is None:
        return None
    return destination(options, folder, f"sweep created at {meta.get('created')!r}")


class SweepTracker:
    """The driver's tracking of a sweep: the plan when it is new, how the runs ended, and
    the destination its runs log to (the backends that opened here)."""

    def __init__(self, destination: Destination | None, plan: Any, *, new: bool,
                 counts: Mapping[str, int] | None = None) -> None:
        self.finished_before = _finished(counts or {})
        self.trackers = Trackers(destination, sweep_run(destination)) if destination else None
        self.runs_destination = destination and destination.without(
            [b for b in destination.backends if b not in self.trackers.backends])
        if self.trackers is not None and new:
            self.trackers.log_params(flat_params(plan.settings))
            self.trackers.log_metrics({"plan/runs": len(plan.runs), "plan/flops": plan.total_flops,
                                       "plan/cosine_flops": plan.cosine_flops}, 0)
            self.trackers.log_text("plan.txt", str(plan))
            self.trackers.log_text("plan.json", json.dumps(plan.to_dict(), indent=1, default=str))

    def finished(self, counts: Mapping[str, int]) -> None:
        """Log how many runs are done and failed (step: finished runs), unless no run finished
        since the sweep started (a resume with nothing left adds no repeated step)."""
        finished = _finished(counts)
        if self.trackers is not None and finished != self.finished_before:
            self.trackers.log_metrics({f"sweep/runs_{s}": counts.get(s, 0) for s in FINISHED}, sum(finished.values()))

    def __enter__(self) -> SweepTracker:
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self.trackers is not None:
            self.trackers.close(_status(exc))


FINISHED = ("done", "failed")


def _finished(counts: Mapping[str, int]) -> dict[str, int]:
    return {s: counts.get(s, 0) for s in FINISHED}


def budget_label(budget: float) -> str:
    """``3.16e+20`` -> ``C_3.16e20``: a metric-name-safe budget."""
    return "C_" + f"{budget:.3g}".replace("+", "")


PREDICTED = ("N_opt", "D_opt", "loss", "tokens_per_param")


def fit_metrics(data: Mapping[str, Any]) -> dict[str, float]:
    """The fitted parameters (with interval bounds) and predictions of ``to_dict()`` of a
    FitResult or FitSet, as ``fit/METHOD/PARAM[_lo|_hi]`` and
    ``predict/METHOD/C_BUDGET/QUANTITY[_lo|_hi]`` metrics."""
    results = data["results"] if "results" in data else {data["method"]: data}
    out: dict[str, float] = {}
    for method, result in results.items():
        for name, values in result["params"].items():
            for suffix, key in (("", "estimate"), ("_lo", "lo"), ("_hi", "hi")):
                out[f"fit/{method}/{name}{suffix}"] = values.get(key)
        for row in result["table"]:
            for quantity in PREDICTED:
                for suffix in ("", "_lo", "_hi"):
                    out[f"predict/{method}/{budget_label(row['budget'])}/{quantity}{suffix}"] = \
                        row.get(quantity + suffix)
    return {k: v for k, v in out.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def log_fit(fitted: Any, destination: Destination, budgets: Any = None) -> list[str]:
    """Log a fit (a FitResult or FitSet) to its sweep's run: parameters with intervals and
    predictions as metrics at step = runs fitted, the summary and the JSON as text. Returns
    the backends that logged it."""
    trackers = Trackers(destination, sweep_run(destination))
    data = fitted.to_dict(budgets)
    step = len(fitted.runs)
    trackers.log_metrics(fit_metrics(data), step)
    trackers.log_text("fit.txt", fitted.summary(budgets), step)
    trackers.log_text("fit.json", fitted.to_json(budgets), step)
    logged = trackers.backends
    trackers.close("done")
    return logged
