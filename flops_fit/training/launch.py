"""One run on k processes (``processes_per_run = k``) through ``torch.distributed``.

Backends: gloo on CPU, NCCL (with gloo for CPU tensors) on CUDA, one GPU per local rank; the
ranks share the run's work through a strategy (``training.strategies``: DDP by default,
``parallel = "fsdp"`` for FSDP2). The task every executor maps (``training.task.train_item``)
works in three situations:

(a) ``processes_per_run == 1``: it trains in the calling process, as always.
(b) ``processes_per_run = k > 1`` and no process group in the environment: it launches k
    local rank processes itself, as ``torchrun`` does (a free port on 127.0.0.1; RANK,
    WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT in each one's environment), forwards
    rank 0's progress, and returns rank 0's outcome. A rank that dies (killed, out of
    memory) ends the others and the run starts again from its last checkpoint, up to
    ``RESTARTS`` times; an exception in a rank ends the others and is the run's outcome; a
    stop request (SIGTERM, Ctrl-C) reaches every rank, which checkpoint at the same step.
    Every process it started is ended before it returns or raises (``executors.supervisor``,
    the local executor's supervisor too).
(c) the environment holds a launched group (WORLD_SIZE = k > 1, RANK, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT, as torchrun, srun through submitit, or a cluster sets them):
    it trains this rank; rank 0 returns the outcome, the other ranks return None.
"""

from __future__ import annotations

import gc
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from flops_fit.errors import Interrupted, OptionError, RunLost
from flops_fit.executors.base import ProgressSink, ignore_progress, transportable
from flops_fit.executors.stopping import stop_requested
from flops_fit.executors.supervisor import Supervisor, child_signals, progress_over, send
from flops_fit.training.loop import resolve_device
from flops_fit.training.strategies import FullyShardedRanks, OneProcess, ReplicatedRanks

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
    if launched_for(k) is None:
        return launch(task, item, progress, k)
    return train_this_rank(task, item, progress)


def launched_for(k: int) -> int | None:
    """``launched_world()``, refused unless it is the run's ``k``: a group of another size would
    split the run wrongly, or (k = 1) train it once on every rank."""
    world = launched_world()
    if world is not None and world != k:
        how = (f"launch it with {k} processes (e.g. torchrun --nproc-per-node {k})" if k > 1 else
               "run `flops-fit train-run` without torchrun / srun (each rank would train the whole run again)")
        raise OptionError(f"this run spans processes_per_run = {k} processes but the launcher started "
                          f"WORLD_SIZE = {world}: {how}")
    return world


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
        # An FSDP model outlives its run in reference cycles, holding the group: freed here, the group
        # goes with destroy_process_group below, not at interpreter exit, where gloo's worker threads
        # can abort the process ("terminate called without an active exception"; pytorch#179291).
        gc.collect()
        dist.barrier()  # no rank tears gloo down while another is still in its last collective
        dist.destroy_process_group()
    return outcome if rank == 0 else None


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
    threads = max(1, torch.get_num_threads() // k)
    port, parent = free_port(), os.getpid()
    supervisor = Supervisor()
    try:
        for rank in range(k):
            env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(k), "LOCAL_WORLD_SIZE": str(k),
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": str(threads)}
            supervisor.start(_rank_main, task, item, env, threads, parent, tag=rank)
        return _watch(supervisor, progress)
    finally:
        supervisor.close()


def _watch(supervisor: Supervisor, progress: ProgressSink) -> tuple[bool, Any]:
    """Read the ranks' messages until every rank has ended, then decide what the attempt was:
    a stop, a death (restart), an exception (the run's outcome), or rank 0's outcome."""
    running = set(supervisor.children)
    outcomes: dict[int, Any] = {}
    errors: list[tuple[float, BaseException]] = []  # (when the rank raised it, the exception)
    died: list[str] = []
    ended: set[int] = set()  # ranks this launcher killed
    signals: list[int] = []  # the ranks that stopped on a stop request, by its signal
    forwarded: int | None = None  # this process's stop request, passed on to the ranks
    deadline: float | None = None

    def end_all() -> None:
        for rank in running:
            rank.process.kill()
            ended.add(rank.tag)

    while running:
        if stop_requested() is not None and forwarded is None:
            forwarded = stop_requested()
            for rank in running:
                rank.process.terminate()  # SIGTERM: the ranks checkpoint at one step and stop
        if deadline is not None and time.monotonic() > deadline:
            end_all()
        for rank, kind, payload in supervisor.events():
            if kind == "progress":
                progress(*payload)
                continue
            if rank not in running:
                continue  # the exit of a rank that already reported how it ended
            running.discard(rank)
            if kind == "done":
                outcomes[rank.tag] = payload
            elif kind == "interrupted":
                signals.append(payload)
            elif kind == "error":
                errors.append(payload)
            elif rank.tag not in ended:
                died.append(f"rank {rank.tag} exited with code {rank.process.exitcode} mid-run")
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
    threading.Thread(target=_end_with_parent, args=(parent,), daemon=True).start()
    with child_signals():
        try:
            outcome = train_this_rank(task, item, progress_over(conn))
        except Interrupted as exc:
            conn.send(("interrupted", exc.signum))
            return
        except Exception as exc:  # noqa: BLE001 - the rank's failure travels back to the launcher
            # with the monotonic time it was raised at: the same clock for every rank of this host
            conn.send(("error", (time.monotonic(), transportable(exc))))
            return
        send(conn, "done", outcome)


def _end_with_parent(parent: int) -> None:
    """Exit when the launching process is gone (killed), so no rank outlives it."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


__all__ = ["launch", "launched_for", "processes_per_run", "run_ranks", "train_this_rank"]
