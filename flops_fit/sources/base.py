"""What every tracker reader returns: one run's id, status, parameters, metrics and histories."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrackedRun:
    run_id: str
    status: str | None  # "finished" for a run that ended well; None: the tracker records none
    params: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)  # final values
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # name -> (step, value)


def flat(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested parameters as one level, keys joined by '.' (``{"optim": {"lr": 1}}`` -> ``optim.lr``)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
