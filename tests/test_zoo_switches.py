"""Every on/off option of the built-in models takes true or false only: 2, "yes" or "no" were read
by truthiness, so `attention_bias = 2` counted its biases twice, `rope_interleaved = "no"` rotated
interleaved, and `qk_norm = "yes"` ended in a TypeError from the parameter arithmetic."""

import pytest

import flops_fit

SWITCHES = {
    "gpt": ("bias",),
    "llama": ("attention_bias", "qkv_bias", "mlp_bias", "tie_word_embeddings", "rope_interleaved"),
    "vit": ("fc_norm", "class_token", "no_embed_class", "pre_norm", "dist_token", "dist_head", "qk_norm",
            "qkv_bias", "proj_bias"),
    "swin": ("qkv_bias", "always_partition"),
    "cait": ("talking_heads", "qkv_bias"),
    "pvt_v2": ("linear", "qkv_bias"),
}
CASES = [(model, key, value) for model, keys in SWITCHES.items() for key in keys for value in (2, "no")]


@pytest.mark.parametrize("model, key, value", CASES, ids=[f"{m}-{k}-{v}" for m, k, v in CASES])
def test_a_switch_that_is_not_true_or_false_is_refused_naming_it(model, key, value):
    entry = flops_fit.model_info(model)
    size = entry.sizes(1, 64)[0]
    with pytest.raises(ValueError, match=f"^{key} must be true or false, got {value!r}$"):
        entry.params(size, **{key: value})


def test_every_boolean_option_of_the_built_in_models_is_listed_here():
    """The list above is every option whose default is true or false, so a new switch is checked too."""
    for model, keys in SWITCHES.items():
        defaults = flops_fit.model_info(model).defaults
        assert {k for k, v in defaults.items() if isinstance(v, bool)} <= set(keys), model
