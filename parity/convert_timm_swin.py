"""timm ``SwinTransformer`` weights -> our ``swin``.

As for timm ViTs (``convert_timm``), timm itself reads every option: the reference is built on
the meta device from, lowest priority first, the architecture's defaults (``architecture=`` or
``config.json``'s), what the tensors show (width, depths, heads and windows from the relative
position bias tables, patch size, MLP ratio, qkv bias, classes), ``config.json``'s
``model_args`` and keyword overrides (timm's names). Our configuration is then read off the
built modules, and every block's window, shift and resolution is checked against the ones
ours derives, so a timm quirk we do not reproduce is refused by name rather than converted
wrongly: padded windows or merges (a resolution not divisible by the window, an odd one
before patch merging), stage widths that do not double, a ``head_dim`` that makes attention
wider than the stage, non-LayerNorm norms, pooling other than ``avg``, other model classes.
Original (Microsoft) checkpoints keep patch merging at the end of a stage and the classifier
as ``head``: they are renamed as timm does; one with an absolute position embedding
(``ape=True``) is refused.

A bare weights file does not record the image size (Swin has no position embedding to read
it from): pass ``img_size=`` or an architecture. It cannot tell the LayerNorm eps or average
from max pooling either: those are assumed (timm's defaults) and warned about.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from flops_fit.parity.mapping import Converted, KeyMapper, read_source, warn_assumptions
from flops_fit.parity.timm_reference import build_on_meta, declared_args
from flops_fit.plugins.models.swin import SwinConfig

from flops_fit.errors import ConversionError

REFERENCE = "timm SwinTransformer"
TIMM_SWIN_NORM_EPS = 1e-5  # nn.LayerNorm's default, which timm's Swin uses
_TOP_LEVEL_ARGS = ("global_pool", "num_classes")
_WHY = {
    "norm_eps": "weights do not record the LayerNorm eps; timm Swin's default (nn.LayerNorm) is 1e-5",
    "global_pool": "weights cannot tell average from max pooling; timm Swin's default is 'avg'",
    "always_partition": "a stage as small as its window is one unshifted window unless always_partition=True; "
                        "the weights cannot tell",
}
_SETTERS = {"norm_eps": "norm_eps=...", "global_pool": "global_pool=...", "always_partition": "always_partition=True"}


def convert_timm_swin(
    source: str | Path | dict[str, Any], *, architecture: str | None = None, **model_args: Any,
) -> Converted:
    """Convert timm Swin weights (a file, a timm hub folder, or a state dict) to our ``swin``.

    ``model_args`` override any timm ``SwinTransformer`` argument; ``norm_eps`` (ours) sets
    the LayerNorm eps of a bare weights file.
    """
    tensors, config = read_source(source, None, REFERENCE)
    tensors = current_layout(tensors)
    architecture = architecture or config.get("architecture")
    declared = declared_args(config, _TOP_LEVEL_ARGS, REFERENCE)
    declared.update(model_args)
    norm_eps = declared.pop("norm_eps", None)  # not a timm argument (timm sets eps through norm_layer)
    if not architecture and "img_size" not in declared:
        raise ConversionError(
            f"{REFERENCE}: the weights do not say the image size (Swin has no position embedding); pass "
            "img_size=... or architecture='swin_..._224'"
        )
    size = declared.get("img_size")
    sides = list(size) if isinstance(size, (tuple, list)) and len(size) == 2 else [size]
    if "img_size" in declared and not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sides):
        raise ConversionError(f"{REFERENCE}: img_size={size!r} is not an image size (a positive number of pixels, "
                              "or a (height, width) pair of them)")  # 0 raised ZeroDivisionError from a window check
    for key, each in (("depths", "number of blocks"), ("num_heads", "number of heads")):
        value = declared.get(key)  # an int raised timm's "'int' object is not subscriptable"
        if key in declared and not (isinstance(value, (list, tuple)) and value and all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
            raise ConversionError(f"{REFERENCE}: {key}={value!r} is not a list with one {each} per stage "
                                  f"(a positive integer each), e.g. {key}=(2, 4) for two stages")
    facts = tensor_facts(tensors)
    reference = build_reference(architecture, {**facts, **declared}, declared)
    our = describe_reference(reference)
    assumed = {}
    if not architecture:
        if "global_pool" not in declared:
            assumed["global_pool"] = "avg"
        if norm_eps is None and "norm_layer" not in declared:
            assumed["norm_eps"] = TIMM_SWIN_NORM_EPS
        clipped = any(b.input_resolution == b.window_size for stage in reference.layers for b in stage.blocks)
        if clipped and "always_partition" not in declared:
            assumed["always_partition"] = False
    if norm_eps is not None:
        our["norm_eps"] = float(norm_eps)
    head = bool(reference.num_classes)  # only a feature extractor (num_classes=0) gets a fresh head
    state, dropped = timm_swin_state(tensors, our, head=head)
    fresh = () if head else ("head.weight", "head.bias")
    notes = {k: f"{v!r} (assumed: {_WHY[k]})" for k, v in assumed.items()}
    warn_assumptions(REFERENCE, notes, _SETTERS)
    return Converted("swin", our.pop("width"), our, state, REFERENCE, dropped=dropped, fresh=fresh, assumptions=notes)


def current_layout(tensors: dict[str, Any]) -> dict[str, Any]:
    """timm's layout from an original Microsoft checkpoint's (merging at the end of a stage,
    ``head`` instead of ``head.fc``), as timm's own filter renames it; ``ape`` refused."""
    if "absolute_pos_embed" in tensors:
        raise ConversionError(
            f"{REFERENCE}: options our swin does not reproduce: absolute_pos_embed (ape=True, an absolute position "
            "embedding added to the patches; timm's SwinTransformer and ours have only the relative position bias)"
        )
    if "layers.0.downsample.reduction.weight" not in tensors:
        return tensors
    renamed = {}
    for key, value in tensors.items():
        key = re.sub(r"^layers\.(\d+)\.downsample", lambda m: f"layers.{int(m.group(1)) + 1}.downsample", key)
        renamed[re.sub(r"^head\.(weight|bias)$", r"head.fc.\1", key)] = value
    return renamed


def tensor_facts(tensors: dict[str, Any]) -> dict[str, Any]:
    """timm ``SwinTransformer`` arguments read off the tensors' names and shapes."""
    for key in ("patch_embed.proj.weight", "layers.0.blocks.0.attn.relative_position_bias_table",
                "layers.0.blocks.0.mlp.fc1.weight"):
        if key not in tensors:
            raise ConversionError(
                f"{REFERENCE}: {key!r} is missing, so these are not timm Swin weights (found keys such as "
                f"{sorted(tensors)[:6]})"
            )
    width, in_chans, patch, patch_w = tensors["patch_embed.proj.weight"].shape
    if patch != patch_w:
        raise ConversionError(f"{REFERENCE}: patches are {patch}x{patch_w}; only square patches are supported")
    blocks: dict[int, set[int]] = {}
    for key in tensors:
        found = re.match(r"layers\.(\d+)\.blocks\.(\d+)\.", key)
        if found:
            blocks.setdefault(int(found.group(1)), set()).add(int(found.group(2)))
    stages = range(len(blocks))
    heads, windows = [], []
    for s in stages:
        table = tensors.get(f"layers.{s}.blocks.0.attn.relative_position_bias_table")
        if table is None:
            raise ConversionError(f"{REFERENCE}: stage {s} has no relative position bias table (stages found: {sorted(blocks)})")
        side = math.isqrt(int(table.shape[0]))
        heads.append(int(table.shape[1]))
        windows.append(((side + 1) // 2,) * 2)
    return {
        "embed_dim": int(width),
        "depths": tuple(1 + max(blocks[s]) for s in stages),
        "num_heads": tuple(heads),
        # one (h, w) for all stages where they agree: timm before 1.0.30 reads two windows of a
        # two-stage model as one (h, w) pair
        "window_size": windows[0] if len(set(windows)) == 1 else tuple(windows),
        "patch_size": int(patch),
        "in_chans": int(in_chans),
        "num_classes": int(tensors["head.fc.weight"].shape[0]) if "head.fc.weight" in tensors else 0,
        "mlp_ratio": int(tensors["layers.0.blocks.0.mlp.fc1.weight"].shape[0]) / int(width),
        "qkv_bias": "layers.0.blocks.0.attn.qkv.bias" in tensors,
    }


def build_reference(architecture: str | None, args: dict[str, Any], declared: dict[str, Any]) -> Any:
    """The timm model these arguments describe, built on the meta device."""
    from timm.models.swin_transformer import SwinTransformer

    return build_on_meta(REFERENCE, architecture, args, declared, SwinTransformer, _check_family)


def _check_family(model: Any) -> None:
    from timm.models.swin_transformer import SwinTransformer

    if type(model) is not SwinTransformer:
        raise ConversionError(
            f"{REFERENCE}: timm model class {type(model).__name__} is not supported by the Swin converter "
            "(only SwinTransformer; Swin V2 and other families are refused)"
        )


def describe_reference(model: Any) -> dict[str, Any]:
    """Our ``swin`` configuration for a built timm Swin; ConversionError naming every part we
    do not reproduce."""
    import torch.nn as nn
    from timm.layers import Mlp, PatchEmbed
    from timm.models.swin_transformer import PatchMerging, SwinTransformerBlock, WindowAttention

    _check_family(model)
    refused: list[str] = []

    def refuse(cond: bool, what: str) -> None:
        if cond:
            refused.append(what)

    pe = model.patch_embed
    refuse(type(pe) is not PatchEmbed, f"embed_layer={type(pe).__name__}")
    refuse(bool(getattr(pe, "dynamic_img_pad", False)), "dynamic_img_pad=True")
    img, patch = tuple(pe.img_size), tuple(pe.patch_size)
    refuse(img[0] != img[1], f"img_size={img} (not square)")
    refuse(patch[0] != patch[1], f"patch_size={patch} (not square)")
    pool = model.head.global_pool.pool_type if hasattr(model.head, "global_pool") else model.global_pool
    refuse(pool != "avg", f"global_pool={pool!r} (ours averages the last stage's tokens)")
    fc = getattr(model.head, "fc", None)
    refuse(not isinstance(fc, (nn.Linear, nn.Identity)), f"head={type(model.head).__name__}")
    width = int(model.embed_dim)
    norms: list[Any] = [pe.norm, model.norm]
    ratios, shapes, always = set(), [], set()
    for s, stage in enumerate(model.layers):
        down = stage.downsample
        if s:
            refuse(type(down) is not PatchMerging, f"layers.{s}.downsample={type(down).__name__}")
            if type(down) is PatchMerging:
                refuse(down.out_dim != 2 * down.dim, f"embed_dim per stage that does not double (stage {s}: "
                       f"{down.dim} -> {down.out_dim})")
                refuse(any(r % 2 for r in stage.input_resolution),
                       f"stage {s - 1} resolution {tuple(stage.input_resolution)} is odd (timm pads it before merging)")
                norms.append(down.norm)
        stage_width = width * 2**s
        for i, block in enumerate(stage.blocks):
            if type(block) is not SwinTransformerBlock or type(block.attn) is not WindowAttention:
                refuse(True, f"layers.{s}.blocks.{i}: {type(block).__name__} / {type(block.attn).__name__}")
                continue
            attn, mlp = block.attn, block.mlp
            refuse(block.dim != stage_width, f"embed_dim per stage that does not double (stage {s}: {block.dim})")
            refuse(attn.qkv.out_features != 3 * block.dim,
                   f"head_dim={attn.qkv.out_features // 3 // attn.num_heads} (attention {attn.qkv.out_features // 3} "
                   f"wide in a {block.dim}-wide stage)")
            refuse(type(mlp) is not Mlp or not isinstance(mlp.act, nn.GELU) or mlp.act.approximate != "none"
                   or not isinstance(mlp.norm, nn.Identity), f"layers.{s}.blocks.{i}.mlp (only fc1 -> exact GELU -> fc2)")
            res, win = tuple(block.input_resolution), tuple(block.window_size)
            refuse(win[0] != win[1], f"window_size={win} (not square)")
            refuse(res[0] % win[0] or res[1] % win[1],
                   f"stage {s} resolution {res} not divisible by its window {win} (timm pads the windows)")
            norms += [block.norm1, block.norm2]
            ratios.add(mlp.fc1.out_features / block.dim)
            always.add(bool(block.always_partition))
            shapes.append((s, i, res[0], win[0], tuple(block.shift_size)))
    refuse(len(ratios) > 1, f"mlp_ratio per stage {sorted(ratios)} (ours: one for all stages)")
    bad_norms = sorted({type(n).__name__ for n in norms
                        if not isinstance(n, nn.LayerNorm) or not n.elementwise_affine or n.bias is None})
    refuse(bool(bad_norms), f"norm_layer={', '.join(bad_norms)} (only affine LayerNorm is reproduced)")
    eps = {n.eps for n in norms if isinstance(n, nn.LayerNorm)}
    refuse(len(eps) > 1, f"LayerNorms with different eps {sorted(eps)}")
    if refused:
        raise ConversionError(f"{REFERENCE}: options our swin does not reproduce: {'; '.join(dict.fromkeys(refused))}")
    windows = tuple(next(w for st, _, _, w, _ in shapes if st == s) for s in range(len(model.layers)))
    our = {
        "width": width,
        "depths": tuple(len(stage.blocks) for stage in model.layers),
        "num_heads": tuple(int(stage.blocks[0].attn.num_heads) for stage in model.layers),
        "window_size": windows[0] if len(set(windows)) == 1 else windows,
        "patch_size": int(patch[0]),
        "image_size": int(img[0]),
        "in_chans": int(pe.proj.in_channels),
        "num_classes": int(model.num_classes) or 1,  # a feature extractor gets one fresh class
        "mlp_ratio": ratios.pop(),
        "qkv_bias": model.layers[0].blocks[0].attn.qkv.bias is not None,
        "norm_eps": float(eps.pop()),
        "always_partition": always == {True},
    }
    _check_windows(our, shapes)
    return our


def _check_windows(our: dict[str, Any], shapes: list[tuple]) -> None:
    """Every timm block's resolution, window and shift must be the ones ours derives."""
    try:
        stages = SwinConfig.of(**our).stages
    except ValueError as exc:
        raise ConversionError(f"{REFERENCE}: options our swin does not reproduce: {exc}") from None
    differ = []
    for s, i, res, win, shift in shapes:
        st = stages[s]
        ours = (st.resolution, st.window, (st.shift if i % 2 else 0,) * 2)
        if (res, win, shift) != ours:
            differ.append(f"layers.{s}.blocks.{i} (timm: resolution {res}, window {win}, shift {shift}; ours: "
                          f"resolution {ours[0]}, window {ours[1]}, shift {ours[2]})")
    if differ:
        raise ConversionError(f"{REFERENCE}: windows our swin does not reproduce: {'; '.join(differ)}")


def timm_swin_state(tensors: dict[str, Any], our: dict[str, Any], *, head: bool) -> tuple[dict[str, Any], list[str]]:
    """Map timm keys to ours, as the configuration says they must exist (so a missing one is
    listed); timm's packed qkv rows are our ``qkv_proj`` as they are."""
    m = KeyMapper(tensors, REFERENCE, ignore=(r".*\.relative_position_index", r".*\.attn_mask"))
    names = ["patch_embed.proj.weight", "patch_embed.proj.bias", "patch_embed.norm.weight", "patch_embed.norm.bias",
             "norm.weight", "norm.bias"]
    for name in names:
        m.map(name, name)
    if head:  # the reference classifies (a feature extractor, num_classes=0, has no head)
        m.map("head.weight", "head.fc.weight")
        m.map("head.bias", "head.fc.bias")
    for s, depth in enumerate(our["depths"]):
        if s:
            for name in ("norm.weight", "norm.bias", "reduction.weight"):
                m.map(f"layers.{s}.downsample.{name}", f"layers.{s}.downsample.{name}")
        for i in range(depth):
            b = f"layers.{s}.blocks.{i}."
            m.map(b + "relative_position_bias_table", b + "attn.relative_position_bias_table")
            for ours, theirs, bias in (("attn.qkv_proj", "attn.qkv", our["qkv_bias"]), ("attn.out_proj", "attn.proj", True),
                                       ("norm1", "norm1", True), ("norm2", "norm2", True), ("mlp.fc1", "mlp.fc1", True),
                                       ("mlp.fc2", "mlp.fc2", True)):
                for p in ("weight", "bias") if bias else ("weight",):
                    m.map(f"{b}{ours}.{p}", f"{b}{theirs}.{p}")
    return m.finish(), m.dropped
