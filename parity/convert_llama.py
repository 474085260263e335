"""Hugging Face ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` / ``MistralForCausalLM`` -> our ``llama``.

The three share one layout (``model.embed_tokens``, ``model.layers.N.{input_layernorm,
self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}``,
``model.norm``, ``lm_head``) and differ in options, all read from ``config.json``:

* biases: Llama ``attention_bias`` (all four projections) and ``mlp_bias``; Qwen2 always has
  q/k/v biases and none on ``o_proj``; Mistral none;
* RoPE: ``rope_parameters`` (transformers 5) or ``rope_theta`` / ``rope_scaling`` (4.x):
  ``default``, ``linear`` and ``llama3`` are reproduced, other types refused by name;
* Mistral's ``sliding_window`` (and Qwen2's when every layer uses it) is reproduced;
  per-layer mixes of sliding and full attention are refused, and so is a ``sliding_window``
  in a Llama config (transformers ignores it there);
* ``head_dim`` may differ from ``hidden_size / num_attention_heads``; GQA pairing is the
  same on both sides (HF ``repeat_kv`` = ``repeat_interleave``), so q/k/v rows copy as they
  are and pack into our ``qkv_proj``; HF's rotate-half RoPE layout is ours by default.

Every other key the config declares is either known to leave the forward unchanged
(token ids, ``use_cache``, ...) or refused by name.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from flops_fit.parity.mapping import (
    Converted,
    KeyMapper,
    config_count,
    config_eps,
    positive_count,
    read_source,
    require_keys,
    unknown_options,
    width_count,
)

from flops_fit.checks import is_integer, is_real
from flops_fit.errors import ConversionError

MODEL_TYPES = {"llama": "HF LlamaForCausalLM", "qwen2": "HF Qwen2ForCausalLM", "mistral": "HF MistralForCausalLM"}
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_new": "gelu_tanh"}
ROPE_KEYS = {
    "default": {"rope_type", "type", "rope_theta"},
    "linear": {"rope_type", "type", "rope_theta", "factor"},
    "llama3": {"rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor",
               "original_max_position_embeddings"},
}
# Llama-family config keys that do not change what the forward computes (besides the generic ones).
INERT = {"max_window_layers"}  # read only where Qwen2 derives layer_types from it
HANDLED = {
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "vocab_size", "max_position_embeddings", "rms_norm_eps", "hidden_act",
    "attention_bias", "mlp_bias", "tie_word_embeddings", "rope_parameters", "rope_theta", "rope_scaling",
    "sliding_window", "use_sliding_window", "layer_types", "pretraining_tp", "attention_dropout",
    "partial_rotary_factor",
}


def convert_llama(source: str | Path | dict[str, Any], config: dict[str, Any] | None = None) -> Converted:
    """Convert a saved Llama / Qwen2 / Mistral causal LM (a ``save_pretrained`` folder, or
    tensors plus ``config``) to our ``llama``; ``.build()`` gives the reference's logits."""
    tensors, config = read_source(source, config, "HF Llama-family model", need_config=True)
    our = llama_config(config)
    reference = MODEL_TYPES[config["model_type"]]
    m = KeyMapper(tensors, reference, ignore=[r"model\.rotary_emb\.inv_freq", r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq"])
    state = llama_state(m, our)
    return Converted("llama", our.pop("width"), our, state, reference, dropped=m.dropped)


def llama_config(config: dict[str, Any]) -> dict[str, Any]:
    """Our ``llama`` configuration from a Hugging Face config; ConversionError naming every
    option it does not reproduce."""
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ConversionError(
            f"HF Llama-family converter: model_type={model_type!r} is not supported; it converts "
            f"{sorted(MODEL_TYPES)}"
        )
    what = MODEL_TYPES[model_type]
    refused = unknown_options(config, INERT | HANDLED)
    act = config.get("hidden_act", "silu")
    if act not in ACTIVATIONS:
        refused.append(f"hidden_act={act!r}")
    if config.get("pretraining_tp", 1) != 1:
        refused.append(f"pretraining_tp={config['pretraining_tp']!r}")
    if config.get("attention_dropout", 0.0):
        refused.append(f"attention_dropout={config['attention_dropout']!r}")
    if config.get("partial_rotary_factor", 1.0) != 1.0:
        refused.append(f"partial_rotary_factor={config['partial_rotary_factor']!r}")
    rope, rope_refusals = _rope(config)
    window, window_refusals = _sliding_window(config)
    refused += rope_refusals + window_refusals
    if refused:
        raise ConversionError(f"{what}: options our llama does not reproduce: {'; '.join(refused)}")
    require_keys(config, ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
                          "vocab_size"), what)
    width = width_count(config["hidden_size"], "config hidden_size", what)
    heads, kv_heads = head_counts(config, what)
    qwen2 = model_type == "qwen2"
    attention_bias = bool(config.get("attention_bias", False))
    return {
        "width": width,
        "n_layer": config_count(config, "num_hidden_layers", what),
        "n_head": heads,
        "n_kv_head": kv_heads,
        "head_size": config_count(config, "head_dim", what, width // heads),
        "intermediate_size": config_count(config, "intermediate_size", what),
        "vocab_size": config_count(config, "vocab_size", what),
        "block_size": config_count(config, "max_position_embeddings", what, 2048),
        "rms_norm_eps": config_eps(config, "rms_norm_eps", what, 1e-6),
        **rope,
        "hidden_act": ACTIVATIONS[act],
        "attention_bias": attention_bias,
        "qkv_bias": True if qwen2 else attention_bias,
        "mlp_bias": bool(config.get("mlp_bias", False)),
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", False)),
        "sliding_window": window,
    }


def head_counts(config: dict[str, Any], what: str) -> tuple[int, int]:
    """``num_attention_heads`` and ``num_key_value_heads`` (absent or null: one per query head, as
    transformers reads it), each a positive integer, the first a multiple of the second. A 0 is not
    "all heads": it used to pass as that and fail later as a mis-shaped ``qkv_proj``."""
    counts = {key: config.get(key) for key in ("num_attention_heads", "num_key_value_heads")}
    if counts["num_key_value_heads"] is None:
        counts["num_key_value_heads"] = counts["num_attention_heads"]
    for key, value in counts.items():
        positive_count(value, f"config {key}", what, "a number of heads",
                       "; leave it out, or null, for one key/value head per attention head"
                       if key == "num_key_value_heads" else "")
    heads, kv_heads = counts["num_attention_heads"], counts["num_key_value_heads"]
    if heads % kv_heads:
        raise ConversionError(f"{what}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}")
    return heads, kv_heads


def _rope(config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """RoPE as transformers reads it: ``rope_scaling`` (the older key) over ``rope_parameters``."""
    for key in ("rope_scaling", "rope_parameters"):
        if config.get(key) is not None and not isinstance(config[key], dict):
            return {}, [f"{key}={config[key]!r} (an object of RoPE parameters, or null)"]
    params = dict(config.get("rope_scaling") or config.get("rope_parameters") or {})
    theta = params.get("rope_theta", config.get("rope_theta") or 10000.0)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_KEYS:
        return {}, [f"rope_type={rope_type!r} (ours: {sorted(ROPE_KEYS)})"]
    extra = sorted(set(params) - ROPE_KEYS[rope_type])
    if extra:
        return {}, [f"rope parameters {extra} for rope_type={rope_type!r}"]
    values = {"rope_theta": theta, **{k: params.get(k) for k in ROPE_KEYS[rope_type] - {"rope_type", "type", "rope_theta"}}}
    bad = [f"{k}={v!r}" for k, v in sorted(values.items()) if not (
        is_integer(v) if k == "original_max_position_embeddings" else is_real(v) and math.isfinite(v)) or v <= 0]
    if bad:  # a missing factor raised a bare KeyError, a string theta a ValueError
        return {}, [f"rope_type={rope_type!r} with {', '.join(bad)} (each a number above 0)"]
    out = {"rope_theta": float(theta), "rope_type": rope_type}
    if rope_type != "default":
        out["rope_factor"] = float(values["factor"])
    if rope_type == "llama3":
        out.update(rope_low_freq_factor=float(values["low_freq_factor"]),
                   rope_high_freq_factor=float(values["high_freq_factor"]),
                   rope_original_max_position=values["original_max_position_embeddings"])
    return out, []


def _sliding_window(config: dict[str, Any]) -> tuple[int | None, list[str]]:
    """The window as transformers applies it. Mistral: ``sliding_window`` on every layer.
    Qwen2: only with ``use_sliding_window``, on the layers ``layer_types`` marks, or, in a config
    without them, on layers from ``max_window_layers`` (default 28) on, as Qwen2Config derives
    them; all or none is reproduced. Llama has no window: LlamaForCausalLM ignores the key."""
    window = config.get("sliding_window")
    model_type = config.get("model_type")
    if model_type == "llama":
        return None, [] if window is None else [
            f"sliding_window={window!r} (transformers' LlamaForCausalLM ignores it and attends to every earlier "
            "token; remove the key to convert that model, or set model_type 'mistral' if it was trained with the window)"]
    if model_type == "qwen2" and not config.get("use_sliding_window", False):
        window = None
    layer_types = config.get("layer_types")
    if model_type == "qwen2" and layer_types is None and window is not None:
        first, layers = config.get("max_window_layers", 28), config.get("num_hidden_layers")
        if not (is_integer(first) and is_integer(layers)):
            return None, [f"max_window_layers={first!r} with num_hidden_layers={layers!r} (two layer counts: "
                          "Qwen2 slides from layer max_window_layers on)"]
        layer_types = ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
    kinds = set(layer_types or [])
    if kinds == {"full_attention"}:
        window = None if model_type == "qwen2" else window
    if window is not None and "full_attention" in kinds and "sliding_attention" in kinds:
        return None, [f"layer_types mixing sliding and full attention ({layer_types})"]
    if window is not None and not (is_integer(window) and window > 0):
        return None, [f"sliding_window={window!r} (a number of tokens above 0, or null)"]
    return window, []


def llama_state(m: KeyMapper, our: dict[str, Any]) -> dict[str, Any]:
    """Map the shared Llama-family keys to ours; q/k/v rows pack into ``qkv_proj``."""
    if our["tie_word_embeddings"] and not m.has("model.embed_tokens.weight") and m.has("lm_head.weight"):
        m.map("embed_tokens.weight", "lm_head.weight")  # tied, saved by safetensors' save_model: one name kept
    else:
        m.map("embed_tokens.weight", "model.embed_tokens.weight")
        if not our["tie_word_embeddings"] or m.has("lm_head.weight"):  # tied: save_pretrained omits it
            m.map("lm_head.weight", "lm_head.weight")
    m.map("norm.weight", "model.norm.weight")
    for i in range(our["n_layer"]):
        a, b = f"model.layers.{i}.", f"layers.{i}."
        for norm in ("input_layernorm", "post_attention_layernorm"):
            m.map(f"{b}{norm}.weight", f"{a}{norm}.weight")
        for kind, present in (("weight", True), ("bias", our["qkv_bias"])):
            if present:
                m.concat(f"{b}self_attn.qkv_proj.{kind}", [f"{a}self_attn.{p}_proj.{kind}" for p in "qkv"])
        for kind, present in (("weight", True), ("bias", our["attention_bias"])):
            if present:
                m.map(f"{b}self_attn.out_proj.{kind}", f"{a}self_attn.o_proj.{kind}")
        for proj in ("gate_proj", "up_proj", "down_proj"):
            for kind, present in (("weight", True), ("bias", our["mlp_bias"])):
                if present:
                    m.map(f"{b}mlp.{proj}.{kind}", f"{a}mlp.{proj}.{kind}")
    return m.finish()
