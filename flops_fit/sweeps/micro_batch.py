"""``micro_batch_size = "auto"``: the largest micro-batch that trains on this CUDA device.

Found once by a short probe (forward and backward at the whole batch, then halving on
``torch.cuda.OutOfMemoryError``) and remembered per (model, size, configuration, sequence
length, precision, device name) in ``$FLOPS_FIT_CACHE/micro_batch.json``, so the runs of a
sweep and later sweeps do not probe again. The probe's gradients are discarded.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import torch

from flops_fit.files import cache_root, file_lock, write_atomically
from flops_fit.store.runs import RunSpec


def _key(spec: RunSpec, device: torch.device) -> str:
    name = torch.cuda.get_device_name(device)
    config = json.dumps(spec.model_config, sort_keys=True, default=str)
    return f"{spec.model}|{spec.size}|{config}|{spec.seq_len}|{spec.precision}|{name}"


def largest_fitting_micro_batch(spec: RunSpec, model, loss_fn, rows: Callable[[int], dict[str, torch.Tensor]],
                                input_key: str, device: torch.device, autocast) -> int:
    """The largest micro-batch (the batch size halved until it fits) for ``spec`` on ``device``;
    ``rows(k)`` gives a batch of k training rows to probe with."""
    path = cache_root() / "micro_batch.json"
    key = _key(spec, device)
    with file_lock(path.with_suffix(".lock")):
        known = json.loads(path.read_text()) if path.is_file() else {}
        if key in known:
            return min(int(known[key]), spec.batch_size)
        size = spec.batch_size
        while True:
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
            finally:
                model.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
        known[key] = size
        write_atomically(path, lambda tmp: tmp.write_text(json.dumps(known, indent=1)))
    return size


__all__ = ["largest_fitting_micro_batch"]
