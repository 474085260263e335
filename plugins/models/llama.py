"""Built-in Llama-family decoder: registration, configuration and analytic size/cost.

No torch here: the model lives in ``llama_model`` and is built lazily.

Model ``llama`` is sized by its width. Depth is fixed (``n_layer``, default 4) and heads
follow the width (``width / head_dim`` with ``head_dim`` 16) unless ``n_head`` is given; the
size of each head is ``head_size`` (default ``width / n_head``; Hugging Face's ``head_dim``,
which may differ). The MLP is SwiGLU with ``intermediate_size`` (default 8/3 x width rounded
up to ``multiple_of``). Defaults suit small CPU sweeps on a byte-level corpus: ``vocab_size``
256, ``block_size`` 128, untied head (Llama's default). Hugging Face ``LlamaForCausalLM``,
``Qwen2ForCausalLM`` and ``MistralForCausalLM`` convert to it (``parity.convert_llama``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flops_fit.plugins.models import parametrization, sizing

import flops_fit
from flops_fit.checks import positive_int

ROPE_TYPES = ("default", "linear", "llama3")
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")


@dataclass(frozen=True)
class LlamaConfig:
    """Every knob of the built-in Llama; validated on construction (ValueError).

    RoPE: ``rope_theta``; ``rope_type`` "default", "linear" (positions divided by
    ``rope_factor``) or "llama3" (Llama 3.1's frequency-dependent scaling with
    ``rope_factor``, ``rope_low_freq_factor``, ``rope_high_freq_factor`` and
    ``rope_original_max_position``); ``rope_interleaved`` rotates adjacent pairs (Meta's
    layout) instead of dimension i with i + D/2 (Hugging Face's). Biases: ``attention_bias``
    on all four attention projections, ``qkv_bias`` overrides it for q/k/v only (Qwen2:
    True with ``attention_bias`` False), ``mlp_bias``. ``sliding_window``: each query sees at
    most that many keys (itself included), as Mistral.
    """

    width: int
    n_layer: int = 4
    n_head: int | None = None
    n_kv_head: int | None = None
    head_dim: int = 16
    head_size: int | None = None
    intermediate_size: int | None = None
    multiple_of: int = 16
    vocab_size: int = 256
    block_size: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_type: str = "default"
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_position: int = 8192
    rope_interleaved: bool = False
    hidden_act: str = "silu"
    attention_bias: bool = False
    qkv_bias: bool | None = None
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    sliding_window: int | None = None
    parametrization: str = "standard"
    base_width: int | None = None

    def __post_init__(self) -> None:
        sizing.check_switches(self)
        parametrization.check(self.parametrization, self.base_width)
        if self.parametrization == "mup" and (
                self.intermediate_size is not None or (self.n_head is not None and self.head_size is not None)):
            raise ValueError(
                "parametrization='mup' needs every hidden dimension to grow with the width: leave "
                "intermediate_size unset, and set at most one of n_head and head_size"
            )
        head_grows = self.n_head is not None and self.head_size is None  # fixed heads: head size ~ width
        derived = self.head_size is None
        if self.head_size is None:
            heads, kv_heads = sizing.resolve_heads(self.width, self.n_head, self.n_kv_head, self.head_dim)
            object.__setattr__(self, "head_size", self.width // heads)
        else:
            positive_int(self.head_size, "head_size")
            positive_int(self.width, "width")
            heads = self.n_head if self.n_head is not None else self.width // self.head_dim
            kv_heads = heads if self.n_kv_head is None else self.n_kv_head
            positive_int(heads, "number of heads")
            positive_int(kv_heads, "number of key/value heads")
            if heads % kv_heads:
                raise ValueError(
                    f"the number of heads {heads} is not divisible by the number of key/value heads {kv_heads}"
                )
        object.__setattr__(self, "n_head", heads)
        object.__setattr__(self, "n_kv_head", kv_heads)
        if self.head_size % 2:
            raise ValueError(f"head_size must be even for rotary embeddings, got {self.head_size}" + (
                f" (width {self.width} / {heads} heads): use an even head_dim, or widths that are multiples "
                f"of 2 x n_head" if derived else ""))
        for name in ("n_layer", "vocab_size", "block_size", "multiple_of", "rope_original_max_position"):
            positive_int(getattr(self, name), name)
        if self.intermediate_size is not None:
            positive_int(self.intermediate_size, "intermediate_size")
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(
                f"rope_type must be one of {ROPE_TYPES}, got {self.rope_type!r} (dynamic, yarn and longrope "
                f"scaling are not implemented)"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act must be one of {ACTIVATIONS}, got {self.hidden_act!r}")
        for name in ("rms_norm_eps", "rope_theta", "rope_factor"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.sliding_window is not None:
            positive_int(self.sliding_window, "sliding_window")
        # muP's factors (None: standard); derived, so not a field (``plugins.parametrization``)
        object.__setattr__(self, "mup", parametrization.of(
            self.parametrization, self.width, self.base_width, self.head_size, head_grows))

    @property
    def mlp_hidden(self) -> int:
        if self.intermediate_size is not None:
            return self.intermediate_size
        return self.multiple_of * math.ceil(8 * self.width / 3 / self.multiple_of)

    @property
    def has_qkv_bias(self) -> bool:
        return self.attention_bias if self.qkv_bias is None else bool(self.qkv_bias)

    @classmethod
    def of(cls, width: int, **config) -> LlamaConfig:
        """Build from keyword configuration, naming any unknown keyword."""
        return cls(width, **sizing.known_keywords(cls, config))


def param_count(width: int, **config) -> int:
    """Exact total parameters of ``llama`` at this width (a tied head counted once)."""
    cfg = LlamaConfig.of(width, **config)
    c = cfg.width
    block = (
        2 * c  # RMSNorm weights
        + sizing.attention_params(c, cfg.n_head, cfg.n_kv_head, cfg.has_qkv_bias, cfg.attention_bias,
                                  head_dim=cfg.head_size)
        + sizing.mlp_params(c, cfg.mlp_hidden, cfg.mlp_bias, gated=True)
    )
    head = 0 if cfg.tie_word_embeddings else cfg.vocab_size * c
    return cfg.vocab_size * c + cfg.n_layer * block + c + head


def forward_flops(width: int, **config) -> float:
    """Forward FLOPs per token at sequence length ``block_size``: blocks and the LM head."""
    cfg = LlamaConfig.of(width, **config)
    return sizing.decoder_forward_flops(cfg, cfg.mlp_hidden, head_dim=cfg.head_size, gated=True)


def training_flops(width: int, **config) -> float:
    """Training FLOPs per token (forward + backward = 3 x forward)."""
    return sizing.training_from_forward(forward_flops(width, **config))


def embedding_param_count(width: int, **config) -> int:
    """Parameters looked up, not multiplied: the token embedding (an untied head is a matmul)."""
    cfg = LlamaConfig.of(width, **config)
    return cfg.vocab_size * cfg.width


def non_embedding_flops(width: int, **config) -> float:
    """Training FLOPs per token without the LM head (DeepSeek LLM's M)."""
    cfg = LlamaConfig.of(width, **config)
    return training_flops(width, **config) - sizing.training_from_forward(2 * cfg.width * cfg.vocab_size)


def activation_memory(width: int, micro_batch_size: int, seq_len: int, **config) -> int:
    """Bytes of fp32 activations autograd keeps for backward in one micro-batch: per layer and
    token the norms' inputs, queries and keys before and after RoPE, values, the attention output
    and its projection, the SwiGLU's four hidden-width tensors, norm statistics and the log-sum-exp
    per head; then the embedding, the final norm and the log-softmax over the vocabulary."""
    cfg = LlamaConfig.of(width, **config)
    d, q, kv = cfg.width, cfg.n_head * cfg.head_size, cfg.n_kv_head * cfg.head_size
    per_token = cfg.n_layer * (7 * d + 2 * q + 3 * kv + 4 * cfg.mlp_hidden + 2 + cfg.n_head) + cfg.vocab_size + 3 * d + 11
    return 4 * micro_batch_size * seq_len * per_token


def valid_sizes(lo: int, hi: int, **config) -> list[int]:
    """Widths in [lo, hi] whose head split is valid: multiples of head_dim, or of 2 x n_head when the
    head size follows the width (rotary embeddings need it even; head_size set fixes it instead)."""
    multiple = 2 if config.get("head_size") is None else 1
    return sizing.valid_widths(LlamaConfig, lo, hi, config, "n_head", "n_kv_head", multiple)


LLAMA_DEFAULTS = parametrization.without_keywords(sizing.config_defaults(LlamaConfig))  # the defaults of model `llama`


# the shared entry fields; the builder is llama_model.build
FAMILY = flops_fit.model_family(__name__, task=flops_fit.TASK_CAUSAL_LM, default_datasets=("python-stdlib",))


@flops_fit.hookimpl
def register_models(register):
    register(FAMILY.entry(
        "llama",
        "Llama-family decoder sized by width: 4 layers, heads = width / 16, RoPE, RMSNorm, "
        "SwiGLU, optional GQA; byte vocabulary (256), context 128",
        defaults=LLAMA_DEFAULTS,
    ))
