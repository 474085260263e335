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


def zeroed(key: str):
    """A projection filled with zeros after conversion (TransformerLens #1620's symptom)."""

    def tamper(state: dict[str, Any]) -> None:
        state[key] = state[key].new_zeros(state[key].shape)

    return tamper


def tiled_kv_heads(prefix: str, num_heads: int, num_kv_heads: int):
    """Pair query head h with kv head ``h % KV`` (``.repeat`` tiling) instead of ``h // G``.

    Our attention interleaves; reordering the query heads (rows of ``q_proj``, columns of
    ``out_proj``) so that slot j holds the head that tiling would pair with kv head j // G
    makes our module compute exactly what a tiling implementation computes with the
    original weights.
    """
    def tamper(state: dict[str, Any]) -> None:
        q = state[prefix + "q_proj.weight"]
        d = q.shape[0] // num_heads
        order = [h for g in range(num_kv_heads) for h in range(num_heads) if h % num_kv_heads == g]
        rows = [r for h in order for r in range(h * d, (h + 1) * d)]
        state[prefix + "q_proj.weight"] = q[rows].contiguous()
        if prefix + "q_proj.bias" in state:
            state[prefix + "q_proj.bias"] = state[prefix + "q_proj.bias"][rows].contiguous()
        state[prefix + "out_proj.weight"] = state[prefix + "out_proj.weight"][:, rows].contiguous()

    return tamper
