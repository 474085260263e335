"""The built-in PVT v2 module (timm's ``PyramidVisionTransformerV2`` layout) on the one
``MultiheadAttention``.

Spatial-reduction attention is cross-attention: queries from every token of the stage's
map, keys and values from the reduced map (``blocks.{j}.reduce``), so timm's ``attn.q`` and
``attn.kv`` pack into ``attn.qkv_proj`` and ``attn.proj`` is ``attn.out_proj``; timm's
``attn.sr`` / ``attn.norm`` are our ``reduce.sr`` / ``reduce.norm``. Without reduction
(``sr_ratio`` 1) it is plain self-attention. Other names are timm's.

Per-layer outputs for parity: a hook on ``stages[i].blocks[j].attn`` sees the attention
output (B, N, C), where a hook on timm's module of that name does.
"""

from __future__ import annotations

import torch.nn.functional as F
from flops_fit.plugins.models.attention import MultiheadAttention
from flops_fit.plugins.models.pvt_v2 import LINEAR_POOL, TORCH_NORM_EPS, PvtV2Config
from flops_fit.plugins.models.vit_model import ACTIVATIONS, check_images
from torch import Tensor, nn


class OverlapPatchEmbed(nn.Module):
    """A strided convolution with padding (patches overlap), then a LayerNorm: (B, C_in, H, W)
    -> (B, H', W', C)."""

    def __init__(self, in_chans: int, width: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(in_chans, width, kernel, stride=stride, padding=kernel // 2)
        self.norm = nn.LayerNorm(width, eps=TORCH_NORM_EPS)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.proj(x).permute(0, 2, 3, 1))


class SpatialReduction(nn.Module):
    """The key / value tokens: the map reduced by an ``r`` x ``r`` stride-``r`` convolution
    and a LayerNorm, or (``linear``) pooled to 7 x 7, a 1x1 convolution, a LayerNorm and GELU."""

    def __init__(self, width: int, sr_ratio: int, linear: bool) -> None:
        super().__init__()
        self.linear = linear
        kernel = 1 if linear else sr_ratio
        self.sr = nn.Conv2d(width, width, kernel, stride=kernel)
        self.norm = nn.LayerNorm(width, eps=TORCH_NORM_EPS)

    def forward(self, x: Tensor, side: int) -> Tensor:
        batch, _, c = x.shape
        grid = x.transpose(1, 2).reshape(batch, c, side, side)
        if self.linear:
            grid = F.adaptive_avg_pool2d(grid, LINEAR_POOL)
        kv = self.norm(self.sr(grid).flatten(2).transpose(1, 2))
        return F.gelu(kv) if self.linear else kv


class MlpWithDepthwiseConv(nn.Module):
    """fc1, a 3x3 depthwise convolution over the token map (after a ReLU when ``linear``),
    the activation, fc2."""

    def __init__(self, width: int, hidden: int, act_layer: str, linear: bool) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.dwconv = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden)
        self.fc2 = nn.Linear(hidden, width)
        self.act = ACTIVATIONS[act_layer]
        self.extra_relu = linear

    def forward(self, x: Tensor, side: int) -> Tensor:
        x = self.fc1(x)
        batch, n, hidden = x.shape
        grid = x.transpose(1, 2).reshape(batch, hidden, side, side)
        if self.extra_relu:
            grid = F.relu(grid)
        x = self.dwconv(grid).flatten(2).transpose(1, 2)
        return self.fc2(self.act(x))


class Block(nn.Module):
    """x + attn(norm1(x), keys / values from the reduced map), then x + mlp(norm2(x))."""

    def __init__(self, cfg: PvtV2Config, stage: int) -> None:
        super().__init__()
        c = cfg.dims[stage]
        self.norm1 = nn.LayerNorm(c, eps=cfg.norm_eps)
        reduced = cfg.linear or cfg.sr_ratios[stage] > 1
        self.reduce = SpatialReduction(c, cfg.sr_ratios[stage], cfg.linear) if reduced else None
        self.attn = MultiheadAttention(c, cfg.num_heads[stage], bias=cfg.qkv_bias, out_bias=True)
        self.norm2 = nn.LayerNorm(c, eps=cfg.norm_eps)
        self.mlp = MlpWithDepthwiseConv(c, cfg.mlp_hidden(stage), cfg.act_layer, cfg.linear)

    def forward(self, x: Tensor, side: int) -> Tensor:
        h = self.norm1(x)
        if self.reduce is None:
            x = x + self.attn(h)
        else:
            kv = self.reduce(h, side)
            x = x + self.attn(h, kv, kv)
        return x + self.mlp(self.norm2(x), side)


class Stage(nn.Module):
    """Overlapping patch embedding (after stage 0; the stem is the model's ``patch_embed``),
    the blocks, the stage norm: (B, C_in, H, W), or stage 0's (B, H, W, C) -> (B, C, H', W')."""

    def __init__(self, cfg: PvtV2Config, stage: int) -> None:
        super().__init__()
        c = cfg.dims[stage]
        if stage > 0:
            self.downsample = OverlapPatchEmbed(cfg.dims[stage - 1], c, 3, 2)
        self.blocks = nn.ModuleList(Block(cfg, stage) for _ in range(cfg.depths[stage]))
        self.norm = nn.LayerNorm(c, eps=cfg.norm_eps)

    def forward(self, grid: Tensor) -> Tensor:
        if hasattr(self, "downsample"):
            grid = self.downsample(grid)
        batch, side, _, c = grid.shape
        x = grid.reshape(batch, side * side, c)
        for block in self.blocks:
            x = block(x, side)
        return self.norm(x).reshape(batch, side, side, c).permute(0, 3, 1, 2)


class PyramidVisionTransformerV2(nn.Module):
    """PVT v2 classifier: images (B, C_in, H, W) -> logits (B, num_classes)."""

    def __init__(self, cfg: PvtV2Config) -> None:
        super().__init__()
        self.config = cfg
        self.patch_embed = OverlapPatchEmbed(cfg.in_chans, cfg.dims[0], 7, 4)
        self.stages = nn.ModuleList(Stage(cfg, i) for i in range(len(cfg.depths)))
        self.head = nn.Linear(cfg.dims[-1], cfg.num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """timm's scheme: linear weights truncated normal (std 0.02), convolutions normal with
        std sqrt(2 / fan_out) (fan_out per group), zero biases."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Conv2d):
                fan_out = module.kernel_size[0] * module.kernel_size[1] * module.out_channels // module.groups
                nn.init.normal_(module.weight, std=(2.0 / fan_out) ** 0.5)
                nn.init.zeros_(module.bias)

    def forward_features(self, images: Tensor) -> Tensor:
        """The last stage's normed map (B, C, H', W')."""
        check_images(images, self.config)
        grid = self.patch_embed(images)  # (B, H, W, C); later stages embed (B, C, H, W) maps themselves
        for stage in self.stages:
            grid = stage(grid)
        return grid

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.forward_features(images).mean(dim=(-1, -2)))

    def num_params(self, non_embedding: bool = False) -> int:
        """Total parameters (PVT v2 has no embedding parameters: ``non_embedding`` changes nothing)."""
        return sum(p.numel() for p in self.parameters())


def build(width: int, **config) -> PyramidVisionTransformerV2:
    """Builder of the ``pvt_v2`` entries: the stage-1 width plus any ``PvtV2Config`` keyword."""
    return PyramidVisionTransformerV2(PvtV2Config.of(width, **config))
