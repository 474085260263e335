"""Two recipes compared, as a page: the verdict, the multiplier's table, the exponents and
the figure of both frontiers (``decisions.compare`` computes them)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.fitting.decisions.compare import Comparison
from flops_fit.fitting.report.drawing import COMPUTE_LABEL, budget_span, new_figure, save_figure
from flops_fit.fitting.report.html import PAGE, Figures, escape, html_table


def plot_comparison(comparison: Comparison, out_dir: Any, formats: Sequence[str] = ("png", "svg")) -> list[Path]:
    """Both frontiers' loss against compute (with bands and the runs) and the multiplier: ``compare.*``."""
    fig = new_figure(11, 4.6)
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    span = np.geomspace(min(budget_span(r.runs, comparison.target)[0] for r in (comparison.a, comparison.b)), comparison.target, 80)
    for result, name, colour in ((comparison.a, f"A: {comparison.names[0]}", "tab:blue"),
                                 (comparison.b, f"B: {comparison.names[1]}", "tab:orange")):
        f = result.runs.frame
        left.scatter(f["flops"], f["loss"], s=10, alpha=0.35, color=colour)
        p = result.predict(span)
        left.plot(span, p["loss"], color=colour, label=f"{name}: compute-optimal frontier")
        left.fill_between(span, p["loss_lo"], p["loss_hi"], color=colour, alpha=0.2, lw=0)
    left.set(xscale="log", xlabel=COMPUTE_LABEL, ylabel=comparison.a.runs.label, title="Both recipes' frontiers")
    left.legend(fontsize=8)
    t = comparison.table
    right.plot(t["budget"], t["multiplier"], "o-", color="k")
    right.fill_between(t["budget"], t["multiplier_lo"], t["multiplier_hi"], color="grey", alpha=0.3, lw=0)
    right.axhline(1.0, color="tab:red", lw=1, ls="--")
    right.set(xscale="log", yscale="log", xlabel=COMPUTE_LABEL,
              ylabel="B's compute multiplier over A",  # the names, often long, are in the left panel's legend
              title=f"Effective compute multiplier ({100 * comparison.level:g}% band)")
    return save_figure(fig, Path(out_dir) / "compare", formats)


def write_comparison(comparison: Comparison, out: Any) -> Path:
    """An HTML page: the verdict, the table, the exponents, the figure (``out``: a file or a folder)."""
    if not isinstance(comparison, Comparison):
        raise FitInputError(f"write_comparison takes what flops_fit.compare returns, got {type(comparison).__name__}: "
                            "compare first, e.g. write_comparison(flops_fit.compare(A, B), OUT)")
    out = Path(out)
    if out.suffix.lower() not in (".html", ".htm"):
        out = out / "compare.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    plot_dir = out.parent / f"{out.stem}_plots"
    figure = Figures(plot_dir, out.parent)
    a, b = comparison.names
    body = [f"<h1>{escape(b)} against {escape(a)}</h1>",
            f"<p class=lead>A: <code>{escape(comparison.a.runs.source)}</code> ({len(comparison.a.runs)} runs); B: "
            f"<code>{escape(comparison.b.runs.source)}</code> ({len(comparison.b.runs)} runs); {escape(comparison.a.title)}; "
            f"{100 * comparison.level:g}% bootstrap intervals.</p>",
            f"<p><b>{escape(comparison.verdict())}</b></p>",
            "<h2>Effective compute multiplier</h2>",
            f"<p>The compute A needs to reach B's {escape(comparison.metric)} at C, over C: above 1, B is worth more compute.</p>",
            html_table(comparison.headers, comparison.rows()),
            "<h2>Do the exponents differ?</h2>",
            html_table(["exponent", "B - A", "verdict"], comparison.exponent_rows()),
            figure.embed(plot_comparison(comparison, plot_dir), "Left: each recipe's runs and compute-optimal loss frontier with "
                         "its band. Right: the multiplier against compute with its band; 1 is no difference.")]
    body += [f"<p class=warn>{escape(n)}</p>" for n in comparison.notes]
    out.write_text(PAGE.format(body="\n".join(body)), encoding="utf-8")
    return out
