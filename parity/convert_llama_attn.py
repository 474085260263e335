"""Hugging Face Llama attention (grouped-query heads) -> our attention module in GQA mode.

``q_proj`` (H*D, C), ``k_proj``/``v_proj`` (KV*D, C), ``o_proj`` (C, H*D), biases only with
``attention_bias``. Both sides pair query head h with kv head h // (H / KV) (HF ``repeat_kv``
is ``repeat_interleave``), so the weights map one to one.

RoPE: our attention module has no rotary embedding; Llama rotates q and k inside its
attention. The parity case therefore applies HF's own rotation (its ``cos``/``sin`` and
``apply_rotary_pos_emb``) to our ``q_proj``/``k_proj`` outputs through forward hooks, so
both sides attend with identical rotated q and k; everything else (projections, GQA
pairing, causal softmax, output projection) is ours. HF's rotate-half layout is kept
as is: no Meta-layout row permutation is involved because both sides read HF's rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flops_fit.parity.convert_llama import head_counts
from flops_fit.parity.mapping import (
    Converted,
    KeyMapper,
    config_count,
    read_source,
    require_keys,
    width_count,
)

from flops_fit.errors import ConversionError

REFERENCE = "HF Llama attention"
ATTENTION_FACTORY = "flops_fit.plugins.models.attention:MultiheadAttention"


def convert_llama_attention(
    source: str | Path | dict[str, Any], config: dict[str, Any] | None = None, *, layer: int = 0
) -> Converted:
    """Convert layer ``layer``'s self-attention of a saved Llama (folder with ``config.json``,
    or tensors plus ``config``); bare ``q_proj.weight``-style keys are accepted too."""
    tensors, config = read_source(source, config, REFERENCE, need_config=True)
    prefix = f"model.layers.{layer}.self_attn."
    if any(k.startswith("model.") for k in tensors):
        if not any(k.startswith(prefix) for k in tensors):
            raise ConversionError(f"{REFERENCE}: the weights have no layer {layer} ({prefix}* keys)")
        tensors = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    require_keys(config, ("hidden_size", "num_attention_heads"), REFERENCE)
    width = width_count(config["hidden_size"], "config hidden_size", REFERENCE)
    heads, kv_heads = head_counts(config, REFERENCE)
    head_dim = config_count(config, "head_dim", REFERENCE, width // heads)
    if head_dim * heads != width:
        raise ConversionError(
            f"{REFERENCE}: head_dim={head_dim} x {heads} heads != hidden_size={width}; our attention "
            "needs num_heads * head_dim == embed_dim"
        )
    bias = bool(config.get("attention_bias", False))
    m = KeyMapper(tensors, REFERENCE)
    for kind in ("weight", "bias") if bias else ("weight",):
        m.concat(f"qkv_proj.{kind}", [f"{p}_proj.{kind}" for p in "qkv"])
        m.map(f"out_proj.{kind}", f"o_proj.{kind}")
    our = {"embed_dim": width, "num_heads": heads, "num_kv_heads": kv_heads, "bias": bias}
    return Converted("attention", width, our, m.finish(), REFERENCE, factory=ATTENTION_FACTORY)
