"""Built-in PVT v2: registration, exact counts, FLOPs against FlopCounterMode (with a
groups-aware convolution backward), timm conversion and refusals, errors, a two-step sweep run."""

import dataclasses

import pytest
import torch
import torch.utils.flop_counter as flop_counter
from flops_fit.parity import case_pvt_v2
from flops_fit.parity.convert_timm import convert_timm_model
from flops_fit.parity.convert_timm_pvt_v2 import convert_timm_pvt_v2
from flops_fit.plugins.models import pvt_v2, pvt_v2_model
from flops_fit.plugins.models.attention import MultiheadAttention
from torch.utils.flop_counter import FlopCounterMode

import flops_fit
from flops_fit.errors import ConversionAssumptionWarning, ConversionError
from flops_fit.testing import check_model_entry

timm = pytest.importorskip("timm")

SMALL = {**pvt_v2.PVT_V2_DEFAULTS, "depths": (1, 1, 1, 1)}
_RAW_CONV_BACKWARD = flop_counter.conv_backward_flop.__wrapped__


def grouped_conv_backward(*args, out_shape, **kwargs):
    """torch's convolution-backward formula with the weight gradient divided by the groups:
    torch's counts a depthwise convolution's weight gradient as a dense one (x channels)."""
    *rest, groups, output_mask = args
    inputs = _RAW_CONV_BACKWARD(*rest, groups, [output_mask[0], False, False], out_shape=out_shape)
    weights = _RAW_CONV_BACKWARD(*rest, groups, [False, output_mask[1], False], out_shape=out_shape)
    return inputs + weights // groups


def counted(model, x, mapping=None):
    with FlopCounterMode(display=False, custom_mapping=mapping or {}) as counter:
        model(x).float().logsumexp(-1).sum().backward()
    return counter.get_total_flops()


GROUPED = {torch.ops.aten.convolution_backward: grouped_conv_backward}


def test_registered_with_the_stage_one_width_and_timm_preset_counts():
    entry = flops_fit.model_info("pvt_v2")
    assert entry.size_param == "width" and entry.flops_unit == "sample" and entry.default_loss == "cross-entropy"
    assert entry.sizes(1, 100) == [32, 64, 96]
    assert entry.sizes(1, 5, num_heads=(1, 2, 5, 8)) == [1, 2, 3, 4, 5]  # every stage splits for any width
    check_model_entry("pvt_v2", sizes=[32, 64], depths=(1, 1, 1, 1))
    with torch.device("meta"):
        ours = flops_fit.create_model("pvt_v2_b0")
        ref = timm.create_model("pvt_v2_b0", pretrained=False)
    assert ours.num_params() == sum(p.numel() for p in ref.parameters()) == 3_666_760
    assert ours.config.dims == (32, 64, 160, 256) and ours.config.feature_sizes == (56, 28, 14, 7)


@pytest.mark.parametrize("width, config", [
    (32, SMALL),
    (64, {**SMALL, "linear": True, "qkv_bias": False}),
    (16, {**SMALL, "num_heads": (1, 2, 5, 8), "sr_ratios": (2, 1, 1, 1), "mlp_ratios": (4.0, 4.0, 2.0, 2.0),
          "image_size": 48}),
    (32, pvt_v2.PVT_V2_B0),
], ids=["small", "linear", "odd-sizes", "pvt_v2_b0"])
def test_training_flops_equal_the_flop_counter(width, config):
    size = config["image_size"]
    with torch.device("meta"):
        model = pvt_v2_model.build(width, **config)
        assert counted(model, torch.randn(1, 3, size, size), GROUPED) == pvt_v2.training_flops(width, **config)


def test_the_plain_flop_counter_overcounts_only_the_depthwise_weight_gradients():
    """Without the groups-aware formula the count differs by exactly (hidden - 1) x each
    depthwise convolution's weight-gradient FLOPs."""
    cfg = pvt_v2.PvtV2Config.of(32, **SMALL)
    extra = sum(depth * (cfg.mlp_hidden(i) - 1) * 2 * cfg.feature_sizes[i] ** 2 * cfg.mlp_hidden(i) * 9
                for i, depth in enumerate(cfg.depths))
    with torch.device("meta"):
        model = pvt_v2_model.build(32, **SMALL)
        assert counted(model, torch.randn(1, 3, 32, 32)) == pvt_v2.training_flops(32, **SMALL) + extra


def test_the_meta_count_is_what_runs_on_cpu():
    torch.manual_seed(0)
    model = pvt_v2_model.build(32, **SMALL)
    for module in model.modules():
        if isinstance(module, MultiheadAttention):
            module.path = "math"
    assert counted(model, torch.randn(1, 3, 32, 32), GROUPED) == pvt_v2.training_flops(32, **SMALL)


@pytest.mark.parametrize("linear", [False, True])
def test_gradients_reach_every_parameter_and_counts_are_exact(linear):
    config = {**SMALL, "linear": linear}
    model = pvt_v2_model.build(32, **config)
    model(torch.randn(2, 3, 32, 32)).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert model.num_params() == pvt_v2.param_count(32, **config) == sum(p.numel() for p in model.parameters())
    assert pvt_v2.embedding_param_count(32, **config) == 0
    reduced = [b.reduce is not None for s in model.stages for b in s.blocks]
    assert reduced == ([True] * 4 if linear else [True, True, False, False])  # sr 4, 2, 1, 1


def test_convert_timm_model_routes_pvt_v2_by_config_json_and_keys(tmp_path):
    ref = case_pvt_v2.pvt_v2_reference("linear").eval()
    case_pvt_v2.save_timm(ref, tmp_path)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    folder = convert_timm_model(tmp_path, image_size=32)
    bare = convert_timm_model(ref.state_dict(), num_heads=(1, 2, 5, 8), image_size=32, norm_eps=1e-6)
    for converted in (folder, bare):
        assert converted.model == "pvt_v2" and converted.config["linear"] and not converted.config["qkv_bias"]
        assert converted.size == 16 and converted.config["dim_ratios"] == (1, 2, 5, 8) and not converted.assumptions
        with torch.no_grad():
            torch.testing.assert_close(converted.build().eval()(x), ref(x), rtol=0, atol=1e-5)
    assert convert_timm_model(tmp_path).config["image_size"] == 224  # config.json's pretrained input size


def test_a_bare_pvt_v2_file_needs_its_heads_and_states_what_it_assumed():
    state = case_pvt_v2.pvt_v2_reference().state_dict()
    with pytest.raises(ConversionError, match="how many attention heads each stage has; pass num_heads="):
        convert_timm_model(state)
    with pytest.warns(ConversionAssumptionWarning, match="image_size = 224 .*set it with image_size=..."):
        converted = convert_timm_model(state, num_heads=(1, 2, 5, 8))
    assert set(converted.assumptions) == {"image_size", "norm_eps"}
    assert converted.config["sr_ratios"] == (4, 2, 1, 1)  # read off the sr kernels


@pytest.mark.parametrize("args, named", [
    ({"global_pool": ""}, "options our pvt_v2 does not reproduce: global_pool='' \\(no pooling\\)"),
    ({"embed_dims": (16, 24, 80, 128)}, "stage widths \\(16, 24, 80, 128\\) that are not multiples of the first"),
    ({"norm_layer": torch.nn.BatchNorm1d}, "norm_layer=BatchNorm1d"),
])
def test_options_pvt_v2_does_not_reproduce_are_refused_by_name(args, named):
    tiny = {**case_pvt_v2.TINY, **args}
    state = timm.create_model("pvt_v2_b0", pretrained=False, **tiny).state_dict()
    with pytest.raises(ConversionError, match=named):
        convert_timm_model(state, architecture="pvt_v2_b0", image_size=32, **tiny)


@pytest.mark.parametrize("config, message", [
    ({"sr_ratios": (16, 4, 2, 1)}, "stage 0 sees a 8x8 map, smaller than its sr_ratio 16"),
    ({"depths": (1, 1)}, "dim_ratios must have one entry per stage \\(2 from depths\\)"),
    ({"num_heads": (1, 3, 5, 8)}, "stage width 64 is not divisible by its 3 heads"),
    ({"mlp_ratios": (8.0, 8.0, 0.0, 4.0)}, "mlp_ratios must be positive"),
    ({"mlp_ratios": (0.01, 8.0, 4.0, 4.0)}, "mlp_ratios .* give stage 0 an MLP width of 0 \\(32 x 0.01\\)"),
    ({"act_layer": "mish"}, "act_layer must be one of"),
    ({"sr_ratio": 2}, "unknown configuration keyword\\(s\\) \\['sr_ratio'\\]"),
    ({"depths": (1, 0, 1, 1)}, "each of depths must be a positive integer, got 0"),
    ({"num_heads": (1, 0, 5, 8)}, "number of heads must be a positive integer, got 0"),
    ({"norm_eps": 0.0}, "norm_eps must be positive, got 0.0"),
])
def test_configuration_errors(config, message):
    with pytest.raises(ValueError, match=message):
        pvt_v2_model.build(32, **config)
    assert pvt_v2_model.build(32, sr_ratios=(8, 4, 2, 1), image_size=224).config.kv_tokens(0) == 49


def test_valid_sizes_skip_head_splits_but_raise_other_configuration_errors():
    with pytest.raises(ValueError, match="stage 0 sees a 8x8 map, smaller than its sr_ratio 16"):
        flops_fit.model_info("pvt_v2").sizes(1, 64, sr_ratios=(16, 4, 2, 1))


def test_the_converter_refuses_what_is_not_pvt_v2():
    with pytest.raises(ConversionError, match="'patch_embed.proj.weight' is missing, so these are not timm PVT v2"):
        convert_timm_model({"x": torch.zeros(1)}, architecture="pvt_v2_b0")
    state = case_pvt_v2.pvt_v2_reference().state_dict()
    with pytest.raises(ConversionError, match="architecture 'vit_tiny_patch16_224' is not a timm PVT v2"):
        convert_timm_pvt_v2(state, architecture="vit_tiny_patch16_224")
    with pytest.raises(ConversionError, match="timm does not know architecture 'pvt_v9'"):
        convert_timm_pvt_v2(state, architecture="pvt_v9")
    with pytest.raises(ConversionError, match="timm PyramidVisionTransformerV2: timm refuses these options: .*act_layer"):
        convert_timm_pvt_v2(state, num_heads=(1, 2, 5, 8), act_layer="silu")


def test_width_not_splitting_into_heads():
    with pytest.raises(ValueError, match="width 40: a stage of width 40 does not split into heads of 32"):
        pvt_v2_model.build(40)


def test_image_errors():
    model = pvt_v2_model.build(32, **SMALL)
    with pytest.raises(ValueError, match="images are 16x16 but the model expects 32x32"):
        model(torch.zeros(2, 3, 16, 16))


def test_a_pvt_v2_sweep_plans_and_trains_two_steps():
    plan = flops_fit.plan(model="pvt_v2", dataset="digits", budgets=[1e12], sizes=[32, 64, 96], batch_size=8,
                          min_steps=1, eval_tokens=16, model_config={"depths": (1, 1, 1, 1), "sr_ratios": (1, 1, 1, 1)})
    assert {r.model for r in plan.runs} == {"pvt_v2"} and all(r.flops > 0 for r in plan.runs)
    spec = dataclasses.replace(plan.runs[0], steps=2, tokens=2 * 8, run_id="")
    result = flops_fit.train(spec)
    assert result.status == "done" and result.loss > 0 and 0.0 <= result.top1_error <= 1.0


@pytest.mark.parametrize("name", ["pvt_v2", "pvt_v2_b0"])
def test_the_entries_plan_on_their_default_dataset(name):
    """Their default dataset was digits: 8 px images leave a 2x2 map after the stride-4 stem, smaller
    than the first stage's spatial reduction, so `model = "pvt_v2"` alone refused to plan."""
    plan = flops_fit.plan(model=name, budgets=[1e13], sizes=[32, 64, 96], batch_size=8, min_steps=1)
    assert {r.model for r in plan.runs} == {name} and all(r.flops > 0 for r in plan.runs)


@pytest.mark.parametrize("heads", [(1, 2, 5), (1, 2, 5, -8), (0, 2, 5, 8), (1, 2, 3, 8), "1,2,5,8"])
def test_a_head_count_per_stage_that_does_not_fit_the_stages_is_refused_by_name(heads):
    """num_heads one short raised a bare IndexError from inside timm; a negative count failed to
    build as 'width=16 is not a valid size'; a string, or 3 heads for width 80, as timm's arithmetic."""
    state = case_pvt_v2.pvt_v2_reference().state_dict()
    with pytest.raises(ConversionError) as err:
        convert_timm_pvt_v2(state, num_heads=heads)
    assert str(err.value) == (f"timm PyramidVisionTransformerV2: num_heads={heads!r} is not a number of heads per "
                              "stage for stage widths (16, 32, 80, 128): pass 4 positive integers that divide them "
                              "(or one for all)")
