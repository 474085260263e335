"""Hugging Face ViT-family weights -> our ``vit``: ViT, DeiT, DINOv2, DINOv2 with registers.

The four share one layout (``embeddings.{cls_token,position_embeddings,patch_embeddings}``,
``encoder.layer.N.attention.attention.{query,key,value}``, ``attention.output.dense``,
``layernorm``) and differ in a few places, all read from ``config.json``'s ``model_type``:

* ViT / DeiT name a block's norms ``layernorm_before`` / ``layernorm_after`` and its MLP
  ``intermediate.dense`` / ``output.dense`` (hidden size ``intermediate_size``); DINOv2
  names them ``norm1`` / ``norm2`` and ``mlp.fc1`` / ``mlp.fc2`` (``int(hidden_size *
  mlp_ratio)``) and scales both branches by LayerScale ``layer_scale{1,2}.lambda1``;
* DeiT adds a distillation token after the class token (its position embedding covers both):
  ``DeiTForImageClassificationWithTeacher``'s two heads are our ``head`` / ``head_dist``
  (logits: their mean), ``DeiTForImageClassification`` classifies from the class token alone
  (our ``dist_head=False``);
* DINOv2 with registers inserts ``register_tokens`` after the class token once the position
  embedding is added, so registers have no position and the class token has one: our
  ``no_embed_class=True`` with the class position folded into ``cls_token``, as timm converts
  these checkpoints. The sum is what HF computes at every forward, so fp32 stays bit-exact.

DINOv2's position-embedding interpolation is the identity at the configured (square)
``image_size``, the only size our ``vit`` runs at. Unused pieces are dropped and listed in
``Converted.dropped``: ``ViTModel`` / ``DeiTModel``'s pooler (dense + tanh, not part of our
model) and the masked-image-modeling ``mask_token``. Every other config key is reproduced,
known not to change the forward in eval (dropouts, drop path, initialisation values,
``Dinov2Backbone`` feature-map switches) or refused by name, as are ``use_swiglu_ffn=True``
and ``Dinov2ForImageClassification``'s head (class token concatenated with the mean patch
token, which our heads do not compute).

transformers 5.x renames modules in memory (``vit.layers.N.attention.q_proj``,
``encoder.layer.N.attention.q_proj``) but reads and writes the old names on disk. This
converter reads files, so it maps the on-disk names; a 5.x in-memory ``state_dict()`` is
renamed to the on-disk names first, so both work.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flops_fit.parity.mapping import (
    Converted,
    KeyMapper,
    head_count,
    read_source,
    require_keys,
    unknown_options,
)

from flops_fit.errors import ConversionError

# HF hidden_act -> our act_layer
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "quick_gelu": "quick_gelu", "silu": "silu", "swish": "silu", "relu": "relu"}

_VIT_BLOCK = {  # our name -> on-disk HF name, inside one encoder layer
    "norm1": "layernorm_before", "norm2": "layernorm_after", "attn.out_proj": "attention.output.dense",
    "mlp.fc1": "intermediate.dense", "mlp.fc2": "output.dense",
}
_DINOV2_BLOCK = {
    "norm1": "norm1", "norm2": "norm2", "attn.out_proj": "attention.output.dense",
    "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2",
}
_QKV = tuple(f"attention.attention.{n}" for n in ("query", "key", "value"))  # packed into attn.qkv_proj

# Config keys of the whole family that do not change the forward in eval.
_INERT = {"hidden_dropout_prob", "attention_probs_dropout_prob", "drop_path_rate", "encoder_stride",
          "pooler_output_size", "pooler_act", "layerscale_value", "use_mask_token", "out_features",
          "out_indices", "_out_features", "_out_indices", "stage_names", "apply_layernorm",
          "reshape_hidden_states"}
_HANDLED = {"hidden_size", "num_hidden_layers", "num_attention_heads", "hidden_act", "layer_norm_eps",
            "image_size", "patch_size", "num_channels", "qkv_bias"}


@dataclass(frozen=True)
class Family:
    """What one HF ``model_type`` adds to the shared layout."""

    reference: str
    classes: str  # transformers' class-name stem: ``{classes}Model``, ``{classes}ForImageClassification``
    prefix: str  # the backbone's attribute in task models (``vit.``, ``deit.``, ...)
    block: dict[str, str]
    mlp_key: str  # "intermediate_size" or "mlp_ratio"
    norm_eps: float  # the config class's default layer_norm_eps
    dist_token: bool = False
    layer_scale: bool = False
    registers: bool = False

    @property
    def handled(self) -> set[str]:
        extra = {"use_swiglu_ffn"} if self.layer_scale else set()
        return _HANDLED | {self.mlp_key} | extra | ({"num_register_tokens"} if self.registers else set())


FAMILIES = {
    "vit": Family("HF ViT", "ViT", "vit.", _VIT_BLOCK, "intermediate_size", 1e-12),
    "deit": Family("HF DeiT", "DeiT", "deit.", _VIT_BLOCK, "intermediate_size", 1e-12, dist_token=True),
    "dinov2": Family("HF DINOv2", "Dinov2", "dinov2.", _DINOV2_BLOCK, "mlp_ratio", 1e-6, layer_scale=True),
    "dinov2_with_registers": Family("HF DINOv2 with registers", "Dinov2WithRegisters", "dinov2_with_registers.",
                                    _DINOV2_BLOCK, "mlp_ratio", 1e-6, layer_scale=True, registers=True),
}
REFERENCE = FAMILIES["vit"].reference

# transformers 5.x in-memory name -> on-disk name (ViT / DeiT: ``layers.N``; DINOv2: ``encoder.layer.N``)
_IN_MEMORY = [
    *[(rf"(?:layers|encoder\.layer)\.(\d+)\.attention\.{p}_proj\.", rf"encoder.layer.\1.attention.{disk}.")
      for p, disk in (("q", "attention.query"), ("k", "attention.key"), ("v", "attention.value"),
                      ("o", "output.dense"))],
    (r"layers\.(\d+)\.mlp\.fc1\.", r"encoder.layer.\1.intermediate.dense."),
    (r"layers\.(\d+)\.mlp\.fc2\.", r"encoder.layer.\1.output.dense."),
    (r"layers\.(\d+)\.", r"encoder.layer.\1."),
]


def to_disk_names(tensors: dict[str, Any]) -> dict[str, Any]:
    """Rename a transformers 5.x in-memory ViT-family state dict to the names files use."""
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
    """Convert a saved HF ViT, DeiT or DINOv2 (folder with ``config.json``, or tensors plus
    ``config``) to our ``vit``; ``config.json``'s ``model_type`` picks the family.

    Classifiers keep their heads (``ViTForImageClassification``, ``DeiTForImageClassification``,
    ``DeiTForImageClassificationWithTeacher``). A backbone (``ViTModel``, ``DeiTModel``,
    ``Dinov2Model``, ``Dinov2WithRegistersModel``) converts to a ``vit`` with one class whose
    ``head`` keeps its fresh initialisation: compare the features,
    ``model.norm(model.forward_features(x))``, with its ``last_hidden_state``.
    """
    tensors, config = read_source(source, config, REFERENCE, need_config=True)
    model_type = config.get("model_type", "vit")
    if model_type not in FAMILIES:
        raise ConversionError(
            f"HF ViT-family converter: model_type={model_type!r} is not supported; it converts {sorted(FAMILIES)}"
        )
    family = FAMILIES[model_type]
    tensors = to_disk_names(tensors)
    prefix = family.prefix if any(k.startswith(family.prefix) for k in tensors) else ""
    heads = classifier_heads(tensors, family)
    num_classes = int(tensors[next(iter(heads.values()))].shape[0]) if heads else 1
    our = hf_vit_config(config, family, num_classes, dist_head="head_dist.weight" in heads)
    state, dropped = hf_vit_state(tensors, family, prefix, our, heads)
    return Converted(
        "vit", our.pop("width"), our, state, family.reference, dropped=dropped,
        fresh=() if heads else ("head.weight", "head.bias"),
    )


def classifier_heads(tensors: dict[str, Any], family: Family) -> dict[str, str]:
    """Our head parameters -> the classifier keys present (none for a backbone)."""
    if "cls_classifier.weight" in tensors:  # DeiTForImageClassificationWithTeacher
        pairs = {"head": "cls_classifier", "head_dist": "distillation_classifier"}
    elif "classifier.weight" in tensors:
        if family.layer_scale:
            raise ConversionError(
                f"{family.reference}: {family.classes}ForImageClassification's classifier is not supported: it reads "
                "the class token concatenated with the mean patch token, and our vit's head reads one of them "
                f"(global_pool 'token' or 'avg'); convert the backbone ({family.classes}Model) instead"
            )
        pairs = {"head": "classifier"}
    else:
        return {}
    return {f"{ours}.{p}": f"{theirs}.{p}" for ours, theirs in pairs.items() for p in ("weight", "bias")}


def _square(config: dict[str, Any], key: str, refused: list[str]) -> int:
    value = config.get(key)
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    if not isinstance(value, int):
        refused.append(f"{key}={value!r} (ours needs one int: square images and patches)")
        return 1
    return value


def _mlp_ratio(config: dict[str, Any], family: Family, width: int) -> float:
    """Our ``mlp_ratio``, whose ``int(width * mlp_ratio)`` is exactly the reference's hidden size."""
    if family.mlp_key == "mlp_ratio":  # DINOv2 sizes its MLP as int(hidden_size * mlp_ratio), as we do
        return float(config.get("mlp_ratio", 4))
    hidden = int(config["intermediate_size"])
    ratio = hidden / width
    while int(width * ratio) < hidden:  # 333 / 100 * 100 = 332.99999999999994
        ratio = math.nextafter(ratio, math.inf)
    return ratio


def hf_vit_config(config: dict[str, Any], family: Family, num_classes: int, dist_head: bool) -> dict[str, Any]:
    """Our ``vit`` configuration; one ConversionError naming every option it does not reproduce."""
    require_keys(config, ("hidden_size", "num_attention_heads", "num_hidden_layers"), family.reference)
    refused = unknown_options(config, family.handled | _INERT)
    act = config.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        refused.append(f"hidden_act={act!r} (ours: {sorted(ACTIVATIONS)})")
    if config.get("use_swiglu_ffn"):
        refused.append("use_swiglu_ffn=True (a SwiGLU MLP; ours is fc1 -> activation -> fc2)")
    image_size, patch_size = _square(config, "image_size", refused), _square(config, "patch_size", refused)
    if refused:
        raise ConversionError(f"{family.reference}: options our vit does not reproduce: {'; '.join(refused)}")
    width = config["hidden_size"]
    if isinstance(width, bool) or not isinstance(width, int) or width <= 0:  # 0 raised ZeroDivisionError (MLP ratio)
        raise ConversionError(f"{family.reference}: config hidden_size={width!r} is not a width (a positive integer)")
    heads = head_count(config["num_attention_heads"], "config num_attention_heads", width, family.reference)
    registers = int(config.get("num_register_tokens", 4)) if family.registers else 0
    return {
        "width": width,
        "depth": int(config["num_hidden_layers"]),
        "num_heads": heads,
        "num_kv_heads": heads,
        "patch_size": patch_size,
        "image_size": image_size,
        "in_chans": int(config.get("num_channels", 3)),
        "num_classes": num_classes,
        "mlp_ratio": _mlp_ratio(config, family, width),
        "global_pool": "token",  # the classifier reads the class token after the final layernorm
        "qkv_bias": bool(config.get("qkv_bias", True)),
        "norm_eps": float(config.get("layer_norm_eps", family.norm_eps)),
        "act_layer": ACTIVATIONS[act],
        "dist_token": family.dist_token,
        # DeiTModel: one fresh head on the class token, as DeiTForImageClassification fine-tunes it
        **({"dist_head": dist_head} if family.dist_token else {}),
        "init_values": 1.0 if family.layer_scale else None,  # the loaded LayerScale gammas replace it
        "reg_tokens": registers,
        "no_embed_class": family.registers,  # the class position is folded into cls_token
    }


def hf_vit_state(tensors: dict[str, Any], family: Family, prefix: str, our: dict[str, Any],
                 heads: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The converted state dict and the reference keys dropped on purpose."""
    ignore = [r"(\w+\.)?pooler\..*", r"(\w+\.)?embeddings\.mask_token"]
    ignore += [r"(\w+\.)?embeddings\.register_tokens"] if family.registers and not our["reg_tokens"] else []
    m = KeyMapper(tensors, family.reference, ignore=ignore)
    e = f"{prefix}embeddings."
    if family.registers:
        pos = e + "position_embeddings"
        m.combine("cls_token", [e + "cls_token", pos], lambda cls, p: cls + p[:, :1])
        m.map("pos_embed", pos, lambda p: p[:, 1:])
        if our["reg_tokens"]:
            m.map("reg_token", e + "register_tokens")
    else:
        m.map("cls_token", e + "cls_token")
        m.map("pos_embed", e + "position_embeddings")
    if family.dist_token:
        m.map("dist_token", e + "distillation_token")
    for ours, theirs in heads.items():
        m.map(ours, theirs)
    for p in ("weight", "bias"):
        m.map(f"patch_embed.proj.{p}", f"{e}patch_embeddings.projection.{p}")
        m.map(f"norm.{p}", f"{prefix}layernorm.{p}")
        for i in range(our["depth"]):
            a = f"{prefix}encoder.layer.{i}."
            for ours, theirs in family.block.items():
                m.map(f"blocks.{i}.{ours}.{p}", f"{a}{theirs}.{p}")
            if p == "weight" or m.has(f"{a}{_QKV[0]}.bias"):  # qkv_bias=False: no q/k/v biases
                m.concat(f"blocks.{i}.attn.qkv_proj.{p}", [f"{a}{n}.{p}" for n in _QKV])
    if family.layer_scale:
        for i in range(our["depth"]):
            for n in (1, 2):
                m.map(f"blocks.{i}.ls{n}.gamma", f"{prefix}encoder.layer.{i}.layer_scale{n}.lambda1")
    return m.finish(), m.dropped
