"""A lab's own training script as the trainer ([train] command) of a sweep planned from a
formula or table of its sizes (model "declared"): the example script swept end to end in
real subprocesses, failures recorded with their reason, a kill -9 resumed."""

from __future__ import annotations

import ast
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import flops_fit
from flops_fit.errors import ConfigError, PlanError, StoreError
from flops_fit.store.run_store import RunStore
from flops_fit.sweeps.config import load_config
from flops_fit.sweeps.driver import run_plan
from flops_fit.sweeps.planner import plan
from flops_fit.training.checkpoint import CheckpointPolicy
from flops_fit.training.command import TrainCommand, script_path
from flops_fit.training.external import ENV, train_external

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "external-trainer"
# ByteModel of the example: 512 x size + 256 parameters, 6 x 256 x size training FLOPs per token
SWEEP = """
[sweep]
model = "declared"
dataset = "external"
budgets = [1e8]
sizes = [8, 16, 24]
seq_len = 16
batch_size = 4
min_steps = 10
eval_tokens = 256
checkpoint_seconds = 60

[model]
params = "512 * size + 256"
flops_per_token = "6 * 256 * size"
multiple_of = 8

[hparams]
lr = 0.01

[train]
command = {command}
{extra}
"""


def write_sweep(folder: Path, command: list[str], extra: str = "", text: str = SWEEP) -> Path:
    path = folder / "sweep.toml"
    path.write_text(text.format(command=json.dumps(command), extra=extra))
    return path


def example_command(every: int = 50) -> list[str]:
    return [sys.executable, str(EXAMPLE / "train.py"), "--data", str(EXAMPLE), "--checkpoint-every", str(every)]


def sweep_file(path: Path, out: Path, **options) -> dict[str, dict]:
    config = load_config(path)
    run_plan(plan(config.options), out, show_progress=False, **options)
    with RunStore(out) as store:
        frame = store.runs_frame()
    return {row["run_id"]: row for row in frame.to_dict("records")}


def test_the_example_script_does_not_import_flops_fit():
    tree = ast.parse((EXAMPLE / "train.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported and not any(name.split(".")[0] == "flops_fit" for name in imported)


@pytest.mark.e2e
def test_the_example_script_trains_every_planned_run(tmp_path):
    path = write_sweep(tmp_path, example_command())
    planned = {r.run_id: r for r in plan(load_config(path).options).runs}
    runs = sweep_file(path, tmp_path / "out")
    assert set(runs) == set(planned) and len(runs) == 3
    for run_id, row in runs.items():
        assert row["status"] == "done", row["error"]
        assert row["tokens"] == planned[run_id].tokens and math.isfinite(row["loss"])
        assert row["flops"] == pytest.approx(planned[run_id].tokens * 6 * 256 * planned[run_id].size)
        log = (tmp_path / "out" / "trainer-logs" / f"{run_id}.log").read_text()
        assert f"held-out loss {row['loss']:.4f}" in log  # what the script reported is what was stored
    assert not (tmp_path / "out" / "checkpoints").exists() or not any((tmp_path / "out" / "checkpoints").iterdir())


MISBEHAVING = r'''
import json, os, sys, time
spec = json.load(open(os.environ["FLOPS_FIT_SPEC"]))
size, tokens = int(os.environ["FLOPS_FIT_SIZE"]), int(os.environ["FLOPS_FIT_TOKENS"])
assert spec["size"] == size and spec["tokens"] == tokens and os.path.isdir(os.environ["FLOPS_FIT_CHECKPOINT_DIR"])
result = {"loss": 2.5, "tokens": tokens}
if size == 1:
    sys.exit("out of memory, say")
if size == 2:
    time.sleep(600)
if size == 3:
    sys.exit(0)
if size == 4:
    result["tokens"] = tokens // 2
if size == 5:
    result["loss"] = float("nan")
json.dump(result, open(os.environ["FLOPS_FIT_RESULT"], "w"))
'''
TABLE_SWEEP = """
[sweep]
model = "declared"
dataset = "external"
budgets = [1e6]
sizes = [1, 2, 3, 4, 5, 6]
seq_len = 8
batch_size = 2
min_steps = 2
checkpoint_seconds = 60

[model.table]
1 = {{params = 100}}
2 = {{params = 200}}
3 = {{params = 300}}
4 = {{params = 400}}
5 = {{params = 500}}
6 = {{params = 600, flops_per_token = 3000}}

[train]
command = {command}
{extra}
"""


@pytest.mark.e2e
def test_each_failure_is_recorded_with_its_reason_and_the_sweep_goes_on(tmp_path):
    script = tmp_path / "misbehave.py"
    script.write_text(MISBEHAVING)
    path = write_sweep(tmp_path, [sys.executable, str(script)], "time_limit = 3", TABLE_SWEEP)
    # two worker processes: the task, its [train] command and the results cross process boundaries
    runs = {row["size"]: row for row in sweep_file(path, tmp_path / "out", workers=2).values()}
    assert runs[1]["status"] == "failed" and runs[1]["error"].startswith("crash: the script exited with status 1")
    assert "out of memory, say" in runs[1]["error"]  # the log's tail
    assert runs[2]["status"] == "failed" and runs[2]["error"].startswith("hang: ")
    assert runs[3]["status"] == "failed" and runs[3]["error"].startswith("no result: ")
    assert runs[4]["status"] == "failed" and runs[4]["error"].startswith("tokens off the plan: ")
    assert runs[5]["status"] == "failed" and runs[5]["error"].startswith("non-finite loss: ")
    assert runs[6]["status"] == "done" and runs[6]["loss"] == 2.5
    assert runs[6]["flops"] == runs[6]["tokens"] * 3000  # the table's FLOPs; 6 x params elsewhere
    with RunStore(tmp_path / "out") as store:  # no flops-fit model trained: no parity case applies, none overridden
        assert store.get_meta("parity")["status"] == "not applicable"


@pytest.mark.e2e
def test_a_driver_killed_9_resumes_and_gives_the_uninterrupted_result(tmp_path):
    path = write_sweep(tmp_path, example_command(every=1))
    command = [sys.executable, "-m", "flops_fit", "sweep", str(path), "--out", str(tmp_path / "out")]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (found := list((tmp_path / "out").glob("checkpoints/*/trainer/checkpoints/state.json"))):
        assert driver.poll() is None and time.monotonic() < deadline, "no run checkpointed"
        time.sleep(0.005)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    killed = found[0].parents[2].name
    # the script dies with its driver (it got SIGTERM), so the resumed run is its only attempt
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    with RunStore(tmp_path / "out") as store:
        runs = {row["run_id"]: row for row in store.runs_frame().to_dict("records")}
        spec = next(r for r in store.planned_runs() if r.run_id == killed)
    assert all(row["status"] == "done" for row in runs.values())
    assert "resumed from step" in (tmp_path / "out" / "trainer-logs" / f"{killed}.log").read_text()
    # the same run trained without a kill, by the same script
    alone = train_external(spec, TrainCommand(tuple(example_command(every=1)), logs_dir=str(tmp_path)),
                           checkpoints=CheckpointPolicy(str(tmp_path / "alone")))
    assert alone.status == "done" and alone.tokens == spec.tokens
    assert (runs[killed]["tokens"], runs[killed]["loss"]) == (alone.tokens, alone.loss)
    assert [[float(t), float(v)] for t, v in runs[killed]["curve"]] == alone.curve


def test_the_train_table_is_checked(tmp_path):
    with pytest.raises(ConfigError, match=r"\[train\]: unknown key\(s\) \['comand'\]"):
        load_config(write_sweep(tmp_path, ["x"], 'comand = ["x"]'))
    with pytest.raises(ConfigError, match="time_limit must be a finite positive number"):
        load_config(write_sweep(tmp_path, ["x"], "time_limit = -1"))
    with pytest.raises(ConfigError, match="command must list the script"):
        load_config(write_sweep(tmp_path, []))
    config = load_config(write_sweep(tmp_path, ["python", "train.py"]))
    assert config.options.trainer.workdir == str(tmp_path.resolve())  # paths are the sweep file's


def test_a_missing_program_is_refused_before_anything_is_recorded(tmp_path):
    path = write_sweep(tmp_path, ["no-such-trainer-program"])
    with pytest.raises(flops_fit.PreflightError, match="no-such-trainer-program"):
        sweep_file(path, tmp_path / "out")
    with RunStore(tmp_path / "out") as store:
        assert store.planned_runs() == []
    # python with a script that is not there: every run crashed the same way, one by one
    path = write_sweep(tmp_path, ["python", "trian.py", "--checkpoint-every", "100"])
    with pytest.raises(flops_fit.PreflightError, match=r"python's script 'trian\.py' is not in .*: fix command"):
        sweep_file(path, tmp_path / "out2")
    with RunStore(tmp_path / "out2") as store:
        assert store.planned_runs() == []


def test_a_workdir_that_is_no_folder_is_named_as_the_problem(tmp_path, capsys):
    """`[train] workdir = "nowhere"` said "python's script 'train.py' is not in .../nowhere: fix command", as if
    the script were wrong; the folder itself is named now (missing, or a file), and nothing is recorded."""
    from flops_fit.cli.main import main

    shutil.copy(EXAMPLE / "train.py", tmp_path / "train.py")
    (tmp_path / "a-file").write_text("")
    for workdir, why in (("nowhere", "does not exist"), ("a-file", "is a file")):
        path = write_sweep(tmp_path, ["python", "train.py"], f'workdir = "{workdir}"')
        assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.endswith(f"[train] workdir '{tmp_path.resolve() / workdir}' {why}: the script runs in that folder; "
                            "fix workdir (a relative one is read from the sweep file's folder), or leave it out\n")
        with RunStore(tmp_path / "out") as store:
            assert store.planned_runs() == []


def test_a_folder_trained_by_another_trainer_is_refused(tmp_path):
    script = tmp_path / "misbehave.py"
    script.write_text(MISBEHAVING)
    first = write_sweep(tmp_path, [sys.executable, str(script)], "time_limit = 3", TABLE_SWEEP)
    config = load_config(first)
    run_plan(plan(config.options), tmp_path / "out", show_progress=False, record_only=True)
    other = config.options.replace(trainer={"command": [sys.executable, "other.py"]})
    with pytest.raises(StoreError, match="trained by the command"):
        run_plan(plan(other), tmp_path / "out", show_progress=False, resume=True)


@pytest.mark.parametrize(("model", "message"), [
    ({"params": "size * n_layer"}, "uses 'n_layer', which is not a number of the [model] table"),
    ({"params": "__import__('os')"}, "only numbers, names"),
    ({}, "state the sizes' parameters"),
])
def test_a_formula_that_cannot_count_is_one_line(model, message):
    with pytest.raises(PlanError, match=message.replace("[", r"\[").replace("(", r"\(")):
        flops_fit.plan(model="declared", model_config=model, budgets=[1e9], seq_len=8)


def test_a_size_table_plans_its_own_counts():
    table = {"10": {"params": 1000, "flops_per_token": 7000}, "20": {"params": 3000}, "30": {"params": 6000}}
    runs = flops_fit.plan(model="declared", model_config={"table": table}, budgets=[1e10], sizes=[10, 20, 30],
                          seq_len=8, batch_size=2).runs
    assert [(r.size, r.params, r.flops_per_unit) for r in runs] == [(10, 1000, 7000.0), (20, 3000, 18000.0),
                                                                    (30, 6000, 36000.0)]


def test_the_spec_file_holds_every_field_the_environment_names(tmp_path):
    script = tmp_path / "echo.py"
    script.write_text("import json, os\nspec = json.load(open(os.environ['FLOPS_FIT_SPEC']))\n"
                      f"env = {{k: os.environ[k] for k in {sorted(ENV)!r}}}\n"
                      "json.dump({'loss': 1.0, 'tokens': spec['tokens'], 'spec': spec, 'env': env},"
                      " open(os.environ['FLOPS_FIT_RESULT'], 'w'))\n")
    spec = flops_fit.plan(model="declared", model_config={"params": "100 * size"}, budgets=[1e8], sizes=[1, 2, 3],
                          seq_len=8, batch_size=2).runs[0]
    policy = CheckpointPolicy(str(tmp_path / "ck"))
    result = train_external(spec, TrainCommand((sys.executable, str(script)), logs_dir=str(tmp_path)),
                            checkpoints=policy)
    assert result.status == "done" and result.tokens == spec.tokens
    saved = json.loads((tmp_path / "ck" / spec.run_id / "trainer" / "result.json").read_text())
    assert {k: saved["spec"][k] for k in spec.to_dict()} == spec.to_dict()
    assert saved["env"] == {k: str(getattr(spec, f)) for k, f in ENV.items()}
    assert os.path.isdir(saved["spec"]["checkpoint_dir"])


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="needs a virtual environment (the README's .venv)")
def test_python_in_the_command_is_this_environments_even_when_it_is_not_activated(tmp_path, monkeypatch):
    """`.venv/bin/flops-fit sweep` without activating the environment (the README's way) ran
    `command = ["python", "train.py"]` on the first Python of PATH, the system's: every run crashed on
    `import torch`. The script starts with this environment's folder first, as activating it would."""
    script = tmp_path / "which.py"
    script.write_text("import json, os, sys\nspec = json.load(open(os.environ['FLOPS_FIT_SPEC']))\n"
                      "json.dump({'loss': 1.0, 'tokens': spec['tokens'], 'prefix': sys.prefix},"
                      " open(os.environ['FLOPS_FIT_RESULT'], 'w'))\n")
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", "/bin"]))  # not activated
    spec = flops_fit.plan(model="declared", model_config={"params": "100 * size"}, budgets=[1e8], sizes=[1, 2, 3],
                          seq_len=8, batch_size=2).runs[0]
    result = train_external(spec, TrainCommand(("python", str(script)), logs_dir=str(tmp_path)),
                            checkpoints=CheckpointPolicy(str(tmp_path / "ck")))
    assert result.status == "done", result.error
    saved = json.loads((tmp_path / "ck" / spec.run_id / "trainer" / "result.json").read_text())
    assert saved["prefix"] == sys.prefix
    here = os.path.dirname(sys.executable)
    assert script_path("/usr/bin") == os.pathsep.join([here, "/usr/bin"])
    assert script_path(os.pathsep.join(["/opt/bin", here])) == os.pathsep.join(["/opt/bin", here])  # the user's order


def test_the_examples_sweep_file_plans_and_names_its_script():
    config = load_config(EXAMPLE / "sweep.toml")
    runs = plan(config.options).runs
    assert config.options.trainer.workdir == str(EXAMPLE) and "train.py" in config.options.trainer.command
    assert {r.params for r in runs} == {512 * r.size + 256 for r in runs}  # train.py's ByteModel


def test_the_guide_shows_the_examples_sweep_file_as_it_is():
    """own-trainer.md showed the example's sweep file without its span, min_steps and eval_tokens: a
    reader who copied it planned other runs than `cd examples/external-trainer` trains."""
    import re

    page = (ROOT / "docs" / "guide" / "own-trainer.md").read_text()
    shown = re.findall(r"```toml\n(.*?)```", page, re.S)[0]
    text = (EXAMPLE / "sweep.toml").read_text()
    assert shown == text[text.index("[sweep]"):]


def test_the_guides_size_formulas_and_tables_plan():
    import re
    import tomllib

    blocks = re.findall(r"```toml\n(.*?)```", (ROOT / "docs" / "guide" / "own-trainer.md").read_text(), re.S)
    declared = [tomllib.loads(b)["model"] for b in blocks if b.startswith("[model]\nn_layer") or "[model.table]" in b]
    assert len(declared) == 2
    for model in declared:
        runs = flops_fit.plan(model="declared", model_config=model, budgets=[1e18], seq_len=1024, batch_size=256).runs
        assert len({r.size for r in runs}) >= 3 and all(r.flops_per_unit >= 6 * r.params for r in runs)


def test_train_run_trains_one_recorded_run_with_the_command(tmp_path):
    from flops_fit.sweeps.driver import train_run

    script = tmp_path / "misbehave.py"
    script.write_text(MISBEHAVING)
    config = load_config(write_sweep(tmp_path, [sys.executable, str(script)], "time_limit = 3", TABLE_SWEEP))
    run_plan(plan(config.options), tmp_path / "out", show_progress=False, record_only=True)
    with RunStore(tmp_path / "out") as store:
        by_size = {r.size: r for r in store.planned_runs()}
    assert train_run(tmp_path / "out", by_size[6].run_id).status == "done"
    error = train_run(tmp_path / "out", by_size[3].run_id).error
    # a script that printed nothing: its log is said to be empty (it read "(log PATH: )", as if lines were lost)
    assert error.startswith("no result: ") and error.endswith(".log is empty: the script printed nothing)")
    with RunStore(tmp_path / "out") as store:
        assert store.statuses()[by_size[6].run_id] == "done" and store.statuses()[by_size[3].run_id] == "failed"


def test_the_example_scripts_checkpoint_is_whole_wherever_a_kill_lands(tmp_path, monkeypatch):
    """A kill between writing a checkpoint's weights and its state leaves the previous checkpoint,
    weights and state of one step (the kill test above resumed from a mixed pair, now and then)."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("example_train", EXAMPLE / "train.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    model = example.ByteModel(4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)

    def step() -> None:
        model(torch.zeros(1, 3, dtype=torch.long)).sum().backward()
        optimizer.step()

    step()
    example.save(tmp_path, model, optimizer, {"step": 1, "tokens": 3, "losses": [1.0]})
    first = {k: v.clone() for k, v in model.state_dict().items()}
    step()
    renames = []

    def killed_at_the_state(src, dst):  # the weights' rename goes through, the state's never happens
        if str(dst).endswith("state.json"):
            raise KeyboardInterrupt
        renames.append(dst)
        os.rename(src, dst)

    monkeypatch.setattr(example.os, "replace", killed_at_the_state)
    with pytest.raises(KeyboardInterrupt):
        example.save(tmp_path, model, optimizer, {"step": 2, "tokens": 6, "losses": [1.0, 0.9]})
    assert renames  # the second step's weights were written
    monkeypatch.undo()
    fresh = example.ByteModel(4)
    state = example.restore(tmp_path, fresh, torch.optim.AdamW(fresh.parameters(), lr=0.1))
    assert state["step"] == 1
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in first.items())


def test_plan_of_the_example_does_not_warn_that_sweep_will_refuse_its_data(capsys):
    """The script reads its own data (dataset "external"), and `flops-fit sweep` opens none of it:
    `flops-fit plan` used to end with "warning: dataset 'external' does not open here ...
    `flops-fit sweep` refuses until it opens", a refusal that never comes."""
    from flops_fit.cli.main import main

    assert main(["plan", str(EXAMPLE / "sweep.toml")]) == 0
    out = capsys.readouterr().out
    assert "12 runs of declared" in out and "does not open" not in out and "refuses" not in out


def _result_of(tmp_path: Path, result: str) -> flops_fit.RunResult:
    """What train_external records for a script that writes ``result`` (Python text of a dict over
    ``spec``) as its result file."""
    script = tmp_path / "report.py"
    script.write_text("import json, os\nspec = json.load(open(os.environ['FLOPS_FIT_SPEC']))\n"
                      f"json.dump({result}, open(os.environ['FLOPS_FIT_RESULT'], 'w'))\n")
    spec = flops_fit.plan(model="declared", model_config={"params": "100 * size"}, budgets=[1e8], sizes=[1, 2, 3],
                          seq_len=8, batch_size=2).runs[0]
    return train_external(spec, TrainCommand((sys.executable, str(script)), logs_dir=str(tmp_path)),
                          checkpoints=CheckpointPolicy(str(tmp_path / "ck")))


@pytest.mark.parametrize("loss", ["-2.5", "0"])
def test_a_loss_of_zero_or_below_is_a_bad_result_not_a_done_run(tmp_path, loss):
    # a script that reports the log-likelihood (or a metric mixed up) was stored as done, and every fit
    # of the folder then refused the whole store
    result = _result_of(tmp_path, f"{{'loss': {loss}, 'tokens': spec['tokens']}}")
    assert result.status == "failed" and result.error.startswith("bad result: the held-out loss must be positive")
    assert loss in result.error


@pytest.mark.parametrize("field, value", [("steps", "'many'"), ("steps", "12.5"), ("bpb", "'n/a'")])
def test_an_optional_field_that_is_no_number_is_a_bad_result_naming_it(tmp_path, field, value):
    # was "ValueError: invalid literal for int() with base 10: 'many'": no field, no file, no "bad result:"
    result = _result_of(tmp_path, f"{{'loss': 2.5, 'tokens': spec['tokens'], {field!r}: {value}}}")
    assert result.status == "failed" and result.error.startswith(f'bad result: "{field}"')
    assert "result.json" in result.error
    (tmp_path / "ok").mkdir()
    assert _result_of(tmp_path / "ok", "{'loss': 2.5, 'tokens': spec['tokens'], 'steps': 3, 'bpb': 1.2}").status == "done"


def test_a_scripts_top1_error_is_recorded_and_a_misspelt_key_fails_the_run(tmp_path):
    """`record` stores a result's top1_error and refuses unknown fields; the [train] command's result dropped
    top1_error (an image classifier's error law read nothing) and a misspelt "curv" lost the curve silently."""
    done = _result_of(tmp_path, "{'loss': 2.5, 'tokens': spec['tokens'], 'top1_error': 0.25, 'wall_s': 3}")
    assert done.status == "done" and done.top1_error == 0.25  # the script's own metrics (wall_s) are ignored
    for case, extra, said in [("typo", "'curv': [[8, 3.0]]", 'bad result: "curv" in '),
                              ("range", "'top1_error': 25", 'bad result: "top1_error" (the held-out top-1 error')]:
        (tmp_path / case).mkdir()
        failed = _result_of(tmp_path / case, f"{{'loss': 2.5, 'tokens': spec['tokens'], {extra}}}")
        assert failed.status == "failed" and failed.error.startswith(said), failed.error
        assert case != "typo" or 'did the script mean "curve"?' in failed.error


@pytest.mark.e2e
@pytest.mark.parametrize(("command", "mode", "message"), [
    # was "'./train.sh' is not a program on PATH nor in ...": the file is right there
    ("./train.sh", 0o644, r"train\.sh' is not executable: chmod \+x it"),
    # the preflight found "train.sh" in the workdir, but the system looks bare names up on PATH only:
    # every run then crashed with "cannot start 'train.sh': No such file or directory"
    ("train.sh", 0o755, r"'train\.sh' is in .* but not on PATH.*write it \"\./train\.sh\""),
])
def test_a_script_that_cannot_be_started_as_written_is_refused_before_any_run(tmp_path, command, mode, message):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(mode)
    path = write_sweep(tmp_path, [command])
    with pytest.raises(flops_fit.PreflightError, match=message):
        sweep_file(path, tmp_path / "out")
    with RunStore(tmp_path / "out") as store:
        assert store.planned_runs() == []


@pytest.mark.e2e
def test_runs_the_script_trains_are_logged_to_the_sweeps_trackers(tmp_path):
    # a [train] sweep with tracking logged its plan alone: fitting its tracker folder said "only a sweep's own
    # run (its plan and fits) is logged here, no training run"
    pytest.importorskip("torch.utils.tensorboard")
    script = tmp_path / "report.py"
    script.write_text("import json, os\nt = int(os.environ['FLOPS_FIT_TOKENS']); s = int(os.environ['FLOPS_FIT_SIZE'])\n"
                      "json.dump({'loss': 2 + 1 / s, 'tokens': t, 'curve': [[t // 2, 3 + 1 / s], [t, 2.5 + 1 / s]]},"
                      " open(os.environ['FLOPS_FIT_RESULT'], 'w'))\n")
    path = write_sweep(tmp_path, [sys.executable, str(script)], '[tracking]\nbackends = ["tensorboard"]')
    stored = sweep_file(path, tmp_path / "out")
    tracked = flops_fit.load_runs(tmp_path / "out" / "tracking" / "tensorboard").frame.set_index("run_id")
    assert sorted(tracked.index) == sorted(stored)
    for run_id, row in stored.items():
        assert tracked.at[run_id, "loss"] == pytest.approx(row["loss"], rel=1e-6)
        assert tracked.at[run_id, "tokens"] == row["tokens"]
        assert np.allclose(tracked.at[run_id, "curve"], row["curve"], rtol=1e-6)


def test_a_script_curve_with_a_point_at_no_token_count_is_tracked_without_it(tmp_path):
    from flops_fit.tracking.options import destination, parse_tracking
    from flops_fit.training.task import train_script

    pytest.importorskip("torch.utils.tensorboard")
    script = tmp_path / "report.py"
    script.write_text("import json, os\nt = int(os.environ['FLOPS_FIT_TOKENS'])\n"
                      "json.dump({'loss': 2.5, 'tokens': t, 'curve': [[float('nan'), 3.0], [t, 2.6]]},"
                      " open(os.environ['FLOPS_FIT_RESULT'], 'w'))\n")
    spec = flops_fit.plan(model="declared", model_config={"params": "100 * size"}, budgets=[1e8], sizes=[1, 2, 3],
                          seq_len=8, batch_size=2).runs[0]
    where = destination(parse_tracking(["tensorboard"]), tmp_path / "out", "a test")
    result = train_script(spec, TrainCommand((sys.executable, str(script)), logs_dir=str(tmp_path)), tracking=where)
    assert result.status == "done"
    tracked = flops_fit.load_runs(tmp_path / "out" / "tracking" / "tensorboard").frame
    assert tracked["curve"][0][:, 1].tolist() == pytest.approx([2.6])


def test_train_run_refuses_a_checkpoint_folder_it_cannot_write_and_keeps_the_run_pending(tmp_path, capsys):
    """`flops-fit train-run OUT RUN --checkpoint-dir /proc/nope` recorded the run failed ("FileNotFoundError:
    ... '/proc/nope'", exit 1), and train-run then refused the run for good ("already has a result"); a sweep
    refused the same folder in its preflight. Now train-run refuses it in one line (exit 2), the run still
    to train."""
    from flops_fit.cli.main import main

    script = tmp_path / "misbehave.py"
    script.write_text(MISBEHAVING)
    config = load_config(write_sweep(tmp_path, [sys.executable, str(script)], "time_limit = 3", TABLE_SWEEP))
    run_plan(plan(config.options), tmp_path / "out", show_progress=False, record_only=True)
    with RunStore(tmp_path / "out") as store:
        run_id = store.planned_runs()[0].run_id
    (tmp_path / "a-file").write_text("")
    assert main(["train-run", str(tmp_path / "out"), run_id, "--checkpoint-dir", str(tmp_path / "a-file" / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "cannot be written" in err and "--checkpoint-dir" in err
    with RunStore(tmp_path / "out") as store:
        assert store.statuses().get(run_id) not in ("done", "failed")
