"""Task functions for the local executor's worker processes (imported there by name)."""

from __future__ import annotations

import os
import time


def square(item, progress):
    progress(f"run-{item}", item, 10, float(item))
    return item * item


def fail_on_three(item, progress):
    if item == 3:
        raise ValueError(f"item {item} diverged")
    return item


def die_on_two(item, progress):
    """The worker process exits mid-run, as if killed (out of memory, kill -9)."""
    if item == 2:
        os._exit(3)
    return item


def block_unless_zero(item, progress):
    """Item 0 returns at once; any other item blocks until its worker is stopped."""
    if item == 0:
        return 0
    while True:
        time.sleep(60)


def rank_fails(item, progress, parallel):
    """A rank task whose rank 1 raises at once while rank 0 waits for it in a collective."""
    import torch
    import torch.distributed as dist

    if parallel.rank == 1:
        raise ValueError("rank 1 found a bad batch")
    dist.all_reduce(torch.zeros(1))
    return "rank 0 finished"


def rank_dies(item, progress, parallel):
    """A rank task whose rank 1 dies (as if killed) while rank 0 waits for it in a collective."""
    import torch
    import torch.distributed as dist

    if parallel.rank == 1:
        os._exit(7)
    dist.all_reduce(torch.zeros(1))
    return "rank 0 finished"


class Gang:
    """An item that spans two processes, as a run with processes_per_run = 2 does."""

    processes_per_run = 2

    def __init__(self, n):
        self.n = n


def exit_with(code):
    os._exit(code)


def start_a_process(item, progress):
    """Start a child process from the worker, as a launcher of ranks does; its exit code."""
    import multiprocessing

    child = multiprocessing.get_context("spawn").Process(target=exit_with, args=(item.n,))
    child.start()
    child.join()
    return child.exitcode


def visible_gpus(item, progress):
    """The GPUs this worker's ranks may use."""
    return os.environ.get("CUDA_VISIBLE_DEVICES")


class NeedsTwoArguments(Exception):
    """An exception pickle cannot rebuild (its constructor takes two arguments, ``args`` holds one)."""

    def __init__(self, what, why):
        super().__init__(f"{what}: {why}")


def fail_unpicklably(item, progress):
    if item == 1:
        raise NeedsTwoArguments(f"item {item}", "a custom constructor")
    return item


def torch_threads(item, progress):
    """The torch threads the run is given (the executor's default when none are set)."""
    import torch

    return torch.get_num_threads()


def warn_checkpoint_skipped(item, progress):
    """A run that skips a damaged checkpoint (``Checkpointer.latest``) warns in its worker."""
    import warnings

    from flops_fit.errors import CheckpointWarning

    warnings.warn(f"step-{item}.safetensors is corrupt; falling back to an earlier checkpoint", CheckpointWarning,
                  stacklevel=1)
    return item


def train_until_stopped(item, progress):
    """A run that trains until a stop is requested, then checkpoints and stops (as the loop does);
    it first writes its process id to the file ``item``."""
    from pathlib import Path

    from flops_fit.errors import Interrupted
    from flops_fit.executors.stopping import stop_requested

    Path(item).write_text(str(os.getpid()))
    while stop_requested() is None:
        time.sleep(0.05)
    raise Interrupted(stop_requested(), "stopped")
