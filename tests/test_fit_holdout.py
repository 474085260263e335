"""The held-out check: every method fitted without one budget predicts that budget's optimum."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flops_fit.cli.main import main
from flops_fit.fitting import FitInputError, fit
from flops_fit.fitting.approaches.result import prediction_json, prediction_rows
from flops_fit.fitting.laws.laws import law_loss
from flops_fit.fitting.synthetic import DEFAULT_LAW, optimal_size, synthetic_runs

BUDGETS = (1e17, 1e18, 1e19, 1e20)
FIELDS = {"budget", "predicted_loss", "observed_loss", "loss_error", "predicted_n_opt", "observed_n_opt",
          "n_opt_interval", "covered"}
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "chinchilla_fig4_epoch.csv"


@pytest.fixture(scope="module")
def frame():
    return synthetic_runs(budgets=BUDGETS, sizes_per_budget=7, curve_points=10, seed=1)


@pytest.fixture(scope="module")
def checked(frame):
    return fit(frame, method="all", bootstrap=60, seed=2, holdout="largest")


def test_the_largest_budget_is_predicted_from_the_others(frame, checked):
    truth = optimal_size(DEFAULT_LAW, 1e20)
    true_loss = float(law_loss(DEFAULT_LAW, truth, 1e20 / (6 * truth)))
    assert set(checked.holdout) == {"envelope", "isoflop", "parametric", "vpnls", "interaction"}
    for method, (c,) in checked.holdout.items():
        assert c.budget == 1e20 and c.fitted_budgets == [1e17, 1e18, 1e19], method
        # The observed optimum is the held-out budget's own slice minimum: close to the law's
        # optimum, with an interval around it.
        n_obs = c.observed_n_opt
        assert n_obs == pytest.approx(truth, rel=0.05) and c.observed_loss == pytest.approx(true_loss, rel=0.005)
        lo, hi = c.observed_n_opt_interval
        assert lo < n_obs < hi and lo < truth < hi
        assert c.n_opt_error == pytest.approx(c.predicted_n_opt / n_obs - 1)
        assert c.covered["n_opt"] == (c.n_opt_interval[0] <= n_obs <= c.n_opt_interval[1])
    # Approach 3 (and its interaction form) knows the irreducible loss: it predicts both N_opt and the
    # loss well, inside its intervals.
    for method in ("parametric", "vpnls", "interaction"):
        c = checked.holdout[method][0]
        assert abs(c.n_opt_error) < 0.1 and abs(c.loss_error) < 0.01, (method, c)
        assert c.covered == {"n_opt": True, "loss": True}, method


def test_the_prediction_is_the_fit_without_the_held_out_runs(frame, checked):
    alone = fit(frame[frame.budget < 1e20], method="parametric", bootstrap=60, seed=2).predict(1e20).iloc[0]
    c = checked.holdout["parametric"][0]
    assert c.predicted_n_opt == pytest.approx(alone.N_opt) and c.predicted_loss == pytest.approx(alone.loss)
    assert c.n_opt_interval == pytest.approx((alone.N_opt_lo, alone.N_opt_hi))
    # The full fit is not touched by the check.
    assert checked["parametric"].predict(1e20).iloc[0].N_opt != pytest.approx(alone.N_opt, rel=1e-6)


def test_json_has_the_holdout_fields_per_method(checked):
    data = json.loads(checked.to_json())
    assert set(data["holdout"]) == set(checked.results)
    for method, entry in data["holdout"].items():
        assert FIELDS <= set(entry), method
        assert entry["budget"] == 1e20 and len(entry["n_opt_interval"]) == 2
        assert set(entry["covered"]) == {"loss", "n_opt"}
    single = json.loads(fit(checked.runs, method="isoflop", bootstrap=20, holdout="largest").to_json())
    assert FIELDS <= set(single["holdout"]["isoflop"])
    assert "Held-out check" in checked.summary() and "N_opt predicted" not in checked.summary()
    assert "N_opt predicted" in checked.summary(verbose=True)  # the held-out table, for every method


def test_a_named_budget_and_each_budget_in_turn(frame):
    one = fit(frame, method="isoflop", bootstrap=0, holdout=1e19)
    (c,) = one.holdout["isoflop"]
    assert c.budget == 1e19 and c.fitted_budgets == [1e17, 1e18, 1e20]
    assert c.covered == {"loss": None, "n_opt": None}  # no bootstrap, no intervals: no verdict
    each = fit(frame, method="isoflop", bootstrap=0, holdout="each")
    assert [c.budget for c in each.holdout["isoflop"]] == list(BUDGETS)
    assert isinstance(json.loads(each.to_json())["holdout"]["isoflop"], list)


def test_forward_chaining_fits_the_budgets_up_to_each_split_and_predicts_the_larger_ones(frame):
    forward = fit(frame, method="isoflop", bootstrap=0, holdout="forward").holdout["isoflop"]
    assert [(c.fitted_budgets, c.budget) for c in forward] == [
        ([1e17, 1e18], 1e19), ([1e17, 1e18], 1e20), ([1e17, 1e18, 1e19], 1e20)]
    # one fit per split: both predictions from the first split come from the same law
    alone = fit(frame[frame.budget <= 1e18], method="isoflop", bootstrap=0).predict([1e19, 1e20])
    assert [c.predicted_loss for c in forward[:2]] == pytest.approx(list(alone["loss"]))
    with pytest.raises(FitInputError, match="holdout='forward' fits at least 2 budgets and predicts a larger one.*hold out 'largest' or 'each' instead"):
        fit(frame[frame.budget <= 1e18], method="isoflop", bootstrap=0, holdout="forward")


def test_bad_holdout_choices_are_refused(frame):
    """A misspelt choice was told three of the five words --holdout takes (not auto or none)."""
    with pytest.raises(FitInputError, match=r"holdout=1e\+21: no runs at that budget; the runs' budgets are "
                                            r"1e\+17, 1e\+18, 1e\+19, 1e\+20"):
        fit(frame, method="isoflop", bootstrap=0, holdout=1e21)
    with pytest.raises(FitInputError, match="holdout must be 'forward', 'largest', 'each', 'auto', 'none' or a budget in FLOPs"):
        fit(frame, method="isoflop", bootstrap=0, holdout="smallest")
    with pytest.raises(FitInputError, match="a held-out check needs runs at 2 or more budgets; these runs have 1"):
        fit(frame[frame.budget == 1e19], method="parametric", bootstrap=0, holdout="largest")


def test_checks_that_cannot_be_made_say_why():
    good = synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=7, noise=0.0)
    edge = synthetic_runs(budgets=(1e19,), sizes_per_budget=5, span=0.5, offset=-1.5, noise=0.0)
    fitted = fit(pd.concat([good, edge], ignore_index=True), method="vpnls", bootstrap=0, holdout="largest")
    c = fitted.holdout["vpnls"][0]
    assert c.reason == "the held-out budget has no observed optimum: edge minimum: the largest size has the lowest loss"
    assert np.isnan(c.observed_n_opt) and c.covered == {"loss": None, "n_opt": None}
    # Holding out 1e18 leaves Approach 2 one interior budget: it cannot fit, and says so.
    fitted = fit(pd.concat([good, edge], ignore_index=True), method="isoflop", bootstrap=0, holdout=1e18)
    assert fitted.holdout["isoflop"][0].reason.startswith("cannot fit the other budgets: Approach 2 needs an interior")


def test_cli_holdout_json_and_errors(frame, tmp_path, capsys):
    csv = tmp_path / "runs.csv"
    frame.drop(columns=["curve"]).to_csv(csv, index=False)
    assert main(["fit", str(csv), "--method", "vpnls", "--bootstrap", "20", "--holdout", "largest", "--json"]) == 0
    entry = json.loads(capsys.readouterr().out)["holdout"]["vpnls"]
    assert FIELDS <= set(entry) and entry["budget"] == 1e20
    assert main(["fit", str(csv), "--method", "isoflop", "--bootstrap", "0", "--holdout", "1e18"]) == 0
    assert "Held-out check" in capsys.readouterr().out
    assert main(["fit", str(csv), "--holdout", "3e15"]) == 2
    assert "flops-fit: error: holdout=3e+15: no runs at that budget; the runs' budgets are 1e+17, 1e+18" in capsys.readouterr().err
    assert main(["fit", str(csv), "--holdout", "biggest"]) == 2
    assert "holdout must be 'forward', 'largest', 'each', 'auto', 'none' or a budget in FLOPs (e.g. 1e21); got 'biggest'" in capsys.readouterr().err


@pytest.mark.skipif(not DATA.is_file(), reason=f"reference data {DATA} is absent (../shared beside the repository)")
def test_chinchilla_runs_predict_their_1e21_budget():
    """Chinchilla's own runs (Epoch's extraction): fit without the ~1e21 FLOP runs, predict them."""
    fitted = fit(DATA, method="all", bootstrap=50, seed=0, holdout=1e21, exclude_top=5,
                 params_col="Model Size", flops_col="Training FLOP", loss_col="loss")
    assert set(fitted.holdout) == {"isoflop", "parametric", "vpnls", "interaction"}  # no curves: no Approach 1
    iso, par = fitted.holdout["isoflop"][0], fitted.holdout["parametric"][0]
    assert 2.4e9 < iso.observed_n_opt < 3.3e9 and 2.2 < iso.observed_loss < 2.4
    assert abs(par.loss_error) < 0.02 and abs(par.n_opt_error) < 0.15 and par.covered["n_opt"] is True
    assert abs(iso.n_opt_error) < 0.1 and iso.covered["n_opt"] is True


def test_fit_pairs_fits_each_approach_on_its_own_runs_in_order_and_in_the_shared_pool():
    from flops_fit.fitting.approaches.isoflop import Isoflop
    from flops_fit.fitting.inputs import load_runs
    from flops_fit.fitting.validation.holdout import fit_pairs, shared_refits

    small = load_runs(synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7, noise=0.0, seed=2))
    large = load_runs(synthetic_runs(budgets=(1e18, 1e19, 1e20), sizes_per_budget=7, noise=0.0, seed=3))
    one = load_runs(synthetic_runs(budgets=(1e19,), sizes_per_budget=7, noise=0.0, seed=4))
    approach = Isoflop(bootstrap=0)
    pairs = [(approach, small), (approach, large), (approach, one)]
    alone = [approach.fit(small).params, approach.fit(large).params]
    with shared_refits():
        pooled = fit_pairs(pairs, workers=2)
    serial = fit_pairs(pairs)
    for results in (pooled, serial):
        assert [r.params for r in results[:2]] == alone
        assert isinstance(results[2], FitInputError)  # one budget: its reason in its place


def test_fit_pairs_fits_approach_3_together_and_reuses_a_fit_without_its_resamples():
    from flops_fit.fitting.approaches.parametric import Parametric
    from flops_fit.fitting.approaches.vpnls import Vpnls
    from flops_fit.fitting.inputs import load_runs
    from flops_fit.fitting.validation.holdout import fit_pairs, shared_refits

    small = load_runs(synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, noise=0.01, seed=2))
    large = load_runs(synthetic_runs(budgets=(1e18, 1e19, 1e20), sizes_per_budget=5, noise=0.01, seed=3))
    pairs = [(Parametric(bootstrap=0), small), (Vpnls(bootstrap=0), small),
             (Parametric(bootstrap=0, focus="frontier"), large), (Parametric(bootstrap=5), large)]
    alone = [approach.fit(runs) for approach, runs in pairs]
    with shared_refits() as shared:
        together = fit_pairs(pairs)  # the three Approach-3 pairs in one unit
        resampled = fit_pairs([(Vpnls(bootstrap=8), large)])[0]
        point, same = fit_pairs([(Vpnls(bootstrap=0), large), (Vpnls(bootstrap=8), large)])
    for a, b in zip(alone, together, strict=True):
        assert a.params == b.params and a.samples.equals(b.samples)
    assert shared.fit_hits == 2 and same is resampled
    fresh = Vpnls(bootstrap=0).fit(large)  # the point fit: the resampled fit's point, no intervals
    assert len(point.samples) == 0 and len(resampled.samples) == 8 and point.params == fresh.params
    assert point.predict([1e21]).equals(fresh.predict([1e21]))
    assert not resampled.predict([1e21]).equals(fresh.predict([1e21]))


def test_observe_each_in_the_shared_pool_gives_each_budgets_own_answer():
    from flops_fit.fitting.inputs import load_runs
    from flops_fit.fitting.laws.profiles import budget_groups
    from flops_fit.fitting.validation.holdout import observe, observe_each, shared_refits

    runs = load_runs(synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7, noise=0.01, seed=5))
    budgets, _ = budget_groups(runs)
    chosen = sorted(float(b) for b in np.unique(budgets))
    options = {"curve": "slice", "bootstrap": 20, "seed": 0, "level": 0.95}
    alone = [observe(runs, budgets, b, **options) for b in chosen]
    with shared_refits():
        pooled = observe_each(runs, budgets, chosen, workers=2, **options)
    assert pooled == alone and all(o.reason is None and o.n_opt_interval[0] < o.n_opt < o.n_opt_interval[1]
                                   for o in pooled)


def test_a_script_that_fits_on_workers_without_a_main_guard_gets_one_line_naming_the_fix(tmp_path):
    """Worker processes import the calling script again: unguarded, each would start a fit of its own
    and the pool breaks. The caller gets the cause and the fix, not a pool's traceback (a guarded
    caller fits on workers: this module's tests above, run under pytest's guarded main)."""
    import subprocess
    import sys

    csv = tmp_path / "runs.csv"
    synthetic_runs(budgets=BUDGETS, sizes_per_budget=7, curve_points=0, seed=1).to_csv(csv, index=False)
    (tmp_path / "unguarded.py").write_text(
        f"import flops_fit\nflops_fit.fit({str(csv)!r}, 'isoflop', bootstrap=10, holdout='forward', workers=2)\n")
    done = subprocess.run([sys.executable, "unguarded.py"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    # the traceback's last line; multiprocessing's resource tracker may still warn of a leaked
    # semaphore after it, at exit, depending on how fast the broken pool's workers are gone
    last = next(line for line in reversed(done.stderr.splitlines()) if line.startswith("flops_fit.errors."))
    assert done.returncode == 1
    assert last.startswith("flops_fit.errors.FitInputError: a fitting worker process (workers > 1) stopped") and \
        '`if __name__ == "__main__":`' in last and "workers=1" in last


def test_checks_not_made_or_too_wide_to_judge_are_said_never_counted_as_inside():
    """(Mis)Fitting's sweep up to 4.7e17 FLOPs, chained forward: 10 of 12 checks could not be made (rows
    of nan), interaction predicted N_opt 2.79 parameters against 65.2M with an interval over 1000x wide
    and the table said "yes"; the summary said every observed value lay inside its interval."""
    from flops_fit.fitting.validation.holdout import Observed, compare, holdout_misses, holdout_rows

    observed = [Observed(budget=3e17, runs=6, n_opt=65.2e6, n_opt_interval=(57.9e6, 94.5e6), loss=3.9,
                         loss_interval=(3.7, 4.0)),
                Observed(budget=4.7e17, runs=6, n_opt=80e6, n_opt_interval=(60e6, 99e6), loss=3.8,
                         loss_interval=(3.6, 4.0))]
    budgets, keep = np.array([1.3e17, 2e17, 3e17, 4.7e17]), np.array([True, True, False, False])
    table = pd.DataFrame({"N_opt": [2.79, 70e6], "N_opt_lo": [0.01, 50e6], "N_opt_hi": [4e9, 99e6],
                          "loss": [1.73, 3.85], "loss_lo": [0.12, 3.7], "loss_hi": [3.97, 4.0]})
    wide, fine = compare("interaction", budgets, keep, observed, table)
    assert wide.covered == {"loss": True, "n_opt": None} and fine.covered == {"loss": True, "n_opt": True}
    failed = compare("vpnls", budgets, keep, observed, "cannot fit the other budgets: no interior minimum")
    checks = {"interaction": [wide, fine], "vpnls": failed}
    rows = holdout_rows(checks)
    assert rows[0][2:6] == ["2.79 [withheld: spans over 1000x]", "65.2M [57.9M, 94.5M]", "-100.0%", "-"]
    assert rows[2][2:] == ["-"] * 8 and rows[3][2:] == ["-"] * 8  # never a row of nan
    assert holdout_misses(checks) == [
        "interaction's N_opt interval spans over 1000x at 1 of 2 held-out budget(s) it could be checked at: too "
        "wide to judge",
        "vpnls could not be checked at 2 of 2 (why: the held-out notes, --verbose)"]
    # the summary's table of checks made in turn: one row per method, counted, never a paragraph
    from flops_fit.fitting.validation.holdout import holdout_counts

    counts = holdout_counts(checks).splitlines()
    assert counts[0].startswith("Held-out checks (each method refitted without the budgets it predicts")
    assert counts[0].endswith("not judged; why a check was not made: --verbose):")  # vpnls's were not made
    assert holdout_counts({"interaction": [wide, fine]}).splitlines()[0].endswith("not judged):")
    assert counts[1].split() == ["method", "checks", "not", "made", "N_opt", "outside", "N_opt", "mean", "|error|",
                                 "N_opt", "too", "wide", "loss", "outside", "loss", "mean", "|error|"]
    # interaction: 2 made, none outside; N_opt errors -100% and -12.5% (70M against 80M: mean 56.2%), one too wide; loss errors
    # -55.6% and +1.3% (mean 28.5%)
    assert counts[3].split() == ["interaction", "2", "0", "0", "56.2%", "1", "0", "28.5%"]
    assert counts[4].split() == ["vpnls", "2", "2", "0", "-", "0", "0", "-"]


def test_a_loss_interval_reaching_far_past_the_runs_own_losses_is_withheld_and_not_judged(capsys):
    """`fit demo_runs.csv --method isoflop --holdout 6e10 --bootstrap 20` printed the predicted loss as
    2.216 [2.19, 974.4] nats beside runs that ended at 2.1-2.6, and counted the observed 2.227 inside it."""
    demo = Path(__file__).parent / "data" / "demo_runs.csv"
    assert main(["fit", str(demo), "--method", "isoflop", "--holdout", "6e10", "--bootstrap", "20"]) == 0
    row = capsys.readouterr().out.split("Held-out check")[1].splitlines()[-1]
    assert "[withheld: reaches over 10x the runs' own losses]" in row and "974" not in row
    assert row.split()[-1] == "-"  # the loss check: not judged
    fitted = fit(demo, "isoflop", holdout=6e10, bootstrap=20, tracking=False)
    (check,) = fitted.holdout_checks
    assert check.loss_interval[1] > 100 * check.observed_loss  # the interval itself is kept in the JSON
    assert check.covered["loss"] is None and check.covered["n_opt"] is True


def test_a_predicted_loss_interval_far_past_the_runs_losses_is_withheld_in_the_table_and_json():
    table = pd.DataFrame([{"budget": 1e10, "N_opt": 2e3, "N_opt_lo": 1e3, "N_opt_hi": 3e3, "D_opt": 8e5,
                           "D_opt_lo": 5e5, "D_opt_hi": 1e6, "tokens_per_param": 400, "tokens_per_param_lo": 300,
                           "tokens_per_param_hi": 500, "loss": 2.7, "loss_lo": 2.5, "loss_hi": 452.0}])
    assert prediction_rows(table, losses=(1.6, 2.6))[0][-1] == "2.7 [withheld: reaches over 10x the runs' own losses]"
    assert prediction_rows(table, losses=(1.6, 50.0))[0][-1] == "2.7 [2.5, 452]"  # within 10x: printed
    (row,) = prediction_json(table, losses=(1.6, 2.6))
    assert row["loss"] == 2.7 and row["loss_lo"] is None and row["loss_hi"] is None
    assert row["withheld"] == {"loss_lo": "reaches over 10x the runs' own losses",
                               "loss_hi": "reaches over 10x the runs' own losses"}


def test_a_predicted_loss_far_over_the_runs_highest_is_withheld_in_the_table_and_json():
    """A loss at a budget far below the runs (a law's power terms growing without bound) printed as an answer
    beside runs that ended at 1.6-2.6 nats; over 10x their highest it is withheld, as one under a tenth of their
    lowest is, its interval with it."""
    table = pd.DataFrame([{"budget": 1e8, "N_opt": 2e3, "N_opt_lo": 1e3, "N_opt_hi": 3e3, "D_opt": 8e3,
                           "D_opt_lo": 5e3, "D_opt_hi": 1e4, "tokens_per_param": 4, "tokens_per_param_lo": 3,
                           "tokens_per_param_hi": 5, "loss": 68.0, "loss_lo": 60.0, "loss_hi": 80.0}])
    why = "over 10x the runs' highest loss, 2.6"
    assert prediction_rows(table, losses=(1.6, 2.6))[0][-1] == f"withheld: {why}"
    (row,) = prediction_json(table, losses=(1.6, 2.6))
    assert row["loss"] is row["loss_lo"] is row["loss_hi"] is None and row["withheld"]["loss"] == why
    assert prediction_rows(table, losses=(1.6, 9.0))[0][-1] == "68 [60, 80]"  # within 10x: printed


def test_a_predicted_loss_interval_reaching_under_zero_or_far_under_the_runs_is_withheld():
    """Every method's table at 1e21 FLOPs, beside runs that ended at 1.8-2.9 nats, read the curve law's loss
    as 0.6133 [-0.3087, 1.528]: a bound no loss can take. A lower end under a tenth of the runs' lowest
    loss is withheld as an upper end far past their highest is."""
    table = pd.DataFrame([{"budget": 1e21, "N_opt": 1e11, "N_opt_lo": 6e9, "N_opt_hi": 2e12, "D_opt": 3e9,
                           "D_opt_lo": 2e8, "D_opt_hi": 5e10, "tokens_per_param": 0.02, "tokens_per_param_lo": 0.01,
                           "tokens_per_param_hi": 0.05, "loss": 0.6133, "loss_lo": -0.3087, "loss_hi": 1.528}])
    why = "reaches under 1/10 of the runs' lowest loss, 1.8"
    assert prediction_rows(table, losses=(1.8, 2.9))[0][-1] == f"0.6133 [withheld: {why}]"
    (row,) = prediction_json(table, losses=(1.8, 2.9))
    assert row["loss"] == 0.6133 and row["withheld"] == {"loss_lo": why, "loss_hi": why}
    assert prediction_rows(table.assign(loss_lo=0.5), losses=(1.8, 2.9))[0][-1] == "0.6133 [0.5, 1.528]"


def test_the_held_out_figure_shows_each_budgets_furthest_check_that_was_made():
    """On the FineWeb/C4 sweep the fits of the first splits failed, so every budget's check from the
    fewest budgets had no prediction: the report's held-out figure, which draws that check per budget,
    was an empty frame of 80 labels. It now draws the furthest check that was made, where one was."""
    from flops_fit.fitting.validation.holdout import HoldoutCheck, furthest_checks

    failed = HoldoutCheck(method="isoflop", budget=1e19, fitted_budgets=[1e17, 2e17],
                          reason="the fit of the other budgets failed: too few budgets")
    made = HoldoutCheck(method="isoflop", budget=1e19, fitted_budgets=[1e17, 2e17, 4e17], predicted_loss=3.1,
                        observed_loss=3.0, loss_error=3.1 / 3.0 - 1, predicted_n_opt=2e8, observed_n_opt=1e8,
                        n_opt_error=1.0)
    later = HoldoutCheck(method="isoflop", budget=1e19, fitted_budgets=[1e17, 2e17, 4e17, 8e17], predicted_loss=3.05,
                         observed_loss=3.0, loss_error=3.05 / 3.0 - 1, predicted_n_opt=1.5e8, observed_n_opt=1e8,
                         n_opt_error=0.5)
    never = HoldoutCheck(method="isoflop", budget=2e19, fitted_budgets=[1e17, 2e17], reason="no observed optimum")
    never_later = HoldoutCheck(method="isoflop", budget=2e19, fitted_budgets=[1e17, 2e17, 4e17],
                               reason="no observed optimum")
    assert furthest_checks([failed, later, made, never_later, never]) == [made, never]
