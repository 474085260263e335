"""Approach 3 on the Chinchilla runs Epoch AI extracted must reproduce their published fit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from flops_fit.cli.main import main
from flops_fit.fitting import fit, load_runs

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "chinchilla_fig4_epoch.csv"
pytestmark = pytest.mark.skipif(not DATA.is_file(), reason=f"reference data {DATA} is absent (../shared beside the repository)")

COLUMNS = {"params_col": "Model Size", "flops_col": "Training FLOP", "loss_col": "loss"}
# Besiroglu et al. 2024 (data/README.md): estimates and bootstrap 95% intervals.
EPOCH = {"E": 1.817, "A": 482.01, "B": 2085.43, "alpha": 0.348, "beta": 0.366}
EPOCH_95 = {"A": (285.2, 743.6), "B": (1042.4, 5810.3), "E": (1.769, 1.871), "alpha": (0.317, 0.373),
            "beta": (0.331, 0.415)}


@pytest.fixture(scope="module")
def epoch_fit():
    return fit(DATA, method="parametric", bootstrap=200, seed=1, exclude_top=5, **COLUMNS)


def test_recovers_epochs_estimates(epoch_fit):
    p = epoch_fit.params
    assert len(epoch_fit.runs) == 240
    assert abs(p["E"] - EPOCH["E"]) < 0.01
    assert abs(p["alpha"] - EPOCH["alpha"]) < 0.01 and abs(p["beta"] - EPOCH["beta"]) < 0.01
    assert abs(p["A"] / EPOCH["A"] - 1) < 0.10 and abs(p["B"] / EPOCH["B"] - 1) < 0.10
    # Epoch's re-run of the exact Chinchilla procedure: A 477.8, B 2143.9.
    assert abs(p["A"] - 477.8) < 1.0 and abs(p["B"] - 2143.9) < 5.0
    assert abs(p["a"] - 0.513) < 0.005


def test_the_optimiser_converged_on_the_full_data_and_every_resample(epoch_fit):
    conv = epoch_fit.diagnostics.convergence
    assert conv["fit"]["status"] == "converged"
    assert conv["bootstrap"]["resamples"] == 200 and conv["bootstrap"].get("iteration limit", 0) == 0
    assert not any("iteration limit" in w for w in epoch_fit.diagnostics.warnings)


def test_bootstrap_intervals_overlap_epochs(epoch_fit):
    table = epoch_fit.intervals()
    for name, (lo, hi) in EPOCH_95.items():
        ours = table.loc[name]
        assert ours.lo < hi and lo < ours.hi, (name, ours.lo, ours.hi, lo, hi)
        assert ours.lo < ours.estimate < ours.hi


def test_warm_started_bootstrap_reaches_the_full_grid_optimum(epoch_fit):
    from flops_fit.fitting.approaches.parametric import huber_fit, law_columns

    log_n, log_d, loss, _ = law_columns(epoch_fit.runs)
    starts = np.array([[np.log(epoch_fit.params["A"]) + 0.3, np.log(epoch_fit.params["B"]) - 0.3,
                        np.log(epoch_fit.params["E"]), 0.3, 0.4]])
    theta, value, _, _ = huber_fit(log_n, log_d, np.log(loss), np.ones(log_n.size), starts)
    assert value[0] == pytest.approx(epoch_fit.details["objective"], rel=1e-9)
    assert theta[0, 3] == pytest.approx(epoch_fit.params["alpha"], abs=1e-5)


def test_batched_lbfgs_matches_scipy_lbfgsb(epoch_fit):
    from scipy.optimize import minimize

    from flops_fit.fitting.approaches.parametric import INIT_GRID, law_columns, objective

    log_n, log_d, loss, _ = law_columns(epoch_fit.runs)
    ones = np.ones(log_n.size)

    def scipy_fit(x0):
        return minimize(lambda t: tuple(v[0] for v in objective(t, log_n, log_d, np.log(loss), ones)), x0,
                        jac=True, method="L-BFGS-B", options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 5000})

    # No scipy run from the grid does better than the batched search ...
    best = min((scipy_fit(x0) for x0 in INIT_GRID[::900]), key=lambda r: r.fun)
    assert epoch_fit.details["objective"] <= best.fun * (1 + 1e-9)
    # ... and scipy started at our optimum finds nothing lower nearby.
    p = epoch_fit.params
    polished = scipy_fit(np.array([np.log(p["A"]), np.log(p["B"]), np.log(p["E"]), p["alpha"], p["beta"]]))
    assert polished.fun >= epoch_fit.details["objective"] * (1 - 1e-9)
    assert polished.x[3] == pytest.approx(p["alpha"], abs=1e-4) and polished.x[4] == pytest.approx(p["beta"], abs=1e-4)


def test_cli_done_means_command_prints_epochs_numbers(capsys):
    code = main(["fit", str(DATA), "--params-col", "Model Size", "--flops-col", "Training FLOP", "--loss-col", "loss",
                   "--exclude-top", "5", "--method", "parametric", "--bootstrap", "100", "--json", "--predict", "1e24"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    params = out["params"]
    assert abs(params["E"]["estimate"] - 1.817) < 0.01 and abs(params["beta"]["estimate"] - 0.366) < 0.01
    assert params["alpha"]["lo"] < 0.348 < params["alpha"]["hi"]
    assert out["runs"] == 240 and out["bootstrap"] == 100
    assert out["table"][0]["budget"] == 1e24 and out["table"][0]["N_opt_lo"] < out["table"][0]["N_opt"]


def test_runs_table_matches_the_readme():
    runs = load_runs(DATA, exclude_top=5, **COLUMNS)
    assert len(runs.excluded) == 5
    assert np.allclose(runs.frame["flops"], 6 * runs.frame["params"] * runs.frame["tokens"])
