"""Converters: preset key layouts, legacy and in-memory layouts, and strict errors."""

from __future__ import annotations

import re

import pytest
import torch
from flops_fit.parity import case_gpt, case_llama, case_vit, probe
from flops_fit.parity.convert_gpt2 import convert_gpt2
from flops_fit.parity.convert_hf_vit import FAMILIES, convert_hf_vit, hf_vit_config
from flops_fit.parity.convert_llama import convert_llama
from flops_fit.parity.convert_llama_attn import convert_llama_attention
from flops_fit.parity.convert_timm import convert_timm_model, convert_timm_vit
from flops_fit.parity.convert_torch_mha import convert_torch_mha
from flops_fit.parity.mapping import KeyMapper
from flops_fit.parity.pipeline import save_hf
from flops_fit.plugins.models.vit import ViTConfig
from safetensors.torch import save_file
from torch import nn

import flops_fit
from flops_fit.errors import ConversionError

timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")


def _save(state: dict, path) -> str:
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    return str(path)


@pytest.mark.parametrize("preset", ["vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224"])
def test_timm_preset_layouts_convert_to_our_presets(preset, tmp_path) -> None:
    """Full-width presets with one block (the layout repeats per block): every key maps, the
    shapes fit our model, and the converted config is our preset's (depth aside)."""
    ref = timm.create_model(preset, pretrained=False, depth=1)
    converted = convert_timm_vit(_save(ref.state_dict(), tmp_path / "m.safetensors"), architecture=preset)
    ours = converted.build()
    assert torch.equal(ours.blocks[0].attn.projection_weights()[0][1], ref.blocks[0].attn.qkv.weight.chunk(3)[1])
    preset_config = flops_fit.model_info(preset).config()
    assert converted.size == flops_fit.model_info(preset).default_size
    for key in ("num_heads", "patch_size", "image_size", "in_chans", "num_classes", "mlp_ratio", "norm_eps"):
        assert converted.config[key] == preset_config[key], key


def test_timm_needs_a_head_count(tmp_path) -> None:
    path = _save(case_vit.timm_reference().state_dict(), tmp_path / "m.safetensors")
    with pytest.raises(ConversionError, match="pass num_heads=... or architecture="):
        convert_timm_vit(path)


def test_timm_unknown_architecture_is_named() -> None:
    with pytest.raises(ConversionError, match="timm does not know architecture 'vit_nope'"):
        convert_timm_vit(case_vit.timm_reference().state_dict(), architecture="vit_nope")


def test_timm_feature_extractor_gets_a_fresh_head() -> None:
    ref = timm.create_model("vit_tiny_patch16_224", pretrained=False, **{**case_vit.TINY, "num_classes": 0})
    converted = convert_timm_vit(ref.state_dict(), num_heads=4)
    assert converted.fresh[:2] == ("head.weight", "head.bias") and converted.config["num_classes"] == 1
    ours = converted.build()
    assert torch.equal(ours.blocks[1].mlp.fc2.weight, ref.blocks[1].mlp.fc2.weight)


def test_timm_missing_key_is_listed(tmp_path) -> None:
    state = case_vit.timm_reference().state_dict()
    del state["blocks.1.mlp.fc2.bias"]
    with pytest.raises(ConversionError, match=r"missing in the reference: blocks\.1\.mlp\.fc2\.bias"):
        convert_timm_vit(_save(state, tmp_path / "m.safetensors"), num_heads=4)


def _logits_match(ref, ours) -> bool:
    from flops_fit.parity.compare import Side, compare_sides

    rows = compare_sides(Side(ref, lambda m, i: m(*i)), Side(ours, lambda m, i: m(*i)), [probe.images(2, 3, 32)])
    return all(r.passed for r in rows)


def test_regression_avg_pool_with_norm_before_pooling(tmp_path) -> None:
    """global_pool='avg' with fc_norm=False (the final norm before pooling) once converted
    silently as token pooling (logits off by ~2). A timm folder declares it; a bare weights
    file cannot tell, so the converter states its assumption and takes an override."""
    ref = case_vit.timm_reference(variant="avg-norm-first")
    case_vit.save_timm(ref, tmp_path)
    from_folder = convert_timm_vit(tmp_path)
    assert from_folder.config["global_pool"] == "avg" and from_folder.config["fc_norm"] is False
    assert from_folder.assumptions == {}
    assert _logits_match(ref, from_folder.build())

    bare = convert_timm_vit(ref.state_dict(), num_heads=4)
    assert "global_pool" in bare.assumptions and "cannot tell token pooling" in bare.assumptions["global_pool"]
    assert set(bare.assumptions) == {"global_pool", "act_layer", "norm_eps"}
    assert not _logits_match(ref, bare.build())  # the assumption is wrong here, and it was stated
    overridden = convert_timm_vit(ref.state_dict(), num_heads=4, global_pool="avg")
    assert "global_pool" not in overridden.assumptions and _logits_match(ref, overridden.build())


def test_regression_options_in_config_json_are_read(tmp_path) -> None:
    """A non-default act_layer in config.json's model_args once converted with our defaults."""
    ref = case_vit.timm_reference(variant="silu")
    case_vit.save_timm(ref, tmp_path)
    converted = convert_timm_vit(tmp_path)
    assert converted.config["act_layer"] == "silu" and _logits_match(ref, converted.build())
    bare = convert_timm_vit(ref.state_dict(), num_heads=4)
    assert bare.config["act_layer"] == "gelu" and "MLP activation" in bare.assumptions["act_layer"]
    assert _logits_match(ref, convert_timm_vit(ref.state_dict(), num_heads=4, act_layer="silu").build())
    assert convert_timm_vit(ref.state_dict(), num_heads=4, norm_eps=1e-5).config["norm_eps"] == 1e-5


@pytest.mark.parametrize("variant", sorted(set(case_vit.TIMM_VARIANTS) - {"avg-norm-first", "silu"}))
def test_timm_variants_convert_from_bare_weights(variant) -> None:
    """Every variant's structure is read off the tensors (tokens, LayerScale, QK-norm, ...)."""
    ref = case_vit.timm_reference(variant=variant)
    options = dict(case_vit.TIMM_VARIANTS[variant][1])
    extra = {"act_layer": options["act_layer"]} if "act_layer" in options else {}
    converted = convert_timm_vit(ref.state_dict(), num_heads=4, **extra)
    assert _logits_match(ref, converted.build())
    assert converted.build().num_params() == sum(p.numel() for p in ref.parameters())


@pytest.mark.parametrize(("options", "refusal"), [
    ({"global_pool": "map"}, "global_pool='map' (attention pooling)"),
    ({"global_pool": "max"}, "global_pool='max'"),
    ({"scale_attn_norm": True}, "scale_attn_norm=True"),
    ({"scale_mlp_norm": True}, "scale_mlp_norm=True"),
    ({"final_norm": False}, "final_norm=False"),
    ({"norm_layer": "rmsnorm"}, "norm_layer=RmsNorm"),
    ({"act_layer": "mish"}, "act_layer=Mish"),
    ({"pos_embed": "none"}, "not timm ViT weights with a learned position embedding"),
    ({"pool_include_prefix": True, "global_pool": "avg"}, "pool_include_prefix=True"),
    ({"dynamic_img_size": True}, "dynamic_img_size=True"),
    ({"not_an_option": 1}, "timm refuses these options"),
])
def test_timm_options_we_do_not_reproduce_are_refused_by_name(options, refusal) -> None:
    ref = timm.create_model("vit_tiny_patch16_224", pretrained=False, **{**case_vit.TINY, **options}) \
        if "not_an_option" not in options else case_vit.timm_reference()
    with pytest.raises(ConversionError, match="options our vit does not reproduce|timm refuses|is missing") as err:
        convert_timm_vit(ref.state_dict(), num_heads=4, **options)
    assert refusal in str(err.value)


def test_timm_other_families_are_refused_by_name() -> None:
    ref = timm.create_model("eva02_tiny_patch14_224", pretrained=False, img_size=28, depth=1)
    with pytest.raises(ConversionError, match="timm model class Eva is not supported .*EVA / RoPE ViTs"):
        convert_timm_vit(ref.state_dict(), architecture="eva02_tiny_patch14_224", img_size=28, depth=1)


def test_mis_shaped_key_is_listed_with_both_shapes() -> None:
    state = case_vit.timm_reference().state_dict()
    state["blocks.1.mlp.fc1.weight"] = torch.ones(128, 64)  # block 0 says 256 hidden units
    state["blocks.1.mlp.fc1.bias"] = torch.ones(128)
    with pytest.raises(ConversionError, match=r"mis-shaped: blocks\.1\.mlp\.fc1\.weight: converted \(128, 64\), "
                                              r"our model expects \(256, 64\)"):
        convert_timm_vit(state, num_heads=4).build()


def test_zero_filled_conversion_is_caught_but_zero_reference_is_fine() -> None:
    m = KeyMapper({"k": torch.ones(2, 2), "b": torch.zeros(2)}, "test")
    m.map("k_proj.weight", "k", fn=torch.zeros_like)  # a converter bug
    m.map("k_proj.bias", "b")  # zero in the reference too: legitimate
    with pytest.raises(ConversionError, match=r"all zeros although the reference tensor is not zero: "
                                              r"k_proj\.weight \(from k\)"):
        m.finish()


@pytest.mark.parametrize("variant", ["vit", "deit-distilled", "dinov2", "dinov2-registers"])
def test_hf_vit_family_in_memory_names_convert_like_the_files(variant, tmp_path) -> None:
    ref = case_vit.hf_reference(variant)
    save_hf(ref, tmp_path)
    from_disk = convert_hf_vit(tmp_path)
    from_memory = convert_hf_vit(ref.state_dict(), config=ref.config.to_dict())
    assert from_disk.config == from_memory.config
    assert sorted(from_disk.state) == sorted(from_memory.state)
    assert all(torch.equal(from_disk.state[k], from_memory.state[k]) for k in from_disk.state)


def test_hf_vit_model_drops_its_pooler_and_keeps_a_fresh_head(tmp_path) -> None:
    save_hf(case_vit.hf_reference("vit-backbone"), tmp_path)
    converted = convert_hf_vit(tmp_path)
    assert converted.dropped == ["pooler.dense.bias", "pooler.dense.weight"]
    assert converted.fresh == ("head.weight", "head.bias")
    converted.build()


@pytest.mark.parametrize(("variant", "uncounted"), [
    ("vit", 0), ("deit", 0), ("deit-distilled", 0),
    ("vit-backbone", 64 * 64 + 64),  # the pooler (dense 64 -> 64), dropped
    ("deit-backbone", 64 * 64 + 64),  # the pooler (dense 64 -> 64), dropped
    ("dinov2", 64),  # the mask token, dropped
    ("dinov2-registers", 64 + 64),  # the mask token, and the class position folded into the class token
])
def test_hf_vit_family_parameters_are_counted_exactly(variant, uncounted, tmp_path) -> None:
    """Our converted model has the reference's parameters, less what the conversion drops or
    folds; the analytic count agrees."""
    ref = case_vit.hf_reference(variant)
    save_hf(ref, tmp_path)
    converted = convert_hf_vit(tmp_path)
    ours = converted.build()
    assert ours.num_params() == sum(p.numel() for p in ref.parameters()) - uncounted + (
        64 * 1 + 1 if converted.fresh else 0)  # a backbone's fresh one-class head
    entry = flops_fit.model_info("vit")
    assert entry.param_count(converted.size, **{**entry.defaults, **converted.config}) == ours.num_params()


def test_hf_deit_heads_follow_the_saved_class(tmp_path) -> None:
    """WithTeacher: two heads averaged; ForImageClassification: the class head alone; DeiTModel:
    one fresh head. The distillation token is there in all three."""
    expected = {"deit-distilled": (True, ()), "deit": (False, ()), "deit-backbone": (False, ("head.weight", "head.bias"))}
    for variant, (dist_head, fresh) in expected.items():
        save_hf(case_vit.hf_reference(variant), tmp_path / variant)
        converted = convert_hf_vit(tmp_path / variant)
        assert converted.config["dist_token"] is True and converted.config["dist_head"] is dist_head, variant
        assert converted.fresh == fresh, variant
    assert convert_hf_vit(tmp_path / "deit").config["qkv_bias"] is False


def test_hf_dinov2_registers_fold_the_class_position(tmp_path) -> None:
    ref = case_vit.hf_reference("dinov2-registers")
    save_hf(ref, tmp_path)
    converted = convert_hf_vit(tmp_path)
    assert converted.config["reg_tokens"] == 4 and converted.config["no_embed_class"] is True
    assert converted.config["init_values"] is not None and converted.dropped == ["embeddings.mask_token"]
    e = ref.embeddings
    assert torch.equal(converted.state["cls_token"], (e.cls_token + e.position_embeddings[:, :1]).detach())
    assert torch.equal(converted.state["pos_embed"], e.position_embeddings[:, 1:].detach())
    assert torch.equal(converted.state["reg_token"], e.register_tokens.detach())


def _hf_config(variant: str, **changes) -> dict:
    return {**case_vit.hf_reference(variant).config.to_dict(), **changes}


@pytest.mark.parametrize(("variant", "changes", "refusal"), [
    ("dinov2", {"use_swiglu_ffn": True}, "HF DINOv2: options our vit does not reproduce: use_swiglu_ffn=True"),
    ("dinov2-registers", {"use_swiglu_ffn": True}, "HF DINOv2 with registers: options .*use_swiglu_ffn=True"),
    ("deit", {"hidden_act": "mish"}, r"HF DeiT: options our vit does not reproduce: hidden_act='mish' \(ours: "),
    ("vit", {"image_size": [32, 16]}, r"HF ViT: .*image_size=\[32, 16\] \(ours needs one int: square"),
    ("dinov2", {"patch_size": [8, 4]}, r"patch_size=\[8, 4\]"),
    ("deit", {"layer_scale_init": 0.1}, r"layer_scale_init=0.1 \(unknown option\)"),
    ("vit", {"model_type": "beit"}, r"model_type='beit' is not supported; it converts \['deit', 'dinov2', "),
])
def test_hf_vit_family_options_we_do_not_reproduce_are_refused_by_name(variant, changes, refusal) -> None:
    with pytest.raises(ConversionError, match=refusal):
        convert_hf_vit({}, _hf_config(variant, **changes))


@pytest.mark.parametrize("stem", ["Dinov2", "Dinov2WithRegisters"])
def test_hf_dinov2_image_classification_head_is_refused_by_name(stem, tmp_path) -> None:
    """Its classifier reads [class token, mean patch token]: our heads read one of them."""
    config = getattr(transformers, f"{stem}Config")(**case_vit.HF_TINY)
    save_hf(getattr(transformers, f"{stem}ForImageClassification")(config), tmp_path)
    with pytest.raises(ConversionError, match=rf"HF DINOv2.*: {stem}ForImageClassification's classifier is not "
                                              rf"supported: it reads the class token concatenated with the mean "
                                              rf"patch token.*convert the backbone \({stem}Model\) instead"):
        convert_hf_vit(tmp_path)


def test_hf_vit_family_square_lists_and_unround_mlp_sizes_convert() -> None:
    """``image_size=[32, 32]`` is square; ``intermediate_size`` 333 on width 100 (333 / 100 * 100
    is 332.99999999999994 in floating point) still gives 333 hidden units."""
    config = {**_hf_config("vit", image_size=[32, 32], hidden_size=100, intermediate_size=333)}
    our = hf_vit_config(config, FAMILIES["vit"], num_classes=10, dist_head=False)
    assert our["image_size"] == 32
    assert ViTConfig.of(our.pop("width"), **our).mlp_hidden == 333


def _legacy_gpt2_state(ref) -> dict:
    state = {k.removeprefix("transformer."): v for k, v in ref.state_dict().items() if k != "lm_head.weight"}
    for i in range(ref.config.n_layer):
        state[f"h.{i}.attn.bias"] = torch.ones(1, 1, 16, 16).tril()
        state[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    return state


def test_gpt2_legacy_layout_matches_the_current_one(tmp_path) -> None:
    ref = case_gpt.gpt2_reference()
    save_hf(ref, tmp_path)
    current = convert_gpt2(tmp_path)
    legacy = convert_gpt2(_save(_legacy_gpt2_state(ref), tmp_path / "legacy.safetensors"), ref.config.to_dict())
    assert "h.0.attn.bias" in legacy.dropped and "h.1.attn.masked_bias" in legacy.dropped
    assert sorted(current.state) == sorted(legacy.state)
    assert all(torch.equal(current.state[k], legacy.state[k]) for k in current.state)
    # Conv1D (in, out) becomes Linear (out, in)
    assert torch.equal(legacy.state["blocks.0.mlp.proj.weight"], ref.transformer.h[0].mlp.c_proj.weight.t())


def test_gpt2_untied_head_is_refused() -> None:
    ref = case_gpt.gpt2_reference()
    state = dict(ref.state_dict())
    state["lm_head.weight"] = state["transformer.wte.weight"] + 1
    with pytest.raises(ConversionError, match="lm_head.weight differs from wte.weight"):
        convert_gpt2(state, ref.config.to_dict())


@pytest.mark.parametrize(("extra", "named"), [
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=True"),
    ({"reorder_and_upcast_attn": True}, "reorder_and_upcast_attn=True"),
    ({"attn_logit_softcapping": 30.0}, r"attn_logit_softcapping=30.0 \(unknown option\)"),
])
def test_gpt2_unsupported_config_is_named(extra, named) -> None:
    config = {**case_gpt.gpt2_reference().config.to_dict(), **extra}
    with pytest.raises(ConversionError, match=named):
        convert_gpt2({}, config)


def test_torch_mha_with_other_key_width_is_mis_shaped() -> None:
    mha = nn.MultiheadAttention(64, 4, kdim=32, vdim=32, batch_first=True)
    with pytest.raises(ConversionError, match=r"qkv_proj\.weight: k_proj_weight \(64, 32\), v_proj_weight \(64, 32\) "
                                              r"do not pack with q_proj_weight \(64, 64\)"):
        convert_torch_mha(mha.state_dict(), num_heads=4)


def test_torch_mha_bias_kv_is_unexpected() -> None:
    mha = nn.MultiheadAttention(64, 4, add_bias_kv=True)
    with pytest.raises(ConversionError, match="unexpected in the reference.*bias_k, bias_v"):
        convert_torch_mha(mha.state_dict(), num_heads=4)


def test_llama_layer_must_exist(tmp_path) -> None:
    from flops_fit.parity.case_attention import llama_reference

    save_hf(llama_reference(), tmp_path)
    assert convert_llama_attention(tmp_path, layer=0).config["num_kv_heads"] == 2
    with pytest.raises(ConversionError, match=r"no layer 3 \(model\.layers\.3\.self_attn\.\* keys\)"):
        convert_llama_attention(tmp_path, layer=3)


def test_probe_init_is_deterministic_and_not_library_init() -> None:
    a = probe.probe_init_(nn.Linear(16, 8), seed=3)
    b = probe.probe_init_(nn.Linear(16, 8), seed=3)
    assert torch.equal(a.weight, b.weight)
    assert abs(float(a.weight.detach().std()) - 16**-0.5) < 0.05


def test_timm_without_qkv_bias_round_trips(tmp_path) -> None:
    """qkv_bias=False: no q/k/v biases, but timm keeps the output projection's bias."""
    from flops_fit.parity.compare import Side, compare_sides

    ref = probe.probe_init_(timm.create_model("vit_tiny_patch16_224", pretrained=False, qkv_bias=False,
                                              **case_vit.TINY))
    converted = convert_timm_vit(_save(ref.state_dict(), tmp_path / "m.safetensors"), num_heads=4)
    assert converted.config["qkv_bias"] is False
    ours = converted.build()
    rows = compare_sides(Side(ref, lambda m, i: m(*i)), Side(ours, lambda m, i: m(*i)), [probe.images(2, 3, 32)])
    assert all(r.passed for r in rows), rows


def test_a_bare_file_warns_once_listing_each_assumption_and_its_argument(tmp_path) -> None:
    import warnings

    from flops_fit.parity.mapping import warn_assumptions

    ref = case_vit.timm_reference()
    path = _save(ref.state_dict(), tmp_path / "bare.safetensors")
    with pytest.warns(flops_fit.ConversionAssumptionWarning) as caught:
        convert_timm_vit(path, num_heads=4)
    [warning] = caught.list  # one warning for the conversion, listing all three
    message = str(warning.message)
    assert message.startswith("timm VisionTransformer: the weights do not say everything, so 3 option(s) were assumed")
    for option, value in (("act_layer", "'gelu'"), ("norm_eps", "1e-06"), ("global_pool", "'token'")):
        assert f"{option} = {value} (assumed: " in message and f"set it with {option}=..." in message
    assert warning.filename == __file__  # points at the caller's line, not the converter's
    case_vit.save_timm(ref, tmp_path / "folder")
    with warnings.catch_warnings():
        warnings.simplefilter("error", flops_fit.ConversionAssumptionWarning)
        convert_timm_vit(tmp_path / "folder")  # config.json declares everything: nothing assumed, no warning
        convert_timm_vit(path, num_heads=4, act_layer="gelu", norm_eps=1e-6, global_pool="token")
        warn_assumptions("x", {})
    with pytest.warns(flops_fit.ConversionAssumptionWarning, match="eps = 1e-05 .*, set it with eps=...$"):
        warn_assumptions("a converter", {"eps": "1e-05 (assumed: the usual)"})


def test_flops_fit_parity_prints_the_assumptions(capsys) -> None:
    import json

    from flops_fit.cli.main import main

    assert main(["parity", "--case", "timm-vit-bare"]) == 0
    captured = capsys.readouterr()
    assert "flops_fit/timm-vit-bare: act_layer = 'gelu' (assumed: weights do not record the MLP activation" in captured.out
    assert "flops_fit/timm-vit-bare: global_pool = 'token' (assumed: " in captured.out
    assert "flops_fit/timm-vit-bare: norm_eps = 1e-06 (assumed: " in captured.out
    assert "ConversionAssumptionWarning" not in captured.err  # the report carries them, not a warning
    assert main(["parity", "--case", "timm-vit-bare", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert set(row["report"]["assumptions"]) == {"act_layer", "global_pool", "norm_eps"}

def test_timm_entry_point_routes_vits_by_config_json_name_or_keys(tmp_path) -> None:
    """One entry point: a timm hub folder (config.json names the architecture), a bare state
    dict with a head count, and a distilled DeiT by name all reach the ViT converter exactly."""
    ref = case_vit.timm_reference(variant="avg-norm-first")
    case_vit.save_timm(ref, tmp_path)
    assert _logits_match(ref, convert_timm_model(tmp_path).build())
    plain = case_vit.timm_reference()
    assert _logits_match(plain, convert_timm_model(plain.state_dict(), num_heads=4).build())
    deit = timm.create_model("deit_tiny_distilled_patch16_224", pretrained=False, depth=1)
    assert convert_timm_model(deit.state_dict(), architecture="deit_tiny_distilled_patch16_224").config["dist_token"]


@pytest.mark.parametrize("architecture, named", [
    ("vit_nope", "timm does not know architecture 'vit_nope'"),
    ("resnet18", "timm model class ResNet \\(resnet18\\) is not supported"),
])
def test_timm_entry_point_refuses_unknown_architectures_by_name(architecture, named) -> None:
    with pytest.raises(ConversionError, match=named):
        convert_timm_model({}, architecture=architecture)


def test_a_bare_assert_in_timm_is_named_by_its_line() -> None:
    """timm refuses some options with a bare ``assert`` (no text): the refusal quotes its line."""
    from flops_fit.parity.timm_reference import build_on_meta

    def refuses(global_pool: str) -> None:  # as timm's bare assert (pytest would add text to an assert here)
        if global_pool not in ("", "avg"): raise AssertionError  # noqa: E701

    with pytest.raises(ConversionError, match=r"ref: timm refuses these options: "
                                              r"AssertionError at .*test_parity_convert\.py:\d+: "
                                              r"if global_pool not in \(\"\", \"avg\"\): raise AssertionError.* "
                                              r"\(given: global_pool='max'\)$"):
        build_on_meta("ref", None, {"global_pool": "max"}, {"global_pool": "max"}, refuses, lambda model: None)


def test_timms_refusal_gives_its_reason_first_on_a_short_line() -> None:
    """timm's refusal printed every argument (the weights' too, 400 characters) before its reason;
    the reason now comes first, then only the arguments given, cut short."""
    state = case_vit.timm_reference().state_dict()
    with pytest.raises(ConversionError) as err:
        convert_timm_vit(state, num_heads=5)
    assert str(err.value) == ("timm VisionTransformer: timm refuses these options: dim should be divisible by "
                              "num_heads (given: num_heads=5)")
    with pytest.raises(ConversionError) as err:
        convert_timm_vit(state, num_heads=5, act_layer="gelu", global_pool="token", fc_norm=False, **{
            f"option_{i}": "x" * 20 for i in range(12)})
    text = str(err.value)
    assert text.startswith("timm VisionTransformer: timm refuses these options: ") and len(text) < 350
    assert text.endswith("...)") and "(given: num_heads=5, act_layer='gelu'" in text


@pytest.mark.parametrize("family, head", [
    ("vit", "head.weight"), ("swin", "head.fc.weight"), ("cait", "head.weight"), ("pvt_v2", "head.weight"),
])
def test_timm_folder_whose_classifier_tensors_are_gone_is_refused(family, head, tmp_path) -> None:
    """config.json declares the classes, the weights lack the head: listed as missing, never a
    silently random head (a feature extractor, num_classes=0, still gets a fresh one)."""
    from flops_fit.parity import case_cait, case_pvt_v2, case_swin
    from safetensors.torch import load_file

    reference = {"vit": case_vit.timm_reference, "swin": case_swin.timm_reference,
                 "cait": case_cait.cait_reference, "pvt_v2": case_pvt_v2.pvt_v2_reference}[family]()
    case_vit.save_timm(reference, tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    bias = head.replace("weight", "bias")
    _save({k: v for k, v in tensors.items() if k not in (head, bias)}, tmp_path / "model.safetensors")
    with pytest.raises(ConversionError, match=rf"missing in the reference: {re.escape(head)}, {re.escape(bias)}"):
        convert_timm_model(tmp_path)


def test_weights_holding_nan_or_inf_are_refused_by_name() -> None:
    """A damaged checkpoint with NaN / inf weights converted silently into a model whose every
    output is NaN; each such tensor is now named, through plain, split and packed mappings."""
    ref = case_gpt.gpt2_reference()
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    state["transformer.h.0.mlp.c_fc.weight"][0, :3] = float("nan")
    state["transformer.h.1.attn.c_attn.weight"][1, 1] = float("inf")
    with pytest.raises(ConversionError, match=r"holding NaN or inf: transformer\.h\.0\.mlp\.c_fc\.weight \(3 of "
                                              r"\d+ values\), transformer\.h\.1\.attn\.c_attn\.weight \(1 of \d+"):
        convert_gpt2(state, ref.config.to_dict())
    llama = case_llama.hf_reference()  # q, k, v packed into one of ours
    lstate = {k: v.clone() for k, v in llama.state_dict().items()}
    lstate["model.layers.0.self_attn.k_proj.weight"][0, 0] = float("-inf")
    with pytest.raises(ConversionError, match=r"holding NaN or inf: model\.layers\.0\.self_attn\.k_proj\.weight"):
        convert_llama(lstate, llama.config.to_dict())


@pytest.mark.parametrize("converter, key", [
    ("gpt2", "n_embd"), ("gpt2", "n_positions"), ("llama", "hidden_size"), ("llama", "intermediate_size"),
    ("hf-vit", "num_hidden_layers"), ("llama-attention", "num_attention_heads"),
])
def test_a_config_without_a_size_it_needs_is_refused_by_name(converter, key) -> None:
    """A config.json missing a size raised a bare KeyError from inside the converter."""
    if converter == "gpt2":
        ref, convert = case_gpt.gpt2_reference(), convert_gpt2
    elif converter == "hf-vit":
        ref, convert = case_vit.hf_reference(), convert_hf_vit
    else:
        ref = case_llama.hf_reference()
        convert = convert_llama if converter == "llama" else convert_llama_attention
    config = {k: v for k, v in ref.config.to_dict().items() if k != key}
    with pytest.raises(ConversionError, match=rf": the config lacks {key}; re-save the model with save_pretrained"):
        convert(ref.state_dict(), config)


@pytest.mark.parametrize("model_args, named", [
    ([["num_heads", 4]], r"config.json's model_args must be an object of timm arguments, got list"),
    ({"num_heads": 0}, r"timm VisionTransformer: num_heads=0 is not a number of attention heads"),
], ids=["model-args-a-list", "zero-heads"])
def test_a_damaged_timm_hub_config_is_one_conversion_error(model_args, named, tmp_path) -> None:
    """A config.json whose model_args is not an object raised TypeError from dict.update; zero
    heads raised timm's ZeroDivisionError: both escaped as tracebacks from inside the converter."""
    import json

    case_vit.save_timm(case_vit.timm_reference(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_args": model_args}))
    with pytest.raises(ConversionError, match=named):
        convert_timm_model(tmp_path)


@pytest.mark.parametrize("heads", [0, -2, 2.5, True])
def test_a_vit_head_count_that_is_no_count_is_refused_by_name(heads) -> None:
    """num_heads=0 was taken for no value ("pass num_heads=..." though it was passed), and
    num_heads=-2 converted (timm's assert holds for a negative divisor)."""
    with pytest.raises(ConversionError, match=re.escape(f"timm VisionTransformer: num_heads={heads!r} is not a number "
                                                        "of attention heads (a positive integer that divides")):
        convert_timm_vit(case_vit.timm_reference().state_dict(), num_heads=heads)


@pytest.mark.parametrize("heads, problem", [(0, "is not a number of heads (a positive integer)"),
                                            (-4, "is not a number of heads"), (2.5, "is not a number of heads"),
                                            (3, "does not divide the width 64 into heads")])
def test_head_counts_that_do_not_split_the_width_are_refused_by_the_converters(heads, problem) -> None:
    """A GPT-2 / HF ViT config whose head count does not divide the width failed as 'width=64 is not
    a valid size ... nearest valid sizes: [63, 66]' (the width is the checkpoint's); 0 or -4 as our
    model's OptionError; convert_torch_mha cut num_heads=2.5 to 2 heads."""
    gpt2, vit = case_gpt.gpt2_reference(), case_vit.hf_reference()
    with pytest.raises(ConversionError, match=re.escape(f"HF GPT-2: config n_head={heads!r} {problem}")):
        convert_gpt2(gpt2.state_dict(), {**gpt2.config.to_dict(), "n_head": heads})
    with pytest.raises(ConversionError, match=re.escape(f"HF ViT: config num_attention_heads={heads!r} {problem}")):
        convert_hf_vit(vit.state_dict(), {**vit.config.to_dict(), "num_attention_heads": heads})
    with pytest.raises(ConversionError, match=re.escape(f"torch nn.MultiheadAttention: num_heads={heads!r} {problem}")):
        convert_torch_mha(nn.MultiheadAttention(64, 4, batch_first=True).state_dict(), num_heads=heads)


@pytest.mark.parametrize("width", [0, -64, 64.0])
def test_an_hf_vit_width_that_is_no_width_is_refused_by_name(width) -> None:
    """hidden_size 0 raised a bare ZeroDivisionError from the MLP ratio inside the converter."""
    vit = case_vit.hf_reference()
    with pytest.raises(ConversionError) as err:
        convert_hf_vit(vit.state_dict(), {**vit.config.to_dict(), "hidden_size": width})
    assert str(err.value) == f"HF ViT: config hidden_size={width!r} is not a width (a positive integer)"


def test_gpt2_converter_refuses_another_model_type_by_name() -> None:
    """A GPT-NeoX config (or any other model_type) reached the GPT-2 converter's size reads and
    failed on keys GPT-2 has and it lacks, never saying it is not a GPT-2."""
    transformers_ = pytest.importorskip("transformers")
    config = transformers_.GPTNeoXConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                          intermediate_size=64, vocab_size=50).to_dict()
    with pytest.raises(ConversionError, match=r"HF GPT-2: model_type='gpt_neox' is not supported; it converts 'gpt2'"):
        convert_gpt2({}, config)


@pytest.mark.parametrize("converter, key, width", [
    ("gpt2", "n_embd", 0), ("gpt2", "n_embd", -8), ("gpt2", "n_embd", 64.0),
    ("llama", "hidden_size", 0), ("llama", "hidden_size", -8),
])
def test_a_gpt2_or_llama_width_that_is_no_width_is_refused_by_name(converter, key, width) -> None:
    """n_embd / hidden_size 0 converted and failed only when built, as 'size must be a positive
    integer, got 0', naming neither the key nor the converter."""
    if converter == "gpt2":
        ref, convert, what = case_gpt.gpt2_reference(), convert_gpt2, "HF GPT-2"
    else:
        ref, convert, what = case_llama.hf_reference(), convert_llama, "HF LlamaForCausalLM"
    with pytest.raises(ConversionError) as err:
        convert(ref.state_dict(), {**ref.config.to_dict(), key: width})
    assert str(err.value) == f"{what}: config {key}={width!r} is not a width (a positive integer)"


@pytest.mark.parametrize("key, value", [("num_heads", 2), ("depths", 2), ("num_heads", (2, 0))])
def test_a_swin_stage_list_given_as_one_number_is_refused_by_name(key, value) -> None:
    """num_heads=2 (an int, where timm wants one per stage) gave timm's "'int' object is not
    subscriptable" and nothing about what to pass."""
    from flops_fit.parity import case_swin
    from flops_fit.parity.convert_timm_swin import convert_timm_swin

    with pytest.raises(ConversionError) as err:
        convert_timm_swin(case_swin.timm_reference().state_dict(), img_size=32, **{key: value})
    assert f"timm SwinTransformer: {key}={value!r} is not a list with one number of" in str(err.value)
    assert f"per stage (a positive integer each), e.g. {key}=(2, 4) for two stages" in str(err.value)


_GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 96, "n_positions": 16}
_LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
          "intermediate_size": 96, "vocab_size": 96}


@pytest.mark.parametrize("family, changes, named", [
    ("gpt2", {"layer_norm_epsilon": "1e-5"}, "config layer_norm_epsilon='1e-5' is not a finite number of at least 0"),
    ("gpt2", {"layer_norm_epsilon": None}, "config layer_norm_epsilon=None is not a finite number"),
    ("gpt2", {"layer_norm_epsilon": float("nan")}, "config layer_norm_epsilon=nan is not a finite number"),
    ("gpt2", {"n_layer": 2.5}, "config n_layer=2.5 is not a count (a positive integer)"),
    ("gpt2", {"vocab_size": 0}, "config vocab_size=0 is not a count"),
    ("gpt2", {"n_positions": "16"}, "config n_positions='16' is not a count"),
    ("llama", {"rms_norm_eps": "x"}, "config rms_norm_eps='x' is not a finite number of at least 0"),
    ("llama", {"num_hidden_layers": 2.5}, "config num_hidden_layers=2.5 is not a count"),
    ("llama", {"head_dim": 0}, "config head_dim=0 is not a count"),
    ("llama", {"intermediate_size": -96}, "config intermediate_size=-96 is not a count"),
    ("llama", {"rope_parameters": {"rope_type": "linear"}}, "rope_type='linear' with factor=None (each a number above 0)"),
    ("llama", {"rope_parameters": {"rope_type": "default", "rope_theta": "1e4"}}, "rope_type='default' with rope_theta='1e4'"),
    ("llama", {"model_type": "mistral", "sliding_window": 0}, "sliding_window=0 (a number of tokens above 0, or null)"),
])
def test_config_numbers_that_are_no_numbers_are_refused_by_name(family, changes, named) -> None:
    """float() / int() read the sizes and epsilons: a string eps or a null raised a bare ValueError /
    TypeError, a missing RoPE factor a KeyError, 2.5 layers became 2, head_dim 0 fell back to
    width / heads, and NaN or a 0 window went into the model."""
    from flops_fit.parity.convert_gpt2 import gpt2_config
    from flops_fit.parity.convert_llama import llama_config

    read, base = (gpt2_config, _GPT2) if family == "gpt2" else (llama_config, _LLAMA)
    with pytest.raises(ConversionError, match=re.escape(named)):
        read({**base, **changes})
    assert read(base)["n_layer"] == 2  # the base converts


def test_weights_of_another_architecture_are_named_as_such_in_one_line() -> None:
    """Llama weights given to the GPT-2 converter (with a GPT-2 config) listed 28 missing and 20
    unexpected keys over three lines without saying that they are not GPT-2's; a file that lacks a
    few tensors still lists them."""
    llama = case_llama.hf_reference().state_dict()
    with pytest.raises(ConversionError) as err:
        convert_gpt2(llama, _GPT2)
    assert str(err.value) == (
        f"cannot convert HF GPT-2: these are not HF GPT-2 weights: it finds 1 of the 28 tensors it "
        f"reads (lm_head.weight), and {len(llama) - 1} tensors are not its (keys such as model.embed_tokens.weight, "
        "model.layers.0.input_layernorm.weight, model.layers.0.mlp.down_proj.weight); convert them with the "
        "converter of their kind, or check that the file is the one meant")
    with pytest.raises(ConversionError, match=r"^cannot convert HF LlamaForCausalLM: these are not HF "
                                              r"LlamaForCausalLM weights: it finds 1 of the 21 tensors it reads "
                                              r"\(lm_head\.weight\), and 28 tensors are not its"):
        convert_llama(case_gpt.gpt2_reference().state_dict(), case_llama.hf_reference().config.to_dict())
    with pytest.raises(ConversionError, match=r"^cannot convert HF GPT-2: 1 missing in the reference\n"):
        convert_gpt2({k: v for k, v in case_gpt.gpt2_reference().state_dict().items() if k != "transformer.wpe.weight"},
                     {**case_gpt.TINY, "model_type": "gpt2"})


@pytest.mark.parametrize("family", ["gpt2", "llama-rope-llama3"])
def test_tied_models_saved_by_safetensors_save_model_convert_and_match(family, tmp_path) -> None:
    """safetensors refuses save_file on a tied model's state dict and points to save_model, which keeps
    the head's name alone (lm_head.weight); both converters refused the file as missing the token
    embedding (transformer.wte.weight / model.embed_tokens.weight) that transformers restores by tying."""
    from flops_fit.parity.compare import Side, compare_sides
    from flops_fit.parity.pipeline import call
    from safetensors.torch import load_file, save_model

    if family == "gpt2":
        ref, convert, tokens = case_gpt.gpt2_reference(), convert_gpt2, probe.tokens(2, 12, case_gpt.TINY["vocab_size"])
    else:
        ref, convert, tokens = case_llama.hf_reference(family), convert_llama, probe.tokens(2, 12, 96)
    save_model(ref, str(tmp_path / "model.safetensors"))
    assert "lm_head.weight" in load_file(str(tmp_path / "model.safetensors"))
    ref.config.to_json_file(str(tmp_path / "config.json"))
    results = compare_sides(Side(ref, call), Side(convert(tmp_path).build(), call), [tokens])
    assert [(r.name, r.passed) for r in results] == [("logits", True)]  # within fp32 tolerance
