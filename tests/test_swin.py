"""Built-in Swin: registration, windows and shifts, configuration and input errors, the timm
converter's refusals, and a sweep that plans and trains."""

import dataclasses
import subprocess
import sys

import pytest
import torch
from flops_fit.plugins.models import swin
from flops_fit.plugins.models.swin_model import (
    build,
    relative_position_index,
    shift_mask,
    window_partition,
    window_reverse,
)

import flops_fit
from flops_fit.plugin.host import BUILTIN_PLUGINS
from flops_fit.testing import check_model_entry, isolated_host

SMALL = {"depths": (2, 2), "image_size": 16, "patch_size": 2, "window_size": 4, "num_classes": 5}


def images(batch=2, chans=3, size=16, seed=0):
    return torch.randn(batch, chans, size, size, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def host():
    return isolated_host(swin, builtins=False)


def test_registered_entries(host):
    assert flops_fit.list_models(host=host) == [
        "swin", "swin_base_patch4_window7_224", "swin_small_patch4_window7_224", "swin_tiny_patch4_window7_224"]
    entry = flops_fit.model_info("swin", host=host)
    assert entry.size_param == "width" and entry.flops_unit == "sample" and entry.default_size is None
    assert entry.task == flops_fit.TASK_IMAGE_CLASSIFICATION and entry.default_loss == "cross-entropy"
    assert (entry.defaults["image_size"], entry.defaults["patch_size"], entry.defaults["window_size"]) == (32, 2, 4)


def test_create_model_default_swin_on_cifar_images(host):
    model = flops_fit.create_model("swin", size=64, host=host)
    shapes = [(st.width, st.heads, st.resolution, st.window, st.shift) for st in model.config.stages]
    assert shapes == [(64, 2, 16, 4, 2), (128, 4, 8, 4, 2), (256, 8, 4, 4, 0)]  # the last stage is one window
    assert model(images(size=32)).shape == (2, 10)
    check_model_entry("swin", sizes=[32, 64], host=host)


def test_valid_sizes_follow_the_head_rule(host):
    entry = flops_fit.model_info("swin", host=host)
    assert entry.sizes(1, 100) == [32, 64, 96]
    assert entry.sizes(1, 10, num_heads=(2, 4, 8)) == [2, 4, 6, 8, 10]  # stage s: width * 2^s over its heads
    assert entry.sizes(1, 40, head_dim=16, depths=(1, 1)) == [16, 32]
    with pytest.raises(flops_fit.EntryError, match="swin.*width=48 is not a valid size.*nearest valid sizes: \\[32, 64\\]"):
        flops_fit.create_model("swin", size=48, host=host)
    with pytest.raises(ValueError, match="image_size 31 is not divisible by patch_size 2"):
        entry.sizes(1, 64, image_size=31)


@pytest.mark.parametrize("name", sorted(swin.TIMM_PRESETS))
def test_presets_match_timm(host, name):
    timm = pytest.importorskip("timm")

    with torch.device("meta"):
        ours = flops_fit.create_model(name, host=host)
        ref = timm.create_model(name, pretrained=False)
    assert ours.num_params() == sum(p.numel() for p in ref.parameters())
    for ref_stage, our_stage in zip(ref.layers, ours.layers, strict=True):
        for ref_block, our_block in zip(ref_stage.blocks, our_stage.blocks, strict=True):
            assert ref_block.window_size == (our_block.window,) * 2 and ref_block.shift_size == (our_block.shift,) * 2
            assert ref_block.attn.num_heads == our_block.attn.num_heads


def test_windows_partition_and_reverse_and_the_bias_index():
    x = torch.arange(2 * 8 * 8 * 3.0).view(2, 8, 8, 3)
    windows = window_partition(x, 4)
    assert windows.shape == (8, 16, 3)
    assert torch.equal(windows[1, 0], x[0, 0, 4]) and torch.equal(windows[2, 5], x[0, 5, 1])  # row-major windows
    assert torch.equal(window_reverse(windows, 4, 8, 8), x)
    index = relative_position_index(2)  # offsets (dy, dx) in [-1, 1]^2 -> (dy + 1) * 3 + (dx + 1)
    assert index.tolist() == [[4, 3, 1, 0], [5, 4, 2, 1], [7, 6, 4, 3], [8, 7, 5, 4]]


def test_the_shift_mask_separates_regions_that_the_roll_brings_together():
    mask = shift_mask(8, 4, 2)  # 4 windows of 16 tokens
    assert mask.shape == (4, 16, 16) and set(mask.unique().tolist()) == {-100.0, 0.0}
    assert not mask[0].any()  # the top-left window holds one region only
    # the top-right window: columns 0-1 of it were the image's columns 4-5, columns 2-3 wrapped from 0-1
    right = mask[1].view(4, 4, 4, 4)
    assert right[0, 0, 0, 1] == 0 and right[0, 0, 0, 2] == -100 and right[0, 2, 3, 3] == 0


def test_a_shifted_block_differs_from_the_same_block_unshifted():
    torch.manual_seed(0)
    model = build(32, **SMALL, num_heads=(2, 4)).eval()
    block = model.layers[0].blocks[1]
    assert block.shift == 2 and model.layers[0].blocks[0].shift == 0
    x = torch.randn(2, 8, 8, 32)
    with torch.no_grad():
        shifted = block(x)
        block.shift, saved = 0, block.shift_mask
        block.shift_mask = None
        plain = block(x)
        block.shift, block.shift_mask = 2, saved
    assert (shifted - plain).abs().max() > 1e-2


@pytest.mark.parametrize(
    "config, message",
    [
        ({"image_size": 31}, "image_size 31 is not divisible by patch_size 2"),
        ({"depths": ()}, "depths must name at least one stage"),
        ({"depths": 2}, r"depths must be a tuple of integers \(one per stage\), got 2"),
        ({"depths": (2, 0)}, "every stage's depth must be a positive integer, got 0"),
        ({"num_heads": (1,)}, r"num_heads \(1,\) must give one number per stage \(3 stages"),
        ({"num_heads": (3, 2, 4)}, r"stage 0 width 32 \(width x 2\^0\) is not divisible by its 3 heads"),
        ({"window_size": (4, 4)}, r"window_size \(4, 4\) must be one int or one per stage \(3 stages\)"),
        ({"window_size": 0}, "window_size must be a positive integer, got 0"),
        ({"window_size": 3}, "stage 0 resolution 16 is not divisible by its window 3"),
        ({"image_size": 36, "window_size": 3}, "stage 1 has an odd resolution 9 and cannot be merged"),
        ({"mlp_ratio": 0}, "mlp_ratio must give a positive MLP width"),
        ({"norm_eps": 0.0}, "norm_eps must be positive, got 0.0"),
        ({"head_dim": 0}, "head_dim must be a positive integer, got 0"),
        ({"dpeths": (2,)}, r"unknown configuration keyword\(s\) \['dpeths'\]; known keywords: \['depths'"),
    ],
)
def test_configuration_errors(config, message):
    with pytest.raises(ValueError, match=message):
        build(32, **config)


def test_width_not_multiple_of_head_dim():
    with pytest.raises(ValueError, match="width 40 is not a multiple of head_dim 32"):
        build(40)


@pytest.mark.parametrize(
    "shape, message",
    [
        ((2, 3, 16), r"images must be 4-D \(batch, channels, height, width\), got shape \(2, 3, 16\)"),
        ((2, 1, 16, 16), r"images have 1 channels but the model expects in_chans=3"),
        ((2, 3, 32, 32), "images are 32x32 but the model expects 16x16"),
    ],
)
def test_input_errors(shape, message):
    with pytest.raises(ValueError, match=message):
        build(32, **SMALL)(torch.zeros(shape))


def test_gradients_reach_every_parameter_and_params_are_counted():
    model = build(32, **SMALL, qkv_bias=False, mlp_ratio=2.0)
    model(images()).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    config = {**swin.SWIN_DEFAULTS, **SMALL, "qkv_bias": False, "mlp_ratio": 2.0}
    total = sum(p.numel() for p in model.parameters())
    assert model.num_params() == total == swin.param_count(32, **config)
    tables = sum(p.numel() for n, p in model.named_parameters() if n.endswith("relative_position_bias_table"))
    assert tables == swin.embedding_param_count(32, **config) == 2 * 49 * 1 + 2 * 49 * 2
    patch = 32 * 3 * 4 + 32 + 2 * 32
    assert model.num_params(non_embedding=True) == total - patch - tables


def test_parameter_names_are_the_contract():
    names = set(build(32, **SMALL).state_dict())
    expected = {f"patch_embed.{m}.{t}" for m in ("proj", "norm") for t in ("weight", "bias")}
    expected |= {"norm.weight", "norm.bias", "head.weight", "head.bias", "layers.1.downsample.norm.weight",
                 "layers.1.downsample.norm.bias", "layers.1.downsample.reduction.weight"}
    for s in range(2):
        for i in range(2):
            b = f"layers.{s}.blocks.{i}."
            expected |= {b + f"{m}.{t}" for m in ("norm1", "norm2", "mlp.fc1", "mlp.fc2", "attn.qkv_proj", "attn.out_proj")
                         for t in ("weight", "bias")}
            expected.add(b + "relative_position_bias_table")
    assert names == expected


def test_analytic_extras_are_consistent():
    config = {**swin.SWIN_DEFAULTS}
    flops = swin.training_flops(64, **config)
    cfg = swin.SwinConfig.of(64, **config)
    head = 2 * cfg.num_features * cfg.num_classes
    assert swin.non_embedding_flops(64, **config) == flops - 2 * swin.patch_embed_flops(cfg) - 3 * head
    small, large = (swin.activation_memory(w, 8, 1, **config) for w in (32, 64))
    assert 0 < small < large  # tests/test_memory.py checks it against what autograd saves
    rows = [swin.activation_memory(32, b, 1, **config) for b in (8, 16, 24)]
    assert rows[1] - rows[0] == rows[2] - rows[1] > 0  # per image, plus the bias indices once per micro-batch


def test_a_swin_sweep_plans_and_trains():
    plan = flops_fit.plan(model="swin", dataset="glyphs", budgets=[3e12], sizes=[32, 64, 96], batch_size=4, min_steps=1,
                          eval_tokens=8, model_config={"depths": (1, 1)})
    config = plan.runs[0].model_config
    assert (config["num_classes"], config["image_size"], config["patch_size"]) == (139, 32, 4)
    spec = dataclasses.replace(plan.runs[0], steps=2, tokens=2 * 4, run_id="")
    result = flops_fit.train(spec)
    assert result.status == "done" and result.loss > 0 and 0.0 <= result.top1_error <= 1.0


def test_registration_does_not_import_torch_and_the_builtin_zoo_lists_swin():
    code = "import sys, flops_fit.plugins.models.swin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False" and "flops_fit.plugins.models.swin" in BUILTIN_PLUGINS
    assert {"swin", "swin_tiny_patch4_window7_224"} <= set(flops_fit.list_models())
