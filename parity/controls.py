"""Known-wrong variants for the negative controls: edits of a converted state dict.

Config-level mistakes (tanh GELU for exact, a wrong LayerNorm eps) are injected as
overrides of our model's configuration; the weight-level mistakes below are ``tamper``
functions for ``run_model_case`` and the attention cases.
"""

from __future__ import annotations

from typing import Any


def untransposed(key: str):
    """A GPT-2 ``Conv1D`` weight copied without its transpose (square ``c_proj``: no shape error)."""

    def tamper(state: dict[str, Any]) -> None:
        state[key] = state[key].t().contiguous()

    return tamper


def zeroed(key: str, rows: slice | None = None):
    """A projection (or some of its rows: the v part of a packed ``qkv_proj``) filled with
    zeros after conversion (TransformerLens #1620's symptom)."""

    def tamper(state: dict[str, Any]) -> None:
        value = state[key].clone()
        value[rows if rows is not None else slice(None)] = 0
        state[key] = value

    return tamper


def dropped(pattern: str):
    """Converted keys matching ``pattern`` (a regular expression) left out, as a converter
    that ignores them would (an untied ``lm_head`` loaded as tied, biases dropped)."""
    import re

    def tamper(state: dict[str, Any]) -> None:
        for key in [k for k in state if re.fullmatch(pattern, k)]:
            del state[key]

    return tamper


def tiled_kv_heads(prefix: str, num_heads: int, num_kv_heads: int):
    """Pair query head h with kv head ``h % KV`` (``.repeat`` tiling) instead of ``h // G``.

    Our attention interleaves; reordering the query heads (the query rows of ``qkv_proj``,
    columns of ``out_proj``) so that slot j holds the head that tiling would pair with kv
    head j // G makes our module compute exactly what a tiling implementation computes with
    the original weights.
    """
    def tamper(state: dict[str, Any]) -> None:
        out = state[prefix + "out_proj.weight"]
        d = out.shape[1] // num_heads
        order = [h for g in range(num_kv_heads) for h in range(num_heads) if h % num_kv_heads == g]
        rows = [r for h in order for r in range(h * d, (h + 1) * d)]
        for kind in ("weight", "bias"):
            key = prefix + f"qkv_proj.{kind}"
            if key in state:
                packed = state[key].clone()
                packed[: num_heads * d] = packed[rows]
                state[key] = packed
        state[prefix + "out_proj.weight"] = out[:, rows].contiguous()

    return tamper


def swapped(first: str, second: str):
    """Two converted tensors exchanged (DeiT's class and distillation tokens mixed up)."""

    def tamper(state: dict[str, Any]) -> None:
        state[first], state[second] = state[second], state[first]

    return tamper


def shifted(key: str, delta: Any):
    """A converted tensor plus ``delta``: with minus the class position embedding, DINOv2 with
    registers' class token as a converter that does not fold position 0 into it leaves it."""

    def tamper(state: dict[str, Any]) -> None:
        state[key] = state[key] + delta

    return tamper


def zeroed_all(pattern: str):
    """Every converted tensor matching ``pattern`` (a regular expression) zeroed: Swin's
    relative position bias tables, as a converter that drops the bias leaves them."""
    import re

    def tamper(state: dict[str, Any]) -> None:
        for key in [k for k in state if re.fullmatch(pattern, k)]:
            state[key] = state[key] * 0

    return tamper


def filled(pattern: str, value: float):
    """Converted tensors matching ``pattern`` set to ``value`` everywhere: LayerScale gammas of 1
    are a model without LayerScale (a converter that drops ``gamma_1`` / ``gamma_2``)."""
    import re

    def tamper(state: dict[str, Any]) -> None:
        for key in [k for k in state if re.fullmatch(pattern, k)]:
            state[key] = state[key].clone().fill_(value)

    return tamper


def permuted_chunks(pattern: str, order: tuple[int, ...]):
    """The last dimension of each tensor matching ``pattern`` cut into ``len(order)`` equal
    chunks and put in ``order``: Swin's patch merging concatenating its 2x2 tokens in another
    order (row-major instead of timm's (0,0), (1,0), (0,1), (1,1)) with the same weights."""
    import re

    import torch

    def tamper(state: dict[str, Any]) -> None:
        for key in [k for k in state if re.fullmatch(pattern, k)]:
            chunks = state[key].chunk(len(order), dim=-1)
            state[key] = torch.cat([chunks[i] for i in order], dim=-1)

    return tamper


def unshifted_windows(model: Any) -> None:
    """A ``setup`` for our built Swin: no block shifts its windows (W-MSA only, the shift
    and its mask ignored)."""
    for block in model.modules():
        if hasattr(block, "shift_mask"):
            block.shift, block.shift_mask = 0, None


def unmasked_shift(model: Any) -> None:
    """A ``setup`` for our built Swin: windows shift but the mask that keeps the rolled-around
    regions apart is left out, so tokens from opposite image edges attend to each other."""
    for block in model.modules():
        if hasattr(block, "shift_mask"):
            block.shift_mask = None


def swapped_rows(key: str, first: slice, second: slice):
    """Two equal row blocks of one tensor exchanged (keys and values of a packed projection
    unpacked in the wrong order)."""

    def tamper(state: dict[str, Any]) -> None:
        value = state[key].clone()
        value[first], value[second] = state[key][second], state[key][first]
        state[key] = value

    return tamper


def class_attention_without_its_own_key(model: Any) -> None:
    """CaiT's class token attending to the patches only (keys and values leave the class
    token out): each class-attention block of ``model`` rewired in place."""
    import torch

    for block in model.blocks_token_only:
        def forward(patches, cls, block=block):
            tokens = block.norm1(torch.cat((cls, patches), dim=1))
            cls = cls + block.ls1(block.attn(tokens[:, :1], tokens[:, 1:], tokens[:, 1:]))
            return cls + block.ls2(block.mlp(block.norm2(cls)))

        block.forward = forward
