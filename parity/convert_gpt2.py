"""Hugging Face ``GPT2LMHeadModel`` weights -> our ``gpt``.

GPT-2's projections are ``Conv1D``: stored (in, out) and applied as ``x @ W + b``, so every
weight is transposed; forgetting it on the square ``attn.c_proj`` raises no shape error.
``c_attn`` packs q, k, v along its output columns: q, k, v = ``W.T.chunk(3, 0)``.
The head is tied to ``wte`` (``save_pretrained`` omits ``lm_head.weight``; safetensors'
``save_model`` keeps ``lm_head.weight`` alone, read as the embedding). The legacy hub
layout has no ``transformer.`` prefix and carries ``attn.bias`` / ``attn.masked_bias``
causal-mask buffers, which are dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from flops_fit.parity.mapping import (
    Converted,
    KeyMapper,
    config_count,
    config_eps,
    head_count,
    read_source,
    require_keys,
    unknown_options,
    width_count,
)

from flops_fit.errors import ConversionError

REFERENCE = "HF GPT-2"
GELU = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "exact"}
_MASK_BUFFERS = [r"(transformer\.)?h\.\d+\.attn\.(bias|masked_bias)"]
HANDLED = {
    "activation_function", "n_embd", "n_head", "n_layer", "n_inner", "n_positions", "vocab_size",
    "layer_norm_epsilon", "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "tie_word_embeddings",
    "add_cross_attention", "reorder_and_upcast_attn",
}
# GPT-2 keys that do not change what the LM forward computes: dropout (off in eval), the legacy
# context length (n_positions sizes the model), GPT2DoubleHeadsModel's summary head.
INERT = {"attn_pdrop", "embd_pdrop", "resid_pdrop", "n_ctx", "summary_activation", "summary_first_dropout",
         "summary_proj_to_labels", "summary_type", "summary_use_proj"}


def convert_gpt2(source: str | Path | dict[str, Any], config: dict[str, Any] | None = None) -> Converted:
    """Convert a saved GPT-2 (folder with ``config.json``, or tensors plus ``config``) to our ``gpt``."""
    tensors, config = read_source(source, config, REFERENCE, need_config=True)
    our = gpt2_config(config)
    prefix = "transformer." if any(k.startswith("transformer.") for k in tensors) else ""
    m = KeyMapper(tensors, REFERENCE, ignore=_MASK_BUFFERS)
    state = gpt2_state(m, prefix, our["n_layer"])
    return Converted("gpt", our.pop("width"), our, state, REFERENCE, dropped=m.dropped)


def gpt2_config(config: dict[str, Any]) -> dict[str, Any]:
    if config.get("model_type", "gpt2") != "gpt2":  # absent in some hand-written configs: the keys decide
        raise ConversionError(f"{REFERENCE}: model_type={config['model_type']!r} is not supported; it converts 'gpt2'")
    act = config.get("activation_function", "gelu_new")
    if act not in GELU:
        raise ConversionError(f"{REFERENCE}: activation_function={act!r} is not supported; ours offers {sorted(GELU)}")
    require_keys(config, ("n_embd", "n_head", "n_layer", "vocab_size", "n_positions"), REFERENCE)
    width = width_count(config["n_embd"], "config n_embd", REFERENCE)
    unsupported = {
        "n_inner": config.get("n_inner") not in (None, 4 * width),
        "scale_attn_weights": config.get("scale_attn_weights", True) is not True,
        "scale_attn_by_inverse_layer_idx": bool(config.get("scale_attn_by_inverse_layer_idx", False)),
        "tie_word_embeddings": config.get("tie_word_embeddings", True) is not True,
        "add_cross_attention": bool(config.get("add_cross_attention", False)),
        "reorder_and_upcast_attn": bool(config.get("reorder_and_upcast_attn", False)),
    }
    bad = [f"{k}={config.get(k)!r}" for k, v in unsupported.items() if v] + unknown_options(config, HANDLED | INERT)
    if bad:
        raise ConversionError(f"{REFERENCE}: config options our gpt does not implement: {', '.join(bad)}")
    heads = head_count(config["n_head"], "config n_head", width, REFERENCE)
    return {
        "width": width,
        "n_layer": config_count(config, "n_layer", REFERENCE),
        "n_head": heads,
        "n_kv_head": heads,
        "vocab_size": config_count(config, "vocab_size", REFERENCE),
        "block_size": config_count(config, "n_positions", REFERENCE),
        "layer_norm_eps": config_eps(config, "layer_norm_epsilon", REFERENCE, 1e-5),
        "bias": True,
        "gelu": GELU[act],
    }


def gpt2_state(m: KeyMapper, prefix: str, n_layer: int) -> dict[str, Any]:
    t = torch.Tensor.t
    if not m.has(f"{prefix}wte.weight") and m.has("lm_head.weight"):  # safetensors' save_model keeps one name
        m.map("wte.weight", "lm_head.weight")  # of tied tensors, here the head's
    else:
        m.map("wte.weight", f"{prefix}wte.weight")
    m.map("wpe.weight", f"{prefix}wpe.weight")
    for p in ("weight", "bias"):
        m.map(f"ln_f.{p}", f"{prefix}ln_f.{p}")
    for i in range(n_layer):
        a, b = f"{prefix}h.{i}.", f"blocks.{i}."
        for p in ("weight", "bias"):
            m.map(f"{b}ln_1.{p}", f"{a}ln_1.{p}")
            m.map(f"{b}ln_2.{p}", f"{a}ln_2.{p}")
        m.map(f"{b}attn.qkv_proj.weight", f"{a}attn.c_attn.weight", fn=t)  # rows [q; k; v] after the transpose
        m.map(f"{b}attn.qkv_proj.bias", f"{a}attn.c_attn.bias")
        for ours, theirs in (("attn.out_proj", "attn.c_proj"), ("mlp.fc", "mlp.c_fc"), ("mlp.proj", "mlp.c_proj")):
            m.map(f"{b}{ours}.weight", f"{a}{theirs}.weight", fn=t)
            m.map(f"{b}{ours}.bias", f"{a}{theirs}.bias")
    if m.has("lm_head.weight") and "lm_head.weight" not in m.used:
        head = m.take("lm_head.weight")
        if "wte.weight" in m.out and not torch.equal(head, m.out["wte.weight"]):
            raise ConversionError(
                f"{REFERENCE}: lm_head.weight differs from wte.weight, but our gpt ties the head to the "
                "token embedding; these weights come from an untied model and cannot be converted"
            )
    return m.finish()
