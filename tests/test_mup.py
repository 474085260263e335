"""muP (``parametrization="mup"``) on gpt, llama and vit, and the trainer's per-parameter
learning-rate factors.

The coordinate check (Yang et al. 2022, Tensor Programs V): the mean |activation| of every
block's output and of the logits after a few Adam steps, at four widths spanning 8x. Under
muP it is width-independent up to finite-width fluctuations, which at these tiny widths (16 =
a single head) are tens of percent: the bound is a factor 2 either way across the four
widths. Under the standard parametrization an Adam step changes each weight entry by about
the rate, so a hidden activation moves by about rate x fan_in and the ratio grows with the
width (8x here): every layer exceeds that factor 2. Measured from width 16 to 128: muP
0.59x-1.29x, standard 2.7x-24x.
"""

import dataclasses
import math
import re

import pytest
import sweep_support
import torch

import flops_fit
from flops_fit.errors import PlanError
from flops_fit.sweeps.planner import plan
from flops_fit.testing import isolated_host
from flops_fit.training.loop import train
from flops_fit.training.steps import lr_multipliers, make_optimizer

HOST = sweep_support.host()
TINY = {"gpt": {"n_layer": 2, "block_size": 16}, "llama": {"n_layer": 2, "block_size": 16},
        "vit": {"depth": 2, "image_size": 8, "patch_size": 4, "head_dim": 16}}
WIDTHS = (16, 32, 64, 128)


@pytest.fixture(scope="module")
def spec():
    return plan(host=HOST, **sweep_support.small_plan_options(budgets=[2.1e7])).runs[0]


def build(name, width, parametrization="standard", base_width=None, seed=0, **config):
    torch.manual_seed(seed)
    mup = {"parametrization": parametrization, "base_width": base_width} if parametrization != "standard" else {}
    return flops_fit.create_model(name, size=width, host=HOST, **TINY[name], **mup, **config)


def inputs(name, rows=16):
    g = torch.Generator().manual_seed(1)
    if name == "vit":
        return torch.randn(rows, 3, 8, 8, generator=g), torch.randint(0, 10, (rows,), generator=g)
    tokens = torch.randint(0, 256, (rows, 16), generator=g)
    return tokens, None


def loss_of(logits, x, labels):
    if labels is not None:
        return torch.nn.functional.cross_entropy(logits, labels)
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 256), x[:, 1:].reshape(-1))


def coordinates(name, width, parametrization, spec, steps=5, lr=1e-2):
    """Mean |output| of each block and of the logits after ``steps`` Adam steps (the trainer's
    optimizer and its per-group rate)."""
    model = build(name, width, parametrization, base_width=WIDTHS[0])
    x, labels = inputs(name)
    optimizer = make_optimizer(model, dataclasses.replace(spec, lr=lr, weight_decay=0.0), torch.device("cpu"))
    for _ in range(steps):
        for group in optimizer.param_groups:  # as the trainer's loop sets it
            group["lr"] = lr * group.get("lr_scale", 1.0)
        loss_of(model(x), x, labels).backward()
        optimizer.step()
        optimizer.zero_grad()
    blocks = model.layers if name == "llama" else model.blocks
    seen = []
    hooks = [b.register_forward_hook(lambda _m, _i, out: seen.append(out.abs().mean().item())) for b in blocks]
    with torch.no_grad():
        seen.append(model(x).abs().mean().item())
    for h in hooks:
        h.remove()
    return seen


@pytest.mark.parametrize("name", ["gpt", "llama", "vit"])
def test_coordinate_check_flat_under_mup_growing_under_standard(name, spec):
    for parametrization in ("mup", "standard"):
        narrow, wide = (coordinates(name, w, parametrization, spec) for w in (WIDTHS[0], WIDTHS[-1]))
        middle = [coordinates(name, w, parametrization, spec) for w in WIDTHS[1:-1]]
        ratios = [b / a for a, b in zip(narrow, wide)]
        assert all(math.isfinite(v) for row in (narrow, *middle, wide) for v in row)
        if parametrization == "mup":
            assert all(0.5 <= r <= 2.0 for r in ratios), (parametrization, ratios)
            spread = [max(col) / min(col) for col in zip(narrow, *middle, wide)]
            assert all(s <= 2.0 for s in spread), spread  # flat across all four widths, not only the ends
        else:
            assert all(r > 2.0 for r in ratios), (parametrization, ratios)


@pytest.mark.parametrize("name", ["gpt", "llama", "vit"])
def test_mup_at_the_base_width_is_the_standard_model(name):
    standard, mup = build(name, 32), build(name, 32, "mup", base_width=32)
    x, _ = inputs(name, rows=2)
    assert all(torch.equal(a, b) for a, b in zip(standard.state_dict().values(), mup.state_dict().values()))
    assert torch.equal(standard(x), mup(x))


@pytest.mark.parametrize("name", ["gpt", "llama", "vit"])
def test_hidden_weights_init_and_learning_rates_follow_the_table(name):
    """At 4x the base width: hidden weights' std halves (variance ~ 1/fan_in) and their rate is
    1/4; embeddings, the readout, biases and norms keep the standard init and rate."""
    standard, mup = build(name, 128), build(name, 128, "mup", base_width=32)
    factors = mup.lr_multipliers()
    hidden = {n for n, m in mup.named_modules() if isinstance(m, torch.nn.Linear) and n.startswith(("blocks.", "layers."))}
    assert set(factors) == {f"{n}.weight" for n in hidden}
    assert all(f == 0.25 for f in factors.values())
    assert standard.lr_multipliers() == {}
    ours, theirs = dict(mup.named_parameters()), dict(standard.named_parameters())
    for n, p in ours.items():
        if n in factors:  # the same draw, scaled by sqrt(base_width / width)
            torch.testing.assert_close(p, theirs[n] * 0.5, rtol=0, atol=0)
        else:
            assert torch.equal(p, theirs[n]), n


@pytest.mark.parametrize("name", ["gpt", "llama", "vit"])
def test_the_readout_is_multiplied_by_base_width_over_width(name):
    """Same weights, heads following the width (the standard attention scale): muP's logits are the
    standard model's times base_width / width (the heads' biases are zero at init)."""
    mup = build(name, 128, "mup", base_width=32)
    standard = build(name, 128)
    standard.load_state_dict(mup.state_dict())
    x, _ = inputs(name, rows=2)
    torch.testing.assert_close(mup(x), standard(x) * 0.25)


def attention_scales(model):
    return {m.scale for m in model.modules() if hasattr(m, "qkv_proj")}


def test_attention_is_scaled_by_one_over_head_size_when_heads_are_fixed():
    # heads follow the width (head size 16 at every width): the standard 1/sqrt(16)
    assert attention_scales(build("gpt", 128, "mup", base_width=32)) == {0.25}
    # two heads: head size 16 at the base width 32, 64 at width 128 -> sqrt(16) / 64
    assert attention_scales(build("gpt", 128, "mup", base_width=32, n_head=2)) == {4 / 64}
    assert attention_scales(build("vit", 128, "mup", base_width=32, num_heads=2)) == {4 / 64}
    assert attention_scales(build("llama", 128, "mup", base_width=32, n_head=2)) == {4 / 64}
    assert attention_scales(build("gpt", 128, n_head=2)) == {64**-0.5}  # standard


@pytest.mark.parametrize("name", ["gpt", "llama", "vit"])
def test_parameter_and_flop_counts_do_not_change(name):
    entry = flops_fit.model_info(name, host=HOST)
    mup = {**TINY[name], "parametrization": "mup", "base_width": 16}
    assert entry.params(64, **mup) == entry.params(64, **TINY[name]) == build(name, 64, "mup", 16).num_params()
    assert entry.flops_per_unit(64, **mup) == entry.flops_per_unit(64, **TINY[name])


@pytest.mark.parametrize("config, message", [
    ({"parametrization": "mu-p"}, "parametrization must be one of ('standard', 'mup', 'per-layer'), got 'mu-p'"),
    ({"parametrization": "mup"}, "parametrization='mup' needs base_width"),
    ({"parametrization": "per-layer"}, "parametrization='per-layer' needs base_width"),
    ({"base_width": 32}, "base_width=32 only applies to parametrization='mup' or 'per-layer': set one of them"),
    ({"parametrization": "mup", "base_width": 0}, "base_width must be a positive integer, got 0"),
    ({"parametrization": "mup", "base_width": 32.0}, "base_width must be a positive integer, got 32.0"),
])
@pytest.mark.parametrize("name", ["gpt", "llama", "vit"])
def test_bad_parametrization_options_raise_one_clear_error(name, config, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        flops_fit.create_model(name, size=64, host=HOST, **config)


@pytest.mark.parametrize("config", [{"intermediate_size": 96}, {"n_head": 2, "head_size": 16}])
def test_llama_mup_refuses_hidden_dimensions_fixed_across_widths(config):
    with pytest.raises(ValueError, match="needs every hidden dimension to grow with the width"):
        flops_fit.create_model("llama", size=64, host=HOST, parametrization="mup", base_width=32, **config)


def test_optimizer_groups_carry_the_factors_and_keep_decay_per_step(spec):
    mup = build("gpt", 128, "mup", base_width=32)
    optimizer = make_optimizer(mup, spec, torch.device("cpu"))
    hidden = set(mup.lr_multipliers())
    names = {id(p): n for n, p in mup.named_parameters()}
    for group in optimizer.param_groups:
        members = {names[id(p)] for p in group["params"]}
        if group.get("lr_scale", 1.0) == 0.25:
            assert members == hidden
            assert group["weight_decay"] == spec.weight_decay / 0.25  # lr x decay stays the base rate's
            assert group["lr"] == spec.lr * 0.25
        else:
            assert not members & hidden
            expected = spec.weight_decay if all(mup.get_parameter(n).ndim >= 2 for n in members) else 0.0
            assert group["weight_decay"] == expected and (not members or group["lr"] == spec.lr)
    assert len(optimizer.param_groups) == 3
    standard = make_optimizer(build("gpt", 128), spec, torch.device("cpu"))
    assert len(standard.param_groups) == 2  # decay and no decay, as before muP
    assert not any("lr_scale" in g for g in standard.param_groups)


def test_factors_are_read_through_a_wrapper():
    """DistributedDataParallel holds the model as ``module``; torch.compile as ``_orig_mod``."""
    mup = build("gpt", 64, "mup", base_width=32)
    wrapper = torch.nn.Module()
    wrapper.module = mup
    factors = lr_multipliers(wrapper)
    assert factors == lr_multipliers(mup) and len(factors) == len(mup.lr_multipliers())
    assert set(factors.values()) == {0.5}
    assert lr_multipliers(torch.compile(mup)) == factors  # compiling builds nothing until called
    assert lr_multipliers(torch.nn.Linear(2, 2)) == {}


class Scaled(sweep_support.TinyLM):
    """tiny-lm whose parameters all carry the learning-rate factor ``lr_factor``."""

    def __init__(self, width, lr_factor=1.0, names=None, **config):
        super().__init__(width, **config)
        self.factor, self.names = lr_factor, names

    def lr_multipliers(self):
        names = self.names or [n for n, _ in self.named_parameters()]
        return {n: self.factor for n in names}


class ScaledPlugin:
    @flops_fit.hookimpl
    def register_models(self, register):
        register(flops_fit.ModelEntry(
            "scaled-lm", builder=Scaled, size_param="width", valid_sizes=sweep_support.valid_sizes,
            param_count=sweep_support.param_count, training_flops=sweep_support.training_flops,
            flops_unit="token", task=flops_fit.TASK_CAUSAL_LM, default_loss="tiny-next-token",
            default_datasets=("counting-text",), defaults={"vocab_size": 256, "block_size": 16},
        ))


def test_the_training_loop_applies_each_groups_factor():
    """A factor of 1e-30 on every parameter leaves the weights where a zero rate leaves them."""
    host = isolated_host(("sweep_support", sweep_support), ("scaled", ScaledPlugin()), builtins=False)
    options = sweep_support.small_plan_options(model="scaled-lm", budgets=[2.1e7])
    base = dataclasses.replace(plan(host=host, **options).runs[0], weight_decay=0.0, run_id="")
    frozen = train(dataclasses.replace(base, model_config={**base.model_config, "lr_factor": 1e-30}, run_id=""),
                   host=host)
    still = train(dataclasses.replace(base, lr=0.0, run_id=""), host=host)
    learned = train(base, host=host)
    assert frozen.status == still.status == learned.status == "done"
    assert frozen.loss == still.loss
    assert learned.loss < still.loss - 0.1


@pytest.mark.parametrize("names, factor, message", [
    (["nope.weight"], 2.0, "lr_multipliers\\(\\) names 'nope.weight', which is not a parameter of the model"),
    (None, 0.0, "lr_multipliers\\(\\) gives 'embed.weight' the factor 0.0: it must be a finite positive number"),
    (None, float("nan"), "the factor nan: it must be a finite positive number"),
    (None, float("inf"), "the factor inf: it must be a finite positive number"),
])
def test_bad_factors_raise_one_clear_error(names, factor, message):
    with pytest.raises(ValueError, match=message):
        lr_multipliers(Scaled(8, lr_factor=factor, names=names))


def test_a_plan_records_the_base_width_and_standard_plans_keep_their_configuration():
    options = {"model": "gpt", "dataset": "counting-text", "sizes": [16, 32, 64], "budgets": [1e11], "batch_size": 8,
               "min_steps": 1, "model_config": {"n_layer": 2}, "hparams": {"lr_rule": "constant"}}
    standard = plan(host=HOST, **options).runs[0].model_config
    assert not {"parametrization", "base_width"} & set(standard)  # run ids as before muP existed
    options["model_config"] = {"n_layer": 2, "parametrization": "mup", "base_width": 16}
    mup = plan(host=HOST, **options).runs[0].model_config
    assert mup == {**standard, "parametrization": "mup", "base_width": 16}


def test_a_sweep_without_base_width_is_refused_at_planning():
    with pytest.raises(PlanError, match="model 'gpt' refuses its configuration .*needs base_width"):
        plan(host=HOST, model="gpt", dataset="counting-text", sizes=[16, 32, 64], budgets=[1e11], batch_size=8,
             min_steps=1, model_config={"parametrization": "mup"})


@pytest.mark.parametrize("name", ["gpt", "llama", "vit"])
@pytest.mark.parametrize("base_width", [32, 128])
def test_per_layer_is_the_standard_model_with_every_matrix_at_base_over_width(name, base_width):
    """"per-layer": the standard model's weights and outputs at every width (the same draw), and
    the rate lr x base_width / width on every parameter with two dimensions larger than 1
    (embeddings, readout, patch projection, hidden layers), the rate lr on the rest."""
    standard, layered = build(name, 128), build(name, 128, "per-layer", base_width=base_width)
    x, _ = inputs(name, rows=2)
    assert all(torch.equal(a, b) for a, b in zip(standard.state_dict().values(), layered.state_dict().values()))
    assert torch.equal(standard(x), layered(x))
    factors = layered.lr_multipliers()
    matrices = {n for n, p in layered.named_parameters() if sum(d > 1 for d in p.shape) >= 2}
    assert set(factors) == matrices and set(factors.values()) == {base_width / 128}
    embedding = {"gpt": "wte.weight", "llama": "embed_tokens.weight", "vit": "patch_embed.proj.weight"}[name]
    assert embedding in factors and any(n.endswith("bias") or "norm" in n for n, _ in layered.named_parameters()
                                        if n not in factors)


@pytest.mark.parametrize("parametrization", ["mup", "per-layer"])
@pytest.mark.parametrize("rule", ["marin", "inverse-width"])
def test_a_width_scaled_rate_rule_under_mup_is_refused_at_planning(rule, parametrization):
    """muP already divides each hidden layer's rate by width / base_width; a rule that divides
    the whole rate by the width again would count the width twice."""
    options = {"model": "gpt", "dataset": "counting-text", "sizes": [16, 32, 64], "budgets": [1e11],
               "batch_size": 8, "min_steps": 1, "model_config": {"parametrization": parametrization, "base_width": 16}}
    with pytest.raises(PlanError, match=f"lr_rule '{rule}' scales the rate with the width.*lr_rule = \"constant\""):
        plan(host=HOST, hparams={"lr_rule": rule}, **options)
    assert plan(host=HOST, hparams={"lr_rule": "constant", "base_lr": 1e-2}, **options).runs
