"""The Python API given what a notebook gives it: NumPy scalars, a method's name where a set of fits
stands, a sweep's result asked for one method, a planned run's interval with a wrong slope, and the
objects a cell ends in, shown by their repr. Each is a right answer or one line naming the fix."""

import shutil
from pathlib import Path

import numpy as np
import pytest

import flops_fit
from flops_fit.errors import FitInputError, PlanError, UnknownEntryError
from flops_fit.fitting import load_runs
from flops_fit.fitting.synthetic import synthetic_runs
from flops_fit.sweeps.driver import SweepResult

STORED_SWEEP = Path(__file__).parent / "data" / "previous_release" / "sweep"  # one run, in a real store


@pytest.fixture(scope="module")
def runs():
    return synthetic_runs(budgets=(1e17, 1e18, 1e19, 1e20), sizes_per_budget=6, curve_points=5).drop(columns="curve")


@pytest.fixture(scope="module")
def every(runs):
    return flops_fit.fit(runs, "all", bootstrap=0, workers=1, tracking=False)


@pytest.fixture(scope="module")
def vpnls(runs):
    return flops_fit.fit(runs, "vpnls", bootstrap=20, tracking=False)


def test_a_method_not_in_the_set_names_the_fitted_ones_and_why_it_was_skipped(every):
    """fitted["nope"] was a bare KeyError('nope'); fitted["curve"], skipped, said no more."""
    assert "curve" in every.skipped  # a table without schedules: the curve law is skipped
    with pytest.raises(UnknownEntryError, match=r"no method 'nope' in this fit; pick one of the methods fitted: "
                                                r"'isoflop', 'parametric', 'vpnls', 'interaction' \(e\.g\. fitted\['vpnls'\]\)"):
        every["nope"]
    with pytest.raises(UnknownEntryError, match=r"'curve' was skipped: the curve law needs every run's training curve"):
        every["curve"]
    with pytest.raises(KeyError):  # still a KeyError for code that catches one
        every["nope"]


def test_in_and_for_read_the_methods_of_a_set(every):
    """`"vpnls" in fitted` and `for m in fitted` asked fitted[0] and ended in KeyError: 0."""
    assert "vpnls" in every and "curve" not in every and 0 not in every
    assert list(every) == list(every.results) == ["isoflop", "parametric", "vpnls", "interaction"]
    assert {m: every[m].method for m in every} == {m: m for m in every.results}


def test_one_methods_attribute_asked_of_a_set_says_how_to_reach_it(every):
    with pytest.raises(AttributeError, match=r"'intervals' is one method's: this FitSet holds 4, so pick one, "
                                             r"e\.g\. fitted\['vpnls'\]\.intervals"):
        every.intervals()
    with pytest.raises(AttributeError, match=r"'params' is one method's"):
        _ = every.params
    assert not hasattr(every, "exponents") and getattr(every, "zzz", None) is None
    with pytest.raises(AttributeError, match=r"^'FitSet' object has no attribute 'zzz'$"):
        _ = every.zzz


@pytest.mark.parametrize("slope", [float("nan"), -1.0, float("inf"), "0.1", True])
def test_a_planned_runs_slope_must_be_a_number_at_least_0(vpnls, every, slope):
    """slope=nan printed "extrapolation error nan% per unit", -1 "-100.00%", "0.1" raised a TypeError."""
    for fitted in (vpnls, every):
        with pytest.raises(FitInputError, match=r"slope is the extrapolation error per unit of distance beyond the "
                                                r"fitted runs, a number >= 0 \(default 0\.0126\), got "):
            fitted.loss_at(1e8, 1e15, slope=slope)
    assert vpnls.loss_at(1e8, 1e15, slope=np.float32(0)).table["extrapolation"].iloc[0] == 0.0


def test_a_planned_loss_prints_its_table_and_its_repr_is_one_line(runs):
    """print(fitted.loss_at(...)) showed the dataclass: the raw table with NaN where the text says '-'."""
    planned = flops_fit.fit(runs, "vpnls", bootstrap=0, tracking=False).loss_at([1e8, 1e12], [1e10, 1e9])
    assert str(planned) == planned.summary()
    assert "bootstrap +-" in str(planned) and "nan" not in str(planned).lower()
    assert repr(planned) == ("<PlannedLoss of 2 planned run(s) from vpnls's law; print() it for the table, "
                             ".to_dict() for all>")


def test_numpy_scalars_are_numbers_for_level_and_target(runs):
    """level=np.float32(0.9) and target=np.float32(1e21) were refused as if out of range."""
    plain = flops_fit.fit(runs, "vpnls", bootstrap=20, level=0.9, target=1e21, tracking=False)
    given = flops_fit.fit(runs, "vpnls", bootstrap=20, level=np.float32(0.9), target=np.float32(1e21),
                          tracking=False)
    assert type(given.level) is float and given.level == pytest.approx(0.9)
    assert given.predict(1e21).to_numpy() == pytest.approx(plain.predict(1e21).to_numpy(), rel=1e-6)
    with pytest.raises(FitInputError, match=r"level must lie strictly between 0 and 1 \(e\.g\. 0\.95\), got "
                                            r"np\.float32\(95\.0\)"):
        flops_fit.fit(runs, "vpnls", bootstrap=20, level=np.float32(95))


def test_load_options_with_loaded_runs_are_refused_not_dropped(runs):
    """fit(load_runs(t), exclude_top=5) fitted every run: the option was dropped without a word."""
    loaded = load_runs(runs)
    with pytest.raises(FitInputError, match=r"these runs are already loaded, and exclude_top=5 applies as they are "
                                            r"read: pass it to load_runs\(SOURCE, exclude_top=5\), or give fit"):
        flops_fit.fit(loaded, "vpnls", bootstrap=0, exclude_top=5, tracking=False)
    dropped = flops_fit.fit(load_runs(runs, exclude_top=5), "vpnls", bootstrap=0, tracking=False)
    assert len(dropped.runs.frame) == len(runs) - 5


def test_compare_given_a_set_of_fits_asks_for_one_method(runs, every):
    """It read "cannot read runs from a FitSet; give a pandas DataFrame, a CSV path ..."."""
    with pytest.raises(FitInputError, match=r"recipe A is a FitSet of several methods \(isoflop, parametric, vpnls, "
                                            r"interaction\), and compare fits one: pass one method's fit, e\.g\. "
                                            r"fitted\['vpnls'\], or the runs"):
        flops_fit.compare(every, runs, "vpnls", bootstrap=0)


def test_a_comparisons_repr_ends_its_verdict_once(runs):
    compared = flops_fit.compare(runs, runs.assign(loss=runs["loss"] * 0.98), "vpnls", bootstrap=0)
    assert ".;" not in repr(compared) and repr(compared).endswith("; print() it for the table>")


def test_a_sweeps_result_fits_the_method_given_by_position(tmp_path):
    """result.fit("vpnls") was a TypeError (it took keywords only), where flops_fit.fit(source, "vpnls") is the way."""
    shutil.copytree(STORED_SWEEP, tmp_path / "sweep")
    with pytest.raises(FitInputError, match=r"^a law over \(N, D\) .* needs at least 6 runs; got 1"):
        SweepResult(tmp_path / "sweep").fit("vpnls", bootstrap=0, tracking=False)


PLAN = dict(model="gpt", dataset="python-stdlib", span=16, tokens_per_param=100, seq_len=64,
            model_config={"n_layer": 2, "head_dim": 4})


def test_a_plans_repr_is_one_line_and_a_0d_array_is_one_budget():
    """repr(plan), what a notebook shows for a cell ending in it, spelled out every run (18,000 characters);
    budgets=np.array(1e11) was refused where np.float64(1e11) plans."""
    plan = flops_fit.plan(budgets=np.array(1e11), **PLAN)
    assert plan.budgets == [1e11] and len(plan.runs) == len(flops_fit.plan(budgets=1e11, **PLAN).runs) == 5
    assert repr(plan) == f"<Plan of 5 runs of gpt at 1 budget(s), {plan.total_flops:.3g} FLOPs; print() it for the table>"
    with pytest.raises(PlanError, match=r"each budget must be a finite positive number, got -1"):
        flops_fit.plan(budgets=np.array(-1), **PLAN)


@pytest.mark.parametrize("target", [-1e21, float("nan"), float("inf"), "1e21", 0])
def test_a_plots_or_reports_target_must_be_a_positive_budget(vpnls, tmp_path, target):
    """plot_fit took "1e21" into numpy's UFuncTypeError and inf into a RuntimeWarning; write_report wrote a page
    at -1e21 ("The answer: Not computed: ... got -1e+21"), at nan ("target budget": NaN), and at 0 its default."""
    with pytest.raises(FitInputError, match=r"target must be a positive budget in FLOPs \(e\.g\. 1e22\), or None for "
                                            r"10x the largest swept, got "):
        flops_fit.plot_fit(vpnls, tmp_path / "plots", target=target)
    with pytest.raises(FitInputError, match=r"target must be a positive budget in FLOPs"):
        flops_fit.write_report(vpnls, tmp_path / "report.html", target=target, workers=1)
    assert list(tmp_path.iterdir()) == []  # refused before anything was drawn


def test_plot_formats_are_checked_and_one_may_be_named_alone(vpnls, tmp_path):
    """formats="png" was read letter by letter ("Format 'p' is not supported", matplotlib's ValueError)."""
    with pytest.raises(FitInputError, match=r"formats must name image formats, e\.g\. \('png', 'svg'\); known: .*png"
                                            r".*; got \('png', 'jpg2'\)"):
        flops_fit.plot_fit(vpnls, tmp_path / "plots", formats=("png", "jpg2"))
    assert not (tmp_path / "plots").exists()
    written = flops_fit.plot_fit(vpnls, tmp_path / "plots", target=np.float32(1e21), formats="png")
    assert [p.name for p in written] == [f"vpnls_{name}.png" for name in
                                         ("profiles", "frontier", "contours", "residuals", "tokens_per_param")]
