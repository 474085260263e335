"""timm ``VisionTransformer`` (and DeiT's ``VisionTransformerDistilled``) weights -> our ``vit``.

Every option the source declares is read by timm itself: the converter builds the reference
on the meta device (no weights, no memory) from, lowest priority first,

1. the named architecture's own defaults (``architecture=`` or ``config.json``'s),
2. what the tensors show (depth, width, patch and image size, MLP ratio, biases, class /
   register / distillation tokens, LayerScale, QK-norm, pre-norm, ``fc_norm``, ...),
3. ``config.json``'s ``model_args`` and its top-level ``global_pool`` / ``num_classes``,
4. keyword overrides (timm's names: ``global_pool="avg"``, ``fc_norm=False``,
   ``act_layer="silu"``, ``num_heads=6``, ...),

then reads our configuration off the built modules, refusing by name every module or option
our ``vit`` does not reproduce (attention pooling ``map``, EVA / RoPE ViTs, ``final_norm=False``,
a non-LayerNorm norm, ...). What a bare weights file cannot tell (activation, LayerNorm eps,
pooling when the final norm sits before it) is assumed, stated in ``Converted.assumptions`` and
warned about (``ConversionAssumptionWarning``), naming the argument that sets each.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from flops_fit.parity.convert_timm_cait import convert_timm_cait
from flops_fit.parity.convert_timm_pvt_v2 import convert_timm_pvt_v2
from flops_fit.parity.convert_timm_swin import convert_timm_swin
from flops_fit.parity.mapping import Converted, KeyMapper, read_source, warn_assumptions
from flops_fit.parity.timm_reference import activation_name, build_on_meta, declared_args

from flops_fit.errors import ConversionError

REFERENCE = "timm VisionTransformer"
TIMM_NORM_EPS = 1e-6  # timm ViT's LayerNorm default
# config.json's top-level keys that are model arguments (timm's hub config)
_TOP_LEVEL_ARGS = ("global_pool", "num_classes")


def convert_timm_vit(
    source: str | Path | dict[str, Any], *, num_heads: int | None = None, architecture: str | None = None,
    **model_args: Any,
) -> Converted:
    """Convert timm ViT weights (a file, a timm hub folder, or a state dict) to our ``vit``.

    The number of heads is not stored in the weights: it comes from ``num_heads``, an
    ``architecture`` (a timm model name such as ``"vit_tiny_patch16_224"``), or a folder whose
    ``config.json`` names one. ``model_args`` override any timm ``VisionTransformer`` argument.
    """
    tensors, config = read_source(source, None, REFERENCE)
    architecture = architecture or config.get("architecture")
    declared = declared_args(config, _TOP_LEVEL_ARGS, REFERENCE)
    if num_heads is not None:
        declared["num_heads"] = num_heads
    declared.update(model_args)
    heads = declared.get("num_heads")
    if "num_heads" in declared and (isinstance(heads, bool) or not isinstance(heads, int) or heads <= 0):
        raise ConversionError(f"{REFERENCE}: num_heads={heads!r} is not a number of attention heads (a positive "
                              "integer that divides the width); pass the checkpoint's, or architecture='vit_...'")
    facts = tensor_facts(tensors)
    assumptions = {} if architecture else _assume(facts, declared)
    if not architecture and "num_heads" not in declared:
        raise ConversionError(
            f"{REFERENCE}: the weights do not say how many attention heads there are; pass num_heads=... "
            "or architecture='vit_..._patch16_224'"
        )
    args = {**facts, **assumptions, **declared}
    reference = build_reference(architecture, args, declared)
    our = describe_reference(reference)
    if "norm_eps" in declared:  # not a timm argument (timm sets eps through norm_layer)
        our["norm_eps"] = float(declared["norm_eps"])
    head = bool(reference.num_classes)  # only a feature extractor (num_classes=0) gets a fresh head
    state = timm_vit_state(tensors, our, head=head)
    fresh = () if head else tuple(f"{h}.{p}" for h in ("head", "head_dist") for p in ("weight", "bias"))
    notes = {k: f"{v!r} (assumed: {_WHY[k]})" for k, v in assumptions.items()}
    warn_assumptions(REFERENCE, notes, _SETTERS)
    return Converted("vit", our.pop("width"), our, state, REFERENCE, fresh=fresh, assumptions=notes)


_WHY = {
    "act_layer": "weights do not record the MLP activation; timm's default is exact GELU",
    "norm_eps": "weights do not record the LayerNorm eps; timm ViT's default is 1e-6",
    "global_pool": "weights cannot tell token pooling from global_pool='avg' with fc_norm=False "
                   "(or avg from max pooling)",
}

# How a caller sets each assumed option instead (keyword arguments of convert_timm_vit).
_SETTERS = {
    "act_layer": "act_layer=... (e.g. 'gelu_tanh', 'silu', 'quick_gelu')",
    "norm_eps": "norm_eps=...",
    "global_pool": "global_pool=... (with fc_norm=...)",
}


def _assume(facts: dict[str, Any], declared: dict[str, Any]) -> dict[str, Any]:
    """What a bare weights file cannot tell, with timm's defaults; declared values win."""
    assumed = {"act_layer": "gelu", "global_pool": "token" if facts["class_token"] and not facts["fc_norm"] else "avg"}
    out = {k: v for k, v in assumed.items() if k not in declared}
    if "norm_layer" not in declared and "norm_eps" not in declared:
        out["norm_eps"] = TIMM_NORM_EPS  # not a timm argument: recorded, checked against the build
    return out


def tensor_facts(tensors: dict[str, Any]) -> dict[str, Any]:
    """timm ``VisionTransformer`` arguments read off the tensors' names and shapes."""
    for key in ("pos_embed", "patch_embed.proj.weight", "blocks.0.mlp.fc1.weight"):
        if key not in tensors:
            raise ConversionError(
                f"{REFERENCE}: {key!r} is missing, so these are not timm ViT weights with a learned position "
                f"embedding (found keys such as {sorted(tensors)[:6]})"
            )
    width, in_chans, patch, patch_w = tensors["patch_embed.proj.weight"].shape
    if patch != patch_w:
        raise ConversionError(f"{REFERENCE}: patches are {patch}x{patch_w}; only square patches are supported")
    class_token, dist = "cls_token" in tensors, "dist_token" in tensors
    reg = int(tensors["reg_token"].shape[1]) if "reg_token" in tensors else 0
    prefix = int(class_token) + int(dist) + reg
    positions = int(tensors["pos_embed"].shape[1])
    no_embed_class = prefix > 0 and math.isqrt(positions) ** 2 == positions and (
        math.isqrt(positions - prefix) ** 2 != positions - prefix)
    patches = positions if no_embed_class or not prefix else positions - prefix
    side = math.isqrt(patches)
    if side * side != patches:
        raise ConversionError(
            f"{REFERENCE}: pos_embed has {positions} positions for {prefix} prefix tokens; only square "
            "images are supported"
        )
    hidden = int(tensors["blocks.0.mlp.fc1.weight"].shape[0])
    facts = {
        "embed_dim": int(width),
        "depth": 1 + max(int(k.split(".")[1]) for k in tensors if k.startswith("blocks.")),
        "patch_size": int(patch),
        "img_size": int(side * patch),
        "in_chans": int(in_chans),
        "num_classes": int(tensors["head.weight"].shape[0]) if "head.weight" in tensors else 0,
        "mlp_ratio": hidden / int(width),
        "qkv_bias": "blocks.0.attn.qkv.bias" in tensors,
        "proj_bias": "blocks.0.attn.proj.bias" in tensors,
        "qk_norm": "blocks.0.attn.q_norm.weight" in tensors,
        "init_values": 1.0 if "blocks.0.ls1.gamma" in tensors else None,  # the value only initialises
        "class_token": class_token,
        "reg_tokens": reg,
        "no_embed_class": no_embed_class,
        "pre_norm": "norm_pre.weight" in tensors,
        "fc_norm": "fc_norm.weight" in tensors,
    }
    if dist:
        facts["distilled"] = True
    return facts


def build_reference(architecture: str | None, args: dict[str, Any], declared: dict[str, Any]) -> Any:
    """The timm model these arguments describe, built on the meta device."""
    from timm.models.deit import VisionTransformerDistilled
    from timm.models.vision_transformer import VisionTransformer

    args = dict(args)
    args.pop("norm_eps", None)
    default = VisionTransformerDistilled if args.pop("distilled", False) else VisionTransformer
    return build_on_meta(REFERENCE, architecture, args, declared, default, _check_family)


def _check_family(model: Any) -> None:
    from timm.models.deit import VisionTransformerDistilled
    from timm.models.vision_transformer import VisionTransformer

    if type(model) not in (VisionTransformer, VisionTransformerDistilled):
        raise ConversionError(
            f"{REFERENCE}: timm model class {type(model).__name__} is not supported (only VisionTransformer and "
            "DeiT's VisionTransformerDistilled; EVA / RoPE ViTs, Swin, BEiT and other families are refused)"
        )


def describe_reference(model: Any) -> dict[str, Any]:
    """Our ``vit`` configuration for a built timm ViT; ConversionError naming every part we
    do not reproduce."""
    import torch.nn as nn
    from timm.layers import Attention, LayerScale, Mlp, PatchEmbed
    from timm.models.deit import VisionTransformerDistilled
    from timm.models.vision_transformer import Block

    _check_family(model)
    refused: list[str] = []

    def refuse(cond: bool, what: str) -> None:
        if cond:
            refused.append(what)

    refuse(model.attn_pool is not None, f"global_pool={model.global_pool!r} (attention pooling)")
    refuse(model.attn_pool is None and model.global_pool not in ("token", "avg"), f"global_pool={model.global_pool!r}")
    refuse(model.pool_include_prefix, "pool_include_prefix=True")
    refuse(model.dynamic_img_size, "dynamic_img_size=True")
    refuse(model.pos_embed is None, "pos_embed='none'")
    pe = model.patch_embed
    refuse(type(pe) is not PatchEmbed, f"embed_layer={type(pe).__name__}")
    refuse(not isinstance(getattr(pe, "norm", nn.Identity()), nn.Identity), "embed_norm_layer")
    refuse(bool(getattr(pe, "dynamic_img_pad", False)), "dynamic_img_pad=True")
    img = tuple(pe.img_size)
    refuse(img[0] != img[1], f"img_size={img} (not square)")
    norms: list[Any] = []
    acts, qk_norm, layer_scale = set(), set(), set()
    for block in model.blocks:
        refuse(type(block) is not Block, f"block_fn={type(block).__name__}")
        if type(block) is not Block:
            break
        attn, mlp = block.attn, block.mlp
        refuse(type(attn) is not Attention, f"attn_layer={type(attn).__name__}")
        refuse(type(mlp) is not Mlp, f"mlp_layer={type(mlp).__name__}")
        refuse(not isinstance(getattr(attn, "norm", nn.Identity()), nn.Identity), "scale_attn_norm=True")
        refuse(not isinstance(getattr(mlp, "norm", nn.Identity()), nn.Identity), "scale_mlp_norm=True")
        act = activation_name(getattr(mlp, "act", None))
        refuse(act is None, f"act_layer={type(getattr(mlp, 'act', None)).__name__}")
        acts.add(act)
        qk_norm.add(not isinstance(attn.q_norm, nn.Identity))
        norms += [block.norm1, block.norm2, attn.q_norm, attn.k_norm]
        kinds = {type(block.ls1), type(block.ls2)}
        refuse(not kinds <= {nn.Identity, LayerScale} or len(kinds) > 1, "LayerScale on one branch only")
        layer_scale.add(isinstance(block.ls1, LayerScale))
    fc_norm = not isinstance(model.fc_norm, nn.Identity)
    refuse(fc_norm == (not isinstance(model.norm, nn.Identity)), "final_norm=False")
    norms += [model.fc_norm if fc_norm else model.norm]
    pre_norm = not isinstance(model.norm_pre, nn.Identity)
    norms += [model.norm_pre] if pre_norm else []
    bad_norms = sorted({type(n).__name__ for n in norms
                        if not isinstance(n, (nn.Identity, nn.LayerNorm)) or (
                            isinstance(n, nn.LayerNorm) and not (n.elementwise_affine and n.bias is not None))})
    refuse(bool(bad_norms), f"norm_layer={', '.join(bad_norms)} (only affine LayerNorm is reproduced)")
    eps = {n.eps for n in norms if isinstance(n, nn.LayerNorm)}
    refuse(len(eps) > 1, f"LayerNorms with different eps {sorted(eps)}")
    refuse(pre_norm and pe.proj.bias is not None, "pre_norm=True with a patch-embedding bias")
    refuse(len(acts) > 1 or len(qk_norm) > 1 or len(layer_scale) > 1, "blocks that differ from each other")
    if refused:
        raise ConversionError(
            f"{REFERENCE}: options our vit does not reproduce: {'; '.join(dict.fromkeys(refused))}"
        )
    block = model.blocks[0]
    width, heads = int(model.embed_dim), int(block.attn.num_heads)
    distilled = type(model) is VisionTransformerDistilled
    return {
        "width": width,
        "depth": len(model.blocks),
        "num_heads": heads,
        "num_kv_heads": heads,
        "patch_size": int(pe.proj.kernel_size[0]),
        "image_size": int(img[0]),
        "in_chans": int(pe.proj.in_channels),
        "num_classes": int(model.num_classes) or 1,  # a feature extractor gets one fresh class
        "mlp_ratio": block.mlp.fc1.out_features / width,
        "global_pool": model.global_pool,
        "fc_norm": fc_norm,
        "class_token": bool(model.has_class_token),
        "reg_tokens": int(model.num_reg_tokens),
        "no_embed_class": bool(model.no_embed_class),
        "pre_norm": pre_norm,
        "dist_token": distilled,
        "init_values": 1.0 if layer_scale == {True} else None,  # the loaded gammas replace it
        "qk_norm": qk_norm == {True},
        "qkv_bias": block.attn.qkv.bias is not None,
        "proj_bias": block.attn.proj.bias is not None,
        "norm_eps": float(eps.pop()),
        "act_layer": acts.pop(),
    }


def timm_vit_state(tensors: dict[str, Any], our: dict[str, Any], *, head: bool) -> dict[str, Any]:
    """Map timm keys to ours, as the configuration says they must exist (so a missing one is
    listed; ``head``: the reference classifies, so its head must be there); timm's packed qkv
    rows [all q; all k; all v] are our layout."""
    m = KeyMapper(tensors, REFERENCE)
    names = ["pos_embed", "patch_embed.proj.weight"]
    names += ["cls_token"] * our["class_token"] + ["dist_token"] * our["dist_token"] + ["reg_token"] * bool(our["reg_tokens"])
    names += [] if our["pre_norm"] else ["patch_embed.proj.bias"]
    names += ["norm_pre.weight", "norm_pre.bias"] if our["pre_norm"] else []
    for name in names:
        m.map(name, name)
    final_norm = "fc_norm" if our["fc_norm"] else "norm"
    heads = (("head", "head_dist") if our["dist_token"] else ("head",)) if head else ()
    for p in ("weight", "bias"):
        m.map(f"norm.{p}", f"{final_norm}.{p}")
        for name in heads:
            m.map(f"{name}.{p}", f"{name}.{p}")
    renamed = {"attn.qkv": "attn.qkv_proj", "attn.proj": "attn.out_proj"}
    for i in range(our["depth"]):
        b = f"blocks.{i}."
        layers = {"norm1": True, "norm2": True, "attn.q_norm": our["qk_norm"], "attn.k_norm": our["qk_norm"],
                  "attn.qkv": our["qkv_bias"], "attn.proj": our["proj_bias"], "mlp.fc1": our["proj_bias"],
                  "mlp.fc2": our["proj_bias"]}
        for name, has_bias in layers.items():
            if name.startswith("attn.") and name.endswith("norm") and not our["qk_norm"]:
                continue
            for p in ("weight", "bias") if has_bias else ("weight",):
                m.map(f"{b}{renamed.get(name, name)}.{p}", f"{b}{name}.{p}")
        if our["init_values"] is not None:
            for ls in ("ls1", "ls2"):
                m.map(f"{b}{ls}.gamma", f"{b}{ls}.gamma")
    return m.finish()


# timm ViT classes, converted by convert_timm_vit
_VIT_CLASSES = ("VisionTransformer", "VisionTransformerDistilled")
# other timm classes with a converter of their own (same arguments as convert_timm_model)
_FAMILY_CONVERTERS = {
    "SwinTransformer": convert_timm_swin, "Cait": convert_timm_cait, "PyramidVisionTransformerV2": convert_timm_pvt_v2,
}
_SUPPORTED = (*_VIT_CLASSES, *_FAMILY_CONVERTERS)
# a key only that family's state dict has, to name the family of bare weights
_FAMILY_KEYS = (
    ("relative_position_bias_table", "SwinTransformer"),
    ("blocks_token_only.", "Cait"),
    ("stages.0.blocks.0.attn.q.weight", "PyramidVisionTransformerV2"),
)


def convert_timm_model(
    source: str | Path | dict[str, Any], architecture: str | None = None, **model_args: Any,
) -> Converted:
    """Convert timm weights to our zoo, choosing the converter by timm class.

    The class comes from ``architecture`` (a timm model name), else ``config.json``'s
    ``"architecture"``, else the tensors' names. ViTs (and DeiT's distilled ViT) go to
    ``convert_timm_vit``, ``SwinTransformer`` to ``convert_timm_swin``, ``Cait`` to
    ``convert_timm_cait``, ``PyramidVisionTransformerV2`` to ``convert_timm_pvt_v2``; every
    other class is refused by name.
    """
    tensors, config = read_source(source, None, "timm model")
    architecture = architecture or config.get("architecture")
    family = _timm_class_name(architecture) if architecture else _family_from_keys(tensors)
    if family in _VIT_CLASSES:
        return convert_timm_vit(source, architecture=architecture, **model_args)
    if family in _FAMILY_CONVERTERS:
        return _FAMILY_CONVERTERS[family](source, architecture=architecture, **model_args)
    raise ConversionError(
        f"timm model class {family} ({architecture}) is not supported; supported: {', '.join(_SUPPORTED)}"
    )


def _timm_class_name(architecture: str) -> str:
    """The class timm builds for ``architecture`` (built on the meta device: no weights, no memory)."""
    import timm
    import torch

    if not timm.is_model(architecture):
        raise ConversionError(f"timm does not know architecture {architecture!r}; pass a timm model name")
    with torch.device("meta"):
        return type(timm.create_model(architecture, pretrained=False)).__name__


def _family_from_keys(tensors: dict[str, Any]) -> str:
    for marker, family in _FAMILY_KEYS:
        if any(marker in key for key in tensors):
            return family
    return "VisionTransformer"  # its converter names what is missing if these are not ViT weights
