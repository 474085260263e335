"""Each approach's picture of the profiles it fitted (IsoFLOP curves, training curves).

Drawing belongs to the report, which reads results: ``draw_profiles(result, ax)`` dispatches on
the result's class, and a new approach registers its own with ``draw_profiles.register``.
"""

from __future__ import annotations

from functools import singledispatch
from typing import Any

import numpy as np

from flops_fit.fitting.approaches.curve_result import CurveLawResult
from flops_fit.fitting.approaches.envelope import EnvelopeResult
from flops_fit.fitting.approaches.isoflop import IsoflopResult
from flops_fit.fitting.approaches.parametric import ParametricResult
from flops_fit.fitting.laws.profiles import budget_groups, profile_curve
from flops_fit.fitting.laws.slices import slice_curve
from flops_fit.fitting.report.drawing import scatter_profiles


@singledispatch
def draw_profiles(result: Any, ax: Any) -> None:
    """Draw the profiles ``result`` fitted on ``ax``; for an approach without its own drawing,
    its runs by budget."""
    scatter_profiles(ax, result.runs, budget_groups(result.runs)[0])
    ax.set_title(f"IsoFLOP profiles ({result.method})")


@draw_profiles.register
def _(result: IsoflopResult, ax: Any) -> None:
    f = result.runs.frame
    groups = result.details["budgets_of_runs"]
    log_n, loss = np.log(f["params"].to_numpy(float)), f["loss"].to_numpy(float)
    exponents = result.details["optima"].attrs.get("exponents")
    for c, colour in scatter_profiles(ax, result.runs, groups).items():
        m = groups == c
        if np.unique(log_n[m]).size >= 3:
            line = np.linspace(log_n[m].min(), log_n[m].max(), 100)
            if exponents is not None:
                fitted = slice_curve((log_n[m], loss[m], np.ones(m.sum())), exponents, line)
            else:
                curve = "parabola" if result.details["curve"] == "slice" else result.details["curve"]
                fitted = profile_curve(log_n[m], loss[m], np.ones(m.sum()), curve, line)
            ax.plot(np.exp(line), fitted, color=colour, lw=1)
    good = result.details["optima"].dropna(subset=["log_n"])
    ax.scatter(np.exp(good["log_n"]), good["loss"], marker="*", s=90, color="k", zorder=4, label="minima")
    ax.set_title(f"IsoFLOP profiles ({result.details['curve']} per budget) and their minima")


@draw_profiles.register
def _(result: ParametricResult, ax: Any) -> None:
    groups, _ = budget_groups(result.runs)
    n = result.runs.frame["params"].to_numpy(float)
    optima = result.predict(np.unique(groups))
    for (c, colour), n_opt in zip(scatter_profiles(ax, result.runs, groups).items(), optima["N_opt"], strict=True):
        m = groups == c
        line = np.geomspace(min(n[m].min(), n_opt / 2), max(n[m].max(), n_opt * 2), 100)
        ax.plot(line, result.loss_surface(line, c / (result.params["k"] * line ** (1 + result.params.get("k_slope", 0.0)))),
                color=colour, lw=1)
    ax.scatter(optima["N_opt"], optima["loss"], marker="*", s=90, color="k", zorder=4, label="fitted optimum")
    ax.set_title("IsoFLOP profiles of the fitted law L(N, D) and its optima")


@draw_profiles.register
def _(result: EnvelopeResult, ax: Any) -> None:
    f = result.runs.frame
    env = result.details["envelope"]
    for curve, k in zip(f["curve"], f["flops"] / f["tokens"], strict=True):
        c = np.asarray(curve, float)
        ax.plot(c[:, 0] * k, c[:, 1], color="0.7", lw=0.8)
    good = env[env["excluded"] == ""]
    ax.plot(env["flops"], env["loss"], color="tab:blue", lw=1, label="envelope (all points)")
    ax.scatter(good["flops"], good["loss"], s=8, color="tab:red", zorder=3, label="envelope points fitted")
    ax.set(xscale="log", xlabel="training compute so far (FLOPs)", ylabel=result.runs.label,
           title="Approach 1: training curves and their lower envelope")


@draw_profiles.register
def _(result: CurveLawResult, ax: Any) -> None:
    pts, frame = result.details["_points"], result.runs.frame
    predicted = result.diagnostics.residuals["predicted"].to_numpy()
    import matplotlib

    sizes = np.unique(frame["params"])
    colours = dict(zip(sizes, matplotlib.colormaps["viridis"](np.linspace(0, 0.9, sizes.size)), strict=True))
    labelled = set()
    for i, run in frame.iterrows():
        m = (pts.run == i) & ~pts.final
        colour, size = colours[run["params"]], run["params"]
        label = None if size in labelled else f"N = {size:,.0f}"
        labelled.add(size)
        ax.scatter(pts.tokens[m], pts.loss[m], s=4, color=colour, label=label)
        ax.plot(pts.tokens[m], predicted[m], lw=0.8, color=colour)
    ax.set_xscale("log")
    ax.set_xlabel(f"{result.runs.unit} seen")  # samples for an image classifier's sweep
    ax.set_ylabel(f"training {result.runs.label}")  # with its unit, as every other profile's axis
    ax.set_title("Training curves (points) and the fitted curve law (lines), one colour per size")
