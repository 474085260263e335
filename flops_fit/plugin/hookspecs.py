"""The hooks a flops-fit plugin implements.

Each hook receives ``register``, a callback owned by the host: call it once per entry.
The host validates the entry, records which plugin gave it and applies the name policy
at that moment, so a bad entry is reported against the plugin that made it.
Hooks may only gain arguments over time; an implementation may accept fewer.
"""

from __future__ import annotations

from collections.abc import Callable

import pluggy

PROJECT = "flops_fit"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_models(register: Callable[..., None]) -> None:
    """Register model families: ``register(ModelEntry(...))`` for each."""


@hookspec
def register_datasets(register: Callable[..., None]) -> None:
    """Register datasets: ``register(DatasetEntry(...))`` for each."""


@hookspec
def register_losses(register: Callable[..., None]) -> None:
    """Register losses: ``register(LossEntry(...))`` for each."""


@hookspec
def register_executors(register: Callable[..., None]) -> None:
    """Register sweep executors: ``register(ExecutorEntry(...))`` for each."""


@hookspec
def register_parity_cases(register: Callable[..., None]) -> None:
    """Register parity cases: ``register(ParityCaseEntry(...))`` for each."""


# hook name -> the entry kind its register callback accepts
HOOK_KINDS: dict[str, str] = {
    "register_models": "model",
    "register_datasets": "dataset",
    "register_losses": "loss",
    "register_executors": "executor",
    "register_parity_cases": "parity-case",
}
