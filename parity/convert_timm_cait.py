"""timm ``Cait`` weights -> our ``cait``.

As for the ViT: timm itself interprets every option. The reference is built on the meta
device from, lowest priority first, the architecture's defaults, what the tensors show
(width, depths, patch and image size, MLP ratios, heads from the talking-heads mixes,
``qkv_bias``, classes), ``config.json``'s ``model_args`` / ``global_pool`` / ``num_classes``,
and keyword overrides (timm's names); our configuration is then read off the built modules,
and every module or option our ``cait`` does not reproduce is refused by name. What a bare
weights file cannot tell (activation, LayerNorm eps, token or average pooling) is assumed,
listed in ``Converted.assumptions`` and warned about.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from flops_fit.parity.mapping import Converted, KeyMapper, read_source, warn_assumptions
from flops_fit.parity.timm_reference import (
    activation_name,
    affine_layer_norm,
    build_on_meta,
    declared_args,
)

from flops_fit.errors import ConversionError

REFERENCE = "timm Cait"
_TOP_LEVEL_ARGS = ("global_pool", "num_classes")
_WHY = {
    "act_layer": "weights do not record the MLP activation; timm's default is exact GELU",
    "norm_eps": "weights do not record the LayerNorm eps; timm Cait's default is 1e-6",
    "global_pool": "token and average pooling have the same weights; timm Cait's default is 'token'",
}
_SETTERS = {"act_layer": "act_layer=... (e.g. 'gelu_tanh', 'silu')", "norm_eps": "norm_eps=...",
            "global_pool": "global_pool='avg'"}


def convert_timm_cait(source: str | Path | dict[str, Any], *, architecture: str | None = None,
                      **model_args: Any) -> Converted:
    """Convert timm CaiT weights (a file, a timm hub folder, or a state dict) to our ``cait``."""
    tensors, config = read_source(source, None, REFERENCE)
    architecture = architecture or config.get("architecture")
    declared = declared_args(config, _TOP_LEVEL_ARGS, REFERENCE)
    declared.update(model_args)
    norm_eps = declared.pop("norm_eps", None)
    facts = tensor_facts(tensors)
    if "num_heads" in declared and declared["num_heads"] != facts["num_heads"]:  # 3 for 4 failed to build as
        # 'width=64 is not a valid size'; 0 as timm's arithmetic
        raise ConversionError(f"{REFERENCE}: num_heads={declared['num_heads']!r}, but the weights' talking-heads mix "
                              f"(blocks.0.attn.proj_l.weight) has {facts['num_heads']} heads; leave num_heads out")
    assumed = {} if architecture else {k: v for k, v in (("act_layer", "gelu"), ("global_pool", "token"))
                                       if k not in declared}
    if not architecture and "norm_layer" not in declared and norm_eps is None:
        assumed["norm_eps"] = 1e-6
    args = {**facts, **{k: v for k, v in assumed.items() if k != "norm_eps"}, **declared}
    reference = build_reference(architecture, args, declared)
    our = describe_reference(reference)
    if norm_eps is not None:  # not a timm argument: timm sets eps through norm_layer
        our["norm_eps"] = float(norm_eps)
    head = bool(reference.num_classes)  # only a feature extractor (num_classes=0) gets a fresh head
    state = cait_state(tensors, our, head=head)
    fresh = () if head else ("head.weight", "head.bias")
    notes = {k: f"{v!r} (assumed: {_WHY[k]})" for k, v in assumed.items()}
    warn_assumptions(REFERENCE, notes, _SETTERS)
    return Converted("cait", our.pop("width"), our, state, REFERENCE, fresh=fresh, assumptions=notes)


def tensor_facts(tensors: dict[str, Any]) -> dict[str, Any]:
    """timm ``Cait`` arguments read off the tensors' names and shapes."""
    for key in ("pos_embed", "patch_embed.proj.weight", "blocks.0.attn.proj_l.weight", "blocks_token_only.0.attn.q.weight"):
        if key not in tensors:
            raise ConversionError(
                f"{REFERENCE}: {key!r} is missing, so these are not timm CaiT weights (found keys such as "
                f"{sorted(tensors)[:6]})"
            )
    width, in_chans, patch, patch_w = tensors["patch_embed.proj.weight"].shape
    patches = int(tensors["pos_embed"].shape[1])
    side = math.isqrt(patches)
    if patch != patch_w or side * side != patches:
        raise ConversionError(f"{REFERENCE}: only square patches and images are supported")

    mix = tuple(tensors["blocks.0.attn.proj_l.weight"].shape)  # the heads: H x H
    if len(mix) != 2 or mix[0] != mix[1] or width % mix[0]:
        raise ConversionError(f"{REFERENCE}: blocks.0.attn.proj_l.weight is {mix}: the talking-heads mix must be "
                              f"heads x heads, the heads dividing the width {int(width)}")

    def count(prefix: str) -> int:
        return 1 + max(int(k.split(".")[1]) for k in tensors if k.startswith(prefix))

    return {
        "embed_dim": int(width),
        "depth": count("blocks."),
        "depth_token_only": count("blocks_token_only."),
        "num_heads": int(mix[0]),
        "patch_size": int(patch),
        "img_size": int(side * patch),
        "in_chans": int(in_chans),
        "num_classes": int(tensors["head.weight"].shape[0]) if "head.weight" in tensors else 0,
        "mlp_ratio": int(tensors["blocks.0.mlp.fc1.weight"].shape[0]) / int(width),
        "mlp_ratio_token_only": int(tensors["blocks_token_only.0.mlp.fc1.weight"].shape[0]) / int(width),
        "qkv_bias": "blocks.0.attn.qkv.bias" in tensors,
    }


def build_reference(architecture: str | None, args: dict[str, Any], declared: dict[str, Any]) -> Any:
    """The timm model these arguments describe, on the meta device."""
    from timm.layers import get_act_layer
    from timm.models.cait import Cait

    # Cait takes activation classes; timm's names ('gelu', 'gelu_tanh', ...) are looked up
    args, declared = ({**d, "act_layer": get_act_layer(d["act_layer"])} if isinstance(d.get("act_layer"), str) else d
                      for d in (args, declared))

    def check_family(model: Any) -> None:
        if not isinstance(model, Cait):
            raise ConversionError(f"{REFERENCE}: architecture {architecture!r} is not a timm Cait")

    return build_on_meta(REFERENCE, architecture, args, declared, Cait, check_family)


def describe_reference(model: Any) -> dict[str, Any]:
    """Our ``cait`` configuration for a built timm Cait; ConversionError naming every part we
    do not reproduce."""
    import torch.nn as nn
    from timm.layers import Mlp, PatchEmbed
    from timm.models.cait import (
        ClassAttn,
        LayerScaleBlock,
        LayerScaleBlockClassAttn,
        TalkingHeadAttn,
    )

    refused: list[str] = []

    def refuse(cond: bool, what: str) -> None:
        if cond:
            refused.append(what)

    refuse(model.global_pool not in ("token", "avg"), f"global_pool={model.global_pool!r} (no pooling)")
    pe = model.patch_embed
    refuse(type(pe) is not PatchEmbed, f"patch_layer={type(pe).__name__}")
    refuse(not isinstance(getattr(pe, "norm", nn.Identity()), nn.Identity), "a patch-embedding norm")
    refuse(bool(getattr(pe, "dynamic_img_pad", False)), "dynamic_img_pad=True")
    img = tuple(pe.img_size)
    refuse(img[0] != img[1], f"img_size={img} (not square)")
    refuse(pe.proj.bias is None, "a patch embedding without bias")
    norms, acts, mlps = [model.norm], set(), []
    for kind, blocks, block_cls, attn_cls in (("block_layers", model.blocks, LayerScaleBlock, TalkingHeadAttn),
                                              ("block_layers_token", model.blocks_token_only,
                                               LayerScaleBlockClassAttn, ClassAttn)):
        for block in blocks:
            refuse(type(block) is not block_cls, f"{kind}={type(block).__name__}")
            refuse(type(block.attn) is not attn_cls, f"attention {type(block.attn).__name__} (timm's {attn_cls.__name__} "
                                                     "is reproduced)")
            refuse(type(block.mlp) is not Mlp, f"mlp {type(block.mlp).__name__}")
            if type(block.mlp) is Mlp:
                refuse(not isinstance(block.mlp.norm, nn.Identity), "an MLP norm")
                act = activation_name(block.mlp.act)
                refuse(act is None, f"act_layer={type(block.mlp.act).__name__}")
                acts.add(act)
                mlps.append(block.mlp)
            norms += [block.norm1, block.norm2]
    bad = sorted({type(n).__name__ for n in norms if not affine_layer_norm(n)})
    refuse(bool(bad), f"norm_layer={', '.join(bad)} (only affine LayerNorm is reproduced)")
    eps = {n.eps for n in norms if isinstance(n, nn.LayerNorm)}
    refuse(len(eps) > 1, f"LayerNorms with different eps {sorted(eps)}")
    refuse(len(acts) > 1, "blocks with different activations")
    refuse(any(m.fc1.bias is None or m.fc2.bias is None for m in mlps), "MLPs without biases")
    if refused:
        raise ConversionError(f"{REFERENCE}: options our cait does not reproduce: {'; '.join(dict.fromkeys(refused))}")
    block, width = model.blocks[0], int(model.embed_dim)
    token_block = model.blocks_token_only[0]
    return {
        "width": width,
        "depth": len(model.blocks),
        "depth_token_only": len(model.blocks_token_only),
        "num_heads": int(block.attn.num_heads),
        "patch_size": int(pe.proj.kernel_size[0]),
        "image_size": int(img[0]),
        "in_chans": int(pe.proj.in_channels),
        "num_classes": int(model.num_classes) or 1,  # a feature extractor gets one fresh class
        "mlp_ratio": block.mlp.fc1.out_features / width,
        "mlp_ratio_token_only": token_block.mlp.fc1.out_features / width,
        "global_pool": model.global_pool,
        "qkv_bias": block.attn.qkv.bias is not None,
        "norm_eps": float(eps.pop()),
        "act_layer": acts.pop(),
    }


def cait_state(tensors: dict[str, Any], our: dict[str, Any], *, head: bool) -> dict[str, Any]:
    """Map timm keys to ours; ClassAttn's separate q, k, v pack into ``qkv_proj``."""
    m = KeyMapper(tensors, REFERENCE)
    for name in ("pos_embed", "cls_token", "patch_embed.proj.weight", "patch_embed.proj.bias", "norm.weight",
                 "norm.bias"):
        m.map(name, name)
    if head:  # the reference classifies: a missing head is listed
        for p in ("weight", "bias"):
            m.map(f"head.{p}", f"head.{p}")
    biases = ("weight", "bias") if our["qkv_bias"] else ("weight",)
    for prefix, depth, token_only in (("blocks", our["depth"], False),
                                      ("blocks_token_only", our["depth_token_only"], True)):
        for i in range(depth):
            b = f"{prefix}.{i}."
            for name in ("norm1", "norm2", "mlp.fc1", "mlp.fc2", "attn.proj") + (() if token_only else
                                                                                  ("attn.proj_l", "attn.proj_w")):
                ours = "attn.out_proj" if name == "attn.proj" else name
                for p in ("weight", "bias"):
                    m.map(f"{b}{ours}.{p}", f"{b}{name}.{p}")
            for p in biases:
                if token_only:
                    m.concat(f"{b}attn.qkv_proj.{p}", [f"{b}attn.{x}.{p}" for x in "qkv"])
                else:
                    m.map(f"{b}attn.qkv_proj.{p}", f"{b}attn.qkv.{p}")
            m.map(f"{b}ls1.gamma", f"{b}gamma_1")
            m.map(f"{b}ls2.gamma", f"{b}gamma_2")
    return m.finish()
