"""Runs from trackers: real W&B offline runs, an MLflow file store and TensorBoard event files,
each written by its own library here, read back by ``load_runs`` (and fitted by ``fit_rates``)."""

import math
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import flops_fit
from flops_fit.cli.main import main
from flops_fit.errors import FitInputError
from flops_fit.fitting.synthetic import synthetic_runs
from flops_fit.sources import wandb_runs

STEPS = 5
# (params, tokens, lr, held-out loss, finished): two sizes at two rates each, one run failed
RUNS = [(1e6, 2e7, 1e-3, 4.0, True), (1e6, 2e7, 3e-3, 3.9, True), (2e6, 4e7, 1e-3, 3.5, True),
        (2e6, 4e7, 3e-3, 3.6, False)]


def curve(params: float, step: int) -> float:
    return 6.0 - step * 0.1 - math.log10(params) * 0.01


@pytest.fixture
def quiet_env(tmp_path, monkeypatch):
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "MLFLOW_ALLOW_FILE_STORE": "true",
                        "WANDB_CONFIG_DIR": str(tmp_path / "wandb-home"), "WANDB_CACHE_DIR": str(tmp_path / "wandb-home"),
                        "WANDB_DATA_DIR": str(tmp_path / "wandb-home")}.items():
        monkeypatch.setenv(name, value)
    yield tmp_path
    mlflow = sys.modules.get("mlflow")
    if mlflow is not None:  # set_tracking_uri is process-wide: left set, later tests would log into this store
        mlflow.set_tracking_uri(None)


def check(runs, ids_failed=1):
    """The finished runs with the values logged, curves on tokens, the failed one left out."""
    frame = runs.frame.sort_values(["params", "lr"]).reset_index(drop=True)
    finished = [r for r in RUNS if r[4]]
    assert len(frame) == len(finished) and len(runs.excluded) == ids_failed
    assert frame["params"].tolist() == [r[0] for r in finished]
    assert frame["tokens"].tolist() == [r[1] for r in finished]
    assert frame["loss"].tolist() == pytest.approx([r[3] for r in finished], rel=1e-6)
    assert frame["lr"].tolist() == pytest.approx([r[2] for r in finished])
    for (params, tokens, *_), c in zip(finished, frame["curve"], strict=True):
        assert np.allclose(c[:, 0], [tokens * s / STEPS for s in range(1, STEPS + 1)])
        assert np.allclose(c[:, 1], [curve(params, s) for s in range(1, STEPS + 1)], rtol=1e-6)
    assert runs.has_curves


def test_wandb_offline_runs_read_back(quiet_env):
    wandb = pytest.importorskip("wandb")
    for params, tokens, lr, loss, ok in RUNS:
        run = wandb.init(mode="offline", project="sweep", dir=str(quiet_env),
                         config={"model": {"params": params}, "tokens": tokens, "lr": lr, "steps": STEPS,
                                 "warmup_steps": 1, "min_lr_ratio": 0.1, "batch_size": 8, "seq_len": 16})
        for s in range(1, STEPS + 1):
            run.log({"train_loss": curve(params, s)}, step=s)
        run.summary["eval/loss"] = loss
        run.finish(exit_code=0 if ok else 1)
    wandb.teardown()  # finish() can return before wandb's service has written the last exit record
    runs = flops_fit.load_runs(quiet_env / "wandb", params_col="model.params", loss_col="eval/loss", keep=("lr",), all_rates=True)
    check(runs)
    assert "exit code 1" in runs.excluded[0]["reason"]
    assert runs.frame["schedule"][0] == {"schedule": "cosine", "steps": STEPS, "warmup_steps": 1, "cooldown_start": 0,
                                         "cooldown_shape": "1-sqrt", "min_lr_ratio": 0.1, "batch_size": 8,
                                         "seq_len": 16}  # what the whole-curve law reads
    failed = [f for f in wandb_runs.run_files(quiet_env / "wandb") if wandb_runs.read_file(f).status.startswith("failed")]
    cut = quiet_env / "run-live.wandb"  # the same run caught while its exit record is being written
    cut.write_bytes(failed[0].read_bytes()[:-10])
    assert wandb_runs.read_file(cut).status == "running"


def test_a_wandb_run_resumed_offline_is_one_run(quiet_env):
    """An attempt killed (or closed with an error) and resumed with the same id writes a second offline folder:
    the run read as two, one "failed (exit code 1)" and left out, the other with half a curve."""
    wandb = pytest.importorskip("wandb")
    params, tokens, lr, loss, _ = RUNS[0]
    for attempt, steps in enumerate((range(1, 4), range(3, STEPS + 1))):
        run = wandb.init(mode="offline", project="sweep", dir=str(quiet_env), id="run-a", resume="allow",
                         config={"params": params, "tokens": tokens})
        for s in steps:
            run.log({"train_loss": curve(params, s)}, step=s)
        if attempt:
            run.summary["eval/loss"] = loss
        run.finish(exit_code=0 if attempt else 1)
        wandb.teardown()
    assert len(wandb_runs.run_files(quiet_env / "wandb")) == 2
    runs = flops_fit.load_runs(quiet_env / "wandb", loss_col="eval/loss")
    assert runs.excluded == [] and runs.frame["run_id"].tolist() == ["run-a"]
    assert runs.frame["loss"][0] == pytest.approx(loss)
    assert np.allclose(runs.frame["curve"][0][:, 1], [curve(params, s) for s in range(1, STEPS + 1)], rtol=1e-6)


def test_wandb_offline_runs_are_named_as_wandb_shows_them(quiet_env):
    """Offline runs named with ``wandb.init(name=...)`` read as W&B's ids (``21hhocz5``), though the runs table,
    its CSV export and MLflow's reader name each run by its name: a note naming a run left out named nothing
    the lab could find. Names shared are told apart by the id; a run without a name keeps its id."""
    wandb = pytest.importorskip("wandb")
    for k, ((params, tokens, lr, loss, _ok), name) in enumerate(zip(RUNS, ["baseline", "baseline", "other", None],
                                                                   strict=True)):
        run = wandb.init(mode="offline", project="sweep", dir=str(quiet_env), id=f"id{k}", name=name,
                         config={"params": params, "tokens": tokens, "lr": lr})
        run.summary["eval/loss"] = loss
        run.finish()
        wandb.teardown()
    frame = flops_fit.load_runs(quiet_env / "wandb", loss_col="eval/loss", all_rates=True).frame
    assert sorted(frame.run_id) == ["baseline (id0)", "baseline (id1)", "id3", "other"]
    assert frame.set_index("run_id").loss["other"] == pytest.approx(RUNS[2][3])


def test_wandb_offline_runs_of_two_projects_are_told_apart(quiet_env):
    """One ``wandb/`` folder holds every project a script logged to: runs of two projects were fitted as one
    sweep without a word (MLflow's experiments are a column); each run's project is now a column, which the
    fit's note names and ``where`` selects by."""
    wandb = pytest.importorskip("wandb")
    for project, shift in (("small-lr", 0.0), ("big-lr", 0.5)):
        for params, tokens, _lr, loss, _ok in RUNS[:2] + RUNS[2:3]:
            run = wandb.init(mode="offline", project=project, dir=str(quiet_env), config={"params": params,
                                                                                          "tokens": tokens})
            run.summary["eval/loss"] = loss + shift
            run.finish()
            wandb.teardown()
    both = flops_fit.load_runs(quiet_env / "wandb", loss_col="eval/loss")
    assert sorted(both.frame["loss"]) == pytest.approx(sorted(r[3] + s for r in RUNS[:3] for s in (0.0, 0.5)))
    assert any("2 settings by column 'project'" in c for c in both.cautions)
    one = flops_fit.load_runs(quiet_env / "wandb", loss_col="eval/loss", where={"project": "big-lr"})
    assert sorted(one.frame["loss"]) == pytest.approx(sorted(r[3] + 0.5 for r in RUNS[:3]))


def test_a_wandb_loss_logged_as_text_is_read_or_named(quiet_env):
    """``run.summary["eval/loss"] = str(loss)`` was dropped by the reader: the run read as one with no loss and was
    left out ("no finite loss (nan)"), and runs that all logged so were refused as having no loss column at all.
    Text that is a number now reads as it does in W&B's CSV export; other text is refused naming the run."""
    wandb = pytest.importorskip("wandb")
    for k, (params, tokens, _lr, loss, _ok) in enumerate(RUNS[:3]):
        run = wandb.init(mode="offline", project="p", dir=str(quiet_env), name=f"r{k}",
                         config={"params": params, "tokens": tokens})
        run.summary["eval/loss"] = str(loss) if k == 1 else loss
        run.finish()
        wandb.teardown()
    runs = flops_fit.load_runs(quiet_env / "wandb", loss_col="eval/loss", all_rates=True)
    assert runs.excluded == []
    assert runs.frame.set_index("run_id")["loss"].to_dict() == pytest.approx({f"r{k}": RUNS[k][3] for k in range(3)})
    run = wandb.init(mode="offline", project="p", dir=str(quiet_env), name="r3", config={"params": 4e6, "tokens": 8e7})
    run.summary["eval/loss"] = "n/a"
    run.finish()
    wandb.teardown()
    with pytest.raises(FitInputError, match=r"column 'eval/loss' has 1 missing or non-numeric value\(s\) \(runs r3: 'n/a'\)"):
        flops_fit.load_runs(quiet_env / "wandb", loss_col="eval/loss", all_rates=True)


def test_mlflow_file_store_read_back(quiet_env):
    mlflow = pytest.importorskip("mlflow")
    store = quiet_env / "mlruns"
    mlflow.set_tracking_uri(store.as_uri())
    mlflow.set_experiment("sweep")
    for params, tokens, lr, loss, ok in RUNS:
        with mlflow.start_run():
            mlflow.log_params({"params": params, "tokens": tokens, "lr": lr})
            for s in range(1, STEPS + 1):
                mlflow.log_metric("train_loss", curve(params, s), step=s)
            mlflow.log_metric("val_loss", loss)
            if not ok:
                mlflow.end_run(status="FAILED")
    runs = flops_fit.load_runs(store, loss_col="val_loss", keep=("lr",), all_rates=True)
    check(runs)
    assert "schedule" not in runs.frame  # the runs logged no schedule: the whole-curve law says so
    check(flops_fit.load_runs(store, loss_col="val_loss", keep=("lr",), experiment="sweep", all_rates=True))
    with pytest.raises(FitInputError, match="no MLflow experiment 'other'.*'sweep'"):
        flops_fit.load_runs(store, loss_col="val_loss", experiment="other")
    with pytest.raises(FitInputError, match="no loss column 'eval_loss'.*'val_loss'.*--loss-col"):
        flops_fit.load_runs(store, loss_col="eval_loss")
    with pytest.raises(FitInputError, match="curve metric 'loss/train'.*'train_loss'"):
        flops_fit.load_runs(store, loss_col="val_loss", curve_metric="loss/train")


def test_tensorboard_event_files_read_back(tmp_path):
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    for k, (params, tokens, lr, loss, ok) in enumerate(RUNS):
        if not ok:
            continue  # event files hold no status: a failed run is one that is not there
        with tensorboard.SummaryWriter(str(tmp_path / "logs" / f"run{k}")) as writer:
            for s in range(1, STEPS + 1):
                writer.add_scalar("train_loss", curve(params, s), global_step=s)
            writer.add_hparams({"params": params, "tokens": tokens, "lr": lr}, {"hparam/loss": loss}, run_name=".")
    check(flops_fit.load_runs(tmp_path / "logs", loss_col="hparam/loss", keep=("lr",), all_rates=True), ids_failed=0)


def test_tensorboard_runs_of_two_projects_in_folders_of_their_own_are_told_apart(tmp_path):
    """``logs/project-a/run0`` beside ``logs/project-b/run0``: two projects' runs were fitted as one sweep without a
    word. The folder each lies in is now a column, which the fit's note names and ``where`` selects by."""
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    for project, shift in (("project-a", 0.0), ("project-b", 0.5)):
        for k, (params, tokens, _lr, loss, _ok) in enumerate(RUNS[:3]):
            with tensorboard.SummaryWriter(str(tmp_path / "logs" / project / f"run{k}")) as writer:
                writer.add_hparams({"params": params, "tokens": tokens}, {"eval/loss": loss + shift}, run_name=".")
    both = flops_fit.load_runs(tmp_path / "logs", loss_col="eval/loss")
    assert len(both) == 6 and any("2 settings by column 'folder'" in c for c in both.cautions)
    one = flops_fit.load_runs(tmp_path / "logs", loss_col="eval/loss", where={"folder": "project-b"})
    assert sorted(one.frame["loss"]) == pytest.approx(sorted(r[3] + 0.5 for r in RUNS[:3]))
    assert sorted(one.frame["run_id"]) == ["project-b/run0", "project-b/run1", "project-b/run2"]
    alone = flops_fit.load_runs(tmp_path / "logs" / "project-a", loss_col="eval/loss")  # one folder: no column
    assert "folder" not in alone.frame and not alone.cautions


def test_a_tracker_without_the_sizes_says_where_to_log_them(tmp_path):
    """Scalars alone (no hparams): a TensorBoard user cannot name a column that is not there; the
    refusal says how to log it, the way the test above reads back."""
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    with tensorboard.SummaryWriter(str(tmp_path / "logs" / "run0")) as writer:
        writer.add_scalar("eval/loss", 3.5, global_step=4)
    with pytest.raises(FitInputError, match=r"no params column 'params'; .* \(CLI: --params-col\), or log it with each "
                                            r"run as an hparam \(SummaryWriter\.add_hparams\(\{'params': N, 'tokens': D\}"):
        flops_fit.load_runs(tmp_path / "logs", loss_col="eval/loss")


def test_wandb_csv_export_names_and_states(tmp_path):
    """The runs table W&B's page exports: Name and State columns beside config and summary."""
    path = tmp_path / "wandb_export.csv"
    pd.DataFrame({"Name": ["a", "b", "c"], "State": ["finished", "crashed", "finished"], "params": [1e6, 2e6, 4e6],
                  "tokens": [2e7, 4e7, 8e7], "eval/loss": [4.0, 3.5, 3.2]}).to_csv(path, index=False)
    runs = flops_fit.load_runs(path, loss_col="eval/loss")
    assert runs.frame["run_id"].tolist() == ["a", "c"]
    assert runs.excluded == [{"run_id": "b", "reason": "status 'crashed'"}]


def test_boundaries_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text('params,tokens,loss\n1,2,3\n"4,5,6\n')
    with pytest.raises(FitInputError, match="not a readable CSV"):
        flops_fit.load_runs(bad)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["fit", str(empty)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no tracker's runs" in err
    assert main(["fit", str(bad)]) == 2
    assert "not a readable CSV" in capsys.readouterr().err
    assert os.listdir(empty) == []


def test_a_report_goes_beside_a_trackers_folder_never_into_it(tmp_path):
    from flops_fit.cli.fit import default_report_path

    (tmp_path / "mlruns").mkdir()
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "runs.sqlite").touch()
    assert default_report_path(str(tmp_path / "mlruns")) == tmp_path / "mlruns.report.html"
    assert default_report_path(str(tmp_path / "sweep")) == tmp_path / "sweep" / "report.html"
    assert default_report_path(str(tmp_path / "runs.csv")) == tmp_path / "runs.report.html"
    assert default_report_path("sqlite:///x/mlflow.db") == Path("report.html")


def test_a_sweep_in_mlflow_fits_as_its_table_does(quiet_env):
    """fit() reads the tracker the way it reads the same runs as a table: the same law."""
    mlflow = pytest.importorskip("mlflow")

    table = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, curve_points=4)
    store = quiet_env / "mlruns"
    mlflow.set_tracking_uri(store.as_uri())
    mlflow.set_experiment("isoflop")
    for row in table.itertuples():
        with mlflow.start_run(run_name=row.run_id):
            mlflow.log_params({"params": row.params, "tokens": row.tokens, "budget": row.budget})
            for seen, value in row.curve:
                mlflow.log_metric("train_loss", value, step=int(seen))
            mlflow.log_metric("eval_loss", row.loss)
    columns = table[["run_id", "params", "tokens", "budget", "loss"]]
    from_table = flops_fit.fit(columns, method="isoflop", bootstrap=20)
    from_tracker = flops_fit.fit(store, method="isoflop", bootstrap=20, loss_col="eval_loss")
    a, b = from_tracker.predict([1e20]), from_table.predict([1e20])
    point = [c for c in b.columns if not c.endswith(("_lo", "_hi"))]  # intervals resample in the runs' order
    assert np.allclose(a[point].to_numpy(float), b[point].to_numpy(float), rtol=1e-9)
    runs = flops_fit.load_runs(store, loss_col="eval_loss")
    assert runs.has_curves and len(runs) == len(table)


def test_tensorboard_subfolders_logging_one_tag_are_told_apart(tmp_path):
    """A run that logs ``loss`` from a train/ and an eval/ writer (as Keras and many scripts do): the
    two series were merged into one, and the run's loss was whichever was larger at the last step."""
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    for k, (params, tokens, lr, loss, _ok) in enumerate(RUNS):
        run = tmp_path / "logs" / f"run{k}"
        with tensorboard.SummaryWriter(str(run / "train")) as writer:
            for s in range(1, STEPS + 1):
                writer.add_scalar("loss", curve(params, s), global_step=s)
        with tensorboard.SummaryWriter(str(run / "eval")) as writer:
            writer.add_scalar("loss", loss, global_step=STEPS)
        with tensorboard.SummaryWriter(str(run)) as writer:
            writer.add_hparams({"params": params, "tokens": tokens, "lr": lr}, {}, run_name=".")
    runs = flops_fit.load_runs(tmp_path / "logs", loss_col="eval/loss", curve_metric="train/loss", all_rates=True)
    frame = runs.frame.sort_values(["params", "lr"]).reset_index(drop=True)
    assert frame["loss"].tolist() == pytest.approx([r[3] for r in sorted(RUNS)], rel=1e-6)
    assert all(np.allclose(c[:, 1], [curve(p, s) for s in range(1, STEPS + 1)], rtol=1e-6)
               for p, c in zip(frame["params"], frame["curve"], strict=True))


def test_keras_style_logs_with_train_and_validation_writers_only_are_one_run_each(tmp_path):
    """What ``tf.keras.callbacks.TensorBoard`` writes: a run folder holding only ``train/`` and ``validation/``
    writers (``epoch_loss`` in both), no events of its own. Each run read as two runs, ``run0/train`` and
    ``run0/validation``, neither with both losses."""
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    for k, (params, tokens, lr, loss, _ok) in enumerate(RUNS):
        run = tmp_path / "logs" / f"run{k}"
        with tensorboard.SummaryWriter(str(run / "train")) as writer:
            for s in range(1, STEPS + 1):
                writer.add_scalar("epoch_loss", curve(params, s), global_step=s)
            writer.add_hparams({"params": params, "tokens": tokens, "lr": lr}, {}, run_name=".")
        with tensorboard.SummaryWriter(str(run / "validation")) as writer:
            writer.add_scalar("epoch_loss", loss, global_step=STEPS)
    runs = flops_fit.load_runs(tmp_path / "logs", loss_col="validation/epoch_loss", curve_metric="train/epoch_loss",
                               all_rates=True)
    frame = runs.frame.sort_values(["params", "lr"]).reset_index(drop=True)
    assert sorted(frame.run_id) == [f"run{k}" for k in range(len(RUNS))]
    assert frame["loss"].tolist() == pytest.approx([r[3] for r in sorted(RUNS)], rel=1e-6)
    assert all(np.allclose(c[:, 1], [curve(p, s) for s in range(1, STEPS + 1)], rtol=1e-6)
               for p, c in zip(frame["params"], frame["curve"], strict=True))
    # one such run given by its own folder: the folder is the run
    [one] = flops_fit.load_runs(tmp_path / "logs" / "run0", loss_col="validation/epoch_loss").frame.itertuples()
    assert (one.run_id, one.params, one.loss) == ("run0", RUNS[0][0], pytest.approx(RUNS[0][3]))


def test_an_mlflow_store_of_several_experiments_says_it_fits_them_together(quiet_env):
    """A store holding two experiments (two recipes, the same sizes): load_runs read every run of both into one
    fit without a word, where a table with an experiment column is cautioned and told how to fit one alone."""
    mlflow = pytest.importorskip("mlflow")
    store = quiet_env / "mlruns"
    mlflow.set_tracking_uri(store.as_uri())
    for name, shift in (("base", 0.0), ("new-recipe", -0.25)):
        mlflow.set_experiment(name)
        for params, tokens, _lr, loss, _ok in RUNS:
            with mlflow.start_run():
                mlflow.log_params({"params": params, "tokens": tokens})
                mlflow.log_metric("val_loss", loss + shift)
    runs = flops_fit.load_runs(store, loss_col="val_loss")
    assert len(runs) == 2 * len(RUNS)
    [caution] = [n for n in runs.notes if "settings" in n]
    assert caution.startswith("the table holds 2 settings by column 'experiment' (")
    assert caution.endswith("(CLI: --where experiment=VALUE)")
    alone = flops_fit.load_runs(store, loss_col="val_loss", where={"experiment": "new-recipe"})
    assert sorted(alone.frame.loss) == pytest.approx(sorted(r[3] - 0.25 for r in RUNS))
    assert not any("settings" in n for n in alone.notes)
    one = flops_fit.load_runs(store, loss_col="val_loss", experiment="base")  # one experiment read: no such column
    assert len(one) == len(RUNS) and "experiment" not in one.frame and not one.notes
    mlflow.set_experiment("empty")  # experiments without runs (MLflow's Default among them) are no setting
    mlflow.set_tracking_uri((quiet_env / "other").as_uri())
    mlflow.set_experiment("only")
    with mlflow.start_run():
        mlflow.log_params({"params": 1e6, "tokens": 2e7})
        mlflow.log_metric("val_loss", 3.0)
    assert "experiment" not in flops_fit.load_runs(quiet_env / "other", loss_col="val_loss").frame


def test_an_mlflow_store_that_cannot_be_read_is_one_line(quiet_env):
    """A server that does not answer printed a traceback after four minutes of MLflow's retries; a database
    store read with mlflow-skinny (no SQLAlchemy) printed MLflow's registry traceback."""
    pytest.importorskip("mlflow")
    import importlib.util
    import time

    started = time.monotonic()
    with pytest.raises(FitInputError, match=r"^http://127\.0\.0\.1:9/: MLflow cannot read this store \(.*\); check "
                                            r"the URI, or that its server is running$"):
        flops_fit.load_runs("http://127.0.0.1:9/")  # the discard port: refused at once
    assert time.monotonic() - started < 60 and "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ
    if importlib.util.find_spec("sqlalchemy") is None:  # mlflow-skinny
        with pytest.raises(FitInputError, match=r"a database store needs the full MLflow \(pip install mlflow"):
            flops_fit.load_runs(f"sqlite:///{quiet_env / 'runs.db'}")


def test_an_mlflow_file_uri_that_is_not_there_is_refused_and_nothing_created(quiet_env):
    """MLflow's file store creates a missing folder with a Default experiment: a mistyped URI left a store
    behind and said only "no runs found"."""
    pytest.importorskip("mlflow")
    missing = quiet_env / "mlrunz"
    with pytest.raises(FitInputError, match=r"no such MLflow store folder .*mlrunz\); give the folder that holds"):
        flops_fit.load_runs(missing.as_uri())
    assert not missing.exists()


def test_a_rate_configured_as_a_parameter_and_logged_as_it_decays_is_read_at_its_peak(tmp_path):
    """``lr`` as an hparam (the peak) and as a scalar each step (the schedule): the metric's last value won,
    so every run's rate read as its decayed end (a tenth of its peak here), and a law fitted to them planned
    rates ten times too low."""
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    for k, (params, tokens, lr, loss, _ok) in enumerate(RUNS):
        with tensorboard.SummaryWriter(str(tmp_path / "logs" / f"run{k}")) as writer:
            for s in range(1, STEPS + 1):
                writer.add_scalar("train_loss", curve(params, s), global_step=s)
                writer.add_scalar("lr", lr * (1 - 0.9 * s / STEPS), global_step=s)
            writer.add_hparams({"params": params, "tokens": tokens, "lr": lr}, {"hparam/loss": loss}, run_name=".")
    runs = flops_fit.load_runs(tmp_path / "logs", loss_col="hparam/loss", keep=("lr",), all_rates=True)
    frame = runs.frame.sort_values(["params", "lr"]).reset_index(drop=True)
    assert frame["lr"].tolist() == pytest.approx([r[2] for r in sorted(RUNS)])
    # a parameter that is no number (the loss function's name) still gives way to the metric of its name
    run = flops_fit.sources.TrackedRun("a", "finished", {"loss": "cross_entropy", "lr": 1e-3}, {"loss": 3.2, "lr": 1e-4})
    row = flops_fit.sources.table([run], "runs", curve_metric=None, tokens_col="tokens").iloc[0]
    assert row["loss"] == 3.2 and row["lr"] == 1e-3


def test_a_curve_of_a_run_that_logged_flops_and_no_tokens_is_put_on_its_tokens(tmp_path):
    """Parameters and FLOPs as hparams, no tokens: load_runs counts tokens = flops / (6 params), but the curve
    kept its step numbers as tokens (1 to 5 for a run of 20M tokens), and the envelope fitted steps."""
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    for k, (params, tokens, lr, loss, _ok) in enumerate(RUNS):
        with tensorboard.SummaryWriter(str(tmp_path / "logs" / f"run{k}")) as writer:
            for s in range(1, STEPS + 1):
                writer.add_scalar("train_loss", curve(params, s), global_step=s)
            writer.add_hparams({"params": params, "flops": 6 * params * tokens, "lr": lr}, {"hparam/loss": loss},
                               run_name=".")
    frame = flops_fit.load_runs(tmp_path / "logs", loss_col="hparam/loss", all_rates=True).frame
    for tokens, c in zip(frame["tokens"], frame["curve"], strict=True):
        assert np.allclose(c[:, 0], [tokens * s / STEPS for s in range(1, STEPS + 1)])


def test_a_tensorboard_folder_with_events_of_its_own_and_run_subfolders_reads_each_run(tmp_path):
    """A log folder whose own writer logged (a summary beside the runs, or a run of its own) and that holds
    run subfolders read as one run: every subfolder's events merged into it."""
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    logs = tmp_path / "logs"
    finished = [r for r in RUNS if r[4]]
    for k, (params, tokens, lr, loss, _ok) in enumerate(finished):
        with tensorboard.SummaryWriter(str(logs / f"run{k}" / "train")) as writer:  # a run's own writer below it
            for s in range(1, STEPS + 1):
                writer.add_scalar("train_loss", curve(params, s), global_step=s)
        with tensorboard.SummaryWriter(str(logs / f"run{k}")) as writer:
            writer.add_hparams({"params": params, "tokens": tokens, "lr": lr}, {"hparam/loss": loss})  # a subfolder
    with tensorboard.SummaryWriter(str(logs)) as writer:  # the sweep's summary beside its runs: no run
        writer.add_scalar("runs_done", len(finished), global_step=1)
    runs = flops_fit.load_runs(logs, loss_col="hparam/loss", curve_metric="train_loss", keep=("lr",), all_rates=True)
    frame = runs.frame.sort_values(["params", "lr"]).reset_index(drop=True)
    assert sorted(runs.frame.run_id) == [f"run{k}" for k in range(len(finished))]
    assert frame["loss"].tolist() == pytest.approx([r[3] for r in sorted(finished)], rel=1e-6)
    assert all(np.allclose(c[:, 1], [curve(p, s) for s in range(1, STEPS + 1)], rtol=1e-6)
               for p, c in zip(frame["params"], frame["curve"], strict=True))
    # the folder's own writer logging a run of its own: one run more, its events its own
    params, tokens, lr, loss, _ok = finished[0]
    with tensorboard.SummaryWriter(str(logs)) as writer:
        writer.add_hparams({"params": 2 * params, "tokens": tokens, "lr": lr}, {"hparam/loss": loss}, run_name=".")
    runs = flops_fit.load_runs(logs, loss_col="hparam/loss", keep=("lr",), all_rates=True)
    assert sorted(runs.frame.run_id) == ["logs", *(f"run{k}" for k in range(len(finished)))]
    assert runs.frame.set_index("run_id").params["logs"] == 2 * params
    # one run's parameters logged apart (add_hparams(run_name="hp")) beside its scalars: still one run
    with tensorboard.SummaryWriter(str(tmp_path / "one")) as writer:
        for s in range(1, STEPS + 1):
            writer.add_scalar("train_loss", curve(params, s), global_step=s)
        writer.add_hparams({"params": params, "tokens": tokens, "lr": lr}, {"hparam/loss": loss}, run_name="hp")
    [one] = flops_fit.load_runs(tmp_path / "one", loss_col="hparam/loss", curve_metric="train_loss").frame.itertuples()
    assert (one.run_id, one.params, one.loss) == ("one", params, pytest.approx(loss))
    assert np.allclose(one.curve[:, 1], [curve(params, s) for s in range(1, STEPS + 1)], rtol=1e-6)


def test_tracker_runs_sharing_a_display_name_keep_their_own_ids(quiet_env):
    """MLflow runs (and a W&B export's rows) named alike had one run id: two runs read as one, or one lost."""
    mlflow = pytest.importorskip("mlflow")
    store = quiet_env / "mlruns"
    mlflow.set_tracking_uri(store.as_uri())
    mlflow.set_experiment("sweep")
    finished = [r for r in RUNS if r[4]]
    ids = []
    for k, (params, tokens, lr, loss, _ok) in enumerate(finished):
        with mlflow.start_run(run_name="baseline" if k < 2 else "other") as run:
            mlflow.log_params({"params": params, "tokens": tokens, "lr": lr})
            mlflow.log_metric("val_loss", loss)
            ids.append(run.info.run_id)
    frame = flops_fit.load_runs(store, loss_col="val_loss", keep=("lr",), all_rates=True).frame
    assert sorted(frame.run_id) == sorted([f"baseline ({ids[0][:8]})", f"baseline ({ids[1][:8]})", "other"])
    by_id = frame.set_index("run_id")
    assert by_id.loss[f"baseline ({ids[1][:8]})"] == pytest.approx(finished[1][3])
    export = pd.DataFrame({"Name": ["a", "a", "b"], "State": ["finished"] * 3, "params": [1e6, 2e6, 4e6],
                           "tokens": [2e7, 4e7, 8e7], "eval/loss": [4.0, 3.5, 3.2]})
    path = quiet_env / "wandb_export.csv"
    export.to_csv(path, index=False)
    assert flops_fit.load_runs(path, loss_col="eval/loss").frame.run_id.tolist() == ["a (row 1)", "a (row 2)", "b"]
    export.assign(ID=["x1", "x2", "x3"]).to_csv(path, index=False)
    assert flops_fit.load_runs(path, loss_col="eval/loss").frame.run_id.tolist() == ["a (x1)", "a (x2)", "b"]
