"""The torch threads a local worker gets when none are given: what the run can use, no more than
the machine has free.

A small model's step is a few small matrix products: a second thread only adds hand-offs, and on
a busy machine threads that outnumber the free cores spin and wait for each other (a 10k-parameter
GPT stepped ~15x slower with 2 threads than with 1 on a shared 2-core machine). So a run gets one
thread per ``FLOPS_PER_THREAD`` of its optimizer step, at most its share of the cores (cores /
workers) and of the cores left free by the load already on the machine. A program of runs
trained together (``training.stacked``) steps its runs on threads of their own, so it gets a
run's threads for each of them, within the same share (``item_threads``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flops_fit.machine import free_cores

# A step's training FLOPs per extra thread: the demos' runs (<= 1e9 FLOPs a step) get one thread; a
# 1.6M-parameter GPT at batch 32 x 64 (2e10) two. A judgement, not a measured crossover.
FLOPS_PER_THREAD = 2e10


def step_flops(item: Any) -> float:
    """Training FLOPs of one optimizer step of a run (or a WSD family's runs); 0 when unknown."""
    spec = item.runs[0] if hasattr(item, "runs") else item
    try:
        return float(spec.flops_per_unit) * int(spec.batch_size) * int(spec.seq_len)
    except (AttributeError, TypeError, ValueError):
        return 0.0


def default_threads(items: Iterable[Any], workers: int) -> int:
    """Threads per worker for ``items`` run on ``workers`` workers at once: one per FLOPS_PER_THREAD
    of the largest step, within the worker's share of the free cores."""
    largest = max((step_flops(i) for i in items), default=0.0)
    useful = max(1, int(largest // FLOPS_PER_THREAD) + 1) if largest else 1
    share = max(1, free_cores() // max(1, workers))
    return min(useful, share)


def item_threads(item: Any, per_run: int, workers: int) -> int:
    """Threads for one work item when a run gets ``per_run``: a program of k runs that step at
    once (``item.together``) gets k x per_run, within a worker's share of the free cores, and
    never fewer than one run's."""
    together = int(getattr(item, "together", 1) or 1)
    if together <= 1:
        return per_run
    return max(per_run, min(together * per_run, free_cores() // max(1, workers)))


__all__ = ["FLOPS_PER_THREAD", "default_threads", "free_cores", "item_threads", "step_flops"]
