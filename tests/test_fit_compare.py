"""Comparing two recipes: the effective compute multiplier on known laws, on noisy runs, from the CLI."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_fit_inference import stated

import flops_fit
from flops_fit.cli.main import main
from flops_fit.errors import NoFitError
from flops_fit.fitting.decisions.compare import compare_results
from flops_fit.fitting.synthetic import DEFAULT_LAW, synthetic_runs

BUDGETS = (1e17, 1e18, 1e19)


def worth(law: dict[str, float], factor: float) -> dict[str, float]:
    """The law of a model whose N counts ``factor`` times: L_B(N, D) = L(factor N, D). Its frontier
    at C is the original's at factor C (N D = C / 6 maps onto N' D = factor C / 6), so B is worth
    exactly ``factor`` times the compute at every budget."""
    return {**law, "A": law["A"] * factor ** -law["alpha"]}


def test_a_known_multiplier_is_recovered_at_every_budget():
    a, b = stated(DEFAULT_LAW, draws=3), stated(worth(DEFAULT_LAW, 2.0), draws=3)
    result = compare_results(a, b, budgets=[1e18, 1e21], target=1e24)
    assert result.table.multiplier.to_numpy() == pytest.approx([2.0, 2.0, 2.0], rel=0.005)
    assert result.trend[0] == pytest.approx(0.0, abs=1e-3)
    assert result.exponents["a"][0] == pytest.approx(0.0, abs=1e-12)
    assert "B is better" in result.verdict() and "2 [2, 2]" in result.verdict()
    worse = compare_results(b, a, target=1e24)
    assert worse.at_target.multiplier == pytest.approx(0.5, rel=0.005) and "is worse" in worse.verdict()


def test_a_loss_recipe_a_never_reaches_is_said_beyond_the_search_not_printed_as_inf():
    """A lower floor: A never reaches B's loss at the target. It printed "needs inf [inf, inf] times
    the compute" and a trend of "inf [inf, inf]"; the cells now say "beyond search", a note gives
    the search's end, and the trend is withheld."""
    a, b = stated(DEFAULT_LAW, draws=2), stated({**DEFAULT_LAW, "E": DEFAULT_LAW["E"] - 0.3}, draws=2)
    result = compare_results(a, b, target=1e24)
    assert np.isinf(result.at_target.multiplier) and np.isinf(result.trend[0])
    assert result.verdict() == ("B is better: at C = 1e+24 FLOPs A does not reach B's loss within the search. The "
                                "multiplier's trend with scale is withheld: the multiplier is beyond the search at "
                                "some budgets (see the note).")
    assert result.rows()[-1][3] == "beyond search [beyond search, beyond search]"
    assert "inf" not in str(result).replace("interval", "")
    # --json says it too: the multiplier was a bare null, as a bound without draws is
    row = json.loads(result.to_json())["table"][-1]
    assert row["multiplier"] is None and row["search"] == {k: "beyond search" for k in
                                                           ("multiplier", "multiplier_lo", "multiplier_hi")}
    assert "search" not in json.loads(compare_results(a, a, target=1e24).to_json())["table"][-1]
    assert any(n.startswith("beyond search: A's frontier does not reach B's loss up to 1e+30 FLOPs (1e+06x the "
                            "largest budget compared)") for n in result.notes)
    worse = compare_results(b, a, target=1e24)  # the other way round: A (here the better) is there first
    assert worse.at_target.multiplier < 1 and "is worse" in worse.verdict()


def test_the_verdict_answers_at_the_target_when_budgets_reach_past_it():
    """--target 1e18 on runs swept to 1e19 (or --budgets 1e40) read the largest budget's multiplier into "at
    C = <target>", and the trend divided that row's log change by the span to the target: B's lower floor here
    is worth 1.75x at 1e20 and 3.86x at 1e22, and the verdict said "at C = 1e+20 FLOPs A needs 3.86 [3.86,
    3.86]" with a trend of 0.241 (log(3.86 / 1.27) over two decades, not four)."""
    a, b = stated(DEFAULT_LAW, draws=3), stated({**DEFAULT_LAW, "E": DEFAULT_LAW["E"] - 0.05}, draws=3)
    result = compare_results(a, b, budgets=[1e18, 1e22], target=1e20)
    m = dict(zip(result.table.budget, result.table.multiplier, strict=True))
    assert m[1e18] < m[1e20] < m[1e22]  # a lower floor is worth more compute the larger the budget
    assert result.at_target.budget == 1e20 and result.at_target.multiplier == m[1e20]
    cell = dict(zip(result.table.budget, (row[3] for row in result.rows()), strict=True))
    assert f"at C = 1e+20 FLOPs A needs {cell[1e20]} times" in result.verdict(), result.verdict()
    # the trend runs over the budgets compared, smallest to largest
    assert result.trend[0] == pytest.approx(np.log(m[1e22] / m[1e18]) / np.log(1e4), rel=1e-9)
    below = compare_results(a, b, budgets=[1e15, 1e18], target=1e13)  # the target the smallest budget
    assert "at C = 1e+13 FLOPs" in below.verdict() and below.at_target.budget == 1e13
    assert np.isfinite(below.trend[0]) and "beyond the search" not in below.verdict(), below.verdict()


def test_one_budget_compared_withholds_the_trend_without_a_numpy_warning():
    """--budgets 1e20 --target 1e20 printed "d log M / d log C = nan." under numpy's "All-NaN slice
    encountered": one budget has no trend."""
    a, b = stated(DEFAULT_LAW, draws=3), stated(worth(DEFAULT_LAW, 2.0), draws=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = compare_results(a, b, budgets=[1e20], target=1e20)
    assert "nan" not in result.verdict()
    assert result.verdict().endswith("The multiplier's trend with scale is withheld: one budget compared; give two "
                                     "or more (budgets=, CLI: --budgets) to see it.")
    assert json.loads(result.to_json())["trend"] == {"estimate": None, "lo": None, "hi": None}


@pytest.mark.parametrize("option, value, message", [
    ("seed", "x", "seed must be a non-negative integer"),
    ("where_a", "recipe=base", r"where_a must map columns to values, e\.g\. where_a=\{'recipe': 'muon'\}"),
    ("where", "recipe=base", r"where must map columns to values"),
])
def test_a_seed_or_row_selection_of_the_wrong_type_is_named(option, value, message):
    """compare(..., seed='x') ended in "TypeError: can only concatenate str (not "int") to str", and
    where_a='recipe=base' in "TypeError: 'str' object is not a mapping": neither named the argument."""
    runs = synthetic_runs(budgets=BUDGETS, sizes_per_budget=4, seed=1)
    with pytest.raises(flops_fit.FitInputError, match=message):
        flops_fit.compare(runs, runs, "vpnls", bootstrap=0, **{option: value})


def test_a_bound_interpolated_toward_an_unreachable_draw_is_beyond_the_search_not_a_huge_number():
    """``flops-fit compare demo demo --budgets 1e11 1e3`` printed the target's multiplier as "1 [0.25,
    3.48e+307]" and its trend's bound as 3.48e+307: the 97.5th percentile fell between a finite draw
    and one where A never reaches B's loss. Here 1 draw in 10 is of that kind."""
    a, b = stated(DEFAULT_LAW, draws=10), stated(DEFAULT_LAW, draws=10)
    b.samples.loc[9, "E"] -= 0.3  # this draw's floor lies below every loss A reaches
    result = compare_results(a, b, target=1e24)
    assert result.at_target.multiplier == pytest.approx(1.0)
    assert np.isinf(result.at_target.multiplier_hi) and np.isinf(result.trend[2])
    assert "e+307" not in str(result) and "1 [1, beyond search]" in result.rows()[-1][3]


def test_a_frontier_that_rises_with_compute_below_the_runs_is_not_read_there():
    """The interaction law fitted to the GPT demo's runs has a frontier that climbs from -9.3 at 6e6 FLOPs
    to a peak at 6e9 before it falls; compared with itself, A "reached B's loss below the search's start"
    at every budget (a multiplier of 0, "B worse"). The same law is now worth 1x its own compute."""
    fitted = flops_fit.fit(Path(__file__).parent / "data" / "demo_runs.csv", "interaction", bootstrap=10,
                           tracking=False)
    _, _, low = fitted.frontier({k: np.array([v]) for k, v in fitted.params.items()}, np.array([6e6, 6e9]))
    assert np.ravel(low)[0] < 0 < np.ravel(low)[1]  # the frontier rises with compute there
    result = compare_results(fitted, fitted)
    assert result.table.multiplier.to_numpy() == pytest.approx(1.0, rel=1e-3)
    assert "below search" not in str(result)


@pytest.mark.parametrize("method", ["vpnls", "parametric"])
def test_a_fit_against_itself_shows_no_difference_not_the_searchs_rounding(method):
    """compare(fit, fit) on the demo's runs read "B is better: at C = 6.8e+12 FLOPs A needs 1 [1, 1] times the
    compute" and "The multiplier grows with scale (d log M / d log C = 8.59e-06 [7.1e-06, 1.03e-05])" for
    vpnls (the search's interpolation, off by up to 1e-4), and "B better" / "B worse" at budgets where
    parametric's multiplier was 1 +- 3e-15."""
    fitted = flops_fit.fit(Path(__file__).parent / "data" / "demo_runs.csv", method, bootstrap=20, tracking=False)
    result = flops_fit.compare(fitted, fitted, method=method)
    assert set(result.table.verdict) == {"no measurable difference"}
    assert result.verdict().startswith("No measurable difference") and "No measurable change with scale" in result.verdict()


def test_without_draws_the_exponents_get_no_verdict_either():
    """compare(..., bootstrap=0) said "no interval" for every budget but "no measurable difference" for
    the exponents' differences, which had no interval either."""
    a, b = stated(DEFAULT_LAW), stated(worth(DEFAULT_LAW, 2.0))  # no bootstrap draws
    b.params["a"] += 0.05  # a difference no interval can judge
    result = compare_results(a, b, target=1e24)
    assert set(result.table.verdict) == {"no interval"}
    assert [row[2] for row in result.exponent_rows()] == ["no interval", "no interval"]


def test_runs_that_measure_different_things_are_refused_before_any_fit(monkeypatch):
    """A text sweep (nats per token) against an image sweep (cross-entropy per sample) printed
    multipliers of inf; now one line, before either fit's bootstrap runs."""
    import functools

    import flops_fit.fitting as fitting

    text = flops_fit.load_runs(synthetic_runs(budgets=BUDGETS, sizes_per_budget=5, seed=1))
    images = flops_fit.load_runs(synthetic_runs(budgets=BUDGETS, sizes_per_budget=5, seed=2))
    images.metadata["plan"] = {"unit": "sample"}  # what an image sweep's store records
    fitted = []
    monkeypatch.setattr(fitting, "fit", functools.wraps(fitting.fit)(lambda *a, **k: fitted.append(a)))
    with pytest.raises(flops_fit.FitInputError, match=r"^A and B measure different things \(unit: tokens against "
                       r"samples\), so their losses are not one quantity"):
        flops_fit.compare(text, images, "vpnls", bootstrap=30)
    assert fitted == []


@pytest.fixture(scope="module")
def recipes():
    """Recipe A, A again (another seed of the same law), and a recipe with a smaller size term."""
    better = {**DEFAULT_LAW, "A": DEFAULT_LAW["A"] * 0.7}
    return [synthetic_runs(law, budgets=BUDGETS, sizes_per_budget=7, seed=seed)
            for law, seed in ((None, 1), (None, 2), (better, 3))]


def test_a_budget_below_both_sweeps_is_said_to_be_read_where_no_run_measured_it(recipes):
    """compare --target 1e3 on the demo's runs read "No measurable difference at C = 1e+03 FLOPs", 60
    million times below the smallest budget either recipe swept, without a word."""
    result = flops_fit.compare(recipes[0], recipes[2], "vpnls", bootstrap=10, target=1e13, budgets=[1e15, 1e18])
    assert any(n.startswith("1e+13, 1e+15 FLOPs lie(s) below every budget either recipe swept (the smallest 1e+17)")
               for n in result.notes), result.notes
    inside = flops_fit.compare(recipes[0], recipes[2], "vpnls", bootstrap=10)
    assert not any("below every budget" in n for n in inside.notes)



def test_recipes_with_no_budget_in_common_say_which_rows_read_a_law_below_its_runs(recipes):
    """A swept 1e17-1e19, B 1e20-1e22: the table read "B better" at 1e17 with B's loss three decades
    below every run of B, and nothing said so (the note covered budgets below both sweeps only)."""
    later = synthetic_runs({**DEFAULT_LAW, "A": DEFAULT_LAW["A"] * 0.7}, budgets=(1e20, 1e21, 1e22),
                           sizes_per_budget=7, seed=3)
    result = flops_fit.compare(recipes[0], later, "vpnls", bootstrap=10)
    assert any(n.startswith("the recipes share no budget (A swept 1e+17 to 1e+19 FLOPs, B 1e+20 to 1e+22)")
               for n in result.notes), result.notes
    assert any(n.startswith("1e+17, 1e+18, 1e+19 FLOPs lie(s) below every budget B swept (its smallest 1e+20): "
                            "B's law is read there") for n in result.notes), result.notes
    assert not any("below every budget A swept" in n for n in result.notes)
    inside = flops_fit.compare(recipes[0], recipes[2], "vpnls", bootstrap=10)
    assert not any("share no budget" in n or "below every budget" in n for n in inside.notes)

def test_a_multiplier_below_the_search_leaks_no_numpy_warning(recipes):
    """A draw's multiplier below the search's start (0) made the trend's log divide by zero, and the command
    printed "RuntimeWarning: divide by zero encountered in divide" with the source line under its answer."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = flops_fit.compare(recipes[0], recipes[2], "vpnls", bootstrap=10, target=1e13, budgets=[1e15, 1e18])
    assert result.verdict().startswith("B is better")


def test_json_judges_the_exponents_as_the_text_does(recipes):
    """--json gave the exponents' differences without the verdict the text prints beside them."""
    result = flops_fit.compare(recipes[0], recipes[2], "vpnls", bootstrap=10)
    data = json.loads(result.to_json())["exponent_difference"]
    assert [data[k]["verdict"] for k in ("a", "b")] == [row[2] for row in result.exponent_rows()]


def test_two_seeds_of_one_recipe_show_no_measurable_difference(recipes):
    result = flops_fit.compare(recipes[0], recipes[1], "vpnls", bootstrap=60)
    r = result.at_target
    assert r.multiplier_lo <= 1.0 <= r.multiplier_hi
    assert result.verdict().startswith("No measurable difference")
    assert result.exponents["a"][1] <= 0 <= result.exponents["a"][2]


def test_a_recipe_against_itself_has_a_trend_of_zero_not_below_search(recipes):
    """A sweep compared with itself printed "d log M / d log C = below search [...]": its trend, a
    slope, was formatted as a multiplier, where 0 means below the search."""
    result = flops_fit.compare(recipes[0], recipes[0], "vpnls", bootstrap=20)
    assert result.trend[0] == 0.0
    assert "(d log M / d log C = 0 [" in result.verdict() and "below search" not in result.verdict()


def test_a_real_difference_is_measured(recipes):
    result = flops_fit.compare(recipes[0], recipes[2], "vpnls", bootstrap=60)
    swept = result.table[result.table.budget < result.target]
    # A 0.7x size term is worth about 2.7x the compute at these budgets (the law's own answer).
    truth = compare_results(stated(DEFAULT_LAW), stated({**DEFAULT_LAW, "A": DEFAULT_LAW["A"] * 0.7}),
                            budgets=BUDGETS).table.multiplier.to_numpy()[:3]
    assert (swept.multiplier_lo > 1.0).all()
    assert (swept.multiplier_lo.to_numpy() <= truth).all() and (truth <= swept.multiplier_hi.to_numpy()).all()


def test_cli_compare_writes_the_report(recipes, tmp_path, capsys):
    paths = []
    for name, frame in zip(("base", "seed2"), recipes[:2], strict=True):
        paths.append(tmp_path / f"{name}.csv")
        frame.drop(columns="curve").to_csv(paths[-1], index=False)
    assert main(["compare", *map(str, paths), "--method", "vpnls", "--bootstrap", "20",
                 "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "seed2 (B" in out and "multiplier" in out
    page = (tmp_path / "out" / "compare.html").read_text()
    assert "Effective compute multiplier" in page and "data:image/png;base64" in page
    assert main(["compare", str(paths[0]), str(tmp_path / "missing.csv")]) == 2
    assert main(["compare", *map(str, paths), "--method", "all"]) == 2
    assert "compare fits one method" in capsys.readouterr().err


def test_the_files_the_decide_page_names_are_the_ones_written(recipes, tmp_path):
    """docs/guide/decide.md said write_comparison writes compare.png beside compare.html; it is in compare_plots/."""
    page = Path(__file__).parents[1] / "docs" / "guide" / "decide.md"
    line = next(line for line in page.read_text().splitlines() if "write_comparison(result" in line)
    names = re.findall(r"[\w/]+\.(?:html|png|svg)", line)
    flops_fit.write_comparison(flops_fit.compare(recipes[0], recipes[1], "vpnls", bootstrap=0), tmp_path)
    assert names and all((tmp_path / name).exists() for name in names), names


def test_compare_reads_json(recipes):
    result = flops_fit.compare(recipes[0], recipes[1], "vpnls", bootstrap=20, names=("gpt", "llama"))
    data = json.loads(result.to_json())
    assert data["a"]["name"] == "gpt" and len(data["table"]) == 4
    assert data["verdict"] == result.verdict()


def test_what_each_recipes_runs_note_is_said_with_its_recipe(recipes):
    """A public table flags outliers in a column: each recipe's fit says so, and compare said nothing."""
    flagged = recipes[1].assign(outlier=[True] * 3 + [False] * (len(recipes[1]) - 3))
    result = flops_fit.compare(recipes[0], flagged, "vpnls", bootstrap=0, names=("base", "flagged"))
    said = [n for n in result.notes if "outlier" in n]
    assert said == [f"flagged (recipe B): column 'outlier' flags 3 of {len(flagged)} runs (True); they are fitted "
                    "with the others; to leave them out: where={'outlier': False} (CLI: --where outlier=False)"]
    assert said[0] in result.summary() and said[0] in result.to_dict()["notes"]


def test_two_recipes_logged_in_one_table_are_compared_by_their_rows(recipes, tmp_path, capsys):
    """A lab's tracker export holds both recipes in one table: each side picks its rows (the same
    answer as the two tables apart); the same rows on both sides say so; a fitted result takes no rows."""
    table = tmp_path / "runs.csv"
    pd.concat([recipes[0].assign(recipe="base"), recipes[2].assign(recipe="better")]).drop(columns="curve") \
        .to_csv(table, index=False)
    apart = flops_fit.compare(recipes[0], recipes[2], "vpnls", bootstrap=20)
    one = flops_fit.compare(table, table, "vpnls", bootstrap=20, where_a={"recipe": "base"},
                            where_b={"recipe": "better"})
    assert one.names == ("recipe=base", "recipe=better")
    assert one.table.multiplier.to_numpy() == pytest.approx(apart.table.multiplier.to_numpy(), rel=1e-6)
    assert not any("same runs" in n for n in one.notes)
    assert main(["compare", str(table), str(table), "--method", "vpnls", "--bootstrap", "20",
                 "--where-a", "recipe=base", "--where-b", "recipe=better", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["table"][-1]["multiplier"] == pytest.approx(one.at_target.multiplier, rel=1e-6)
    same = flops_fit.compare(table, table, "vpnls", bootstrap=0, where={"recipe": "base"})
    assert any("A and B are the same runs" in n and "--where-a" in n for n in same.notes)
    assert same.at_target.multiplier == pytest.approx(1.0)
    with pytest.raises(flops_fit.FitInputError, match="where_b selects runs to fit, and recipe B is a fitted result"):
        flops_fit.compare(table, one.b, where_b={"recipe": "better"})
    assert main(["compare", str(table), str(table), "--where-b", "recipe"]) == 2
    assert "--where-b takes COLUMN=VALUE pairs" in capsys.readouterr().err


def test_two_recipes_on_different_evaluation_sets_are_refused_in_one_line(recipes, tmp_path, capsys):
    """`compare gadre.csv gadre.csv --where train_data=rpj --where-a eval_data=c4_val --where-b
    eval_data=paloma_ptb` printed "B worse" at every budget without a word: the losses are on different sets.
    Now one line naming the column and the fix; one set picked for both sides is compared as before."""
    table = tmp_path / "runs.csv"
    pd.concat([recipes[0].assign(recipe="base", eval_data="c4_val"),
               recipes[2].assign(recipe="base", eval_data="paloma_ptb")]).drop(columns="curve").to_csv(table, index=False)
    assert main(["compare", str(table), str(table), "--where", "recipe=base", "--where-a", "eval_data=c4_val",
                 "--where-b", "eval_data=paloma_ptb"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "different evaluation sets (eval_data: 'c4_val' against 'paloma_ptb')" in err
    assert "--where eval_data=c4_val" in err
    with pytest.raises(flops_fit.FitInputError, match="recipes base and new are measured on different evaluation sets"):
        flops_fit.compare(table, table, where_a={"eval_data": "c4_val"}, where_b={"Eval Set": "x", "eval_data": "v"},
                          names=("base", "new"))
    kept = flops_fit.compare(table, table, "vpnls", bootstrap=0, where={"eval_data": "c4_val"},
                             where_a={"recipe": "base"}, where_b={"recipe": "base"})
    assert kept.at_target.multiplier == pytest.approx(1.0)


def test_two_recipes_evaluated_on_different_sets_in_their_own_rows_are_refused(recipes, tmp_path, capsys):
    """Two CSVs (or two recipes' rows of one table) each evaluated on one set, the sets different: the loaded
    runs dropped the eval_data column, so compare measured c4_val against paloma_ptb as one quantity."""
    a, b = tmp_path / "base.csv", tmp_path / "new.csv"
    recipes[0].assign(eval_data="c4_val").drop(columns="curve").to_csv(a, index=False)
    recipes[2].assign(eval_data="paloma_ptb").drop(columns="curve").to_csv(b, index=False)
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "recipes base and new are measured on different evaluation sets (eval_data: 'c4_val' against " \
           "'paloma_ptb')" in err
    table = tmp_path / "runs.csv"
    pd.concat([pd.read_csv(a).assign(recipe="base"), pd.read_csv(b).assign(recipe="new")]).to_csv(table, index=False)
    with pytest.raises(flops_fit.FitInputError, match=r"different evaluation sets \(eval_data: 'c4_val' against"):
        flops_fit.compare(table, table, where_a={"recipe": "base"}, where_b={"recipe": "new"})
    recipes[2].assign(eval_data="c4_val").drop(columns="curve").to_csv(b, index=False)  # one set: compared
    kept = flops_fit.compare(a, b, "vpnls", bootstrap=0)
    assert kept.at_target.multiplier > 1


@pytest.mark.parametrize(("given", "message"), [
    ({"bootstap": 3}, r"unknown option\(s\) bootstap; compare\(\) passes on"),
    ({"names": ("a", "b", "c")}, "names must be two names"), ({"names": "ab"}, "names must be two names")])
def test_compare_refuses_a_misspelt_option_or_bad_names_by_name(given, message):
    runs = synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=5)
    with pytest.raises(flops_fit.FitInputError, match=message):
        flops_fit.compare(runs, runs, method="vpnls", bootstrap=5, **given)


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--budgets", "0", "budgets must be finite positive numbers of FLOPs"),
    ("--budgets", "inf", "budgets must be finite positive numbers of FLOPs"),
    ("--budgets", "-1e11", "budgets must be finite positive numbers of FLOPs"),
    ("--target", "0", "target must be a finite positive number of FLOPs"),
    ("--target", "inf", "target must be a finite positive number of FLOPs")])
def test_a_budget_or_target_that_is_no_flop_count_is_refused_in_one_line(flag, value, message, tmp_path, capsys):
    """--budgets 0, inf or -1e11 ended in a traceback (OverflowError, exit 1) after both fits; --target 0
    fell back to the default target without a word."""
    csv = tmp_path / "runs.csv"
    synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=5).drop(columns="curve").to_csv(csv, index=False)
    assert main(["compare", str(csv), str(csv), "--bootstrap", "5", f"{flag}={value}"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    with pytest.raises(flops_fit.FitInputError, match=message):
        flops_fit.compare(str(csv), str(csv), **{flag[2:]: float(value) if flag == "--target" else [float(value)]})


@pytest.mark.parametrize("budgets", [["1e11"], [1e11, "1e12"], [True]])
def test_budgets_that_are_not_numbers_are_refused_not_converted(budgets):
    """compare(budgets=["1e11"]) read the strings as numbers, where every other entry point refuses
    a value of the wrong type by name."""
    runs = synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=5)
    with pytest.raises(flops_fit.FitInputError, match="budgets must be finite positive numbers of FLOPs"):
        flops_fit.compare(runs, runs, method="vpnls", bootstrap=0, budgets=budgets)


def test_a_budget_past_int64_is_a_number():
    """compare(budgets=[10**22]) was refused as not a number: numpy holds an int past int64 as an object."""
    runs = synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=5)
    assert 1e22 in flops_fit.compare(runs, runs, method="vpnls", bootstrap=0, budgets=[10**22]).table.budget.to_list()


def test_two_image_sweeps_compared_by_their_top1_error_say_error_not_loss(recipes, tmp_path, capsys):
    """`compare A B --metric error` headed its columns "loss A", "loss B" and said "reach B's loss", and its
    help offered only loss|bpb."""
    runs = []
    for i, frame in enumerate(recipes[:2]):
        frame = frame.drop(columns=["curve"]).assign(top1_error=frame["loss"] / 10)
        frame.to_csv(tmp_path / f"{i}.csv", index=False)
        runs.append(frame)
    result = flops_fit.compare(runs[0], runs[1], "vpnls", bootstrap=20, metric="error")
    assert result.headers[1:3] == ["top-1 error A", "top-1 error B"]
    assert "loss" not in result.summary()
    assert main(["compare", str(tmp_path / "0.csv"), str(tmp_path / "1.csv"), "--method", "vpnls", "--metric",
                 "error", "--bootstrap", "20", "--out", str(tmp_path / "cmp")]) == 0
    assert "top-1 error A" in capsys.readouterr().out
    page = (tmp_path / "cmp" / "compare.html").read_text()
    assert "top-1 error A" in page and "reach B's top-1 error" in page
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    assert "loss|bpb|error" in capsys.readouterr().out


def test_a_method_that_cannot_fit_one_recipe_names_the_recipe_and_an_option_compare_has(tmp_path, capsys):
    """A recipe whose parametric fit gives no finite answer stopped compare with fit's hint "method='all'
    (--method all) fits each", which compare then refused ("compare fits one method"): the refusal
    names the recipe and the other methods compare takes."""
    weak = Path(__file__).parent / "data" / "weak_sweep.csv"
    base = synthetic_runs(budgets=BUDGETS, sizes_per_budget=7, seed=1)
    with pytest.raises(NoFitError) as caught:
        flops_fit.compare(weak, base, "parametric", bootstrap=20)
    message = str(caught.value)
    assert message.startswith("recipe A (weak_sweep): parametric: failed: no finite, ordered answer")
    assert "method='all' (--method all) fits each" not in message
    assert "compare with another method (--method: envelope, isoflop, vpnls" in message
    base.drop(columns="curve").to_csv(tmp_path / "base.csv", index=False)
    assert main(["compare", str(weak), str(tmp_path / "base.csv"), "--bootstrap", "20"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "recipe A (weak_sweep)" in err and "Traceback" not in err
