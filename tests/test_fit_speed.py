"""The fast fitting paths give the reference procedures' answers.

Batched Nelder-Mead follows scipy's own path row by row; variable projection batched over
resamples equals the one-at-a-time procedure (scipy's Nelder-Mead on the scalar profile); the
pruned Approach-3 grid reaches the full 4500-start grid's optimum. No timings here: the speed
is measured in benchmarks/bench_fit_speed.py.
"""

import itertools
import warnings

import numpy as np
import pytest
from scipy.optimize import minimize

from flops_fit.errors import FitInputError
from flops_fit.fitting import load_runs
from flops_fit.fitting.approaches.parametric import (
    INIT_GRID,
    Problem,
    grid_search,
    huber_fit,
    huber_fits,
    law_columns,
    objective,
    pruned_grids,
)
from flops_fit.fitting.laws._huber_rows import HuberRows
from flops_fit.fitting.laws._simplex import initial_simplex, minimize_simplex
from flops_fit.fitting.laws.estimators import (
    NM_MAXITER,
    constrained_lstsq,
    constrained_lstsq_rows,
    fit_projection,
    fit_projection_rows,
    floor_solve,
)
from flops_fit.fitting.laws.focus import FLOOR
from flops_fit.fitting.laws.forms import Chinchilla, InteractionForm
from flops_fit.fitting.synthetic import synthetic_runs


def _bowls(rows):
    rng = np.random.default_rng(0)
    centre, scale = rng.normal(1.0, 0.5, (rows, 2)), 1 + rng.uniform(0, 4, (rows, 2))

    def batch(x, which):
        return ((x - centre[which]) ** 2 * scale[which]).sum(1) + 0.3 * np.sin(3 * x[:, 0])

    return batch, lambda x, i: float(batch(np.atleast_2d(x), np.array([i]))[0])


@pytest.mark.parametrize("bounds, maxiter", [((0.01, 2.5), 1000), (None, 1000), ((0.01, 2.5), 7)])
def test_batched_nelder_mead_takes_scipys_path(bounds, maxiter):
    batch, one = _bowls(30)
    x0 = np.random.default_rng(1).uniform(0.05, 2.4, (30, 2))
    out = minimize_simplex(batch, initial_simplex(x0, bounds), xatol=1e-6, fatol=1e-12, maxiter=maxiter,
                           bounds=bounds)
    for i in range(30):
        ref = minimize(lambda t, i=i: one(t, i), x0[i], method="Nelder-Mead",
                       bounds=None if bounds is None else [bounds] * 2,
                       options={"xatol": 1e-6, "fatol": 1e-12, "maxiter": maxiter})
        assert np.array_equal(out.x[i], ref.x) and out.f[i] == ref.fun and out.iterations[i] == ref.nit
        assert (out.status[i] == 0) == ref.success


def test_a_row_whose_objective_is_infinite_stops_quietly_beside_the_others():
    # A hopeless start (inf at every vertex: a law that overflows) must not warn nor disturb its neighbours.
    batch, one = _bowls(2)

    def with_inf(x, which):
        return np.where(which == 1, np.inf, batch(x, which))

    x0 = np.array([[0.5, 0.5], [0.5, 0.5]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = minimize_simplex(with_inf, initial_simplex(x0), xatol=1e-6, fatol=1e-12, maxiter=200)
    ref = minimize(lambda t: one(t, 0), x0[0], method="Nelder-Mead", options={"xatol": 1e-6, "fatol": 1e-12, "maxiter": 200})
    assert np.array_equal(out.x[0], ref.x) and out.f[0] == ref.fun
    assert out.f[1] == np.inf and out.status[1] != 0


def test_batched_constrained_least_squares_equals_one_at_a_time():
    rng = np.random.default_rng(2)
    n, m = 12, 40
    X = np.abs(rng.normal(size=(m, n, 4))) + 0.1
    y = rng.normal(1.0, 1.0, n)  # many rows need a reduced support to keep the signs
    w = rng.uniform(0.2, 2.0, (m, n))
    signs = (True, True, True, False)
    coef, ssr = constrained_lstsq_rows(X, y, w, signs)
    reduced = 0
    for i in range(m):
        c, s = constrained_lstsq(X[i], y, w[i], signs)
        np.testing.assert_allclose(coef[i], c, rtol=1e-9, atol=1e-12)
        assert ssr[i] == pytest.approx(s, rel=1e-9, abs=1e-12)
        reduced += bool(np.any(c == 0))
    assert reduced > 0  # the support search was exercised


def _reference_projection(form, x, loss, weights, start, floor):
    """The procedure one resample at a time: scipy's Nelder-Mead on the scalar profile."""
    signs = tuple(name in form.nonnegative for name in form.linear)

    def profile(theta):
        return floor_solve(lambda X, y, w: constrained_lstsq(X, y, w, signs), form.design(theta, x), loss,
                           weights, floor)

    if start is None:
        grid = itertools.product(form.grid, repeat=len(form.nonlinear))
        start = min((profile(np.array(t))[1], t) for t in grid)[1]
    res = minimize(lambda t: profile(t)[1], np.asarray(start, float), method="Nelder-Mead",
                   bounds=[form.bounds] * len(form.nonlinear),
                   options={"xatol": 1e-6, "fatol": form.fatol, "maxiter": NM_MAXITER})
    return res.x, profile(res.x)


@pytest.mark.parametrize("form", [Chinchilla(), InteractionForm()], ids=lambda f: f.name)
@pytest.mark.parametrize("floor", [1.0, FLOOR])
def test_variable_projection_batched_over_resamples_equals_the_reference(form, floor):
    runs = load_runs(synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, span=0.6, noise=0.01,
                                    curve_points=2, seed=3))
    log_n, log_d, loss, _ = law_columns(runs)
    x = {"n": np.exp(log_n - log_n.mean()), "d": np.exp(log_d - log_d.mean())}
    est = fit_projection(form, x, loss, np.ones(loss.size), floor=floor)
    theta, (coef, ssr) = _reference_projection(form, x, loss, np.ones(loss.size), None, floor)
    np.testing.assert_allclose(est.theta, theta, rtol=0, atol=1e-5)  # within a few of xatol = 1e-6
    assert est.ssr == pytest.approx(ssr, rel=1e-8)
    draws = np.random.default_rng(4).multinomial(loss.size, np.full(loss.size, 1 / loss.size), size=12).astype(float)
    solved = fit_projection_rows(form, x, loss, draws, est.theta, floor)
    for w, s in zip(draws, solved, strict=True):
        theta, (coef, ssr) = _reference_projection(form, x, loss, w, est.theta, floor)
        np.testing.assert_allclose(s.theta, theta, rtol=0, atol=1e-5)
        assert s.ssr == pytest.approx(ssr, rel=1e-7, abs=1e-14)


def test_pruned_grid_keeps_the_lowest_starts_and_reaches_the_full_grids_optimum():
    runs = load_runs(synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=4, span=0.6, noise=0.01,
                                    curve_points=2, seed=5))
    log_n, log_d, loss, _ = law_columns(runs)

    def fun(t):
        return objective(t, log_n, log_d, np.log(loss), np.ones(loss.size))

    problem = Problem(log_n, log_d, np.log(loss), np.ones(loss.size))
    starts = pruned_grids([problem], 128)[0]
    values, _ = fun(INIT_GRID)
    assert len(starts) == 128 and fun(starts)[0].max() <= np.sort(values)[127]
    _, pruned, _ = grid_search(problem, 3)
    _, full, _ = grid_search(problem, 3, starts=INIT_GRID)
    assert np.nanmin(pruned) <= np.nanmin(full) * (1 + 1e-9)


def _problems(rng, count):
    """Approach-3 problems of different sizes, floors and deltas (runs from synthetic sweeps)."""
    out = []
    for i in range(count):
        runs = load_runs(synthetic_runs(budgets=(1e17, 1e18, 1e19)[: 2 + i % 2], sizes_per_budget=4 + i, span=0.6,
                                        noise=0.01, curve_points=2, seed=20 + i))
        log_n, log_d, loss, _ = law_columns(runs)
        out.append(Problem(log_n, log_d, np.log(loss), rng.uniform(0.5, 2.0, loss.size), (1e-3, 1e-2)[i % 2],
                           (1.0, FLOOR)[i // 2 % 2]))
    return out


def test_rows_of_many_problems_are_evaluated_as_each_alone_to_the_bit():
    rng = np.random.default_rng(11)
    problems = _problems(rng, 4)
    counts = [3, 70, 1100, 130]  # one problem's rows past a block (BLOCK) and past huber_objective's chunks
    weights = [rng.multinomial(p.log_n.size, np.full(p.log_n.size, 1 / p.log_n.size), size=c) * p.weights
               for p, c in zip(problems, counts, strict=True)]
    rows = HuberRows([(p.log_n, p.log_d, p.log_l, p.delta, p.floor) for p in problems], weights)
    theta = INIT_GRID[rng.integers(0, len(INIT_GRID), sum(counts))] * rng.uniform(0.5, 1.5, (sum(counts), 5))
    owner = np.repeat(np.arange(4), counts)
    for asked in (np.arange(sum(counts)), np.sort(rng.choice(sum(counts), 600, replace=False))):
        values, grads = rows(theta[asked], asked)
        for i, p in enumerate(problems):
            mine = owner[asked] == i
            local = asked[mine] - sum(counts[:i])
            ref_values, ref_grads = objective(theta[asked][mine], p.log_n, p.log_d, p.log_l, weights[i][local],
                                              p.delta, p.floor)
            assert np.array_equal(values[mine], ref_values) and np.array_equal(grads[mine], ref_grads)


def test_bootstraps_of_many_problems_fitted_together_equal_each_alone():
    rng = np.random.default_rng(12)
    problems = _problems(rng, 3)
    weights = [rng.multinomial(p.log_n.size, np.full(p.log_n.size, 1 / p.log_n.size), size=15) * p.weights
               for p in problems]
    starts = [grid_search(p, 3)[0] for p in problems]
    together = huber_fits(problems, weights, starts)
    for p, w, s, fitted in zip(problems, weights, starts, together, strict=True):
        alone = huber_fit(p.log_n, p.log_d, p.log_l, w, s, p.delta, floor=p.floor)
        for a, b in zip(alone, fitted, strict=True):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("r_star", [None, 4.0])
def test_the_data_limited_design_of_many_exponents_is_each_rows_own_to_the_bit(r_star):
    # Every row has its own R*, so its own data column: batched, element for element as one row alone.
    from flops_fit.fitting.approaches.data_limit import DataLimitedForm

    rng = np.random.default_rng(5)
    x = {"n": rng.uniform(0.1, 10.0, 30), "d": rng.uniform(0.05, 20.0, 30), "u": np.full(30, 1.3)}
    form = DataLimitedForm(r_star)
    theta = np.vstack([list(itertools.product(form.grid, repeat=len(form.nonlinear))),
                       rng.uniform(*form.bounds, (300, len(form.nonlinear)))])
    assert np.array_equal(form.design_rows(theta, x), np.stack([form.design(t, x) for t in theta]))


def test_slice_fits_of_many_draws_equal_one_at_a_time():
    from flops_fit.fitting.laws.bootstrap import resample_weights
    from flops_fit.fitting.laws.profiles import budget_groups, slice_minima, slice_minima_many

    runs = load_runs(synthetic_runs(budgets=(1e17, 1e18, 1e19, 1e20), sizes_per_budget=6, span=0.6, noise=0.01,
                                    curve_points=2, seed=6))
    budgets, _ = budget_groups(runs)
    log_n, loss = np.log(runs.frame["params"].to_numpy(float)), runs.frame["loss"].to_numpy(float)
    masks = [budgets == c for c in np.unique(budgets)]
    _, start = slice_minima([(log_n[m], loss[m], np.ones(m.sum())) for m in masks])
    draws = [[(log_n[m], loss[m], w[m]) for m in masks]
             for w in resample_weights(len(loss), 30, 0, groups=budgets)]
    many = slice_minima_many(draws, start)
    for groups, (minima, exponents) in zip(draws, many, strict=True):
        ref_minima, ref_exponents = slice_minima(groups, start)
        assert (exponents is None) == (ref_exponents is None)
        if exponents is not None:
            np.testing.assert_allclose(exponents, ref_exponents, rtol=1e-9)
        for (x, y, why), (rx, ry, rwhy) in zip(minima, ref_minima, strict=True):
            assert why == rwhy
            np.testing.assert_allclose([x, y], [rx, ry], rtol=1e-9)
    assert len(many) == 30


def _forward_sweep(seed=7):
    return load_runs(synthetic_runs(budgets=(1e17, 1e18, 1e19, 1e20, 1e21), sizes_per_budget=5, span=0.6,
                                    noise=0.01, curve_points=2, seed=seed))


def test_approach_3_fitted_together_equals_one_at_a_time():
    from flops_fit.fitting.approaches.parametric import Parametric
    from flops_fit.fitting.laws.profiles import budget_groups

    runs = _forward_sweep()
    budgets, _ = budget_groups(runs)
    subsets = [runs.subset(budgets <= c) for c in np.unique(budgets)[1:]]
    ends = (subsets[0], subsets[-1])  # the smallest and the largest split: problems of two sizes at once
    jobs = [(Parametric(bootstrap=boot, focus=focus), r) for r in ends for focus in ("all", "frontier")
            for boot in (0, 12) if not (boot and focus == "frontier")]
    jobs.append((Parametric(bootstrap=0), runs.subset(budgets <= np.unique(budgets)[0])))  # too few runs
    together = Parametric.fit_together(jobs)
    assert isinstance(together[-1], FitInputError)
    for (approach, r), result in zip(jobs[:-1], together[:-1], strict=True):
        alone = approach.fit(r)  # every start is a row of its own: the same path, the same answer
        assert result.params == alone.params
        assert result.details["objective"] == alone.details["objective"]
        assert result.samples.equals(alone.samples) and len(result.samples) == approach.bootstrap


def test_chaining_reuses_the_held_out_refits_with_the_same_answers():
    from flops_fit.fitting import APPROACHES
    from flops_fit.fitting.validation.chaining import forward_chain, point
    from flops_fit.fitting.validation.holdout import holdout_checks, shared_refits

    runs = _forward_sweep()
    names = ("isoflop", "parametric", "vpnls")
    approaches = [APPROACHES[m].configured(bootstrap=20, seed=0, level=0.95, curve="slice", focus="all",
                                           unique_tokens=None) for m in names]
    options = [point(a) for a in approaches]
    fresh, _ = forward_chain(options, runs, ["params"], curve="slice")
    with shared_refits() as shared:
        checks = holdout_checks(approaches, runs, "forward", curve="slice", bootstrap=20, seed=0, level=0.95)
        made = len(shared.tables)
        reused, _ = forward_chain(options, runs, ["params"], curve="slice")
    assert shared.hits == made == sum(len({tuple(c.fitted_budgets) for c in checks[m]}) for m in names)
    assert [r.to_dict() for r in reused] == [r.to_dict() for r in fresh]
    assert any(np.isfinite(c.loss_interval[0]) for c in checks["parametric"])  # the checks kept their intervals


def test_line_fit_by_normal_equations_equals_polyfit():
    from flops_fit.fitting.laws.laws import fit_power

    rng = np.random.default_rng(8)
    for _ in range(200):
        n = int(rng.integers(2, 30))
        x, w = rng.normal(40, 3, n), (rng.uniform(0.1, 2, n) if rng.random() < 0.5 else None)
        y = 0.5 * x + rng.normal(0, 0.3, n)
        ref = np.polyfit(x, y, 1, w=None if w is None else np.sqrt(w))
        np.testing.assert_allclose(fit_power(x, y, w), ref, rtol=1e-8)
    assert np.isnan(fit_power(np.ones(4), np.arange(4.0))).all()  # one budget: no line


def test_annealing_areas_are_kept_per_schedule_and_handed_out_as_copies():
    from flops_fit.fitting.laws.curve_areas import TAU_GRID, _anneal, annealed

    g = np.r_[np.linspace(0.1, 1, 10), np.ones(30), np.linspace(1, 0, 20)]
    first = annealed(g, TAU_GRID)
    np.testing.assert_array_equal(first, _anneal(g, TAU_GRID))
    first[:] = 0.0  # a caller writing into its table changes no one else's
    np.testing.assert_array_equal(annealed(g.copy(), TAU_GRID), _anneal(g, TAU_GRID))
