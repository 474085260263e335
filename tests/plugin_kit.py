"""Small plugins for host tests: good ones and one of each kind of broken one."""

from __future__ import annotations

from contextlib import contextmanager

import flops_fit
from flops_fit import hookimpl
from flops_fit.plugin.host import reset_host


@contextmanager
def process_host(plugin_host=None):
    """The process-wide host set to ``plugin_host`` while a command runs in this process (None: the one this
    process's plugins load, e.g. FLOPS_FIT_PLUGINS), and forgotten afterwards, whatever the command did."""
    reset_host(plugin_host)
    try:
        yield
    finally:
        reset_host()


def toy_model(name: str = "toy", **overrides) -> flops_fit.ModelEntry:
    """A real (tiny) model family: a linear layer whose width is the size."""
    fields = dict(
        builder="plugin_kit_models:build_linear",
        size_param="width",
        valid_sizes=lambda lo, hi, **c: [s for s in range(max(lo, 4), hi + 1) if s % 4 == 0],
        param_count=lambda size, **c: size * size + size,
        training_flops=lambda size, **c: 6.0 * size * size,
        flops_unit="token",
        task="causal-lm",
        default_loss="next-token",
        description="toy model for host tests",
    )
    fields.update(overrides)
    return flops_fit.ModelEntry(name, **fields)


def toy_dataset(name: str = "toy-data") -> flops_fit.DatasetEntry:
    return flops_fit.DatasetEntry(
        name, builder=lambda split, **c: {"split": split, **c}, modality="text",
        batch_format={"tokens": "int64[B, T]"}, tasks=("causal-lm",),
    )


class Good:
    """Registers one model, one dataset and one loss."""

    def __init__(self, model: str = "toy", dataset: str = "toy-data") -> None:
        self.model, self.dataset = model, dataset

    @hookimpl
    def register_models(self, register):
        register(toy_model(self.model))

    @hookimpl
    def register_datasets(self, register):
        register(toy_dataset(self.dataset))

    @hookimpl
    def register_losses(self, register):
        register(flops_fit.LossEntry("toy-loss", fn=lambda output, batch: 0.0, task="causal-lm"))


class UnknownArgument:
    @hookimpl
    def register_models(self, register, extra):
        register(toy_model("unknown-arg"))


class MisspelledHook:
    @hookimpl
    def register_modles(self, register):
        register(toy_model("misspelled"))


class NoHooks:
    def register_models(self, register):  # forgot @hookimpl
        register(toy_model("unmarked"))


class InvalidEntry:
    @hookimpl
    def register_models(self, register):
        register(toy_model("fine-one"))
        register(toy_model("Bad Name"))


class WrongEntryType:
    @hookimpl
    def register_models(self, register):
        register({"name": "dict-model"})


class RaisesInHook:
    @hookimpl
    def register_datasets(self, register):
        raise RuntimeError("database unreachable")


class ReturnsEntries:
    """Returns its entries (as a pytest hook returns its value) instead of calling register."""

    @hookimpl
    def register_models(self):
        return [toy_model("returned")]


class DuplicateInside:
    @hookimpl
    def register_models(self, register):
        register(toy_model("twice"))
        register(toy_model("twice"))
