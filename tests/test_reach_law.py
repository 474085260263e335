"""The reach law that sizes the forecast's loss interval and bounds N_opt's: fitted, scaled by a sweep's own
chaining, shipped."""

import numpy as np
import pytest

from flops_fit.errors import FitInputError
from flops_fit.fitting.validation.chaining import Record
from flops_fit.fitting.validation.forecast import CAPPED_RULE, answer_chaining, decide
from flops_fit.fitting.validation.prior import shipped, shipped_laws
from flops_fit.fitting.validation.reach_law import (
    ANSWERS,
    CAPPED,
    Outcome,
    ReachLaw,
    cap_level,
    fit_reach_law,
    fit_spread,
)

FLOOR, SLOPE = 0.01, 0.02


def draws(rng, n, sweep, scale=1.0):
    ratios = np.exp(rng.uniform(0.1, 4.0, n))
    sigma = np.sqrt(FLOOR ** 2 + (SLOPE * np.log(ratios)) ** 2)
    return [Outcome(sweep, float(r), float(e)) for r, e in zip(ratios, rng.normal(0, scale * sigma), strict=True)]


def test_spread_recovers_the_floor_and_the_slope():
    rng = np.random.default_rng(0)
    outcomes = draws(rng, 4000, "a")
    floor, slope = fit_spread(np.array([o.error for o in outcomes]), np.array([o.ratio for o in outcomes]))
    assert floor == pytest.approx(FLOOR, rel=0.1) and slope == pytest.approx(SLOPE, rel=0.1)


def test_the_interval_covers_new_outcomes_of_the_same_law_at_its_level():
    rng = np.random.default_rng(1)
    law = fit_reach_law(draws(rng, 600, "a") + draws(rng, 600, "b"))
    assert law.sweeps == ("a", "b") and law.multiplier(0.95) == pytest.approx(1.96, rel=0.1)
    fresh = draws(rng, 3000, "c")
    inside = [abs(o.error) <= law.half_width(o.ratio, 0.95)[0] for o in fresh]
    assert 0.93 <= np.mean(inside) <= 0.97
    assert law.half_width(100.0, 0.95)[0] > law.half_width(2.0, 0.95)[0]  # grows with the reach


def test_a_law_needs_two_sweeps_and_a_level_inside_0_1():
    with pytest.raises(FitInputError, match="2 or more sweeps"):
        fit_reach_law(draws(np.random.default_rng(2), 50, "only"))
    law = ReachLaw(floor=FLOOR, slope=SLOPE, scores=(1.0, 2.0))
    with pytest.raises(FitInputError, match="between 0 and 1"):
        law.multiplier(1.0)


def test_the_sweeps_own_chaining_scales_the_law_when_it_has_a_weight():
    law = ReachLaw(floor=FLOOR, slope=SLOPE, scores=(1.0,), own_weight=1.0)
    sigma = float(law.sigma(2.0))
    noisy = [(float(k), 2.0, s * 3 * sigma) for k in range(1, 9) for s in (1, -1)]  # 8 splits erring 3 sigma
    quiet = [(float(k), 2.0, s * sigma / 3) for k in range(1, 9) for s in (1, -1)]
    wide, splits = law.own_factor(noisy)
    narrow, _ = law.own_factor(quiet)
    assert splits == 8 and 2.0 < wide < 3.0 and 1 / 3 < narrow < 0.6
    assert law.own_factor([(1.0, 1.1, 10.0)]) == (1.0, 0)  # below MIN_RATIO: not evidence
    alone = ReachLaw(floor=FLOOR, slope=SLOPE, scores=(1.0,), own_weight=None)
    assert alone.own_factor(noisy) == (1.0, 8)


def test_no_interval_is_wider_than_the_largest_error_the_law_was_fitted_on():
    rng = np.random.default_rng(3)
    outcomes = draws(rng, 300, "a") + draws(rng, 300, "b")
    law = ReachLaw.from_dict(fit_reach_law(outcomes, own_weight=0.1).to_dict())  # as shipped and read back
    assert law.largest == max(abs(o.error) for o in outcomes)
    wild = [(float(k), 2.0, s * 40 * float(law.sigma(2.0))) for k in (1, 2) for s in (1, -1)]  # 2 splits at 40 sigma
    half, factor, _ = law.half_width(10.0, 0.95, wild)
    assert factor > 30 and half == law.largest
    assert law.half_width(10.0, 0.95)[0] < law.largest  # the law alone stays below it
    assert ReachLaw(floor=FLOOR, slope=SLOPE, scores=(1.0,), own_weight=0.1).half_width(10.0, 0.95, wild)[0] > 1.0


def test_a_sweep_whose_own_chaining_erred_wildly_gets_the_bounded_loss_interval_and_is_told():
    key = ("envelope", "params", None)
    rs = records(key, lambda i, j: 0.3 * (-1) ** j, lambda i, j: 0.05, splits=3)  # 30% errors inside the sweep
    f = decide(rs, {key: (2.0, 1e8, 1e10)}, 1e21, 10.0, priors=shipped())
    loss, law = f.answers["loss"], shipped_laws()["loss"]
    assert loss.interval["capped"] and loss.interval["own_factor"] > 10
    assert np.log(loss.hi / loss.value) == pytest.approx(law.largest)
    assert np.log(loss.value / loss.lo) == pytest.approx(law.largest)
    _, lo, hi, _ = loss.band(np.array([10.0, law.reach]))  # the drawn band is bounded the same way
    assert hi == pytest.approx(np.expm1(law.largest)) and lo == pytest.approx(np.expm1(-law.largest))
    assert f"at most +-{100 * np.expm1(law.largest):.1f}% (the largest error of a public sweep's answer" in \
        f.summary()


def records(key, loss_error, n_error, splits=5):
    method, scale, focus = key
    out = []
    for i in range(splits):
        upto = 1e18 * 2 ** i
        for j in range(i + 1, splits + 1):
            out.append(Record(method=method, scale=scale, focus=focus, fitted_upto=upto, budget=1e18 * 2 ** j,
                              ratio=2.0 ** (j - i), loss_error=loss_error(i, j), n_opt_error=n_error(i, j)))
    return out


def test_the_forecast_sizes_the_loss_interval_by_the_law_and_bounds_n_opts_error_model_by_it():
    a, b = ("envelope", "params", None), ("isoflop", "params", None)
    rs = records(a, lambda i, j: 0.01 * (-1) ** j, lambda i, j: 0.05) + \
        records(b, lambda i, j: -0.01 * (-1) ** j, lambda i, j: -0.05)
    predictions = {a: (2.0, 1e8, 1e10), b: (2.1, 1.1e8, 1e10)}
    f = decide(rs, predictions, 1e21, 10.0, priors=shipped())
    loss, n_opt = f.answers["loss"], f.answers["n_opt"]
    assert "loss" in ANSWERS and loss.interval["rule"] == "reach law" and n_opt.interval["rule"] == CAPPED_RULE
    assert loss.lo < loss.value < loss.hi and np.isfinite([loss.lo, loss.hi]).all()
    law = shipped_laws()["loss"]
    half, factor, splits = law.half_width(10.0, 0.95, answer_chaining(rs, loss.members, "loss_error"))
    assert np.log(loss.hi / loss.value) == pytest.approx(half) and loss.interval["own_factor"] == factor
    old = decide(rs, predictions, 1e21, 10.0, priors=shipped(), laws={}).answers["loss"]
    assert old.interval["rule"] == "error model" and old.value == loss.value and (old.lo, old.hi) != (loss.lo, loss.hi)
    assert f.to_dict()["answers"]["loss"]["interval"]["rule"] == "reach law"
    _, lo, hi, rule = loss.band(np.array([10.0]))  # what the report draws is the stated interval
    assert rule == "reach law" and lo[0] == pytest.approx(loss.lo / loss.value - 1)
    assert hi[0] == pytest.approx(loss.hi / loss.value - 1)
    assert n_opt.band(np.array([10.0]))[3] == CAPPED_RULE
    assert decide(rs, predictions, 1e21, 10.0, priors=shipped(), laws={}).answers["n_opt"].band(
        np.array([10.0]))[3] == "scatter + drift's sd"


def _n_opt_half_widths(answer):
    return np.log(answer.value / answer.lo), np.log(answer.hi / answer.value)


def test_n_opts_interval_is_its_error_model_within_the_laws_bounds():
    """N_opt's interval: the candidates' error model, at least the law's at no reach (the answers' own
    noise, which an error per unit of ln r misses near r = 1) and at most the law's at the reach (a
    drift from a few splits, grown far beyond the public answers' errors), read at cap_level."""
    assert CAPPED == ("n_opt",) and cap_level(0.95) == pytest.approx(0.99)
    law = shipped_laws()["n_opt"]
    a = ("envelope", "params", None)
    drifting = records(a, lambda i, j: 0.01, lambda i, j: 0.3 * (j - i) * (-1) ** i)  # scatter grows with reach
    far = decide(drifting, {a: (2.0, 1e8, 1e10)}, 1e23, 1000.0, priors=shipped()).answers["n_opt"]
    wide = decide(drifting, {a: (2.0, 1e8, 1e10)}, 1e23, 1000.0, priors=shipped(), laws={}).answers["n_opt"]
    least, most = law.bounds(1000.0, 0.95)
    assert max(_n_opt_half_widths(wide)) > most  # the error model alone, far beyond the law
    assert _n_opt_half_widths(far) == pytest.approx((most, most)) and far.interval["capped"]
    assert far.value == wide.value and "the upper bound applies" in f"{far}" + decide(
        drifting, {a: (2.0, 1e8, 1e10)}, 1e23, 1000.0, priors=shipped()).summary()
    exact = records(a, lambda i, j: 0.01, lambda i, j: 0.001)  # a sweep whose own chaining is nearly exact
    near = decide(exact, {a: (2.0, 1e8, 1e10)}, 1.2e19, 1.2, priors=shipped()).answers["n_opt"]
    narrow = decide(exact, {a: (2.0, 1e8, 1e10)}, 1.2e19, 1.2, priors=shipped(), laws={}).answers["n_opt"]
    assert max(_n_opt_half_widths(narrow)) < least  # the error model alone: narrower than any sweep's noise
    assert _n_opt_half_widths(near) == pytest.approx((least, least)) and not near.interval["capped"]
    mild = records(a, lambda i, j: 0.01, lambda i, j: 0.05 * (j - i) * (-1) ** i)
    middle = decide(mild, {a: (2.0, 1e8, 1e10)}, 8e18, 8.0, priors=shipped()).answers["n_opt"]
    plain = decide(mild, {a: (2.0, 1e8, 1e10)}, 8e18, 8.0, priors=shipped(), laws={}).answers["n_opt"]
    assert least < min(_n_opt_half_widths(plain)) and max(_n_opt_half_widths(plain)) < law.bounds(8.0, 0.95)[1]
    assert middle.lo == pytest.approx(plain.lo) and middle.hi == pytest.approx(plain.hi)  # between: the model's


def test_a_level_the_laws_scores_cannot_state_falls_back_to_the_error_model():
    a = ("envelope", "params", None)
    rs = records(a, lambda i, j: 0.01 * (-1) ** j, lambda i, j: 0.05)
    law = shipped_laws()["loss"]
    assert law.states(0.95) and not law.states(1 - 0.5 / len(law.scores))
    f = decide(rs, {a: (2.0, 1e8, 1e10)}, 1e21, 10.0, priors=shipped(), level=0.999)
    assert f.answers["loss"].interval["rule"] == "error model" and "too few" in f.answers["loss"].interval["note"]
    assert f.loss[1] < f.loss[0] < f.loss[2] and "too few" in f.summary()


def test_answer_chaining_combines_the_members_errors_by_their_weights():
    a, b = ("envelope", "params", None), ("isoflop", "params", None)
    rs = records(a, lambda i, j: 0.1, lambda i, j: 0.0, splits=2) + records(b, lambda i, j: -0.1, lambda i, j: 0.0,
                                                                            splits=2)
    members = [{"method": "envelope", "scale": "params", "focus": None, "weight": 0.75},
               {"method": "isoflop", "scale": "params", "focus": None, "weight": 0.25}]
    own = answer_chaining(rs, members, "loss_error")
    assert len(own) == 3 and all(e == pytest.approx(0.75 * np.log(1.1) + 0.25 * np.log(0.9)) for _, _, e in own)


def test_the_shipped_laws_say_what_fitted_them():
    laws = shipped_laws()
    assert set(laws) == {"loss", "n_opt"}
    for law in laws.values():
        assert law.floor > 0 and law.slope >= 0 and len(law.scores) >= 100 and len(law.sweeps) >= 2
        assert not any("demo" in s for s in law.sweeps)  # public sweeps only
    assert "reach_laws" in shipped()[1]


def test_a_law_fitted_with_the_members_spread_widens_where_they_disagree():
    # Outcomes whose error carries a known part s (the members' disagreement): the law fitted with it
    # recovers floor and slope and covers fresh outcomes at its level whatever their s; the law fitted
    # without it covers those with a large s far less.
    rng = np.random.default_rng(3)

    def spread_draws(n, sweep):
        ratios = np.exp(rng.uniform(0.1, 4.0, n))
        s = np.where(rng.uniform(size=n) < 0.2, 0.08, 0.002)
        sd = np.sqrt(FLOOR ** 2 + (SLOPE * np.log(ratios)) ** 2 + s ** 2)
        return [Outcome(sweep, float(r), float(e), (), float(k)) for r, e, k in
                zip(ratios, rng.normal(0, sd), s, strict=True)]

    with_spread = fit_reach_law(spread_draws(1500, "a") + spread_draws(1500, "b"), spread=True)
    without = fit_reach_law(spread_draws(1500, "a") + spread_draws(1500, "b"))
    assert with_spread.spread and not without.spread
    assert with_spread.floor == pytest.approx(FLOOR, rel=0.25) and with_spread.slope == pytest.approx(SLOPE, rel=0.15)
    fresh = [o for o in spread_draws(4000, "c") if o.spread > 0.01]
    covered = {name: np.mean([abs(o.error) <= law.half_width(o.ratio, 0.95, (), o.spread)[0] for o in fresh])
               for name, law in (("with", with_spread), ("without", without))}
    assert 0.92 <= covered["with"] <= 0.98 and covered["without"] < 0.85
    assert with_spread.half_width(10.0, 0.95, (), 0.05)[0] > with_spread.half_width(10.0, 0.95, (), 0.0)[0]
    assert without.half_width(10.0, 0.95, (), 0.05)[0] == without.half_width(10.0, 0.95, (), 0.0)[0]
    assert ReachLaw.from_dict(with_spread.to_dict()) == with_spread


def test_the_loss_interval_reads_the_members_spread_from_a_law_fitted_with_it():
    from flops_fit.fitting.validation.forecast import members_spread

    a, b = ("envelope", "params", None), ("isoflop", "params", None)
    rs = records(a, lambda i, j: 0.01 * (-1) ** j, lambda i, j: 0.05) + \
        records(b, lambda i, j: -0.01 * (-1) ** j, lambda i, j: -0.05)
    law = ReachLaw(floor=0.005, slope=0.005, scores=tuple(np.linspace(0.1, 2.5, 200)), spread=True, sweeps=("x", "y"))
    answers = {}
    for apart in (1.01, 1.5):  # the second candidate's loss 1% and 50% above the first's
        f = decide(rs, {a: (2.0, 1e8, 1e10), b: (2.0 * apart, 1.1e8, 1e10)}, 1e21, 10.0, priors=shipped(),
                   laws={"loss": law})
        answers[apart] = f.answers["loss"]
    near, far = answers[1.01], answers[1.5]
    assert far.interval["spread"] > 10 * near.interval["spread"] > 0
    weights = [m["weight"] for m in far.members]
    logs = np.log([2.0, 3.0])
    mean = np.dot(weights, logs) / sum(weights)
    assert far.interval["spread"] == pytest.approx(np.sqrt(np.dot(weights, (logs - mean) ** 2) / sum(weights)))
    assert np.log(far.hi / far.lo) > 5 * np.log(near.hi / near.lo)
    half = law.half_width(10.0, 0.95, answer_chaining(rs, far.members, "loss_error"), far.interval["spread"])[0]
    assert np.log(far.hi / far.value) == pytest.approx(half)
    _, lo, hi, _ = far.band(np.array([10.0]))  # the report's band is the stated interval
    assert hi[0] == pytest.approx(far.hi / far.value - 1) and lo[0] == pytest.approx(far.lo / far.value - 1)
    assert members_spread(far.members[:1], f.candidates, "loss") == 0.0


def test_beyond_the_reach_its_answers_measured_the_bound_grows_as_the_law_and_the_forecast_says_so():
    """The largest error bounds an interval only as far as public answers measured it (the shipped
    laws: 500x, Chinchilla's Figure 4 runs); beyond, it grows as sigma(r) does, and the forecast
    says its target lies beyond what was measured."""
    rng = np.random.default_rng(3)
    outcomes = draws(rng, 300, "a") + draws(rng, 300, "b")
    law = ReachLaw.from_dict(fit_reach_law(outcomes, own_weight=0.1).to_dict())
    assert law.reach == max(o.ratio for o in outcomes)
    assert law.cap(2.0) == law.cap(law.reach) == law.largest
    far = 1e6
    grown = np.sqrt(law.floor ** 2 + (law.slope * np.log(far)) ** 2) / \
        np.sqrt(law.floor ** 2 + (law.slope * np.log(law.reach)) ** 2)
    assert law.cap(far) == pytest.approx(law.largest * grown) and grown > 2

    shipped_law = shipped_laws()["loss"]
    assert shipped_law.reach == 500.0
    key = ("envelope", "params", None)
    rs = records(key, lambda i, j: 0.3 * (-1) ** j, lambda i, j: 0.05, splits=3)  # capped, as above
    near, beyond = (decide(rs, {key: (2.0, 1e8, 1e10)}, 1e20 * r, r, priors=shipped()) for r in (100.0, 1e4))
    assert np.log(near.answers["loss"].hi / near.answers["loss"].value) == pytest.approx(shipped_law.largest)
    assert np.log(beyond.answers["loss"].hi / beyond.answers["loss"].value) == pytest.approx(shipped_law.cap(1e4))
    assert shipped_law.cap(1e4) > 1.2 * shipped_law.largest
    assert near.beyond_measured() is None
    assert beyond.beyond_measured().startswith("the target lies beyond the reach public sweeps measured: it is 1e+04x "
                                               "the largest budget, and public sweeps measured the forecast's error up "
                                               "to 500x")
    assert "measured up to 500x, grown as sigma(r) beyond it" in beyond.summary()


def test_the_loss_lines_stated_multiplier_factor_and_sigma_give_its_interval():
    """The summary's loss line names k, the own factor f and sigma: k f sigma is the interval's log
    half-width (it read "+-k sigma(r), sigma = ... (x f ...)", and k sigma was not the interval)."""
    import re

    a, b = ("envelope", "params", None), ("isoflop", "params", None)
    rs = records(a, lambda i, j: 0.002 * (-1) ** j, lambda i, j: 0.05) + \
        records(b, lambda i, j: -0.002 * (-1) ** j, lambda i, j: -0.05)  # a quiet sweep: f well below 1
    f = decide(rs, {a: (2.0, 1e8, 1e10), b: (2.1, 1.1e8, 1e10)}, 1e21, 10.0, priors=shipped())
    loss = f.answers["loss"]
    assert not loss.interval["capped"] and abs(loss.interval["own_factor"] - 1) > 0.1
    line = next(x for x in f.summary().splitlines() if x.strip().startswith("loss from"))
    k = float(re.search(r"interval \+-([\d.]+) f sigma\(r\)", line).group(1))
    sigma = float(re.search(r"sigma = ([\d.]+)% at", line).group(1)) / 100
    factor = float(re.search(r"f = ([\d.]+) by this sweep's own chaining", line).group(1))
    assert k * factor * sigma == pytest.approx(np.log(loss.hi / loss.value), rel=0.01)
