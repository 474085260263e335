"""TensorBoard: one log folder per tracked run, ``DIR/tensorboard/<run id>`` (the sweep's own
run in ``DIR/tensorboard/sweep``), written with PyTorch's ``SummaryWriter``.

An attempt that continues a run (after a kill) opens the folder with ``purge_step`` at the
first step it logs: TensorBoard then drops what the earlier attempt wrote from that step on,
so the curve has no repeated steps. The spec is written once per folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flops_fit.tracking.options import Destination, TrackedRun


def log_dir(destination: Destination, run: TrackedRun) -> Path:
    return Path(destination.dir, "tensorboard", run.key)


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, destination: Destination, run: TrackedRun, restart_at: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        folder = log_dir(destination, run)
        self.continued = folder.is_dir() and any(folder.glob("events.out.tfevents.*"))
        self.writer = SummaryWriter(str(folder), purge_step=restart_at if self.continued else None)

    def log_params(self, params: Mapping[str, Any]) -> None:
        if not self.continued:
            self.log_text("params.json", json.dumps(dict(params), indent=1, default=str))

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, global_step=step)

    def log_text(self, name: str, text: str, step: int = 0) -> None:
        # Markdown: four spaces make a preformatted block, so JSON and tables keep their layout.
        self.writer.add_text(name, "\n".join("    " + line for line in text.splitlines()), global_step=step)

    def close(self, status: str) -> None:
        self.writer.close()
