"""Helpers for plugin authors' tests.

``isolated_host`` gives a host of its own (no global state, safe under pytest-xdist);
``check_model_entry`` and friends run the contract checks a plugin's entries must pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from flops_fit.errors import EntryError
from flops_fit.plugin import api
from flops_fit.plugin.contracts import DatasetEntry, LossEntry, ModelEntry
from flops_fit.plugin.host import Host


def isolated_host(
    *plugins: Any,
    builtins: bool = False,
    entry_points: bool = False,
    env: dict[str, str] | None = None,
    strict: bool | None = None,
) -> Host:
    """A loaded host with only the given plugins (modules or objects with hookimpls).

    ``plugins`` may also be ``(name, plugin)`` pairs; otherwise a plugin's name is its
    ``__name__`` (modules) or class name. The environment switches are ignored unless
    ``env`` is given.
    """
    named = [
        p if isinstance(p, tuple) else (getattr(p, "__name__", type(p).__name__).lower(), p) for p in plugins
    ]
    return Host(
        builtins=builtins, entry_points=entry_points, plugins=named, env=env or {}, strict=strict
    ).load()


def check_model_entry(
    name: str, sizes: Sequence[int] | None = None, *, host: Host | None = None, **config: Any
) -> list[int]:
    """Build ``name`` at a few valid sizes and check the contract; returns the sizes checked.

    Checks: valid sizes are sorted positive integers; the analytic parameter count equals
    ``num_params()`` and the sum of ``numel()``; training FLOPs per unit are positive and
    grow with size.
    """
    entry: ModelEntry = api.model_info(name, host=host)
    if sizes is None:
        available = entry.sizes(1, 512, **config)
        if not available:
            raise EntryError(f"model {name!r}: valid_sizes(1, 512) is empty; pass sizes=[...]")
        sizes = sorted({available[0], available[len(available) // 2]})
    flops = []
    for size in sizes:
        model = api.create_model(name, size, host=host, **config)
        counted = sum(p.numel() for p in model.parameters())
        if model.num_params() != counted:
            raise EntryError(f"model {name!r} size {size}: num_params()={model.num_params()} but parameters sum to {counted}")
        value = entry.flops_per_unit(size, **config)
        if not value > 0:
            raise EntryError(f"model {name!r} size {size}: training_flops must be positive, got {value}")
        flops.append(value)
    if any(b <= a for a, b in zip(flops, flops[1:])):
        raise EntryError(f"model {name!r}: training FLOPs do not grow with size: {dict(zip(sizes, flops))}")
    return list(sizes)


def check_dataset_entry(name: str, *, host: Host | None = None, splits: Iterable[str] | None = None, **config: Any) -> None:
    """Build each split of dataset ``name`` and check that it is not None."""
    entry: DatasetEntry = api.dataset_info(name, host=host)
    for split in splits or entry.splits:
        if api.create_dataset(name, split, host=host, **config) is None:
            raise EntryError(f"dataset {name!r}: builder returned None for split {split!r}")


def check_loss_entry(name: str, *, host: Host | None = None) -> None:
    """Resolve loss ``name`` and check it accepts ``(model_output, batch)``."""
    entry: LossEntry = api.loss_info(name, host=host)
    entry.load()
