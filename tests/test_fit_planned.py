"""The loss of a planned run: ``fitted.loss_at(N, D)`` and ``flops-fit fit --at N:D`` (issue 34, item 4)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from flops_fit.cli.main import main
from flops_fit.errors import FitInputError
from flops_fit.fitting import FitSet, fit
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.decisions.planned import (
    EXTRAPOLATION_SLOPE,
    MEASURED_DISTANCE,
    hull_distance,
)
from flops_fit.fitting.report.html_report import _planned_section
from flops_fit.fitting.synthetic import DEFAULT_LAW, law_loss, synthetic_runs

RESULT = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "planned_runs.json"


@pytest.fixture(scope="module")
def frame():
    return synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7, noise=0.003).drop(columns=["curve"])


@pytest.fixture(scope="module")
def fitted(frame):
    return fit(frame, "vpnls", bootstrap=40, tracking=False)


def test_distance_is_zero_inside_the_runs_and_euclidean_in_logs_outside():
    square = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert hull_distance(square, [[0.5, 0.5], [1.0, 0.2]]).tolist() == [0.0, 0.0]
    assert hull_distance(square, [[3.0, 0.5], [4.0, 5.0]]) == pytest.approx([2.0, 5.0])
    line = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])  # collinear runs: the segment is their hull
    assert hull_distance(line, [[2.0, 0.0], [3.0, 2.0]]) == pytest.approx([np.sqrt(2.0), 1.0])


def test_a_run_farther_than_the_extrapolation_error_was_measured_is_told_so(fitted, frame):
    """A planned run 3x the largest size is near enough; one 1000x (distance over 6) lies beyond the
    farthest prediction the slope was measured on, and its note says so, in the table and --json."""
    n_max, tokens = float(frame.params.max()), float(frame.tokens.median())
    planned = fitted.loss_at([3 * n_max, 1e3 * n_max], [tokens, 2e4 * n_max])
    assert planned.table.distance[0] < MEASURED_DISTANCE < planned.table.distance[1]
    far = [n for n in planned.notes if "farther from the fitted runs" in n]
    assert len(far) == 1 and far[0].startswith(f"{fmt.count(1e3 * n_max)} x {fmt.count(2e4 * n_max)} (")
    assert f"note: {far[0]}" in planned.summary() and far[0] in planned.to_dict()["notes"]


def test_report_refuses_planned_runs_from_a_method_without_a_loss_law_as_fit_does(frame, tmp_path, capsys):
    """`report --method isoflop --at N:D` wrote its page with the reason on it and exited 0, where `fit` with the
    same options exits 2: both refuse now, and no page is written."""
    csv, out = tmp_path / "runs.csv", tmp_path / "r.html"
    frame.to_csv(csv, index=False)
    args = ["--method", "isoflop", "--bootstrap", "0", "--at", "1e9:2e10"]
    assert main(["fit", str(csv), *args]) == 2
    fit_err = capsys.readouterr().err
    assert main(["report", str(csv), *args, "--out", str(out)]) == 2
    assert capsys.readouterr().err == fit_err and "not a loss L(N, D)" in fit_err
    assert not out.exists()


@pytest.mark.skipif(not RESULT.is_file(), reason="benchmarks/results/planned_runs.json not written yet")
def test_the_measured_distance_is_the_benchmarks_farthest_prediction():
    assert MEASURED_DISTANCE == pytest.approx(json.loads(RESULT.read_text())["calibration"]["max_distance"], abs=0.005)


def test_planned_runs_must_be_positive_and_paired(fitted):
    assert fitted.loss_at(1e9, [1e10, 2e10]).table.N.tolist() == [1e9, 1e9]  # one size, two token counts
    for n, d in ((-1e9, 1e10), (1e9, float("nan")), ([1e9, 2e9, 3e9], [1e10, 2e10])):
        with pytest.raises(FitInputError, match="positive number of parameters|as many token counts as sizes"):
            fitted.loss_at(n, d)
    # no run at all read "takes as many token counts as sizes; got 0 sizes and 0 token counts": as many, yet refused
    with pytest.raises(FitInputError, match=r"at least one planned run \(N and D\), e\.g\. loss_at\(1\.4e9, 2\.8e10\); "
                                            r"got N=\[\], D=\[\]"):
        fitted.loss_at([], [])


def test_a_planned_run_far_beyond_the_runs_reads_in_figures_not_digits(fitted):
    """--at 1e300:1e300 on the demo's runs printed the forms' part as a 100-digit percentage and the loss
    as 1.26 [7.487e-100, 2.43e+10]; parts now read in 3 figures from 10,000%, and an interval spanning
    over 1000x is withheld, as every table withholds one."""
    planned = fitted.loss_at([1e300, 1e9], [1e300, 2e10])
    far, near = planned.table.iloc[0], planned.table.iloc[1]
    assert far.loss_hi / far.loss_lo > fmt.SPAN_LIMIT and np.expm1(far.extrapolation) > 100  # what was printed
    line = planned.summary().splitlines()[3]  # the first run's row
    assert "[withheld: spans over 1000x]" in line and max(len(word) for word in line.split()) <= 12, line
    rows = planned.rows()  # the text's cells, and the report's
    assert rows[0][2] == f"{fmt.sig(far.loss, 4)} [withheld: spans over 1000x]"
    assert rows[0][6] == f"{fmt.sig(100 * np.expm1(far.extrapolation))}%" and len(rows[0][6]) <= 10
    assert rows[1][2] == fmt.with_interval(near.loss, near.loss_lo, near.loss_hi, fmt=lambda v: fmt.sig(v, 4))
    assert all(len(cell) <= 10 for row in rows for cell in row[3:])


def test_a_planned_run_under_one_parameter_or_token_is_refused(fitted, capsys, tmp_path):
    """--at 1e-300:1e6 read a loss of 6.006e+104 [5.359e+85, 1.331e+201] nats, and 0.5:1e6 one of 223.7:
    parameters and tokens are counts, so a run of less than one of each is no model."""
    for n, d in ((1e-300, 1e6), (0.5, 1e6), (1e5, 0.5)):
        with pytest.raises(FitInputError, match="at least one of each"):
            fitted.loss_at(n, d)
    assert fitted.loss_at(1.0, 1.0).table.N.tolist() == [1.0]  # the smallest model there is: answered
    csv = tmp_path / "runs.csv"
    synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5).drop(columns="curve").to_csv(csv, index=False)
    assert main(["fit", str(csv), "--method", "vpnls", "--bootstrap", "5", "--tracking", "off", "--at", "0.5:1e6"]) == 2
    err = capsys.readouterr().err
    assert "--at takes planned runs as N:D, at least one parameter and one token" in err and "Traceback" not in err


@pytest.mark.parametrize(("n", "d"), [("1.4B", 2.8e10), ({"N": 1e9}, 1e10), (True, 1e10), (1e9, False),
                                      (np.array([[1e9]]), np.array([[1e10]]))])
def test_a_planned_run_that_is_not_numbers_is_refused_by_name(fitted, n, d):
    """loss_at("1.4B", ...) was numpy's ValueError (could not convert string to float), a dict its
    TypeError, 2-D arrays "maximum() takes from 2 to 3 positional arguments", and True read as a
    model of one parameter."""
    with pytest.raises(FitInputError, match=r"a planned run is a positive number of parameters N and tokens D "
                                            r"\(one number or a list of each"):
        fitted.loss_at(n, d)


@pytest.mark.parametrize("totals", ["3e21 FLOPs", [True], {"F": 1e21}])
def test_a_total_budget_that_is_not_numbers_is_refused_by_name(fitted, totals):
    """predict_total("x", ...) was numpy's ValueError (could not convert string to float)."""
    with pytest.raises(FitInputError, match="total budgets must be finite positive FLOP counts"):
        fitted.predict_total(totals, inference_tokens=1e9)


def test_the_interval_holds_the_true_law_and_grows_with_distance(fitted, frame):
    n_max = frame.params.max()
    middle = frame[frame.budget == 1e18].iloc[3]  # the middle size at the middle budget: inside the runs
    near, far = (middle.params, middle.tokens), (30 * n_max, 600 * n_max)  # and 30x the largest size
    planned = fitted.loss_at([near[0], far[0]], [near[1], far[1]])
    rows = planned.table
    truth = law_loss(DEFAULT_LAW, rows.N.to_numpy(), rows.D.to_numpy())
    assert np.all((rows.loss_lo < truth) & (truth < rows.loss_hi))
    assert rows.distance[0] == 0.0 and rows.extrapolation[0] == 0.0
    assert rows.distance[1] > 3.0  # ln 30 in N alone
    z = norm.ppf(0.975)
    assert rows.extrapolation[1] == pytest.approx(z * EXTRAPOLATION_SLOPE * rows.distance[1])
    widths = (rows.loss_hi - rows.loss_lo) / rows.loss
    assert widths[1] > widths[0]
    assert set(planned.forms) >= {"vpnls"} and "vpnls" in planned.summary()


def test_a_planned_run_below_the_fitted_runs_is_named_in_a_note(fitted, frame):
    """A law fitted on Chinchilla's IsoFLOP runs of 57M parameters and up read a 1M model on 10M tokens at 32.6
    nats [16.0, 57.3], well above any real model's loss there, without a word."""
    smallest = frame.params.min()
    middle = frame[frame.budget == 1e18].iloc[3]
    planned = fitted.loss_at([smallest / 10, middle.params, 30 * frame.params.max()],
                             [middle.tokens, middle.tokens, middle.tokens])  # the last beyond them, nearer than 4.31
    assert len(planned.notes) == 1 and planned.notes[0].startswith(
        f"{fmt.count(smallest / 10)} x {fmt.count(middle.tokens)} lie(s) below the fitted runs (smallest "
        f"{fmt.count(smallest)} parameters")  # the run inside and the one beyond them are not named
    assert planned.summary().endswith(f"note: {planned.notes[0]}") and planned.to_dict()["notes"] == planned.notes
    assert fitted.loss_at(middle.params, middle.tokens).notes == []


def test_a_set_of_fits_answers_from_the_law_that_fits_best(frame):
    fitted = FitSet({m: fit(frame, m, bootstrap=10, tracking=False) for m in ("isoflop", "vpnls", "interaction")})
    planned = fitted.loss_at(1e9, 2e10)
    residual = {m: np.sqrt(np.mean(fitted[m].diagnostics.residuals["residual"] ** 2)) for m in ("vpnls", "interaction")}
    assert planned.method == min(residual, key=residual.get)
    with pytest.raises(FitInputError, match="isoflop fits power laws in compute, not a loss L\\(N, D\\)"):
        fitted["isoflop"].loss_at(1e9, 2e10)


def test_cli_at_prints_json_and_text_and_refuses_a_bad_run(frame, tmp_path, capsys):
    csv = tmp_path / "runs.csv"
    frame.to_csv(csv, index=False)
    assert main(["fit", str(csv), "--method", "vpnls", "--bootstrap", "10", "--at", "1e9:2e10", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)["planned"]
    (run,) = planned["runs"]
    assert run["N"] == 1e9 and run["D"] == 2e10 and run["loss_lo"] < run["loss"] < run["loss_hi"]
    assert main(["fit", str(csv), "--method", "vpnls", "--bootstrap", "10", "--at", "1e9:2e10"]) == 0
    assert "Planned runs (vpnls" in capsys.readouterr().out
    for bad in ("1e9", "1e9:x", "-1e9:1e10", "1e9:2e10:3"):
        assert main(["fit", str(csv), f"--at={bad}"]) == 2
        assert "--at takes planned runs as N:D" in capsys.readouterr().err
    # the value's fault is named: "1.4B:28B" (the tables' own way of writing counts) said only "not N:D"
    for bad, why in (("1.4B:28B", "'1.4B' is not a number (the tables' suffixes k, M, B, T are not read here: "
                                  "write e.g. 1.4e9)"),
                     ("1e9:abc", "'abc' is not a number"), ("1e9", "0 colons, where N:D has one"),
                     ("1e9:2e10:3", "2 colons, where N:D has one")):
        assert main(["fit", str(csv), f"--at={bad}"]) == 2
        err = capsys.readouterr().err
        assert err.endswith(f"got {bad!r}: {why}\n") and err.count("\n") == 1, err
    # written apart, a value with a minus sign reads as an option: one line with the way to pass it
    assert main(["fit", str(csv), "--at", "1e9:2e10", "-1e9:1e10"]) == 2
    assert capsys.readouterr().err == ("flops-fit: error: '-1e9:1e10' starts with a minus sign, so it reads as an "
                                       "option; to pass it, write --at=-1e9:1e10\n")


@pytest.mark.skipif(not RESULT.is_file(), reason="benchmarks/results/planned_runs.json not written yet")
def test_the_shipped_extrapolation_slope_is_the_benchmarks_calibration():
    calibration = json.loads(RESULT.read_text())["calibration"]
    assert EXTRAPOLATION_SLOPE == pytest.approx(calibration["slope_chosen"], rel=0.01)


@pytest.mark.skipif(not RESULT.is_file(), reason="benchmarks/results/planned_runs.json not written yet")
def test_the_docs_quote_the_stored_result():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_planned_runs", RESULT.parents[1] / "bench_planned_runs.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = json.loads(RESULT.read_text())
    root = RESULT.parents[2]
    assert bench.markdown(result) in (root / "docs" / "validation" / "planned-runs.md").read_text()
    m = result["test"]["measured"]
    row = next(line for line in (root / "README.md").read_text().splitlines() if "bench_planned_runs.py" in line)
    for figure in (f"{100 * m['median_abs_error']:.2f}%", f"{100 * m['coverage']:.0f}%", f"{100 * m['median_width']:.1f}%"):
        assert figure in row


def test_a_planned_image_run_below_the_fitted_runs_counts_samples(frame):
    """The note on a planned run below every fitted run said "tokens" for an image sweep, whose D is samples."""
    from flops_fit.fitting.inputs import Runs

    images = Runs(frame, "an image sweep's store", metadata={"plan": {"unit": "sample"}})
    fitted = fit(images, "vpnls", bootstrap=0, tracking=False)
    middle = frame[frame.budget == 1e18].iloc[3]
    planned = fitted.loss_at(frame.params.min() / 10, middle.tokens)
    (note,) = [n for n in planned.notes if "below the fitted runs" in n]
    assert f"{fmt.count(frame.tokens.min())} samples): the extrapolation error" in note and "tokens" not in note
    assert "samples D" in planned.summary()


def test_a_fit_without_draws_does_not_print_its_unmeasured_noise_as_zero(frame, tmp_path, capsys):
    """--bootstrap 0 --at N:D printed "bootstrap +- 0.0%" (and --json "boot": 0.0): a noise never measured,
    read as none. The part is "-" (null) now, and a note says the interval leaves it out."""
    fitted = fit(frame, "vpnls", bootstrap=0, tracking=False)
    planned = fitted.loss_at(1e9, 2e10)
    assert np.isnan(planned.table.boot[0]) and planned.rows()[0][4] == "-"
    assert "<td>-</td>" in _planned_section(fitted, ([1e9], [2e10]))  # the report's cell, not "\u00b1-"
    assert any(n.startswith("no bootstrap draws (bootstrap=0): the interval leaves out the runs' noise")
               for n in planned.notes), planned.notes
    assert planned.to_dict()["runs"][0]["boot"] is None
    lo, hi = planned.table.loss_lo[0], planned.table.loss_hi[0]
    assert lo < planned.table.loss[0] < hi  # the interval keeps its other parts
    csv = tmp_path / "runs.csv"
    frame.to_csv(csv, index=False)
    assert main(["fit", str(csv), "--method", "vpnls", "--bootstrap", "0", "--tracking", "off", "--at", "1e9:2e10"]) == 0
    out = capsys.readouterr().out
    row = re.split(r"\s{2,}", out.split("Planned runs")[1].splitlines()[3])
    assert row[4] == "-" and "note: no bootstrap draws" in out, row


def test_a_planned_loss_far_from_the_runs_own_losses_is_withheld_with_the_reason(capsys):
    """--at on the demo's runs (losses 1.64 to 2.78 nats) read 100 x 10k at 16.38 [12.54, 29.9] nats (1k x 3k
    here: at 100 x 10k the interaction law gives no loss, and the interval is withheld for that) and
    1T x 100T at 1.26 [0.00567, 2.35]: interval ends past 10x the runs' highest and 300x under their lowest.
    Those intervals are withheld with the reason (the text and the report share the cells)."""
    demo = Path(__file__).parent / "data" / "demo_runs.csv"
    planned = fit(demo, "vpnls", bootstrap=100, tracking=False, holdout="none").loss_at([1000, 1e12, 3e4],
                                                                                         [3000, 1e14, 1e6])
    small, huge, near = (planned.table.iloc[i] for i in range(3))
    assert small.loss < 10 * 2.78 < small.loss_hi and huge.loss_lo < 1.64 / 100  # what was printed
    rows = planned.rows()
    assert rows[0][2] == f"{fmt.sig(small.loss, 4)} [withheld: reaches over 10x the runs' own losses]"
    assert rows[1][2] == f"{fmt.sig(huge.loss, 4)} [withheld: reaches under 1/10 of the runs' lowest loss, 1.64]"
    assert rows[2][2] == fmt.with_interval(near.loss, near.loss_lo, near.loss_hi, fmt=lambda v: fmt.sig(v, 4))
    assert main(["fit", str(demo), "--method", "vpnls", "--bootstrap", "100", "--holdout", "none",
                 "--at", "1000:3000"]) == 0
    assert "[withheld: reaches over 10x the runs' own losses]" in capsys.readouterr().out


def test_a_planned_loss_far_over_the_runs_own_is_withheld_in_the_text_the_report_and_json(capsys):
    """--at 10:100 on the demo's runs (losses 1.64 to 2.78 nats) printed a planned loss of 139.3 nats, 50x the
    runs' highest, with only its interval withheld: a law's power terms carried far below the runs, no loss a
    model was seen near. The point is withheld with the reason wherever it is printed, and --json nulls it."""
    demo = Path(__file__).parent / "data" / "demo_runs.csv"
    fitted = fit(demo, "vpnls", bootstrap=100, tracking=False, holdout="none")
    planned = fitted.loss_at([10, 3e4], [100, 1e6])
    assert planned.table.loss.iloc[0] > 10 * 2.78  # what loss_at computes is kept
    why = "over 10x the runs' highest loss, 2.78"
    assert planned.rows()[0][2] == f"withheld: {why}"
    assert planned.rows()[1][2].startswith(fmt.sig(planned.table.loss.iloc[1], 4))
    far, near = planned.to_dict()["runs"]
    assert far["loss"] is far["loss_lo"] is far["loss_hi"] is None
    assert far["withheld"] == {"loss": why, "loss_lo": why, "loss_hi": why}
    assert near["loss"] == planned.table.loss.iloc[1] and "withheld" not in near
    args = ["fit", str(demo), "--method", "vpnls", "--bootstrap", "100", "--holdout", "none", "--at", "10:100"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"withheld: {why}" in out and fmt.sig(planned.table.loss.iloc[0], 4) not in out
    assert main([*args, "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["planned"]["runs"]
    assert run["loss"] is None and run["withheld"]["loss"] == why
    from flops_fit.fitting.report.html import escape
    from flops_fit.fitting.report.html_report import _planned_section

    page = _planned_section(fitted, ([10], [100]))
    assert escape(f"withheld: {why}") in page and fmt.sig(planned.table.loss.iloc[0], 4) not in page


def test_a_comparable_form_without_a_loss_at_the_run_withholds_the_interval_instead_of_adding_nothing():
    """On the demo's runs, parametric's law reads 20.6 nats at 100 parameters x 10k tokens, and the interaction law,
    which fits the runs as well, gives a negative loss there: its spread was read as 0 ('forms +- 0.0%') and the
    interval printed as if the forms agreed. The interval is withheld now, a note naming the form."""
    from flops_fit.fitting.decisions.planned import loss_at, other_forms

    result = fit(Path(__file__).parent / "data" / "demo_runs.csv", "parametric", bootstrap=20, tracking=False,
                 holdout="none")
    others = other_forms(result)
    with np.errstate(all="ignore"):
        assert others["interaction"].loss_surface(np.array([100.0]), np.array([1e4]))[0] < 0  # the case itself
    planned = loss_at(result, [100, 1e6], [1e4, 1e7], forms=others)
    assert "interaction" in planned.forms  # comparable: its residual within the tolerance
    # the header counts the forms besides the chosen one ("1 comparable law form(s)" counted the chosen law alone)
    assert set(planned.forms) == {"parametric", "interaction", "vpnls"}
    assert planned.summary().startswith("Planned runs (parametric; 95% interval = bootstrap + spread of 2 other law "
                                        "form(s) that fit as well + ")
    near, far = planned.rows()
    assert near[2].endswith("[withheld: a part of it is unknown (see the note)]") and near[5] == "-"
    assert re.fullmatch(r"[\d.]+ \[[\d.]+, [\d.]+\]", far[2])  # where every form answers, the interval stands
    assert any(n.startswith("100:10k: the interaction law fits the runs as well as parametric's but gives no finite "
                            "loss there") for n in planned.notes)
    run = planned.to_dict()["runs"][0]
    assert run["loss_lo"] is None and run["withheld"]["loss_hi"] == "a part of it is unknown (see the note)"
