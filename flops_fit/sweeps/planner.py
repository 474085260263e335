"""The planner: budgets -> one RunSpec per (budget, size), with tokens from exact FLOPs.

No model is built: sizes, parameter counts and FLOPs per token come from the model
entry's analytic functions. For each budget C the prior optimum is the size whose
compute-optimal run at ``tokens_per_param`` (Chinchilla's ~20) costs C; the grid spans
``span`` (a factor in parameters) around it, snapped to the model's valid sizes. Each size
trains on exactly the tokens the budget allows under the model's own FLOPs accounting
(``flops_accounting="model"``) or 6ND (``"6nd"``, for comparison with papers that use it).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import flops_fit
from flops_fit._version import __version__
from flops_fit.checks import positive_int
from flops_fit.errors import EntryError, PlanError
from flops_fit.plugin import api
from flops_fit.plugin.contracts import TASK_CAUSAL_LM, DatasetEntry, ModelEntry
from flops_fit.store.runs import PATHS_FROM, RunSpec
from flops_fit.sweeps.estimate import Timing, run_seconds
from flops_fit.sweeps.hparams import WIDTH_PARAMS
from flops_fit.sweeps.memory import Memory, check_memory, gib, missing_device, run_memory
from flops_fit.sweeps.options import SweepOptions
from flops_fit.sweeps.size_grid import SizeGrid, grid_notes, refusal, too_few_sizes
from flops_fit.sweeps.tuned import TunedLaw, guarded_rates, short_source, sources_header
from flops_fit.tables import duration, format_table, per_param
from flops_fit.training.schedules import cooldown_steps
from flops_fit.training.wsd import executed_flops

# Model configuration keys that hold the context length (set from the plan's seq_len).
CONTEXT_KEYS = ("block_size", "seq_len", "context_length", "max_seq_len", "n_ctx")
# Model keys a caller may set apart from the dataset's, and how they must compare with it (``_resolve_configs``):
# a head or vocabulary at least the dataset's labels, images exactly the dataset's.
MODEL_FITS_DATASET = {"num_classes": "at least", "vocab_size": "at least", "image_size": "equal to",
                      "in_chans": "equal to"}
# Rough sustained training FLOP/s for time estimates when none is given: small models on
# a laptop-class CPU core pair, and bf16 on a current data-centre GPU at ~30% MFU.
DEFAULT_THROUGHPUT = {"cpu": 1.0e10, "cuda": 1.0e14}


@dataclass
class Plan:
    """The runs of a sweep and the (resolved) options that produced them."""

    runs: list[RunSpec]
    options: SweepOptions
    unit: str = "token"  # what the model's FLOPs are counted per: "token" or "sample"
    throughput: float = DEFAULT_THROUGHPUT["cpu"]
    memory: dict[str, Memory | None] = field(default_factory=dict)  # run id -> estimate per process
    notes: list[str] = field(default_factory=list)  # what the grid could not do as asked, and why
    timings: list[Timing] = field(default_factory=list)  # a probe's measurements (``calibrate``); none: FLOP/s

    @property
    def settings(self) -> dict[str, Any]:
        """The options as plain values: what the store records as the sweep's spec."""
        return self.options.to_dict()

    @property
    def budgets(self) -> list[float]:
        return sorted({r.budget for r in self.runs})

    @property
    def executed_flops(self) -> dict[str, float]:
        """FLOPs each run adds to the sweep (a WSD branch: its new stable stretch and its
        cooldown; a cosine run: all of its FLOPs)."""
        return executed_flops(self.runs)

    @property
    def total_flops(self) -> float:
        """FLOPs the sweep executes."""
        return sum(self.executed_flops.values())

    @property
    def cosine_flops(self) -> float:
        """FLOPs of the same runs trained one by one (each with its own cosine schedule)."""
        return sum(r.flops for r in self.runs)

    @property
    def saved_fraction(self) -> float:
        """Share of the cosine grid's FLOPs that shared stable phases save (0 for cosine)."""
        return 1.0 - self.total_flops / self.cosine_flops

    def estimated_seconds(self, run: RunSpec | None = None) -> float:
        """Wall time of ``run`` (default: the whole sweep, on one worker): measured per size by
        ``calibrate``'s probe when it ran, else the FLOPs at ``throughput``."""
        if run is None:
            return sum(self.estimated_seconds(r) for r in self.runs) if self.timings else \
                self.total_flops / self.throughput
        executed = self.executed_flops[run.run_id]
        if not self.timings:
            return executed / self.throughput
        return run_seconds(run, executed / (run.flops_per_unit * run.batch_size * run.seq_len), self.timings)

    def calibrate(self, *, host: Any = None, threads: int | None = None) -> Plan:
        """Time a few steps of this plan's smallest, middle and largest size here (``sweeps.probe``;
        seconds), so that the estimates are measured; returns the plan."""
        self.timings = flops_fit.probe(self.runs, host=host, threads=threads)  # lazily: torch
        return self

    def rows(self) -> list[list[Any]]:
        wsd = self.options.schedule == "wsd"
        executed = self.executed_flops
        return [
            [
                f"{r.budget:.2e}", r.size, f"{r.params:,}", f"{r.tokens:,}", per_param(r.tokens / r.params),
                r.steps, f"{r.flops:.3e}", *([r.cooldown_start, f"{executed[r.run_id]:.3e}"] if wsd else []),
                f"{r.lr:.2e}", short_source(r.lr_source), self._memory(r),
                duration(self.estimated_seconds(r)),
            ]
            for r in self.runs
        ]

    def _memory(self, spec: RunSpec) -> str:
        """A run's estimated training memory per process (``sweeps.memory``), or "unknown"."""
        memory = self.memory.get(spec.run_id)
        return "unknown" if memory is None else gib(memory.total)

    def table(self) -> str:
        """The headline, then one row per run."""
        wsd = self.options.schedule == "wsd"
        headers = ["budget", "size", "params", f"{self.unit}s", f"{self.unit}s/param", "steps", "FLOPs",
                   *(["cooldown at", "FLOPs run"] if wsd else []), "lr", "lr from", "memory", "est. time"]
        return self.headline() + "\n" + format_table(self.rows(), headers)

    def headline(self) -> str:
        """What the plan trains, in a few lines: runs, model, data, FLOPs, time, where rates come from."""
        wsd = self.options.schedule == "wsd"
        first = self.runs[0]
        head = (
            f"{len(self.runs)} runs of {first.model} on {first.dataset} ({self.unit}s; batch {first.batch_size} x "
            f"{first.seq_len}; FLOPs: {first.flops_accounting}); total {self.total_flops:.3e} FLOPs, "
            f"est. {duration(self.estimated_seconds())} "
            + (f"on one worker (measured: {len(self.timings)} sizes probed)" if self.timings else
               f"on one worker at {self.throughput:.1e} FLOP/s (a guess; calibrate() or --probe measures it)")
        )
        if wsd:
            sizes = len({r.size for r in self.runs})
            head += (
                f"\nschedule wsd ({self.options.cooldown_shape} cooldown over {self.options.cooldown_fraction:g} of "
                f"each run): {sizes} stable runs branch {len(self.runs)} cooldowns; the same grid with cosine "
                f"schedules costs {self.cosine_flops:.3e} FLOPs, so WSD saves {self.saved_fraction:.0%}"
            )
        head += sources_header({r.lr_source for r in self.runs}, self.unit)
        if self.options.schedule == "wsd" and any(r.lr_source.startswith("tuned:") for r in self.runs):
            head += f"\n  (a WSD family shares one rate: the law's at the geometric mean of its branches' {self.unit}s)"
        head += "".join(f"\nnote: {n}" for n in self.notes)
        return head

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        """One line, as a fit's (the dataclass's own spelled out every run: 18,000 characters for 15 runs, what a
        notebook shows for a cell that ends in ``plan``)."""
        models = ", ".join(dict.fromkeys(r.model for r in self.runs)) or "no model"
        return (f"<Plan of {len(self.runs)} runs of {models} at {len(self.budgets)} budget(s), "
                f"{self.total_flops:.3g} FLOPs; print() it for the table>")

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [r.to_dict() for r in self.runs], "options": self.options.to_dict(), "unit": self.unit,
                "throughput": self.throughput}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        return cls([RunSpec.from_dict(r) for r in data["runs"]], SweepOptions.from_dict(data["options"]),
                   data["unit"], data["throughput"])

    def run(self, out_dir: str | Path, **options: Any) -> flops_fit.SweepResult:
        """Run this plan as a sweep into ``out_dir``; ``options`` are ``run_plan``'s (reached
        through the lazy public API, so that planning imports no torch)."""
        return flops_fit.run_plan(self, out_dir, **options)


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _resolve_configs(
    entry: ModelEntry, dataset_entry: DatasetEntry, model_config: dict, dataset_config: dict, seq_len: int | None
) -> tuple[dict, dict, int]:
    """Full model and dataset configurations, and the sequence length.

    Model keys the dataset's configuration also sets (vocab_size, num_classes, image_size,
    in_chans, patch_size, ...) follow the dataset unless the caller set them for the model,
    so a byte-level corpus gets a 256-token vocabulary without extra options.
    """
    full_dataset = dataset_entry.config(**dataset_config)
    if PATHS_FROM not in entry.defaults:  # a sweep file's folder, for the models that read paths from it
        model_config = {k: v for k, v in model_config.items() if k != PATHS_FROM}
    shared = {k: full_dataset[k] for k in entry.defaults if full_dataset.get(k) is not None and k not in model_config}
    full_model = entry.config(**shared, **model_config)
    _check_model_fits_dataset(entry, dataset_entry, full_model, full_dataset)
    if entry.task != TASK_CAUSAL_LM:
        if seq_len not in (None, 1):
            raise PlanError(f"seq_len applies to language models; model {entry.name!r} counts samples")
        return full_model, full_dataset, 1
    context_key = next((k for k in CONTEXT_KEYS if k in full_model), None)
    if seq_len is None:
        if context_key and full_model.get(context_key) is not None:
            source, seq_len = f"the model's {context_key}", full_model[context_key]
        else:  # no context key, or one left unset: the model follows the dataset's length
            source, seq_len = "the dataset's seq_len", full_dataset.get("seq_len")
        if seq_len is not None:
            positive_int(seq_len, f"{source} (the sequence length)", PlanError)
    if seq_len is None:
        raise PlanError(f"pass seq_len=...: neither model {entry.name!r} nor dataset {dataset_entry.name!r} sets one")
    if context_key:
        full_model[context_key] = seq_len
    full_dataset["seq_len"] = seq_len
    return full_model, full_dataset, seq_len


def _set_by_dataset(entry: ModelEntry, given: dict, dataset: str, dataset_config: dict, refusal: str,
                    options: SweepOptions) -> str:
    """"; set by dataset ...": the model keys the dataset changed, when the model takes its configuration
    without them (the dataset's values caused the refusal); those the refusal names, if it names any."""
    taken = {k: dataset_config[k] for k in entry.defaults
             if k not in given and dataset_config.get(k) is not None and dataset_config[k] != entry.defaults[k]}
    if not taken:
        return ""
    try:
        SizeGrid(entry, entry.config(**given), options.max_size, options.flops_accounting)
    except Exception:  # noqa: BLE001 - refused without the dataset's values too: not the dataset's doing
        return ""
    named = {k: v for k, v in taken.items() if k in refusal} or taken
    return (f"; set by dataset {dataset!r}: {', '.join(f'{k}={v!r}' for k, v in named.items())} (give them in "
            "[model] / model_config, or pick a dataset that fits)")


def _check_model_fits_dataset(entry: ModelEntry, dataset_entry: DatasetEntry, full_model: dict,
                              full_dataset: dict) -> None:
    """Refuse a model set (``model_config``) against the data it is fed: a head with fewer classes, or a
    vocabulary with fewer tokens, than the dataset's labels (every run would fail on its first batch
    with an index out of bounds), or images of another size or channel count than the dataset's."""
    for key, rule in MODEL_FITS_DATASET.items():
        model_value, data_value = full_model.get(key), full_dataset.get(key)
        if key not in entry.defaults or not all(isinstance(v, int) and not isinstance(v, bool)
                                                for v in (model_value, data_value)):
            continue  # unset, or not a count at all: the model's own checks refuse a value of the wrong type
        if model_value < data_value if rule == "at least" else model_value != data_value:
            raise PlanError(f"model {entry.name!r} is set to {key} {model_value}, but dataset {dataset_entry.name!r} "
                            f"has {key} {data_value}: the model's must be {rule} the dataset's (every run would "
                            f"fail on its first batch); leave {key} out of the [model] table / model_config (it "
                            f"follows the dataset) or set the dataset's")


def plan(options: SweepOptions | None = None, /, *, host: Any = None, **values: Any) -> Plan:
    """Plan an IsoFLOP sweep from ``SweepOptions`` (or its fields as keywords, which also
    override a given ``options``): for each budget, ``sizes_per_budget`` sizes spanning
    ``span`` (a factor in parameters) around the prior optimum, each on exactly the tokens
    the budget allows. Refuses budgets that leave fewer than 3 sizes with ``min_steps``
    optimizer steps, naming a budget that works.
    """
    if options is not None and not isinstance(options, SweepOptions):  # a dict or a sweep file's path, say
        raise PlanError(f"plan() takes SweepOptions or the options as keywords, got a {type(options).__name__}: "
                        "pass a mapping as plan(**options), a sweep file as plan(load_config(path).options) "
                        "(flops_fit.sweeps.config)")
    options = options.replace(**values) if options is not None else SweepOptions.build(**values)
    device_kind = _default_device() if "auto" in (options.precision, options.device) else options.device.split(":")[0]
    precision = options.precision
    if precision == "auto":
        precision = "bf16" if device_kind == "cuda" else "fp32"

    entry: ModelEntry = api.model_info(options.model, host=host)
    model = options.model
    dataset = options.dataset or (entry.default_datasets[0] if entry.default_datasets else None)
    if dataset is None:
        raise PlanError(f"model {model!r} names no default dataset: pass dataset=...")
    dataset_entry = api.dataset_info(dataset, host=host)
    if dataset_entry.tasks and entry.task not in dataset_entry.tasks:
        fitting = api.list_datasets(task=entry.task, host=host)
        raise PlanError(f"dataset {dataset!r} serves {list(dataset_entry.tasks)}, not the task of model {model!r} "
                        f"({entry.task}); pick a dataset that serves it: {', '.join(fitting) or 'none is installed'}")
    if options.eval_split not in dataset_entry.splits:
        raise PlanError(f"dataset {dataset!r} has no split {options.eval_split!r} to evaluate on; "
                        f"its splits: {list(dataset_entry.splits)}")
    loss = options.loss or entry.default_loss
    loss_entry = api.loss_info(loss, host=host)
    if loss_entry.task != entry.task:
        raise PlanError(f"loss {loss!r} is for task {loss_entry.task!r}, but model {model!r} solves {entry.task!r}")
    given = options.model_config
    model_config, dataset_config, seq_len = _resolve_configs(
        entry, dataset_entry, options.model_config, options.dataset_config, options.seq_len)
    options = options.replace(dataset=dataset, loss=loss, seq_len=seq_len, model_config=model_config,
                              dataset_config=dataset_config, precision=precision)
    try:
        grid = SizeGrid(entry, model_config, options.max_size, options.flops_accounting)
    except (PlanError, EntryError):  # an EntryError is the plugin's fault, not the configuration's
        raise
    except (ValueError, TypeError) as exc:  # the model's own checks of its configuration
        source = _set_by_dataset(entry, given, dataset, dataset_config, str(exc), options)
        raise PlanError(f"model {model!r} refuses its configuration ([model] table / model_config): {exc}{source}") \
            from None
    hparams = options.hparams
    width_like = entry.size_param in WIDTH_PARAMS
    batch_size = options.batch_size
    micro = options.micro_batch_size
    if isinstance(micro, int) and micro > batch_size:
        raise PlanError(f"micro_batch_size {micro} is larger than batch_size {batch_size}: a micro-batch splits the "
                        f"batch of one optimizer step; use micro_batch_size <= {batch_size} (or leave it out)")
    scaled = model_config.get("parametrization") in ("mup", "per-layer")
    if scaled and hparams.lr is None and hparams.lr_rule in ("marin", "inverse-width"):
        raise PlanError(f"lr_rule {hparams.lr_rule!r} scales the rate with the width, and parametrization "
                        f"{model_config['parametrization']!r} already scales the layers' rates by base_width / width; "
                        f"use lr_rule = \"constant\" with the rate tuned at the base width (or lr = ..., or a law tuned "
                        f"with this parametrization)")
    law = _law(hparams, width_like, model, batch_size) if hparams.lr is None and hparams.lr_rule == "tuned" else None
    if law is not None:
        law.check_parametrization(model_config)
    batches = {budget: law.batch(budget) if law is not None and law.batch_law is not None else batch_size
               for budget in options.budgets}  # a tuned batch law sets each budget's batch

    grid_runs: list[tuple[float, int, int, int]] = []  # (budget, size index, tokens, steps)
    notes: list[str] = []
    for budget in options.budgets:
        unit = batches[budget] * seq_len  # units per full step
        min_units = options.min_steps * unit
        centre = None
        if options.sizes is not None:
            unknown = [s for s in options.sizes if s not in grid.sizes]
            if unknown:
                raise PlanError(f"sizes {unknown} are not valid for model {model!r} (up to {options.max_size}); "
                                f"valid: {grid.sizes[:12]}...")
            chosen = sorted({grid.sizes.index(s) for s in options.sizes})
            if len(chosen) < 3:
                raise PlanError(f"sizes={list(options.sizes)} gives {len(chosen)} distinct size(s); an IsoFLOP curve "
                                "needs 3 or more: pass 3 or more sizes, or leave sizes out (the planner chooses them)")
        else:
            centre = grid.prior_optimum(budget, options.tokens_per_param)
            choose = grid.ladder if uses_ladder(options) else grid.around
            chosen = choose(centre, options.span, options.sizes_per_budget)
            if len(chosen) < 3:
                raise PlanError(too_few_sizes(budget, grid, centre, options, len(chosen), entry.flops_unit, choose))
        feasible = [i for i in chosen if budget / grid.flops_per_unit(i) >= min_units]
        if len(feasible) < 3:
            raise PlanError(refusal(budget, grid, chosen, feasible, min_units, options))
        notes += grid_notes(budget, grid, centre, chosen, feasible, options, entry.flops_unit)
        for i in feasible:
            tokens = int(budget / grid.flops_per_unit(i) / seq_len) * seq_len
            grid_runs.append((float(budget), i, tokens, -(-tokens // unit)))
    # A WSD family shares its warmup: set by its shortest branch, so no branch warms up
    # for more than its share of steps.
    shortest = {i: min(steps for _, j, _, steps in grid_runs if j == i) for _, i, _, _ in grid_runs}
    rates, sources = _rates(hparams, law, grid_runs, grid, options, width_like, model, batches, entry)
    beta2 = _beta2(hparams, law, batch_size)
    runs: list[RunSpec] = []
    for budget, i, tokens, steps in grid_runs:
        size = grid.sizes[i]
        warmup = hparams.warmup_steps(shortest[i] if options.schedule == "wsd" else steps)
        runs.append(RunSpec(
            model=model, size=size, model_config=model_config, dataset=dataset, dataset_config=dataset_config,
            loss=loss, budget=budget, tokens=tokens, batch_size=batches[budget], seq_len=seq_len, steps=steps,
            params=grid.params[i], flops_per_unit=grid.flops_per_unit(i),
            flops_accounting=options.flops_accounting,
            lr=rates[(budget, i)], lr_source=sources.get((budget, i), hparams.source()),
            unique_tokens=options.unique_tokens,
            warmup_steps=warmup, min_lr_ratio=hparams.min_lr_ratio,
            weight_decay=hparams.weight_decay, beta1=hparams.beta1, beta2=beta2, eps=hparams.eps,
            grad_clip=hparams.grad_clip, seed=options.seed, eval_split=options.eval_split,
            eval_tokens=options.eval_tokens, curve_points=options.curve_points,
            divergence_factor=hparams.divergence_factor, precision=precision, version=__version__,
            device=options.device, compile=options.compile, micro_batch_size=options.micro_batch_size,
            processes_per_run=options.processes_per_run, parallel=options.parallel,
            embedding_params=entry.embedding_param_count(size, **model_config),
            non_embedding_flops_per_unit=entry.non_embedding_flops_per_unit(size, **model_config), **_schedule_fields(options, steps, warmup, budget, size),
        ))
    notes += _flat_cooldowns(runs, options) + _nothing_to_stack(runs, options)
    device = device_kind if options.device == "auto" else options.device
    notes += _oversubscribed(options, device) + _absent_device(device)
    check_memory(runs, entry, device)
    throughput = options.throughput or DEFAULT_THROUGHPUT.get(device_kind, DEFAULT_THROUGHPUT["cpu"])
    return Plan(runs, options, entry.flops_unit, throughput, {r.run_id: run_memory(r, entry, device) for r in runs},
                notes)


def _flat_cooldowns(runs: list[RunSpec], options: SweepOptions) -> list[str]:
    """A note for WSD runs whose cooldown is one step: a cooldown starts at the peak rate, so such a
    run never lowers its rate, and its loss is the stable phase's, not a cooled-down one."""
    flat = [r for r in runs if r.schedule == "wsd" and r.steps - r.cooldown_start <= 1]
    if not flat:
        return []
    named = ", ".join(f"budget {r.budget:.3g} size {r.size}" for r in flat[:3]) + (", ..." if len(flat) > 3 else "")
    return [f"{len(flat)} run(s) cool down over 1 step ({named}): a cooldown starts at the peak rate, so they never "
            f"lower it and end as the stable phase does; raise cooldown_fraction ({options.cooldown_fraction:g}) so "
            "that every cooldown spans 2 steps or more, or min_steps"]


def _absent_device(device: str) -> list[str]:
    """A note where the runs' device is not on this machine: a note, not a refusal, as the plan may be for
    another machine; the sweep's preflight refuses it."""
    absent = missing_device(device)
    return [] if absent is None else [f"device {device!r} is not here ({absent}): `flops-fit sweep` on this "
                                      "machine refuses it; set device = \"auto\" or \"cpu\" to train here"]


def _oversubscribed(options: SweepOptions, device: str) -> list[str]:
    """A note where a run's CPU ranks outnumber this machine's cores: they trained oversubscribed without
    a word. A note, not a refusal: a cluster's nodes may have the cores the planning machine lacks."""
    cores = os.cpu_count() or 1
    k = options.processes_per_run
    if device.split(":")[0] != "cpu" or k <= cores:
        return []
    return [f"processes_per_run = {k} starts {k} processes for each run and this machine has {cores} cores: here "
            "they would share them, each rank slower than on a core of its own; fine where runs train on nodes "
            f"with {k} cores or more, else set processes_per_run to {cores} or less"]


def _nothing_to_stack(runs: list[RunSpec], options: SweepOptions) -> list[str]:
    """A note where ``stack_runs`` asks for runs trained together and no two runs of the plan differ only
    in learning rate or seed (what ``training.stacked`` groups): each trains alone, and nothing said so."""
    if options.stack_runs <= 1:
        return []
    shapes = {tuple(sorted((k, repr(v)) for k, v in r.identity().items() if k not in ("lr", "seed"))) for r in runs}
    if len(shapes) < len(runs):
        return []
    return [f"stack_runs = {options.stack_runs}, but no two runs of this plan differ only in learning rate or seed, so "
            "each trains alone: runs are trained together where they share every other setting (a tune's rates, "
            "a seed study)"]


def _rates(hparams: Any, law: TunedLaw | None, grid_runs: list[tuple[float, int, int, int]], grid: SizeGrid,
           options: SweepOptions, width_like: bool, model: str, batches: dict[float, int],
           entry: Any) -> tuple[dict[tuple[float, int], float], dict[tuple[float, int], str]]:
    """Each run's peak learning rate and its source, keyed by (budget, size index): from the
    rule, or from a tuned law (``sweeps.tuned``, guarded on its reach) at the run's variables.
    Under WSD a family (one size at one batch) shares its stable phase, so it shares one rate:
    the law's at the geometric mean of its branches' token counts."""
    if law is None:
        return {(b, i): hparams.learning_rate(grid.sizes[i] if width_like else None, options.batch_size, model)
                for b, i, _, _ in grid_runs}, {}
    tokens = {(b, i): float(t) for b, i, t, _ in grid_runs}
    if options.schedule == "wsd":
        for family in {(i, batches[b]) for b, i, _, _ in grid_runs}:
            mine = [k for k in tokens if (k[1], batches[k[0]]) == family]
            mean = math.exp(sum(math.log(tokens[k]) for k in mine) / len(mine))
            tokens.update(dict.fromkeys(mine, mean))
    values = {}
    for (b, i), t in tokens.items():
        embedding = entry.embedding_param_count(grid.sizes[i], **options.model_config) or 0
        values[(b, i)] = {"tokens": t, "params": float(grid.params[i]), "nonembedding": float(grid.params[i] - embedding),
                          "flops": grid.flops_per_unit(i) * t,
                          "batch": float(batches[b]), **({"width": float(grid.sizes[i])} if width_like else {})}
    return guarded_rates(law, hparams, values, model, entry.flops_unit)


def _law(hparams: Any, width_like: bool, model: str, batch_size: int) -> TunedLaw:
    law = TunedLaw.load(hparams.tuned)
    law.check_batch(batch_size, model)
    if law.scale == "width" and not width_like:
        raise PlanError(f"hparams {law.path}: the law is in the model's width, but model {model!r}'s size is not a width")
    return law


def _beta2(hparams: Any, law: TunedLaw | None, batch_size: int) -> float:
    """AdamW's beta2: given, the tuned law's (when it recorded one), else the rule's."""
    if hparams.beta2 is None and law is not None and law.beta2 is not None:
        return law.beta2
    return hparams.adam_beta2(batch_size)


def uses_ladder(options: SweepOptions) -> bool:
    """Whether budgets take their sizes from one shared ladder (default: with WSD)."""
    return options.size_ladder if options.size_ladder is not None else options.schedule == "wsd"


def _schedule_fields(options: SweepOptions, steps: int, warmup: int, budget: float, size: int) -> dict[str, Any]:
    """The RunSpec fields of the plan's schedule (none for cosine: the defaults)."""
    if options.schedule != "wsd":
        return {}
    start = steps - cooldown_steps(steps, options.cooldown_fraction)
    if start < warmup:
        raise PlanError(
            f"budget {budget:.3g}, size {size}: a cooldown of {options.cooldown_fraction:g} x {steps} steps starts "
            f"at step {start}, inside the warmup ({warmup} steps); lower cooldown_fraction or warmup_fraction"
        )
    return {"schedule": "wsd", "cooldown_start": start, "cooldown_shape": options.cooldown_shape}
