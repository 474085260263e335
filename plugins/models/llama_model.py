"""The built-in Llama-family decoder: Hugging Face ``LlamaForCausalLM`` maths on our attention.

Token embedding, pre-norm decoder layers (RMSNorm in float32, causal self-attention with
rotary position embeddings and grouped-query heads, SwiGLU MLP), final RMSNorm, LM head
(untied unless ``tie_word_embeddings``). Names follow Hugging Face's, except inside
attention (``self_attn.{qkv,out}_proj``, our ``MultiheadAttention``).

Per-layer outputs for parity: a forward hook on ``layers[i].self_attn`` receives that
layer's attention output (B, T, C) before the residual add (Hugging Face's
``model.layers[i].self_attn`` returns it as the first element of a tuple), one on
``layers[i]`` the layer's output.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from flops_fit.plugins.models.attention import MultiheadAttention, Rotary
from flops_fit.plugins.models.llama import LlamaConfig
from flops_fit.plugins.models.parametrization import MuPModel
from torch import Tensor, nn

ACTIVATIONS = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


class RMSNorm(nn.Module):
    """``weight * x / sqrt(mean(x^2) + eps)``, normalised in float32 as Hugging Face's."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class MLP(nn.Module):
    """SwiGLU: ``down(act(gate(x)) * up(x))``."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.width, cfg.mlp_hidden, bias=cfg.mlp_bias)
        self.up_proj = nn.Linear(cfg.width, cfg.mlp_hidden, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.mlp_hidden, cfg.width, bias=cfg.mlp_bias)
        self.act = ACTIVATIONS[cfg.hidden_act]

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.width, cfg.rms_norm_eps)
        self.self_attn = MultiheadAttention(
            cfg.width, cfg.n_head, cfg.n_kv_head, cfg.has_qkv_bias, head_dim=cfg.head_size,
            out_bias=cfg.attention_bias, scale=cfg.mup.attention_scale if cfg.mup else None,
        )
        self.post_attention_layernorm = RMSNorm(cfg.width, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor, rotary: Rotary, window: Tensor | None) -> Tensor:
        h = self.input_layernorm(x)
        x = x + self.self_attn(h, causal=window is None, attend_mask=window, rotary=rotary)
        return x + self.mlp(self.post_attention_layernorm(x))


def inverse_frequencies(cfg: LlamaConfig) -> Tensor:
    """RoPE inverse frequencies (float32, one per pair of dimensions), scaled as ``rope_type`` says."""
    d = cfg.head_size
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    if cfg.rope_type == "linear":
        return inv / cfg.rope_factor
    if cfg.rope_type == "llama3":  # Llama 3.1: low frequencies scaled, high kept, smooth between
        low_wavelen = cfg.rope_original_max_position / cfg.rope_low_freq_factor
        high_wavelen = cfg.rope_original_max_position / cfg.rope_high_freq_factor
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / cfg.rope_factor, inv)
        smooth = (cfg.rope_original_max_position / wavelen - cfg.rope_low_freq_factor) / (
            cfg.rope_high_freq_factor - cfg.rope_low_freq_factor)
        smoothed = (1 - smooth) * scaled / cfg.rope_factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled)
    return inv


class Llama(MuPModel, nn.Module):
    """Causal language model: tokens int64 (B, T <= block_size) -> logits (B, T, vocab_size)."""

    hidden_root = "layers"  # muP's hidden weights: the linear layers under it

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.width)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.width, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.width, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Hugging Face Llama's scheme: normal(0, 0.02) weights, zero biases, unit norms."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            if isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
        self.scale_hidden_init()  # muP (plugins.parametrization.MuPModel)


    def rotary(self, length: int, like: Tensor) -> Rotary:
        """cos/sin tables (1, 1, T, D) for positions 0..T-1, computed in float32 whatever the
        model's dtype (no buffer that a ``.to(bfloat16)`` would round), cast to ``like``'s."""
        positions = torch.arange(length, device=like.device, dtype=torch.float32)
        inv_freq = inverse_frequencies(self.config).to(like.device)
        freqs = positions[:, None] * inv_freq[None, :]  # elementwise: no matmul to count
        interleaved = self.config.rope_interleaved
        angles = freqs.repeat_interleave(2, dim=-1) if interleaved else torch.cat((freqs, freqs), dim=-1)
        return Rotary(angles.cos().to(like.dtype)[None, None], angles.sin().to(like.dtype)[None, None], interleaved)

    def window_mask(self, length: int, device: torch.device) -> Tensor | None:
        """Causal sliding-window mask (True = may attend), or None when the window cannot bind."""
        window = self.config.sliding_window
        if window is None or length <= window:
            return None
        i = torch.arange(length, device=device)
        distance = i[:, None] - i[None, :]
        return (distance >= 0) & (distance < window)

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
        x = self.embed_tokens(tokens)
        rotary = self.rotary(length, x)
        window = self.window_mask(length, tokens.device)
        for layer in self.layers:
            x = layer(x, rotary, window)
        x = self.norm(x)
        x = self.readout_input(x)  # muP's output multiplier (plugins.parametrization.MuPModel)
        return self.lm_head(x)

    def num_params(self, non_embedding: bool = False) -> int:
        """Total parameters, a tied head counted once; ``non_embedding=True`` leaves out
        ``embed_tokens`` (and so a tied head)."""
        total = sum(p.numel() for p in self.parameters())
        return total - self.embed_tokens.weight.numel() if non_embedding else total


def build(width: int, **config) -> Llama:
    """Builder of the ``llama`` entry: ``width`` plus any ``LlamaConfig`` keyword."""
    return Llama(LlamaConfig.of(width, **config))
