"""The timm Swin converter: state dicts and original checkpoints convert exactly, real
architectures are read exactly, and options we do not reproduce are refused by name."""

import functools

import pytest
import torch
from flops_fit.plugins.models import swin
from flops_fit.plugins.models.swin_model import build, relative_position_index, shift_mask

from flops_fit.errors import ConversionAssumptionWarning, ConversionError

timm = pytest.importorskip("timm")
from flops_fit.parity.convert_timm import convert_timm_model  # noqa: E402
from flops_fit.parity.convert_timm_swin import describe_reference  # noqa: E402


def images(batch=2, chans=3, size=16, seed=0):
    return torch.randn(batch, chans, size, size, generator=torch.Generator().manual_seed(seed))


TINY = {"embed_dim": 32, "depths": (2, 2), "num_heads": (1, 2), "window_size": 4, "patch_size": 2, "img_size": 16,
        "num_classes": 5}


def timm_swin(**options):
    return timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, **{**TINY, **options}).eval()


def _state(model):
    return {k: v.detach() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("options, eps", [
    ({}, 1e-5),
    ({"dynamic_img_size": True}, 1e-5),  # the mask is computed per forward, the same at the configured size
    ({"norm_layer": functools.partial(torch.nn.LayerNorm, eps=1e-6)}, 1e-6),
], ids=["plain", "dynamic-img-size", "eps-1e-6"])
def test_a_state_dict_converts_and_computes_what_timm_computes(options, eps):
    torch.manual_seed(0)
    ref = timm_swin(**options)
    converted = convert_timm_model(_state(ref), architecture="swin_tiny_patch4_window7_224", **TINY, **options)
    assert converted.model == "swin" and converted.size == 32
    assert converted.config["num_heads"] == (1, 2) and converted.config["norm_eps"] == eps
    ours = converted.build().eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(images()), ref(images()))


def test_original_checkpoints_are_renamed_and_stale_buffers_dropped():
    """Microsoft's layout: merging at the end of a stage, ``head`` for ``head.fc``, the
    ``relative_position_index`` / ``attn_mask`` buffers saved."""
    torch.manual_seed(0)
    ref = timm_swin()
    old = {}
    for key, value in _state(ref).items():
        key = key.replace("layers.1.downsample", "layers.0.downsample").replace("head.fc.", "head.")
        old[key] = value
    old["layers.0.blocks.0.attn.relative_position_index"] = torch.zeros(16, 16, dtype=torch.long)
    old["layers.0.blocks.1.attn_mask"] = torch.zeros(16, 16, 16)
    with pytest.warns(ConversionAssumptionWarning, match="global_pool = 'avg'.*norm_eps = 1e-05.*always_partition"):
        converted = convert_timm_model(old, img_size=16)
    assert converted.dropped == ["layers.0.blocks.0.attn.relative_position_index", "layers.0.blocks.1.attn_mask"]
    with torch.no_grad():
        torch.testing.assert_close(converted.build().eval()(images()), ref(images()))


def test_a_feature_extractor_gets_a_fresh_head():
    with pytest.warns(ConversionAssumptionWarning, match="norm_eps = 1e-05"):
        converted = convert_timm_model(_state(timm_swin(num_classes=0)), img_size=16, global_pool="avg")
    assert converted.config["num_classes"] == 1 and converted.fresh == ("head.weight", "head.bias")
    assert converted.build()(images()).shape == (2, 1)


@pytest.mark.parametrize(
    "options, message",
    [
        # timm before 1.0.30 refuses it itself, at an assert naming global_pool
        ({"global_pool": "max"}, "options our swin does not reproduce: global_pool='max'|timm refuses.*assert global_pool"),
        ({"head_dim": 16}, r"head_dim=16 \(attention 16 wide in a 32-wide stage\)"),
        ({"img_size": 20}, r"stage 1 resolution \(5, 5\) not divisible by its window \(4, 4\)"),
        ({"img_size": 36, "window_size": 3, "depths": (2, 2, 2), "num_heads": (1, 2, 4)},
         r"stage 1 resolution \(9, 9\) is odd \(timm pads it before merging\)"),
        ({"norm_layer": torch.nn.RMSNorm}, r"norm_layer=RMSNorm \(only affine LayerNorm is reproduced\)"),
        ({"mlp_ratio": (4.0, 2.0)}, r"mlp_ratio per stage \[2.0, 4.0\]"),
        ({"img_size": (16, 32)}, r"img_size=\(16, 32\) \(not square\)"),
        ({"window_size": (4, 2)}, r"window_size=\(4, 2\) \(not square\)"),
    ],
)
def test_timm_options_we_do_not_reproduce_are_refused_by_name(options, message):
    weighted = {k: v for k, v in options.items() if k != "global_pool"}  # the pooling has no weights
    with torch.device("meta"):
        state = _state(timm_swin(**weighted))
    with pytest.raises(ConversionError, match=message):
        convert_timm_model(state, architecture="swin_tiny_patch4_window7_224", **{**TINY, **options})


def test_weights_that_cannot_be_converted_are_refused_by_name():
    state = _state(timm_swin())
    with pytest.raises(ConversionError, match="the weights do not say the image size.*pass img_size="):
        convert_timm_model(state)
    with pytest.raises(ConversionError, match=r"absolute_pos_embed \(ape=True"):
        convert_timm_model({**state, "absolute_pos_embed": torch.zeros(1, 64, 32)}, img_size=16)
    with pytest.raises(ConversionError, match="timm model class SwinTransformerV2"):
        convert_timm_model(state, architecture="swinv2_tiny_window8_256")


@pytest.mark.parametrize("architecture", [
    "swin_tiny_patch4_window7_224", "swin_base_patch4_window12_384", "swin_s3_tiny_224", "swin_large_patch4_window7_224",
])
def test_timm_architectures_are_read_exactly_at_full_size(architecture):
    """The real architectures (on the meta device): our configuration's windows, shifts and
    parameter count are timm's, e.g. Swin-T's last stage (7 x 7 tokens) is one unshifted window."""
    with torch.device("meta"):
        ref = timm.create_model(architecture, pretrained=False)
        config = describe_reference(ref)
        ours = build(config.pop("width"), **config)
    assert ours.num_params() == sum(p.numel() for p in ref.parameters())
    assert [(b.window, b.shift) for st in ours.layers for b in st.blocks] == [
        (b.window_size[0], b.shift_size[0]) for st in ref.layers for b in st.blocks]
    if architecture == "swin_tiny_patch4_window7_224":
        assert ours.config == swin.SwinConfig.of(96, **{**swin.SWIN_DEFAULTS, "depths": (2, 2, 6, 2),
                                                         "num_heads": (3, 6, 12, 24), "window_size": 7, "patch_size": 4,
                                                         "image_size": 224, "num_classes": 1000})


@pytest.mark.parametrize("resolution, window, shift", [(8, 4, 2), (16, 4, 2), (12, 6, 3), (4, 4, 2), (14, 7, 3)])
def test_the_shift_mask_and_bias_index_are_timms(resolution, window, shift):
    from timm.models.swin_transformer import SwinTransformerBlock, get_relative_position_index

    block = SwinTransformerBlock(8, (resolution, resolution), num_heads=1, window_size=window, shift_size=shift,
                                 always_partition=True)
    assert torch.equal(shift_mask(resolution, window, shift), block.attn_mask)
    assert torch.equal(relative_position_index(window), get_relative_position_index(window, window))



def test_swin_head_counts_one_short_of_the_stages_are_timms_refusal_not_an_index_error():
    """num_heads=(1,) for two stages raised a bare IndexError from inside timm (build_on_meta caught
    KeyError, not IndexError); it is timm's refusal in one ConversionError, naming what was given."""
    state = _state(timm_swin())
    with pytest.raises(ConversionError) as err:
        convert_timm_model(state, img_size=16, num_heads=(1,))
    assert str(err.value) == ("timm SwinTransformer: timm refuses these options: tuple index out of range (given: "
                              "img_size=16, num_heads=(1,))")


@pytest.mark.parametrize("size", [0, -16, (16, 0), 16.5, "16"])
def test_an_image_size_that_is_no_size_is_refused_by_name(size):
    """img_size=0 raised a bare ZeroDivisionError from the converter's window check; -16 read as
    timm's 'upper bound and lower bound inconsistent with step sign'."""
    with pytest.raises(ConversionError) as err:
        convert_timm_model(_state(timm_swin()), img_size=size)
    assert str(err.value) == (f"timm SwinTransformer: img_size={size!r} is not an image size (a positive number of "
                              "pixels, or a (height, width) pair of them)")
