"""Weights & Biases: one W&B run per tracked run, grouped by sweep, in the project named
``experiment`` (default: the sweep folder's name).

Offline unless the user chose otherwise (``wandb_mode`` or ``WANDB_MODE``): the runs are
written under ``DIR/wandb`` and ``wandb sync`` uploads them later. Run ids are derived from
the sweep and the run, so an attempt that continues a run resumes the same W&B run; W&B
offline cannot see what the earlier attempt logged, so the points between its last
checkpoint and the kill may appear twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flops_fit.tracking.options import Destination, TrackedRun

STATUS_EXIT_CODES = {"done": 0}


def run_id(destination: Destination, run: TrackedRun) -> str:
    return f"{destination.sweep_id}-{run.key}"


class WandbTracker:
    name = "wandb"

    def __init__(self, destination: Destination, run: TrackedRun, restart_at: int | None) -> None:
        import wandb

        Path(destination.dir).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=destination.experiment, name=run.name, id=run_id(destination, run), group=destination.sweep_name,
            job_type=run.kind, tags=[run.kind], dir=destination.dir, mode=destination.wandb_mode, resume="allow",
            reinit="create_new", settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
        )

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.run.config.update(dict(params), allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_text(self, name: str, text: str, step: int = 0) -> None:
        Path(self.run.dir, name).write_text(text)  # files in the run's folder are synced with it

    def close(self, status: str) -> None:
        self.run.finish(exit_code=STATUS_EXIT_CODES.get(status, 1))
