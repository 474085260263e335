"""Multi-head attention with grouped-query (GQA) and multi-query (MQA) variants.

One module serves every built-in model, so that parity with timm, Hugging Face and torch
comes down to copying weights into four named projections:

* ``q_proj`` (``H*D`` outputs), ``k_proj`` and ``v_proj`` (``KV*D`` outputs each) and
  ``out_proj`` (``H*D -> E``), all ``nn.Linear``. These are the ``state_dict`` keys whatever
  layout the forward uses internally (self-attention concatenates the three input
  projections into one matmul, which is what timm's fused ``qkv`` does).
* Query head ``h`` reads key/value head ``h // (H // KV)``: each KV head serves
  ``H // KV`` consecutive query heads, the ``repeat_interleave`` convention of Hugging
  Face's ``repeat_kv`` (tiling with ``.repeat`` instead is a different model).

Paths through ``forward`` (all give the same numbers up to float rounding):

* ``"sdpa"`` (default): ``torch.nn.functional.scaled_dot_product_attention``, with
  ``enable_gqa`` where torch has it (otherwise KV heads are expanded first).
* ``"math"``: explicit ``softmax(q k^T * scale + mask) v`` in float32 softmax; used for
  debugging and whenever ``need_weights=True``, since it can return the weights.
* key length 1 without a mask: every query's single attention weight is exactly 1, so the
  output is ``out_proj(v)`` and the query/key projections are skipped (their gradient is
  exactly zero on every path in that case).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from flops_fit.checks import positive_int

ATTENTION_PATHS = ("sdpa", "math")

# torch >= 2.5 lets SDPA read grouped KV heads directly; older versions get expanded heads.
_SDPA_HAS_GQA = "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "")


class MultiheadAttention(nn.Module):
    """Multi-head attention: MHA (``num_kv_heads == num_heads``), GQA (fewer), MQA (1).

    Args:
        embed_dim: model width ``E`` (input and output features).
        num_heads: query heads ``H``; the head size is ``D = E // H``.
        num_kv_heads: key/value heads ``KV`` (default ``H``); must divide ``H``.
        bias: biases on the query, key and value projections.
        out_bias: bias on ``out_proj`` (default: same as ``bias``; timm's ``qkv_bias=False``
            keeps the output bias).
        dropout: attention-probability dropout, applied in training mode only.
        path: ``"sdpa"`` (default) or ``"math"``; see the module docstring.
        scale: softmax scale (default ``D ** -0.5``).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        bias: bool = True,
        *,
        out_bias: bool | None = None,
        dropout: float = 0.0,
        path: str = "sdpa",
        scale: float | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        positive_int(embed_dim, "embed_dim")
        positive_int(num_heads, "num_heads")
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        positive_int(num_kv_heads, "num_kv_heads")
        if embed_dim % num_heads:
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads}): "
                f"pick num_heads among the divisors of {embed_dim}"
            )
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_heads ({num_heads}) must be divisible by num_kv_heads ({num_kv_heads}): "
                f"each key/value head serves the same number of query heads"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        if path not in ATTENTION_PATHS:
            raise ValueError(f"path must be one of {ATTENTION_PATHS}, got {path!r}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.path = path
        self.scale = self.head_dim**-0.5 if scale is None else float(scale)
        kv_dim = num_kv_heads * self.head_dim
        factory = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.k_proj = nn.Linear(embed_dim, kv_dim, bias=bias, **factory)
        self.v_proj = nn.Linear(embed_dim, kv_dim, bias=bias, **factory)
        out_bias = bias if out_bias is None else out_bias
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=out_bias, **factory)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
            f"num_kv_heads={self.num_kv_heads}, path={self.path!r}"
        )

    # ----------------------------------------------------------------- forward
    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        causal: bool = False,
        attn_mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = False,
        path: str | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from ``query`` (B, Sq, E) to ``key``/``value`` (B, Sk, E).

        ``key`` defaults to ``query`` and ``value`` to ``key`` (self-attention).

        Masks say where attention is ALLOWED (the convention of
        ``scaled_dot_product_attention``, the opposite of ``nn.MultiheadAttention``'s
        ``key_padding_mask``):

        * ``key_padding_mask``: bool (B, Sk), True = a real key, False = padding to ignore.
        * ``attn_mask``: broadcastable to (B, H, Sq, Sk); bool (True = may attend) or float
          (added to the scores, e.g. ``-inf`` to block).
        * ``causal=True``: query i attends to keys 0..i; needs Sq == Sk.

        All of them combine. A query with every key blocked attends to nothing: its
        attention output is zero (``out_proj`` then adds only its bias), as in SDPA.

        Returns the output (B, Sq, E), or ``(output, weights)`` with per-head weights
        (B, H, Sq, Sk) when ``need_weights=True`` (computed on the math path).
        """
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value, causal)
        batch, q_len, _ = query.shape
        k_len = key.shape[1]
        mask = self._combined_mask(attn_mask, key_padding_mask, batch, q_len, k_len, query)
        path = self.path if path is None else path
        if path not in ATTENTION_PATHS:
            raise ValueError(f"path must be one of {ATTENTION_PATHS}, got {path!r}")

        if k_len == 1 and mask is None and not (self.training and self.dropout):
            return self._single_key(value, batch, q_len, need_weights)

        q, k, v = self._project(query, key, value)
        if need_weights or path == "math":
            out, weights = self._math(q, k, v, mask, causal)
        else:
            out, weights = self._sdpa(q, k, v, mask, causal), None
        out = self.out_proj(out.transpose(1, 2).reshape(batch, q_len, self.embed_dim))
        return (out, weights) if need_weights else out

    # ----------------------------------------------------------- validation
    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor, causal: bool) -> None:
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, Tensor):
                raise ValueError(f"{name} must be a tensor, got {type(t).__name__}")
            if t.dim() != 3:
                raise ValueError(
                    f"{name} must be 3-D (batch, sequence, embed_dim), got shape {tuple(t.shape)}"
                )
            if t.shape[-1] != self.embed_dim:
                raise ValueError(
                    f"{name} last dimension must equal embed_dim ({self.embed_dim}), "
                    f"got shape {tuple(t.shape)}"
                )
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(
                f"query, key and value must share the batch size, got {query.shape[0]}, "
                f"{key.shape[0]} and {value.shape[0]}"
            )
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"key and value must have the same length, got {key.shape[1]} and {value.shape[1]}"
            )
        if causal and query.shape[1] != key.shape[1]:
            raise ValueError(
                f"causal=True needs query and key of the same length, got {query.shape[1]} "
                f"and {key.shape[1]}"
            )

    def _combined_mask(
        self,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        batch: int,
        q_len: int,
        k_len: int,
        like: Tensor,
    ) -> Tensor | None:
        """One mask broadcastable to (B, H, Sq, Sk): bool if every input mask is bool."""
        target = (batch, self.num_heads, q_len, k_len)
        mask = None
        if attn_mask is not None:
            try:
                ok = torch.broadcast_shapes(attn_mask.shape, target) == target
            except RuntimeError:
                ok = False
            if not ok:
                raise ValueError(
                    f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to "
                    f"(batch, heads, query_len, key_len) = {target}"
                )
            if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
                raise ValueError(f"attn_mask must be bool or floating point, got {attn_mask.dtype}")
            mask = attn_mask if attn_mask.dtype == torch.bool else attn_mask.to(like.dtype)
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (batch, k_len) or key_padding_mask.dtype != torch.bool:
                raise ValueError(
                    f"key_padding_mask must be bool of shape (batch, key_len) = {(batch, k_len)}, "
                    f"got {key_padding_mask.dtype} of shape {tuple(key_padding_mask.shape)}"
                )
            padding = key_padding_mask[:, None, None, :]
            if mask is None:
                mask = padding
            elif mask.dtype == torch.bool:
                mask = mask & padding
            else:
                mask = mask.masked_fill(~padding, float("-inf"))
        return mask

    # ------------------------------------------------------------- the maths
    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, H, Sq, D) and k, v (B, KV, Sk, D)."""
        batch, q_len, _ = query.shape
        k_len = key.shape[1]
        if key is query and value is query:  # self-attention: one fused matmul
            weight = torch.cat((self.q_proj.weight, self.k_proj.weight, self.v_proj.weight))
            bias = None
            if self.q_proj.bias is not None:
                bias = torch.cat((self.q_proj.bias, self.k_proj.bias, self.v_proj.bias))
            kv_dim = self.num_kv_heads * self.head_dim
            q, k, v = F.linear(query, weight, bias).split((self.embed_dim, kv_dim, kv_dim), dim=-1)
        else:
            q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        q = q.view(batch, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, k_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, k_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return q, k, v

    def _expand_kv(self, t: Tensor) -> Tensor:
        """(B, KV, S, D) -> (B, H, S, D): query head h reads KV head h // (H // KV)."""
        group = self.num_heads // self.num_kv_heads
        return t if group == 1 else t.repeat_interleave(group, dim=1)

    def _dropout_p(self) -> float:
        return self.dropout if self.training else 0.0

    def _sdpa(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
        extra = {}
        if self.num_kv_heads != self.num_heads:
            if _SDPA_HAS_GQA:
                extra["enable_gqa"] = True
            else:
                k, v = self._expand_kv(k), self._expand_kv(v)
        if causal and mask is not None:  # SDPA refuses is_causal together with a mask
            mask = _and_causal(mask, q.shape[-2], k.shape[-2], q.device)
            causal = False
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self._dropout_p(), is_causal=causal,
            scale=self.scale, **extra,
        )

    def _math(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool
    ) -> tuple[Tensor, Tensor]:
        k, v = self._expand_kv(k), self._expand_kv(v)
        scores = torch.matmul(q, k.transpose(-2, -1)).float() * self.scale
        if causal:
            mask = _and_causal(mask, q.shape[-2], k.shape[-2], q.device)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:  # a query with every key blocked attends to nothing, as in SDPA
            weights = weights.masked_fill(scores.isneginf().all(-1, keepdim=True), 0.0)
        weights = weights.to(q.dtype)
        dropped = F.dropout(weights, self._dropout_p()) if self._dropout_p() else weights
        return torch.matmul(dropped, v), weights

    def _single_key(self, value: Tensor, batch: int, q_len: int, need_weights: bool):
        """One key: each weight is softmax of one score = 1, so out = out_proj(v) per query."""
        v = self._expand_kv(self.v_proj(value).view(batch, self.num_kv_heads, 1, self.head_dim))
        out = self.out_proj(v.reshape(batch, 1, self.embed_dim)).expand(batch, q_len, self.embed_dim)
        if not need_weights:
            return out
        return out, value.new_ones(batch, self.num_heads, q_len, 1)


def _and_causal(mask: Tensor | None, q_len: int, k_len: int, device: torch.device) -> Tensor:
    """Combine ``mask`` with the lower-triangular causal mask (query i sees keys 0..i)."""
    causal = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril()
    if mask is None:
        return causal
    if mask.dtype == torch.bool:
        return mask & causal
    return mask.masked_fill(~causal, float("-inf"))


__all__ = ["ATTENTION_PATHS", "MultiheadAttention"]
