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
from flops_fit.plugins.models.hf_causal_lm import (
    Rule,
    config_source,
    configure,
    load_config,
    valid_sizes,
)
from torch import nn


def hf_config(size: int, attn_implementation: str | None = None, **config: Any) -> Any:
    """The ``transformers`` config of ``size`` under the ``[model]`` table's rule. Its attention is
    ``attn_implementation``, or by default transformers' own choice: SDPA where the class has it,
    eager otherwise (Gemma2 has none: asking every class for SDPA refused it)."""
    import transformers
    from transformers import CONFIG_MAPPING, AutoConfig

    values = Rule(**config).at(size)
    values.pop("architectures", None)
    kind = values.pop("model_type")
    values.pop("transformers_version", None)
    if kind not in CONFIG_MAPPING:  # transformers' own refusal lists all of its model types on one line
        # a lab's own architecture (its class in its own code: auto_map) has no class here to build
        close = difflib.get_close_matches(kind, list(CONFIG_MAPPING.keys()), n=3)
        auto_map = values.get("auto_map")
        code = auto_map.get("AutoModelForCausalLM") if isinstance(auto_map, dict) else None
        raise ValueError(f"model_type {kind!r} is not one this transformers ({transformers.__version__}) knows"
                         + (f"; its class is code of its own ({code}), which flops-fit does not run" if code else "")
                         + (f"; close ones: {', '.join(map(repr, close))}" if close and not code else "")
                         + ": fix the config's model_type, or upgrade transformers; an architecture of your own: "
                         "a model plugin (docs/guide/plugins.md), or your script with model = \"declared\" "
                         "(docs/guide/own-trainer.md)")
    for key in ("torch_dtype", "dtype"):  # a hub config's "bfloat16" built bf16 weights: the sweep's precision decides
        values.pop(key, None)
    for key in ("_attn_implementation", "attn_implementation"):  # the config's own hardware's (flash_attention_2)
        values.pop(key, None)
    try:
        hf = AutoConfig.for_model(kind, **values)
    except (ImportError, MemoryError):
        raise
    except Exception as exc:  # transformers' own checks of the config, in the library's exception types
        raise refused(exc, values, kind, size) from None
    unknown_set(hf, kind, config)
    if attn_implementation is not None:
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


def one_line(exc: Exception, limit: int = 300) -> str:
    """The library's message on one line, cut at ``limit`` characters (transformers' "Unrecognized model
    identifier" lists every model type it has: several thousand characters)."""
    message = " ".join(str(exc).split())
    return message if len(message) <= limit else message[:limit].rstrip(", ") + " ..."


def unknown_set(hf: Any, kind: str, config: dict[str, Any]) -> None:
    """ValueError for a ``set`` field neither the config file nor its class has: transformers keeps any
    keyword as an attribute, so ``num_hiden_layers = 4`` trained the file's depth without a word. A field of
    the file itself that its class lacks, spelt like one of the class's fields the file does not set
    (``num_hidden_layer``), is refused too: the class's default (32 layers) took the place the file meant to
    set. Other fields a file has beside its class's (a hub config's ``auto_map``, a lab's notes) are kept."""
    overrides = config.get("set") or {}
    try:
        known = set(type(hf)().to_dict()) | set(getattr(type(hf), "attribute_map", {}))  # fields at their defaults
    except Exception:  # a class that needs arguments to exist: nothing to check against
        return
    saved = load_config(config_source(config))
    unset = sorted(known - set(saved) - set(overrides))
    for key in sorted(k for k in saved if k not in known and not k.startswith("_")):
        near = difflib.get_close_matches(key, unset, n=1, cutoff=0.85)
        if near:
            raise ValueError(f"the config file's {key!r} is no field of {kind!r} configs, and its {near[0]!r} is not "
                             f"set: transformers would ignore {key!r} and use its default {near[0]} = "
                             f"{getattr(hf, near[0], None)!r}; fix the name in the config (or [model] set)")
    for key in sorted(overrides):
        if key not in known and key not in saved:
            near = difflib.get_close_matches(key, sorted(known | set(saved)), n=3)
            raise ValueError(f"set names {key!r}, a field neither the config file nor {kind!r} configs have "
                             f"(transformers would ignore it){f'; did you mean {near}' if near else ''}: fix set")


def refused(exc: Exception, values: dict[str, Any], kind: str, size: int) -> ValueError:
    """One line for a config transformers cannot build (its errors are KeyErrors, dataclass checks,
    ...: a traceback from `flops-fit plan`): the field holding a name transformers does not know
    (``KeyError: 'swishy'``: an activation, a rope type), else the library's own message."""
    if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str):
        fields = [(name, value) for name, value in values.items()]
        fields += [(f"{name}.{inner}", v) for name, value in values.items() if isinstance(value, dict)
                   for inner, v in value.items()]
        named = next((name for name, value in fields if value == exc.args[0]), None)
        if named is not None:
            return ValueError(f"the config's {named} = {exc.args[0]!r} is not a name transformers knows for "
                              f"{kind!r}: fix it in the config (or with [model] set)")
    message = one_line(exc)
    return ValueError(f"transformers cannot build the config's {kind!r} class at size {size} "
                      f"({type(exc).__name__}: {message}): fix the config (or [model] set)")


def _model(size: int, attn_implementation: str | None = None, **config: Any) -> HFCausalLM:
    """The config's class at ``size``; a config transformers cannot build is one ValueError (``refused``)."""
    hf = hf_config(size, attn_implementation, **config)
    try:
        return HFCausalLM(hf)
    except (ImportError, MemoryError):
        raise
    except Exception as exc:
        values = Rule(**config).at(size)
        raise refused(exc, values, values["model_type"], size) from None


def build(width: int, **config: Any) -> HFCausalLM:
    """Builder of ``hf-causal-lm``: the config's class at hidden size ``width``."""
    return _model(width, **config)


def _measure(size: int, key: str) -> tuple[int, int]:
    """(parameters, training FLOPs of one sequence) of ``size``, measured on the meta device."""
    from torch.utils.flop_counter import FlopCounterMode

    config = json.loads(key)
    seq_len = config.get("context_length") or 16
    with torch.device("meta"):
        model = _model(size, attn_implementation="eager", **config)
        tokens = torch.zeros(1, seq_len, dtype=torch.long)
        # a ready 4-D mask: transformers' own mask building reads values, which meta tensors do not have
        mask = torch.zeros(1, 1, seq_len, seq_len)
    params = model.num_params()
    try:
        with FlopCounterMode(display=False) as counter:
            model.hf(input_ids=tokens, attention_mask=mask, use_cache=False).logits.float().sum().backward()
    except (ImportError, MemoryError):
        raise
    except Exception as exc:  # a class whose forward reads values (mixture-of-experts routing) or dtypes meta lacks
        message = one_line(exc)
        raise ValueError(f"the config's {config_kind(config)!r} class cannot be counted: its forward and backward "
                         f"fail on the meta device, where flops-fit counts FLOPs without computing "
                         f"({type(exc).__name__}: {message}); mixture-of-experts classes are among them") from None
    return params, counter.get_total_flops()


def config_kind(config: dict[str, Any]) -> str:
    """The config's ``model_type`` (``set`` over the file)."""
    return {**load_config(config_source(config)), **(config.get("set") or {})}["model_type"]


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
