"""Parity cases for our attention module against three references:

- ``torch.nn.functional.scaled_dot_product_attention`` (MHA, and GQA with ``enable_gqa=True``
  under a causal mask), driven by projections with our own parameter names;
- ``torch.nn.MultiheadAttention`` (packed ``in_proj_weight``: self, cross, causal, key padding,
  per-head weights) and ``F.multi_head_attention_forward`` with separate projection weights;
- Hugging Face Llama attention with grouped-query heads (8 query heads, 2 kv heads).

Each scenario is one row of the report; a case passes when every row does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from flops_fit.parity import probe
from flops_fit.parity.compare import LayerResult, ParityReport, Side, compare_sides, timed_report
from flops_fit.parity.convert_llama_attn import convert_llama_attention
from flops_fit.parity.convert_torch_mha import ATTENTION_FACTORY, convert_torch_mha
from flops_fit.parity.mapping import Converted, KeyMapper
from flops_fit.parity.pipeline import Tamper, save_hf
from flops_fit.parity.safetensors_io import load_weights
from flops_fit.plugins.models.attention import Rotary
from torch import nn

WIDTH, HEADS, BATCH, Q_LEN, K_LEN = 64, 4, 2, 7, 5
Forward = Callable[[nn.Module, Sequence[Any]], Any]


Group = tuple[nn.Module, nn.Module, dict[str, tuple[Sequence[Any], Forward, Forward]]]


def _scenarios(case: str, reference: str, device: str, dtype: str, groups: Sequence[Group]) -> ParityReport:
    """One report row per scenario; each group is (reference module, our module, scenarios),
    a scenario being (inputs, reference forward, our forward)."""

    def compute() -> list[LayerResult]:
        rows = []
        for ref, ours, scenarios in groups:
            for name, (inputs, ref_fwd, our_fwd) in scenarios.items():
                rows += compare_sides(Side(ref, ref_fwd), Side(ours, our_fwd), inputs,
                                      device=device, dtype=dtype, output_name=name)
        return rows

    return timed_report(case, "attention", reference, device, dtype, compute)


def _convert_saved(module: nn.Module, convert: Callable[[Path], Converted], tamper: Tamper | None) -> nn.Module:
    """Save ``module``'s weights with safetensors, convert them from the file, build ours."""
    import tempfile

    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory(prefix="flops-fit-parity-") as tmp:
        path = Path(tmp) / "model.safetensors"
        save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(path))
        converted = convert(path)
    if tamper is not None:
        tamper(converted.state)
    return converted.build()


# --------------------------------------------------------------------- SDPA
class SdpaReference(nn.Module):
    """Projections named like ours, attention by ``F.scaled_dot_product_attention`` itself."""

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int) -> None:
        super().__init__()
        self.h, self.kv, self.d = num_heads, num_kv_heads, embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * self.d)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * self.d)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv, self.d).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=self.kv != self.h)
        return self.out_proj(out.transpose(1, 2).reshape(b, t, -1))


def sdpa(device: str = "cpu", dtype: str = "float32", *, num_kv_heads: int = 2,
         tamper: Tamper | None = None) -> ParityReport:
    """Our attention vs ``F.scaled_dot_product_attention``: MHA, and GQA (8 heads, 2 kv) causal."""
    heads = 8
    mha = probe.probe_init_(SdpaReference(WIDTH, heads, heads), seed=0)
    gqa = probe.probe_init_(SdpaReference(WIDTH, heads, num_kv_heads), seed=1)

    def identity(module, n_kv):
        def convert(path: Path) -> Converted:
            config = {"embed_dim": WIDTH, "num_heads": heads, "num_kv_heads": n_kv}
            m = KeyMapper(load_weights(path).tensors, "SDPA reference")
            for kind in ("weight", "bias"):
                m.concat(f"qkv_proj.{kind}", [f"{p}_proj.{kind}" for p in "qkv"])
                m.map(f"out_proj.{kind}", f"out_proj.{kind}")
            return Converted("attention", WIDTH, config, m.finish(), "SDPA", factory=ATTENTION_FACTORY)
        return _convert_saved(module, convert, tamper)

    ours_mha, ours_gqa = identity(mha, heads), identity(gqa, num_kv_heads)
    x = [probe.hidden(BATCH, Q_LEN, WIDTH)]
    plain, causal = (lambda m, i: m(*i)), (lambda m, i: m(*i, causal=True))
    return _scenarios("sdpa", "F.scaled_dot_product_attention", device, dtype, [
        (mha, ours_mha, {"mha": (x, plain, plain), "mha.causal": (x, causal, causal)}),
        (gqa, ours_gqa, {
            "gqa.causal": (x, causal, causal),
            "gqa.math-path": (x, causal, lambda m, i: m(*i, causal=True, path="math")),
        }),
    ])


# ------------------------------------------------------ nn.MultiheadAttention
def torch_mha(device: str = "cpu", dtype: str = "float32", *, tamper: Tamper | None = None) -> ParityReport:
    """Our attention vs ``nn.MultiheadAttention`` (packed ``in_proj_weight``, batch_first)."""
    ref = probe.probe_init_(nn.MultiheadAttention(WIDTH, HEADS, batch_first=True), seed=0)
    ours = _convert_saved(ref, lambda p: convert_torch_mha(p, num_heads=HEADS), tamper)
    x, y = probe.hidden(BATCH, Q_LEN, WIDTH, seed=1), probe.hidden(BATCH, K_LEN, WIDTH, seed=2)
    pad = torch.zeros(BATCH, K_LEN, dtype=torch.bool)
    pad[0, -2:] = True  # nn.MultiheadAttention: True = ignore this key
    causal = torch.ones(Q_LEN, Q_LEN, dtype=torch.bool).triu(1)  # True = not allowed
    return _scenarios("torch-mha", "torch.nn.MultiheadAttention", device, dtype, [(ref, ours, {
        "self": ([x], lambda m, i: m(i[0], i[0], i[0], need_weights=False), lambda m, i: m(i[0])),
        "cross": ([x, y], lambda m, i: m(i[0], i[1], i[1], need_weights=False), lambda m, i: m(i[0], i[1])),
        "causal": ([x, causal], lambda m, i: m(i[0], i[0], i[0], attn_mask=i[1], is_causal=True, need_weights=False),
                   lambda m, i: m(i[0], causal=True)),
        "key-padding": ([x, y, pad], lambda m, i: m(i[0], i[1], i[1], key_padding_mask=i[2], need_weights=False),
                        lambda m, i: m(i[0], i[1], key_padding_mask=i[2])),
        "attn-mask": ([x, causal], lambda m, i: m(i[0], i[0], i[0], attn_mask=i[1], need_weights=False),
                      lambda m, i: m(i[0], attn_mask=i[1])),
        "weights": ([x, y], lambda m, i: m(i[0], i[1], i[1], need_weights=True, average_attn_weights=False)[1],
                    lambda m, i: m(i[0], i[1], need_weights=True, average_attn_weights=False)[1]),
        "weights.averaged": ([x, y], lambda m, i: m(i[0], i[1], i[1])[1], lambda m, i: m(i[0], i[1], need_weights=True)[1]),
    })])


class SeparateProjections(nn.Module):
    """``F.multi_head_attention_forward`` with ``use_separate_proj_weight=True`` (sequence-first),
    holding the weights under ``nn.MultiheadAttention``'s separate-layout names."""

    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
            setattr(self, name, nn.Parameter(torch.empty(embed_dim, embed_dim)))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * embed_dim))
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        q, k = query.transpose(0, 1), key.transpose(0, 1)  # (S, B, E)
        out, _ = F.multi_head_attention_forward(
            q, k, k, q.shape[-1], self.num_heads, None, self.in_proj_bias, None, None, False, 0.0,
            self.out_proj.weight, self.out_proj.bias, training=False, need_weights=False,
            use_separate_proj_weight=True, q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight, v_proj_weight=self.v_proj_weight,
        )
        return out.transpose(0, 1)


def torch_mha_functional(device: str = "cpu", dtype: str = "float32", *, tamper: Tamper | None = None) -> ParityReport:
    """Our attention vs ``F.multi_head_attention_forward`` with separate q/k/v projection weights."""
    ref = probe.probe_init_(SeparateProjections(WIDTH, HEADS), seed=0)
    ours = _convert_saved(ref, lambda p: convert_torch_mha(p, num_heads=HEADS), tamper)
    x, y = probe.hidden(BATCH, Q_LEN, WIDTH, seed=1), probe.hidden(BATCH, K_LEN, WIDTH, seed=2)
    return _scenarios("torch-mha-functional", "F.multi_head_attention_forward", device, dtype, [(ref, ours, {
        "cross": ([x, y], lambda m, i: m(*i), lambda m, i: m(*i)),
        "self": ([x], lambda m, i: m(i[0], i[0]), lambda m, i: m(i[0])),
    })])


# -------------------------------------------------------------- Llama (GQA)
LLAMA_TINY = {"hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 128,
              "num_hidden_layers": 1, "vocab_size": 32, "max_position_embeddings": 64}


class LlamaReference(nn.Module):
    """HF ``LlamaAttention`` called as the decoder layer calls it: RoPE cos/sin from the
    model's rotary embedding, and an additive causal mask (eager attention)."""

    def __init__(self, llama: nn.Module) -> None:
        super().__init__()
        self.attn = llama.model.layers[0].self_attn
        self.rotary = llama.model.rotary_emb

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        cos_sin = self.rotary(x, torch.arange(t, device=x.device)[None])
        mask = torch.full((t, t), float("-inf"), device=x.device, dtype=x.dtype).triu(1)[None, None]
        return self.attn(x, position_embeddings=cos_sin, attention_mask=mask)[0]


class RotatedOurs(nn.Module):
    """Our attention given HF's own RoPE ``cos``/``sin`` (from the model's rotary embedding)
    through its ``rotary`` argument, so both sides rotate q and k with identical tables;
    ``interleaved=True`` rotates adjacent pairs instead (Meta's layout: a negative control)."""

    def __init__(self, attn: nn.Module, rotary: nn.Module, interleaved: bool = False) -> None:
        super().__init__()
        self.attn, self.rotary, self.interleaved = attn, rotary, interleaved

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cos, sin = self.rotary(x, torch.arange(x.shape[1], device=x.device)[None])
        return self.attn(x, causal=True, rotary=Rotary(cos[:, None], sin[:, None], self.interleaved))


def llama_reference(seed: int = 0) -> nn.Module:
    import transformers

    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA_TINY))
    model.set_attn_implementation("eager")
    return probe.probe_init_(model, seed)


def llama_gqa(device: str = "cpu", dtype: str = "float32", *, tamper: Tamper | None = None,
              interleaved: bool = False) -> ParityReport:
    """Our attention (GQA: 8 heads, 2 kv heads) vs HF ``LlamaAttention`` with the same RoPE."""
    import tempfile

    llama = llama_reference()
    with tempfile.TemporaryDirectory(prefix="flops-fit-parity-") as tmp:
        save_hf(llama, Path(tmp))
        converted = convert_llama_attention(tmp, layer=0)
    if tamper is not None:
        tamper(converted.state)
    ours = RotatedOurs(converted.build(), llama.model.rotary_emb, interleaved=interleaved)
    ref = LlamaReference(llama)
    x = [probe.hidden(BATCH, Q_LEN, LLAMA_TINY["hidden_size"])]
    return _scenarios("llama-gqa", "transformers LlamaAttention (GQA, RoPE)", device, dtype, [(ref, ours, {
        "gqa.causal.rope": (x, lambda m, i: m(*i), lambda m, i: m(*i)),
    })])
