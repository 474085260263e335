"""Entry contracts: every field is validated with a message naming it."""

import pytest

import flops_fit
from flops_fit.errors import EntryError
from flops_fit.plugin.contracts import (
    DatasetEntry,
    ExecutorEntry,
    LossEntry,
    ModelEntry,
    ParityCaseEntry,
    check_name,
)


def model_fields(**overrides):
    fields = dict(
        builder="math:sqrt",
        size_param="width",
        valid_sizes=lambda lo, hi, **c: [s for s in (8, 16, 32) if lo <= s <= hi],
        param_count=lambda size, **c: size * size,
        training_flops=lambda size, **c: 6.0 * size * size,
        flops_unit="token",
        task="causal-lm",
        default_loss="next-token",
    )
    fields.update(overrides)
    return fields


@pytest.mark.parametrize("name", ["vit", "gpt2", "a.b-c_d", "0x"])
def test_valid_names_accepted(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "Vit", "-vit", "_x", "a b", "a/b", None, 3])
def test_invalid_names_rejected_with_pattern(name):
    with pytest.raises(EntryError, match=r"invalid.*pattern"):
        check_name(name)


def test_model_entry_accepts_a_complete_entry():
    entry = ModelEntry("toy", **model_fields())
    assert entry.sizes(1, 20) == [8, 16]
    assert entry.params(16) == 256
    assert entry.flops_per_unit(8) == 384.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"builder": "not a reference"}, "builder must be a callable or a lazy"),
        ({"valid_sizes": 3}, "valid_sizes must be a callable"),
        ({"size_param": "the width"}, "size_param must be an identifier"),
        ({"flops_unit": "image"}, "flops_unit must be one of"),
        ({"task": "Causal LM"}, "task 'Causal LM' is invalid"),
        ({"default_loss": "X"}, "default_loss 'X' is invalid"),
        ({"default_datasets": "stdlib"}, "default_datasets must be a tuple"),
        ({"defaults": {"width": 3}}, "must not contain the size parameter 'width'"),
        ({"default_size": 0}, "default_size must be a positive integer"),
        ({"defaults": [1]}, "defaults must be a mapping"),
    ],
)
def test_model_entry_rejects_bad_fields(overrides, message):
    with pytest.raises(EntryError, match=message):
        ModelEntry("toy", **model_fields(**overrides))


def test_model_entry_sizes_outside_range_are_an_error():
    entry = ModelEntry("toy", **model_fields(valid_sizes=lambda lo, hi, **c: [1, 1000]))
    with pytest.raises(EntryError, match="outside the range"):
        entry.sizes(10, 100)


def test_lazy_references_resolve_only_when_used():
    entry = ModelEntry("toy", **model_fields(param_count="no_such_module_xyz:count"))
    with pytest.raises(ModuleNotFoundError):
        entry.params(8)


def test_dataset_entry_validation():
    ok = DatasetEntry("d", builder="math:sqrt", modality="text", batch_format={"tokens": "int64[B, T]"})
    assert ok.splits == ("train", "validation")
    with pytest.raises(EntryError, match="batch_format must map"):
        DatasetEntry("d", builder="math:sqrt", modality="text", batch_format={})
    with pytest.raises(EntryError, match="splits must name at least one"):
        DatasetEntry("d", builder="math:sqrt", modality="text", splits=(), batch_format={"x": "y"})


def test_loss_entry_checks_signature_when_loaded():
    def two_args(output, batch):
        return 0.0

    def one_arg(output):
        return 0.0

    assert LossEntry("l", fn=two_args, task="causal-lm").load() is two_args
    with pytest.raises(EntryError, match=r"must accept \(model_output, batch\)"):
        LossEntry("l", fn=one_arg, task="causal-lm").load()


def test_executor_entry_requires_the_executor_protocol():
    class NoMap:
        pass

    class NoClose:
        def map(self, fn, items):
            return iter(())

    with pytest.raises(EntryError, match=r"lacks map, close, __enter__, __exit__; an executor needs map\(fn, items\)"):
        ExecutorEntry("e", builder=NoMap).build()
    with pytest.raises(EntryError, match=r"lacks close, __enter__, __exit__"):
        ExecutorEntry("e", builder=NoClose).build()


def test_parity_case_entry_validation():
    case = ParityCaseEntry("c", model="vit", reference="timm", run="math:sqrt", devices=["cpu"])
    assert case.devices == ("cpu",)
    with pytest.raises(EntryError, match="devices must be a non-empty tuple drawn from"):
        ParityCaseEntry("c", model="vit", reference="timm", run="math:sqrt", devices=("tpu",))
    with pytest.raises(EntryError, match="dtypes must be"):
        ParityCaseEntry("c", model="vit", reference="timm", run="math:sqrt", dtypes=("int8",))


def test_entries_are_exported_and_serialisable():
    entry = flops_fit.ModelEntry("toy", **model_fields())
    data = entry.to_dict()
    assert data["name"] == "toy" and data["builder"] == "math:sqrt"
    assert data["valid_sizes"].endswith("<lambda>")  # callables shown by qualified name
