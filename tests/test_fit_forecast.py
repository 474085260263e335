"""Forecasts that come true: an unbiased observed optimum, loss laws with an irreducible term,
the scale variable, a second law form, and the forecast chosen by leave-one-budget-out error."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import flops_fit
from flops_fit.cli.main import main
from flops_fit.fitting import APPROACHES, fit, load_runs
from flops_fit.fitting.approaches.result import prediction_rows
from flops_fit.fitting.laws.forms import InteractionForm
from flops_fit.fitting.laws.laws import fit_loss_law, law_loss
from flops_fit.fitting.report.html_report import write_report
from flops_fit.fitting.scales import rescale, to_params
from flops_fit.fitting.synthetic import optimal_size, synthetic_runs
from flops_fit.fitting.validation.forecast import forecasts
from flops_fit.fitting.validation.holdout import observe

# Hoffmann et al.'s fitted law: its IsoFLOP profiles are asymmetric in log N (beta < alpha).
LAW = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
BUDGETS = (1e18, 1e19, 1e20, 1e21)


def _observed(frame: pd.DataFrame, curve: str, bootstrap: int = 0, seed: int = 0):
    runs = load_runs(frame)
    budgets = runs.frame["budget"].to_numpy(float)
    return observe(runs, budgets, BUDGETS[-1], curve=curve, bootstrap=bootstrap, seed=seed, level=0.95)


def test_the_slice_minimum_is_unbiased_where_a_parabola_is_not():
    truth = optimal_size(LAW, BUDGETS[-1])
    true_loss = float(law_loss(LAW, truth, BUDGETS[-1] / (6 * truth)))
    for sizes, decades in ((5, 1.0), (9, 1.0), (15, 0.3)):  # spans of 100x and 4x
        frame = synthetic_runs(LAW, budgets=BUDGETS, sizes_per_budget=sizes, span=decades, noise=0.0, curve_points=2)
        sliced, parabola = _observed(frame, "slice"), _observed(frame, "parabola")
        assert sliced.n_opt == pytest.approx(truth, rel=1e-3) and sliced.loss == pytest.approx(true_loss, rel=1e-5)
        if decades == 1.0:  # over a factor 100 the parabola's vertex slides by percents
            assert abs(parabola.n_opt / truth - 1) > 0.03


def test_the_slice_interval_covers_the_truth_under_noise():
    truth = optimal_size(LAW, BUDGETS[-1])
    errors, covered = [], []
    for seed in range(12):
        frame = synthetic_runs(LAW, budgets=BUDGETS, sizes_per_budget=9, span=1.0, noise=0.005, seed=seed,
                               curve_points=2)
        o = _observed(frame, "slice", bootstrap=100, seed=seed)
        errors.append(math.log(o.n_opt / truth))
        covered.append(o.n_opt_interval[0] <= truth <= o.n_opt_interval[1])
    assert abs(np.median(errors)) < 0.03  # the parabola's bias on these grids is +4%, larger than its noise
    assert np.mean(covered) >= 0.8


def test_the_loss_law_has_an_irreducible_term():
    budgets = np.geomspace(1e18, 1e22, 6)
    n = np.array([optimal_size(LAW, c) for c in budgets])
    best = law_loss(LAW, n, budgets / (6 * n))
    fitted = fit_loss_law(np.log(budgets[:-1]), best[:-1])
    g = LAW["alpha"] * LAW["beta"] / (LAW["alpha"] + LAW["beta"])
    assert fitted["l_inf"] == pytest.approx(LAW["E"], rel=1e-3) and fitted["l"] == pytest.approx(-g, rel=1e-3)
    predicted = fitted["l_inf"] + math.exp(fitted["l0"]) * budgets[-1] ** fitted["l"]
    assert predicted == pytest.approx(best[-1], rel=1e-5)
    pure = np.polyfit(np.log(budgets[:-1]), np.log(best[:-1]), 1)  # no irreducible term: bends the wrong way
    assert math.exp(np.polyval(pure, math.log(budgets[-1]))) < best[-1] * 0.97


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_approach_2_predicts_a_held_out_minimum_loss_within_half_a_percent(seed):
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19, 1e20, 1e21), sizes_per_budget=9, noise=0.003, seed=seed,
                           curve_points=2)
    (check,) = fit(frame, method="isoflop", bootstrap=0, holdout="largest").holdout["isoflop"]
    assert abs(check.loss_error) < 0.005


def test_the_models_report_their_embedding_and_non_embedding_flops():
    for name, size, embedding in (("gpt", 32, ("wte", "wpe")), ("llama", 32, ("embed_tokens",)),
                                  ("vit", 64, ("cls_token", "pos_embed"))):
        entry = flops_fit.model_info(name)
        model = flops_fit.create_model(name, size)
        counted = sum(p.numel() for n, p in model.named_parameters() if n.split(".")[0] in embedding)
        assert entry.embedding_param_count(size) == counted, name
        assert 0 < entry.non_embedding_flops_per_unit(size) < entry.flops_per_unit(size)
    # GPT-2 124M: DeepSeek LLM's M = 72 n_layer d^2 + 12 n_layer d l (their eq. 2), exactly.
    gpt2 = flops_fit.model_info("gpt2")
    assert gpt2.non_embedding_flops_per_unit(768) == 72 * 12 * 768**2 + 12 * 12 * 768 * 1024
    assert gpt2.embedding_param_count(768) == (50257 + 1024) * 768


def test_the_planner_records_the_scales_and_the_fit_reads_them_back():
    plan = flops_fit.plan(model="gpt", budgets=[1e11], span=16, tokens_per_param=100, seq_len=64,
                          model_config={"n_layer": 2, "head_dim": 4})
    entry = flops_fit.model_info("gpt")
    for spec in plan.runs:
        assert spec.embedding_params == entry.embedding_param_count(spec.size, **spec.model_config)
        assert spec.non_embedding_flops_per_unit == entry.non_embedding_flops_per_unit(spec.size, **spec.model_config)
    # a table of runs: the scale replaces N; runs stored before the scales existed get them from their model
    rows = [{"run_id": f"r{i}", "model": "gpt", "size": s.size, "model_config": s.model_config, "params": s.params,
             "tokens": s.tokens, "flops": s.flops, "budget": s.budget, "loss": 2.0,
             "embedding_params": math.nan if i == 0 else s.embedding_params}
            for i, s in enumerate(plan.runs)]
    runs = load_runs(pd.DataFrame(rows))
    lean = rescale(runs, "non_embedding_params")
    expected = [s.params - s.embedding_params for s in plan.runs]
    assert lean.frame["params"].tolist() == expected and lean.scale == "non_embedding_params"
    m = rescale(runs, "flops_per_token")
    assert m.frame["params"].tolist() == [s.non_embedding_flops_per_unit for s in plan.runs]
    assert to_params(m, m.frame["params"].to_numpy()) == pytest.approx([s.params for s in plan.runs])


def test_a_csv_without_the_scale_columns_is_refused_with_the_fix():
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5)
    with pytest.raises(flops_fit.FitInputError, match="have no embedding_params.*fit with scale='params'"):
        fit(frame, method="isoflop", scale="non_embedding_params", bootstrap=0)
    with pytest.raises(flops_fit.FitInputError, match="scale must be one of params, non_embedding_params"):
        fit(frame, method="isoflop", scale="tokens", bootstrap=0)


def interaction_loss(p, n, d):
    return InteractionForm().loss(p, {"n": n, "d": d})


def test_the_interaction_law_is_recovered_and_its_frontier_is_the_minimum_along_c():
    law = {**LAW, "F": 2000.0}
    rows = []
    for c in (1e17, 1e18, 1e19, 1e20):
        for n in np.geomspace(optimal_size(LAW, c) / 10, optimal_size(LAW, c) * 10, 7):
            d = c / (6 * n)
            rows.append({"params": n, "tokens": d, "flops": c, "budget": c, "loss": float(interaction_loss(law, n, d))})
    fitted = fit(pd.DataFrame(rows), method="interaction", bootstrap=0)
    for key in ("alpha", "beta"):
        assert fitted.params[key] == pytest.approx(law[key], rel=1e-3)
    assert fitted.params["F"] == pytest.approx(law["F"], rel=1e-2)
    p = {k: np.array([v]) for k, v in {**law, "k": 6.0}.items()}
    n_opt, d_opt, loss = InteractionForm().frontier(p, np.array([1e21]))
    grid = np.geomspace(n_opt[0, 0] / 3, n_opt[0, 0] * 3, 2001)
    brute = interaction_loss(law, grid, 1e21 / (6 * grid))
    assert loss[0, 0] == pytest.approx(brute.min(), rel=1e-9) and n_opt[0, 0] == pytest.approx(grid[brute.argmin()], rel=3e-3)


@pytest.fixture(scope="module")
def forecast_json(tmp_path_factory):
    path = tmp_path_factory.mktemp("fc") / "runs.csv"
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19, 1e20), sizes_per_budget=7, noise=0.003, seed=3,
                           curve_points=8)
    frame["curve"] = frame["curve"].map(json.dumps)
    frame.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def fitted(forecast_json):
    return fit(str(forecast_json), method="all", holdout="forward", bootstrap=20)


def test_holdout_forward_answers_each_question_from_its_own_chaining_record(forecast_json, fitted):
    data = json.loads(fitted.to_json())
    f = data["forecast"]
    assert {"target", "ratio", "n_opt", "d_opt", "loss", "answers", "candidates", "records", "prior"} <= set(f)
    assert f["target"] == pytest.approx(1e21) and f["ratio"] == pytest.approx(10)
    scored = [c for c in f["candidates"] if c["loss_error"] is not None]
    assert {c["method"] for c in scored} == set(data["results"])
    assert all("fit with scale='params'" in c["reason"] for c in f["candidates"] if c["scale"] != "params")
    for q in ("loss", "n_opt"):
        answer = f["answers"][q]
        assert f[q]["source"] == answer["source"]
        members = [(m["method"], m["scale"], m["focus"]) for m in answer["members"]]
        # budgets 1e17..1e20: fits up to 1e18 predict 1e19 and 1e20 (10x, 100x), up to 1e19 predicts 1e20 (10x)
        for key in members:
            mine = [r for r in f["records"] if (r["method"], r["scale"], r["focus"]) == key]
            assert sorted((r["fitted_upto"], r["budget"]) for r in mine) == [(1e18, 1e19), (1e18, 1e20), (1e19, 1e20)]
        assert answer["model"]["splits"] == 2
        # the point is the members' own answer corrected by the drift carried to 10x; the interval holds it
        assert answer["value"] == pytest.approx(answer["raw"] * (1 + answer["correction"]))
        lo, hi = f[q]["interval"]
        assert lo < f[q]["value"] < hi
    single = f["answers"]["n_opt"]["members"]
    if len(single) == 1:  # the candidate's own fit on all runs, before the correction
        m = single[0]
        direct = fit(str(forecast_json), method=m["method"], focus=m["focus"] or "all", bootstrap=0).predict(1e21)
        assert f["answers"]["n_opt"]["raw"] == pytest.approx(direct.N_opt.iloc[0])
    assert fitted.summary().startswith("Forecast at C = 1e+21 FLOPs, 10x the largest budget")


def test_the_error_slope_is_the_rms_of_log_error_over_log_ratio():
    from flops_fit.fitting.validation.chaining import Record, error_slope, score, score_cutoff

    def rec(ratio, err):
        return Record(method="m", scale="params", focus=None, fitted_upto=1.0, budget=ratio, ratio=ratio,
                      loss_error=err, n_opt_error=-err)

    records = [rec(np.e, np.expm1(0.02)), rec(np.e ** 2, np.expm1(-0.08))]
    # (0.02 / 1)^2 and (-0.08 / 2)^2: mean 0.001, root 0.0316...
    assert error_slope(records, "loss_error") == pytest.approx(math.sqrt((0.02 ** 2 + 0.04 ** 2) / 2))
    assert score_cutoff(records) == pytest.approx(np.e)  # exp(0.5 ln e^2)
    assert score(records, np.e ** 1.5)[0] == pytest.approx(abs(np.expm1(-0.08))) and score(records, np.e)[2] == 2


def test_target_reaches_the_forecast_and_a_bad_target_is_refused(forecast_json, capsys):
    # holdout "largest" without bootstrap keeps this quick; the forecast is asked of "forward" only
    heard = []
    f = fit(str(forecast_json), method="all", holdout="forward", bootstrap=0, target=3e21, progress=heard.append).forecast
    assert f.target == pytest.approx(3e21) and f.ratio == pytest.approx(30)
    assert [stage.split(" ")[0] for stage in heard] == ["fitting", "held-out", "the"]  # each stage as it starts
    assert "to 28 runs" in heard[0] and "at 3e+21 FLOPs" in heard[2]
    for bad in (0.0, -1e21, float("nan")):
        with pytest.raises(flops_fit.FitInputError, match="target must be a positive budget"):
            fit(str(forecast_json), method="isoflop", bootstrap=0, target=bad)
        assert main(["fit", str(forecast_json), "--method", "isoflop", f"--target={bad}"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "target must be a positive budget" in err[0]


def test_a_target_beyond_the_reach_public_sweeps_measured_is_said_under_the_forecast(forecast_json, capsys):
    """1e21 (10x) lies within the 500x public sweeps measured the forecast's error at; 1e23 (1000x) not:
    a note under the forecast says so, in the summary and on the command line."""
    near = fit(str(forecast_json), method="all", holdout="forward", bootstrap=0, target=1e21)
    assert not [w for w in near.warnings if w.startswith("the target lies beyond")]
    assert main(["fit", str(forecast_json), "--method", "all", "--holdout", "forward", "--bootstrap", "0",
                 "--target", "1e23"]) == 0
    out = capsys.readouterr().out
    note = ("Note: the target lies beyond the reach public sweeps measured: it is 1e+03x the largest budget, and public "
            "sweeps measured the forecast's error up to 500x")
    assert note in out and out.index(note) < out.index("Every method at C")


def test_leaving_one_budget_out_gives_no_forecast_and_says_why(forecast_json):
    each = fit(str(forecast_json), method="all", holdout="each", bootstrap=0)
    assert each.forecast is None
    assert any("forward chaining" in w for w in each.warnings)


@pytest.mark.e2e
def test_refits_in_worker_processes_give_the_same_checks_and_forecast(forecast_json, fitted, capsys):
    assert main(["fit", str(forecast_json), "--method", "all", "--holdout", "forward", "--bootstrap", "20",
                 "--workers", "2", "--json"]) == 0
    spread = json.loads(capsys.readouterr().out)
    alone = json.loads(fitted.to_json())  # the module's fit, in this process
    assert spread["forecast"] == alone["forecast"]
    for method, result in alone["results"].items():  # the methods' own fits ran in the workers too
        assert spread["results"][method]["holdout"] == result["holdout"]
        assert spread["results"][method]["params"] == result["params"]
    assert main(["fit", str(forecast_json), "--workers", "0"]) == 2
    assert "workers must be a positive integer" in capsys.readouterr().err


def test_the_report_leads_with_the_forecast(fitted, tmp_path):
    text = write_report(fitted, tmp_path / "report.html").read_text()
    assert text.index("The forecast at C = 1e+21 FLOPs") < text.index("The answer at C = 1e+21 FLOPs, by every method")
    assert "scale: parameters" in text and "forward chaining" in text and "id='chaining'" in text
    assert "the error of extrapolating past them is not in them" in text  # the methods' table says what its intervals are
    assert (tmp_path / "report_plots" / "chaining.png").exists()


def test_a_bad_scale_on_the_command_line_is_one_line_and_exit_2(forecast_json, capsys):
    assert main(["fit", str(forecast_json), "--scale", "width"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scale must be one of" in err[0]


def test_forward_chaining_a_law_the_runs_follow_exactly_has_no_error_to_grow():
    from flops_fit.fitting.approaches.vpnls import Vpnls
    from flops_fit.fitting.validation.chaining import error_slope, forward_chain

    runs = load_runs(synthetic_runs(budgets=(1e17, 1e18, 1e19, 1e20), sizes_per_budget=7, noise=0.0))
    records, reasons = forward_chain([Vpnls(bootstrap=0)], runs, ["params"], curve="slice")
    assert not reasons and sorted(round(r.ratio) for r in records) == [10, 10, 100]
    assert max(abs(r.loss_error) for r in records) < 1e-3 and max(abs(r.n_opt_error) for r in records) < 1e-2
    assert error_slope(records, "loss_error") < 1e-3


def test_the_summary_leads_with_the_answer_in_a_few_lines_and_verbose_adds_the_details(fitted):
    short = fitted.summary()
    lines = short.splitlines()
    assert lines[0].startswith("Forecast at C = 1e+21 FLOPs") and len(lines) <= 40
    table = short.index("Every method at C = 1e+21 FLOPs (bootstrap intervals over these runs only, without the "
                        "extrapolation error the forecast's include)")
    assert all(f"\n{m} " in short[table:] for m in fitted.results)  # one row per method, after the forecast
    assert "N_opt drift / ln r" not in short  # the candidates table: --verbose
    verbose = fitted.summary(verbose=True)
    assert verbose.startswith(lines[0]) and "N_opt drift / ln r" in verbose
    assert len(verbose.splitlines()) > 2 * len(lines)
    shown = repr(fitted)
    assert len(shown) < 300 and "<Forecast at C = 1e+21" in shown and "\n" not in shown


def test_every_methods_table_is_at_the_budgets_asked_for(tmp_path, capsys):
    """`fit --method all --predict 1e21` printed every method at the largest run's compute (3.2e21 on
    Open-Athena's table) and the asked-for budget only under --verbose; --target likewise."""
    csv = tmp_path / "runs.csv"
    synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=6, noise=0.01, seed=2, curve_points=0).to_csv(csv,
                                                                                                             index=False)
    assert main(["fit", str(csv), "--method", "all", "--bootstrap", "10", "--predict", "3e19", "1e21"]) == 0
    out = capsys.readouterr().out
    assert out.index("Every method at C = 3e+19 FLOPs:") < out.index("Every method at C = 1e+21 FLOPs:")
    assert "public sweeps measured how far" not in out  # 100x: inside the reach the shipped laws measured (500x)
    assert main(["fit", str(csv), "--method", "all", "--bootstrap", "10", "--target", "1e22"]) == 0
    out = capsys.readouterr().out
    assert "Every method at C = 1e+22 FLOPs:" in out and out.count("Every method at") == 1
    assert ("Note: 1e+22 FLOPs is 1e+03x the largest budget (1e+19); public sweeps measured how far answers err up "
            "to 500x: no measured error bounds these points") in out  # said under the table it qualifies
    assert main(["fit", str(csv), "--method", "all", "--bootstrap", "10"]) == 0  # no forecast: the largest run's
    assert pd.read_csv(csv)["flops"].max() == 1e19 and "Every method at C = 1e+19 FLOPs:" in capsys.readouterr().out


def test_the_cli_shows_a_fits_stages_on_a_terminal_only(forecast_json, capsys, monkeypatch):
    import io

    from flops_fit.cli import fit as fit_cli

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    show = fit_cli.stages(terminal)
    show("fitting 2 method(s) to 28 runs")
    show("note: the table holds 2 settings by column 'corpus'")
    assert terminal.getvalue() == ("flops-fit: [   0 s] fitting 2 method(s) to 28 runs ...\n"
                                   "flops-fit: [   0 s] note: the table holds 2 settings by column 'corpus'\n")
    assert fit_cli.stages(io.StringIO()) is None  # a pipe or a log: the answer alone
    monkeypatch.setattr(fit_cli.sys, "stderr", terminal)
    assert main(["fit", str(forecast_json), "--method", "isoflop", "--bootstrap", "0", "--holdout", "largest"]) == 0
    lines = terminal.getvalue().splitlines()[2:]
    assert [line.split("] ")[1].split(" ")[0] for line in lines] == ["fitting", "held-out"]
    assert capsys.readouterr().out.startswith("Approach 2")


def test_a_forecast_beyond_the_data_budget_says_it_assumes_fresh_data(tmp_path):
    from flops_fit.fitting import formatting as fmt
    from flops_fit.fitting.approaches.fit_set import FRESH_DATA, fresh_data_caveat

    runs = synthetic_runs(budgets=(1e17, 1e18, 1e19, 1e20), sizes_per_budget=5, noise=0.003, seed=3, curve_points=0)
    unique = float(np.median(runs["tokens"]))  # half the runs repeat; the target's D_opt lies beyond
    limited = fit(runs, method="all", holdout="forward", bootstrap=0, unique_tokens=unique)
    tokens = limited.forecast.d_opt[0]
    caveat = [w for w in limited.warnings if w.startswith(FRESH_DATA)]
    assert len(caveat) == 1 and f"is {tokens / unique:.3g}x the {fmt.count(unique)} unique tokens" in caveat[0]
    answer = limited.results["data-limited"].predict(limited.forecast.target).iloc[0]
    assert f"N_opt {fmt.count(answer['N_opt'])}, loss {answer['loss']:.4g}" in caveat[0]  # the data-limited law's
    text = limited.summary()
    assert f"\n\nNote: {caveat[0]}." in text and "warning(s)" not in text.split("Note:")[0]
    assert fresh_data_caveat(limited.forecast, 2 * tokens, limited.results) is None  # the data suffices: nothing


def test_a_forecast_below_every_swept_budget_says_its_intervals_were_not_measured_there(forecast_json, fitted):
    """``fit demo_runs.csv --method all --holdout forward --target 1e9`` (60x below the smallest budget)
    read a loss of 3.015 [2.976, 3.055], +-1.3% as at the sweep, with no word that chaining measures
    errors toward larger budgets only; a note under the forecast now says so."""
    below = fit(str(forecast_json), method="all", holdout="forward", bootstrap=20, target=1e15, tracking=False)
    assert below.forecast is not None  # annotated, not withheld
    note = ("the target lies below every swept budget: 1e+15 FLOPs is 100x below the smallest, 1e+17, and forward "
            "chaining measures the answers' errors toward larger budgets only")
    assert f"Note: {note}" in below.summary()
    assert any(w.startswith(note) for w in json.loads(below.to_json())["warnings"])
    assert not any("below every swept budget" in w for w in fitted.warnings)  # the default target, 10x beyond


def test_a_loss_far_under_the_runs_lowest_is_withheld_in_the_forecast_and_the_tables(capsys):
    """`fit demo_runs.csv --target 1e30` printed envelope's and interaction's losses as 0.009 and 0.001 nats and
    the forecast's as 0.0135, beside runs that end at 1.64 nats and above: a power law carried 1e18x past them."""
    demo = Path(__file__).parent / "data" / "demo_runs.csv"
    runs = load_runs(demo)
    lowest = float(runs.frame["loss"].min())
    assert lowest == pytest.approx(1.6389, abs=1e-4)
    (far, near) = forecasts([APPROACHES["envelope"]()], runs, [1e30, 6.8e12], curve="slice", scales=("params",))
    assert far.loss[0] < lowest / 10 and near.loss[0] > lowest / 10  # the numbers themselves are kept
    said = "withheld: under 1/10 of the runs' lowest loss, 1.64"
    assert f"loss {said}" in far.summary() and said not in near.summary()
    assert far.to_dict()["loss"]["value"] is None and far.to_dict()["loss"]["withheld"] == said[len("withheld: "):]
    assert near.to_dict()["loss"]["value"] == pytest.approx(near.loss[0])
    envelope = fit(demo, "envelope", bootstrap=20, tracking=False, holdout="none")
    rows = prediction_rows(envelope.predict([1e30, 6.8e12]), losses=envelope.runs.loss_range)
    assert rows[0][-1] == said and said not in rows[1][-1]
    assert main(["fit", str(demo), "--method", "envelope", "--predict", "1e30", "--bootstrap", "20", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["table"]
    assert row["loss"] is None and row["withheld"]["loss"] == said[len("withheld: "):]
