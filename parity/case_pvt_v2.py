"""Parity cases for ``pvt_v2``: timm ``PyramidVisionTransformerV2`` from its hub folder,
through ``convert_timm_model`` (32 px images, given as ``image_size``: the weights do not say).

Tiny configurations: stage widths 16, 32, 80, 128 (1, 2, 5, 8 heads), depths 1, 1, 2, 1;
spatial reduction 4, 2, 1, 1 (stage 1's 8 x 8 map reads a 2 x 2 one), or ``linear`` attention
(pooled to 7 x 7, a 1x1 convolution and GELU; an extra ReLU in the MLP).
"""

from __future__ import annotations

from typing import Any

from flops_fit.parity import probe
from flops_fit.parity.case_vit import create_timm, save_timm
from flops_fit.parity.compare import ParityReport
from flops_fit.parity.convert_timm import convert_timm_model
from flops_fit.parity.pipeline import Tamper, call, run_model_case, variant_case

IMAGE_SIZE = 32
TINY = {"embed_dims": (16, 32, 80, 128), "num_heads": (1, 2, 5, 8), "depths": (1, 1, 2, 1),
        "sr_ratios": (4, 2, 1, 1), "num_classes": 10}
BATCH = 2

VARIANTS: dict[str, dict[str, Any]] = {
    "sr": {},
    "linear": {"linear": True, "qkv_bias": False},
}


def pvt_v2_reference(variant: str = "sr", seed: int = 0) -> Any:
    return probe.probe_init_(create_timm("pvt_v2_b0", **TINY, **VARIANTS[variant]), seed)


def taps() -> dict[str, tuple[str, str]]:
    """Per stage: each block's attention output and output, then the stage (after its norm)."""
    found: dict[str, tuple[str, str]] = {}
    for i, depth in enumerate(TINY["depths"]):
        for j in range(depth):
            for name in (f"stages.{i}.blocks.{j}.attn", f"stages.{i}.blocks.{j}"):
                found[name] = (name, name)
        found[f"stages.{i}"] = (f"stages.{i}", f"stages.{i}")
    return found


def timm_pvt_v2(device: str = "cpu", dtype: str = "float32", *, variant: str = "sr", overrides: dict | None = None,
                tamper: Tamper | None = None) -> ParityReport:
    """timm ``PyramidVisionTransformerV2`` (hub folder) -> our ``pvt_v2``."""
    return run_model_case(
        case="timm-pvt-v2" + ("" if variant == "sr" else f"-{variant}"), model="pvt_v2",
        reference=f"timm pvt_v2_b0 layout, {VARIANTS[variant] or 'spatial reduction'}",
        ref_module=pvt_v2_reference(variant), save=save_timm,
        convert=lambda folder: convert_timm_model(folder, image_size=IMAGE_SIZE),
        inputs=[probe.images(BATCH, 3, IMAGE_SIZE)], ref_forward=call, our_forward=call, taps=taps(),
        device=device, dtype=dtype, overrides=overrides, tamper=tamper,
    )


timm_pvt_v2_linear = variant_case(timm_pvt_v2, "linear", "timm PVT v2 with linear spatial-reduction attention, no qkv bias.")
