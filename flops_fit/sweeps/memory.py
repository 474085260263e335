"""A run's training memory per process, estimated before anything is built, and the device it must fit.

Per process: fp32 parameters, their gradients and AdamW's two moments (16 bytes a parameter;
bf16 autocast keeps fp32 master weights), divided by the processes with ``parallel = "fsdp"``,
plus each step's training loss the loop keeps (4 bytes a step: terabytes for a tiny model at a
huge budget), plus the activations one micro-batch keeps for backward (the model entry's
``activation_memory``, fp32; under bf16 autocast most are kept in bf16, so the estimate is an
upper bound there), plus OVERHEAD for allocator slack and backward's temporaries, plus the
runtime's own (RUNTIME: thread pools and kernel workspaces on CPU, measured at about 150 MiB
with benchmarks/bench_memory.py; the CUDA context and cuBLAS workspace on a GPU). A model entry that does
not estimate its activations gives None: the plan says "unknown", and refuses only a run whose
state alone cannot fit.

The device: on CUDA its memory (per process); on CPU the memory available now, shared by the
processes training at once (``workers`` runs of ``processes_per_run`` processes each).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from flops_fit.errors import PlanError
from flops_fit.plugin.contracts import ModelEntry
from flops_fit.store.runs import RunSpec

STATE_BYTES = 16  # fp32 weight + gradient + AdamW's exp_avg and exp_avg_sq, per parameter
STEP_BYTES = 4  # the loop keeps each step's training loss (fp32, on the device) for the curve
OVERHEAD = 0.1  # allocator slack, backward's and the optimizer's temporaries, the batch itself
RUNTIME = {"cpu": 160 * 2**20, "cuda": 768 * 2**20}


@dataclass(frozen=True)
class Memory:
    """Bytes per process: ``state`` (weights, gradients, optimizer), ``activations`` of one
    micro-batch, and the ``runtime``'s own."""

    state: int
    activations: int
    runtime: int = RUNTIME["cpu"]
    steps: int = 0  # bytes of the per-step training losses the loop keeps

    @property
    def total(self) -> int:
        return int((self.state + self.activations) * (1 + OVERHEAD)) + self.runtime + self.steps


def micro_rows(spec: RunSpec) -> int:
    """Rows one process puts through one forward pass: its slice of the batch, split by
    ``micro_batch_size`` ("auto" probes the device at run time: the smallest, 1, is what must fit)."""
    share = -(-spec.batch_size // spec.processes_per_run)
    size = spec.micro_batch_size
    if size == "auto":
        return 1
    return min(share, int(size)) if size is not None else share


def run_memory(spec: RunSpec, entry: ModelEntry, device: str = "cpu") -> Memory | None:
    """The estimate for one run on ``device`` ("cpu", "cuda[:N]"), or None when the model does not
    estimate its activations."""
    activations = entry.activation_bytes(spec.size, micro_rows(spec), spec.seq_len, **spec.model_config)
    if activations is None:
        return None
    return dataclasses.replace(state_memory(spec, device), activations=activations)


def state_memory(spec: RunSpec, device: str = "cpu") -> Memory:
    """The weights, gradients and optimizer state, and the steps' losses (no activations): what any
    model needs, whether or not it estimates its activations."""
    shards = spec.processes_per_run if spec.parallel == "fsdp" else 1
    return Memory(state=-(-STATE_BYTES * spec.params // shards), activations=0,
                  runtime=RUNTIME["cuda" if device.startswith("cuda") else "cpu"], steps=STEP_BYTES * spec.steps)


def device_memory(device: str, concurrent: int = 1) -> tuple[int | None, str]:
    """(bytes one process may use, what that is), None when it cannot be told."""
    if device.startswith("cuda"):
        import torch

        if (absent := missing_device(device)) is not None:
            return None, absent
        props = torch.cuda.get_device_properties(torch.device(device).index or 0)
        return int(props.total_memory), f"{props.name}'s {props.total_memory / 2**30:.1f} GiB"
    available = _available_ram()
    if available is None:
        return None, "unknown available memory"
    share = available // max(1, concurrent)
    at_once = f" / {concurrent} processes at once" if concurrent > 1 else ""
    return share, f"{available / 2**30:.1f} GiB of available RAM{at_once}"


def missing_device(device: str) -> str | None:
    """Why the CUDA ``device`` ("cuda", "cuda:N") is not on this machine, or None where it is (or for
    "cpu" and "auto"). A run on a device that is not there fails on its first tensor."""
    if not device.startswith("cuda"):
        return None
    import torch

    if not torch.cuda.is_available():
        built = "" if torch.version.cuda else f" (torch {torch.__version__} is built without CUDA)"
        return f"torch sees no CUDA device on this machine{built}"
    index, count = torch.device(device).index or 0, torch.cuda.device_count()
    if index >= count:
        return f"this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
    return None


def _available_ram() -> int | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(runs: list[RunSpec], entry: ModelEntry, device: str, concurrent: int = 1) -> None:
    """PlanError naming the largest run that cannot fit its device, and the fixes. On CPU each of
    the ``concurrent`` runs is ``processes_per_run`` processes sharing the memory."""
    limit, what = device_memory(device, concurrent * max(spec.processes_per_run for spec in runs))
    if limit is None:
        return
    for spec in sorted(runs, key=lambda r: -r.params):
        floor = state_memory(spec, device)  # what any model of this size needs, its activations aside
        if floor.steps > limit:  # a tiny model at a huge budget: nothing the fixes below set shrinks its steps
            raise PlanError(
                f"run size {spec.size} at budget {spec.budget:.3g} trains {spec.steps:,} optimizer steps, whose "
                f"training losses alone ({gib(floor.steps)}, kept for its curve) are more than {what}: plan fewer "
                "steps (a smaller budget, larger sizes, or a larger batch_size)")
        memory = run_memory(spec, entry, device)
        if memory is None:  # activations unknown: the state alone is still a floor the device must hold
            if floor.total <= limit:
                continue
            raise PlanError(
                f"run size {spec.size} at budget {spec.budget:.3g} needs at least {gib(floor.total)} per process "
                f"for its weights, gradients and AdamW state alone (model {spec.model!r} does not estimate its "
                f"activations), more than {what}; set processes_per_run with parallel = \"fsdp\" (shard the "
                "state), or plan smaller sizes (max_size)")
        if memory.total <= limit:
            continue
        raise PlanError(
            f"run size {spec.size} at budget {spec.budget:.3g} needs about {gib(memory.total)} per process "
            f"({gib(memory.state)} weights, gradients and AdamW state + {gib(memory.activations)} activations of a "
            f"micro-batch of {micro_rows(spec)}), more than {what}; set micro_batch_size (smaller micro-batches), "
            "processes_per_run (split the batch), or parallel = \"fsdp\" (shard the state)")


def gib(value: int | float) -> str:
    return f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / 2**20:.1f} MiB"


__all__ = ["Memory", "check_memory", "device_memory", "gib", "micro_rows", "missing_device", "run_memory",
           "state_memory"]
