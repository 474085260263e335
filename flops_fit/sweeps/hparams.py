"""Optimizer hyper-parameters and the per-size learning-rate rules.

With standard parametrisation the best learning rate falls with width, so one learning
rate across a sweep mis-tunes one end of every IsoFLOP curve and biases N* (Porian et al.
2024). The default rule therefore scales the learning rate per size:

- ``"marin"`` (default): lr = 0.33 * sqrt(batch_size) / width and
  beta2 = 0.98 ** (batch_size / 128), the rule of Marin's IsoFLOP sweeps
  (marin-community/marin, experiments for the scaling-law runs; quoted in the project's
  design note scaling-laws.md). ``batch_size`` counts sequences (samples for images).
- ``"inverse-width"``: lr = base_lr * base_width / width (the muP-like 1/width rule for
  hidden weights in Adam, Yang et al. 2022), around a tuned ``base_lr`` at ``base_width``.
- ``"constant"``: lr = base_lr for every size.
- ``"tuned"``: the law a ``flops-fit tune`` fitted (``tuned`` names its folder or its
  ``hparams.json``; ``sweeps.tuned``), planned per run from its width (or parameters),
  tokens and batch by the planner. ``hparams = "DIR"`` is the short form. ``reach`` and
  ``beyond`` guard how far past the tune's grid the law is carried (``sweeps.tuned``).

Both width rules read the width from the model's size parameter, so they need a model
whose size is its width (the built-in ``gpt`` and ``vit`` are).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from flops_fit.errors import PlanError

LR_RULES = ("marin", "inverse-width", "constant", "tuned")
BEYOND = ("refuse", "centre", "extrapolate")  # a tuned law past `reach` of its grid: what the planner does
WIDTH_PARAMS = ("width", "d_model", "hidden", "hidden_size", "n_embd", "embed_dim", "dim")


def _in_range(value: Any, name: str, low: float, high: float, rule: str, *, low_open: bool = False,
              high_open: bool = False) -> None:
    """PlanError naming ``name`` unless ``value`` is a finite real number within the bounds."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        raise PlanError(f"{name} must be a number {rule}, got {value!r}")


@dataclass(frozen=True)
class HyperParams:
    """Training hyper-parameters shared by every run of a sweep; ``lr=None`` uses ``lr_rule``.

    Warmup is short (``warmup_fraction`` of the run, at most ``max_warmup_steps``):
    long warmup hurts small models (Porian et al. 2024). The cosine decays to
    ``min_lr_ratio`` x the peak at the end of each run (10x, as in Chinchilla).
    """

    lr: float | None = None
    lr_rule: str = "marin"
    base_lr: float = 3e-3
    base_width: int = 128
    warmup_fraction: float = 0.05
    max_warmup_steps: int = 1000
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float | None = None  # None: 0.98 ** (batch_size / 128) for "marin", else 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0
    divergence_factor: float = 3.0
    tuned: str | None = None  # lr_rule "tuned": a `flops-fit tune` output folder (or its hparams.json)
    # How far past its tune's grid (a factor in tokens, width or parameters, FLOPs, batch) a tuned law
    # is used, and what happens beyond: refuse to plan, the tune's centre rule, or extrapolate anyway.
    reach: float = 4.0
    beyond: str = "refuse"

    def __post_init__(self) -> None:
        if not isinstance(self.lr_rule, str) or self.lr_rule not in LR_RULES:
            raise PlanError(f"lr_rule {self.lr_rule!r} is unknown; choose one of {LR_RULES}")
        if self.tuned is not None and (not isinstance(self.tuned, str) or not self.tuned):
            raise PlanError(f"tuned must name a `flops-fit tune` output folder, got {self.tuned!r}")
        if (self.lr_rule == "tuned") != (self.tuned is not None):
            raise PlanError("lr_rule 'tuned' goes with tuned = \"DIR\" (a `flops-fit tune` output folder), and "
                            f"tuned with lr_rule 'tuned' (got lr_rule {self.lr_rule!r}, tuned {self.tuned!r}); "
                            "hparams = \"DIR\" sets both")
        if self.lr is not None and self.tuned is not None:
            raise PlanError(f"lr = {self.lr!r} fixes every run's rate, and tuned = {self.tuned!r} names a law for "
                            "them: keep one (leave lr out to plan the rates from the tune)")
        _in_range(self.reach, "reach", 1, math.inf, ">= 1 (a factor beyond the tune's grid)")
        if self.beyond not in BEYOND:
            raise PlanError(f"beyond must be one of {BEYOND} (what a tuned law does past its reach), "
                            f"got {self.beyond!r}")
        if self.lr is not None:
            _in_range(self.lr, "lr", 0, math.inf, "above 0 (or leave it out for the per-size rule)", low_open=True)
        _in_range(self.base_lr, "base_lr", 0, math.inf, "above 0", low_open=True)
        if isinstance(self.base_width, bool) or not isinstance(self.base_width, int) or self.base_width <= 0:
            raise PlanError(f"base_width must be a positive integer, got {self.base_width!r}")
        _in_range(self.warmup_fraction, "warmup_fraction", 0, 1, "in [0, 1)", high_open=True)
        if isinstance(self.max_warmup_steps, bool) or not isinstance(self.max_warmup_steps, int) \
                or self.max_warmup_steps < 0:
            raise PlanError(f"max_warmup_steps must be a non-negative integer, got {self.max_warmup_steps!r}")
        _in_range(self.min_lr_ratio, "min_lr_ratio", 0, 1, "in [0, 1]")
        _in_range(self.weight_decay, "weight_decay", 0, math.inf, ">= 0")
        _in_range(self.beta1, "beta1", 0, 1, "in [0, 1)", high_open=True)
        if self.beta2 is not None:
            _in_range(self.beta2, "beta2", 0, 1, "in [0, 1) (or leave it out for the batch-size rule)",
                      high_open=True)
        _in_range(self.eps, "eps", 0, math.inf, "above 0", low_open=True)
        _in_range(self.grad_clip, "grad_clip", 0, math.inf, ">= 0 (0: no clipping)")
        _in_range(self.divergence_factor, "divergence_factor", 1, math.inf, "above 1", low_open=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> HyperParams:
        data = dict(data or {})
        if data.get("tuned") is not None and "lr_rule" not in data:
            data["lr_rule"] = "tuned"
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise PlanError(
                f"unknown hyper-parameter(s) {unknown}; known: {sorted(cls.__dataclass_fields__)}"
            )
        return cls(**data)

    @classmethod
    def from_tuned(cls, where: str, base: HyperParams | None = None) -> HyperParams:
        """``base`` (default: the defaults) with its rate from the tune in ``where``."""
        values = (base or cls()).to_dict()
        return cls(**{**values, "lr": None, "lr_rule": "tuned", "tuned": str(where)})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def source(self) -> str:
        """Where this rule's rates come from, as ``RunSpec.lr_source`` records it."""
        if self.lr is not None:
            return "lr"
        return f"tuned:{self.tuned}" if self.lr_rule == "tuned" else self.lr_rule

    def learning_rate(self, width: int | None, batch_size: int, model: str) -> float:
        """The peak learning rate for one size under this rule."""
        if self.lr is not None:
            return self.lr
        if self.lr_rule == "constant":
            return self.base_lr
        if self.lr_rule == "tuned":
            raise PlanError("lr_rule 'tuned' plans each run's rate from its law (flops_fit.sweeps.tuned): plan the sweep")
        if width is None:
            raise PlanError(
                f"lr_rule {self.lr_rule!r} needs the width, but model {model!r}'s size parameter is "
                f"not a width (one of {WIDTH_PARAMS}); pass lr=... or lr_rule='constant'"
            )
        if self.lr_rule == "marin":
            return 0.33 * math.sqrt(batch_size) / width
        return self.base_lr * self.base_width / width

    def adam_beta2(self, batch_size: int) -> float:
        if self.beta2 is not None:
            return self.beta2
        return 0.98 ** (batch_size / 128) if self.lr_rule == "marin" else 0.95

    def warmup_steps(self, steps: int) -> int:
        return min(self.max_warmup_steps, int(round(self.warmup_fraction * steps)))
