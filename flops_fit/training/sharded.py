"""The checkpointer's sharded backend: an FSDP2 run's checkpoints, written by every rank.

Every rank writes its shards through ``torch.distributed.checkpoint`` in safetensors
(``HuggingFaceStorageWriter``: no pickled metadata) into ``step-N.dcp.tmp/``; rank 0 adds the
loop's state (the same file a one-process checkpoint is, without tensors of the model) and
renames the folder to ``step-N.dcp`` once all are written: one rename commits it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

from flops_fit.files import fsync
from flops_fit.training.checkpoint import (
    SHARDED,
    Checkpointer,
    checkpoint_path,
    read_checkpoint,
    save_weights,
    write_checkpoint,
)
from flops_fit.training.state import LoopState, Snapshot


class ShardedCheckpointer(Checkpointer):
    """``Checkpointer`` for a sharded model: every rank calls ``save`` and ``load`` (collectives)."""

    def save(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: LoopState) -> None:
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import HuggingFaceStorageWriter

        final = self.folder / f"step-{state.step:09d}.dcp"
        temporary = final.with_name(final.name + ".tmp")
        if self.writer:
            shutil.rmtree(temporary, ignore_errors=True)
            (temporary / "shards").mkdir(parents=True)
        dist.barrier()
        dcp.save(_sharded_state(model, optimizer),
                 storage_writer=HuggingFaceStorageWriter(str(temporary / "shards"), save_distributed=True))
        dist.barrier()
        if self.writer:  # the loop's state and rank 0's RNGs, then the commit: one rename
            write_checkpoint(temporary, Snapshot(state, {}, {}))
            fsync(temporary / "shards")
            shutil.rmtree(final, ignore_errors=True)
            os.replace(temporary, final)
            fsync(self.folder)
            for old in sharded_checkpoints(self.folder)[self.keep:]:
                shutil.rmtree(old, ignore_errors=True)
        dist.barrier()

    def load(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> LoopState | None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import HuggingFaceStorageReader
        from torch.distributed.checkpoint.state_dict import set_state_dict

        found = sharded_checkpoints(self.folder)
        if not found:
            return None
        newest = found[0]
        saved = read_checkpoint(checkpoint_path(newest, int(SHARDED.match(newest.name).group(1))), run_id=self.run_id)
        state = _sharded_state(model, optimizer)
        dcp.load(state, storage_reader=HuggingFaceStorageReader(str(newest / "shards")))
        model_state, optimizer_state = _unflatten(state, optimizer, model)
        set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)
        return saved.loop

    def save_weights(self, path: str | Path, model: torch.nn.Module) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.writer:
            save_weights(path, full)


def sharded_checkpoints(folder: Path) -> list[Path]:
    """A run's committed FSDP checkpoints (``step-N.dcp`` folders), newest first."""
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := SHARDED.match(p.name)) and not m.group(2)]
    return [path for _, path in sorted(found, reverse=True)]


def _sharded_state(model, optimizer) -> dict[str, Any]:
    """The model's and optimizer's tensors (this rank's shards), flat under string keys;
    the optimizer state is created first if the run has not stepped yet."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    tied = _tied(model)
    flat = {f"model/{k}": v for k, v in model_state.items() if k not in tied}
    for name, values in optimizer_state["state"].items():
        for key, value in values.items():
            flat[f"optim/{name}/{key}"] = value
    return flat


def _tied(model) -> dict[str, str]:
    """Names of parameters tied to an earlier one (a head sharing the embedding) -> that one's
    name: written once, under the first name, and loaded into both."""
    first: dict[int, str] = {}
    return {name: first[id(p)] for name, p in model.named_parameters(remove_duplicate=False)
            if first.setdefault(id(p), name) != name}


def _unflatten(flat: dict[str, Any], optimizer, model) -> tuple[dict[str, Any], dict[str, Any]]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    _, current = get_state_dict(model, optimizer)
    model_state = {k[len("model/"):]: v for k, v in flat.items() if k.startswith("model/")}
    model_state.update({name: model_state[first] for name, first in _tied(model).items()})
    state: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        if key.startswith("optim/"):
            name, _, field = key[len("optim/"):].rpartition("/")
            state.setdefault(name, {})[field] = value
    return model_state, {"state": state, "param_groups": current["param_groups"]}
