"""Built-in CaiT: registration, exact counts, FLOPs against FlopCounterMode, timm conversion
and refusals, talking-heads attention, errors, and a two-step sweep run."""

import dataclasses
import re
import warnings

import pytest
import torch
from flops_fit.parity import case_cait
from flops_fit.parity.convert_timm import convert_timm_model
from flops_fit.parity.convert_timm_cait import convert_timm_cait
from flops_fit.plugins.models import cait, cait_model
from flops_fit.plugins.models.attention import MultiheadAttention
from torch.utils.flop_counter import FlopCounterMode

import flops_fit
from flops_fit.errors import ConversionAssumptionWarning, ConversionError
from flops_fit.testing import check_model_entry

timm = pytest.importorskip("timm")

SMALL = {**cait.CAIT_DEFAULTS, "depth": 2, "image_size": 16, "patch_size": 4, "num_classes": 5}


def images(batch=2, size=16, seed=0):
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def test_registered_with_a_width_and_timm_preset_counts():
    entry = flops_fit.model_info("cait")
    assert entry.size_param == "width" and entry.flops_unit == "sample" and entry.default_loss == "cross-entropy"
    assert entry.sizes(1, 100) == [32, 64, 96] and entry.sizes(1, 20, num_heads=4) == [4, 8, 12, 16, 20]
    check_model_entry("cait", sizes=[32, 64], depth=2)
    with torch.device("meta"):
        ours = flops_fit.create_model("cait_xxs24_224")
        ref = timm.create_model("cait_xxs24_224", pretrained=False)
    assert ours.num_params() == sum(p.numel() for p in ref.parameters()) == 11_956_264
    assert [n for n, _ in ref.named_parameters()][:3] == ["cls_token", "pos_embed", "patch_embed.proj.weight"]


def counted(model, x, device="meta"):
    with FlopCounterMode(display=False) as counter:
        model(x).float().logsumexp(-1).sum().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("width, config", [
    (32, cait.CAIT_DEFAULTS),
    (128, {**cait.CAIT_DEFAULTS, "global_pool": "avg", "qkv_bias": False, "mlp_ratio_token_only": 2.0}),
    (64, {**cait.CAIT_DEFAULTS, "talking_heads": False, "depth_token_only": 1, "act_layer": "gelu_tanh"}),
    (192, cait.CAIT_XXS24),
], ids=["small", "avg-no-bias", "no-talking-heads", "cait_xxs24_224"])
def test_training_flops_equal_the_flop_counter(width, config):
    with torch.device("meta"):
        model = cait_model.build(width, **config)
        x = torch.randn(1, 3, config["image_size"], config["image_size"])
        assert counted(model, x) == cait.training_flops(width, **config)


def test_the_meta_count_is_what_runs_on_cpu():
    """Real tensors through the math attention path (CPU flash attention's backward recomputes
    the scores: the documented gap of docs/guide/model-families.md)."""
    torch.manual_seed(0)
    model = cait_model.build(32, **SMALL)
    for module in model.modules():
        if isinstance(module, MultiheadAttention):
            module.path = "math"
    assert counted(model, images(1)) == cait.training_flops(32, **SMALL)


def test_gradients_reach_every_parameter_and_counts_are_exact():
    model = cait_model.build(64, **SMALL)
    model(images()).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert model.num_params() == cait.param_count(64, **SMALL) == sum(p.numel() for p in model.parameters())
    embedding = 3 * 16 * 64 + 64 + 64 + 16 * 64  # patch conv + bias, class token, 16 positions
    assert model.num_params(non_embedding=True) == model.num_params() - embedding
    assert cait.embedding_param_count(64, **SMALL) == 64 + 16 * 64


def test_talking_heads_mix_the_heads_and_refuse_masks():
    """The talking-heads path against the formula written out, and the refusal of masks."""
    torch.manual_seed(0)
    attn = MultiheadAttention(32, 4, talking_heads=True).eval()
    x = torch.randn(2, 5, 32)
    q, k, v = attn.qkv_proj(x).view(2, 5, 3, 4, 8).permute(2, 0, 3, 1, 4)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / 8**0.5
    mixed = torch.einsum("bhqk,gh->bgqk", scores, attn.proj_l.weight) + attn.proj_l.bias[:, None, None]
    weights = torch.einsum("bhqk,gh->bgqk", mixed.softmax(-1), attn.proj_w.weight) + attn.proj_w.bias[:, None, None]
    expected = attn.out_proj((weights @ v).transpose(1, 2).reshape(2, 5, 32))
    torch.testing.assert_close(attn(x), expected)
    plain = MultiheadAttention(32, 4)
    plain.load_state_dict({k: v for k, v in attn.state_dict().items() if "proj_" not in k or "_proj" in k})
    assert (plain(x) - attn(x)).abs().max() > 1e-2  # the mixes change the result
    with pytest.raises(ValueError, match="talking_heads=True mixes the heads' scores, so masks and causal=True"):
        attn(x, causal=True)


def test_convert_timm_model_routes_cait_by_name_config_json_and_keys(tmp_path):
    ref = case_cait.cait_reference("avg").eval()
    case_cait.save_timm(ref, tmp_path)
    x = images(2, 32)
    for converted in (convert_timm_model(tmp_path), convert_timm_model(ref.state_dict(), architecture="cait_xxs24_224",
                                                                      **{k: v for k, v in case_cait.TINY.items()},
                                                                      global_pool="avg", qkv_bias=False,
                                                                      mlp_ratio_token_only=2.0)):
        assert converted.model == "cait" and converted.config["global_pool"] == "avg" and not converted.assumptions
        with torch.no_grad():
            torch.testing.assert_close(converted.build().eval()(x), ref(x), rtol=0, atol=1e-5)


def test_a_bare_cait_file_states_what_it_assumed():
    ref = case_cait.cait_reference()
    with pytest.warns(ConversionAssumptionWarning, match="global_pool = 'token' .*set it with global_pool='avg'"):
        converted = convert_timm_model(ref.state_dict())
    assert set(converted.assumptions) == {"act_layer", "global_pool", "norm_eps"}
    assert converted.config["num_heads"] == 4  # read off the talking-heads mixes
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        declared = convert_timm_model(ref.state_dict(), act_layer="gelu", global_pool="avg", norm_eps=1e-6)
    assert declared.config["global_pool"] == "avg" and not declared.assumptions


@pytest.mark.parametrize("args, named", [
    ({"global_pool": ""}, "options our cait does not reproduce: global_pool='' \\(no pooling\\)"),
    ({"norm_layer": torch.nn.BatchNorm1d}, "norm_layer=BatchNorm1d"),
    ({"act_layer": torch.nn.Mish}, "act_layer=Mish"),
])
def test_options_cait_does_not_reproduce_are_refused_by_name(args, named):
    state = case_cait.cait_reference().state_dict()
    with pytest.raises(ConversionError, match=named):
        convert_timm_model(state, architecture="cait_xxs24_224", **case_cait.TINY, **args)


def test_the_converter_refuses_other_architectures_and_attention_layers():
    state = case_cait.cait_reference().state_dict()
    with pytest.raises(ConversionError, match="architecture 'pvt_v2_b0' is not a timm Cait"):
        convert_timm_cait(state, architecture="pvt_v2_b0")
    with pytest.raises(ConversionError, match="timm does not know architecture 'cait_nope'"):
        convert_timm_cait(state, architecture="cait_nope")
    from timm.models.vision_transformer import Attention

    with pytest.raises(ConversionError, match="attention Attention \\(timm's TalkingHeadAttn is reproduced\\)"):
        convert_timm_cait(state, architecture="cait_xxs24_224", **case_cait.TINY, attn_block=Attention)


def test_weights_that_are_not_cait_are_refused():
    with pytest.raises(ConversionError, match="'pos_embed' is missing, so these are not timm CaiT weights"):
        convert_timm_model({"blocks_token_only.0.x": torch.zeros(1)})


@pytest.mark.parametrize("shape", [(3, 5), (3, 3)], ids=["not-square", "heads-do-not-divide"])
def test_a_mis_shaped_talking_heads_mix_is_named(shape):
    """The heads are read off proj_l: a damaged one failed to build with 'width=64 is not a
    valid size ... nearest valid sizes: [63, 66]', blaming the width."""
    state = dict(case_cait.cait_reference().state_dict())
    state["blocks.0.attn.proj_l.weight"] = torch.ones(shape)
    with pytest.raises(ConversionError, match=rf"blocks\.0\.attn\.proj_l\.weight is {re.escape(str(shape))}: the "
                                              r"talking-heads mix must be heads x heads, the heads dividing the width"):
        convert_timm_model(state)


@pytest.mark.parametrize("config, message", [
    ({"image_size": 30}, "image_size 30 is not divisible by patch_size 4"),
    ({"global_pool": "max"}, "global_pool must be one of \\('token', 'avg'\\), got 'max'"),
    ({"init_values": 0.0}, "init_values \\(LayerScale\\) must be positive, got 0.0"),
    # ViT's init_values=None (no LayerScale) raised "'>' not supported between 'NoneType' and 'int'"
    ({"init_values": None}, "init_values \\(LayerScale\\) must be positive, got None: CaiT always has LayerScale"),
    ({"depth_token_only": 0}, "depth_token_only must be a positive integer, got 0"),
    ({"mlp_ratio_token_only": 0.0}, "mlp_ratio_token_only must give a positive MLP width"),
    ({"act_layer": "mish"}, "act_layer must be one of"),
    ({"num_heads": 5}, "width 32 is not divisible by the number of heads 5"),
    ({"dpeth": 3}, "unknown configuration keyword\\(s\\) \\['dpeth'\\]"),
    ({"norm_eps": -1.0}, "norm_eps must be positive, got -1.0"),
])
def test_configuration_errors(config, message):
    with pytest.raises(ValueError, match=message):
        cait_model.build(32, **config)


def test_image_errors():
    model = cait_model.build(32, **SMALL)
    with pytest.raises(ValueError, match="images must be 4-D"):
        model(torch.zeros(2, 3, 16))
    with pytest.raises(ValueError, match="images are 32x32 but the model expects 16x16"):
        model(torch.zeros(2, 3, 32, 32))


def test_a_cait_sweep_plans_and_trains_two_steps():
    plan = flops_fit.plan(model="cait", dataset="digits", budgets=[1e12], sizes=[32, 64, 96], batch_size=8,
                          min_steps=1, eval_tokens=16, model_config={"depth": 2, "depth_token_only": 1})
    assert {r.model for r in plan.runs} == {"cait"} and all(r.flops > 0 for r in plan.runs)
    spec = dataclasses.replace(plan.runs[0], steps=2, tokens=2 * 8, run_id="")
    result = flops_fit.train(spec)
    assert result.status == "done" and result.loss > 0 and 0.0 <= result.top1_error <= 1.0


@pytest.mark.parametrize("heads", [3, 0, 8])
def test_a_head_count_the_weights_contradict_is_refused_by_name(heads):
    """num_heads=3 for weights with 4 heads (their talking-heads mix is 4 x 4) failed to build as
    'width=64 is not a valid size ... nearest valid sizes: [63, 66]'; 0 as timm's arithmetic."""
    state = case_cait.cait_reference().state_dict()
    with pytest.raises(ConversionError) as err:
        convert_timm_cait(state, num_heads=heads)
    assert str(err.value) == (f"timm Cait: num_heads={heads}, but the weights' talking-heads mix "
                              "(blocks.0.attn.proj_l.weight) has 4 heads; leave num_heads out")
    assert convert_timm_cait(state, num_heads=4).config["num_heads"] == 4
