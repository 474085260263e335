"""Same-shape runs trained together: runs that differ only in learning rate or seed, in one program.

A tune cell trains one model at several rates; a seed study trains it from several seeds. Such
runs have the same shapes, steps and schedule, so one program holds them all: the data read
once (one batch for every run when they share a seed), and each step of every run taken on one
of the program's threads, which share the worker's cores (``_Lanes``). Each run steps with its
own model, optimizer and the kernels it calls alone, so its curve, held-out loss, checkpoints
and result are bit for bit the ones it gets alone at that kernel thread count
(tests/test_stacked.py). A run's checkpoint is the very file it writes alone
(``training.checkpoint``), so it resumes stacked or alone.

Why threads and not stacked parameters under ``vmap`` (the first version): at the demo's batch
(32 x 64 tokens) a CPU step is compute-bound (about 10-17% of it is per-step overhead), so
batching the runs' kernels can save at most that, and ``vmap``'s batched rules round
differently from a run's own kernels (a small GPT drifted past 1e-5 in 50 steps); run by run
inside ``vmap`` the program was 0.4-1.3x the speed of the runs one at a time
(docs/validation/compute.md). What a program of several runs can use that one small run cannot
is a second core: one run's kernels are too small to split, several runs are not.

``stack_items`` groups an executor's work items (``sweep.stack_runs`` at most per program):
cosine runs into ``Stack``s, WSD families whose branches match one to one into
``StackedFamilies`` (each branch trained stacked, each family's stable phase handed on as
``training.task`` does alone). A model whose forward draws random numbers (dropout) cannot be
stacked (the runs would draw from one generator in no fixed order): the program stops with that
reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from flops_fit.errors import Interrupted
from flops_fit.executors.base import ProgressSink, ignore_progress
from flops_fit.executors.stopping import stop_requested
from flops_fit.plugin import api
from flops_fit.plugin.contracts import TASK_INPUTS
from flops_fit.store.runs import RunResult, RunSpec
from flops_fit.tracking.base import RunTracker
from flops_fit.tracking.options import Destination
from flops_fit.training.checkpoint import (
    Checkpointer,
    CheckpointPolicy,
    load_result,
    save_result,
    stable_start,
)
from flops_fit.training.data import Batches, check_sequence_length, gather
from flops_fit.training.loop import (
    _continue,
    _Diverged,
    _report,
    _report_saved,
    _start_branch,
    _state,
    built,
    curve_point,
    resolve_device,
)
from flops_fit.training.schedules import schedule_factor
from flops_fit.training.state import Snapshot
from flops_fit.training.steps import accumulate, evaluate, make_optimizer, micro_batch_rows
from flops_fit.training.wsd import Family

FREE_FIELDS = ("lr", "seed")  # what may differ between runs trained together
# how a run is trained (not in its id) must agree too
_HOW = ("device", "compile", "micro_batch_size", "processes_per_run", "parallel")


def shape_key(spec: RunSpec) -> str:
    """What runs trained together share: every field of the id but the learning rate and seed,
    and how the run is trained."""
    return hashlib.sha256(json.dumps(_shared(spec), sort_keys=True, default=str).encode()).hexdigest()[:16]


def _shared(spec: RunSpec) -> dict[str, Any]:
    same = {k: v for k, v in spec.identity().items() if k not in FREE_FIELDS}
    same.update({k: getattr(spec, k) for k in _HOW})
    return same


def _unstackable(specs: list[RunSpec]) -> str | None:
    """Why ``specs`` cannot train in one program (none given, or the fields they differ in), or None."""
    if not specs:
        return "no runs to train together: give one or more"
    fields = [{k: json.dumps(v, sort_keys=True, default=str) for k, v in _shared(s).items()} for s in specs]
    differ = sorted({k for f in fields for k in f if any(g.get(k) != fields[0].get(k) for g in fields)})
    if not differ:
        return None
    return (f"runs trained together must differ only in learning rate and seed, but these differ in "
            f"{', '.join(differ)}: train them apart (stack_runs = 1) or give runs of one shape")


def stackable(spec: RunSpec) -> bool:
    """One process per run and no compile: the stacked program is one eager process."""
    return spec.processes_per_run == 1 and not spec.compile


@dataclass(frozen=True)
class Stack:
    """Cosine runs of one shape trained in one program; each recorded as its own run."""

    runs: tuple[RunSpec, ...]

    @property
    def run_id(self) -> str:
        return "stack-" + self.runs[0].run_id

    @property
    def device(self) -> str:
        return self.runs[0].device

    @property
    def params(self) -> int:
        return self.runs[0].params * len(self.runs)

    @property
    def together(self) -> int:
        """Runs that step at once (each on a thread of the program's: ``executors.threads``)."""
        return len(self.runs)

    @property
    def processes_per_run(self) -> int:
        return 1


@dataclass(frozen=True)
class StackedFamilies:
    """WSD families whose branches match one to one (the same lengths, one shape), trained
    branch by branch in one program; ``runs`` are every family's branches, family by family."""

    families: tuple[Family, ...]

    @property
    def runs(self) -> tuple[RunSpec, ...]:
        return tuple(r for f in self.families for r in f.runs)

    @property
    def run_id(self) -> str:
        return "stack-" + self.families[0].run_id

    @property
    def device(self) -> str:
        return self.families[0].device

    @property
    def params(self) -> int:
        return self.families[0].params * len(self.families)

    @property
    def together(self) -> int:
        """Runs that step at once: one branch of each family."""
        return len(self.families)

    @property
    def processes_per_run(self) -> int:
        return 1


def stack_items(items: list[Any], limit: int) -> list[Any]:
    """``items`` (runs and WSD families) with same-shape ones grouped, at most ``limit`` per
    program, the groups split evenly (5 runs at limit 4: 3 and 2); order of first appearance."""
    if limit <= 1:
        return list(items)
    groups: dict[Any, list[Any]] = {}
    for n, item in enumerate(items):
        runs = item.runs if isinstance(item, Family) else (item,)
        if not all(stackable(r) for r in runs) or getattr(item, "waypoints", ()):  # waypoints: trained alone
            key: Any = ("alone", n)
        elif isinstance(item, Family):
            key = ("family", tuple(shape_key(r) for r in runs))
        else:
            key = ("run", shape_key(item))
        groups.setdefault(key, []).append(item)
    out: list[Any] = []
    for key, members in groups.items():
        parts = -(-len(members) // limit)
        for k in range(parts):
            chunk = members[k * len(members) // parts:(k + 1) * len(members) // parts]
            if len(chunk) == 1:
                out.append(chunk[0])
            else:
                out.append(StackedFamilies(tuple(chunk)) if key[0] == "family" else Stack(tuple(chunk)))
    return out


# ------------------------------------------------------------------ work items
def train_stack(stack: Stack, progress: ProgressSink = ignore_progress, *, host: Any = None,
                checkpoints: CheckpointPolicy | None = None, tracking: Destination | None = None) -> list[Any]:
    """A ``Stack``'s outcomes (a ``RunResult`` or the exception, per run, in its order); runs
    whose result was saved beside their checkpoints are not trained again."""
    outcomes = _finished(stack.runs, checkpoints)
    todo = [s for s in stack.runs if s.run_id not in outcomes]
    outcomes.update(zip([s.run_id for s in todo], train_group(todo, progress, host=host, checkpoints=checkpoints,
                                                              tracking=tracking), strict=True))
    return [outcomes[s.run_id] for s in stack.runs]


def train_stacked_families(group: StackedFamilies, progress: ProgressSink = ignore_progress, *, host: Any = None,
                           checkpoints: CheckpointPolicy | None = None,
                           tracking: Destination | None = None) -> list[Any]:
    """Each branch of the families trained together, shortest first, each from its own family's
    stable state at or before its cooldown start (as ``training.task.train_family`` alone; the
    stable states saved in each family's folder); outcomes in ``group.runs``' order."""
    stable = {f.run_id: Checkpointer(checkpoints.run_dir(f.run_id), f.run_id) for f in group.families} \
        if checkpoints else {}
    latest: dict[str, Snapshot] = {}

    def keep(snapshots: list[Snapshot]) -> None:
        for snapshot in snapshots:
            latest[snapshot.loop.run_id] = snapshot
            if snapshot.loop.run_id in stable:
                stable[snapshot.loop.run_id].save_stable(snapshot)

    outcomes = _finished(group.runs, checkpoints)
    for branches in zip(*(f.runs for f in group.families), strict=True):
        todo = [s for s in branches if s.run_id not in outcomes]
        starts = [stable_start(s.cooldown_start, latest.get(s.family), stable.get(s.family)) for s in todo]
        found = train_group(todo, progress, host=host, checkpoints=checkpoints, tracking=tracking, starts=starts,
                            on_stable=keep)
        outcomes.update(zip([s.run_id for s in todo], found, strict=True))
    return [outcomes[s.run_id] for s in group.runs]


def train_group(specs: list[RunSpec], progress: ProgressSink = ignore_progress, *, host: Any = None,
                checkpoints: CheckpointPolicy | None = None, tracking: Destination | None = None,
                starts: list[Snapshot | None] | None = None,
                on_stable: Callable[[list[Snapshot]], None] | None = None) -> list[Any]:
    """Train ``specs`` (one shape) together, tracked; one outcome per spec (a result, or the
    exception that stopped the program). With ``checkpoints`` each result is also saved beside
    its checkpoints until the driver has stored it, as a run alone does."""
    if not specs:
        return []
    with contextlib.ExitStack() as opened:
        trackers = [opened.enter_context(RunTracker(tracking, s)) for s in specs] if tracking is not None else None
        try:
            results = train_stacked(specs, progress, host=host, checkpoints=checkpoints, starts=starts,
                                    on_stable=on_stable, trackers=trackers)
        except Exception as exc:  # noqa: BLE001 - the program's failure is each of its runs' outcome
            return [exc] * len(specs)
        for tracker, result in zip(trackers or [], results):
            tracker.finish(result)
    if checkpoints is not None:
        for result in results:
            save_result(checkpoints.run_dir(result.run_id), result)
    return results


def _finished(specs: tuple[RunSpec, ...] | list[RunSpec], checkpoints: CheckpointPolicy | None) -> dict[str, Any]:
    if checkpoints is None:
        return {}
    found = {s.run_id: load_result(checkpoints.run_dir(s.run_id), s.run_id) for s in specs}
    return {k: v for k, v in found.items() if v is not None}


# ------------------------------------------------------------------ the program
@dataclass
class _Run:
    """One run of the program: its spec, its own model, optimizer, data order, autocast (a
    context is entered per thread), loss per step and result; ``params`` are the trained
    parameters, listed once (as ``loop.train`` does: walking the modules every step costs a few
    percent of a small model's step)."""

    spec: RunSpec
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    batches: Batches
    losses: torch.Tensor
    result: RunResult
    autocast: Any
    saver: Checkpointer | None = None
    tracker: RunTracker | None = None
    params: list[torch.nn.Parameter] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.params = [p for p in self.model.parameters() if p.requires_grad]


class _Lanes:
    """The program's threads: each run's step or evaluation on one of them. ``lanes`` is the
    threads the worker gave the program, at most one per run; each kernel then runs on the
    worker's threads / lanes (1 on a small machine), so a run computes what it computes alone
    at that thread count while the other runs use the other cores."""

    def __init__(self, runs: int) -> None:
        self.threads = torch.get_num_threads()
        self.lanes = max(1, min(runs, self.threads))
        self.pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> _Lanes:
        if self.lanes > 1:
            per_kernel = max(1, self.threads // self.lanes)
            torch.set_num_threads(per_kernel)
            self.pool = ThreadPoolExecutor(self.lanes, thread_name_prefix="flops-fit-stacked",
                                           initializer=torch.set_num_threads, initargs=(per_kernel,))
        return self

    def map(self, fn: Callable, *iterables: Any) -> list[Any]:
        """``fn`` over the runs, in their order (the first exception raised here)."""
        return list(self.pool.map(fn, *iterables)) if self.pool else list(map(fn, *iterables))

    def __exit__(self, *exc: Any) -> None:
        if self.pool is not None:
            self.pool.shutdown()
            torch.set_num_threads(self.threads)


def _random_state(device: torch.device) -> list[torch.Tensor]:
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


def train_stacked(specs: list[RunSpec], progress: ProgressSink = ignore_progress, *, host: Any = None,
                  checkpoints: CheckpointPolicy | None = None, starts: list[Snapshot | None] | None = None,
                  on_stable: Callable[[list[Snapshot]], None] | None = None,
                  trackers: list[RunTracker] | None = None) -> list[RunResult]:
    """Train ``specs`` (one ``shape_key``) in one program; a result per spec, as ``loop.train``
    gives alone: divergence fails that run only, a stop request checkpoints every run and
    raises ``Interrupted``. Each run continues from its checkpoint at the newest step all of them
    kept (otherwise from ``starts``: its WSD family's stable states, used when all stand
    at one step, or from scratch); ``on_stable`` gets every run's stable state at the cooldown
    start. A model that draws random numbers while it trains (dropout) is refused: the runs
    would draw from one generator in no fixed order."""
    if (why := _unstackable(specs)) is not None:
        raise ValueError(why)
    t_start = time.perf_counter()
    first = specs[0]
    device = resolve_device(first.device)
    entry = api.model_info(first.model, host=host)
    input_key = TASK_INPUTS[entry.task]
    per_sample = first.seq_len if entry.flops_unit == "token" else 1
    models = []
    for spec in specs:
        torch.manual_seed(spec.seed)
        models.append(built(spec, host).to(device))
    loss_fn = api.get_loss(first.loss, host=host)
    train_data = api.create_dataset(first.dataset, "train", host=host, **first.dataset_config)
    eval_data = api.create_dataset(first.dataset, first.eval_split, host=host, **first.dataset_config)

    def autocast() -> Any:
        return (torch.autocast(device.type, dtype=torch.bfloat16) if first.precision == "bf16"
                else contextlib.nullcontext())

    lanes = _Lanes(len(specs))
    micro = micro_batch_rows(first, models[0], loss_fn, train_data, input_key, device, autocast())
    if first.micro_batch_size == "auto" and device.type == "cuda":
        micro = max(1, micro // lanes.lanes)  # the probe measured one run; the program steps several at once
    unique = first.unique_tokens or getattr(train_data, "unique_tokens", None)
    runs = [_Run(s, m, make_optimizer(m, s, device), Batches(train_data, s.seed), torch.empty(s.steps, device=device),
                 RunResult(run_id=s.run_id, status="done", device=str(device), unique_tokens=unique), autocast(),
                 Checkpointer(checkpoints.run_dir(s.run_id), s.run_id, keep=checkpoints.keep) if checkpoints else None,
                 trackers[i] if trackers else None)
            for i, (s, m) in enumerate(zip(specs, models, strict=True))]
    interval = max(1, math.ceil(first.steps / first.curve_points))
    start_step = _position(runs, starts, interval, per_sample)
    for run in runs:
        if run.tracker is not None:
            run.tracker.begin(run.result.tokens, [curve_point(run.spec, p, per_sample) for p in run.result.curve])
        progress(run.spec.run_id, run.result.tokens, run.spec.tokens, math.nan)
        run.model.train()
    shared_data = len({s.seed for s in specs}) == 1  # one data order: gathered once for every run

    def step(run: _Run, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """One optimizer step of one run, as ``loop.train`` takes it alone."""
        loss = accumulate(run.model, loss_fn, batch, input_key, micro, run.autocast)
        if run.spec.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(run.params, run.spec.grad_clip)
        run.optimizer.step()
        run.optimizer.zero_grad(set_to_none=True)
        return loss.detach().float()

    def held_out(run: _Run) -> tuple[float, float, float, float]:
        t_eval = time.perf_counter()
        scores = evaluate(run.model, eval_data, loss_fn, input_key, run.spec, device, run.autocast, per_sample)
        return (*scores, time.perf_counter() - t_eval)

    finished: list[RunResult] = []
    data_s = 0.0
    t_train = last_save = time.perf_counter()
    with lanes:
        for step_index in range(start_step, first.steps):
            if step_index == first.cooldown_start and on_stable is not None and first.schedule == "wsd":
                on_stable([Snapshot.take(_state(run.spec.family, run.result, run.batches, run.losses), run.model,
                                         run.optimizer) for run in runs])
            t0 = time.perf_counter()
            rows = min(first.batch_size, (first.tokens - runs[0].result.tokens) // per_sample)
            picks = [run.batches.indices(rows) for run in runs]
            batches = [{k: v.to(device, non_blocking=True) for k, v in gather(train_data, p).items()}
                       for p in (picks[:1] if shared_data else picks)]
            batches = batches * len(runs) if shared_data else batches
            data_s += time.perf_counter() - t0
            if step_index == start_step:
                check_sequence_length(first, batches[0][input_key])
            for run in runs:
                for group in run.optimizer.param_groups:
                    group["lr"] = run.spec.lr * schedule_factor(run.spec, step_index) * group.get("lr_scale", 1.0)
            before = _random_state(device)
            losses = lanes.map(step, runs, batches)
            if any(not torch.equal(a, b) for a, b in zip(before, _random_state(device))):
                raise ValueError(f"model {first.model!r} draws random numbers while it trains (dropout?): runs that "
                                 "do cannot be trained together; train them one at a time (stack_runs = 1)")
            stop = stop_requested()
            due = bool(checkpoints) and 0 < checkpoints.seconds <= time.perf_counter() - last_save
            going = []
            for run, loss in zip(runs, losses, strict=True):
                run.result.tokens += rows * per_sample
                run.result.steps += 1
                run.losses[step_index] = loss
                if run.result.steps % interval == 0 or step_index == first.steps - 1:
                    last = (run.result.steps - 1) // interval * interval
                    try:
                        _report(run.losses, last, run.result.steps, run.result.tokens, run.spec, run.result,
                                progress)
                    except _Diverged as exc:  # this run stops; the others go on
                        run.result.status, run.result.error = "failed", exc.error
                        finished.append(_close(run.result, run.spec, t_start, t_train, time.perf_counter(),
                                               data_s, len(specs)))
                        if checkpoints:  # kept now: its checkpoints stop here while the others' go on,
                            # and a resume after a stop skips it instead of restarting every run
                            save_result(checkpoints.run_dir(run.spec.run_id), run.result)
                        continue
                    if run.tracker is not None:
                        run.tracker.point(*curve_point(run.spec, run.result.curve[-1], per_sample))
                going.append(run)
            runs = going
            if not runs or step_index == first.steps - 1:
                break
            if checkpoints and (stop is not None or due):
                for run in runs:
                    run.saver.save(run.model, run.optimizer,
                                   _state(run.spec.run_id, run.result, run.batches, run.losses))
                    _report_saved(run.losses, run.spec, run.result, progress)  # as alone
                last_save = time.perf_counter()
            if stop is not None:
                raise Interrupted(stop, f"stopped by signal {stop}")
        t_trained = time.perf_counter()
        scores = lanes.map(held_out, runs)
    for run, (loss, bpb, top1_error, eval_s) in zip(runs, scores, strict=True):
        result = run.result
        result.loss, result.bpb, result.top1_error = loss, bpb, top1_error
        if not math.isfinite(result.loss):
            result.status, result.error = "failed", f"diverged: held-out loss is {result.loss} after training"
        weights = checkpoints and checkpoints.weights_path(run.spec.run_id)
        if weights and result.status == "done":
            run.saver.save_weights(weights, run.model)
        result.timings["eval_s"] = eval_s
        finished.append(_close(result, run.spec, t_start, t_train, t_trained, data_s, len(specs)))
    order = {s.run_id: n for n, s in enumerate(specs)}
    return sorted(finished, key=lambda r: order[r.run_id])


def _position(runs: list[_Run], starts: list[Snapshot | None] | None, interval: int, per_sample: int) -> int:
    """Where the runs start: all from their own checkpoints at the newest step every run kept,
    all from their stable states, or all from scratch (the step they stand at; their templates
    and data orders put there)."""
    saved = [run.saver.latest() if run.saver else None for run in runs]
    while all(s is not None for s in saved) and len({s.loop.step for s in saved}) > 1:
        # a kill between the runs' saves, or a damaged newest file: the newest step every run kept
        common = min(s.loop.step for s in saved)
        saved = [run.saver.latest(at_most=common) for run in runs]
    if all(s is not None for s in saved) and len({s.loop.step for s in saved}) == 1:
        for run, snapshot in zip(runs, saved):
            snapshot.restore(run.model, run.optimizer)
            step = _continue(snapshot.loop, run.result, run.batches, run.losses)
            run.result.timings["resumed_from_step"] = step
        return step
    if any(s is not None for s in saved):
        warnings.warn("the checkpoints of runs trained together stand at different steps: they start again",
                      stacklevel=3)
    if starts and all(s is not None for s in starts) and len({s.loop.step for s in starts}) == 1:
        for run, stable in zip(runs, starts):
            step = _start_branch(stable, run.spec, run.model, run.optimizer, run.batches, run.losses, run.result)
            for done in range(interval, step + 1, interval):
                _report(run.losses, done - interval, done, done * run.spec.batch_size * per_sample, run.spec,
                        run.result, ignore_progress)
        return step
    return 0


def _close(result: RunResult, spec: RunSpec, t_start: float, t_train: float, t_trained: float, data_s: float,
           together: int) -> RunResult:
    """The run's FLOPs, epochs and timings (the program's: its runs trained in the same seconds)."""
    result.flops = result.tokens * spec.flops_per_unit
    if result.unique_tokens:
        result.epochs = result.tokens / result.unique_tokens
    now = time.perf_counter()
    result.timings.update({"setup_s": t_train - t_start, "train_s": t_trained - t_train, "data_s": data_s,
                           "total_s": now - t_start, "trained_together": float(together)})
    return result
