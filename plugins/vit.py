"""Built-in Vision Transformer: registration, configuration and analytic size/cost.

No torch here: the model lives in ``vit_model`` and is built lazily.

Model ``vit`` is sized by its width (embedding dimension). Depth is fixed (``depth``,
default 6); heads follow the width (``width / head_dim`` with ``head_dim`` 32) unless
``num_heads`` is given. So valid widths are multiples of ``head_dim`` (or of
``num_heads``). The default input is CIFAR-sized: 32 x 32 x 3 images, patch 4, 10 classes.
Presets ``vit_{tiny,small,base}_patch16_224`` match timm's models of those names.
"""

from __future__ import annotations

from dataclasses import dataclass

from flops_fit.plugins import sizing

import flops_fit
from flops_fit.checks import positive_int

POOLS = ("token", "avg")
GELUS = ("exact", "tanh")


@dataclass(frozen=True)
class ViTConfig:
    """Every knob of the built-in ViT; validated on construction (ValueError)."""

    width: int
    depth: int = 6
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int = 32
    patch_size: int = 4
    image_size: int = 32
    in_chans: int = 3
    num_classes: int = 10
    mlp_ratio: float = 4.0
    global_pool: str = "token"
    qkv_bias: bool = True
    norm_eps: float = 1e-6
    gelu: str = "exact"

    def __post_init__(self) -> None:
        heads, kv_heads = sizing.resolve_heads(self.width, self.num_heads, self.num_kv_heads, self.head_dim)
        object.__setattr__(self, "num_heads", heads)
        object.__setattr__(self, "num_kv_heads", kv_heads)
        for name in ("depth", "patch_size", "image_size", "in_chans", "num_classes"):
            positive_int(getattr(self, name), name)
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size {self.image_size} is not divisible by patch_size {self.patch_size}: "
                f"pick a patch size that divides the image size"
            )
        if not self.mlp_ratio > 0 or int(self.width * self.mlp_ratio) <= 0:
            raise ValueError(f"mlp_ratio must give a positive MLP width, got {self.mlp_ratio!r}")
        if self.global_pool not in POOLS:
            raise ValueError(f"global_pool must be one of {POOLS}, got {self.global_pool!r}")
        if self.gelu not in GELUS:
            raise ValueError(f"gelu must be one of {GELUS}, got {self.gelu!r}")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be positive, got {self.norm_eps!r}")

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def seq_len(self) -> int:
        """Patch tokens plus the class token."""
        return self.num_patches + 1

    @property
    def mlp_hidden(self) -> int:
        return int(self.width * self.mlp_ratio)  # as timm


    @classmethod
    def of(cls, width: int, **config) -> ViTConfig:
        """Build from keyword configuration, naming any unknown keyword."""
        return cls(width, **sizing.known_keywords(cls, config))


def embedding_params(cfg: ViTConfig) -> int:
    """Patch embedding (conv weight and bias), class token and position embedding."""
    patch = cfg.width * cfg.in_chans * cfg.patch_size**2 + cfg.width
    return patch + cfg.width + cfg.seq_len * cfg.width


def param_count(width: int, **config) -> int:
    """Exact total parameters of ``vit`` at this width."""
    cfg = ViTConfig.of(width, **config)
    c = cfg.width
    block = (
        2 * sizing.layer_norm_params(c)
        + sizing.attention_params(c, cfg.num_heads, cfg.num_kv_heads, cfg.qkv_bias, True)
        + sizing.mlp_params(c, cfg.mlp_hidden, True)
    )
    head = sizing.layer_norm_params(c) + c * cfg.num_classes + cfg.num_classes
    return embedding_params(cfg) + cfg.depth * block + head


def patch_embed_flops(cfg: ViTConfig) -> int:
    """Forward FLOPs of the patch embedding (a matmul over every patch)."""
    return 2 * cfg.num_patches * cfg.in_chans * cfg.patch_size**2 * cfg.width


def forward_flops(width: int, **config) -> int:
    """Forward FLOPs per image: patch embedding, every block on all S tokens, head."""
    cfg = ViTConfig.of(width, **config)
    patch = patch_embed_flops(cfg)
    blocks = cfg.depth * sizing.block_forward_flops(
        cfg.seq_len, cfg.width, cfg.num_heads, cfg.num_kv_heads, cfg.mlp_hidden
    )
    head = 2 * cfg.width * cfg.num_classes  # on the pooled token only
    return patch + blocks + head


def training_flops(width: int, **config) -> float:
    """Training FLOPs per image: 3 x forward, less the patch embedding's input gradient,
    which backward never computes (images need no gradient)."""
    cfg = ViTConfig.of(width, **config)
    return sizing.training_from_forward(forward_flops(width, **config)) - patch_embed_flops(cfg)


def valid_sizes(lo: int, hi: int, **config) -> list[int]:
    """Widths in [lo, hi] whose head split is valid (multiples of head_dim or num_heads)."""
    return sizing.valid_widths(ViTConfig, lo, hi, config, "num_heads", "num_kv_heads")


VIT_DEFAULTS = sizing.config_defaults(ViTConfig)  # the defaults of model `vit`

# timm's vit_*_patch16_224: width, heads; all have 12 blocks, patch 16, 224 px, 1000 classes.
TIMM_PRESETS = {
    "vit_tiny_patch16_224": (192, 3),
    "vit_small_patch16_224": (384, 6),
    "vit_base_patch16_224": (768, 12),
}


def _entry(name: str, description: str, defaults: dict, default_size: int | None) -> flops_fit.ModelEntry:
    return flops_fit.ModelEntry(
        name,
        description=description,
        builder="flops_fit.plugins.vit_model:build",
        size_param="width",
        valid_sizes=valid_sizes,
        param_count=param_count,
        training_flops=training_flops,
        flops_unit="sample",
        task=flops_fit.TASK_IMAGE_CLASSIFICATION,
        default_loss="cross-entropy",
        default_datasets=("digits",),
        defaults=defaults,
        default_size=default_size,
    )


@flops_fit.hookimpl
def register_models(register):
    register(_entry(
        "vit",
        "Vision Transformer sized by width: 6 blocks, heads = width / 32, CIFAR-sized input "
        "(32 px, patch 4, 10 classes)",
        dict(VIT_DEFAULTS),
        None,
    ))
    for name, (width, heads) in TIMM_PRESETS.items():
        defaults = {
            **VIT_DEFAULTS, "depth": 12, "num_heads": heads, "patch_size": 16, "image_size": 224,
            "num_classes": 1000,
        }
        register(_entry(name, f"timm {name}: width {width}, 12 blocks, {heads} heads", defaults, width))
