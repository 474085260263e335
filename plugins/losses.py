"""Built-in losses: ``cross-entropy`` (image classification), ``next-token`` (causal LM).

Light at import: torch is imported inside the functions, so registering costs nothing.
"""

from __future__ import annotations

import flops_fit


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def cross_entropy(logits, batch):
    """Mean cross-entropy of ``logits`` (B, K) against ``batch["labels"]`` (B,), int64."""
    import torch.nn.functional as F

    _check("labels" in batch, f"an image-classification batch needs 'labels'; got keys {sorted(batch)}")
    labels = batch["labels"]
    _check(logits.dim() == 2, f"logits must be (batch, classes), got shape {tuple(logits.shape)}")
    _check(
        tuple(labels.shape) == (logits.shape[0],),
        f"labels must have shape ({logits.shape[0]},) to match logits {tuple(logits.shape)}, "
        f"got {tuple(labels.shape)}",
    )
    return F.cross_entropy(logits.float(), labels)


def next_token(logits, batch):
    """Mean cross-entropy of next-token prediction: ``logits[:, t]`` predicts ``tokens[:, t+1]``.

    ``batch["tokens"]`` is int64 (B, T) and ``logits`` (B, T, V). The optional bool
    ``batch["mask"]`` (B, T), True = real token, drops the targets that are padding; a
    batch whose targets are all padding gives NaN.
    """
    import torch
    import torch.nn.functional as F

    _check("tokens" in batch, f"a causal-lm batch needs 'tokens'; got keys {sorted(batch)}")
    tokens = batch["tokens"]
    _check(logits.dim() == 3, f"logits must be (batch, sequence, vocab), got shape {tuple(logits.shape)}")
    _check(
        tuple(tokens.shape) == tuple(logits.shape[:2]),
        f"tokens of shape {tuple(tokens.shape)} do not match logits of shape {tuple(logits.shape)}",
    )
    _check(tokens.shape[1] >= 2, f"next-token loss needs sequences of 2 or more tokens, got {tokens.shape[1]}")
    targets = tokens[:, 1:]
    mask = batch.get("mask")
    if mask is not None:
        _check(
            tuple(mask.shape) == tuple(tokens.shape) and mask.dtype == torch.bool,
            f"mask must be bool with the shape of tokens {tuple(tokens.shape)}, "
            f"got {mask.dtype} of shape {tuple(mask.shape)}",
        )
        targets = targets.masked_fill(~mask[:, 1:], -100)
    vocab = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, vocab).float(), targets.reshape(-1), ignore_index=-100)


@flops_fit.hookimpl
def register_losses(register):
    register(flops_fit.LossEntry(
        "cross-entropy",
        description="Classification cross-entropy of logits (B, K) against batch['labels']",
        fn="flops_fit.plugins.losses:cross_entropy",
        task=flops_fit.TASK_IMAGE_CLASSIFICATION,
    ))
    register(flops_fit.LossEntry(
        "next-token",
        description="Shifted next-token cross-entropy: logits[:, :-1] vs tokens[:, 1:], "
        "targets where batch['mask'] is False ignored",
        fn="flops_fit.plugins.losses:next_token",
        task=flops_fit.TASK_CAUSAL_LM,
    ))
