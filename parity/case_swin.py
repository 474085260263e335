"""Parity cases for ``swin``: timm ``SwinTransformer`` references.

Tiny configurations (width 32, 32 px images, patch 2: a 16 x 16 grid, windows of 4) keep a
case around a second on CPU while every Swin mechanism binds: stage 0 has 16 windows and its
second block shifts them (so the shift mask separates the rolled-around regions), patch
merging halves the grid, and the variants add a stage as small as its window (one window, no
shift), per-stage windows, ``always_partition`` and no qkv bias. The reference's relative
position bias tables are drawn at scale 1 (trained tables reach several units; the probe's
0.02 would let a missing bias pass in bf16).
"""

from __future__ import annotations

from typing import Any

import torch
from flops_fit.parity import probe
from flops_fit.parity.case_vit import create_timm, save_bare, save_timm
from flops_fit.parity.compare import ParityReport
from flops_fit.parity.convert_timm import convert_timm_model
from flops_fit.parity.pipeline import Tamper, call, run_model_case, variant_case

TINY = {"embed_dim": 32, "depths": (2, 2), "num_heads": (2, 4), "window_size": 4, "patch_size": 2, "img_size": 32,
        "num_classes": 10}
BATCH = 2

# name -> (timm architecture, arguments over TINY)
TIMM_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "swin": ("swin_tiny_patch4_window7_224", {}),
    # stage 1: 8 x 8 is one window of 8, no shift; stage 2: 4 x 4 < 8, the window clips to 4
    "whole-stage-window": ("swin_tiny_patch4_window7_224", {"depths": (2, 2, 2), "num_heads": (1, 2, 4),
                                                            "window_size": 8}),
    # Swin-S3's per-stage windows; the last stage keeps its window and shift (always_partition)
    "s3-options": ("swin_s3_tiny_224", {"depths": (2, 2, 2), "num_heads": (1, 2, 4), "window_size": (4, 2, 4),
                                        "always_partition": True, "qkv_bias": False, "mlp_ratio": 2.0}),
}


def timm_reference(variant: str = "swin", seed: int = 0) -> Any:
    """A randomly initialised timm Swin in a tiny configuration, with probe weights and
    relative position bias tables ~ N(0, 1)."""
    arch, options = TIMM_VARIANTS[variant]
    model = probe.probe_init_(create_timm(arch, **{**TINY, **options}), seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("relative_position_bias_table"):
                p.copy_(torch.randn(p.shape, generator=g))
    return model


def swin_taps(depths: tuple[int, ...]) -> dict[str, tuple[str, str]]:
    """In forward order: the patch embedding, then per stage its patch merging and each block's
    window attention and output, then the final norm (timm and ours share these paths)."""
    names = ["patch_embed"]
    for s, depth in enumerate(depths):
        names += [f"layers.{s}.downsample"] if s else []
        for i in range(depth):
            names += [f"layers.{s}.blocks.{i}.attn", f"layers.{s}.blocks.{i}"]
    return {name: (name, name) for name in [*names, "norm"]}


def _depths(variant: str) -> tuple[int, ...]:
    return TIMM_VARIANTS[variant][1].get("depths", TINY["depths"])


def timm_swin(device: str = "cpu", dtype: str = "float32", *, variant: str = "swin", overrides: dict | None = None,
              tamper: Tamper | None = None, setup=None) -> ParityReport:
    """timm Swin (a variant of ``TIMM_VARIANTS``, from its hub folder through
    ``convert_timm_model``) -> our ``swin``. ``setup(ours)`` edits our built model (controls)."""
    arch, options = TIMM_VARIANTS[variant]
    return run_model_case(
        case="timm-swin" + ("" if variant == "swin" else f"-{variant}"), model="swin",
        reference=f"timm {arch} layout, {options or 'tiny defaults'}",
        ref_module=timm_reference(variant), save=save_timm, convert=convert_timm_model,
        inputs=[probe.images(BATCH, 3, TINY["img_size"])], ref_forward=call, our_forward=call,
        taps=swin_taps(_depths(variant)), device=device, dtype=dtype, overrides=overrides, tamper=tamper,
        setup=setup,
    )


def timm_swin_bare(device: str = "cpu", dtype: str = "float32", *, overrides: dict | None = None,
                   tamper: Tamper | None = None) -> ParityReport:
    """A bare timm Swin weights file (image size given; heads and windows read off the bias
    tables; eps and pooling assumed) -> our ``swin``."""
    return run_model_case(
        case="timm-swin-bare", model="swin", reference="timm swin_tiny_patch4_window7_224 layout, bare weights file",
        ref_module=timm_reference(), save=save_bare,
        convert=lambda folder: convert_timm_model(folder / "model.safetensors", img_size=TINY["img_size"]),
        inputs=[probe.images(BATCH, 3, TINY["img_size"])], ref_forward=call, our_forward=call,
        taps=swin_taps(TINY["depths"]), device=device, dtype=dtype, overrides=overrides, tamper=tamper,
    )


def _variant_case(variant: str):
    return variant_case(timm_swin, variant, f"timm Swin variant {variant!r} ({TIMM_VARIANTS[variant]}) -> our ``swin``.")


timm_swin_whole_stage_window = _variant_case("whole-stage-window")
timm_swin_s3_options = _variant_case("s3-options")

