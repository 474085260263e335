"""Multi-head attention with grouped-query (GQA) and multi-query (MQA) variants.

One module serves every built-in model (ViT, GPT, Llama), so that parity with timm, Hugging
Face and torch comes down to copying weights into two named projections:

* ``qkv_proj``: one ``nn.Linear`` whose output rows are ``[q (H*D); k (KV*D); v (KV*D)]``,
  stored the way the self-attention forward uses them (one matmul, nothing concatenated per
  call; timm's ``qkv`` and torch's ``in_proj_weight`` have this layout). Cross-attention
  slices the weight (views, no copy). State dicts with separate ``q_proj`` / ``k_proj`` /
  ``v_proj`` keys (older flops-fit checkpoints) are packed on load.
* ``out_proj``: ``H*D -> E``. The head size ``D`` defaults to ``E // H`` but may be set
  independently (``num_heads * head_dim != embed_dim`` is allowed, as in Hugging Face Llama).
* Query head ``h`` reads key/value head ``h // (H // KV)``: each KV head serves ``H // KV``
  consecutive query heads, the ``repeat_interleave`` convention of Hugging Face's
  ``repeat_kv`` (tiling with ``.repeat`` instead is a different model).

Masks: ``attn_mask`` and ``key_padding_mask`` mean exactly what they mean for
``torch.nn.MultiheadAttention`` (bool True = blocked, float = added to the scores);
``attend_mask`` takes SDPA's convention (bool True = may attend).

Paths through ``forward`` (the same numbers up to float rounding): ``"sdpa"`` (default) calls
``F.scaled_dot_product_attention`` (with ``enable_gqa`` where this torch has it, found by one
probe call); ``"math"`` is explicit ``softmax(q k^T * scale + mask) v`` with a float32 softmax,
used whenever ``need_weights=True``. Every parameter takes part in every path, so each
receives a gradient (``DistributedDataParallel`` needs no ``find_unused_parameters``).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from flops_fit.checks import positive_int

ATTENTION_PATHS = ("sdpa", "math")


class Rotary(NamedTuple):
    """Rotary position embedding for one forward: ``cos``/``sin`` broadcastable to
    (B, 1, S, D). ``interleaved=False`` rotates dimension i with i + D/2 (Hugging Face's
    ``rotate_half``); ``interleaved=True`` rotates adjacent pairs (Meta's original layout)."""

    cos: Tensor
    sin: Tensor
    interleaved: bool = False


def apply_rotary(x: Tensor, rotary: Rotary) -> Tensor:
    """``x * cos + rotate(x) * sin`` in ``x``'s dtype, as Hugging Face computes it."""
    cos, sin = rotary.cos.to(x.dtype), rotary.sin.to(x.dtype)
    if rotary.interleaved:
        rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    else:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


@functools.cache
def sdpa_has_gqa() -> bool:
    """Whether this torch's SDPA reads grouped KV heads itself (``enable_gqa``, torch >= 2.5):
    one tiny probe call on CPU, made once, at import (so that no device context or FLOP
    counter active at the first forward sees it)."""
    q, kv = torch.zeros(1, 2, 1, 2, device="cpu"), torch.zeros(1, 1, 1, 2, device="cpu")
    try:
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    except (TypeError, RuntimeError):
        return False
    return True


sdpa_has_gqa()


class MultiheadAttention(nn.Module):
    """Multi-head attention: MHA (``num_kv_heads == num_heads``), GQA (fewer), MQA (1).

    Args:
        embed_dim: model width ``E`` (input and output features).
        num_heads: query heads ``H``.
        num_kv_heads: key/value heads ``KV`` (default ``H``); must divide ``H``.
        bias: biases on the query, key and value projections.
        head_dim: the head size ``D`` (default ``E // H``, which must then divide evenly).
        out_bias: bias on ``out_proj`` (default: same as ``bias``; timm's ``qkv_bias=False``
            keeps the output bias, Qwen2 has q/k/v biases only).
        qk_norm: LayerNorm over each head's query and key before attention (timm ``qk_norm``).
        norm_eps: eps of the QK-norm LayerNorms.
        dropout: attention-probability dropout, applied in training mode only.
        path: ``"sdpa"`` (default) or ``"math"``; see the module docstring.
        scale: softmax scale (default ``D ** -0.5``).
        talking_heads: CaiT's talking-heads attention (Shazeer et al. 2020, timm
            ``TalkingHeadAttn``): learned ``H -> H`` mixes of the heads' scores before the
            softmax (``proj_l``) and of their weights after it (``proj_w``). Always the
            explicit path; masks and ``causal`` are refused (mixing heads would leak them).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        bias: bool = True,
        *,
        head_dim: int | None = None,
        out_bias: bool | None = None,
        qk_norm: bool = False,
        norm_eps: float = 1e-6,
        dropout: float = 0.0,
        path: str = "sdpa",
        scale: float | None = None,
        talking_heads: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        positive_int(embed_dim, "embed_dim")
        positive_int(num_heads, "num_heads")
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        positive_int(num_kv_heads, "num_kv_heads")
        if head_dim is None:
            if embed_dim % num_heads:
                raise ValueError(
                    f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads}): "
                    f"pick num_heads among the divisors of {embed_dim}, or set head_dim"
                )
            head_dim = embed_dim // num_heads
        positive_int(head_dim, "head_dim")
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
        self.head_dim = head_dim
        self.dropout = dropout
        self.path = path
        self.scale = head_dim**-0.5 if scale is None else float(scale)
        self.q_dim, self.kv_dim = num_heads * head_dim, num_kv_heads * head_dim
        factory = {"device": device, "dtype": dtype}
        self.qkv_proj = nn.Linear(embed_dim, self.q_dim + 2 * self.kv_dim, bias=bias, **factory)
        if qk_norm:
            self.q_norm = nn.LayerNorm(head_dim, eps=norm_eps, **factory)
            self.k_norm = nn.LayerNorm(head_dim, eps=norm_eps, **factory)
        else:
            self.q_norm = self.k_norm = None
        out_bias = bias if out_bias is None else out_bias
        self.out_proj = nn.Linear(self.q_dim, embed_dim, bias=out_bias, **factory)
        self.talking_heads = bool(talking_heads)
        if self.talking_heads:  # mixes over the head axis, with biases, as timm's TalkingHeadAttn
            self.proj_l = nn.Linear(num_heads, num_heads, **factory)
            self.proj_w = nn.Linear(num_heads, num_heads, **factory)
        self.register_load_state_dict_pre_hook(_pack_separate_projections)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, "
            f"head_dim={self.head_dim}, path={self.path!r}"
        )

    def projection_weights(self) -> tuple[tuple[Tensor, Tensor, Tensor], tuple[Tensor | None, ...]]:
        """The q, k and v weights (and biases, or Nones): views into ``qkv_proj``."""
        sizes = (self.q_dim, self.kv_dim, self.kv_dim)
        weights = self.qkv_proj.weight.split(sizes)
        bias = self.qkv_proj.bias
        return weights, (bias.split(sizes) if bias is not None else (None, None, None))

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
        attend_mask: Tensor | None = None,
        need_weights: bool = False,
        average_attn_weights: bool = True,
        rotary: Rotary | None = None,
        path: str | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attend from ``query`` (B, Sq, E) to ``key``/``value`` (B, Sk, E); batch first.

        ``key`` defaults to ``query`` and ``value`` to ``key`` (self-attention).

        * ``attn_mask`` (as ``nn.MultiheadAttention``): (Sq, Sk) or (B*H, Sq, Sk), or 4-D
          broadcastable to (B, H, Sq, Sk); bool True = NOT allowed, float = added.
        * ``key_padding_mask`` (as ``nn.MultiheadAttention``): (B, Sk); bool True = padding
          to ignore, float = added.
        * ``attend_mask`` (SDPA's convention): broadcastable to (B, H, Sq, Sk); bool True =
          may attend, float = added.
        * ``causal=True``: query i attends to keys 0..i; needs Sq == Sk.
        * ``rotary``: rotate q and k (after QK-norm) by position; self-attention only.

        All masks combine. A query with every key blocked attends to nothing: its attention
        output is zero (``out_proj`` then adds only its bias), as in SDPA.

        Returns the output (B, Sq, E), or ``(output, weights)`` when ``need_weights=True``:
        weights (B, Sq, Sk) averaged over heads, or (B, H, Sq, Sk) with
        ``average_attn_weights=False`` (as ``nn.MultiheadAttention``; the math path).
        """
        self_attention = (key is None or key is query) and (value is None or value is query)
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value, causal)
        if rotary is not None and not self_attention:
            raise ValueError("rotary position embeddings need self-attention (key and value left out)")
        if self.talking_heads and (causal or attn_mask is not None or key_padding_mask is not None
                                   or attend_mask is not None):
            raise ValueError("talking_heads=True mixes the heads' scores, so masks and causal=True are not supported")
        batch, q_len, _ = query.shape
        k_len = key.shape[1]
        mask = self._combined_mask(attn_mask, key_padding_mask, attend_mask, batch, q_len, k_len, query)
        path = self.path if path is None else path
        if path not in ATTENTION_PATHS:
            raise ValueError(f"path must be one of {ATTENTION_PATHS}, got {path!r}")

        q, k, v = self._project(query, key, value, self_attention)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rotary is not None:
            q, k = apply_rotary(q, rotary), apply_rotary(k, rotary)
        if self.talking_heads:
            out, weights = self._talking_heads(q, k, v)
        elif need_weights or path == "math":
            out, weights = self._math(q, k, v, mask, causal)
        else:
            out, weights = self._sdpa(q, k, v, mask, causal), None
        out = self.out_proj(out.transpose(1, 2).reshape(batch, q_len, self.q_dim))
        if not need_weights:
            return out
        return out, (weights.mean(dim=1) if average_attn_weights else weights)

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
        attend_mask: Tensor | None,
        batch: int,
        q_len: int,
        k_len: int,
        like: Tensor,
    ) -> Tensor | None:
        """One mask broadcastable to (B, H, Sq, Sk) in SDPA's convention: bool (True = may
        attend) when every given mask is bool, otherwise additive float."""
        target = (batch, self.num_heads, q_len, k_len)
        masks = []
        if attn_mask is not None:
            _check_mask_dtype(attn_mask, "attn_mask")
            if attn_mask.dim() == 3 and tuple(attn_mask.shape) == (batch * self.num_heads, q_len, k_len):
                attn_mask = attn_mask.view(target)  # nn.MultiheadAttention's (B*H, Sq, Sk)
            elif attn_mask.dim() == 3:
                raise ValueError(
                    f"attn_mask of shape {tuple(attn_mask.shape)}: a 3-D attn_mask must be "
                    f"(batch * heads, query_len, key_len) = {(batch * self.num_heads, q_len, k_len)}, "
                    f"as for nn.MultiheadAttention"
                )
            masks.append(_blocked_to_allowed(_broadcastable(attn_mask, target, "attn_mask")))
        if key_padding_mask is not None:
            _check_mask_dtype(key_padding_mask, "key_padding_mask")
            if tuple(key_padding_mask.shape) != (batch, k_len):
                raise ValueError(
                    f"key_padding_mask must have shape (batch, key_len) = {(batch, k_len)}, "
                    f"got {tuple(key_padding_mask.shape)} (True marks padding, as for nn.MultiheadAttention)"
                )
            masks.append(_blocked_to_allowed(key_padding_mask[:, None, None, :]))
        if attend_mask is not None:
            _check_mask_dtype(attend_mask, "attend_mask")
            masks.append(_broadcastable(attend_mask, target, "attend_mask"))
        if not masks:
            return None
        if all(m.dtype == torch.bool for m in masks):
            return functools.reduce(torch.logical_and, masks)
        total = torch.zeros((), dtype=like.dtype, device=like.device)
        for m in masks:
            total = total + (_additive(m, like.dtype) if m.dtype == torch.bool else m.to(like.dtype))
        return total

    # ------------------------------------------------------------- the maths
    def _project(self, query: Tensor, key: Tensor, value: Tensor, self_attention: bool) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, H, Sq, D) and k, v (B, KV, Sk, D)."""
        batch, q_len, _ = query.shape
        k_len = key.shape[1]
        sizes = (self.q_dim, self.kv_dim, self.kv_dim)
        if self_attention:  # one matmul with the stored packed weight
            q, k, v = self.qkv_proj(query).split(sizes, dim=-1)
        else:
            (wq, wk, wv), (bq, bk, bv) = self.projection_weights()
            q = F.linear(query, wq, bq)
            if key is value:
                kv_bias = None if bq is None else self.qkv_proj.bias[self.q_dim:]
                k, v = F.linear(key, self.qkv_proj.weight[self.q_dim:], kv_bias).split(sizes[1:], dim=-1)
            else:
                k, v = F.linear(key, wk, bk), F.linear(value, wv, bv)
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
            if sdpa_has_gqa():
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


    def _talking_heads(self, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Scores mixed across heads by ``proj_l``, softmax, weights mixed by ``proj_w``, then
        the values; in timm's order (the query scaled before the product)."""
        k, v = self._expand_kv(k), self._expand_kv(v)
        scores = torch.matmul(q * self.scale, k.transpose(-2, -1))
        scores = self.proj_l(scores.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        weights = self.proj_w(weights.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        dropped = F.dropout(weights, self._dropout_p()) if self._dropout_p() else weights
        return torch.matmul(dropped, v), weights


def _check_mask_dtype(mask: Tensor, name: str) -> None:
    if not isinstance(mask, Tensor) or (mask.dtype != torch.bool and not mask.is_floating_point()):
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"{name} must be a bool or floating-point tensor, got {got}")


def _broadcastable(mask: Tensor, target: tuple[int, ...], name: str) -> Tensor:
    try:
        ok = mask.dim() <= 4 and torch.broadcast_shapes(mask.shape, target) == target
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to "
            f"(batch, heads, query_len, key_len) = {target}"
        )
    return mask


def _blocked_to_allowed(mask: Tensor) -> Tensor:
    """nn.MultiheadAttention's convention (bool True = blocked) -> SDPA's (True = allowed)."""
    return ~mask if mask.dtype == torch.bool else mask


def _additive(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, float("-inf"))


def _and_causal(mask: Tensor | None, q_len: int, k_len: int, device: torch.device) -> Tensor:
    """Combine ``mask`` with the lower-triangular causal mask (query i sees keys 0..i)."""
    causal = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril()
    if mask is None:
        return causal
    if mask.dtype == torch.bool:
        return mask & causal
    return mask.masked_fill(~causal, float("-inf"))


def _pack_separate_projections(module, state_dict, prefix, *_args) -> None:
    """Load state dicts with separate ``q_proj``/``k_proj``/``v_proj`` (flops-fit < 0.2 and
    hand-written ones) by packing them into ``qkv_proj`` once, at load time."""
    for kind in ("weight", "bias"):
        parts = [f"{prefix}{p}_proj.{kind}" for p in "qkv"]
        if all(p in state_dict for p in parts) and f"{prefix}qkv_proj.{kind}" not in state_dict:
            state_dict[f"{prefix}qkv_proj.{kind}"] = torch.cat([state_dict.pop(p) for p in parts])


__all__ = ["ATTENTION_PATHS", "MultiheadAttention", "Rotary", "apply_rotary", "sdpa_has_gqa"]
