"""Learning-rate schedules: the factor that multiplies a run's peak learning rate at a step.

- ``"cosine"`` (the default): linear warmup, then a cosine to ``min_ratio`` x the peak at
  the run's last step. The schedule depends on the run's length, so every run of an
  IsoFLOP grid trains from scratch (Chinchilla: a cycle longer than the run hurts).
- ``"wsd"`` (warmup-stable-decay, Hägele et al. 2024): linear warmup, a constant
  learning rate, then a cooldown over the run's last steps. Until its cooldown starts a
  run's schedule does not depend on its length, so runs of one size share that stable
  prefix: one stable run per size branches a cooldown at every token count the grid needs.
  The cooldown's shape is ``"1-sqrt"`` (1 - sqrt(progress), better than linear in the
  paper) or ``"linear"``; it starts at the peak and reaches zero one step after the run.
"""

from __future__ import annotations

import math

SCHEDULES = ("cosine", "wsd")
COOLDOWN_SHAPES = ("1-sqrt", "linear")


def warmup_factor(step: int, warmup: int) -> float:
    """Linear warmup: (step + 1) / warmup over the first ``warmup`` steps."""
    return (step + 1) / warmup


def cosine_factor(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """Linear warmup over ``warmup`` steps, then cosine from 1 to ``min_ratio`` at the last step."""
    if step < warmup:
        return warmup_factor(step, warmup)
    span = max(1, total - 1 - warmup)
    fraction = min(1.0, (step - warmup) / span)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * fraction))


def wsd_factor(step: int, warmup: int, cooldown_start: int, total: int, shape: str) -> float:
    """Linear warmup, 1 until ``cooldown_start``, then the cooldown ``shape`` over the
    remaining ``total - cooldown_start`` steps (1 at its first step, towards 0)."""
    if step < warmup:
        return warmup_factor(step, warmup)
    if step < cooldown_start:
        return 1.0
    progress = (step - cooldown_start) / max(1, total - cooldown_start)
    if shape == "linear":
        return 1.0 - progress
    if shape == "1-sqrt":
        return 1.0 - math.sqrt(progress)
    raise ValueError(f"cooldown shape must be one of {COOLDOWN_SHAPES}, got {shape!r}")


def cooldown_steps(steps: int, fraction: float) -> int:
    """Steps of a WSD run's cooldown: ``fraction`` of the run, at least 1."""
    return max(1, round(fraction * steps))


def schedule_factor(spec, step: int) -> float:
    """The factor of ``spec``'s peak learning rate at ``step``, under its schedule."""
    if spec.schedule == "wsd":
        return wsd_factor(step, spec.warmup_steps, spec.cooldown_start, spec.steps, spec.cooldown_shape)
    return cosine_factor(step, spec.warmup_steps, spec.steps, spec.min_lr_ratio)
