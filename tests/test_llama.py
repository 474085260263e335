"""Built-in Llama: registration, configuration errors, contract, HF equivalences, converter refusals."""

import re

import pytest
import torch
from flops_fit.plugins.models import llama
from flops_fit.plugins.models.llama_model import build

import flops_fit
from flops_fit.errors import ConversionError
from flops_fit.testing import check_model_entry

SMALL = {"n_layer": 2, "vocab_size": 50, "block_size": 16}


def tokens(batch=2, length=16, vocab=50, seed=0):
    return torch.randint(vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_registered_sized_by_width_and_sweepable():
    entry = flops_fit.model_info("llama")
    assert entry.size_param == "width" and entry.flops_unit == "token" and entry.default_loss == "next-token"
    assert entry.sizes(1, 100) == [16, 32, 48, 64, 80, 96]
    assert entry.sizes(1, 100, n_kv_head=2) == [32, 64, 96]
    check_model_entry("llama", sizes=[32, 64])
    plan = flops_fit.plan(model="llama", dataset="python-stdlib", budgets=[1e11, 2e11], span=4, seq_len=32,
                          model_config={"n_layer": 2})
    assert {r.model for r in plan.runs} == {"llama"} and len(plan.runs) >= 4
    assert all(r.flops > 0 for r in plan.runs)


def test_fixed_heads_list_only_widths_with_an_even_head_size():
    """With n_head set the head size is width / n_head, and rotary embeddings need it even: valid_sizes
    listed width 3 (head size 1) first, so `entry.sizes` and every plan with n_head=3 ended in
    "head_size must be even ..., got 1" although widths 6, 12, ... build."""
    entry = flops_fit.model_info("llama")
    assert entry.sizes(1, 30, n_head=3) == [6, 12, 18, 24, 30]
    assert entry.sizes(1, 40, n_head=5, n_kv_head=1) == [10, 20, 30, 40]
    with pytest.raises(ValueError, match=r"^head_size must be even for rotary embeddings, got 7 \(width 7 / 1 "
                       r"heads\): use an even head_dim, or widths that are multiples of 2 x n_head$"):
        entry.sizes(1, 40, head_dim=7)  # no width gives an even head: named, with the option to change
    for width in entry.sizes(1, 40, n_head=3):
        assert build(width, n_head=3, **SMALL).num_params() == llama.param_count(width, n_head=3, **SMALL)


def test_forward_loss_and_gradients_reach_every_parameter():
    torch.manual_seed(0)
    for config in ({}, {"n_kv_head": 1, "tie_word_embeddings": True}, {"head_size": 24, "n_head": 4, "qkv_bias": True,
                                                                     "sliding_window": 4}):
        model = build(64, **SMALL, **config)
        t = tokens()
        logits = model(t)
        assert logits.shape == (2, 16, 50)
        flops_fit.get_loss("next-token")(logits, {"tokens": t}).backward()
        for name, p in model.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, (config, name)
        assert model.num_params() == llama.param_count(64, **{**llama.LLAMA_DEFAULTS, **SMALL, **config})


def test_causal_and_sliding_window_are_real():
    torch.manual_seed(0)
    model = build(32, **SMALL, sliding_window=4).eval()
    t = tokens()
    changed = t.clone()
    changed[:, 10] = (changed[:, 10] + 1) % 50
    a, b = model(t), model(changed)
    torch.testing.assert_close(a[:, :10], b[:, :10])  # causal: the past does not see the future
    assert (a[:, 10:] - b[:, 10:]).abs().max() > 1e-4
    # one layer, window 4: position 14 sees positions 11..14 only, so a change at 10 cannot reach it
    one = build(32, **{**SMALL, "n_layer": 1}, sliding_window=4).eval()
    torch.testing.assert_close(one(t)[:, 14:], one(changed)[:, 14:])
    full = build(32, **{**SMALL, "n_layer": 1}).eval()
    full.load_state_dict(one.state_dict())
    assert (full(t)[:, 14:] - full(changed)[:, 14:]).abs().max() > 1e-4


def test_rmsnorm_and_parameter_count_match_hugging_face():
    transformers = pytest.importorskip("transformers")
    from flops_fit.plugins.models.llama_model import RMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    ours, ref = RMSNorm(16, 1e-6), LlamaRMSNorm(16, 1e-6)
    with torch.no_grad():
        ours.weight.normal_()
        ref.weight.copy_(ours.weight)
    x = torch.randn(3, 16, dtype=torch.bfloat16)
    torch.testing.assert_close(ours.to(torch.bfloat16)(x), ref.to(torch.bfloat16)(x), rtol=0, atol=0)
    config = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=32, intermediate_size=96, vocab_size=50, attention_bias=True)
    with torch.device("meta"):
        hf = transformers.LlamaForCausalLM(config)
    ours = llama.param_count(64, **{**llama.LLAMA_DEFAULTS, "n_layer": 2, "n_head": 4, "n_kv_head": 2, "head_size": 32,
                                     "intermediate_size": 96, "vocab_size": 50, "attention_bias": True})
    assert ours == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize("config, message", [
    ({"rope_type": "yarn"}, r"rope_type must be one of \('default', 'linear', 'llama3'\), got 'yarn'"),
    ({"hidden_act": "relu"}, "hidden_act must be one of .* got 'relu'"),
    ({"head_size": 15, "n_head": 4}, "head_size must be even for rotary embeddings, got 15"),
    ({"n_kv_head": 3, "n_head": 4}, "number of heads 4 is not divisible by the number of key/value heads 3"),
    ({"sliding_window": 0}, "sliding_window must be a positive integer, got 0"),
    ({"rms_norm_eps": 0}, "rms_norm_eps must be positive"),
    ({"n_layers": 2}, r"unknown configuration keyword\(s\) \['n_layers'\]"),
])
def test_configuration_errors(config, message):
    with pytest.raises(ValueError, match=message):
        build(64, **config)


def test_input_errors():
    model = build(32, **SMALL)
    with pytest.raises(ValueError, match="sequence length 17 must be between 1 and block_size=16"):
        model(tokens(length=17))
    with pytest.raises(ValueError, match="tokens must be integer token ids"):
        model(torch.zeros(2, 4))


def _config(**changes):
    base = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
            "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 50, "hidden_act": "silu",
            "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}
    return {**base, **changes}


@pytest.mark.parametrize("changes, refusal", [
    ({"model_type": "gemma"}, "model_type='gemma' is not supported"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}}, "rope_type='yarn'"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e4, "beta": 1}},
     "rope parameters ['beta']"),
    ({"hidden_act": "relu2"}, "hidden_act='relu2'"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5"),
    ({"pretraining_tp": 2}, "pretraining_tp=2"),
    ({"attention_dropout": 0.1}, "attention_dropout=0.1"),
    ({"qk_layernorm": True}, "qk_layernorm=True (unknown option)"),
    ({"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 8,
      "layer_types": ["full_attention", "sliding_attention"]}, "layer_types mixing sliding and full attention"),
])
def test_converter_refuses_what_it_does_not_reproduce_by_name(changes, refusal):
    from flops_fit.parity.convert_llama import convert_llama

    with pytest.raises(ConversionError) as err:
        convert_llama({}, _config(**changes))
    assert refusal in str(err.value)


def test_converter_reads_rope_and_window_options():
    from flops_fit.parity.convert_llama import llama_config

    old_style = llama_config(_config(rope_parameters=None, rope_theta=5e5,
                                     rope_scaling={"type": "linear", "factor": 2.0}))
    assert (old_style["rope_theta"], old_style["rope_type"], old_style["rope_factor"]) == (5e5, "linear", 2.0)
    assert llama_config(_config(model_type="mistral", sliding_window=4096))["sliding_window"] == 4096
    qwen = llama_config(_config(model_type="qwen2", sliding_window=4096, use_sliding_window=False))
    assert qwen["sliding_window"] is None and qwen["qkv_bias"] is True and qwen["attention_bias"] is False
    assert llama_config(_config(head_dim=32))["head_size"] == 32


def test_rope_scaling_beside_rope_parameters_is_read_as_transformers_reads_it():
    """transformers takes rope_scaling over rope_parameters when a config.json has both; the
    converter took rope_parameters and built plain RoPE where HF scales it (a silently wrong model)."""
    transformers = pytest.importorskip("transformers")
    from flops_fit.parity.convert_llama import llama_config

    config = _config(rope_scaling={"rope_type": "linear", "factor": 2.0})
    hf = transformers.LlamaConfig.from_dict(config).rope_parameters
    ours = llama_config(config)
    assert (ours["rope_type"], ours["rope_factor"], ours["rope_theta"]) == (hf["rope_type"], hf["factor"],
                                                                          hf["rope_theta"])


def test_rope_parameters_that_are_not_an_object_are_refused_by_name():
    from flops_fit.parity.convert_llama import convert_llama

    with pytest.raises(ConversionError, match=r"rope_parameters='default' \(an object of RoPE parameters, or null\)"):
        convert_llama({}, _config(rope_parameters="default"))


@pytest.mark.parametrize("heads, kv_heads, named", [
    (4, 0, "num_key_value_heads=0 is not a number of heads (a positive integer); leave it out, or null, for one"),
    (4, -2, "num_key_value_heads=-2 is not a number of heads"),
    (4, 2.5, "num_key_value_heads=2.5 is not a number of heads"),
    (0, 2, "num_attention_heads=0 is not a number of heads (a positive integer)"),
])
def test_head_counts_that_are_no_counts_are_refused_naming_the_key(heads, kv_heads, named):
    """num_key_value_heads: 0 was read as "one per head" and then failed as a mis-shaped qkv_proj
    (the attention converter) or converted with the wrong head count (the model converter)."""
    from flops_fit.parity.case_attention import llama_reference
    from flops_fit.parity.convert_llama import convert_llama
    from flops_fit.parity.convert_llama_attn import convert_llama_attention

    with pytest.raises(ConversionError, match=re.escape(f"HF LlamaForCausalLM: config {named}")):
        convert_llama({}, _config(num_attention_heads=heads, num_key_value_heads=kv_heads))
    reference = llama_reference()
    config = {**reference.config.to_dict(), "num_attention_heads": heads, "num_key_value_heads": kv_heads}
    with pytest.raises(ConversionError, match=re.escape(f"HF Llama attention: config {named}")):
        convert_llama_attention(reference.state_dict(), config)
    assert convert_llama_attention(reference.state_dict(), {**reference.config.to_dict(), "num_key_value_heads": None}
                                   ).config["num_kv_heads"] == reference.config.num_attention_heads


def test_a_sliding_window_in_a_llama_config_is_refused_not_applied():
    """transformers' LlamaForCausalLM has no sliding window and ignores the key; the converter applied
    it, so our model masked keys HF attends to (logits 0.35 apart on 12 tokens with window 4)."""
    from flops_fit.parity.convert_llama import convert_llama, llama_config

    with pytest.raises(ConversionError, match=r"sliding_window=4 \(transformers' LlamaForCausalLM ignores it"):
        convert_llama({}, _config(sliding_window=4))
    assert llama_config(_config(sliding_window=None))["sliding_window"] is None


@pytest.mark.parametrize("max_window_layers, layers, expected", [
    (28, 2, None),  # Qwen2Config's default: no layer of a 2-layer model slides
    (0, 2, 4),  # every layer slides
    (1, 2, "mixing"),  # layer 1 slides, layer 0 does not
])
def test_qwen2_without_layer_types_slides_from_max_window_layers(max_window_layers, layers, expected):
    """A Qwen2 config.json without layer_types (as transformers 4.x saved them): Qwen2Config derives
    them, sliding from layer max_window_layers on; the converter slid every layer, so a config with
    use_sliding_window and the default 28 converted to a model that masked keys HF attends to."""
    transformers = pytest.importorskip("transformers")
    from flops_fit.parity.convert_llama import llama_config

    config = _config(model_type="qwen2", num_hidden_layers=layers, use_sliding_window=True, sliding_window=4,
                     max_window_layers=max_window_layers)
    hf = transformers.Qwen2Config.from_dict(config).layer_types
    assert ("sliding_attention" in hf, "full_attention" in hf) == (expected is not None, expected != 4)
    if expected == "mixing":
        with pytest.raises(ConversionError, match="layer_types mixing sliding and full attention"):
            llama_config(config)
    else:
        assert llama_config(config)["sliding_window"] == expected
