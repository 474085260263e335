"""flops-fit: plan, verify and fit compute-optimal scaling-law sweeps for PyTorch models.

Importing this package is cheap: it loads no plugin and does not import torch. Plugins
load on first use of the registry API; planning, training and fitting are imported on
first access to their names (the ``_LAZY`` table below).
"""

import pkgutil
from typing import TYPE_CHECKING

from flops_fit._version import __version__
from flops_fit.errors import (
    CheckpointError,
    CheckpointWarning,
    ConfigError,
    ConversionAssumptionWarning,
    ConversionError,
    DataError,
    EntryError,
    ExecutorError,
    FitInputError,
    FlopsFitError,
    Interrupted,
    OptionError,
    ParityError,
    ParityGateError,
    PlanError,
    PluginError,
    PluginWarning,
    PreflightError,
    RunLost,
    StoreBusy,
    StoreError,
    TrackingWarning,
    UnknownEntryError,
    WeightFileError,
)
from flops_fit.plugin.api import (
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
from flops_fit.plugin.contracts import (
    TASK_CAUSAL_LM,
    TASK_IMAGE_CLASSIFICATION,
    DatasetEntry,
    ExecutorEntry,
    LossEntry,
    ModelEntry,
    ParityCaseEntry,
)
from flops_fit.plugin.family import ModelFamily, model_family
from flops_fit.plugin.hookspecs import hookimpl

# The heavier part of the API, imported on first attribute access so that
# `import flops_fit` stays cheap: name -> "module:attribute".
_LAZY: dict[str, str] = {
    "check_parity": "flops_fit.sweeps.gate:check",
    "fit": "flops_fit.fitting:fit",
    "compare": "flops_fit.fitting:compare",
    "Comparison": "flops_fit.fitting:Comparison",
    "load_runs": "flops_fit.fitting:load_runs",
    "write_report": "flops_fit.fitting.report.html_report:write_report",
    "write_comparison": "flops_fit.fitting.report.compare_page:write_comparison",
    "plot_fit": "flops_fit.fitting.report.plots:plot_fit",
    "FitResult": "flops_fit.fitting:FitResult",
    "FitSet": "flops_fit.fitting:FitSet",
    "plan": "flops_fit.sweeps.planner:plan",
    "Plan": "flops_fit.sweeps.planner:Plan",
    "sweep": "flops_fit.sweeps.driver:sweep",
    "SweepOptions": "flops_fit.sweeps.options:SweepOptions",
    "HyperParams": "flops_fit.sweeps.hparams:HyperParams",
    "run_plan": "flops_fit.sweeps.driver:run_plan",
    "probe": "flops_fit.sweeps.probe:probe",
    "adaptive_sweep": "flops_fit.sweeps.adaptive:adaptive_sweep",
    "StopRule": "flops_fit.sweeps.adaptive:StopRule",
    "describe_adaptive_start": "flops_fit.sweeps.adaptive:describe_start",
    "train_run": "flops_fit.sweeps.driver:train_run",
    "SweepResult": "flops_fit.sweeps.driver:SweepResult",
    "run_demo": "flops_fit.sweeps.demo:run_demo",
    "demo_tune_spec": "flops_fit.sweeps.demo:demo_tune_spec",
    "tune": "flops_fit.tuning:tune",
    "TuneResult": "flops_fit.tuning:TuneResult",
    "fit_rates": "flops_fit.tuning:fit_rates",
    "RateFit": "flops_fit.tuning:RateFit",
    "train": "flops_fit.training.loop:train",
    "RunSpec": "flops_fit.store.runs:RunSpec",
    "RunResult": "flops_fit.store.runs:RunResult",
    "RunStore": "flops_fit.store.run_store:RunStore",
    "record_result": "flops_fit.store.outside:record_result",
    "TrackingOptions": "flops_fit.tracking.options:TrackingOptions",
}


if TYPE_CHECKING:  # what IDEs and type checkers see of the lazy names (kept equal to _LAZY by a test)
    from flops_fit.fitting import Comparison, FitResult, FitSet, compare, fit, load_runs
    from flops_fit.fitting.report.compare_page import write_comparison
    from flops_fit.fitting.report.html_report import write_report
    from flops_fit.fitting.report.plots import plot_fit
    from flops_fit.store.outside import record_result
    from flops_fit.store.run_store import RunStore
    from flops_fit.store.runs import RunResult, RunSpec
    from flops_fit.sweeps.adaptive import (
        StopRule,
        adaptive_sweep,
    )
    from flops_fit.sweeps.adaptive import (
        describe_start as describe_adaptive_start,
    )
    from flops_fit.sweeps.demo import demo_tune_spec, run_demo
    from flops_fit.sweeps.driver import SweepResult, run_plan, sweep, train_run
    from flops_fit.sweeps.gate import check as check_parity
    from flops_fit.sweeps.hparams import HyperParams
    from flops_fit.sweeps.options import SweepOptions
    from flops_fit.sweeps.planner import Plan, plan
    from flops_fit.sweeps.probe import probe
    from flops_fit.tracking.options import TrackingOptions
    from flops_fit.training.loop import train
    from flops_fit.tuning import RateFit, TuneResult, fit_rates, tune


def __getattr__(name: str):
    if name in _LAZY:
        value = pkgutil.resolve_name(_LAZY[name])
        globals()[name] = value
        return value
    raise AttributeError(f"module 'flops_fit' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The eager names and the lazy ones, so ``dir(flops_fit)`` and completion list ``fit``, ``plan``..."""
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "TASK_CAUSAL_LM",
    "TASK_IMAGE_CLASSIFICATION",
    "CheckpointError",
    "CheckpointWarning",
    "ConfigError",
    "ConversionAssumptionWarning",
    "ConversionError",
    "DataError",
    "DatasetEntry",
    "EntryError",
    "ExecutorError",
    "ExecutorEntry",
    "FitInputError",
    "FlopsFitError",
    "Interrupted",
    "LossEntry",
    "ModelEntry",
    "ModelFamily",
    "OptionError",
    "ParityCaseEntry",
    "ParityError",
    "ParityGateError",
    "PlanError",
    "PluginError",
    "PluginWarning",
    "PreflightError",
    "RunLost",
    "StoreBusy",
    "StoreError",
    "TrackingWarning",
    "UnknownEntryError",
    "WeightFileError",
    "__version__",
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
    "model_family",
    "parity_case_info",
]
