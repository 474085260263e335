"""The executor's task: one run, a WSD family's branches in token order, or same-shape runs
trained together (``training.stacked``), in one worker.

A family's branches share their stable phase (``RunSpec.family``), so they run together,
shortest first, and each is recorded as an ordinary run: each branch takes over the
stable state the branch before it reached at its own cooldown start, trains the stable
phase on to its own cooldown start, and cools down. Its result is the one it would have
trained from scratch: the stable phase's learning rate does not depend on a run's length,
and data order and initialisation are seeded (tests/test_wsd.py checks it bit for bit).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from flops_fit.errors import OptionError
from flops_fit.executors.base import ProgressSink, ignore_progress
from flops_fit.store.runs import RunResult
from flops_fit.tracking.base import RunTracker
from flops_fit.tracking.options import Destination
from flops_fit.training.checkpoint import (
    Checkpointer,
    CheckpointPolicy,
    load_result,
    save_result,
    stable_start,
)
from flops_fit.training.command import TrainCommand
from flops_fit.training.external import train_external
from flops_fit.training.launch import processes_per_run, run_ranks
from flops_fit.training.loop import train
from flops_fit.training.stacked import (
    Stack,
    StackedFamilies,
    stack_items,
    train_stack,
    train_stacked_families,
)
from flops_fit.training.state import Snapshot
from flops_fit.training.strategies import OneProcess
from flops_fit.training.wsd import Family, executed_flops, families

# What a step costs beyond its FLOPs (kernel launches, the optimizer, Python), in the FLOPs that
# would take as long: on the 2-core CPU the demo's steps took ~28 ms plus their FLOPs at ~3.4e10
# FLOP/s (its WSD families' per-step times, benchmarks/results/demo_time.json), so about 1e9. Only the
# order of the families depends on it: the smallest models' many cheap steps outlast their FLOPs.
STEP_OVERHEAD_FLOPS = 1e9


def work_items(runs: list[Any], stack: int = 1, later: list[Any] = ()) -> list[Any]:
    """What the executor runs: cosine runs as they are (plan order), WSD runs grouped into
    families, the longest family first so that parallel workers finish together (a family's
    length: its executed FLOPs plus a fixed cost per step, since a small model's many cheap steps
    take longer than its FLOPs say); with ``stack`` > 1, up to that many runs (or families) that
    differ only in learning rate or seed in one program (``training.stacked``). ``later``: the
    planned runs a later batch trains (``Family.waypoints``)."""
    cosine = [r for r in runs if r.schedule != "wsd"]
    cost = executed_flops(runs)

    def length(family: Family) -> float:
        return sum(cost[r.run_id] * (1 + STEP_OVERHEAD_FLOPS * r.steps / (r.tokens * r.flops_per_unit))
                   for r in family.runs)

    grouped = sorted(families((r for r in runs if r.schedule == "wsd"), later), key=lambda f: -length(f))
    return stack_items([*grouped, *cosine], stack)


def train_item(item: Any, progress: ProgressSink = ignore_progress, *, host: Any = None,
               checkpoints: CheckpointPolicy | None = None, tracking: Destination | None = None,
               trainer: TrainCommand | None = None) -> Any:
    """The executor's task: a family's list of outcomes, or one run's result. A run of
    ``processes_per_run = k > 1`` trains on k ranks, launched here or by an outside launcher
    (the three cases are ``training.launch``'s); the ranks other than 0 return None. With a
    ``trainer`` (the ``[train]`` command) the user's script trains each run instead
    (``training.external``; it launches its own processes), a family's branches one by one."""
    if trainer is not None:
        if isinstance(item, (Family, Stack, StackedFamilies)):  # the script trains each run on its own
            return [train_script(spec, trainer, progress, checkpoints=checkpoints, tracking=tracking)
                    for spec in item.runs]
        return train_script(item, trainer, progress, checkpoints=checkpoints, tracking=tracking)
    if processes_per_run(item) == 1:
        return train_part(item, progress, OneProcess(), host=host, checkpoints=checkpoints, tracking=tracking)
    if host is not None:
        raise OptionError("a custom host= cannot reach the processes of a run with processes_per_run > 1: "
                          "register the plugins through entry points or FLOPS_FIT_PLUGINS instead")
    return run_ranks(functools.partial(train_part, checkpoints=checkpoints, tracking=tracking), item, progress)


def train_script(spec: Any, trainer: TrainCommand, progress: ProgressSink = ignore_progress, *,
                 checkpoints: CheckpointPolicy | None = None, tracking: Destination | None = None) -> RunResult:
    """One run trained by the ``[train]`` command, then logged to the sweep's trackers as flops-fit's own
    runs are (its spec, the curve its script reported, its result): the script knows nothing of them, and a
    tracker folder of runs the script trained would hold the sweep's plan alone."""
    result = train_external(spec, trainer, progress, checkpoints=checkpoints)
    if tracking is not None:
        with RunTracker(tracking, spec) as tracker:
            tracker.begin(0, [(int(t), {"train/loss": v}) for t, v in result.curve if math.isfinite(t)])
            tracker.finish(result)
    return result


def train_part(item: Any, progress: ProgressSink, parallel: OneProcess, *, host: Any = None,
               checkpoints: CheckpointPolicy | None = None, tracking: Destination | None = None) -> Any:
    """This process's part of an item (all of it on one process); only the writer tracks it."""
    tracking = tracking if parallel.writer else None
    if isinstance(item, Stack):
        return train_stack(item, progress, host=host, checkpoints=checkpoints, tracking=tracking)
    if isinstance(item, StackedFamilies):
        return train_stacked_families(item, progress, host=host, checkpoints=checkpoints, tracking=tracking)
    if isinstance(item, Family):
        return train_family(item, progress, host=host, checkpoints=checkpoints, tracking=tracking, parallel=parallel)
    return train_tracked(item, progress, tracking=tracking, host=host, checkpoints=checkpoints, parallel=parallel)


def train_tracked(spec: Any, progress: ProgressSink = ignore_progress, *, tracking: Destination | None = None,
                  checkpoints: CheckpointPolicy | None = None, parallel: OneProcess | None = None,
                  **options: Any) -> RunResult:
    """``train`` with the run tracked at ``tracking`` (its spec, curve and result; a run that
    raises is closed as failed, or interrupted on a stop); with ``checkpoints``, its result is
    also left beside its checkpoints (``save_result``, by the writing process) until the driver
    has stored it."""
    parallel = parallel or OneProcess()
    if tracking is None:
        result = train(spec, progress, checkpoints=checkpoints, parallel=parallel, **options)
    else:
        with RunTracker(tracking, spec) as tracker:
            result = train(spec, progress, tracker=tracker, checkpoints=checkpoints, parallel=parallel, **options)
            tracker.finish(result)
    if checkpoints is not None and parallel.writer:
        save_result(checkpoints.run_dir(spec.run_id), result)
    return result


def recover_results(specs: list[Any], checkpoints: CheckpointPolicy | None) -> list[RunResult]:
    """Results that runs of ``specs`` finished and saved (``save_result``) but the driver never
    stored: their task died before it returned (a family's later branch, a lost worker)."""
    if checkpoints is None:
        return []
    found = (load_result(checkpoints.run_dir(spec.run_id), spec.run_id) for spec in specs)
    return [result for result in found if result is not None]


def item_outcomes(item: Any, outcome: Any) -> list[tuple[Any, Any]]:
    """(spec, outcome) per run of what the executor returned for ``item``."""
    return branch_outcomes(item, outcome) if hasattr(item, "runs") else [(item, outcome)]


def stable_folders(item: Any) -> list[str]:
    """The WSD families whose stable states ``item`` keeps (removed once its runs are stored)."""
    if isinstance(item, Family):
        return [item.run_id]
    return [f.run_id for f in item.families] if isinstance(item, StackedFamilies) else []


def train_family(family: Family, progress: ProgressSink = ignore_progress, *, host: Any = None,
                 checkpoints: CheckpointPolicy | None = None, tracking: Destination | None = None,
                 parallel: OneProcess | None = None) -> list[Any]:
    """Train each branch of ``family`` in token order, each from the stable state the
    branch before it reached at its own cooldown start (the first from scratch); a list
    with one ``RunResult`` (or the exception it raised) per branch, in the family's order.

    With ``checkpoints``, each stable state is also saved in the family's folder and each
    finished branch's result beside its checkpoints, so a family killed at any point goes
    on from there: finished branches are not trained again, the next one starts from the
    saved stable state (or its own newer checkpoint). The stable phase is also saved at the
    family's ``waypoints`` and kept there: a later batch's branch starts from it (the driver
    removes the folder once no planned branch of the family is left)."""
    writer = parallel is None or parallel.writer
    stable = checkpoints and Checkpointer(checkpoints.run_dir(family.run_id), family.run_id, writer=writer)
    latest: list[Snapshot] = []  # the newest stable phase, kept while the next branch needs it

    def keep(snapshot: Snapshot) -> None:
        latest[:] = [snapshot]
        if stable:
            stable.save_stable(snapshot, family.waypoints)

    outcomes: list[Any] = []
    for spec in family.runs:
        if checkpoints and (finished := load_result(checkpoints.run_dir(spec.run_id), spec.run_id)):
            outcomes.append(finished)
            continue
        start = stable_start(spec.cooldown_start, latest[0] if latest else None, stable or None)
        try:
            outcome = train_tracked(spec, progress, tracking=tracking, host=host, checkpoints=checkpoints,
                                    start=start, on_stable=keep, stable_at=family.waypoints, parallel=parallel)
        except Exception as exc:  # noqa: BLE001 - a failed branch is a result; the family goes on
            outcome = exc
        outcomes.append(outcome)
    return outcomes


def branch_outcomes(family: Any, outcome: Any) -> list[tuple[Any, Any]]:
    """(spec, outcome) per run from what the executor returned for a family (or runs trained
    together): the runs' own outcomes, or the task's failure (a lost worker) for each run."""
    if isinstance(outcome, list) and len(outcome) == len(family.runs):
        return list(zip(family.runs, outcome, strict=True))
    if isinstance(outcome, RunResult):
        outcome = RuntimeError(f"a task of {len(family.runs)} runs returned one result")
    return [(spec, outcome) for spec in family.runs]
