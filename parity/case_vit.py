"""Parity cases for ``vit``: timm ``VisionTransformer`` and Hugging Face ViT references.

Tiny configurations (width 64, 4 heads, 2 blocks, 32 px images, patch 8) keep a case well
under a second on CPU; the layout is the same at any size (``vit_*_patch16_224`` key
layouts are checked by the converter tests).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flops_fit.parity import probe
from flops_fit.parity.compare import ParityReport
from flops_fit.parity.convert_hf_vit import convert_hf_vit
from flops_fit.parity.convert_timm import convert_timm_vit
from flops_fit.parity.pipeline import Tamper, block_taps, call, run_model_case, save_hf

TINY = {"embed_dim": 64, "depth": 2, "num_heads": 4, "patch_size": 8, "img_size": 32, "num_classes": 10}
BATCH = 2


def timm_reference(global_pool: str = "token", seed: int = 0) -> Any:
    """A randomly initialised timm ViT in the tiny configuration, with probe weights."""
    import timm

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, global_pool=global_pool, **TINY)
    return probe.probe_init_(model, seed)


def save_timm(model: Any, folder: Path) -> None:
    """timm's own hub layout: model.safetensors plus config.json naming the architecture."""
    from timm.models import save_for_hf

    save_for_hf(model, str(folder), model_args={"num_heads": TINY["num_heads"]}, safe_serialization=True)


def timm_vit(device: str = "cpu", dtype: str = "float32", *, global_pool: str = "token",
             overrides: dict | None = None, tamper: Tamper | None = None) -> ParityReport:
    """timm ViT (class-token or average pooling) -> our ``vit``."""
    suffix = "" if global_pool == "token" else f"-{global_pool}"
    return run_model_case(
        case=f"timm-vit{suffix}", model="vit", reference=f"timm vit_tiny_patch16_224 layout, global_pool={global_pool}",
        ref_module=timm_reference(global_pool), save=save_timm, convert=convert_timm_vit,
        inputs=[probe.images(BATCH, 3, TINY["img_size"])], ref_forward=call, our_forward=call,
        taps=block_taps(TINY["depth"], "blocks.{i}", "blocks.{i}.attn"),
        device=device, dtype=dtype, overrides=overrides, tamper=tamper,
    )


def timm_vit_avg(device: str = "cpu", dtype: str = "float32", **kwargs: Any) -> ParityReport:
    """timm ViT with ``global_pool='avg'`` (its ``fc_norm`` after pooling) -> our ``vit``."""
    return timm_vit(device, dtype, global_pool="avg", **kwargs)


HF_TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256,
           "image_size": 32, "patch_size": 8, "num_labels": 10}


def hf_reference(classifier: bool = True, seed: int = 0) -> Any:
    """A randomly initialised HF ViT (eager attention, so hooks see the plain path), probe weights."""
    import transformers

    config = transformers.ViTConfig(**HF_TINY)
    cls = transformers.ViTForImageClassification if classifier else transformers.ViTModel
    model = cls(config)
    model.set_attn_implementation("eager")
    return probe.probe_init_(model, seed)


def _hf_taps(prefix: str) -> dict[str, tuple[str, str]]:
    return block_taps(HF_TINY["num_hidden_layers"], prefix + "layers.{i}", prefix + "layers.{i}.attention")


def hf_vit(device: str = "cpu", dtype: str = "float32", *, overrides: dict | None = None,
           tamper: Tamper | None = None) -> ParityReport:
    """HF ``ViTForImageClassification`` (save_pretrained folder, on-disk names) -> our ``vit``."""
    return run_model_case(
        case="hf-vit", model="vit", reference="transformers ViTForImageClassification",
        ref_module=hf_reference(), save=save_hf, convert=convert_hf_vit,
        inputs=[probe.images(BATCH, 3, HF_TINY["image_size"])], ref_forward=call, our_forward=call,
        taps=_hf_taps("vit."), device=device, dtype=dtype, overrides=overrides, tamper=tamper,
    )


def _features(model: Any, inputs: Any) -> Any:
    return model.norm(model.forward_features(*inputs))


def hf_vit_backbone(device: str = "cpu", dtype: str = "float32", *, overrides: dict | None = None,
                    tamper: Tamper | None = None) -> ParityReport:
    """HF ``ViTModel`` (a backbone with a pooler) -> our ``vit``: final-norm token features."""
    return run_model_case(
        case="hf-vit-backbone", model="vit", reference="transformers ViTModel (last_hidden_state)",
        ref_module=hf_reference(classifier=False), save=save_hf, convert=convert_hf_vit,
        inputs=[probe.images(BATCH, 3, HF_TINY["image_size"])], ref_forward=call, our_forward=_features,
        taps=_hf_taps(""), device=device, dtype=dtype, overrides=overrides, tamper=tamper,
        output_name="features",
    )
