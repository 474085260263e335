"""Model ``hf-causal-lm``: any Hugging Face causal LM, from its ``config.json``, sized by a width rule.

The size is the config's ``size_field`` (``hidden_size``; GPT-2's is ``n_embd``). A size ``s``
scales every field named in ``scale`` by ``s / base`` (``base``: the config's own
``size_field``), so the config's shape holds at every size: with ``scale =
["intermediate_size", "num_attention_heads", "num_key_value_heads"]`` (the default: those of
them the config has) the MLP ratio and the head size stay the config's; leave the heads out
and the heads keep their number and grow. ``depth`` names a field that scales too
(``"num_hidden_layers"``: a constant aspect ratio), else the depth is the config's. A size is
valid when every scaled field is a whole number, the heads still divide and each head's rotary
share is a pair of dimensions or more (checked here, in plain Python; a share the file leaves out
is its transformers class's default); a rule that leaves no valid size, or names a field the
config lacks, is one line naming the field and the fix.

``[model]`` keys: ``config`` (a ``config.json``, its folder, or the config inline as a
table), ``scale``, ``depth``, ``size_field``, ``set`` (fields overridden before scaling), and
``vocab_size`` / ``context_length`` (the sequence length; they follow the dataset and the sweep; a vocabulary
other than the config's drops the config's special token ids, which name its own tokenizer's tokens). The model is the
``transformers`` class itself (``AutoModelForCausalLM.from_config``), so no converter and no
parity case: parameters and exact training FLOPs are counted on it on the meta device
(``hf_causal_lm_model``). A config given as a file is planned with the sha256 of its content
(``config_sha256``, added by ``configure``), so the run ids follow the file, not its path: an
edited config.json plans new runs, and a run planned before the edit refuses to build.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import flops_fit

_MODEL = "flops_fit.plugins.models.hf_causal_lm_model"
WIDTH_FIELDS = ("intermediate_size", "num_attention_heads", "num_key_value_heads")  # the default scale
HEAD_FIELDS = (("num_attention_heads", "n_head"), ("num_key_value_heads",))
# paths_from: the sweep file's folder, where a relative config path is read from (set by flops-fit, not in the run id)
DEFAULTS = {"config": None, "scale": None, "depth": None, "size_field": "hidden_size", "set": {},
            "vocab_size": None, "context_length": None, "paths_from": None}
ROTARY_FIELDS = ("partial_rotary_factor", "rotary_pct")  # the share of each head that rotary embeddings turn
FINGERPRINT = "config_sha256"  # the content of a config file a run was planned with
# token ids of the config's own tokenizer: meaningless once the dataset's tokenizer sets the vocabulary
# (a pad id outside it fails nn.Embedding; inside it, it would freeze a real token's embedding)
TOKEN_ID_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id")
# encoder families whose transformers causal-LM class attends to later tokens unless the config sets is_decoder:
# trained on the next token, each position would see the token it predicts (a loss near zero, no law)
BIDIRECTIONAL = ("bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie",
                 "megatron-bert", "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer", "xlm-roberta",
                 "xlm-roberta-xl", "xmod")


def load_config(source: Any) -> dict[str, Any]:
    """The config as a dict: inline (a table), a config.json, or a folder holding one."""
    if isinstance(source, Mapping):
        config = dict(source)
    elif isinstance(source, str) and source:
        path = Path(source)
        path = path / "config.json" if path.is_dir() else path
        try:
            stat = path.stat()
            config = copy.deepcopy(_read_json(str(path.resolve()), stat.st_mtime_ns, stat.st_size))
        except OSError:
            raise ValueError(f"config {source!r}: no such config.json (give a file, its folder, or the config inline)") from None
        except ValueError as exc:
            raise ValueError(f"config {str(path)!r} is not JSON: {exc}") from None
    else:
        raise ValueError('pass config = "path/to/config.json" (or its folder): the Hugging Face config to scale')
    if not isinstance(config, dict):
        raise ValueError(f"config {str(path)!r} holds a JSON {type(config).__name__}, not an object: give a transformers "
                         "config.json")
    if not isinstance(config.get("model_type"), str):
        raise ValueError(f"config {source if isinstance(source, str) else '(inline)'} has no model_type: "
                         "give a transformers config.json (it names its model_type, e.g. \"llama\")")
    return config


@functools.lru_cache(maxsize=32)
def _read_json(path: str, mtime_ns: int, size: int) -> Any:
    """A config file's JSON, read once per version of the file (its modification time and size are in the
    key, so an edit is read again): a plan asks the rule for each size's parameters and FLOPs, thousands
    of times, and read the file each time."""
    return json.loads(Path(path).read_text())


def config_source(table: Mapping[str, Any]) -> Any:
    """The ``[model]`` table's config, a relative path read from ``paths_from`` (the sweep file's folder, as
    ``[train]`` paths are; it was read from the current folder) where the table has one."""
    source, folder = table.get("config"), table.get("paths_from")
    if isinstance(source, str) and source and isinstance(folder, str) and not Path(source).is_absolute():
        return str(Path(folder, source))
    return source


def content_sha256(config: Mapping[str, Any]) -> str:
    """The sha256 of a config's content (its JSON with sorted keys: layout and key order aside)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def configure(config: dict[str, Any]) -> dict[str, Any]:
    """The ``[model]`` table with ``config_sha256`` added where ``config`` names a file (kept where
    the table has one: a planned run's, which ``Rule`` checks against the file)."""
    source = config_source(config)
    if not isinstance(source, str) or not source or config.get(FINGERPRINT) is not None:
        return config
    try:
        return {**config, FINGERPRINT: content_sha256(load_config(source))}
    except ValueError:  # Rule says what is wrong with the file, where the planner asks for sizes
        return config


class Rule:
    """A config and the fields that scale with its size, checked once."""

    def __init__(self, config: Any = None, scale: Sequence[str] | None = None, depth: str | None = None,
                 size_field: str = "hidden_size", config_sha256: str | None = None, paths_from: str | None = None,
                 **rest: Any) -> None:
        overrides = rest.pop("set", None) or {}
        unknown = sorted(set(rest) - {"vocab_size", "context_length"})
        if unknown:
            raise ValueError(f"unknown [model] key(s) {unknown}; the keys are {sorted(DEFAULTS)}")
        if not isinstance(overrides, Mapping):
            raise ValueError(f"set must be a table of config fields to override, got {overrides!r}")
        loaded = load_config(config_source({"config": config, "paths_from": paths_from}))
        if config_sha256 is not None and content_sha256(loaded) != config_sha256:
            raise ValueError(f"config {config!r} changed since this run was planned (sha256 {config_sha256[:12]}..., "
                             f"now {content_sha256(loaded)[:12]}...): restore the file, or plan again into a new folder")
        base = {**loaded, **overrides}
        if base["model_type"] in BIDIRECTIONAL and base.get("is_decoder") is not True:
            raise ValueError(f"config's model_type {base['model_type']!r} is an encoder: its causal-LM class attends "
                             "to later tokens unless is_decoder is set, so every position would see the token it "
                             "predicts: add set = {is_decoder = true}")
        if rest.get("vocab_size") is not None and rest["vocab_size"] != base.get("vocab_size"):
            base["vocab_size"] = rest["vocab_size"]  # the dataset's tokenizer decides it, and its special ids
            base.update({key: None for key in TOKEN_ID_FIELDS if base.get(key) is not None})
        seq_len = rest.get("context_length")
        for key in ("max_position_embeddings", "n_positions"):
            if seq_len is not None and isinstance(base.get(key), int) and base[key] < seq_len:
                raise ValueError(f"seq_len {seq_len} is longer than the config's {key} = {base[key]}: lower seq_len, "
                                 f"or raise it with set = {{{key} = {seq_len}}}")
        self.config, self.size_field = base, size_field
        self.base = self._int(size_field, "size_field")
        fields = [f for f in WIDTH_FIELDS if base.get(f) is not None] if scale is None else list(scale)
        if isinstance(scale, str) or not all(isinstance(f, str) for f in fields):
            raise ValueError(f'scale must list config fields, e.g. ["intermediate_size", "num_attention_heads"]; '
                             f"got {scale!r}")
        self.scaled = fields + ([depth] if depth else [])
        for name in self.scaled:
            self._int(name, "depth" if name == depth else "scale")
        if size_field in self.scaled:
            raise ValueError(f"scale names {size_field!r}, the size itself: drop it from scale")
        # transformers writes head_dim (width / heads) into every config it saves: such a head_dim follows the
        # width, so heads left out of scale grow; a head size of the config's own (Gemma's) is kept
        heads = next((base[k] for k in HEAD_FIELDS[0] if isinstance(base.get(k), int) and base[k] > 0), None)
        self.head_dim_follows = (isinstance(base.get("head_dim"), int) and "head_dim" not in self.scaled
                                 and heads is not None and base["head_dim"] * heads == self.base)
        self.rotary = rotary_shares(base)
        # the size must be a multiple of this for every scaled field to be a whole number
        self.step = math.lcm(1, *(self.base // math.gcd(self.base, base[f]) for f in self.scaled))

    def _int(self, name: str, rule: str) -> int:
        value = self.config.get(name)
        if value is None:
            raise ValueError(f"the config has no {name!r} ({rule} names it): fix {rule} (the config's fields are "
                             f"{', '.join(sorted(k for k, v in self.config.items() if isinstance(v, int)))}) or add "
                             f"{name!r} to the config")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"the config's {name!r} is {value!r}, not a positive integer: it cannot scale "
                             f"({rule}); fix the config or {rule}")
        return value

    def at(self, size: int) -> dict[str, Any]:
        """The config at ``size``; ValueError naming the field that does not fit."""
        if size % self.step:
            field = next(f for f in self.scaled if self.config[f] * size % self.base)
            raise ValueError(f"size {size}: {field} = {self.config[field]} x {size} / {self.base} is not a whole "
                             f"number: use sizes that are multiples of {self.step}, or drop {field} from the rule")
        config = {**self.config, self.size_field: size}
        for name in self.scaled:
            config[name] = self.config[name] * size // self.base
        layers, kinds = config.get("num_hidden_layers"), config.get("layer_types")
        if isinstance(layers, int) and isinstance(kinds, list) and kinds and len(kinds) != layers:
            config["layer_types"] = repeat_layer_types(kinds, layers)
        heads = next((config[k] for k in HEAD_FIELDS[0] if config.get(k)), None)
        kv = config.get(HEAD_FIELDS[1][0]) or heads
        if heads:
            if size % heads:  # transformers checks it even beside a head_dim of the config's own
                raise ValueError(f"size {size} is not divisible by num_attention_heads = {heads}: add "
                                 "num_attention_heads to scale, or use sizes that are multiples of it")
            if self.head_dim_follows:
                config["head_dim"] = size // heads
            own = next((self.config[k] for k in HEAD_FIELDS[0] if self.config.get(k)), heads)
            own_kv = self.config.get(HEAD_FIELDS[1][0]) or own
            together = (HEAD_FIELDS[1][0] in self.scaled) == any(k in self.scaled for k in HEAD_FIELDS[0])
            if together and own % own_kv:  # both scale, or neither: no size groups the config's own heads
                raise ValueError(f"the config's num_attention_heads = {own} is not divisible by its "
                                 f"num_key_value_heads = {own_kv}, so the query heads cannot share the key/value "
                                 "heads in equal groups: fix the config (or [model] set)")
            if heads % kv:
                raise ValueError(f"num_attention_heads = {heads} is not divisible by num_key_value_heads = {kv} at "
                                 f"size {size}: scale both heads fields, or neither")
            head_dim = config.get("head_dim") or size // heads
            if head_dim % 2 and config["model_type"] not in ("gpt2",):
                raise ValueError(f"size {size}: head size {head_dim} is odd, and rotary embeddings need an even one: "
                                 "use sizes with an even head size")
            for share in self.rotary if config["model_type"] not in ("gpt2",) else ():
                turned = int(head_dim * share)  # as transformers sizes the rotary embedding
                if turned % 2 or not turned:
                    raise ValueError(f"size {size}: rotary embeddings turn {turned} of each head's {head_dim} "
                                     f"dimensions (partial_rotary_factor {share}), and turn pairs of them, at least "
                                     f"one: use sizes whose head size x {share} is an even number, or scale the "
                                     f"heads with the width")
        return config


def rotary_shares(config: Mapping[str, Any]) -> tuple[float, ...]:
    """The shares of each head's dimensions that rotary embeddings turn (``partial_rotary_factor``,
    GPT-NeoX's ``rotary_pct``): the config's own, at its top level or in its ``rope_parameters`` /
    ``rope_scaling`` (per layer type too), else its transformers class's default (GPT-NeoX 0.25, Phi
    0.5). At a head size whose share is odd or zero transformers builds the class without a word, and
    Phi's forward then fails (a plan that counted it at its smallest sizes failed whole), GPT-NeoX's
    turns other dimensions than the config says, or none at all (no positions)."""
    tables: list[Mapping[str, Any]] = [config]
    for key in ("rope_parameters", "rope_scaling"):
        if isinstance(config.get(key), Mapping):
            tables += [config[key], *(v for v in config[key].values() if isinstance(v, Mapping))]
    shares = {float(t[k]) for t in tables for k in ROTARY_FIELDS
              if isinstance(t.get(k), (int, float)) and not isinstance(t.get(k), bool)}
    return tuple(sorted(shares)) if shares else class_rotary_shares(config["model_type"])


@functools.cache
def class_rotary_shares(kind: str) -> tuple[float, ...]:
    """The rotary share a transformers config class sets by default (a config file that leaves it out
    gets it); none where the class has none, transformers is missing or the class needs arguments."""
    try:
        from transformers import CONFIG_MAPPING

        defaults = CONFIG_MAPPING[kind]()
    except Exception:  # the build says what is wrong with the config: nothing to check here
        return ()
    rope = getattr(defaults, "rope_parameters", None)
    share = rope.get("partial_rotary_factor") if isinstance(rope, Mapping) else None
    return (float(share),) if isinstance(share, (int, float)) and share != 1 else ()


def repeat_layer_types(kinds: list[Any], layers: int) -> list[Any]:
    """A saved config's ``layer_types`` (each layer's attention, which transformers requires to list
    exactly ``num_hidden_layers``) at another depth: its shortest repeating pattern repeated (a uniform
    list; Gemma's alternation). A list whose pattern does not repeat within it is a ValueError: which
    layers would change kind is not known."""
    period = next(p for p in range(1, len(kinds) + 1) if all(k == kinds[i % p] for i, k in enumerate(kinds)))
    if period == len(kinds) > 1:
        raise ValueError(f"the config's layer_types {kinds} list {len(kinds)} layers with no pattern that repeats, "
                         f"so the kind of each of {layers} layers is not known: give the config layer_types that "
                         f"repeat their pattern at least twice, or keep num_hidden_layers at {len(kinds)}")
    return [kinds[i % period] for i in range(layers)]


def valid_sizes(lo: int, hi: int, **config: Any) -> list[int]:
    """Sizes in [lo, hi] the rule can scale to; none at all is a ValueError naming why."""
    rule = Rule(**config)
    sizes, first_error = [], None
    for size in range(-(-max(lo, 1) // rule.step) * rule.step, hi + 1, rule.step):
        try:
            rule.at(size)
        except ValueError as exc:
            first_error = first_error or exc
            continue
        sizes.append(size)
    if not sizes and first_error is not None:
        raise first_error
    return sizes


@flops_fit.hookimpl
def register_models(register):
    register(flops_fit.ModelEntry(
        "hf-causal-lm",
        description="Any Hugging Face causal LM from its config.json ([model] config = ...), sized by its hidden "
                    "size with a width rule (scale = [...], optional depth); the transformers class itself",
        builder=f"{_MODEL}:build", size_param="width", valid_sizes=valid_sizes,
        param_count=f"{_MODEL}:param_count", training_flops=f"{_MODEL}:training_flops",
        flops_unit="token", task=flops_fit.TASK_CAUSAL_LM,
        default_loss="next-token", default_datasets=("python-stdlib",), defaults=DEFAULTS, configure=configure,
        no_parity="the model is the transformers class itself, so there is nothing to convert or compare"))
