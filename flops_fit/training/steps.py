"""The steps of the loop: the optimizer, one step's micro-batches and their size, the held-out evaluation."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from flops_fit.store.runs import RunSpec
from flops_fit.training.data import eval_indices, gather
from flops_fit.training.micro_batch import largest_fitting_micro_batch
from flops_fit.training.strategies import OneProcess, sum_over


def lr_multipliers(model: torch.nn.Module) -> dict[torch.nn.Parameter, float]:
    """Each parameter's learning-rate factor from the model's ``lr_multipliers()`` (names -> factors,
    e.g. muP's), read from the model itself under a DDP / FSDP / compile wrapper; {} without one."""
    inner = model
    while True:
        wrapped = getattr(inner, "_orig_mod", None)  # torch.compile (which forwards attribute look-ups)
        if wrapped is None and not hasattr(inner, "lr_multipliers"):
            wrapped = getattr(inner, "module", None)  # DistributedDataParallel, FSDP
        if not isinstance(wrapped, torch.nn.Module):
            break
        inner = wrapped
    if not hasattr(inner, "lr_multipliers"):
        return {}
    factors = inner.lr_multipliers()
    named = dict(inner.named_parameters())
    for name, factor in factors.items():
        if name not in named:
            raise ValueError(f"lr_multipliers() names {name!r}, which is not a parameter of the model")
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"lr_multipliers() gives {name!r} the factor {factor!r}: it must be a finite positive "
                             "number")
    return {named[name]: float(factor) for name, factor in factors.items()}


def make_optimizer(model: torch.nn.Module, spec: RunSpec, device: torch.device) -> torch.optim.AdamW:
    """AdamW with no weight decay on 1-D parameters; parameters with a learning-rate factor
    (``lr_multipliers``) go into groups carrying it as ``lr_scale``, their weight decay divided
    by it so that the decay per step (lr x weight decay) stays the base rate's."""
    factors = lr_multipliers(model)
    groups: dict[tuple[bool, float], dict] = {(True, 1.0): {"params": [], "weight_decay": spec.weight_decay},
                                              (False, 1.0): {"params": [], "weight_decay": 0.0}}
    for p in model.parameters():
        if p.requires_grad:
            decay, scale = p.ndim >= 2, factors.get(p, 1.0)
            if (decay, scale) not in groups:
                groups[decay, scale] = {"params": [], "lr": spec.lr * scale, "lr_scale": scale,
                                        "weight_decay": spec.weight_decay / scale if decay else 0.0}
            groups[decay, scale]["params"].append(p)
    groups = list(groups.values())
    return torch.optim.AdamW(
        groups, lr=spec.lr, betas=(spec.beta1, spec.beta2), eps=spec.eps,
        **({"fused": True} if device.type == "cuda" else {"foreach": True}),
    )


def accumulate(model, loss_fn, batch: dict[str, torch.Tensor], input_key: str, micro: int, autocast,
               no_sync: Callable[[], Any] = contextlib.nullcontext, weight: float = 1.0,
               passes: int | None = None) -> torch.Tensor:
    """Forward and backward one optimizer step's rows in micro-batches of ``micro`` rows; the
    gradients add up to the whole batch's. Returns the step's loss (detached).

    Each micro-batch's loss is weighted by its share of the rows, so the summed gradient is the
    gradient of the whole batch's mean loss: exact for a loss that averages equally many terms
    per row (the built-in losses on fixed-length windows and images). ``no_sync`` is entered for
    every micro-batch but the last (DDP's ``model.no_sync``: one all-reduce per step); a rank of
    a data-parallel run passes its own slice of the global batch as ``batch`` and the ``weight``
    that makes the ranks' averaged gradients the whole batch's (its rows x ranks / the batch's rows).
    Ranks whose forward passes are collective (FSDP) make the same number of ``passes``: the rows
    in that many near-equal micro-batches, a pass without rows running one row at weight 0.
    """
    rows = batch[input_key].shape[0]
    total = torch.zeros((), device=batch[input_key].device)
    if passes is None:
        bounds = [(start, min(start + micro, rows)) for start in range(0, rows, micro)]
    else:
        edges = [rows * i // passes for i in range(passes + 1)]
        bounds = list(zip(edges[:-1], edges[1:], strict=True))
    for i, (start, end) in enumerate(bounds):
        part = {k: v[start:end] if end > start else v[:1] for k, v in batch.items()}
        share = (end - start) / rows
        scale = share * weight
        with no_sync() if i < len(bounds) - 1 else contextlib.nullcontext():
            with autocast:
                loss = loss_fn(model(part[input_key]), part)
            (loss * scale).backward() if scale != 1 else loss.backward()
        total += loss.detach().float() * share
    return total


def micro_batch_rows(spec: RunSpec, model, loss_fn, data, input_key: str, device: torch.device, autocast,
                     rows: int | None = None) -> int:
    """Rows per forward pass: ``spec.micro_batch_size``, the whole batch (or this process's
    ``rows`` of it) when unset, and with ``"auto"`` on CUDA the largest that fits
    (``training.micro_batch``); on CPU "auto" is the whole batch (memory is the machine's)."""
    size, rows = spec.micro_batch_size, rows or spec.batch_size
    if size is None or (size == "auto" and device.type != "cuda"):
        return rows
    if size == "auto":
        def probe_rows(k: int) -> dict[str, torch.Tensor]:
            return gather(data, np.arange(min(k, len(data))))

        share = spec if rows == spec.batch_size else replace(spec, batch_size=rows)
        return largest_fitting_micro_batch(share, model, loss_fn, probe_rows, input_key, device, autocast)
    return min(int(size), rows)


@torch.no_grad()
def evaluate(model, data, loss_fn, input_key, spec: RunSpec, device, autocast,
             per_sample: int, parallel: OneProcess | None = None) -> tuple[float, float, float]:
    """Mean loss over ``spec.eval_tokens`` held-out units spread evenly over the split
    (the same units for every run of the sweep); bits per byte: the summed loss over
    the windows' predicted tokens / their UTF-8 bytes (``data.target_bytes``) / ln 2, NaN when
    the dataset does not count bytes (it assumes a loss averaged over the ``seq_len - 1``
    predicted tokens of each window, as the next-token loss is); and, for batches with
    ``labels`` (image classification), the top-1 error: the share whose highest logit is not
    the label (NaN otherwise).

    The units go in chunks of ``batch_size``; the processes of a run (``parallel``) take every
    k-th chunk and add up their sums, so k processes measure the same units as one."""
    parallel = parallel or OneProcess()
    model.eval()
    indices = eval_indices(len(data), max(1, spec.eval_tokens // per_sample))
    chunks = [indices[start:start + spec.batch_size] for start in range(0, len(indices), spec.batch_size)]
    mine = chunks[parallel.rank::parallel.world]
    passes = -(-len(chunks) // parallel.world) if parallel.lockstep else len(mine)
    count_bytes = getattr(data, "target_bytes", None) if per_sample > 1 else None
    total, count, target_bytes, wrong, unlabelled, uncounted = 0.0, 0, 0, 0, 0, 0
    for i in range(passes):
        chunk = mine[i] if i < len(mine) else chunks[0]  # a collective forward pass counted elsewhere
        batch = {k: v.to(device) for k, v in gather(data, chunk).items()}
        with autocast:
            logits = model(batch[input_key])
            loss = loss_fn(logits, batch)
        if i >= len(mine):
            continue
        if "labels" in batch:
            wrong += int((logits.argmax(-1) != batch["labels"]).sum())
        else:
            unlabelled += 1
        total += float(loss) * len(chunk)
        count += len(chunk)
        counted = count_bytes(chunk) if count_bytes is not None else None
        if counted is None:
            uncounted += 1
        else:
            target_bytes += int(np.sum(counted))
    model.train()
    total, count, target_bytes, wrong, unlabelled, uncounted = sum_over(
        parallel, [total, count, target_bytes, wrong, unlabelled, uncounted])
    bpb = (total * (per_sample - 1) / target_bytes / math.log(2)
           if count_bytes is not None and not uncounted and target_bytes else math.nan)
    return total / count, bpb, (wrong / count if not unlabelled else math.nan)
