"""The planner: budgets -> one RunSpec per (budget, size), with tokens from exact FLOPs.

No model is built: sizes, parameter counts and FLOPs per token come from the model
entry's analytic functions. For each budget C the prior optimum is the size whose
compute-optimal run at ``tokens_per_param`` (Chinchilla's ~20) costs C; the grid spans
``span`` (a factor in parameters) around it, snapped to the model's valid sizes. Each size
trains on exactly the tokens the budget allows under the model's own FLOPs accounting
(``flops_accounting="model"``) or 6ND (``"6nd"``, for comparison with papers that use it).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any

from flops_fit import api
from flops_fit._table import format_table
from flops_fit.contracts import TASK_CAUSAL_LM, ModelEntry
from flops_fit.errors import FlopsFitError
from flops_fit.hparams import WIDTH_PARAMS, HyperParams
from flops_fit.runs import RunSpec

FLOPS_ACCOUNTING = ("model", "6nd")
# Model configuration keys that hold the context length (set from the plan's seq_len).
CONTEXT_KEYS = ("block_size", "seq_len", "context_length", "max_seq_len", "n_ctx")
# Rough sustained training FLOP/s for time estimates when none is given: small models on
# a laptop-class CPU core pair, and bf16 on a current data-centre GPU at ~30% MFU.
DEFAULT_THROUGHPUT = {"cpu": 1.0e10, "cuda": 1.0e14}


class PlanError(FlopsFitError):
    """A budget or option the planner cannot turn into a sensible sweep."""


@dataclass
class Plan:
    """The runs of a sweep and the settings that produced them."""

    runs: list[RunSpec]
    settings: dict[str, Any] = field(default_factory=dict)
    throughput: float = DEFAULT_THROUGHPUT["cpu"]

    @property
    def budgets(self) -> list[float]:
        return sorted({r.budget for r in self.runs})

    @property
    def total_flops(self) -> float:
        return sum(r.flops for r in self.runs)

    def estimated_seconds(self, run: RunSpec | None = None) -> float:
        return (run.flops if run else self.total_flops) / self.throughput

    def rows(self) -> list[list[Any]]:
        return [
            [
                f"{r.budget:.2e}", r.size, f"{r.params:,}", f"{r.tokens:,}", f"{r.tokens / r.params:.1f}",
                r.steps, f"{r.flops:.3e}", f"{r.lr:.2e}", _duration(self.estimated_seconds(r)),
            ]
            for r in self.runs
        ]

    def table(self) -> str:
        headers = ["budget", "size", "params", "tokens", "tokens/param", "steps", "FLOPs", "lr", "est. time"]
        r0 = self.runs[0]
        unit = self.settings.get("unit", "token") + "s"
        head = (
            f"{len(self.runs)} runs of {r0.model} on {r0.dataset} ({unit}; batch {r0.batch_size} x "
            f"{r0.seq_len}; FLOPs: {r0.flops_accounting}); total {self.total_flops:.3e} FLOPs, "
            f"est. {_duration(self.estimated_seconds())} at {self.throughput:.1e} FLOP/s"
        )
        return head + "\n" + format_table(self.rows(), headers)

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [r.to_dict() for r in self.runs], "settings": self.settings, "throughput": self.throughput}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        return cls([RunSpec.from_dict(r) for r in data["runs"]], data.get("settings", {}), data["throughput"])

    def run(self, out_dir: str, **options: Any):
        """Run this plan as a sweep into ``out_dir``; see ``flops_fit.sweeps.run_plan``."""
        from flops_fit.sweeps import run_plan

        return run_plan(self, out_dir, **options)


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"


def _positive(value: Any, what: str, kind: type = int) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int) or not value > 0:
        raise PlanError(f"{what} must be a positive {'number' if kind is float else 'integer'}, got {value!r}")
    return value


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _resolve_configs(
    entry: ModelEntry, dentry: Any, model_config: dict, dataset_config: dict, seq_len: int | None
) -> tuple[dict, dict, int]:
    """Full model and dataset configurations, and the sequence length.

    Model keys the dataset's configuration also sets (vocab_size, num_classes, image_size,
    in_chans, patch_size, ...) follow the dataset unless the caller set them for the model,
    so a byte-level corpus gets a 256-token vocabulary without extra options.
    """
    dcfg = {**dentry.defaults, **dataset_config}
    shared = {k: dcfg[k] for k in entry.defaults if dcfg.get(k) is not None and k not in model_config}
    mcfg = {**entry.defaults, **shared, **model_config}
    if entry.task != TASK_CAUSAL_LM:
        if seq_len not in (None, 1):
            raise PlanError(f"seq_len applies to language models; model {entry.name!r} counts samples")
        return mcfg, dcfg, 1
    context_key = next((k for k in CONTEXT_KEYS if k in mcfg), None)
    if seq_len is None:
        seq_len = mcfg.get(context_key) if context_key else dcfg.get("seq_len")
    if seq_len is None:
        raise PlanError(f"pass seq_len=...: neither model {entry.name!r} nor dataset {dentry.name!r} sets one")
    _positive(seq_len, "seq_len")
    if context_key:
        mcfg[context_key] = seq_len
    dcfg["seq_len"] = seq_len
    return mcfg, dcfg, seq_len


class _SizeGrid:
    """Valid sizes with their analytic parameter counts and FLOPs per unit (cached)."""

    def __init__(self, entry: ModelEntry, config: dict, max_size: int, accounting: str) -> None:
        self.entry, self.config, self.accounting = entry, config, accounting
        self.sizes = entry.sizes(1, max_size, **config)
        if not self.sizes:
            raise PlanError(f"model {entry.name!r} has no valid size in [1, {max_size}] with config {config}")
        self.params = [entry.params(s, **config) for s in self.sizes]
        if any(b <= a for a, b in zip(self.params, self.params[1:], strict=False)):
            raise PlanError(f"model {entry.name!r}: parameter count does not grow with size")
        self._fpu: dict[int, float] = {}

    def fpu(self, i: int) -> float:
        if i not in self._fpu:
            size = self.sizes[i]
            if self.accounting == "6nd":
                self._fpu[i] = 6.0 * self.params[i]
            else:
                self._fpu[i] = self.entry.flops_per_unit(size, **self.config)
        return self._fpu[i]

    def nearest(self, params: float) -> int:
        """Index of the size whose parameter count is nearest ``params`` in log space."""
        j = bisect.bisect_left(self.params, params)
        candidates = [k for k in (j - 1, j) if 0 <= k < len(self.sizes)]
        return min(candidates, key=lambda k: abs(math.log(self.params[k] / params)))

    def around(self, centre: float, span: float, count: int) -> list[int]:
        """Up to ``count`` distinct sizes log-spaced over ``span`` around ``centre`` (params):
        each target takes the nearest unused size within the span's ends."""
        lo, hi = self.nearest(centre / math.sqrt(span)), self.nearest(centre * math.sqrt(span))
        targets = [centre * span ** (k / (count - 1) - 0.5) for k in range(count)]
        free, chosen = set(range(lo, hi + 1)), []
        for t in targets:
            if free:
                best = min(free, key=lambda k: abs(math.log(self.params[k] / t)))
                free.discard(best)
                chosen.append(best)
        return sorted(chosen)

    def prior_optimum(self, budget: float, tokens_per_param: float) -> float:
        """Parameters N with fpu(N) * tokens_per_param * N = budget (interpolated in log space)."""
        costs = [self.fpu(i) * tokens_per_param * self.params[i] for i in range(len(self.sizes))]
        j = bisect.bisect_left(costs, budget)
        if j == 0:
            return float(self.params[0])
        if j == len(costs):
            return float(self.params[-1])
        t = math.log(budget / costs[j - 1]) / math.log(costs[j] / costs[j - 1])
        return math.exp((1 - t) * math.log(self.params[j - 1]) + t * math.log(self.params[j]))


def plan(
    model: str,
    dataset: str | None = None,
    budgets: list[float] | tuple[float, ...] = (),
    *,
    sizes_per_budget: int = 5,
    span: float = 8.0,
    tokens_per_param: float = 20.0,
    sizes: list[int] | None = None,
    batch_size: int = 32,
    seq_len: int | None = None,
    model_config: dict[str, Any] | None = None,
    dataset_config: dict[str, Any] | None = None,
    loss: str | None = None,
    hparams: HyperParams | dict[str, Any] | None = None,
    flops_accounting: str = "model",
    min_steps: int = 20,
    seed: int = 0,
    eval_split: str = "validation",
    eval_tokens: int = 32768,
    curve_points: int = 20,
    precision: str = "auto",
    device: str = "auto",
    compile: bool = False,
    throughput: float | None = None,
    max_size: int = 16384,
    host: Any = None,
) -> Plan:
    """Plan an IsoFLOP sweep: for each budget, ``sizes_per_budget`` sizes spanning ``span``
    (a factor in parameters) around the prior optimum, each on exactly the tokens the budget
    allows. Refuses budgets that leave fewer than 3 sizes with ``min_steps`` optimizer steps.
    """
    if flops_accounting not in FLOPS_ACCOUNTING:
        raise PlanError(f"flops_accounting must be one of {FLOPS_ACCOUNTING}, got {flops_accounting!r}")
    budgets = list(budgets)
    if not budgets:
        raise PlanError("pass budgets=[...]: the compute budgets in FLOPs, e.g. [1e12, 3e12, 1e13]")
    for b in budgets:
        _positive(b, "each budget", float)
    _positive(batch_size, "batch_size")
    _positive(min_steps, "min_steps")
    _positive(eval_tokens, "eval_tokens")
    _positive(curve_points, "curve_points")
    if sizes is None:
        _positive(sizes_per_budget, "sizes_per_budget")
        if sizes_per_budget < 3:
            raise PlanError(f"sizes_per_budget must be at least 3 to locate a minimum, got {sizes_per_budget}")
        if not span > 1:
            raise PlanError(f"span must be a factor > 1 in parameters (e.g. 8), got {span!r}")
    hp = hparams if isinstance(hparams, HyperParams) else HyperParams.from_dict(hparams)
    device_kind = _default_device() if "auto" in (precision, device) else device.split(":")[0]
    if precision == "auto":
        precision = "bf16" if device_kind == "cuda" else "fp32"
    if precision not in ("fp32", "bf16"):
        raise PlanError(f"precision must be 'auto', 'fp32' or 'bf16', got {precision!r}")

    entry: ModelEntry = api.model_info(model, host=host)
    dataset = dataset or (entry.default_datasets[0] if entry.default_datasets else None)
    if dataset is None:
        raise PlanError(f"model {model!r} names no default dataset: pass dataset=...")
    dentry = api.dataset_info(dataset, host=host)
    if dentry.tasks and entry.task not in dentry.tasks:
        raise PlanError(f"dataset {dataset!r} serves {list(dentry.tasks)}, not model {model!r}'s task {entry.task!r}")
    if eval_split not in dentry.splits:
        raise PlanError(f"dataset {dataset!r} has no split {eval_split!r} to evaluate on; its splits: {list(dentry.splits)}")
    loss = loss or entry.default_loss
    lentry = api.loss_info(loss, host=host)
    if lentry.task != entry.task:
        raise PlanError(f"loss {loss!r} is for task {lentry.task!r}, but model {model!r} solves {entry.task!r}")
    mcfg, dcfg, seq_len = _resolve_configs(entry, dentry, dict(model_config or {}), dict(dataset_config or {}), seq_len)

    grid = _SizeGrid(entry, mcfg, max_size, flops_accounting)
    width_like = entry.size_param in WIDTH_PARAMS
    unit = batch_size * seq_len  # units per full step
    min_units = min_steps * unit
    from flops_fit import __version__

    runs: list[RunSpec] = []
    for budget in sorted(budgets):
        if sizes is not None:
            unknown = [s for s in sizes if s not in grid.sizes]
            if unknown:
                raise PlanError(f"sizes {unknown} are not valid for model {model!r} (up to {max_size}); valid: {grid.sizes[:12]}...")
            chosen = sorted({grid.sizes.index(s) for s in sizes})
        else:
            centre = grid.prior_optimum(budget, tokens_per_param)
            chosen = grid.around(centre, span, sizes_per_budget)
            if len(chosen) < 3:
                raise PlanError(_too_few_sizes(budget, grid, centre, span, tokens_per_param, len(chosen), model))
        feasible = [i for i in chosen if budget / grid.fpu(i) >= min_units]
        if not feasible or len(feasible) < 3:
            raise PlanError(_refusal(budget, grid, chosen, feasible, min_units, min_steps, batch_size, seq_len, model))
        for i in feasible:
            size = grid.sizes[i]
            tokens = int(budget / grid.fpu(i) / seq_len) * seq_len
            steps = -(-tokens // unit)
            runs.append(RunSpec(
                model=model, size=size, model_config=mcfg, dataset=dataset, dataset_config=dcfg, loss=loss,
                budget=float(budget), tokens=tokens, batch_size=batch_size, seq_len=seq_len, steps=steps,
                params=grid.params[i], flops_per_unit=grid.fpu(i), flops_accounting=flops_accounting,
                lr=hp.learning_rate(size if width_like else None, batch_size, model),
                warmup_steps=hp.warmup_steps(steps), min_lr_ratio=hp.min_lr_ratio,
                weight_decay=hp.weight_decay, beta1=hp.beta1, beta2=hp.adam_beta2(batch_size), eps=hp.eps,
                grad_clip=hp.grad_clip, seed=seed, eval_split=eval_split, eval_tokens=eval_tokens,
                curve_points=curve_points, divergence_factor=hp.divergence_factor, precision=precision,
                version=__version__, device=device, compile=compile,
            ))
    settings = {
        "model": model, "dataset": dataset, "loss": loss, "unit": entry.flops_unit, "budgets": sorted(float(b) for b in budgets),
        "sizes_per_budget": sizes_per_budget, "span": span, "tokens_per_param": tokens_per_param,
        "sizes": sizes, "batch_size": batch_size, "seq_len": seq_len, "model_config": mcfg,
        "dataset_config": dcfg, "hparams": hp.to_dict(), "flops_accounting": flops_accounting,
        "min_steps": min_steps, "seed": seed, "eval_split": eval_split, "eval_tokens": eval_tokens,
        "curve_points": curve_points, "precision": precision, "device": device, "compile": compile,
    }
    return Plan(runs, settings, throughput or DEFAULT_THROUGHPUT.get(device_kind, DEFAULT_THROUGHPUT["cpu"]))


def _up(value: float) -> str:
    """``value`` rounded up to 3 significant digits, so a suggested budget is enough."""
    exponent = math.floor(math.log10(value)) - 2
    return f"{math.ceil(value / 10**exponent) * 10**exponent:.3g}"


def _too_few_sizes(budget, grid, centre, span, tokens_per_param, found, model) -> str:
    where = (
        f"budget {budget:.3g} FLOPs: the span of {span:g}x around its prior optimum ({centre:,.0f} params at "
        f"{tokens_per_param:g} tokens/param) holds only {found} valid size(s) of model {model!r}"
    )
    low = grid.params[0] * math.sqrt(span)
    if centre < low:
        need = grid.fpu(grid.nearest(low)) * tokens_per_param * low
        return f"{where}, next to its smallest size ({grid.params[0]:,} params); use budgets >= {_up(need)} FLOPs, a wider span, or pass sizes=[...]"
    return f"{where}; widen span, or pass sizes=[...]"


def _refusal(budget, grid, chosen, feasible, min_units, min_steps, batch_size, seq_len, model) -> str:
    """Why a budget cannot be swept, and the smallest budget that could."""
    need_smallest = grid.fpu(0) * min_units
    third = chosen[2] if len(chosen) >= 3 else min(2, len(grid.sizes) - 1)
    need_three = grid.fpu(third) * min_units
    how = f"{min_steps} steps x batch {batch_size} x seq_len {seq_len}"
    if budget < need_smallest:
        return (
            f"budget {budget:.3g} FLOPs is too small for model {model!r}: its smallest size "
            f"({grid.sizes[0]}, {grid.params[0]:,} params) needs {need_smallest:.3g} FLOPs for {how}; "
            f"use budgets >= {_up(need_three)} FLOPs (3 sizes), or lower batch_size / min_steps"
        )
    return (
        f"budget {budget:.3g} FLOPs leaves only {len(feasible)} of the planned sizes "
        f"{[grid.sizes[i] for i in chosen]} with at least {how}; an IsoFLOP curve needs 3 or more. "
        f"Raise the budget (>= {_up(need_three)} FLOPs fits 3 of them), lower span, "
        f"batch_size or min_steps, or pass sizes=[...]"
    )
