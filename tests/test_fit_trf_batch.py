"""The batched bounded least squares (``laws._trf``) takes scipy's path row by row: each row's
answer, status and evaluation count are what ``scipy.optimize.least_squares`` gives that row
alone, so the curve law's bootstrap, batched, keeps every resample's answer. No timings here
(benchmarks/bench_fit_speed.py measures the speed)."""

import numpy as np
import pytest
from scipy.optimize import least_squares
from test_fit_curve_law import synthetic_sweep

from flops_fit.fitting import load_runs
from flops_fit.fitting.approaches import curve_law
from flops_fit.fitting.approaches.curve_law import FORM, CurveProblem
from flops_fit.fitting.laws._trf import least_squares_batch
from flops_fit.fitting.laws.bootstrap import resample_weights
from flops_fit.fitting.laws.estimators import fit_projection

T = np.linspace(0.0, 4.0, 30)
LOWER, UPPER = np.array([0.0, 0.05, 0.0]), np.array([np.inf, 3.0, np.inf])


def _decays(rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Noisy a exp(-b t) + c curves, some with c < 0 so the bound c >= 0 binds, and their starts
    (some on a bound)."""
    rng = np.random.default_rng(1)
    truth = np.column_stack([rng.uniform(0.5, 3, rows), rng.uniform(0.2, 2.5, rows), rng.uniform(-0.3, 0.5, rows)])
    y = truth[:, :1] * np.exp(-truth[:, 1:2] * T) + truth[:, 2:] + rng.normal(0, 0.05, (rows, T.size))
    starts = np.column_stack([np.ones(rows), rng.choice([0.05, 1.0, 3.0], rows), rng.choice([0.0, 0.2], rows)])
    return y, starts


def _residuals(z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b, c = z[..., :1], z[..., 1:2], z[..., 2:]
    decay = np.exp(-b * T)
    return a * decay + c - y, np.stack([decay, -a * T * decay, np.ones_like(decay)], axis=-1)


@pytest.mark.parametrize("max_nfev", [100, 4])
def test_batched_least_squares_takes_scipys_path_row_by_row(max_nfev):
    y, starts = _decays(40)
    batch = least_squares_batch(lambda z, rows: _residuals(z, y[rows]), starts, LOWER, UPPER, ftol=1e-6, xtol=1e-6,
                                max_nfev=max_nfev)
    for i, row in enumerate(y):
        alone = least_squares(lambda z, row=row: _residuals(z, row)[0], starts[i],
                              jac=lambda z, row=row: _residuals(z, row)[1], bounds=(LOWER, UPPER), x_scale="jac", ftol=1e-6, xtol=1e-6, max_nfev=max_nfev)
        np.testing.assert_allclose(batch.x[i], alone.x, rtol=1e-8, atol=1e-12)
        assert (batch.status[i], batch.nfev[i]) == (alone.status, alone.nfev)
    assert np.any(batch.x[:, 2] < 1e-6), "no row had its bound c >= 0 binding"
    if max_nfev == 4:
        assert np.any(batch.status == 0), "no row stopped at its evaluation limit"


@pytest.mark.parametrize("rows_per_block", [None, 5])
def test_curve_law_bootstrap_refits_batched_equal_each_resamples_own_refit(rows_per_block, monkeypatch):
    problem = CurveProblem(load_runs(synthetic_sweep(noise=0.01, seed=3)))
    if rows_per_block:  # a sweep with more points refits its resamples in blocks
        monkeypatch.setattr(curve_law, "BATCH_CELLS", rows_per_block * problem.y.size * 9)
    solution = fit_projection(FORM, problem.x, problem.y, problem.base)
    start, _ = problem.refit(np.ones(problem.counts.size), np.r_[solution.theta, solution.coef])
    draws = resample_weights(problem.counts.size, 24, seed=0)
    batched, ok = problem.refit_many(draws, start)
    for i, weights in enumerate(draws):
        alone, alone_ok = problem.refit(weights, start)
        np.testing.assert_allclose(batched[i], alone, rtol=1e-7, atol=1e-10)
        assert ok[i] == alone_ok


def test_annealed_areas_of_a_wsd_schedule_equal_the_step_by_step_average():
    """S2 filtered from the first drop in the rate (the stable phase left at exactly 0) is the
    exponential average of the cut in the rate over every step, computed here one step at a time."""
    from flops_fit.fitting.laws.curve_areas import _anneal, factors

    g = factors({"schedule": "wsd", "steps": 300, "warmup_steps": 10, "cooldown_start": 200,
                 "cooldown_shape": "1-sqrt"})
    taus = np.array([1.5, 20.0, 400.0])
    table = _anneal(g, taus)
    for row, tau in zip(table, taus, strict=True):
        lam, ema, expected = np.exp(-1.0 / tau), 0.0, [0.0]
        for t, factor in enumerate(g):
            ema = lam * ema + (1 - lam) * (1.0 - (factor if t >= 10 else 1.0))  # the warmup counts at the peak
            expected.append(ema)
        np.testing.assert_allclose(row, expected, rtol=1e-12, atol=1e-15)
    assert np.all(table[:, :201] == 0) and np.all(table[:, -1] > 0)


def test_curve_form_designs_every_row_at_once_as_one_at_a_time():
    import itertools

    from flops_fit.fitting.laws.forms import LawForm

    x = CurveProblem(load_runs(synthetic_sweep(noise=0.01, seed=3))).x
    grid = np.array(list(itertools.product(FORM.grid, repeat=3)))  # the variable projection's starts
    steps = np.random.default_rng(1).uniform(*FORM.bounds, (50, 3))
    for theta in (grid, steps, np.array([[1.0, 0.5, 2.0]])):  # exponents numpy powers take a shortcut for
        assert np.array_equal(FORM.design_rows(theta, x), LawForm.design_rows(FORM, theta, x))
