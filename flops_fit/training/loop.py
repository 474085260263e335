"""Train one RunSpec: exactly its planned tokens, then the held-out loss.

The loop builds the model, applies the run's parallel strategy to it once
(``training.strategies``), steps and evaluates. AdamW (no weight decay on biases, norms and
other 1-D parameters), the run's learning-rate schedule (``schedules``: warmup then a cosine
that ends with this run, or warmup-stable-decay), each step's batch in micro-batches whose
gradients accumulate (``micro_batch_size``), gradient clipping, seeded data order and
initialisation, bf16 autocast on CUDA. The training loss is averaged over ``curve_points``
equal intervals for the curve; a non-finite or diverging loss stops the run and returns it as
failed with the reason. With a ``CheckpointPolicy`` the run saves its state every few minutes
and continues from it after a kill (``training.checkpoint``); a WSD branch may start from the
stable phase of a shorter branch of its family. Both are one ``LoopState`` (``training.state``).
"""

from __future__ import annotations

import contextlib
import math
import signal
import time
from collections.abc import Callable, Collection
from typing import Any

import torch

from flops_fit.errors import Interrupted, PlanError
from flops_fit.executors.base import ProgressSink, ignore_progress
from flops_fit.executors.stopping import stop_requested
from flops_fit.plugin import api
from flops_fit.plugin.contracts import TASK_INPUTS
from flops_fit.store.runs import RunResult, RunSpec
from flops_fit.tracking.base import RunTracker
from flops_fit.training.checkpoint import Checkpointer, CheckpointPolicy
from flops_fit.training.data import Batches, check_sequence_length, gather
from flops_fit.training.schedules import schedule_factor
from flops_fit.training.sharded import ShardedCheckpointer
from flops_fit.training.state import LoopState, Rng, Snapshot
from flops_fit.training.steps import accumulate, evaluate, make_optimizer, micro_batch_rows
from flops_fit.training.strategies import OneProcess, agree


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class _Diverged(Exception):
    """The run's training loss went non-finite or grew past its bound: the run fails with ``error``."""

    @property
    def error(self) -> str:
        return f"diverged: {self}"


class _UnusableLoss(_Diverged):
    """The loss was not finite at the first step, before any update: no learning rate diverged (a loss or
    model that gives NaN, bad data), so the error does not say "diverged"."""

    @property
    def error(self) -> str:
        return str(self)


def checkpointer(policy: CheckpointPolicy, run_id: str, parallel: OneProcess) -> Checkpointer:
    """The run's checkpointer: one file by the writer, or every rank's shards (FSDP)."""
    kind = ShardedCheckpointer if parallel.sharded else Checkpointer
    return kind(policy.run_dir(run_id), run_id, keep=policy.keep, writer=parallel.writer)


def built(spec: RunSpec, host: Any = None) -> torch.nn.Module:
    """The run's model, refused when it is not the model planned: a config file edited since the plan
    (``hf-causal-lm`` reads its config.json at each run) or a plugin changed mid-sweep would train
    another model under the planned run's name, and a resumed sweep would fit the two together."""
    model = api.create_model(spec.model, spec.size, host=host, **spec.model_config)  # checks num_params() exists
    counted = int(model.num_params())
    if counted != spec.params:
        raise PlanError(f"run {spec.run_id}: the model built has {counted:,} parameters where the plan counted "
                        f"{spec.params:,}: its configuration changed since the sweep was planned (an edited config "
                        "file, another plugin version); sweep it into a new --out folder")
    return model


def train(spec: RunSpec, progress: ProgressSink = ignore_progress, *, host: Any = None,
          checkpoints: CheckpointPolicy | None = None, start: Snapshot | None = None,
          on_stable: Callable[[Snapshot], None] | None = None, stable_at: Collection[int] = (),
          tracker: RunTracker | None = None, parallel: OneProcess | None = None) -> RunResult:
    """Train ``spec`` and return its result; divergence gives ``status="failed"``.

    ``progress(run_id, done, total, train_loss)`` hears about the run as it trains (an
    executor passes the sink that carries reports back to the sweep driver); the first
    report of an attempt has a NaN loss and ``done`` = the units it starts from.

    With ``checkpoints``, the run continues from its newest valid checkpoint (bit for bit on
    CPU) and saves one every ``checkpoints.seconds`` of training; on a stop request (SIGTERM,
    Ctrl-C: ``executors.stopping``) it checkpoints after the current step and raises
    ``Interrupted``. The caller removes the checkpoints once the result is safely stored.

    A WSD branch may ``start`` from a stable phase of its family at or before its cooldown
    start (unless it has its own checkpoint), and hands its own to ``on_stable`` when its
    cooldown starts, and at each of the steps ``stable_at`` before it (its family's waypoints);
    either way its result is the one it would have trained from scratch.

    ``parallel`` is this process's part of a run spread over several (``training.strategies``).
    """
    parallel = parallel or OneProcess()
    t_start = time.perf_counter()
    device = parallel.device(resolve_device(spec.device))
    torch.manual_seed(spec.seed)
    entry = api.model_info(spec.model, host=host)
    input_key = TASK_INPUTS[entry.task]
    per_sample = spec.seq_len if entry.flops_unit == "token" else 1
    net = parallel.parallelize(built(spec, host).to(device))
    model = net.model
    loss_fn = api.get_loss(spec.loss, host=host)
    train_data = api.create_dataset(spec.dataset, "train", host=host, **spec.dataset_config)
    eval_data = api.create_dataset(spec.dataset, spec.eval_split, host=host, **spec.dataset_config)
    optimizer = make_optimizer(model, spec, device)
    step_model = torch.compile(net.forward) if spec.compile else net.forward
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16) if spec.precision == "bf16" else contextlib.nullcontext()
    )
    batches = Batches(train_data, spec.seed)
    micro = micro_batch_rows(spec, model, loss_fn, train_data, input_key, device, autocast,
                             rows=-(-spec.batch_size // parallel.world))
    params = [p for p in model.parameters() if p.requires_grad]
    result = RunResult(run_id=spec.run_id, status="done", device=str(device),
                       unique_tokens=spec.unique_tokens or getattr(train_data, "unique_tokens", None))
    interval = max(1, math.ceil(spec.steps / spec.curve_points))
    losses = torch.empty(spec.steps, device=device)  # each step's training loss, for the curve
    start_step = 0
    saver = checkpoints and checkpointer(checkpoints, spec.run_id, parallel)
    saved = saver and saver.load(model, optimizer)
    if saved:
        start_step = _continue(saved, result, batches, losses)
        result.timings["resumed_from_step"] = start_step
    elif start is not None:
        start_step = _start_branch(start, spec, model, optimizer, batches, losses, result)
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
            if on_stable is not None and spec.schedule == "wsd" and (
                    step == spec.cooldown_start or (step < spec.cooldown_start and step in stable_at)):
                on_stable(Snapshot.take(_state(spec.family, result, batches, losses), model, optimizer))
            t0 = time.perf_counter()
            rows = min(spec.batch_size, (spec.tokens - result.tokens) // per_sample)
            share = parallel.share(batches.indices(rows), micro)
            batch = {k: v.to(device, non_blocking=True) for k, v in gather(train_data, share.rows).items()}
            data_s += time.perf_counter() - t0
            if step == start_step:
                check_sequence_length(spec, batch[input_key])
            for group in optimizer.param_groups:
                group["lr"] = spec.lr * schedule_factor(spec, step) * group.get("lr_scale", 1.0)
            loss = accumulate(step_model, loss_fn, batch, input_key, micro, autocast, net.no_sync, share.weight,
                              share.passes)
            stop = stop_requested()
            due = bool(checkpoints) and 0 < checkpoints.seconds <= time.perf_counter() - last_save
            loss, stop_all, due = agree(parallel, loss, share, stop is not None, due)
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
            if saver and (stop_all or due):
                saver.save(model, optimizer, _state(spec.run_id, result, batches, losses))
                last_save = time.perf_counter()
                _report_saved(losses, spec, result, progress)
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
            saver.save_weights(weights, model)
    except _Diverged as exc:
        train_s = time.perf_counter() - t_train
        result.status, result.error = "failed", exc.error
    result.flops = result.tokens * spec.flops_per_unit
    if result.unique_tokens:
        result.epochs = result.tokens / result.unique_tokens
    result.timings.update({
        "setup_s": t_train - t_start, "train_s": train_s, "data_s": data_s,
        "total_s": time.perf_counter() - t_start,
    })
    return result


def _state(owner: str, result: RunResult, batches: Batches, losses: torch.Tensor) -> LoopState:
    """The loop's state now, after ``result.steps`` steps (every RNG captured now)."""
    return LoopState(
        run_id=owner, step=result.steps, tokens=result.tokens, curve=[list(p) for p in result.curve],
        data_rng=batches.rng.bit_generator.state, data_order=batches.order.copy(), data_pos=batches.pos,
        losses=losses[:result.steps].clone(), rng=Rng.capture(),
    )


def _continue(state: LoopState, result: RunResult, batches: Batches, losses: torch.Tensor) -> int:
    """Put a loop state into the loop's variables and every RNG; return the step to continue from."""
    result.steps, result.tokens, result.curve = state.step, state.tokens, [list(p) for p in state.curve]
    batches.seek(state.data_rng, state.data_order, state.data_pos)
    state.rng.restore()
    losses[:state.step] = state.losses.to(losses.device)
    return state.step


def _start_branch(stable: Snapshot, spec: RunSpec, model, optimizer, batches: Batches, losses: torch.Tensor,
                  result: RunResult) -> int:
    """Put a WSD branch where ``stable`` left its family's stable phase; the step to go on from.
    The curve is the branch's own (its points lie at its own intervals): the caller redraws it."""
    state = stable.loop
    if state.run_id != spec.family or not 0 < state.step <= spec.cooldown_start or spec.schedule != "wsd":
        raise ValueError(f"run {spec.run_id} cannot start from a stable state of family {state.run_id} at step "
                         f"{state.step} (its family {spec.family}, cooldown from step {spec.cooldown_start})")
    stable.restore(model, optimizer)
    step = _continue(state, result, batches, losses)
    result.curve = []
    result.timings["stable_steps_reused"] = float(step)
    return step


def _report(losses: torch.Tensor, begin: int, end: int, tokens: int, spec: RunSpec, result: RunResult,
            progress: ProgressSink) -> None:
    """One point of the curve: the mean training loss of steps [begin, end), checked for divergence."""
    mean = float(losses[begin:end].mean())
    result.curve.append([tokens, mean])
    _check_divergence(mean, float(losses[0]), spec, end, tokens)
    progress(spec.run_id, tokens, spec.tokens, mean)


def _report_saved(losses: torch.Tensor, spec: RunSpec, result: RunResult, progress: ProgressSink) -> None:
    """The steps a checkpoint just written keeps, reported so the store counts them (a resumed attempt is
    counted from there), before the first curve point too; a NaN loss would read as a new attempt."""
    shown = result.curve[-1][1] if result.curve else float(losses[:result.steps].mean())
    if math.isfinite(shown):
        progress(spec.run_id, result.tokens, spec.tokens, shown)


def curve_point(spec: RunSpec, point: list[float], per_sample: int) -> tuple[int, dict[str, float]]:
    """A curve point ``[tokens, mean loss]`` as a tracker logs it: step = tokens seen, with the
    learning rate of the interval's last optimizer step."""
    tokens = int(point[0])
    steps = -(-tokens // (spec.batch_size * per_sample))
    return tokens, {"train/loss": point[1], "train/lr": spec.lr * schedule_factor(spec, steps - 1)}


def _check_divergence(mean: float, first: float, spec: RunSpec, steps: int, tokens: int) -> None:
    where = f"at step {steps} ({tokens:,} of {spec.tokens:,} tokens)"
    if not math.isfinite(first):
        raise _UnusableLoss(f"the loss was {first} at the first step, before any update: check the loss / model / "
                            "data, not the learning rate")
    if not math.isfinite(mean):
        raise _Diverged(f"train loss became {mean} {where}")
    if mean > spec.divergence_factor * first:
        raise _Diverged(
            f"train loss {mean:.4g} exceeds {spec.divergence_factor:g} x its first value {first:.4g} {where}"
        )
