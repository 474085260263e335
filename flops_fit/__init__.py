"""flops-fit: plan, verify and fit compute-optimal scaling-law sweeps for PyTorch models.

Importing this package is cheap: it loads no plugin and does not import torch.
Plugins load on first use of the registry API.
"""

from flops_fit.api import (
    create_dataset,
    create_executor,
    create_model,
    dataset_info,
    executor_info,
    get_loss,
    list_datasets,
    list_executors,
    list_losses,
    list_models,
    list_parity_cases,
    list_plugins,
    loss_info,
    model_info,
    parity_case_info,
)
from flops_fit.contracts import (
    TASK_CAUSAL_LM,
    TASK_IMAGE_CLASSIFICATION,
    DatasetEntry,
    ExecutorEntry,
    LossEntry,
    ModelEntry,
    ParityCaseEntry,
)
from flops_fit.errors import EntryError, FlopsFitError, PluginError, UnknownEntryError
from flops_fit.hookspecs import hookimpl

__version__ = "0.1.0"

# Heavier parts of the API, imported on first attribute access so that
# `import flops_fit` stays cheap: name -> "module:attribute".
_LAZY: dict[str, str] = {
    "check_parity": "flops_fit.parity.gate:check",
    "fit": "flops_fit.fitting:fit",
    "load_runs": "flops_fit.fitting:load_runs",
    "FitResult": "flops_fit.fitting:FitResult",
    "FitSet": "flops_fit.fitting:FitSet",
    "plan": "flops_fit.planner:plan",
    "Plan": "flops_fit.planner:Plan",
    "HyperParams": "flops_fit.hparams:HyperParams",
    "RunSpec": "flops_fit.runs:RunSpec",
    "RunResult": "flops_fit.runs:RunResult",
    "RunStore": "flops_fit.store:RunStore",
    "SweepResult": "flops_fit.sweeps:SweepResult",
    "sweep": "flops_fit.sweeps:sweep",
    "train": "flops_fit.trainer:train",
}


def __getattr__(name: str):
    if name in _LAZY:
        from flops_fit._lazy import resolve

        value = resolve(_LAZY[name])
        globals()[name] = value
        return value
    raise AttributeError(f"module 'flops_fit' has no attribute {name!r}")

__all__ = [
    "TASK_CAUSAL_LM",
    "TASK_IMAGE_CLASSIFICATION",
    "DatasetEntry",
    "EntryError",
    "ExecutorEntry",
    "FlopsFitError",
    "LossEntry",
    "ModelEntry",
    "ParityCaseEntry",
    "PluginError",
    "UnknownEntryError",
    "create_dataset",
    "create_executor",
    "create_model",
    "dataset_info",
    "executor_info",
    "get_loss",
    "hookimpl",
    "list_datasets",
    "list_executors",
    "list_losses",
    "list_models",
    "list_parity_cases",
    "list_plugins",
    "loss_info",
    "model_info",
    "parity_case_info",
]
