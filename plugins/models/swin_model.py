"""The built-in Swin Transformer module (timm's ``SwinTransformer`` layout, channels last).

Tokens stay (B, H, W, C) between blocks, as in timm. Each block attends within windows of
``window x window`` tokens through the shared ``MultiheadAttention``: the windows are the
attention's batch, and the relative position bias (and, in shifted blocks, the mask that
keeps the rolled-around regions apart) is its additive ``attend_mask``.

Parameter names follow timm's except inside attention: ``layers.{s}.blocks.{i}.attn`` is our
``MultiheadAttention`` (``qkv_proj`` / ``out_proj`` for timm's ``qkv`` / ``proj``, same packed
rows) and the bias table sits on the block, ``layers.{s}.blocks.{i}.relative_position_bias_table``;
the classifier is ``head`` (timm's ``head.fc``).

Per-layer outputs for parity: a forward hook on ``layers[s].blocks[i].attn`` receives the
attention output of every window, (B * windows, window^2, C), in timm's window order, the
same place and shape as a hook on timm's ``layers[s].blocks[i].attn``; hooks on the blocks,
``layers[s].downsample`` and ``patch_embed`` see (B, H, W, C) as timm's do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from flops_fit.plugins.models.attention import MultiheadAttention
from flops_fit.plugins.models.swin import MASKED, Stage, SwinConfig
from flops_fit.plugins.models.vit_model import check_images
from torch import Tensor, nn


def window_partition(x: Tensor, window: int) -> Tensor:
    """(B, H, W, C) -> (B * windows, window^2, C), windows in row-major order per image."""
    b, h, w, c = x.shape
    x = x.view(b, h // window, window, w // window, window, c)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, window * window, c)


def window_reverse(windows: Tensor, window: int, h: int, w: int) -> Tensor:
    """Inverse of ``window_partition``: (B * windows, window^2, C) -> (B, H, W, C)."""
    c = windows.shape[-1]
    x = windows.view(-1, h // window, w // window, window, window, c)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, h, w, c)


def relative_position_index(window: int) -> Tensor:
    """(N, N) row of the bias table for each pair of tokens in a window (N = window^2):
    the pair's offset (dy, dx), each in [-(window - 1), window - 1], as one index."""
    coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
    offset = coords[:, :, None] - coords[:, None, :] + (window - 1)
    return offset[0] * (2 * window - 1) + offset[1]


def shift_mask(resolution: int, window: int, shift: int) -> Tensor:
    """(windows, N, N) additive mask of a shifted block: after rolling by ``shift``, a window
    may hold tokens from up to four regions of the image that were not neighbours; pairs
    from different regions get ``MASKED`` (-100, as timm), others 0."""
    position = torch.arange(resolution)
    region = (position >= resolution - window).long() + (position >= resolution - shift).long()  # 0, 1, 2 per axis
    labels = (3 * region[:, None] + region[None, :]).to(torch.float32)[None, :, :, None]
    labels = window_partition(labels, window).squeeze(-1)  # (windows, N)
    different = labels[:, None, :] != labels[:, :, None]
    return torch.zeros(different.shape).masked_fill(different, MASKED)


class PatchEmbed(nn.Module):
    """Non-overlapping patches by a strided convolution, then a LayerNorm: (B, C_in, H, W) -> (B, h, w, C)."""

    def __init__(self, cfg: SwinConfig) -> None:
        super().__init__()
        self.proj = nn.Conv2d(cfg.in_chans, cfg.width, cfg.patch_size, stride=cfg.patch_size)
        self.norm = nn.LayerNorm(cfg.width, eps=cfg.norm_eps)

    def forward(self, images: Tensor) -> Tensor:
        return self.norm(self.proj(images).permute(0, 2, 3, 1))


class PatchMerging(nn.Module):
    """Each 2x2 group of tokens concatenated (timm's order), normed and projected: (B, H, W, C) -> (B, H/2, W/2, 2C)."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4 * width, eps=eps)
        self.reduction = nn.Linear(4 * width, 2 * width, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        b, h, w, c = x.shape
        x = x.reshape(b, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 4, 2, 5).flatten(3)
        return self.reduction(self.norm(x))


class Mlp(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class SwinBlock(nn.Module):
    """Pre-norm block on (B, H, W, C): windowed attention (shifted by ``shift``, with the
    relative position bias), then the MLP, each with a residual add."""

    def __init__(self, cfg: SwinConfig, stage: Stage, shift: int) -> None:
        super().__init__()
        self.window, self.shift, self.resolution = stage.window, shift, stage.resolution
        self.norm1 = nn.LayerNorm(stage.width, eps=cfg.norm_eps)
        self.attn = MultiheadAttention(stage.width, stage.heads, bias=cfg.qkv_bias, out_bias=True)
        self.relative_position_bias_table = nn.Parameter(torch.zeros(stage.table_rows, stage.heads))
        self.register_buffer("relative_position_index", relative_position_index(stage.window), persistent=False)
        mask = shift_mask(stage.resolution, stage.window, shift) if shift else None
        self.register_buffer("shift_mask", mask, persistent=False)
        self.norm2 = nn.LayerNorm(stage.width, eps=cfg.norm_eps)
        self.mlp = Mlp(stage.width, stage.hidden)

    def attention_bias(self, batch: int) -> Tensor:
        """The additive attention mask: (1, H, N, N) bias, or (B * windows, H, N, N) with the shift mask."""
        n = self.window**2
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(n, n, -1)
        bias = bias.permute(2, 0, 1).unsqueeze(0)
        if self.shift_mask is None:
            return bias
        return (bias + self.shift_mask.to(bias.dtype).unsqueeze(1)).repeat(batch, 1, 1, 1)

    def forward(self, x: Tensor) -> Tensor:
        b, h, w, c = x.shape
        y = self.norm1(x)
        if self.shift:  # cyclic shift: the windows of this block straddle the previous block's
            y = torch.roll(y, shifts=(-self.shift, -self.shift), dims=(1, 2))
        y = self.attn(window_partition(y, self.window), attend_mask=self.attention_bias(b))
        y = window_reverse(y, self.window, h, w)
        if self.shift:
            y = torch.roll(y, shifts=(self.shift, self.shift), dims=(1, 2))
        x = x + y
        return x + self.mlp(self.norm2(x))


class SwinStage(nn.Module):
    """Patch merging (all stages but the first), then blocks alternating plain and shifted windows."""

    def __init__(self, cfg: SwinConfig, index: int) -> None:
        super().__init__()
        stage = cfg.stages[index]
        self.downsample = PatchMerging(stage.width // 2, cfg.norm_eps) if index else None
        self.blocks = nn.ModuleList(
            SwinBlock(cfg, stage, stage.shift if i % 2 else 0) for i in range(cfg.depths[index])
        )

    def forward(self, x: Tensor) -> Tensor:
        if self.downsample is not None:
            x = self.downsample(x)
        for block in self.blocks:
            x = block(x)
        return x


class SwinTransformer(nn.Module):
    """Swin classifier: images (B, C_in, H, W) -> logits (B, num_classes)."""

    def __init__(self, cfg: SwinConfig) -> None:
        super().__init__()
        self.config = cfg
        self.patch_embed = PatchEmbed(cfg)
        self.layers = nn.ModuleList(SwinStage(cfg, s) for s in range(len(cfg.depths)))
        self.norm = nn.LayerNorm(cfg.num_features, eps=cfg.norm_eps)
        self.head = nn.Linear(cfg.num_features, cfg.num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """timm's default scheme: truncated normal (std 0.02) weights and bias tables, zero biases."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, SwinBlock):
                nn.init.trunc_normal_(module.relative_position_bias_table, std=0.02)

    def forward_features(self, images: Tensor) -> Tensor:
        """Last-stage features (B, h, w, C_last) after the final norm."""
        check_images(images, self.config)
        x = self.patch_embed(images)
        for stage in self.layers:
            x = stage(x)
        return self.norm(x)

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.forward_features(images).mean(dim=(1, 2)))

    def num_params(self, non_embedding: bool = False) -> int:
        """Total parameters; ``non_embedding=True`` leaves out the patch embedding (projection
        and norm) and the relative position bias tables."""
        total = sum(p.numel() for p in self.parameters())
        if non_embedding:
            total -= sum(p.numel() for p in self.patch_embed.parameters())
            total -= sum(m.relative_position_bias_table.numel() for m in self.modules() if isinstance(m, SwinBlock))
        return total


def build(width: int, **config) -> SwinTransformer:
    """Builder of the ``swin`` entries: ``width`` plus any ``SwinConfig`` keyword."""
    return SwinTransformer(SwinConfig.of(width, **config))
