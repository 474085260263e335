"""A tuned learning-rate law, read from ``hparams.json`` (what ``flops-fit tune`` writes).

The law is Marin's form, lr* = m * tokens^-a * scale^-b * batch^c, where the scale is the
model's width when its size is a width and its parameter count otherwise; where the tune
swept batch sizes it also holds B*(C) = k * C^e. The planner reads it here (a layer below
``flops_fit.tuning``, which fits it), so a sweep with ``hparams = "DIR"`` plans each run's
rate from the tune in DIR.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flops_fit.errors import PlanError

HPARAMS_FILE = "hparams.json"
FORMAT = "flops-fit-hparams/1"
SCALES = ("width", "params")


def hparams_path(where: str | Path) -> Path:
    """``where`` itself if it is a file, else ``where/hparams.json``."""
    where = Path(where)
    return where if where.suffix == ".json" else where / HPARAMS_FILE


@dataclass(frozen=True)
class TunedLaw:
    """The law of one tune: coefficients (point estimates), what it was tuned on, and the
    near-optimal band (the median half-width, in log rate, of its cells' 0.5% bands)."""

    path: str
    model: str
    scale: str  # "width" or "params"
    m: float
    a: float
    b: float
    c: float | None  # None: one batch size was tuned (``batch_size``), the law holds for it only
    batch_size: int
    beta2: float | None
    band: float
    batch_law: tuple[float, float] | None = None  # (k, e): B* = k * C^e

    @classmethod
    def load(cls, where: str | Path) -> TunedLaw:
        """Read ``where`` (a tune's folder or its hparams.json); PlanError naming the file and the fix."""
        path = hparams_path(where)
        if not path.is_file():
            raise PlanError(f"hparams {str(where)!r}: no {path} (a folder written by `flops-fit tune SPEC --out DIR`)")
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise PlanError(f"hparams {path}: not a readable JSON file ({exc}); run `flops-fit tune` again") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: Any, path: str = "hparams.json") -> TunedLaw:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PlanError(f"hparams {path}: not a flops-fit tune's hparams.json (format {FORMAT!r} expected)")
        try:
            law = data["law"]
            coef = {k: (None if law["coefficients"][k] is None else float(law["coefficients"][k]["value"]))
                    for k in ("m", "a", "b", "c")}
            batch = data.get("batch_law")
            out = cls(path=path, model=str(data["model"]), scale=str(law["scale"]), m=coef["m"], a=coef["a"],
                      b=coef["b"], c=coef["c"], batch_size=int(data["setup"]["batch_size"]),
                      beta2=None if data.get("beta2") is None else float(data["beta2"]), band=float(law["band"]),
                      batch_law=None if batch is None else (float(batch["k"]), float(batch["e"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"hparams {path}: missing or malformed entry {exc}; run `flops-fit tune` again") from None
        if out.scale not in SCALES or not (out.m > 0 and all(math.isfinite(v) for v in (out.m, out.a, out.b))):
            raise PlanError(f"hparams {path}: the law's scale or coefficients are invalid; run `flops-fit tune` again")
        return out

    def rate(self, scale: float, tokens: float, batch_size: int) -> float:
        """lr* for one run: ``scale`` is its width (or parameters, per ``self.scale``)."""
        value = self.m * tokens ** -self.a * scale ** -self.b
        return value * batch_size ** self.c if self.c is not None else value

    def batch(self, flops: float) -> int:
        """B*(C) rounded to a whole number of sequences (the batch law is required)."""
        k, e = self.batch_law
        return max(1, round(k * flops ** e))

    def check_batch(self, batch_size: int, model: str) -> None:
        """PlanError unless the law holds at ``batch_size`` (a law tuned at one batch holds only there)."""
        if model != self.model:
            raise PlanError(f"hparams {self.path} was tuned for model {self.model!r}, not {model!r}: "
                            f"tune this model (`flops-fit tune SPEC --out DIR`) or drop hparams")
        if self.c is None and self.batch_law is None and batch_size != self.batch_size:
            raise PlanError(f"hparams {self.path} was tuned at batch_size {self.batch_size} only, this sweep uses "
                            f"{batch_size}: use batch_size = {self.batch_size}, or tune several batch sizes "
                            f"(--batch-sizes) so the law learns how the rate moves with the batch")

    def describe(self) -> str:
        """The law as a formula with its numbers."""
        batch = f" * batch^{self.c:.3g}" if self.c is not None else f" (batch {self.batch_size})"
        return f"lr = {self.m:.4g} * tokens^{-self.a:.3g} * {self.scale}^{-self.b:.3g}{batch}"
