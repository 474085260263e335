"""What a fit hands back: point estimates, bootstrap draws, predictions, diagnostics."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.fitting.bootstrap import interval
from flops_fit.fitting.inputs import Runs

Frontier = Callable[[dict[str, np.ndarray], np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]

# Fixed by the runs, not estimated: k, the FLOPs per parameter per token of the frontier.
CONSTANTS = ("k",)

METHOD_TITLES = {
    "envelope": "Approach 1: envelope of training curves",
    "isoflop": "Approach 2: IsoFLOP profiles",
    "parametric": "Approach 3: parametric fit (Huber, L-BFGS)",
    "vpnls": "Approach 3, variable projection (NNLS)",
}


@dataclass
class Diagnostics:
    """How far to trust a fit: residuals, R^2, what was left out and why, warnings."""

    residuals: pd.DataFrame
    r2: float
    r2_of: str
    excluded: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"r2": self.r2, "r2_of": self.r2_of, "excluded": self.excluded, "warnings": self.warnings,
                "residual_rms": float(np.sqrt(np.mean(np.square(self.residuals["residual"]))))
                if len(self.residuals) else None}


class Presentable:
    """Printing, JSON and the HTML report, shared by one fit and a set of fits."""

    def summary(self, budgets: Sequence[float] | None = None) -> str:
        raise NotImplementedError

    def to_dict(self, budgets: Sequence[float] | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.summary()

    def to_json(self, budgets: Sequence[float] | None = None, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(budgets), indent=kwargs.pop("indent", 2), default=json_default, **kwargs)

    def report(self, out: Any, *, target: float | None = None) -> Any:
        """Write the HTML report to ``out`` (a folder gets ``report.html``); returns its path."""
        from flops_fit.fitting.report import write_report

        return write_report(self, out, target=target)


@dataclass
class FitResult(Presentable):
    """One method's fit. ``params`` are point estimates, ``samples`` one row per resample."""

    method: str
    params: dict[str, float]
    samples: pd.DataFrame
    frontier: Frontier
    runs: Runs
    diagnostics: Diagnostics
    level: float = 0.95
    seed: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return METHOD_TITLES.get(self.method, self.method)

    def intervals(self) -> pd.DataFrame:
        """Every parameter (and the exponents a, b): estimate, interval bounds, bootstrap s.e."""
        names = [n for n in self.params if n not in CONSTANTS]
        rows = []
        for name in names:
            draws = self.samples[name].to_numpy(float) if name in self.samples else np.array([])
            lo, hi = interval(draws, self.level) if draws.size else (np.nan, np.nan)
            with np.errstate(all="ignore"):  # wild draws (unidentified terms) may overflow: inf is honest
                se = float(np.nanstd(draws, ddof=1)) if draws.size > 1 else np.nan
            rows.append({"param": name, "estimate": self.params[name], "lo": float(lo), "hi": float(hi), "se": se})
        return pd.DataFrame(rows).set_index("param")

    @property
    def exponents(self) -> dict[str, tuple[float, float, float]]:
        """Frontier exponents: N_opt ~ C^a, D_opt ~ C^b, as (estimate, lo, hi)."""
        table = self.intervals()
        return {k: tuple(float(v) for v in table.loc[k, ["estimate", "lo", "hi"]]) for k in ("a", "b")}

    def predict(self, budgets: float | Iterable[float]) -> pd.DataFrame:
        """N_opt, D_opt, loss and tokens per parameter at each budget C, with interval bounds."""
        c = np.atleast_1d(np.asarray(budgets, dtype=float))
        if c.size == 0 or not np.all(np.isfinite(c) & (c > 0)):
            raise FitInputError(f"budgets must be finite positive FLOP counts, got {budgets!r}")
        point = self.frontier({k: np.array([v]) for k, v in self.params.items()}, c)
        draws = self.frontier({k: self.samples[k].to_numpy(float) for k in self.samples}, c) if len(self.samples) else None
        out = pd.DataFrame({"budget": c})
        names = ("N_opt", "D_opt", "loss", "tokens_per_param")
        point = (*point, point[1] / point[0])
        if draws is not None:
            draws = (*draws, draws[1] / draws[0])
        for name, p, d in zip(names, point, draws or [None] * 4, strict=True):
            out[name] = p[0]
            lo, hi = interval(d, self.level) if d is not None else (np.full(c.size, np.nan),) * 2
            out[f"{name}_lo"], out[f"{name}_hi"] = lo, hi
        return out

    def table(self, budgets: Sequence[float] | None = None) -> pd.DataFrame:
        """A Chinchilla-style table: compute, parameters, tokens, tokens/param, loss (+ intervals)."""
        if budgets is None:
            budgets = default_budgets(self.runs)
        return self.predict(budgets)

    def summary(self, budgets: Sequence[float] | None = None) -> str:
        """Plain text: parameters with intervals, predictions, warnings."""
        from flops_fit.tables import format_table

        pct = f"{100 * self.level:g}%"
        par = self.intervals()
        lines = [f"{self.title}  ({len(self.runs)} runs from {self.runs.source}, "
                 f"{len(self.samples)} bootstrap resamples, seed {self.seed})", ""]
        lines.append(format_table([[n, _num(r.estimate), f"[{_num(r.lo)}, {_num(r.hi)}]", _num(r.se)]
                                   for n, r in par.iterrows()], ["param", "estimate", f"{pct} interval", "bootstrap s.e."]))
        lines += ["", format_table(
            [[f"{r.budget:.3g}"] + [f"{_num(r[k])} [{_num(r[k + '_lo'])}, {_num(r[k + '_hi'])}]"
                                    for k in ("N_opt", "D_opt", "tokens_per_param", "loss")]
             for _, r in self.table(budgets).iterrows()],
            ["FLOPs", "params N_opt", "tokens D_opt", "tokens/param", "loss"])]
        d = self.diagnostics
        if "k" in self.params:
            lines += ["", f"frontier with C = k N D, k = {self.params['k']:.4g} FLOPs per parameter per token (from the runs)"]
        lines += ["", f"R^2 ({d.r2_of}): {d.r2:.4f}; exclusions: {len(d.excluded)}"]
        lines += [f"warning: {w}" for w in d.warnings]
        return "\n".join(lines)

    def to_dict(self, budgets: Sequence[float] | None = None) -> dict[str, Any]:
        par = self.intervals()
        return {
            "method": self.method,
            "title": self.title,
            "source": self.runs.source,
            "runs": len(self.runs),
            "bootstrap": len(self.samples),
            "seed": self.seed,
            "level": self.level,
            "params": {n: {k: _clean(v) for k, v in r.items()} for n, r in par.to_dict("index").items()},
            "table": [{k: _clean(v) for k, v in row.items()} for row in self.table(budgets).to_dict("records")],
            "diagnostics": self.diagnostics.to_dict(),
            "details": {k: v for k, v in self.details.items() if isinstance(v, (str, int, float, list, dict))},
        }

    def plot(self, out_dir: Any, *, target: float | None = None, formats: Sequence[str] = ("png", "svg")) -> list:
        """Write this fit's plots (PNG and SVG by default) into ``out_dir``; returns the paths."""
        from flops_fit.fitting.plots import plot_result

        return plot_result(self, out_dir, target=target, formats=formats)


def default_budgets(runs: Runs) -> list[float]:
    """Decades from the smallest run's FLOPs up to 100x beyond the largest."""
    lo = np.floor(np.log10(runs.frame["flops"].min()))
    hi = np.ceil(np.log10(runs.frame["flops"].max())) + 2
    return [float(10.0 ** e) for e in np.arange(lo, hi + 1)]


def _num(value: float) -> str:
    if value is None or not np.isfinite(value):
        return "nan"
    return f"{value:.4g}"


def json_default(value: Any) -> Any:
    """numpy scalars and arrays (in exclusions, metadata) as plain JSON values."""
    if isinstance(value, np.generic):
        return _clean(value.item())
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def _clean(value: Any) -> Any:
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    return value
