"""The report's figures across methods: the headline (Chinchilla's Figure 3 layout), a
forest plot of the exponent a, and the held-out check.

Headline: IsoFLOP curves with their minima | N_opt against C, the measured minima as
points and each method's law extended to the target with its band | D_opt against C.
Like the per-result plots, these read results only through their public methods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.laws.profiles import budget_groups, profile_optima
from flops_fit.fitting.report.drawing import (
    COMPUTE_LABEL,
    FRONTIER_LABELS,
    budget_span,
    draw_frontier,
    error_bar,
    new_figure,
    save_figure,
)
from flops_fit.fitting.report.profile_plots import draw_profiles
from flops_fit.fitting.validation.forecast import answer_chaining

# Every method the fit holds is drawn: a result's ``colour`` class attribute where its class
# declares one, else the next free colour of this cycle, in the order the fit holds them (so
# Approaches 1-3 and vpnls, fitted together, keep the colours of earlier reports; the
# interaction law, once drawn in vpnls's purple, gets its own).
PALETTE = ("tab:green", "tab:orange", "tab:blue", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan",
           "tab:red", "tab:gray")
ISOFLOP = "isoflop"  # Approach 2: the IsoFLOP profiles and minima the headline prefers to show


def method_colours(results: Mapping[str, Any]) -> dict[str, str]:
    """Each method's colour, distinct for up to ten methods and the same in every figure of a report."""
    declared = {m: getattr(r, "colour", None) for m, r in results.items()}
    free = [c for c in PALETTE if c not in declared.values()] or list(PALETTE)
    undeclared = [m for m, c in declared.items() if c is None]
    return {m: c if c is not None else free[undeclared.index(m) % len(free)] for m, c in declared.items()}


def profile_source(results: Mapping[str, Any]) -> Any:
    """The result whose profiles the headline shows: Approach 2's IsoFLOP curves, else the first
    law over (N, D) (its curves at each budget), else the first result."""
    laws = [r for r in results.values() if r.loss_surface(np.ones(1), np.ones(1)) is not None]
    return results.get(ISOFLOP) or next(iter(laws), None) or next(iter(results.values()))


def measured_minima(results: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(C, N, D) at the minima of the runs' IsoFLOP profiles: Approach 2's own when it ran,
    else the IsoFLOP slices through each budget's runs. None when no budget has an interior minimum."""
    if ISOFLOP in results:
        return results[ISOFLOP].observed_optima()
    runs = next(iter(results.values())).runs
    budgets, _ = budget_groups(runs)
    good = profile_optima(runs, budgets, np.ones(len(runs)), "slice").dropna(subset=["log_n"])
    if good.empty:
        return None
    return good["budget"].to_numpy(float), np.exp(good["log_n"].to_numpy()), np.exp(good["log_d"].to_numpy())


def headline(results: Mapping[str, Any], target: float, stem: Path, formats: Sequence[str]) -> list[Path]:
    """Three panels: the profiles, N_opt(C) and D_opt(C) with every method's law to ``target``."""
    fig = new_figure(16, 5.2)
    fig.subplots_adjust(left=0.055, right=0.99, bottom=0.12, top=0.86, wspace=0.26)
    source = profile_source(results)
    colours = method_colours(results)
    ax = fig.add_subplot(1, 3, 1)
    draw_profiles(source, ax)
    ax.set_title(f"IsoFLOP profiles ({source.method})", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    runs = source.runs
    budgets = budget_span(runs, target)
    minima = measured_minima(results)
    for i, key in enumerate(("N_opt", "D_opt")):
        ax = fig.add_subplot(1, 3, 2 + i)
        for j, (method, result) in enumerate(results.items()):
            colour = colours[method]
            draw_frontier(ax, result, key, budgets, colour=colour, label=method)
            t = result.predict(target).iloc[0]
            ax.errorbar([target * 1.08 ** j], [t[key]], yerr=error_bar(t[key], t[f"{key}_lo"], t[f"{key}_hi"]),
                        fmt="o", ms=4, color=colour, capsize=3)
        if minima is not None:
            ax.scatter(minima[0], minima[1 + i], s=22, color="k", zorder=4, label="measured minima")
        data_max = runs.frame["flops"].max()
        if target > data_max:
            ax.axvspan(data_max, target * 1.5, color="0.93", zorder=0)
            ax.axvline(target, color="0.4", ls="--", lw=0.8, label=f"target {fmt.flops(target)} FLOPs")
        ax.set(xlabel=COMPUTE_LABEL, ylabel=FRONTIER_LABELS[key].format(unit=runs.unit))
        ax.set_title(f"{key} against compute, extrapolated to the target (grey)", fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle("Compute-optimal scaling: profiles, N_opt(C) and D_opt(C) with intervals")
    return save_figure(fig, stem, formats)


def forest(results: Mapping[str, Any], stem: Path, formats: Sequence[str]) -> list[Path]:
    """The exponent a (N_opt ~ C^a) of every method, with its interval."""
    fig = _stacked_figure(7, len(results), left=0.17)
    ax = fig.add_subplot()
    level = next(iter(results.values())).level
    colours = method_colours(results)
    for j, (method, result) in enumerate(results.items()):
        a, lo, hi = result.exponents["a"]
        ax.errorbar([a], [j], xerr=error_bar(a, lo, hi), fmt="o", color=colours[method], capsize=4)
        ax.annotate(fmt.with_interval(a, lo, hi), (a, j), textcoords="offset points", xytext=(0, 7),
                    ha="center", fontsize=8)
    ax.axvline(0.5, color="0.6", ls="--", lw=0.8, label="a = 0.5 (Chinchilla)")
    ax.set_yticks(range(len(results)), list(results))
    ax.set_ylim(-0.6, len(results) - 0.3)
    ax.set(xlabel="exponent a of N_opt ~ C^a (dimensionless)",
           title=f"Exponent a by method, {100 * level:g}% intervals")
    ax.legend(fontsize=7, loc="lower right")
    return save_figure(fig, stem, formats)


def _stacked_figure(width: float, rows: int, *, left: float, title_lines: int = 1):
    """A figure for one row per item: fixed margins in inches, whatever the number of rows."""
    height = 1.1 + 0.3 * title_lines + 0.45 * rows
    fig = new_figure(width, height)
    fig.subplots_adjust(left=left, right=0.97, bottom=0.62 / height, top=1 - (0.15 + 0.3 * title_lines) / height)
    return fig


NOT_MADE = "no check made (why: the notes under the table)"
NO_VALUE = "no prediction or no observed value to compare"


def holdout_figure(checks: Mapping[str, Sequence[Any]], stem: Path, formats: Sequence[str],
                   colours: Mapping[str, str]) -> list[Path]:
    """Prediction / observation for N_opt and the minimum loss at each held-out budget: 1 is
    a perfect prediction; bars are the predicted intervals, grey the observed ones; each
    method in its ``colours`` (``method_colours`` of the fit's results)."""
    rows = [(m, c) for m, items in checks.items() for c in items]
    fig = _stacked_figure(12, len(rows), left=0.16, title_lines=2)
    fig.subplots_adjust(wspace=0.08)
    for i, (key, name) in enumerate((("n_opt", "N_opt"), ("loss", "minimum loss"))):
        ax = fig.add_subplot(1, 2, i + 1)
        for j, (method, c) in enumerate(rows):
            observed = getattr(c, f"observed_{key}")
            predicted = getattr(c, f"predicted_{key}")
            lo, hi = (np.asarray(getattr(c, f"{key}_interval"), float) / observed)
            olo, ohi = np.asarray(getattr(c, f"observed_{key}_interval"), float) / observed
            if np.isfinite(olo) and np.isfinite(ohi):
                ax.fill_betweenx([j - 0.3, j + 0.3], olo, ohi, color="0.85", lw=0)
            ratio = predicted / observed
            if np.isfinite(ratio):
                ax.errorbar([ratio], [j], xerr=error_bar(ratio, lo, hi), fmt="o", color=colours[method], capsize=4)
            else:  # an empty row read as a figure that lost its mark: say why there is none
                ax.annotate(NOT_MADE if c.reason else NO_VALUE, (0.5, j), xycoords=("axes fraction", "data"),
                            ha="center", va="center", fontsize=7, color="0.4", zorder=5,
                            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})  # over the line at 1
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_yticks(range(len(rows)), [f"{m} @ {fmt.flops(c.budget)}" for m, c in rows] if i == 0 else [])
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.set(xlabel=f"predicted / observed {name} (ratio, 1 = exact)", title=f"{name} at the held-out budget")
    fig.suptitle("Held-out check: laws fitted without the budget, against its own IsoFLOP minimum (grey: observed interval)",
                 fontsize=10)
    return save_figure(fig, stem, formats)


def chaining_figure(forecast: Any, stem: Path, formats: Sequence[str]) -> list[Path]:
    """Forward chaining, one panel per answer: each prediction's error against how far it
    extrapolated (C / C_k), the answer's own candidates in colour, the others in grey and the
    answer itself (its members' weighted errors, what its interval covers) in black, with its
    error model's drift carried to the target's ratio (line) and the band its interval rule gives
    (``Answer.band``), both in ratio space (predicted / observed - 1, never below -100%)."""
    fig = new_figure(12, 4.6)
    fig.subplots_adjust(wspace=0.22, top=0.84)
    reach = np.geomspace(1.0, max(forecast.ratio, max(r.ratio for r in forecast.records)), 60)
    for i, (q, key, name) in enumerate((("loss", "loss_error", "minimum loss"), ("n_opt", "n_opt_error", "N_opt"))):
        answer = forecast.answers[q]
        members = {(m["method"], m["scale"], m["focus"]) for m in answer.members}
        ax = fig.add_subplot(1, 2, i + 1)
        mine = np.array([(r.method, r.scale, r.focus) in members for r in forecast.records], dtype=bool)
        ratios = np.array([r.ratio for r in forecast.records], dtype=float)
        errors = 100 * np.array([getattr(r, key) for r in forecast.records], dtype=float)
        # one collection per colour, not one per record (the demo's 1,100 records took 7 s to draw)
        ax.scatter(ratios[~mine], errors[~mine], s=5, color="0.75", zorder=2)
        ax.scatter(ratios[mine], errors[mine], s=18, color="tab:red", zorder=3)
        own = answer_chaining(forecast.records, answer.members, key)
        if own:
            ax.scatter([r for _, r, _ in own], [100 * np.expm1(e) for _, _, e in own], s=22, marker="D",
                       color="k", zorder=4, label="the answer itself (members weighted)")
        centre, lo, hi, rule = answer.band(reach)
        ax.plot(reach, 100 * centre, color="tab:red", lw=1,
                label="drift b ln r (the point's correction)" if answer.correction else "no correction (drift not carried)")
        ax.fill_between(reach, 100 * lo, 100 * hi, color="tab:red", alpha=0.12, lw=0,
                        label=f"{100 * forecast.level:g}% band ({rule})")
        ax.axvline(forecast.ratio, color="k", ls="--", lw=0.8, label=f"target ({forecast.ratio:.3g}x)")
        ax.axhline(0.0, color="k", lw=0.6)
        ax.set_xscale("log")
        ax.set_ylim(bottom=max(ax.get_ylim()[0], -100.0))
        ax.set(xlabel="ratio C / C_k (how far beyond the fitted budgets)", ylabel="error (%)",
               title=f"{name}: predicted / observed - 1 (red: {answer.source})")
        ax.title.set_fontsize(8)
        ax.legend(fontsize=7)
    fig.suptitle("Forward chaining: fit the budgets up to C_k, predict the larger ones (grey: the other candidates)",
                 fontsize=10)
    return save_figure(fig, stem, formats)


def plot_error_law(law: Any, flops: np.ndarray, error: np.ndarray, path: Path,
                   target: float | None = None) -> list[Path]:
    """Every run's error against its compute, the frontier and the fitted law (to ``target``), as
    ``path`` with .png and .svg suffixes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter(flops, error, s=12, color="0.6", label="runs")
    ax.scatter(*law.frontier, s=24, color="tab:red", zorder=3, label="compute frontier")
    top = max(float(np.max(flops)), target or 0.0)
    grid = np.geomspace(float(np.min(flops)), top, 200)
    ax.plot(grid, law.error(grid), color="tab:blue", label="E = a (C + d)^-b + c")
    ax.axhline(law.params["c"], color="tab:blue", ls=":", lw=1, label=f"floor c = {law.params['c']:.3f}")
    ax.set(xscale="log", xlabel="training compute (FLOPs)", ylabel="held-out top-1 error",
           title="Top-1 error against compute (Zhai et al. 2022)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    paths = [path.with_suffix(".png"), path.with_suffix(".svg")]
    for out in paths:
        fig.savefig(out, dpi=110)
    plt.close(fig)
    return paths
