"""What every tracker reader returns: one run's id, status, parameters, metrics and histories."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrackedRun:
    run_id: str
    status: str | None  # "finished" for a run that ended well; None: the tracker records none
    params: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)  # final values (numbers; W&B's text kept as logged)
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # name -> (step, value)
    name: str | None = None  # the name the tracker shows, where the reader makes it the id itself (``unique_names``)
    group: str | None = None  # the W&B project the run was logged to: runs of several read together are told apart


def flat(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested parameters as one level, keys joined by '.' (``{"optim": {"lr": 1}}`` -> ``optim.lr``)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def unique_names(names: list[str], ids: list[str]) -> list[str]:
    """Each run's display name as its id, a name several runs share followed by the tracker's own id
    (``baseline (3f2a9c1e)``): runs named alike were one id, so two runs read as one, or one was lost."""
    shared = {name for name, n in Counter(names).items() if n > 1}
    return [f"{name} ({own})" if name in shared else name for name, own in zip(names, ids, strict=True)]
