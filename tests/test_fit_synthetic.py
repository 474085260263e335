"""Every method recovers a known law from noisy synthetic runs, within its stated interval."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from flops_fit.fitting import FitInputError, fit, load_runs
from flops_fit.fitting.approaches.result import prediction_rows
from flops_fit.fitting.synthetic import DEFAULT_LAW, optimal_size, synthetic_runs

TRUE_A = DEFAULT_LAW["beta"] / (DEFAULT_LAW["alpha"] + DEFAULT_LAW["beta"])
TRUE_B = 1 - TRUE_A


@pytest.fixture(scope="module")
def runs():
    return load_runs(synthetic_runs(seed=1))


@pytest.fixture(scope="module")
def fitted_all(runs):
    """Every method on the same runs, fitted once for the tests below."""
    return fit(runs, method="all", bootstrap=100, seed=3)


@pytest.mark.parametrize(("method", "curve"), [("envelope", None), ("isoflop", "parabola"), ("isoflop", "akima"), ("isoflop", "huber"),
                                               ("parametric", None), ("vpnls", None)])
def test_exponents_recovered_within_interval(runs, fitted_all, method, curve):
    fitted = fit(runs, method=method, bootstrap=100, seed=3, curve=curve) if curve in ("akima", "huber") else fitted_all[method]
    (a, a_lo, a_hi), (b, b_lo, b_hi) = fitted.exponents["a"], fitted.exponents["b"]
    assert a_lo <= TRUE_A <= a_hi, (a, a_lo, a_hi)
    assert b_lo <= TRUE_B <= b_hi, (b, b_lo, b_hi)
    assert a_hi - a_lo < 0.25  # an interval that says something
    # The prediction at a budget inside the data lands near the law's optimum.
    row = fitted.predict(1e19).iloc[0]
    truth = optimal_size(DEFAULT_LAW, 1e19)
    assert abs(np.log(row.N_opt / truth)) < 0.25
    assert row.N_opt_lo <= row.N_opt <= row.N_opt_hi
    assert row.tokens_per_param == pytest.approx(row.D_opt / row.N_opt)


@pytest.mark.parametrize("method", ["parametric", "vpnls"])
def test_parametric_methods_recover_the_law(fitted_all, method):
    fitted = fitted_all[method]
    table = fitted.intervals()
    for name in ("E", "alpha", "beta"):
        assert table.loc[name, "lo"] <= DEFAULT_LAW[name] <= table.loc[name, "hi"], name
    assert fitted.diagnostics.r2 > 0.99
    assert fitted.diagnostics.residuals["residual"].abs().max() < 0.03


def test_noise_free_parametric_fit_is_exact():
    fitted = fit(synthetic_runs(noise=0.0), method="parametric", bootstrap=0)
    for name, value in DEFAULT_LAW.items():
        assert fitted.params[name] == pytest.approx(value, rel=1e-3), name


def test_off_centre_grids_and_few_budgets_are_flagged():
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=9, span=1.0, offset=0.6, noise=0.0)
    fitted = fit(frame, method="isoflop", bootstrap=0)
    warnings = " ".join(fitted.diagnostics.warnings)
    assert "off-centre grid at budget 1e+17" in warnings
    assert "only 3 budgets with interior minima" in warnings


def test_edge_minima_are_excluded_and_reported():
    good = synthetic_runs(budgets=(1e17, 1e18, 1e19), noise=0.0)
    bad = synthetic_runs(budgets=(1e20,), sizes_per_budget=5, span=0.5, offset=-1.5, noise=0.0)
    frame = np.concatenate([good.to_records(index=False), bad.to_records(index=False)])
    import pandas as pd

    fitted = fit(pd.DataFrame(frame), method="isoflop", bootstrap=0)
    reasons = [x for x in fitted.diagnostics.excluded if x.get("budget") == 1e20]
    assert reasons and reasons[0]["reason"] == "edge minimum: the largest size has the lowest loss"
    assert "1 budget(s) had their minimum on the edge" in " ".join(fitted.diagnostics.warnings)
    assert list(fitted.details["optima"].dropna(subset=["log_n"])["budget"]) == [1e17, 1e18, 1e19]
    import json

    data = json.loads(fitted.to_json())
    assert {"budget": 1e20, "runs": 5, "reason": "edge minimum: the largest size has the lowest loss"} in data["diagnostics"]["excluded"]


def test_budgets_are_inferred_when_the_column_is_missing():
    frame = synthetic_runs(noise=0.0).drop(columns=["budget"])
    fitted = fit(frame, method="isoflop", bootstrap=0)
    assert fitted.exponents["a"][0] == pytest.approx(TRUE_A, abs=0.03)
    assert any("rounding FLOPs to one significant figure" in w for w in fitted.diagnostics.warnings)


def test_all_methods_agree_on_clean_data_and_disagreement_is_reported(fitted_all):
    fitted = fitted_all
    assert set(fitted.results) == {"envelope", "isoflop", "parametric", "vpnls", "interaction"}
    assert fitted.warnings == []
    # A law with a different exponent fitted to other runs must be called out.
    other = fit(synthetic_runs(law={**DEFAULT_LAW, "beta": 0.8}, seed=2), method="isoflop", bootstrap=50)
    from flops_fit.fitting.approaches.fit_set import FitSet

    both = FitSet({"parametric": fitted["parametric"], "isoflop": other})
    assert len(both.warnings) == 1 and "approaches disagree: parametric gives a = " in both.warnings[0]
    assert both.warnings[0] in fitted["parametric"].diagnostics.warnings


def test_table_and_json_are_consistent(runs):
    import json

    fitted = fit(runs, method="isoflop", bootstrap=50)
    table = fitted.table([1e18, 1e22])
    assert list(table["budget"]) == [1e18, 1e22]
    assert (table["N_opt"] * table["tokens_per_param"]).to_numpy() == pytest.approx(table["D_opt"].to_numpy())
    data = json.loads(fitted.to_json([1e18, 1e22]))
    assert data["method"] == "isoflop" and data["bootstrap"] == 50
    assert data["table"][1]["N_opt"] == pytest.approx(table["N_opt"][1])
    assert data["params"]["a"]["lo"] <= data["params"]["a"]["estimate"] <= data["params"]["a"]["hi"]


def test_bootstrap_is_reproducible_by_seed(runs):
    one = fit(runs, method="isoflop", bootstrap=30, seed=7).samples
    two = fit(runs, method="isoflop", bootstrap=30, seed=7).samples
    three = fit(runs, method="isoflop", bootstrap=30, seed=8).samples
    assert one.equals(two) and not one.equals(three)


def test_huber_profile_resists_a_stray_run():
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19, 1e20), sizes_per_budget=9, noise=0.0)
    # One run per budget, two sizes left of centre, diverged: loss 15% too high.
    stray = frame.groupby("budget").nth(2).index
    frame.loc[stray, "loss"] *= 1.15
    truth = np.log([optimal_size(DEFAULT_LAW, c) for c in (1e17, 1e18, 1e19, 1e20)])
    errors = {}
    for curve in ("parabola", "huber"):
        optima = fit(frame, method="isoflop", curve=curve, bootstrap=0).details["optima"]
        errors[curve] = np.abs(optima["log_n"].to_numpy() - truth).max()
    assert errors["huber"] < 0.05 < errors["parabola"], errors


def test_a_loss_floor_at_its_bound_reads_zero_inside_its_interval():
    """Runs with no irreducible loss: the fit leaves E at the optimizer's leftovers (about 1e-29, its
    draws down to denormals); the table reads 0, inside its own interval, not digits that mean 0."""
    fitted = fit(synthetic_runs({**DEFAULT_LAW, "E": 0.0}, noise=0.002, seed=1), method="parametric",
                 bootstrap=50, seed=0)
    assert 0 < fitted.params["E"] < 1e-12  # the raw fit: not exactly its bound
    row = fitted.intervals().loc["E"]
    assert (row.estimate, row.lo, row.hi, row.se) == (0.0, 0.0, 0.0, 0.0)
    e_line = next(line for line in fitted.summary().splitlines() if line.startswith("E "))
    assert e_line.split()[:4] == ["E", "0", "[0,", "0]"]


def test_a_coefficient_the_runs_do_not_pin_down_is_withheld_with_its_reason():
    """Three close budgets of four noisy runs: the bootstrap reads A over 1e15x and its s.e. as inf;
    the table withholds both (as N_opt's interval over 1000x is) and keeps the estimate."""
    fitted = fit(synthetic_runs(budgets=(1e17, 2e17, 4e17), sizes_per_budget=4, span=0.5, noise=0.05, seed=2),
                 method="parametric", bootstrap=100, seed=0)
    table = fitted.intervals()
    assert table.loc["A", "hi"] / table.loc["A", "lo"] > 1e3 and not np.isfinite(table.loc["A", "se"])
    text = fitted.summary()
    a_line = next(line for line in text.splitlines() if line.startswith("A "))
    assert "[withheld: spans over 1000x]" in a_line and "withheld" in a_line.split("]")[-1]
    assert "nan" not in text.split("\n\n")[1] and "inf" not in text.split("\n\n")[1]
    alpha = next(line for line in text.splitlines() if line.startswith("alpha "))
    assert "withheld" not in alpha  # an exponent's interval is printed as it is


def test_a_prediction_that_names_no_model_is_withheld_not_printed():
    """``fit demo_runs.csv --method vpnls --predict 1e3`` printed N_opt 1.34 [0.168, 5.23] parameters and
    D_opt 60.3 [16.7, 442] tokens: a bound below one parameter, and more tokens than 1e3 FLOPs train a
    one-parameter model on (1e3 / 6 = 167); the bounds (at 10 FLOPs the values too) are withheld with the
    reason, as the fit's own checks refuse them at its budgets."""
    fitted = fit(Path(__file__).parent / "data" / "demo_runs.csv", "vpnls", bootstrap=20, tracking=False)
    table = fitted.predict([10.0, 1e3, 1e6])
    assert table.N_opt_lo[1] < 1 and table.D_opt_hi[1] > 1e3 / 6  # what the table used to print
    rows = prediction_rows(table)
    assert rows[0][1:] == ["withheld: below one parameter",
                           "withheld: more tokens than the budget trains a one-parameter model on", "withheld", "withheld"]
    assert rows[1][1:3] == ["1.34 [withheld: below one parameter]",
                            "60.3 [withheld: more tokens than the budget trains a one-parameter model on]"]
    assert "withheld" not in " ".join(rows[2][1:3])


def test_budgets_are_flop_counts_wherever_they_are_given():
    """One check for budgets (predict, inference sizing, compare): predict read the string "1e21" as a
    number, and compare refused 10**22 (an int past int64, which numpy holds as an object)."""
    fitted = fit(synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=5), "vpnls", bootstrap=0, tracking=False)
    assert fitted.predict(10**22).budget[0] == 1e22
    for bad in ("1e21", ["1e21"], [True], [[1e21]], []):
        with pytest.raises(FitInputError, match="budgets must be finite positive FLOP counts"):
            fitted.predict(bad)
