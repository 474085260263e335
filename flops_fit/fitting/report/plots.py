"""Pictures that show whether to believe a fit (matplotlib, headless: no pyplot, no display).

Each plot is written as PNG and SVG: the profiles (each result draws its own: IsoFLOP curves
or the training-curve envelope), the N_opt / D_opt frontier with its interval band and the
extrapolation to a target budget, loss contours over (N, D) with the frontier, residuals,
tokens per parameter. The drawing helpers here are shared by the results and the report's
cross-method figures; they read a result only through its public methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flops_fit.fitting import formatting as fmt

PLOTS = ("profiles", "frontier", "contours", "residuals", "tokens_per_param")
# Axis labels with units, written once (the loss axis is the runs' metric: ``runs.label``).
COMPUTE_LABEL = "compute C (FLOPs)"
PARAMS_LABEL = "parameters N"
TOKENS_LABEL = "tokens D"
FRONTIER_LABELS = {"N_opt": "compute-optimal parameters N_opt", "D_opt": "compute-optimal tokens D_opt"}
DPI = 110
LEGEND_BUDGETS = 8


def new_figure(width: float, height: float):
    """A headless figure with fixed margins (constrained layout measures every log-axis tick
    label and costs seconds)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.12, top=0.88, wspace=0.28)
    return fig


def save_figure(fig, stem: Path, formats: Sequence[str]) -> list[Path]:
    """Write ``fig`` as ``stem.<format>`` for each format; returns the paths."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in formats:
        path = stem.with_name(f"{stem.name}.{f}")
        fig.savefig(path, format=f, dpi=DPI)
        paths.append(path)
    return paths


def plot_fit(fitted: Any, out_dir, *, target: float | None = None, formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Write every plot of each fit in ``fitted`` (a FitResult or FitSet) into ``out_dir``; returns the paths."""
    return [p for r in fitted.results.values() for p in plot_result(r, out_dir, target=target, formats=formats)]


def plot_result(result: Any, out_dir, *, target: float | None = None,
                formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Write every plot of ``result`` as ``<method>_<plot>.<format>``; returns the paths."""
    out = Path(out_dir)
    budgets = budget_span(result.runs, target)
    paths = []
    for name in PLOTS:
        fig = new_figure(11, 4.8) if name == "frontier" else new_figure(7, 4.8)
        _DRAW[name](fig, result, budgets, target)
        paths += save_figure(fig, out / f"{result.method}_{name}", formats)
    return paths


def budget_span(runs: Any, target: float | None, points: int = 120) -> np.ndarray:
    """Log-spaced budgets from the smallest run's FLOPs to the largest or the target."""
    flops = runs.frame["flops"].to_numpy(float)
    return np.geomspace(flops.min(), max(flops.max(), target or 0.0), points)


def bands(result: Any, budgets: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Point curves and interval bands for N_opt, D_opt, loss and tokens/param over ``budgets``."""
    table = result.predict(budgets)
    return {k: (table[k].to_numpy(), table[f"{k}_lo"].to_numpy(), table[f"{k}_hi"].to_numpy())
            for k in ("N_opt", "D_opt", "loss", "tokens_per_param")}


def colours(values: Sequence[Any], cmap: str = "viridis") -> dict[Any, Any]:
    """One colour per value, spread over ``cmap``."""
    from matplotlib import colormaps

    scale = colormaps[cmap]
    return {v: scale(i / max(len(values) - 1, 1)) for i, v in enumerate(values)}


def scatter_profiles(ax, runs: Any, groups: np.ndarray) -> dict[float, Any]:
    """Each budget's runs as loss against N, one colour per budget; returns the colours.

    Up to LEGEND_BUDGETS budgets are named in the legend; more get a colour bar instead.
    """
    f = runs.frame
    budgets = list(np.unique(groups))
    budget_colours = colours(budgets)
    named = len(budgets) <= LEGEND_BUDGETS
    for c, colour in budget_colours.items():
        m = groups == c
        ax.scatter(f["params"].to_numpy(float)[m], f["loss"].to_numpy(float)[m], s=14, color=colour,
                   label=f"C = {fmt.flops(c)} FLOPs" if named else None)
    if not named:
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import BoundaryNorm, ListedColormap

        bounds = np.arange(len(budgets) + 1) - 0.5
        bar = ax.figure.colorbar(ScalarMappable(BoundaryNorm(bounds, len(budgets)),
                                                ListedColormap(list(budget_colours.values()))), ax=ax, pad=0.01)
        ticks = np.unique(np.linspace(0, len(budgets) - 1, 6).round().astype(int))
        bar.set_ticks(ticks, labels=[fmt.flops(budgets[i]) for i in ticks])
        bar.set_label("budget C (FLOPs)")
    ax.set(xscale="log", xlabel=PARAMS_LABEL, ylabel=runs.label)
    return budget_colours


def draw_frontier(ax, result: Any, key: str, budgets: np.ndarray, *, colour: str = "tab:blue",
                  label: str | None = None, band: bool = True) -> None:
    """``key`` ("N_opt" or "D_opt") against C: the fitted law and its interval band."""
    point, lo, hi = bands(result, budgets)[key]
    exponent = result.exponents["a" if key == "N_opt" else "b"]
    text = label or "fit"
    ax.plot(budgets, point, color=colour,
            label=f"{text}: exponent {fmt.with_interval(*exponent)}")
    if band and np.isfinite(lo).any():
        ax.fill_between(budgets, lo, hi, color=colour, alpha=0.18, lw=0)
    ax.set(xscale="log", yscale="log", xlabel=COMPUTE_LABEL, ylabel=FRONTIER_LABELS[key])


def draw_target(ax, result: Any, key: str, target: float, *, colour: str = "tab:red") -> None:
    """Shade the extrapolation beyond the runs and mark the prediction at ``target``."""
    data_max = result.runs.frame["flops"].max()
    if target <= data_max:
        return
    ax.axvspan(data_max, target, color="0.92", zorder=0)
    t = result.predict(target).iloc[0]
    ax.errorbar([target], [t[key]], yerr=error_bar(t[key], t[f"{key}_lo"], t[f"{key}_hi"]), fmt="*", ms=11,
                color=colour, zorder=4, capsize=3,
                label=f"{fmt.flops(target)} FLOPs: {fmt.with_interval(t[key], t[key + '_lo'], t[key + '_hi'], fmt=fmt.count)}")


def error_bar(value: float, lo: float, hi: float):
    """matplotlib's (2, 1) error extent for an interval around ``value``, None without one.

    A percentile interval need not contain its point estimate (few resamples): clipped at 0.
    """
    if not (np.isfinite(value) and np.isfinite(lo) and np.isfinite(hi)):
        return None
    return [[max(value - lo, 0.0)], [max(hi - value, 0.0)]]


def _plot_profiles(fig, result: Any, budgets, target) -> None:
    ax = fig.add_subplot()
    result.draw_profiles(ax)
    ax.legend(fontsize=7, ncol=2)


def _plot_frontier(fig, result: Any, budgets, target) -> None:
    observed = result.observed_optima()
    for i, key in enumerate(("N_opt", "D_opt")):
        ax = fig.add_subplot(1, 2, i + 1)
        draw_frontier(ax, result, key, budgets)
        if observed is not None:
            ax.scatter(observed[0], observed[1 + i], s=12, color="k", zorder=3, label="optima fitted")
        if target:
            draw_target(ax, result, key, target)
        ax.legend(fontsize=7)
    fig.suptitle(f"Compute-optimal frontier: {result.title}")


def _plot_contours(fig, result: Any, budgets, target) -> None:
    ax = fig.add_subplot()
    f = result.runs.frame
    n, d = f["params"].to_numpy(float), f["tokens"].to_numpy(float)
    frontier = bands(result, budgets)
    gn = np.geomspace(min(n.min(), frontier["N_opt"][0].min()), max(n.max(), frontier["N_opt"][0].max()), 120)
    gd = np.geomspace(min(d.min(), frontier["D_opt"][0].min()), max(d.max(), frontier["D_opt"][0].max()), 120)
    N, D = np.meshgrid(gn, gd)
    surface = result.loss_surface(N, D)
    if surface is not None:
        cs = ax.contourf(N, D, np.log(surface), levels=20, cmap="viridis")
        fig.colorbar(cs, ax=ax, label=f"log of the fitted {result.runs.label}")
        ax.scatter(n, d, s=8, color="w", edgecolor="k", lw=0.3, label="runs")
    else:
        sc = ax.scatter(n, d, c=f["loss"], s=18, cmap="viridis", label="runs (colour: loss)")
        fig.colorbar(sc, ax=ax, label=result.runs.label)
    ax.plot(frontier["N_opt"][0], frontier["D_opt"][0], color="tab:red", lw=2, label="efficient frontier")
    k = float(np.median(f["flops"] / (f["params"] * f["tokens"])))  # FLOPs per parameter per token
    for c in np.geomspace(budgets[0], budgets[-1], 5):
        line = np.geomspace(n.min(), n.max() * 10, 50)
        ax.plot(line, c / (k * line), color="0.5", lw=0.6, ls=":")
    ax.set(xscale="log", yscale="log", xlabel=PARAMS_LABEL, ylabel=TOKENS_LABEL,
           ylim=(d.min() / 3, max(d.max(), frontier["D_opt"][0].max()) * 3),
           title=f"Loss over (N, D); dotted: iso-FLOP lines ({result.method})")
    ax.legend(fontsize=7)


def _plot_residuals(fig, result: Any, budgets, target) -> None:
    ax = fig.add_subplot()
    r = result.diagnostics.residuals
    ax.axhline(0, color="0.5", lw=0.8)
    ax.scatter(r["flops"], r["residual"], s=12, color="tab:blue")
    ax.set(xscale="log", xlabel=COMPUTE_LABEL, ylabel=f"residual ({result.diagnostics.r2_of})",
           title=f"Residuals, R^2 = {result.diagnostics.r2:.4f} ({result.method})")


def _plot_tokens_per_param(fig, result: Any, budgets, target) -> None:
    ax = fig.add_subplot()
    point, lo, hi = bands(result, budgets)["tokens_per_param"]
    ax.plot(budgets, point, color="tab:blue", label="fit")
    if np.isfinite(lo).any():
        ax.fill_between(budgets, lo, hi, color="tab:blue", alpha=0.2, label=f"{100 * result.level:g}% interval")
    observed = result.observed_optima()
    if observed is not None:
        ax.scatter(observed[0], observed[2] / observed[1], s=12, color="k", label="optima fitted")
    ax.axhline(20, color="0.6", ls="--", lw=0.8, label="Chinchilla's ~20")
    ax.set(xscale="log", yscale="log", xlabel=COMPUTE_LABEL, ylabel="tokens per parameter D_opt / N_opt",
           title=f"Tokens per parameter ({result.method})")
    ax.legend(fontsize=7)


_DRAW = {"profiles": _plot_profiles, "frontier": _plot_frontier, "contours": _plot_contours,
         "residuals": _plot_residuals, "tokens_per_param": _plot_tokens_per_param}

__all__ = ["PLOTS", "plot_result"]
