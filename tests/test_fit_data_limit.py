"""The data-constrained law (Muennighoff et al. 2023): recovered from runs that repeat a known corpus."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import flops_fit
from flops_fit.cli.main import main
from flops_fit.fitting import load_runs
from flops_fit.fitting.approaches.data_limit import PAPER_R_STAR, effective_data
from flops_fit.fitting.laws.laws import law_loss
from flops_fit.fitting.synthetic import DEFAULT_LAW, synthetic_runs

LAW = {**DEFAULT_LAW, "r_star": 15.0}
U = 3e8  # the runs' 0.1-850 epochs of it span fresh data, the knee and the plateau


@pytest.fixture(scope="module")
def repeating():
    return synthetic_runs(LAW, budgets=(1e17, 1e18, 1e19, 1e20, 1e21), sizes_per_budget=7, noise=0.003,
                          unique_tokens=U, seed=0)


@pytest.fixture(scope="module")
def fitted(repeating):
    return flops_fit.fit(repeating, "vpnls", bootstrap=30, unique_tokens=U, tracking=False)


def test_effective_data_is_the_papers_formula():
    assert effective_data(np.array([1e8, 3e8]), U, 15.0) == pytest.approx([1e8, 3e8])  # no repeat: D itself
    # 4 epochs (R = 3): U + U R* (1 - exp(-3/15)), about 3.72 U: nearly all of it still counts
    assert effective_data(4 * U, U, 15.0) == pytest.approx(U * (1 + 15 * (1 - np.exp(-0.2))))
    assert effective_data(1e6 * U, U, 15.0) == pytest.approx(16 * U)  # the plateau: U (1 + R*)


def test_recovers_the_decay_constant_and_the_exponents(fitted):
    assert fitted.method == "data-limited"
    table = fitted.intervals()
    for name in ("r_star", "alpha", "beta"):
        row = table.loc[name]
        assert row.lo <= LAW[name] <= row.hi, (name, row.estimate, row.lo, row.hi)
    assert table.loc["r_star", "estimate"] == pytest.approx(15.0, rel=0.15)
    assert "U" not in table.index and fitted.params["U"] == U
    assert fitted.details["repeated_runs"] > 0


def test_the_forecast_respects_the_data_budget(repeating, fitted):
    """Chinchilla's law, blind to repeats, promises a loss the corpus cannot buy."""
    blind = flops_fit.fit(repeating, "vpnls", bootstrap=0, tracking=False)
    at = fitted.predict(1e22).iloc[0]
    n, d = at.N_opt, at.D_opt
    truth = law_loss(LAW, n, effective_data(d, U, LAW["r_star"]))
    assert at.loss == pytest.approx(truth, rel=0.01)
    assert blind.predict(1e22).iloc[0].loss < at.loss_lo  # over-promised
    sized = fitted.predict(1e22, inference_tokens=1e12).iloc[0]  # sizing reads the same law
    assert sized.loss == pytest.approx(at.loss) and 0 < sized.saving < 1


def test_without_repeats_the_papers_decay_constant_is_used():
    runs = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7, seed=1)
    result = flops_fit.fit(runs, "vpnls", bootstrap=0, unique_tokens=1e15, tracking=False)
    assert result.params["r_star"] == pytest.approx(PAPER_R_STAR)
    assert any("fixed at Muennighoff" in w for w in result.diagnostics.warnings)


def test_a_decay_constant_the_runs_cannot_pin_is_withheld_with_the_reason(fitted):
    """Runs that repeat data which lose no worth (Chinchilla's law at D itself, 10 runs past U):
    R* runs to its search bound (22,026, from exp(4 x 2.5)); it printed as "2.203e+04 [2.203e+04,
    2.203e+04]". Its interval is withheld and a warning says why; a measured R* is shown."""
    runs = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7, seed=1, noise=0.003)
    result = flops_fit.fit(runs, "vpnls", bootstrap=30, unique_tokens=1e9, tracking=False)
    assert result.details["repeated_runs"] == 10 and result.details["on_bound"] == ["r_star"]
    assert result.params["r_star"] == pytest.approx(np.exp(4 * 2.5))
    row = next(line for line in result.summary().splitlines() if line.startswith("r_star"))
    assert row.split()[2:] == ["[withheld:", "fitted", "on", "its", "search", "bound]", "withheld"]
    assert any(w.startswith("R* = 2.203e+04 sits on its search bound (1.04 to 22,026)")
               for w in result.diagnostics.warnings)
    assert fitted.details["on_bound"] == []
    shown = next(line for line in fitted.summary().splitlines() if line.startswith("r_star"))
    assert "withheld" not in shown


def test_a_sweeps_recorded_budget_is_used_once_runs_repeat(repeating):
    runs = load_runs(repeating)
    runs.metadata["unique_tokens"] = U
    everything = flops_fit.fit(runs, "all", bootstrap=0, tracking=False)
    assert "data-limited" in everything.results and "vpnls" in everything.results
    runs.metadata["unique_tokens"] = 1e15  # no run repeats: the ordinary law
    assert flops_fit.fit(runs, "vpnls", bootstrap=0, tracking=False).method == "vpnls"


@pytest.mark.parametrize("method", ["isoflop", "interaction"])
def test_a_data_budget_for_a_method_that_cannot_respect_it_is_refused(repeating, method, tmp_path, capsys):
    """--method isoflop --unique-tokens U fitted isoflop, every token read as fresh data, and said nothing of U:
    the data budget asked for was dropped without a word. Refused now, before the fit, naming the way out."""
    with pytest.raises(flops_fit.FitInputError, match=f"{method} reads every token as fresh data and would ignore it"):
        flops_fit.fit(repeating, method, unique_tokens=U, bootstrap=0, tracking=False)
    csv = tmp_path / "runs.csv"
    repeating.drop(columns="curve").to_csv(csv, index=False)
    assert main(["fit", str(csv), "--method", method, "--unique-tokens", str(U), "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flops-fit: error: unique_tokens fits the data-constrained law") and err.count("\n") == 1
    assert "--method" in err and "leave out unique_tokens (--unique-tokens)" in err


def test_refusals(repeating):
    for bad in (-5, 0.5):  # half a token was accepted as a data budget
        with pytest.raises(flops_fit.FitInputError, match="unique_tokens must be a number of tokens, at least 1"):
            flops_fit.fit(repeating, "vpnls", unique_tokens=bad, tracking=False)
    with pytest.raises(flops_fit.FitInputError, match="chosen by the data budget"):
        flops_fit.fit(repeating, "data-limited", unique_tokens=U, tracking=False)


def test_the_decide_page_quotes_this_fit(fitted):
    """docs/guide/decide.md quoted R* = 15.4 [13.3, 18.4] and beta [0.346, 0.383], typed from an
    earlier fit: each figure it quotes is this fit's, rounded to the digits it shows."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "decide.md").read_text()
    quoted = re.search(r"R\* = (\S+) \[(\S+), (\S+)\], alpha (\S+) \[(\S+), (\S+)\], beta (\S+) \[(\S+), (\S+)\]",
                       " ".join(page.split()))
    assert quoted, "decide.md no longer quotes the data-constrained fit"
    table = fitted.intervals()
    stored = [table.loc[name, column] for name in ("r_star", "alpha", "beta") for column in ("estimate", "lo", "hi")]
    for printed, value in zip(quoted.groups(), stored, strict=True):
        digits = len(printed.replace(".", "").lstrip("0"))
        assert abs(float(printed) / value - 1) <= 0.5 * 10 ** (1 - digits) + 1e-12, (printed, value)


def test_a_data_budget_beyond_every_run_is_said_as_a_count():
    """unique_tokens=1e30 printed its warning with a 31-digit number ("the 1,000,000,...,000 unique
    tokens"); the count reads as counts do everywhere else."""
    result = flops_fit.fit(Path(__file__).parent / "data" / "demo_runs.csv", "vpnls", bootstrap=0, tracking=False, unique_tokens=1e30)
    assert "warning: no run trains on more than the 1e+30 unique tokens: R* is not measured here" in result.summary()


def test_answers_none_of_which_prices_the_repeats_say_so(tmp_path, capsys):
    """``data/repeating_sweep.csv``: 12 runs of llama on six files of eight words repeated (bpe:300, 2,240
    unique tokens, up to 326 epochs; the budgets and sizes of ``weak_sweep.csv``). Only the envelope
    answers, and `fit --method all` printed its answer with no word that the runs repeat their data;
    the data-limited law's failure was the only trace. Now a note under the answer says it."""
    from pathlib import Path


    runs = Path(__file__).parent / "data" / "repeating_sweep.csv"
    assert main(["fit", str(runs), "--method", "all", "--unique-tokens", "2240", "--bootstrap", "50",
                 "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "skipped data-limited: failed" in out and "\nenvelope  " in out
    assert out.startswith("Note: the runs repeat their data: up to 326 epochs of the 2.24k unique tokens they drew "
                          "from, and the data-limited law, which prices the repeats, gives no answer for them"), out
    fitted = flops_fit.fit(runs, method="all", unique_tokens=1e6, bootstrap=0, workers=1)  # no run repeats
    assert not any("repeat" in w for w in fitted.warnings)


def test_a_data_budget_in_other_units_is_refused(capsys):
    """`--unique-tokens 1` (or 300 meant as millions) on runs of millions of tokens fitted the data-limited
    law to runs repeating their data millions of times: an N_opt of 17.8M at 1e10 FLOPs on 93.5 tokens."""
    from pathlib import Path


    runs = Path(__file__).parent / "data" / "demo_runs.csv"  # 170k tokens and more per run
    assert main(["fit", str(runs), "--method", "vpnls", "--unique-tokens", "1", "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert err == ("flops-fit: error: unique_tokens=1 would have every run repeat its data over 10000 times (the "
                   "shortest trained 170k tokens); is it in other units (millions, billions)? Give the dataset's "
                   "unique tokens as a plain count\n")
    assert flops_fit.fit(runs, "vpnls", unique_tokens=100, bootstrap=0, tracking=False).method == "data-limited"
