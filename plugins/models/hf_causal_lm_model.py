"""The ``hf-causal-lm`` model: the ``transformers`` class built from a scaled config, and its counts.

Counts are measured on the class itself on the meta device (no memory, no compute):
parameters by summing the built model's (tied weights once), training FLOPs per token by
``torch.utils.flop_counter.FlopCounterMode`` over one forward and backward of a sequence of
``seq_len`` tokens (eager attention: scores and values counted in full, the convention of
the built-in models). Every dimension of a scaled model is a constant or proportional to the
size, so both counts are polynomials in the size of degree 2 (3 when depth scales too):
planning, which needs them at every valid size, measures them at that many sizes plus one,
solves the polynomial exactly (rational arithmetic) and checks it on one more measured size;
where the check fails each size is measured itself.
"""

from __future__ import annotations

import difflib
import functools
import json
from fractions import Fraction
from typing import Any

import torch
from flops_fit.plugins.models.hf_causal_lm import Rule, configure, valid_sizes
from torch import nn


def hf_config(size: int, attn_implementation: str = "sdpa", **config: Any) -> Any:
    """The ``transformers`` config of ``size`` under the ``[model]`` table's rule."""
    import transformers
    from transformers import CONFIG_MAPPING, AutoConfig

    values = Rule(**config).at(size)
    values.pop("architectures", None)
    kind = values.pop("model_type")
    values.pop("transformers_version", None)
    if kind not in CONFIG_MAPPING:  # transformers' own refusal lists all of its model types on one line
        close = difflib.get_close_matches(kind, list(CONFIG_MAPPING.keys()), n=3)
        raise ValueError(f"model_type {kind!r} is not one this transformers ({transformers.__version__}) knows"
                         + (f"; close ones: {', '.join(map(repr, close))}" if close else "")
                         + ": fix the config's model_type, or upgrade transformers")
    hf = AutoConfig.for_model(kind, **values)
    hf._attn_implementation = attn_implementation
    return hf


class HFCausalLM(nn.Module):
    """The ``transformers`` causal LM as a flops-fit model: tokens (B, T) -> logits (B, T, V)."""

    def __init__(self, config: Any) -> None:
        from transformers import AutoModelForCausalLM

        super().__init__()
        self.hf = AutoModelForCausalLM.from_config(config)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.hf(input_ids=tokens, use_cache=False).logits

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def build(width: int, **config: Any) -> HFCausalLM:
    """Builder of ``hf-causal-lm``: the config's class at hidden size ``width``."""
    return HFCausalLM(hf_config(width, **config))


def _measure(size: int, key: str) -> tuple[int, int]:
    """(parameters, training FLOPs of one sequence) of ``size``, measured on the meta device."""
    from torch.utils.flop_counter import FlopCounterMode

    config = json.loads(key)
    seq_len = config.get("context_length") or 16
    with torch.device("meta"):
        model = HFCausalLM(hf_config(size, attn_implementation="eager", **config))
        tokens = torch.zeros(1, seq_len, dtype=torch.long)
        # a ready 4-D mask: transformers' own mask building reads values, which meta tensors do not have
        mask = torch.zeros(1, 1, seq_len, seq_len)
    params = model.num_params()
    with FlopCounterMode(display=False) as counter:
        model.hf(input_ids=tokens, attention_mask=mask, use_cache=False).logits.float().sum().backward()
    return params, counter.get_total_flops()


@functools.lru_cache(maxsize=64)
def _counts(key: str) -> Any:
    """size -> (params, flops per sequence): the exact polynomial, or measuring each size."""
    config = json.loads(key)
    degree = 3 if config.get("depth") else 2
    sample = valid_sizes(1, 64 * Rule(**config).step, **config)[:degree + 2]
    measured = {s: _measure(s, key) for s in sample}
    if len(sample) == degree + 2:
        fits = [_polynomial([(s, measured[s][i]) for s in sample[:-1]]) for i in (0, 1)]
        if all(fit(sample[-1]) == measured[sample[-1]][i] for i, fit in enumerate(fits)):
            return lambda size: tuple(int(fit(size)) for fit in fits)
    return functools.lru_cache(maxsize=None)(lambda size: measured.get(size) or _measure(size, key))


def _polynomial(points: list[tuple[int, int]]) -> Any:
    """The polynomial through ``points`` (Lagrange, exact rationals)."""
    def value(x: int) -> Fraction:
        total = Fraction(0)
        for i, (xi, yi) in enumerate(points):
            term = Fraction(yi)
            for j, (xj, _) in enumerate(points):
                if j != i:
                    term *= Fraction(x - xj, xi - xj)
            total += term
        return total

    return value


def _key(config: dict[str, Any]) -> str:
    """The counts' cache key: the ``[model]`` table with its config file's content hash
    (``config_sha256``, which ``configure`` has added on every call through the model's entry; added
    here for a direct call), so that a config.json edited in this process is counted again."""
    return json.dumps(configure(config), sort_keys=True, default=str)


def param_count(width: int, **config: Any) -> int:
    """Exact parameters of the config's class at hidden size ``width`` (tied weights once)."""
    Rule(**config).at(width)  # a size the rule cannot reach is refused, not extrapolated
    return _counts(_key(config))(width)[0]


def training_flops(width: int, **config: Any) -> float:
    """Exact training FLOPs per token (forward and backward, FlopCounterMode) at ``seq_len``."""
    Rule(**config).at(width)
    seq_len = config.get("context_length") or 16
    return _counts(_key(config))(width)[1] / seq_len
