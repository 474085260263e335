"""The plugin host: registration, name policy, failure isolation, strict mode, switches."""

import re
import warnings

import pytest
from plugin_kit import (
    DuplicateInside,
    Good,
    InvalidEntry,
    MisspelledHook,
    NoHooks,
    RaisesInHook,
    ReturnsEntries,
    UnknownArgument,
    WrongEntryType,
    toy_model,
)

import flops_fit
from flops_fit import hookimpl
from flops_fit.errors import EntryError, PluginError, PluginWarning, UnknownEntryError
from flops_fit.plugin import host as host_module
from flops_fit.plugin.host import Host
from flops_fit.testing import isolated_host


def loaded(host):
    """Load ``host``; returns it and the PluginWarnings it gave, one message a line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        host.load()
    assert all(issubclass(w.category, PluginWarning) for w in caught), [str(w.message) for w in caught]
    return host, "".join(f"{w.message}\n" for w in caught)


def host_with(*plugins, env=None, strict=None):
    return loaded(Host(builtins=False, entry_points=False, plugins=plugins, env=env or {}, strict=strict))


def test_import_of_flops_fit_loads_no_plugin():
    host = Host(builtins=False, entry_points=False, plugins=[("good", Good())], env={})
    assert host.plugins == []  # nothing happens before first use
    assert flops_fit.list_models(host=host) == ["toy"]
    assert [p.status for p in host.plugins] == ["loaded"]


def test_good_plugin_contributions_are_recorded():
    host, err = host_with(("good", Good()))
    assert err == ""
    (info,) = host.plugins
    assert info.hooks == ["register_datasets", "register_losses", "register_models"]
    assert info.contributed == {"dataset": ["good/toy-data"], "loss": ["good/toy-loss"], "model": ["good/toy"]}
    assert flops_fit.model_info("good/toy", host=host).name == "toy"


@pytest.mark.parametrize(
    ("plugin", "stage", "message"),
    [
        (UnknownArgument(), "validate", "extra"),
        (MisspelledHook(), "hooks", "hook register_modles matches no flops-fit hook"),
        (NoHooks(), "hooks", "implements no flops-fit hook (are its functions marked with @flops_fit.hookimpl?)"),
        (InvalidEntry(), "register", "model name 'Bad Name' is invalid"),
        (WrongEntryType(), "register", "expects ModelEntry objects"),
        (RaisesInHook(), "register", "in register_datasets: RuntimeError: database unreachable"),
        (DuplicateInside(), "register", "model 'twice' is registered twice by this plugin"),
        # loaded with nothing registered, without a word
        (ReturnsEntries(), "register", "in register_models: returned a list; a hook registers nothing by returning: call "
         "register(entry) for each entry"),
    ],
)
def test_broken_plugin_is_skipped_with_one_line_and_others_keep_working(plugin, stage, message):
    host, err = host_with(("good", Good()), ("broken", plugin))
    broken = host.plugins[1]
    assert broken.status == "error" and broken.stage == stage
    assert message in broken.error
    lines = err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"plugin 'broken' failed at {stage}: ")
    assert message in lines[0] and "FLOPS_FIT_DISABLE_PLUGINS=broken" in lines[0]
    # the good plugin is untouched and the broken one contributed nothing, not even valid entries
    assert flops_fit.list_models(host=host) == ["toy"]
    assert broken.contributed == {}


@pytest.mark.parametrize("plugin", [UnknownArgument(), MisspelledHook(), InvalidEntry(), RaisesInHook()])
def test_strict_mode_turns_a_broken_plugin_into_an_error(plugin):
    with pytest.raises(PluginError, match=r"plugin 'broken' failed at \w+: .*FLOPS_FIT_STRICT_PLUGINS is set"):
        host_with(("broken", plugin), strict=True)


def test_strict_mode_from_the_environment():
    with pytest.raises(PluginError):
        host_with(("broken", RaisesInHook()), env={"FLOPS_FIT_STRICT_PLUGINS": "1"})


def test_failed_plugin_hooks_are_unregistered():
    host, _ = host_with(("broken", MisspelledHook()))
    assert host.pm.get_plugin("broken") is None


def test_import_failure_of_a_local_plugin_module_is_isolated():
    host, err = host_with(("good", Good()), env={"FLOPS_FIT_PLUGINS": "no_such_plugin_module_xyz"})
    bad = next(p for p in host.plugins if p.name == "no_such_plugin_module_xyz")
    assert bad.stage == "import" and "ModuleNotFoundError" in bad.error
    assert "failed at import" in err
    assert flops_fit.list_models(host=host) == ["toy"]


def test_local_plugin_module_from_environment_loads():
    host, err = host_with(env={"FLOPS_FIT_PLUGINS": "plugin_kit_local"})
    assert err == ""
    assert flops_fit.list_models(host=host) == ["local-toy"]
    assert host.plugins[0].source == "env"


def test_disable_switch_blocks_a_plugin():
    host, err = host_with(("good", Good()), ("other", Good("other-toy", "other-data")),
                          env={"FLOPS_FIT_DISABLE_PLUGINS": "other"})
    assert err == ""
    assert [p.status for p in host.plugins] == ["loaded", "blocked"]
    assert host.plugins[1].error == "disabled by FLOPS_FIT_DISABLE_PLUGINS"
    assert flops_fit.list_models(host=host) == ["toy"]


def test_two_third_party_plugins_with_one_name_are_both_kept():
    host, _ = host_with(("alpha", Good()), ("beta", Good()))
    assert flops_fit.list_models(host=host) == ["alpha/toy", "beta/toy"]
    with pytest.raises(UnknownEntryError, match=r"'toy' is ambiguous.*\(alpha/toy, beta/toy\)"):
        flops_fit.model_info("toy", host=host)
    assert flops_fit.model_info("beta/toy", host=host).name == "toy"


class Squatter:
    @hookimpl
    def register_models(self, register):
        register(toy_model("reserved"))


def test_builtin_names_are_reserved(monkeypatch):
    monkeypatch.setattr(host_module, "BUILTIN_PLUGINS", ("plugin_kit_builtin",))
    host, err = loaded(Host(builtins=True, entry_points=False, plugins=[("squatter", Squatter())], env={}))
    assert host.plugins[0].builtin and host.plugins[0].namespace == "flops_fit"
    assert "model name 'reserved' is reserved by a built-in plugin" in err
    assert flops_fit.list_models(qualified=True, host=host) == ["flops_fit/reserved"]


def test_third_party_plugin_cannot_take_the_builtin_namespace():
    host, err = host_with(("flops_fit", Good()))
    assert host.plugins[0].status == "error"
    assert "the plugin name 'flops_fit' is reserved for built-ins" in err


def test_list_models_pattern_and_task_filters():
    host, _ = host_with(("good", Good()), ("more", Good("toy-big", "more-data")))
    assert flops_fit.list_models("toy*", host=host) == ["toy", "toy-big"]
    assert flops_fit.list_models("more/*", host=host) == ["toy-big"]
    assert flops_fit.list_models(task="image-classification", host=host) == []
    assert flops_fit.list_models(qualified=True, host=host) == ["good/toy", "more/toy-big"]
    assert flops_fit.list_datasets(modality="text", host=host) == ["more-data", "toy-data"]


def test_unknown_name_suggests_close_matches():
    host, _ = host_with(("good", Good()))
    with pytest.raises(UnknownEntryError, match=r"no model called 'tyo'; did you mean 'toy'\? Known models: toy\."):
        flops_fit.model_info("tyo", host=host)
    # each entry suggested once (not also as its qualified id 'g/toy'), a sentence without a match
    with pytest.raises(UnknownEntryError, match=r"did you mean 'toy'\? Known"):
        flops_fit.model_info("toyy", host=host_with(("g", Good()))[0])
    with pytest.raises(UnknownEntryError, match=r"no dataset called 'zzz'\. Known datasets: toy-data\."):
        flops_fit.dataset_info("zzz", host=host)


def test_create_model_checks_size_and_contract():
    host, _ = host_with(("good", Good()))
    model = flops_fit.create_model("toy", 8, host=host)
    assert model.num_params() == 72
    with pytest.raises(EntryError, match=r"model 'good/toy' \(plugin 'good'\) needs a size: pass size=\.\.\. .*'width'"):
        flops_fit.create_model("toy", host=host)
    with pytest.raises(EntryError, match=r"width=10 is not a valid size .*nearest valid sizes: \[8, 12\]"):
        flops_fit.create_model("toy", 10, host=host)
    with pytest.raises(EntryError, match="size must be a positive integer"):
        flops_fit.create_model("toy", -4, host=host)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"builder": "plugin_kit_models:build_without_num_params"}, "has no num_params()"),
        ({"param_count": lambda size, **c: 1}, "the built model has 72 parameters but the entry's param_count says 1"),
        # num_params() and param_count agree on a count the model's own tensors contradict
        ({"builder": "plugin_kit_models:build_understated", "param_count": lambda size, **c: size * size},
         r"num_params\(\) says 64 but its parameters hold 72"),
    ],
)
def test_create_model_rejects_a_builder_that_breaks_the_contract(overrides, message):
    class Plugin:
        @hookimpl
        def register_models(self, register):
            register(toy_model(**overrides))

    host, _ = host_with(("bad-builder", Plugin()))
    with pytest.raises(EntryError, match=message):
        flops_fit.create_model("toy", 8, host=host)


def plan_toy(**overrides) -> int:
    """`flops-fit plan` of the toy model with ``overrides`` to its entry, from a host holding only it."""
    class Plugin(Good):
        @hookimpl
        def register_models(self, register):
            register(toy_model(**overrides))

    host_module.reset_host(Host(builtins=False, entry_points=False, plugins=[("odd", Plugin())], env={}))
    try:
        from flops_fit.cli.main import main

        return main(["plan", "--model", "toy", "--dataset", "toy-data", "--budgets", "1e9,3e9", "--seq-len", "16",
                     "--loss", "toy-loss"])
    finally:
        host_module.reset_host(None)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"training_flops": lambda size, **c: float("nan")}, "training_flops(4) returned nan"),
    ({"training_flops": lambda size, **c: -6.0 * size}, "training_flops(4) returned -24.0"),
    ({"training_flops": lambda size, **c: 0.0}, "training_flops(4) returned 0.0"),
])
def test_a_count_that_is_not_positive_and_finite_is_one_line_naming_the_function(overrides, message, capsys):
    """A NaN, zero or negative count from a plugin ended `flops-fit plan` in a traceback from the
    planner's arithmetic (math.log10 of NaN, a division by zero)."""
    assert plan_toy(**overrides) == 2
    assert capsys.readouterr().err == (f"flops-fit: error: model 'toy' from plugin 'odd': {message}; a count must "
                                       f"be a positive finite number (the model's {message.split('(')[0]} is wrong)\n")


@pytest.mark.parametrize(("overrides", "function", "returned", "must"), [
    # an activation estimate of NaN ended `flops-fit plan` in int()'s ValueError traceback
    ({"activation_memory": lambda size, mb, seq, **c: float("nan")}, "activation_memory", "nan",
     "a non-negative finite number"),
    # a negative estimate was added to the weights' memory and printed as the run's memory
    ({"activation_memory": lambda size, mb, seq, **c: -100}, "activation_memory", "-100",
     "a non-negative finite number"),
    # these two were stored with every run, and fitted on the non-embedding scales
    ({"embedding_params": lambda size, **c: -5}, "embedding_params", "-5", "a non-negative whole number"),
    ({"non_embedding_flops": lambda size, **c: float("nan")}, "non_embedding_flops", "nan",
     "a positive finite number"),
    # half a parameter was cut off by int(), and create_model's check then agreed with the cut count
    ({"param_count": lambda size, **c: size * size + size + 0.5}, "param_count", "20.5",
     "a positive whole number"),
    ({"param_count": lambda size, **c: float("nan")}, "param_count", "nan", "a positive whole number"),
    ({"training_flops": lambda size, **c: "96"}, "training_flops", "'96'", "a positive finite number"),
])
def test_every_count_a_plugin_gives_is_checked_in_one_line_naming_the_function(overrides, function, returned, must,
                                                                            capsys):
    assert plan_toy(**overrides) == 2
    assert re.fullmatch(rf"flops-fit: error: model 'toy' from plugin 'odd': {function}\(\d+\) returned "
                        rf"{re.escape(returned)}; a count must be {must} \(the model's {function} is wrong\)\n",
                        capsys.readouterr().err)


def _divides_by_zero(*args, **config):
    return 1 // 0


@pytest.mark.parametrize(("field", "message"), [
    ("valid_sizes", "valid_sizes(1, 16384) raised ZeroDivisionError: integer division or modulo by zero (the model's "
                    "valid_sizes is wrong)"),
    ("param_count", "param_count(4) raised ZeroDivisionError: integer division or modulo by zero (the model's "
                    "param_count is wrong)"),
    ("configure", "configure(config) raised ZeroDivisionError: integer division or modulo by zero (the model's "
                  "configure is wrong)"),
    ("training_flops", "its training_flops 'no_such_module_xyz:flops' does not import: ModuleNotFoundError: No module "
                       "named 'no_such_module_xyz'"),
])
def test_a_sizing_function_that_raises_or_does_not_import_is_one_line_naming_it(field, message, capsys):
    """Any exception but the ValueError / TypeError of a refused configuration ended `flops-fit plan` in the
    plugin's traceback."""
    broken = "no_such_module_xyz:flops" if field == "training_flops" else _divides_by_zero
    assert plan_toy(**{field: broken}) == 2
    assert capsys.readouterr().err == f"flops-fit: error: model 'toy' from plugin 'odd': {message}\n"


@pytest.mark.parametrize("sizes", [None, "8,12", [8.5, 12.0]])
def test_valid_sizes_that_are_not_whole_numbers_are_the_plugins_fault_in_one_line(sizes, capsys):
    """valid_sizes returning None or text read as "refuses its configuration ([model] table / model_config)",
    blaming the user; sizes 8.5 were cut to 8 without a word, and the budget advice that followed was nonsense."""
    assert plan_toy(valid_sizes=lambda lo, hi, **c: sizes) == 2
    err = capsys.readouterr().err
    assert err.startswith("flops-fit: error: model 'toy' from plugin 'odd': valid_sizes(") and err.count("\n") == 1
    assert f"returned {sizes!r}; it must return the whole-number sizes in that range (the model's valid_sizes is " \
        "wrong)" in err


def test_ctrl_c_while_a_plan_is_made_is_one_line_and_the_interrupts_status(capsys):
    """Ctrl-C before a command's own handling began (here: while the planner asks the model for its
    sizes) printed a KeyboardInterrupt traceback."""
    def interrupt(lo, hi, **config):
        raise KeyboardInterrupt

    assert plan_toy(valid_sizes=interrupt) == 130
    assert capsys.readouterr().err == "\nflops-fit: interrupted by SIGINT; what was saved stays; run the command again\n"


def test_sigterm_while_a_plan_is_made_is_one_line_and_the_signals_status(tmp_path):
    """SIGTERM before a command's own handling began (a cluster's stop while the planner asks the model
    for its sizes) ended the process with status 143 and no word, where Ctrl-C printed its line."""
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    script = tmp_path / "term.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_host import plan_toy

        def term(lo, hi, **config):
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises at the next bytecode

        sys.exit(plan_toy(valid_sizes=term))
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 143, (done.returncode, done.stderr)
    assert done.stderr == "\nflops-fit: interrupted by SIGTERM; what was saved stays; run the command again\n"


def test_create_dataset_checks_the_split():
    host, _ = host_with(("good", Good()))
    assert flops_fit.create_dataset("toy-data", "validation", host=host, seq_len=4) == {
        "split": "validation", "seq_len": 4}
    with pytest.raises(EntryError, match=r"has no split 'test'; its splits are \['train', 'validation'\]"):
        flops_fit.create_dataset("toy-data", "test", host=host)


def test_isolated_host_helper_and_contract_checks():
    from flops_fit.testing import check_loss_entry, check_model_entry

    host = isolated_host(("good", Good()))
    assert check_model_entry("toy", [4, 8], host=host) == [4, 8]
    check_loss_entry("toy-loss", host=host)


def test_contract_check_catches_flops_that_do_not_grow():
    from flops_fit.testing import check_model_entry

    class Flat:
        @hookimpl
        def register_models(self, register):
            register(toy_model(training_flops=lambda size, **c: 1.0))

    host = isolated_host(("flat", Flat()))
    with pytest.raises(EntryError, match="training FLOPs do not grow with size"):
        check_model_entry("toy", [4, 8], host=host)
