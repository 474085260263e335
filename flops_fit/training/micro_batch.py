"""``micro_batch_size = "auto"``: the largest micro-batch that trains on this CUDA device.

Found once by a short probe (forward and backward at the whole batch, then halving on
``torch.cuda.OutOfMemoryError``) and remembered per (model, size, configuration, sequence
length, precision, device name) in ``$FLOPS_FIT_CACHE/micro_batch.json``, so the runs of a
sweep and later sweeps do not probe again. An entry says whether the device ran out of memory
(``limited``): if not, its size was only the batch it was probed with, and a larger batch
probes again. The probe's gradients are discarded. It runs one process's model alone, so a
sharded (FSDP) model, whose forward needs every rank, is refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from flops_fit.errors import PlanError
from flops_fit.files import cache_root, file_lock, write_atomically
from flops_fit.store.runs import RunSpec

# The probe runs one rank's model alone; a sharded model's forward needs every rank at once.
# (torch is imported inside the functions, so that the options can read this without it.)
FSDP_AUTO = ('micro_batch_size = "auto" cannot probe a sharded (parallel = "fsdp") model: every rank would '
             'have to run out of memory together; give micro_batch_size a number of rows')


def _key(spec: RunSpec, device: Any) -> str:
    import torch

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    config = json.dumps(spec.model_config, sort_keys=True, default=str)
    return f"{spec.model}|{spec.size}|{config}|{spec.seq_len}|{spec.precision}|{name}"


def _entry(value) -> tuple[int, bool]:
    """(rows known to fit, whether that is the device's limit); a bare number from before
    ``limited`` was kept says nothing of the limit."""
    if isinstance(value, dict):
        return int(value["fits"]), bool(value["limited"])
    return int(value), False


def largest_fitting_micro_batch(spec: RunSpec, model, loss_fn, rows: Callable[[int], dict[str, Any]],
                                input_key: str, device: Any, autocast) -> int:
    """The largest micro-batch (the batch size halved until it fits) for ``spec`` on ``device``;
    ``rows(k)`` gives a batch of k training rows to probe with."""
    import torch

    if spec.parallel == "fsdp" and spec.processes_per_run > 1:
        raise PlanError(FSDP_AUTO)
    path = cache_root() / "micro_batch.json"
    key = _key(spec, device)
    with file_lock(path.with_suffix(".lock")):
        known = json.loads(path.read_text()) if path.is_file() else {}
        fits, limited = _entry(known[key]) if key in known else (0, False)
        if limited or spec.batch_size <= fits:
            return min(fits, spec.batch_size)
        size = spec.batch_size
        while size > fits:  # a size known to fit ends the search
            try:
                batch = {k: v.to(device) for k, v in rows(size).items()}
                with autocast:
                    loss = loss_fn(model(batch[input_key]), batch)
                loss.backward()
                break
            except torch.cuda.OutOfMemoryError:
                if size == 1:
                    raise
                size //= 2
                limited = True
            finally:
                model.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
        size = max(size, fits)
        known[key] = {"fits": size, "limited": limited}
        write_atomically(path, lambda tmp: tmp.write_text(json.dumps(known, indent=1)))
    return size
