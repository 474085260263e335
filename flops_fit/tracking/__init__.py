"""Experiment tracking: TensorBoard, MLflow and W&B logs of every run and of the sweep
(docs/guide/tracking.md). Each backend imports its library only when a sweep uses it."""

from flops_fit.tracking.base import (
    OPENERS,
    RunTracker,
    SweepTracker,
    Tracker,
    Trackers,
    log_fit,
    sweep_destination,
)
from flops_fit.tracking.options import (
    BACKENDS,
    Destination,
    TrackingOptions,
    destination,
    parse_tracking,
)

__all__ = ["BACKENDS", "OPENERS", "Destination", "RunTracker", "SweepTracker", "Tracker", "Trackers",
           "TrackingOptions", "destination", "log_fit", "parse_tracking", "sweep_destination"]
