"""One cell of a tune: the best learning rate of one (size, tokens, batch, beta2) setting.

The cell's optimum is the vertex of the parabola in log(rate) through the lowest held-out
loss and its two neighbours. A wider window would be biased: the loss rises more steeply
above the optimum than below it (and diverges further up), so a parabola through five
points puts its vertex 20-30% low on the GPT demo's cells. The interval is a parametric
bootstrap of that 3-point fit, its noise scale the root-mean-square residual of a parabola
through up to two neighbours each side (which also absorbs the curve's departure from a
parabola: a conservative scale); with exactly three rates there is none. The near-optimal
band is every rate whose fitted loss lies within ``band`` (0.5%) of the vertex's loss
(DeepSeek LLM 2024 uses 0.25%).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flops_fit.fitting.laws.bootstrap import interval

NEIGHBOURS = 2  # points each side of the lowest one that set the noise scale (the vertex uses 1)
BAND = 0.005
# A cell's reason when its best loss is at the last rate that trained and the next one tried has no finite
# loss (diverged): the optimum lies between them, so wider rates would only diverge again.
DIVERGED_NEXT = "diverged next to its best"


@dataclass
class CellFit:
    """A cell's measured rates and losses and its fitted optimum (``reason`` says why not)."""

    rates: list[float]
    losses: list[float]  # NaN: the run failed (diverged)
    lr_opt: float = math.nan
    lr_lo: float = math.nan
    lr_hi: float = math.nan
    loss_opt: float = math.nan
    band_lo: float = math.nan
    band_hi: float = math.nan
    curvature: float = math.nan  # d2 loss / d(log rate)^2 / 2
    coefficients: tuple[float, float, float] = (math.nan, math.nan, math.nan)  # c0 + c1 x + c2 x^2, x = log rate
    samples: np.ndarray = field(default_factory=lambda: np.empty(0))  # bootstrap log(lr*)
    reason: str | None = None  # why this cell has no interior optimum

    @property
    def ok(self) -> bool:
        return self.reason is None

    @property
    def best_loss(self) -> float:
        """The lowest measured loss (the cell's own sweep's best)."""
        finite = [v for v in self.losses if math.isfinite(v)]
        return min(finite) if finite else math.nan

    def loss_at(self, rate: float) -> float:
        """The fitted parabola's loss at ``rate``."""
        c0, c1, c2 = self.coefficients
        x = math.log(rate)
        return c0 + c1 * x + c2 * x * x

    def band_rates(self) -> list[float]:
        """The measured rates whose loss lies within the band of the lowest measured loss."""
        best = self.best_loss
        return [r for r, v in zip(self.rates, self.losses) if math.isfinite(v) and v <= best * (1 + BAND)]

    def to_dict(self) -> dict[str, Any]:
        return {"rates": self.rates, "losses": self.losses, "lr_opt": self.lr_opt, "lr_lo": self.lr_lo,
                "lr_hi": self.lr_hi, "loss_opt": self.loss_opt, "best_loss": self.best_loss,
                "band": [self.band_lo, self.band_hi], "measured_band": self.band_rates(),
                "parabola": list(self.coefficients), "reason": self.reason}


def _parabola(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(c0, c1, c2) of the least-squares parabola y = c0 + c1 x + c2 x^2."""
    design = np.stack([np.ones_like(x), x, x * x], axis=1)
    return np.linalg.lstsq(design, y, rcond=None)[0]


def fit_cell(rates: list[float], losses: list[float], *, bootstrap: int = 200, seed: int = 0,
             level: float = 0.95, band: float = BAND) -> CellFit:
    """Fit one cell's optimum; a cell whose best rate is an end of its rates (or whose loss
    does not curve upwards there) keeps ``reason`` and no optimum."""
    order = np.argsort(rates)
    rates = [float(rates[i]) for i in order]
    losses = [float(losses[i]) for i in order]
    cell = CellFit(rates, losses)
    finite = [i for i, v in enumerate(losses) if math.isfinite(v)]
    if len(finite) < 3:
        cell.reason = f"only {len(finite)} of {len(rates)} rates finished (a parabola needs 3)"
        return cell
    x = np.log(np.array([rates[i] for i in finite]))
    y = np.array([losses[i] for i in finite])
    lowest = int(np.argmin(y))
    if lowest in (0, len(y) - 1):
        end = "lowest" if lowest == 0 else "highest"
        best = math.exp(x[lowest])
        beyond = [r for r, v in zip(rates, losses, strict=True)
                  if not math.isfinite(v) and (r < best if lowest == 0 else r > best)]
        if beyond:
            nearest = max(beyond) if lowest == 0 else min(beyond)
            cell.reason = (f"{DIVERGED_NEXT}: the best loss is at the {end} rate that trained ({best:.3g}) and "
                           f"{nearest:.3g} {'below' if lowest == 0 else 'above'} it has no finite loss: try rates "
                           "between them")
            return cell
        cell.reason = (f"the best loss is at the {end} rate tried ({best:.3g}): widen the "
                       f"multipliers {'down' if lowest == 0 else 'up'}wards")
        return cell
    xw, yw = x[lowest - 1:lowest + 2], y[lowest - 1:lowest + 2]
    coef = _parabola(xw, yw)
    if not coef[2] > 0:
        cell.reason = "the loss does not curve upwards around its lowest rate"
        return cell
    vertex = -coef[1] / (2 * coef[2])
    cell.coefficients = tuple(float(c) for c in coef)
    cell.curvature = float(coef[2])
    cell.loss_opt = float(coef[0] - coef[1] ** 2 / (4 * coef[2]))
    cell.lr_opt = float(math.exp(vertex))
    half = math.sqrt(band * cell.loss_opt / coef[2])
    cell.band_lo, cell.band_hi = math.exp(vertex - half), math.exp(vertex + half)
    wide = slice(max(0, lowest - NEIGHBOURS), lowest + NEIGHBOURS + 1)
    cell.samples = _bootstrap(xw, yw, _noise(x[wide], y[wide]), bootstrap, seed)
    if cell.samples.size:
        lo, hi = interval(cell.samples, level)
        cell.lr_lo, cell.lr_hi = float(math.exp(lo)), float(math.exp(hi))
    return cell


def _noise(x: np.ndarray, y: np.ndarray) -> float:
    """Root-mean-square residual of the parabola through these points (0 with 3 or fewer)."""
    if x.size <= 3:
        return 0.0
    residuals = y - np.stack([np.ones_like(x), x, x * x], axis=1) @ _parabola(x, y)
    return float(np.sqrt(np.sum(residuals ** 2) / (x.size - 3)))


def _bootstrap(x: np.ndarray, y: np.ndarray, noise: float, resamples: int, seed: int) -> np.ndarray:
    """log(lr*) of each refit of the 3-point parabola to ``y`` plus Gaussian noise of scale
    ``noise``; empty without noise or resamples. A refit whose loss does not curve upwards,
    or whose vertex leaves the three rates, counts at that end."""
    if noise <= 0 or resamples <= 0:
        return np.empty(0)
    rng = np.random.default_rng(seed)
    draws = y + rng.normal(0.0, noise, size=(resamples, x.size))
    design = np.stack([np.ones_like(x), x, x * x], axis=1)
    c = np.linalg.solve(design, draws.T)  # (3, resamples): exact through the three points
    with np.errstate(divide="ignore", invalid="ignore"):
        vertex = np.where(c[2] > 0, -c[1] / (2 * c[2]), np.nan)
    low_end = c[1] + 2 * c[2] * x.min() > 0  # slope at the left end already positive: the minimum is left
    vertex = np.where(np.isnan(vertex), np.where(low_end, x.min(), x.max()), vertex)
    return np.clip(vertex, x.min(), x.max())
