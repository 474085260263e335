"""``fit_rates`` / ``flops-fit tune --from``: the learning-rate law of a sweep over rates that
flops-fit did not train. The runs come from a generator with a known law,
lr* = 2.0 N^-0.35 D^-0.10, and losses a parabola in log rate around it (plus noise)."""

import json
import math

import numpy as np
import pandas as pd
import pytest

import flops_fit
from flops_fit.cli.main import main
from flops_fit.errors import FitInputError
from flops_fit.tuning.from_runs import heldout_check, measured_loss

M, E_N, E_D = 2.0, -0.35, -0.10
RATES = [1e-4 * 2 ** k for k in range(9)]


def true_rate(n, d):
    return M * n ** E_N * d ** E_D


def sweep(noise=2e-4, seed=0):
    """Four sizes x three token counts, each at nine rates; loss = floor + 0.02 log(lr/lr*)^2."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in (1e6, 2e6, 4e6, 8e6):
        for ratio in (5, 20, 80):
            d = ratio * n
            for k, lr in enumerate(RATES):
                floor = 2.0 + 50 / n ** 0.3 + 400 / d ** 0.3
                loss = floor + 0.02 * math.log(lr / true_rate(n, d)) ** 2 + rng.normal(0, noise)
                rows.append({"N": n, "D": d, "peak_lr": lr, "val": loss, "name": f"n{n:g}-d{d:g}-{k}"})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def fitted():
    return flops_fit.fit_rates(sweep(), params_col="N", tokens_col="D", lr_col="peak_lr", loss_col="val",
                               run_id_col="name", bootstrap=100)


def test_every_cell_finds_its_best_rate_with_an_interval(fitted):
    assert len(fitted.cells) == 12 and all(c.fit.ok for c in fitted.cells)
    for c in fitted.cells:
        truth = true_rate(c.params, c.tokens)
        assert c.fit.lr_opt == pytest.approx(truth, rel=0.1)
        assert c.fit.lr_lo < c.fit.lr_opt < c.fit.lr_hi


def test_bjorcks_form_recovers_the_known_exponents_within_its_intervals(fitted):
    bjorck = fitted.forms["bjorck"]
    for variable, truth in (("params", E_N), ("tokens", E_D)):
        c = bjorck.exponents[variable]
        assert c.lo <= truth <= c.hi and c.value == pytest.approx(truth, abs=0.03)
    assert set(fitted.forms) == {"marin", "bjorck", "deepseek", "steplaw", "size"}
    assert all(f.heldout is not None for f in fitted.forms.values())
    assert fitted.chosen in fitted.forms and fitted.chosen in fitted.because


def test_the_chosen_law_predicts_the_known_rate(fitted):
    for n, d in ((3e6, 1e8), (8e6, 6.4e8)):
        assert fitted.rate(n, d) == pytest.approx(true_rate(n, d), rel=0.15)


def test_hparams_plans_like_a_tunes(fitted, tmp_path):
    """The planner's rate for each run is the law's rate at that run (hparams = DIR)."""
    folder = tmp_path / "law"
    fitted.write(folder)
    data = json.loads((folder / "hparams.json").read_text())
    assert data["format"] == "flops-fit-hparams/2" and data["chosen"] == fitted.chosen and data["model"] is None
    planned = flops_fit.plan(model="gpt", budgets=[4e8], sizes=[8, 12, 16], seq_len=16, batch_size=8, min_steps=5,
                             model_config={"n_layer": 1, "n_head": 1},
                             hparams={"tuned": str(folder), "beyond": "extrapolate"})
    for run in planned.runs:
        flops = run.flops if fitted.chosen == "deepseek" else None
        expected = fitted.rate(run.params, run.tokens, nonembedding=run.params - (run.embedding_params or 0),
                               flops=flops)
        assert run.lr == pytest.approx(expected, rel=1e-9)
        assert run.lr_source.startswith("tuned:")


def test_repeated_runs_at_one_rate_are_averaged():
    frame = sweep(noise=0)
    repeat = frame.iloc[[3]].assign(val=frame.val.iloc[3] + 0.2, name="again")
    frame.loc[3, "val"] -= 0.2
    fitted = flops_fit.fit_rates(pd.concat([frame, repeat]), params_col="N", tokens_col="D", lr_col="peak_lr",
                                 loss_col="val", run_id_col="name", bootstrap=0)
    cell = next(c for c in fitted.cells if c.params == frame.N.iloc[3] and c.tokens == frame.D.iloc[3])
    assert len(cell.fit.rates) == len(RATES) and len(cell.run_ids) == len(RATES) + 1
    assert cell.fit.losses[3] == pytest.approx(sweep(noise=0).val.iloc[3])


def test_runs_averaged_across_a_batch_column_not_read_are_said():
    """A table whose runs were trained at two batch sizes, --batch-col not given: each rate's two runs were averaged
    into one cell without a word, the law fitted to the mix. It now says how many rates were averaged, one's losses,
    and how to fit them apart; given --batch-col, each batch is its own cell and nothing was averaged."""
    frame = sweep(noise=0)
    other = frame.assign(val=frame.val + 0.05, name=frame.name + "-b64", batch=64)
    both = pd.concat([frame.assign(batch=32), other], ignore_index=True)
    options = {"params_col": "N", "tokens_col": "D", "lr_col": "peak_lr", "loss_col": "val", "run_id_col": "name",
               "bootstrap": 0}
    fitted = flops_fit.fit_rates(both, **options)
    note = next(n for n in fitted.notes if "averaged" in n)
    first = frame.sort_values(["N", "D", "peak_lr"]).iloc[0]
    assert note.startswith(f"{len(frame)} rate(s) of a cell were trained more than once and their losses averaged "
                           f"(e.g. 1M x 5M at lr 0.0001: {first.val:.4g}, {first.val + 0.05:.4g}): ")
    assert "--batch-col COLUMN" in note and f"note: {note}" in str(fitted)
    assert not [n for n in flops_fit.fit_rates(both, batch_col="batch", **options).notes if "averaged" in n]
    assert not [n for n in flops_fit.fit_rates(frame, **options).notes if "averaged" in n]


def test_runs_that_diverged_count_as_their_cells_diverged_rates_and_are_said():
    """A lab's sweep diverges at its highest rates (loss NaN or inf): those runs are points of their cells
    without a loss (where the rates diverged), named in the fit's notes; they refused the whole fit. The note
    said they "are left out", though each is used as its cell's rate that diverged; one whose rate is not
    known is left out, and said so."""
    frame = sweep(noise=0)
    frame["val"] = frame["val"].astype(float)
    frame.loc[frame.peak_lr == RATES[-1], "val"] = [np.nan, np.inf] * 6
    lost = frame.iloc[[0]].assign(peak_lr=np.nan, val=np.nan, name="no-rate")
    fitted = flops_fit.fit_rates(pd.concat([frame, lost], ignore_index=True), params_col="N", tokens_col="D",
                                 lr_col="peak_lr", loss_col="val", run_id_col="name", bootstrap=0)
    assert all(len(c.fit.rates) == len(RATES) and math.isnan(c.fit.losses[-1]) for c in fitted.cells)
    assert fitted.notes == ["12 run(s) have no finite loss (diverged) and count as their cells' rates that diverged: no "
                            "parabola goes through them, and a best loss beside one reads as the optimum lying between "
                            "them (n1e+06-d5e+06-8: no finite loss (nan); n1e+06-d2e+07-8: no finite loss (inf); "
                            "n1e+06-d8e+07-8: no finite loss (nan); ...)",
                            "1 run(s) are not finished or have no finite loss, and are left out (no-rate: no finite "
                            "loss (nan))"]
    assert all(note in str(fitted) for note in fitted.notes)


def test_measured_loss_reads_the_cells_own_curve(fitted):
    cell = fitted.cells[0]
    between = math.sqrt(cell.fit.rates[2] * cell.fit.rates[3])
    assert measured_loss(cell, between) == pytest.approx((cell.fit.losses[2] + cell.fit.losses[3]) / 2)
    assert math.isnan(measured_loss(cell, cell.fit.rates[0] / 2))  # nothing measured there


def test_heldout_check_predicts_the_largest_cells(tmp_path):
    path = tmp_path / "runs.csv"
    sweep().to_csv(path, index=False)
    largest = sweep().eval("6 * N * D").max()
    check = heldout_check(path, held_flops=largest / 2, params_col="N", tokens_col="D", lr_col="peak_lr",
                          loss_col="val", bootstrap=0)
    assert len(check["cells"]) == 1 and check["fitted_cells"] == 11
    assert 0 <= check["cells"][0]["excess"] < 0.005


def test_cli_tune_from_writes_hparams(tmp_path, capsys):
    path = tmp_path / "runs.csv"
    sweep().to_csv(path, index=False)
    out = tmp_path / "law"
    assert main(["tune", "--from", str(path), "--out", str(out), "--params-col", "N", "--tokens-col", "D",
                 "--lr-col", "peak_lr", "--loss-col", "val", "--run-id-col", "name", "--bootstrap", "20",
                 "--model", "gpt"]) == 0
    text = capsys.readouterr().out
    assert "chosen:" in text and "bjorck" in text and str(out / "hparams.json") in text
    assert json.loads((out / "hparams.json").read_text())["model"] == "gpt"
    # the table passed where a sweep file goes (the positional): one line pointing at --from, nothing trained
    for runs in (path, out):
        assert main(["tune", str(runs), "--out", str(tmp_path / "again")]) == 2
        assert f"{runs} holds runs, not a sweep file to train from" in capsys.readouterr().err
    assert not (tmp_path / "again").exists()
    # status on the law's folder said "no sweep store ...: run a sweep with --out FOLDER first", as if it were empty
    for json_flag in ([], ["--json"]):
        assert main(["status", *json_flag, str(out)]) == 2
        assert capsys.readouterr().err.strip() == (
            f"flops-fit: error: {out} holds a learning-rate law (hparams.json, as `flops-fit tune --from` writes it) "
            f"and no sweep, so there is no status to show: a sweep uses the law with `flops-fit sweep SPEC --hparams {out}`")


@pytest.mark.parametrize("args, message", [
    # the columns named are the table's own (they were the fit's renamed ones, without 'peak_lr' among them)
    (["--lr-col", "rate"], "no lr column 'rate'; available columns: 'N', 'D', 'peak_lr', 'val', 'name'.*--lr-col"),
    ([], "no lr column 'lr'; available columns: 'N', 'D', 'peak_lr', 'val', 'name'.*--lr-col"),
    (["--lr-col", "peak_lr", "--batch-col", "bs"], "no batch column 'bs'; available columns: 'N', .*--batch-col"),
    (["--lr-col", "peak_lr", "--loss-col", "nope"], "no loss column 'nope'"),
])
def test_cli_tune_from_bad_columns_one_line(tmp_path, capsys, args, message):
    path = tmp_path / "runs.csv"
    sweep().to_csv(path, index=False)
    assert main(["tune", "--from", str(path), "--out", str(tmp_path / "o"), "--params-col", "N", "--tokens-col", "D",
                 "--loss-col", "val", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and __import__("re").search(message, err)
    assert not (tmp_path / "o" / "hparams.json").exists()


def test_too_few_rates_says_how_to_fix():
    frame = sweep()
    frame = frame[frame.peak_lr.isin(RATES[:2])]
    with pytest.raises(FitInputError, match="sweep at least 3 rates"):
        flops_fit.fit_rates(frame, params_col="N", tokens_col="D", lr_col="peak_lr", loss_col="val", bootstrap=0)


def test_one_cell_swept_says_to_sweep_another_not_more_rates():
    """A sweep of one (params, tokens) cell at six rates, its optimum inside them, was told to "sweep at least 3
    rates per cell around its best (1M x 5M: None)": the reason of a cell that has its best rate. The refusal
    now says the law needs a second cell."""
    frame = sweep()
    frame = frame[(frame.N == 1e6) & (frame.D == 20e6)]
    with pytest.raises(FitInputError, match=r"1 of 1 cells have their best rate inside the rates tried \(the law "
                                            r"needs 2\): sweep the rates at a second size or token count") as caught:
        flops_fit.fit_rates(frame, params_col="N", tokens_col="D", lr_col="peak_lr", loss_col="val", bootstrap=0)
    assert "None" not in str(caught.value)


def test_an_unknown_option_is_named():
    with pytest.raises(FitInputError, match="unknown option.*lr_column.*params_col"):
        flops_fit.fit_rates(sweep(), lr_column="peak_lr")


def test_fit_keeps_each_cells_best_rate_and_says_why(tmp_path, capsys):
    """A sweep over rates given to `fit`: the mistuned runs are left out, each with its reason."""
    frame = sweep().rename(columns={"peak_lr": "lr"})
    runs = flops_fit.load_runs(frame, params_col="N", tokens_col="D", loss_col="val", run_id_col="name")
    assert len(runs) == 12 and len(runs.excluded) == 12 * (len(RATES) - 1)
    best = frame.loc[frame.groupby(["N", "D"])["val"].idxmin()]
    assert sorted(runs.frame["run_id"]) == sorted(best["name"])
    assert "is not its cell's best" in runs.excluded[0]["reason"] and "tune --from" in runs.excluded[0]["reason"]
    everything = flops_fit.load_runs(frame, params_col="N", tokens_col="D", loss_col="val", all_rates=True)
    assert len(everything) == len(frame)


def test_the_run_files_tune_refuses_as_a_sweep_file_are_the_ones_from_reads():
    """The CLI keeps its own list (so `flops-fit --help` imports no fitting): it must not drift
    from the tables fit and tune --from read, besides a W&B run file."""
    from flops_fit.cli.tune import RUN_FILES
    from flops_fit.fitting.inputs import TABLES

    assert set(RUN_FILES) == set(TABLES) | {".wandb"}


def test_a_law_from_runs_refused_beyond_its_reach_offers_only_what_it_can_do(fitted, tmp_path):
    """The refusal offered beyond = "centre" (the tune's centre rule), which a law fitted from runs has not:
    following it gave a second refusal ("records no centre rule")."""
    folder = tmp_path / "law"
    fitted.write(folder)
    options = {"model": "gpt", "budgets": [4e8], "sizes": [8, 12, 16], "seq_len": 16, "batch_size": 8, "min_steps": 5,
               "model_config": {"n_layer": 1, "n_head": 1}}
    with pytest.raises(flops_fit.PlanError) as caught:
        flops_fit.plan(**options, hparams={"tuned": str(folder)})
    assert str(caught.value).endswith('tune at larger budgets or sizes, or set [hparams] beyond = "extrapolate"')
    assert "centre" not in str(caught.value)
    assert flops_fit.plan(**options, hparams={"tuned": str(folder), "beyond": "extrapolate"}).runs


def test_tune_from_never_replaces_a_tunes_law(tmp_path, capsys):
    """tune --from into a tune's folder replaced the law its trained grid gave with the runs' law, silently;
    a law fitted from runs is replaced by a refit (the runs are still there to give it again)."""
    path = tmp_path / "runs.csv"
    sweep().to_csv(path, index=False)
    args = ["--params-col", "N", "--tokens-col", "D", "--lr-col", "peak_lr", "--loss-col", "val", "--bootstrap", "0"]
    law = tmp_path / "law"
    assert main(["tune", "--from", str(path), "--out", str(law), *args]) == 0
    assert main(["tune", "--from", str(path), "--out", str(law), *args]) == 0  # its own refit: replaced
    tuned = json.loads((law / "hparams.json").read_text())
    tuned["tune"] = {"multipliers": [0.25, 1, 4]}  # as `flops-fit tune SPEC` writes its law
    (tmp_path / "tune").mkdir()
    (tmp_path / "tune" / "hparams.json").write_text(json.dumps(tuned))
    before = (tmp_path / "tune" / "hparams.json").read_text()
    capsys.readouterr()
    assert main(["tune", "--from", str(path), "--out", str(tmp_path / "tune"), *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "holds a tune's law (or one written by hand)" in err
    assert (tmp_path / "tune" / "hparams.json").read_text() == before


def test_a_cell_whose_best_rate_trained_next_to_one_that_diverged_says_so():
    """tune --from: load_runs dropped the runs without a finite loss before the cells were built, so a cell
    whose best rate trained just below one that diverged read as "best at the highest rate tried: widen the
    multipliers upwards" (wider rates only diverge again), never "try rates between them"."""
    frame = sweep(noise=0)
    frame["val"] = frame["val"].astype(float)
    n, d = 1e6, 5e6
    cell = (frame.N == n) & (frame.D == d)
    best = frame.loc[cell, "val"].idxmin()
    frame.loc[cell & (frame.peak_lr > frame.peak_lr[best]), "val"] = np.nan  # every rate above its best diverged
    fitted = flops_fit.fit_rates(frame, params_col="N", tokens_col="D", lr_col="peak_lr", loss_col="val",
                                 run_id_col="name", bootstrap=0)
    [diverging] = [c for c in fitted.cells if (c.params, c.tokens) == (n, d)]
    above = RATES[RATES.index(frame.peak_lr[best]) + 1]
    assert diverging.fit.rates == RATES and math.isnan(diverging.fit.losses[-1])
    assert diverging.fit.reason.startswith(f"diverged next to its best: the best loss is at the highest rate that "
                                           f"trained ({frame.peak_lr[best]:.3g}) and {above:.3g} above it")
    assert sum(c.fit.ok for c in fitted.cells) == len(fitted.cells) - 1  # the others fit as before


def test_tune_from_a_sweep_folder_counts_its_diverged_runs_as_the_tune_does(tmp_path):
    """A flops-fit store swept over rates, its highest rate diverged in each cell (status failed, error
    "diverged: ..."): `flops-fit tune` counts such a run as its cell's rate that diverged, but `tune --from`
    the same folder left it out as "status 'failed'", so a cell whose best trained next to it read as "best
    at the highest rate tried: widen the multipliers upwards", where the tune said to try rates between."""
    from dataclasses import replace

    import sweep_support

    from flops_fit.store.run_store import RunStore
    from flops_fit.store.runs import RunResult
    from flops_fit.sweeps.planner import plan

    swept = plan(host=sweep_support.host(), **sweep_support.small_plan_options(schedule="cosine"))
    base = swept.runs[:3]
    swept.runs[:] = [replace(r, run_id=f"{r.run_id}-{k}", lr=1e-3 * 3 ** k) for r in base for k in range(4)]
    with RunStore(tmp_path, create=True) as store:
        store.add_plan(swept, spec=swept.settings)
        for i, r in enumerate(swept.runs):
            k, best = i % 4, 2.2 if i // 4 == 2 else 1.2  # the last cell's best trained next to the rate that diverged
            result = (RunResult(r.run_id, "failed", error="diverged: loss is nan at step 3") if k == 3 else
                      RunResult(r.run_id, "done", loss=3.0 + 0.02 * (k - best) ** 2, tokens=r.tokens, flops=r.flops,
                                steps=r.steps))
            store.mark_running(r.run_id)
            store.record(result)
    fitted = flops_fit.fit_rates(tmp_path, bootstrap=0)
    assert [len(c.fit.rates) for c in fitted.cells] == [4, 4, 4]
    assert [c.fit.ok for c in fitted.cells] == [True, True, False]
    assert [c.flops for c in fitted.cells] == pytest.approx([r.flops for r in base])  # the FLOPs its runs trained
    assert fitted.cells[2].fit.reason.startswith("diverged next to its best")
    assert fitted.notes[0].startswith("3 run(s) have no finite loss (diverged) and count as their cells' rates")
    with RunStore(tmp_path) as store:  # a run that failed for another reason (a crash) is still left out
        store.db.execute("UPDATE runs SET error = 'RuntimeError: CUDA error' WHERE run_id = ?", (swept.runs[3].run_id,))
    assert [len(c.fit.rates) for c in flops_fit.fit_rates(tmp_path, bootstrap=0).cells] == [3, 4, 4]


def test_tune_from_reads_a_failed_run_as_diverged_by_what_it_recorded_not_its_errors_first_word(tmp_path):
    """`tune --from` read a failed run as its rate diverging only when its error began "diverged": an external
    trainer's "non-finite loss: ..." or a lab's `record --result` saying "loss is NaN at step 40" was dropped as
    a crash, so the cell's best beside it read as "best at the highest rate tried". A failed run is read by what
    it recorded (an error naming a non-finite or diverged loss, a training curve that blows up, an infinite
    loss); a crash for another reason (out of memory) is left out and said to be, each run named with how."""
    from dataclasses import replace

    import sweep_support

    from flops_fit.store.outside import record_result
    from flops_fit.store.run_store import RunStore
    from flops_fit.sweeps.planner import plan

    swept = plan(host=sweep_support.host(), **sweep_support.small_plan_options(schedule="cosine"))
    base = swept.runs[:3]
    rated = [replace(r, lr=1e-3 * 3 ** k) for r in base for k in range(5)]
    swept.runs[:] = [replace(r, run_id=r.compute_id()) for r in rated]  # ids that hash: `record` checks them
    with RunStore(tmp_path, create=True) as store:
        store.add_plan(swept, spec=swept.settings)
    top = {
        0: {"status": "failed", "error": "non-finite loss: the script reported a held-out loss of nan"},
        1: {"status": "failed", "error": "loss is NaN at step 40"},
        2: {"status": "failed", "error": "killed", "curve": [[100, 5.5], [200, 3.1], [300, 9.8]]},
    }
    for i, r in enumerate(swept.runs):
        k, cell = i % 5, i // 5
        if k == 4:  # the highest rate blew up, each cell's recorded its own way
            record_result(tmp_path, r.run_id, top[cell])
        elif k == 3 and cell == 0:  # a crash at a rate that trained in the other cells: no verdict on it
            record_result(tmp_path, r.run_id, {"status": "failed", "error": "CUDA out of memory",
                                               "curve": [[100, 5.5], [200, 3.4]]})
        else:
            record_result(tmp_path, r.run_id, {"loss": 3.0 + 0.02 * (k - 2) ** 2, "tokens": r.tokens})
    fitted = flops_fit.fit_rates(tmp_path, bootstrap=0)
    assert [len(c.fit.rates) for c in fitted.cells] == [4, 5, 5]  # the crash left out, every blow-up counted
    assert [c.fit.ok for c in fitted.cells] == [False, True, True]  # cell 0's best trained next to the gap
    assert all(math.isnan(c.fit.losses[-1]) for c in fitted.cells)
    said = " ".join(fitted.notes)
    assert fitted.notes[0].startswith("3 run(s) have no finite loss (diverged) and count as their cells' rates")
    ids = [r.run_id for r in swept.runs]
    assert f"{ids[4]}: error 'non-finite loss: the script reported a held-out loss of nan'" in said
    assert f"{ids[9]}: error 'loss is NaN at step 40'" in said
    assert f"{ids[14]}: its training loss rose from 3.1 to 9.8" in said
    assert (f"1 unfinished run(s) record no loss that blew up (no infinite or rising loss, no error naming one) and "
            f"are left out, not read as their rates diverging ({ids[3]}: status 'failed': CUDA out of memory)") in said


def test_a_held_out_excess_is_never_printed_below_zero():
    """A loss at a predicted rate is never below its cell's parabola's vertex; rounding made one -1e-16, and the
    tune --from printout chose a form for its '-0.00%' held-out excess, as if it beat the optimum."""
    rows = []
    for n in (1e4, 2e4, 4e4):
        for d in (2e5, 8e5):
            for b in (32, 64):
                best = 0.5 * n ** -0.5 * d ** 0.05 * (b / 32) ** 0.5
                for m in (0.25, 0.5, 1, 2, 4, 8):
                    lr = 0.5 * n ** -0.5 * d ** 0.05 * m
                    rows.append({"params": n, "tokens": d, "lr": lr, "batch": b, "loss": 2 + 400 / n ** 0.3 + 800 /
                                 d ** 0.3 + 0.05 * math.log(lr / best) ** 2 + 0.01 * abs(math.log(b / 48))})
    fitted = flops_fit.fit_rates(pd.DataFrame(rows), batch_col="batch", bootstrap=20)
    scored = [f for f in fitted.forms.values() if "excess" in (f.heldout or {})]
    best = min(scored, key=lambda f: f.heldout["excess"])
    # the form predicts the vertex itself, so its excess is 0 up to rounding, whose sign is the machine's
    # (-1e-16 on some CPUs, 0.0 on others): the printout is checked on the negative case either way
    assert abs(best.heldout["excess"]) < 1e-12
    best.heldout["excess"] = -1e-16
    text = str(fitted)
    assert "-0.00%" not in text and "lowest held-out excess (+0.00% on the largest budget's cells)" in text
