"""Negative controls: known-wrong variants must fail parity, and the report must name the
first layer where they go wrong. A suite that passes these cannot pass by accident."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from flops_fit.parity import (
    case_attention,
    case_cait,
    case_gpt,
    case_llama,
    case_pvt_v2,
    case_swin,
    case_vit,
    controls,
)

pytest.importorskip("timm")
pytest.importorskip("transformers")


def _class_position_not_folded():
    """DINOv2 with registers converted without folding position 0 into the class token (the
    case's reference is deterministic, so its position embedding is known here)."""
    position = case_vit.hf_reference("dinov2-registers").embeddings.position_embeddings[:, :1].detach()
    return controls.shifted("cls_token", -position)


@pytest.mark.parametrize(("run", "kwargs", "first_bad"), [
    pytest.param(case_vit.timm_vit, {"overrides": {"act_layer": "gelu_tanh"}}, "blocks.0", id="timm-tanh-gelu"),
    pytest.param(case_vit.timm_vit, {"overrides": {"norm_eps": 1e-5}}, "blocks.0.attn", id="timm-eps-1e-5"),
    pytest.param(case_vit.hf_vit, {"overrides": {"norm_eps": 1e-6}}, "blocks.0.attn", id="hf-vit-eps-1e-6"),
    pytest.param(case_gpt.hf_gpt2, {"overrides": {"gelu": "exact"}}, "blocks.0", id="gpt2-exact-gelu"),
    pytest.param(case_gpt.hf_gpt2, {"tamper": controls.untransposed("blocks.0.attn.out_proj.weight")},
                 "blocks.0.attn", id="gpt2-untransposed-c_proj"),
    pytest.param(case_gpt.hf_gpt2, {"tamper": controls.zeroed("blocks.1.attn.qkv_proj.weight", slice(128, 192))},
                 "blocks.1.attn", id="gpt2-zeroed-v_proj"),
    pytest.param(case_vit.timm_vit, {"tamper": controls.zeroed("blocks.1.mlp.fc2.weight")},
                 "blocks.1", id="timm-zeroed-fc2"),
    pytest.param(case_attention.llama_gqa, {"tamper": controls.tiled_kv_heads("", 8, 2)},
                 "gqa.causal.rope", id="llama-tiled-kv-heads"),
    pytest.param(case_attention.llama_gqa, {"interleaved": True}, "gqa.causal.rope", id="llama-attn-rope-interleaved"),
    pytest.param(case_llama.hf_llama, {"overrides": {"rope_interleaved": True}}, "layers.0.self_attn",
                 id="llama-rope-interleaved"),
    pytest.param(case_llama.hf_llama, {"tamper": controls.tiled_kv_heads("layers.0.self_attn.", 4, 2)},
                 "layers.0.self_attn", id="llama-tiled-kv-heads"),
    pytest.param(case_llama.hf_llama, {"overrides": {"rms_norm_eps": 1e-5}}, "layers.0.self_attn",
                 id="llama-rmsnorm-eps"),
    pytest.param(case_llama.hf_llama, {"overrides": {"hidden_act": "gelu"}}, "layers.0", id="llama-gelu-for-silu"),
    pytest.param(case_llama.hf_llama, {"overrides": {"tie_word_embeddings": True}, "tamper": controls.dropped("lm_head.weight")},
                 "logits", id="llama-untied-head-loaded-as-tied"),
    pytest.param(case_llama.hf_llama_rope_llama3, {"overrides": {"rope_type": "default"}}, "layers.0.self_attn",
                 id="llama3-rope-scaling-ignored"),
    pytest.param(case_llama.hf_mistral, {"overrides": {"sliding_window": None}}, "layers.0.self_attn",
                 id="mistral-sliding-window-ignored"),
    pytest.param(case_llama.hf_qwen2, {"overrides": {"qkv_bias": False},
                                       "tamper": controls.dropped(r"layers\.\d+\.self_attn\.qkv_proj\.bias")},
                 "layers.0.self_attn", id="qwen2-qkv-bias-dropped"),
    pytest.param(case_vit.hf_deit_distilled, {"overrides": {"dist_head": False}, "tamper": controls.dropped(r"head_dist\..*")},
                 "logits", id="deit-distillation-head-dropped"),
    pytest.param(case_vit.hf_deit, {"tamper": controls.swapped("cls_token", "dist_token")}, "blocks.0.attn",
                 id="deit-class-and-distillation-tokens-swapped"),
    pytest.param(case_vit.hf_dinov2, {"overrides": {"init_values": None}, "tamper": controls.dropped(r"blocks\.\d+\.ls\d\.gamma")},
                 "blocks.0", id="dinov2-layerscale-ignored"),
    pytest.param(case_vit.hf_dinov2_registers, {"tamper": _class_position_not_folded()}, "blocks.0.attn",
                 id="dinov2-registers-class-position-not-folded"),
    pytest.param(case_swin.timm_swin, {"setup": controls.unshifted_windows}, "layers.0.blocks.1.attn",
                 id="swin-unshifted-windows"),
    pytest.param(case_swin.timm_swin, {"setup": controls.unmasked_shift}, "layers.0.blocks.1.attn",
                 id="swin-shift-without-its-mask"),
    pytest.param(case_swin.timm_swin, {"tamper": controls.zeroed_all(r".*relative_position_bias_table")},
                 "layers.0.blocks.0.attn", id="swin-relative-position-bias-missing"),
    pytest.param(case_swin.timm_swin, {"tamper": controls.permuted_chunks(
        r"layers\.1\.downsample\.(reduction\.weight|norm\.weight|norm\.bias)", (0, 2, 1, 3))},
                 "layers.1.downsample", id="swin-patch-merging-row-major"),
    pytest.param(case_swin.timm_swin, {"overrides": {"norm_eps": 1e-6}}, "patch_embed", id="swin-eps-1e-6"),
    pytest.param(case_cait.timm_cait, {"tamper": controls.filled(r"blocks(_token_only)?\.\d+\.ls\d\.gamma", 1.0)},
                 "blocks.0", id="cait-layerscale-dropped"),
    pytest.param(case_cait.timm_cait, {"overrides": {"talking_heads": False},
                                       "tamper": controls.dropped(r"blocks\.\d+\.attn\.proj_[lw]\..*")},
                 "blocks.0.attn", id="cait-talking-heads-ignored"),
    pytest.param(case_cait.timm_cait, {"setup": controls.class_attention_without_its_own_key},
                 "blocks_token_only.0.attn", id="cait-class-token-not-among-its-keys"),
    pytest.param(case_pvt_v2.timm_pvt_v2, {"overrides": {"sr_ratios": (1, 1, 1, 1)},
                                           "tamper": controls.dropped(r".*\.reduce\..*")},
                 "stages.0.blocks.0.attn", id="pvt-v2-spatial-reduction-dropped"),
    pytest.param(case_pvt_v2.timm_pvt_v2, {"tamper": controls.swapped_rows("stages.1.blocks.0.attn.qkv_proj.weight",
                                                                           slice(32, 64), slice(64, 96))},
                 "stages.1.blocks.0.attn", id="pvt-v2-kv-unpacked-as-vk"),
])
def test_known_wrong_variant_fails_at_its_first_bad_layer(run, kwargs, first_bad) -> None:
    report = run(**kwargs)
    assert not report.passed
    assert report.first_failure.name == first_bad, str(report)
    assert f"FAILED at {first_bad}" in report.summary()
    # the layers before the first bad one still match: the report localises the fault
    before = report.layers[: report.layers.index(report.first_failure)]
    assert all(layer.passed for layer in before)


def test_the_same_case_passes_without_the_mistake() -> None:
    """The controls' baselines, so a failure above is the mistake's doing."""
    assert case_vit.timm_vit().passed
    assert case_gpt.hf_gpt2().passed
    assert case_attention.llama_gqa().passed
    assert case_llama.hf_llama().passed
    assert case_swin.timm_swin().passed
    for run in (case_vit.hf_deit_distilled, case_vit.hf_deit, case_vit.hf_dinov2, case_vit.hf_dinov2_registers,
                case_cait.timm_cait, case_pvt_v2.timm_pvt_v2):
        assert run().passed


def test_tiled_kv_control_computes_what_a_tiling_implementation_computes() -> None:
    """The head reordering of ``tiled_kv_heads`` equals expanding kv heads with ``.repeat``."""
    from flops_fit.plugins.models.attention import MultiheadAttention

    torch.manual_seed(0)
    heads, kv, width, length = 8, 2, 64, 5
    attn = MultiheadAttention(width, heads, kv)
    state = {k: v.clone() for k, v in attn.state_dict().items()}
    x = torch.randn(2, length, width)
    d = width // heads
    q, k, v = F.linear(x, state["qkv_proj.weight"], state["qkv_proj.bias"]).split((width, kv * d, kv * d), -1)
    q = q.view(2, length, heads, d).transpose(1, 2)
    k = k.view(2, length, kv, d).transpose(1, 2)
    v = v.view(2, length, kv, d).transpose(1, 2)
    tiled = F.scaled_dot_product_attention(q, k.repeat(1, heads // kv, 1, 1), v.repeat(1, heads // kv, 1, 1))
    expected = F.linear(tiled.transpose(1, 2).reshape(2, length, width), state["out_proj.weight"], state["out_proj.bias"])
    controls.tiled_kv_heads("", heads, kv)(state)
    attn.load_state_dict(state)
    with torch.no_grad():
        torch.testing.assert_close(attn(x), expected)
