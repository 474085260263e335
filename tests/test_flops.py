"""Analytic training FLOPs against torch.utils.flop_counter.FlopCounterMode.

The count runs one training step (forward, loss, backward) at batch 1. Most models run on
the meta device, where shapes flow but no arithmetic is done, so GPT-2 and ViT-Base are
counted in seconds; there SDPA decomposes into plain matmuls (backward = 2 x forward).
A small model is also counted on real CPU tensors through the math attention path, to
show the meta count is what actually executes.

The ViT's patch-embedding backward computes no input gradient (images need none), and the
analytic count leaves it out too. Known, documented gap: CPU flash attention's backward
recomputes the scores, which FlopCounterMode counts as 2.5 x the attention forward; the
analytic count keeps the backward = 2 x forward convention.
"""

import pytest
import torch
from flops_fit.plugins.models import (
    gpt,
    gpt_model,
    llama,
    llama_model,
    swin,
    swin_model,
    vit,
    vit_model,
)
from torch.utils.flop_counter import FlopCounterMode

import flops_fit

VIT_PRESETS = {
    name: {**vit.VIT_DEFAULTS, "depth": 12, "num_heads": heads, "patch_size": 16, "image_size": 224, "num_classes": 1000}
    for name, (_, heads) in vit.TIMM_PRESETS.items()
}


def counted_training_flops(model, inputs) -> int:
    with FlopCounterMode(display=False) as counter:
        model(inputs).float().logsumexp(-1).sum().backward()
    return counter.get_total_flops()


def count_vit(width, config, device="meta"):
    with torch.device(device):
        model = vit_model.build(width, **config)
        cfg = model.config
        images = torch.randn(1, cfg.in_chans, cfg.image_size, cfg.image_size)
        return counted_training_flops(model, images), cfg


def count_gpt(width, config, device="meta"):
    with torch.device(device):
        model = gpt_model.build(width, **config)
        tokens = torch.zeros(1, model.config.block_size, dtype=torch.long)
        return counted_training_flops(model, tokens) / model.config.block_size


VIT_CASES = [
    (192, "vit_tiny_patch16_224", VIT_PRESETS["vit_tiny_patch16_224"]),
    (384, "vit_small_patch16_224", VIT_PRESETS["vit_small_patch16_224"]),
    (768, "vit_base_patch16_224", VIT_PRESETS["vit_base_patch16_224"]),
    (32, "small", vit.VIT_DEFAULTS),
    (192, "medium", vit.VIT_DEFAULTS),
    (512, "large", vit.VIT_DEFAULTS),
    (128, "gqa-avg-tanh", {**vit.VIT_DEFAULTS, "num_kv_heads": 1, "global_pool": "avg", "act_layer": "gelu_tanh"}),
    (64, "gap-norm-first", {**vit.VIT_DEFAULTS, "class_token": False, "global_pool": "avg", "fc_norm": False}),
    (64, "registers-qknorm-layerscale", {**vit.VIT_DEFAULTS, "reg_tokens": 4, "qk_norm": True, "init_values": 1e-5}),
    (64, "clip-no-embed-class", {**vit.VIT_DEFAULTS, "pre_norm": True, "act_layer": "quick_gelu", "no_embed_class": True,
                                 "proj_bias": False}),
    (64, "deit-distilled", {**vit.VIT_DEFAULTS, "dist_token": True, "act_layer": "silu"}),
    (64, "deit-class-head-only", {**vit.VIT_DEFAULTS, "dist_token": True, "dist_head": False}),
    (128, "mup-distilled", {**vit.VIT_DEFAULTS, "dist_token": True, "parametrization": "mup", "base_width": 32}),
]


@pytest.mark.parametrize("width, label, config", VIT_CASES, ids=[c[1] for c in VIT_CASES])
def test_vit_training_flops_match_flop_counter(width, label, config):
    analytic = vit.training_flops(width, **config)
    counted, _ = count_vit(width, config)
    assert abs(counted - analytic) / analytic < 0.02
    assert counted == analytic  # exact: what FlopCounterMode sees actually run


GPT_CASES = [
    (768, "gpt2", gpt.GPT2_DEFAULTS),
    (32, "small", gpt.GPT_DEFAULTS),
    (128, "medium", gpt.GPT_DEFAULTS),
    (512, "large", gpt.GPT_DEFAULTS),
    (128, "gqa", {**gpt.GPT_DEFAULTS, "n_kv_head": 2}),
    (128, "mup-fixed-heads", {**gpt.GPT_DEFAULTS, "n_head": 2, "parametrization": "mup", "base_width": 32}),
]


@pytest.mark.parametrize("width, label, config", GPT_CASES, ids=[c[1] for c in GPT_CASES])
def test_gpt_training_flops_match_flop_counter(width, label, config):
    analytic = gpt.training_flops(width, **config)
    counted = count_gpt(width, config)
    assert abs(counted - analytic) / analytic < 0.02
    assert counted == analytic


def count_llama(width, config, device="meta"):
    with torch.device(device):
        model = llama_model.build(width, **config)
        tokens = torch.zeros(1, model.config.block_size, dtype=torch.long)
        return counted_training_flops(model, tokens) / model.config.block_size


LLAMA_CASES = [
    (32, "small", llama.LLAMA_DEFAULTS),
    (128, "medium-gqa", {**llama.LLAMA_DEFAULTS, "n_kv_head": 2}),
    (512, "large-mqa-tied", {**llama.LLAMA_DEFAULTS, "n_kv_head": 1, "tie_word_embeddings": True}),
    (128, "mup-tied", {**llama.LLAMA_DEFAULTS, "tie_word_embeddings": True, "parametrization": "mup", "base_width": 32}),
    (64, "head-size-biases-window", {**llama.LLAMA_DEFAULTS, "n_head": 4, "head_size": 32, "attention_bias": True,
                                     "mlp_bias": True, "sliding_window": 16, "rope_type": "llama3", "rope_factor": 8.0}),
    (4096, "llama-3-8b-shape", {**llama.LLAMA_DEFAULTS, "n_layer": 1, "n_head": 32, "n_kv_head": 8,
                                "intermediate_size": 14336, "vocab_size": 128256, "block_size": 256}),
]


@pytest.mark.parametrize("width, label, config", LLAMA_CASES, ids=[c[1] for c in LLAMA_CASES])
def test_llama_training_flops_match_flop_counter(width, label, config):
    assert count_llama(width, config) == llama.training_flops(width, **config)


def count_swin(width, config, device="meta"):
    with torch.device(device):
        model = swin_model.build(width, **config)
        cfg = model.config
        return counted_training_flops(model, torch.randn(1, cfg.in_chans, cfg.image_size, cfg.image_size))


SWIN_PRESETS = {
    name: {**swin.SWIN_DEFAULTS, "depths": depths, "num_heads": heads, "window_size": 7, "patch_size": 4,
           "image_size": 224, "num_classes": 1000}
    for name, (_, depths, heads) in swin.TIMM_PRESETS.items()
}
SWIN_CASES = [
    (96, "swin_tiny_patch4_window7_224", SWIN_PRESETS["swin_tiny_patch4_window7_224"]),
    (128, "swin_base_patch4_window7_224", SWIN_PRESETS["swin_base_patch4_window7_224"]),
    (32, "small", swin.SWIN_DEFAULTS),
    (256, "large", swin.SWIN_DEFAULTS),
    (64, "s3-windows-always-partition", {**swin.SWIN_DEFAULTS, "window_size": (4, 2, 4), "always_partition": True,
                                         "qkv_bias": False, "mlp_ratio": 2.0}),
    (48, "whole-stage-window-heads", {**swin.SWIN_DEFAULTS, "window_size": 8, "num_heads": (3, 6, 12)}),
]


@pytest.mark.parametrize("width, label, config", SWIN_CASES, ids=[c[1] for c in SWIN_CASES])
def test_swin_training_flops_match_flop_counter(width, label, config):
    assert count_swin(width, config) == swin.training_flops(width, **config)


def _math_attention(model):
    for module in model.modules():
        if hasattr(module, "path"):
            module.path = "math"
    return model


def test_meta_count_equals_real_cpu_execution_on_the_math_path():
    config = {**gpt.GPT_DEFAULTS, "n_layer": 2, "block_size": 32, "n_kv_head": 1}
    torch.manual_seed(0)
    model = _math_attention(gpt_model.build(32, **config))
    real = counted_training_flops(model, torch.randint(0, 256, (1, 32))) / 32
    assert real == count_gpt(32, config) == gpt.training_flops(32, **config)

    lconfig = {**llama.LLAMA_DEFAULTS, "n_layer": 2, "block_size": 32, "n_kv_head": 1, "sliding_window": 8}
    model = _math_attention(llama_model.build(32, **lconfig))
    real = counted_training_flops(model, torch.randint(0, 256, (1, 32))) / 32
    assert real == count_llama(32, lconfig) == llama.training_flops(32, **lconfig)

    sconfig = {**swin.SWIN_DEFAULTS, "depths": (2, 1)}
    model = _math_attention(swin_model.build(32, **sconfig))
    real = counted_training_flops(model, torch.randn(1, 3, 32, 32))
    assert real == count_swin(32, sconfig) == swin.training_flops(32, **sconfig)

    vconfig = {**vit.VIT_DEFAULTS, "depth": 2}
    model = _math_attention(vit_model.build(64, **vconfig))
    real = counted_training_flops(model, torch.randn(1, 3, 32, 32))
    assert real == count_vit(64, vconfig)[0]


def test_flops_grow_with_width_and_depend_on_sequence_length():
    sizes = [32, 64, 128, 256]
    for module in (gpt, vit):
        values = [module.training_flops(w, **(gpt.GPT_DEFAULTS if module is gpt else vit.VIT_DEFAULTS)) for w in sizes]
        assert values == sorted(values) and len(set(values)) == len(values)
    short = gpt.training_flops(64, **{**gpt.GPT_DEFAULTS, "block_size": 64})
    long = gpt.training_flops(64, **{**gpt.GPT_DEFAULTS, "block_size": 256})
    assert long - short == pytest.approx(3 * 4 * 4 * 64 * (256 - 64))  # 3 x layers x 4 T C per token


# the top-level modules that non_embedding_flops leaves out: the embedding and the output head(s)
OUTSIDE = {"gpt": ("lm_head",), "llama": ("lm_head",), "vit": ("patch_embed", "head"), "swin": ("patch_embed", "head"),
           "cait": ("patch_embed", "head")}


def on_meta(name, width, config, batch):
    """(entry, model, a batch of inputs, the tokens or images in it): entry ``name`` at ``width`` on the meta device."""
    entry = flops_fit.model_info(name)
    with torch.device("meta"):
        model = flops_fit.create_model(name, size=width, **config)
        cfg = model.config
        if entry.task == "causal-lm":
            return entry, model, torch.zeros(batch, cfg.block_size, dtype=torch.long), batch * cfg.block_size
        return entry, model, torch.randn(batch, cfg.in_chans, cfg.image_size, cfg.image_size), batch


@pytest.mark.parametrize("name, width, config", [
    ("gpt", 64, gpt.GPT_DEFAULTS), ("llama", 64, {**llama.LLAMA_DEFAULTS, "tie_word_embeddings": True}),
    ("vit", 64, {**vit.VIT_DEFAULTS, "reg_tokens": 2}), ("swin", 32, swin.SWIN_DEFAULTS),
    ("cait", 64, {"depth": 2, "depth_token_only": 1}),
])
def test_non_embedding_flops_are_the_counters_flops_outside_embedding_and_head(name, width, config):
    """non_embedding_flops (what the forecast's non-embedding scale reads) is the counter's total
    less the FLOPs it attributes to the embedding and head modules: the blocks, attention included."""
    entry, model, x, units = on_meta(name, width, config, batch=1)
    with FlopCounterMode(display=False) as counter:
        model(x).float().logsumexp(-1).sum().backward()
    per_module = {k.split(".", 1)[1]: sum(v.values()) for k, v in counter.get_flop_counts().items() if k.count(".") == 1}
    outside = sum(per_module.get(m, 0) for m in OUTSIDE[name])
    assert outside > 0
    assert (counter.get_total_flops() - outside) / units == entry.non_embedding_flops_per_unit(width, **config)


# batch 2, sequence lengths and image sizes other than the defaults, widths no head_dim divides
OFF_DEFAULT = [
    ("gpt", 45, {"n_head": 3, "block_size": 37, "n_layer": 2}),
    ("gpt", 48, {"head_dim": 8, "n_kv_head": 2, "block_size": 20, "bias": False, "vocab_size": 101}),
    ("llama", 30, {"n_head": 3, "block_size": 17, "sliding_window": 5, "tie_word_embeddings": True}),
    ("llama", 32, {"head_size": 24, "n_head": 2, "intermediate_size": 50, "block_size": 23, "qkv_bias": True}),
    ("vit", 27, {"num_heads": 3, "image_size": 30, "patch_size": 5, "in_chans": 1, "reg_tokens": 2, "depth": 2}),
    ("swin", 15, {"num_heads": (3, 6, 12), "depths": (1, 1, 1), "image_size": 48, "patch_size": 4, "window_size": 3}),
    ("cait", 27, {"num_heads": 3, "depth": 1, "depth_token_only": 1, "image_size": 24, "patch_size": 8}),
]


@pytest.mark.parametrize("name, width, config", OFF_DEFAULT, ids=[f"{c[0]}-{c[1]}" for c in OFF_DEFAULT])
def test_training_flops_per_unit_hold_at_batch_two_and_sizes_off_the_defaults(name, width, config):
    """The counts the planner stores are per token or image: the same at batch 2, at any context length
    and image size, and at widths whose heads are set rather than derived."""
    entry, model, x, units = on_meta(name, width, config, batch=2)
    counted = counted_training_flops(model, x) / units
    assert counted == entry.flops_per_unit(width, **config)
    assert model.num_params() == sum(p.numel() for p in model.parameters()) == entry.params(width, **config)
