"""In-run checkpoints: a run's full training state in one safetensors file, written atomically.

A checkpoint holds the model's parameters and buffers, the optimizer's state, and a
``TrainState``: the step (the schedule's position), tokens seen, the data order, every RNG
the run uses, the loop's partial sums and the curve so far. Loading it into a freshly built
model and optimizer continues the run bit for bit on CPU. Nothing is pickled: tensors go
into safetensors, everything else into its JSON metadata, with a digest of every tensor so
a corrupt file is detected rather than trained on.

Files are ``step-<N>.safetensors`` in one folder per run. A write goes to a temporary name,
is fsynced, renamed over the final name and the folder fsynced, so a kill at any instant
leaves the previous checkpoint intact; the newest ``keep`` are kept. ``load_latest`` takes
the newest checkpoint that validates and warns about each one it has to skip.

The API is small on purpose so that a run can also start from another run's state (e.g.
cooldown runs branched from one stable-phase checkpoint): ``read_checkpoint(path)`` then
``checkpoint.restore(model, optimizer)``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flops_fit.errors import CheckpointError, CheckpointWarning
from flops_fit.files import write_atomically
from flops_fit.store.runs import RunResult

FORMAT = 1
PATTERN = re.compile(r"^step-(\d+)\.safetensors$")
SHARDED = re.compile(r"^step-(\d+)\.dcp(\.tmp)?$")  # a sharded checkpoint's folder (training.distributed)
RESULT = "result.json"
_MODEL, _OPTIM, _RNG, _EXTRA = "model/", "optim/", "rng/", "extra/"


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


@dataclass
class TrainState:
    """What besides the model and optimizer a run needs to continue exactly.

    ``step`` is the count of optimizer steps done (the LR schedule's position), ``tokens``
    the units trained, ``curve`` the ``[tokens, loss]`` points so far. ``scalars`` holds the
    loop's JSON-able values (data position and its RNG state, partial sums' counts, ...),
    ``tensors`` its tensors (the data order, a running loss sum); both are the trainer's to
    define. ``rng`` is filled by ``capture_rng`` when saving.
    """

    run_id: str
    step: int
    tokens: int
    curve: list[list[float]] = field(default_factory=list)
    scalars: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    rng: dict[str, Any] = field(default_factory=dict)


@dataclass
class Checkpoint:
    """A validated checkpoint read from ``path``: its state and the tensors to restore."""

    path: Path
    state: TrainState
    model: dict[str, torch.Tensor]
    optimizer: dict[int, dict[str, torch.Tensor]]
    rng_tensors: dict[str, torch.Tensor]

    def restore(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                *, rng: bool = True) -> TrainState:
        """Load the weights (and optimizer state, and every RNG unless ``rng=False``) into
        freshly built objects of the same shapes; return the state to continue from."""
        model.load_state_dict(self.model, strict=True)
        if optimizer is not None:
            groups = optimizer.state_dict()["param_groups"]
            optimizer.load_state_dict({"state": self.optimizer, "param_groups": groups})
        if rng:
            restore_rng(self.state.rng, self.rng_tensors)
        return self.state


# ------------------------------------------------------------------ RNG
def capture_rng() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Every global RNG's state: JSON-able values and tensors."""
    values: dict[str, Any] = {"python": _jsonable(random.getstate())}
    legacy = np.random.get_state()
    values["numpy"] = {"pos": int(legacy[2]), "has_gauss": int(legacy[3]), "gauss": float(legacy[4])}
    tensors = {"torch": torch.get_rng_state(), "numpy_keys": torch.from_numpy(legacy[1].astype(np.int64))}
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda/{i}"] = state
    return values, tensors


def restore_rng(values: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    random.setstate(_tupled(values["python"]))
    np_state = values["numpy"]
    np.random.set_state(("MT19937", tensors["numpy_keys"].numpy().astype(np.uint32), np_state["pos"],
                         np_state["has_gauss"], np_state["gauss"]))
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[k] for k in sorted((k for k in tensors if k.startswith("cuda/")), key=lambda k: int(k[5:]))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda[:torch.cuda.device_count()])


def _jsonable(value: Any) -> Any:
    return [_jsonable(v) for v in value] if isinstance(value, (tuple, list)) else value


def _tupled(value: Any) -> Any:
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value


# ------------------------------------------------------------------ files
def checkpoint_path(directory: str | Path, step: int) -> Path:
    return Path(directory) / f"step-{step:09d}.safetensors"


def list_checkpoints(directory: str | Path) -> list[Path]:
    """The folder's checkpoint files, newest (highest step) first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), directory / name) for name in os.listdir(directory) if (m := PATTERN.match(name))]
    return [path for _, path in sorted(found, reverse=True)]


def save_checkpoint(directory: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                    state: TrainState, *, keep: int = 2) -> Path:
    """Write ``state`` with the model's and optimizer's tensors as ``step-<N>.safetensors``
    in ``directory``, atomically; delete all but the newest ``keep`` checkpoints."""
    return save_state(directory, model.state_dict(), None if optimizer is None else optimizer.state_dict(),
                      state, keep=keep)


def save_state(directory: str | Path, model_state: dict[str, torch.Tensor], optimizer_state: dict[str, Any] | None,
               state: TrainState, *, keep: int = 2) -> Path:
    """``save_checkpoint`` from state dicts (a state captured earlier, e.g. a WSD stable phase);
    the RNGs saved are the ones current now."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng_values, rng_tensors = capture_rng()
    tensors = {_MODEL + k: _cpu_copy(v) for k, v in model_state.items()}
    if optimizer_state is not None:
        for index, values in optimizer_state["state"].items():
            for key, value in values.items():
                if value is None:
                    continue
                tensors[f"{_OPTIM}{index}/{key}"] = _cpu_copy(torch.as_tensor(value))
    tensors.update({_RNG + k: _cpu_copy(v) for k, v in rng_tensors.items()})
    tensors.update({_EXTRA + k: _cpu_copy(v) for k, v in state.tensors.items()})
    header = {k: v for k, v in asdict(state).items() if k != "tensors"}
    header.update(rng=rng_values, format=FORMAT)
    metadata = {"flops_fit": json.dumps(header), "digest": _digest(tensors)}
    final = checkpoint_path(directory, state.step)
    _write_safetensors(final, tensors, metadata)
    for old in list_checkpoints(directory)[keep:]:
        old.unlink(missing_ok=True)
    return final


def read_checkpoint(path: str | Path, *, run_id: str | None = None) -> Checkpoint:
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
    if header.pop("format", None) != FORMAT:
        raise CheckpointError(f"{path} has an unknown checkpoint format")
    if run_id is not None and header["run_id"] != run_id:
        raise CheckpointError(f"{path} belongs to run {header['run_id']}, not {run_id}")
    extra = {k[len(_EXTRA):]: v for k, v in tensors.items() if k.startswith(_EXTRA)}
    state = TrainState(tensors=extra, **header)
    optimizer: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith(_OPTIM):
            index, name = key[len(_OPTIM):].split("/", 1)
            optimizer.setdefault(int(index), {})[name] = value
    return Checkpoint(
        path=path, state=state, optimizer=optimizer,
        model={k[len(_MODEL):]: v for k, v in tensors.items() if k.startswith(_MODEL)},
        rng_tensors={k[len(_RNG):]: v for k, v in tensors.items() if k.startswith(_RNG)},
    )


def load_latest(directory: str | Path, *, run_id: str | None = None) -> Checkpoint | None:
    """The newest checkpoint in ``directory`` that validates, or None; every newer one that
    does not is reported with a ``CheckpointWarning`` (and left for the next save to prune)."""
    for path in list_checkpoints(directory):
        try:
            return read_checkpoint(path, run_id=run_id)
        except CheckpointError as exc:
            warnings.warn(f"{exc}; falling back to an earlier checkpoint", CheckpointWarning, stacklevel=2)
    return None


def remove_checkpoints(directory: str | Path) -> None:
    """Delete a run's checkpoint folder (its result is stored): its checkpoints, sharded ones and
    leftovers of interrupted writes included."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    for name in os.listdir(directory):
        if SHARDED.match(name):
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
    try:
        result = RunResult(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return result if result.run_id == run_id else None


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
