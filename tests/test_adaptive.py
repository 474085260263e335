"""The adaptive design (sweeps.adaptive): its stopping rule read from the forecast's interval, its
choice of budgets and sizes per FLOP, and designs driven by the public fit on a synthetic sweep
and a tiny real one."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from flops_fit.errors import OptionError
from flops_fit.fitting.validation.drift import Prior, error_model, expected_model
from flops_fit.sweeps.adaptive import (
    Reading,
    StopRule,
    extensions,
    fit_forecast,
    interval_factor,
    more_sizes,
    nearest_sizes,
    next_choices,
    run_design,
    table_fitter,
    table_pool,
    table_spend,
)
from flops_fit.sweeps.expected import Expectation, sensitivities, vertex_variance


def test_the_stopping_rule_reads_a_factor_and_a_cap():
    rule = StopRule.parse("n_opt<=1.5x, flops<=1e19")
    assert (rule.n_opt_factor, rule.flops_cap) == (1.5, 1e19)
    assert rule.holds(1.6, 1e18) is None
    assert "within 1.4x" in rule.holds(1.4, 1e18) and "cap" in rule.holds(2.0, 2e19)
    assert rule.holds(math.inf, 1e18) is None  # no forecast: no interval to stop on
    assert StopRule.parse("flops<=3e20").n_opt_factor is None
    # the rule's text (the resume command, the stored design) parses back to the same rule: it read
    # flops<=1.23e+19 for a cap of 1.2345e19, a lower cap on resume
    for text in ("n_opt<=1.75x,flops<=1.2345e19", "flops<=39612345678", "n_opt<=2x"):
        assert StopRule.parse(str(StopRule.parse(text))) == StopRule.parse(text)
    assert str(StopRule.parse("n_opt<=2x, flops<=1e19")) == "n_opt<=2x,flops<=1e+19"
    assert str(StopRule.parse("n_opt<=100x")) == "n_opt<=100x"
    for bad in ("n_opt<1.5x", "n_opt<=0.9x", "flops<=-1", "loss<=2"):
        with pytest.raises(OptionError, match="n_opt<=1.5x|factor F above 1|positive FLOPs cap"):
            StopRule.parse(bad)


def test_the_command_lines_default_rule_is_the_designs():
    from flops_fit.cli.sweep import DEFAULT_UNTIL
    from flops_fit.sweeps.adaptive import DEFAULT_RULE

    assert DEFAULT_UNTIL == DEFAULT_RULE  # kept apart so that `flops-fit --help` imports no numpy


def test_a_rule_narrower_than_any_forecast_says_so():
    """N_opt's forecast interval is never narrower than its reach law's bound at no reach (x1.74 either
    way at 95%): a rule asking less can only stop on a cap, and the plan and the sweep say so."""
    from flops_fit.fitting.validation.prior import shipped_laws

    narrowest = math.exp(shipped_laws()["n_opt"].bounds(1.0, 0.95)[0])
    assert 1.5 < narrowest < 2.0
    assert StopRule.parse("n_opt<=2x").unreachable() is None and StopRule.parse("flops<=1e19").unreachable() is None
    note = StopRule.parse("n_opt<=1.5x").unreachable()
    assert f"x{narrowest:.2f} either way" in note and "training every budget" in note and "n_opt<=1.8x" in note
    assert "the cap flops<=1e+19" in StopRule.parse("n_opt<=1.5x,flops<=1e19").unreachable()


def test_interval_factor():
    assert interval_factor(100.0, 50.0, 150.0) == 2.0
    assert interval_factor(100.0, 80.0, 300.0) == 3.0
    assert interval_factor(100.0, math.nan, 300.0) == math.inf


def test_sizes_nearest_the_optimum_and_edges_extended():
    sizes = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    assert nearest_sizes(sizes, 8.0, 3) == (4.0, 8.0, 16.0)
    assert nearest_sizes(sizes, 100.0, 2) == (32.0, 64.0)
    assert nearest_sizes(sizes, None, 3) == tuple(sizes)
    pool = {1e18: sizes}
    # the lowest loss at the largest trained size: the next 2 larger sizes
    losses = {(1e18, 2.0): 3.0, (1e18, 4.0): 2.9, (1e18, 8.0): 2.8}
    ((budget, more, reason),) = extensions(list(losses), pool, losses)
    assert (budget, more) == (1e18, (16.0, 32.0)) and "larger" in reason
    losses[(1e18, 4.0)] = 2.7  # an interior minimum: nothing to extend
    assert extensions(list(losses), pool, losses) == []


def _reach_model(width):
    """An error model whose half-width grows with the reach ln r (the forecast's shape)."""
    return lambda ratio, more: width * math.log(max(ratio, 1.0))


def test_the_next_budget_is_the_largest_expected_shrink_per_flop_and_may_skip_budgets():
    pool = {b: [1.0, 2.0, 3.0] for b in (1e17, 2e17, 4e17, 8e17, 1.6e18, 2.4e18, 6.4e18)}
    cost = {(b, s): b for b in pool for s in pool[b]}  # each run costs its budget
    spend = lambda keys: sum(cost[k] for k in set(keys))  # noqa: E731
    trained = [(b, s) for b in (1e17, 2e17, 4e17, 8e17) for s in pool[b]]
    target = 1e19
    reading = Reading(n_opt=1.0, lo=0.5, hi=2.0, half=_reach_model(0.5), optimum=lambda b: 2.0)
    (choice,) = next_choices(trained, pool, spend, target, reading, sizes=3)
    # by hand: the drop of 0.5 ln(target / largest) per FLOP of 3 runs at the budget
    gains = {b: 0.5 * math.log(b / 8e17) / (3 * b) for b in (1.6e18, 2.4e18, 6.4e18)}
    assert choice.budget == max(gains, key=gains.get) == 2.4e18  # 1.6e18, the next in the grid, is skipped
    assert choice.sizes == (1.0, 2.0, 3.0) and choice.flops == 3 * 2.4e18
    assert "2.4e+18" in choice.reason and "per FLOP" in choice.reason and "next best" in choice.reason
    # only the sizes nearest the fitted optimum are trained at a new budget
    (two,) = next_choices(trained, pool, spend, target, reading, sizes=2)
    assert two.sizes == (2.0, 3.0)  # 2 and then 3, nearer 2 in log than 1
    assert two.flops == 2 * two.budget


def test_a_flops_cap_is_never_passed_by_a_choice():
    """The best budget per FLOP (2.4e18, 3 runs of 2.4e18) would take the spent FLOPs past the cap:
    the best that fits is chosen; with none that fits, none (it trained a batch past the cap, then stopped)."""
    pool = {b: [1.0, 2.0, 3.0] for b in (1e17, 2e17, 4e17, 8e17, 1.6e18, 2.4e18, 6.4e18)}
    spend = lambda keys: sum(b for b, _ in set(keys))  # noqa: E731
    trained = [(b, s) for b in (1e17, 2e17, 4e17, 8e17) for s in pool[b]]
    reading = Reading(n_opt=1.0, lo=0.5, hi=2.0, half=_reach_model(0.5), optimum=lambda b: 2.0)
    spent = spend(trained)
    (choice,) = next_choices(trained, pool, spend, 1e19, reading, sizes=3, cap=spent + 3 * 1.6e18)
    assert choice.budget == 1.6e18
    assert next_choices(trained, pool, spend, 1e19, reading, sizes=3, cap=spent + 1e18) == []
    assert StopRule.parse("flops<=1e18").over_cap(2e18).startswith("the first batch alone spends 2e+18 FLOPs, "
                                                                   "past the cap flops<=1e+18")
    assert StopRule.parse("flops<=1e18").over_cap(1e18) is None and StopRule.parse("n_opt<=2x").over_cap(1e30) is None


def test_without_a_forecast_the_design_adds_the_cheapest_budget_and_says_why():
    pool = {b: [1.0, 2.0, 3.0] for b in (1e17, 2e17, 4e17, 8e17)}
    spend = lambda keys: sum(b for b, _ in set(keys))  # noqa: E731
    trained = [(b, s) for b in (1e17, 2e17) for s in pool[b]]
    reading = Reading(note="no forecast: too little chaining evidence")
    (choice,) = next_choices(trained, pool, spend, 1e19, reading)
    assert choice.budget == 4e17 and "no forecast yet" in choice.reason and math.isnan(choice.score)


def synthetic_sweep(seed=0, budgets=8):
    """IsoFLOP parabolas around N_opt = 0.1 C^0.5 with 1% loss noise, ``budgets`` budgets x 7 sizes."""
    rng = np.random.default_rng(seed)
    rows = []
    for budget in np.geomspace(1e17, 1e17 * 2 ** (budgets - 1), budgets):
        n_opt = 0.1 * budget ** 0.5
        for n in n_opt * np.geomspace(1 / 4, 4, 7):
            tokens = budget / (6 * n)
            loss = 2.0 + 0.3 * np.log(n / n_opt) ** 2 + 50 * budget ** -0.1
            rows.append({"params": n, "tokens": tokens, "budget": budget, "loss": loss * (1 + 0.01 * rng.normal())})
    return pd.DataFrame(rows)


@pytest.mark.e2e  # a simulated design forecasting at every round (~18 s): the end-to-end tier
def test_a_design_reads_the_forecast_and_cannot_stop_without_one():
    runs = synthetic_sweep()
    pool, spend = table_pool(runs), table_spend(runs)
    target = 10 * max(pool)
    fit_at = table_fitter(runs, target)
    # a rule any interval meets: with 3 budgets there is no forecast, so it cannot stop there
    design = run_design(pool, spend, target, StopRule(n_opt_factor=1e6), fit_at, start=3, sizes=7)
    first = design.rounds[0]
    assert "no forecast" in first.note and "cannot stop" in first.note and not math.isfinite(first.factor)
    assert len(design.rounds) == 2 and "within" in design.stopped
    # the interval read is the forecast's of the public fit on the same runs
    chosen = runs[runs.budget.isin(design.budgets)]
    forecast = fit_forecast(chosen, target).forecast
    assert (design.rounds[-1].n_opt, design.rounds[-1].n_opt_lo, design.rounds[-1].n_opt_hi) == \
        pytest.approx(forecast.n_opt)
    assert "no forecast yet" in design.rounds[1].choices[0].reason


def test_an_adaptive_sweep_trains_what_it_chooses_records_why_and_resumes(tmp_path, capsys):
    import sweep_support

    from flops_fit.store.run_store import RunStore
    from flops_fit.sweeps.adaptive import adaptive_sweep, plan_keys, plan_spend
    from flops_fit.sweeps.planner import plan

    host = sweep_support.host()
    planned = plan(host=host, **sweep_support.small_plan_options(budgets=[2e7, 3e7, 4e7, 6e7], device="cpu"))
    by = plan_keys(planned)
    spend = plan_spend(planned)
    first = [k for k in by if k[0] in (2e7, 3e7)]
    second = [k for k in by if k[0] == 4e7]  # without a forecast, the cheapest budget next, all its sizes
    run = {"show_progress": False, "skip_parity": True, "host": host}
    design = adaptive_sweep(planned, tmp_path, StopRule(flops_cap=spend(first + second)), start=2,
                            **{**run, "show_progress": True})
    # the progress counts the runs chosen so far (done/chosen), never the plan's other runs as done
    counts = [line.split(" runs")[0].rsplit(" ", 1)[-1] for line in capsys.readouterr().err.splitlines()
              if line.startswith("sweep [")]
    assert counts[0] == f"0/{len(first)}" and counts[-1] == f"{len(design.keys)}/{len(design.keys)}"
    assert len(design.keys) < len(planned.runs)
    assert design.budgets[:2] == [2e7, 3e7] and len(design.rounds) == 2 and "cap" in design.stopped
    assert design.spent <= spend(first + second)  # a cap, never passed
    assert "no forecast" in design.rounds[0].note  # two budgets cannot be chained
    chosen = design.rounds[1].choices[0]
    with RunStore(tmp_path) as store:
        status = store.statuses()
        meta = store.get_meta("adaptive")
    trained = {rid for rid, s in status.items() if s == "done"}
    assert trained == {by[k].run_id for k in design.keys}  # only the chosen runs
    assert len(status) == len(planned.runs)  # the whole plan is recorded
    assert meta["budgets"] == design.budgets and meta["rounds"][1]["choices"][0]["reason"] == chosen.reason
    assert meta["run_ids"][-1] == [by[k].run_id for k in chosen.keys]
    # resumed with a larger cap: the rounds replay (nothing trained twice) and one more choice follows
    again = adaptive_sweep(planned, tmp_path, StopRule(flops_cap=spend(by)), start=2, resume=True, **run)
    assert again.keys[: len(design.keys)] == design.keys and len(again.rounds) == 3
    with RunStore(tmp_path) as store:
        steps = store.runs_frame().set_index("run_id").steps
    assert all(steps[by[k].run_id] == by[k].steps for k in design.keys)


def test_plan_adaptive_prints_the_first_batch_and_the_rule(capsys):
    from flops_fit.cli.main import main

    assert main(["plan", "--model", "gpt", "--budgets", "4e12,8e12,1.6e13,3.2e13,6.4e13", "--span", "16",
                 "--seq-len", "64", "--tokens-per-param", "100", "--adaptive", "--until", "n_opt<=1.4x"]) == 0
    out = capsys.readouterr().out
    assert "first batch: the 4 smallest budgets 4e+12, 8e+12, 1.6e+13, 3.2e+13" in out and "n_opt<=1.4x" in out
    assert "Note: n_opt<=1.4x is narrower than any forecast's N_opt interval" in out
    assert "forecast" in out and "the other 1 (its 5 planned sizes)" in out  # default: 5 per budget
    assert main(["plan", "--model", "gpt", "--budgets", "4e12,8e12,1.6e13,3.2e13,6.4e13", "--span", "16",
                 "--seq-len", "64", "--tokens-per-param", "100", "--sizes-per-budget", "7", "--adaptive"]) == 0
    out = capsys.readouterr().out
    assert ("the other 1 (5 sizes around the fitted N_opt) or 2 more sizes at a budget already trained (a less noisy "
            "optimum): the cheapest expected to bring the forecast's interval") in out and "within 2x, else the most" in out
    # a first batch of every budget leaves the design nothing to choose: said so (it read "the other 0")
    assert main(["plan", "--model", "gpt", "--budgets", "4e12,8e12,1.6e13,3.2e13", "--span", "16",
                 "--seq-len", "64", "--tokens-per-param", "100", "--adaptive"]) == 0
    out = capsys.readouterr().out
    assert "the other 0" not in out and "then nothing: the first batch is every budget" in out
    assert "--start fewer than 4" in out
    assert main(["plan", "--model", "gpt", "--budgets", "4e12,8e12,1.6e13", "--adaptive", "--until", "loss<=2"]) == 2
    capsys.readouterr()
    # an empty rule (a script's unset variable) is refused, not read as the default n_opt<=2x
    assert main(["plan", "--model", "gpt", "--budgets", "4e12,8e12,1.6e13,3.2e13,6.4e13", "--adaptive",
                 "--until", ""]) == 2
    assert capsys.readouterr().err.startswith("flops-fit: error: stopping rule '' is not understood: write n_opt<=")
    assert main(["plan", "--model", "gpt", "--budgets", "4e12,8e12,1.6e13", "--adaptive"]) == 2  # 3 budgets
    refused = capsys.readouterr()
    assert ("this sweep lists 3: list more budgets (a factor of 2 apart, say, beyond the largest), or sweep the grid "
            "as it is without --adaptive") in refused.err
    assert refused.out == ""  # the one line alone: the plan's table was printed above it


def test_the_designs_flags_without_adaptive_and_a_target_or_sizes_it_cannot_use_are_refused(tmp_path, capsys):
    """`sweep --until n_opt<=2x` without --adaptive trained the whole grid, the rule ignored; `--target -1`
    (or one inside the sweep) was printed as "the target -1" and `--adaptive-sizes 0` as "0 sizes"."""
    import sweep_support

    from flops_fit.cli.main import main

    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML)
    out = tmp_path / "out"
    assert main(["sweep", str(config), "--out", str(out), "--until", "n_opt<=2x"]) == 2
    assert capsys.readouterr().err.strip() == (
        "flops-fit: error: --until applies only with --adaptive (a design that chooses its runs): add --adaptive, "
        "or leave it out to train the whole grid")
    assert not out.exists()
    grid = ["plan", "--model", "gpt", "--budgets", "4e12,8e12,1.6e13,3.2e13,6.4e13", "--span", "16", "--seq-len",
            "64", "--tokens-per-param", "100"]
    assert main([*grid, "--target", "1e15", "--start", "3"]) == 2
    assert "--target, --start apply only with --adaptive" in capsys.readouterr().err
    # refused in one line: the plan was printed first, then the refusal
    assert main(["sweep", str(config), "--out", str(out), "--adaptive", "--record-only"]) == 2
    assert capsys.readouterr().err == ("flops-fit: error: --record-only records a fixed plan; an adaptive sweep "
                                       "chooses its runs as it trains\n")
    assert not out.exists()
    for target, shown in (("-1", "-1"), ("nan", "nan"), ("6e13", "6e+13"), ("6.4e13", "6.4e+13")):
        assert main([*grid, "--adaptive", f"--target={target}"]) == 2
        captured = capsys.readouterr()
        err = captured.err
        assert captured.out == "" and err.count("\n") == 1
        assert err.startswith("flops-fit: error: the target must be a budget in FLOPs beyond the plan's largest, "
                              "6.4e+13")
        assert err.rstrip().endswith(f"got {shown}")  # the value given, not its repr cut short (6.4e13 read 640000000000)
    for flag in ("--adaptive-sizes=0", "--start=0"):
        assert main([*grid, "--adaptive", flag]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert ("trains 3 or more sizes at each budget it adds" if "sizes" in flag else
                "starts from 2 or more budgets") in captured.err
    assert main([*grid, "--adaptive", "--target", "1e15"]) == 0
    assert "at the target 1e+15 within 2x, else the most per FLOP" in capsys.readouterr().out


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
        # a cap below the first batch is refused before anything trains (it trained the batch, then stopped)
        assert main(["sweep", str(config), "--out", str(out), "--adaptive", "--until", "n_opt<=1.2x,flops<=1",
                     "--start", "2", "--skip-parity"]) == 2
        assert capsys.readouterr().err.splitlines()[-1].startswith(
            "flops-fit: error: the first batch alone spends ")
        assert not (out / "runs.sqlite").exists() or not RunStore(out).statuses()
        assert main(["sweep", str(config), "--out", str(out), "--adaptive", "--until", "n_opt<=1.2x,flops<=1e15",
                     "--start", "2", "--skip-parity"]) == 0
    finally:
        reset_host()
    captured = capsys.readouterr()
    assert "warning: n_opt<=1.2x is narrower than any forecast's N_opt interval" in captured.err
    printed = captured.out
    assert "round 1:" in printed and "stopped: every run of the pool is trained" in printed
    # the report at the design's target (report's default, 10x the largest budget trained, may differ)
    assert f"the forecast it read: `flops-fit report {out} --target 4e+08`" in printed
    assert printed.count("round 1:") == 1 and printed.count("adaptive design, target") == 1  # each round once
    assert "the rule cannot stop on the interval" in printed
    with RunStore(out) as store:
        assert store.get_meta("adaptive")["stopped"] == "every run of the pool is trained"
        assert set(store.statuses().values()) == {"done"}  # the 2 budgets of this plan, both the first batch


@pytest.mark.e2e  # three forecasts of every method (~20 s of CPU): the end-to-end tier
def test_a_resumed_design_fits_each_round_on_its_own_runs_only(tmp_path):
    # a store resumed after later rounds trained: each replayed round reads the forecast of the runs
    # it had chosen, not of every run the store holds (it read and recorded a later round's)
    import sweep_support

    from flops_fit.store.outside import record_result
    from flops_fit.store.run_store import RunStore
    from flops_fit.sweeps.adaptive import adaptive_sweep
    from flops_fit.sweeps.driver import run_plan
    from flops_fit.sweeps.planner import plan

    host = sweep_support.host()
    budgets = [2e7, 3e7, 4e7, 6e7, 8e7]
    planned = plan(host=host, **sweep_support.small_plan_options(budgets=budgets, device="cpu"))
    run = {"show_progress": False, "skip_parity": True, "host": host}
    run_plan(planned, tmp_path, record_only=True, **run)
    rows = []
    for budget in budgets:  # IsoFLOP parabolas with their minimum at each budget's middle size
        sizes = sorted(r.params for r in planned.runs if r.budget == budget)
        for r in planned.runs:
            if r.budget == budget:
                loss = 2.0 + 0.3 * math.log(r.params / sizes[1] / 1.1) ** 2 + 50 * budget ** -0.1
                record_result(tmp_path, r.run_id, {"loss": loss, "tokens": r.tokens})
                rows.append({"params": r.params, "tokens": r.tokens, "flops": r.flops, "budget": budget, "loss": loss})
    design = adaptive_sweep(planned, tmp_path, StopRule(n_opt_factor=1e6), start=4, resume=True, **run)
    assert design.budgets == budgets[:4] and len(design.rounds) == 1 and "within" in design.stopped
    table = pd.DataFrame(rows)
    target = 10 * max(budgets)
    own = fit_forecast(table[table.budget.isin(budgets[:4])].reset_index(drop=True), target).forecast.n_opt
    every = fit_forecast(table, target).forecast.n_opt
    assert own[0] != pytest.approx(every[0])  # the fifth budget moves the answer: the test can tell them apart
    first = design.rounds[0]
    assert (first.n_opt, first.n_opt_lo, first.n_opt_hi) == pytest.approx(own)
    with RunStore(tmp_path) as store:
        assert store.get_meta("adaptive")["rounds"][0]["n_opt"] == pytest.approx(own[0])


def _first_batch_recorded(folder, result):
    """A tiny-lm plan of budgets 2e7, 3e7, 4e7 in ``folder``'s store, the two smaller budgets' runs recorded
    as ``result(run)`` gives them: (the plan, those runs, the options a design over it runs with)."""
    import sweep_support

    from flops_fit.store.outside import record_result
    from flops_fit.sweeps.driver import run_plan
    from flops_fit.sweeps.planner import plan

    host = sweep_support.host()
    planned = plan(host=host, **sweep_support.small_plan_options(budgets=[2e7, 3e7, 4e7], device="cpu"))
    run = {"show_progress": False, "skip_parity": True, "host": host}
    run_plan(planned, folder, record_only=True, **run)
    first = [r for r in planned.runs if r.budget in (2e7, 3e7)]
    for r in first:
        record_result(folder, r.run_id, result(r))
    return planned, first, run


def test_status_shows_an_adaptive_sweeps_design_and_the_runs_it_did_not_choose(tmp_path, capsys):
    # the store's record of why each run was chosen was shown nowhere once the sweep's own output was
    # gone, and status called the runs the design never chose "pending"
    from flops_fit.cli.main import main
    from flops_fit.cli.sweep import _design_flags
    from flops_fit.sweeps.adaptive import adaptive_sweep, plan_keys, plan_spend

    planned, first, run = _first_batch_recorded(
        tmp_path, lambda r: {"loss": 3.0 + abs(math.log(r.params / 500)), "tokens": r.tokens})
    spend = plan_spend(planned)
    design = adaptive_sweep(planned, tmp_path, StopRule(flops_cap=spend(plan_keys(first))), start=2, resume=True, **run)
    assert "cap" in design.stopped
    capsys.readouterr()
    assert main(["status", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert f"adaptive design, target {design.target:.3g} FLOPs, rule {design.rule}:" in printed
    assert "  round 1: " in printed and design.rounds[0].choices[0].reason in printed
    assert f"stopped: {design.stopped}" in printed
    unchosen = len(planned.runs) - len(first)
    assert f"{unchosen} planned run(s) not chosen by the design" in printed
    assert printed.count("not chosen  ") == unchosen and " pending " not in printed
    # and for machines: the design as stored, strict JSON, with the runs not chosen
    import json

    assert main(["status", str(tmp_path), "--json"]) == 0
    text = capsys.readouterr().out
    assert "Infinity" not in text and "NaN" not in text
    stored = json.loads(text)["adaptive"]
    assert stored["stopped"] == design.stopped and stored["rounds"][0]["choices"][0]["reason"] in printed
    assert sorted(stored["not_chosen"]) == sorted(r.run_id for r in planned.runs if r not in first)
    # the resume command gives the same design again: its rule, target, first batch and sizes (without
    # --start 2 it replayed a first batch of 4 budgets)
    assert json.loads(text)["resume"] == (f"flops-fit sweep CONFIG --out {tmp_path} --adaptive --until "
                                          f"'{design.rule}' --target 4e+08 --start 2 --adaptive-sizes 5 --resume")
    assert _design_flags({"target": 1.2345e19, "start": 5}) == " --target 1.2345e+19 --start 5"


def test_a_design_refuses_a_bad_rule_or_count_before_anything_trains():
    # batch=0 stopped the design at once "every budget of the pool is trained"; a rule of None or a
    # start of 2.5 failed deep in the first round with an AttributeError / TypeError
    pool = {b: [1.0, 2.0, 3.0] for b in (1.0, 2.0, 4.0, 8.0)}
    calls = []

    def fit_at(keys):
        calls.append(keys)
        return Reading(note="no fit")

    for rule, options, message in ((None, {}, "stopping rule must be a StopRule or its text"),
                                   (2.0, {}, "stopping rule must be a StopRule or its text"),
                                   ("n_opt<=2x", {"batch": 0}, "adds 1 or more budgets per round"),
                                   ("n_opt<=2x", {"start": 2.5}, "starts from 2 or more budgets"),
                                   ("n_opt<=2x", {"sizes": 0}, "trains 3 or more sizes")):
        with pytest.raises(OptionError, match=message):
            run_design(pool, lambda keys: float(len(set(keys))), 80.0, rule, fit_at, **options)
    assert calls == []
    design = run_design(pool, lambda keys: float(len(set(keys))), 80.0, "flops<=12", fit_at, start=2)
    assert calls and design.rule == StopRule(flops_cap=12.0)  # the rule's text is read as the rule


def test_a_design_whose_batch_failed_stops_instead_of_training_the_grid(tmp_path):
    # every run of the first batch failed (a rate that diverges, a model that cannot train): the design
    # went on choosing "the cheapest untrained budget" without a fit, into the same failure
    from flops_fit.store.run_store import RunStore
    from flops_fit.sweeps.adaptive import adaptive_sweep

    planned, first, run = _first_batch_recorded(
        tmp_path, lambda r: {"status": "failed", "error": "diverged at step 3", "tokens": 0})
    design = adaptive_sweep(planned, tmp_path, StopRule(n_opt_factor=2.0), start=2, resume=True, **run)
    assert len(design.rounds) == 1
    assert design.stopped == (f"none of round 1's {len(first)} runs has a loss (they failed): fix the cause, then "
                              "resume with --retry-failed")
    with RunStore(tmp_path) as store:
        statuses = store.statuses()
    assert all(statuses[r.run_id] == "pending" for r in planned.runs if r.budget == 4e7)  # nothing more trained


def test_an_adaptive_sweep_holds_one_lease_from_its_first_batch_to_its_last(tmp_path):
    """Each batch's run_plan took a lease of its own: status read a new driver each round (its time left
    "not measured yet" again) and, while the design fitted between batches, no driver at all."""
    import os

    import sweep_support

    from flops_fit.errors import StoreBusy
    from flops_fit.store.lease import Lease, holder
    from flops_fit.sweeps.adaptive import adaptive_sweep, plan_keys, plan_spend
    from flops_fit.sweeps.planner import plan

    host = sweep_support.host()
    planned = plan(host=host, **sweep_support.small_plan_options(budgets=[2e7, 3e7, 4e7, 6e7], device="cpu"))
    by = plan_keys(planned)
    cap = plan_spend(planned)([k for k in by if k[0] <= 4e7])
    heard = []  # the store's driver as status reads it, after each batch is chosen and after each fit
    design = adaptive_sweep(planned, tmp_path, StopRule(flops_cap=cap), start=2, show_progress=False,
                            skip_parity=True, host=host, on_round=lambda d: heard.append(holder(tmp_path / "runs.sqlite")))
    assert len(design.rounds) == 2 and len(heard) >= 3
    assert all(h is not None and h.pid == os.getpid() for h in heard)
    assert len({h.started for h in heard}) == 1  # one driver since the first batch
    assert holder(tmp_path / "runs.sqlite") is None  # given up at the end
    with Lease(tmp_path / "runs.sqlite"):  # a lease not shared is joined by none, as before
        with pytest.raises(StoreBusy):
            Lease(tmp_path / "runs.sqlite").acquire()


def test_status_between_an_adaptive_sweeps_batches_says_the_design_is_choosing(tmp_path):
    """Its batch trained, the design fitting: status read "about 0.0s left for the runs chosen so far"."""
    import contextlib
    import io

    import sweep_support

    from flops_fit.cli.main import main
    from flops_fit.sweeps.adaptive import adaptive_sweep, plan_keys, plan_spend
    from flops_fit.sweeps.planner import plan

    host = sweep_support.host()
    planned = plan(host=host, **sweep_support.small_plan_options(budgets=[2e7, 3e7, 4e7, 6e7], device="cpu"))
    by = plan_keys(planned)
    cap = plan_spend(planned)([k for k in by if k[0] <= 4e7])
    lines = []

    def status(design):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            assert main(["status", str(tmp_path)]) == 0
        lines.append(printed.getvalue().splitlines()[1])

    adaptive_sweep(planned, tmp_path, StopRule(flops_cap=cap), start=2, show_progress=False, skip_parity=True,
                   host=host, on_round=status)
    fitted = [line for line in lines if "the design fits them to choose its next batch (or stop)" in line]
    assert fitted and all(line.startswith("training now: pid ") for line in fitted)
    assert not any("0.0s left" in line for line in lines)


def test_budgets_expected_to_gain_alike_go_to_the_cheapest():
    """Untrained budgets below the largest trained leave the reach as it is: under a model of the reach
    alone none is expected to narrow the interval, and "most per FLOP" among equals is the cheapest
    (Epoch's Chinchilla chose 6e20, 3e21 FLOPs, before 1e20, 5e20 FLOPs, both expected to gain nothing)."""
    pool = {b: [1.0, 2.0, 3.0] for b in (1e17, 2e17, 4e17, 8e17, 1.6e18)}
    spend = lambda keys: sum(b for b, _ in set(keys))  # noqa: E731
    trained = [(b, s) for b in (1e17, 8e17, 1.6e18) for s in pool[b]]
    reading = Reading(n_opt=1.0, lo=0.5, hi=2.0, half=_reach_model(0.5), optimum=lambda b: 2.0)
    (choice,) = next_choices(trained, pool, spend, 1e19, reading, sizes=3)
    assert choice.budget == 2e17 and choice.score == 0
    assert "none of 2 untrained budgets is expected to narrow it: the cheapest" in choice.reason


def test_with_every_budget_trained_and_the_rule_unmet_the_design_adds_sizes_until_the_pool_is_spent():
    """The design stopped on "every budget of the pool is trained" with sizes of those budgets left and
    its rule unmet (Epoch's Chinchilla: 86 of 123 runs, x2.35 against the x2.23 asked). It goes on
    with the untrained sizes nearest each budget's fitted N_opt, the cheapest budget first."""
    sizes = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    pool = {b: sizes for b in (1e17, 2e17, 4e17)}
    spend = lambda keys: sum(b for b, _ in set(keys))  # noqa: E731
    trained = [(b, s) for b in pool for s in (4.0, 8.0, 16.0)]
    reading = Reading(n_opt=1.0, lo=0.1, hi=10.0, half=_reach_model(0.5), optimum=lambda b: 10.0)
    (choice,) = next_choices(trained, pool, spend, 1e19, reading, sizes=3)
    assert (choice.budget, choice.sizes, choice.flops) == (1e17, (2.0, 32.0), 2e17)  # nearest 10 in log
    assert "every budget is trained" in choice.reason and "cheapest" in choice.reason
    assert more_sizes(trained, pool, spend, reading, cap=spend(trained) + 1e17) is None  # 2 runs of 1e17: past it
    full = [(b, s) for b in pool for s in sizes]
    assert more_sizes(full, pool, spend, reading) is None

    # driven: a rule never met trains every run of the pool, not every budget
    pool = {b: sizes[:5] for b in (1e17, 2e17, 4e17, 8e17, 1.6e18)}
    design = run_design(pool, spend, 1e19, StopRule.parse("n_opt<=2x"), lambda keys: reading, sizes=3)
    assert sorted(design.keys) == sorted((b, s) for b in pool for s in pool[b])
    assert design.stopped == "every run of the pool is trained"
    assert [c.sizes for c in design.rounds[-1].choices] == [(1.0, 2.0)]


def test_an_adaptive_sweep_refused_before_it_trains_leaves_no_store_behind(tmp_path):
    """adaptive_sweep(..., executor="nope") made its store before run_plan's early checks refused the executor,
    leaving an empty runs.sqlite: a folder that now looked like a sweep's. A bad executor, an option run_plan
    does not take (a TypeError in the first round), too few budgets or a first batch past the cap is refused
    before the folder is touched."""
    import sweep_support

    from flops_fit.errors import UnknownEntryError
    from flops_fit.store.run_store import STORE_NAME
    from flops_fit.sweeps.adaptive import adaptive_sweep
    from flops_fit.sweeps.planner import plan

    host = sweep_support.host()
    planned = plan(host=host, **sweep_support.small_plan_options(budgets=[2e7, 3e7, 4e7, 6e7], device="cpu"))
    folder = tmp_path / "out"
    for rule, options, error, message in (
            ("n_opt<=2x", {"executor": "nope"}, UnknownEntryError, "no executor called 'nope'"),
            ("n_opt<=2x", {"executor_options": {"bogus": 1}}, OptionError, "unknown option"),
            ("n_opt<=2x", {"workrs": 2}, OptionError, "adaptive_sweep got unknown option\\(s\\) 'workrs'"),
            ("n_opt<=2x", {"start": 5}, OptionError, "trains its 5 smallest budgets first"),
            ("flops<=1", {"start": 2}, OptionError, "the first batch alone spends")):
        with pytest.raises(error, match=message):
            adaptive_sweep(planned, folder, rule, show_progress=False, skip_parity=True, **options)
        assert not (folder / STORE_NAME).exists() and not folder.exists(), options


# ------------------------------------------------------------------ what a candidate is expected to do (issue 38)
PRIOR = Prior(s0=0.2, nu0=1.74, tau=0.41)


def _n_eff(k):
    w = np.arange(2.0, k + 2.0)  # drift.split_weights: the budgets each split fitted
    return w.sum() ** 2 / np.sum(w * w)


def test_more_splits_are_expected_to_move_the_scatter_toward_the_sweeps_own():
    """A split is evidence: with the sweep's own scatter below the prior's, one more is expected to
    narrow the model (scatter moderated with one more degree of freedom, Student's quantile smaller);
    the model's own formulas by hand, not the code's."""
    slopes = [0.30, 0.45, 0.25, 0.40]
    model = error_model(slopes, PRIOR)
    assert expected_model(model, PRIOR) is model
    grown = expected_model(model, PRIOR, more=1)
    own = model.own_scatter ** 2
    dof_own = _n_eff(5) - 1
    var = (PRIOR.nu0 * PRIOR.s0 ** 2 + dof_own * own) / (PRIOR.nu0 + dof_own)
    assert grown.splits == 5 and grown.dof == pytest.approx(PRIOR.nu0 + dof_own)
    assert grown.scatter == pytest.approx(math.sqrt(var)) and grown.scatter < model.scatter
    assert grown.log_interval(10.0, 0.95)[2] < model.log_interval(10.0, 0.95)[2]
    # noise taken off the splits' own variance narrows it further, never below none
    assert expected_model(model, PRIOR, less=own / 2).scatter < model.scatter
    assert expected_model(model, PRIOR, less=10.0).own_scatter == 0.0


def test_a_budgets_optimum_is_less_noisy_with_more_sizes_by_its_design():
    """The vertex of a parabola fitted at sizes symmetric about it has variance noise / (4 c^2 sum x^2)
    (x = ln N - vertex): two more sizes shrink it, whatever their losses."""
    sizes = [np.exp(v) for v in (-1.0, 0.0, 1.0)]
    wide = [*sizes, np.exp(-2.0), np.exp(2.0)]
    assert vertex_variance(sizes, 0.0, 0.5, 1e-4) == pytest.approx(1e-4 / (4 * 0.25 * 2.0))
    assert vertex_variance(wide, 0.0, 0.5, 1e-4) == pytest.approx(1e-4 / (4 * 0.25 * 10.0))


def test_a_splits_z_reads_an_optimum_through_its_line_and_its_comparison():
    """Split k fits a line through the optima at C1, C2 (log C 0, 1) and predicts C3 (log C 2, ratio e):
    z = (line at C3 - observed at C3) / 1; d z / d optimum at C1 is the line's leverage there, -1 at C3."""
    e = math.e
    grads = sensitivities({e: [(e ** 2, e)]}, [1.0, e, e ** 2])[e]
    assert grads[1.0] == pytest.approx(0.5 + (0 - 0.5) * (2 - 0.5) / 0.5)  # 1/n + (u1 - mean)(u3 - mean) / Sxx
    assert grads[e] == pytest.approx(0.5 + (1 - 0.5) * (2 - 0.5) / 0.5)
    assert grads[e ** 2] == pytest.approx(-1.0)


def _bound_reading(trained, losses, bound):
    """A reading whose interval is the error model bounded at ``bound`` (the reach law's cap), with
    one split per trained budget past the second, each predicting every larger trained budget."""
    budgets = sorted({b for b, _ in trained})
    splits = {u: [(b, b / u) for b in budgets if b > u] for u in budgets[1:-1]}
    model = error_model([0.30, 0.45, 0.25, 0.40][:len(splits)], PRIOR)
    expectation = Expectation(model, PRIOR, 0.95, lambda half, ratio: min(half, bound * math.log(ratio)),
                              splits, losses)
    return Reading(n_opt=1.0, lo=0.5, hi=2.0, half=lambda ratio, more: bound * math.log(ratio),
                   optimum=lambda b: 4.0, losses=losses, expected=expectation)


def test_at_the_reach_laws_bound_a_budget_is_credited_with_the_cheapest_set_it_starts():
    """At the bound no single budget below the largest is expected to narrow the interval (each scored
    0: Epoch's Chinchilla at x2.71), though two splits bring the error model under it: each is credited
    with the gain per FLOP of the cheapest set it starts, and the cheapest such set's first is chosen."""
    sizes = [1.0, 2.0, 4.0, 8.0, 16.0]
    pool = {b: sizes for b in (1e17, 2e17, 4e17, 8e17, 1.6e18, 3.2e18, 6.4e18)}
    spend = lambda keys: sum(b for b, _ in set(keys))  # noqa: E731
    trained = [(b, s) for b in (1e17, 2e17, 4e17, 8e17, 6.4e18) for s in sizes]
    losses = {(b, s): 3.0 + 0.1 * math.log(s / 4.0) ** 2 for b, s in trained}  # every profile a parabola: no noise
    model = _bound_reading(trained, losses, 1.0).expected.model
    ratio = 10.0
    alone, both = (expected_model(model, PRIOR, more=m).log_interval(ratio, 0.95)[2] for m in (1, 2))
    bound = (alone + both) / 2 / math.log(ratio)  # per ln r: one split stays above it, two go under
    reading = _bound_reading(trained, losses, bound)
    assert reading.expected.half(ratio, 1) == reading.expected.half(ratio) == pytest.approx(bound * math.log(ratio))
    (choice,) = next_choices(trained, pool, spend, 6.4e19, reading, sizes=5)
    assert choice.budget == 1.6e18 and choice.score > 0
    assert choice.score == pytest.approx((bound * math.log(ratio) - both) / (5 * 1.6e18 + 5 * 3.2e18))
    assert "with the 1 cheapest other candidate" in choice.reason
    # the same pool read by the reach alone (the design before): nothing gains, the cheapest by default
    (old,) = next_choices(trained, pool, spend, 6.4e19, dataclasses.replace(reading, expected=None), sizes=5)
    assert old.budget == 1.6e18 and old.score == 0


def test_sizes_at_a_trained_budget_are_ranked_with_the_budgets_by_the_noise_they_take_off():
    """Every budget trained but one expensive one, and a budget whose 3 sizes place its optimum poorly:
    2 more sizes there take noise off the splits' z for a fraction of the budget's FLOPs, and are
    chosen first with their expected gain (the design added sizes only once every budget was trained,
    unscored, the cheapest budget first)."""
    pool = {b: [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0] for b in (1e17, 2e17, 4e17, 8e17, 1.6e18, 3.2e18, 6.4e18)}
    spend = lambda keys: sum(b for b, _ in set(keys))  # noqa: E731
    trained = [(b, s) for b in (1e17, 2e17, 4e17, 8e17, 6.4e18) for s in pool[b]]
    trained += [(1.6e18, s) for s in (2.0, 4.0, 8.0)]
    wobble = {1.0: 0.01, 2.0: -0.01, 4.0: 0.012, 8.0: -0.008, 16.0: 0.01, 32.0: -0.012, 64.0: 0.0}
    losses = {(b, s): 3.0 + 0.05 * math.log(s / 4.0) ** 2 + wobble[s] for b, s in trained}
    budgets = sorted({b for b, _ in trained})
    splits = {u: [(b, b / u) for b in budgets if b > u] for u in budgets[1:-1]}
    model = error_model([0.10, 0.25, 0.15, 0.2], PRIOR)
    expectation = Expectation(model, PRIOR, 0.95, lambda half, ratio: half, splits, losses)
    assert expectation.less_for(1.6e18, (1.0, 16.0)) > 0 and expectation.less_for(1e17, ()) == 0
    reading = Reading(n_opt=1.0, lo=0.5, hi=2.0, half=lambda r, m: 0.2 * math.log(r), optimum=lambda b: 4.0,
                      losses=losses, expected=expectation)
    (choice,) = next_choices(trained, pool, spend, 6.4e19, reading, sizes=5)
    assert (choice.budget, choice.sizes) == (1.6e18, (1.0, 16.0)) and choice.score > 0
    assert "less noisy optimum" in choice.reason and "expected" in choice.reason


def test_with_a_rule_the_design_buys_the_cheapest_set_expected_to_meet_it():
    """Per FLOP a cheap split below the target's reach wins, yet only the largest budget's shorter reach
    is expected to bring the interval within the rule: with the rule's factor the design chooses the
    cheapest set expected to meet it (ml-scalefit's Chinchilla trained 6e20, 1e21 and 1e20 before the
    3e21 its rule needed: 57% of the FLOPs)."""
    sizes = [1.0, 2.0, 4.0, 8.0, 16.0]
    pool = {b: sizes for b in (1e17, 2e17, 4e17, 8e17, 1.6e18, 3.2e18, 6.4e18)}
    spend = lambda keys: sum(b for b, _ in set(keys))  # noqa: E731
    trained = [(b, s) for b in (1e17, 2e17, 4e17, 8e17) for s in sizes]
    losses = {(b, s): 3.0 + 0.1 * math.log(s / 4.0) ** 2 for b, s in trained}
    reading = _bound_reading(trained, losses, 10.0)  # a bound far away: the error model alone
    target, expected = 6.4e19, reading.expected
    reach = expected.half(target / 6.4e18, 1)
    assert expected.half(target / 3.2e18, 2) > reach  # the two cheaper budgets together do not reach it
    (plain,) = next_choices(trained, pool, spend, target, reading, sizes=5)
    assert plain.budget != 6.4e18 and "per FLOP" in plain.reason
    (aimed,) = next_choices(trained, pool, spend, target, reading, sizes=5, goal=math.exp(reach))
    assert aimed.budget == 6.4e18 and "the cheapest of the sets" in aimed.reason
    # a goal no set is expected to meet: the most per FLOP, as without one
    (far,) = next_choices(trained, pool, spend, target, reading, sizes=5, goal=1.01)
    assert far.budget == plain.budget
