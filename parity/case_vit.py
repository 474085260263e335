"""Parity cases for ``vit``: timm ``VisionTransformer`` and Hugging Face ViT, DeiT and DINOv2 references.

Tiny configurations (width 64, 4 heads, 2 blocks, 32 px images, patch 8) keep a case well
under a second on CPU; the layout is the same at any size (``vit_*_patch16_224`` key
layouts are checked by the converter tests).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flops_fit.parity import probe
from flops_fit.parity.compare import ParityReport
from flops_fit.parity.convert_hf_vit import convert_hf_vit
from flops_fit.parity.convert_timm import convert_timm_vit
from flops_fit.parity.pipeline import (
    Tamper,
    block_taps,
    call,
    run_model_case,
    save_hf,
    variant_case,
)

TINY = {"embed_dim": 64, "depth": 2, "num_heads": 4, "patch_size": 8, "img_size": 32, "num_classes": 10}
BATCH = 2


# The ViT variants the literature names, each a timm configuration of the tiny model:
# name -> (timm architecture, extra timm arguments).
TIMM_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "token": ("vit_tiny_patch16_224", {}),
    "avg": ("vit_tiny_patch16_224", {"global_pool": "avg"}),  # fc_norm after pooling
    "avg-norm-first": ("vit_tiny_patch16_224", {"global_pool": "avg", "fc_norm": False}),
    "gap": ("vit_tiny_patch16_224", {"class_token": False, "global_pool": "avg"}),
    "deit3": ("vit_tiny_patch16_224", {"init_values": 1e-5, "no_embed_class": True}),  # LayerScale
    "reg-qknorm": ("vit_tiny_patch16_224", {"reg_tokens": 4, "qk_norm": True}),
    "clip": ("vit_tiny_patch16_224", {"pre_norm": True, "act_layer": "quick_gelu"}),
    "silu": ("vit_tiny_patch16_224", {"act_layer": "silu"}),
    "deit-distilled": ("deit_tiny_distilled_patch16_224", {}),
}


def timm_reference(global_pool: str = "token", seed: int = 0, *, variant: str | None = None) -> Any:
    """A randomly initialised timm ViT in the tiny configuration (a named variant, or the
    plain one with ``global_pool``), with probe weights."""
    arch, options = TIMM_VARIANTS[variant] if variant else ("vit_tiny_patch16_224", {"global_pool": global_pool})
    return probe.probe_init_(create_timm(arch, **{**TINY, **options}), seed)


def create_timm(architecture: str, **args: Any) -> Any:
    """``timm.create_model`` with the arguments kept on the model (``case_args``) for ``save_timm``."""
    import timm

    model = timm.create_model(architecture, pretrained=False, **args)
    model.case_args = args
    return model


def save_timm(model: Any, folder: Path) -> None:
    """timm's own hub layout: model.safetensors plus config.json naming the architecture and
    recording every argument the model was created with (``model_args``). timm before 1.0.30
    records no ``model_args`` (seen with 1.0.29 on the GPU machine): then the arguments the case
    built the model with are added as later timm writes them, so that the folder describes the
    tiny model whatever timm is installed (without them it names only the architecture)."""
    from timm.models import save_for_hf

    save_for_hf(model, str(folder), safe_serialization=True)
    config_file = Path(folder) / "config.json"
    config = json.loads(config_file.read_text())
    if "model_args" not in config:
        config["model_args"] = model.case_args
        config_file.write_text(json.dumps(config, indent=2))


def timm_vit(device: str = "cpu", dtype: str = "float32", *, global_pool: str = "token", variant: str | None = None,
             overrides: dict | None = None, tamper: Tamper | None = None) -> ParityReport:
    """timm ViT (a variant of ``TIMM_VARIANTS``, from its hub folder) -> our ``vit``."""
    variant = variant or global_pool
    return run_model_case(
        case="timm-vit" + ("" if variant == "token" else f"-{variant}"), model="vit",
        reference=f"timm {TIMM_VARIANTS[variant][0]} layout, {TIMM_VARIANTS[variant][1] or 'defaults'}",
        ref_module=timm_reference(variant=variant), save=save_timm, convert=convert_timm_vit,
        inputs=[probe.images(BATCH, 3, TINY["img_size"])], ref_forward=call, our_forward=call,
        taps=block_taps(TINY["depth"], "blocks.{i}", "blocks.{i}.attn"),
        device=device, dtype=dtype, overrides=overrides, tamper=tamper,
    )


def save_bare(model: Any, folder: Path) -> None:
    """Only the weights (``model.safetensors``, no config.json): what the converter must assume."""
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))


def timm_vit_bare(device: str = "cpu", dtype: str = "float32", *, overrides: dict | None = None,
                  tamper: Tamper | None = None) -> ParityReport:
    """A bare timm ViT weights file (heads given, the rest assumed) -> our ``vit``: timm's
    defaults (exact GELU, eps 1e-6, token pooling) are what the converter assumes."""
    return run_model_case(
        case="timm-vit-bare", model="vit", reference="timm vit_tiny_patch16_224 layout, bare weights file",
        ref_module=timm_reference(), save=save_bare,
        convert=lambda folder: convert_timm_vit(folder / "model.safetensors", num_heads=TINY["num_heads"]),
        inputs=[probe.images(BATCH, 3, TINY["img_size"])], ref_forward=call, our_forward=call,
        taps=block_taps(TINY["depth"], "blocks.{i}", "blocks.{i}.attn"),
        device=device, dtype=dtype, overrides=overrides, tamper=tamper,
    )


def _variant_case(variant: str):
    return variant_case(timm_vit, variant, f"timm ViT variant {variant!r} ({TIMM_VARIANTS[variant]}) -> our ``vit``.")


timm_vit_avg = _variant_case("avg")
timm_vit_avg_norm_first = _variant_case("avg-norm-first")
timm_vit_gap = _variant_case("gap")
timm_vit_deit3 = _variant_case("deit3")
timm_vit_reg_qknorm = _variant_case("reg-qknorm")
timm_vit_clip = _variant_case("clip")
timm_vit_silu = _variant_case("silu")
timm_deit_distilled = _variant_case("deit-distilled")


HF_TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 32, "patch_size": 8,
           "num_labels": 10}
_HF_MLP = {"intermediate_size": 256}  # ViT / DeiT; DINOv2 sizes its MLP by mlp_ratio (default 4)

# The Hugging Face ViT family, each a tiny configuration: name -> (transformers model class,
# config class, extra config, prefix of its blocks and final norm in memory).
HF_VARIANTS: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "vit": ("ViTForImageClassification", "ViTConfig", _HF_MLP, "vit."),
    "vit-backbone": ("ViTModel", "ViTConfig", _HF_MLP, ""),
    "deit": ("DeiTForImageClassification", "DeiTConfig", {**_HF_MLP, "qkv_bias": False}, "deit."),
    "deit-distilled": ("DeiTForImageClassificationWithTeacher", "DeiTConfig", _HF_MLP, "deit."),
    "deit-backbone": ("DeiTModel", "DeiTConfig", _HF_MLP, ""),
    "dinov2": ("Dinov2Model", "Dinov2Config", {}, ""),
    "dinov2-registers": ("Dinov2WithRegistersModel", "Dinov2WithRegistersConfig", {"num_register_tokens": 4}, ""),
}


def hf_reference(variant: str = "vit", seed: int = 0) -> Any:
    """A randomly initialised HF ViT-family model (eager attention, so hooks see the plain
    path), probe weights (LayerScale gammas ~0.1, so ignoring them shows)."""
    import transformers

    model_class, config_class, extra, _ = HF_VARIANTS[variant]
    config = getattr(transformers, config_class)(**HF_TINY, **extra)
    model = getattr(transformers, model_class)(config)
    model.set_attn_implementation("eager")
    return probe.probe_init_(model, seed)


def _hf_taps(variant: str) -> dict[str, tuple[str, str]]:
    """Each block's attention output and output, then the final norm (all tokens)."""
    prefix = HF_VARIANTS[variant][3]
    blocks = "encoder.layer.{i}" if variant.startswith("dinov2") else prefix + "layers.{i}"
    taps = block_taps(HF_TINY["num_hidden_layers"], blocks, blocks + ".attention")
    return {**taps, "norm": (prefix + "layernorm", "norm")}


def _features(model: Any, inputs: Any) -> Any:
    return model.norm(model.forward_features(*inputs))


def hf_vit(device: str = "cpu", dtype: str = "float32", *, variant: str = "vit", overrides: dict | None = None,
           tamper: Tamper | None = None) -> ParityReport:
    """An HF ViT-family model (``save_pretrained`` folder, on-disk names) -> our ``vit``:
    a classifier's logits, or a backbone's (``*Model``) final-norm token features."""
    model_class = HF_VARIANTS[variant][0]
    backbone = model_class.endswith("Model")
    return run_model_case(
        case=f"hf-{variant}", model="vit", reference=f"transformers {model_class}",
        ref_module=hf_reference(variant), save=save_hf, convert=convert_hf_vit,
        inputs=[probe.images(BATCH, 3, HF_TINY["image_size"])], ref_forward=call,
        our_forward=_features if backbone else call, taps=_hf_taps(variant), device=device, dtype=dtype,
        overrides=overrides, tamper=tamper, output_name="features" if backbone else "logits",
    )


def _hf_case(variant: str):
    return variant_case(hf_vit, variant, f"transformers {HF_VARIANTS[variant][0]} -> our ``vit``.")


hf_vit_backbone = _hf_case("vit-backbone")
hf_deit = _hf_case("deit")
hf_deit_distilled = _hf_case("deit-distilled")
hf_deit_backbone = _hf_case("deit-backbone")
hf_dinov2 = _hf_case("dinov2")
hf_dinov2_registers = _hf_case("dinov2-registers")
