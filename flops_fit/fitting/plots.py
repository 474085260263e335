"""Pictures that show whether to believe a fit (matplotlib, headless: no pyplot, no display).

Each plot is written as PNG and SVG: the profiles (IsoFLOP curves or the training-curve
envelope), the N_opt / D_opt frontier with its interval band and the extrapolation to a
target budget, loss contours over (N, D) with the frontier, residuals, tokens per parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from flops_fit.fitting.result import FitResult

PLOTS = ("profiles", "frontier", "contours", "residuals", "tokens_per_param")


def plot_result(result: FitResult, out_dir, *, target: float | None = None,
                formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Write every plot of ``result`` as ``<method>_<plot>.<format>``; returns the paths."""
    from matplotlib.figure import Figure

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    budgets = _budget_span(result, target)
    paths = []
    for name in PLOTS:
        # Fixed margins: constrained layout measures every log-axis tick label and costs seconds.
        fig = Figure(figsize=(11, 4.8) if name == "frontier" else (7, 4.8))
        fig.subplots_adjust(left=0.11, right=0.97, bottom=0.11, top=0.9, wspace=0.25)
        globals()[f"_plot_{name}"](fig, result, budgets, target)
        for fmt in formats:
            path = out / f"{result.method}_{name}.{fmt}"
            fig.savefig(path, format=fmt, dpi=110)
            paths.append(path)
    return paths


def _budget_span(result: FitResult, target: float | None) -> np.ndarray:
    flops = result.runs.frame["flops"].to_numpy(float)
    hi = max(flops.max(), target or 0.0)
    return np.geomspace(flops.min(), hi, 120)


def _bands(result: FitResult, budgets: np.ndarray):
    """Point curves and interval bands for N_opt, D_opt, loss and tokens/param over ``budgets``."""
    table = result.predict(budgets)
    return {k: (table[k].to_numpy(), table[f"{k}_lo"].to_numpy(), table[f"{k}_hi"].to_numpy())
            for k in ("N_opt", "D_opt", "loss", "tokens_per_param")}


def _profile_groups(result: FitResult):
    from flops_fit.fitting.isoflop import budget_groups

    groups = result.details.get("budgets_of_runs")
    return groups if groups is not None else budget_groups(result.runs)[0]


def _plot_profiles(fig, result: FitResult, budgets, target) -> None:
    ax = fig.add_subplot()
    f = result.runs.frame
    if result.method == "envelope":
        env = result.details["envelope"]
        for curve, k in zip(f["curve"], f["flops"] / f["tokens"], strict=True):
            c = np.asarray(curve, float)
            ax.plot(c[:, 0] * k, c[:, 1], color="0.7", lw=0.8)
        good = env[env["excluded"] == ""]
        ax.plot(env["flops"], env["loss"], color="tab:blue", lw=1, label="envelope (all points)")
        ax.scatter(good["flops"], good["loss"], s=8, color="tab:red", zorder=3, label="envelope points fitted")
        ax.set(xscale="log", xlabel="training FLOPs so far", ylabel="training loss",
               title="Approach 1: training curves and their lower envelope")
        ax.legend(fontsize=8)
        return
    groups = _profile_groups(result)
    colours = _colours(np.unique(groups))
    for c in np.unique(groups):
        m = groups == c
        n, loss = f["params"].to_numpy(float)[m], f["loss"].to_numpy(float)[m]
        ax.scatter(n, loss, s=14, color=colours[c], label=f"C = {c:.2g}")
        lo, hi = n.min(), n.max()
        if result.method in ("parametric", "vpnls"):  # reach the fitted optimum even off the grid
            n_opt = float(result.predict(c)["N_opt"].iloc[0])
            lo, hi = min(lo, n_opt / 2), max(hi, n_opt * 2)
        line = np.geomspace(lo, hi, 100)
        fitted = _profile_curve(result, c, n, loss, line)
        if fitted is not None:
            ax.plot(line, fitted, color=colours[c], lw=1)
    if result.method == "isoflop":
        good = result.details["optima"].dropna(subset=["log_n"])
        ax.scatter(np.exp(good["log_n"]), good["loss"], marker="*", s=90, color="k", zorder=4, label="minima")
    elif result.method in ("parametric", "vpnls"):
        bands = _bands(result, np.unique(groups))
        ax.scatter(bands["N_opt"][0], bands["loss"][0], marker="*", s=90, color="k", zorder=4, label="fitted optimum")
    ax.set(xscale="log", xlabel="parameters N", ylabel="loss", title=f"IsoFLOP profiles ({result.method})")
    ax.legend(fontsize=7, ncol=2)


def _profile_curve(result: FitResult, budget: float, n: np.ndarray, loss: np.ndarray, line: np.ndarray):
    if result.method in ("parametric", "vpnls"):
        p = result.params
        d = budget / (p["k"] * line)
        return p["E"] + p["A"] * line ** -p["alpha"] + p["B"] * d ** -p["beta"]
    if np.unique(n).size < 3:
        return None
    if result.details.get("curve") == "akima":
        from scipy.interpolate import Akima1DInterpolator

        x = np.unique(np.log(n))
        y = np.array([loss[np.log(n) == v].mean() for v in x])
        return Akima1DInterpolator(x, y)(np.log(line))
    if result.details.get("curve") == "huber":
        from flops_fit.fitting.isoflop import huber_quadratic

        return np.polyval(huber_quadratic(np.log(n), loss, np.ones_like(loss)), np.log(line))
    return np.polyval(np.polyfit(np.log(n), loss, 2), np.log(line))


def _colours(values):
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return {v: cmap(i / max(len(values) - 1, 1)) for i, v in enumerate(values)}


def _observed_optima(result: FitResult):
    """(C, N, D) of the optima the method fitted its power laws to, if it has any."""
    if result.method == "isoflop":
        good = result.details["optima"].dropna(subset=["log_n"])
        return good["budget"].to_numpy(float), np.exp(good["log_n"].to_numpy()), np.exp(good["log_d"].to_numpy())
    if result.method == "envelope":
        good = result.details["envelope"].query("excluded == ''")
        return good["flops"].to_numpy(), good["N"].to_numpy(), good["D"].to_numpy()
    return None


def _plot_frontier(fig, result: FitResult, budgets, target) -> None:
    bands = _bands(result, budgets)
    observed = _observed_optima(result)
    a, b = result.exponents["a"], result.exponents["b"]
    for i, (key, label, exp) in enumerate((("N_opt", "parameters N_opt", a), ("D_opt", "tokens D_opt", b))):
        ax = fig.add_subplot(1, 2, i + 1)
        point, lo, hi = bands[key]
        ax.plot(budgets, point, color="tab:blue", label=f"fit: exponent {exp[0]:.3f} [{exp[1]:.3f}, {exp[2]:.3f}]")
        if np.isfinite(lo).any():
            ax.fill_between(budgets, lo, hi, color="tab:blue", alpha=0.2, label=f"{100 * result.level:g}% interval")
        if observed is not None:
            ax.scatter(observed[0], observed[1 + i], s=12, color="k", zorder=3, label="optima fitted")
        data_max = result.runs.frame["flops"].max()
        if target and target > data_max:
            ax.axvspan(data_max, target, color="0.9", zorder=0, label="extrapolation")
            t = result.predict(target).iloc[0]
            ax.scatter([target], [t[key]], marker="*", s=120, color="tab:red", zorder=4,
                       label=f"{target:.2g} FLOPs: {t[key]:.3g} [{t[key + '_lo']:.3g}, {t[key + '_hi']:.3g}]")
        ax.set(xscale="log", yscale="log", xlabel="compute C (FLOPs)", ylabel=label)
        ax.legend(fontsize=7)
    fig.suptitle(f"Compute-optimal frontier: {result.title}")


def _plot_contours(fig, result: FitResult, budgets, target) -> None:
    ax = fig.add_subplot()
    f = result.runs.frame
    n, d = f["params"].to_numpy(float), f["tokens"].to_numpy(float)
    frontier = _bands(result, budgets)
    if result.method in ("parametric", "vpnls"):
        p = result.params
        gn = np.geomspace(min(n.min(), frontier["N_opt"][0].min()), max(n.max(), frontier["N_opt"][0].max()), 120)
        gd = np.geomspace(min(d.min(), frontier["D_opt"][0].min()), max(d.max(), frontier["D_opt"][0].max()), 120)
        N, D = np.meshgrid(gn, gd)
        L = p["E"] + p["A"] * N ** -p["alpha"] + p["B"] * D ** -p["beta"]
        cs = ax.contourf(N, D, np.log(L), levels=20, cmap="viridis")
        fig.colorbar(cs, ax=ax, label="log fitted loss")
        ax.scatter(n, d, s=8, color="w", edgecolor="k", lw=0.3, label="runs")
    else:
        sc = ax.scatter(n, d, c=f["loss"], s=18, cmap="viridis", label="runs (colour: loss)")
        fig.colorbar(sc, ax=ax, label="loss")
    ax.plot(frontier["N_opt"][0], frontier["D_opt"][0], color="tab:red", lw=2, label="efficient frontier")
    k = float(np.median(f["flops"] / (f["params"] * f["tokens"])))  # FLOPs per parameter per token
    for c in np.geomspace(budgets[0], budgets[-1], 5):
        line = np.geomspace(n.min(), n.max() * 10, 50)
        ax.plot(line, c / (k * line), color="0.5", lw=0.6, ls=":")
    ax.set(xscale="log", yscale="log", xlabel="parameters N", ylabel="tokens D",
           ylim=(d.min() / 3, max(d.max(), frontier["D_opt"][0].max()) * 3),
           title=f"Loss over (N, D); dotted: iso-FLOP lines ({result.method})")
    ax.legend(fontsize=7)


def _plot_residuals(fig, result: FitResult, budgets, target) -> None:
    ax = fig.add_subplot()
    r = result.diagnostics.residuals
    ax.axhline(0, color="0.5", lw=0.8)
    ax.scatter(r["flops"], r["residual"], s=12, color="tab:blue")
    ax.set(xscale="log", xlabel="compute C (FLOPs)", ylabel=f"residual ({result.diagnostics.r2_of})",
           title=f"Residuals, R^2 = {result.diagnostics.r2:.4f} ({result.method})")


def _plot_tokens_per_param(fig, result: FitResult, budgets, target) -> None:
    ax = fig.add_subplot()
    point, lo, hi = _bands(result, budgets)["tokens_per_param"]
    ax.plot(budgets, point, color="tab:blue", label="fit")
    if np.isfinite(lo).any():
        ax.fill_between(budgets, lo, hi, color="tab:blue", alpha=0.2, label=f"{100 * result.level:g}% interval")
    observed = _observed_optima(result)
    if observed is not None:
        ax.scatter(observed[0], observed[2] / observed[1], s=12, color="k", label="optima fitted")
    ax.axhline(20, color="0.6", ls="--", lw=0.8, label="Chinchilla's ~20")
    ax.set(xscale="log", yscale="log", xlabel="compute C (FLOPs)", ylabel="tokens per parameter D_opt / N_opt",
           title=f"Tokens per parameter ({result.method})")
    ax.legend(fontsize=7)


__all__ = ["PLOTS", "plot_result"]
