"""A self-contained HTML report that leads with the answer.

Top: for a target budget (default 10x the largest swept), each method's N_opt, D_opt,
tokens per parameter and loss with intervals, whether the methods agree, the held-out
check and the warnings that matter. Then the headline figure, the forest plot of the
exponent a, the held-out section, each method's details, and the provenance of the runs.

PNGs are embedded (the file opens anywhere on its own); SVGs are written beside it in
``<name>_plots/`` and linked, for zooming and for papers. The report reads a fit through
``results`` / ``skipped`` / ``warnings`` / ``holdout`` (one FitResult or a FitSet).
"""

from __future__ import annotations

import datetime
import json
import platform
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor
from contextlib import nullcontext, suppress
from importlib import metadata
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from flops_fit._version import __version__
from flops_fit.errors import FitInputError, NoFitError, NoRunsError
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.approaches.fit_set import ANSWER_HEADERS, answer_rows
from flops_fit.fitting.approaches.result import (
    below_swept,
    fitted_results,
    param_rows,
    prediction_rows,
)
from flops_fit.fitting.decisions.inference import (
    SIZING_HEADERS,
    below_runs,
    check_target,
    headers,
    nothing_served,
    sizing_rows,
    unreached,
)
from flops_fit.fitting.inputs import METRICS
from flops_fit.fitting.laws.error_law import fit_error_law
from flops_fit.fitting.laws.profiles import budget_groups
from flops_fit.fitting.report.figures import (
    chaining_figure,
    forest,
    headline,
    holdout_figure,
    method_colours,
    plot_error_law,
)
from flops_fit.fitting.report.html import PAGE, Figures, escape, html_table
from flops_fit.fitting.report.plots import CAPTIONS, plot_result
from flops_fit.fitting.report.rate_notes import reach_note, target_rate_note
from flops_fit.fitting.scales import SCALES
from flops_fit.fitting.validation.forecast import (
    CANDIDATE_HEADERS,
    CHAIN_HEADERS,
    answer_line,
    candidate_rows,
    chain_rows,
    default_target,
    prior_note,
)
from flops_fit.fitting.validation.holdout import (
    COUNT_HEADERS,
    HOLDOUT_HEADERS,
    count_legend,
    furthest_checks,
    holdout_count_rows,
    holdout_misses,
    holdout_notes,
    holdout_rows,
    worker_context,
)
from flops_fit.machine import resolve_workers

TOP_WARNINGS = 8
PAGE_NOTES = "the notes under the held-out table"  # where the page says why a check was not made
FOLD_ROWS = 30  # a held-out table longer than a screen is folded under its per-method counts


def write_report(fitted: Any, out: str | Path, *, target: float | None = None,
                 budgets: Sequence[float] | None = None, inference_tokens: float | None = None,
                 at: tuple[Sequence[float], Sequence[float]] | None = None, workers: int | None = None,
                 command: str | None = None) -> Path:
    """Write the report to ``out`` (an .html file, or a folder: ``report.html`` in it); returns its path.

    ``at`` (sizes, token counts) adds the loss of those planned runs (``loss_at``). A section that
    cannot be computed says why in its place: the page is always written. ``fitted`` may also be the
    ``NoFitError`` a fit raised: the page then says why no method gave an answer. ``workers`` > 1
    draws each method's section in ``workers - 1`` other processes while this one draws the rest
    (the same page, sooner: drawing is most of a report's time); None (default) the cores free now,
    where worker processes can start (``flops_fit.machine``), else 1. ``command``, the command line that
    wrote the page (the CLI gives its own), goes into the provenance with the fit's settings."""
    if isinstance(fitted, NoFitError):
        return write_failure(str(fitted), out, getattr(fitted, "source", "the runs"),
                             fitted=not isinstance(fitted, NoRunsError), command=command,
                             unfinished=getattr(fitted, "unfinished", 0))
    results = fitted_results(fitted, "write_report")
    out = _html_path(out)
    workers = resolve_workers(workers, "workers", FitInputError)
    plot_dir = out.parent / f"{out.stem}_plots"
    runs = next(iter(results.values())).runs
    target = check_target(target) or default_target(runs)  # -1e21, nan or "1e21" drew the page there
    figure = Figures(plot_dir, out.parent)
    pool = ProcessPoolExecutor(workers - 1, mp_context=worker_context()) if workers > 1 else None
    with pool or nullcontext():
        drawn = {}
        if pool is not None:
            with suppress(BrokenExecutor):
                for method, result in results.items():
                    drawn[method] = pool.submit(_section, result, figure, plot_dir, target, budgets)
        body = _body(fitted, runs, target, figure, plot_dir, at, inference_tokens)
        for method, result in results.items():
            body.append(_guarded(result.title, lambda m=method, r=result: _drawn(
                drawn.get(m), lambda: _section(r, figure, plot_dir, target, budgets)), anchor=method))
    body.append("<h2 id='provenance'>Provenance</h2><pre>"
                + escape(json.dumps(provenance(fitted, runs, target, command), indent=2, default=str)) + "</pre>")
    out.write_text(PAGE.format(body="\n".join(body)), encoding="utf-8")
    return out


def provenance(fitted: Any, runs: Any, target: float, command: str | None) -> dict[str, Any]:
    """What a reader needs to write the page again: the source and the rows of it fitted (a page on one
    study of a table of several said only the table's name), the fit's settings, the command, the versions."""
    results = fitted.results
    first = next(iter(results.values()))
    return {
        "source": runs.source, "rows selected": runs.selected or "all", "runs": len(runs), "metric": runs.metric,
        "scale": runs.scale, "methods": list(results), "skipped": list(fitted.skipped) or "none",
        "bootstrap resamples kept": {m: len(r.samples) for m, r in results.items()}, "seed": first.seed,
        "level": first.level, "target budget": target,
        "command": command or "none recorded (written from Python: flops_fit.write_report)",
        "store metadata": runs.metadata or "none", "flops-fit": __version__, "versions": _versions(),
        "written": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def _versions() -> dict[str, str]:
    """Python's and the numeric libraries' versions, read from their installed metadata (nothing imported)."""
    found = {"python": platform.python_version()}
    for name in ("numpy", "scipy", "pandas", "matplotlib", "torch"):
        with suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


# Said when a drawing worker stops: the page is whole, but the worker may have run the caller's script again.
BROKEN_DRAWING = ("a report-drawing worker process (workers > 1) stopped before it returned, so its sections were "
                  "drawn here. A script that writes a report with workers > 1 must start its work under "
                  "`if __name__ == \"__main__\":` (each worker imports the script again); or use workers=1")


def _drawn(future: Future | None, draw: Callable[[], str]) -> str:
    """A section a worker drew, or this process's drawing where there is no worker or its pool broke
    (a script without a main guard, a worker killed): the page never loses a section to the pool."""
    if future is not None:
        try:
            return future.result()
        except BrokenExecutor:
            warnings.warn(BROKEN_DRAWING, stacklevel=2)  # once per session: the warnings filter's default
    return draw()


def _body(fitted: Any, runs: Any, target: float, figure: Figures, plot_dir: Path, at, inference_tokens) -> list[str]:
    """The page up to each method's own section: the answer, chaining, figures, held-out check."""
    results = fitted.results
    body = [_guarded("The answer", lambda: _answer(fitted, runs, target), anchor="answer")]
    if at is not None:
        body.append(_guarded("The loss of planned runs", lambda: _planned_section(fitted, at), anchor="planned"))
    forecast = getattr(fitted, "forecast", None)
    if forecast is not None:
        body.append(_guarded("Forward chaining", lambda: _chaining_section(forecast, figure, plot_dir),
                             anchor="chaining"))
    body.append("<h2 id='headline'>The fit at a glance</h2>")
    body.append(_guarded("The headline figure", lambda: figure.embed(
        headline(results, target, plot_dir / "headline", ("png", "svg")),
        "Left: each budget's runs, the fitted profiles and their minima. Middle and right: "
        "N_opt and D_opt against compute; points are the measured minima, lines each method's "
        "law with its interval band, extended to the target (grey: extrapolation).")))
    body.append(_guarded("The forest plot", lambda: figure.embed(
        forest(results, plot_dir / "exponent_a", ("png", "svg")),
        "The exponent a of N_opt ~ C^a by method, with intervals.")))
    if fitted.holdout:
        body.append(_guarded("The held-out check", lambda: _holdout_section(fitted.holdout, figure, plot_dir,
                                                                           method_colours(results)), anchor="holdout"))
    if inference_tokens is not None:
        body.append(_guarded("Sizing for inference", lambda: _inference_section(fitted, inference_tokens, target),
                             anchor="inference"))
    errors = _guarded("Top-1 error", lambda: _error_section(runs, figure, plot_dir, target), anchor="error")
    if errors:
        body.append(errors)
    return body


def _html_path(out: str | Path) -> Path:
    out = Path(out)
    if out.suffix.lower() not in (".html", ".htm"):
        out = out / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


def _guarded(what: str, build, anchor: str | None = None) -> str:
    """``build()``'s HTML, or a line saying why ``what`` could not be computed: one weak section never
    costs the whole page (the fits behind it are checked at the source, ``validity``). The failed section's
    heading keeps the section's ``anchor`` (its id), so the page's links to it (#holdout, #chaining) still
    land on it and the reader finds why it is missing."""
    try:
        return build()
    except Exception as exc:  # noqa: BLE001 - the page is written whatever one section meets
        heading = f"<h2 id='{escape(anchor)}'>" if anchor else "<h2>"
        return (f"{heading}{escape(what)}</h2><p class=warn>Not computed: {escape(type(exc).__name__)}: "
                f"{escape(exc)} (the other sections are drawn without it)</p>")


def write_failure(reason: str, out: str | Path, source: Any, *, fitted: bool = True, command: str | None = None,
                  unfinished: int = 0) -> Path:
    """A page for runs no method could fit: the source and each method's reason (``fit``'s NoFitError); or, not
    ``fitted``, for runs none of which finished (``NoRunsError``), where more budgets are no help. ``unfinished``
    runs read (pending, running) come first in the advice: a sweep stopped part way needs its runs trained."""
    out = _html_path(out)
    written = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    advice = ("No method gave a finite, ordered answer on these runs, so no number is shown. More budgets, more "
              "sizes around each budget's optimum or less noisy runs (longer runs, a larger dataset) help." if fitted
              else "No run finished with a loss, so nothing was fitted and no number is shown: train the runs (the "
              "line above says how), then write the report again.")
    if fitted and unfinished:
        advice = (f"No method gave a finite, ordered answer on these runs, so no number is shown; {unfinished} of the "
                  "runs read have not finished (pending or running) and were left out: train them first (a sweep "
                  f"folder: `flops-fit status {source}` lists them, `flops-fit sweep CONFIG --out {source} --resume` "
                  "trains them), then write the report again. More budgets or sizes help if they still give no answer.")
    body = ["<h1>flops-fit report</h1>", f"<p class=lead>Runs from <code>{escape(source)}</code>.</p>",
            "<h2 id='answer'>No answer</h2>", f"<p class=warn>{escape(reason)}</p>", f"<p>{escape(advice)}</p>",
            "<h2 id='provenance'>Provenance</h2><pre>" + escape(json.dumps(
                {"source": str(source), "command": command or "none recorded (written from Python)",
                 "flops-fit": __version__, "versions": _versions(), "written": written}, indent=2)) + "</pre>"]
    out.write_text(PAGE.format(body="\n".join(body)), encoding="utf-8")
    return out


def _planned_section(fitted: Any, at: tuple[Sequence[float], Sequence[float]]) -> str:
    """The loss of planned runs (N, D) with the interval's parts (``planned``)."""
    head = "<h2 id='planned'>The loss of planned runs</h2>"
    try:
        planned = fitted.loss_at(*at)
    except FitInputError as exc:
        return head + f"<p class=warn>{escape(exc)}</p>"
    rows = [[*cells[:4], *(part if part == "-" else f"\u00b1{part}" for part in cells[4:])] for cells in planned.rows()]
    others = [f for f in planned.forms if f != planned.method]  # "comparable forms: interaction" named the law itself
    return "\n".join([
        head, f"<p>From <b>{escape(planned.method)}</b> (other law forms that fit these runs as well: "
        f"{escape(', '.join(others)) if others else 'none, so the forms part is 0'}). The "
        f"{100 * planned.level:g}% interval combines the bootstrap, the spread of the comparable law forms and an "
        f"extrapolation error of {100 * planned.slope:.2f}% per unit of distance in (ln N, ln D) from the fitted runs "
        "(0 inside them; measured on public runs, docs/validation/planned-runs.md).</p>",
        html_table(["params N", f"{planned.unit} D", planned.label, "distance", "bootstrap", "forms", "extrapolation"], rows),
        *(f"<p class=warn>{escape(n)}</p>" for n in planned.notes)])


def _answer(fitted: Any, runs: Any, target: float) -> str:
    results = fitted.results
    budgets, _ = budget_groups(runs)
    swept = np.unique(budgets)
    level = next(iter(results.values())).level
    predictions = {m: r.predict(target).iloc[0] for m, r in results.items()}
    rows = answer_rows(results, target)
    parts = ["<h1>flops-fit report</h1>",
             f"<p class=lead>{len(runs)} runs from <code>{escape(runs.source)}</code>"
             + (f" (the rows with {escape(runs.selected)})" if runs.selected else "") + f" at {len(swept)} budgets "
             f"({fmt.flops(swept.min())} to {fmt.flops(swept.max())} FLOPs); methods: {escape(', '.join(results))}; "
             f"fitted metric: {escape(METRICS[runs.metric])}; scale: {escape(SCALES[runs.scale])}.</p>"]
    parts += [f"<p class=warn>Note: {escape(note)}.</p>" for note in runs.notes]  # as the CLI's summary says first
    forecast = getattr(fitted, "forecast", None)
    if forecast is not None:
        parts.append(_forecast(forecast))
        parts += target_rate_note(runs, forecast)
    parts += [f"<h2 id='answer'>The answer at C = {fmt.flops(target)} FLOPs"
              f"{', by every method' if forecast is not None else ''}</h2>",
             f"<p>{_target_note(target, swept.min(), swept.max())} Values are estimates with {100 * level:g}% bootstrap "
             "intervals in brackets" + (": they resample these runs only, so the error of extrapolating past "
                                        "them is not in them (the forecast's intervals include it)"
                                        if forecast is not None else "") + ".</p>",
             html_table([h.format(loss=runs.label, unit=runs.unit, size=SCALES[runs.scale]) for h in ANSWER_HEADERS], rows),
             f"<p>{escape(agreement(predictions, list(fitted.skipped)))}</p>"]
    if fitted.holdout:
        misses = holdout_misses(fitted.holdout, PAGE_NOTES)
        parts.append("<p><b>Held-out check</b> (<a href='#holdout'>details</a>): "
                     + escape("; ".join(misses) if misses else
                          "every observed value at the held-out budget lies inside its predicted interval") + ".</p>")
    parts += reach_note(runs)
    warnings = important_warnings(fitted)
    if warnings:
        shown = "".join(f"<li class=warn>{escape(w)}</li>" for w in warnings[:TOP_WARNINGS])
        more = len(warnings) - TOP_WARNINGS
        parts.append("<h3>Warnings</h3><ul>" + shown
                     + (f"<li>{more} more in the method sections below</li>" if more > 0 else "") + "</ul>")
    if fitted.skipped:
        parts.append("<p>Skipped: " + "; ".join(f"{escape(m)}: {escape(w)}" for m, w in fitted.skipped.items()) + "</p>")
    return "\n".join(parts)


def _inference_section(fitted: Any, tokens: float, target: float) -> str:
    """Each law's sizing for serving ``tokens`` (Sardana et al. 2024), at the swept budgets and the target."""
    runs = next(iter(fitted.results.values())).runs
    parts = [f"<h2 id='inference'>Sized for {escape(fmt.count(tokens))} inference {runs.unit}</h2>",
             "<p>The N and D that reach the compute-optimal model's loss at each training budget with the least "
             "training plus inference FLOPs (a forward pass, a third of a training step's FLOPs, per "
             f"{runs.unit[:-1]} served), against the compute-optimal model's own total.</p>"]
    for result in fitted.sizable():
        budgets = np.append(np.unique(budget_groups(result.runs)[0]), target)
        sizing = result.predict(budgets, inference_tokens=tokens)
        parts += [f"<h3>{escape(result.method)}</h3>", html_table(headers(SIZING_HEADERS, runs), sizing_rows(sizing)),
                  *(f"<p>{escape(n[0].upper() + n[1:])}.</p>" for n in nothing_served(sizing)),
                  *(f"<p class=warn>{escape(n[0].upper() + n[1:])}.</p>" for n in unreached(sizing)),
                  *(f"<p class=warn>Note: {escape(n)}</p>" for n in below_runs(result, sizing))]
    return "\n".join(parts)


def _error_section(runs: Any, figure: Figures, plot_dir: Path, target: float) -> str:
    """Image classifiers' top-1 error against compute and the Zhai et al. law fitted to its
    frontier, when every run recorded the error."""
    f = runs.frame
    if "top1_error" not in f or not np.isfinite(f["top1_error"].to_numpy(float)).all():
        return ""
    flops, error = f["flops"].to_numpy(float), f["top1_error"].to_numpy(float)
    parts = ["<h2 id='error'>Top-1 error against compute</h2>"]
    try:
        law = fit_error_law(flops, error, bootstrap=100, seed=0)
    except FitInputError as exc:
        return "\n".join(parts + [f"<p>{escape(exc)}</p>"])
    at, (lo, hi) = float(law.error(np.array([target]))[0]), law.error_interval(target)
    forecast = (f"{fmt.with_interval(at, lo, hi, fmt=_error)} ({100 * law.level:g}% interval of the frontier's "
                "resamples)" if np.isfinite([lo, hi]).all() and lo <= at <= hi and 0 <= lo and hi <= 1 else
                f"{_error(at)} (interval withheld: the resamples do not determine it)")
    parts.append(f"<p>{escape(law.summary())}. At the target C = {fmt.flops(target)} FLOPs it forecasts a top-1 error "
                 f"of {escape(forecast)}; the floor c is the error no compute removes.</p>")
    parts.append(figure.embed(plot_error_law(law, flops, error, plot_dir / "top1_error", target),
                              "Every run's held-out top-1 error (grey), the compute frontier (red) and the law "
                              "fitted to it."))
    return "\n".join(parts)


def _error(value: float) -> str:
    """A top-1 error as the page has always printed it, to 3 decimals."""
    return f"{value:.3f}"


def _forecast(f: Any) -> str:
    """The forecast first: each answer by the candidates that extrapolate it best, and where it comes from."""
    value = ", ".join([f"N_opt {fmt.scale_interval(*f.n_opt)} parameters",  # over 1000x withheld, as the text
                       f"D_opt {fmt.scale_interval(*f.d_opt)} {f.unit}",
                       f"{f.metric} {f.loss_text()}"])
    items = "".join(f"<li>{escape(answer_line(f.answers[q], f.ratio, f.metric))}</li>" for q in ("n_opt", "loss"))
    return "\n".join([
        f"<h2 id='forecast'>The forecast at C = {fmt.flops(f.target)} FLOPs ({f.ratio:.3g}x the largest budget)</h2>",
        f"<p class=lead><b>{escape(value)}</b></p>",
        "<p>A forecast is two answers, and the candidate (method, scale, focus) that extrapolates one best is often not "
        "the one that extrapolates the other: each answer comes from the candidates whose forward-chaining errors "
        "(fit the budgets up to each one, predict the larger ones) promise the smallest error at the target's ratio. "
        "Per candidate the errors are a drift (one sign, growing with the reach) plus scatter, one value per split, "
        f"combined with a prior learned on public sweeps ({escape(prior_note(f.prior))}). Each answer below says "
        f"whether its drift corrects the point and how its {100 * f.level:g}% interval is sized "
        "(<a href='#chaining'>details</a>):</p>",
        f"<ul>{items}</ul>",
        *(f"<p class=warn>Note: {escape(n)}.</p>" for n in [f.calibration_note()] if n),
        "<details><summary>Every method and scale, forward-chained (errors: mean at the largest ratios; drift and "
        "sd: per unit of ln r, with the prior)</summary>",
        html_table(CANDIDATE_HEADERS, candidate_rows(f.candidates)), "</details>"])


def _chaining_section(f: Any, figure: Figures, plot_dir: Path) -> str:
    rows = []
    for q in ("n_opt", "loss"):
        members = {(m["method"], m["scale"], m["focus"]) for m in f.answers[q].members}
        rows.append(f"<p>{escape(f.answers[q].source)} ({'N_opt' if q == 'n_opt' else 'loss'}):</p>")
        rows.append(html_table(CHAIN_HEADERS, chain_rows([r for r in f.records
                                                          if (r.method, r.scale, r.focus) in members])))
    return "\n".join([
        "<h2 id='chaining'>How far the forecast's laws extrapolate: forward chaining</h2>",
        "<p>Each point: a law fitted to the budgets up to C_k, predicting a larger budget C's IsoFLOP minimum. "
        "The line is the correction the answer's point takes at each ratio (0 where its drift is reported but "
        "not carried), the band its interval (in ratio space: an error cannot fall below -100%); the black "
        "diamonds, the answer's own errors, show the drift itself.</p>",
        figure.embed(chaining_figure(f, plot_dir / "chaining", ("png", "svg")),
                     "Error against the ratio C / C_k: each answer's candidates in red, the others in grey."),
        *rows])


def _target_note(target: float, smallest: float, largest: float) -> str:
    """Where the target lies against the budgets swept: beyond either end is an extrapolation."""
    if target > largest:
        return f"The target is {target / largest:.3g}x the largest budget swept: an extrapolation."
    if target < smallest:
        return f"The target is {smallest / target:.3g}x below the smallest budget swept: an extrapolation."
    return "The target lies within the budgets swept."


def agreement(predictions: Mapping[str, Any], skipped: Sequence[str] = ()) -> str:
    """Whether every pair of methods' N_opt and loss intervals at the target overlap; the ``skipped``
    methods (failed, or not applicable) are named as left out, never compared."""
    if len(predictions) < 2:
        if skipped:
            return (f"One method only gives an answer here: {', '.join(skipped)} could not (see Skipped, with each "
                    "one's reason), so nothing cross-checks it.")
        return "One method only: fit with method='all' to cross-check it."
    verdicts = []
    for key in ("N_opt", "D_opt", "loss"):
        vague = [m for m, p in predictions.items() if key != "loss" and fmt.too_wide(p[f"{key}_lo"], p[f"{key}_hi"])]
        left_out = (f"; {' and '.join(vague)} left out: {'its interval spans' if len(vague) == 1 else 'their intervals span'} "
                    f"over {fmt.SPAN_LIMIT:g}x" if vague else "")
        kept = {m: p for m, p in predictions.items() if m not in vague}
        if len(kept) < 2:
            verdicts.append(f"on {key} nothing to compare{left_out}")
            continue
        apart = []
        for (m1, p1), (m2, p2) in combinations(kept.items(), 2):
            lo1, hi1, lo2, hi2 = p1[f"{key}_lo"], p1[f"{key}_hi"], p2[f"{key}_lo"], p2[f"{key}_hi"]
            if np.all(np.isfinite([lo1, hi1, lo2, hi2])) and (hi1 < lo2 or hi2 < lo1):
                apart.append(f"{m1} / {m2}")
        verdicts.append((f"on {key} they disagree ({', '.join(apart)}: intervals apart" if apart
                         else f"on {key} they agree (intervals overlap") + f"{left_out})")
    return "Across methods at the target: " + "; ".join(verdicts) + "."


def important_warnings(fitted: Any) -> list[str]:
    """Cross-method warnings first, then held-out misses, then each method's, without repeats."""
    seen, out = set(), []
    items = list(fitted.warnings) + holdout_misses(fitted.holdout, PAGE_NOTES)
    items += [f"{m}: {w}" for m, r in fitted.results.items() for w in r.diagnostics.warnings
              if w not in fitted.warnings]
    for w in items:
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def _holdout_section(checks: Mapping[str, Sequence[Any]], figure: Figures, plot_dir: Path,
                     colours: Mapping[str, str]) -> str:
    parts = ["<h2 id='holdout'>Held-out check</h2>",
             "<p>Each method was fitted again without the held-out budget's runs (with forward chaining, on "
             "the budgets up to each split, predicting every larger one); its prediction for that budget is compared with the minimum of the budget's own IsoFLOP profile (interval: a bootstrap of "
             "that profile). Errors are (predicted - observed) / observed; <i>inside?</i> says whether the "
             "observed value lies inside the predicted interval.</p>"]
    rows, reasons = holdout_rows(checks), holdout_notes(checks)
    if len(rows) <= FOLD_ROWS:
        parts.append(html_table(HOLDOUT_HEADERS, rows))
    else:  # forward chaining on a large sweep: 1,160 rows were the page's held-out check; their counts lead
        parts += [f"<p>Per method ({escape(count_legend(PAGE_NOTES if reasons else None))}):</p>",
                  html_table(COUNT_HEADERS, holdout_count_rows(checks)),
                  f"<details><summary>Every check: {len(rows):,} rows, one per method, budget held out and "
                  "budgets fitted</summary>", html_table(HOLDOUT_HEADERS, rows), "</details>"]
    if reasons:
        parts.append("<ul>" + "".join(f"<li class=warn>{escape(r)}</li>" for r in reasons) + "</ul>")
    furthest = {m: furthest_checks(items) for m, items in checks.items()}
    forward = any(len(furthest[m]) < len(items) for m, items in checks.items())
    parts.append(figure.embed(holdout_figure(furthest, plot_dir / "holdout", ("png", "svg"), colours),
                              "Predicted / observed at the held-out budget: 1 is exact; bars are the predicted "
                              "intervals, grey bands the observed ones."
                              + (" Forward chaining: each budget's prediction from the fewest budgets fitted that gave one."
                                 if forward else "")))
    return "\n".join(parts)


def _section(result: Any, figure: Figures, plot_dir: Path, target: float, budgets) -> str:
    d = result.diagnostics
    par = result.intervals()
    params = param_rows(par, result.details.get("on_bound", ()))
    table = result.table(budgets)
    rows = prediction_rows(table, result.runs.unit, result.runs.loss_range)
    parts = [f"<h2 id='{escape(result.method)}'>{escape(result.title)}</h2>",
             f"<p>{len(result.samples)} bootstrap resamples (seed {result.seed}), {100 * result.level:g}% "
             f"percentile intervals. R<sup>2</sup> ({escape(d.r2_of)}): {fmt.r2(d.r2)}.</p>",
             "<div class=row><div><h3>Parameters</h3>",
             html_table(["param", "estimate", f"{100 * result.level:g}% interval", "bootstrap s.e."], params),
             "</div><div><h3>Compute-optimal table</h3>",
             html_table(["FLOPs", "N_opt", "D_opt", f"{result.runs.unit} / parameter", result.runs.label], rows),
             *(f"<p class=warn>Note: {escape(n)}.</p>" for n in [below_swept(table["budget"], result.runs)] if n),
             "</div></div>"]
    notes = [f"<li class=warn>{escape(w)}</li>" for w in d.warnings]
    if d.convergence:
        notes.append(f"<li>convergence: {escape(_describe(d.convergence))}</li>")
    notes.append(f"<li>{len(d.excluded)} exclusions</li>")
    parts.append("<h3>Diagnostics</h3><ul>" + "".join(notes) + "</ul>")
    if d.excluded:
        parts.append("<details><summary>excluded and why</summary><ul>"
                     + "".join(f"<li>{escape(_describe(x))}</li>" for x in d.excluded) + "</ul></details>")
    parts.append("<h3>Plots</h3>")
    for png in (p for p in plot_result(result, plot_dir, target=target) if p.suffix == ".png"):
        parts.append(figure.embed([png, png.with_suffix(".svg")],
                                  f"{result.method}: {CAPTIONS[png.stem.removeprefix(result.method + '_')]}"))
    return "\n".join(parts)


def _describe(item: Mapping[str, Any]) -> str:
    """"key: value, ..." with a nested mapping in parentheses (not a Python dict's repr), numbers to 4 figures."""
    return ", ".join(f"{k} ({_describe(v)})" if isinstance(v, Mapping) else
                     f"{k}: {fmt.sig(v, 4) if isinstance(v, float) else v}" for k, v in item.items())
