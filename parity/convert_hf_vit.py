"""Hugging Face ``ViTForImageClassification`` / ``ViTModel`` weights -> our ``vit``.

transformers 5.x renames ViT modules in memory (``vit.layers.N.attention.q_proj``) but reads
and writes the old names on disk (``vit.encoder.layer.N.attention.attention.query``). This
converter reads files, so it maps the on-disk names; a 5.x in-memory ``state_dict()`` is
renamed to the on-disk names first, so both work.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from flops_fit.parity.mapping import Converted, KeyMapper, read_source

from flops_fit.errors import ConversionError

REFERENCE = "HF ViT"
# HF hidden_act -> our act_layer
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "quick_gelu": "quick_gelu", "silu": "silu", "swish": "silu", "relu": "relu"}

# transformers 5.x in-memory name -> on-disk name
_IN_MEMORY = [
    (r"layers\.(\d+)\.attention\.q_proj\.", r"encoder.layer.\1.attention.attention.query."),
    (r"layers\.(\d+)\.attention\.k_proj\.", r"encoder.layer.\1.attention.attention.key."),
    (r"layers\.(\d+)\.attention\.v_proj\.", r"encoder.layer.\1.attention.attention.value."),
    (r"layers\.(\d+)\.attention\.o_proj\.", r"encoder.layer.\1.attention.output.dense."),
    (r"layers\.(\d+)\.mlp\.fc1\.", r"encoder.layer.\1.intermediate.dense."),
    (r"layers\.(\d+)\.mlp\.fc2\.", r"encoder.layer.\1.output.dense."),
    (r"layers\.(\d+)\.", r"encoder.layer.\1."),
]


def to_disk_names(tensors: dict[str, Any]) -> dict[str, Any]:
    """Rename a transformers 5.x in-memory ViT state dict to the names files use."""
    out = {}
    for key, value in tensors.items():
        for pattern, repl in _IN_MEMORY:
            new, n = re.subn(pattern, repl, key)
            if n:
                key = new
                break
        out[key] = value
    return out


def convert_hf_vit(source: str | Path | dict[str, Any], config: dict[str, Any] | None = None) -> Converted:
    """Convert a saved HF ViT (folder with ``config.json``, or tensors plus ``config``) to our ``vit``.

    ``ViTForImageClassification`` keeps its classifier. ``ViTModel`` is a backbone: it converts
    to a ``vit`` with one class whose ``head`` keeps its fresh initialisation (compare the
    features, ``model.norm(model.forward_features(x))``, with its ``last_hidden_state``); its
    pooler (dense + tanh, not part of our model) is dropped.
    """
    tensors, config = read_source(source, config, REFERENCE, need_config=True)
    tensors = to_disk_names(tensors)
    prefix = "vit." if any(k.startswith("vit.") for k in tensors) else ""
    has_classifier = "classifier.weight" in tensors
    our = hf_vit_config(config, int(tensors["classifier.weight"].shape[0]) if has_classifier else 1)
    return Converted(
        "vit", our.pop("width"), our, hf_vit_state(tensors, prefix, our["depth"]), REFERENCE,
        dropped=[k for k in tensors if k.startswith("pooler.")],
        fresh=() if has_classifier else ("head.weight", "head.bias"),
    )


def hf_vit_config(config: dict[str, Any], num_classes: int) -> dict[str, Any]:
    act = config.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise ConversionError(f"{REFERENCE}: hidden_act={act!r} is not supported; ours offers {sorted(ACTIVATIONS)}")
    for key in ("image_size", "patch_size"):
        if not isinstance(config.get(key), int):
            raise ConversionError(f"{REFERENCE}: {key}={config.get(key)!r} is not supported; ours needs one int (square)")
    width, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    return {
        "width": width,
        "depth": int(config["num_hidden_layers"]),
        "num_heads": heads,
        "num_kv_heads": heads,
        "patch_size": int(config["patch_size"]),
        "image_size": int(config["image_size"]),
        "in_chans": int(config.get("num_channels", 3)),
        "num_classes": num_classes,
        "mlp_ratio": int(config["intermediate_size"]) / width,
        "global_pool": "token",  # the classifier reads the class token after the final layernorm
        "qkv_bias": bool(config.get("qkv_bias", True)),
        "norm_eps": float(config.get("layer_norm_eps", 1e-12)),
        "act_layer": ACTIVATIONS[act],
    }


_BLOCK = {  # our name -> on-disk HF name, inside one encoder layer
    "norm1": "layernorm_before", "norm2": "layernorm_after", "attn.out_proj": "attention.output.dense",
    "mlp.fc1": "intermediate.dense", "mlp.fc2": "output.dense",
}
_QKV = tuple(f"attention.attention.{n}" for n in ("query", "key", "value"))  # packed into attn.qkv_proj


def hf_vit_state(tensors: dict[str, Any], prefix: str, depth: int) -> dict[str, Any]:
    m = KeyMapper(tensors, REFERENCE, ignore=[r"pooler\..*"])
    e = f"{prefix}embeddings."
    m.map("cls_token", e + "cls_token")
    m.map("pos_embed", e + "position_embeddings")
    for p in ("weight", "bias"):
        m.map(f"patch_embed.proj.{p}", f"{e}patch_embeddings.projection.{p}")
        m.map(f"norm.{p}", f"{prefix}layernorm.{p}")
        if m.has(f"classifier.{p}"):
            m.map(f"head.{p}", f"classifier.{p}")
        for i in range(depth):
            a = f"{prefix}encoder.layer.{i}."
            for ours, theirs in _BLOCK.items():
                m.map(f"blocks.{i}.{ours}.{p}", f"{a}{theirs}.{p}")
            if p == "weight" or m.has(f"{a}{_QKV[0]}.bias"):  # qkv_bias=False: no q/k/v biases
                m.concat(f"blocks.{i}.attn.qkv_proj.{p}", [f"{a}{n}.{p}" for n in _QKV])
    return m.finish()
