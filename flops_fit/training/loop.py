"""Train one RunSpec: exactly its planned tokens, then the held-out loss.

AdamW (no weight decay on biases, norms and other 1-D parameters), the run's learning-rate
schedule (``schedules``: warmup then a cosine that ends with this run, or warmup-stable-decay),
each step's batch in micro-batches whose gradients accumulate (``micro_batch_size``), gradient clipping, seeded data order and initialisation, bf16 autocast on CUDA. The
training loss is averaged over ``curve_points`` equal intervals for the curve; a
non-finite or diverging loss stops the run and returns it as failed with the reason.
With a ``CheckpointPolicy`` the run saves its full state every few minutes and continues
from it after a kill (``training.checkpoint``).
"""

from __future__ import annotations

import contextlib
import copy
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from flops_fit.errors import Interrupted
from flops_fit.executors.base import ProgressSink, ignore_progress
from flops_fit.executors.stopping import stop_requested
from flops_fit.plugin import api
from flops_fit.plugin.contracts import TASK_INPUTS
from flops_fit.store.runs import RunResult, RunSpec
from flops_fit.tracking.base import RunTracker
from flops_fit.training.checkpoint import (
    CheckpointPolicy,
    TrainState,
    load_latest,
    save_checkpoint,
    save_weights,
)
from flops_fit.training.micro_batch import largest_fitting_micro_batch
from flops_fit.training.schedules import schedule_factor


class Batches:
    """Seeded epochs of shuffled sample indices (``gather`` makes a batch dict of them).

    Datasets with ``get_batch(indices)`` are gathered in one call; any other map-style
    dataset of dicts is stacked item by item.
    """

    def __init__(self, dataset: Any, seed: int) -> None:
        self.dataset, self.n = dataset, len(dataset)
        if self.n == 0:
            raise ValueError("the dataset is empty")
        self.rng = np.random.default_rng(seed)
        self.order, self.pos = self.rng.permutation(self.n), 0

    def indices(self, k: int) -> np.ndarray:
        parts = []
        while k > 0:
            if self.pos == self.n:
                self.order, self.pos = self.rng.permutation(self.n), 0
            take = min(k, self.n - self.pos)
            parts.append(self.order[self.pos:self.pos + take])
            self.pos += take
            k -= take
        return np.concatenate(parts)

    def state(self) -> tuple[Any, np.ndarray, int]:
        """Where the data order stands: the generator's state, the epoch's permutation, the position."""
        return copy.deepcopy(self.rng.bit_generator.state), self.order.copy(), self.pos

    def restore(self, state: tuple[Any, np.ndarray, int]) -> None:
        self.rng.bit_generator.state = copy.deepcopy(state[0])
        self.order, self.pos = state[1].copy(), state[2]


def gather(dataset: Any, indices: np.ndarray) -> dict[str, torch.Tensor]:
    if hasattr(dataset, "get_batch"):
        return dataset.get_batch(indices)
    items = [dataset[int(i)] for i in indices]
    return {k: torch.stack([torch.as_tensor(item[k]) for item in items]) for k in items[0]}


def eval_indices(n: int, count: int) -> np.ndarray:
    """``count`` indices spread evenly over ``n`` samples (all of them if count >= n)."""
    if count >= n:
        return np.arange(n)
    return np.linspace(0, n - 1, count).round().astype(np.int64)


def check_sequence_length(spec: RunSpec, x: torch.Tensor) -> None:
    """A language model's batch holds sequences of the plan's ``seq_len`` (ValueError if not)."""
    if spec.seq_len > 1 and x.ndim >= 2 and x.shape[1] != spec.seq_len:
        raise ValueError(
            f"dataset {spec.dataset!r} yields sequences of {x.shape[1]} tokens but the plan's "
            f"seq_len is {spec.seq_len}; set the dataset's seq_len to match"
        )


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def lr_multipliers(model: torch.nn.Module) -> dict[torch.nn.Parameter, float]:
    """Each parameter's learning-rate factor from the model's ``lr_multipliers()`` (names -> factors,
    e.g. muP's), read from the model itself under a DDP / FSDP / compile wrapper; {} without one."""
    inner = model
    while True:
        wrapped = getattr(inner, "_orig_mod", None)  # torch.compile (which forwards attribute look-ups)
        if wrapped is None and not hasattr(inner, "lr_multipliers"):
            wrapped = getattr(inner, "module", None)  # DistributedDataParallel, FSDP
        if not isinstance(wrapped, torch.nn.Module):
            break
        inner = wrapped
    if not hasattr(inner, "lr_multipliers"):
        return {}
    factors = inner.lr_multipliers()
    named = dict(inner.named_parameters())
    for name, factor in factors.items():
        if name not in named:
            raise ValueError(f"lr_multipliers() names {name!r}, which is not a parameter of the model")
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"lr_multipliers() gives {name!r} the factor {factor!r}: it must be a positive number")
    return {named[name]: float(factor) for name, factor in factors.items()}


def make_optimizer(model: torch.nn.Module, spec: RunSpec, device: torch.device) -> torch.optim.AdamW:
    """AdamW with no weight decay on 1-D parameters; parameters with a learning-rate factor
    (``lr_multipliers``) go into groups carrying it as ``lr_scale``, their weight decay divided
    by it so that the decay per step (lr x weight decay) stays the base rate's."""
    factors = lr_multipliers(model)
    groups: dict[tuple[bool, float], dict] = {(True, 1.0): {"params": [], "weight_decay": spec.weight_decay},
                                              (False, 1.0): {"params": [], "weight_decay": 0.0}}
    for p in model.parameters():
        if p.requires_grad:
            decay, scale = p.ndim >= 2, factors.get(p, 1.0)
            if (decay, scale) not in groups:
                groups[decay, scale] = {"params": [], "lr": spec.lr * scale, "lr_scale": scale,
                                        "weight_decay": spec.weight_decay / scale if decay else 0.0}
            groups[decay, scale]["params"].append(p)
    groups = list(groups.values())
    return torch.optim.AdamW(
        groups, lr=spec.lr, betas=(spec.beta1, spec.beta2), eps=spec.eps,
        **({"fused": True} if device.type == "cuda" else {"foreach": True}),
    )


class _Diverged(Exception):
    pass


class OneProcess:
    """How a run's processes share its work, at each point of the loop where that matters;
    this base is the run on one process. ``training.distributed`` has the data-parallel ones
    (DDP, FSDP2), so that one loop trains a run on one process or on k."""

    rank, world = 0, 1
    lockstep = False  # every forward pass is collective (FSDP): all ranks run as many

    @property
    def writer(self) -> bool:
        """Whether this process writes the run's files (checkpoints, weights, its result)."""
        return self.rank == 0

    def device(self, device: torch.device) -> torch.device:
        return device

    def shard(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model the optimizer is built from (FSDP shards it here)."""
        return model

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module the training steps run through (DDP wraps it here)."""
        return model

    def no_sync(self) -> Callable[[], Any]:
        """A context for the micro-batches whose gradients are not yet to be synchronised."""
        return contextlib.nullcontext

    def rows(self, indices: np.ndarray) -> tuple[np.ndarray, float]:
        """This process's rows of a step's ``indices``, and the weight of its mean loss."""
        return indices, 1.0

    def passes(self, rows: int, micro: int) -> int | None:
        """Forward passes every process makes for a step of ``rows`` (None: each as its rows need)."""
        return None

    def agree(self, loss: torch.Tensor, stop: bool, due: bool) -> tuple[torch.Tensor, bool, bool]:
        """The step's loss over the whole batch, whether any process must stop, whether the
        checkpoint timer (the writer's) has run out: the same on every process."""
        return loss, stop, due

    def combine(self, sums: list[float]) -> list[float]:
        """Sums over every process (the held-out loss's partial sums)."""
        return sums

    def load(self, policy: CheckpointPolicy, run_id: str, model, optimizer) -> TrainState | None:
        """Restore the run's newest checkpoint into ``model`` and ``optimizer``; its state, or None."""
        saved = load_latest(policy.run_dir(run_id), run_id=run_id)
        return saved.restore(model, optimizer) if saved else None

    def save(self, policy: CheckpointPolicy, model, optimizer, state: TrainState) -> None:
        save_checkpoint(policy.run_dir(state.run_id), model, optimizer, state, keep=policy.keep)

    def save_weights(self, path, model) -> None:
        save_weights(path, model)


@dataclass
class StableState:
    """A WSD run's training state at the start of its cooldown, ``step`` steps in: what a
    longer branch of the same family (``RunSpec.family``) starts from instead of training
    the stable phase again. Held in memory between the branches of one family."""

    family: str
    step: int
    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    data: tuple[Any, np.ndarray, int]  # the data order's generator state, permutation, position
    torch_rng: torch.Tensor
    losses: torch.Tensor  # the training loss of each step so far, for the branch's own curve


def train(spec: RunSpec, progress: ProgressSink = ignore_progress, *, host: Any = None,
          checkpoints: CheckpointPolicy | None = None, start: StableState | None = None,
          on_stable: Callable[[StableState], None] | None = None, tracker: RunTracker | None = None,
          parallel: OneProcess | None = None) -> RunResult:
    """Train ``spec`` and return its result; divergence gives ``status="failed"``.

    ``progress(run_id, done, total, train_loss)`` hears about the run as it trains (an
    executor passes the sink that carries reports back to the sweep driver); the first
    report of an attempt has a NaN loss and ``done`` = the units it starts from.

    With ``checkpoints``, the run continues from its newest valid checkpoint (bit for bit on
    CPU) and saves one every ``checkpoints.seconds`` of training; on a stop request (SIGTERM,
    Ctrl-C: ``executors.stopping``) it checkpoints after the current step and raises
    ``Interrupted``. The caller removes the checkpoints once the result is safely stored.

    A WSD branch may ``start`` from a stable state of its family at or before its cooldown
    start (unless it has its own checkpoint), and hands its own to ``on_stable`` when its
    cooldown starts; either way its result is the one it would have trained from scratch.

    ``parallel`` is this process's part of a run spread over several (``training.distributed``):
    its slice of each step's rows, the reductions of gradients and losses, the checkpoints.
    """
    parallel = parallel or OneProcess()
    t_start = time.perf_counter()
    device = parallel.device(resolve_device(spec.device))
    torch.manual_seed(spec.seed)
    entry = api.model_info(spec.model, host=host)
    input_key = TASK_INPUTS[entry.task]
    per_sample = spec.seq_len if entry.flops_unit == "token" else 1
    model = parallel.shard(api.create_model(spec.model, spec.size, host=host, **spec.model_config).to(device))
    loss_fn = api.get_loss(spec.loss, host=host)
    train_data = api.create_dataset(spec.dataset, "train", host=host, **spec.dataset_config)
    eval_data = api.create_dataset(spec.dataset, spec.eval_split, host=host, **spec.dataset_config)
    optimizer = make_optimizer(model, spec, device)
    step_model = parallel.wrap(model)
    step_model = torch.compile(step_model) if spec.compile else step_model
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16) if spec.precision == "bf16" else contextlib.nullcontext()
    )
    batches = Batches(train_data, spec.seed)
    micro = micro_batch_rows(spec, model, loss_fn, train_data, input_key, device, autocast,
                             rows=-(-spec.batch_size // parallel.world))
    params = [p for p in model.parameters() if p.requires_grad]
    result = RunResult(run_id=spec.run_id, status="done", device=str(device))
    interval = max(1, math.ceil(spec.steps / spec.curve_points))
    losses = torch.empty(spec.steps, device=device)  # each step's training loss, for the curve
    start_step = 0
    saved = checkpoints and parallel.load(checkpoints, spec.run_id, model, optimizer)
    if saved:
        start_step = _resume(saved, result, batches, losses)
        result.timings["resumed_from_step"] = start_step
    elif start is not None:
        start_step = _start_branch(start, spec, model, optimizer, batches, losses, result, per_sample)
        for done in range(interval, start_step + 1, interval):  # the curve's points before the start
            # (not reported as progress: the store counts only the steps this run trains)
            _report(losses, done - interval, done, done * spec.batch_size * per_sample, spec, result,
                    ignore_progress)
    if tracker is not None:
        tracker.begin(result.tokens, [curve_point(spec, point, per_sample) for point in result.curve])
    data_s = 0.0
    progress(spec.run_id, result.tokens, spec.tokens, math.nan)
    t_train = last_save = time.perf_counter()
    try:
        model.train()
        for step in range(start_step, spec.steps):
            if step == spec.cooldown_start and on_stable is not None and spec.schedule == "wsd":
                on_stable(StableState(
                    spec.family, step, {k: v.detach().clone() for k, v in model.state_dict().items()},
                    copy.deepcopy(optimizer.state_dict()), batches.state(), torch.get_rng_state(),
                    losses[:step].clone()))
            t0 = time.perf_counter()
            rows = min(spec.batch_size, (spec.tokens - result.tokens) // per_sample)
            mine, weight = parallel.rows(batches.indices(rows))
            batch = {k: v.to(device, non_blocking=True) for k, v in gather(train_data, mine).items()}
            data_s += time.perf_counter() - t0
            if step == start_step:
                check_sequence_length(spec, batch[input_key])
            for group in optimizer.param_groups:
                group["lr"] = spec.lr * schedule_factor(spec, step) * group.get("lr_scale", 1.0)
            loss = accumulate(step_model, loss_fn, batch, input_key, micro, autocast, parallel.no_sync(), weight,
                              parallel.passes(rows, micro))
            stop = stop_requested()
            due = bool(checkpoints) and 0 < checkpoints.seconds <= time.perf_counter() - last_save
            loss, stop_all, due = parallel.agree(loss, stop is not None, due)
            if spec.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(params, spec.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            result.tokens += rows * per_sample
            result.steps += 1
            losses[step] = loss.detach().float()
            if result.steps % interval == 0 or step == spec.steps - 1:
                last = (result.steps - 1) // interval * interval
                _report(losses, last, result.steps, result.tokens, spec, result, progress)
                if tracker is not None:
                    tracker.point(*curve_point(spec, result.curve[-1], per_sample))
            if step == spec.steps - 1:  # a stop waits for the held-out loss: seconds, not the run
                break
            if checkpoints is not None and (stop_all or due):
                _save(checkpoints, spec, model, optimizer, result, batches, losses, parallel)
                last_save = time.perf_counter()
                if result.curve:
                    progress(spec.run_id, result.tokens, spec.tokens, result.curve[-1][1])
            if stop_all:  # every process stops at the same step (a signal may reach only one)
                signum = stop if stop is not None else signal.SIGTERM
                raise Interrupted(signum, f"stopped by signal {signum}")
        train_s = time.perf_counter() - t_train
        t_eval = time.perf_counter()
        result.loss, result.bpb, result.top1_error = evaluate(model, eval_data, loss_fn, input_key, spec, device,
                                                              autocast, per_sample, parallel)
        if not math.isfinite(result.loss):
            raise _Diverged(f"held-out loss is {result.loss} after training")
        result.timings["eval_s"] = time.perf_counter() - t_eval
        weights = checkpoints and checkpoints.weights_path(spec.run_id)
        if weights:
            parallel.save_weights(weights, model)
    except _Diverged as exc:
        train_s = time.perf_counter() - t_train
        result.status, result.error = "failed", f"diverged: {exc}"
    result.flops = result.tokens * spec.flops_per_unit
    result.timings.update({
        "setup_s": t_train - t_start, "train_s": train_s, "data_s": data_s,
        "total_s": time.perf_counter() - t_start,
    })
    return result


def accumulate(model, loss_fn, batch: dict[str, torch.Tensor], input_key: str, micro: int, autocast,
               no_sync: Callable[[], Any] = contextlib.nullcontext, weight: float = 1.0,
               passes: int | None = None) -> torch.Tensor:
    """Forward and backward one optimizer step's rows in micro-batches of ``micro`` rows; the
    gradients add up to the whole batch's. Returns the step's loss (detached).

    Each micro-batch's loss is weighted by its share of the rows, so the summed gradient is the
    gradient of the whole batch's mean loss: exact for a loss that averages equally many terms
    per row (the built-in losses on fixed-length windows and images). ``no_sync`` is entered for
    every micro-batch but the last (DDP's ``model.no_sync``: one all-reduce per step); a rank of
    a data-parallel run passes its own slice of the global batch as ``batch`` and the ``weight``
    that makes the ranks' averaged gradients the whole batch's (its rows x ranks / the batch's rows).
    Ranks whose forward passes are collective (FSDP) make the same number of ``passes``: the rows
    in that many near-equal micro-batches, a pass without rows running one row at weight 0.
    """
    rows = batch[input_key].shape[0]
    total = torch.zeros((), device=batch[input_key].device)
    if passes is None:
        bounds = [(start, min(start + micro, rows)) for start in range(0, rows, micro)]
    else:
        edges = [rows * i // passes for i in range(passes + 1)]
        bounds = list(zip(edges[:-1], edges[1:], strict=True))
    for i, (start, end) in enumerate(bounds):
        part = {k: v[start:end] if end > start else v[:1] for k, v in batch.items()}
        share = (end - start) / rows
        scale = share * weight
        with no_sync() if i < len(bounds) - 1 else contextlib.nullcontext():
            with autocast:
                loss = loss_fn(model(part[input_key]), part)
            (loss * scale).backward() if scale != 1 else loss.backward()
        total += loss.detach().float() * share
    return total


def micro_batch_rows(spec: RunSpec, model, loss_fn, data, input_key: str, device: torch.device, autocast,
                     rows: int | None = None) -> int:
    """Rows per forward pass: ``spec.micro_batch_size``, the whole batch (or this process's
    ``rows`` of it) when unset, and with ``"auto"`` on CUDA the largest that fits
    (``training.micro_batch``); on CPU "auto" is the whole batch (memory is the machine's)."""
    size, rows = spec.micro_batch_size, rows or spec.batch_size
    if size is None or (size == "auto" and device.type != "cuda"):
        return rows
    if size == "auto":
        def probe_rows(k: int) -> dict[str, torch.Tensor]:
            return gather(data, np.arange(min(k, len(data))))

        share = spec if rows == spec.batch_size else replace(spec, batch_size=rows)
        return largest_fitting_micro_batch(share, model, loss_fn, probe_rows, input_key, device, autocast)
    return min(int(size), rows)


def _save(policy: CheckpointPolicy, spec: RunSpec, model, optimizer, result: RunResult, batches: Batches,
          losses: torch.Tensor, parallel: OneProcess) -> None:
    state = TrainState(
        run_id=spec.run_id, step=result.steps, tokens=result.tokens, curve=result.curve,
        scalars={"data_pos": batches.pos, "data_rng": batches.rng.bit_generator.state},
        tensors={"data_order": torch.from_numpy(np.ascontiguousarray(batches.order)),
                 "losses": losses[:result.steps]},
    )
    parallel.save(policy, model, optimizer, state)


def _resume(state: TrainState, result: RunResult, batches: Batches, losses: torch.Tensor) -> int:
    """Put a restored state into the loop's variables; return the step to continue from."""
    result.steps, result.tokens, result.curve = state.step, state.tokens, [list(p) for p in state.curve]
    batches.order = state.tensors["data_order"].numpy().copy()
    batches.pos = state.scalars["data_pos"]
    batches.rng.bit_generator.state = state.scalars["data_rng"]
    losses[:state.step] = state.tensors["losses"].to(losses.device)
    return state.step


def _start_branch(state: StableState, spec: RunSpec, model, optimizer, batches: Batches, losses: torch.Tensor,
                  result: RunResult, per_sample: int) -> int:
    """Put a WSD branch where ``state`` left its family's stable phase; the step to go on from."""
    if state.family != spec.family or not 0 < state.step <= spec.cooldown_start or spec.schedule != "wsd":
        raise ValueError(f"run {spec.run_id} cannot start from a stable state of family {state.family} at step "
                         f"{state.step} (its family {spec.family}, cooldown from step {spec.cooldown_start})")
    model.load_state_dict(state.model)
    optimizer.load_state_dict(state.optimizer)
    batches.restore(state.data)
    torch.set_rng_state(state.torch_rng)
    losses[:state.step] = state.losses.to(losses.device)
    result.steps = state.step
    result.tokens = state.step * spec.batch_size * per_sample
    result.timings["stable_steps_reused"] = float(state.step)
    return state.step


def _report(losses: torch.Tensor, begin: int, end: int, tokens: int, spec: RunSpec, result: RunResult,
            progress: ProgressSink) -> None:
    """One point of the curve: the mean training loss of steps [begin, end), checked for divergence."""
    mean = float(losses[begin:end].mean())
    result.curve.append([tokens, mean])
    _check_divergence(mean, float(losses[0]), spec, end, tokens)
    progress(spec.run_id, tokens, spec.tokens, mean)


def curve_point(spec: RunSpec, point: list[float], per_sample: int) -> tuple[int, dict[str, float]]:
    """A curve point ``[tokens, mean loss]`` as a tracker logs it: step = tokens seen, with the
    learning rate of the interval's last optimizer step."""
    tokens = int(point[0])
    steps = -(-tokens // (spec.batch_size * per_sample))
    return tokens, {"train/loss": point[1], "train/lr": spec.lr * schedule_factor(spec, steps - 1)}


def _check_divergence(mean: float, first: float, spec: RunSpec, steps: int, tokens: int) -> None:
    where = f"at step {steps} ({tokens:,} of {spec.tokens:,} tokens)"
    if not math.isfinite(mean):
        raise _Diverged(f"train loss became {mean} {where}")
    if mean > spec.divergence_factor * first:
        raise _Diverged(
            f"train loss {mean:.4g} exceeds {spec.divergence_factor:g} x its first value {first:.4g} {where}"
        )


@torch.no_grad()
def evaluate(model, data, loss_fn, input_key, spec: RunSpec, device, autocast,
             per_sample: int, parallel: OneProcess | None = None) -> tuple[float, float, float]:
    """Mean loss over ``spec.eval_tokens`` held-out units spread evenly over the split
    (the same units for every run of the sweep); bits per byte: the summed loss over
    the windows' predicted tokens / their UTF-8 bytes (``data.target_bytes``) / ln 2, NaN when
    the dataset does not count bytes (it assumes a loss averaged over the ``seq_len - 1``
    predicted tokens of each window, as the next-token loss is); and, for batches with
    ``labels`` (image classification), the top-1 error: the share whose highest logit is not
    the label (NaN otherwise).

    The units go in chunks of ``batch_size``; the processes of a run (``parallel``) take every
    k-th chunk and add up their sums, so k processes measure the same units as one."""
    parallel = parallel or OneProcess()
    model.eval()
    indices = eval_indices(len(data), max(1, spec.eval_tokens // per_sample))
    chunks = [indices[start:start + spec.batch_size] for start in range(0, len(indices), spec.batch_size)]
    mine = chunks[parallel.rank::parallel.world]
    passes = -(-len(chunks) // parallel.world) if parallel.lockstep else len(mine)
    count_bytes = getattr(data, "target_bytes", None) if per_sample > 1 else None
    total, count, target_bytes, wrong, unlabelled, uncounted = 0.0, 0, 0, 0, 0, 0
    for i in range(passes):
        chunk = mine[i] if i < len(mine) else chunks[0]  # a collective forward pass counted elsewhere
        batch = {k: v.to(device) for k, v in gather(data, chunk).items()}
        with autocast:
            logits = model(batch[input_key])
            loss = loss_fn(logits, batch)
        if i >= len(mine):
            continue
        if "labels" in batch:
            wrong += int((logits.argmax(-1) != batch["labels"]).sum())
        else:
            unlabelled += 1
        total += float(loss) * len(chunk)
        count += len(chunk)
        counted = count_bytes(chunk) if count_bytes is not None else None
        if counted is None:
            uncounted += 1
        else:
            target_bytes += int(np.sum(counted))
    model.train()
    total, count, target_bytes, wrong, unlabelled, uncounted = parallel.combine(
        [total, count, target_bytes, wrong, unlabelled, uncounted])
    bpb = (total * (per_sample - 1) / target_bytes / math.log(2)
           if count_bytes is not None and not uncounted and target_bytes else math.nan)
    return total / count, bpb, (wrong / count if not unlabelled else math.nan)
