"""The built-in Vision Transformer module (timm's ``VisionTransformer`` layout).

Parameter names follow timm except inside attention, which is our ``MultiheadAttention``
(``blocks.{i}.attn.{qkv,out}_proj`` instead of ``qkv`` / ``proj``; the packed rows are the
same). Optional pieces keep timm's names: ``reg_token``, ``dist_token`` / ``head_dist``,
``norm_pre``, ``blocks.{i}.ls1.gamma`` / ``ls2.gamma``, ``blocks.{i}.attn.q_norm`` /
``k_norm``; the final norm is ``norm`` wherever it sits (timm's ``fc_norm`` after pooling).

Per-layer outputs for parity: a forward hook on ``blocks[i].attn`` receives that block's
attention output, a tensor (B, N, C) with N = prefix tokens + patches, before LayerScale
and the residual add -- the same place and shape as a hook on timm's ``blocks[i].attn``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from flops_fit.plugins.models.attention import MultiheadAttention
from flops_fit.plugins.models.parametrization import MuPModel
from flops_fit.plugins.models.vit import ViTConfig
from torch import Tensor, nn


def quick_gelu(x: Tensor) -> Tensor:
    """CLIP's GELU approximation ``x * sigmoid(1.702 x)`` (timm ``QuickGELU``)."""
    return x * torch.sigmoid(1.702 * x)


ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "quick_gelu": quick_gelu,
    "silu": F.silu,
    "relu": F.relu,
}


def check_images(images: Tensor, cfg) -> None:
    """Refuse a batch of images whose shape is not ``cfg``'s (B, in_chans, image_size,
    image_size), naming the fix; every built-in image model checks its input with this."""
    if images.dim() != 4:
        raise ValueError(f"images must be 4-D (batch, channels, height, width), got shape {tuple(images.shape)}")
    if images.shape[1] != cfg.in_chans:
        raise ValueError(
            f"images have {images.shape[1]} channels but the model expects in_chans={cfg.in_chans} "
            f"(shape {tuple(images.shape)})"
        )
    if tuple(images.shape[2:]) != (cfg.image_size, cfg.image_size):
        raise ValueError(
            f"images are {images.shape[2]}x{images.shape[3]} but the model expects "
            f"{cfg.image_size}x{cfg.image_size} (image_size={cfg.image_size}); resize the "
            f"images or build the model with image_size matching them"
        )


class PatchEmbed(nn.Module):
    """Non-overlapping patches by a strided convolution: (B, C_in, H, W) -> (B, P, C)."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.proj = nn.Conv2d(cfg.in_chans, cfg.width, cfg.patch_size, stride=cfg.patch_size, bias=not cfg.pre_norm)

    def forward(self, images: Tensor) -> Tensor:
        return self.proj(images).flatten(2).transpose(1, 2)


class Mlp(nn.Module):
    def __init__(self, width: int, hidden: int, act_layer: str, bias: bool) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden, bias=bias)
        self.fc2 = nn.Linear(hidden, width, bias=bias)
        self.act = ACTIVATIONS[act_layer]

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class LayerScale(nn.Module):
    """Per-channel learned scale of a residual branch (CaiT, DeiT-III; timm ``LayerScale``)."""

    def __init__(self, width: int, init_values: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(width))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma


class Block(nn.Module):
    """Pre-norm block: x + ls1(attn(norm1(x))), then x + ls2(mlp(norm2(x)))."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.width, eps=cfg.norm_eps)
        self.attn = MultiheadAttention(
            cfg.width, cfg.num_heads, cfg.num_kv_heads, cfg.qkv_bias, out_bias=cfg.proj_bias,
            qk_norm=cfg.qk_norm, norm_eps=cfg.norm_eps, scale=cfg.mup.attention_scale if cfg.mup else None,
        )
        self.norm2 = nn.LayerNorm(cfg.width, eps=cfg.norm_eps)
        self.mlp = Mlp(cfg.width, cfg.mlp_hidden, cfg.act_layer, cfg.proj_bias)
        scaled = cfg.init_values is not None
        self.ls1 = LayerScale(cfg.width, cfg.init_values) if scaled else nn.Identity()
        self.ls2 = LayerScale(cfg.width, cfg.init_values) if scaled else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


class VisionTransformer(MuPModel, nn.Module):
    """ViT classifier: images (B, C_in, H, W) -> logits (B, num_classes)."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.config = cfg
        c = cfg.width
        self.patch_embed = PatchEmbed(cfg)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c)) if cfg.class_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, c)) if cfg.dist_token else None
        self.reg_token = nn.Parameter(torch.zeros(1, cfg.reg_tokens, c)) if cfg.reg_tokens else None
        self.pos_embed = nn.Parameter(torch.zeros(1, cfg.pos_embed_len, c))
        self.norm_pre = nn.LayerNorm(c, eps=cfg.norm_eps) if cfg.pre_norm else nn.Identity()
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(c, eps=cfg.norm_eps)  # before pooling, or after it (norm_after_pool)
        self.head = nn.Linear(c, cfg.num_classes)
        self.head_dist = nn.Linear(c, cfg.num_classes) if cfg.num_heads_out == 2 else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """timm's default scheme: truncated normal (std 0.02) weights, zero biases."""
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        for token in (self.cls_token, self.dist_token, self.reg_token):
            if token is not None:
                nn.init.normal_(token, std=1e-6)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        self.scale_hidden_init()  # muP (plugins.parametrization.MuPModel)


    def _tokens(self, images: Tensor) -> Tensor:
        """Patch tokens with the prefix tokens (class, distillation, registers) and positions."""
        x = self.patch_embed(images)
        prefix = [t.expand(x.shape[0], -1, -1) for t in (self.cls_token, self.dist_token, self.reg_token)
                  if t is not None]
        if self.config.no_embed_class:  # positions for the patches only (DeiT-III, big vision)
            return torch.cat((*prefix, x + self.pos_embed), dim=1)
        return torch.cat((*prefix, x), dim=1) + self.pos_embed

    def forward_features(self, images: Tensor) -> Tensor:
        """Token features after the blocks (B, prefix tokens + patches, C), before the final norm."""
        check_images(images, self.config)
        x = self.norm_pre(self._tokens(images))
        for block in self.blocks:
            x = block(x)
        return x

    def forward(self, images: Tensor) -> Tensor:
        cfg = self.config
        x = self.forward_features(images)
        if not cfg.norm_after_pool:
            x = self.norm(x)
        if cfg.global_pool == "avg":
            pooled = x[:, cfg.num_prefix_tokens:].mean(dim=1)
        else:
            pooled = x[:, 0]
        if cfg.norm_after_pool:
            pooled = self.norm(pooled)
        dist = x[:, 1] if self.head_dist is not None else None
        pooled = self.readout_input(pooled)  # muP's output multiplier (plugins.parametrization.MuPModel)
        dist = self.readout_input(dist) if dist is not None else None
        logits = self.head(pooled)
        if dist is not None:  # DeiT: the mean of the class and distillation heads
            logits = (logits + self.head_dist(dist)) / 2
        return logits

    def num_params(self, non_embedding: bool = False) -> int:
        """Total parameters; ``non_embedding=True`` leaves out the patch embedding, the prefix
        tokens and the position embedding."""
        total = sum(p.numel() for p in self.parameters())
        if non_embedding:
            embedding = [*self.patch_embed.parameters(), self.pos_embed]
            embedding += [t for t in (self.cls_token, self.dist_token, self.reg_token) if t is not None]
            total -= sum(p.numel() for p in embedding)
        return total


def build(width: int, **config) -> VisionTransformer:
    """Builder of the ``vit`` entries: ``width`` plus any ``ViTConfig`` keyword."""
    return VisionTransformer(ViTConfig.of(width, **config))
