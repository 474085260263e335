"""Strict key mapping from reference state dicts to ours.

A converter reads reference tensors through a ``KeyMapper``, which records every key it
consumes. ``finish()`` then fails, in one message, on reference keys the converter needed
but did not find, reference keys nobody used, reference tensors holding NaN or inf (a
damaged checkpoint: every output would be NaN), and outputs that came out all-zero from a
non-zero source (a converter that zero-fills K/V passes shape checks but silently breaks
attention). ``load_strict`` does the same on our side: missing, unexpected, mis-shaped.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flops_fit.parity.safetensors_io import load_weights

from flops_fit.checks import is_real
from flops_fit.errors import ConversionAssumptionWarning, ConversionError
from flops_fit.plugin.api import create_model
from flops_fit.plugin.contracts import resolve


@dataclass
class Converted:
    """A converter's result: our model's name, size and config, and its state dict.

    ``factory`` (a ``"module:attr"`` reference) builds modules that are not registered models,
    such as the attention module: ``factory(**config)``; otherwise ``create_model`` is used.
    ``fresh`` names our keys the reference has no counterpart for (a backbone's classifier
    head): they keep their fresh initialisation instead of failing as missing.
    ``assumptions`` maps each option the source did not declare (a bare weights file has no
    activation or eps) to the value assumed and why; converters accept overrides for them.
    """

    model: str
    size: int
    config: dict[str, Any]
    state: dict[str, Any]
    reference: str
    dropped: list[str] = field(default_factory=list)
    factory: str | None = None
    fresh: tuple[str, ...] = ()
    assumptions: dict[str, str] = field(default_factory=dict)

    def build(self, **overrides: Any) -> Any:
        """Build our model from the converted config (``overrides`` win) and load the weights."""
        config = {**self.config, **overrides}
        if self.factory:
            model = resolve(self.factory)(**config)
        else:
            model = create_model(self.model, self.size, **config)
        load_strict(model, self.state, what=f"{self.reference} -> {self.model}", fresh=self.fresh)
        return model


def warn_assumptions(what: str, assumptions: Mapping[str, str], setters: Mapping[str, str] | None = None) -> None:
    """Warn once (``ConversionAssumptionWarning``) about what a converter assumed because the
    weights cannot tell: each assumption (``assumptions``: option -> the value and why) with
    the argument that sets it (``setters``: option -> how; default ``option=...``).
    Nothing to say, no warning. Every converter that records assumptions calls this."""
    if not assumptions:
        return
    setters = setters or {}
    listed = "; ".join(f"{name} = {note}, set it with {setters.get(name, name + '=...')}"
                       for name, note in assumptions.items())
    warnings.warn(f"{what}: the weights do not say everything, so {len(assumptions)} option(s) were assumed: "
                  f"{listed}", ConversionAssumptionWarning, stacklevel=3)


def read_source(
    source: str | Path | Mapping[str, Any], config: Mapping[str, Any] | None, what: str, *, need_config: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Tensors and config from a path (file or folder; ``config`` overrides its config.json)
    or from an in-memory state dict plus ``config``."""
    if isinstance(source, (str, Path)):
        weights = load_weights(source)
        tensors, config = weights.tensors, {**weights.config, **(config or {})}
    else:
        tensors, config = dict(source), dict(config or {})
    if need_config and not config:
        raise ConversionError(f"{what}: no config: pass a folder with config.json or config={{...}}")
    return tensors, config


# Keys any transformers config.json may carry that never change what a forward computes
# (bookkeeping, labels, generation and output switches); converters add their own.
HF_INERT_CONFIG_KEYS = frozenset({
    "architectures", "dtype", "torch_dtype", "transformers_version", "_name_or_path", "bos_token_id",
    "eos_token_id", "pad_token_id", "use_cache", "initializer_range", "model_type", "output_attentions",
    "output_hidden_states", "return_dict", "id2label", "label2id", "problem_type", "tie_encoder_decoder",
    "chunk_size_feed_forward", "is_encoder_decoder", "tokenizer_class", "prefix", "sep_token_id",
    "decoder_start_token_id", "task_specific_params", "finetuning_task", "cross_attention_hidden_size",
    "add_cross_attention", "is_decoder", "pruned_heads", "torchscript", "use_bfloat16", "tf_legacy_loss",
})


def require_keys(config: Mapping[str, Any], keys: Iterable[str], what: str) -> None:
    """ConversionError naming the sizes a converter reads that the config lacks (transformers would
    fill in its class defaults, which need not be the checkpoint's)."""
    absent = [k for k in keys if config.get(k) is None]
    if absent:
        raise ConversionError(f"{what}: the config lacks {', '.join(absent)}; re-save the model with save_pretrained, "
                              "or pass config={...} with them")


def positive_count(value: Any, name: str, what: str, noun: str, hint: str = "") -> int:
    """``value`` as a positive integer; else ConversionError naming ``name`` (e.g. ``"config n_embd"``)
    as not ``noun``, with ``hint`` after it (``int()`` cut fractions, and a 0 failed later, naming
    neither the key nor the converter)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConversionError(f"{what}: {name}={value!r} is not {noun} (a positive integer){hint}")
    return value


def config_count(config: Mapping[str, Any], key: str, what: str, default: int | None = None) -> int:
    """``config[key]`` (``default`` where absent or null) as a positive integer, e.g. a layer count or
    a vocabulary size: ``int()`` cut 2.5 layers to 2, took "2", and let 0 or -1 through to the model."""
    value = config.get(key)
    return positive_count(default if value is None and default is not None else value, f"config {key}", what,
                          "a count")


def config_eps(config: Mapping[str, Any], key: str, what: str, default: float) -> float:
    """``config[key]`` (``default`` where absent) as a norm's epsilon, a finite number of at least 0:
    ``float()`` raised a bare ValueError / TypeError on a string or a null, and took NaN or -1."""
    value = config.get(key, default)
    if not is_real(value) or not math.isfinite(value) or value < 0:
        raise ConversionError(f"{what}: config {key}={value!r} is not a finite number of at least 0")
    return float(value)


def width_count(value: Any, name: str, what: str) -> int:
    """``value`` as a model width: a 0 failed when our model was built, as 'size must be a positive
    integer'."""
    return positive_count(value, name, what, "a width")


def head_count(value: Any, name: str, width: int, what: str) -> int:
    """``value`` as a number of attention heads that splits ``width``; else ConversionError naming
    ``name`` (e.g. ``"config n_head"``). A count that does not divide the width failed later as
    'width=64 is not a valid size', and a fraction was cut to an integer."""
    positive_count(value, name, what, "a number of heads")
    if width % value:
        raise ConversionError(f"{what}: {name}={value} does not divide the width {width} into heads; give the "
                              "count the checkpoint was trained with")
    return value


def unknown_options(config: Mapping[str, Any], known: Iterable[str]) -> list[str]:
    """Refusals for the config keys a converter neither reproduces nor knows to be inert."""
    return [f"{k}={config[k]!r} (unknown option)" for k in sorted(set(config) - HF_INERT_CONFIG_KEYS - set(known))]


class KeyMapper:
    """Moves reference tensors to our names, remembering what was used and what was missing.

    ``ignore`` holds regular expressions of reference keys to drop on purpose (buffers such
    as GPT-2's ``attn.bias`` causal mask); they are listed in ``dropped``.
    """

    def __init__(self, tensors: Mapping[str, Any], what: str, ignore: Iterable[str] = ()) -> None:
        self.tensors = dict(tensors)
        self.what = what
        patterns = [re.compile(p) for p in ignore]
        self.dropped = sorted(k for k in self.tensors if any(p.fullmatch(k) for p in patterns))
        self.used: set[str] = set(self.dropped)
        self.missing: list[str] = []
        self.zeroed: list[str] = []
        self.nonfinite: dict[str, str] = {}  # reference key -> how many of its values are NaN or inf
        self.out: dict[str, Any] = {}

    def has(self, key: str) -> bool:
        return key in self.tensors

    def take(self, key: str) -> Any | None:
        """The reference tensor ``key`` (marked used), or None after recording it as missing."""
        if key not in self.tensors:
            self.missing.append(key)
            return None
        self.used.add(key)
        value = self.tensors[key]
        if value.is_floating_point() and key not in self.nonfinite:
            bad = int((~value.isfinite()).sum())
            if bad:
                self.nonfinite[key] = f"{key} ({bad} of {value.numel()} values)"
        return value

    def map(self, dst: str, src: str, fn: Callable[[Any], Any] | None = None) -> None:
        """``out[dst] = fn(ref[src])``."""
        value = self.take(src)
        if value is not None:
            self._put(dst, fn(value) if fn else value, src, value)

    def combine(self, dst: str, srcs: Sequence[str], fn: Callable[..., Any]) -> None:
        """``out[dst] = fn(ref[srcs[0]], ref[srcs[1]], ...)`` (a class token with its position folded in)."""
        values = [self.take(src) for src in srcs]
        if all(v is not None for v in values):
            self._put(dst, fn(*values), srcs[0], values[0])

    def split(self, src: str, dsts: Sequence[str], fn: Callable[[Any], Any] | None = None) -> None:
        """Split ``fn(ref[src])`` into equal parts along dim 0 (packed q, k, v)."""
        value = self.take(src)
        if value is None:
            return
        packed = fn(value) if fn else value
        if packed.shape[0] % len(dsts):
            self.missing.append(f"{src} (shape {tuple(packed.shape)} does not split into {len(dsts)} equal parts)")
            return
        for dst, part in zip(dsts, packed.chunk(len(dsts), dim=0)):
            self._put(dst, part, src, packed)

    def concat(self, dst: str, srcs: Sequence[str], fn: Callable[[Any], Any] | None = None) -> None:
        """``out[dst] = cat(fn(ref[s]) for s in srcs)`` along dim 0 (q, k, v into ``qkv_proj``)."""
        import torch

        values = [self.take(src) for src in srcs]
        if any(v is None for v in values):
            return
        parts = [fn(v) if fn else v for v in values]
        odd = [f"{src} {tuple(p.shape)}" for src, p in zip(srcs, parts) if p.shape[1:] != parts[0].shape[1:]]
        if odd:
            self.missing.append(f"{dst}: {', '.join(odd)} do not pack with {srcs[0]} {tuple(parts[0].shape)}")
            return
        for src, part in zip(srcs, parts):
            if not part.any() and self.tensors[src].any():
                self.zeroed.append(f"{dst} (from {src})")
        self.out[dst] = torch.cat(parts).contiguous()

    def _put(self, dst: str, value: Any, src: str, source: Any) -> None:
        if not value.any() and source.any():
            self.zeroed.append(f"{dst} (from {src})")
        self.out[dst] = value.contiguous()

    def finish(self) -> dict[str, Any]:
        """The converted state dict; raises ConversionError listing every problem at once."""
        unexpected = sorted(set(self.tensors) - self.used)
        found = sorted(self.used - set(self.dropped))
        # most of the file is not its, and under a fifth of what it reads is there: another architecture, where
        # listing every key says less
        if len(unexpected) > len(found) and 5 * len(found) < len(found) + len(self.missing):
            wanted = len(found) + len(self.missing)
            named = f" ({', '.join(found[:3])})" if found else ""
            raise ConversionError(
                f"cannot convert {self.what}: these are not {self.what} weights: it finds {len(found)} of the {wanted} "
                f"tensors it reads{named}, and {len(unexpected)} tensors are not its (keys such as "
                f"{', '.join(unexpected[:3])}); "
                "convert them with the converter of their kind, or check that the file is the one meant")
        problems = []
        if self.missing:
            problems.append(("missing in the reference", self.missing))
        if unexpected:
            problems.append(("unexpected in the reference (no converter rule uses them)", unexpected))
        if self.nonfinite:
            problems.append(("reference tensors holding NaN or inf", list(self.nonfinite.values())))
        if self.zeroed:
            problems.append(("converted to all zeros although the reference tensor is not zero", self.zeroed))
        if problems:
            raise ConversionError(_format(self.what, problems, fix=(
                "check that the weights are of the kind this converter reads and that the model "
                "uses no feature it does not support (the unexpected keys name it)"
            )))
        return self.out


def load_strict(model: Any, state: Mapping[str, Any], what: str, fresh: Iterable[str] = ()) -> None:
    """Copy ``state`` into ``model``, failing on missing, unexpected or mis-shaped keys.

    Tied parameters (e.g. GPT's ``lm_head.weight`` and ``wte.weight``) may be given under
    either name; if both are given they must be equal. Buffers and ``fresh`` keys not given
    keep their values.
    """
    import torch

    ours = model.state_dict(keep_vars=True)
    params = {id(p) for p in model.parameters()}
    groups: dict[int, list[str]] = {}
    for key, tensor in ours.items():
        groups.setdefault(id(tensor), []).append(key)
    missing, misshaped, untied = [], [], []
    unexpected = sorted(set(state) - set(ours))
    full: dict[str, Any] = {}
    for ident, keys in groups.items():
        given = [k for k in keys if k in state]
        if not given:
            if ident in params and not set(keys) <= set(fresh):
                missing.append(" = ".join(keys))
            continue
        value = state[given[0]]
        if any(not torch.equal(state[k], value) for k in given[1:]):
            untied.append(" = ".join(given))
        expected = tuple(ours[keys[0]].shape)
        if tuple(value.shape) != expected:
            misshaped.append(f"{given[0]}: converted {tuple(value.shape)}, our model expects {expected}")
            continue
        for k in keys:
            full[k] = value
    problems = [
        (title, items) for title, items in (
            ("missing (our model has them, the conversion does not)", missing),
            ("unexpected (the conversion has them, our model does not)", unexpected),
            ("mis-shaped", misshaped),
            ("tied in our model but different in the conversion", untied),
        ) if items
    ]
    if problems:
        raise ConversionError(_format(what, problems, fix="check the model configuration built from the reference's config"))
    model.load_state_dict(full, strict=False)


def _format(what: str, problems: list[tuple[str, list[str]]], fix: str) -> str:
    counts = ", ".join(f"{len(items)} {title.split(' (')[0]}" for title, items in problems)
    lines = [f"cannot convert {what}: {counts}"]
    for title, items in problems:
        shown = items[:20] + ([f"... and {len(items) - 20} more"] if len(items) > 20 else [])
        lines.append(f"  {title}: " + ", ".join(shown))
    lines.append(f"  fix: {fix}")
    return "\n".join(lines)
