"""focus="frontier" fits the floor of the runs near each budget's optimum; the frontier follows
the runs' own FLOPs per parameter-token. Checked on runs drawn from known laws."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from flops_fit.cli.main import main
from flops_fit.errors import FitInputError
from flops_fit.fitting import fit
from flops_fit.fitting.synthetic import DEFAULT_LAW, law_loss, optimal_size, synthetic_runs

BUDGETS = (1e17, 1e18, 1e19, 1e20, 1e21)


def short_of_the_law(seed: int = 0, noise: float = 0.003, bend: float = 0.03) -> pd.DataFrame:
    """Runs whose loss is a known law plus what training left short: a one-sided excess (noise
    that only adds loss) and a mis-tuning that grows with the distance from the budget's optimum
    (bend x (log10 N/N*)^2: a learning-rate rule tuned near the optimum), which the law's form
    cannot follow. The law itself is the floor, reached at each budget's optimum."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in BUDGETS:
        centre = optimal_size(DEFAULT_LAW, c)
        for i, x in enumerate(np.linspace(-1.0, 1.0, 7)):
            n = centre * 10.0 ** x
            d = c / (6.0 * n)
            excess = abs(rng.normal(0.0, noise)) + bend * x * x
            rows.append({"run_id": f"{c:g}-{i}", "params": n, "tokens": d, "flops": c, "budget": c,
                         "loss": float(law_loss(DEFAULT_LAW, n, d) * np.exp(excess))})
    return pd.DataFrame(rows)


def law_minimum(budget: float) -> float:
    n = optimal_size(DEFAULT_LAW, budget)
    return float(law_loss(DEFAULT_LAW, n, budget / (6.0 * n)))


@pytest.mark.parametrize("method", ["parametric", "vpnls", "interaction"])
def test_the_frontier_focus_forecasts_the_floor_that_the_whole_fit_misses(method):
    runs = short_of_the_law()
    truth = law_minimum(1e21)
    error = {focus: fit(runs, method=method, bootstrap=0, focus=focus).predict(1e21).loss.iloc[0] / truth - 1
             for focus in ("all", "frontier")}
    assert error["all"] > 0.01  # every run alike: pulled up by the runs training left short
    assert abs(error["frontier"]) < 0.008
    assert abs(error["frontier"]) < abs(error["all"]) / 2


@pytest.mark.parametrize("method", ["parametric", "vpnls"])
def test_runs_that_follow_the_law_are_fitted_exactly_under_either_focus(method):
    runs = synthetic_runs(noise=0.0)
    fitted = fit(runs, method=method, bootstrap=0, focus="frontier")
    assert fitted.details["focus"] == "frontier"
    for name in ("E", "alpha", "beta"):
        assert fitted.params[name] == pytest.approx(DEFAULT_LAW[name], rel=2e-3), name


def test_the_frontier_follows_flops_per_parameter_token_that_fall_with_size():
    """C = k N^(1+s) D with s < 0 (attention and the head at small sizes): the law's optimum along
    the runs' own rule, found here by brute force on a fine grid of N."""
    k, s = 9.0, -0.06
    rows = []
    for c in BUDGETS:
        centre = optimal_size(DEFAULT_LAW, c)
        for n in centre * np.geomspace(0.1, 10.0, 9):
            d = c / (k * n ** (1 + s))
            rows.append({"params": n, "tokens": d, "flops": c, "budget": c, "loss": float(law_loss(DEFAULT_LAW, n, d))})
    runs = pd.DataFrame(rows)
    grid = np.geomspace(1e6, 1e12, 400_001)
    for method in ("parametric", "interaction"):
        fitted = fit(runs, method=method, bootstrap=0)
        assert fitted.params["k"] == pytest.approx(k, rel=1e-6) and fitted.params["k_slope"] == pytest.approx(s, abs=1e-9)
        for c in (1e19, 1e22):
            brute = grid[np.argmin(law_loss(DEFAULT_LAW, grid, c / (k * grid ** (1 + s))))]
            row = fitted.predict(c).iloc[0]
            assert row.N_opt == pytest.approx(brute, rel=3e-3), (method, c)
            assert row.D_opt == pytest.approx(c / (k * row.N_opt ** (1 + s)), rel=1e-6)
    # C = 6ND data keep Chinchilla's frontier: k 6, no slope.
    plain = fit(synthetic_runs(noise=0.0), method="parametric", bootstrap=0)
    assert plain.params["k"] == 6.0 and plain.params["k_slope"] == 0.0
    # So do 6ND data whose table rounded N and D to whole numbers: no slope of rounding error.
    rounded = synthetic_runs(noise=0.0).assign(params=lambda f: f.params.round(), tokens=lambda f: f.tokens.round())
    fitted = fit(rounded, method="parametric", bootstrap=0)
    assert fitted.params["k"] == pytest.approx(6.0, rel=1e-6) and fitted.params["k_slope"] == 0.0
    assert "frontier with C = k N D," in fitted.summary()


def test_an_unknown_focus_is_refused_with_the_choices(capsys, tmp_path):
    with pytest.raises(FitInputError, match="focus must be one of all, frontier; got 'nearest'"):
        fit(synthetic_runs(budgets=(1e17, 1e18)), method="vpnls", bootstrap=0, focus="nearest")
    path = tmp_path / "runs.csv"
    synthetic_runs(budgets=(1e17, 1e18)).drop(columns="curve").to_csv(path, index=False)
    assert main(["fit", str(path), "--method", "vpnls", "--focus", "nearest"]) == 2
    err = capsys.readouterr().err
    assert "focus must be one of all, frontier" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
