"""Sizing for inference (Sardana et al. 2024): the paper's worked example, the converse, intervals, refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import flops_fit
from flops_fit.cli.main import main
from flops_fit.fitting import load_runs
from flops_fit.fitting.approaches.parametric import ParametricResult
from flops_fit.fitting.approaches.result import Diagnostics
from flops_fit.fitting.decisions.inference import (
    falls_with_data,
    sizing_rows,
    sizing_summary,
    total_rows,
)
from flops_fit.fitting.formatting import count as fmt_count
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws.forms import InteractionForm
from flops_fit.fitting.laws.laws import frontier_exponents
from flops_fit.fitting.synthetic import synthetic_runs

# Chinchilla's fitted law (Hoffmann et al. 2022, eq. 10), as the paper's code states it
# (the paper's code, github.com/nikhilsardana/beyond-chinchilla, README: alpha = 0.336, beta = 0.283,
# A = 406.4, B = 410.7, E = 1.69; 0.34 and 0.28 are the roundings the paper's text quotes).
CHINCHILLA = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.336, "beta": 0.283}
ROUNDED = {**CHINCHILLA, "alpha": 0.34, "beta": 0.28}
# The worked example (the README's `compute_optimal.py --loss 1.947 --inference_tokens 2e12`: the loss of a
# 70B model trained on 1T tokens, 2 trillion tokens served): 2.418e10 parameters, 2.657e12 training
# tokens, 70.96% of the parameters and 146.77% of the tokens of the equal-loss Chinchilla-optimal model,
# 95.22% of its total FLOPs.
LOSS, SERVED = 1.947, 2e12
PAPER = {"N": 2.418e10, "D": 2.657e12, "params_ratio": 0.7096, "tokens_ratio": 1.4677, "cost_ratio": 0.9522}


def stated(law: dict[str, float], draws: int = 0) -> ParametricResult:
    """A result holding a stated law (6ND FLOPs), with ``draws`` identical bootstrap rows."""
    a, b = frontier_exponents(law["alpha"], law["beta"], 0.0)
    params = {**law, "a": a, "b": b, "k": 6.0, "k_slope": 0.0}
    runs = Runs(frame=pd.DataFrame({"params": [1e9], "tokens": [2e10], "flops": [1.2e20], "loss": [2.5],
                                    "run_id": ["r"]}), source="stated")
    return ParametricResult(method="parametric", title="stated law", params=params,
                            samples=pd.DataFrame({k: np.full(draws, v) for k, v in params.items()}), runs=runs,
                            diagnostics=Diagnostics(residuals=pd.DataFrame(), r2=1.0, r2_of="-"))


def chinchilla_budget(law: dict[str, float], loss: float) -> tuple[float, float, float]:
    """(N, D, C) of the compute-optimal model reaching ``loss`` (the paper's "Chinchilla-style" baseline)."""
    a, b, excess = law["alpha"], law["beta"], loss - law["E"]
    n = (law["A"] * (a / b + 1) / excess) ** (1 / a)
    d = (law["B"] * (b / a + 1) / excess) ** (1 / b)
    return n, d, 6 * n * d


def test_reproduces_the_papers_worked_example():
    n0, d0, c = chinchilla_budget(CHINCHILLA, LOSS)
    row = stated(CHINCHILLA).predict(c, inference_tokens=SERVED).iloc[0]
    assert row.loss == pytest.approx(LOSS, rel=1e-6)
    assert row.N == pytest.approx(PAPER["N"], rel=0.01)
    assert row.D == pytest.approx(PAPER["D"], rel=0.01)
    assert row.N / n0 == pytest.approx(PAPER["params_ratio"], rel=0.01)
    assert row.D / d0 == pytest.approx(PAPER["tokens_ratio"], rel=0.01)
    assert 1 - row.saving == pytest.approx(PAPER["cost_ratio"], rel=0.005)
    assert row.total_flops == pytest.approx(6 * row.N * row.D + 2 * row.N * SERVED, rel=1e-9)


def test_the_rounded_exponents_land_within_ten_percent():
    n0, d0, c = chinchilla_budget(ROUNDED, LOSS)
    row = stated(ROUNDED).predict(c, inference_tokens=SERVED).iloc[0]
    for got, want in ((row.N / n0, PAPER["params_ratio"]), (row.D / d0, PAPER["tokens_ratio"]),
                      (1 - row.saving, PAPER["cost_ratio"])):
        assert got == pytest.approx(want, rel=0.10)


def test_no_inference_is_the_compute_optimal_model():
    result = stated(CHINCHILLA)
    row = result.predict(1e23, inference_tokens=0).iloc[0]
    plain = result.predict(1e23).iloc[0]
    assert row.N == pytest.approx(plain.N_opt, rel=2e-3)
    assert row.total_flops == pytest.approx(1e23, rel=1e-3)
    assert abs(row.saving) < 1e-3
    table = result.predict(1e23, inference_tokens=0)
    saved = sizing_rows(table.assign(saving=-abs(table.saving) - 1e-12, inference_tokens=1.0))[0][-1]  # a saving
    # of nothing, below 0 (at 0 tokens the cell says "none": test_zero_inference_tokens_answer_alike_in_every_column)
    assert saved == "0.0%"  # it read "-0.0%"


def test_more_inference_means_a_smaller_model_trained_longer():
    light, heavy = (stated(CHINCHILLA).predict(1e23, inference_tokens=t).iloc[0] for t in (1e11, 1e13))
    assert heavy.N < light.N and heavy.tokens_per_param > light.tokens_per_param
    assert heavy.saving > light.saving > 0


def test_the_converse_buys_the_same_model_back():
    """The lowest loss for the sized model's total budget is that model (two solvers, one answer)."""
    result = stated(CHINCHILLA)
    sized = result.predict(3.7e23, inference_tokens=SERVED).iloc[0]
    best = result.predict_total(sized.total_flops, inference_tokens=SERVED).iloc[0]
    assert best.N == pytest.approx(sized.N, rel=0.01)
    assert best.loss == pytest.approx(sized.loss, abs=1e-4)
    assert best.chinchilla_loss < best.loss  # paying for inference costs loss


def test_a_total_that_serving_alone_takes_is_withheld_not_a_negative_model():
    """--total-flops 1e12 with 2T tokens served printed N 0.5, D -348B, tokens/param -6.6e11 and a
    best loss of nan; now the row has no answer, and the summary says why."""
    result = stated(CHINCHILLA, draws=3)
    table = result.predict_total([1e12, 1e24], inference_tokens=SERVED)
    assert table.loc[0, ["N", "D", "tokens_per_param", "loss", "train_flops", "D_lo", "D_hi"]].isna().all()
    assert table.loc[1, "D"] > 0 and np.isfinite(table.loc[1, "loss"])
    text = sizing_summary(result, [1e20], SERVED, [1e12, 1e24])
    assert "withheld at 1e+12 total FLOPs: serving 2T tokens takes all of it on every model searched" in text
    assert not re.search(r" -\d", text.split("lowest loss for a total budget")[1])  # no negative tokens


def test_intervals_come_from_the_draws():
    fitted = flops_fit.fit(synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7, seed=1), "vpnls",
                           bootstrap=40, tracking=False)
    table = fitted.predict([1e18, 1e20], inference_tokens=1e11)
    assert (table.N_lo < table.N).all() and (table.N < table.N_hi).all()
    assert (table.saving_lo > 0).all()


def test_refusals():
    runs = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7, seed=1)
    fitted = flops_fit.fit(runs, "isoflop", bootstrap=0, tracking=False)
    with pytest.raises(flops_fit.FitInputError, match="no law over"):
        fitted.predict(1e20, inference_tokens=1e12)
    with pytest.raises(flops_fit.FitInputError, match="inference_tokens"):
        stated(CHINCHILLA).predict(1e20, inference_tokens=-1)


def test_cli_sizes_for_inference(tmp_path, capsys):
    csv = tmp_path / "runs.csv"
    synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7, seed=1).drop(columns="curve").to_csv(csv)
    assert main(["fit", str(csv), "--method", "vpnls", "--bootstrap", "20", "--inference-tokens", "1e12",
                 "--predict", "1e20", "--total-flops", "1e21"]) == 0
    out = capsys.readouterr().out
    assert "sizing for 1T inference tokens" in out and "lowest loss for a total budget" in out
    assert main(["fit", str(csv), "--method", "isoflop", "--bootstrap", "0", "--inference-tokens", "1e12"]) == 2
    assert main(["fit", str(csv), "--total-flops", "1e21"]) == 2
    err = capsys.readouterr().err
    assert "no law over (N, D)" in err and "--total-flops goes with --inference-tokens" in err


def test_a_law_fitted_on_non_embedding_parameters_is_refused_as_loss_at_refuses_it(tmp_path, capsys):
    """`fit --scale non_embedding_params --inference-tokens 1e12` sized non-embedding N and printed it as
    "parameters" (serving priced on it too); loss_at refuses that scale. The sizing now refuses it alike, in
    the API and, before any fit, on the command line (fit and report)."""
    runs = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7, seed=1).drop(columns="curve")
    runs["embedding_params"] = 0.1 * runs["params"]
    csv = tmp_path / "runs.csv"
    runs.to_csv(csv, index=False)
    fitted = flops_fit.fit(csv, "vpnls", bootstrap=0, scale="non_embedding_params", tracking=False)
    for ask in (lambda: fitted.predict(1e20, inference_tokens=1e12),
                lambda: fitted.predict_total(1e21, inference_tokens=1e12)):
        with pytest.raises(flops_fit.FitInputError, match="sizing for inference reads N as total parameters, and "
                           "this law was fitted on non_embedding_params: fit with scale='params'"):
            ask()
    for command in ("fit", "report"):
        assert main([command, str(csv), "--method", "vpnls", "--bootstrap", "0", "--scale", "non_embedding_params",
                     "--inference-tokens", "1e12", *(["--out", str(tmp_path / "r.html")] if command == "report"
                                                     else [])]) == 2
        captured = capsys.readouterr()
        assert "--scale non_embedding_params fits N as something else: fit with --scale params" in captured.err
        assert captured.out == "" and not (tmp_path / "r.html").exists()
    assert flops_fit.fit(csv, "vpnls", bootstrap=0, tracking=False).predict(1e20, inference_tokens=1e12).N[0] > 0
    # the fit's own tables name the scale its N_opt is on (they said "params N_opt", "N_opt (parameters)")
    assert main(["fit", str(csv), "--method", "vpnls", "--bootstrap", "0", "--scale", "non_embedding_params"]) == 0
    assert "FLOPs  non-embedding params N_opt  " in capsys.readouterr().out
    assert main(["fit", str(csv), "--method", "all", "--bootstrap", "0", "--holdout", "none", "--scale",
                 "non_embedding_params"]) == 0
    assert "method       N_opt (non-embedding parameters)  " in capsys.readouterr().out


def test_a_sizing_below_every_fitted_run_says_so():
    """The curve law sized the demo's smallest budget at 2.18k parameters on 404 tokens, 400x fewer
    tokens than any run it was fitted on, in a table that gave no hint; such a row now gets a note."""
    result = stated(CHINCHILLA)  # one run: 1e9 parameters on 2e10 tokens
    text = result.sizing_summary([1e17, 1e24], 1e9)
    notes = [line for line in text.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "at 1e+17 FLOPs" in notes[0] and "below the fitted runs" in notes[0], text
    assert "smallest 1B parameters, 20B tokens" in notes[0]


def test_the_sizing_reads_a_law_only_where_more_data_lowers_the_loss():
    """``data/demo_runs.csv`` (the GPT demo's 40 runs, with their curves): the curve law fits a negative
    interaction term, under which the data term turns negative at small N; the sizing at 1e10 FLOPs
    serving 1B tokens read 2.18k parameters on 404 tokens (0.18 tokens per parameter) there."""
    runs = load_runs(Path(__file__).parent / "data" / "demo_runs.csv")
    result = flops_fit.fit(runs, "curve", bootstrap=20, tracking=False)
    row = result.predict(1e10, inference_tokens=1e9).iloc[0]
    p = {k: np.array([v]) for k, v in result.params.items()}
    assert falls_with_data(result.law_loss, p, np.array([row.N]), np.array([row.D]))[0]
    assert row.D / row.N > 10
    # no draw's sizing costs more than its compute-optimal model (draws whose optimum sits where the law rises
    # with data, and grid points straddling the optimum, read savings down to -16%)
    assert row.saving_lo >= 0.0


def test_a_loss_no_size_reaches_where_the_law_falls_with_data_is_withheld():
    """A law with a negative interaction term and no floor: at 1e13 FLOPs no size searched reaches the
    compute-optimal loss where the law still falls with data; the row read N 0.00126 on infinite tokens
    and a saving of -inf."""
    result = stated({"E": 0.0, "A": 1.0, "B": 1200.0, "F": -1e4, "alpha": 0.34, "beta": 0.37})
    result.form = InteractionForm()
    row = result.predict(1e13, inference_tokens=1e12).iloc[0]
    assert all(np.isnan(row[k]) for k in ("N", "D", "saving"))
    text = sizing_summary(result, [1e13], 1e12)
    assert "withheld at 1e+13 FLOPs: the law does not fall with data" in text and not re.search(r"\binf\b|-inf", text)


def test_a_sizing_below_the_runs_of_an_image_sweep_counts_samples():
    """The note on a sizing below every run said "tokens" for an image sweep, whose tables count samples."""
    result = stated(CHINCHILLA)
    result.runs.metadata["plan"] = {"unit": "sample"}  # what an image sweep's store records
    text = result.sizing_summary([1e17], 1e9, [1e17])
    notes = [line for line in text.splitlines() if line.startswith("note:")]
    assert len(notes) == 2 and all("smallest 1B parameters, 20B samples" in n for n in notes), text
    assert "tokens" not in "\n".join(notes)


def test_the_loss_without_inference_below_every_fitted_run_says_so():
    """At a total far below the runs whose sizing is withheld (serving takes it all), the row still printed the
    loss without inference, read from the law at a compute-optimal model of 175k parameters beside runs of 1B,
    with no note (the sizing's own row below the runs had one)."""
    result = stated(CHINCHILLA, draws=3)  # one run: 1e9 parameters on 2e10 tokens
    text = result.sizing_summary([1e24], SERVED, [1e12, 1e24])
    row = next(line for line in text.splitlines() if line.startswith("1e+12 "))
    assert "withheld" in row and re.search(r"\d+\.\d+ \[", row)  # the loss without inference is printed
    notes = [line for line in text.splitlines() if line.startswith("note:")]
    assert len(notes) == 1, text
    assert notes[0].startswith("note: at 1e+12 total FLOPs the loss without inference is the compute-optimal "
                               "model's")
    assert "below the fitted runs (smallest 1B parameters, 20B tokens)" in notes[0]


def test_the_total_tables_notes_say_total_flops(capsys):
    """`fit demo_runs.csv --total-flops 1e12 --inference-tokens 1e9` noted "at 1e+12 FLOPs the sizing's 323
    parameters ..." under the total table, where 1e12 is training plus serving; the note says total FLOPs,
    and the sizing table's notes (training FLOPs) stay as they were."""
    demo = Path(__file__).parent / "data" / "demo_runs.csv"
    assert main(["fit", str(demo), "--method", "parametric", "--bootstrap", "50", "--holdout", "none",
                 "--tracking", "off", "--total-flops", "1e12", "--inference-tokens", "1e9"]) == 0
    sizing, total = capsys.readouterr().out.split("the lowest loss for a total budget")
    notes = [line for line in total.splitlines() if line.startswith("note:")]
    assert notes and all(n.startswith("note: at 1e+12 total FLOPs the sizing's") for n in notes), total
    assert "note: at 1e+10 FLOPs the sizing's" in sizing and "total FLOPs the" not in sizing


def test_a_total_no_model_of_one_parameter_can_train_on_is_withheld():
    """The GPT demo's runs, vpnls, 1B tokens served: a total of 1e9 FLOPs read N 0.219 [0.204, 0.217]
    parameters (outside its own interval) on 41.6k [1.96M, 22.6M] tokens, and 1e8 FLOPs 0.0178 parameters;
    serving 1B tokens costs more than that on a model of one parameter, so no model is left to train."""
    fitted = flops_fit.fit(Path(__file__).parent / "data" / "demo_runs.csv", "vpnls", bootstrap=20, tracking=False)
    served = 1e9
    one_parameter = fitted.params["k"] / 3 * served  # the serving FLOPs of the smallest model there is
    totals = [1e8, 1e9, 1e10]
    assert one_parameter > 1e9
    table = fitted.predict_total(totals, inference_tokens=served)
    for i in (0, 1):
        assert table.loc[i, ["N", "D", "tokens_per_param", "loss", "N_lo", "N_hi", "D_lo", "D_hi"]].isna().all()
    assert (table.loc[2, ["N", "N_lo", "N_hi"]] >= 1).all() and np.isfinite(table.loc[2, "loss"])
    text = fitted.sizing_summary([1e12], served, totals)
    assert "withheld at 1e+09 total FLOPs: serving 1B tokens takes all of it on every model searched" in text


def test_the_lowest_loss_for_a_total_is_the_lowest_a_fine_scan_finds():
    """The GPT demo's runs, vpnls, 1B tokens served, a total of 1e12 FLOPs: the answer read 326 [302, 323]
    parameters on 5.91M [9.32M, 30.9M] tokens, outside its own interval, at a loss of 4.975 where 321
    parameters on 11.3M tokens reach 4.951 (a parabola through the coarse grid, next to the size whose
    serving takes the whole total). Each total's answer is checked against a scan of 2M sizes."""
    fitted = flops_fit.fit(Path(__file__).parent / "data" / "demo_runs.csv", "vpnls", bootstrap=20, tracking=False)
    served, totals = 1e9, [1e12, 1e13, 1e15]
    table = fitted.predict_total(totals, inference_tokens=served)
    p = {k: np.array([v]) for k, v in fitted.params.items()}
    n = np.geomspace(1.0, 1e7, 2_000_001)
    for row, total in zip(table.itertuples(), totals, strict=True):
        d = total / (p["k"] * n ** (1 + p["k_slope"])) - served / 3  # training tokens: the total less serving
        trains = d > 0
        scanned = np.where(trains, fitted.law_loss(p, n, np.where(trains, d, 1.0)), np.inf)
        best = scanned.argmin()
        assert row.loss <= scanned[best] + 1e-6
        assert row.N == pytest.approx(n[best], rel=0.01) and row.D == pytest.approx(d[best], rel=0.02)
        assert row.N_lo <= row.N <= row.N_hi and row.D_lo <= row.D <= row.D_hi


def test_json_gives_the_reasons_the_text_gives_under_its_tables(capsys):
    """``--json`` gave a withheld total as a row of nulls, with nothing of the text's "withheld at 1e+09 total
    FLOPs: serving 1B tokens takes all of it ..." or its notes on sizings below the fitted runs."""
    demo = str(Path(__file__).parent / "data" / "demo_runs.csv")
    args = ["fit", demo, "--method", "vpnls", "--bootstrap", "20", "--tracking", "off", "--inference-tokens", "1e9",
            "--predict", "1e12", "--total-flops", "1e9", "1e12"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    block = json.loads(capsys.readouterr().out)["inference"]["vpnls"]
    assert block["totals"][0]["N"] is None
    lines = [line for line in text.splitlines() if line.startswith(("withheld at", "note: at"))]
    assert len(lines) >= 2 and any(line.startswith("withheld at 1e+09 total FLOPs") for line in lines)
    assert block["notes"] == lines


def test_the_sizing_names_no_model_of_under_one_parameter():
    """The GPT demo's runs, vpnls, 1B tokens served: at 1e3 training FLOPs the sizing read 0.418 [0.0635,
    1.72] parameters. Every answer and bound is now a model of one parameter or more, or withheld."""
    fitted = flops_fit.fit(Path(__file__).parent / "data" / "demo_runs.csv", "vpnls", bootstrap=20, tracking=False)
    table = fitted.predict([1e3, 1e6], inference_tokens=1e9)
    for column in ("N", "N_lo", "N_hi"):
        values = table[column].to_numpy()
        assert np.all(np.isnan(values) | (values >= 1.0)), table[["N", "N_lo", "N_hi"]]
    assert np.isfinite(table.N).all()  # answered: the best model of at least one parameter


def test_a_sizing_interval_spanning_over_1000x_is_withheld_as_in_the_fits_own_table():
    """The demo's runs, vpnls, 1B tokens served, 1e40 FLOPs: the fit's own table withholds N_opt's
    interval there ("spans over 1000x"), and the sizing printed tokens/param 6.98e+03 [0.00346, 2.25e+08]."""
    fitted = flops_fit.fit(Path(__file__).parent / "data" / "demo_runs.csv", "vpnls", bootstrap=20, tracking=False)
    table = fitted.predict([1e12, 1e40], inference_tokens=1e9)
    far = table.iloc[1]
    assert far.tokens_per_param_hi / far.tokens_per_param_lo > 1e3  # what was printed
    rows = sizing_rows(table)
    assert rows[1][2:5] == [f"{c} [withheld: spans over 1000x]" for c in
                            (fmt_count(far.N), fmt_count(far.D), f"{far.tokens_per_param:.3g}")]
    assert "withheld" not in " ".join(rows[0])
    totals = total_rows(fitted.predict_total([1e40], inference_tokens=1e9))
    assert all(cell.endswith("[withheld: spans over 1000x]") for cell in totals[0][1:4])
    # --json withholds them as the text does: it gave tokens/param 0.00346 to 2.25e+08 there
    block = json.loads(fitted.to_json([1e12, 1e40], inference_tokens=1e9, totals=[1e40]))["inference"]["vpnls"]
    for row in (block["sizing"][1], block["totals"][0]):
        for key in ("N", "D", "tokens_per_param"):
            assert row[f"{key}_lo"] is None and row[f"{key}_hi"] is None and row[key] is not None
            assert row["withheld"][f"{key}_lo"] == "spans over 1000x"
    assert "withheld" not in block["sizing"][0] and block["sizing"][0]["N_lo"] is not None


def test_a_total_where_the_law_is_flat_in_data_is_withheld_not_its_smallest_model():
    """``data/weak_sweep.csv`` with its data budget (153,280 unique tokens): the data-limited law stops
    falling with data once the runs would repeat their tokens for long, so at a total budget of 1e15
    FLOPs no model searched that trains lowers its loss with more data. The search, finding no finite
    loss, answered its second grid point: a sweep's `--total-flops 1e13` read N 8.48 parameters, D 322B
    and a best loss of 3.7e6 nats. Now the row is withheld, saying why."""
    result = flops_fit.fit(Path(__file__).parent / "data" / "weak_sweep.csv", method="vpnls", unique_tokens=153280,
                           bootstrap=0, tracking=False, workers=1)
    assert result.method == "data-limited"
    table = result.predict_total([1e13, 1e15], inference_tokens=1e9)
    assert table.loc[1, ["N", "D", "tokens_per_param", "loss"]].isna().all() and bool(table.loc[1, "flat"])
    assert np.isfinite(table.loc[0, ["N", "D", "loss"]].astype(float)).all() and not table.loc[0, "flat"]
    text = sizing_summary(result, [1e10], 1e9, [1e13, 1e15])
    assert "withheld at 1e+15 total FLOPs: the law falls with data on no model searched that trains" in text, text
    assert "serving 1B tokens takes all" not in text


@pytest.mark.parametrize("tokens", ["0.5", "-1", "2.5"])
def test_a_count_of_inference_tokens_that_is_no_whole_number_is_refused_before_the_fit(tokens, tmp_path, capsys):
    """`--inference-tokens 0.5` (a fraction of a token: 2 typed for 2 trillion?) was sized and printed, and
    `report --inference-tokens -1` fitted first; both refuse it in one line now, as the API does."""
    csv = tmp_path / "runs.csv"
    synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7, seed=1).drop(columns="curve").to_csv(csv)
    for command in ("fit", "report"):
        assert main([command, str(csv), "--method", "vpnls", "--bootstrap", "0", "--inference-tokens", tokens,
                     *(["--out", str(tmp_path / "r.html")] if command == "report" else [])]) == 2
        captured = capsys.readouterr()
        assert captured.err.endswith(f"--inference-tokens must be a whole number of tokens >= 0 (e.g. 2e12 for 2 "
                                     f"trillion), got {float(tokens):g}\n") and captured.err.count("\n") == 1
        assert captured.out == "" and not (tmp_path / "r.html").exists()
    with pytest.raises(flops_fit.FitInputError, match="inference_tokens must be a whole number of tokens >= 0"):
        stated(CHINCHILLA).predict(1e23, inference_tokens=0.5)


def test_zero_inference_tokens_answer_alike_in_every_column(tmp_path, capsys):
    """`--inference-tokens 0` printed total FLOPs "1e+20 [1e+20, 1e+20]" beside the compute-optimal model's total
    "1e+20 [withheld: resamples all equal]": the draws' float noise decided which. Both are the budget itself
    now, nothing saved, and a line says the sizing is the compute-optimal model (the JSON's notes too)."""
    csv = tmp_path / "runs.csv"
    synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7, seed=1).drop(columns="curve").to_csv(csv)
    assert main(["fit", str(csv), "--method", "vpnls", "--bootstrap", "20", "--inference-tokens", "0",
                 "--predict", "1e20", "1e21"]) == 0
    out = capsys.readouterr().out
    sizing = out[out.index("sizing for 0 inference tokens"):]
    for budget in ("1e+20", "1e+21"):
        row = next(line for line in sizing.splitlines() if line.startswith(budget)).split()
        assert row[-3:] == [budget, budget, "none"], row
    assert "withheld" not in sizing
    assert ("with 0 inference tokens nothing is served: each sizing is the compute-optimal model of its training "
            "budget (N_opt, D_opt), its total FLOPs the budget itself, nothing saved") in sizing
    assert main(["fit", str(csv), "--method", "vpnls", "--bootstrap", "20", "--inference-tokens", "0", "--json",
                 "--predict", "1e20"]) == 0
    notes = json.loads(capsys.readouterr().out)["inference"]["vpnls"]["notes"]
    assert notes[0].startswith("with 0 inference tokens nothing is served")
