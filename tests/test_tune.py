"""flops-fit tune: the per-cell parabola and the law recover known optima from synthetic
cells; a tiny real tune runs end to end into hparams.json; a sweep plans its rates from it
and records where they came from; bad input is one line and exit 2."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import flops_fit
from flops_fit.cli.main import main
from flops_fit.errors import FitInputError, OptionError, PlanError, StoreError
from flops_fit.store.run_store import RunStore
from flops_fit.sweeps import demo
from flops_fit.sweeps.config import load_config, parse_config
from flops_fit.sweeps.hparams import HyperParams
from flops_fit.sweeps.options import parse_floats, parse_ints
from flops_fit.sweeps.tuned import TunedLaw, grid_flags, stored_grid
from flops_fit.tuning.cells import fit_cell
from flops_fit.tuning.forms import FORMS, Point, fit_form, score
from flops_fit.tuning.grid import check_grid, tune_plan
from flops_fit.tuning.law import fit_batch_law, fit_law
from flops_fit.tuning.tune import Cell, fit_tune


def parabola_losses(rates, best, floor=2.0, curvature=0.05):
    return [floor + curvature * (math.log(r) - math.log(best)) ** 2 for r in rates]


def test_the_cell_parabola_finds_the_optimum_and_its_band():
    rates = list(np.geomspace(1e-3, 1e-1, 9))
    cell = fit_cell(rates, parabola_losses(rates, best=7e-3), bootstrap=0)
    assert cell.ok and cell.lr_opt == pytest.approx(7e-3, rel=1e-9)
    assert cell.loss_opt == pytest.approx(2.0, rel=1e-9)
    half = math.sqrt(0.005 * 2.0 / 0.05)  # loss within 0.5% of 2.0 on a parabola of curvature 0.05
    assert cell.band_lo == pytest.approx(7e-3 * math.exp(-half), rel=1e-9)
    assert cell.band_hi == pytest.approx(7e-3 * math.exp(half), rel=1e-9)


def test_the_cell_interval_covers_the_truth_under_noise():
    rates = list(np.geomspace(1e-3, 1e-1, 7))
    noise = np.random.default_rng(3).normal(0, 2e-3, len(rates))
    cell = fit_cell(rates, list(np.array(parabola_losses(rates, best=1e-2)) + noise), bootstrap=300, seed=1)
    assert cell.lr_lo < 1e-2 < cell.lr_hi and cell.lr_lo < cell.lr_opt < cell.lr_hi


def test_a_far_off_diverged_rate_does_not_move_the_vertex():
    rates = list(np.geomspace(1e-3, 1e-1, 9))
    losses = parabola_losses(rates, best=5e-3)
    losses[-1] = math.nan  # diverged at the highest rate
    losses[-2] = 9.0  # and nearly so below it: outside the 2 neighbours either side of the lowest point
    assert fit_cell(rates, losses, bootstrap=0).lr_opt == pytest.approx(5e-3, rel=1e-9)


@pytest.mark.parametrize("best, word", [(1e-3, "downwards"), (1e-1, "upwards")])
def test_a_cell_whose_best_rate_is_an_end_has_no_optimum(best, word):
    rates = [1e-3, 1e-2, 1e-1]
    cell = fit_cell(rates, parabola_losses(rates, best=best / 10 if word == "downwards" else best * 10))
    assert not cell.ok and word in cell.reason and math.isnan(cell.lr_opt)


def synthetic_cells(m=0.4, a=0.12, b=0.9, c=None):
    widths, tokens, batches = np.meshgrid([8, 16, 32, 64], [1e5, 4e5, 1.6e6], [16, 64] if c else [32])
    widths, tokens, batches = widths.ravel(), tokens.ravel(), batches.ravel()
    lr = m * tokens ** -a * widths ** -b * (batches ** c if c else 1)
    return widths, tokens, batches, lr


def test_the_law_recovers_known_coefficients():
    widths, tokens, batches, lr = synthetic_cells()
    law, _ = fit_law(widths, tokens, batches, lr, [np.empty(0)] * len(lr), scale="width", bootstrap=0)
    k = law.coefficients
    assert (k["m"].value, k["a"].value, k["b"].value) == pytest.approx((0.4, 0.12, 0.9), rel=1e-9)
    assert k["c"] is None and not law.notes
    assert law.rate(20, 3e5, 32) == pytest.approx(0.4 * 3e5 ** -0.12 * 20 ** -0.9, rel=1e-9)


def test_the_law_recovers_the_batch_exponent_and_its_intervals_cover_the_truth():
    widths, tokens, batches, lr = synthetic_cells(c=0.5)
    rng = np.random.default_rng(0)
    noisy = lr * np.exp(rng.normal(0, 0.05, lr.size))
    samples = [np.log(v) + rng.normal(0, 0.05, 100) for v in noisy]
    law, _ = fit_law(widths, tokens, batches, noisy, samples, scale="width", bootstrap=400, batch_swept=True)
    for name, truth in (("a", 0.12), ("b", 0.9), ("c", 0.5)):
        k = law.coefficients[name]
        assert k.lo < truth < k.hi, (name, k)
    assert law.coefficients["m"].lo < 0.4 < law.coefficients["m"].hi


def test_tokens_that_move_with_the_width_are_not_fitted_and_said_so():
    widths = np.array([8.0, 16.0, 32.0])
    tokens = 1e11 / widths ** 2  # one budget: tokens fall exactly as the width grows
    lr = 0.3 * widths ** -1.0
    law, _ = fit_law(widths, tokens, [32] * 3, lr, [np.empty(0)] * 3, scale="width", bootstrap=0)
    assert law.coefficients["a"].fitted is False and law.coefficients["a"].value == 0
    assert law.coefficients["b"].value == pytest.approx(1.0, rel=1e-9)
    assert any("a not fitted" in note and "tokens" in note for note in law.notes)


def test_a_law_through_as_many_cells_as_coefficients_states_no_residual():
    """Three cells, m, a and b: the law passes through each cell exactly, and its "rms 0.000 in
    log lr over 3 cells" said nothing about the fit; it says there is no residual instead."""
    from flops_fit.tuning.law import rms_text

    widths, tokens = np.array([8.0, 16.0, 8.0]), np.array([1e5, 5e4, 4e5])
    lr = 0.4 * tokens ** -0.1 * widths ** -0.9 * np.array([1.3, 0.8, 1.1])  # off the power law: still exact
    law, _ = fit_law(widths, tokens, [32] * 3, lr, [np.empty(0)] * 3, scale="width", bootstrap=0)
    assert math.isnan(law.rms_log) and "3 cells for 3 coefficients: no residual to judge the fit by" in law.notes
    assert rms_text(law.rms_log, law.cells) == "3 cells, no more than its coefficients: no residual"
    more, _ = fit_law([*widths, 16.0], [*tokens, 2e5], [32] * 4, [*lr, 0.01], [np.empty(0)] * 4, scale="width",
                      bootstrap=0)
    assert rms_text(more.rms_log, more.cells) == f"rms {more.rms_log:.3f} in log lr over 4 cells" and more.rms_log > 0


def test_a_form_held_out_to_one_cell_counts_1_cell_not_1_cells():
    """A tune at two budgets whose smaller budget has one cell with an optimum: its forms' held-out column read
    "once the largest budget is held out, 1 cells for 3 coefficients"."""
    def point(params, tokens, budget, lr):
        values = {"params": params, "nonembedding": params, "tokens": tokens, "flops": 6 * params * tokens, "batch": 8}
        return Point(values, lr, np.empty(0), budget, lambda rate: 2.0, 2.0)

    points = [point(3064, 21696, 4e8, 0.058), point(3064, 86800, 1.6e9, 0.043), point(7664, 34720, 1.6e9, 0.02)]
    held = {name: score(lambda rest, f=FORMS[name]: fit_form(f, rest, bootstrap=0), points)["error"]
            for name in ("bjorck", "size")}
    assert held == {"bjorck": "once the largest budget is held out, 1 cell for 3 coefficients",
                    "size": "once the largest budget is held out, 1 cell for 2 coefficients"}


def test_the_law_needs_two_cells():
    with pytest.raises(FitInputError, match="at least 2 cells"):
        fit_law([8], [1e5], [32], [1e-2], [np.empty(0)], scale="width")


def test_the_batch_law_recovers_its_exponent():
    flops = np.geomspace(1e10, 1e13, 6)
    law = fit_batch_law(flops, 0.3 * flops ** 0.33, bootstrap=0)
    assert law["k"] == pytest.approx(0.3, rel=1e-9) and law["e"] == pytest.approx(0.33, rel=1e-9)


# A GPT sweep small enough to tune in seconds: one budget, explicit sizes.
SPEC = {"sweep": {"model": "gpt", "dataset": "python-stdlib", "budgets": [4e8], "sizes": [8, 12, 16],
                  "batch_size": 8, "seq_len": 16, "eval_tokens": 512, "curve_points": 4, "min_steps": 5,
                  "device": "cpu", "checkpoint_seconds": 0},
        "model": {"n_layer": 1, "n_head": 1}, "executor": {"threads": 1}}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    out = tmp_path_factory.mktemp("tune")
    result = flops_fit.tune(SPEC, out, budgets=1, sizes=[8, 16], multipliers=[1 / 8, 1 / 2, 1],
                            skip_parity=True, show_progress=False, bootstrap=20)
    return out, result


def test_a_tiny_tune_writes_its_runs_its_law_and_its_report(tuned):
    out, result = tuned
    with RunStore(out) as store:
        frame = store.runs_frame()
    assert len(frame) == 6 and set(frame.status) == {"done"}  # 2 sizes x 3 multipliers, stored like any sweep
    assert sorted(frame.lr_source) == sorted(["tune:x0.125 marin", "tune:x0.5 marin", "tune:x1 marin"] * 2)
    marin = {8: 0.33 * math.sqrt(8) / 8, 16: 0.33 * math.sqrt(8) / 16}  # the sweep's own rule, batch 8
    for r in frame.itertuples():
        assert r.lr == pytest.approx(marin[r.size] * float(r.lr_source.split()[0].removeprefix("tune:x")), rel=1e-9)
    data = json.loads((out / "hparams.json").read_text())
    assert [c["size"] for c in data["cells"]] == [8, 16]
    for cell in data["cells"]:
        assert len(cell["rates"]) == 3 and all(math.isfinite(v) for v in cell["losses"])
        assert cell["best_loss"] == pytest.approx(min(cell["losses"]))
    assert (out / "report.html").is_file() and (out / "report_plots" / "tune_cells.svg").is_file()
    assert "size" in str(result) and "hparams.json" in str(result)
    assert data["unit"] == "token" and str(result).splitlines()[0].split()[:3] == ["size", "params", "tokens"]


def test_an_image_models_tune_counts_samples_in_its_text_and_report(tuned, tmp_path):
    """A tune of an image model (the plan's unit "sample") says samples wherever it counts the
    cells' training units: its table, grid line, held-out line and report (it said tokens)."""
    import dataclasses

    from flops_fit.tuning.report import write_tune_report

    _, result = tuned
    image = dataclasses.replace(result, data={**result.data, "unit": "sample"}, out_dir=tmp_path)
    lines = str(image).splitlines()
    assert lines[0].split()[:3] == ["size", "params", "samples"]
    assert "  (the laws' variable named tokens, D, counts the samples each run trains on)" in lines
    said = [line for line in lines if line.startswith(("grid:", "held-out"))]
    assert said and all("samples" in line and "tokens" not in line for line in said)
    page = write_tune_report(image, tmp_path).read_text()
    assert "<th>samples</th>" in page and "<th>tokens</th>" not in page


def test_the_grid_line_names_one_size_as_one_size(tuned):
    """A tune of a single size printed "grid: sizes 8-8", read as a typo; a range is still a range."""
    import dataclasses

    _, result = tuned
    cover = result.data["coverage"]
    assert f"grid: sizes 8-16 and tokens {cover['tune_tokens'][0]:,}-{cover['tune_tokens'][1]:,};" in str(result)
    one = dataclasses.replace(result, data={**result.data, "coverage": {**cover, "tune_sizes": [8, 8]}})
    assert "grid: size 8 and tokens " in str(one)


def test_a_sweep_plans_its_rates_from_the_tune(tuned):
    out, result = tuned
    data = json.loads((out / "hparams.json").read_text())
    assert all(c["in_law"] for c in data["cells"])  # both cells' best rate lies inside x1/8 ... x1
    k = data["law"]["coefficients"]
    options = {key: value for key, value in SPEC["sweep"].items() if key != "checkpoint_seconds"}
    p = flops_fit.plan(**options, model_config=SPEC["model"], hparams=str(out))
    for run in p.runs:
        expected = k["m"]["value"] * run.tokens ** -k["a"]["value"] * run.size ** -k["b"]["value"]
        assert run.lr == pytest.approx(expected, rel=1e-9)
        assert run.lr_source == f"tuned:{out}"
    assert "learning rates from the tuned law" in p.table() and "tuned" in p.table()


SPEC_FILE = ('[sweep]\nmodel = "gpt"\nbudgets = [4e8]\nsizes = [8, 12, 16]\nbatch_size = 8\nseq_len = 16\n'
             'min_steps = 5\n[model]\nn_layer = 1\nn_head = 1\n')


def test_flops_fit_plan_shows_the_tuned_rates(tuned, tmp_path, capsys):
    out, _ = tuned
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC_FILE + '[hparams]\nwarmup_fraction = 0.1\n')
    assert main(["plan", str(spec), "--hparams", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"learning rates from the tuned law in {out}" in text and " tuned " in text
    spec.write_text(SPEC_FILE.replace("min_steps = 5\n", f'min_steps = 5\nhparams = "{out}"\n'))
    assert main(["plan", str(spec)]) == 0  # the sweep-file key
    assert f"learning rates from the tuned law in {out}" in capsys.readouterr().out


def test_a_tune_resumed_with_a_larger_grid_is_refused_as_before_not_extended(tuned, tmp_path):
    """A sweep resumed with runs more grows its store (``sweeps.extend``); a tune resumes the grid it started
    with: one more multiplier is refused naming that grid, and the store keeps its runs."""
    out = tmp_path / "my-tune"
    shutil.copytree(tuned[0], out)
    with pytest.raises(StoreError, match=r"holds a tune of another grid \(6 runs; this call plans 8\): resume it with "
                                         r"the grid it was started with: --budgets 4e\+08 --sizes 8,16 --multipliers "
                                         r"0.125,0.5,1 "):
        flops_fit.tune(SPEC, out, budgets=1, sizes=[8, 16], multipliers=[1 / 8, 1 / 2, 1, 2], resume=True,
                       skip_parity=True, show_progress=False)
    with RunStore(out) as store:
        assert len(store.planned_runs()) == 6


def test_a_tune_resumed_without_its_grid_names_the_options_to_resume_with(tuned, tmp_path, capsys):
    """A killed tune run again with --resume but without its --budgets/--sizes/--multipliers planned the default
    grid and was refused as 'a different sweep ...: choose another --out folder', and status's resume command named
    no grid either: both now name the grid its runs were planned with, and that command resumes it."""
    from flops_fit.cli.sweep import _resume

    out = tmp_path / "my-tune"
    shutil.copytree(tuned[0], out)
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC_FILE.replace("min_steps = 5\n", 'min_steps = 5\neval_tokens = 512\ncurve_points = 4\n'
                                      'device = "cpu"\ncheckpoint_seconds = 0\n') + "[executor]\nthreads = 1\n")
    before = (out / "hparams.json").read_text()
    flags = ["--budgets", "4e+08", "--sizes", "8,16", "--multipliers", "0.125,0.5,1"]
    code = main(["tune", str(spec), "--out", str(out), "--resume", "--skip-parity", "--skip-preflight"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{out} holds a tune of another grid" in err and "resume it with the grid it was started with: " \
        f"{' '.join(flags)} " in err and "choose another --out folder" not in err
    assert (out / "hparams.json").read_text() == before  # nothing saved is lost
    with RunStore(out) as store:
        runs = store.planned_runs()
    assert _resume(out, runs, None) == f"flops-fit tune SPEC --out {out} {' '.join(flags)} --resume"
    assert main(["tune", str(spec), "--out", str(out), "--resume", "--skip-parity", "--skip-preflight", "--bootstrap",
                 "20", *flags]) == 0  # as named: the same runs, every one done, the law fitted again
    assert "wrote" in capsys.readouterr().out


def test_report_on_a_tune_folder_keeps_the_tunes_report(tuned, tmp_path, capsys):
    """`flops-fit report DIR` on a tune's folder wrote its fit's page over DIR/report.html, the tune's report (its
    cells and its law), without a word: it is refused in one line naming --out, and the tune's page is kept."""
    out = tmp_path / "my-tune"
    shutil.copytree(tuned[0], out)
    before = (out / "report.html").read_text()
    code = main(["report", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{out / 'report.html'} is the report of the tune in {out} (flops-fit tune): give --out PATH for this " \
        f"fit's report (e.g. --out {out / 'fit-report.html'})" in err
    assert (out / "report.html").read_text() == before


def test_status_of_a_tune_folder_says_it_is_a_tune_and_where_its_law_is(tuned, tmp_path, capsys):
    """`flops-fit status DIR` on a finished tune listed its runs as any sweep's: neither that it is a tune nor
    its hparams.json nor how a sweep uses it; without hparams.json (no law yet), the command that fits one."""
    out = tmp_path / "my-tune"
    shutil.copytree(tuned[0], out)
    assert main(["status", str(out)]) == 0
    said = capsys.readouterr().out.splitlines()
    assert f"a learning-rate tune: its law is {out / 'hparams.json'}; a sweep plans its rates from it with " \
        f"`--hparams {out}` (in a sweep file: [sweep] hparams = \"{out}\")" in said
    assert main(["status", str(out), "--json"]) == 0  # --json carries it too (it had no word of a tune)
    tune = json.loads(capsys.readouterr().out)["tune"]
    assert tune["law"] == str(out / "hparams.json") and tune["said"] in said
    (out / "hparams.json").unlink()
    assert main(["status", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"a learning-rate tune with no law yet (no {out / 'hparams.json'}): `flops-fit tune SPEC --out {out} " \
        "--budgets 4e+08 --sizes 8,16 --multipliers 0.125,0.5,1 --resume` fits it once its runs are done" in said


def test_the_grid_named_to_resume_with_plans_the_stored_runs_exactly():
    """A tune at multipliers 1/3, 1, 3 (or a budget of 7 digits) recorded 'tune:x0.333333', so the grid its refusal and
    `flops-fit status` named to resume with (--multipliers 0.333333,1,3) planned rates 1e-6 off the stored ones, and
    was refused as 'a different sweep (settings that differ: lr)': the named flags plan the very same runs."""
    options = parse_config({k: dict(v) for k, v in SPEC.items()}, "spec").options
    grid = check_grid(options, [4.1234567e8], [8], [1 / 3, 1, 3], None, None)
    stored = tune_plan(options, grid).runs
    flags = dict(zip(*[iter(grid_flags(stored_grid(stored)).split())] * 2))
    again = check_grid(options, parse_floats(flags["--budgets"]), parse_ints(flags["--sizes"]),
                       parse_floats(flags["--multipliers"]), None, None)
    assert [(r.run_id, r.lr, r.budget) for r in tune_plan(options, again).runs] == \
        [(r.run_id, r.lr, r.budget) for r in stored]


def test_a_sweep_files_relative_tune_is_read_from_the_files_folder(tuned, tmp_path, monkeypatch):
    """A sweep file names its tune relative to itself, and plans the same from any folder."""
    out, _ = tuned
    folder = tmp_path / "project"
    shutil.copytree(out, folder / "my-tune")
    (folder / "spec.toml").write_text(SPEC_FILE + '[hparams]\ntuned = "my-tune"\n')
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    config = load_config(folder / "spec.toml")
    assert config.options.hparams.tuned == str((folder / "my-tune").resolve())
    (tmp_path / "absolute.toml").write_text(SPEC_FILE + f'[hparams]\ntuned = "{out}"\n')
    lrs = [r.lr for r in flops_fit.plan(load_config(tmp_path / "absolute.toml").options).runs]
    assert [r.lr for r in flops_fit.plan(config.options).runs] == lrs
    (folder / "spec.toml").write_text(SPEC_FILE + '[hparams]\ntuned = "project/my-tune"\n')
    monkeypatch.chdir(tmp_path)  # not beside the file but from the current folder: as written (as before)
    assert load_config(folder / "spec.toml").options.hparams.tuned == "project/my-tune"


def test_hparams_naming_a_folder_without_a_tune_is_one_line(tmp_path, capsys):
    code = main(["plan", "--model", "gpt", "--budgets", "4e8", "--batch-size", "8", "--seq-len", "16",
                 "--hparams", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err == (f"flops-fit: error: hparams {str(tmp_path)!r}: no {tmp_path / 'hparams.json'} "
                                 "(a folder written by `flops-fit tune SPEC --out DIR`)\n")


def test_hparams_naming_a_tune_that_found_no_law_says_so_and_how_to_see_why(tmp_path, capsys):
    """A tune whose cells had no interior optimum leaves its runs and no hparams.json; --hparams
    on that folder said only "(a folder written by `flops-fit tune`)", which it is."""
    with RunStore(tmp_path / "my-tune", create=True):
        pass
    code = main(["plan", "--model", "gpt", "--budgets", "4e8", "--batch-size", "8", "--seq-len", "16",
                 "--hparams", str(tmp_path / "my-tune")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{tmp_path / 'my-tune'} holds runs but no law: a tune that found none wrote none (`flops-fit tune SPEC " \
           f"--out {tmp_path / 'my-tune'} --resume` says why)" in err


def test_a_law_tuned_at_one_batch_refuses_another(tuned):
    out, _ = tuned
    law = TunedLaw.load(out)
    with pytest.raises(PlanError, match="tuned at batch_size 8 only, this sweep uses 32"):
        law.check_batch(32, "gpt")
    with pytest.raises(PlanError, match="tuned for model 'gpt', not 'llama'"):
        law.check_batch(8, "llama")


def test_the_tuned_rule_and_its_folder_go_together():
    with pytest.raises(PlanError, match="lr_rule 'tuned' goes with tuned"):
        HyperParams(lr_rule="tuned")
    assert HyperParams.from_dict({"tuned": "t"}).lr_rule == "tuned"
    assert flops_fit.SweepOptions(model="gpt", budgets=[1e9], hparams="some/dir").hparams.tuned == "some/dir"


def test_a_fixed_lr_beside_a_tuned_law_is_refused_not_silently_preferred(tmp_path, capsys):
    """[sweep] hparams = "DIR" (or [hparams] tuned) with [hparams] lr = 0.01 planned every run at
    0.01, the law not applied and nothing said; the file is now refused naming both."""
    with pytest.raises(PlanError, match="lr = 0.01 fixes every run's rate, and tuned = 't' names a law"):
        HyperParams(lr=0.01, lr_rule="tuned", tuned="t")
    spec = tmp_path / "sweep.toml"
    spec.write_text('[sweep]\nmodel = "gpt"\nbudgets = [4e8]\nhparams = "my-tune"\n[hparams]\nlr = 0.01\n')
    code = main(["plan", str(spec)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "lr = 0.01 fixes every run's rate" in err, err


@pytest.mark.parametrize("args, message", [
    (["--multipliers", "0.5,1"], "multipliers must hold at least 3 distinct rates"),
    (["--multipliers", "0.5,1,-2"], "each of multipliers must be a finite positive number, got -2.0"),
    (["--budgets", "3"], "budgets must count 1 to 1 of the sweep's smallest budgets"),
    (["--sizes", "8,99"], "sizes [99] are not in the sweep's plan at budgets [400000000.0, 1130000000.0, 3200000000.0]; its sizes "
         "there: [8, 12, 16]"),
    (["--beta2s", "0.9,1.5"], "each of beta2s must lie in (0, 1)"),
    (["--executor", "local", "--address", "ray://head:10001"], "--address is for the ray executor"),
    (["--executor", "nope"], "no executor called 'nope'"),
    (["--tracking", "tensorboard,comet"], "tracking.backends: unknown backend 'comet'"),
    # trained every run, then wrote a law with no interval (-1) or read 0 as "the file's workers"
    (["--bootstrap", "-1"], "bootstrap must be a non-negative number of resamples (e.g. 1000; 0: none), got -1"),
    (["--bootstrap", "3"], "bootstrap must be 0 (no intervals) or at least 10 resamples"),
    (["--workers", "0"], "workers must be a positive integer, got 0"),
    (["--from", "runs.csv", "--bootstrap", "-1"], "bootstrap must be a non-negative number of resamples"),
    # took 1e20 and trained every run, then failed in numpy at the fit (a traceback)
    (["--bootstrap", "99999999999999999999"], "bootstrap must be at most 100000 resamples"),
    (["--from", "runs.csv", "--bootstrap", "100001"], "bootstrap must be at most 100000 resamples"),
])
def test_bad_tune_options_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC_FILE)
    if "--from" in args:  # a sweep over rates the lab ran: no sweep file
        pd.DataFrame({"params": [1e6] * 3 + [2e6] * 3, "tokens": [2e7] * 6, "lr": [1e-3, 2e-3, 4e-3] * 2,
                      "loss": [3.1, 3.0, 3.1, 3.0, 2.9, 3.0]}).to_csv(tmp_path / "runs.csv", index=False)
        args = [a.replace("runs.csv", str(tmp_path / "runs.csv")) for a in args]
    code = main(["tune", *([] if "--from" in args else [str(spec)]), "--out", str(tmp_path / "out"), *args])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_tune_tracking_logs_the_tunes_runs_as_sweeps_does(tmp_path, capsys):
    """`flops-fit tune` had no --tracking though `flops-fit sweep` has one: a tune is tracked by the flag too."""
    pytest.importorskip("tensorboard")
    spec, out = tmp_path / "spec.toml", tmp_path / "out"
    spec.write_text(SPEC_FILE)
    assert main(["tune", str(spec), "--out", str(out), "--budgets", "1", "--sizes", "8,16", "--multipliers",
                 "0.125,0.5,1", "--skip-parity", "--bootstrap", "20", "--tracking", "tensorboard"]) == 0
    with RunStore(out) as store:
        run_ids = set(store.runs_frame().run_id)
    logged = {p.name for p in (out / "tracking" / "tensorboard").iterdir()}
    assert len(run_ids) == 6 and run_ids <= logged  # every run of the tune, as a sweep's
    assert all(any((out / "tracking" / "tensorboard" / r).rglob("events.out.tfevents.*")) for r in run_ids)


def test_tune_needs_a_spec_or_a_demo(tmp_path, capsys):
    assert main(["tune", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == "flops-fit: error: flops-fit tune needs a sweep file SPEC, --demo MODEL or --from RUNS (one of them)\n"


def test_holdout_needs_three_cells(tuned, tmp_path):
    """The check that cannot run comes after every run trained and the law fitted: that law is
    written (it was lost, the message garbled "besides none held out")."""
    out = tmp_path / "tune"
    shutil.copytree(tuned[0], out)
    (out / "hparams.json").unlink()
    with pytest.raises(FitInputError) as caught:
        flops_fit.tune(SPEC, out, budgets=1, sizes=[8, 16], multipliers=[1 / 8, 1 / 2, 1], holdout="largest",
                       resume=True, skip_parity=True, show_progress=False, bootstrap=0, report=False)
    assert str(caught.value) == (
        "holdout='largest' needs at least 3 cells with an interior optimum, the largest held out and the law fitted "
        f"on the others (found 2): tune at more sizes or budgets; the law, without the check, is in "
        f"{out / 'hparams.json'}")
    assert TunedLaw.load(out).describe() == TunedLaw.load(tuned[0]).describe()


def tune_held_out(out, holdout, bootstrap):
    """A tiny tune (one budget, sizes 8, 12, 16) with its held-out check: the result, hparams.json
    and its held-out entry."""
    result = flops_fit.tune(SPEC, out, budgets=1, sizes=[8, 12, 16], multipliers=[1 / 8, 1 / 2, 1],
                            holdout=holdout, skip_parity=True, show_progress=False, bootstrap=bootstrap, report=False)
    data = json.loads((out / "hparams.json").read_text())
    return result, data, data["holdout"]


@pytest.mark.e2e
def test_holdout_largest_trains_the_largest_cell_at_the_rate_of_a_law_fitted_without_it(tmp_path):
    out = tmp_path / "tune"
    result, data, held = tune_held_out(out, "largest", bootstrap=20)
    cell = next(c for c in data["cells"] if c["size"] == 16)  # the largest size at the (one) budget
    assert held["size"] == 16 and held["tokens"] == cell["tokens"]
    k = held["law"]["coefficients"]
    assert held["law"]["cells"] == 2  # fitted on sizes 8 and 12 only
    rate = k["m"]["value"] * cell["tokens"] ** -k["a"]["value"] * cell["scale"] ** -k["b"]["value"]
    assert held["predicted_lr"] == pytest.approx(rate, rel=1e-9)
    with RunStore(out / held["folder"]) as store:  # the one run trained at that rate, stored on its own
        run = store.runs_frame().iloc[0]
    assert run.status == "done" and run["size"] == 16 and run.lr == pytest.approx(rate, rel=1e-12)
    assert run.lr_source.startswith("tuned:holdout")
    assert held["loss"] == run.loss and held["best_loss"] == min(cell["losses"])
    assert held["excess"] == pytest.approx((run.loss - min(cell["losses"])) / min(cell["losses"]))
    assert held["within_goal"] == (held["excess"] <= 0.005)
    assert held["band"][0] < rate < held["band"][1]
    assert held["optimum_in_band"] == (held["band"][0] <= cell["lr_opt"] <= held["band"][1])
    assert f"law without it predicts lr {rate:.3g}" in str(result)


@pytest.mark.e2e
def test_holdout_beyond_trains_a_cell_4x_past_the_grid_at_multiples_of_the_laws_rate(tmp_path):
    out = tmp_path / "tune"
    result, data, held = tune_held_out(out, "beyond", bootstrap=0)
    top = max(data["cells"], key=lambda c: c["tokens"])  # the smallest size has the most tokens
    assert held["kind"] == "beyond" and held["size"] == top["size"] == 8
    assert held["tokens"] >= 4 * top["tokens"] and held["tokens_factor"] == held["tokens"] / top["tokens"]
    k = data["law"]["coefficients"]  # Marin's form (one budget: no held-out budget to choose another by)
    assert data["chosen"] == "marin" and k["a"]["fitted"] is False
    assert held["predicted_lr"] == pytest.approx(k["m"]["value"] * 8 ** -k["b"]["value"], rel=1e-9)
    with RunStore(out / held["folder"]) as store:
        frame = store.runs_frame().sort_values("lr")
    assert list(frame.lr) == pytest.approx([held["predicted_lr"] * m for m in (0.25, 0.5, 1, 2, 4)], rel=1e-12)
    assert set(frame.tokens) == {held["tokens"]} and set(frame["size"]) == {8}
    assert held["losses"] == pytest.approx(list(frame.loss)) and held["loss"] == pytest.approx(frame.loss.iloc[2])
    assert held["best_loss"] == pytest.approx(frame.loss.min())
    assert held["excess"] == pytest.approx((frame.loss.iloc[2] - frame.loss.min()) / frame.loss.min())
    assert "held-out cell beyond the grid (size 8" in str(result)


def test_holdout_beyond_needs_three_sizes(tuned):
    out, _ = tuned
    with pytest.raises(FitInputError, match="holdout='beyond' plans its cell with the tune's sizes and needs at least 3"):
        flops_fit.tune(SPEC, out, budgets=1, sizes=[8, 16], multipliers=[1 / 8, 1 / 2, 1], holdout="beyond",
                       resume=True, skip_parity=True, show_progress=False, bootstrap=0, report=False)


# ------------------------------------------------------------------ the demo's shipped law
SHIPPED = demo.DEMO_HPARAMS / "gpt.json"


def test_the_demo_takes_its_rates_from_the_shipped_tune():
    plan, _ = demo.demo_plan("gpt")
    law = json.loads(SHIPPED.read_text())
    assert {r.lr_source.partition(" (")[0] for r in plan.runs} == {f"tuned:{SHIPPED}"}
    assert {r.beta2 for r in plan.runs} == {law["beta2"]}


def test_the_shipped_law_was_tuned_on_the_demos_current_setup():
    """Changing the demo without tuning it again fails here: re-derive with
    `flops-fit tune --demo gpt --out DIR` and copy DIR/hparams.json over the shipped file."""
    config, settings = demo.demo_tune_spec("gpt")
    law = json.loads(SHIPPED.read_text())
    planned = flops_fit.plan(**config["sweep"], model_config=config["model"], hparams=config["hparams"])
    assert law["setup"]["model_config"] == planned.options.model_config
    assert law["setup"]["batch_size"] == planned.options.batch_size == law["setup"]["batch_size"]
    assert law["setup"]["budgets"] == settings["budgets"] and law["tune"]["multipliers"] == settings["multipliers"]
    assert law["tune"]["sizes"] == settings["sizes"]
    assert law["setup"]["centre"] == "marin" and law["setup"]["hparams"]["beta2"] == config["hparams"]["beta2"]


def refits_from_its_own_cells(path):
    """The law in ``path`` is what the tune's fitting gives on its stored losses: each cell's best
    rate, then the chosen form over the cells (Marin's by ``fit_law``, the others by ``fit_form``)."""
    law = json.loads(path.read_text())
    cells = [fit_cell(c["rates"], c["losses"], bootstrap=0) for c in law["cells"]]
    used = [(c, f) for c, f in zip(law["cells"], cells) if c["in_law"]]
    assert all(f.ok for _, f in used) and len(used) >= 4
    for (c, f) in used:
        assert f.lr_opt == pytest.approx(c["lr_opt"], rel=1e-6)
    if law.get("chosen", "marin") == "marin":
        refit, _ = fit_law([c["scale"] for c, _ in used], [c["tokens"] for c, _ in used],
                           [c["batch_size"] for c, _ in used], [f.lr_opt for _, f in used], [np.empty(0)] * len(used),
                           scale=law["law"]["scale"], bootstrap=0)
        for name in ("m", "a", "b"):
            assert refit.coefficients[name].value == pytest.approx(law["law"]["coefficients"][name]["value"], rel=1e-6)
        return law
    points = [Point({"params": c["params"], "nonembedding": c["nonembedding"], "tokens": c["tokens"],
                     "flops": c["flops"], "batch": c["batch_size"]}, f.lr_opt, np.empty(0), c["flops"], f.loss_at,
                    f.loss_opt) for c, f in used]
    refit = fit_form(FORMS[law["chosen"]], points, bootstrap=0)
    assert refit.m.value == pytest.approx(law["law"]["m"]["value"], rel=1e-6)
    for v, c in refit.exponents.items():
        assert c.value == pytest.approx(law["law"]["exponents"][v]["value"], rel=1e-6)
    return law


def test_the_shipped_law_refits_from_its_own_cells():
    """The shipped coefficients are what the tune's fitting gives on the shipped losses; the tune
    chose the size-only form (the tokens' exponent was not identified on the 8x grid)."""
    law = refits_from_its_own_cells(SHIPPED)
    assert law["chosen"] == "size" and law["law"]["exponents"]["params"]["identified"]
    assert "tokens" in law["forms"]["marin"]["unidentified"]


@pytest.mark.e2e
def test_the_demo_tune_rederives_on_a_reduced_grid(tmp_path):
    """`flops-fit tune --demo gpt` on a reduced grid (one tiny budget, 2 sizes, 3 multipliers, a short
    context): the same pipeline writes a law the demo's own configuration accepts."""
    config, settings = demo.demo_tune_spec("gpt")
    config["sweep"].update(budgets=[5e8], sizes=[6, 10, 16], seq_len=16, eval_tokens=1024, min_steps=10)
    config["model"]["n_head"] = 1
    result = flops_fit.tune(config, tmp_path, budgets=1, sizes=[6, 10],
                            multipliers=[settings["multipliers"][0], settings["multipliers"][2],
                                         settings["multipliers"][4]],
                            skip_parity=True, show_progress=False, bootstrap=0, report=False)
    data = json.loads((tmp_path / "hparams.json").read_text())
    assert data["setup"]["centre"] == "marin" and data["beta2"] == 0.995
    assert [c["size"] for c in data["cells"]] == [6, 10] and all(c["in_law"] for c in data["cells"])
    assert result.cells[0].fit.rates == sorted(result.cells[0].fit.rates)


def hand_written_law(folder, **law):
    """An hparams.json written by hand (not by the code under test)."""
    coefficients = {k: (None if v is None else {"value": v, "lo": None, "hi": None, "fitted": True})
                    for k, v in law.pop("coefficients").items()}
    data = {"format": "flops-fit-hparams/1", "model": "gpt", "setup": {"batch_size": 8}, "beta2": 0.99,
            "law": {"scale": "width", "band": 0.3, "coefficients": coefficients}, **law}
    folder.mkdir(exist_ok=True)
    (folder / "hparams.json").write_text(json.dumps(data))
    return folder


def test_a_batch_law_sets_each_budgets_batch_and_the_rate_follows_it(tmp_path):
    folder = hand_written_law(tmp_path / "t", coefficients={"m": 0.5, "a": 0.1, "b": 0.8, "c": 0.4},
                              batch_law={"k": 2e-3, "e": 0.5})
    p = flops_fit.plan(model="gpt", budgets=[4e8, 1.6e9], sizes=[8, 12, 16], seq_len=16, min_steps=5,
                       model_config={"n_layer": 1, "n_head": 1}, hparams=str(folder))
    for run in p.runs:
        batch = round(2e-3 * run.budget ** 0.5)  # 40 at 4e8, 80 at 1.6e9
        assert run.batch_size == batch and run.beta2 == 0.99
        assert run.lr == pytest.approx(0.5 * run.tokens ** -0.1 * run.size ** -0.8 * batch ** 0.4, rel=1e-9)
    assert {r.batch_size for r in p.runs} == {40, 80} and "batch per budget from B*" in p.table()


def test_under_wsd_a_family_shares_the_rate_at_its_mean_tokens(tmp_path):
    folder = hand_written_law(tmp_path / "t", coefficients={"m": 0.5, "a": 0.2, "b": 1.0, "c": None})
    p = flops_fit.plan(model="gpt", budgets=[4e8, 8e8], sizes=[8, 12, 16], seq_len=16, batch_size=8, min_steps=5,
                       schedule="wsd", model_config={"n_layer": 1, "n_head": 1}, hparams=str(folder))
    for size in (8, 12, 16):
        runs = [r for r in p.runs if r.size == size]
        mean = math.exp(sum(math.log(r.tokens) for r in runs) / len(runs))
        assert [r.lr for r in runs] == pytest.approx([0.5 * mean ** -0.2 / size] * len(runs), rel=1e-9)
        assert len({r.family for r in runs}) == 1  # one stable phase still serves both budgets


def test_swept_beta2_and_batch_pick_the_better_beta2_and_fit_the_batch_law():
    """fit_tune on synthetic cells: beta2 0.99 beats 0.95 in every cell, each cell's best batch
    is the one whose parabola bottoms out lowest, and the law recovers a, b and c."""
    from flops_fit.tuning.grid import check_grid
    from flops_fit.tuning.tune import Cell, fit_tune

    options = flops_fit.SweepOptions(model="gpt", budgets=[4e8], sizes=[8, 12, 16], batch_size=8, seq_len=16,
                                     min_steps=5, model_config={"n_layer": 1, "n_head": 1})
    grid = check_grid(options, 1, None, [0.25, 1, 4], [8, 16, 32, 64], [0.95, 0.99])
    plan = flops_fit.plan(options)
    rates = list(np.geomspace(1e-3, 1.0, 10))
    cells = []
    chosen = ((8, 1e6, 8), (16, 2e6, 16), (32, 1.6e7, 32), (64, 3.2e7, 64))  # width, tokens, best batch
    for width, tokens, best_batch in chosen:
        flops = 6 * 1000 * width ** 2 * tokens
        for batch in (8, 16, 32, 64):
            for beta2 in (0.95, 0.99):
                floor = 2 + 0.01 * math.log(batch / best_batch) ** 2 + (0.05 if beta2 == 0.95 else 0)
                lr = 0.3 * width ** -1 * batch ** 0.5 * tokens ** -0.05
                fit = fit_cell(rates, parabola_losses(rates, lr, floor=floor), bootstrap=0)
                cells.append(Cell(width, 1000 * width ** 2, float(width), int(tokens), batch, beta2, flops, fit, []))
    result = fit_tune(Path("."), plan, cells, grid, bootstrap=0, seed=0)
    assert result.data["beta2"] == 0.99
    k = result.law.coefficients
    assert (k["a"].value, k["b"].value, k["c"].value) == pytest.approx((0.05, 1.0, 0.5), abs=1e-6)
    law = result.data["batch_law"]
    flops = [6 * 1000 * w ** 2 * t for w, t, _ in chosen]
    slope, intercept = np.polyfit(np.log(flops), np.log([b for _, _, b in chosen]), 1)
    assert law["e"] == pytest.approx(slope, rel=1e-9) and law["k"] == pytest.approx(math.exp(intercept), rel=1e-9)
    assert law["cells"] == 4
    text = str(result)  # what `flops-fit tune` prints: every form's exponents with intervals, and the choice
    assert "law forms" in text and "exponent of" in text and f"chosen: {result.data['chosen_because']}" in text
    assert all(name in text for name in ("marin", "bjorck", "deepseek", "steplaw"))


def test_an_unknown_holdout_is_refused_before_training(tmp_path):
    with pytest.raises(OptionError, match=r"holdout must be one of \['largest', 'beyond'\] \(or left out\), got 'smallest'"):
        flops_fit.tune(SPEC, tmp_path / "out", holdout="smallest")
    assert not (tmp_path / "out").exists()


def refusal(widths: list[int], best: float) -> str:
    """fit_tune's refusal for cells of these widths, each with its parabola's best rate at ``best``, tried at 1e-3,
    1e-2 and 1e-1 (x1/4, 1, 4 of a one-budget GPT sweep's rate; nothing trains)."""
    options = flops_fit.SweepOptions(model="gpt", budgets=[4e8], sizes=[8, 12, 16], batch_size=8, seq_len=16,
                                     min_steps=5, model_config={"n_layer": 1, "n_head": 1})
    grid = check_grid(options, 1, None, [0.25, 1, 4], None, None)
    rates = [1e-3, 1e-2, 1e-1]
    cells = [Cell(w, 1000 * w, float(w), 10000, 8, 0.99, 1e9, fit_cell(rates, parabola_losses(rates, best)), [])
             for w in widths]
    with pytest.raises(FitInputError) as caught:
        fit_tune(Path("my-tune"), flops_fit.plan(options), cells, grid, bootstrap=0, seed=0)
    return str(caught.value)


def test_a_tune_whose_cells_all_sit_on_an_edge_says_which_way_to_widen():
    # every cell counted (not the first 3), the multipliers to use, and where each rate's loss is (no
    # report is written without a law; status lists each run's rate and loss)
    assert refusal([8, 16], best=1.0) == (
        "no cell has its best rate inside the multipliers (2 of 2 cells have none: 2 best at the highest rate "
        "tried): tune again with --multipliers 0.25,1,4,8,16 into a new --out folder (other multipliers are "
        "another sweep); each run's rate and loss: `flops-fit status my-tune`")


def test_a_tune_of_one_cell_with_its_optimum_asks_for_more_cells_not_wider_multipliers():
    """One size at one budget, its optimum found: the refusal read "... (0 of 1 cells have none: ): tune more sizes
    or budgets" and asked to widen the multipliers. Its one cell has its optimum: the grid needs more cells."""
    assert refusal([8], best=1e-2) == (
        "the law needs at least 2 cells with an interior optimum, got 1 (every cell of the tune has its optimum; it "
        "has 1 cell): tune more sizes or budgets, into a new --out folder (a tune resumes only the grid it started "
        "with); each run's rate and loss: `flops-fit status my-tune`")


def test_tokens_that_nearly_follow_the_width_are_not_fitted():
    """One budget: tokens = C / (6 N(W)) with N = 12 W^2 + 512 W is no exact power of W, but
    the few percent it departs from one cannot carry an exponent of its own."""
    widths = np.array([8.0, 12.0, 16.0])
    tokens = 4e8 / (6 * (12 * widths ** 2 + 512 * widths))
    lr = 0.3 / widths * np.array([1.0, 1.05, 0.97])  # a little noise
    law, _ = fit_law(widths, tokens, [8] * 3, lr, [np.empty(0)] * 3, scale="width", bootstrap=0)
    assert law.coefficients["a"].fitted is False and any("a not fitted" in n for n in law.notes)
    assert 0.5 < law.coefficients["b"].value < 1.5


def test_the_vit_demo_tune_plans_its_grid_around_the_demos_rule():
    """`flops-fit tune --demo vit`'s grid, planned without training (tiny ViTs stay at chance for
    the first few hundred steps, so a reduced grid that trains in seconds has no optimum to find):
    3 budgets spanning 8x, the chosen widths, each run at the demo's inverse-width rate times each
    multiplier. The shipped law's fit from its stored losses is checked below."""
    from flops_fit.sweeps.config import parse_config
    from flops_fit.tuning.grid import check_grid, tune_plan

    config, settings = demo.demo_tune_spec("vit")
    assert config["hparams"] == {"lr_rule": "inverse-width", "base_lr": 3e-3, "base_width": 64}
    assert max(settings["budgets"]) >= 8 * min(settings["budgets"])
    options = parse_config(config, "demo vit tune").options
    grid = check_grid(options, settings["budgets"], settings["sizes"], settings["multipliers"], None, None)
    planned = tune_plan(options, grid)
    assert {r.size for r in planned.runs} == set(settings["sizes"])
    assert {r.budget for r in planned.runs} == set(settings["budgets"])
    for run in planned.runs:
        multiplier = float(run.lr_source.split()[0].removeprefix("tune:x"))
        assert run.lr == pytest.approx(3e-3 * 64 / run.size * multiplier, rel=1e-12)
        assert run.lr_source.endswith("inverse-width")


VIT_SHIPPED = demo.DEMO_HPARAMS / "vit.json"


def test_the_vit_demo_takes_its_rates_from_its_own_tune_which_refits_from_its_cells():
    """`demo_hparams/vit.json` is `flops-fit tune --demo vit`'s output on the grid above (re-derived
    here from its stored losses: each cell's optimum, then the chosen form), and the ViT demo
    plans every run from it, saying which exponents the tune did not identify."""
    config, settings = demo.demo_tune_spec("vit")
    law = refits_from_its_own_cells(VIT_SHIPPED)
    assert law["setup"]["budgets"] == settings["budgets"] and law["tune"]["sizes"] == settings["sizes"]
    assert law["tune"]["multipliers"] == settings["multipliers"]
    assert law["setup"]["centre"] == "inverse-width" and law["model"] == "vit"
    plan, _ = demo.demo_plan("vit")
    assert {r.lr_source.partition(" (")[0] for r in plan.runs} == {f"tuned:{VIT_SHIPPED}"}
    assert {r.beta2 for r in plan.runs} == {law["beta2"]}


@pytest.mark.e2e
def test_a_tune_with_its_rates_trained_together_finds_the_same_cells(tuned, tmp_path):
    """stack_runs: each cell's rates in one program (training.stacked), each still its own run."""
    out, result = tuned
    together = flops_fit.tune(SPEC, tmp_path / "together", budgets=1, sizes=[8, 16], multipliers=[1 / 8, 1 / 2, 1],
                              skip_parity=True, show_progress=False, bootstrap=20, stack_runs=3, report=False)
    frames = []
    for folder in (out, tmp_path / "together"):
        with RunStore(folder) as store:
            frames.append(store.runs_frame().set_index("run_id").sort_index())
    assert list(frames[0].index) == list(frames[1].index) and set(frames[1].status) == {"done"}
    assert (frames[0].loss - frames[1].loss).abs().max() <= 1e-5
    assert {t["trained_together"] for t in frames[1].timings} == {3.0}
    for a, b in zip(result.cells, together.cells, strict=True):
        assert b.fit.lr_opt == pytest.approx(a.fit.lr_opt, rel=1e-4)


def test_the_help_states_the_default_budgets_the_tune_uses(capsys):
    """`flops-fit tune --help` said "--budgets ... (default 2)"; a tune without --budgets trains 3 budgets
    spanning 8x from the sweep's smallest (tuning.grid's DEFAULT_BUDGETS and SPAN)."""
    import re

    from flops_fit.tuning.grid import DEFAULT_BUDGETS, SPAN, check_grid

    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"default: {DEFAULT_BUDGETS} budgets spanning {SPAN:g}x from the sweep's smallest" in text
    assert not re.search(r"K smallest budgets \(default \d", text)
    options = load_config(Path(__file__).resolve().parents[1] / "examples" / "sweep.toml").options
    grid = check_grid(options, None, None, [0.25, 1, 4], None, None)
    budgets = sorted(grid["budgets"])
    assert len(budgets) == DEFAULT_BUDGETS and budgets[-1] / budgets[0] == pytest.approx(SPAN, rel=0.01)


def test_a_law_fitted_at_one_batch_size_states_no_batch_term():
    """With one batch size the batch exponent is not fitted, but the law still read "... * batch^c"."""
    from flops_fit.tuning.law import Coefficient, LawFit

    one = {n: Coefficient(v, v, v, True) for n, v in (("m", 0.5), ("a", 0.3), ("b", 0.4))}
    law = LawFit("width", {**one, "c": None}, cells=4, rms_log=0.1)
    assert law.describe().startswith("lr = m * tokens^-a * width^-b: m = ") and "batch" not in law.to_dict()["form"]
    swept = LawFit("width", {**one, "c": Coefficient(0.5, 0.4, 0.6, True)}, cells=6, rms_log=0.1)
    assert swept.describe().startswith("lr = m * tokens^-a * width^-b * batch^c: ")


def test_a_cell_whose_best_is_next_to_a_diverged_rate_says_so_and_the_tune_asks_for_rates_between():
    # the rate above the best one diverged (loss NaN): "widen the multipliers upwards" sent the lab to
    # rates that diverge again; the optimum lies between the last rate that trained and the diverged one
    from flops_fit.tuning.grid import check_grid
    from flops_fit.tuning.tune import Cell, fit_tune

    rates = [1e-3, 1e-2, 1e-1, 1.0]
    losses = parabola_losses(rates, 0.3)
    losses[-1] = math.nan
    cell = fit_cell(rates, losses)
    assert not cell.ok and "widen" not in cell.reason
    assert cell.reason == ("diverged next to its best: the best loss is at the highest rate that trained (0.1) and 1 "
                           "above it has no finite loss: try rates between them")
    options = flops_fit.SweepOptions(model="gpt", budgets=[4e8], sizes=[8, 12, 16], batch_size=8, seq_len=16,
                                     min_steps=5, model_config={"n_layer": 1, "n_head": 1})
    grid = check_grid(options, 1, None, [0.1, 1, 10, 100], None, None)
    cells = [Cell(w, 1000 * w, float(w), 10000, 8, 0.99, 1e9, cell, []) for w in (8, 16)]
    with pytest.raises(FitInputError) as caught:
        fit_tune(Path("my-tune"), flops_fit.plan(options), cells, grid, bootstrap=0, seed=0)
    assert "2 best next to a rate that diverged" in str(caught.value)
    assert "--multipliers 0.1,1,10,31.6228,100 into a new --out folder" in str(caught.value)  # sqrt(10 x 100)


def test_a_tune_whose_runs_failed_says_why_not_to_widen_the_multipliers(tmp_path):
    # a model with dropout cannot train its rates together: every run failed, and the tune told the
    # user "no cell has its best rate inside the multipliers ... tune more sizes or budgets"
    import sweep_support

    spec = {"sweep": {"model": "tiny-lm", "budgets": [2e7], "sizes": [4, 8, 16], "batch_size": 8, "min_steps": 5,
                      "eval_tokens": 512, "curve_points": 4, "device": "cpu", "checkpoint_seconds": 0},
            "model": {"dropout": 0.1}}
    with pytest.raises(FitInputError) as caught:  # past the preflight, which refuses dropout trained together
        flops_fit.tune(spec, tmp_path, budgets=1, multipliers=[0.5, 1, 2], stack_runs=3, skip_parity=True,
                       skip_preflight=True, show_progress=False, report=False, host=sweep_support.host())
    message = str(caught.value)
    assert "9 of 9 runs failed (ValueError: model 'tiny-lm' draws random numbers while it trains" in message
    assert "tune again into a new --out folder" in message and "more sizes or budgets" not in message


def test_a_tune_whose_every_rate_diverged_asks_for_lower_rates_not_to_fix_a_failure(tmp_path):
    """Every rate of a tune diverged (the trainer stops such a run, status failed): the tune said 'N of N runs
    failed (diverged: ...): fix that, then tune again', a failure to fix; it now asks for rates below the lowest
    that diverged, as multipliers to pass."""
    with pytest.raises(FitInputError) as caught:
        flops_fit.tune(SPEC, tmp_path, budgets=1, sizes=[8, 16], multipliers=[50, 100, 200], skip_parity=True,
                       show_progress=False, report=False, bootstrap=0)
    message = str(caught.value)
    with RunStore(tmp_path) as store:
        frame = store.runs_frame()
    assert set(frame.status) == {"failed"} and all(e.startswith("diverged") for e in frame.error)  # as trained
    assert "2 of 2 cells have none: 2 every rate diverged" in message and "fix that" not in message
    assert "tune again with lower rates, --multipliers 6.25,12.5,25, into a new --out folder" in message


def test_a_cell_whose_high_rates_diverged_below_three_asks_for_lower_multipliers():
    # two rates trained, the highest diverged: no parabola, and the rates to add lie below (not 'more sizes')
    from flops_fit.tuning.grid import check_grid
    from flops_fit.tuning.tune import Cell, fit_tune

    options = flops_fit.SweepOptions(model="gpt", budgets=[4e8], sizes=[8, 12, 16], batch_size=8, seq_len=16,
                                     min_steps=5, model_config={"n_layer": 1, "n_head": 1})
    grid = check_grid(options, 1, None, [0.25, 1, 4], None, None)
    rates = [1e-3, 1e-2, 1e-1]
    cells = [Cell(w, 1000 * w, float(w), 10000, 8, 0.99, 1e9, fit_cell(rates, [3.0, 2.9, math.nan]), [])
             for w in (8, 16)]
    with pytest.raises(FitInputError) as caught:
        fit_tune(Path("my-tune"), flops_fit.plan(options), cells, grid, bootstrap=0, seed=0)
    assert "tune again with --multipliers 0.0625,0.125,0.25,1,4 into a new --out folder" in str(caught.value)
