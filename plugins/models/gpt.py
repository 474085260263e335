"""Built-in GPT (GPT-2 architecture): registration, configuration and analytic size/cost.

No torch here: the model lives in ``gpt_model`` and is built lazily.

Model ``gpt`` is sized by its width. Depth is fixed (``n_layer``, default 4) and heads
follow the width (``width / head_dim`` with ``head_dim`` 16) unless ``n_head`` is given, so
valid widths are multiples of ``head_dim`` (or of ``n_head``). Defaults suit small CPU
sweeps on a byte-level corpus: ``vocab_size`` 256, ``block_size`` 128, so that at width 64
embeddings are about a fifth of the parameters rather than nearly all of them.
Preset ``gpt2`` is Hugging Face's GPT-2 124M configuration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flops_fit.plugins.models import parametrization, sizing

import flops_fit
from flops_fit.checks import positive_int

GELUS = ("tanh", "exact")


@dataclass(frozen=True)
class GPTConfig:
    """Every knob of the built-in GPT; validated on construction (ValueError)."""

    width: int
    n_layer: int = 4
    n_head: int | None = None
    n_kv_head: int | None = None
    head_dim: int = 16
    vocab_size: int = 256
    block_size: int = 128
    layer_norm_eps: float = 1e-5
    bias: bool = True
    gelu: str = "tanh"
    parametrization: str = "standard"
    base_width: int | None = None

    def __post_init__(self) -> None:
        sizing.check_switches(self)
        parametrization.check(self.parametrization, self.base_width)
        head_grows = self.n_head is not None  # a fixed number of heads: the head size grows with the width
        heads, kv_heads = sizing.resolve_heads(self.width, self.n_head, self.n_kv_head, self.head_dim)
        object.__setattr__(self, "n_head", heads)
        object.__setattr__(self, "n_kv_head", kv_heads)
        for name in ("n_layer", "vocab_size", "block_size"):
            positive_int(getattr(self, name), name)
        if self.gelu not in GELUS:
            raise ValueError(f"gelu must be one of {GELUS}, got {self.gelu!r}")
        eps = self.layer_norm_eps
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"layer_norm_eps must be a finite positive number, got {eps!r}")
        # muP's factors (None: standard); derived, so not a field (``plugins.parametrization``)
        object.__setattr__(self, "mup", parametrization.of(
            self.parametrization, self.width, self.base_width, self.width // heads, head_grows))

    @classmethod
    def of(cls, width: int, **config) -> GPTConfig:
        """Build from keyword configuration, naming any unknown keyword."""
        return cls(width, **sizing.known_keywords(cls, config))


def embedding_params(cfg: GPTConfig) -> int:
    """Token embedding ``wte`` (shared with ``lm_head``) and position embedding ``wpe``."""
    return (cfg.vocab_size + cfg.block_size) * cfg.width


def param_count(width: int, **config) -> int:
    """Exact total parameters of ``gpt`` at this width (tied ``lm_head`` counted once)."""
    cfg = GPTConfig.of(width, **config)
    c = cfg.width
    block = (
        2 * sizing.layer_norm_params(c, cfg.bias)
        + sizing.attention_params(c, cfg.n_head, cfg.n_kv_head, cfg.bias, cfg.bias)
        + sizing.mlp_params(c, 4 * c, cfg.bias)
    )
    return embedding_params(cfg) + cfg.n_layer * block + sizing.layer_norm_params(c, cfg.bias)


def forward_flops(width: int, **config) -> float:
    """Forward FLOPs per token at sequence length ``block_size``: blocks and the LM head."""
    cfg = GPTConfig.of(width, **config)
    return sizing.decoder_forward_flops(cfg, 4 * cfg.width)


def training_flops(width: int, **config) -> float:
    """Training FLOPs per token (forward + backward = 3 x forward)."""
    return sizing.training_from_forward(forward_flops(width, **config))


def embedding_param_count(width: int, **config) -> int:
    """Parameters looked up, not multiplied: ``wte`` and ``wpe`` (``wte`` also serves as the
    tied head, whose FLOPs ``non_embedding_flops`` leaves out)."""
    return embedding_params(GPTConfig.of(width, **config))


def non_embedding_flops(width: int, **config) -> float:
    """Training FLOPs per token without the LM head (DeepSeek LLM's M): the blocks, attention
    over the full context included."""
    cfg = GPTConfig.of(width, **config)
    return training_flops(width, **config) - sizing.training_from_forward(2 * cfg.width * cfg.vocab_size)


def activation_memory(width: int, micro_batch_size: int, seq_len: int, **config) -> int:
    """Bytes of fp32 activations autograd keeps for backward in one micro-batch: per layer and
    token 8 x width (norm inputs, q/k/v, attention output, projections) + 2 x the MLP's 4 x width
    + norm statistics and attention's log-sum-exp per head; then the embeddings' sum, the final
    norm and the log-softmax over the vocabulary (checked against the tensors autograd saves)."""
    cfg = GPTConfig.of(width, **config)
    d = cfg.width
    per_token = cfg.n_layer * (8 * d + 2 * 4 * d + 4 + cfg.n_head) + cfg.vocab_size + 2 * d + 5
    return 4 * micro_batch_size * seq_len * per_token


def valid_sizes(lo: int, hi: int, **config) -> list[int]:
    """Widths in [lo, hi] whose head split is valid (multiples of head_dim or n_head)."""
    return sizing.valid_widths(GPTConfig, lo, hi, config, "n_head", "n_kv_head")


GPT_DEFAULTS = parametrization.without_keywords(sizing.config_defaults(GPTConfig))  # the defaults of model `gpt`

# Hugging Face GPT2Config() defaults: the 124M model.
GPT2_DEFAULTS = {**GPT_DEFAULTS, "n_layer": 12, "n_head": 12, "vocab_size": 50257, "block_size": 1024}


# the shared entry fields; the builder is gpt_model.build
FAMILY = flops_fit.model_family(__name__, task=flops_fit.TASK_CAUSAL_LM, default_datasets=("python-stdlib",))


@flops_fit.hookimpl
def register_models(register):
    register(FAMILY.entry(
        "gpt",
        "GPT-2-style language model sized by width: 4 layers, heads = width / 16, "
        "byte vocabulary (256), context 128",
        defaults=GPT_DEFAULTS,
    ))
    register(FAMILY.entry(
        "gpt2", "GPT-2 124M (Hugging Face GPT2Config defaults): width 768, 12 layers, 12 heads",
        defaults=GPT2_DEFAULTS, default_size=768,
    ))
