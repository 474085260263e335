"""SweepOptions: every option of an IsoFLOP sweep plan, defined once.

The Python API (``flops_fit.plan(model=..., span=16)``), the sweep file's tables
(``[sweep]``, ``[model]``, ``[dataset]``, ``[hparams]``) and the CLI (``flops-fit plan
--span 16``) all build this one frozen dataclass, and the store records it as the plan's
settings. Each field declares its default, its check and its help text, so a new option is
one field here and appears everywhere at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

from flops_fit.checks import (
    is_integer,
    is_real,
    non_negative_number,
    one_of,
    plain_values,
    positive_int,
    positive_number,
)
from flops_fit.errors import PlanError
from flops_fit.sweeps.hparams import HyperParams
from flops_fit.tracking.options import TrackingOptions, parse_tracking
from flops_fit.training.command import TrainCommand, parse_train
from flops_fit.training.micro_batch import FSDP_AUTO
from flops_fit.training.schedules import COOLDOWN_SHAPES, SCHEDULES

FLOPS_ACCOUNTING = ("model", "6nd")
PRECISIONS = ("auto", "fp32", "bf16")
PARALLEL = ("ddp", "fsdp")


def option(default: Any = dataclasses.MISSING, *, help: str, check: Callable[[Any, str], Any] | None = None,
           cli: Callable[[str], Any] | None = None, metavar: str | None = None) -> Any:
    """A field of SweepOptions: ``check(value, name)`` returns the normalised value or raises
    PlanError; ``cli`` parses the command-line text (None: not a command-line flag)."""
    metadata = {"help": help, "check": check, "cli": cli, "metavar": metavar}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


# ------------------------------------------------------------------ checks
def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise PlanError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _optional(check: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    return lambda value, name: None if value is None else check(value, name)


def _positive_int(value: Any, name: str) -> int:
    return positive_int(value, name, PlanError)


def _positive(value: Any, name: str) -> float:
    return float(positive_number(value, name, PlanError))


def _non_negative(value: Any, name: str) -> float:
    return float(non_negative_number(value, name, PlanError))


def _non_negative_int(value: Any, name: str) -> int:
    if not is_integer(value) or value < 0:
        raise PlanError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _listed(value: Any) -> list[Any] | None:
    """The items of a list, tuple, NumPy array (``np.logspace(12, 14, 5)``) or other iterable; None for a
    string, a mapping or a non-iterable."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        return None
    try:
        return list(value)
    except TypeError:  # a 0-d array is Iterable but cannot be iterated
        return None


def _budgets(value: Any, name: str) -> tuple[float, ...]:
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # np.array(1e12): one budget, as np.float64 is
        value = value.item()
    value = [value] if is_real(value) else _listed(value)
    if not value:
        raise PlanError("pass budgets=[...]: the compute budgets in FLOPs, e.g. [1e12, 3e12, 1e13]")
    budgets = sorted(float(positive_number(b, "each budget", PlanError)) for b in value)
    twice = sorted({b for b in budgets if budgets.count(b) > 1})
    if twice:  # each would plan the same runs again, under the same run ids
        raise PlanError(f"budgets lists {', '.join(f'{b:g}' for b in twice)} more than once: each budget is one "
                        "IsoFLOP curve, list it once")
    return tuple(budgets)


def _sizes(value: Any, name: str) -> tuple[int, ...]:
    listed = _listed(value)
    if not listed:
        raise PlanError(f"sizes must be a non-empty list of model sizes, got {value!r}")
    return tuple(sorted({positive_int(s, "each size", PlanError) for s in listed}))


def _sizes_per_budget(value: Any, name: str) -> int:
    count = positive_int(value, name, PlanError)
    if count < 3:
        raise PlanError(f"sizes_per_budget must be at least 3 to locate a minimum, got {count}")
    return count


def _span(value: Any, name: str) -> float:
    if not is_real(value) or not math.isfinite(value) or not value > 1:
        raise PlanError(f"span must be a factor > 1 in parameters (e.g. 8), got {value!r}")
    return float(value)


def _mapping(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise PlanError(f"{name} must be a mapping of configuration keys to values, got {value!r}")
    return plain_values(dict(value))


def _hparams(value: Any, name: str) -> HyperParams:
    """A HyperParams, the ``[hparams]`` table, or a tune's folder (``hparams = "DIR"``: the
    rates come from the law ``flops-fit tune`` wrote there)."""
    if isinstance(value, HyperParams):
        return value
    if isinstance(value, (str, PathLike)):
        return HyperParams.from_tuned(str(value))
    if value is not None and not isinstance(value, Mapping):
        raise PlanError(f"{name} must be HyperParams, a mapping like {{'lr': 3e-3}} or a tune's folder, got {value!r}")
    return HyperParams.from_dict(plain_values(value))


def _choice(choices: Sequence[str]) -> Callable[[Any, str], Any]:
    return lambda value, name: one_of(value, choices, name, PlanError)


def _fraction(value: Any, name: str) -> float:
    if not is_real(value) or not 0 < value < 1:
        raise PlanError(f"{name} must be a fraction between 0 and 1 (e.g. 0.2), got {value!r}")
    return float(value)


def _device(value: Any, name: str) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
        several = " (a worker's GPUs are the [executor] table's devices, e.g. ['cuda:0,1'])" \
            if isinstance(value, str) and "," in value else ""
        raise PlanError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {value!r}{several}")
    return value


def _micro_batch(value: Any, name: str) -> int | str | None:
    if value is None or value == "auto":
        return value
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return positive_int(value, name, PlanError)


def _tracking(value: Any, name: str) -> TrackingOptions | None:
    return parse_tracking(value, name, PlanError)


def _trainer(value: Any, name: str) -> TrainCommand | None:
    return parse_train(value, "train", PlanError)


def _bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise PlanError(f"{name} must be true or false, got {value!r}")
    return value


# ------------------------------------------------------- command-line parsers
# Each raises ArgumentTypeError: argparse shows its message, where a ValueError would read
# "invalid parse_ints value".
def _items(text: str, convert: Callable[[str], Any], kind: str, example: str) -> list[Any]:
    try:
        return [convert(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of {kind}, e.g. {example}") from None


def parse_floats(text: str) -> list[float]:
    """``"1e12,3e12"`` -> [1e12, 3e12]."""
    return _items(text, float, "numbers", "1e12,3e12")


def parse_ints(text: str) -> list[int]:
    """``"64,128"`` -> [64, 128]."""
    return _items(text, int, "whole numbers", "64,128")


def parse_bool(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() in ("true", "1", "yes")


@dataclass(frozen=True)
class SweepOptions:
    """The options of a sweep plan (see each field's help, or ``flops-fit plan --help``)."""

    model: str = option(help="model to sweep (see `flops-fit models`)", check=_text, cli=str)
    budgets: tuple[float, ...] = option(
        help="compute budgets in FLOPs, one IsoFLOP curve each", check=_budgets, cli=parse_floats,
        metavar="C1,C2,...")
    dataset: str | None = option(None, help="dataset (default: the model's first default dataset)",
                                 check=_optional(_text), cli=str)
    sizes_per_budget: int = option(5, help="model sizes per budget", check=_sizes_per_budget, cli=int)
    span: float = option(8.0, help="factor in parameters spanned around each budget's prior optimum",
                         check=_span, cli=float)
    tokens_per_param: float = option(20.0, help="tokens (samples for images) per parameter of the prior optimum (Chinchilla: ~20)",
                                     check=_positive, cli=float)
    sizes: tuple[int, ...] | None = option(None, help="explicit model sizes for every budget (instead of span)",
                                           check=_optional(_sizes), cli=parse_ints, metavar="S1,S2,...")
    batch_size: int = option(32, help="sequences (or samples) per optimizer step", check=_positive_int, cli=int)
    micro_batch_size: int | str | None = option(
        None, help="sequences (or samples) per forward pass: batch_size is split into micro-batches whose "
        "gradients accumulate (default: the whole batch; auto: on CUDA the largest that fits)",
        check=_micro_batch, cli=str)
    processes_per_run: int = option(
        1, help="processes one run spans (data parallel, each taking its slice of the global batch)",
        check=_positive_int, cli=int)
    parallel: str = option("ddp", help="how a run's processes share the model: ddp (replicas) or fsdp (sharded)",
                           check=_choice(PARALLEL), cli=str)
    seq_len: int | None = option(None, help="tokens per sequence (default: the model's or dataset's)",
                                 check=_optional(_positive_int), cli=int)
    model_config: dict[str, Any] = option({}, help="the model's configuration besides its size ([model] table)",
                                          check=_mapping)
    dataset_config: dict[str, Any] = option({}, help="the dataset's configuration ([dataset] table)",
                                            check=_mapping)
    loss: str | None = option(None, help="loss (default: the model's default loss)", check=_optional(_text), cli=str)
    hparams: HyperParams = option(
        HyperParams(), help="optimizer hyper-parameters ([hparams] table), or a `flops-fit tune` output folder "
        "whose law plans each run's learning rate", check=_hparams, cli=str, metavar="DIR")
    schedule: str = option(
        "cosine", help="learning-rate schedule: cosine (one run per budget and size) or wsd (warmup-stable-decay: "
        "one stable run per size, a cooldown branched at each token count the grid needs)",
        check=_choice(SCHEDULES), cli=str)
    cooldown_fraction: float = option(0.2, help="wsd: the cooldown's share of each run's steps", check=_fraction,
                                      cli=float)
    cooldown_shape: str = option("1-sqrt", help="wsd: the cooldown's shape, 1-sqrt or linear",
                                 check=_choice(COOLDOWN_SHAPES), cli=str)
    size_ladder: bool | None = option(
        None, help="take every budget's sizes from one ladder, so each size serves several IsoFLOP curves "
        "(default: on with schedule wsd)", check=_optional(_bool), cli=parse_bool)
    flops_accounting: str = option("model", help="FLOPs per token: the model's exact count, or 6 x params",
                                   check=_choice(FLOPS_ACCOUNTING), cli=str)
    min_steps: int = option(20, help="sizes with fewer optimizer steps than this are left out",
                            check=_positive_int, cli=int)
    seed: int = option(0, help="seed of initialisation and data order", check=_non_negative_int, cli=int)
    unique_tokens: int | None = option(
        None, help="the dataset's unique training tokens (samples for images), for a dataset that does not report "
        "them (default: what it reports): runs record their epochs, plan warns when one repeats data",
        check=_optional(_positive_int), cli=int)
    eval_split: str = option("validation", help="split the held-out loss is measured on", check=_text, cli=str)
    eval_tokens: int = option(32768, help="held-out tokens (or samples) per run's final loss",
                              check=_positive_int, cli=int)
    curve_points: int = option(20, help="points of each run's training curve", check=_positive_int, cli=int)
    precision: str = option("auto", help="fp32, or bf16 autocast (auto: bf16 on CUDA, fp32 on CPU)",
                            check=_choice(PRECISIONS), cli=str)
    device: str = option("auto", help="auto, cpu, cuda or cuda:N", check=_device, cli=str)
    compile: bool = option(False, help="torch.compile the model", check=_bool, cli=parse_bool)
    throughput: float | None = option(None, help="sustained training FLOP/s, for time estimates",
                                      check=_optional(_positive), cli=float)
    max_size: int = option(16384, help="largest model size the planner considers", check=_positive_int, cli=int)
    checkpoint_seconds: float = option(
        600.0, help="seconds of training between a run's checkpoints, so a kill loses at most that (0: none)",
        check=_non_negative, cli=float)
    stack_runs: int = option(
        1, help="train up to N runs that differ only in learning rate or seed (a tune's rates, seeds) in one "
        "program, each stepping on a thread of its own; each is still its own run (1: one at a time)",
        check=_positive_int, cli=int, metavar="N")
    keep_weights: bool = option(False, help="keep each finished run's weights (weights/RUN_ID.safetensors)",
                                check=_bool, cli=parse_bool)
    tracking: TrackingOptions | None = option(
        None, help="experiment tracking ([tracking] table): backends among tensorboard, mlflow, wandb, logging "
        "every run's spec, curve and held-out metrics, the plan and the fits (under OUT/tracking by default)",
        check=_tracking, cli=str, metavar="B1,B2")
    trainer: TrainCommand | None = option(
        None, help="a training script of your own that trains each planned run ([train] table: command = [...], "
        "time_limit, token_tolerance, env, workdir; see docs/guide/own-trainer.md); default: flops-fit's loop",
        check=_trainer)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check = f.metadata["check"]
            if check is not None:
                object.__setattr__(self, f.name, check(getattr(self, f.name), f.name))
        if self.schedule == "wsd" and self.parallel == "fsdp" and self.processes_per_run > 1:
            raise PlanError('schedule = "wsd" does not yet hand a sharded (parallel = "fsdp") stable phase to its '
                            'branches: use parallel = "ddp" or the cosine schedule')
        if self.micro_batch_size == "auto" and self.parallel == "fsdp" and self.processes_per_run > 1:
            raise PlanError(FSDP_AUTO)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def build(cls, **values: Any) -> SweepOptions:
        """Like the constructor, with one clear error for a misspelled or missing option."""
        unknown = sorted(set(values) - set(cls.names()))
        if unknown:
            raise PlanError(f"unknown option(s) {unknown}; the options are {cls.names()}")
        for required in ("model", "budgets"):
            if required not in values:
                hint = "e.g. model='gpt'" if required == "model" else "the budgets in FLOPs, e.g. [1e12, 3e12]"
                raise PlanError(f"pass {required}=... ({hint})")
        return cls(**values)

    def replace(self, **changes: Any) -> SweepOptions:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values, the form the store records (``from_dict`` reads it back)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["budgets"] = list(self.budgets)
        out["sizes"] = None if self.sizes is None else list(self.sizes)
        out["hparams"] = self.hparams.to_dict()
        out["tracking"] = None if self.tracking is None else self.tracking.to_dict()
        out["trainer"] = None if self.trainer is None else self.trainer.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepOptions:
        return cls.build(**data)
