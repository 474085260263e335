"""The built-in Vision Transformer module (timm's ``VisionTransformer`` layout).

Parameter names follow timm except inside attention, which is our ``MultiheadAttention``
(``blocks.{i}.attn.{q,k,v,out}_proj`` instead of ``qkv`` / ``proj``).

Per-layer outputs for parity: a forward hook on ``blocks[i].attn`` receives that block's
attention output, a tensor (B, N, C) with N = patches + 1 (class token first), before the
residual add -- the same place and shape as a hook on timm's ``blocks[i].attn``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from flops_fit.plugins.attention import MultiheadAttention
from flops_fit.plugins.vit import ViTConfig
from torch import Tensor, nn


class PatchEmbed(nn.Module):
    """Non-overlapping patches by a strided convolution: (B, C_in, H, W) -> (B, P, C)."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.proj = nn.Conv2d(cfg.in_chans, cfg.width, cfg.patch_size, stride=cfg.patch_size)

    def forward(self, images: Tensor) -> Tensor:
        return self.proj(images).flatten(2).transpose(1, 2)


class Mlp(nn.Module):
    def __init__(self, width: int, hidden: int, approximate: str) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate=self.approximate))


class Block(nn.Module):
    """Pre-norm block: x + attn(norm1(x)), then x + mlp(norm2(x))."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.width, eps=cfg.norm_eps)
        self.attn = MultiheadAttention(cfg.width, cfg.num_heads, cfg.num_kv_heads, cfg.qkv_bias, out_bias=True)
        self.norm2 = nn.LayerNorm(cfg.width, eps=cfg.norm_eps)
        self.mlp = Mlp(cfg.width, cfg.mlp_hidden, "tanh" if cfg.gelu == "tanh" else "none")

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """ViT classifier: images (B, C_in, H, W) -> logits (B, num_classes)."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.config = cfg
        self.patch_embed = PatchEmbed(cfg)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, cfg.width))
        self.pos_embed = nn.Parameter(torch.zeros(1, cfg.seq_len, cfg.width))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        # With global_pool="avg" this norm is applied after pooling (timm's fc_norm).
        self.norm = nn.LayerNorm(cfg.width, eps=cfg.norm_eps)
        self.head = nn.Linear(cfg.width, cfg.num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """timm's default scheme: truncated normal (std 0.02) weights, zero biases."""
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def _check_images(self, images: Tensor) -> None:
        cfg = self.config
        expected = (cfg.in_chans, cfg.image_size, cfg.image_size)
        if images.dim() != 4:
            raise ValueError(f"images must be 4-D (batch, channels, height, width), got shape {tuple(images.shape)}")
        if images.shape[1] != cfg.in_chans:
            raise ValueError(
                f"images have {images.shape[1]} channels but the model expects in_chans={cfg.in_chans} "
                f"(shape {tuple(images.shape)})"
            )
        if tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"images are {images.shape[2]}x{images.shape[3]} but the model expects "
                f"{cfg.image_size}x{cfg.image_size} (image_size={cfg.image_size}); resize the "
                f"images or build the model with image_size matching them"
            )

    def forward_features(self, images: Tensor) -> Tensor:
        """Token features after the blocks: (B, patches + 1, C), class token first."""
        self._check_images(images)
        x = self.patch_embed(images)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return x

    def forward(self, images: Tensor) -> Tensor:
        x = self.forward_features(images)
        if self.config.global_pool == "avg":
            x = self.norm(x[:, 1:].mean(dim=1))
        else:
            x = self.norm(x)[:, 0]
        return self.head(x)

    def num_params(self, non_embedding: bool = False) -> int:
        """Total parameters; ``non_embedding=True`` leaves out the patch embedding (conv
        weight and bias), the class token and the position embedding."""
        total = sum(p.numel() for p in self.parameters())
        if non_embedding:
            embedding = (self.patch_embed.proj.weight, self.patch_embed.proj.bias, self.cls_token, self.pos_embed)
            total -= sum(p.numel() for p in embedding)
        return total


def build(width: int, **config) -> VisionTransformer:
    """Builder of the ``vit`` entries: ``width`` plus any ``ViTConfig`` keyword."""
    return VisionTransformer(ViTConfig.of(width, **config))
