"""The preflight: everything a sweep needs, checked once before its first run.

A sweep that cannot work used to start every run and let each fail the same way. The
preflight looks at each distinct configuration once, in the driver, before the parity gate
and before any training: each run's device present, each dataset configuration opened for its training and held-out
splits (a tokenised corpus is built into the token cache here, and the runs map it), each
size's model built on the meta device (no memory, no compute) and run on one held-out
sample with the loss, the loss checked against the model's task, and the checkpoint folder
writable with room for one checkpoint per concurrent run. The first problem raises
``PreflightError`` naming its cause and fix; nothing is recorded or trained.

``CHECKS`` is the list the driver runs, in order; a check is a function
``check(plan, context)`` that raises a ``FlopsFitError``. Add one there.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flops_fit.errors import FlopsFitError, PreflightError
from flops_fit.plugin import api
from flops_fit.plugin.contracts import TASK_INPUTS
from flops_fit.store.runs import RunSpec
from flops_fit.sweeps.memory import check_memory, missing_device
from flops_fit.tracking.options import Destination, check_wandb_project
from flops_fit.training.checkpoint import CheckpointPolicy
from flops_fit.training.command import script_path
from flops_fit.training.data import check_sequence_length, gather
from flops_fit.training.stacked import Stack, StackedFamilies
from flops_fit.training.task import work_items

# Bytes of a checkpoint per parameter: fp32 weights and AdamW's two fp32 moments.
CHECKPOINT_BYTES_PER_PARAM = 4 + 4 + 4
# Bytes of a checkpoint per training sample: the epoch's permutation (int64).
CHECKPOINT_BYTES_PER_SAMPLE = 8


@dataclass
class Context:
    """What the checks share: the runs about to train, where they checkpoint, how many train
    at once, and what earlier checks found (``samples``: training samples per dataset
    configuration; ``batches``: one held-out batch per dataset configuration)."""

    runs: list[RunSpec]
    checkpoints: CheckpointPolicy | None = None
    concurrent: int = 1
    host: Any = None
    samples: dict[str, int] = field(default_factory=dict)
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)  # a training split's content digest, where it has one
    tracking: Destination | None = None  # where and under what name the trackers write, when the sweep is tracked


def dataset_key(run: RunSpec) -> str:
    """One dataset configuration (with its held-out split) as a string key."""
    return json.dumps([run.dataset, run.dataset_config, run.eval_split], sort_keys=True, default=str)


def vocabulary_bound(run: RunSpec, host: Any) -> dict[str, int]:
    """``{"vocab_size": n}``: the model's vocabulary, to open a dataset that leaves its own unset with
    (a token file without a tokenizer), so the dataset's own check of its ids against it runs once here;
    else {} (the planner has already refused a dataset vocabulary larger than the model's). Ids beyond
    the model's vocabulary failed every run on its first batch ("index out of range in self"; on CUDA a
    device assert), and the meta-device forward below cannot see them."""
    bound = run.model_config.get("vocab_size")
    takes = "vocab_size" in api.dataset_info(run.dataset, host=host).defaults
    if not takes or run.dataset_config.get("vocab_size") is not None or isinstance(bound, bool) or \
            not isinstance(bound, int):
        return {}
    return {"vocab_size": bound}


def check_datasets(plan: Any, context: Context) -> None:
    """Open each distinct dataset configuration's training and held-out splits; keep the
    training split's length and one held-out batch for the later checks, and its ``fingerprint``
    (the driver compares it with the one its runs trained on)."""
    for key, run in _distinct(context.runs, dataset_key).items():
        bound = vocabulary_bound(run, context.host)
        for split in dict.fromkeys(("train", run.eval_split)):
            where = f"dataset {run.dataset!r} (split {split!r}, configuration {run.dataset_config})"
            where += f", its token ids checked against the vocab_size {bound['vocab_size']} of model {run.model!r}," \
                if bound else ""
            try:
                data = api.create_dataset(run.dataset, split, host=context.host, **{**run.dataset_config, **bound})
                size = len(data)
            except FlopsFitError as exc:
                raise PreflightError(f"{where} does not open: {exc}") from exc
            except Exception as exc:  # noqa: BLE001 - a plugin's own exception: named, with its type
                raise PreflightError(f"{where} does not open: {type(exc).__name__}: {exc}; "
                                     "fix the [dataset] table (dataset_config)") from exc
            if size == 0:
                raise PreflightError(f"{where} is empty: give it data, or lower validation_fraction / seq_len")
            if split == "train":
                context.samples[key] = size
                if isinstance(fingerprint := getattr(data, "fingerprint", None), str):
                    context.fingerprints[key] = fingerprint
            else:
                context.batches[key] = _first_batch(data, size, where, run, context.host)


def _first_batch(data: Any, size: int, where: str, run: RunSpec, host: Any) -> dict[str, Any]:
    """The split's first two samples as a batch, or a PreflightError: items that are no dicts of
    tensors ended the sweep in the collate's or the forward's traceback."""
    import torch

    batch_format = api.dataset_info(run.dataset, host=host).batch_format
    try:
        batch = gather(data, np.arange(min(2, size)))
    except FlopsFitError:  # the dataset's own message (a token cache that does not validate)
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's dataset: its items are not what a batch is made of
        raise PreflightError(f"{where}: its samples do not make a batch: {type(exc).__name__}: {exc}; a dataset's "
                             f"items are dicts of tensors (its batch_format: {dict(batch_format)})") from exc
    if not isinstance(batch, Mapping) or not all(isinstance(v, torch.Tensor) for v in batch.values()):
        raise PreflightError(f"{where}: a batch of it is {type(batch).__name__} {_fields(batch)}, not a dict of "
                             f"tensors (its batch_format: {dict(batch_format)})")
    return dict(batch)


def _fields(batch: Any) -> str:
    """A batch's fields and their types, for a message about a batch that is not what it should be."""
    if not isinstance(batch, Mapping):
        return ""
    return "{" + ", ".join(f"{k!r}: {type(v).__name__}" for k, v in batch.items()) + "}"


def check_losses(plan: Any, context: Context) -> None:
    """Each run's loss is registered and solves its model's task."""
    for run in _distinct(context.runs, lambda r: (r.model, r.loss)).values():
        task = api.model_info(run.model, host=context.host).task
        loss_task = api.loss_info(run.loss, host=context.host).task
        if loss_task != task:
            raise PreflightError(f"loss {run.loss!r} is for task {loss_task!r}, but model {run.model!r} solves "
                                 f"{task!r}: pass loss=... for {task!r} (see `flops-fit losses`)")


def check_models(plan: Any, context: Context) -> None:
    """Build each size on the meta device and run it, with its loss, on one held-out batch.

    What the meta device cannot run (data-dependent code) is left to the runs."""
    import torch

    def key(r: RunSpec) -> Any:
        return r.model, r.size, json.dumps(r.model_config, sort_keys=True, default=str)

    stacked = {key(r) for item in work_items(context.runs, stack=getattr(plan.options, "stack_runs", 1))
               if isinstance(item, (Stack, StackedFamilies)) for r in item.runs}
    for run in _distinct(context.runs, key).values():
        where = f"model {run.model!r} size {run.size}"
        try:
            with torch.device("meta"):
                model = api.create_model(run.model, run.size, host=context.host, **run.model_config)
        except FlopsFitError as exc:
            raise PreflightError(f"{where} does not build: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - the model's own checks of its configuration
            if _meta_unsupported(exc):
                continue
            raise PreflightError(f"{where} does not build with configuration {run.model_config}: "
                                 f"{type(exc).__name__}: {exc}; fix the [model] table (model_config)") from exc
        batch = context.batches.get(dataset_key(run))
        if batch is not None and _forward(model, batch, run, context.host, where) and key(run) in stacked:
            raise PreflightError(f"{where} draws random numbers while it trains (dropout): runs trained together "
                                 f"(stack_runs = {plan.options.stack_runs}) would draw them from one generator in "
                                 "no fixed order: set its dropout to 0, or train them one at a time (stack_runs = 1)")


def _forward(model: Any, batch: dict[str, Any], run: RunSpec, host: Any, where: str) -> bool:
    """The model and its loss on ``batch``, on the meta device: shapes meet, the loss is a scalar.
    Whether the forward drew random numbers (dropout), which runs trained together cannot share."""
    import torch

    entry = api.model_info(run.model, host=host)
    field_name = TASK_INPUTS[entry.task]
    if field_name not in batch:
        raise PreflightError(f"dataset {run.dataset!r} yields batches with fields {sorted(batch)}, but model "
                             f"{run.model!r} (task {entry.task!r}) is called on batch[{field_name!r}]: the dataset's "
                             "items must have that field (docs/guide/plugins.md, Batches)")
    x = batch[field_name]
    try:
        check_sequence_length(run, x)
    except ValueError as exc:
        raise PreflightError(str(exc)) from exc
    meta = {k: v.to("meta") for k, v in batch.items()}
    with _RandomDraws() as draws:
        try:
            output = model(meta[field_name])
        except Exception as exc:  # noqa: BLE001 - shapes that do not meet: the model's message
            if _meta_unsupported(exc):
                return False
            raise PreflightError(f"{where} fails on a batch of dataset {run.dataset!r}: {type(exc).__name__}: "
                                 f"{exc}; make the [model] and [dataset] tables agree") from exc
        try:
            loss = api.get_loss(run.loss, host=host)(output, meta)
        except Exception as exc:  # noqa: BLE001 - the loss's own failure is not the tables' disagreement
            if _meta_unsupported(exc):
                return False
            raise PreflightError(f"loss {run.loss!r} fails on the output of model {run.model!r} size {run.size} "
                                 f"and a batch of dataset {run.dataset!r}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(loss, torch.Tensor):
        raise PreflightError(f"loss {run.loss!r} returns {type(loss).__name__} for model {run.model!r}, not a "
                             "tensor: training calls backward() on it (return a scalar tensor)")
    if loss.ndim != 0:
        raise PreflightError(f"loss {run.loss!r} returns shape {tuple(loss.shape)} for model {run.model!r}, not a "
                             "scalar: it must average over the batch")
    return draws.seen


def _RandomDraws() -> Any:  # noqa: N802 - a class built on first use: torch is imported lazily
    """A dispatch mode that notes whether an operator drew random numbers (``seen``); on the meta
    device nothing is drawn from the generator, so the operators' tags are what tells."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class RandomDraws(TorchDispatchMode):
        seen = False

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.seen = self.seen or torch.Tag.nondeterministic_seeded in func.tags
            return func(*args, **(kwargs or {}))

    return RandomDraws()


def _meta_unsupported(exc: Exception) -> bool:
    """An error of the meta device itself (an operator it lacks, data-dependent code such as
    ``.item()``), which says nothing against the configuration."""
    return isinstance(exc, NotImplementedError) or "meta" in str(exc).lower()


def checkpoint_bytes(run: RunSpec, samples: int) -> int:
    """A lower bound on one checkpoint's size: weights, AdamW's moments and the data order."""
    return CHECKPOINT_BYTES_PER_PARAM * run.params + CHECKPOINT_BYTES_PER_SAMPLE * samples


def _can_write_in(folder: Path) -> bool:
    """Whether a file can be made in ``folder``: tried, not read from its mode bits, which root
    ignores and which say nothing of a read-only file system."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def _writable_home(folder: Path, what: str, fix: str) -> Path:
    """The existing folder ``folder`` is (or will be made) in; PreflightError naming ``what`` and ``fix``
    unless it can be written."""
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir() or not _can_write_in(existing):
        raise PreflightError(f"{what} {folder} cannot be written ({existing} is not a writable folder): {fix}")
    return existing


def writable_checkpoints(policy: CheckpointPolicy, runs: Collection[RunSpec] = ()) -> Path:
    """The existing folder the checkpoint folder is (or will be made) in; PreflightError unless it can be
    written (`flops-fit train-run` asks too: a run failed on it stayed failed), or where a file takes the name
    of one of ``runs``' own folders in it (the run trained to its first checkpoint, then failed with 'File exists'
    and the advice to free space)."""
    home = _writable_home(Path(policy.directory), "checkpoint folder",
                          "choose another checkpoint_dir (--checkpoint-dir), or checkpoint_seconds=0")
    names = dict.fromkeys(name for r in runs for name in (r.run_id, r.family if r.schedule == "wsd" else ""))
    for name in filter(None, names):
        if (folder := policy.run_dir(name)).exists() and not folder.is_dir():
            raise PreflightError(f"{folder} is a file, where the run's checkpoints go into a folder of that name: move "
                                 "the file away, then run again; nothing was trained")
    return home


def check_tracking(plan: Any, context: Context) -> None:
    """The trackers' folder can be made and written, and W&B takes the project name (by default the sweep
    folder's): otherwise the backends failed to open their runs, warned and were switched off, and the
    sweep trained untracked."""
    if context.tracking is None:
        return
    if "wandb" in context.tracking.backends and context.tracking.options.experiment is None:
        check_wandb_project(context.tracking.experiment, "the sweep folder's name", PreflightError,
                            " (or name the project: [tracking] experiment = \"...\")")
    _writable_home(Path(context.tracking.dir), "tracking folder",
                   "choose another [tracking] dir, or train untracked (--tracking off)")


def _size(n: int) -> str:
    """Bytes in GB, or MB below one GB (two small sizes both read "0.02 GB")."""
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def _held_bytes(policy: CheckpointPolicy, runs: list[RunSpec]) -> int:
    """Bytes the runs' own checkpoints already take in the folder: a resumed run prunes them as it writes,
    so they are room for it (a resume whose run held two was refused for want of three)."""
    folders = (policy.run_dir(r.run_id) for r in runs)
    return sum(p.stat().st_size for f in folders if f.is_dir() for p in f.rglob("*") if p.is_file())


def check_checkpoint_folder(plan: Any, context: Context) -> None:
    """The checkpoint folder (or the folder it will be made in) is writable and holds, for each of the
    ``concurrent`` largest runs, the checkpoints it holds at once: the newest ``keep`` and the one being
    written before the oldest is removed (room for one let every run fail at its third write)."""
    policy = context.checkpoints
    if policy is None:
        return
    folder = Path(policy.directory)
    existing = writable_checkpoints(policy, context.runs)
    sizes = sorted((checkpoint_bytes(r, context.samples.get(dataset_key(r), 0)) for r in context.runs),
                   reverse=True)
    held = policy.keep + 1
    need = held * sum(sizes[:context.concurrent])
    free = shutil.disk_usage(existing).free + _held_bytes(policy, context.runs)
    if need > free:
        raise PreflightError(
            f"checkpoint folder {folder} has {_size(free)} free (the runs' own checkpoints counted), but {min(context.concurrent, len(sizes))} "
            f"run(s) at once need at least {_size(need)} for {held} checkpoints each (the newest "
            f"{policy.keep} kept and the one being written): free space, choose "
            "another checkpoint_dir (--checkpoint-dir), train fewer runs at once (workers), or checkpoint_seconds=0"
        )


def check_train_command(plan: Any, context: Context) -> None:
    """The ``[train]`` command's program exists (on the PATH it starts with, or relative to its workdir),
    and so does the script of a ``python SCRIPT.py`` command."""
    trainer = plan.options.trainer
    program, workdir = trainer.command[0], trainer.workdir or "."
    if not Path(workdir).is_dir():  # it said the script was not in the missing folder, as if the script were wrong
        why = "is a file" if Path(workdir).exists() else "does not exist"
        raise PreflightError(f"[train] workdir {str(Path(workdir).resolve())!r} {why}: the script runs in that folder; "
                             "fix workdir (a relative one is read from the sweep file's folder), or leave it out")
    path = trainer.env.get("PATH", script_path())
    here = Path(workdir, program)
    on_path = shutil.which(program, path=path) is not None
    if not on_path and here.is_file() and not os.access(here, os.X_OK):  # found, but the system cannot start it
        raise PreflightError(f"[train] command: {str(here.resolve())!r} is not executable: chmod +x it, or start it "
                             f"with its interpreter (command = [\"sh\", {program!r}, ...] or [\"python\", ...])")
    if not on_path and Path(program).name == program and shutil.which(str(here)) is not None:
        # the system looks a bare name up on PATH only, never in the folder the script starts in
        raise PreflightError(f"[train] command: {program!r} is in {Path(workdir).resolve()} but not on PATH, so no run "
                             f"could start it: write it \"./{program}\" (or its full path) in command = [...]")
    if not on_path and shutil.which(str(here)) is None:
        raise PreflightError(f"[train] command: {program!r} is not a program on PATH nor in {Path(workdir).resolve()}: "
                             "fix command = [...] (or workdir)")
    script = trainer.command[1] if len(trainer.command) > 1 else ""
    if Path(program).name.startswith("python") and script.endswith(".py") and not (Path(workdir) / script).is_file():
        # python would fail every run the same way, each after its start-up: say it once, before any run
        raise PreflightError(f"[train] command: python's script {script!r} is not in {Path(workdir).resolve()}: "
                             "fix command = [...] (or workdir)")


def check_devices(plan: Any, context: Context) -> None:
    """Each run's device is on this machine: device = "cuda" where torch sees no GPU passed the
    parity gate (it runs on the CPU), then failed every run on its first tensor."""
    for device in sorted({run.device for run in context.runs}):
        if (absent := missing_device(device)) is not None:
            raise PreflightError(f"device {device!r} is not here: {absent}; set device = \"auto\" (a GPU where there "
                                 "is one) or \"cpu\", or sweep on the machine that has it (--skip-preflight where "
                                 "only the workers see it)")


def check_run_memory(plan: Any, context: Context) -> None:
    """Each run fits its device with the runs that train beside it: the plan checked one run
    alone; on CPU the ``concurrent`` runs share the memory available now."""
    if not context.runs:
        return
    first = context.runs[0]
    device = first.device if first.device != "auto" else ("cuda" if _cuda() else "cpu")
    check_memory(context.runs, api.model_info(first.model, host=context.host), device, context.concurrent)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


Check = Callable[[Any, Context], None]
# In order: the devices first (a look, no work), then the datasets (the model check runs on their
# held-out batch, the checkpoint check counts their samples).
CHECKS: list[Check] = [check_devices, check_datasets, check_losses, check_models, check_run_memory,
                       check_checkpoint_folder, check_tracking]
# a sweep trained by its [train] command: flops-fit builds no model nor dataset of it
EXTERNAL_CHECKS: list[Check] = [check_train_command, check_checkpoint_folder, check_tracking]


def preflight(plan: Any, runs: list[RunSpec] | None = None, *, checkpoints: CheckpointPolicy | None = None,
              concurrent: int = 1, host: Any = None, checks: list[Check] | None = None,
              tracking: Destination | None = None) -> Context:
    """Run ``checks`` (default ``CHECKS``) on ``runs`` (default: all of ``plan``'s); raise the
    first problem as a ``FlopsFitError``. ``concurrent``: how many runs train at once;
    ``tracking``: where a tracked sweep's trackers write."""
    runs = list(plan.runs if runs is None else runs)
    context = Context(runs, checkpoints, max(1, min(concurrent, len(runs))), host,
                      tracking=tracking)
    if runs:
        for check in CHECKS if checks is None else checks:
            check(plan, context)
    return context


def _distinct(runs: list[RunSpec], key: Callable[[RunSpec], Any]) -> dict[Any, RunSpec]:
    """The first run of each distinct ``key(run)``, in plan order."""
    out: dict[Any, RunSpec] = {}
    for run in runs:
        out.setdefault(key(run), run)
    return out
