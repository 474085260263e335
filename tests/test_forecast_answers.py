"""The forecast's answers: each by its own chaining record, drift corrected, a pooled prior, and
no forecast without enough chaining evidence (issue 34)."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from flops_fit.errors import FitInputError
from flops_fit.fitting import fit, load_runs
from flops_fit.fitting.approaches.parametric import Parametric
from flops_fit.fitting.approaches.vpnls import Vpnls
from flops_fit.fitting.synthetic import synthetic_runs
from flops_fit.fitting.validation.chaining import Record, forward_chain
from flops_fit.fitting.validation.drift import CARRIES, ErrorModel, Prior, error_model, split_slopes
from flops_fit.fitting.validation.forecast import MIN_SPLITS, decide, forecasts
from flops_fit.fitting.validation.prior import POOLED, PRIOR_FILE, fit_prior, shipped

BUDGETS = [1e17 * 2 ** i for i in range(7)]  # six splits: fits up to the 2nd ... 6th budget
WEAK = {"loss": {POOLED: Prior(s0=0.01, nu0=1.0, tau=1.0)}, "n_opt": {POOLED: Prior(s0=0.05, nu0=1.0, tau=1.0)}}


def records(method: str, loss_slope, n_slope) -> list[Record]:
    """Forward chaining of one candidate whose log errors are exactly ``slope(split) * ln r``."""
    out = []
    for i, upto in enumerate(BUDGETS[1:-1], start=1):
        for budget in BUDGETS[i + 1:]:
            r = budget / upto
            out.append(Record(method=method, scale="params", focus=None, fitted_upto=upto, budget=budget, ratio=r,
                              loss_error=math.expm1(loss_slope(i) * math.log(r)),
                              n_opt_error=math.expm1(n_slope(i) * math.log(r))))
    return out


def test_predictions_of_one_split_are_one_piece_of_evidence():
    rs = records("m", lambda i: 0.01 * i, lambda i: -0.2)
    slopes = split_slopes(rs, "loss_error")
    assert len(slopes) == len(BUDGETS) - 2 == len({r.fitted_upto for r in rs})
    assert list(slopes.values()) == pytest.approx([0.01 * i for i in range(1, 6)])


def test_a_clear_drift_carried_linearly_is_corrected_and_its_uncertainty_sizes_the_interval():
    # N_opt under-predicted by 20% per unit of ln r on every split, with a little scatter
    rs = records("drifting", lambda i: 0.001 * (-1) ** i, lambda i: -0.2 + 0.01 * (-1) ** i)
    ratio, raw_n = 10.0, 1e6
    f = decide(rs, {("drifting", "params", None): (2.0, raw_n, 1e9)}, 1e21, ratio, priors=(WEAK, {}), mode="select",
               carry="linear", laws={})  # the error model's own interval (no reach law bounding it)
    n = f.answers["n_opt"]
    truth = raw_n * math.exp(0.2 * math.log(ratio))  # what the drift says the truth is
    assert n.model.own_drift == pytest.approx(-0.2, abs=0.005) and n.model.drift == pytest.approx(-0.2, abs=0.01)
    assert n.value == pytest.approx(truth, rel=0.05) and n.raw == pytest.approx(raw_n)
    assert n.lo < truth < n.hi and n.lo > raw_n  # the uncorrected point lies outside: the drift is clearly there
    assert f.n_opt == (n.value, n.lo, n.hi)
    assert f.d_opt[0] == pytest.approx(1e9 * raw_n / n.value)  # the budget fixes N D: D moves the other way
    # the same errors without a drift: nothing to correct
    still = decide(records("still", lambda i: 0.001, lambda i: 0.01 * (-1) ** i),
                   {("still", "params", None): (2.0, raw_n, 1e9)}, 1e21, ratio, priors=(WEAK, {}), mode="select",
                   carry="linear")
    assert abs(still.answers["n_opt"].correction) < 0.02


def test_a_drift_the_splits_cannot_tell_from_scatter_is_mostly_dropped():
    prior = Prior(s0=0.05, nu0=4.0, tau=0.02)
    noisy = error_model([0.1, -0.08, 0.12, -0.1], prior)  # mean 0.01 against scatter ~0.1
    clear = error_model([-0.2, -0.21, -0.19, -0.2], Prior(s0=0.01, nu0=4.0, tau=0.3))
    assert abs(noisy.drift) < abs(noisy.own_drift) * 0.5
    assert clear.drift == pytest.approx(clear.own_drift, rel=0.05)
    # later splits weigh more (weights 2, 3, 4, 5: the budgets each fitted): 196 / 54 effective splits
    assert noisy.dof == pytest.approx(4.0 + 196 / 54 - 1) and noisy.sd > noisy.scatter


def test_each_answer_comes_from_the_candidate_with_the_better_record_for_it():
    good_loss = records("loss-law", lambda i: 0.001 * (-1) ** i, lambda i: 0.3 * (-1) ** i)
    good_size = records("size-law", lambda i: 0.03 * (-1) ** i, lambda i: 0.01 * (-1) ** i)
    predictions = {("loss-law", "params", None): (2.0, 1e6, 1e9), ("size-law", "params", None): (2.5, 2e6, 5e8)}
    f = decide(good_loss + good_size, predictions, 1e21, 10.0, priors=(WEAK, {}), mode="select")
    assert f.answers["loss"].source.startswith("loss-law") and f.answers["n_opt"].source.startswith("size-law")
    assert f.loss[0] == pytest.approx(2.0, rel=0.01) and f.n_opt[0] == pytest.approx(2e6, rel=0.05)
    assert f.d_opt[0] == pytest.approx(5e8, rel=0.05)  # D_opt from the N_opt answer's candidate
    data = f.to_dict()
    assert data["loss"]["source"].startswith("loss-law") and data["n_opt"]["source"].startswith("size-law")
    assert data["answers"]["n_opt"]["members"] == [{"method": "size-law", "scale": "params", "focus": None,
                                                    "weight": 1.0}]
    json.dumps(data)  # the --json forecast is plain JSON
    both = decide(good_loss + good_size, predictions, 1e21, 10.0, priors=(WEAK, {}), mode="average")
    assert both.answers["loss"].source == "the weighted average of 2 candidates"
    weights = {m["method"]: m["weight"] for m in both.answers["loss"].members}
    assert weights["loss-law"] > 0.9 and sum(weights.values()) == pytest.approx(1.0)


def test_n_opt_comes_from_frontier_fits_and_the_loss_from_every_candidate():
    """A law fitted to every run alike answers the loss, not N_opt (forecast.SIZE_FOCI), even with
    the better N_opt record; with no frontier candidate at all, it answers N_opt too."""
    def focused(method, focus, loss_slope, n_slope):
        return [Record(**{**vars(r), "focus": focus}) for r in records(method, loss_slope, n_slope)]

    everyone = focused("law", "all", lambda i: 0.001 * (-1) ** i, lambda i: 0.01 * (-1) ** i)
    frontier = focused("law", "frontier", lambda i: 0.03 * (-1) ** i, lambda i: 0.1 * (-1) ** i)
    predictions = {("law", "params", "all"): (2.0, 1e6, 1e9), ("law", "params", "frontier"): (2.5, 2e6, 5e8)}
    f = decide(everyone + frontier, predictions, 1e21, 10.0, priors=(WEAK, {}), mode="select")
    assert f.answers["n_opt"].source == "law/frontier on parameters" and f.n_opt[0] == pytest.approx(2e6, rel=0.05)
    assert f.answers["loss"].source == "law/all on parameters"
    alone = decide(everyone, {("law", "params", "all"): (2.0, 1e6, 1e9)}, 1e21, 10.0, priors=(WEAK, {}), mode="select")
    assert alone.answers["n_opt"].source == "law/all on parameters"


def test_the_band_is_in_ratio_space_and_never_below_minus_100_percent():
    wild = ErrorModel(splits=2, own_drift=-0.5, own_scatter=2.0, drift=-0.5, drift_sd=1.0, scatter=2.0, dof=2.0)
    ratios = np.geomspace(1.0, 10.0, 20)
    centre, lo, hi = wild.band(ratios, 0.95)
    assert np.all(lo > -1.0) and np.all(lo <= centre) and np.all(centre <= hi)
    assert lo[-1] == pytest.approx(math.expm1(-0.5 * math.log(10) - wild.quantile(0.95) * wild.sd * math.log(10)))
    assert centre[0] == lo[0] == hi[0] == 0.0  # no reach, no error


def test_the_shipped_prior_loads_with_its_provenance():
    priors, provenance = shipped()
    for q in ("loss", "n_opt"):
        p = priors[q][POOLED]
        assert p.s0 > 0 and p.nu0 > 0 and p.tau > 0
    assert provenance["command"] == "python benchmarks/fit_forecast_prior.py"
    assert provenance["sweeps"] and "gpt demo" not in provenance["sweeps"]
    data = json.loads(resources.files("flops_fit.fitting.validation").joinpath(PRIOR_FILE).read_text())
    assert data["provenance"] == provenance


def test_the_prior_recovers_a_known_scatter():
    rng = np.random.default_rng(0)
    units = [rng.normal(0.0, 0.1, 5) for _ in range(200)]  # every candidate's scatter 0.1: nu0 large
    p = fit_prior(units)
    assert p.s0 == pytest.approx(0.1, rel=0.1) and p.nu0 > 20


def test_too_little_chaining_evidence_gives_no_forecast_and_says_so():
    # three budgets: one split (fit two, predict the third), a single piece of evidence
    runs = load_runs(synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7, noise=0.003, seed=1))
    with pytest.raises(FitInputError) as caught:
        forecasts([Vpnls(bootstrap=0)], runs, [1e20], curve="slice", scales=("params",))
    message = str(caught.value)
    assert "too little chaining evidence" in message and f"{MIN_SPLITS} or more splits" in message
    assert "at most 1" in message and "methods' own answers" in message
    # fit() keeps the methods' own fits and says why there is no forecast
    fitted = fit(runs, method="vpnls", holdout="forward", bootstrap=0)
    assert fitted.holdout["vpnls"] and fitted.predict(1e20).N_opt.notna().all()


def test_a_chaining_fit_without_a_finite_answer_is_left_out_of_that_splits_evidence():
    # the weak sweep (3 budgets: one split fits the first two and predicts the third): Approach
    # 3 fitted to all runs of the first two budgets runs off to A = inf, the frontier focus does not
    runs = load_runs(Path(__file__).parent / "data" / "weak_sweep.csv")
    failing, answering = Parametric(bootstrap=0, focus="all"), Parametric(bootstrap=0, focus="frontier")
    records, reasons = forward_chain([failing, answering], runs, ("params",), curve="slice")
    assert {(r.method, r.focus, r.fitted_upto) for r in records} == {("parametric", "frontier", 1.2e10)}
    assert all(np.isfinite([r.loss_error, r.n_opt_error]).all() for r in records)
    assert list(reasons) == [("parametric", "params", "all")]  # the failed fit: a reason, never numbers
    assert reasons[("parametric", "params", "all")].startswith("the fit of the other budgets failed: fitted A = ")


def test_each_carry_moves_the_point_and_the_interval_as_it_says():
    # N_opt under-predicted by 20% per unit of ln r on every split (ratios measured up to 2^5 = 32x)
    rs = records("drifting", lambda i: 0.001 * (-1) ** i, lambda i: -0.2 + 0.01 * (-1) ** i)
    raw_n, ratio = 1e6, 100.0
    answers = {carry: decide(rs, {("drifting", "params", None): (2.0, raw_n, 1e9)}, 1e21, ratio, priors=(WEAK, {}),
                             mode="select", carry=carry, laws={}).answers["n_opt"] for carry in CARRIES}
    b = answers["linear"].model.drift
    assert b == pytest.approx(-0.2, abs=0.01) and answers["linear"].model.reach == pytest.approx(math.log(32))
    assert answers["linear"].value == pytest.approx(raw_n * math.exp(-b * math.log(ratio)))
    assert answers["reach"].value == pytest.approx(raw_n * math.exp(-b * math.log(32)))  # not past the evidence
    assert answers["significant"].value == pytest.approx(answers["linear"].value)  # clearly there: kept
    for carry in ("off", "count", "widen"):  # not corrected
        assert answers[carry].value == pytest.approx(raw_n) and answers[carry].correction == 0.0
    off, count, widen = answers["off"], answers["count"], answers["widen"]
    assert off.lo / raw_n == pytest.approx(raw_n / off.hi)  # centred on the raw point, scatter alone
    assert count.model.sd == pytest.approx(math.hypot(off.model.sd, b))  # the drift counted as error
    assert count.lo < off.lo and count.hi > off.hi and count.hi > answers["linear"].value
    assert widen.lo == pytest.approx(off.lo) and widen.hi == pytest.approx(answers["linear"].hi)
    with pytest.raises(ValueError, match="carry must be one of"):
        error_model([0.1, 0.2], WEAK["loss"][POOLED], carry="sideways")


def test_counting_the_drift_as_error_prefers_the_candidate_that_does_not_drift():
    drifting = records("drifting", lambda i: 0.001, lambda i: -0.2 + 0.01 * (-1) ** i)
    steady = records("steady", lambda i: 0.001, lambda i: 0.05 * (-1) ** i)  # more scatter, no drift
    predictions = {("drifting", "params", None): (2.0, 1e6, 1e9), ("steady", "params", None): (2.0, 2e6, 5e8)}
    chosen = {carry: decide(drifting + steady, predictions, 1e21, 10.0, priors=(WEAK, {}), mode="select",
                            carry=carry).answers["n_opt"].source for carry in ("linear", "count")}
    assert chosen["linear"].startswith("drifting")  # corrected, its drift is no error
    assert chosen["count"].startswith("steady")


def test_a_candidate_whose_predictions_all_fall_below_the_shortest_reach_is_left_out():
    """Budgets 1.24x apart (the misfitting sweep's): a candidate chained only to the next budget has
    records, none of them at MIN_RATIO or more, so no error model: it is left out with its reason."""
    short = [Record(method="short", scale="params", focus=None, fitted_upto=b, budget=b * 1.24, ratio=1.24,
                    loss_error=0.01, n_opt_error=0.05) for b in BUDGETS[1:-1]]
    predictions = {("good", "params", None): (2.0, 1e6, 1e9), ("short", "params", None): (2.1, 2e6, 1e9)}
    f = decide(records("good", lambda i: 0.002, lambda i: 0.02) + short, predictions, 1e21, 10.0, priors=(WEAK, {}))
    left_out = next(c for c in f.candidates if c.method == "short")
    assert not left_out.models and left_out.reason == f"chaining predictions from fewer than {MIN_SPLITS} splits"
    assert f.answers["loss"].source.startswith("good") and f.loss[0] == pytest.approx(2.0, rel=0.05)


def test_a_forecast_whose_size_interval_names_no_model_is_withheld():
    """Splits that disagree by +-3 per ln r, read at 1000x: N_opt's interval would reach below one
    parameter (the misfitting sweep's first rounds in the adaptive simulation gave x8e18): no forecast."""
    wild = records("wild", lambda i: 0.001, lambda i: 3.0 * (-1) ** i)
    with pytest.raises(FitInputError, match=r"does not bound N_opt at 1000x the largest budget: its interval would "
                                            r"be \[.*\], below one parameter; sweep more budgets"):
        decide(wild, {("wild", "params", None): (2.0, 1e6, 1e9)}, 1e21, 1000.0, priors=(WEAK, {}), mode="select")
    near = decide(wild, {("wild", "params", None): (2.0, 1e6, 1e9)}, 1e21, 1.5, priors=(WEAK, {}), mode="select")
    assert 1 <= near.n_opt[1] < near.n_opt[0] < near.n_opt[2]  # nearer the sweep the same record bounds it
