"""Built-in ViT: registration, configuration errors, input errors, timm equivalence, contract."""

import pytest
import torch
from flops_fit.plugins.models import vit
from flops_fit.plugins.models.vit_model import build

import flops_fit
from flops_fit.testing import check_model_entry, isolated_host

SMALL = {"depth": 2, "image_size": 16, "patch_size": 4, "num_classes": 5}


def images(batch=2, chans=3, size=16, seed=0):
    return torch.randn(batch, chans, size, size, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def host():
    return isolated_host(vit, builtins=False)


def test_registered_entries(host):
    names = flops_fit.list_models(host=host)
    assert names == ["vit", "vit_base_patch16_224", "vit_small_patch16_224", "vit_tiny_patch16_224"]
    entry = flops_fit.model_info("vit", host=host)
    assert entry.size_param == "width" and entry.flops_unit == "sample"
    assert entry.task == flops_fit.TASK_IMAGE_CLASSIFICATION and entry.default_loss == "cross-entropy"
    assert entry.defaults["image_size"] == 32 and entry.defaults["patch_size"] == 4
    assert entry.defaults["num_classes"] == 10 and entry.default_size is None


def test_create_model_default_vit_on_cifar_images(host):
    model = flops_fit.create_model("vit", size=192, host=host)
    assert model.config.num_heads == 6 and model.config.depth == 6
    assert model(images(size=32)).shape == (2, 10)
    check_model_entry("vit", sizes=[32, 96], host=host)


def test_valid_sizes_follow_the_head_rule(host):
    entry = flops_fit.model_info("vit", host=host)
    assert entry.sizes(1, 200) == [32, 64, 96, 128, 160, 192]
    assert entry.sizes(1, 100, num_heads=6) == [6 * k for k in range(1, 17)]
    assert entry.sizes(1, 200, num_kv_heads=2) == [64, 128, 192]  # heads must be even
    assert flops_fit.model_info("vit_tiny_patch16_224", host=host).sizes(190, 200) == [192, 195, 198]
    with pytest.raises(flops_fit.EntryError, match="vit.*width=100 is not a valid size.*nearest valid sizes: \\[96, 128\\]"):
        flops_fit.create_model("vit", size=100, host=host)
    with pytest.raises(ValueError, match="image_size 30 is not divisible by patch_size 4"):
        entry.sizes(1, 64, image_size=30)


@pytest.mark.parametrize(
    "name, width, heads", [("vit_tiny_patch16_224", 192, 3), ("vit_small_patch16_224", 384, 6), ("vit_base_patch16_224", 768, 12)]
)
def test_presets_match_timm_configuration(host, name, width, heads):
    timm = pytest.importorskip("timm")

    entry = flops_fit.model_info(name, host=host)
    assert entry.default_size == width
    with torch.device("meta"):
        ours = flops_fit.create_model(name, host=host)
        ref = timm.create_model(name, pretrained=False)
    cfg = ours.config
    assert (cfg.width, cfg.depth, cfg.num_heads, cfg.patch_size, cfg.image_size, cfg.num_classes) == (
        ref.embed_dim, len(ref.blocks), ref.blocks[0].attn.num_heads, 16, 224, ref.num_classes)
    assert cfg.norm_eps == ref.norm.eps == 1e-6 and cfg.act_layer == "gelu" and cfg.qkv_bias
    assert ours.num_params() == sum(p.numel() for p in ref.parameters())


def _timm_model(ours, **kwargs):
    """timm VisionTransformer of the same configuration holding our weights."""
    VisionTransformer = pytest.importorskip("timm.models.vision_transformer").VisionTransformer

    cfg = ours.config
    ref = VisionTransformer(
        img_size=cfg.image_size, patch_size=cfg.patch_size, in_chans=cfg.in_chans, num_classes=cfg.num_classes,
        embed_dim=cfg.width, depth=cfg.depth, num_heads=cfg.num_heads, mlp_ratio=cfg.mlp_ratio,
        qkv_bias=cfg.qkv_bias, global_pool=cfg.global_pool, **kwargs,
    ).eval()
    sd = {k.replace("attn.qkv_proj", "attn.qkv").replace("attn.out_proj", "attn.proj"): v
          for k, v in ours.state_dict().items()}
    if cfg.norm_after_pool:  # our `norm` is timm's fc_norm in that case
        sd["fc_norm.weight"], sd["fc_norm.bias"] = sd.pop("norm.weight"), sd.pop("norm.bias")
    ref.load_state_dict(sd)
    return ref


@pytest.mark.parametrize("pool", ["token", "avg"])
@pytest.mark.parametrize("qkv_bias", [True, False])
def test_matches_timm_vision_transformer(pool, qkv_bias):
    torch.manual_seed(0)
    ours = build(48, **{**SMALL, "num_heads": 3, "global_pool": pool, "qkv_bias": qkv_bias}).eval()
    ref = _timm_model(ours)
    x = images()
    captured = []
    ours.blocks[1].attn.register_forward_hook(lambda m, i, o: captured.append(o))
    ref.blocks[1].attn.register_forward_hook(lambda m, i, o: captured.append(o))
    torch.testing.assert_close(ours(x), ref(x))
    assert captured[0].shape == (2, 17, 48)  # per-layer attention output (B, N, C)
    torch.testing.assert_close(captured[0], captured[1])


def test_tanh_gelu_and_eps_are_real_differences():
    torch.manual_seed(0)
    base = build(32, **SMALL).eval()
    x = images()
    for change in ({"act_layer": "gelu_tanh"}, {"norm_eps": 1e-5}):
        other = build(32, **SMALL, **change).eval()
        other.load_state_dict(base.state_dict())
        diff = (other(x) - base(x)).abs().max()
        assert 0 < diff < 1e-1


def test_gqa_vit_runs_and_shrinks_kv():
    model = build(64, **SMALL, num_kv_heads=1)
    assert model.blocks[0].attn.qkv_proj.weight.shape == (64 + 2 * 32, 64)
    assert model(images()).shape == (2, 5)


@pytest.mark.parametrize(
    "config, message",
    [
        ({"image_size": 30, "patch_size": 4}, "image_size 30 is not divisible by patch_size 4"),
        ({"global_pool": "max"}, r"global_pool must be one of \('token', 'avg'\), got 'max'"),
        ({"act_layer": "mish"}, "act_layer must be one of .* got 'mish'"),
        ({"class_token": False}, "global_pool='token' reads the class token"),
        ({"dist_token": True, "global_pool": "avg"}, "dist_token=True .DeiT. needs class_token=True, global_pool='token'"),
        ({"dist_head": False}, "dist_head=False drops the distillation token's head: it needs dist_token=True"),
        ({"reg_tokens": -1}, "reg_tokens must be a non-negative integer, got -1"),
        ({"init_values": 0.0}, "init_values .LayerScale. must be positive or None, got 0.0"),
        ({"depth": 0}, "depth must be a positive integer, got 0"),
        ({"norm_eps": 0.0}, "norm_eps must be positive, got 0.0"),
        ({"num_heads": 5}, "width 32 is not divisible by the number of heads 5"),
        ({"num_kv_heads": 3, "num_heads": 4}, "number of heads 4 is not divisible by the number of key/value heads 3"),
        ({"head_dim": 0}, "head_dim must be a positive integer, got 0"),
        ({"num_heads": 0}, "number of heads must be a positive integer, got 0"),
        ({"num_kv_heads": -2}, "number of key/value heads must be a positive integer, got -2"),
        ({"dpeth": 3}, r"unknown configuration keyword\(s\) \['dpeth'\]; known keywords: \['depth'"),
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
        ((2, 3, 16, 20), "images are 16x20 but the model expects 16x16"),
    ],
)
def test_input_errors(shape, message):
    with pytest.raises(ValueError, match=message):
        build(32, **SMALL)(torch.zeros(shape))


def test_gradients_reach_every_parameter_and_params_are_counted():
    for pool in ("token", "avg"):
        model = build(64, **SMALL, global_pool=pool, num_kv_heads=1)
        model(images()).logsumexp(-1).sum().backward()
        for name, p in model.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, (pool, name)
        total = sum(p.numel() for p in model.parameters())
        assert model.num_params() == total == vit.param_count(64, **{**vit.VIT_DEFAULTS, **SMALL, "global_pool": pool, "num_kv_heads": 1})
        embed = model.patch_embed.proj.weight.numel() + 64 + 64 + 17 * 64
        assert model.num_params(non_embedding=True) == total - embed


def test_parameter_names_are_the_contract():
    names = set(build(32, **SMALL).state_dict())
    expected = {"patch_embed.proj.weight", "patch_embed.proj.bias", "cls_token", "pos_embed", "norm.weight",
                "norm.bias", "head.weight", "head.bias"}
    for i in range(2):
        expected |= {f"blocks.{i}.{m}.{t}" for m in ("norm1", "norm2", "mlp.fc1", "mlp.fc2") for t in ("weight", "bias")}
        expected |= {f"blocks.{i}.attn.{p}_proj.{t}" for p in ("qkv", "out") for t in ("weight", "bias")}
    assert names == expected
    model = build(32, **SMALL)
    assert model.cls_token.shape == (1, 1, 32) and model.pos_embed.shape == (1, 17, 32)


def test_same_seed_identical_outputs():
    x = images()
    outs = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        outs.append(build(32, **SMALL)(x))
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])


def test_distillation_token_without_its_head_classifies_from_the_class_token():
    """dist_head=False (HF DeiTForImageClassification): the distillation token attends but
    has no head; the logits are the class head's alone, and the counts drop one head."""
    torch.manual_seed(0)
    config = {**SMALL, "dist_token": True}
    both, single = build(32, **config).eval(), build(32, **config, dist_head=False).eval()
    assert single.head_dist is None and not any(k.startswith("head_dist") for k in single.state_dict())
    single.load_state_dict({k: v for k, v in both.state_dict().items() if not k.startswith("head_dist")})
    x = images()
    with torch.no_grad():
        tokens = both.norm(both.forward_features(x))
        torch.testing.assert_close(single(x), both.head(tokens[:, 0]), rtol=0, atol=0)
        torch.testing.assert_close(both(x), (both.head(tokens[:, 0]) + both.head_dist(tokens[:, 1])) / 2)
    full = {**vit.VIT_DEFAULTS, **config}
    alone = {**full, "dist_head": False}
    assert single.num_params() == vit.param_count(32, **alone)
    assert vit.param_count(32, **full) - vit.param_count(32, **alone) == 32 * 5 + 5
