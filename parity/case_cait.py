"""Parity cases for ``cait``: timm ``Cait`` from its hub folder, through ``convert_timm_model``.

Tiny configurations (width 64, 4 heads, 2 self-attention + 2 class-attention blocks, 32 px
images, patch 8). LayerScale gammas get probe values (~0.02 scale would hide a missing
gamma; ``probe_init_`` gives free parameters 0.02 N(0, 1), so they are set to 1 + N(0, 0.1)
here), so each branch contributes and a dropped LayerScale shows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flops_fit.parity import probe
from flops_fit.parity.case_vit import create_timm, save_timm
from flops_fit.parity.compare import ParityReport
from flops_fit.parity.convert_timm import convert_timm_model
from flops_fit.parity.pipeline import Tamper, block_taps, call, run_model_case, variant_case

TINY = {"embed_dim": 64, "depth": 2, "depth_token_only": 2, "num_heads": 4, "patch_size": 8, "img_size": 32,
        "num_classes": 10}
BATCH = 2

# name -> extra timm arguments of cait_xxs24_224 in the tiny configuration
VARIANTS: dict[str, dict[str, Any]] = {
    "token": {},
    "avg": {"global_pool": "avg", "qkv_bias": False, "mlp_ratio_token_only": 2.0},
}


def cait_reference(variant: str = "token", seed: int = 0) -> Any:
    """A randomly initialised tiny timm CaiT with probe weights (LayerScale gammas near 1)."""
    import torch

    model = probe.probe_init_(create_timm("cait_xxs24_224", **TINY, **VARIANTS[variant]), seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "gamma" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
    return model


def taps() -> dict[str, tuple[str, str]]:
    """Each self-attention block's attention output and output, then each class-attention
    block's attention output (the class token's, (B, 1, C))."""
    found = block_taps(TINY["depth"], "blocks.{i}", "blocks.{i}.attn")
    for i in range(TINY["depth_token_only"]):
        name = f"blocks_token_only.{i}.attn"
        found[name] = (name, name)
    return found


def timm_cait(device: str = "cpu", dtype: str = "float32", *, variant: str = "token", overrides: dict | None = None,
              tamper: Tamper | None = None, setup: Callable[[Any], None] | None = None) -> ParityReport:
    """timm ``Cait`` (hub folder: config.json + model.safetensors) -> our ``cait``; ``setup``
    rewires our built model (negative controls)."""
    return run_model_case(
        case="timm-cait" + ("" if variant == "token" else f"-{variant}"), model="cait",
        reference=f"timm cait_xxs24_224 layout, {VARIANTS[variant] or 'defaults'}",
        ref_module=cait_reference(variant), save=save_timm, convert=convert_timm_model,
        inputs=[probe.images(BATCH, 3, TINY["img_size"])], ref_forward=call, our_forward=call, taps=taps(),
        device=device, dtype=dtype, overrides=overrides, tamper=tamper, setup=setup,
    )


timm_cait_avg = variant_case(timm_cait, "avg", "timm Cait, average pooling, no qkv bias, class-attention MLP ratio 2.")
