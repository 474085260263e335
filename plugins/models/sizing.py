"""Analytic parameter and FLOP counts shared by the built-in transformers (pure Python).

Registration modules use these to list valid sizes, count parameters and count training
FLOPs without importing torch or building a model. FLOPs follow
``torch.utils.flop_counter.FlopCounterMode``: 2 per multiply-add, matmuls only (norms,
softmax, activations and embedding lookups are free), attention scores and values counted
in full even under a causal mask; training = 3 x forward (backward = 2 x forward).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flops_fit.checks import positive_int

BACKWARD_FACTOR = 2  # backward FLOPs per forward FLOP (input and weight gradients)


def resolve_heads(width: int, num_heads: int | None, num_kv_heads: int | None, head_dim: int) -> tuple[int, int]:
    """The (query heads, key/value heads) of a width; raises ValueError when they do not fit.

    ``num_heads=None`` means ``width // head_dim``; ``num_kv_heads=None`` means ``num_heads``.
    """
    positive_int(width, "width")
    positive_int(head_dim, "head_dim")
    if num_heads is None:
        if width % head_dim:
            raise ValueError(
                f"width {width} is not a multiple of head_dim {head_dim}: heads = width / head_dim "
                f"(pass a width that is a multiple of {head_dim}, or set the number of heads)"
            )
        num_heads = width // head_dim
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    positive_int(num_heads, "number of heads")
    positive_int(num_kv_heads, "number of key/value heads")
    if width % num_heads:
        raise ValueError(f"width {width} is not divisible by the number of heads {num_heads}")
    if num_heads % num_kv_heads:
        raise ValueError(
            f"the number of heads {num_heads} is not divisible by the number of key/value heads {num_kv_heads}"
        )
    return num_heads, num_kv_heads


def attention_params(
    width: int, num_heads: int, num_kv_heads: int, qkv_bias: bool, out_bias: bool, *,
    head_dim: int | None = None, qk_norm: bool = False,
) -> int:
    """``qkv_proj`` and ``out_proj`` of ``MultiheadAttention`` (and its QK-norms).

    ``head_dim`` defaults to ``width // num_heads``; ``num_heads * head_dim`` may differ
    from ``width``."""
    d = width // num_heads if head_dim is None else head_dim
    q_dim, kv_dim = num_heads * d, num_kv_heads * d
    weights = width * (q_dim + 2 * kv_dim) + q_dim * width
    return weights + qkv_bias * (q_dim + 2 * kv_dim) + out_bias * width + qk_norm * 2 * layer_norm_params(d)


def mlp_params(width: int, hidden: int, bias: bool, gated: bool = False) -> int:
    """Two linear layers width -> hidden -> width; ``gated`` (SwiGLU) adds a second input
    projection of the same size."""
    inputs = 2 if gated else 1
    return (inputs + 1) * width * hidden + bias * (inputs * hidden + width)


def layer_norm_params(width: int, bias: bool = True) -> int:
    return width * (1 + bias)


def attention_forward_flops(seq_len: int, width: int, num_heads: int, num_kv_heads: int,
                            head_dim: int | None = None) -> int:
    """Forward FLOPs of self-attention on ``seq_len`` tokens: the q, k, v and output
    projections, and scores (q k^T) and values (weights @ v) for every head in full."""
    d = width // num_heads if head_dim is None else head_dim
    q_dim, kv_dim = num_heads * d, num_kv_heads * d
    projections = 2 * seq_len * width * (2 * q_dim + 2 * kv_dim)
    return projections + 2 * 2 * seq_len * seq_len * q_dim


def mlp_forward_flops(seq_len: int, width: int, hidden: int, gated: bool = False) -> int:
    return 2 * seq_len * width * hidden * (3 if gated else 2)


def block_forward_flops(seq_len: int, width: int, num_heads: int, num_kv_heads: int, hidden: int, *,
                        head_dim: int | None = None, gated: bool = False) -> int:
    """Forward FLOPs of one pre-norm block on one sequence of ``seq_len`` tokens."""
    return (attention_forward_flops(seq_len, width, num_heads, num_kv_heads, head_dim)
            + mlp_forward_flops(seq_len, width, hidden, gated))


def decoder_forward_flops(cfg: Any, hidden: int, *, head_dim: int | None = None, gated: bool = False) -> float:
    """Forward FLOPs per token of a decoder-only LM at its full context (``cfg.block_size``):
    ``cfg.n_layer`` blocks and the LM head."""
    per_sequence = cfg.n_layer * block_forward_flops(
        cfg.block_size, cfg.width, cfg.n_head, cfg.n_kv_head, hidden, head_dim=head_dim, gated=gated
    )
    return per_sequence / cfg.block_size + 2 * cfg.width * cfg.vocab_size


def training_from_forward(forward_flops: float) -> float:
    return (1 + BACKWARD_FACTOR) * forward_flops


def valid_widths(config_class: type, lo: int, hi: int, config: dict, heads_key: str, kv_key: str,
                 head_multiple: int = 1) -> list[int]:
    """Widths in [lo, hi] whose heads fit; other configuration errors are raised, not hidden.
    ``head_multiple``: with the number of heads fixed, the head size (width / heads) must be a
    multiple of it too (rotary embeddings rotate pairs: 2)."""
    heads, kv_heads = config.get(heads_key), config.get(kv_key)
    for key, value in ((heads_key, heads), (kv_key, kv_heads)):
        if value is not None:  # no width can fix a head count that is not a positive int: name it
            positive_int(value, key)
    if isinstance(heads, int) and isinstance(kv_heads, int) and kv_heads > 0 and heads % kv_heads:
        raise ValueError(  # no width can fix this: say so instead of finding no valid width
            f"{kv_key}={kv_heads} does not divide {heads_key}={heads}: the query heads share the key/value "
            f"heads in equal groups; choose {kv_key} among {[d for d in range(1, heads + 1) if heads % d == 0]}"
        )
    head_dim = config.get("head_dim", config_class.head_dim)
    step = heads * head_multiple if isinstance(heads, int) and heads > 0 else head_dim
    positive_int(step, "head_dim")
    widths = []
    for width in range(max(step, -(-lo // step) * step), hi + 1, step):
        try:
            resolve_heads(width, heads, kv_heads, head_dim)
        except ValueError:
            continue
        config_class.of(width, **config)  # raises on any other bad keyword
        widths.append(width)
    return widths


def known_keywords(config_class: type, config: dict) -> dict:
    """``config`` unchanged, or ValueError naming unknown keywords and the known ones."""
    known = [f.name for f in dataclasses.fields(config_class)][1:]  # the first is the size
    unknown = sorted(set(config) - set(known))
    if unknown:
        raise ValueError(f"unknown configuration keyword(s) {unknown}; known keywords: {known}")
    return config


def check_switches(config: Any) -> None:
    """ValueError naming the first on/off field (annotated ``bool``, or ``bool | None``: also None) of
    a config dataclass that holds anything but True or False: 2, "yes" or "no" were read by their
    truthiness (a bias of 2 counted twice, "no" switched on)."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.type in ("bool", "bool | None") and not isinstance(value, bool) and not (
                value is None and f.type == "bool | None"):
            raise ValueError(f"{f.name} must be true or false, got {value!r}")


def config_defaults(config_class: type) -> dict:
    """The keyword defaults of a config dataclass (every field but the size)."""
    return {f.name: f.default for f in dataclasses.fields(config_class)[1:]}
