"""Experiment tracking: a tiny real sweep's logs read back with TensorBoard's event reader,
MLflow's client on the file store and W&B's offline run files; a resumed run's curve has no
repeated step; a backend that cannot import or write warns once and the sweep finishes."""

import json
import math
import os
import shutil
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import sweep_support

import flops_fit
from flops_fit.cli.main import main
from flops_fit.errors import FitInputError, FlopsFitError, PlanError, TrackingWarning
from flops_fit.executors.stopping import clear_stop, request_stop
from flops_fit.store.run_store import RunStore
from flops_fit.sweeps.config import parse_config
from flops_fit.sweeps.driver import sweep
from flops_fit.sweeps.planner import plan
from flops_fit.tracking import OPENERS, Trackers, TrackingOptions, destination, parse_tracking
from flops_fit.tracking.options import SWEEP_KEY, TrackedRun
from flops_fit.tracking.tensorboard_backend import TensorBoardTracker
from flops_fit.training.checkpoint import CheckpointPolicy, list_checkpoints
from flops_fit.training.loop import train
from flops_fit.training.task import train_tracked

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
mlflow_tracking = pytest.importorskip("mlflow.tracking")

HOST = sweep_support.host()
TESTS = Path(__file__).resolve().parent
EVERY_STEP = 1e-9  # checkpoint_seconds that makes every step due
# The sweeps here are 6 tiny runs with no interior minimum: Approach 3 and every bootstrap interval refuse
# them honestly (tests/test_fit_weak_sweep.py); the interaction law without resamples answers, and the
# fit's answer is all the tracking tests need.
FIT = "interaction"


@pytest.fixture(autouse=True)
def offline_tracking(tmp_path, monkeypatch):
    """W&B offline with its config and cache in the test's folder; MLflow's file store allowed
    in this (reading) process too."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home"))
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def run(out, **overrides):
    return sweep(host=HOST, out_dir=out, show_progress=False, skip_parity=True,
                 **sweep_support.small_plan_options(**overrides))


# --------------------------------------------------------------------------- readers
def tensorboard(folder):
    events = event_accumulator.EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def scalars(events, tag):
    return [(e.step, e.value) for e in events.Scalars(tag)]


def text(events, tag):
    """The newest text logged under ``tag`` (written indented as a Markdown code block)."""
    raw = events.Tensors(f"{tag}/text_summary")[-1].tensor_proto.string_val[0].decode()
    return "\n".join(line[4:] for line in raw.splitlines())


def mlflow_client(tracking_dir):
    return mlflow_tracking.MlflowClient((Path(tracking_dir) / "mlruns").as_uri())


def mlflow_runs(client, experiment):
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no MLflow experiment {experiment!r}"
    runs = client.search_runs([found.experiment_id])
    keys = [r.data.tags["flops_fit.key"].split("/")[1] for r in runs]
    assert len(keys) == len(set(keys)), f"an MLflow run was opened twice: {sorted(keys)}"
    return dict(zip(keys, runs, strict=True))


def history(client, run, key):
    return sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))


def wandb_records(run_folder):
    """The protobuf records of a W&B offline run (``run-ID.wandb``: a 7-byte header, then
    LevelDB-style 32 KiB blocks of checksummed, possibly split records)."""
    from wandb.proto import wandb_internal_pb2

    [path] = Path(run_folder).glob("run-*.wandb")
    data, pos, pending, records = path.read_bytes(), 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            break
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history(records, key):
    return [next(json.loads(i.value_json) for i in r.history.item if i.nested_key == [key])
            for r in records if r.WhichOneof("record_type") == "history"
            and any(i.nested_key == [key] for i in r.history.item)]


# --------------------------------------------------------------------- the options
def test_the_tracking_options_accept_a_table_a_list_or_a_name_and_refuse_the_rest_in_one_line():
    assert parse_tracking(None) is None and parse_tracking({}) is None
    assert parse_tracking("tensorboard,mlflow").backends == ("tensorboard", "mlflow")
    assert parse_tracking(["wandb"]) == TrackingOptions(("wandb",))
    table = parse_tracking({"backends": ["mlflow"], "dir": "/logs", "experiment": "e", "wandb_mode": "online"})
    assert (table.dir, table.experiment, table.wandb_mode) == ("/logs", "e", "online")
    assert parse_tracking({"backends": ["mlflow"], "experiment": "lab/runs:2"}).experiment == "lab/runs:2"  # MLflow's
    for value, message in [
        (["tensorbord"], "tracking.backends: unknown backend 'tensorbord'; the backends are tensorboard, mlflow, wandb"),
        ({"backends": []}, "tracking.backends must list one or more of tensorboard, mlflow, wandb"),
        ({"dir": "x"}, "tracking needs backends = [...], some of tensorboard, mlflow, wandb"),
        ({"backends": ["mlflow"], "project": "x"}, "tracking: unknown key(s) ['project']; the keys are"),
        ({"backends": ["wandb"], "wandb_mode": "cloud"}, "tracking.wandb_mode must be one of 'offline', 'online'"),
        ({"backends": ["mlflow", "mlflow"]}, "tracking.backends names a backend twice"),
        ({"backends": ["wandb"], "experiment": "lab/runs:2"},  # W&B refused it as each run opened: untracked
         "tracking.experiment 'lab/runs:2' names the W&B project, and W&B refuses a name that holds '/:'; use at "
         "most 128 characters without any of '/\\\\#?%:'"),
        ({"backends": ["wandb"], "experiment": "x" * 129}, "tracking.experiment 'xxx"),
        (3, "tracking must be a table like"),
    ]:
        with pytest.raises(PlanError) as caught:
            flops_fit.SweepOptions(model="gpt", budgets=[1e11], tracking=value)
        assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_tracking_table_of_a_sweep_file_becomes_the_option_and_the_store_records_it():
    config = parse_config({"sweep": {"model": "gpt", "budgets": [1e11]},
                           "tracking": {"backends": ["tensorboard", "wandb"], "experiment": "lab"}})
    assert config.options.tracking == TrackingOptions(("tensorboard", "wandb"), experiment="lab")
    recorded = config.options.to_dict()["tracking"]
    assert json.loads(json.dumps(recorded))["backends"] == ["tensorboard", "wandb"]
    assert flops_fit.SweepOptions.from_dict(config.options.to_dict()).tracking == config.options.tracking
    assert parse_config({"sweep": {"model": "gpt", "budgets": [1e11]}}).options.tracking is None


def test_a_bad_tracking_table_or_flag_is_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(sweep_support.SMALL_SWEEP_TOML + '\n[tracking]\nbackends = ["tensorboard", "neptune"]\n')
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (f"flops-fit: error: {path}: tracking.backends: unknown backend 'neptune'; "
                   "the backends are tensorboard, mlflow, wandb\n")
    path.write_text(sweep_support.SMALL_SWEEP_TOML)
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--tracking", "tensorboard,comet"]) == 2
    assert capsys.readouterr().err == ("flops-fit: error: tracking.backends: unknown backend 'comet'; "
                                       "the backends are tensorboard, mlflow, wandb\n")
    assert not (tmp_path / "out").exists()  # refused before anything was written


# ----------------------------------------------------------- a tiny sweep, read back
@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """A 6-run sweep tracked by all three backends, then fitted (logged to the sweep's run)."""
    out = tmp_path_factory.mktemp("tracked") / "tiny-sweep"
    env = pytest.MonkeyPatch()
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "MLFLOW_ALLOW_FILE_STORE": "true",
                        "WANDB_CONFIG_DIR": str(out.parent / "wandb-home"),
                        "WANDB_CACHE_DIR": str(out.parent / "wandb-home"),
                        "WANDB_DATA_DIR": str(out.parent / "wandb-home")}.items():
        env.setenv(name, value)
    pytest.importorskip("wandb")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", TrackingWarning)  # nothing may fail here
            result = run(out, tracking=["tensorboard", "mlflow", "wandb"])
            fitted = result.fit(method=FIT, bootstrap=0)
    finally:
        env.undo()
    with RunStore(out) as store:
        specs = {s.run_id: s for s in store.planned_runs()}
    return out, result.runs.set_index("run_id"), specs, fitted


def test_tensorboard_has_each_runs_spec_curve_and_held_out_loss(tracked):
    out, runs, specs, _ = tracked
    folder = out / "tracking" / "tensorboard"
    assert {p.name for p in folder.iterdir()} == {*runs.index, "sweep"}
    for run_id, row in runs.iterrows():
        events = tensorboard(folder / run_id)
        spec = specs[run_id]
        logged = json.loads(text(events, "params.json"))
        assert {k: logged[k] for k in ("model", "size", "params", "budget", "tokens", "lr", "schedule")} == \
            {"model": "tiny-lm", "size": spec.size, "params": spec.params, "budget": spec.budget,
             "tokens": spec.tokens, "lr": spec.lr, "schedule": "cosine"}
        curve = scalars(events, "train/loss")
        assert [s for s, _ in curve] == [int(t) for t, _ in row.curve]  # one point per curve point, in order
        assert [v for _, v in curve] == pytest.approx([v for _, v in row.curve], rel=1e-6)  # float32 on disk
        assert scalars(events, "eval/loss") == [(row.tokens, pytest.approx(row.loss, rel=1e-6))]
        assert scalars(events, "run/flops") == [(row.tokens, pytest.approx(row.flops, rel=1e-6))]
        lrs = [v for _, v in scalars(events, "train/lr")]
        assert max(lrs) <= spec.lr * (1 + 1e-6) and lrs[-1] < lrs[0]  # the cosine decays


def test_tensorboard_has_the_plan_and_the_fit_on_the_sweeps_run(tracked):
    out, runs, _, fitted = tracked
    events = tensorboard(out / "tracking" / "tensorboard" / "sweep")
    plan_json = json.loads(text(events, "plan.json"))
    assert sorted(r["run_id"] for r in plan_json["runs"]) == sorted(runs.index)
    assert scalars(events, "plan/runs") == [(0, 6.0)]
    assert scalars(events, "sweep/runs_done") == [(6, 6.0)]
    for name in ("E", "A", "B", "alpha", "beta"):
        assert scalars(events, f"fit/{FIT}/{name}") == [(6, pytest.approx(fitted.params[name], rel=1e-6))]
    assert FIT in text(events, "fit.txt")


def test_mlflow_has_one_experiment_a_nested_run_per_run_and_the_fit(tracked):
    out, runs, specs, fitted = tracked
    client = mlflow_client(out / "tracking")
    found = mlflow_runs(client, "tiny-sweep")  # the experiment is named after the sweep folder
    assert set(found) == {*runs.index, "sweep"}
    sweep_run = found["sweep"]
    assert sweep_run.info.status == "FINISHED"
    for run_id, row in runs.iterrows():
        logged, spec = found[run_id], specs[run_id]
        assert logged.info.status == "FINISHED"
        assert logged.data.tags["mlflow.parentRunId"] == sweep_run.info.run_id
        params = logged.data.params
        assert (params["size"], params["params"], params["tokens"], params["schedule"]) == \
            (str(spec.size), str(spec.params), str(spec.tokens), "cosine")
        assert float(params["lr"]) == spec.lr and float(params["budget"]) == spec.budget
        assert history(client, logged, "train/loss") == [(int(t), v) for t, v in row.curve]  # exact
        assert history(client, logged, "eval/loss") == [(row.tokens, row.loss)]
    metrics = sweep_run.data.metrics
    assert {k: metrics[f"fit/{FIT}/{k}"] for k in ("E", "alpha", "beta")} == \
        {k: fitted.params[k] for k in ("E", "alpha", "beta")}
    predicted = 0
    for row in fitted.table().itertuples():  # every finite prediction, with its interval bounds
        label = "C_" + f"{row.budget:.3g}".replace("+", "")
        for quantity in ("N_opt", "D_opt", "loss", "tokens_per_param"):
            for name in (quantity, f"{quantity}_lo", f"{quantity}_hi"):
                value = getattr(row, name)
                key = f"predict/{FIT}/{label}/{name}"
                assert metrics[key] == value if math.isfinite(value) else key not in metrics
                predicted += math.isfinite(value)
    assert predicted >= 12
    (out.parent / "artifacts").mkdir(exist_ok=True)
    fit_json = json.loads(Path(client.download_artifacts(sweep_run.info.run_id, "fit.json",
                                                         str(out.parent / "artifacts"))).read_text())
    assert fit_json["method"] == FIT and fit_json["runs"] == 6
    assert sweep_run.data.params["model"] == "tiny-lm" and sweep_run.data.params["budgets"] == "[20000000.0, 40000000.0]"


def test_wandb_offline_writes_a_run_per_run_with_its_config_and_curve(tracked):
    out, runs, specs, _ = tracked
    folders = {p.name.rsplit("-", 1)[1]: p for p in (out / "tracking" / "wandb").glob("offline-run-*")}
    assert set(folders) == {*runs.index, "sweep"}
    for run_id, row in runs.iterrows():
        records = wandb_records(folders[run_id])
        [start] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        assert start.project == "tiny-sweep" and start.run_group == "tiny-sweep"
        config = {}
        for r in records:
            if r.WhichOneof("record_type") == "config":
                config.update({u.key: json.loads(u.value_json) for u in r.config.update})
        config.update({u.key: json.loads(u.value_json) for u in start.config.update})
        assert config["size"] == specs[run_id].size and config["tokens"] == specs[run_id].tokens
        assert wandb_history(records, "train/loss") == pytest.approx([v for _, v in row.curve], rel=1e-6)
        assert wandb_history(records, "eval/loss") == pytest.approx([row.loss], rel=1e-6)


# ------------------------------------------------------------------------- resume
@pytest.mark.parametrize("backend", ["tensorboard", "mlruns", "wandb"])
def test_a_sweeps_tracker_folder_fits_as_its_store_does(tracked, backend):
    """flops-fit's own tracking read back as a tracker source: the sweep's run (its plan and fits) is
    left out, and each run's `loss` parameter (the loss function's name) is not its loss: eval/loss is.
    Before, the fit refused both folders (a run without params; 'loss' not numeric)."""
    out, runs, _, fitted = tracked
    read = flops_fit.fit(out / "tracking" / backend, FIT, bootstrap=0, tracking=False)
    assert read.runs.frame.set_index("run_id").loss.to_dict() == pytest.approx(runs.loss.to_dict(), rel=1e-6)
    assert read.params == pytest.approx(fitted.params, rel=1e-4)


def test_resuming_a_finished_sweep_logs_no_step_twice(tmp_path):
    first = run(tmp_path, tracking=["tensorboard", "mlflow"]).runs
    sweep(host=HOST, out_dir=tmp_path, resume=True, show_progress=False, skip_parity=True,
          **sweep_support.small_plan_options(tracking=["tensorboard", "mlflow"]))
    events = tensorboard(tmp_path / "tracking" / "tensorboard" / "sweep")
    for tag in events.Tags()["scalars"]:
        steps = [s for s, _ in scalars(events, tag)]
        assert len(steps) == len(set(steps)), f"{tag} logged a step twice: {steps}"
    assert scalars(events, "sweep/runs_done") == [(6, 6.0)]
    assert len(events.Tensors("plan.json/text_summary")) == 1  # the plan, once
    client = mlflow_client(tmp_path / "tracking")
    found = mlflow_runs(client, tmp_path.name)  # one MLflow run per run and one for the sweep, reopened
    assert set(found) == {*first.run_id, "sweep"}
    assert history(client, found["sweep"], "sweep/runs_done") == [(6, 6.0)]


def test_a_run_resumed_after_a_kill_continues_its_curve_without_repeated_steps(tmp_path):
    spec = plan(host=HOST, **sweep_support.small_plan_options(budgets=[2.1e7])).runs[1]
    reference = train(spec, host=HOST)
    target = destination(TrackingOptions(("tensorboard", "mlflow")), tmp_path, "resume test", "resume")
    policy = CheckpointPolicy(str(tmp_path / "checkpoints"), seconds=EVERY_STEP, keep=10_000)

    def stop_three_quarters_in(run_id, done, total, loss):
        if done >= 3 * total // 4:
            request_stop()

    try:
        with pytest.raises(KeyboardInterrupt):
            train_tracked(spec, stop_three_quarters_in, tracking=target, host=HOST, checkpoints=policy)
    finally:
        clear_stop()
    # The kill: the checkpoints of the last part are lost, the points it logged are not.
    keep_until = spec.steps // 2
    for path in list_checkpoints(policy.run_dir(spec.run_id)):
        if int(path.name[5:14]) > keep_until:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    client = mlflow_client(tmp_path / "tracking")
    first = mlflow_runs(client, "resume")[spec.run_id]
    assert first.info.status == "KILLED"
    resumed_at = keep_until * spec.batch_size * spec.seq_len
    assert max(s for s, _ in history(client, first, "train/loss")) > resumed_at  # logged past the checkpoint

    result = train_tracked(spec, tracking=target, host=HOST, checkpoints=policy)
    assert result.timings["resumed_from_step"] == keep_until
    assert result.curve == reference.curve
    steps = [int(t) for t, _ in result.curve]
    events = tensorboard(tmp_path / "tracking" / "tensorboard" / spec.run_id)
    assert [s for s, _ in scalars(events, "train/loss")] == steps
    assert [v for _, v in scalars(events, "train/loss")] == pytest.approx([v for _, v in result.curve], rel=1e-6)
    assert scalars(events, "eval/loss") == [(result.tokens, pytest.approx(result.loss, rel=1e-6))]
    again = mlflow_runs(client, "resume")[spec.run_id]
    assert again.info.run_id == first.info.run_id and again.info.status == "FINISHED"
    assert history(client, again, "train/loss") == [(int(t), v) for t, v in result.curve]


def test_a_text_runs_bits_per_byte_is_logged_beside_its_loss(tmp_path):
    from flops_fit.store.runs import RunResult
    from flops_fit.tracking.base import RunTracker

    text_run, other_run = plan(host=HOST, **sweep_support.small_plan_options()).runs[:2]
    target = destination(TrackingOptions(("tensorboard",)), tmp_path, "bpb test", "bpb")
    # NaN: a dataset that counts no bytes; an image classifier's top-1 error beside its loss
    for spec, bpb, error in ((text_run, 1.25, math.nan), (other_run, math.nan, 0.375)):
        with RunTracker(target, spec) as tracker:
            tracker.finish(RunResult(run_id=spec.run_id, status="done", loss=2.5, bpb=bpb, top1_error=error,
                                     tokens=640, steps=10))
    folder = tmp_path / "tracking" / "tensorboard"
    events = tensorboard(folder / text_run.run_id)
    assert scalars(events, "eval/bpb") == [(640, 1.25)] and scalars(events, "eval/loss") == [(640, 2.5)]
    assert "eval/top1_error" not in events.Tags()["scalars"]
    other = tensorboard(folder / other_run.run_id)
    assert "eval/bpb" not in other.Tags()["scalars"] and scalars(other, "eval/top1_error") == [(640, 0.375)]


def test_wsd_branches_log_their_whole_curve_the_shared_stable_phase_included(tmp_path):
    frame = run(tmp_path, schedule="wsd", tracking=["tensorboard"]).runs.set_index("run_id")
    assert any(t.get("stable_steps_reused") for t in frame.timings)  # some branch took over a stable phase
    for run_id, row in frame.iterrows():
        curve = scalars(tensorboard(tmp_path / "tracking" / "tensorboard" / run_id), "train/loss")
        assert [s for s, _ in curve] == [int(t) for t, _ in row.curve]
        assert [v for _, v in curve] == pytest.approx([v for _, v in row.curve], rel=1e-6)


def test_a_sweep_folder_deleted_and_swept_again_in_the_same_process_is_tracked_again(tmp_path):
    options = {"budgets": [2e7], "tracking": ["mlflow"]}
    run(tmp_path / "again", **options)
    shutil.rmtree(tmp_path / "again")  # MLflow still holds its store of the deleted folder
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrackingWarning)
        frame = run(tmp_path / "again", **options).runs
    assert set(mlflow_runs(mlflow_client(tmp_path / "again" / "tracking"), "again")) == {*frame.run_id, "sweep"}


# -------------------------------------------------------------- failures are isolated
def tracking_warnings(caught):
    return [str(w.message) for w in caught if issubclass(w.category, TrackingWarning)]


def test_backends_that_cannot_import_or_write_warn_once_and_the_sweep_finishes(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` fails as if it were not installed
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    (tmp_path / "tracking").mkdir()
    (tmp_path / "tracking" / "tensorboard").write_text("a file where TensorBoard's folder should be")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run(tmp_path, tracking=["tensorboard", "mlflow"])
        result.fit(method=FIT, bootstrap=0)
    messages = tracking_warnings(caught)
    assert len(messages) == 2, messages
    [mlflow_message] = [m for m in messages if m.startswith("tracking backend 'mlflow' failed to open its run")]
    assert "install it with pip install 'flops-fit[tracking]'" in mlflow_message
    assert any(m.startswith("tracking backend 'tensorboard' failed to open its run") for m in messages)
    assert all(m.endswith("it is switched off and flops-fit goes on without it") for m in messages)
    frame = result.runs
    assert len(frame) == 6 and set(frame.status) == {"done"}


class FailsOnThirdWrite(TensorBoardTracker):
    """The real TensorBoard tracker, whose third metrics write in the process fails (a disk
    that fills up mid-sweep)."""

    writes = 0

    def log_metrics(self, metrics, step):
        type(self).writes += 1
        if type(self).writes == 3:
            raise OSError(28, "No space left on device")
        super().log_metrics(metrics, step)


def test_a_backend_that_fails_mid_sweep_warns_once_and_the_others_log_every_run(tmp_path, monkeypatch):
    monkeypatch.setitem(OPENERS, "tensorboard", FailsOnThirdWrite)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run(tmp_path / "out", tracking=["tensorboard", "mlflow"])
    assert tracking_warnings(caught) == [
        "tracking backend 'tensorboard' failed to log metrics (OSError: [Errno 28] No space left on device); "
        "it is switched off and flops-fit goes on without it"]
    frame = result.runs
    assert len(frame) == 6 and set(frame.status) == {"done"}
    logged = mlflow_runs(mlflow_client(tmp_path / "out" / "tracking"), "out")
    assert set(logged) == {*frame.run_id, "sweep"}
    assert all(r.info.status == "FINISHED" for r in logged.values())
    # TensorBoard opened the sweep's run and the first run only: then it was switched off
    assert len(list((tmp_path / "out" / "tracking" / "tensorboard").iterdir())) == 2


# ----------------------------------------------------------- worker processes, CLI, fit
@pytest.mark.e2e
def test_cli_sweep_on_worker_processes_tracks_every_run_and_the_cli_fit_logs_to_the_sweep(tmp_path, capsys):
    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML + '\n[tracking]\nbackends = ["tensorboard", "mlflow"]\n'
                      '\n[executor]\nname = "local"\nworkers = 2\nthreads = 1\n')
    env = {**os.environ, "PYTHONPATH": str(TESTS), "FLOPS_FIT_PLUGINS": "sweep_support"}
    env.pop("MLFLOW_ALLOW_FILE_STORE")  # flops-fit opts in to MLflow's file store by itself
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "flops_fit", "sweep", str(config), "--out", str(out), "--skip-parity"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "tracking backend" not in proc.stderr, proc.stderr
    assert main(["fit", str(out), "--method", FIT, "--bootstrap", "0"]) == 0  # logs to the sweep's run
    runs = RunStore(out).runs_frame().set_index("run_id")
    client = mlflow_client(out / "tracking")
    found = mlflow_runs(client, "out")
    assert set(found) == {*runs.index, "sweep"}
    for run_id, row in runs.iterrows():  # each logged from its worker process
        assert history(client, found[run_id], "train/loss") == [(int(t), v) for t, v in row.curve]
        assert [s for s, _ in scalars(tensorboard(out / "tracking" / "tensorboard" / run_id), "train/loss")] == \
            [int(t) for t, _ in row.curve]
    assert "fit/interaction/alpha" in found["sweep"].data.metrics
    assert main(["fit", str(out), "--tracking", "neptune"]) == 2
    assert capsys.readouterr().err.endswith("unknown backend 'neptune'; the backends are tensorboard, mlflow, wandb\n")


def test_a_csv_fit_logs_beside_the_csv_and_tracking_true_needs_a_tracked_sweep(tmp_path):
    source = Path(__file__).resolve().parents[2] / "shared" / "data" / "chinchilla_fig4_epoch.csv"
    if not source.is_file():
        pytest.skip("../shared/data/chinchilla_fig4_epoch.csv is not beside this checkout")
    csv = tmp_path / "epoch.csv"
    shutil.copy(source, csv)
    columns = {"params_col": "Model Size", "flops_col": "Training FLOP", "loss_col": "loss"}
    fitted = flops_fit.fit(str(csv), method="parametric", bootstrap=0, tracking=["tensorboard"], **columns)
    events = tensorboard(tmp_path / "tracking" / "tensorboard" / "sweep")
    assert scalars(events, "fit/parametric/alpha") == [(len(fitted.runs), pytest.approx(fitted.params["alpha"]))]
    with pytest.raises(FitInputError, match="not a sweep folder; name the backends instead"):
        flops_fit.fit(str(csv), method="parametric", bootstrap=0, tracking=True, **columns)
    with pytest.raises(FitInputError, match="unknown backend 'tensorflow'"):
        flops_fit.fit(str(csv), method="parametric", bootstrap=0, tracking=["tensorflow"], **columns)


def test_fitting_an_untracked_sweep_logs_nothing_unless_asked(tmp_path, monkeypatch, capsys):
    result = run(tmp_path / "plain")
    result.fit(method=FIT, bootstrap=0)
    assert not (tmp_path / "plain" / "tracking").exists()
    with pytest.raises(FitInputError, match="was run without \\[tracking\\]"):
        result.fit(method=FIT, bootstrap=0, tracking=True)
    result.fit(method=FIT, bootstrap=0, tracking={"backends": ["tensorboard"], "dir": "logs"})
    events = tensorboard(tmp_path / "plain" / "logs" / "tensorboard" / "sweep")
    assert [s for s, _ in scalars(events, "fit/interaction/E")] == [6]
    assert math.isfinite(scalars(events, "fit/interaction/E")[0][1])
    # the CLI prints a backend's failure as one line, and fits all the same
    csv = tmp_path / "runs.csv"
    result.runs.drop(columns=["curve", "timings"]).to_csv(csv, index=False)
    monkeypatch.setitem(sys.modules, "mlflow", None)
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    assert main(["fit", str(csv), "--method", FIT, "--bootstrap", "0", "--tracking", "mlflow"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("flops-fit: tracking backend 'mlflow' failed to open its run (ModuleNotFoundError: ")
    assert err.count("\n") == 1 and err.endswith("it is switched off and flops-fit goes on without it\n")


def test_an_mlflow_server_that_does_not_answer_is_switched_off_with_the_fix(tmp_path, monkeypatch):
    """A tracking URI whose server is down: MLflow's client retried for about four minutes before the sweep's run
    failed to open (here its retries are off, so the old code fails at once, with MLflow's own message)."""
    import socket

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    options = TrackingOptions(("mlflow",), mlflow_uri=f"http://127.0.0.1:{port}")
    where = destination(options, tmp_path / "down", "plan-1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trackers = Trackers(where, TrackedRun(SWEEP_KEY, "sweep", "sweep"))
    assert trackers.backends == []
    assert tracking_warnings(caught) == [
        f"tracking backend 'mlflow' failed to open its run (ConnectionError: the MLflow tracking server "
        f"http://127.0.0.1:{port} does not answer (Connection refused); start it, or set [tracking] mlflow_uri "
        "(or MLFLOW_TRACKING_URI) to one that does); it is switched off and flops-fit goes on without it"]


def test_a_tracking_folder_that_cannot_be_written_is_refused_before_any_run(tmp_path):
    """[tracking] dir under a file: each backend warned that it failed to open its run and was switched off, and the
    whole sweep trained untracked; the preflight now refuses it with the fix, and records nothing."""
    (tmp_path / "a-file").write_text("")
    options = {"budgets": [2e7], "tracking": {"backends": ["tensorboard", "mlflow"], "dir": str(tmp_path / "a-file" / "t")}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(FlopsFitError) as refused:
            run(tmp_path / "out", **options)
    assert str(refused.value) == (f"tracking folder {tmp_path / 'a-file' / 't'} cannot be written ({tmp_path / 'a-file'} "
                                  "is not a writable folder): choose another [tracking] dir, or train untracked "
                                  "(--tracking off)")
    assert tracking_warnings(caught) == []
    assert RunStore(tmp_path / "out").counts() == {}  # the plan was not recorded: the folder takes the corrected sweep
    options["tracking"]["dir"] = str(tmp_path / "logs")
    assert set(run(tmp_path / "out", **options).runs.status) == {"done"}


def test_a_sweep_folder_name_w_and_b_refuses_as_its_project_is_refused_before_any_run(tmp_path):
    """The W&B project defaults to the sweep folder's name: a folder named "lab:1" trained the whole sweep untracked
    in W&B after one warning; the preflight refuses it, naming the fix, and records nothing."""
    with pytest.raises(FlopsFitError) as refused:
        run(tmp_path / "lab:1", budgets=[2e7], tracking=["wandb"])
    assert str(refused.value) == ("the sweep folder's name 'lab:1' names the W&B project, and W&B refuses a name that "
                                  "holds ':'; use at most 128 characters without any of '/\\\\#?%:' (or name the "
                                  "project: [tracking] experiment = \"...\")")
    assert RunStore(tmp_path / "lab:1").counts() == {}
    run(tmp_path / "lab:2", budgets=[2e7], tracking=["tensorboard"])  # other backends take any folder name
