"""The built-in CaiT module (timm's ``Cait`` layout) on the one ``MultiheadAttention``.

Self-attention blocks use it with ``talking_heads=True`` (timm's ``TalkingHeadAttn``: its
``proj_l`` / ``proj_w`` keep their names); class-attention blocks use it as cross-attention
from the class token to [class token; patches] (timm's ``ClassAttn`` q / k / v pack into
``qkv_proj``). timm's ``gamma_1`` / ``gamma_2`` are our ``ls1.gamma`` / ``ls2.gamma``.

Per-layer outputs for parity: hooks on ``blocks[i].attn`` (B, N, C) and
``blocks_token_only[i].attn`` (B, 1, C) see the attention output before LayerScale and the
residual add, where hooks on timm's modules of the same names do.
"""

from __future__ import annotations

import torch
from flops_fit.plugins.models.attention import MultiheadAttention
from flops_fit.plugins.models.cait import CaitConfig
from flops_fit.plugins.models.vit_model import LayerScale, Mlp, check_images
from torch import Tensor, nn


class PatchEmbed(nn.Module):
    """Non-overlapping patches by a strided convolution: (B, C_in, H, W) -> (B, P, C)."""

    def __init__(self, cfg: CaitConfig) -> None:
        super().__init__()
        self.proj = nn.Conv2d(cfg.in_chans, cfg.width, cfg.patch_size, stride=cfg.patch_size)

    def forward(self, images: Tensor) -> Tensor:
        return self.proj(images).flatten(2).transpose(1, 2)


class SelfAttentionBlock(nn.Module):
    """x + ls1(attn(norm1(x))), then x + ls2(mlp(norm2(x))), over the patch tokens."""

    def __init__(self, cfg: CaitConfig) -> None:
        super().__init__()
        c = cfg.width
        self.norm1 = nn.LayerNorm(c, eps=cfg.norm_eps)
        self.attn = MultiheadAttention(c, cfg.num_heads, bias=cfg.qkv_bias, out_bias=True,
                                       talking_heads=cfg.talking_heads)
        self.ls1 = LayerScale(c, cfg.init_values)
        self.norm2 = nn.LayerNorm(c, eps=cfg.norm_eps)
        self.mlp = Mlp(c, cfg.mlp_hidden, cfg.act_layer, True)
        self.ls2 = LayerScale(c, cfg.init_values)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


class ClassAttentionBlock(nn.Module):
    """Only the class token is updated: it attends to itself and the patches (normed
    together), then goes through the MLP; the patches pass through unchanged."""

    def __init__(self, cfg: CaitConfig) -> None:
        super().__init__()
        c = cfg.width
        self.norm1 = nn.LayerNorm(c, eps=cfg.norm_eps)
        self.attn = MultiheadAttention(c, cfg.num_heads, bias=cfg.qkv_bias, out_bias=True)
        self.ls1 = LayerScale(c, cfg.init_values)
        self.norm2 = nn.LayerNorm(c, eps=cfg.norm_eps)
        self.mlp = Mlp(c, cfg.mlp_hidden_token_only, cfg.act_layer, True)
        self.ls2 = LayerScale(c, cfg.init_values)

    def forward(self, patches: Tensor, cls: Tensor) -> Tensor:
        tokens = self.norm1(torch.cat((cls, patches), dim=1))
        cls = cls + self.ls1(self.attn(tokens[:, :1], tokens, tokens))
        return cls + self.ls2(self.mlp(self.norm2(cls)))


class Cait(nn.Module):
    """CaiT classifier: images (B, C_in, H, W) -> logits (B, num_classes)."""

    def __init__(self, cfg: CaitConfig) -> None:
        super().__init__()
        self.config = cfg
        c = cfg.width
        self.patch_embed = PatchEmbed(cfg)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c))
        self.pos_embed = nn.Parameter(torch.zeros(1, cfg.num_patches, c))  # patches only
        self.blocks = nn.ModuleList(SelfAttentionBlock(cfg) for _ in range(cfg.depth))
        self.blocks_token_only = nn.ModuleList(ClassAttentionBlock(cfg) for _ in range(cfg.depth_token_only))
        self.norm = nn.LayerNorm(c, eps=cfg.norm_eps)
        self.head = nn.Linear(c, cfg.num_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """timm's scheme: truncated normal (std 0.02) for positions, class token and linear
        weights, zero biases; the talking-heads mixes too (timm treats them as linears)."""
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def forward_features(self, images: Tensor) -> Tensor:
        """All tokens (B, 1 + patches, C) after the blocks, before the final norm."""
        check_images(images, self.config)
        x = self.patch_embed(images) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        for block in self.blocks_token_only:
            cls = block(x, cls)
        return torch.cat((cls, x), dim=1)

    def forward(self, images: Tensor) -> Tensor:
        x = self.norm(self.forward_features(images))
        pooled = x[:, 1:].mean(dim=1) if self.config.global_pool == "avg" else x[:, 0]
        return self.head(pooled)

    def num_params(self, non_embedding: bool = False) -> int:
        """Total parameters; ``non_embedding=True`` leaves out the patch embedding, the class
        token and the position embedding."""
        total = sum(p.numel() for p in self.parameters())
        if non_embedding:
            total -= sum(p.numel() for p in (*self.patch_embed.parameters(), self.cls_token, self.pos_embed))
        return total


def build(width: int, **config) -> Cait:
    """Builder of the ``cait`` entries: ``width`` plus any ``CaitConfig`` keyword."""
    return Cait(CaitConfig.of(width, **config))
