"""Built-in PVT v2 (Pyramid Vision Transformer v2): registration, configuration and analytic
size/cost. No torch here: the model lives in ``pvt_v2_model`` and is built lazily.

Wang et al. 2021 ("PVT v2: Improved Baselines with Pyramid Vision Transformer"), as timm's
``PyramidVisionTransformerV2``: four stages, each an overlapping patch embedding (a
strided convolution with padding, then a LayerNorm: 7x7 stride 4 on the image, 3x3 stride
2 between stages), blocks whose attention reads keys and values from a spatially reduced
map (a ``sr_ratio`` x ``sr_ratio`` strided convolution and a LayerNorm; or, with
``linear=True``, average pooling to 7 x 7, a 1x1 convolution, a LayerNorm and GELU) and
whose MLP has a 3x3 depthwise convolution, and a stage norm. Global average pooling and a
linear head classify.

Model ``pvt_v2`` is sized by its stage-1 width; stage ``i`` is ``width * dim_ratios[i]``
wide (timm's b0-b5 use 1, 2, 5, 8), with ``width * dim_ratios[i] / head_dim`` heads unless
``num_heads`` is given. Preset ``pvt_v2_b0`` is timm's model of that name.
"""

from __future__ import annotations

from dataclasses import dataclass

from flops_fit.plugins.models import sizing
from flops_fit.plugins.models.vit import ACTIVATIONS

import flops_fit
from flops_fit.checks import positive_int

LINEAR_POOL = 7  # timm's linear spatial-reduction attention pools keys / values to 7 x 7
TORCH_NORM_EPS = 1e-5  # timm builds the patch-embedding and spatial-reduction norms with nn.LayerNorm's default


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


@dataclass(frozen=True)
class PvtV2Config:
    """Every knob of the built-in PVT v2 (timm's names, per-stage tuples of four).

    ``norm_eps`` is the blocks' and stage norms' eps (timm's ``norm_layer``, 1e-6); the
    patch-embedding and spatial-reduction norms keep ``nn.LayerNorm``'s 1e-5, as in timm.
    """

    width: int
    depths: tuple[int, ...] = (2, 2, 2, 2)
    dim_ratios: tuple[int, ...] = (1, 2, 5, 8)
    num_heads: tuple[int, ...] | None = None
    head_dim: int = 32
    sr_ratios: tuple[int, ...] = (4, 2, 1, 1)
    mlp_ratios: tuple[float, ...] = (8.0, 8.0, 4.0, 4.0)
    linear: bool = False
    qkv_bias: bool = True
    image_size: int = 32
    in_chans: int = 3
    num_classes: int = 10
    norm_eps: float = 1e-6
    act_layer: str = "gelu"

    def __post_init__(self) -> None:
        sizing.check_switches(self)
        positive_int(self.width, "width")
        for name in ("head_dim", "image_size", "in_chans", "num_classes"):
            positive_int(getattr(self, name), name)
        stages = len(self.depths)
        for name in ("depths", "dim_ratios", "num_heads", "sr_ratios", "mlp_ratios"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, (tuple, list)) or len(value) != stages or stages == 0:
                raise ValueError(f"{name} must have one entry per stage ({stages} from depths), got {value!r}")
            object.__setattr__(self, name, tuple(value))
        for name in ("depths", "dim_ratios", "sr_ratios"):
            for value in getattr(self, name):
                positive_int(value, f"each of {name}")
        if any(not r > 0 for r in self.mlp_ratios):
            raise ValueError(f"mlp_ratios must be positive, got {self.mlp_ratios!r}")
        for i, (dim, r) in enumerate(zip(self.dims, self.mlp_ratios)):
            if int(dim * r) <= 0:  # its depthwise convolution has no channels: torch's "groups must be positive"
                raise ValueError(f"mlp_ratios {self.mlp_ratios!r} give stage {i} an MLP width of 0 ({dim} x {r}): "
                                 f"raise mlp_ratios or the width")
        heads = self.num_heads or tuple(max(1, d // self.head_dim) for d in self.dims)
        for dim, h in zip(self.dims, heads):
            positive_int(h, "number of heads")
            if dim % h or (self.num_heads is None and dim % self.head_dim):
                raise ValueError(
                    f"width {self.width}: a stage of width {dim} does not split into heads of {self.head_dim} "
                    f"(stage widths {self.dims}; pass a width whose stage widths are multiples of head_dim, or "
                    f"num_heads=(...) dividing them)" if self.num_heads is None else
                    f"width {self.width}: stage width {dim} is not divisible by its {h} heads (stage widths "
                    f"{self.dims}, num_heads {tuple(heads)})"
                )
        object.__setattr__(self, "num_heads", tuple(heads))
        if self.act_layer not in ACTIVATIONS:
            raise ValueError(f"act_layer must be one of {ACTIVATIONS}, got {self.act_layer!r}")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be positive, got {self.norm_eps!r}")
        if not self.linear:
            for i, (side, r) in enumerate(zip(self.feature_sizes, self.sr_ratios)):
                if side < r:
                    raise ValueError(
                        f"stage {i} sees a {side}x{side} map, smaller than its sr_ratio {r}: lower sr_ratios "
                        f"or raise image_size"
                    )

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(self.width * r for r in self.dim_ratios)

    @property
    def feature_sizes(self) -> tuple[int, ...]:
        """Side of each stage's square token map: /4 by the 7x7 stem, /2 by each 3x3 embedding."""
        side = _conv_out(self.image_size, 7, 4, 3)
        sides = [side]
        for _ in self.depths[1:]:
            side = _conv_out(side, 3, 2, 1)
            sides.append(side)
        return tuple(sides)

    def kv_tokens(self, stage: int) -> int:
        """Keys / values each query of a stage reads."""
        if self.linear:
            return LINEAR_POOL**2
        return (self.feature_sizes[stage] // self.sr_ratios[stage]) ** 2

    def mlp_hidden(self, stage: int) -> int:
        return int(self.dims[stage] * self.mlp_ratios[stage])  # as timm

    @classmethod
    def of(cls, width: int, **config) -> PvtV2Config:
        return cls(width, **sizing.known_keywords(cls, config))


def _embed_kernel(stage: int) -> tuple[int, int]:
    """(kernel, stride) of a stage's overlapping patch embedding."""
    return (7, 4) if stage == 0 else (3, 2)


def param_count(width: int, **config) -> int:
    """Exact total parameters of ``pvt_v2`` at this width."""
    cfg = PvtV2Config.of(width, **config)
    total, previous = 0, cfg.in_chans
    for i, (c, h) in enumerate(zip(cfg.dims, cfg.num_heads)):
        k, _ = _embed_kernel(i)
        total += previous * c * k * k + c + sizing.layer_norm_params(c)
        if cfg.linear:
            reduce = c * c + c + sizing.layer_norm_params(c)
        else:
            r = cfg.sr_ratios[i]
            reduce = c * c * r * r + c + sizing.layer_norm_params(c) if r > 1 else 0
        m = cfg.mlp_hidden(i)
        block = (2 * sizing.layer_norm_params(c) + sizing.attention_params(c, h, h, cfg.qkv_bias, True) + reduce
                 + sizing.mlp_params(c, m, True) + 9 * m + m)  # + the depthwise conv
        total += cfg.depths[i] * block + sizing.layer_norm_params(c)
        previous = c
    return total + previous * cfg.num_classes + cfg.num_classes


def _embed_flops(cfg: PvtV2Config, stage: int) -> int:
    k, _ = _embed_kernel(stage)
    previous = cfg.in_chans if stage == 0 else cfg.dims[stage - 1]
    return 2 * cfg.feature_sizes[stage] ** 2 * previous * cfg.dims[stage] * k * k


def block_flops(cfg: PvtV2Config, stage: int) -> int:
    """One block: q on N tokens, keys / values on the reduced map, scores and values (N x
    reduced), output projection, the reduction convolution, and the MLP with its depthwise conv."""
    c, n, nk, m = cfg.dims[stage], cfg.feature_sizes[stage] ** 2, cfg.kv_tokens(stage), cfg.mlp_hidden(stage)
    attention = 2 * n * c * c + 2 * nk * c * 2 * c + 2 * 2 * n * nk * c + 2 * n * c * c
    if cfg.linear:
        reduce = 2 * nk * c * c
    else:
        r = cfg.sr_ratios[stage]
        reduce = 2 * nk * c * c * r * r if r > 1 else 0
    return attention + reduce + sizing.mlp_forward_flops(n, c, m) + 2 * n * m * 9


def forward_flops(width: int, **config) -> int:
    cfg = PvtV2Config.of(width, **config)
    stages = sum(_embed_flops(cfg, i) + cfg.depths[i] * block_flops(cfg, i) for i in range(len(cfg.depths)))
    return stages + 2 * cfg.dims[-1] * cfg.num_classes


def training_flops(width: int, **config) -> float:
    """3 x forward, less the stem's input gradient (images need none)."""
    cfg = PvtV2Config.of(width, **config)
    return sizing.training_from_forward(forward_flops(width, **config)) - _embed_flops(cfg, 0)


def embedding_param_count(width: int, **config) -> int:
    """PVT v2 has no looked-up or added parameters: no class token, no position embedding
    (its convolutions carry position)."""
    PvtV2Config.of(width, **config)
    return 0


def non_embedding_flops(width: int, **config) -> float:
    """Training FLOPs per image without the stem and the head."""
    cfg = PvtV2Config.of(width, **config)
    head = 2 * cfg.dims[-1] * cfg.num_classes
    return training_flops(width, **config) - 2 * _embed_flops(cfg, 0) - sizing.training_from_forward(head)


def activation_memory(width: int, micro_batch_size: int, seq_len: int, **config) -> int:
    """Bytes of fp32 activations autograd keeps for backward in one micro-batch of images
    (``seq_len`` is 1), as measured with ``saved_tensors_hooks``: per block and token 6 x the
    stage width (8 x without reduction: the packed q, k, v), 3 x the MLP width (fc1 output,
    depthwise-conv output, activation) and norm statistics and a log-sum-exp per head; per
    reduced key / value token 4 x the width (6 x for linear attention's GELU); per stage the
    embedding and stage norms and the next embedding's input; the image, pooled map, logits."""
    cfg = PvtV2Config.of(width, **config)
    per_sample = cfg.in_chans * cfg.image_size**2 + cfg.dims[-1] + cfg.num_classes + 2
    for i, (c, h) in enumerate(zip(cfg.dims, cfg.num_heads)):
        n, nk, m = cfg.feature_sizes[i] ** 2, cfg.kv_tokens(i), cfg.mlp_hidden(i)
        if cfg.linear or cfg.sr_ratios[i] > 1:
            block = n * (6 * c + 3 * m + 4 + h) + nk * (4 * c + 2) + cfg.linear * nk * 2 * c
        else:
            block = n * (8 * c + 3 * m + 4 + h)
        per_sample += cfg.depths[i] * block + n * (3 * c + 4)
    per_sample -= cfg.feature_sizes[-1] ** 2 * cfg.dims[-1]  # the last stage feeds no embedding
    return 4 * micro_batch_size * per_sample


def valid_sizes(lo: int, hi: int, **config) -> list[int]:
    """Stage-1 widths in [lo, hi] for which every stage splits into its heads."""
    if config.get("num_heads") is None:
        step = config.get("head_dim", PvtV2Config.head_dim)
        positive_int(step, "head_dim")
    else:
        step = 1
    widths = []
    for width in range(max(step, -(-lo // step) * step), hi + 1, step):
        try:
            PvtV2Config.of(width, **config)
        except ValueError as exc:
            if "heads" in str(exc):
                continue
            raise
        widths.append(width)
    return widths


PVT_V2_DEFAULTS = sizing.config_defaults(PvtV2Config)

# timm's pvt_v2_b0: stage widths 32, 64, 160, 256 (1, 2, 5, 8 heads), 224 px, sr 8, 4, 2, 1.
PVT_V2_B0 = {**PVT_V2_DEFAULTS, "num_heads": (1, 2, 5, 8), "sr_ratios": (8, 4, 2, 1), "image_size": 224,
             "num_classes": 1000}


# the shared entry fields; the builder is pvt_v2_model.build
# glyphs, 32 px: digits' 8 px leave a 2x2 map after the stride-4 stem, below the first spatial reduction
FAMILY = flops_fit.model_family(__name__, task=flops_fit.TASK_IMAGE_CLASSIFICATION, default_datasets=("glyphs",))


@flops_fit.hookimpl
def register_models(register):
    register(FAMILY.entry(
        "pvt_v2",
        "PVT v2 sized by its stage-1 width: 4 stages of 2 blocks, widths x (1, 2, 5, 8), spatial-reduction "
        "attention (sr 4, 2, 1, 1), heads = stage width / 32, CIFAR-sized input (32 px, 10 classes)",
        defaults=PVT_V2_DEFAULTS,
    ))
    register(FAMILY.entry("pvt_v2_b0", "timm pvt_v2_b0: stage widths 32, 64, 160, 256, 2 blocks each",
                          defaults=PVT_V2_B0, default_size=32))
