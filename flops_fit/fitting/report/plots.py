"""Pictures that show whether to believe a fit (matplotlib, headless: no pyplot, no display).

Each plot is written as PNG and SVG: the profiles (``profile_plots``: IsoFLOP curves or the
training-curve envelope), the N_opt / D_opt frontier with its interval band and the
extrapolation to a target budget, loss contours over (N, D) with the frontier, residuals,
tokens per parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.approaches.result import fitted_results
from flops_fit.fitting.decisions.inference import check_target
from flops_fit.fitting.report.drawing import (
    COMPUTE_LABEL,
    PARAMS_LABEL,
    TOKENS_LABEL,
    bands,
    budget_span,
    check_formats,
    draw_frontier,
    draw_target,
    new_figure,
    save_figure,
)
from flops_fit.fitting.report.profile_plots import draw_profiles

PLOTS = ("profiles", "frontier", "contours", "residuals", "tokens_per_param")
# what each plot shows, for the report's captions (a caption that was the file's name said nothing)
CAPTIONS = {
    "profiles": "The runs by budget and the profiles this method fitted, with their optima.",
    "frontier": "N_opt and D_opt against compute: the law with its interval band, the optima it fitted (points) and "
                "the target (grey: beyond the runs).",
    "contours": "The loss over (N, D) (the law's where it has one, else the runs') with the efficient frontier "
                "(red) and iso-FLOP lines (dotted).",
    "residuals": "Residuals against compute: a trend with compute says the law's form misses the runs.",
    "tokens_per_param": "D_opt / N_opt against compute with its interval band, beside Chinchilla's ~20.",
}


def plot_fit(fitted: Any, out_dir, *, target: float | None = None, formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Write every plot of each fit in ``fitted`` (a FitResult or FitSet) into ``out_dir``; returns the paths."""
    results = fitted_results(fitted, "plot_fit")
    target, formats = check_target(target), check_formats(formats)  # before any figure is drawn
    return [p for r in results.values() for p in plot_result(r, out_dir, target=target, formats=formats)]


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


def _plot_profiles(fig, result: Any, budgets, target) -> None:
    ax = fig.add_subplot()
    draw_profiles(result, ax)
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
    ax.set(xscale="log", yscale="log", xlabel=PARAMS_LABEL, ylabel=TOKENS_LABEL.format(unit=result.runs.unit),
           ylim=(d.min() / 3, max(d.max(), frontier["D_opt"][0].max()) * 3),
           title=f"Loss over (N, D); dotted: iso-FLOP lines ({result.method})")
    ax.legend(fontsize=7)


def _plot_residuals(fig, result: Any, budgets, target) -> None:
    fig.subplots_adjust(left=0.14)  # signed tick labels ("-0.04") and a long label: room for both
    ax = fig.add_subplot()
    r = result.diagnostics.residuals
    ax.axhline(0, color="0.5", lw=0.8)
    ax.scatter(r["flops"], r["residual"], s=12, color="tab:blue")
    ax.set(xscale="log", xlabel=COMPUTE_LABEL, ylabel=f"residual ({result.diagnostics.r2_of})",
           title=f"Residuals, R^2 {fmt.r2(result.diagnostics.r2)} ({result.method})")


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
    ax.set(xscale="log", yscale="log", xlabel=COMPUTE_LABEL, ylabel=f"{result.runs.unit} per parameter D_opt / N_opt",
           title=f"{result.runs.unit.capitalize()} per parameter ({result.method})")
    ax.legend(fontsize=7)


_DRAW = {"profiles": _plot_profiles, "frontier": _plot_frontier, "contours": _plot_contours,
         "residuals": _plot_residuals, "tokens_per_param": _plot_tokens_per_param}

__all__ = ["PLOTS", "plot_result"]
