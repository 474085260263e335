"""Deterministic "probe" weights and inputs that make parity failures visible.

Library initialisations are too gentle for a parity test: with std-0.02 linear weights the
pre-GELU activations are ~0.1, where tanh and exact GELU agree to 1e-8, and the residual
stream is large enough that a LayerNorm eps of 1e-5 instead of 1e-6 hides. Probe weights
put every sensitive detail in range:

- linear / Conv1D / packed-projection weights ~ N(0, 1/fan_in): activations are O(1), so
  GELU variants differ by ~1e-4 and head / projection mix-ups change outputs by O(1);
- embeddings (token, position, patch, class token) ~ 0.02 scale: the first LayerNorm sees
  a small-variance input, as in trained models, so a wrong eps shifts its output;
- norm weights 1 + N(0, 0.1), biases N(0, 0.1): non-trivial, so a dropped bias shows.
"""

from __future__ import annotations

import torch
from torch import nn

EMBED_STD = 0.02


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def probe_init_(module: nn.Module, seed: int = 0) -> nn.Module:
    """Re-initialise every parameter of ``module`` in place with probe weights; returns it."""
    g = _generator(seed)
    with torch.no_grad():
        for mod in module.modules():
            for pname, p in mod.named_parameters(recurse=False):
                p.copy_(_probe_value(mod, pname, p, g).to(p.dtype))
    return module


def _probe_value(mod: nn.Module, pname: str, p: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    randn = torch.randn(p.shape, generator=g)
    kind = type(mod).__name__
    if p.ndim == 1 and isinstance(mod, (nn.Embedding, nn.Conv2d)):
        return EMBED_STD * randn
    if p.ndim == 1:
        return 1 + 0.1 * randn if "norm" in kind.lower() and "weight" in pname else 0.1 * randn
    if isinstance(mod, (nn.Embedding, nn.Conv2d)):
        fan_in = 1 if isinstance(mod, nn.Embedding) else p[0].numel()
        return EMBED_STD * randn / fan_in**0.5
    if kind == "Conv1D":  # transformers' GPT-2 projection, stored (in, out)
        return randn / p.shape[0] ** 0.5
    if isinstance(mod, nn.Linear) or pname.endswith("proj_weight"):  # incl. nn.MultiheadAttention's
        return randn / p.shape[1] ** 0.5
    return EMBED_STD * randn  # free parameters: class token, position embeddings


def images(batch: int, channels: int, size: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, channels, size, size, generator=_generator(seed))


def tokens(batch: int, length: int, vocab: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(vocab, (batch, length), generator=_generator(seed))


def hidden(batch: int, length: int, width: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, length, width, generator=_generator(seed))
