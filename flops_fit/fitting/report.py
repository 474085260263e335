"""A self-contained HTML report: table, plots, diagnostics and where the runs came from.

PNGs are embedded (the file opens anywhere on its own); SVGs are written beside it in
``<name>_plots/`` and linked, for zooming and for papers.
"""

from __future__ import annotations

import base64
import datetime
import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flops_fit.fitting.fit_set import FitSet
from flops_fit.fitting.result import FitResult


def write_report(fitted: FitResult | FitSet, out: str | Path, *, target: float | None = None,
                 budgets: Sequence[float] | None = None) -> Path:
    """Write the report to ``out`` (an .html file, or a folder: ``report.html`` in it); returns its path."""
    from flops_fit._version import __version__

    out = Path(out)
    if out.suffix.lower() not in (".html", ".htm"):
        out = out / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    plot_dir = out.parent / f"{out.stem}_plots"
    fits = fitted if isinstance(fitted, FitSet) else FitSet({fitted.method: fitted})
    runs = fits.runs
    body = [f"<h1>flops-fit report</h1><p>{len(runs)} runs from <code>{_e(runs.source)}</code>; "
            f"methods: {', '.join(fits.results)}.</p>"]
    if fits.warnings or fits.skipped:
        body.append("<h2>Across approaches</h2><ul>" + "".join(f"<li class=warn>{_e(w)}</li>" for w in fits.warnings)
                    + "".join(f"<li>skipped {_e(m)}: {_e(w)}</li>" for m, w in fits.skipped.items()) + "</ul>")
    for _method, result in fits.results.items():
        body.append(_section(result, plot_dir, out.parent, target, budgets))
    provenance = {
        "source": runs.source, "runs": len(runs), "store metadata": runs.metadata or "none",
        "flops-fit": __version__, "written": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "target budget": target,
    }
    body.append("<h2>Provenance</h2><pre>" + _e(json.dumps(provenance, indent=2, default=str)) + "</pre>")
    out.write_text(_PAGE.format(body="\n".join(body)), encoding="utf-8")
    return out


def _section(result: FitResult, plot_dir: Path, root: Path, target, budgets) -> str:
    d = result.diagnostics
    parts = [f"<h2 id='{result.method}'>{_e(result.title)}</h2>",
             f"<p>{len(result.samples)} bootstrap resamples (seed {result.seed}), {100 * result.level:g}% "
             f"percentile intervals. R<sup>2</sup> ({_e(d.r2_of)}): {d.r2:.4f}.</p>",
             "<h3>Parameters</h3>", result.intervals().to_html(float_format=lambda v: f"{v:.4g}"),
             "<h3>Compute-optimal table</h3>", result.table(budgets).to_html(index=False, float_format=lambda v: f"{v:.4g}")]
    if target:
        parts += [f"<h3>Prediction at {target:.3g} FLOPs</h3>",
                  result.predict(target).to_html(index=False, float_format=lambda v: f"{v:.4g}")]
    parts.append("<h3>Diagnostics</h3><ul>" + "".join(f"<li class=warn>{_e(w)}</li>" for w in d.warnings)
                 + f"<li>{len(d.excluded)} exclusions</li></ul>")
    if d.excluded:
        parts.append("<details><summary>excluded and why</summary><ul>"
                     + "".join(f"<li>{_e(_describe(x))}</li>" for x in d.excluded) + "</ul></details>")
    parts.append("<h3>Plots</h3>")
    for path in result.plot(plot_dir, target=target):
        if path.suffix == ".png":
            data = base64.b64encode(path.read_bytes()).decode("ascii")
            svg = path.with_suffix(".svg").relative_to(root).as_posix()
            parts.append(f"<figure><img alt='{_e(path.stem)}' src='data:image/png;base64,{data}'>"
                         f"<figcaption>{_e(path.stem)} (<a href='{_e(svg)}'>SVG</a>)</figcaption></figure>")
    return "\n".join(parts)


def _describe(item: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in item.items())


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>flops-fit report</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; }}
table {{ border-collapse: collapse; font-size: 0.85em; }} td, th {{ border: 1px solid #ccc; padding: 2px 6px; }}
img {{ max-width: 100%; }} .warn {{ color: #a40; }} figure {{ margin: 1em 0; }}
</style></head><body>
{body}
</body></html>
"""
