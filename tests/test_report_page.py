"""The report read as a lab lead reads it before acting: it says which runs it fitted and how, and
its sections agree with one another."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from flops_fit.cli.main import main
from flops_fit.fitting import FitSet, fit, write_report
from flops_fit.fitting.report.figures import holdout_figure
from flops_fit.fitting.report.profile_plots import draw_profiles
from flops_fit.fitting.synthetic import synthetic_runs
from flops_fit.fitting.validation.holdout import HoldoutCheck, holdout_notes, holdout_summary

DATA = Path(__file__).parent / "data"


def _provenance(text: str) -> dict:
    found = re.search(r"<h2 id='provenance'>Provenance</h2><pre>(.*?)</pre>", text, re.S)
    assert found, "the page has no provenance"
    return json.loads(html.unescape(found.group(1)))


def test_a_report_on_one_study_of_a_table_says_which_rows_and_how_it_was_written(tmp_path, capsys):
    # Two studies in one table (as isoflops_public.csv holds three): the page on one of them said
    # only the table's name, its provenance neither the selection nor the command nor the settings.
    one = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, curve_points=0).assign(study="small")
    other = synthetic_runs(budgets=(1e18, 1e19, 1e20), sizes_per_budget=5, curve_points=0, seed=1).assign(study="big")
    csv = tmp_path / "two.csv"
    pd.concat([one, other]).drop(columns=["curve"]).to_csv(csv, index=False)
    out = tmp_path / "r.html"
    argv = ["report", str(csv), "--method", "isoflop", "--bootstrap", "12", "--seed", "3", "--holdout", "none",
            "--where", "study=small", "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    text = out.read_text()
    lead = re.search(r"<p class=lead>(.*?)</p>", text).group(1)
    assert f"{len(one)} runs from" in lead and "the rows with study=small" in lead
    given = _provenance(text)
    assert given["source"] == str(csv) and given["rows selected"] == "study=small" and given["runs"] == len(one)
    assert given["command"].split() == ["flops-fit", *argv]
    assert given["methods"] == ["isoflop"] and given["seed"] == 3 and given["level"] == 0.95
    kept = re.search(r"(\d+) bootstrap resamples \(seed 3\)", text).group(1)  # the method section's count
    assert given["bootstrap resamples kept"] == {"isoflop": int(kept)} and 0 < int(kept) <= 12
    assert given["versions"]["numpy"] and given["versions"]["python"]


def test_checks_forward_chaining_could_not_make_are_said_once_per_failed_fit_in_budget_order():
    # Forward chaining gives a failed fit's reason to every larger budget: the FineWeb/C4 sweep's
    # page listed 300 such lines, budgets sorted as text (1.1e+18, 1.1e+19, 1.4e+18) and the fit unnamed.
    budgets = [1e17, 2e17, 5e17, 1e18, 2e18, 1e19]
    failed = {1e17: "the fit of the other budgets failed: A", 2e17: "the fit of the other budgets failed: B"}
    items = [HoldoutCheck(method="vpnls", budget=c, fitted_budgets=[b for b in budgets if b <= k], reason=failed[k])
             for k in failed for c in budgets if c > k]
    items.append(HoldoutCheck(method="vpnls", budget=2e18, fitted_budgets=budgets[:5], predicted_n_opt=1.0, n_opt_interval=(0.5, 2.0),
                              observed_n_opt=1.0, n_opt_error=0.0))
    checks = {"isoflop": [HoldoutCheck(method="isoflop", budget=1e19, fitted_budgets=budgets[:-1], reason="no interior minimum")], "vpnls": items}
    notes = holdout_notes(checks)
    assert notes == ["isoflop at 1e+19 from <= 2e+18: no interior minimum",
                     "vpnls at 5 budgets (2e+17 to 1e+19) from <= 1e+17: the fit of the other budgets failed: A",
                     "vpnls at 4 budgets (5e+17 to 1e+19) from <= 2e+17: the fit of the other budgets failed: B"]
    assert [line for line in holdout_summary(checks).splitlines() if line.startswith("note:")] == \
        [f"note: {n}" for n in notes]


def test_the_planned_runs_section_names_the_other_forms_never_the_law_itself(tmp_path):
    # With no other law over (N, D) beside parametric, the page read "comparable forms: parametric"
    # above a forms column of +-0.0%: a spread never measured read as forms that agree.
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, curve_points=0).drop(columns=["curve"])
    alone = FitSet({m: fit(frame, method=m, bootstrap=10, holdout=None) for m in ("isoflop", "parametric")})
    assert alone.loss_at([1e9], [2e10]).forms.keys() == {"parametric"}
    text = write_report(alone, tmp_path / "r.html", at=([1e9], [2e10]), workers=1).read_text()
    planned = text[text.index("id='planned'"):text.index("id='headline'")]
    assert "From <b>parametric</b> (other law forms that fit these runs as well: none, so the forms part is 0)" in planned
    assert "comparable forms: parametric" not in planned


def test_a_held_out_row_with_no_check_made_says_so_in_the_figure(tmp_path):
    # The weak sweep's parametric and vpnls refits failed: their rows of the held-out figure were
    # empty, beside envelope's drawn one, with nothing saying why.
    made = HoldoutCheck(method="isoflop", budget=1e19, fitted_budgets=[1e17, 1e18], predicted_loss=3.1,
                        loss_interval=(3.0, 3.2), observed_loss=3.0, loss_error=3.1 / 3.0 - 1, predicted_n_opt=2e8,
                        n_opt_interval=(1e8, 4e8), observed_n_opt=1e8, n_opt_error=1.0)
    failed = HoldoutCheck(method="vpnls", budget=1e19, fitted_budgets=[1e17, 1e18],
                          reason="the fit of the other budgets failed: fitted A = inf")
    [svg] = holdout_figure({"isoflop": [made], "vpnls": [failed]}, tmp_path / "holdout", ("svg",),
                           {"isoflop": "tab:orange", "vpnls": "tab:purple"})
    said = re.findall(r"<!-- (no check made[^>]*) -->", svg.read_text())
    assert said == ["no check made (why: the notes under the table)"] * 2  # one per panel, on vpnls's row only


def test_each_methods_plot_has_a_caption_that_says_what_it_shows(tmp_path):
    # The per-method plots were captioned with their file's name ("isoflop_profiles").
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, curve_points=0).drop(columns=["curve"])
    text = write_report(fit(frame, method="isoflop", bootstrap=10, holdout=None), tmp_path / "r.html",
                        workers=1).read_text()
    section = text[text.index("id='isoflop'"):text.index("id='provenance'")]
    captions = re.findall(r"<figcaption>(.*?) \(<a href", section)
    assert len(captions) == 5 and not any(re.fullmatch(r"isoflop_\w+", c) for c in captions)
    assert any(c.startswith("isoflop: The loss over (N, D)") and "efficient frontier" in c for c in captions)


def test_the_page_points_to_its_own_notes_for_checks_not_made_not_to_a_command_line_option(tmp_path):
    # The FineWeb/C4 page said "could not be checked at 80 of 290 (why: the held-out notes, --verbose)":
    # a page has no --verbose; its notes are under its held-out table.
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, curve_points=0).drop(columns=["curve"])
    result = fit(frame, method="isoflop", bootstrap=10, holdout=None)
    result.holdout_checks = [
        HoldoutCheck(method="isoflop", budget=1e19, fitted_budgets=[1e17], reason="the fit of the other budgets failed: X"),
        HoldoutCheck(method="isoflop", budget=1e19, fitted_budgets=[1e17, 1e18], predicted_loss=3.1,
                     loss_interval=(3.0, 3.2), observed_loss=3.0, loss_error=3.1 / 3.0 - 1, predicted_n_opt=2e8,
                     n_opt_interval=(1e8, 4e8), observed_n_opt=1e8, n_opt_error=1.0, covered={"loss": True, "n_opt": True})]
    text = write_report(result, tmp_path / "r.html", workers=1).read_text()
    assert "isoflop could not be checked at 1 of 2 (why: the notes under the held-out table)" in text
    assert "--verbose" not in text
    notes = text[text.index("id='holdout'"):]
    assert "isoflop at 1e+19 from &lt;= 1e+17: the fit of the other budgets failed: X" in notes


def test_the_curve_laws_profiles_say_their_units(tmp_path):
    # Every other profile plot's loss axis says "loss (nats)"; the curve law's said "training loss".
    result = fit(str(DATA / "demo_runs.csv"), method="curve", bootstrap=10, holdout=None)
    ax = Figure().add_subplot()
    draw_profiles(result, ax)
    assert ax.get_ylabel() == f"training {result.runs.label}" == "training loss (nats)"
    assert ax.get_xlabel() == "tokens seen"


def test_the_top1_error_forecast_at_the_target_has_its_interval(tmp_path):
    # The Zhai et al. law's forecast at the target was a bare "top-1 error of 0.652" on a page where
    # every other number has its interval (the law's a and d withheld as undetermined beside it).
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19, 1e20), sizes_per_budget=5, curve_points=0).drop(columns=["curve"])
    noise = 1 + 0.03 * np.random.default_rng(0).standard_normal(len(frame))
    frame["top1_error"] = (6.0 * (frame["flops"] / 1e15) ** -0.3 + 0.05) * noise
    text = html.unescape(write_report(fit(frame, method="isoflop", bootstrap=0), tmp_path / "r.html",
                                      workers=1).read_text())
    said = re.search(r"it forecasts a top-1 error of ([\d.]+) \[([\d.]+), ([\d.]+)\] \(95% interval of the frontier's "
                     r"resamples\)", text)
    assert said, re.search(r"it forecasts a top-1 error of [^;]*", text).group(0)
    point, lo, hi = map(float, said.groups())
    assert 0 <= lo <= point <= hi <= 1 and lo < hi


def test_a_sweep_stopped_part_way_gets_a_page_that_says_to_train_its_runs_first(tmp_path, capsys):
    # One run of three trained, two pending: the page said no method could fit and advised more
    # budgets and sizes, where the sweep needs its own runs trained first.
    sweep = tmp_path / "sweep"
    shutil.copytree(DATA / "previous_release" / "sweep", sweep)
    assert main(["report", str(sweep), "--bootstrap", "10", "--out", str(tmp_path / "r.html")]) == 2
    capsys.readouterr()
    text = html.unescape((tmp_path / "r.html").read_text())
    assert "2 of the runs read have not finished (pending or running) and were left out: train them first" in text
    assert f"flops-fit sweep CONFIG --out {sweep} --resume" in text


@pytest.mark.filterwarnings("ignore:divide by zero")
def test_a_section_that_fails_keeps_its_anchor_so_the_pages_links_still_land(tmp_path):
    # A held-out check observed at 0 cannot be drawn as predicted / observed, and an isoflop fit has no
    # law over (N, D) to size for inference: both sections failed, and their headings lost their ids, so
    # the answer's "details" link to #holdout led nowhere.
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, curve_points=0).drop(columns=["curve"])
    result = fit(frame, method="isoflop", bootstrap=10, holdout=None)
    result.holdout_checks = [HoldoutCheck(
        method="isoflop", budget=1e19, fitted_budgets=[1e17, 1e18], predicted_loss=3.1, loss_interval=(3.0, 3.2),
        observed_loss=3.0, loss_error=3.1 / 3.0 - 1, predicted_n_opt=2e8, n_opt_interval=(1e8, 4e8),
        observed_n_opt=0.0, n_opt_error=np.inf, covered={"loss": True, "n_opt": False})]
    text = write_report(result, tmp_path / "r.html", workers=1, inference_tokens=1e12).read_text()
    assert "<h2 id='holdout'>The held-out check</h2><p class=warn>Not computed: ZeroDivisionError" in text
    assert "<h2 id='inference'>Sizing for inference</h2><p class=warn>Not computed: FitInputError" in text
    links = set(re.findall(r"href='#([^']+)'", text))
    assert "holdout" in links and links <= set(re.findall(r" id='([^']+)'", text))


def test_a_long_held_out_table_is_folded_under_its_per_method_counts(tmp_path):
    # Forward chaining on the FineWeb/C4 study gave the page a held-out table of about 1,160 rows that
    # a reader had to scroll past; the counts per method now lead and every row is still on the page.
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, curve_points=0).drop(columns=["curve"])
    result = fit(frame, method="isoflop", bootstrap=10, holdout=None)
    budgets = [1e17 * 2 ** i for i in range(9)]
    result.holdout_checks = [
        HoldoutCheck(method="isoflop", budget=budgets[j], fitted_budgets=budgets[:k], reason="the fit failed: X")
        if k == 1 else
        HoldoutCheck(method="isoflop", budget=budgets[j], fitted_budgets=budgets[:k], predicted_loss=3.06,
                     loss_interval=(3.0, 3.2), observed_loss=3.0, loss_error=0.02, predicted_n_opt=1.1e8,
                     n_opt_interval=(1.05e8, 1.2e8), observed_n_opt=1e8, n_opt_error=0.1,
                     covered={"loss": True, "n_opt": k != 2})
        for j in range(1, 9) for k in range(1, j + 1)]  # 36 checks: 8 not made, 7 outside on N_opt
    text = write_report(result, tmp_path / "r.html", workers=1).read_text()
    section = text[text.index("<h2 id='holdout'>"):text.index("<figure", text.index("<h2 id='holdout'>"))]
    assert section.count("<details>") == 1, "the per-check table is not folded"
    shown, rest = section.split("<details>")
    folded, after = rest.split("</details>")
    counts = "<tr><td>isoflop</td><td>36</td><td>8</td><td>7</td><td>10.0%</td><td>0</td><td>0</td><td>2.0%</td></tr>"
    assert counts in shown and "<th>N_opt outside</th>" in shown and "<th>inside?</th>" not in shown
    assert "<summary>Every check: 36 rows" in folded and folded.count("<tr><td>isoflop</td>") == 36
    assert "why a check was not made: the notes under the held-out table" in shown
    assert "isoflop at 8 budgets (2e+17 to 2.6e+19) from &lt;= 1e+17: the fit failed: X" in after  # not folded
