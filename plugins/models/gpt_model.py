"""The built-in GPT module: Hugging Face ``GPT2LMHeadModel`` maths with our attention.

Learned positions, pre-LN blocks, tanh GELU (GPT-2's ``gelu_new``), causal attention
through ``MultiheadAttention`` (optional GQA via ``n_kv_head``), final LayerNorm and an
LM head tied to the token embedding. Hugging Face's ``Conv1D`` weights are stored
(in, out); ours are ``nn.Linear`` (out, in), so converting is a transpose.

Per-layer outputs for parity: a forward hook on ``blocks[i].attn`` receives that block's
attention output (B, T, C) before the residual add (HF's ``transformer.h[i].attn``
returns it as the first element of a tuple).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from flops_fit.plugins.models.attention import MultiheadAttention
from flops_fit.plugins.models.gpt import GPTConfig
from flops_fit.plugins.models.parametrization import MuPModel
from torch import Tensor, nn


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.width, 4 * cfg.width, bias=cfg.bias)
        self.proj = nn.Linear(4 * cfg.width, cfg.width, bias=cfg.bias)
        self.approximate = "tanh" if cfg.gelu == "tanh" else "none"

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(F.gelu(self.fc(x), approximate=self.approximate))


class Block(nn.Module):
    """Pre-LN block: x + attn(ln_1(x)) (causal), then x + mlp(ln_2(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.width, eps=cfg.layer_norm_eps, bias=cfg.bias)
        scale = cfg.mup.attention_scale if cfg.mup else None  # None: the standard 1 / sqrt(head size)
        self.attn = MultiheadAttention(cfg.width, cfg.n_head, cfg.n_kv_head, cfg.bias, scale=scale)
        self.ln_2 = nn.LayerNorm(cfg.width, eps=cfg.layer_norm_eps, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x), causal=True)
        return x + self.mlp(self.ln_2(x))


class GPT(MuPModel, nn.Module):
    """Causal language model: tokens int64 (B, T <= block_size) -> logits (B, T, vocab_size)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.width)
        self.wpe = nn.Embedding(cfg.block_size, cfg.width)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.width, eps=cfg.layer_norm_eps, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.width, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's scheme: normal(0, 0.02), zero biases, residual projections scaled by
        1 / sqrt(2 * n_layer)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for block in self.blocks:
            for proj in (block.attn.out_proj, block.mlp.proj):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * self.config.n_layer))
        self.scale_hidden_init()  # muP (plugins.parametrization.MuPModel)


    def forward(self, tokens: Tensor) -> Tensor:
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be 2-D (batch, sequence), got shape {tuple(tokens.shape)}")
        if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
            raise ValueError(f"tokens must be integer token ids, got dtype {tokens.dtype}")
        length = tokens.shape[1]
        if not 0 < length <= self.config.block_size:
            raise ValueError(
                f"sequence length {length} must be between 1 and block_size={self.config.block_size}; "
                f"truncate the input or build the model with a larger block_size"
            )
        positions = torch.arange(length, device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        x = self.readout_input(x)  # muP's output multiplier (plugins.parametrization.MuPModel)
        return self.lm_head(x)

    def num_params(self, non_embedding: bool = False) -> int:
        """Total parameters, the tied ``wte``/``lm_head`` weight counted once;
        ``non_embedding=True`` leaves out ``wte`` (hence the tied head) and ``wpe``."""
        total = sum(p.numel() for p in self.parameters())
        if non_embedding:
            total -= self.wte.weight.numel() + self.wpe.weight.numel()
        return total


def build(width: int, **config) -> GPT:
    """Builder of the ``gpt`` entries: ``width`` plus any ``GPTConfig`` keyword."""
    return GPT(GPTConfig.of(width, **config))
