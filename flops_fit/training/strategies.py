"""How a run's processes share its work: one process, DDP or FSDP2 ranks.

A strategy is applied to the model once, from outside (``parallelize``, as torchtitan's
``parallelize_fn``), and otherwise only answers questions without side effects: which device
this process uses, which rows of a step are its own (``share``), and sums over the processes
(``all_sum``). The loop is the same for one process and for k; checkpoints are the
checkpointer's (``training.checkpoint``, ``training.sharded`` for FSDP), not the strategy's.

Each rank draws the same global batch in the same seeded order and trains on its contiguous
slice of it, so k ranks see exactly the rows one process would; ``batch_size`` stays the global
batch per optimizer step and ``micro_batch_size`` splits each rank's slice. DDP keeps a replica
per rank (``DistributedDataParallel``); FSDP2 shards parameters, gradients and AdamW state over
the ranks (``fully_shard``: each block of every ``nn.ModuleList``, then the root).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class Share:
    """This process's part of one optimizer step: its ``rows`` of the batch, the ``weight`` of its
    mean loss (its rows x processes / the batch's rows: the ranks' averaged gradients are then the
    whole batch's), and the forward ``passes`` it makes (None: as many as its rows need)."""

    rows: np.ndarray
    weight: float
    passes: int | None = None


@dataclass(frozen=True)
class Parallelized:
    """A model with its strategy applied: ``model`` is what the optimizer, evaluation and
    checkpoints use, ``forward`` what the training steps run through (a DDP wrapper), and
    ``no_sync()`` a context for the micro-batches whose gradients are not yet synchronised."""

    model: torch.nn.Module
    forward: torch.nn.Module
    no_sync: Callable[[], Any] = contextlib.nullcontext


class OneProcess:
    """The run on one process."""

    rank, world = 0, 1
    lockstep = False  # every forward pass is collective (FSDP): all ranks run as many
    sharded = False  # every rank holds only a shard of the state (FSDP): checkpoints are sharded too

    @property
    def writer(self) -> bool:
        """Whether this process writes the run's files (checkpoints, weights, its result)."""
        return self.rank == 0

    def device(self, device: torch.device) -> torch.device:
        """This process's device, given the run's."""
        return device

    def parallelize(self, model: torch.nn.Module) -> Parallelized:
        return Parallelized(model, model)

    def share(self, indices: np.ndarray, micro: int) -> Share:
        return Share(indices, 1.0)

    def all_sum(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` summed over every process of the run."""
        return values


class ReplicatedRanks(OneProcess):
    """A rank of a DDP run: a replica of the model, gradients averaged after each step's last
    micro-batch."""

    def __init__(self, rank: int, world: int, local_rank: int) -> None:
        self.rank, self.world, self.local_rank = rank, world, local_rank

    def device(self, device: torch.device) -> torch.device:
        if device.type == "cuda":
            torch.cuda.set_device(self.local_rank)
            return torch.device("cuda", self.local_rank)
        return device

    def parallelize(self, model: torch.nn.Module) -> Parallelized:
        from torch.nn.parallel import DistributedDataParallel

        cuda = next(model.parameters()).device.type == "cuda"
        ddp = DistributedDataParallel(model, device_ids=[self.local_rank] if cuda else None)
        return Parallelized(model, ddp, ddp.no_sync)

    def share(self, indices: np.ndarray, micro: int) -> Share:
        mine = np.array_split(indices, self.world)[self.rank]
        if len(mine) == 0:  # fewer rows than ranks: a pass that adds nothing keeps the collectives in step
            return Share(indices[:1], 0.0)
        return Share(mine, len(mine) * self.world / len(indices))

    def all_sum(self, values: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        dist.all_reduce(values)
        return values


class FullyShardedRanks(ReplicatedRanks):
    """A rank of an FSDP2 run: its shard of every parameter, gradient and AdamW moment; forward
    passes gather the blocks' parameters, so every rank runs as many."""

    lockstep = True
    sharded = True

    def parallelize(self, model: torch.nn.Module) -> Parallelized:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(next(model.parameters()).device.type, (self.world,))
        for blocks in [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]:
            for block in blocks:
                fully_shard(block, mesh=mesh)
        model = fully_shard(model, mesh=mesh)

        @contextlib.contextmanager
        def deferred():
            model.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                model.set_requires_gradient_sync(True)

        return Parallelized(model, model, deferred)

    def share(self, indices: np.ndarray, micro: int) -> Share:
        share = super().share(indices, micro)
        largest = math.ceil(len(indices) / self.world)  # the largest slice's micro-batches
        return Share(share.rows, share.weight, math.ceil(largest / micro))


def agree(parallel: OneProcess, loss: torch.Tensor, share: Share, stop: bool, due: bool) -> tuple[torch.Tensor, bool, bool]:
    """The step's loss over the whole batch, whether any process must stop, whether the checkpoint
    timer (the writer's) has run out: the same on every process."""
    if parallel.world == 1:
        return loss, stop, due
    values = torch.stack([loss.float() * (share.weight / parallel.world), loss.new_tensor(float(stop)),
                          loss.new_tensor(float(due and parallel.writer))])
    values = parallel.all_sum(values)
    return values[0], bool(values[1] > 0), bool(values[2] > 0)


def sum_over(parallel: OneProcess, sums: list[float]) -> list[float]:
    """Partial sums (the held-out loss's) added up over every process."""
    if parallel.world == 1:
        return sums
    return [float(v) for v in parallel.all_sum(torch.tensor(sums, dtype=torch.float64))]
