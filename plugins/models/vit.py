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

from flops_fit.plugins.models import parametrization, sizing

import flops_fit
from flops_fit.checks import positive_int

POOLS = ("token", "avg")
# timm's act_layer names for ViT MLPs that we reproduce; "swish" is timm's alias of "silu".
ACTIVATIONS = ("gelu", "gelu_tanh", "quick_gelu", "silu", "relu")


@dataclass(frozen=True)
class ViTConfig:
    """Every knob of the built-in ViT; validated on construction (ValueError).

    The variants the ViT literature names are options with timm's names and meanings:
    ``class_token`` and ``global_pool`` ("token": the class token, "avg": the mean of the
    patch tokens), ``fc_norm`` (final norm after pooling; None = timm's default, after
    pooling for "avg"), ``reg_tokens`` (register tokens), ``init_values`` (LayerScale,
    DeiT-III / CaiT), ``qk_norm``, ``no_embed_class`` (position embedding over patches
    only), ``pre_norm`` (a norm before the blocks, no patch-embedding bias, as CLIP),
    ``dist_token`` (DeiT's distillation token and head; inference returns the mean of the
    two heads), ``dist_head`` (False: the distillation token has no head and the class head
    alone classifies, as HF ``DeiTForImageClassification``), ``act_layer`` and ``proj_bias``
    (output-projection and MLP biases).
    """

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
    fc_norm: bool | None = None
    class_token: bool = True
    reg_tokens: int = 0
    no_embed_class: bool = False
    pre_norm: bool = False
    dist_token: bool = False
    dist_head: bool = True
    init_values: float | None = None
    qk_norm: bool = False
    qkv_bias: bool = True
    proj_bias: bool = True
    norm_eps: float = 1e-6
    act_layer: str = "gelu"
    parametrization: str = "standard"
    base_width: int | None = None

    def __post_init__(self) -> None:
        sizing.check_switches(self)
        parametrization.check(self.parametrization, self.base_width)
        head_grows = self.num_heads is not None  # a fixed number of heads: the head size grows with the width
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
            raise ValueError(
                f"global_pool must be one of {POOLS}, got {self.global_pool!r} "
                f"(attention pooling 'map', 'max' and 'avgmax' are not implemented)"
            )
        if self.act_layer not in ACTIVATIONS:
            raise ValueError(f"act_layer must be one of {ACTIVATIONS}, got {self.act_layer!r}")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be positive, got {self.norm_eps!r}")
        if not isinstance(self.reg_tokens, int) or self.reg_tokens < 0:
            raise ValueError(f"reg_tokens must be a non-negative integer, got {self.reg_tokens!r}")
        if self.global_pool == "token" and not self.class_token:
            raise ValueError("global_pool='token' reads the class token: set class_token=True or global_pool='avg'")
        if self.dist_token and not (self.class_token and self.global_pool == "token" and not self.reg_tokens
                                    and not self.fc_norm):
            raise ValueError(
                "dist_token=True (DeiT) needs class_token=True, global_pool='token', no reg_tokens and "
                "fc_norm not True, as timm's VisionTransformerDistilled"
            )
        if not self.dist_head and not self.dist_token:
            raise ValueError("dist_head=False drops the distillation token's head: it needs dist_token=True")
        if self.init_values is not None and not self.init_values > 0:
            raise ValueError(f"init_values (LayerScale) must be positive or None, got {self.init_values!r}")
        # muP's factors (None: standard); derived, so not a field (``plugins.parametrization``)
        object.__setattr__(self, "mup", parametrization.of(
            self.parametrization, self.width, self.base_width, self.width // heads, head_grows))

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def num_prefix_tokens(self) -> int:
        """Class, distillation and register tokens, in that order before the patches."""
        return int(self.class_token) + int(self.dist_token) + self.reg_tokens

    @property
    def seq_len(self) -> int:
        """Tokens the blocks see: prefix tokens plus patches."""
        return self.num_prefix_tokens + self.num_patches

    @property
    def pos_embed_len(self) -> int:
        return self.num_patches if self.no_embed_class else self.seq_len

    @property
    def norm_after_pool(self) -> bool:
        """timm's ``fc_norm``: the final norm after pooling (default for average pooling)."""
        return self.global_pool == "avg" if self.fc_norm is None else bool(self.fc_norm)

    @property
    def mlp_hidden(self) -> int:
        return int(self.width * self.mlp_ratio)  # as timm

    @property
    def num_heads_out(self) -> int:
        """Classifier heads: two with a distillation token that has its own head."""
        return 2 if self.dist_token and self.dist_head else 1

    @classmethod
    def of(cls, width: int, **config) -> ViTConfig:
        """Build from keyword configuration, naming any unknown keyword."""
        return cls(width, **sizing.known_keywords(cls, config))


def embedding_params(cfg: ViTConfig) -> int:
    """Patch embedding (conv weight, and bias unless pre_norm), prefix tokens, position embedding."""
    patch = cfg.width * cfg.in_chans * cfg.patch_size**2 + (0 if cfg.pre_norm else cfg.width)
    return patch + cfg.num_prefix_tokens * cfg.width + cfg.pos_embed_len * cfg.width


def param_count(width: int, **config) -> int:
    """Exact total parameters of ``vit`` at this width."""
    cfg = ViTConfig.of(width, **config)
    c = cfg.width
    block = (
        2 * sizing.layer_norm_params(c)
        + sizing.attention_params(c, cfg.num_heads, cfg.num_kv_heads, cfg.qkv_bias, cfg.proj_bias,
                                  qk_norm=cfg.qk_norm)
        + sizing.mlp_params(c, cfg.mlp_hidden, cfg.proj_bias)
        + (2 * c if cfg.init_values is not None else 0)  # LayerScale gammas
    )
    pre = sizing.layer_norm_params(c) if cfg.pre_norm else 0
    head = sizing.layer_norm_params(c) + cfg.num_heads_out * (c * cfg.num_classes + cfg.num_classes)
    return embedding_params(cfg) + pre + cfg.depth * block + head


def patch_embed_flops(cfg: ViTConfig) -> int:
    """Forward FLOPs of the patch embedding (a matmul over every patch)."""
    return 2 * cfg.num_patches * cfg.in_chans * cfg.patch_size**2 * cfg.width


def forward_flops(width: int, **config) -> int:
    """Forward FLOPs per image: patch embedding, every block on all S tokens, head(s)."""
    cfg = ViTConfig.of(width, **config)
    patch = patch_embed_flops(cfg)
    blocks = cfg.depth * sizing.block_forward_flops(
        cfg.seq_len, cfg.width, cfg.num_heads, cfg.num_kv_heads, cfg.mlp_hidden
    )
    head = cfg.num_heads_out * 2 * cfg.width * cfg.num_classes  # on the pooled token(s) only
    return patch + blocks + head


def training_flops(width: int, **config) -> float:
    """Training FLOPs per image: 3 x forward, less the patch embedding's input gradient,
    which backward never computes (images need no gradient)."""
    cfg = ViTConfig.of(width, **config)
    return sizing.training_from_forward(forward_flops(width, **config)) - patch_embed_flops(cfg)


def embedding_param_count(width: int, **config) -> int:
    """Parameters added, not multiplied: the prefix (class, register, distillation) tokens and
    the position embedding. The patch embedding is a matmul: it counts as compute."""
    cfg = ViTConfig.of(width, **config)
    return (cfg.num_prefix_tokens + cfg.pos_embed_len) * cfg.width


def non_embedding_flops(width: int, **config) -> float:
    """Training FLOPs per image without the patch embedding and the head(s): the blocks."""
    cfg = ViTConfig.of(width, **config)
    head = cfg.num_heads_out * 2 * cfg.width * cfg.num_classes
    return training_flops(width, **config) - 2 * patch_embed_flops(cfg) - sizing.training_from_forward(head)


def activation_memory(width: int, micro_batch_size: int, seq_len: int, **config) -> int:
    """Bytes of fp32 activations autograd keeps for backward in one micro-batch of images
    (``seq_len`` is 1: a sample is an image): per block and token as in ``gpt`` (8 x width, 2 x
    the MLP width, norm statistics, a log-sum-exp per head), then the image, the embedded
    tokens, the final norm and the logits."""
    cfg = ViTConfig.of(width, **config)
    d, tokens = cfg.width, cfg.seq_len
    per_block = tokens * (8 * d + 2 * cfg.mlp_hidden + 4 + cfg.num_heads)
    image = cfg.in_chans * cfg.image_size**2
    per_sample = cfg.depth * per_block + image + 2 * tokens * d + 2 * tokens + cfg.num_classes + 2
    return 4 * micro_batch_size * per_sample


def valid_sizes(lo: int, hi: int, **config) -> list[int]:
    """Widths in [lo, hi] whose head split is valid (multiples of head_dim or num_heads)."""
    return sizing.valid_widths(ViTConfig, lo, hi, config, "num_heads", "num_kv_heads")


VIT_DEFAULTS = parametrization.without_keywords(sizing.config_defaults(ViTConfig))  # the defaults of model `vit`

# timm's vit_*_patch16_224: width, heads; all have 12 blocks, patch 16, 224 px, 1000 classes.
TIMM_PRESETS = {
    "vit_tiny_patch16_224": (192, 3),
    "vit_small_patch16_224": (384, 6),
    "vit_base_patch16_224": (768, 12),
}


# the shared entry fields; the builder is vit_model.build
FAMILY = flops_fit.model_family(__name__, task=flops_fit.TASK_IMAGE_CLASSIFICATION, default_datasets=("digits",))


@flops_fit.hookimpl
def register_models(register):
    register(FAMILY.entry(
        "vit",
        "Vision Transformer sized by width: 6 blocks, heads = width / 32, CIFAR-sized input "
        "(32 px, patch 4, 10 classes)",
        defaults=VIT_DEFAULTS,
    ))
    for name, (width, heads) in TIMM_PRESETS.items():
        defaults = {
            **VIT_DEFAULTS, "depth": 12, "num_heads": heads, "patch_size": 16, "image_size": 224,
            "num_classes": 1000,
        }
        register(FAMILY.entry(name, f"timm {name}: width {width}, 12 blocks, {heads} heads", defaults=defaults,
                                 default_size=width))
