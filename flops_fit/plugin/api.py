"""The registry API in the timm / torchvision style: list, look up metadata, create.

Every function works on the process-wide host (plugins loaded on first use) or on the
``host`` passed in, e.g. an isolated one from ``flops_fit.testing``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flops_fit.checks import positive_int
from flops_fit.errors import EntryError, ExecutorError, FlopsFitError
from flops_fit.plugin.contracts import (
    DatasetEntry,
    ExecutorEntry,
    LossEntry,
    ModelEntry,
    ParityCaseEntry,
)
from flops_fit.plugin.host import Host, PluginInfo, get_host


def _host(host: Host | None) -> Host:
    return host.load() if host is not None else get_host()


def _names(kind: str, pattern: str | None, qualified: bool, host: Host | None, keep=None) -> list[str]:
    registry = _host(host).registry(kind)
    names = registry.names(pattern, qualified=qualified)
    if keep is None:
        return names
    return [n for n in names if keep(registry.lookup(n).entry)]


def _context(kind: str, name: str, host: Host) -> str:
    registered = host.registry(kind).lookup(name)
    return f"{kind} {registered.qualified_id!r} (plugin {registered.plugin.name!r})"


def list_plugins(host: Host | None = None) -> list[PluginInfo]:
    """Every plugin the host saw, loaded or not, in load order."""
    return list(_host(host).plugins)


# ------------------------------------------------------------------- models
def list_models(
    pattern: str | None = None, *, task: str | None = None, qualified: bool = False, host: Host | None = None
) -> list[str]:
    """Sorted model names matching an fnmatch ``pattern`` such as ``"vit*"``."""
    return _names("model", pattern, qualified, host, None if task is None else lambda e: e.task == task)


def model_info(name: str, *, host: Host | None = None) -> ModelEntry:
    """A model's metadata (size parameter, task, FLOPs accounting) without building it."""
    return _host(host).entry("model", name)  # type: ignore[return-value]


def create_model(name: str, size: int | None = None, *, host: Host | None = None, **config: Any) -> Any:
    """Build model ``name`` at ``size`` (its size parameter, e.g. the width).

    Checks the size against the entry's valid sizes and the built model against the
    contract (``num_params()`` exists, equals the sum of its parameters' ``numel()`` and
    the entry's analytic count).
    """
    h = _host(host)
    entry: ModelEntry = h.entry("model", name)  # type: ignore[assignment]
    where = _context("model", name, h)
    size = entry.default_size if size is None else size
    if size is None:
        raise EntryError(
            f"{where} needs a size: pass size=... (its size parameter is {entry.size_param!r}), "
            f"e.g. one of {entry.sizes(1, 1024, **config)[:8]}"
        )
    positive_int(size, f"{where}: size", EntryError)
    if size not in entry.sizes(size, size, **config):
        nearby = entry.sizes(max(1, size // 2), size * 2, **config)
        below = [s for s in nearby if s < size][-1:]
        above = [s for s in nearby if s > size][:1]
        raise EntryError(
            f"{where}: {entry.size_param}={size} is not a valid size with this configuration; "
            f"nearest valid sizes: {below + above or 'none within a factor of 2'}"
        )
    model = entry.build(size, **config)
    counter = getattr(model, "num_params", None)
    if not callable(counter):
        raise EntryError(f"{where}: its builder returned {type(model).__name__}, which has no num_params()")
    built, expected = int(counter()), entry.params(size, **config)
    parameters = getattr(model, "parameters", None)
    if callable(parameters):  # a num_params() that agrees with a wrong param_count would plan and record the wrong N
        held = sum(p.numel() for p in parameters())
        if held != built:
            raise EntryError(
                f"{where}: num_params() says {built} but its parameters hold {held} "
                "(the sum of numel() over model.parameters()); the model's count is wrong"
            )
    if built != expected:
        raise EntryError(
            f"{where}: the built model has {built} parameters but the entry's param_count "
            f"says {expected}; the analytic count is wrong"
        )
    return model


# ----------------------------------------------------------------- datasets
def list_datasets(
    pattern: str | None = None,
    *,
    modality: str | None = None,
    task: str | None = None,
    qualified: bool = False,
    host: Host | None = None,
) -> list[str]:
    """Sorted dataset names, optionally filtered by modality or by a task they serve."""

    def keep(e: DatasetEntry) -> bool:
        return (modality is None or e.modality == modality) and (task is None or task in e.tasks)

    return _names("dataset", pattern, qualified, host, keep)


def dataset_info(name: str, *, host: Host | None = None) -> DatasetEntry:
    """Dataset ``name``'s registry entry: modality, the tasks it serves, its splits, its builder."""
    return _host(host).entry("dataset", name)  # type: ignore[return-value]


def create_dataset(name: str, split: str = "train", *, host: Host | None = None, **config: Any) -> Any:
    """Build the ``split`` of dataset ``name``."""
    h = _host(host)
    entry: DatasetEntry = h.entry("dataset", name)  # type: ignore[assignment]
    if split not in entry.splits:
        raise EntryError(f"{_context('dataset', name, h)} has no split {split!r}; its splits are {list(entry.splits)}")
    return entry.build(split, **config)


# ------------------------------------------------------------------- losses
def list_losses(
    pattern: str | None = None, *, task: str | None = None, qualified: bool = False, host: Host | None = None
) -> list[str]:
    """Sorted loss names, optionally only those for ``task``."""
    return _names("loss", pattern, qualified, host, None if task is None else lambda e: e.task == task)


def loss_info(name: str, *, host: Host | None = None) -> LossEntry:
    """Loss ``name``'s registry entry: its task and the function it loads."""
    return _host(host).entry("loss", name)  # type: ignore[return-value]


def get_loss(name: str, *, host: Host | None = None) -> Callable[[Any, Any], Any]:
    """The loss function ``(model_output, batch) -> scalar tensor``."""
    return loss_info(name, host=host).load()


# ---------------------------------------------------------------- executors
def list_executors(pattern: str | None = None, *, qualified: bool = False, host: Host | None = None) -> list[str]:
    """Sorted executor names (where a sweep's runs train: ``local``, ``ray``, ``slurm``, a plugin's)."""
    return _names("executor", pattern, qualified, host)


def executor_info(name: str, *, host: Host | None = None) -> ExecutorEntry:
    """Executor ``name``'s registry entry: its builder and options."""
    return _host(host).entry("executor", name)  # type: ignore[return-value]


def create_executor(name: str, *, host: Host | None = None, **options: Any) -> Any:
    """Build executor ``name`` with ``options`` (its ``map``, ``close``; a context manager). A builder
    that raises (a cluster it cannot reach) is an ExecutorError naming the executor and its plugin."""
    try:
        return executor_info(name, host=host).build(**options)
    except FlopsFitError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's builder: its failure, named
        raise ExecutorError(f"{entry_label('executor', name, host=host)} does not start: "
                            f"{type(exc).__name__}: {exc}") from exc


def entry_label(kind: str, name: str, *, host: Host | None = None) -> str:
    """``kind 'namespace/name' (plugin 'p')``: how a message names an entry and the plugin behind it."""
    return _context(kind, name, _host(host))


# ------------------------------------------------------------- parity cases
def list_parity_cases(
    pattern: str | None = None, *, model: str | None = None, qualified: bool = False, host: Host | None = None
) -> list[str]:
    """Sorted parity case names, optionally only those of ``model``."""
    return _names("parity-case", pattern, qualified, host, None if model is None else lambda e: e.model == model)


def parity_case_info(name: str, *, host: Host | None = None) -> ParityCaseEntry:
    """Parity case ``name``'s registry entry: the model it checks and the reference it is checked against."""
    return _host(host).entry("parity-case", name)  # type: ignore[return-value]
