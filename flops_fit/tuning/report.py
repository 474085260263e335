"""The tune's report: the law, each cell's loss against rate with its parabola, and lr*
against the scale and the tokens with the law, in the fitting report's page and plot style
(``fitting.html``, ``fitting.plots``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.report.drawing import colours, new_figure, save_figure
from flops_fit.fitting.report.html import PAGE, Figures, escape, html_table
from flops_fit.sweeps.tuned import TUNE_TITLE
from flops_fit.tables import counted
from flops_fit.tuning.forms import form_rows
from flops_fit.tuning.law import rms_text

FORMATS = ("png", "svg")


def plot_cells(result: Any, stem: Path) -> list[Path]:
    """One panel per (size, tokens) cell: loss against rate, the parabola, its vertex and band."""
    keys = sorted({c.key for c in result.cells})
    cols = min(4, len(keys))
    rows = math.ceil(len(keys) / cols)
    height = 2.6 * rows + 0.9
    fig = new_figure(3.2 * cols, height)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.55 / height, top=1 - 0.35 / height, wspace=0.3, hspace=0.5)
    settings = sorted({(c.batch_size, c.beta2) for c in result.cells})
    colour = colours(settings, "tab10") if len(settings) > 1 else {settings[0]: "tab:blue"}
    for k, key in enumerate(keys):
        ax = fig.add_subplot(rows, cols, k + 1)
        for c in (c for c in result.cells if c.key == key):
            f, col = c.fit, colour[(c.batch_size, c.beta2)]
            ok = [i for i, v in enumerate(f.losses) if math.isfinite(v)]
            ax.plot([f.rates[i] for i in ok], [f.losses[i] for i in ok], "o", color=col, ms=4,
                    label=f"batch {c.batch_size}, beta2 {c.beta2:g}" if len(settings) > 1 else None)
            failed = [r for r, v in zip(f.rates, f.losses) if not math.isfinite(v)]
            if failed and ok:
                ax.plot(failed, [max(f.losses[i] for i in ok)] * len(failed), "x", color="tab:red", ms=6)
            if f.ok:
                span = [r for r in f.rates if f.lr_opt / 4 <= r <= f.lr_opt * 4] or [f.band_lo, f.band_hi]
                x = np.geomspace(min(min(span), f.band_lo), max(max(span), f.band_hi), 60)
                ax.plot(x, [f.loss_at(r) for r in x], "-", color=col, lw=1)
                ax.axvspan(f.band_lo, f.band_hi, color=col, alpha=0.12)
                ax.axvline(f.lr_opt, color=col, lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_title(f"size {key[0]}, {fmt.count(key[1])} {result.units}", fontsize=8)
        ax.tick_params(labelsize=7)
        if k % cols == 0:
            ax.set_ylabel("held-out loss", fontsize=8)
        if k >= len(keys) - cols:
            ax.set_xlabel("learning rate", fontsize=8)
    if len(settings) > 1:
        fig.axes[0].legend(fontsize=6)
    return save_figure(fig, stem, FORMATS)


def plot_law(result: Any, stem: Path) -> list[Path]:
    """lr* against the scale (rates moved to a common token count by the law's a) and against
    the tokens (moved to a common scale by b), with the law's line."""
    law = result.law
    used = [c for c in result.cells if c.fit.ok and c.beta2 == result.data["beta2"]]
    k = law.coefficients
    a, b = k["a"].value, k["b"].value
    c_exp = k["c"].value if k["c"] is not None else 0.0
    ref_tokens = math.exp(np.mean([math.log(c.tokens) for c in used]))
    ref_scale = math.exp(np.mean([math.log(c.scale) for c in used]))
    ref_batch = math.exp(np.mean([math.log(c.batch_size) for c in used]))
    fig = new_figure(11, 4.4)
    for i, (name, ref, exponent) in enumerate((("scale", ref_tokens, a), ("tokens", ref_scale, b))):
        ax = fig.add_subplot(1, 2, i + 1)
        xs, ys, lo, hi = [], [], [], []
        for c in used:
            other = (c.tokens / ref) ** exponent if name == "scale" else (c.scale / ref) ** exponent
            move = other * (c.batch_size / ref_batch) ** -c_exp
            xs.append(c.scale if name == "scale" else c.tokens)
            ys.append(c.fit.lr_opt * move)
            lo.append(c.fit.lr_lo * move if math.isfinite(c.fit.lr_lo) else c.fit.lr_opt * move)
            hi.append(c.fit.lr_hi * move if math.isfinite(c.fit.lr_hi) else c.fit.lr_opt * move)
        ys_arr = np.array(ys)
        ax.errorbar(xs, ys, yerr=[ys_arr - np.array(lo), np.array(hi) - ys_arr], fmt="o", color="tab:blue",
                    ms=4, capsize=2, label="cells' lr* (parabola vertex, interval)")
        grid = np.geomspace(min(xs) / 1.2, max(xs) * 1.2, 50)
        line = [law.rate(g, ref_tokens, ref_batch) if name == "scale" else law.rate(ref_scale, g, ref_batch)
                for g in grid]
        ax.plot(grid, line, "-", color="tab:red", label="law")
        ax.set_xscale("log")
        ax.set_yscale("log")
        label = law.scale if name == "scale" else f"{result.units} D"
        ax.set_xlabel(label)
        ax.set_ylabel("best learning rate lr*")
        at = (f"at {fmt.count(ref_tokens)} {result.units}" if name == "scale" else f"at {law.scale} {fmt.count(ref_scale)}")
        ax.set_title(f"lr* against {label} ({at})", fontsize=9)
        ax.legend(fontsize=7)
    return save_figure(fig, stem, FORMATS)


def _chosen(result: Any) -> str:
    """The law the planner uses: Marin's with its intervals, or the chosen form's."""
    chosen = result.data.get("chosen", "marin")
    return result.law.describe() if chosen == "marin" or not result.forms else result.forms[chosen].describe()


def write_tune_report(result: Any, out: Path) -> Path:
    """``out/report.html`` with its plots in ``out/report_plots``."""
    path = out / "report.html"
    plot_dir = out / "report_plots"
    figure = Figures(plot_dir, out)
    data = result.data
    law = data["law"]
    rows = []
    for name, c in law["coefficients"].items():
        if c is None:
            continue
        interval = f"[{fmt.sig(c['lo'], 4)}, {fmt.sig(c['hi'], 4)}]" if c["fitted"] else "not fitted"
        rows.append([name, fmt.sig(c["value"], 4), interval])
    cells = [[c["size"], fmt.count(c["params"]), fmt.count(c["tokens"]), c["batch_size"], f"{c['beta2']:g}",
              fmt.with_interval(c["lr_opt"], c["lr_lo"], c["lr_hi"]) if c["reason"] is None else "-",
              f"[{fmt.sig(c['band'][0])}, {fmt.sig(c['band'][1])}]" if c["reason"] is None else "-",
              fmt.sig(c["best_loss"], 4), "yes" if c["in_law"] else "no", c["reason"] or ""] for c in data["cells"]]
    body = [
        "<h1>flops-fit tune</h1>",
        f"<p class=lead>{counted(len(data['cells']), 'cell')} of {escape(data['model'])} on {escape(data['dataset'])} "
        f"(budgets {', '.join(fmt.flops(b) for b in data['setup']['budgets'])}), each trained at "
        f"{len(data['tune']['multipliers'])} multipliers of the sweep's rate ({escape(data['setup']['centre'])}): "
        f"{', '.join(f'{m:g}' for m in data['tune']['multipliers'])}.</p>",
        "<h2 id='law'>The law</h2>",
        f"<p><b>{escape(_chosen(result))}</b>; {rms_text(law['rms_log'], law['cells'])}; near-optimal band (loss within {100 * data['tune']['band']:g}% of a cell's best): "
        f"x{math.exp(law['band']):.2f} either side of lr* (median over cells); beta2 {data['beta2']:g}.</p>",
        html_table(["coefficient", "estimate", "95% interval"], rows),
    ]
    body += [f"<p class=warn>{escape(n)}</p>" for n in law["notes"]]
    if result.forms:
        body += ["<h2 id='forms'>Law forms</h2>",
                 "<p>Each form fitted to the cells' optima; an exponent is identified when its 95% interval excludes "
                 f"zero and is at most {data['identified_width']:g} wide. Held out: fitted without the largest "
                 "budget's cells, the loss their parabolas give at the predicted rate above their best.</p>",
                 html_table(["form", "exponent of", "estimate [95%]", "identified", "held out"], form_rows(result.forms)),
                 f"<p><b>Chosen: {escape(data['chosen_because'])}</b></p>"]
        body += [f"<p class=warn>{escape(n)}: exponents NOT identified: {escape(', '.join(f.unidentified))}</p>"
                 for n, f in result.forms.items() if f.unidentified]
    if data.get("batch_law"):
        b = data["batch_law"]
        body.append(f"<p>Batch-size law: B* = {b['k']:.4g} * C^{b['e']:.3g} [{b['e_lo']:.3g}, {b['e_hi']:.3g}] "
                    f"over {counted(b['cells'], 'cell')}.</p>")
    if data.get("holdout") and data["holdout"].get("kind") == "beyond":
        h = data["holdout"]
        body += ["<h2 id='holdout'>Held-out check beyond the grid</h2>",
                 f"<p>A cell {h['tokens_factor']:.2f}x further in {result.units} than any cell of the grid (size {h['size']}, "
                 f"{fmt.count(h['tokens'])} {result.units}), trained at the law's rate {h['predicted_lr']:.3g} times "
                 f"{', '.join(f'{m:g}' for m in h['multipliers'])}: losses "
                 f"{', '.join(f'{v:.4f}' for v in h['losses'])}. At the law's own rate {h['loss']:.4f} against the "
                 f"best {h['best_loss']:.4f}: {100 * h['excess']:+.2f}% (goal: within 0.5%, "
                 f"<b>{'met' if h['within_goal'] else 'missed'}</b>).</p>"]
    elif data.get("holdout"):
        h = data["holdout"]
        body += ["<h2 id='holdout'>Held-out check</h2>",
                 f"<p>The law fitted without the largest cell (size {h['size']}, {fmt.count(h['tokens'])} {result.units}) "
                 f"predicts lr {h['predicted_lr']:.3g}, band [{h['band'][0]:.3g}, {h['band'][1]:.3g}]. Trained "
                 f"there, the cell's held-out loss is {h['loss']:.4f} against the best of its own sweep "
                 f"{h['best_loss']:.4f}: {100 * h['excess']:+.2f}% (goal: within 0.5%, "
                 f"<b>{'met' if h['within_goal'] else 'missed'}</b>); the cell's own optimum {h['cell_lr_opt']:.3g} "
                 f"lies <b>{'inside' if h['optimum_in_band'] else 'outside'}</b> the predicted band.</p>"]
    body += ["<h2 id='cells'>Cells</h2>",
             html_table(["size", "params", result.units, "batch", "beta2", "lr* [95%]", "0.5% band", "best loss",
                     "in law", "no optimum because"], cells),
             figure.embed(plot_cells(result, plot_dir / "tune_cells"),
                          "Held-out loss against learning rate per cell: the parabola in log rate, its vertex "
                          "(dashed) and the near-optimal band (shaded); x: failed runs."),
             figure.embed(plot_law(result, plot_dir / "tune_law"),
                          f"The cells' best rates against the scale and the {result.units}, each moved to the other "
                          "variable's mean by the law, with the law's line.")]
    path.write_text(PAGE.format(body="\n".join(body)).replace("flops-fit report</title>", f"{TUNE_TITLE}</title>"),
                    encoding="utf-8")
    return path
