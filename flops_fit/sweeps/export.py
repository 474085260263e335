"""A plan for a scheduler of the lab's own: ``flops-fit plan SPEC --json`` / ``--csv``.

Each planned run is one record: its id (what ``flops-fit record OUT RUN_ID`` takes back),
every field of its ``RunSpec`` and its FLOPs. JSON keeps the plan's settings beside the runs;
CSV is one row per run, the model's and dataset's configurations as JSON text in their cells.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

COLUMNS = ("run_id", "model", "size", "params", "budget", "tokens", "flops", "steps", "batch_size", "seq_len", "lr",
           "lr_source", "schedule", "cooldown_start", "warmup_steps", "seed", "dataset")  # first, in this order


def run_rows(plan: Any) -> list[dict[str, Any]]:
    """One dict per planned run: its spec's fields and its FLOPs."""
    return [{**run.to_dict(), "flops": run.flops} for run in plan.runs]


def plan_json(plan: Any) -> str:
    return json.dumps({"unit": plan.unit, "settings": plan.settings, "runs": run_rows(plan)}, indent=1,
                      sort_keys=False, default=str) + "\n"


def plan_csv(plan: Any) -> str:
    rows = run_rows(plan)
    rest = sorted({k for r in rows for k in r} - set(COLUMNS))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[*COLUMNS, *rest], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v
                         for k, v in row.items()})
    return out.getvalue()
