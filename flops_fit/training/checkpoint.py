"""In-run checkpoints: a run's full training state in one safetensors file, written atomically.

A checkpoint holds the model's parameters and buffers, the optimizer's state, and the loop's
state (``training.state.LoopState``: the step, units trained, curve, data order, each step's
loss, every RNG). Loading it into a freshly built model and optimizer continues the run bit for
bit on CPU. Nothing is pickled: tensors go into safetensors, everything else into its JSON
metadata, with a digest of every tensor so a corrupt file is detected rather than trained on.

Files are ``step-<N>.safetensors`` in one folder per run. A write goes to a temporary name,
is fsynced, renamed over the final name and the folder fsynced, so a kill at any instant
leaves the previous checkpoint intact; the newest ``keep`` are kept. ``Checkpointer.latest``
takes the newest checkpoint that validates and warns about each one it has to skip.

One ``Checkpointer`` per folder serves a run's checkpoints and a WSD family's stable phase
alike (``training.task``); under FSDP every rank writes its shards instead
(``training.sharded.ShardedCheckpointer``, the same interface).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import warnings
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from flops_fit.errors import CheckpointError, CheckpointWarning
from flops_fit.files import write_atomically
from flops_fit.store.runs import RunResult
from flops_fit.training.state import LoopState, Rng, Snapshot

FORMAT = 2
# Format 1 (before the ``training`` refactor) kept the data position and its RNG under
# "scalars" and the data order and step losses as "extra/" tensors: still read (``_from_format_1``).
OLDER = (1,)
PATTERN = re.compile(r"^step-(\d+)\.safetensors$")
SHARDED = re.compile(r"^step-(\d+)\.dcp(\.tmp)?$")  # a sharded checkpoint's folder (training.sharded)
RESULT = "result.json"
EXTERNAL = "trainer"  # a [train] command's own folder in a run's (training.external): spec, checkpoints, result
_MODEL, _OPTIM, _RNG, _LOOP = "model/", "optim/", "rng/", "loop/"


@dataclass(frozen=True)
class CheckpointPolicy:
    """Where and how often a run checkpoints: every ``seconds`` of training (0: never) into
    ``directory``/<run_id>/; ``weights_dir`` (if set) receives each finished run's weights
    as ``<run_id>.safetensors``. Plain values, so it travels to worker processes and Ray."""

    directory: str
    seconds: float = 600.0
    weights_dir: str | None = None
    keep: int = 2

    def run_dir(self, run_id: str) -> Path:
        return Path(self.directory) / run_id

    def weights_path(self, run_id: str) -> Path | None:
        return None if self.weights_dir is None else Path(self.weights_dir) / f"{run_id}.safetensors"


# ------------------------------------------------------------------ files
def checkpoint_path(directory: str | Path, step: int) -> Path:
    return Path(directory) / f"step-{step:09d}.safetensors"


def list_checkpoints(directory: str | Path, at_most: int | None = None) -> list[Path]:
    """The folder's checkpoint files (at step ``at_most`` or before, if given), newest (highest
    step) first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), directory / name) for name in os.listdir(directory) if (m := PATTERN.match(name))]
    return [path for step, path in sorted(found, reverse=True) if at_most is None or step <= at_most]


def checkpoint_step(path: str | Path) -> int:
    """The step a checkpoint file was saved at, from its name."""
    match = PATTERN.match(Path(path).name)
    if match is None:
        raise ValueError(f"{path} is not named like a checkpoint (step-<N>.safetensors)")
    return int(match.group(1))


class Checkpointer:
    """The checkpoints in ``folder`` (a run's, or a WSD family's stable phase): ``save`` the
    newest ``keep`` (only where ``writer``: one process of a run writes), ``load`` the newest
    that validates into a freshly built model and optimizer; a family's ``save_stable`` keeps what
    its branches need instead. ``run_id`` is checked on reading."""

    def __init__(self, folder: str | Path, run_id: str, *, keep: int = 2, writer: bool = True) -> None:
        self.folder, self.run_id, self.keep, self.writer = Path(folder), run_id, keep, writer

    def save(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: LoopState) -> None:
        if self.writer:
            self.save_snapshot(Snapshot(state, model.state_dict(), optimizer.state_dict()["state"]))

    def load(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> LoopState | None:
        """The newest valid checkpoint restored into ``model`` and ``optimizer``; its loop state, or None."""
        snapshot = self.latest()
        return snapshot.restore(model, optimizer) if snapshot else None

    def save_snapshot(self, snapshot: Snapshot) -> Path:
        """Write ``snapshot`` as ``step-<N>.safetensors``, atomically; prune all but the newest ``keep``."""
        path = write_checkpoint(self.folder, snapshot)
        for old in list_checkpoints(self.folder)[self.keep:]:
            old.unlink(missing_ok=True)
        return path

    def save_stable(self, snapshot: Snapshot, waypoints: Collection[int] = ()) -> None:
        """Save a WSD family's stable state (where ``writer``) and remove the saved ones before it
        that no branch needs any more: a family trains its branches in token order, so only a later
        batch's branches (at ``waypoints``) lie before it."""
        if self.writer:
            write_checkpoint(self.folder, snapshot)  # not pruned to the newest ``keep``: a waypoint may be older
            for path in list_checkpoints(self.folder, snapshot.loop.step - 1):
                if checkpoint_step(path) not in waypoints:
                    path.unlink(missing_ok=True)

    def latest(self, at_most: int | None = None) -> Snapshot | None:
        """The newest checkpoint (at step ``at_most`` or before, if given) that validates, or
        None; every newer one that does not is reported with a ``CheckpointWarning`` (and left
        for the next save to prune)."""
        for path in list_checkpoints(self.folder, at_most):
            try:
                return read_checkpoint(path, run_id=self.run_id)
            except CheckpointError as exc:
                warnings.warn(f"{exc}; falling back to an earlier checkpoint", CheckpointWarning, stacklevel=2)
        return None

    def save_weights(self, path: str | Path, model: torch.nn.Module) -> None:
        if self.writer:
            save_weights(path, model)


def stable_start(cooldown_start: int, held: Snapshot | None, saved: Checkpointer | None) -> Snapshot | None:
    """The furthest stable state of a WSD family at or before a branch's ``cooldown_start``: the one
    held in memory, or a newer one saved in the family's folder (an earlier batch's), read only
    then; None: the branch trains its stable phase from scratch."""
    held = held if held is not None and held.loop.step <= cooldown_start else None
    files = list_checkpoints(saved.folder, cooldown_start) if saved else []
    if files and (held is None or checkpoint_step(files[0]) > held.loop.step):
        found = saved.latest(at_most=cooldown_start)
        return found if found is not None and (held is None or found.loop.step > held.loop.step) else held
    return held


def write_checkpoint(directory: str | Path, snapshot: Snapshot) -> Path:
    """``snapshot`` as ``step-<N>.safetensors`` in ``directory``, written atomically."""
    state = snapshot.loop
    tensors = {_MODEL + k: _cpu_copy(v) for k, v in snapshot.model.items()}
    for index, values in snapshot.optimizer.items():
        for key, value in values.items():
            if value is not None:
                tensors[f"{_OPTIM}{index}/{key}"] = _cpu_copy(torch.as_tensor(value))
    tensors.update({_RNG + k: _cpu_copy(v) for k, v in state.rng.tensors.items()})
    tensors[_LOOP + "data_order"] = torch.from_numpy(np.ascontiguousarray(state.data_order)).clone()
    tensors[_LOOP + "losses"] = _cpu_copy(state.losses)
    header = {"run_id": state.run_id, "step": state.step, "tokens": state.tokens, "curve": state.curve,
              "data_rng": state.data_rng, "data_pos": state.data_pos, "rng": state.rng.values, "format": FORMAT}
    metadata = {"flops_fit": json.dumps(header), "digest": _digest(tensors)}
    directory = Path(directory)
    final = checkpoint_path(directory, state.step)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _write_safetensors(final, tensors, metadata)
    except Exception as error:  # OSError, or safetensors' own error around one (a full disk)
        if not isinstance(error, OSError) and type(error).__name__ != "SafetensorError":
            raise
        why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise CheckpointError(
            f"checkpoint {final.name} could not be written in {directory} ({why}): free space there, or move "
            "the checkpoints (checkpoint_dir, --checkpoint-dir); `--resume --retry-failed` then continues the "
            "run from its newest checkpoint") from error
    return final


def read_checkpoint(path: str | Path, *, run_id: str | None = None) -> Snapshot:
    """Read and validate one checkpoint; ``run_id`` (if given) must match the one it holds.
    Raises ``CheckpointError`` naming what is wrong."""
    from safetensors import safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no iteration
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types for bad files
        raise CheckpointError(f"{path} is not a readable safetensors file ({exc})") from None
    if "flops_fit" not in metadata or "digest" not in metadata:
        raise CheckpointError(f"{path} is not a flops-fit checkpoint (no state in its metadata)")
    if _digest(tensors) != metadata["digest"]:
        raise CheckpointError(f"{path} is corrupt: its tensors do not match their digest")
    header = json.loads(metadata["flops_fit"])
    version = header.pop("format", None)
    if version == 1:
        try:
            header, tensors = _from_format_1(header, tensors)
        except KeyError as exc:
            raise CheckpointError(f"{path} is a format-1 checkpoint without its {exc}") from None
    elif version != FORMAT:
        raise CheckpointError(f"{path} has an unknown checkpoint format ({version!r}; this flops-fit reads "
                              f"{', '.join(map(str, (*OLDER, FORMAT)))}): upgrade flops-fit, or delete the run's "
                              "checkpoints to train it from the start")
    if run_id is not None and header["run_id"] != run_id:
        raise CheckpointError(f"{path} belongs to run {header['run_id']}, not {run_id}")
    rng = Rng(header.pop("rng"), {k[len(_RNG):]: v for k, v in tensors.items() if k.startswith(_RNG)})
    state = LoopState(**header, data_order=tensors[_LOOP + "data_order"].numpy().copy(),
                      losses=tensors[_LOOP + "losses"], rng=rng)
    optimizer: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith(_OPTIM):
            index, name = key[len(_OPTIM):].split("/", 1)
            optimizer.setdefault(int(index), {})[name] = value
    return Snapshot(state, {k[len(_MODEL):]: v for k, v in tensors.items() if k.startswith(_MODEL)}, optimizer)


def _from_format_1(header: dict, tensors: dict[str, torch.Tensor]) -> tuple[dict, dict[str, torch.Tensor]]:
    """A format-1 checkpoint's header and tensors in format 2's names (the same values)."""
    scalars = header.pop("scalars", {})
    header = {**header, "data_rng": scalars["data_rng"], "data_pos": scalars["data_pos"]}
    tensors = {(_LOOP + k[len("extra/"):] if k.startswith("extra/") else k): v for k, v in tensors.items()}
    return header, tensors


def remove_checkpoints(directory: str | Path) -> None:
    """Delete a run's checkpoint folder (its result is stored): its checkpoints, sharded ones and
    leftovers of interrupted writes included."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    for name in os.listdir(directory):
        if SHARDED.match(name) or name == EXTERNAL:
            shutil.rmtree(directory / name, ignore_errors=True)
        elif PATTERN.match(name) or name == RESULT or name.endswith(".tmp"):
            (directory / name).unlink(missing_ok=True)
    try:
        directory.rmdir()
    except OSError:  # something else lives there; leave it
        pass


def save_weights(path: str | Path, model: torch.nn.Module | dict[str, torch.Tensor]) -> Path:
    """A finished model's parameters and buffers (or a state dict) as a plain safetensors file, atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = model if isinstance(model, dict) else model.state_dict()
    _write_safetensors(path, {k: _cpu_copy(v) for k, v in state.items()})
    return path


def save_result(directory: str | Path, result: RunResult) -> Path:
    """A finished run's result beside its checkpoints (``result.json``, written atomically),
    until the driver has stored it: a run finished inside a task that dies later (a WSD
    family's earlier branches) is recovered on resume instead of trained again."""
    path = Path(directory) / RESULT
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda temporary: temporary.write_text(json.dumps(result.to_dict())))
    return path


def load_result(directory: str | Path, run_id: str) -> RunResult | None:
    """The result ``save_result`` left for ``run_id``, or None (none, unreadable, or another run's)."""
    path = Path(directory) / RESULT
    if not path.is_file():
        return None
    try:
        result = RunResult(**json.loads(path.read_text()))
        _check_result(result)
    except (OSError, ValueError, TypeError) as exc:  # written atomically: damaged from outside
        warnings.warn(f"the result left at {path} is unreadable ({type(exc).__name__}: {str(exc)[:80]}): run "
                      f"{run_id} is trained again from its checkpoint", CheckpointWarning, stacklevel=2)
        return None
    return result if result.run_id == run_id else None


def _check_result(result: RunResult) -> None:
    """TypeError/ValueError unless ``result`` holds values of the kinds a run's result has: a result file
    damaged into other JSON ("loss": "abc") was a traceback in the driver, or was stored as the run's result."""
    def number(value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    if result.status not in ("done", "failed"):
        raise ValueError(f"status {result.status!r}")
    if result.status == "done" and not (number(result.loss) and math.isfinite(result.loss) and result.loss > 0):
        raise ValueError(f"a finished run's loss {result.loss!r}")
    for name in ("loss", "flops", "bpb", "top1_error", "epochs"):
        if not number(getattr(result, name)):
            raise TypeError(f"{name} {getattr(result, name)!r}")
    for name in ("tokens", "steps"):
        if not isinstance(getattr(result, name), int) or isinstance(getattr(result, name), bool) or \
                getattr(result, name) < 0:
            raise TypeError(f"{name} {getattr(result, name)!r}")
    if not (isinstance(result.curve, list) and all(isinstance(p, list) and len(p) == 2 and all(map(number, p))
                                                   for p in result.curve)):
        raise TypeError(f"curve {str(result.curve)[:40]}")
    if not (isinstance(result.timings, dict) and all(map(number, result.timings.values()))):
        raise TypeError(f"timings {str(result.timings)[:40]}")
    if not (isinstance(result.device, str) and isinstance(result.error, (str, type(None)))
            and (result.unique_tokens is None or number(result.unique_tokens))):
        raise TypeError("device, error or unique_tokens")


def _write_safetensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    from safetensors.torch import save_file

    write_atomically(path, lambda temporary: save_file(tensors, str(temporary), metadata=metadata))


def _cpu_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU copy that shares memory with nothing (tied weights are saved twice)."""
    return tensor.detach().to("cpu", copy=True).contiguous()


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for key in sorted(tensors):
        t = tensors[key]
        h.update(f"{key}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()
