"""What a plugin provides: one frozen dataclass per entry kind, validated when registered.

Entries hold metadata and lazy references only; nothing heavy is imported until an
entry is built (``"module:function"`` strings are resolved then).
"""

from __future__ import annotations

import copy
import inspect
import math
import numbers
import pkgutil
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from flops_fit.checks import positive_int
from flops_fit.errors import EntryError

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")

TASK_CAUSAL_LM = "causal-lm"
TASK_IMAGE_CLASSIFICATION = "image-classification"
FLOPS_UNITS = ("token", "sample")

# The batch field a model of each task is called on: ``model(batch[TASK_INPUTS[task]])``.
# causal-lm batches are {"tokens": int64[B, T]} (optional "mask": bool[B, T]); the loss shifts.
# image-classification batches are {"images": float32[B, C, H, W], "labels": int64[B]}.
TASK_INPUTS = {TASK_CAUSAL_LM: "tokens", TASK_IMAGE_CLASSIFICATION: "images"}

Ref = str | Callable[..., Any]
_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def is_reference(value: Any) -> bool:
    """True for a well-formed lazy ``"package.module:attribute"`` string."""
    return isinstance(value, str) and bool(_REFERENCE.match(value))


def resolve(value: Ref) -> Any:
    """``value`` itself, or the object a ``"module:attribute"`` string names (imported now)."""
    if not isinstance(value, str):
        return value
    if not is_reference(value):
        raise ValueError(f"{value!r} is not a 'module:attribute' reference")
    return pkgutil.resolve_name(value)


def check_name(name: Any, what: str = "name") -> str:
    """Validate an entry or task name against ``^[a-z0-9][a-z0-9_.-]*$``."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise EntryError(
            f"{what} {name!r} is invalid: use lower-case letters, digits, '_', '.' or '-', "
            f"starting with a letter or digit (pattern {NAME_PATTERN.pattern})"
        )
    return name


def _whole(value: Any) -> bool:
    """A size: a whole number (an int, or a float without a fraction), not a bool."""
    if isinstance(value, bool):
        return False
    return isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer())


def _check_ref(value: Any, field_name: str) -> None:
    if callable(value) or is_reference(value):
        return
    raise EntryError(
        f"{field_name} must be a callable or a lazy 'package.module:function' string, "
        f"got {value!r}"
    )


def _check_names(values: Any, field_name: str, allow_empty: bool = True) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, (tuple, list)):
        raise EntryError(f"{field_name} must be a tuple of names, got {values!r}")
    if not values and not allow_empty:
        raise EntryError(f"{field_name} must name at least one value")
    for v in values:
        check_name(v, f"{field_name} item")
    return tuple(values)


@dataclass(frozen=True)
class Entry:
    """Fields common to every entry kind."""

    kind: ClassVar[str] = "entry"

    name: str
    description: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        check_name(self.name, f"{self.kind} name")
        if not isinstance(self.description, str):
            raise EntryError(f"description must be a string, got {self.description!r}")
        self.validate()

    def validate(self) -> None:
        """Check the kind-specific contract; raise EntryError naming the field."""

    def from_plugin(self, plugin: str) -> Entry:
        """This entry as the host keeps it: a copy that knows the plugin which registered it, so an error in
        the plugin's own functions names whom to ask (``named``)."""
        entry = copy.copy(self)
        object.__setattr__(entry, "_plugin", plugin)
        return entry

    @property
    def named(self) -> str:
        """The entry as its errors name it: "model 'foo' from plugin 'bar'" once a host registered it."""
        plugin = self.__dict__.get("_plugin")
        return f"{self.kind} {self.name!r}" + (f" from plugin {plugin!r}" if plugin else "")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able metadata (callables shown by their qualified name)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if callable(value):
                value = f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', repr(value))}"
            elif isinstance(value, Mapping):
                value = dict(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out


@dataclass(frozen=True)
class ModelEntry(Entry):
    """A model family with one size parameter.

    ``builder(size, **config)`` returns a ``torch.nn.Module`` with ``num_params()``.
    ``valid_sizes(lo, hi, **config)`` lists the sizes in ``[lo, hi]`` (no model is built).
    ``param_count(size, **config)`` is the exact total parameter count, computed analytically.
    ``training_flops(size, **config)`` is the exact training FLOPs (forward + backward) per
    ``flops_unit``: one ``"token"`` for language models, one ``"sample"`` for image models.

    Optional, each computed without building the model (``None``: the entry cannot tell):
    ``embedding_params(size, **config)``, the parameters that are looked up or added rather
    than multiplied (token, position and class embeddings); ``non_embedding_flops(size, **config)``,
    the training FLOPs per unit without the embedding and the output head (DeepSeek's M);
    ``activation_memory(size, micro_batch_size, seq_len, **config)``, the bytes of fp32
    activations one micro-batch keeps for its backward pass; ``configure(config) -> config``,
    which completes the configuration every call sees (and the run id hashes): a family built
    from a file adds what identifies the file's content, so an edited file plans new runs.
    ``no_parity``: why no parity case applies to the family (it is the reference class itself),
    so that its parity gate says "not applicable" and why rather than "unverified".
    """

    kind: ClassVar[str] = "model"

    builder: Ref = field(kw_only=True)
    size_param: str = field(kw_only=True)
    valid_sizes: Ref = field(kw_only=True)
    param_count: Ref = field(kw_only=True)
    training_flops: Ref = field(kw_only=True)
    flops_unit: str = field(kw_only=True)
    task: str = field(kw_only=True)
    default_loss: str = field(kw_only=True)
    default_datasets: tuple[str, ...] = field(default=(), kw_only=True)
    defaults: Mapping[str, Any] = field(default_factory=dict, kw_only=True)
    default_size: int | None = field(default=None, kw_only=True)
    embedding_params: Ref | None = field(default=None, kw_only=True)
    non_embedding_flops: Ref | None = field(default=None, kw_only=True)
    activation_memory: Ref | None = field(default=None, kw_only=True)
    configure: Ref | None = field(default=None, kw_only=True)
    no_parity: str | None = field(default=None, kw_only=True)

    def validate(self) -> None:
        for name in ("builder", "valid_sizes", "param_count", "training_flops"):
            _check_ref(getattr(self, name), name)
        for name in ("embedding_params", "non_embedding_flops", "activation_memory", "configure"):
            if getattr(self, name) is not None:
                _check_ref(getattr(self, name), name)
        if not isinstance(self.size_param, str) or not self.size_param.isidentifier():
            raise EntryError(f"size_param must be an identifier such as 'width', got {self.size_param!r}")
        if self.flops_unit not in FLOPS_UNITS:
            raise EntryError(f"flops_unit must be one of {FLOPS_UNITS}, got {self.flops_unit!r}")
        check_name(self.task, "task")
        check_name(self.default_loss, "default_loss")
        object.__setattr__(self, "default_datasets", _check_names(self.default_datasets, "default_datasets"))
        if not isinstance(self.defaults, Mapping):
            raise EntryError(f"defaults must be a mapping of configuration values, got {self.defaults!r}")
        if self.size_param in self.defaults:
            raise EntryError(f"defaults must not contain the size parameter {self.size_param!r}: use default_size")
        if self.default_size is not None:
            positive_int(self.default_size, "default_size", EntryError)
        if self.no_parity is not None and (not isinstance(self.no_parity, str) or not self.no_parity.strip()):
            raise EntryError(f"no_parity must say why no parity case applies, got {self.no_parity!r}")

    def config(self, **config: Any) -> dict[str, Any]:
        """The entry's defaults overridden by ``config``, completed by ``configure``."""
        full = {**self.defaults, **config}
        return dict(self._call("configure", full)) if self.configure is not None else full

    def sizes(self, lo: int, hi: int, **config: Any) -> list[int]:
        """Valid sizes in ``[lo, hi]``, sorted, without building any model."""
        result = self._call("valid_sizes", lo, hi, **self.config(**config))
        values = list(result) if isinstance(result, Iterable) and not isinstance(result, (str, bytes)) else None
        if values is None or not all(_whole(s) for s in values):  # the plugin's fault, not the user's [model] table
            raise EntryError(f"{self.named}: valid_sizes({lo}, {hi}) returned {result!r}; it must return the "
                             "whole-number sizes in that range (the model's valid_sizes is wrong)")
        sizes = sorted({int(s) for s in values})
        if any(s < lo or s > hi for s in sizes):
            raise EntryError(f"{self.named}: valid_sizes({lo}, {hi}) returned sizes outside the range: {sizes}")
        return sizes

    def params(self, size: int, **config: Any) -> int:
        """Exact parameter count of the model of this size (analytic, nothing built)."""
        value = self._call("param_count", size, **self.config(**config))
        return int(self._count("param_count", size, value, whole=True))

    def flops_per_unit(self, size: int, **config: Any) -> float:
        """Exact training FLOPs per token or sample (see ``flops_unit``)."""
        return self._count("training_flops", size, self._call("training_flops", size, **self.config(**config)))

    def _call(self, function: str, *args: Any, **config: Any) -> Any:
        """The plugin's sizing function ``function`` called on ``args``. A ValueError or TypeError is the
        function refusing the configuration (the planner says so); a reference that does not import, or
        another exception (a ZeroDivisionError, a KeyError), is the plugin's bug: an EntryError naming the
        function, where `flops-fit plan` ended in its traceback."""
        ref = getattr(self, function)
        try:
            fn = resolve(ref)
        except Exception as exc:  # noqa: BLE001 - a lazy reference to a module that fails to import
            raise EntryError(f"{self.named}: its {function} {ref!r} does not import: "
                             f"{type(exc).__name__}: {exc}") from exc
        try:
            return fn(*args, **config)
        except (ValueError, TypeError, EntryError):
            raise
        except Exception as exc:  # noqa: BLE001 - the plugin's own bug, named
            shown = ", ".join(map(repr, args[:2])) if function != "configure" else "config"
            raise EntryError(f"{self.named}: {function}({shown}) raised {type(exc).__name__}: {exc} "
                             f"(the model's {function} is wrong)") from exc

    def _count(self, function: str, size: int, value: Any, *, whole: bool = False, zero: bool = False) -> float:
        """``value`` as a positive finite number (``zero``: or 0; ``whole``: without a fraction), else an
        EntryError naming the plugin's function: a NaN, zero or negative count would otherwise surface as a
        planner's arithmetic error, or be stored with every run and fitted; a fraction was cut off by int()
        and text such as "12" read as a number."""
        try:
            number = math.nan if isinstance(value, (str, bytes, bool)) else float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not (math.isfinite(number) and (number >= 0 if zero else number > 0) and (number.is_integer() or not whole)):
            what = ("a non-negative" if zero else "a positive") + (" whole" if whole else " finite") + " number"
            raise EntryError(f"{self.named}: {function}({size}) returned {value!r}; a count must be {what} "
                             f"(the model's {function} is wrong)")
        return number

    def embedding_param_count(self, size: int, **config: Any) -> int | None:
        """Embedding parameters of this size (analytic), or None if the entry does not say."""
        if self.embedding_params is None:
            return None
        value = self._call("embedding_params", size, **self.config(**config))
        return int(self._count("embedding_params", size, value, whole=True, zero=True))

    def non_embedding_flops_per_unit(self, size: int, **config: Any) -> float | None:
        """Training FLOPs per unit without embedding and output head, or None if the entry does not say."""
        if self.non_embedding_flops is None:
            return None
        value = self._call("non_embedding_flops", size, **self.config(**config))
        return self._count("non_embedding_flops", size, value)

    def activation_bytes(self, size: int, micro_batch_size: int, seq_len: int, **config: Any) -> int | None:
        """fp32 activation bytes one micro-batch keeps for backward, or None if the entry does not say."""
        if self.activation_memory is None:
            return None
        value = self._call("activation_memory", size, micro_batch_size, seq_len, **self.config(**config))
        return int(self._count("activation_memory", size, value, zero=True))

    def build(self, size: int, **config: Any) -> Any:
        """Call the builder; the host's ``create_model`` adds the contract checks."""
        return resolve(self.builder)(size, **self.config(**config))


@dataclass(frozen=True)
class DatasetEntry(Entry):
    """A dataset: ``builder(split=..., **config)`` returns the dataset object for a split.

    ``batch_format`` maps each field of a batch to its dtype and shape, for example
    ``{"tokens": "int64[B, T+1]"}`` or ``{"images": "float32[B, C, H, W]", "labels": "int64[B]"}``.
    ``configure(config) -> config``, if given, returns the full configuration with the keys it
    implies filled in (a text dataset's ``vocab_size`` from its tokenizer); the planner and
    ``create_dataset`` call it, so the model follows the dataset's configuration.

    A text dataset's split reports ``unique_tokens`` (an int attribute: the tokens it holds, each
    once): runs record their epochs from the training split's, the data-constrained law fits them,
    and ``flops-fit plan`` warns when a run repeats data. One that cannot say (an endless stream)
    leaves it out; a sweep then states it (``SweepOptions.unique_tokens``). An image dataset's split
    may report ``unique_samples`` (the images it holds): ``flops-fit plan`` warns when a run repeats
    them, but runs do not record it (a fit reads every sample as new). A split may report
    ``fingerprint`` (a str digest of its content): a sweep resumed on a training split whose
    fingerprint differs from the one its runs trained on is refused (an edited corpus).
    """

    kind: ClassVar[str] = "dataset"

    builder: Ref = field(kw_only=True)
    modality: str = field(kw_only=True)
    splits: tuple[str, ...] = field(default=("train", "validation"), kw_only=True)
    batch_format: Mapping[str, str] = field(kw_only=True)
    tasks: tuple[str, ...] = field(default=(), kw_only=True)
    defaults: Mapping[str, Any] = field(default_factory=dict, kw_only=True)
    configure: Ref | None = field(default=None, kw_only=True)

    def validate(self) -> None:
        _check_ref(self.builder, "builder")
        if self.configure is not None:
            _check_ref(self.configure, "configure")
        check_name(self.modality, "modality")
        object.__setattr__(self, "splits", _check_names(self.splits, "splits", allow_empty=False))
        object.__setattr__(self, "tasks", _check_names(self.tasks, "tasks"))
        if (
            not isinstance(self.batch_format, Mapping)
            or not self.batch_format
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in self.batch_format.items())
        ):
            raise EntryError(
                "batch_format must map each batch field to a 'dtype[shape]' string, "
                f"e.g. {{'tokens': 'int64[B, T+1]'}}; got {self.batch_format!r}"
            )
        if not isinstance(self.defaults, Mapping):
            raise EntryError(f"defaults must be a mapping, got {self.defaults!r}")

    def config(self, **config: Any) -> dict[str, Any]:
        """The entry's defaults overridden by ``config``, completed by ``configure``."""
        full = {**self.defaults, **config}
        return dict(resolve(self.configure)(full)) if self.configure is not None else full

    def build(self, split: str, **config: Any) -> Any:
        builder = resolve(self.builder)
        full = self.config(**config)
        _known_options(builder, full, f"dataset {self.name!r}")
        return builder(split=split, **full)


def _known_options(builder: Callable[..., Any], config: Mapping[str, Any], what: str) -> None:
    """Refuse a key the builder does not take, naming the ones it does: a typo in a ``[dataset]``
    table (``path`` for ``paths``) otherwise surfaced as the builder's raw TypeError."""
    try:
        params = inspect.signature(builder).parameters
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    known = [n for n, p in params.items() if n != "split"
             and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    unknown = sorted(set(config) - set(known))
    if unknown:
        raise EntryError(f"{what} has no option(s) {unknown}; its options are {known}")


@dataclass(frozen=True)
class LossEntry(Entry):
    """A loss: ``fn(model_output, batch) -> scalar tensor`` for one task."""

    kind: ClassVar[str] = "loss"

    fn: Ref = field(kw_only=True)
    task: str = field(kw_only=True)

    def validate(self) -> None:
        _check_ref(self.fn, "fn")
        check_name(self.task, "task")

    def load(self) -> Callable[[Any, Any], Any]:
        """Resolve the loss function and check it takes ``(model_output, batch)``."""
        fn = resolve(self.fn)
        if not callable(fn):
            raise EntryError(f"loss {self.name!r}: {self.fn!r} is not callable")
        try:
            inspect.signature(fn).bind(None, None)
        except TypeError:
            raise EntryError(
                f"loss {self.name!r}: {fn!r} must accept (model_output, batch)"
            ) from None
        except ValueError:  # builtins without a signature: trust them
            pass
        return fn


@dataclass(frozen=True)
class ExecutorEntry(Entry):
    """An executor: ``builder(on_progress=..., **options)`` returns an object with
    ``map(fn, items)`` and ``close()`` that is used as a context manager; ``map`` calls
    ``fn(item, progress)`` for each item (a RunSpec) and yields ``(item, result_or_exception)``
    pairs as they finish, in any order (protocol: ``flops_fit.executors.base``)."""

    kind: ClassVar[str] = "executor"

    builder: Ref = field(kw_only=True)

    def validate(self) -> None:
        _check_ref(self.builder, "builder")

    def build(self, **options: Any) -> Any:
        executor = resolve(self.builder)(**options)
        missing = [m for m in ("map", "close", "__enter__", "__exit__") if not callable(getattr(executor, m, None))]
        if missing:
            raise EntryError(
                f"executor {self.name!r}: the built object lacks {', '.join(missing)}; an executor needs "
                "map(fn, items) and close(), and is used as a context manager (see flops_fit.executors.base)"
            )
        return executor


PARITY_DEVICES = ("cpu", "cuda")
PARITY_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class ParityCaseEntry(Entry):
    """A parity case: ``run(device=..., dtype=...)`` compares ``model`` with ``reference``
    and returns a report whose ``passed`` attribute is a bool.

    ``quick`` cases are small, CPU, fp32 and run as the gate before a sweep.
    ``requires`` names optional packages (e.g. ``"timm"``) the case needs.
    """

    kind: ClassVar[str] = "parity-case"

    model: str = field(kw_only=True)
    reference: str = field(kw_only=True)
    run: Ref = field(kw_only=True)
    devices: tuple[str, ...] = field(default=PARITY_DEVICES, kw_only=True)
    dtypes: tuple[str, ...] = field(default=PARITY_DTYPES, kw_only=True)
    requires: tuple[str, ...] = field(default=(), kw_only=True)
    quick: bool = field(default=False, kw_only=True)

    def validate(self) -> None:
        check_name(self.model, "model")
        if not isinstance(self.reference, str) or not self.reference:
            raise EntryError(f"reference must describe the reference implementation, got {self.reference!r}")
        _check_ref(self.run, "run")
        for attr, allowed in (("devices", PARITY_DEVICES), ("dtypes", PARITY_DTYPES)):
            values = getattr(self, attr)
            if isinstance(values, str) or not values or any(v not in allowed for v in values):
                raise EntryError(f"{attr} must be a non-empty tuple drawn from {allowed}, got {values!r}")
            object.__setattr__(self, attr, tuple(values))
        if isinstance(self.requires, str) or not all(isinstance(r, str) for r in self.requires):
            raise EntryError(f"requires must be a tuple of package names, got {self.requires!r}")
        object.__setattr__(self, "requires", tuple(self.requires))
        if not isinstance(self.quick, bool):
            raise EntryError(f"quick must be a bool, got {self.quick!r}")


ENTRY_TYPES: dict[str, type[Entry]] = {
    cls.kind: cls for cls in (ModelEntry, DatasetEntry, LossEntry, ExecutorEntry, ParityCaseEntry)
}
