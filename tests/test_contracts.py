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
        ({"no_parity": " "}, "no_parity must say why no parity case applies"),
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
    with pytest.raises(EntryError, match="its param_count 'no_such_module_xyz:count' does not import: "
                                         "ModuleNotFoundError"):  # made, and failing only when used
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


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "flops-fit-example-plugin"


@pytest.fixture
def fresh_modules():
    """The example package is forgotten after the test (two copies of it share one name)."""
    import sys

    yield
    for name in [n for n in sys.modules if n.partition(".")[0] == "flops_fit_example"]:
        del sys.modules[name]


def _docs_plugin(folder):
    """docs/guide/plugins.md's plugin.py, as written, beside the example's model module."""
    import re
    import shutil

    text = (ROOT / "docs" / "guide" / "plugins.md").read_text()
    [block] = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if b.startswith("# flops_fit_example/plugin.py")]
    shutil.copytree(EXAMPLE / "flops_fit_example", folder / "flops_fit_example")
    (folder / "flops_fit_example" / "plugin.py").write_text(block)
    return folder


@pytest.mark.parametrize("source", ["the example plugin", "docs/guide/plugins.md"])
def test_a_model_family_reads_its_builder_and_sizing_from_the_function(source, tmp_path, monkeypatch, fresh_modules):
    import importlib

    from flops_fit.testing import check_model_entry, isolated_host

    monkeypatch.syspath_prepend(str(EXAMPLE if source == "the example plugin" else _docs_plugin(tmp_path)))
    plugin = importlib.import_module("flops_fit_example.plugin")
    host = isolated_host(("example", plugin))
    entry = flops_fit.model_info("mlp-lm", host=host)
    assert entry.builder == "flops_fit_example.plugin:build"  # derived from the function, not typed
    assert (entry.valid_sizes, entry.param_count, entry.training_flops) == \
        (plugin.valid_sizes, plugin.param_count, plugin.training_flops)
    assert (entry.flops_unit, entry.default_loss, entry.task) == ("token", "next-token", flops_fit.TASK_CAUSAL_LM)
    assert entry.embedding_params is None and entry.defaults == {"vocab_size": 64}
    assert check_model_entry("mlp-lm", [8, 16], host=host) == [8, 16]  # built through the reference; counts match


def test_the_built_in_families_derive_their_model_modules_builder():
    from flops_fit.plugins.models import gpt, swin

    assert flops_fit.model_info("gpt2").builder == "flops_fit.plugins.models.gpt_model:build"
    assert flops_fit.model_info("gpt2").default_size == 768
    entry = flops_fit.model_info("swin")
    assert entry.builder == "flops_fit.plugins.models.swin_model:build" and entry.flops_unit == "sample"
    assert entry.embedding_params is swin.embedding_param_count and entry.activation_memory is swin.activation_memory
    assert gpt.FAMILY.entry("x", defaults={}).default_datasets == ("python-stdlib",)


def test_a_model_family_names_what_it_cannot_fill(monkeypatch):
    import types

    sizing = types.ModuleType("half_a_plugin")
    sizing.valid_sizes = lambda lo, hi, **config: [8]
    monkeypatch.setitem(__import__("sys").modules, "half_a_plugin", sizing)
    family = flops_fit.model_family("half_a_plugin", task=flops_fit.TASK_CAUSAL_LM)
    with pytest.raises(EntryError, match="module half_a_plugin defines no param_count, training_flops: define them"):
        family.entry("half")
    with pytest.raises(EntryError, match="task 'speech' has no default flops_unit and default_loss: pass both"):
        flops_fit.model_family("half_a_plugin", task="speech")
    family = flops_fit.model_family("half_a_plugin", task="speech", flops_unit="sample", default_loss="ctc")
    assert (family.flops_unit, family.default_loss, family.builder) == ("sample", "ctc", "half_a_plugin_model:build")


def test_a_builder_that_cannot_be_named_is_kept_itself():
    @flops_fit.model_family(task=flops_fit.TASK_CAUSAL_LM)
    def build(width, **config):
        return width

    assert build.builder is build.function  # a local function has no "module:function" name
    assert build(3) == 3  # the family builds as its builder does
