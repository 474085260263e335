"""One run on k processes (``processes_per_run = k``) through ``torch.distributed``.

Each process (a rank) draws the same global batch in the same seeded order and trains on
its contiguous slice of it, so k ranks see exactly the rows one process would;
``batch_size`` stays the global batch per optimizer step and ``micro_batch_size`` splits
each rank's slice. ``parallel = "ddp"`` (default) keeps a replica per rank
(``DistributedDataParallel``); ``"fsdp"`` shards parameters, gradients and AdamW state over
the ranks (FSDP2 ``fully_shard``: each block of every ``nn.ModuleList``, then the root).
Backends: gloo on CPU, NCCL (with gloo for CPU tensors) on CUDA, one GPU per local rank.

Checkpoints: under DDP the writer (rank 0) saves the unwrapped model's full state, the
same file one process writes (a run may resume with another k); under FSDP every rank
writes its shards through ``torch.distributed.checkpoint`` in safetensors
(``HuggingFaceStorageWriter``: no pickled metadata) into ``step-N.dcp.tmp/``, rank 0 adds
the loop's state and renames the folder to ``step-N.dcp`` once all are written.

The task every executor maps (``branches.train_item``) works in three situations:

(a) ``processes_per_run == 1``: it trains in the calling process, as always.
(b) ``processes_per_run = k > 1`` and no process group in the environment: it launches k
    local rank processes itself, as ``torchrun`` does (a free port on 127.0.0.1; RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT in each one's environment), forwards
    rank 0's progress, and returns rank 0's outcome. A rank that dies (killed, out of
    memory) ends the others and the run starts again from its last checkpoint, up to
    ``RESTARTS`` times; an exception in a rank ends the others and is the run's outcome; a
    stop request (SIGTERM, Ctrl-C) reaches every rank, which checkpoint at the same step.
    Every process it started is ended before it returns or raises.
(c) the environment holds a launched group (WORLD_SIZE = k > 1, RANK, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT, as torchrun, srun through submitit, or a cluster sets them):
    it trains this rank; rank 0 returns the outcome, the other ranks return None.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flops_fit.errors import Interrupted, OptionError, RunLost
from flops_fit.executors.base import ProgressSink, ignore_progress
from flops_fit.executors.stopping import stop_on_signals, stop_requested
from flops_fit.files import fsync
from flops_fit.training.checkpoint import (
    SHARDED,
    CheckpointPolicy,
    TrainState,
    checkpoint_path,
    read_checkpoint,
    restore_rng,
    save_state,
    save_weights,
)
from flops_fit.training.loop import OneProcess, resolve_device

RESTARTS = 3  # fresh gangs after a rank died, before the run is lost (torchrun's --max-restarts)
ERROR_GRACE = 10.0  # seconds the other ranks get to end by themselves after one raised
ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
RankTask = Callable[[Any, ProgressSink, OneProcess], Any]


def processes_per_run(item: Any) -> int:
    """The processes a work item (a RunSpec or a WSD family) spans."""
    return int(item.processes_per_run)


def launched_world() -> int | None:
    """WORLD_SIZE of a process group an outside launcher set up around this process, or None."""
    world = os.environ.get("WORLD_SIZE")
    if world is None or int(world) <= 1:
        return None
    missing = [name for name in ENV if name not in os.environ]
    if missing:
        raise OptionError(f"WORLD_SIZE={world} is set but {', '.join(missing)} not: launch the run with torchrun "
                          "or srun (which set all of RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)")
    return int(world)


def run_ranks(task: RankTask, item: Any, progress: ProgressSink = ignore_progress) -> Any:
    """``task(item, progress, parallel)`` on the k processes of ``item``'s run: launched here
    (b) or, inside a launched group, as this rank (c)."""
    k = processes_per_run(item)
    world = launched_world()
    if world is None:
        return launch(task, item, progress, k)
    if world != k:
        raise OptionError(f"this run spans processes_per_run = {k} processes but the launcher started "
                          f"WORLD_SIZE = {world}: launch it with {k} processes (e.g. torchrun --nproc-per-node {k})")
    return train_this_rank(task, item, progress)


# ---------------------------------------------------------------------- one rank (c)
def train_this_rank(task: RankTask, item: Any, progress: ProgressSink = ignore_progress) -> Any:
    """Join the launched group (unless this process already has), run ``task`` as this rank,
    leave the group; rank 0's outcome, None on the other ranks."""
    import torch.distributed as dist

    runs = getattr(item, "runs", None)
    spec = runs[0] if runs else item
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    cuda = resolve_device(spec.device).type == "cuda"
    joined = not dist.is_initialized()
    if joined:
        dist.init_process_group("cpu:gloo,cuda:nccl" if cuda else "gloo", rank=rank, world_size=world)
    kind = FullyShardedRanks if spec.parallel == "fsdp" else ReplicatedRanks
    outcome = task(item, progress if rank == 0 else ignore_progress, kind(rank, world, local))
    if joined:  # not after an exception: leaving the group waits for ranks that may never come
        dist.destroy_process_group()
    return outcome if rank == 0 else None


class ReplicatedRanks(OneProcess):
    """A rank of a DDP run: a replica of the model, gradients averaged after each step's
    last micro-batch; rank 0 writes the full checkpoints every rank reads."""

    def __init__(self, rank: int, world: int, local_rank: int) -> None:
        self.rank, self.world, self.local_rank = rank, world, local_rank
        self.weight = 1.0
        self._on: torch.device = torch.device("cpu")
        self._ddp: Any = None

    def device(self, device: torch.device) -> torch.device:
        if device.type == "cuda":
            torch.cuda.set_device(self.local_rank)
            device = torch.device("cuda", self.local_rank)
        self._on = device
        return device

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel

        self._ddp = DistributedDataParallel(model, device_ids=[self.local_rank] if self._on.type == "cuda" else None)
        return self._ddp

    def no_sync(self) -> Callable[[], Any]:
        return self._ddp.no_sync

    def rows(self, indices: np.ndarray) -> tuple[np.ndarray, float]:
        mine = np.array_split(indices, self.world)[self.rank]
        if len(mine) == 0:  # fewer rows than ranks: a pass that adds nothing keeps the collectives in step
            self.weight = 0.0
            return indices[:1], 0.0
        self.weight = len(mine) * self.world / len(indices)
        return mine, self.weight

    def agree(self, loss: torch.Tensor, stop: bool, due: bool) -> tuple[torch.Tensor, bool, bool]:
        import torch.distributed as dist

        values = torch.stack([loss.float() * (self.weight / self.world), loss.new_tensor(float(stop)),
                              loss.new_tensor(float(due and self.writer))])
        dist.all_reduce(values)
        return values[0], bool(values[1] > 0), bool(values[2] > 0)

    def combine(self, sums: list[float]) -> list[float]:
        import torch.distributed as dist

        total = torch.tensor(sums, dtype=torch.float64)
        dist.all_reduce(total)
        return [float(v) for v in total]

    def save(self, policy: CheckpointPolicy, model, optimizer, state: TrainState) -> None:
        if self.writer:
            super().save(policy, model, optimizer, state)

    def save_weights(self, path, model) -> None:
        if self.writer:
            super().save_weights(path, model)


class FullyShardedRanks(ReplicatedRanks):
    """A rank of an FSDP2 run: its shard of every parameter, gradient and AdamW moment;
    forward passes gather the blocks' parameters, so every rank runs as many."""

    lockstep = True

    def shard(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(self._on.type, (self.world,))
        for blocks in [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]:
            for block in blocks:
                fully_shard(block, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        self._model = model
        return model

    def passes(self, rows: int, micro: int) -> int | None:
        largest = math.ceil(rows / self.world)  # the largest slice's micro-batches
        return math.ceil(largest / micro)

    def no_sync(self) -> Callable[[], Any]:
        model = self._model

        @contextlib.contextmanager
        def deferred():
            model.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                model.set_requires_gradient_sync(True)

        return deferred

    def save(self, policy: CheckpointPolicy, model, optimizer, state: TrainState) -> None:
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import HuggingFaceStorageWriter

        folder = policy.run_dir(state.run_id)
        final = folder / f"step-{state.step:09d}.dcp"
        temporary = final.with_name(final.name + ".tmp")
        if self.writer:
            shutil.rmtree(temporary, ignore_errors=True)
            (temporary / "shards").mkdir(parents=True)
        dist.barrier()
        dcp.save(_sharded_state(model, optimizer),
                 storage_writer=HuggingFaceStorageWriter(str(temporary / "shards"), save_distributed=True))
        dist.barrier()
        if self.writer:  # the loop's state and rank 0's RNGs, then the commit: one rename
            save_state(temporary, {}, None, state, keep=1)
            fsync(temporary / "shards")
            shutil.rmtree(final, ignore_errors=True)
            os.replace(temporary, final)
            fsync(folder)
            for old in sharded_checkpoints(folder)[policy.keep:]:
                shutil.rmtree(old, ignore_errors=True)
        dist.barrier()

    def load(self, policy: CheckpointPolicy, run_id: str, model, optimizer) -> TrainState | None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import HuggingFaceStorageReader
        from torch.distributed.checkpoint.state_dict import set_state_dict

        found = sharded_checkpoints(policy.run_dir(run_id))
        if not found:
            return None
        newest = found[0]
        saved = read_checkpoint(checkpoint_path(newest, int(SHARDED.match(newest.name).group(1))), run_id=run_id)
        state = _sharded_state(model, optimizer)
        dcp.load(state, storage_reader=HuggingFaceStorageReader(str(newest / "shards")))
        model_state, optimizer_state = _unflatten(state, optimizer, model)
        set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)
        restore_rng(saved.state.rng, saved.rng_tensors)
        return saved.state

    def save_weights(self, path, model) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.writer:
            save_weights(path, full)


def sharded_checkpoints(folder: Path) -> list[Path]:
    """A run's committed FSDP checkpoints (``step-N.dcp`` folders), newest first."""
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := SHARDED.match(p.name)) and not m.group(2)]
    return [path for _, path in sorted(found, reverse=True)]


def _sharded_state(model, optimizer) -> dict[str, Any]:
    """The model's and optimizer's tensors (this rank's shards), flat under string keys;
    the optimizer state is created first if the run has not stepped yet."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    tied = _tied(model)
    flat = {f"model/{k}": v for k, v in model_state.items() if k not in tied}
    for name, values in optimizer_state["state"].items():
        for key, value in values.items():
            flat[f"optim/{name}/{key}"] = value
    return flat


def _tied(model) -> dict[str, str]:
    """Names of parameters tied to an earlier one (a head sharing the embedding) -> that one's
    name: written once, under the first name, and loaded into both."""
    first: dict[int, str] = {}
    return {name: first[id(p)] for name, p in model.named_parameters(remove_duplicate=False)
            if first.setdefault(id(p), name) != name}


def _unflatten(flat: dict[str, Any], optimizer, model) -> tuple[dict[str, Any], dict[str, Any]]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    _, current = get_state_dict(model, optimizer)
    model_state = {k[len("model/"):]: v for k, v in flat.items() if k.startswith("model/")}
    model_state.update({name: model_state[first] for name, first in _tied(model).items()})
    state: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        if key.startswith("optim/"):
            name, _, field = key[len("optim/"):].rpartition("/")
            state.setdefault(name, {})[field] = value
    return model_state, {"state": state, "param_groups": current["param_groups"]}


# ---------------------------------------------------------------------- launching (b)
def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (bound to port 0 and read back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(task: RankTask, item: Any, progress: ProgressSink, k: int, restarts: int = RESTARTS) -> Any:
    """Train ``item`` on k local rank processes; rank 0's outcome. A gang with a dead rank is
    replaced by a fresh one (from the run's last checkpoint) up to ``restarts`` times."""
    deaths: list[str] = []
    while True:
        lost, outcome = _gang(task, item, progress, k)
        if not lost:
            return outcome
        deaths.append(outcome)
        if len(deaths) > restarts:
            raise RunLost(f"a rank of its {k} processes died {len(deaths)} times (restarts={restarts}); "
                          f"last: {deaths[-1]}")


def _gang(task: RankTask, item: Any, progress: ProgressSink, k: int) -> tuple[bool, Any]:
    """One attempt: (False, rank 0's outcome) or (True, what died); raises a rank's exception,
    or ``Interrupted`` after every rank checkpointed on a stop request."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    threads = max(1, torch.get_num_threads() // k)
    port, parent = free_port(), os.getpid()
    ranks: list[tuple[Any, Any]] = []
    try:
        for rank in range(k):
            env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(k), "LOCAL_WORLD_SIZE": str(k),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": str(threads)}
            ours, theirs = context.Pipe()
            process = context.Process(target=_rank_main, args=(task, item, env, threads, parent, theirs), daemon=True)
            process.start()
            theirs.close()
            ranks.append((process, ours))
        return _watch(ranks, progress)
    finally:
        for process, _ in ranks:
            if process.is_alive():
                process.kill()
        for process, conn in ranks:
            process.join()
            conn.close()


def _watch(ranks: list[tuple[Any, Any]], progress: ProgressSink) -> tuple[bool, Any]:
    """Read the ranks' messages until every rank has ended, then decide what the attempt was:
    a stop, a death (restart), an exception (the run's outcome), or rank 0's outcome."""
    running = {conn: rank for rank, (_, conn) in enumerate(ranks)}
    outcomes: dict[int, Any] = {}
    errors: list[tuple[float, BaseException]] = []  # (when the rank raised it, the exception)
    died: list[str] = []
    ended: set[int] = set()  # ranks this launcher killed
    signals: list[int] = []  # the ranks that stopped on a stop request, by its signal
    forwarded: int | None = None  # this process's stop request, passed on to the ranks
    deadline: float | None = None

    def end_all() -> None:
        for rank in running.values():
            ranks[rank][0].kill()
            ended.add(rank)

    while running:
        if stop_requested() is not None and forwarded is None:
            forwarded = stop_requested()
            for rank in running.values():
                ranks[rank][0].terminate()  # SIGTERM: the ranks checkpoint at one step and stop
        if deadline is not None and time.monotonic() > deadline:
            end_all()
        sentinels = {ranks[rank][0].sentinel: conn for conn, rank in running.items()}
        for ready in wait([*running, *sentinels], timeout=0.2):
            conn = sentinels.get(ready, ready)
            if conn not in running or (ready is not conn and conn.poll()):
                continue  # already ended, or a rank's last messages still to read
            rank = running[conn]
            try:
                kind, payload = conn.recv() if ready is conn else ("exit", None)
            except EOFError:
                kind, payload = "exit", None
            if kind == "progress":
                progress(*payload)
                continue
            del running[conn]
            if kind == "done":
                outcomes[rank] = payload
            elif kind == "interrupted":
                signals.append(payload)
            elif kind == "error":
                errors.append(payload)
            elif rank not in ended:
                process = ranks[rank][0]
                process.join()
                died.append(f"rank {rank} exited with code {process.exitcode} mid-run")
                end_all()  # the others wait on it in a collective
            if errors and deadline is None:  # the others end by themselves, or soon by force
                deadline = time.monotonic() + ERROR_GRACE
    if signals or (died and forwarded is not None):  # a rank the stop reached before its handler: no restart
        signum = signals[0] if signals else forwarded
        raise Interrupted(signum, f"stopped by signal {signum}; the run checkpointed")
    if died:
        return True, died[0]
    if errors:  # the first raised is the cause; the others' collectives failed because of it
        raise min(errors, key=lambda error: error[0])[1]
    return False, outcomes.get(0)


def _rank_main(task: RankTask, item: Any, env: dict[str, str], threads: int, parent: int, conn: Any) -> None:
    """A launched rank: its environment, thread count and signals, then the task; the outcome
    (or the exception, or the stop) goes back over ``conn``. It ends if its launcher does."""
    os.environ.update(env)
    torch.set_num_threads(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the launcher, which stops the ranks
    threading.Thread(target=_end_with_parent, args=(parent,), daemon=True).start()

    def progress(*message: Any) -> None:
        conn.send(("progress", message))

    with stop_on_signals((signal.SIGTERM,)):
        try:
            outcome = train_this_rank(task, item, progress)
        except Interrupted as exc:
            conn.send(("interrupted", exc.signum))
            return
        except Exception as exc:  # noqa: BLE001 - the rank's failure travels back to the launcher
            _send(conn, "error", exc, time.monotonic())
            return
        _send(conn, "done", outcome)


def _send(conn: Any, kind: str, value: Any, when: float | None = None) -> None:
    """``value`` (an error: with the monotonic time it was raised at, the same clock for every
    rank of this host) to the launcher; a value that cannot be pickled goes as an error."""
    try:
        conn.send((kind, value if when is None else (when, value)))
    except Exception as exc:  # noqa: BLE001 - a value that cannot be pickled
        error = RuntimeError(f"{type(value).__name__}: {value} (could not be sent back: {exc})")
        conn.send(("error", (when or time.monotonic(), error)))


def _end_with_parent(parent: int) -> None:
    """Exit when the launching process is gone (killed), so no rank outlives it."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


__all__ = ["FullyShardedRanks", "ReplicatedRanks", "launch", "processes_per_run", "run_ranks", "train_this_rank"]
