"""One model family's shared entry fields, so that a plugin registers each preset in one line.

``model_family`` reads what a ``ModelEntry`` would otherwise repeat: the builder's
``"module:function"`` reference (from the builder's own ``__module__`` and ``__qualname__``,
as timm's ``register_model`` reads a function's name and module) and the family's sizing
functions, found by name in the module that defines them; the task fills the FLOPs unit
and the default loss. A registration module that must not import torch names its own
module instead (``model_family(__name__, ...)``): the builder is then ``build`` in the
``<module>_model`` module beside it, the layout of the built-in models.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flops_fit.errors import EntryError
from flops_fit.plugin.contracts import TASK_CAUSAL_LM, TASK_IMAGE_CLASSIFICATION, ModelEntry, Ref

# ModelEntry field -> the sizing function's name in the family's module (the first three required)
SIZING = {"valid_sizes": "valid_sizes", "param_count": "param_count", "training_flops": "training_flops",
          "embedding_params": "embedding_param_count", "non_embedding_flops": "non_embedding_flops",
          "activation_memory": "activation_memory"}
REQUIRED = ("valid_sizes", "param_count", "training_flops")
# task -> (flops_unit, default_loss) of the built-in losses
TASK_DEFAULTS = {TASK_CAUSAL_LM: ("token", "next-token"), TASK_IMAGE_CLASSIFICATION: ("sample", "cross-entropy")}


@dataclass(frozen=True)
class ModelFamily:
    """The fields a family's entries share; ``entry`` makes one preset's ``ModelEntry``.
    Callable as its builder when made from one (``@model_family(...)``)."""

    module: str
    builder: Ref
    task: str
    flops_unit: str
    default_loss: str
    default_datasets: tuple[str, ...] = ()
    size_param: str = "width"
    function: Callable[..., Any] | None = field(default=None, repr=False)  # the decorated builder

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Build a model (a family made by decorating its builder: the ``builder`` reference
        resolves to the family itself)."""
        if self.function is None:
            raise TypeError(f"this model family builds through {self.builder!r}: use flops_fit.create_model")
        return self.function(*args, **kwargs)

    def entry(self, name: str, description: str = "", *, defaults: Mapping[str, Any] | None = None,
              default_size: int | None = None) -> ModelEntry:
        """The entry ``name``: the family's fields with this preset's defaults and default size."""
        functions = vars(sys.modules.get(self.module) or importlib.import_module(self.module))
        refs = {field: functions[fn] for field, fn in SIZING.items() if callable(functions.get(fn))}
        missing = [SIZING[field] for field in REQUIRED if field not in refs]
        if missing:
            raise EntryError(f"model {name!r}: module {self.module} defines no {', '.join(missing)}: define them "
                             f"there (see docs/guide/plugins.md), or register a flops_fit.ModelEntry yourself")
        return ModelEntry(name, description=description, builder=self.builder, size_param=self.size_param,
                          flops_unit=self.flops_unit, task=self.task, default_loss=self.default_loss,
                          default_datasets=self.default_datasets, defaults=dict(defaults or {}),
                          default_size=default_size, **refs)


def _reference(builder: Callable[..., Any]) -> Ref:
    """``"module:qualname"`` for a builder importable by name; the function itself otherwise
    (one in ``__main__`` or local to a function builds in this process only)."""
    if builder.__module__ == "__main__" or "<locals>" in builder.__qualname__:
        return builder
    return f"{builder.__module__}:{builder.__qualname__}"


def model_family(module: str | None = None, *, task: str, default_datasets: tuple[str, ...] = (),
                 size_param: str = "width", flops_unit: str | None = None,
                 default_loss: str | None = None) -> Any:
    """A ``ModelFamily``. As a decorator (``@model_family(task=...)`` over ``def build(size,
    **config)``), the builder is the decorated function and the sizing functions are its
    module's; given ``module`` (a registration module's ``__name__``), they are that module's
    and the builder is ``"<module>_model:build"``. ``flops_unit`` and ``default_loss`` default
    by ``task`` (causal-lm: token, next-token; image-classification: sample, cross-entropy)."""
    if flops_unit is None or default_loss is None:
        if task not in TASK_DEFAULTS:
            raise EntryError(f"task {task!r} has no default flops_unit and default_loss: pass both to model_family")
        flops_unit, default_loss = flops_unit or TASK_DEFAULTS[task][0], default_loss or TASK_DEFAULTS[task][1]
    shared = {"task": task, "flops_unit": flops_unit, "default_loss": default_loss,
              "default_datasets": tuple(default_datasets), "size_param": size_param}
    if module is not None:
        return ModelFamily(module, f"{module}_model:build", **shared)

    def decorate(builder: Callable[..., Any]) -> ModelFamily:
        return ModelFamily(builder.__module__, _reference(builder), function=builder, **shared)

    return decorate
