"""Where a run's loop stands: one shape for checkpoints and for a WSD family's stable phase.

``LoopState`` is everything besides the model and optimizer that continuing a run exactly
needs: the step (the schedule's position), the units trained, the curve so far, the data
order, each step's training loss and every RNG. ``Snapshot`` adds the model's and optimizer's
tensors: what a checkpoint reads back, and what a WSD branch hands the next, longer branch of
its family at its cooldown start (``training.task``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass
class Rng:
    """Every global RNG's state: JSON-able ``values`` and ``tensors``."""

    values: dict[str, Any]
    tensors: dict[str, torch.Tensor]

    @classmethod
    def capture(cls) -> Rng:
        legacy = np.random.get_state()
        values = {"python": _jsonable(random.getstate()),
                  "numpy": {"pos": int(legacy[2]), "has_gauss": int(legacy[3]), "gauss": float(legacy[4])}}
        tensors = {"torch": torch.get_rng_state(), "numpy_keys": torch.from_numpy(legacy[1].astype(np.int64))}
        if torch.cuda.is_available():
            for i, state in enumerate(torch.cuda.get_rng_state_all()):
                tensors[f"cuda/{i}"] = state
        return cls(values, tensors)

    def restore(self) -> None:
        random.setstate(_tupled(self.values["python"]))
        legacy = self.values["numpy"]
        np.random.set_state(("MT19937", self.tensors["numpy_keys"].numpy().astype(np.uint32), legacy["pos"],
                             legacy["has_gauss"], legacy["gauss"]))
        torch.set_rng_state(self.tensors["torch"])
        cuda = sorted((k for k in self.tensors if k.startswith("cuda/")), key=lambda k: int(k[5:]))
        if cuda and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([self.tensors[k] for k in cuda][:torch.cuda.device_count()])


@dataclass
class LoopState:
    """A run's loop after ``step`` optimizer steps (``run_id``: the run's, or for a stable phase
    its family's). ``data_rng``, ``data_order`` and ``data_pos`` are the seeded data order's
    generator state, current permutation and position; ``losses`` each step's training loss."""

    run_id: str
    step: int
    tokens: int
    curve: list[list[float]]
    data_rng: dict[str, Any]
    data_order: np.ndarray
    data_pos: int
    losses: torch.Tensor
    rng: Rng = field(default_factory=Rng.capture)


@dataclass
class Snapshot:
    """A loop state with the model's and optimizer's tensors (the optimizer's per-parameter
    state, by index: its groups are the live optimizer's, rebuilt from the spec)."""

    loop: LoopState
    model: dict[str, torch.Tensor]
    optimizer: dict[int, dict[str, torch.Tensor]]

    @classmethod
    def take(cls, loop: LoopState, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Snapshot:
        """Copies of ``model``'s and ``optimizer``'s tensors now, with ``loop``."""
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        moments = {index: {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in values.items()}
                   for index, values in optimizer.state_dict()["state"].items()}
        return cls(loop, weights, moments)

    def restore(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> LoopState:
        """Load the tensors into a freshly built model (and optimizer) of the same shapes."""
        model.load_state_dict(self.model, strict=True)
        if optimizer is not None:
            groups = optimizer.state_dict()["param_groups"]
            optimizer.load_state_dict({"state": self.optimizer, "param_groups": groups})
        return self.loop


def _jsonable(value: Any) -> Any:
    return [_jsonable(v) for v in value] if isinstance(value, (tuple, list)) else value


def _tupled(value: Any) -> Any:
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value
