"""The drawing primitives every figure shares (matplotlib, headless): labels, figures, colours,
the runs by budget, frontiers with their bands. They read a result only through its public methods."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.fitting import formatting as fmt

# Axis labels with units, written once (the loss axis is the runs' metric: ``runs.label``).
COMPUTE_LABEL = "compute C (FLOPs)"
PARAMS_LABEL = "parameters N"
TOKENS_LABEL = "{unit} D"
FRONTIER_LABELS = {"N_opt": "compute-optimal parameters N_opt", "D_opt": "compute-optimal {unit} D_opt"}
DPI = 110
LEGEND_BUDGETS = 8


def new_figure(width: float, height: float):
    """A headless figure with fixed margins (constrained layout measures every log-axis tick
    label and costs seconds)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.12, top=0.88, wspace=0.28)
    return fig


def tick_label(value: float, _position: Any = None) -> str:
    """A log axis's tick as plain text: "2e17", "0.5", "20" (no mathtext to typeset)."""
    if value == 0 or 1e-2 <= abs(value) < 1e4:
        return f"{value:g}"
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def plain_log_ticks(fig) -> None:
    """Label every log axis of ``fig`` in plain text at 1 (over many decades) or 1, 2, 5 per
    decade (1 to 9 where that labels fewer than two ticks; evenly spaced values on an axis
    narrower still), without minor ticks.

    matplotlib's default log ticks typeset each label as mathtext and build minor ticks one by
    one: most of a report's drawing time (a report draws some 20 figures, each saved twice).
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullLocator

    for ax in fig.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            lo, hi = sorted(abs(v) for v in limits)
            if axis.get_scale() != "log" or not lo > 0:
                continue
            subs = (1.0,) if hi / lo > 1e3 else (1.0, 2.0, 5.0)
            if _ticks_within(lo, hi, subs) < 2:  # a narrow axis (a multiplier of 0.6-1.6): every digit
                subs = tuple(float(d) for d in range(1, 10))
            if _ticks_within(lo, hi, subs) < 2:  # narrower still: evenly spaced values, not one label or none
                axis.set_major_locator(MaxNLocator(nbins=4))
                axis.set_major_formatter(FuncFormatter(lambda value, _position: f"{value:.4g}"))
            else:
                axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=12))
                axis.set_major_formatter(FuncFormatter(tick_label))
            axis.set_minor_locator(NullLocator())


def _ticks_within(lo: float, hi: float, subs: Sequence[float]) -> int:
    """How many of ``subs`` x 10^k lie in [lo, hi]."""
    decades = range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
    return sum(lo <= s * 10.0 ** k <= hi for k in decades for s in subs)


def check_formats(formats: Any) -> tuple[str, ...]:
    """The image formats to write, one named alone ("png") or several; FitInputError for one matplotlib cannot
    write (formats="png" was read letter by letter: "Format 'p' is not supported", a ValueError)."""
    from matplotlib.figure import Figure

    named = (formats,) if isinstance(formats, str) else tuple(formats) if isinstance(formats, (list, tuple)) else None
    known = Figure().canvas.get_supported_filetypes()
    if not named or not all(isinstance(f, str) and f.lower() in known for f in named):
        raise FitInputError(f"formats must name image formats, e.g. ('png', 'svg'); known: {', '.join(sorted(known))}; "
                            f"got {formats!r}")
    return tuple(f.lower() for f in named)


def save_figure(fig, stem: Path, formats: Sequence[str]) -> list[Path]:
    """Write ``fig`` as ``stem.<format>`` for each format; returns the paths."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    plain_log_ticks(fig)
    paths = []
    for f in formats:
        path = stem.with_name(f"{stem.name}.{f}")
        fig.savefig(path, format=f, dpi=DPI)
        paths.append(path)
    return paths


def budget_span(runs: Any, target: float | None, points: int = 120) -> np.ndarray:
    """Log-spaced budgets from the smallest run's FLOPs to the largest or the target."""
    flops = runs.frame["flops"].to_numpy(float)
    return np.geomspace(flops.min(), max(flops.max(), target or 0.0), points)


def bands(result: Any, budgets: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Point curves and interval bands for N_opt, D_opt, loss and tokens/param over ``budgets``.

    Kept on the result per budget span: a report draws each method's bands over the same span in
    several figures, and a law without a closed-form frontier minimises numerically over every
    resample each time (about a third of a report's drawing time before)."""
    budgets = np.asarray(budgets, dtype=float)
    cache = result.__dict__.setdefault("_bands", {})
    key = budgets.tobytes()
    if key not in cache:
        cache[key] = result.predict(budgets)
    table = cache[key]
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
    ax.set(xscale="log", yscale="log", xlabel=COMPUTE_LABEL, ylabel=FRONTIER_LABELS[key].format(unit=result.runs.unit))


def draw_target(ax, result: Any, key: str, target: float, *, colour: str = "tab:red") -> None:
    """Shade the extrapolation beyond the runs and mark the prediction at ``target``."""
    data_max = result.runs.frame["flops"].max()
    if target <= data_max:
        return
    ax.axvspan(data_max, target, color="0.92", zorder=0)
    t = result.predict(target).iloc[0]
    ax.errorbar([target], [t[key]], yerr=error_bar(t[key], t[f"{key}_lo"], t[f"{key}_hi"]), fmt="*", ms=11,
                color=colour, zorder=4, capsize=3,
                label=f"{fmt.flops(target)} FLOPs: {fmt.scale_interval(t[key], t[key + '_lo'], t[key + '_hi'])}")


def error_bar(value: float, lo: float, hi: float):
    """matplotlib's (2, 1) error extent for an interval around ``value``, None without one.

    A percentile interval need not contain its point estimate (few resamples): clipped at 0.
    """
    if not (np.isfinite(value) and np.isfinite(lo) and np.isfinite(hi)):
        return None
    return [[max(value - lo, 0.0)], [max(hi - value, 0.0)]]
