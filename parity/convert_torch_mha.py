"""``torch.nn.MultiheadAttention`` weights -> our attention module.

Two layouts: packed ``in_proj_weight`` (3E, E) = cat[Wq; Wk; Wv] when key and value have the
query's width, and separate ``q_proj_weight`` / ``k_proj_weight`` / ``v_proj_weight`` (what
``nn.MultiheadAttention`` stores when ``kdim``/``vdim`` differ from ``embed_dim``, and what
``F.multi_head_attention_forward(use_separate_proj_weight=True)`` reads). ``in_proj_bias`` is
packed in both. ``add_bias_kv`` (``bias_k``/``bias_v``) has no counterpart and fails as unexpected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flops_fit.parity.mapping import Converted, KeyMapper, head_count, read_source

REFERENCE = "torch nn.MultiheadAttention"
ATTENTION_FACTORY = "flops_fit.plugins.models.attention:MultiheadAttention"


def convert_torch_mha(source: str | Path | dict[str, Any], *, num_heads: int) -> Converted:
    """Convert an ``nn.MultiheadAttention`` state dict (or its safetensors file) to our attention.

    ``num_heads`` is not stored in the weights, so it is an argument.
    """
    tensors, _ = read_source(source, None, REFERENCE)
    m = KeyMapper(tensors, REFERENCE)
    if m.has("in_proj_weight"):  # packed [Wq; Wk; Wv]: our layout as it is
        m.map("qkv_proj.weight", "in_proj_weight")
    else:
        m.concat("qkv_proj.weight", [f"{n}_proj_weight" for n in "qkv"])
    bias = m.has("in_proj_bias")
    if bias:
        m.map("qkv_proj.bias", "in_proj_bias")
    m.map("out_proj.weight", "out_proj.weight")
    if bias or m.has("out_proj.bias"):
        m.map("out_proj.bias", "out_proj.bias")
    state = m.finish()
    embed_dim = int(state["out_proj.weight"].shape[0])
    config = {"embed_dim": embed_dim, "num_heads": head_count(num_heads, "num_heads", embed_dim, REFERENCE),
              "bias": bias}
    return Converted("attention", embed_dim, config, state, REFERENCE, factory=ATTENTION_FACTORY)
