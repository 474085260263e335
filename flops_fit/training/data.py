"""A run's data: seeded epochs of shuffled rows, batches gathered from a dataset, held-out rows."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from flops_fit.errors import DataError
from flops_fit.store.runs import RunSpec


class Batches:
    """Seeded epochs of shuffled sample indices (``gather`` makes a batch dict of them).

    ``rng``, ``order`` and ``pos`` are where the order stands (a ``LoopState`` keeps them)."""

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

    def seek(self, generator: dict[str, Any], order: np.ndarray, pos: int) -> None:
        """Continue from a saved position (copies: the saved state stays as it was). An order of another
        length was made for other data: it went on silently over the new samples, or indexed past them."""
        if len(order) != self.n:
            raise DataError(f"the training data has {self.n} samples, but the checkpoint's data order is of "
                            f"{len(order)}: the data changed since the run was checkpointed (an edited corpus, "
                            "another tokenizer); restore the data, or train the run from its start (remove its "
                            "checkpoints)")
        self.rng.bit_generator.state = copy.deepcopy(generator)
        self.order, self.pos = np.array(order, copy=True), int(pos)


def gather(dataset: Any, indices: np.ndarray) -> dict[str, torch.Tensor]:
    """A batch dict of ``indices``: datasets with ``get_batch(indices)`` gather in one call; any
    other map-style dataset of dicts is stacked item by item."""
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
