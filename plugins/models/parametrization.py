"""muP for the built-in transformers under Adam (Yang et al. 2022, "Tensor Programs V", Table 8).

Pure Python, so that the registration modules can check the option without torch. With
``m = width / base_width``:

* hidden weights (both dimensions grow with the width: attention and MLP projections) start
  at the standard initialisation times ``m ** -0.5`` (variance ~ 1 / fan_in) and learn at
  ``lr / m``; AdamW's decoupled weight decay is divided by the same factor, so the decay per
  step (``lr * weight_decay``) does not move with the width (``mup``'s ``MuAdamW``);
* input weights (token and position embeddings, the patch projection), every bias, norm gain,
  LayerScale and prefix token keep the standard initialisation and rate;
* the readout's input is multiplied by ``1 / m`` (the output multiplier; the readout weight,
  tied to the embedding or not, keeps its constant initialisation and the base rate);
* attention scores are scaled by ``sqrt(d0) / d`` instead of ``1 / sqrt(d)``: ``1 / d`` as
  muP asks, with the constant ``sqrt(d0)`` (``d0`` the head size at the base width) that
  makes it the standard scale there. When the number of heads follows the width (the
  default) the head size is fixed and this is the standard scale at every width.

At ``width == base_width`` every factor is 1: the model is the standard one.

``"per-layer"`` is the standard model with per-layer Adam rates (after Everett et al. 2024,
"Scaling Exponents Across Parameterizations and Optimizers", whose prescription keeps an untied
embedding's rate constant; here the embeddings, tied or not, take the matrices'): the standard initialisation, attention
scale and logits, and every weight matrix (embeddings, readout and patch projection included:
anything with two dimensions larger than 1) learning at ``lr / m``; biases, norm gains and
tokens keep ``lr``. It exists because muP as above lost 8.3% at 8x its base width of 16 on the
GPT demo's model, and undoing its pieces one at a time found the cause: the tied
embedding/readout at the base rate behind the 1 / m multiplier (-> 3.9%), then the 1 / d
attention scale and the m^-1/2 hidden initialisation (-> 0.8%), while the best rate stays at
the base width's (docs/guide/mup.md, ``benchmarks/bench_mup_ablation.py``). Its forward pass is
the standard model's at every width, so parity and FLOP counts are unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from flops_fit.checks import positive_int

PARAMETRIZATIONS = ("standard", "mup", "per-layer")
KEYWORDS = ("parametrization", "base_width")


def without_keywords(defaults: dict) -> dict:
    """A model entry's defaults without this option's keywords: a plan's model configuration (and
    so its run ids) stays what it was before muP unless the sweep sets them."""
    return {k: v for k, v in defaults.items() if k not in KEYWORDS}


def check(parametrization: object, base_width: object) -> None:
    """ValueError unless ``parametrization`` is known and ``base_width`` fits it."""
    if parametrization not in PARAMETRIZATIONS:
        raise ValueError(f"parametrization must be one of {PARAMETRIZATIONS}, got {parametrization!r}")
    if parametrization == "standard":
        if base_width is not None:
            raise ValueError(
                f"base_width={base_width!r} only applies to parametrization='mup' or 'per-layer': set one of them "
                f"or leave base_width out"
            )
        return
    if base_width is None:
        raise ValueError(
            f"parametrization={parametrization!r} needs base_width: the width whose initialisation and learning rate it "
            "keeps (e.g. the smallest width of the sweep, where the rate was tuned)"
        )
    positive_int(base_width, "base_width")


@dataclass(frozen=True)
class MuP:
    """The muP factors of one model: ``width`` against ``base_width``; ``head_size`` (``d``) and
    whether it grows with the width (a fixed number of heads) give the attention scale."""

    width: int
    base_width: int
    head_size: int
    head_grows: bool
    kind: str = "mup"  # or "per-layer": the standard model, only the rates scaled (module docstring)

    @property
    def ratio(self) -> float:
        return self.width / self.base_width

    @property
    def hidden_init(self) -> float:
        """Factor on the standard init std of a hidden weight: variance ~ 1 / fan_in."""
        return self.ratio ** -0.5 if self.kind == "mup" else 1.0

    @property
    def hidden_lr(self) -> float:
        """Factor on the learning rate of a hidden weight (Adam)."""
        return 1.0 / self.ratio

    @property
    def readout(self) -> float:
        """Factor on the readout's input (the logits' output multiplier)."""
        return 1.0 / self.ratio if self.kind == "mup" else 1.0

    @property
    def attention_scale(self) -> float | None:
        """``sqrt(d0) / d``: ``1 / d``, equal to the standard ``1 / sqrt(d)`` at the base width
        (None under "per-layer": the standard scale, as the model computes it)."""
        if self.kind != "mup":
            return None
        base_head = self.head_size / self.ratio if self.head_grows else self.head_size
        return math.sqrt(base_head) / self.head_size


def of(parametrization: str, width: int, base_width: int | None, head_size: int, head_grows: bool) -> MuP | None:
    """The model's ``MuP``, or None under the standard parametrization."""
    if parametrization == "standard":
        return None
    return MuP(width, base_width, head_size, head_grows, parametrization)


class MuPModel:
    """What the built-in transformers share under muP, mixed into their ``nn.Module``: the
    hidden weights (every linear layer under the attribute ``hidden_root``), their
    initialisation and learning-rate factors, and the readout's output multiplier. The model
    keeps its ``MuP`` (or None) at ``self.config.mup``."""

    hidden_root = "blocks"

    def hidden_weights(self) -> dict:
        """The weights whose two dimensions both grow with the width: every linear layer under
        ``hidden_root``, by parameter name."""
        from torch import nn

        root = getattr(self, self.hidden_root)
        return {f"{self.hidden_root}.{name}.weight": m.weight for name, m in root.named_modules()
                if isinstance(m, nn.Linear)}

    def lr_multipliers(self) -> dict[str, float]:
        """Learning-rate factors by parameter name, for the trainer: ``base_width / width`` on the
        hidden weights under muP, on every weight matrix under "per-layer"; none under the
        standard parametrization."""
        mup = self.config.mup
        if not mup:
            return {}
        if mup.kind == "per-layer":
            return {name: mup.hidden_lr for name, p in self.named_parameters() if sum(d > 1 for d in p.shape) >= 2}
        return {name: mup.hidden_lr for name in self.hidden_weights()}

    def scale_hidden_init(self) -> None:
        """muP: every hidden weight's standard std times ``sqrt(base_width / width)`` (call after the
        standard initialisation; nothing under the standard parametrization)."""
        if self.config.mup and self.config.mup.hidden_init != 1.0:  # 1 at the base width and under "per-layer"
            import torch

            with torch.no_grad():
                for weight in self.hidden_weights().values():
                    weight.mul_(self.config.mup.hidden_init)

    def readout_input(self, x):
        """The readout's input times muP's output multiplier (elementwise: no FLOPs counted)."""
        return x * self.config.mup.readout if self.config.mup and self.config.mup.readout != 1.0 else x
