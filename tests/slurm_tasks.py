"""Task functions for the SLURM executor's tests: jobs import them by name (the tests put
this folder on the jobs' PYTHONPATH)."""

from __future__ import annotations

import os
import time


class Spec:
    """A stand-in for a run: what executors read from one (its id, device, processes)."""

    def __init__(self, run_id, folder, processes_per_run=1, device="cpu"):
        self.run_id, self.folder = run_id, folder
        self.processes_per_run, self.device = processes_per_run, device


DISTRIBUTED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def distributed_environment(spec, progress):
    """What a run on several processes sees: each rank writes its torch.distributed variables
    to a file; as flops-fit's distributed runs do, rank 0 returns the outcome, the others None."""
    import json
    from pathlib import Path

    seen = {name: os.environ.get(name) for name in DISTRIBUTED}
    Path(spec.folder, f"rank-{seen['RANK']}.json").write_text(json.dumps(seen))
    progress(spec.run_id, 1, 1, float(seen["RANK"]))
    return f"rank {seen['RANK']} of {seen['WORLD_SIZE']}" if seen["RANK"] == "0" else None


def report_then_block(item, progress):
    """Say the run started (and this process's id), then train forever (until cancelled)."""
    progress(f"pid-{os.getpid()}", 0, 10, float("nan"))
    while True:
        time.sleep(60)
