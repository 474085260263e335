"""Built-in CaiT (Class-Attention in Image Transformers): registration, configuration and
analytic size/cost. No torch here: the model lives in ``cait_model`` and is built lazily.

Touvron et al. 2021 ("Going deeper with Image Transformers"), as timm's ``Cait``: patch
tokens with a learned position embedding go through ``depth`` self-attention blocks
(talking-heads attention, LayerScale on both branches), then a class token, which has no
position embedding, attends to them in ``depth_token_only`` class-attention blocks (only
the class token is updated); a final norm over all tokens and a linear head.

Model ``cait`` is sized by its width; depth is fixed and heads follow the width
(``width / head_dim``) unless ``num_heads`` is given. The default input is CIFAR-sized
(32 px, patch 4, 10 classes). Preset ``cait_xxs24_224`` is timm's model of that name.
"""

from __future__ import annotations

from dataclasses import dataclass

from flops_fit.plugins.models import sizing
from flops_fit.plugins.models.vit import ACTIVATIONS

import flops_fit
from flops_fit.checks import positive_int

POOLS = ("token", "avg")


@dataclass(frozen=True)
class CaitConfig:
    """Every knob of the built-in CaiT (timm's argument names); validated on construction.

    ``init_values`` initialises the LayerScale gammas (CaiT always has them);
    ``talking_heads=False`` replaces timm's talking-heads attention in the self-attention
    blocks by plain multi-head attention (not a timm model: an ablation).
    """

    width: int
    depth: int = 6
    depth_token_only: int = 2
    num_heads: int | None = None
    head_dim: int = 32
    patch_size: int = 4
    image_size: int = 32
    in_chans: int = 3
    num_classes: int = 10
    mlp_ratio: float = 4.0
    mlp_ratio_token_only: float = 4.0
    global_pool: str = "token"
    init_values: float = 1e-4
    talking_heads: bool = True
    qkv_bias: bool = True
    norm_eps: float = 1e-6
    act_layer: str = "gelu"

    def __post_init__(self) -> None:
        sizing.check_switches(self)
        heads, _ = sizing.resolve_heads(self.width, self.num_heads, None, self.head_dim)
        object.__setattr__(self, "num_heads", heads)
        for name in ("depth", "depth_token_only", "patch_size", "image_size", "in_chans", "num_classes"):
            positive_int(getattr(self, name), name)
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size {self.image_size} is not divisible by patch_size {self.patch_size}: "
                f"pick a patch size that divides the image size"
            )
        for name in ("mlp_ratio", "mlp_ratio_token_only"):
            ratio = getattr(self, name)
            if not ratio > 0 or int(self.width * ratio) <= 0:
                raise ValueError(f"{name} must give a positive MLP width, got {ratio!r}")
        if self.global_pool not in POOLS:
            raise ValueError(f"global_pool must be one of {POOLS}, got {self.global_pool!r}")
        if self.act_layer not in ACTIVATIONS:
            raise ValueError(f"act_layer must be one of {ACTIVATIONS}, got {self.act_layer!r}")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be positive, got {self.norm_eps!r}")
        value = self.init_values
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"init_values (LayerScale) must be positive, got {value!r}: CaiT always has LayerScale")

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def mlp_hidden(self) -> int:
        return int(self.width * self.mlp_ratio)  # as timm

    @property
    def mlp_hidden_token_only(self) -> int:
        return int(self.width * self.mlp_ratio_token_only)

    @classmethod
    def of(cls, width: int, **config) -> CaitConfig:
        return cls(width, **sizing.known_keywords(cls, config))


def embedding_params(cfg: CaitConfig) -> int:
    """Patch embedding (conv weight and bias), class token, position embedding (patches only)."""
    return cfg.width * cfg.in_chans * cfg.patch_size**2 + cfg.width + cfg.width + cfg.num_patches * cfg.width


def param_count(width: int, **config) -> int:
    """Exact total parameters of ``cait`` at this width."""
    cfg = CaitConfig.of(width, **config)
    c, h = cfg.width, cfg.num_heads
    attn = sizing.attention_params(c, h, h, cfg.qkv_bias, True)  # timm's output projections keep their bias
    self_block = (2 * sizing.layer_norm_params(c) + attn + cfg.talking_heads * 2 * (h * h + h)
                  + sizing.mlp_params(c, cfg.mlp_hidden, True) + 2 * c)
    class_block = 2 * sizing.layer_norm_params(c) + attn + sizing.mlp_params(c, cfg.mlp_hidden_token_only, True) + 2 * c
    head = sizing.layer_norm_params(c) + c * cfg.num_classes + cfg.num_classes
    return embedding_params(cfg) + cfg.depth * self_block + cfg.depth_token_only * class_block + head


def patch_embed_flops(cfg: CaitConfig) -> int:
    return 2 * cfg.num_patches * cfg.in_chans * cfg.patch_size**2 * cfg.width


def self_block_flops(cfg: CaitConfig) -> int:
    """One self-attention block on the N patch tokens; talking heads add two H x H mixes of
    the (N, N) score maps."""
    n, c, h = cfg.num_patches, cfg.width, cfg.num_heads
    talking = cfg.talking_heads * 2 * (2 * n * n * h * h)
    return sizing.block_forward_flops(n, c, h, h, cfg.mlp_hidden) + talking


def class_block_flops(cfg: CaitConfig) -> int:
    """One class-attention block: the class token's query, keys and values of all N + 1
    tokens, its scores and values, output projection and MLP on the class token only."""
    n, c = cfg.num_patches + 1, cfg.width
    projections = 2 * c * c + 2 * n * c * 2 * c + 2 * c * c
    return projections + 2 * 2 * n * c + sizing.mlp_forward_flops(1, c, cfg.mlp_hidden_token_only)


def forward_flops(width: int, **config) -> int:
    """Forward FLOPs per image: patch embedding, the blocks, the head on the pooled token."""
    cfg = CaitConfig.of(width, **config)
    return (patch_embed_flops(cfg) + cfg.depth * self_block_flops(cfg)
            + cfg.depth_token_only * class_block_flops(cfg) + 2 * cfg.width * cfg.num_classes)


def training_flops(width: int, **config) -> float:
    """3 x forward, less the patch embedding's input gradient (images need none)."""
    cfg = CaitConfig.of(width, **config)
    return sizing.training_from_forward(forward_flops(width, **config)) - patch_embed_flops(cfg)


def embedding_param_count(width: int, **config) -> int:
    """Parameters added, not multiplied: the class token and the position embedding."""
    cfg = CaitConfig.of(width, **config)
    return (1 + cfg.num_patches) * cfg.width


def non_embedding_flops(width: int, **config) -> float:
    """Training FLOPs per image without the patch embedding and the head: the blocks."""
    cfg = CaitConfig.of(width, **config)
    head = 2 * cfg.width * cfg.num_classes
    return training_flops(width, **config) - 2 * patch_embed_flops(cfg) - sizing.training_from_forward(head)


def activation_memory(width: int, micro_batch_size: int, seq_len: int, **config) -> int:
    """Bytes of fp32 activations autograd keeps for backward in one micro-batch of images
    (``seq_len`` is 1), as measured with ``saved_tensors_hooks``: per self-attention block and
    patch token 10 x width (LayerScale keeps its inputs), 2 x the MLP width and norm
    statistics, plus 4 N^2 H for the talking-heads score maps (or a log-sum-exp per head
    without them); per class-attention block the N + 1 normed tokens, their keys and values,
    and the class token's path; then the image, the final norm, the pooled token, the logits."""
    cfg = CaitConfig.of(width, **config)
    n, d, h = cfg.num_patches, cfg.width, cfg.num_heads
    if cfg.talking_heads:
        self_block = n * (10 * d + 2 * cfg.mlp_hidden + 4) + 4 * n * n * h
    else:
        self_block = n * (10 * d + 2 * cfg.mlp_hidden + 4 + h)
    class_block = (n + 1) * (4 * d + 2) + 6 * d + 2 * cfg.mlp_hidden_token_only + h + 2
    image = cfg.in_chans * cfg.image_size**2
    # the final norm's input and statistics; its output (the head reads a view of it) or the mean
    pooled = (n + 1) * d if cfg.global_pool == "token" else d
    tail = (n + 1) * (d + 2) + pooled + cfg.num_classes + 2
    per_sample = cfg.depth * self_block + cfg.depth_token_only * class_block + image + tail
    return 4 * micro_batch_size * per_sample


def valid_sizes(lo: int, hi: int, **config) -> list[int]:
    """Widths in [lo, hi] whose head split is valid (multiples of head_dim or num_heads)."""
    return sizing.valid_widths(CaitConfig, lo, hi, config, "num_heads", "num_kv_heads")


CAIT_DEFAULTS = sizing.config_defaults(CaitConfig)

# timm's cait_xxs24_224: width 192, 24 + 2 blocks, 4 heads, patch 16, 224 px, LayerScale 1e-5.
CAIT_XXS24 = {**CAIT_DEFAULTS, "depth": 24, "num_heads": 4, "patch_size": 16, "image_size": 224,
              "num_classes": 1000, "init_values": 1e-5}


# the shared entry fields; the builder is cait_model.build
FAMILY = flops_fit.model_family(__name__, task=flops_fit.TASK_IMAGE_CLASSIFICATION, default_datasets=("digits",))


@flops_fit.hookimpl
def register_models(register):
    register(FAMILY.entry(
        "cait",
        "CaiT sized by width: 6 talking-heads self-attention blocks + 2 class-attention blocks, LayerScale, "
        "heads = width / 32, CIFAR-sized input (32 px, patch 4, 10 classes)",
        defaults=CAIT_DEFAULTS,
    ))
    register(FAMILY.entry("cait_xxs24_224", "timm cait_xxs24_224: width 192, 24 + 2 blocks, 4 heads",
                          defaults=CAIT_XXS24, default_size=192))
