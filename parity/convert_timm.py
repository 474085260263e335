"""timm ``VisionTransformer`` weights -> our ``vit``.

Reads a ``.safetensors`` file (or a timm hub folder with ``config.json``), builds our
configuration from the reference's weights and config, and maps the keys. Supported:
standard blocks with a class token, QKV bias on or off, ``global_pool`` 'token' or 'avg'
(timm's ``fc_norm`` becomes our ``norm``). Layer scale, QK-norm, register tokens,
``no_embed_class`` and pre-norm stems have keys we have no place for, so they fail as
unexpected keys.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from flops_fit.parity.mapping import Converted, KeyMapper, read_source

from flops_fit.errors import ConversionError

REFERENCE = "timm VisionTransformer"
TIMM_NORM_EPS = 1e-6  # timm ViT builds its LayerNorms with partial(nn.LayerNorm, eps=1e-6)


def convert_timm_vit(
    source: str | Path | dict[str, Any], *, num_heads: int | None = None, architecture: str | None = None
) -> Converted:
    """Convert timm ViT weights (a path or a state dict) to our ``vit``.

    The number of heads is not stored in the weights: pass ``num_heads``, or an
    ``architecture`` (a timm model name such as ``"vit_tiny_patch16_224"``), or a folder whose
    ``config.json`` names one (timm hub layout).
    """
    tensors, config = read_source(source, None, REFERENCE)
    architecture = architecture or config.get("architecture")
    model_args = config.get("model_args") or {}
    num_heads = num_heads or model_args.get("num_heads") or (timm_num_heads(architecture) if architecture else None)
    if not num_heads:
        raise ConversionError(
            f"{REFERENCE}: the weights do not say how many attention heads there are; pass num_heads=... "
            "or architecture='vit_..._patch16_224'"
        )
    our_config = timm_vit_config(tensors, num_heads)
    state = timm_vit_state(tensors, our_config["depth"])
    # num_classes=0 (a feature extractor) has no head: ours gets one fresh class, as for HF ViTModel
    fresh = () if "head.weight" in tensors else ("head.weight", "head.bias")
    return Converted("vit", our_config.pop("width"), our_config, state, REFERENCE, fresh=fresh)


def timm_num_heads(architecture: str) -> int:
    """Read the head count of a timm architecture by building it on the meta device (no weights)."""
    import timm
    import torch

    try:
        with torch.device("meta"):
            model = timm.create_model(architecture, pretrained=False)
    except RuntimeError as exc:
        raise ConversionError(f"{REFERENCE}: timm does not know architecture {architecture!r} ({exc})") from None
    return int(model.blocks[0].attn.num_heads)


def timm_vit_config(tensors: dict[str, Any], num_heads: int) -> dict[str, Any]:
    """Our ``vit`` configuration, read off the reference's tensor shapes."""
    for key in ("cls_token", "pos_embed", "patch_embed.proj.weight", "blocks.0.mlp.fc1.weight"):
        if key not in tensors:
            raise ConversionError(
                f"{REFERENCE}: {key!r} is missing, so these are not standard timm ViT weights with a class "
                f"token (found keys such as {sorted(tensors)[:6]})"
            )
    width, in_chans, patch, patch_w = tensors["patch_embed.proj.weight"].shape
    tokens = tensors["pos_embed"].shape[1] - 1
    side = math.isqrt(tokens)
    if patch != patch_w or side * side != tokens:
        raise ConversionError(
            f"{REFERENCE}: pos_embed has {tokens + 1} positions and patches are {patch}x{patch_w}; only square "
            "images with square patches and a pos_embed that includes the class position are supported "
            "(no_embed_class=True models are not)"
        )
    depth = 1 + max(int(k.split(".")[1]) for k in tensors if k.startswith("blocks."))
    hidden = tensors["blocks.0.mlp.fc1.weight"].shape[0]
    if width % num_heads:
        raise ConversionError(f"{REFERENCE}: width {width} is not divisible by num_heads={num_heads}")
    return {
        "width": int(width),
        "depth": depth,
        "num_heads": int(num_heads),
        "num_kv_heads": int(num_heads),
        "patch_size": int(patch),
        "image_size": int(side * patch),
        "in_chans": int(in_chans),
        "num_classes": int(tensors["head.weight"].shape[0]) if "head.weight" in tensors else 1,
        "mlp_ratio": hidden / width,
        "global_pool": "avg" if "fc_norm.weight" in tensors else "token",
        "qkv_bias": "blocks.0.attn.qkv.bias" in tensors,
        "norm_eps": TIMM_NORM_EPS,
        "gelu": "exact",
    }


def timm_vit_state(tensors: dict[str, Any], depth: int) -> dict[str, Any]:
    """Map timm keys to ours; timm's packed qkv rows are [all q; all k; all v]."""
    m = KeyMapper(tensors, REFERENCE)
    for name in ("cls_token", "pos_embed", "patch_embed.proj.weight", "patch_embed.proj.bias"):
        m.map(name, name)
    # avg pooling: timm's pre-pool norm is Identity and fc_norm (after pooling) is our norm
    final_norm = "fc_norm" if m.has("fc_norm.weight") else "norm"
    for p in ("weight", "bias"):
        m.map(f"norm.{p}", f"{final_norm}.{p}")
        if m.has(f"head.{p}"):
            m.map(f"head.{p}", f"head.{p}")
    for i in range(depth):
        b = f"blocks.{i}."
        for p in ("weight", "bias"):
            for name in ("norm1", "norm2", "mlp.fc1", "mlp.fc2"):
                m.map(f"{b}{name}.{p}", f"{b}{name}.{p}")
            m.map(f"{b}attn.out_proj.{p}", f"{b}attn.proj.{p}")
        qkv = [f"{b}attn.{n}_proj.weight" for n in "qkv"]
        m.split(f"{b}attn.qkv.weight", qkv)
        if m.has(f"{b}attn.qkv.bias"):
            m.split(f"{b}attn.qkv.bias", [k.replace("weight", "bias") for k in qkv])
    return m.finish()
