"""The learning-rate law's forms (tuning.forms): each recovers a known law from synthetic cells
on a grid whose budgets span 8x, a grid whose budgets are 2x apart leaves the tokens' exponent
NOT identified and says so, and the held-out score picks the form that generated the data."""

import math

import numpy as np
import pytest

from flops_fit.tuning.forms import FORMS, Point, choose, fit_form, fit_forms, form_rows, score
from flops_fit.tuning.law import fit_law

WIDTHS = (8, 16, 32, 64)


def cells(budget_factors, law, noise=0.0, seed=0):
    """Synthetic cells: N = 12 width^2, D = C / 6N, lr* = law(N, D, C) times log-normal noise; each
    cell's bootstrap draws of log(lr*) have that noise's spread, its loss a parabola in log rate."""
    rng = np.random.default_rng(seed)
    out = []
    for f in budget_factors:
        budget = 1e12 * f
        for w in WIDTHS:
            n = 12.0 * w * w
            d = budget / (6 * n)
            truth = law(n, d, budget)
            lr = truth * math.exp(rng.normal(0, noise)) if noise else truth
            samples = math.log(lr) + rng.normal(0, noise, 100) if noise else np.empty(0)
            values = {"params": n, "nonembedding": n * 0.8, "tokens": d, "flops": budget, "width": float(w),
                      "batch": 32.0}
            out.append(Point(values, lr, samples, budget, lambda r, t=truth: 2.0 + 0.05 * math.log(r / t) ** 2, 2.0))
    return out


def bjorck(n, d, c):
    return 3.0 * n ** -0.7 * d ** -0.4


def deepseek(n, d, c):
    return 50.0 * c ** -0.25


def test_bjorck_and_deepseek_recover_their_exponents_exactly():
    fit = fit_form(FORMS["bjorck"], cells((1, 2.83, 8), bjorck), bootstrap=0)
    assert fit.m.value == pytest.approx(3.0, rel=1e-9)
    assert (fit.exponents["params"].value, fit.exponents["tokens"].value) == pytest.approx((-0.7, -0.4), abs=1e-9)
    assert fit.rate({"params": 1e4, "tokens": 1e7}) == pytest.approx(bjorck(1e4, 1e7, 0), rel=1e-9)
    fit = fit_form(FORMS["deepseek"], cells((1, 2.83, 8), deepseek), bootstrap=0)
    assert fit.exponents["flops"].value == pytest.approx(-0.25, abs=1e-9) and fit.m.value == pytest.approx(50, rel=1e-9)


def test_a_grid_spanning_8x_identifies_both_exponents_under_noise():
    fit = fit_form(FORMS["bjorck"], cells((1, 2.83, 8), bjorck, noise=0.3, seed=1), bootstrap=400, seed=2)
    for var, truth in (("params", -0.7), ("tokens", -0.4)):
        c = fit.exponents[var]
        assert c.lo < truth < c.hi, (var, c)
    assert fit.unidentified == []


def test_budgets_2x_apart_leave_the_tokens_exponent_not_identified_and_say_so():
    fit = fit_form(FORMS["bjorck"], cells((1, 2), bjorck, noise=0.3, seed=1), bootstrap=400, seed=2)
    c = fit.exponents["tokens"]
    assert c.lo <= 0 <= c.hi or c.hi - c.lo > 1.0  # the definition, checked on the numbers
    assert "tokens" in fit.unidentified
    rows = form_rows({"bjorck": fit})
    assert ["", "D", f"{c.value:.3g} [{c.lo:.3g}, {c.hi:.3g}]", "NOT identified", ""] in rows


def test_one_budget_cannot_fit_the_flops_law_and_says_why():
    fit = fit_form(FORMS["deepseek"], cells((1,), deepseek), bootstrap=0)
    assert fit.unidentified == ["flops"] and not fit.exponents["flops"].fitted
    assert "C barely varies" in fit.notes[0]


def test_one_size_cannot_fit_the_size_exponent_and_asks_for_more_sizes():
    """A tune of one size at three budgets left Bjorck's form unfitted "(tune at budgets further apart)": its budgets
    were 8x apart already; what N lacks is a second size."""
    points = [p for p in cells((1, 2.83, 8), bjorck) if p.values["width"] == 16]
    for form in ("bjorck", "size"):
        fit = fit_form(FORMS[form], points, bootstrap=0)
        assert not fit.exponents["params"].fitted
        assert fit.notes == ["not fitted: N barely varies across these cells (one size): tune more sizes"], fit.notes


def test_a_form_of_one_budget_says_why_it_has_no_held_out_score():
    """A tune at one budget printed "-" in every form's held-out column, with no reason: nothing is left to predict
    once its only budget is held out, and the column says so."""
    fit = fit_form(FORMS["size"], cells((1,), bjorck), bootstrap=0)
    fit.heldout = score(lambda rest: fit_form(FORMS["size"], rest, bootstrap=0), cells((1,), bjorck))
    assert fit.exponents["params"].fitted and fit.heldout is None
    assert form_rows({"size": fit})[0][-1] == "not scored: one budget (nothing left to predict)"


def test_the_held_out_score_predicts_the_largest_budget_and_prefers_the_true_form():
    points = cells((1, 2.83, 8), deepseek, noise=0.02, seed=3)
    held = score(lambda rest: fit_form(FORMS["deepseek"], rest, bootstrap=0), points)
    assert held["budget"] == 8e12 and held["cells"] == 4 and held["fitted_on"] == 8
    assert held["rms_log"] < 0.1 and 0 <= held["excess"] < 1e-3

    def marin(subset):
        return fit_law([p.values["width"] for p in subset], [p.values["tokens"] for p in subset],
                       [32] * len(subset), [p.lr_opt for p in subset], [p.samples for p in subset],
                       scale="width", bootstrap=200)[0]

    forms = fit_forms(points, marin(points), marin, batch_swept=False, bootstrap=200)
    assert set(forms) == {"marin", "bjorck", "deepseek", "steplaw", "size"}
    name, why = choose(forms)
    assert name == "deepseek" and "lowest held-out excess" in why
    assert forms["deepseek"].heldout["excess"] == min(f.heldout["excess"] for f in forms.values())


def test_with_nothing_identified_marin_is_kept_and_the_reason_given():
    points = cells((1, 2), lambda n, d, c: 0.01, noise=0.3, seed=1)  # no variable moves the rate

    def marin(subset):
        return fit_law([p.values["width"] for p in subset], [p.values["tokens"] for p in subset],
                       [32] * len(subset), [p.lr_opt for p in subset], [p.samples for p in subset],
                       scale="width", bootstrap=200)[0]

    forms = fit_forms(points, marin(points), marin, batch_swept=False, bootstrap=200)
    assert all(f.unidentified for f in forms.values())
    name, why = choose(forms)
    assert name == "marin" and "no form has all its exponents identified" in why


def size_only(n, d, c):
    return 0.5 * n ** -0.5


def test_when_the_tokens_do_not_move_the_rate_the_size_alone_is_chosen():
    """Cells whose best rate follows the size alone, with noise: every form with a tokens (or
    FLOPs) exponent leaves it NOT identified, the size form identifies its one exponent and is
    chosen, so nothing unidentified is carried past the grid."""
    points = cells((1, 2.83, 8), size_only, noise=0.15, seed=4)

    def marin(subset):
        return fit_law([p.values["width"] for p in subset], [p.values["tokens"] for p in subset],
                       [32] * len(subset), [p.lr_opt for p in subset], [p.samples for p in subset],
                       scale="width", bootstrap=200)[0]

    forms = fit_forms(points, marin(points), marin, batch_swept=False, bootstrap=400, seed=5)
    size = forms["size"]
    assert size.unidentified == [] and size.exponents["params"].lo < -0.5 < size.exponents["params"].hi
    for name, variable in (("marin", "tokens"), ("bjorck", "tokens"), ("steplaw", "tokens"), ("deepseek", "flops")):
        assert variable in forms[name].unidentified, name
    name, why = choose(forms)
    assert name == "size" and "every exponent identified" in why


def test_a_form_that_cannot_be_fitted_without_the_largest_budget_gets_no_held_out_score():
    """Two budgets, one cell with an optimum at the smaller: without the largest budget every
    form is left one cell, too few to fit it. Its "prediction" would be that one cell's rate
    whatever the form; that is no score of the form, so none is given and none chooses the law."""
    points = cells((1, 8), size_only, noise=0.05, seed=2)
    points = [p for p in points if p.budget > 1e12] + [next(p for p in points if p.budget == 1e12)]

    def marin(subset):
        return fit_law([p.values["width"] for p in subset], [p.values["tokens"] for p in subset],
                       [32] * len(subset), [p.lr_opt for p in subset], [p.samples for p in subset],
                       scale="width", bootstrap=200)[0]

    forms = fit_forms(points, marin(points), marin, batch_swept=False, bootstrap=200)
    for f in forms.values():
        assert "excess" not in f.heldout and f.heldout["fitted_on"] == 1, f.name
    assert forms["size"].heldout["error"] == "once the largest budget is held out, 1 cell for 2 coefficients"
    scores = {row[0]: row[4] for row in form_rows(forms) if row[0]}
    assert scores["size"] == "not scored: once the largest budget is held out, 1 cell for 2 coefficients"
    assert scores["marin"] == "not scored: the law needs at least 2 cells with an interior optimum, got 1"
    name, why = choose(forms)
    assert name == "marin" and "no form could be scored on a held-out budget" in why
