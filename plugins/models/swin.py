"""Built-in Swin Transformer: registration, configuration and analytic size/cost.

No torch here: the model lives in ``swin_model`` and is built lazily.

Model ``swin`` is sized by its width: the embedding dimension of the first stage; stage
``s`` is ``width * 2**s`` wide (patch merging doubles it). Depths per stage are fixed
(``depths``, default ``(2, 2, 2)``); heads follow each stage's width (``width / head_dim``
with ``head_dim`` 32, as Swin-T/S/B) unless ``num_heads`` gives them per stage. The default
input is CIFAR-sized: 32 x 32 x 3 images, patch 2 (a 16 x 16 grid), window 4, 10 classes.
Presets ``swin_{tiny,small,base}_patch4_window7_224`` match timm's models of those names.

Windows follow timm: a stage whose resolution is not larger than the window attends over
the whole stage in one window with no shift (unless ``always_partition``); otherwise every
second block shifts its windows by half a window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from flops_fit.plugins.models import sizing

import flops_fit
from flops_fit.checks import positive_int

MASKED = -100.0  # the score offset timm's (and the original) shifted-window mask adds


class Stage(NamedTuple):
    """One stage's shape: width, heads, resolution (tokens per side), window, shift, MLP width."""

    width: int
    heads: int
    resolution: int
    window: int
    shift: int
    hidden: int

    @property
    def tokens(self) -> int:
        return self.resolution**2

    @property
    def windows(self) -> int:
        return (self.resolution // self.window) ** 2

    @property
    def table_rows(self) -> int:
        """Rows of the relative position bias table: every offset in a window."""
        return (2 * self.window - 1) ** 2


def _as_tuple(value, name: str) -> tuple:
    if isinstance(value, (list, tuple)):
        return tuple(value)
    raise ValueError(f"{name} must be a tuple of integers (one per stage), got {value!r}")


@dataclass(frozen=True)
class SwinConfig:
    """Every knob of the built-in Swin; validated on construction (ValueError).

    ``depths`` (blocks per stage) and ``num_heads`` (per stage, or None: each stage's
    width / ``head_dim``) are tuples; ``window_size`` is one int or one per stage. A stage
    whose resolution is not larger than its window uses the whole stage as one window and
    does not shift (timm's behaviour; ``always_partition=True`` keeps the window and the
    shift). Every stage's resolution must be divisible by its window and every merged
    stage's input resolution even: timm pads those cases, which we do not reproduce.
    """

    width: int
    depths: tuple[int, ...] = (2, 2, 2)
    num_heads: tuple[int, ...] | None = None
    head_dim: int = 32
    window_size: int | tuple[int, ...] = 4
    patch_size: int = 2
    image_size: int = 32
    in_chans: int = 3
    num_classes: int = 10
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    norm_eps: float = 1e-5
    always_partition: bool = False

    def __post_init__(self) -> None:
        sizing.check_switches(self)
        positive_int(self.width, "width")
        depths = _as_tuple(self.depths, "depths")
        if not depths:
            raise ValueError("depths must name at least one stage, e.g. depths=(2, 2)")
        for depth in depths:
            positive_int(depth, "every stage's depth")
        object.__setattr__(self, "depths", depths)
        if self.num_heads is not None:
            heads = _as_tuple(self.num_heads, "num_heads")
            if len(heads) != len(depths):
                raise ValueError(f"num_heads {heads} must give one number per stage ({len(depths)} stages, depths {depths})")
            object.__setattr__(self, "num_heads", heads)
        windows = self.window_size if isinstance(self.window_size, int) else _as_tuple(self.window_size, "window_size")
        if isinstance(windows, tuple):
            if len(windows) != len(depths):
                raise ValueError(f"window_size {windows} must be one int or one per stage ({len(depths)} stages)")
            for w in windows:
                positive_int(w, "window_size")
        else:
            positive_int(windows, "window_size")
        object.__setattr__(self, "window_size", windows)
        for name in ("head_dim", "patch_size", "image_size", "in_chans", "num_classes"):
            positive_int(getattr(self, name), name)
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size {self.image_size} is not divisible by patch_size {self.patch_size}: "
                f"pick a patch size that divides the image size"
            )
        if not self.mlp_ratio > 0 or int(self.width * self.mlp_ratio) <= 0:
            raise ValueError(f"mlp_ratio must give a positive MLP width, got {self.mlp_ratio!r}")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be positive, got {self.norm_eps!r}")
        self.stages  # noqa: B018 -- validates heads, resolutions and windows

    @property
    def grid(self) -> int:
        """Patches per side: the first stage's resolution."""
        return self.image_size // self.patch_size

    @property
    def stages(self) -> tuple[Stage, ...]:
        """Each stage's shape, with timm's window clipping; ValueError when one does not fit."""
        stages = []
        for s in range(len(self.depths)):
            width = self.width * 2**s
            if self.num_heads is None:
                if width % self.head_dim:
                    raise ValueError(
                        f"width {self.width} is not a multiple of head_dim {self.head_dim}: heads = width / head_dim "
                        f"(pass a width that is a multiple of {self.head_dim}, or set num_heads per stage)"
                    )
                heads = width // self.head_dim
            else:
                heads = self.num_heads[s]
                positive_int(heads, "number of heads")
                if width % heads:
                    raise ValueError(f"stage {s} width {width} (width x 2^{s}) is not divisible by its {heads} heads")
            if s and (self.grid >> (s - 1)) % 2:
                raise ValueError(
                    f"stage {s - 1} has an odd resolution {self.grid >> (s - 1)} and cannot be merged into 2x2 patches "
                    f"(timm pads it; we do not): pick image_size / patch_size divisible by 2^{len(self.depths) - 1}"
                )
            resolution = self.grid >> s
            target = self.window_size if isinstance(self.window_size, int) else self.window_size[s]
            if self.always_partition or resolution > target:
                window, shift = target, target // 2
            else:
                window, shift = resolution, 0  # the whole stage is one window
            if resolution % window:
                raise ValueError(
                    f"stage {s} resolution {resolution} is not divisible by its window {window} (timm pads it; we do "
                    f"not): pick a window_size that divides {resolution}"
                )
            stages.append(Stage(width, heads, resolution, window, shift, int(width * self.mlp_ratio)))
        return tuple(stages)

    @property
    def num_features(self) -> int:
        """Width of the last stage: the final norm and the head read it."""
        return self.width * 2 ** (len(self.depths) - 1)

    @classmethod
    def of(cls, width: int, **config) -> SwinConfig:
        """Build from keyword configuration, naming any unknown keyword."""
        return cls(width, **sizing.known_keywords(cls, config))


def relative_bias_params(cfg: SwinConfig) -> int:
    """The relative position bias tables, one per block."""
    return sum(depth * st.table_rows * st.heads for depth, st in zip(cfg.depths, cfg.stages))


def param_count(width: int, **config) -> int:
    """Exact total parameters of ``swin`` at this width."""
    cfg = SwinConfig.of(width, **config)
    total = cfg.width * cfg.in_chans * cfg.patch_size**2 + cfg.width + sizing.layer_norm_params(cfg.width)
    previous = None
    for depth, st in zip(cfg.depths, cfg.stages):
        if previous is not None:  # patch merging: norm over 4 x C, reduction 4C -> 2C without bias
            total += sizing.layer_norm_params(4 * previous) + 4 * previous * st.width
        block = (
            2 * sizing.layer_norm_params(st.width)
            + sizing.attention_params(st.width, st.heads, st.heads, cfg.qkv_bias, True)
            + sizing.mlp_params(st.width, st.hidden, True)
            + st.table_rows * st.heads
        )
        total += depth * block
        previous = st.width
    return total + sizing.layer_norm_params(cfg.num_features) + cfg.num_features * cfg.num_classes + cfg.num_classes


def patch_embed_flops(cfg: SwinConfig) -> int:
    """Forward FLOPs of the patch embedding (a matmul over every patch)."""
    return 2 * cfg.grid**2 * cfg.in_chans * cfg.patch_size**2 * cfg.width


def forward_flops(width: int, **config) -> int:
    """Forward FLOPs per image: patch embedding, patch merging, every block on each of its
    windows (attention within a window), head on the pooled features."""
    cfg = SwinConfig.of(width, **config)
    total = patch_embed_flops(cfg)
    previous = None
    for depth, st in zip(cfg.depths, cfg.stages):
        if previous is not None:
            total += 2 * st.tokens * 4 * previous * st.width
        total += depth * st.windows * sizing.block_forward_flops(st.window**2, st.width, st.heads, st.heads, st.hidden)
        previous = st.width
    return total + 2 * cfg.num_features * cfg.num_classes


def training_flops(width: int, **config) -> float:
    """Training FLOPs per image: 3 x forward, less the patch embedding's input gradient,
    which backward never computes (images need no gradient)."""
    cfg = SwinConfig.of(width, **config)
    return sizing.training_from_forward(forward_flops(width, **config)) - patch_embed_flops(cfg)


def embedding_param_count(width: int, **config) -> int:
    """Parameters added, not multiplied: the relative position bias tables (Swin's position
    embedding, looked up and added to the attention scores)."""
    return relative_bias_params(SwinConfig.of(width, **config))


def non_embedding_flops(width: int, **config) -> float:
    """Training FLOPs per image without the patch embedding and the head: the stages."""
    cfg = SwinConfig.of(width, **config)
    head = 2 * cfg.num_features * cfg.num_classes
    return training_flops(width, **config) - 2 * patch_embed_flops(cfg) - sizing.training_from_forward(head)


def activation_memory(width: int, micro_batch_size: int, seq_len: int, **config) -> int:
    """Bytes of fp32 activations autograd keeps for backward in one micro-batch of images
    (``seq_len`` is 1: a sample is an image). Per block and token: 8 x width (the norms' and
    projections' inputs, q, k, v), 2 x the MLP width, 4 norm statistics and the attention
    weights (heads x window^2: the additive bias sends SDPA down its explicit path on CPU);
    per merged token the merge norm's input and output (2 x 4 x the previous width) and 2
    statistics; then the image, the patch embedding and final norms, the pooled features,
    the logits and the label. Per micro-batch: each block's int64 bias index (window^4 x 8
    bytes) and the loss."""
    cfg = SwinConfig.of(width, **config)
    first, last = cfg.stages[0], cfg.stages[-1]
    per_sample = cfg.in_chans * cfg.image_size**2 + first.tokens * (first.width + 2)
    per_sample += last.tokens * (last.width + 2) + last.width + cfg.num_classes + 2
    per_batch = 1
    previous = None
    for depth, st in zip(cfg.depths, cfg.stages):
        if previous is not None:
            per_sample += st.tokens * (2 * 4 * previous + 2)
        per_sample += depth * st.tokens * (8 * st.width + 2 * st.hidden + 4 + st.heads * st.window**2)
        per_batch += depth * 2 * st.window**4
        previous = st.width
    return 4 * (micro_batch_size * per_sample + per_batch)


def _heads_fit(width: int, config: dict) -> bool:
    heads, head_dim = config.get("num_heads"), config.get("head_dim", SwinConfig.head_dim)
    stages = len(config.get("depths", SwinConfig.depths))
    for s in range(stages):
        w = width * 2**s
        if heads is None:
            if not isinstance(head_dim, int) or head_dim <= 0 or w % head_dim:
                return False
        elif not isinstance(heads, (list, tuple)) or len(heads) != stages or not isinstance(heads[s], int) \
                or heads[s] <= 0 or w % heads[s]:
            return False
    return True


def valid_sizes(lo: int, hi: int, **config) -> list[int]:
    """Widths in [lo, hi] whose every stage splits into its heads; other configuration errors
    are raised, not hidden."""
    widths = [w for w in range(max(1, lo), hi + 1) if _heads_fit(w, config)]
    for w in widths[:1]:
        SwinConfig.of(w, **config)  # raises on any other bad keyword
    return widths


SWIN_DEFAULTS = sizing.config_defaults(SwinConfig)  # the defaults of model `swin`

# timm's swin_*_patch4_window7_224: width, depths, heads; patch 4, window 7, 224 px, 1000 classes.
TIMM_PRESETS = {
    "swin_tiny_patch4_window7_224": (96, (2, 2, 6, 2), (3, 6, 12, 24)),
    "swin_small_patch4_window7_224": (96, (2, 2, 18, 2), (3, 6, 12, 24)),
    "swin_base_patch4_window7_224": (128, (2, 2, 18, 2), (4, 8, 16, 32)),
}


# the shared entry fields; the builder is swin_model.build
FAMILY = flops_fit.model_family(__name__, task=flops_fit.TASK_IMAGE_CLASSIFICATION, default_datasets=("digits",))


@flops_fit.hookimpl
def register_models(register):
    register(FAMILY.entry(
        "swin",
        "Swin Transformer sized by the first stage's width: 3 stages of 2 blocks, heads = stage width / 32, "
        "shifted 4x4 windows, CIFAR-sized input (32 px, patch 2, 10 classes)",
        defaults=SWIN_DEFAULTS,
    ))
    for name, (width, depths, heads) in TIMM_PRESETS.items():
        defaults = {
            **SWIN_DEFAULTS, "depths": depths, "num_heads": heads, "window_size": 7, "patch_size": 4,
            "image_size": 224, "num_classes": 1000,
        }
        register(FAMILY.entry(name, f"timm {name}: width {width}, depths {depths}, heads {heads}",
                                 defaults=defaults, default_size=width))
