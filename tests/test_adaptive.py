"""The adaptive design (sweeps.adaptive): its stopping rule, its choice per FLOP, and a design
driven to its rule on a synthetic IsoFLOP sweep fitted by the public API."""

import math

import numpy as np
import pandas as pd
import pytest

from flops_fit.errors import OptionError
from flops_fit.sweeps.adaptive import (
    StopRule,
    additive,
    budget_costs,
    extrapolation_factor,
    initial_budgets,
    interval_factor,
    isoflop_fitter,
    next_budgets,
    run_design,
)


def test_the_stopping_rule_reads_a_factor_and_a_cap():
    rule = StopRule.parse("n_opt<=1.5x, flops<=1e19")
    assert (rule.n_opt_factor, rule.flops_cap) == (1.5, 1e19)
    assert rule.holds(1.6, 1e18) is None
    assert "within 1.4x" in rule.holds(1.4, 1e18) and "cap" in rule.holds(2.0, 2e19)
    assert StopRule.parse("flops<=3e20").n_opt_factor is None
    for bad in ("n_opt<1.5x", "n_opt<=0.9x", "flops<=-1", "loss<=2"):
        with pytest.raises(OptionError, match="n_opt<=1.5x|factor F above 1|positive FLOPs cap"):
            StopRule.parse(bad)


def test_interval_factor_and_extrapolation_factor():
    assert interval_factor(100.0, 50.0, 150.0) == 2.0
    assert interval_factor(100.0, 80.0, 300.0) == 3.0
    assert interval_factor(100.0, math.nan, 300.0) == math.inf
    assert extrapolation_factor([1e18], 1e20) == math.inf
    # two points a decade apart, target a decade past the second: sqrt(1/2 + 1.5^2 / 0.5)
    assert extrapolation_factor([1e18, 1e19], 1e20) == pytest.approx(math.sqrt(0.5 + 1.5 ** 2 / 0.5))


def test_the_next_budget_is_the_largest_drop_per_flop():
    costs = {1e17: 3e17, 2e17: 6e17, 4e17: 1.2e18, 1e18: 3e18, 1e19: 3e19}
    trained = initial_budgets(costs, 3)
    assert trained == [1e17, 2e17, 4e17]
    (choice,) = next_budgets(trained, costs, additive(costs), 1e20)
    gains = {b: (extrapolation_factor(trained, 1e20) - extrapolation_factor([*trained, b], 1e20)) / costs[b]
             for b in (1e18, 1e19)}
    assert choice.budget == max(gains, key=gains.get)
    assert f"{choice.budget:.3g}" in choice.reason and "per FLOP" in choice.reason
    # free budgets would always win: the cost is what the choice weighs
    free = {**costs, 1e19: 1.0}
    assert next_budgets(trained, free, additive(free), 1e20)[0].budget == 1e19


def synthetic_sweep(seed=0):
    """IsoFLOP parabolas around N_opt = 0.1 C^0.5 with 1% loss noise, 9 budgets x 7 sizes."""
    rng = np.random.default_rng(seed)
    rows = []
    for budget in np.geomspace(1e17, 1e20, 9):
        n_opt = 0.1 * budget ** 0.5
        for n in n_opt * np.geomspace(1 / 4, 4, 7):
            tokens = budget / (6 * n)
            loss = 2.0 + 0.3 * np.log(n / n_opt) ** 2 + 50 * budget ** -0.1
            rows.append({"params": n, "tokens": tokens, "budget": budget, "loss": loss * (1 + 0.01 * rng.normal())})
    return pd.DataFrame(rows)


def test_a_design_stops_at_its_rule_for_less_than_the_full_grid():
    runs = synthetic_sweep()
    costs = budget_costs(runs)
    target = 10 * max(costs)
    fit_at = isoflop_fitter(runs, target, bootstrap=40)
    full = fit_at(sorted(costs))
    design = run_design(costs, additive(costs), target, StopRule(n_opt_factor=interval_factor(*full) * 1.05), fit_at)
    assert "within" in design.stopped
    assert design.spent < sum(costs.values())
    assert design.rounds[0].choices[0].reason.endswith("the first grid")
    assert all("per FLOP" in c.reason for r in design.rounds[1:] for c in r.choices)
    assert design.rounds[-1].factor <= interval_factor(*full) * 1.05
    capped = run_design(costs, additive(costs), target, StopRule(flops_cap=1.0), fit_at)
    assert len(capped.rounds) == 1 and "cap" in capped.stopped


def test_an_adaptive_sweep_trains_what_it_chooses_records_why_and_resumes(tmp_path):
    import sweep_support

    from flops_fit.store.run_store import RunStore
    from flops_fit.sweeps.adaptive import adaptive_sweep, plan_budgets, plan_spend
    from flops_fit.sweeps.planner import plan

    host = sweep_support.host()
    planned = plan(host=host, **sweep_support.small_plan_options(budgets=[2e7, 3e7, 4e7, 6e7, 8e7], device="cpu"))
    by = plan_budgets(planned)
    spend = plan_spend(planned)
    first = sorted(by)[:3]
    run = {"show_progress": False, "skip_parity": True, "host": host}
    design = adaptive_sweep(planned, tmp_path, StopRule(flops_cap=spend(first) + 1), bootstrap=20, **run)
    assert design.budgets[:3] == first and len(design.rounds) == 2 and "cap" in design.stopped
    chosen = design.budgets[3]
    with RunStore(tmp_path) as store:
        status = store.statuses()
        meta = store.get_meta("adaptive")
    trained = {rid for rid, s in status.items() if s == "done"}
    assert trained == {r.run_id for b in design.budgets for r in by[b]}  # only the chosen budgets' runs
    assert len(status) == len(planned.runs)  # the whole plan is recorded
    assert meta["budgets"] == design.budgets and "per FLOP" in meta["rounds"][1]["choices"][0]["reason"]
    assert meta["run_ids"][f"{chosen:.6g}"] == [r.run_id for r in by[chosen]]
    # resumed with a larger cap: the rounds replay (nothing trained twice) and one more budget follows
    again = adaptive_sweep(planned, tmp_path, StopRule(flops_cap=spend(design.budgets) + 1), bootstrap=20,
                           resume=True, **run)
    assert again.budgets[:4] == design.budgets and len(again.budgets) == 5
    with RunStore(tmp_path) as store:
        steps = store.runs_frame().set_index("run_id").steps
    assert all(steps[r.run_id] == r.steps for b in design.budgets for r in by[b])


def test_plan_adaptive_prints_the_first_batch_and_the_rule(capsys):
    from flops_fit.cli.main import main

    assert main(["plan", "--model", "gpt", "--budgets", "4e12,8e12,1.6e13,3.2e13", "--span", "16",
                 "--seq-len", "64", "--tokens-per-param", "100", "--adaptive", "--until", "n_opt<=1.4x"]) == 0
    out = capsys.readouterr().out
    assert "first batch: the 3 smallest budgets 4e+12, 8e+12, 1.6e+13" in out and "n_opt<=1.4x" in out
    assert main(["plan", "--model", "gpt", "--budgets", "4e12,8e12,1.6e13", "--adaptive", "--until", "loss<=2"]) == 2


def test_sweep_adaptive_on_the_command_line(tmp_path, capsys):
    import sweep_support

    from flops_fit.cli.main import main
    from flops_fit.plugin.host import reset_host
    from flops_fit.store.run_store import RunStore

    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML)
    out = tmp_path / "out"
    reset_host(sweep_support.host())
    try:
        assert main(["sweep", str(config), "--out", str(out), "--adaptive", "--record-only"]) == 2
        assert "chooses its runs as it trains" in capsys.readouterr().err
        assert main(["sweep", str(config), "--out", str(out), "--adaptive", "--until", "flops<=1", "--start", "2",
                     "--skip-parity"]) == 0
    finally:
        reset_host()
    printed = capsys.readouterr().out
    assert "round 1:" in printed and "stopped: " in printed and "cap 1" in printed
    with RunStore(out) as store:
        assert store.get_meta("adaptive")["stopped"].endswith("(cap 1)")
        assert set(store.statuses().values()) == {"done"}  # the 2 budgets of this plan, both the first batch
