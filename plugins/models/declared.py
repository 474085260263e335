"""Model ``declared``: sizes whose parameters and FLOPs the sweep file states, for a [train] command.

A lab that trains with its own script (``[train] command``) still needs each size's
parameters and training FLOPs per token before training, to plan. When no plugin knows its
model, the ``[model]`` table says them, as a formula of the size or as a table:

    [model]                                  [model.table]
    params = "12 * 4 * size**2 + 2 * 256 * size"    64 = {params = 230000, flops_per_token = 1.5e6}
    flops_per_token = "6 * params"           128 = {params = 820000}
    multiple_of = 16                         # flops_per_token defaults to 6 x params

A formula is arithmetic (``+ - * / // % **``, parentheses, numbers) over ``size``, the
``[model]`` table's other numbers (``n_layer = 4`` makes ``n_layer`` a name) and ``seq_len`` (the sweep's);
``flops_per_token`` may also use ``params``. Sizes are the multiples of ``multiple_of`` (a
formula) or the table's keys. The size is a width (``width`` is another name for it), so the
width-based learning-rate rules apply; pass ``lr`` when yours is not. flops-fit cannot build such a model: only a ``[train]``
command trains it. Dataset ``external`` is the data such a script reads itself (nothing is
loaded; ``seq_len`` comes from the sweep).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping
from typing import Any

import flops_fit

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
              ast.USub: operator.neg, ast.UAdd: operator.pos}
TRAINED_ELSEWHERE = ("model 'declared' only states sizes: a [train] command trains it (see "
                     "docs/guide/own-trainer.md), or sweep a model flops-fit can build")


def evaluate(formula: str, names: Mapping[str, float], what: str) -> float:
    """``formula``'s value with ``names``; ValueError naming ``what`` for anything but arithmetic."""
    try:
        tree = ast.parse(formula, mode="eval")
    except SyntaxError:
        raise ValueError(f"{what} = {formula!r} is not an arithmetic formula") from None

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise ValueError(f"{what} = {formula!r} uses {node.id!r}, which is not a number of the [model] table; "
                                 f"the names are {sorted(names)}")
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.operand))
        raise ValueError(f"{what} = {formula!r}: only numbers, names, + - * / // % ** and parentheses are allowed")

    try:
        return value(tree)
    except ZeroDivisionError:
        raise ValueError(f"{what} = {formula!r} divides by zero") from None


def _table(table: Any) -> dict[int, Mapping[str, Any]]:
    if not isinstance(table, Mapping) or not table:
        raise ValueError("table must map each size to {params = ..., flops_per_token = ...}")
    out = {}
    for key, row in table.items():
        if not str(key).isdigit() or int(key) <= 0 or not isinstance(row, Mapping) or "params" not in row:
            raise ValueError(f"table row {key!r}: a positive size must map to {{params = ..., flops_per_token = ...}}")
        out[int(key)] = row
    return out


def _names(size: int, config: Mapping[str, Any]) -> dict[str, float]:
    numbers = {k: v for k, v in config.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {**numbers, "size": size, "width": size, "seq_len": config.get("context_length") or 0}


def _positive(value: float, what: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be positive, got {value}")
    return value


def _check(config: Mapping[str, Any]) -> None:
    if (config.get("params") is None) == (config.get("table") is None):
        raise ValueError('state the sizes\' parameters: params = "<formula of size>" or a [model.table], one of them')


def param_count(size: int, **config: Any) -> int:
    """Parameters of ``size``: the table's row, or the ``params`` formula (rounded)."""
    _check(config)
    if config.get("table") is not None:
        row = _table(config["table"]).get(size)
        if row is None:
            raise ValueError(f"size {size} is not in the [model.table]")
        return int(_positive(row["params"], f"table row {size}'s params"))
    return round(_positive(evaluate(str(config["params"]), _names(size, config), "params"), f"params at size {size}"))


def training_flops(size: int, **config: Any) -> float:
    """Training FLOPs per token of ``size``: the table's, or the ``flops_per_token`` formula."""
    names = {**_names(size, config), "params": param_count(size, **config)}
    formula = config.get("flops_per_token") or "6 * params"
    if config.get("table") is not None and "flops_per_token" in _table(config["table"])[size]:
        return float(_positive(_table(config["table"])[size]["flops_per_token"], f"table row {size}'s flops_per_token"))
    return float(_positive(evaluate(str(formula), names, "flops_per_token"), f"flops_per_token at size {size}"))


def valid_sizes(lo: int, hi: int, **config: Any) -> list[int]:
    """The table's sizes, or the multiples of ``multiple_of``, in [lo, hi]."""
    _check(config)
    if config.get("table") is not None:
        return sorted(s for s in _table(config["table"]) if lo <= s <= hi)
    step = config.get("multiple_of", 1)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"multiple_of must be a positive integer, got {step!r}")
    return list(range(-(-lo // step) * step, hi + 1, step))


def build(size: int, **config: Any) -> Any:
    raise ValueError(TRAINED_ELSEWHERE)


def build_external(split: str, **config: Any) -> Any:
    raise flops_fit.DataError("dataset 'external' is the data a [train] command reads itself: flops-fit loads nothing of it")


DEFAULTS = {"params": None, "flops_per_token": None, "table": None, "multiple_of": 1, "context_length": None}


@flops_fit.hookimpl
def register_models(register):
    register(flops_fit.ModelEntry(
        "declared", description="Sizes stated by the sweep file ([model] params and flops_per_token formulas, or a "
        "[model.table]), trained by a [train] command only", builder=f"{__name__}:build", size_param="width",
        valid_sizes=valid_sizes, param_count=param_count, training_flops=training_flops, flops_unit="token",
        task=flops_fit.TASK_CAUSAL_LM, default_loss="next-token", default_datasets=("external",), defaults=DEFAULTS,
        no_parity="flops-fit does not build it (a [train] command trains it), so there is nothing to compare"))


@flops_fit.hookimpl
def register_datasets(register):
    register(flops_fit.DatasetEntry(
        "external", description="The data a [train] command reads itself (nothing is loaded; seq_len from the sweep)",
        builder=f"{__name__}:build_external", modality="text", batch_format={"tokens": "int64[B, T]"},
        tasks=(flops_fit.TASK_CAUSAL_LM,), defaults={"seq_len": None}))
