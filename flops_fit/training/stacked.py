"""Same-shape runs trained together: runs that differ only in learning rate or seed, in one program.

A tune cell trains one model at several rates; a seed study trains it from several seeds. Such
runs have the same shapes, steps and schedule, so one program can hold them all: each parameter
stacked along a new first axis (one slice per run), the model's forward applied to every slice
at once (``torch.func.vmap`` over ``functional_call``: batched matmuls), one backward, then
gradient clipping and AdamW per slice. Each run keeps its own initialisation (its seed), data
order, learning rate, curve, held-out evaluation, checkpoints and result. A run's checkpoint is
the very file it writes alone (``training.checkpoint``), so it resumes stacked or alone; its
curve is the one it trains alone to float rounding (tests/test_stacked.py: 1e-5, fp32 CPU).

``stack_items`` groups an executor's work items (``sweep.stack_runs`` at most per program):
cosine runs into ``Stack``s, WSD families whose branches match one to one into
``StackedFamilies`` (each branch trained stacked, each family's stable phase handed on as
``training.task`` does alone). A model whose forward draws random numbers (dropout) cannot be
stacked: vmap refuses it and the runs fail with that reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
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
from flops_fit.training.checkpoint import Checkpointer, CheckpointPolicy, load_result, save_result
from flops_fit.training.data import Batches, check_sequence_length, gather
from flops_fit.training.loop import (
    _continue,
    _Diverged,
    _report,
    _start_branch,
    _state,
    curve_point,
    resolve_device,
)
from flops_fit.training.schedules import schedule_factor
from flops_fit.training.state import Snapshot
from flops_fit.training.steps import evaluate, make_optimizer, micro_batch_rows
from flops_fit.training.wsd import Family

FREE_FIELDS = ("lr", "seed")  # what may differ between runs trained together
# how a run is trained (not in its id) must agree too
_HOW = ("device", "compile", "micro_batch_size", "processes_per_run", "parallel")


def shape_key(spec: RunSpec) -> str:
    """What runs trained together share: every field of the id but the learning rate and seed,
    and how the run is trained."""
    same = {k: v for k, v in spec.identity().items() if k not in FREE_FIELDS}
    same.update({k: getattr(spec, k) for k in _HOW})
    return hashlib.sha256(json.dumps(same, sort_keys=True, default=str).encode()).hexdigest()[:16]


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
        if not all(stackable(r) for r in runs):
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
    stable = {f.run_id: Checkpointer(checkpoints.run_dir(f.run_id), f.run_id, keep=1) for f in group.families} \
        if checkpoints else {}
    latest: dict[str, Snapshot] = {}
    for family_id, saver in stable.items():
        if (saved := saver.latest()) is not None:
            latest[family_id] = saved

    def keep(snapshots: list[Snapshot]) -> None:
        for snapshot in snapshots:
            latest[snapshot.loop.run_id] = snapshot
            if snapshot.loop.run_id in stable:
                stable[snapshot.loop.run_id].save_snapshot(snapshot)

    outcomes = _finished(group.runs, checkpoints)
    for branches in zip(*(f.runs for f in group.families), strict=True):
        todo = [s for s in branches if s.run_id not in outcomes]
        starts = [latest.get(s.family) for s in todo]
        starts = [s if s is not None and s.loop.step <= spec.cooldown_start else None for s, spec in zip(starts, todo)]
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


# ------------------------------------------------------------------ exact per-run kernels
# vmap's rules for these reduce in another order than the kernel a run calls alone (LayerNorm's
# weight gradient; a linear layer's weight gradient as a batched matmul once a batch holds more
# than a few hundred rows): a bit apart, which training then amplifies. Inside the program they
# run run by run, on the kernels a run calls alone, so each run's arithmetic is its own.
_LINEAR = torch.nn.functional.linear
_LAYER_NORM = torch.nn.functional.layer_norm


def _slices(t: torch.Tensor | None, dim: int | None, runs: int) -> list[torch.Tensor | None]:
    """Each run's slice (``unbind``: its backward stacks the gradients once, where a ``select``
    per run would fill a zero tensor of every run's size per run)."""
    return [t] * runs if t is None or dim is None else list(t.unbind(dim))


@torch.library.custom_op("flops_fit::stacked_linear", mutates_args=())
def _stacked_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return _LINEAR(x, weight, bias).clone()


@_stacked_linear.register_vmap
def _linear_per_run(info: Any, in_dims: tuple, x: torch.Tensor, weight: torch.Tensor,
                    bias: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    runs = info.batch_size
    parts = zip(_slices(x, in_dims[0], runs), _slices(weight, in_dims[1], runs), _slices(bias, in_dims[2], runs))
    return torch.stack([_LINEAR(*part) for part in parts]), 0


@torch.library.custom_op("flops_fit::stacked_layer_norm", mutates_args=())
def _stacked_layer_norm(x: torch.Tensor, shape: list[int], weight: torch.Tensor | None,
                        bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    return _LAYER_NORM(x, shape, weight, bias, eps).clone()


@_stacked_layer_norm.register_vmap
def _layer_norm_per_run(info: Any, in_dims: tuple, x: torch.Tensor, shape: list[int], weight: torch.Tensor | None,
                        bias: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, int]:
    runs = info.batch_size
    parts = zip(_slices(x, in_dims[0], runs), _slices(weight, in_dims[2], runs), _slices(bias, in_dims[3], runs))
    return torch.stack([_LAYER_NORM(xi, shape, wi, bi, eps) for xi, wi, bi in parts]), 0


def _batched(*tensors: torch.Tensor | None) -> bool:
    return any(t is not None and torch._C._functorch.is_batchedtensor(t) for t in tensors)


def _linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return _stacked_linear(input, weight, bias) if _batched(input, weight, bias) else _LINEAR(input, weight, bias)


def _layer_norm(input: torch.Tensor, normalized_shape: Any, weight: torch.Tensor | None = None,
                bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    if not _batched(input, weight, bias):
        return _LAYER_NORM(input, normalized_shape, weight, bias, eps)
    return _stacked_layer_norm(input, list(normalized_shape), weight, bias, eps)


@contextlib.contextmanager
def _exact_per_run() -> Any:
    """Inside: ``F.linear`` and ``F.layer_norm`` of stacked runs are each run's own kernels
    (``nn.Linear`` and ``nn.LayerNorm`` look them up at each call)."""
    functional = torch.nn.functional
    functional.linear, functional.layer_norm = _linear, _layer_norm
    try:
        yield
    finally:
        functional.linear, functional.layer_norm = _LINEAR, _LAYER_NORM


# ------------------------------------------------------------------ the stacked program
@dataclass
class _Run:
    """One run of the program: its spec, its own model and optimizer (templates that hold its
    state whenever it is saved or evaluated), data order, loss per step and result."""

    spec: RunSpec
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    batches: Batches
    losses: torch.Tensor
    result: RunResult
    saver: Checkpointer | None = None
    tracker: RunTracker | None = None


class _Stacked:
    """The runs' parameters, buffers and AdamW moments stacked along a first axis of runs."""

    def __init__(self, runs: list[_Run]) -> None:
        template = runs[0]
        self.module = template.model
        names = {id(p): n for n, p in self.module.named_parameters()}
        self.scale: dict[str, float] = {}
        self.decay: dict[str, float] = {}
        for group in template.optimizer.param_groups:
            for p in group["params"]:
                self.scale[names[id(p)]] = float(group.get("lr_scale", 1.0))
                self.decay[names[id(p)]] = float(group["weight_decay"])
        defaults = template.optimizer.defaults
        self.beta1, self.beta2 = defaults["betas"]
        self.eps = defaults["eps"]
        self.load(runs)

    def load(self, runs: list[_Run]) -> None:
        """Stack the runs' templates (their parameters and optimizer state)."""
        named = [dict(r.model.named_parameters()) for r in runs]
        order = [n for n in named[0] if n in self.scale]  # the model's order, as clip_grad_norm_ sums
        self.params = {n: torch.stack([m[n].detach() for m in named]).requires_grad_(True) for n in order}
        bufs = [dict(r.model.named_buffers()) for r in runs]
        self.buffers = {n: torch.stack([b[n] for b in bufs]) for n in bufs[0]}
        self.exp_avg, self.exp_avg_sq, self.steps = {}, {}, {}
        for n in order:
            states = [r.optimizer.state.get(m[n], {}) for r, m in zip(runs, named)]
            counts = {float(s["step"]) if "step" in s else 0.0 for s in states}
            if len(counts) != 1:
                raise ValueError(f"runs trained together must stand at the same optimizer step ({n}: {counts})")
            self.steps[n] = int(counts.pop())
            zero = torch.zeros_like(self.params[n])
            self.exp_avg[n] = torch.stack([s["exp_avg"] for s in states]) if self.steps[n] else zero
            self.exp_avg_sq[n] = torch.stack([s["exp_avg_sq"] for s in states]) if self.steps[n] else zero.clone()

    def unstack(self, position: int, run: _Run) -> None:
        """Put slice ``position`` into ``run``'s template model and optimizer (what it saves,
        hands on or evaluates: exactly the state it would hold alone)."""
        with torch.no_grad():
            for n, p in run.model.named_parameters():
                p.copy_(self.params[n][position])
            for n, b in run.model.named_buffers():
                b.copy_(self.buffers[n][position])
        named = dict(run.model.named_parameters())
        for n, step in self.steps.items():
            if step:
                run.optimizer.state[named[n]] = {
                    "step": torch.tensor(float(step), dtype=torch.float32),
                    "exp_avg": self.exp_avg[n][position].clone(),
                    "exp_avg_sq": self.exp_avg_sq[n][position].clone(),
                }

    def keep_only(self, positions: list[int]) -> None:
        """Drop every run but those at ``positions`` (a diverged run stops; the rest go on)."""
        index = torch.tensor(positions, device=next(iter(self.params.values())).device)
        self.params = {n: p.detach()[index].clone().requires_grad_(True) for n, p in self.params.items()}
        self.buffers = {n: b[index].clone() for n, b in self.buffers.items()}
        self.exp_avg = {n: v[index].clone() for n, v in self.exp_avg.items()}
        self.exp_avg_sq = {n: v[index].clone() for n, v in self.exp_avg_sq.items()}

    def clip(self, max_norm: float) -> None:
        """``clip_grad_norm_`` per run: each slice's gradients scaled by max_norm / (its norm + 1e-6),
        at most 1; each norm reduced slice by slice, as torch reduces a run's own tensors."""
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        if not grads:
            return
        runs = grads[0].shape[0]
        totals = torch.stack([torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g[i], 2) for g in grads]), 2)
                              for i in range(runs)])
        coef = torch.clamp(max_norm / (totals + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef.view(-1, *([1] * (g.ndim - 1))))

    @torch.no_grad()
    def adamw(self, lrs: list[float]) -> None:
        """torch's AdamW update (decoupled weight decay) per slice, each at its own rate; the
        scalars computed in double as torch does, then applied per run."""
        for n, p in self.params.items():
            if p.grad is None:
                continue
            self.steps[n] += 1
            step, g, m, v = self.steps[n], p.grad, self.exp_avg[n], self.exp_avg_sq[n]
            shape = (-1, *([1] * (p.ndim - 1)))
            rates = [lr * self.scale[n] for lr in lrs]
            if self.decay[n]:
                p.mul_(torch.tensor([1 - r * self.decay[n] for r in rates], dtype=p.dtype, device=p.device).view(shape))
            m.lerp_(g, 1 - self.beta1)
            v.mul_(self.beta2).addcmul_(g, g, value=1 - self.beta2)
            correction1 = 1 - self.beta1 ** step
            correction2_sqrt = math.sqrt(1 - self.beta2 ** step)
            denom = (v.sqrt() / correction2_sqrt).add_(self.eps)
            sizes = torch.tensor([-(r / correction1) for r in rates], dtype=p.dtype, device=p.device).view(shape)
            p.add_(m * sizes / denom)  # addcdiv: (value x exp_avg) / denom
            p.grad = None


def train_stacked(specs: list[RunSpec], progress: ProgressSink = ignore_progress, *, host: Any = None,
                  checkpoints: CheckpointPolicy | None = None, starts: list[Snapshot | None] | None = None,
                  on_stable: Callable[[list[Snapshot]], None] | None = None,
                  trackers: list[RunTracker] | None = None) -> list[RunResult]:
    """Train ``specs`` (one ``shape_key``) in one program; a result per spec, as ``loop.train``
    gives alone: divergence fails that run only, a stop request checkpoints every run and
    raises ``Interrupted``. Each run continues from its newest checkpoint when all of them stand
    at one step (otherwise from ``starts``: its WSD family's stable states, used when all stand
    at one step, or from scratch); ``on_stable`` gets every run's stable state at the cooldown
    start."""
    if len({shape_key(s) for s in specs}) != 1:
        raise ValueError("runs trained together must differ only in learning rate and seed")
    t_start = time.perf_counter()
    first = specs[0]
    device = resolve_device(first.device)
    entry = api.model_info(first.model, host=host)
    input_key = TASK_INPUTS[entry.task]
    per_sample = first.seq_len if entry.flops_unit == "token" else 1
    models = []
    for spec in specs:
        torch.manual_seed(spec.seed)
        models.append(api.create_model(spec.model, spec.size, host=host, **spec.model_config).to(device))
    loss_fn = api.get_loss(first.loss, host=host)
    train_data = api.create_dataset(first.dataset, "train", host=host, **first.dataset_config)
    eval_data = api.create_dataset(first.dataset, first.eval_split, host=host, **first.dataset_config)
    autocast = (torch.autocast(device.type, dtype=torch.bfloat16) if first.precision == "bf16"
                else contextlib.nullcontext())
    micro = micro_batch_rows(first, models[0], loss_fn, train_data, input_key, device, autocast)
    if first.micro_batch_size == "auto" and device.type == "cuda":
        micro = max(1, micro // len(specs))  # the probe measured one run; the program holds them all
    unique = first.unique_tokens or getattr(train_data, "unique_tokens", None)
    runs = [_Run(s, m, make_optimizer(m, s, device), Batches(train_data, s.seed), torch.empty(s.steps, device=device),
                 RunResult(run_id=s.run_id, status="done", device=str(device), unique_tokens=unique),
                 Checkpointer(checkpoints.run_dir(s.run_id), s.run_id, keep=checkpoints.keep) if checkpoints else None,
                 trackers[i] if trackers else None)
            for i, (s, m) in enumerate(zip(specs, models, strict=True))]
    interval = max(1, math.ceil(first.steps / first.curve_points))
    start_step = _position(runs, starts, interval, per_sample)
    for run in runs:
        if run.tracker is not None:
            run.tracker.begin(run.result.tokens, [curve_point(run.spec, p, per_sample) for p in run.result.curve])
        progress(run.spec.run_id, run.result.tokens, run.spec.tokens, math.nan)
    stacked = _Stacked(runs)
    one_run = _loss_of(stacked.module, loss_fn, input_key)
    shared_data = len({s.seed for s in specs}) == 1  # one data order: gathered once, broadcast to every run
    stacked.module.train()
    finished: list[RunResult] = []
    data_s = 0.0
    t_train = last_save = time.perf_counter()
    for step in range(start_step, first.steps):
        if step == first.cooldown_start and on_stable is not None and first.schedule == "wsd":
            on_stable([_snapshot(stacked, i, run, run.spec.family) for i, run in enumerate(runs)])
        t0 = time.perf_counter()
        rows = min(first.batch_size, (first.tokens - runs[0].result.tokens) // per_sample)
        picks = [run.batches.indices(rows) for run in runs]
        if shared_data:
            batch = {k: v.to(device, non_blocking=True) for k, v in gather(train_data, picks[0]).items()}
        else:
            parts = [gather(train_data, p) for p in picks]
            batch = {k: torch.stack([p[k] for p in parts]).to(device, non_blocking=True) for k in parts[0]}
        data_s += time.perf_counter() - t0
        if step == start_step:
            check_sequence_length(first, batch[input_key][0] if not shared_data else batch[input_key])
        loss = _accumulate(one_run, stacked, batch, None if shared_data else 0, micro, autocast)
        stop = stop_requested()
        due = bool(checkpoints) and 0 < checkpoints.seconds <= time.perf_counter() - last_save
        if first.grad_clip > 0:
            stacked.clip(first.grad_clip)
        stacked.adamw([run.spec.lr * schedule_factor(run.spec, step) for run in runs])
        diverged = []
        for i, run in enumerate(runs):
            run.result.tokens += rows * per_sample
            run.result.steps += 1
            run.losses[step] = loss[i]
            if run.result.steps % interval == 0 or step == first.steps - 1:
                last = (run.result.steps - 1) // interval * interval
                try:
                    _report(run.losses, last, run.result.steps, run.result.tokens, run.spec, run.result, progress)
                except _Diverged as exc:
                    diverged.append(i)
                    run.result.status, run.result.error = "failed", f"diverged: {exc}"
                    continue
                if run.tracker is not None:
                    run.tracker.point(*curve_point(run.spec, run.result.curve[-1], per_sample))
        if diverged:
            for i in diverged:
                finished.append(_close(runs[i].result, runs[i].spec, t_start, t_train, time.perf_counter(), data_s,
                                       len(specs)))
            runs = [r for i, r in enumerate(runs) if i not in diverged]
            if not runs:
                break
            stacked.keep_only([i for i in range(len(runs) + len(diverged)) if i not in diverged])
        if step == first.steps - 1:
            break
        if checkpoints and (stop is not None or due):
            for i, run in enumerate(runs):
                stacked.unstack(i, run)
                run.saver.save(run.model, run.optimizer, _state(run.spec.run_id, run.result, run.batches, run.losses))
            last_save = time.perf_counter()
        if stop is not None:
            raise Interrupted(stop, f"stopped by signal {stop}")
    t_trained = time.perf_counter()
    for i, run in enumerate(runs):
        t_eval = time.perf_counter()
        stacked.unstack(i, run)
        result = run.result
        result.loss, result.bpb, result.top1_error = evaluate(run.model, eval_data, loss_fn, input_key, run.spec,
                                                              device, autocast, per_sample)
        if not math.isfinite(result.loss):
            result.status, result.error = "failed", f"diverged: held-out loss is {result.loss} after training"
        weights = checkpoints and checkpoints.weights_path(run.spec.run_id)
        if weights and result.status == "done":
            run.saver.save_weights(weights, run.model)
        result.timings["eval_s"] = time.perf_counter() - t_eval
        finished.append(_close(result, run.spec, t_start, t_train, t_trained, data_s, len(specs)))
    order = {s.run_id: n for n, s in enumerate(specs)}
    return sorted(finished, key=lambda r: order[r.run_id])


def _position(runs: list[_Run], starts: list[Snapshot | None] | None, interval: int, per_sample: int) -> int:
    """Where the runs start: all from their own checkpoints, all from their stable states, or
    all from scratch (the step they stand at; their templates and data orders put there)."""
    saved = [run.saver.latest() if run.saver else None for run in runs]
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


def _snapshot(stacked: _Stacked, position: int, run: _Run, owner: str) -> Snapshot:
    stacked.unstack(position, run)
    return Snapshot.take(_state(owner, run.result, run.batches, run.losses), run.model, run.optimizer)


def _loss_of(module: torch.nn.Module, loss_fn: Callable, input_key: str) -> Callable:
    """One run's loss from its parameters, buffers and batch (what vmap maps over the runs)."""
    def loss(params: dict, buffers: dict, batch: dict) -> torch.Tensor:
        return loss_fn(torch.func.functional_call(module, (params, buffers), (batch[input_key],)), batch)
    return loss


def _accumulate(one_run: Callable, stacked: _Stacked, batch: dict[str, torch.Tensor], batch_dim: int | None,
                micro: int, autocast: Any) -> torch.Tensor:
    """Forward and backward one step's rows for every run in micro-batches (as
    ``steps.accumulate`` alone); each run's loss of the step, detached."""
    axis = 0 if batch_dim is None else 1
    rows = next(iter(batch.values())).shape[axis]
    mapped = torch.func.vmap(one_run, in_dims=(0, 0, batch_dim))
    total = None
    for begin in range(0, rows, micro):
        end = min(begin + micro, rows)
        part = {k: v.narrow(axis, begin, end - begin) for k, v in batch.items()}
        share = (end - begin) / rows
        with warnings.catch_warnings(), autocast, _exact_per_run():
            warnings.filterwarnings("ignore", message=".*batching rule.*")  # SDPA's fallback: correct, looped
            losses = mapped(stacked.params, stacked.buffers, part)
        (losses.sum() * share if share != 1 else losses.sum()).backward()
        part_loss = losses.detach().float() * share
        total = part_loss if total is None else total + part_loss
    return total


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
