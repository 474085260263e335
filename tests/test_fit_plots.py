"""Plots are written as real PNG/SVG files and the HTML report shows every one of them."""

from __future__ import annotations

import json
import re

import pytest

import flops_fit
from flops_fit.cli.main import main
from flops_fit.fitting import fit
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.report.html_report import write_report
from flops_fit.fitting.report.plots import PLOTS
from flops_fit.fitting.synthetic import synthetic_runs

PNG = b"\x89PNG\r\n\x1a\n"


def _valid(path):
    data = path.read_bytes()
    if path.suffix == ".png":
        return data.startswith(PNG) and len(data) > 1000
    return b"<svg" in data[:2000] and data.rstrip().endswith(b"</svg>")


@pytest.fixture(scope="module")
def fitted():
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19, 1e20), sizes_per_budget=7, curve_points=10)
    return fit(frame, method="all", bootstrap=30)


def test_report_embeds_every_plot_and_links_its_svg(fitted, tmp_path):
    # Every method's every plot and the two cross-method figures, as PNG (embedded, and beside
    # the page) and SVG (linked).
    out = write_report(fitted, tmp_path / "report.html", target=1e22)
    names = [f"{m}_{name}" for m in fitted.results for name in PLOTS] + ["headline", "exponent_a"]
    assert sorted(p.name for p in (tmp_path / "report_plots").iterdir()) == sorted(
        f"{name}.{fmt}" for name in names for fmt in ("png", "svg"))
    text = out.read_text()
    for method in fitted.results:
        for name in PLOTS:
            assert f"alt='{method}_{name}'" in text
            svg = tmp_path / "report_plots" / f"{method}_{name}.svg"
            assert f"href='report_plots/{svg.name}'" in text and _valid(svg)
            assert _valid(svg.with_suffix(".png"))
    assert len(re.findall(r"src='data:image/png;base64,", text)) == len(fitted.results) * len(PLOTS) + 2
    assert "Provenance" in text and "Compute-optimal table" in text and "The answer at C = 1e+22 FLOPs" in text


@pytest.fixture(scope="module")
def held_out():
    """Every method that needs no training curves, each also fitted without the largest budget."""
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19, 1e20), sizes_per_budget=7).drop(columns=["curve"])
    return fit(frame, method="all", bootstrap=30, holdout="largest")


def test_report_leads_with_the_answer_and_the_held_out_check(held_out, tmp_path):
    fitted = held_out
    text = write_report(fitted, tmp_path).read_text()
    # Default target: 10x the largest budget; the answer comes before every figure and section.
    answer = text.index("The answer at C = 1e+21 FLOPs")
    assert answer < text.index("<img") < text.index("id='holdout'") < text.index("id='isoflop'")
    assert "on N_opt they agree (intervals overlap)" in text
    assert "every observed value at the held-out budget lies inside" in text or "misses the observed one" in text
    for name in ("headline", "exponent_a", "holdout"):
        assert f"alt='{name}'" in text and _valid(tmp_path / "report_plots" / f"{name}.svg")
    row = fitted["parametric"].predict(1e21).iloc[0]
    assert f"<td>parametric</td><td>{fmt.count(row.N_opt)} [{fmt.count(row.N_opt_lo)}, {fmt.count(row.N_opt_hi)}]" in text


def test_report_method_writes_into_a_folder(fitted, tmp_path):
    path = write_report(fitted["isoflop"], tmp_path / "sweep")
    assert path == tmp_path / "sweep" / "report.html" and "alt='isoflop_frontier'" in path.read_text()
    assert str(fitted["isoflop"]).startswith("Approach 2: IsoFLOP profiles")


def test_cli_report_and_plots(tmp_path, capsys):
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7).drop(columns=["curve"])
    csv = tmp_path / "runs.csv"
    frame.to_csv(csv, index=False)
    assert main(["report", str(csv), "--method", "isoflop", "--bootstrap", "20", "--out", str(tmp_path / "r.html")]) == 0
    assert "report written to" in capsys.readouterr().out
    text = (tmp_path / "r.html").read_text()
    assert all(f"alt='isoflop_{name}'" in text for name in PLOTS)
    assert str(csv) in text  # provenance names the source

    assert main(["fit", str(csv), "--method", "isoflop", "--bootstrap", "20", "--plots", str(tmp_path / "p"),
                 "--predict", "1e20", "1e21"]) == 0
    out = capsys.readouterr().out
    assert "Approach 2: IsoFLOP profiles" in out and "1e+21" in out and "plots written to" in out
    assert _valid(tmp_path / "p" / "isoflop_frontier.png")


def test_cli_reports_bad_input_as_an_error(tmp_path, capsys):
    csv = tmp_path / "runs.csv"
    csv.write_text("N,L\n1,2\n")
    assert main(["fit", str(csv)]) == 2
    assert "flops-fit: error: " in capsys.readouterr().err


def test_import_flops_fit_stays_light():
    import subprocess
    import sys

    code = ("import sys, flops_fit; flops_fit.fit; "
            "print(sorted(m for m in ('torch', 'scipy', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.e2e  # the fitting pages' examples end to end (fits, a report, a comparison; ~18 s)
def test_python_examples_in_docs_run(tmp_path, monkeypatch):
    from pathlib import Path

    docs = Path(__file__).resolve().parents[1] / "docs"
    pages = ("guide/fit.md", "guide/decide.md", "methods.md")  # the fitting pages' examples
    blocks = [(page, part.split("```", 1)[0]) for page in pages
              for part in (docs / page).read_text().split("```python\n")[1:]]
    # fit.md's fit and report; decide.md's compare and sizing; methods.md's approach registry
    assert [page for page, _ in blocks].count("guide/decide.md") == 2 and len(blocks) == 4
    monkeypatch.chdir(tmp_path)
    for page, code in blocks:
        exec(compile(code.replace("bootstrap=200", "bootstrap=20").replace("bootstrap=100", "bootstrap=20")
                     .replace("bootstrap=50", "bootstrap=10"), f"docs/{page}", "exec"), {})
    text = (tmp_path / "fit-report" / "report.html").read_text()
    assert len(text) > 10_000 and "Held-out check" in text


def test_the_figures_draw_every_fitted_method_in_its_own_colour(fitted, held_out, tmp_path):
    from matplotlib.colors import to_hex

    from flops_fit.fitting import APPROACHES
    from flops_fit.fitting.report.figures import forest, headline, holdout_figure, method_colours

    # method="all": every registered method, interaction included, but the curve law (it needs each run's
    # learning-rate schedule, which a sweep's store has and a DataFrame does not)
    fitted_here = [m for m in APPROACHES if m != "curve"]
    assert list(fitted.results) == fitted_here and "curve" in fitted.skipped
    colours = method_colours(fitted.results)
    assert len(set(colours.values())) == len(fitted_here)
    checks = held_out.holdout
    assert set(checks) == set(fitted_here) - {"envelope"}  # the methods that need no training curves
    figures = [(headline(fitted.results, 1e22, tmp_path / "headline", ("svg",)), colours),
               (forest(fitted.results, tmp_path / "forest", ("svg",)), colours),
               (holdout_figure(checks, tmp_path / "holdout", ("svg",), colours), {m: colours[m] for m in checks})]
    for [path], drawn in figures:
        svg = path.read_text()
        for method, colour in drawn.items():
            assert re.search(rf"<!-- {method}\b[^>]* -->", svg), (path.name, method)  # its label
            assert to_hex(colour) in svg, (path.name, method)  # and its marks, in its colour


def _page(path) -> str:
    """The page without the moment it was written."""
    return re.sub(r"&quot;written&quot;: &quot;[^&]*&quot;", "", path.read_text())


@pytest.mark.e2e
def test_a_report_drawn_on_workers_is_the_page_drawn_alone(held_out, tmp_path):
    # Each method's section drawn in another process: the same page, every embedded figure to the byte.
    alone = write_report(held_out, tmp_path / "alone")
    shared = write_report(held_out, tmp_path / "shared", workers=2)
    assert _page(shared) == _page(alone) and "Not computed" not in _page(shared)
    assert sorted(p.name for p in (tmp_path / "shared" / "report_plots").iterdir()) == sorted(
        p.name for p in (tmp_path / "alone" / "report_plots").iterdir())


@pytest.mark.e2e
def test_a_section_whose_worker_died_is_drawn_here():
    import os
    from concurrent.futures import ProcessPoolExecutor

    from flops_fit.fitting.report.html_report import BROKEN_DRAWING, _drawn
    from flops_fit.fitting.validation.holdout import worker_context

    with ProcessPoolExecutor(1, mp_context=worker_context()) as pool:
        future = pool.submit(os._exit, 1)
        with pytest.warns(UserWarning) as said:
            assert _drawn(future, lambda: "<h2>drawn here</h2>") == "<h2>drawn here</h2>"
    assert [str(w.message) for w in said] == [BROKEN_DRAWING] and '__name__ == "__main__"' in BROKEN_DRAWING


def test_report_says_what_loading_the_runs_noted(tmp_path):
    """The CLI's summary leads with the runs' notes (a column flagging outliers, runs not finished);
    the page said none of them."""
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, seed=1)
    frame["outlier"] = [True] * 2 + [False] * (len(frame) - 2)
    text = write_report(fit(frame, "isoflop", bootstrap=0, tracking=False), tmp_path, workers=1).read_text()
    note = text.index("Note: column &#x27;outlier&#x27; flags 2 of 15 runs (True); they are fitted with the others")
    assert note < text.index("The answer at C =")


@pytest.mark.parametrize("limits", [(0.55, 1.7), (1.02, 1.1), (2.1e5, 2.3e5)])
def test_a_narrow_log_axis_gets_two_or_more_distinct_tick_labels(limits):
    """compare's multiplier axis (0.6 to 1.6 on a log scale) showed one label, "1": ticks at 1, 2, 5
    per decade label nothing else in so narrow a range; its values could not be read."""
    from matplotlib.figure import Figure

    from flops_fit.fitting.report.drawing import plain_log_ticks

    fig = Figure()
    ax = fig.add_subplot()
    ax.set_yscale("log")
    ax.set_ylim(*limits)
    plain_log_ticks(fig)
    formatter = ax.yaxis.get_major_formatter()
    shown = {formatter(v, i) for i, v in enumerate(ax.yaxis.get_majorticklocs()) if limits[0] <= v <= limits[1]}
    assert len(shown) >= 2, shown


def test_every_plots_axis_label_lies_inside_its_figure(tmp_path):
    """The residuals plot's y label ("residual (log loss, per run)") began 20 pixels left of its figure,
    cut off: its signed tick labels took the margin the other plots leave for the label."""
    from flops_fit.fitting.report import plots
    from flops_fit.fitting.report.drawing import budget_span, new_figure, save_figure

    result = fit(synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7, seed=1), method="vpnls", bootstrap=0)
    for name in PLOTS:
        fig = new_figure(11, 4.8) if name == "frontier" else new_figure(7, 4.8)
        plots._DRAW[name](fig, result, budget_span(result.runs, None), None)
        save_figure(fig, tmp_path / name, ("png",))
        fig.draw_without_rendering()
        for ax in fig.axes:
            assert ax.yaxis.label.get_window_extent().x0 >= 0, name


@pytest.mark.parametrize(("writer", "what"), [("write_report", "flops_fit.fit"), ("plot_fit", "flops_fit.fit"),
                                              ("write_comparison", "flops_fit.compare")])
def test_a_writer_given_a_path_instead_of_a_fit_names_the_fix(writer, what, tmp_path):
    """flops_fit.write_report("runs.csv", OUT) (a source where its fit goes) failed deep inside with an
    AttributeError; each writer now names what it takes."""
    with pytest.raises(flops_fit.FitInputError, match=rf"^{writer} takes what {what} returns, got str: "):
        getattr(flops_fit, writer)("runs.csv", tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written


def test_an_r2_with_nothing_to_explain_is_withheld_with_its_reason(tmp_path):
    """R^2 is 1 - residual / variance: with no variance (a line through budgets whose minima are all one
    size: ``line_r2``'s NaN; runs whose losses were all equal gave the parametric laws -inf) it was printed
    as "nan" or "-inf" on the page, the residual plot's title and the summary, and as NaN or -Infinity
    (not JSON) in ``--json``."""
    import json

    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), seed=1).drop(columns="curve")
    result = fit(frame, "interaction", bootstrap=20, tracking=False)
    result.diagnostics.r2 = float("-inf")  # what the runs above gave with every loss set equal
    text = write_report(result, tmp_path, workers=1).read_text()
    line = text[text.index("R<sup>2</sup>"):].split("</p>")[0]
    assert "undefined: the fitted values do not vary" in line
    assert not re.search(r"(?i)\b(nan|inf)\b", line)
    summary = result.summary()
    assert "undefined: the fitted values do not vary" in summary and "-inf" not in summary
    assert json.loads(result.to_json(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))[
        "diagnostics"]["r2"] is None


def test_the_report_commands_text_answers_at_the_pages_target(tmp_path, capsys):
    """Without a forecast the page answers at 10x the largest budget, and the text `flops-fit report`
    printed under "report written to" answered at the largest run's compute instead (1e+19, the page
    1e+20): two answers for one command."""
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, seed=1).drop(columns=["curve"])
    csv = tmp_path / "runs.csv"
    frame.to_csv(csv, index=False)
    assert main(["report", str(csv), "--method", "all", "--holdout", "none", "--bootstrap", "20",
                 "--workers", "1", "--out", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    page = (tmp_path / "r.html").read_text()
    assert "<h2 id='answer'>The answer at C = 1e+20 FLOPs</h2>" in page
    assert "Every method at C = 1e+20 FLOPs" in out and "1e+19" not in out


def test_a_target_below_the_budgets_swept_is_called_an_extrapolation(tmp_path):
    """--target 1e15 on budgets 1e17-1e19: the page said "The target lies within the budgets swept"."""
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, seed=1).drop(columns=["curve"])
    result = fit(frame, "isoflop", bootstrap=0, tracking=False)
    below = write_report(result, tmp_path / "below.html", target=1e15, workers=1).read_text()
    assert "The target is 100x below the smallest budget swept: an extrapolation." in below
    assert "within the budgets swept" not in below
    inside = write_report(result, tmp_path / "inside.html", target=3e18, workers=1).read_text()
    assert "The target lies within the budgets swept." in inside


def test_report_refuses_a_negative_inference_token_count_before_fitting(tmp_path, capsys):
    """`fit --inference-tokens=-5` is refused with exit 2; `report` fitted, wrote its page with the section
    'Not computed: ... got -5.0' and exited 0."""
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, seed=1).drop(columns=["curve"])
    csv = tmp_path / "runs.csv"
    frame.to_csv(csv, index=False)
    out = tmp_path / "r.html"
    assert main(["report", str(csv), "--method", "vpnls", "--bootstrap", "0", "--inference-tokens=-5",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == ("flops-fit: error: --inference-tokens must be a whole number of tokens >= 0 (e.g. 2e12 for 2 "
                   "trillion), got -5\n")
    assert not out.exists()


def test_report_of_a_second_table_of_the_same_name_does_not_overwrite_the_first(tmp_path, capsys, monkeypatch):
    """`flops-fit report runs.csv` then `flops-fit report runs.jsonl` in one folder both wrote
    runs.report.html, the second over the first without a word: the second is refused (exit 2,
    before fitting) naming the other table and --out; the same table again still rewrites its page."""
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, seed=1).drop(columns=["curve"])
    frame.to_csv(tmp_path / "runs.csv", index=False)
    frame.to_json(tmp_path / "runs.jsonl", orient="records", lines=True)
    monkeypatch.chdir(tmp_path)
    options = ["--method", "isoflop", "--bootstrap", "0", "--workers", "1"]
    assert main(["report", "runs.csv", *options]) == 0
    first = (tmp_path / "runs.report.html").read_text()
    capsys.readouterr()
    assert main(["report", "runs.jsonl", *options]) == 2
    err = capsys.readouterr().err
    assert "runs.report.html holds the report of runs.csv, not of runs.jsonl: give --out PATH" in err
    assert "Traceback" not in err and err.count("\n") == 1
    assert (tmp_path / "runs.report.html").read_text() == first  # nothing already written is lost
    assert main(["report", "runs.jsonl", *options, "--out", "runs.jsonl.report.html"]) == 0
    assert main(["report", "./runs.csv", *options]) == 0  # its own page: rewritten as before


def test_compute_optimal_table_rows_below_the_smallest_run_are_noted(tmp_path):
    """The default table starts at the decade under the smallest run (1e16 on the FineWeb/C4 sweep, whose
    smallest budget is 8.5e16) and printed that row like a swept one: the text and the report now name
    the rows below the smallest run's compute; a sweep that starts on a decade gets no note."""
    frame = synthetic_runs(budgets=(3e17, 1e18, 3e18), sizes_per_budget=7).drop(columns=["curve"])
    result = fit(frame, method="isoflop", bootstrap=20)
    note = ("note: the row at 1e+17 FLOPs lies below the smallest run's compute (3e+17 FLOPs): the law read where "
            "no run was trained")
    lines = result.summary().splitlines()
    assert lines[lines.index(note) - 1].startswith("1e+21 ")  # under the table, after its last row
    page = write_report(result, tmp_path / "r.html", workers=1).read_text()
    assert "Note: the row at 1e+17 FLOPs lies below the smallest run&#x27;s compute (3e+17 FLOPs)" in page
    assert "note: the rows at 1e+16, 1e+17 FLOPs lie below" in result.summary([1e16, 1e17, 1e18])
    on_decades = fit(synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7).drop(columns=["curve"]),
                     method="isoflop", bootstrap=20)
    assert "below the smallest run" not in on_decades.summary()


def test_fit_json_carries_the_note_on_rows_below_the_smallest_run(tmp_path, capsys):
    """`flops-fit fit CSV` printed the note on table rows below the smallest run's compute; --json left it out,
    so a script reading the table took the 1e+17 row as swept. The JSON now carries the summary's notes."""
    synthetic_runs(budgets=(3e17, 1e18, 3e18), sizes_per_budget=7).drop(columns=["curve"]).to_csv(
        tmp_path / "runs.csv", index=False)
    assert main(["fit", str(tmp_path / "runs.csv"), "--method", "isoflop", "--bootstrap", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["notes"] == ["the row at 1e+17 FLOPs lies below the smallest run's compute (3e+17 FLOPs): the law "
                            "read where no run was trained"]
    assert [row["budget"] for row in out["table"]][:2] == [1e17, 1e18]
