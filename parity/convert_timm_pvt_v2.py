"""timm ``PyramidVisionTransformerV2`` weights -> our ``pvt_v2``.

As for the ViT, timm interprets every option: the reference is built on the meta device from
the architecture's defaults, what the tensors show (stage widths and depths, reduction
ratios from the ``sr`` kernels, ``linear`` from a 1x1 ``sr`` kernel, MLP ratios, biases,
classes), ``config.json``'s ``model_args`` and keyword overrides (timm's names); our
configuration is read off the built modules and every part our ``pvt_v2`` does not
reproduce is refused by name.

Two things are not in the weights: the heads per stage (``num_heads=(...)``, else the
architecture's, else refused) and the image size our model is built for (PVT v2 runs at
any size; our FLOP count is per image of one size): ``image_size=``, else ``config.json``'s
``pretrained_cfg.input_size``, else the architecture's, else 224, assumed and warned about.
"""

from __future__ import annotations

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

REFERENCE = "timm PyramidVisionTransformerV2"
TORCH_NORM_EPS = 1e-5  # the patch-embedding and spatial-reduction norms (nn.LayerNorm's default), ours too
_TOP_LEVEL_ARGS = ("global_pool", "num_classes")
_WHY = {
    "image_size": "PVT v2 runs at any image size and the weights do not say which; timm's pretrained "
                  "models use 224",
    "norm_eps": "weights do not record the LayerNorm eps; timm PVT v2's default is 1e-6",
}
_SETTERS = {"image_size": "image_size=...", "norm_eps": "norm_eps=..."}


def convert_timm_pvt_v2(source: str | Path | dict[str, Any], *, architecture: str | None = None,
                        image_size: int | None = None, norm_eps: float | None = None,
                        **model_args: Any) -> Converted:
    """Convert timm PVT v2 weights (a file, a timm hub folder, or a state dict) to our ``pvt_v2``."""
    tensors, config = read_source(source, None, REFERENCE)
    architecture = architecture or config.get("architecture")
    declared = declared_args(config, _TOP_LEVEL_ARGS, REFERENCE)
    declared.update(model_args)
    facts = tensor_facts(tensors)
    if "num_heads" in declared:
        _check_heads(declared["num_heads"], facts["embed_dims"])
    if not architecture and "num_heads" not in declared:
        raise ConversionError(
            f"{REFERENCE}: the weights do not say how many attention heads each stage has; pass "
            "num_heads=(1, 2, 5, 8) (for example) or architecture='pvt_v2_b0'"
        )
    assumed: dict[str, Any] = {}
    if image_size is None:
        input_size = (config.get("pretrained_cfg") or {}).get("input_size")
        if input_size:
            image_size = int(input_size[-1])
        elif architecture:
            image_size = int(_default_input_size(architecture))
        else:
            image_size = assumed["image_size"] = 224
    if not architecture and norm_eps is None and "norm_layer" not in declared:
        assumed["norm_eps"] = 1e-6
    reference = build_reference(architecture, {**facts, **declared}, declared)
    our = describe_reference(reference)
    our["image_size"] = int(image_size)
    if norm_eps is not None:
        our["norm_eps"] = float(norm_eps)
    head = bool(reference.num_classes)  # only a feature extractor (num_classes=0) gets a fresh head
    state = pvt_v2_state(tensors, our, head=head)
    fresh = () if head else ("head.weight", "head.bias")
    notes = {k: f"{v!r} (assumed: {_WHY[k]})" for k, v in assumed.items()}
    warn_assumptions(REFERENCE, notes, _SETTERS)
    return Converted("pvt_v2", our.pop("width"), our, state, REFERENCE, fresh=fresh, assumptions=notes)


def _check_heads(heads: Any, widths: tuple[int, ...]) -> None:
    """``num_heads``: one count for every stage, or one per stage, each a positive integer that divides
    its stage's width. A tuple one short raised a bare IndexError inside timm, a negative count
    failed to build as 'width=16 is not a valid size'."""
    counts = [heads] * len(widths) if isinstance(heads, int) and not isinstance(heads, bool) else heads
    if not isinstance(counts, (tuple, list)) or len(counts) != len(widths) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h > 0 and w % h == 0 for h, w in zip(counts, widths)):
        raise ConversionError(f"{REFERENCE}: num_heads={heads!r} is not a number of heads per stage for stage widths "
                              f"{widths}: pass {len(widths)} positive integers that divide them (or one for all)")


def _default_input_size(architecture: str) -> int:
    import timm

    cfg = timm.get_pretrained_cfg(architecture)  # None for a name timm does not know: refused when built
    return cfg.input_size[-1] if cfg is not None else 224


def tensor_facts(tensors: dict[str, Any]) -> dict[str, Any]:
    """timm ``PyramidVisionTransformerV2`` arguments read off the tensors' names and shapes."""
    for key in ("patch_embed.proj.weight", "stages.0.blocks.0.attn.q.weight"):
        if key not in tensors:
            raise ConversionError(
                f"{REFERENCE}: {key!r} is missing, so these are not timm PVT v2 weights (found keys such as "
                f"{sorted(tensors)[:6]})"
            )
    stages = 1 + max(int(k.split(".")[1]) for k in tensors if k.startswith("stages."))
    dims, depths, srs, mlp_ratios, linear = [], [], [], [], set()
    for i in range(stages):
        blocks = {int(k.split(".")[3]) for k in tensors if k.startswith(f"stages.{i}.blocks.")}
        width = int(tensors[f"stages.{i}.blocks.0.norm1.weight"].shape[0])
        dims.append(width)
        depths.append(1 + max(blocks))
        sr = tensors.get(f"stages.{i}.blocks.0.attn.sr.weight")
        kernel = 1 if sr is None else int(sr.shape[-1])
        linear.add(sr is not None and kernel == 1)
        srs.append(kernel)
        mlp_ratios.append(int(tensors[f"stages.{i}.blocks.0.mlp.fc1.weight"].shape[0]) / width)
    facts = {
        "embed_dims": tuple(dims), "depths": tuple(depths), "mlp_ratios": tuple(mlp_ratios),
        "in_chans": int(tensors["patch_embed.proj.weight"].shape[1]),
        "num_classes": int(tensors["head.weight"].shape[0]) if "head.weight" in tensors else 0,
        "qkv_bias": "stages.0.blocks.0.attn.q.bias" in tensors,
        "linear": linear == {True},
    }
    if not facts["linear"]:
        facts["sr_ratios"] = tuple(srs)
    return facts


def build_reference(architecture: str | None, args: dict[str, Any], declared: dict[str, Any]) -> Any:
    """The timm model these arguments describe, on the meta device."""
    from timm.models.pvt_v2 import PyramidVisionTransformerV2

    def check_family(model: Any) -> None:
        if not isinstance(model, PyramidVisionTransformerV2):
            raise ConversionError(f"{REFERENCE}: architecture {architecture!r} is not a timm PVT v2")

    return build_on_meta(REFERENCE, architecture, args, declared, PyramidVisionTransformerV2, check_family)


def describe_reference(model: Any) -> dict[str, Any]:
    """Our ``pvt_v2`` configuration for a built timm PVT v2; ConversionError naming every part
    we do not reproduce."""
    import torch.nn as nn
    from timm.models.pvt_v2 import Attention, Block, MlpWithDepthwiseConv, OverlapPatchEmbed

    refused: list[str] = []

    def refuse(cond: bool, what: str) -> None:
        if cond:
            refused.append(what)

    refuse(model.global_pool != "avg", f"global_pool={model.global_pool!r} (no pooling)")
    embeds = [model.patch_embed] + [s.downsample for s in model.stages[1:]]
    refuse(any(type(e) is not OverlapPatchEmbed for e in embeds), "a patch embedding other than OverlapPatchEmbed")
    refuse(model.stages[0].downsample is not None, "a downsampling first stage")
    small_norms, norms, acts = [e.norm for e in embeds], [], set()
    dims, heads, srs, mlp_ratios, linear = [], [], [], [], set()
    for stage in model.stages:
        norms.append(stage.norm)
        for block in stage.blocks:
            refuse(type(block) is not Block, f"block {type(block).__name__}")
            attn, mlp = block.attn, block.mlp
            refuse(type(attn) is not Attention or type(mlp) is not MlpWithDepthwiseConv,
                   "attention or MLP other than timm PVT v2's")
            norms += [block.norm1, block.norm2]
            if attn.norm is not None:
                small_norms.append(attn.norm)
            refuse(attn.proj.bias is None, "an attention output projection without bias")
            act = activation_name(mlp.act)
            refuse(act is None, f"act_layer={type(mlp.act).__name__}")
            acts.add(act)
            refuse(isinstance(mlp.relu, nn.ReLU) != (attn.pool is not None), "extra_relu without linear attention")
            if attn.pool is not None:
                refuse(tuple(_pair(attn.pool.output_size)) != (7, 7), f"linear pooling to {attn.pool.output_size}")
                refuse(activation_name(attn.act) != "gelu", "linear attention without its exact GELU")
        block = stage.blocks[0]
        dims.append(int(block.attn.dim))
        heads.append(int(block.attn.num_heads))
        linear.add(block.attn.pool is not None)
        srs.append(1 if block.attn.sr is None else int(block.attn.sr.kernel_size[0]))
        mlp_ratios.append(block.mlp.fc1.out_features / dims[-1])
    bad = sorted({type(n).__name__ for n in norms + small_norms if not affine_layer_norm(n)})
    refuse(bool(bad), f"norm_layer={', '.join(bad)} (only affine LayerNorm is reproduced)")
    eps = {n.eps for n in norms}
    refuse(len(eps) > 1, f"LayerNorms with different eps {sorted(eps)}")
    refuse(any(n.eps != TORCH_NORM_EPS for n in small_norms), "patch-embedding or reduction norms with eps != 1e-5")
    refuse(len(acts) > 1, "blocks with different activations")
    refuse(len(linear) > 1, "linear attention in some stages only")
    refuse(any(d % dims[0] for d in dims), f"stage widths {tuple(dims)} that are not multiples of the first")
    if refused:
        raise ConversionError(f"{REFERENCE}: options our pvt_v2 does not reproduce: {'; '.join(dict.fromkeys(refused))}")
    is_linear = linear == {True}
    return {
        "width": dims[0],
        "depths": tuple(len(s.blocks) for s in model.stages),
        "dim_ratios": tuple(d // dims[0] for d in dims),
        "num_heads": tuple(heads),
        "sr_ratios": (1,) * len(dims) if is_linear else tuple(srs),
        "mlp_ratios": tuple(mlp_ratios),
        "linear": is_linear,
        "qkv_bias": model.stages[0].blocks[0].attn.q.bias is not None,
        "in_chans": int(model.patch_embed.proj.in_channels),
        "num_classes": int(model.num_classes) or 1,
        "norm_eps": float(eps.pop()),
        "act_layer": acts.pop(),
    }


def _pair(size: Any) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else tuple(size)


def pvt_v2_state(tensors: dict[str, Any], our: dict[str, Any], *, head: bool) -> dict[str, Any]:
    """Map timm keys to ours: ``attn.q`` + ``attn.kv`` pack into ``attn.qkv_proj``, ``attn.sr`` /
    ``attn.norm`` become ``reduce.sr`` / ``reduce.norm``."""
    m = KeyMapper(tensors, REFERENCE)
    pairs = ("weight", "bias")
    names = ["patch_embed.proj", "patch_embed.norm"] + (["head"] if head else [])  # a missing head is listed
    for i, depth in enumerate(our["depths"]):
        s = f"stages.{i}."
        names += [f"{s}norm"] + ([f"{s}downsample.proj", f"{s}downsample.norm"] if i else [])
        for j in range(depth):
            b = f"{s}blocks.{j}."
            names += [f"{b}{n}" for n in ("norm1", "norm2", "mlp.fc1", "mlp.dwconv", "mlp.fc2")]
            for p in pairs:
                m.map(f"{b}attn.out_proj.{p}", f"{b}attn.proj.{p}")
            for p in pairs if our["qkv_bias"] else ("weight",):
                m.concat(f"{b}attn.qkv_proj.{p}", [f"{b}attn.q.{p}", f"{b}attn.kv.{p}"])
            if our["linear"] or our["sr_ratios"][i] > 1:
                for n in ("sr", "norm"):
                    for p in pairs:
                        m.map(f"{b}reduce.{n}.{p}", f"{b}attn.{n}.{p}")
    for name in names:
        for p in pairs:
            m.map(f"{name}.{p}", f"{name}.{p}")
    return m.finish()
