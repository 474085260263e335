"""The planner: sizes around the prior optimum, exact tokens per budget, refusals that
say what would work, and run ids that change with anything that decides a result."""

import dataclasses
import math
import re
import subprocess
import sys

import pytest
import sweep_support

from flops_fit.errors import FlopsFitError, PlanError
from flops_fit.store.runs import RunSpec
from flops_fit.sweeps.planner import Plan, plan

HOST = sweep_support.host()


def make(**overrides):
    return plan(host=HOST, **sweep_support.small_plan_options(**overrides))


def test_importing_the_planner_imports_no_torch():
    """Planning reads schedules and WSD families from ``training`` but never its torch half:
    ``Plan.run`` and ``sweep()`` reach the driver lazily."""
    code = ("import sys, flops_fit.sweeps.planner, flops_fit.sweeps.options; "
            "print(sorted(m for m in ('torch', 'flops_fit.sweeps.driver', 'flops_fit.training.loop') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_tokens_are_the_budget_under_the_models_own_flops():
    p = make()
    assert len(p.runs) == 6
    for r in p.runs:
        flops_per_token = sweep_support.training_flops(r.size)
        assert r.flops_per_unit == flops_per_token
        assert r.params == sweep_support.param_count(r.size)
        assert r.tokens % r.seq_len == 0
        assert r.budget - r.seq_len * flops_per_token < r.tokens * flops_per_token <= r.budget
        assert r.steps == math.ceil(r.tokens / (r.batch_size * r.seq_len))


def test_6nd_accounting_counts_six_flops_per_parameter():
    for r in make(flops_accounting="6nd", budgets=[4e7, 8e7]).runs:
        assert r.flops_per_unit == 6 * r.params
        assert r.tokens == int(r.budget / (6 * r.params) / 16) * 16


def test_grid_spans_the_factor_around_the_prior_optimum():
    p = plan(host=HOST, model="tiny-lm", budgets=[1e10, 1e11], sizes_per_budget=5, span=16.0,
             batch_size=8, min_steps=5)
    for budget in p.budgets:
        runs = [r for r in p.runs if r.budget == budget]
        params = [r.params for r in runs]
        assert len(runs) == 5 and params == sorted(params)
        assert 10 < params[-1] / params[0] < 25  # 16x, snapped to multiples of 4 in width
        middle = runs[2]
        assert 8 < middle.tokens / middle.params < 50  # the prior optimum is ~20 tokens/param
    # a larger budget moves the grid to larger models
    assert min(r.size for r in p.runs if r.budget == 1e11) > min(r.size for r in p.runs if r.budget == 1e10)


def test_per_size_learning_rate_rule():
    p = make()
    for r in p.runs:
        assert r.lr == pytest.approx(0.33 * math.sqrt(8) / r.size)
        assert r.beta2 == pytest.approx(0.98 ** (8 / 128))
    const = make(hparams={"lr_rule": "constant", "base_lr": 1e-3})
    assert {r.lr for r in const.runs} == {1e-3}
    inv = make(hparams={"lr_rule": "inverse-width", "base_lr": 1e-2, "base_width": 8})
    assert [r.lr for r in inv.runs][:3] == pytest.approx([2e-2, 1e-2, 5e-3])


def test_plan_prints_a_table():
    text = str(make())
    for header in ("size", "params", "tokens", "tokens/param", "steps", "FLOPs", "est. time"):
        assert header in text
    assert text.count("\n") >= 6 + 2


def test_the_plan_headline_is_its_table_without_the_rows():
    p = make()
    head = p.headline()
    assert p.table().startswith(head + "\n") and f"{len(p.runs)} runs of" in head
    assert "est. time" not in head and len(head.splitlines()) <= 6


def test_the_plan_table_shows_a_small_tokens_per_param_as_a_number_not_zero():
    """A size trained on 0.019 tokens per parameter (a tiny budget, a wide model) read "0.0" in the
    plan's table: nothing, beside the note that every size trains on less than the target."""
    p = make(sizes=[4, 8, 64], budgets=[6.3e7])
    cells = {run.size: row[4] for run, row in zip(p.runs, p.rows(), strict=True)}
    assert cells[64] == "0.019"  # 640 tokens for 33,024 parameters
    assert cells[4] == "4.4"  # one decimal from 1 up, as before


def test_plan_round_trips_through_a_dict():
    p = make()
    again = Plan.from_dict(p.to_dict())
    assert [r.run_id for r in again.runs] == [r.run_id for r in p.runs]


def _suggested(message):
    return float(re.search(r">= ([0-9.e+-]+) FLOPs", message).group(1).rstrip("."))


def test_budget_too_small_for_the_smallest_model_is_refused_with_a_budget_that_works():
    with pytest.raises(PlanError, match="too small for model 'tiny-lm'") as info:
        make(budgets=[1e5])
    works = _suggested(str(info.value))
    assert len(make(budgets=[works]).runs) == 3


def test_budget_with_fewer_than_three_feasible_sizes_is_refused():
    with pytest.raises(PlanError, match="leaves only 2 of the planned sizes") as info:
        make(budgets=[1.2e7])
    works = _suggested(str(info.value))
    assert len(make(budgets=[works]).runs) == 3


def test_prior_optimum_at_the_edge_of_the_sizes_is_refused():
    with pytest.raises(PlanError, match="holds only 2 valid size.*next to its smallest size") as info:
        plan(host=HOST, model="tiny-lm", budgets=[1e8], span=4.0, sizes_per_budget=3, batch_size=8, min_steps=5)
    works = _suggested(str(info.value))
    assert len(plan(host=HOST, model="tiny-lm", budgets=[works], span=4.0, sizes_per_budget=3,
                    batch_size=8, min_steps=5).runs) == 3


def test_a_budget_below_the_smallest_sizes_own_does_not_call_that_size_its_optimum():
    """At 1e7 FLOPs the prior optimum (20 tokens/param) is below tiny-lm's smallest size, and the refusal
    called the smallest size's parameters the optimum ("prior optimum (2,304 params ...), next to its
    smallest size (2,304 params)"): an hf-causal-lm sweep at 1e9 FLOPs read 39,800 params as its optimum."""
    with pytest.raises(PlanError, match="holds only 2 valid size") as info:
        plan(host=HOST, model="tiny-lm", budgets=[1e7], span=4.0, sizes_per_budget=3, batch_size=8, min_steps=5)
    assert "prior optimum (below the smallest size at 20 tokens/param)" in str(info.value)
    assert "next to its smallest size (2,304 params)" in str(info.value)


@pytest.mark.parametrize("schedule", ["wsd", "cosine"])
def test_a_span_next_to_the_smallest_size_names_the_smallest_budget_that_plans(schedule):
    """The refusal named a budget from a formula: 4.53e9 with WSD's size ladder, 3.7x the smallest that plans
    (1.21e9), and 1.14e9 for the sizes around the optimum, 3x the smallest (3.76e8): the user raised the
    budget far more than needed. Now the planner's own choice of sizes is tried."""
    options = {"model": "tiny-lm", "schedule": schedule, "sizes_per_budget": 3, "span": 16.0 if schedule == "wsd"
               else 4.0, "batch_size": 8, "min_steps": 5}
    with pytest.raises(PlanError, match="holds only 2 valid size.*next to its smallest size") as info:
        plan(host=HOST, budgets=[1e7], **options)
    works = _suggested(str(info.value))
    assert len(plan(host=HOST, budgets=[works], **options).runs) == 3
    with pytest.raises(PlanError, match="holds only 2 valid size"):  # the suggestion is rounded up by < 1%
        plan(host=HOST, budgets=[works / 1.02], **options)


@pytest.mark.parametrize("overrides, message", [
    ({"budgets": []}, "pass budgets"),
    ({"budgets": [-1.0]}, "each budget must be a finite positive number"),
    ({"budgets": [1e8, float("inf")]}, "each budget must be a finite positive number, got inf"),
    # a duplicate planned its runs twice under one run id (9 runs listed, 6 stored, totals of 6)
    ({"budgets": [2e8, 1e8, 2e8]}, r"^budgets lists 2e\+08 more than once: each budget is one IsoFLOP curve, list it "
                                   "once$"),
    ({"flops_accounting": "8nd"}, "flops_accounting must be one of"),
    ({"sizes": None, "sizes_per_budget": 2}, "at least 3"),
    ({"sizes": None, "span": 1.0}, "span must be a factor > 1"),
    ({"sizes": [4, 6]}, r"sizes \[6\] are not valid"),
    # two sizes at a large budget: said as two sizes, not as a budget too small for a third
    ({"sizes": [4, 8], "budgets": [1e9]}, r"sizes=\[4, 8\] gives 2 distinct size\(s\); an IsoFLOP curve needs 3"),
    ({"batch_size": 0}, "batch_size must be a positive integer"),
    ({"loss": "cross-entropy-for-images"}, "no loss|unknown|not found|cross-entropy-for-images"),
    ({"eval_split": "test"}, "has no split 'test'"),
    ({"precision": "fp8"}, "precision must be"),
    ({"hparams": {"lr_rule": "magic"}}, "lr_rule 'magic' is unknown"),
    ({"hparams": {"learning_rate": 1}}, r"unknown hyper-parameter\(s\) \['learning_rate'\]"),
    ({"hparams": 3e-3}, r"hparams must be HyperParams, a mapping like \{'lr': 3e-3\} or a tune's folder"),
])
def test_bad_options_are_refused_with_the_fix(overrides, message):
    with pytest.raises(FlopsFitError, match=message):
        make(**overrides)


def test_run_id_changes_with_every_field_that_decides_the_result():
    spec = make().runs[0]
    changed = {
        "model": "x", "size": 8, "model_config": {"vocab_size": 128}, "dataset": "y",
        "dataset_config": {"seq_len": 8}, "loss": "z", "budget": 1.0, "tokens": 16, "batch_size": 4,
        "seq_len": 8, "steps": 1, "params": 1, "flops_per_unit": 1.0, "flops_accounting": "6nd", "lr": 1.0,
        "warmup_steps": 7, "min_lr_ratio": 0.5, "weight_decay": 0.0, "beta1": 0.5, "beta2": 0.5, "eps": 1.0,
        "grad_clip": 0.0, "seed": 1, "eval_split": "train", "eval_tokens": 1, "curve_points": 1,
        "divergence_factor": 9.0, "precision": "bf16", "version": "9.9",
    }
    identity = set(spec.identity())
    assert identity == set(changed), "a new RunSpec field must be covered here"
    ids = {spec.run_id}
    for name, value in changed.items():
        other = dataclasses.replace(spec, **{name: value}, run_id="")
        assert other.run_id not in ids, name
        ids.add(other.run_id)
    # where and how fast a run goes does not change what it computes
    assert dataclasses.replace(spec, device="cuda:1", compile=True, run_id="").run_id == spec.run_id


def test_a_tampered_stored_spec_is_refused():
    data = make().runs[0].to_dict()
    data["lr"] *= 2
    with pytest.raises(ValueError, match="does not hash to its id"):
        RunSpec.from_dict(data)


def test_one_declaration_serves_the_api_the_sweep_file_the_cli_and_the_store(capsys):
    """Every SweepOptions field is an API keyword, a [sweep] key (or its own table) and, where
    it has a command-line form, a `flops-fit plan` flag with the field's help text; the
    store's spec reads back as the same options."""
    from flops_fit.cli.main import main
    from flops_fit.sweeps.config import TABLE_OPTIONS, parse_config
    from flops_fit.sweeps.options import SweepOptions

    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for field in dataclasses.fields(SweepOptions):
        if field.metadata["cli"] is not None:
            assert f"--{field.name.replace('_', '-')}" in help_text, field.name
            assert " ".join(field.metadata["help"].split()) in help_text, field.name
    table = {"sweep": {"model": "tiny-lm", "budgets": [2e7, 4e7], "sizes": [4, 8, 16], "batch_size": 8,
                       "min_steps": 5, "eval_tokens": 512, "curve_points": 4}}
    from_file = parse_config(table).options
    assert from_file == SweepOptions(**table["sweep"])
    assert set(TABLE_OPTIONS.values()) <= set(SweepOptions.names())
    planned = plan(from_file, host=HOST)
    assert planned.runs == make().runs
    assert SweepOptions.from_dict(planned.settings) == planned.options


def test_cli_flags_build_the_options_the_api_builds(capsys):
    from flops_fit.cli.main import main
    from flops_fit.sweeps.data_budget import repeat_warning, unique_tokens

    assert main(["plan", "--model", "gpt", "--budgets", "4e12,1e13", "--span", "16", "--seq-len", "64",
                 "--tokens-per-param", "100"]) == 0
    printed = capsys.readouterr().out.strip()
    expected = plan(model="gpt", budgets=[4e12, 1e13], span=16.0, seq_len=64, tokens_per_param=100.0)
    # the largest run trains on more tokens than the standard library holds: the plan says so
    assert printed == f"{expected}\n{repeat_warning(expected.runs, unique_tokens(expected.options))}"


def test_keywords_override_given_options_and_unknown_ones_are_named():
    from flops_fit.sweeps.options import SweepOptions

    base = SweepOptions(**sweep_support.small_plan_options())
    assert plan(base, host=HOST, batch_size=4).runs[0].batch_size == 4
    with pytest.raises(PlanError, match=r"unknown option\(s\) \['spn'\]; the options are \['model', 'budgets'"):
        plan(host=HOST, spn=3, **sweep_support.small_plan_options())
    with pytest.raises(PlanError, match=r"pass model=\.\.\."):
        plan(host=HOST, budgets=[1e9])


@pytest.mark.parametrize("given", [{"model": "gpt", "budgets": [1e12]}, "sweep.toml"])
def test_plan_given_a_mapping_or_a_path_positionally_names_the_fix(given):
    with pytest.raises(PlanError, match=r"plan\(\*\*options\)"):
        plan(given)


VIT_ON_GLYPHS = {"model": "vit", "dataset": "glyphs", "budgets": [1e9, 2e9], "sizes": [4, 8, 12], "batch_size": 64,
                 "min_steps": 5, "dataset_config": {"image_size": 16, "num_classes": 36},
                 "model_config": {"depth": 2, "num_heads": 2, "patch_size": 8}}


@pytest.mark.parametrize("model_config, message", [
    # planned, then every run failed after the parity gate: "IndexError: Target 22 is out of bounds."
    ({"num_classes": 10}, "model 'vit' is set to num_classes 10, but dataset 'glyphs' has num_classes 36: the "
                          r"model's must be at least the dataset's .*leave num_classes out of the \[model\] table"),
    ({"image_size": 32}, "set to image_size 32, but dataset 'glyphs' has image_size 16: the model's must be equal"),
])
def test_a_model_set_against_its_datasets_labels_or_images_is_refused_at_plan_time(model_config, message):
    options = {**VIT_ON_GLYPHS, "model_config": {**VIT_ON_GLYPHS["model_config"], **model_config}}
    with pytest.raises(PlanError, match=message):
        plan(**options)


def test_a_head_wider_than_the_datasets_classes_still_plans():
    options = {**VIT_ON_GLYPHS, "model_config": {**VIT_ON_GLYPHS["model_config"], "num_classes": 100}}
    assert {run.model_config["num_classes"] for run in plan(**options).runs} == {100}


def test_an_image_model_on_a_text_dataset_names_the_datasets_that_serve_it():
    with pytest.raises(PlanError, match=r"serves \['causal-lm'\], not the task of model 'vit' \(image-classification\); "
                                        "pick a dataset that serves it: .*glyphs"):
        plan(**{**VIT_ON_GLYPHS, "dataset": "python-stdlib", "dataset_config": {}})


@pytest.mark.parametrize("argv, value", [(["--budgets", "1e14", "1e15"], "1e15"), (["--sizes", "64", "128"], "128")])
def test_a_list_given_with_spaces_is_told_to_join_its_values_with_commas(argv, value, capsys):
    """`flops-fit plan --budgets 1e14 1e15` said "sweep configuration '1e15' does not exist": argparse
    reads the second value as the sweep file, and nothing said the list wanted commas."""
    from flops_fit.cli.main import main

    assert main(["plan", "--model", "gpt", *argv]) == 2
    err = capsys.readouterr().err
    assert err == (f"flops-fit: error: '{value}' is no sweep configuration: a list option takes its values joined "
                   "by commas (e.g. --budgets 1e14,1e15, --sizes 64,128)\n")


def test_the_readme_sweep_file_missing_after_a_pip_install_says_where_it_lives(tmp_path, monkeypatch, capsys):
    """`flops-fit plan examples/sweep.toml`, the README's command, run where a pip install puts a user
    (no checkout, so no examples/ folder), answered "does not exist (see examples/sweep.toml)"."""
    from flops_fit.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["plan", "examples/sweep.toml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flops-fit: error: sweep configuration 'examples/sweep.toml' does not exist: give a sweep ")
    assert "format: docs/guide/sweeps.md" in err and "flops-fit repository, which a pip install does not include" in err
    assert err.count("\n") == 1


def test_runs_trained_together_asked_of_a_plan_that_has_none_is_said():
    """stack_runs = 2 on an ordinary sweep (every run its own size or budget) trained each run alone
    without a word; a tune's runs (one shape at several rates) are what it stacks."""
    from flops_fit.tuning.grid import tune_plan

    note = ("stack_runs = 2, but no two runs of this plan differ only in learning rate or seed, so each trains alone: "
            "runs are trained together where they share every other setting (a tune's rates, a seed study)")
    assert note in make(stack_runs=2).notes
    assert not any("stack_runs" in n for n in make().notes)
    options = make(stack_runs=2).options
    tuned = tune_plan(options, {"budgets": [2e7], "sizes": None, "multipliers": [0.5, 1.0, 2.0], "batch_sizes": None,
                                "beta2s": None}, host=HOST)
    assert len(tuned.runs) == 9 and not any("stack_runs" in n for n in tuned.notes)


def test_a_configuration_the_dataset_supplied_names_the_dataset():
    """swin_tiny_patch4_window7_224 on its default dataset (digits, 8 px) was refused with
    'stage 2 has an odd resolution 1 ... pick image_size / patch_size', sizes the user never set:
    the refusal now says which dataset set them."""
    with pytest.raises(PlanError, match=r"odd resolution 1 .*; set by dataset 'digits': patch_size=2, image_size=8 "
                                        r"\(give them in \[model\] / model_config, or pick a dataset that fits\)"):
        plan(model="swin_tiny_patch4_window7_224", budgets=[1e15], sizes=[96, 192, 288], batch_size=8)


def test_a_refusal_the_dataset_did_not_cause_is_not_put_on_the_dataset():
    """The refusal names vocab_size among the config's fields, and the dataset set vocab_size, but the
    model refuses without the dataset's values too: no 'set by dataset' there."""
    config = {"model_type": "llama", "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "vocab_size": 256}
    with pytest.raises(PlanError) as err:
        plan(model="hf-causal-lm", budgets=[1e12], sizes=[32, 64, 96], seq_len=32, model_config={"config": config})
    assert "the config has no 'hidden_size'" in str(err.value) and "set by dataset" not in str(err.value)


def test_more_processes_per_run_than_cores_is_noted_not_refused():
    """processes_per_run = 4 on a 2-core machine planned and trained oversubscribed without a word: the
    plan (and so the sweep's start, which prints its headline) notes the cores seen and the setting."""
    import os

    cores = os.cpu_count() or 1
    p = make(processes_per_run=cores + 1, device="cpu")
    [note] = [n for n in p.notes if n.startswith("processes_per_run")]
    assert note.startswith(f"processes_per_run = {cores + 1} starts {cores + 1} processes for each run and this "
                           f"machine has {cores} cores")
    assert note.endswith(f"else set processes_per_run to {cores} or less") and f"note: {note}" in p.headline()
    assert not any(n.startswith("processes_per_run") for n in make(processes_per_run=cores, device="cpu").notes)


@pytest.mark.parametrize("device", ["cuda:x", "cuda:-1", "cuda:0,1", "gpu"])
def test_a_device_torch_cannot_name_is_refused_at_plan_time(device):
    """'cuda:x' and 'cuda:0,1' passed the check (it tested startswith('cuda:')) and failed every run in
    torch.device; a worker's several GPUs are the executor's devices, which the refusal points to."""
    with pytest.raises(PlanError, match="device must be 'auto', 'cpu', 'cuda' or 'cuda:N'") as err:
        make(device=device)
    assert ("[executor] table's devices" in str(err.value)) == ("," in device)


def test_numpy_numbers_plan_the_runs_python_numbers_plan():
    """budgets=np.logspace(...) was refused with "pass budgets=[...]", and np.int64(8) as "must be a positive
    integer, got np.int64(8)"; now NumPy numbers and arrays plan the same runs (the same ids) as Python's,
    and the settings the store records stay JSON."""
    import json

    import numpy as np

    python = make(sizes_per_budget=3, sizes=None, span=16.0, tokens_per_param=2.0, hparams={"max_warmup_steps": 10},
                  model_config={"block_size": 16})
    numpy = make(budgets=np.array([2e7, 4e7]), sizes_per_budget=np.int64(3), sizes=None, span=np.int64(16),
                 tokens_per_param=np.float32(2),
                 batch_size=np.int64(8), min_steps=np.int32(5), eval_tokens=np.int64(512), seed=np.int64(0),
                 hparams={"max_warmup_steps": np.int64(10)}, model_config={"block_size": np.int64(16)})
    assert [r.run_id for r in numpy.runs] == [r.run_id for r in python.runs]
    assert json.loads(json.dumps(numpy.options.to_dict())) == json.loads(json.dumps(python.options.to_dict()))
    explicit = make(sizes=np.arange(4, 20, 4), budgets=np.float32(2e7))
    assert explicit.options.sizes == (4, 8, 12, 16) and explicit.options.budgets == (float(np.float32(2e7)),)
    with pytest.raises(PlanError, match="sizes_per_budget must be a positive integer, got np.True_"):
        make(sizes_per_budget=np.bool_(True))
