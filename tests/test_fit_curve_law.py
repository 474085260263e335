"""The curve law: synthetic WSD sweeps whose every curve point follows a known law, written
here step by step (not with the module's own areas), are fitted back."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from flops_fit.errors import FitInputError
from flops_fit.fitting import APPROACHES, fit, load_runs
from flops_fit.fitting.approaches.curve_law import CurveLaw

TRUTH = {"E": 1.2, "A": 40.0, "alpha": 0.34, "B": 60.0, "beta": 0.3, "F": 500.0, "C": 0.25, "tau": 40.0,
         "delta": 0.06}
PER_STEP = 4096  # tokens per step: batch 64 x sequence 64


def law_curve(n: float, steps: int, warmup: int, cooldown_start: int, truth: dict) -> tuple[np.ndarray, float]:
    """Per-step training loss of one WSD run (1-sqrt cooldown) and its held-out loss after the last step."""
    lam = math.exp(-1.0 / truth["tau"])
    s1 = ema = 0.0  # S1 in tokens, ema = the lagged cut in the rate (S2)
    loss = np.empty(steps)
    for t in range(steps):
        lr = (t + 1) / warmup if t < warmup else (
            1.0 if t < cooldown_start else 1.0 - math.sqrt((t - cooldown_start) / (steps - cooldown_start)))
        s1_eff = max(s1, PER_STEP)
        loss[t] = (truth["E"] + truth["A"] * n ** -truth["alpha"] + truth["B"] * s1_eff ** -truth["beta"]
                   + truth["F"] * n ** -truth["alpha"] * s1_eff ** -truth["beta"] - truth["C"] * ema)
        s1 += lr * PER_STEP
        ema = lam * ema + (1 - lam) * (1.0 - (lr if t >= warmup else 1.0))
    final = (truth["E"] + truth["A"] * n ** -truth["alpha"] + truth["B"] * s1 ** -truth["beta"]
             + truth["F"] * n ** -truth["alpha"] * s1 ** -truth["beta"] - truth["C"] * ema)
    return loss, final + truth["delta"]


def synthetic_sweep(truth: dict = TRUTH, sizes=(8e3, 16e3, 32e3, 64e3, 128e3), budgets=(2e11, 4e11, 8e11),
                    points: int = 40, noise: float = 0.0, seed: int = 0) -> pd.DataFrame:
    """WSD families (one per size, a branch per budget) with ``points`` curve points per run."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, n in enumerate(sizes):
        steps_of = {c: max(40, round(c / (6 * n) / PER_STEP)) for c in budgets}
        warmup = max(1, round(0.05 * min(steps_of.values())))
        for c, steps in steps_of.items():
            start = steps - max(1, round(0.2 * steps))
            per_step_loss, final = law_curve(n, steps, warmup, start, truth)
            interval = math.ceil(steps / points)
            ends = sorted({*range(interval, steps + 1, interval), steps})
            begins = [0, *ends[:-1]]
            curve = [[e * PER_STEP, float(per_step_loss[b:e].mean() * math.exp(rng.normal(0, noise)))]
                     for b, e in zip(begins, ends, strict=True)]
            rows.append({"run_id": f"s{i}-{c:.0e}", "model": "toy", "size": i, "params": n, "tokens": steps * PER_STEP,
                         "flops": 6 * n * steps * PER_STEP, "budget": c, "lr": 1e-2 * (n / 1e4) ** -0.5,
                         "loss": final * math.exp(rng.normal(0, noise)), "curve": curve,
                         "schedule": {"schedule": "wsd", "steps": steps, "warmup_steps": warmup,
                                      "cooldown_start": start, "cooldown_shape": "1-sqrt", "min_lr_ratio": 0.1,
                                      "batch_size": 64, "seq_len": 64}})
    return pd.DataFrame(rows)


def brute_frontier(truth: dict, budget: float) -> tuple[float, float]:
    """(N_opt, loss) at ``budget`` by training the law step by step over a fine ladder of sizes."""
    best = (math.inf, math.nan)
    for n in np.geomspace(5e4, 4e5, 41):
        steps = round(budget / (6 * n) / PER_STEP)
        _, final = law_curve(n, steps, max(1, round(0.05 * steps)), steps - max(1, round(0.2 * steps)), truth)
        best = min(best, (final, n))
    return best[1], best[0]


@pytest.fixture(scope="module")
def exact_fit():
    return CurveLaw(bootstrap=0).fit(load_runs(synthetic_sweep()))


def test_exact_curves_give_back_the_law(exact_fit):
    p = exact_fit.params
    for name in ("alpha", "beta"):
        assert p[name] == pytest.approx(TRUTH[name], abs=0.02), name
    assert p["F"] == pytest.approx(TRUTH["F"], rel=0.1)
    for name in ("E", "C", "delta"):
        assert p[name] == pytest.approx(TRUTH[name], abs=0.03), name
    assert p["tau"] == pytest.approx(TRUTH["tau"], rel=0.15)
    assert exact_fit.diagnostics.r2 > 0.999


def test_frontier_matches_brute_force_over_sizes(exact_fit):
    budget = 3e12  # beyond the sweep's largest budget
    n_opt, loss = brute_frontier(TRUTH, budget)
    row = exact_fit.predict(budget).iloc[0]
    assert row.loss == pytest.approx(loss, rel=3e-3)
    assert row.N_opt == pytest.approx(n_opt, rel=0.08)


def test_noisy_sweep_fits_through_fit_with_bootstrap_intervals():
    frame = synthetic_sweep(noise=0.004, seed=1)
    result = fit(frame, method="curve", bootstrap=20, seed=0)
    table = result.intervals()
    assert table.loc["alpha", "lo"] <= TRUTH["alpha"] <= table.loc["alpha", "hi"]
    assert len(result.samples) == 20 and {"a", "b", "k"} <= set(result.samples)
    row = result.predict(3e12).iloc[0]
    assert row.loss_lo <= row.loss <= row.loss_hi and row.N_opt_lo < row.N_opt < row.N_opt_hi
    assert "curve" in APPROACHES


def test_a_subset_of_runs_fits():
    runs = load_runs(synthetic_sweep())
    keep = runs.frame["budget"].to_numpy() < 8e11
    result = CurveLaw(bootstrap=0).fit(runs.subset(keep))
    assert result.params["beta"] == pytest.approx(TRUTH["beta"], abs=0.03)


def test_runs_without_schedules_are_refused_in_one_line():
    frame = synthetic_sweep().drop(columns=["schedule"])
    with pytest.raises(FitInputError, match="learning-rate schedule"):
        CurveLaw(bootstrap=0).fit(load_runs(frame))


def test_a_branch_not_trained_is_predicted_from_its_stable_phase():
    from flops_fit.fitting.inputs import Runs

    frame = synthetic_sweep(noise=0.002, seed=2)
    longest = int(frame[frame["size"] == 2]["tokens"].idxmax())
    row = frame.loc[longest]
    truth = row["loss"]
    stable = row["schedule"]["cooldown_start"] * PER_STEP
    frame.at[longest, "curve"] = [p for p in row["curve"] if p[0] <= stable]  # the stable phase only
    frame.at[longest, "loss"] = np.nan  # and no held-out loss: its cooldown was never trained
    result = CurveLaw(bootstrap=0).fit(Runs(frame=frame, source="synthetic"))
    predicted = result.final_losses(frame.loc[[longest]])[0]
    assert predicted == pytest.approx(truth, rel=0.01)
