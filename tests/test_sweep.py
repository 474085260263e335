"""Sweeps end to end: results stored, resumed after SIGKILL or Ctrl-C without losing or
repeating a finished run, failures recorded while the sweep goes on, worker processes."""

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sweep_support

import flops_fit
from flops_fit.errors import StoreError
from flops_fit.store.run_store import RunStore
from flops_fit.sweeps.driver import SweepResult, run_plan, sweep
from flops_fit.sweeps.options import SweepOptions
from flops_fit.sweeps.planner import plan
from flops_fit.training.checkpoint import list_checkpoints

HOST = sweep_support.host()
TESTS = Path(__file__).resolve().parent
KILL_OPTIONS = {"budgets": [2e7, 4e7, 8e7]}


def run(out, **overrides):
    return sweep(host=HOST, out_dir=out, show_progress=False, **sweep_support.small_plan_options(**overrides))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted sweep of the plan the kill tests use."""
    out = tmp_path_factory.mktemp("reference")
    return run(out, **KILL_OPTIONS).runs


def test_a_sweep_stores_every_run_with_its_tokens_flops_and_provenance(tmp_path):
    result = run(tmp_path)
    frame = result.runs
    assert len(frame) == 6 and set(frame.status) == {"done"}
    assert (frame.tokens == frame.tokens_planned).all()
    for r in frame.itertuples():
        assert r.flops == r.tokens * sweep_support.training_flops(r.size)
    with RunStore(tmp_path) as store:
        versions = store.get_meta("versions")
        assert versions["flops-fit"] and versions["torch"]
        assert {"sweep_support", "flops_fit.plugins.data.datasets"} <= {p["name"] for p in versions["plugins"]}
        gate = store.get_meta("parity")
        assert gate["status"] == "unverified" and "no quick parity case" in gate["reason"]
        assert store.get_meta("spec")["model"] == "tiny-lm"


def test_the_parity_override_is_recorded(tmp_path):
    sweep(host=HOST, out_dir=tmp_path, show_progress=False, skip_parity=True, **sweep_support.small_plan_options())
    with RunStore(tmp_path) as store:
        assert store.get_meta("parity")["status"] == "overridden"


def test_a_folder_is_never_silently_reused(tmp_path):
    run(tmp_path)
    with pytest.raises(StoreError, match="already holds this sweep: pass resume=True"):
        run(tmp_path)
    with pytest.raises(StoreError, match=r"holds a different sweep \(6 of its runs .* settings that differ: seed\)"):
        run(tmp_path, seed=1)
    before = RunStore(tmp_path).runs_frame()
    after = sweep(host=HOST, out_dir=tmp_path, resume=True, show_progress=False,
                  **sweep_support.small_plan_options()).runs
    assert after.drop(columns=["timings"]).equals(before.drop(columns=["timings"]))  # nothing retrained


def test_a_store_an_older_release_planned_names_that_release(tmp_path):
    """A sweep folder planned by another release read "holds a different sweep (... settings that
    differ: version): choose another --out folder", as if the user had changed the sweep."""
    the_plan = plan(host=HOST, **sweep_support.small_plan_options())
    older = dataclasses.replace(the_plan, runs=[dataclasses.replace(r, version="0.0.9", run_id="") for r in the_plan.runs])
    with RunStore(tmp_path, create=True) as store:
        store.add_plan(older, spec=older.settings)
    this = the_plan.runs[0].version
    with pytest.raises(StoreError, match=rf"settings that differ: version\): it was planned by flops-fit 0\.0\.9 \(this "
                                         rf"is {re.escape(this)}\): resume it with that release \(pip install "
                                         r"flops-fit==0\.0\.9\), or choose another --out folder"):
        sweep(host=HOST, out_dir=tmp_path, resume=True, show_progress=False, **sweep_support.small_plan_options())


def test_a_diverging_run_fails_and_the_sweep_goes_on(tmp_path):
    the_plan = plan(host=HOST, **sweep_support.small_plan_options())
    wild = dataclasses.replace(the_plan.runs[1], lr=1e4, grad_clip=0.0, run_id="")
    the_plan.runs[1] = wild
    frame = run_plan(the_plan, tmp_path, host=HOST, show_progress=False).runs
    assert len(frame) == 6
    failed = frame[frame.status == "failed"]
    assert failed.run_id.tolist() == [wild.run_id]
    assert failed.error.iloc[0].startswith("diverged:")
    assert (frame.status == "done").sum() == 5
    # a failed run is final: resuming does not repeat it, retry_failed does
    with RunStore(tmp_path) as store:
        assert store.unfinished(the_plan) == []


def test_an_error_inside_a_run_is_recorded_and_the_sweep_goes_on(tmp_path):
    the_plan = plan(host=HOST, **sweep_support.small_plan_options())
    broken = the_plan.runs[0]
    the_plan.runs[0] = dataclasses.replace(broken, dataset_config={**broken.dataset_config, "seq_len": 8}, run_id="")
    # the preflight refuses this plan before any run (test_preflight); past it, a run's error is its own
    frame = run_plan(the_plan, tmp_path, host=HOST, show_progress=False, skip_preflight=True).runs
    assert frame.status.tolist() == ["failed"] + ["done"] * 5
    assert "ValueError: dataset 'counting-text' yields sequences of 8 tokens" in frame.error.iloc[0]


SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import sweep_support
from flops_fit.sweeps.driver import sweep

if __name__ == "__main__":
    sweep(host=sweep_support.host(), out_dir=sys.argv[1], resume=True, show_progress=False,
          **sweep_support.small_plan_options(**{options!r}))
"""


def gated(gate, run, batch):
    """The environment that blocks the run-th run of a process before its batch-th batch."""
    return {**os.environ, sweep_support.GATE: f"{gate}:{run}:{batch}"}


def status_json(out):
    proc = _cli(["status", str(out), "--json"])
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    return json.loads(stdout)


@pytest.mark.e2e
def test_sigkill_mid_sweep_then_resume_loses_and_repeats_nothing(tmp_path, reference):
    script = tmp_path / "sweep_script.py"
    script.write_text(SCRIPT.format(tests=str(TESTS), options={**KILL_OPTIONS, "checkpoint_seconds": 1e-9}))
    out, gate = tmp_path / "out", tmp_path / "gate"
    db = out / "runs.sqlite"
    proc = subprocess.Popen([sys.executable, str(script), str(out)], env=gated(gate, 3, 5))
    sweep_support.gate_reached(gate)  # runs 1 and 2 done; run 3 trained 4 steps, checkpointing each
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed = sweep_support.store_rows(db)
    finished_before = {k: v for k, v in killed.items() if v[0] == "done"}
    [in_flight] = [k for k, v in killed.items() if v[0] == "running"]
    assert len(finished_before) == 2
    assert list_checkpoints(out / "checkpoints" / in_flight)[0].name == "step-000000004.safetensors"

    subprocess.run([sys.executable, str(script), str(out)], check=True)
    final = sweep_support.store_rows(db)
    for run_id, before in finished_before.items():
        assert final[run_id] == before  # same loss, same finish time, trained once
    assert {k for k, v in final.items() if v[0] == "done"} == set(reference.run_id)
    # bitwise the uninterrupted sweep's losses (which wrote no checkpoint at all)
    assert {k: v[1] for k, v in final.items()} == dict(zip(reference.run_id, reference.loss, strict=True))
    assert sum(v[3] for v in final.values()) == len(final) + 1  # only the killed run ran twice
    report = status_json(out)
    killed_run = next(r for r in report["runs"] if r["run_id"] == in_flight)
    assert killed_run["attempts"] == 2 and killed_run["steps_trained"] == killed_run["steps"]  # resumed at 4
    assert report["totals"]["steps_trained"] == report["totals"]["steps"] == sum(reference.steps)
    assert not (out / "checkpoints" / in_flight).exists()  # removed once its result was stored


CONFIG = sweep_support.SMALL_SWEEP_TOML + """
[executor]
name = "local"
workers = {workers}
threads = 1
"""


def _cli(args, env=None, **kwargs):
    env = {**(env or os.environ), "PYTHONPATH": str(TESTS), "FLOPS_FIT_PLUGINS": "sweep_support"}
    return subprocess.Popen([sys.executable, "-m", "flops_fit", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.mark.e2e
def test_cli_sweep_on_worker_processes_matches_the_in_process_sweep(tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text(CONFIG.format(workers=2))
    proc = _cli(["sweep", str(config), "--out", str(tmp_path / "out")])
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert "6 done" in stdout
    parallel = RunStore(tmp_path / "out").runs_frame().set_index("run_id").loss.to_dict()
    serial = run(tmp_path / "serial").runs.set_index("run_id").loss.to_dict()
    assert parallel == pytest.approx(serial, rel=1e-6)

    status = _cli(["status", str(tmp_path / "out")])
    out, _ = status.communicate(timeout=120)
    assert "6 runs: 6 done" in out and "\nparity gate for 'tiny-lm' [cpu, float32]: unverified (" in out


@pytest.mark.parametrize("workers, signum", [(1, signal.SIGINT), (2, signal.SIGTERM)])
@pytest.mark.e2e
def test_ctrl_c_or_sigterm_checkpoints_the_runs_in_flight_and_the_sweep_resumes(tmp_path, reference, workers,
                                                                                signum):
    config = tmp_path / "sweep.toml"
    config.write_text(CONFIG.format(workers=workers).replace("[2e7, 4e7]", "[2e7, 4e7, 8e7]"))
    out, gate = tmp_path / "out", tmp_path / "gate"
    proc = _cli(["sweep", str(config), "--out", str(out)], env=gated(gate, 2, 3))
    sweep_support.gate_reached(gate)  # a process's second run is blocked before its third step
    proc.send_signal(signum)
    Path(f"{gate}.release").touch()
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, stderr
    assert f"interrupted by {signal.Signals(signum).name}" in stderr
    assert f"Resume with: flops-fit sweep {config} --out {out} --resume" in stderr
    assert "Traceback" not in stderr
    rows = sweep_support.store_rows(out / "runs.sqlite")
    in_flight = [k for k, v in rows.items() if v[0] == "running"]
    assert in_flight and all(list_checkpoints(out / "checkpoints" / k) for k in in_flight)

    again = _cli(["sweep", str(config), "--out", str(out)])
    _, stderr = again.communicate(timeout=120)
    assert again.returncode == 2 and "pass resume=True (--resume)" in stderr
    resumed = _cli(["sweep", str(config), "--out", str(out), "--resume"])
    stdout, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr
    assert "9 runs: 9 done" in stdout
    losses = RunStore(out).runs_frame().set_index("run_id").loss.to_dict()
    assert losses == pytest.approx(reference.set_index("run_id").loss.to_dict(), rel=1e-6)
    assert status_json(out)["totals"]["attempts"] == 9 + len(in_flight)


def test_sweep_result_fit_uses_the_fitting_module(tmp_path):
    result = SweepResult(tmp_path)
    run(tmp_path)
    fitted = result.fit(method="all", bootstrap=0)  # these 6 tiny runs pin down no Approach 3: it is left out
    assert "interaction" in fitted.results and "no finite, ordered answer" in fitted.skipped["parametric"]


def test_config_errors_name_the_problem(tmp_path):
    from flops_fit.errors import ConfigError
    from flops_fit.sweeps.config import load_config

    path = tmp_path / "bad.toml"
    for text, message in [
        ("[sweep]\nmodel = 'gpt'\nbudgets = [1e12]\nbudget = 1\n", r"unknown \[sweep\] key\(s\) \['budget'\]"),
        ("[sweep]\nbudgets = [1e12]\n", "needs model"),
        ("[sweep]\nmodel = 'gpt'\n", "needs budgets"),
        ("[sweeps]\n", r"unknown table\(s\) \['sweeps'\]"),
        ("[sweep\n", "not valid TOML"),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_config(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")
    # a folder was said not to exist; a binary file was a UnicodeDecodeError traceback
    with pytest.raises(ConfigError, match=r"is a folder, not a sweep configuration: give its CONFIG\.toml"):
        load_config(tmp_path)
    path.write_bytes(b"PAR1\xda\xff\x00")
    with pytest.raises(ConfigError, match=r"bad\.toml: not a text file, so no TOML sweep configuration"):
        load_config(path)
    options = load_config(TESTS.parent / "examples" / "sweep.toml").options
    assert SweepOptions.from_dict(json.loads(json.dumps(options.to_dict()))) == options


def test_isoflop_table_marks_interior_minima():
    import pandas as pd

    from flops_fit.sweeps.demo import isoflop_table

    rows = [(1e9, 8, 100, 3.0), (1e9, 16, 200, 2.5), (1e9, 32, 400, 2.7),  # interior
            (2e9, 8, 100, 2.0), (2e9, 16, 200, 2.4), (2e9, 32, 400, 2.9)]  # on the edge
    frame = pd.DataFrame([{"budget": b, "size": s, "params": p, "tokens": 1, "loss": loss, "status": "done"}
                          for b, s, p, loss in rows])
    text, interior = isoflop_table(frame)
    assert interior == 1
    assert text.count("<- min, interior") == 1 and text.count("<- min, on the edge") == 1


def test_cli_plan_prints_the_example_config():
    proc = _cli(["plan", str(TESTS.parent / "examples" / "sweep.toml")])
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "runs of gpt on python-stdlib" in out and "tokens/param" in out


def test_an_executor_table_written_for_local_says_nothing_to_another_executor():
    """`flops-fit sweep examples/sweep.toml --executor ray` refused: "unknown option(s) ['threads'] for executor
    'ray'" (the file's [executor] table, written for local). Only workers carries over, the rest is named."""
    import tomllib

    from flops_fit.sweeps.config import parse_config

    config = parse_config(tomllib.loads(CONFIG.format(workers=2)))
    assert config.options_for(None) == config.options_for("local") == ({"workers": 2, "threads": 1}, [])
    assert config.options_for("ray") == ({"workers": 2}, ["threads"])


def test_executor_options_are_checked():
    from flops_fit.errors import FlopsFitError
    from flops_fit.executors.local import LocalExecutor

    with pytest.raises(FlopsFitError, match="workers must be a positive integer"):
        LocalExecutor(workers=0)
    with pytest.raises(FlopsFitError, match="devices must look like 'cuda:0'"):
        LocalExecutor(devices=["gpu0"])
    pairs = list(LocalExecutor().map(lambda x, progress: 1 / x, [1, 0]))
    assert pairs[0] == (1, 1.0) and isinstance(pairs[1][1], ZeroDivisionError)


class _FailingParity:
    """A parity case for tiny-lm whose comparison fails."""

    @staticmethod
    def run(device, dtype):
        return type("Report", (), {"passed": False, "summary": lambda self: "logits differ by 1.0"})()

    @flops_fit.hookimpl
    def register_parity_cases(self, register):
        register(flops_fit.ParityCaseEntry("tiny-broken", model="tiny-lm", reference="a stand-in", run=self.run,
                                           quick=True, devices=("cpu",), dtypes=("float32",)))


def test_the_parity_gates_outcome_is_said_before_the_runs_train(tmp_path, capsys):
    """`flops-fit demo` and sweeps without [parity] installed trained a model nothing had verified, and said
    nothing of it (the outcome was only in `flops-fit status`): the gate's line comes before the runs'."""
    from flops_fit.cli.main import main

    options = sweep_support.small_plan_options()
    sweep(host=HOST, out_dir=tmp_path / "a", **options)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "parity gate for 'tiny-lm' [cpu, float32]: unverified (no quick parity case is registered for " \
                     "this model: register one (quick=True) with register_parity_cases, or give its ModelEntry " \
                     "no_parity saying why none applies (docs/guide/plugins.md))" and err[1].startswith("sweep [")
    sweep(host=HOST, out_dir=tmp_path / "b", skip_parity=True, **options)
    assert capsys.readouterr().err.splitlines()[0] == "parity gate: overridden (skip_parity=True: the gate was not run)"
    assert main(["status", str(tmp_path / "b")]) == 0
    assert "\nparity gate: overridden (skip_parity=True: the gate was not run)\n" in capsys.readouterr().out



class _ParityReadingStatus:
    """A parity case for tiny-lm that reads `flops-fit status` of the sweep while the gate runs it (or stops it)."""

    def __init__(self, out, stop=False):
        self.out, self.stop, self.seen = out, stop, []

    def run(self, device, dtype):
        import contextlib
        import io

        from flops_fit.cli.main import main

        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            main(["status", str(self.out)])
        self.seen.append(text.getvalue())
        if self.stop:
            raise KeyboardInterrupt
        return type("Report", (), {"passed": True, "summary": lambda self: "logits match"})()

    @flops_fit.hookimpl
    def register_parity_cases(self, register):
        register(flops_fit.ParityCaseEntry("tiny-reader", model="tiny-lm", reference="a stand-in", run=self.run,
                                           quick=True, devices=("cpu",), dtypes=("float32",)))


def test_status_while_the_parity_gate_runs_says_so_and_after_a_stop_in_it_that_it_was_interrupted(tmp_path, capsys):
    """The gate's cases run for seconds (the demo's GPT against Hugging Face's) after the plan is recorded:
    `flops-fit status` said "parity gate: not run" of the gate running, and of one a Ctrl-C stopped."""
    from flops_fit.cli.main import main
    from flops_fit.testing import isolated_host

    options = sweep_support.small_plan_options()
    case = _ParityReadingStatus(tmp_path / "a")
    host = isolated_host(("sweep_support", sweep_support), ("reader", case), builtins=True)
    sweep(host=host, out_dir=tmp_path / "a", show_progress=False, **options)
    assert "\nparity gate for 'tiny-lm': running now, before the first run\n" in case.seen[0]
    case = _ParityReadingStatus(tmp_path / "b", stop=True)
    host = isolated_host(("sweep_support", sweep_support), ("reader", case), builtins=True)
    with pytest.raises(KeyboardInterrupt):
        sweep(host=host, out_dir=tmp_path / "b", show_progress=False, **options)
    capsys.readouterr()
    assert main(["status", str(tmp_path / "b")]) == 0
    assert "\nparity gate: interrupted before it finished; the sweep's next start runs it again\n" in \
        capsys.readouterr().out
    from flops_fit.store.lease import Lease

    with RunStore(tmp_path / "b") as store:  # the gate a driver gone (pid 1) left; another driver (a train-run) now
        store.set_meta(parity={**store.get_meta("parity"), "pid": 1})
        with Lease(store.path):
            assert main(["status", str(tmp_path / "b")]) == 0
    assert "\nparity gate: interrupted before it finished" in capsys.readouterr().out


def test_a_failing_parity_gate_stops_the_sweep_unless_overridden(tmp_path):
    from flops_fit.sweeps.driver import ParityGateError
    from flops_fit.testing import isolated_host

    host = isolated_host(("sweep_support", sweep_support), ("failing", _FailingParity()), builtins=True)
    options = sweep_support.small_plan_options()
    with pytest.raises(ParityGateError, match="failed its parity gate, so no run was trained"):
        sweep(host=host, out_dir=tmp_path, show_progress=False, **options)
    with RunStore(tmp_path) as store:
        assert store.get_meta("parity")["status"] == "failed" and store.counts() == {"pending": 6}
    result = sweep(host=host, out_dir=tmp_path, show_progress=False, resume=True, skip_parity=True, **options)
    assert len(result.runs) == 6
    with RunStore(tmp_path) as store:
        assert store.get_meta("parity")["status"] == "overridden"


def test_a_run_stopped_before_its_first_curve_point_counts_the_steps_its_checkpoint_keeps(tmp_path):
    """SIGTERM before a run's first curve point: it checkpointed and stopped, but reported no step,
    and the resumed attempt was counted from its checkpoint, so status --json said it trained fewer
    steps than its result has (steps_lost below 0)."""
    from flops_fit.executors.stopping import clear_stop, request_stop
    from flops_fit.sweeps.driver import _Accounting, checkpoint_policy
    from flops_fit.training.task import train_item

    swept = plan(host=HOST, **sweep_support.small_plan_options(schedule="cosine", checkpoint_seconds=1e-9))
    spec = max(swept.runs, key=lambda r: r.steps)
    assert spec.steps // swept.options.curve_points > 1  # the stop comes before the first curve point
    policy = checkpoint_policy(swept.options, tmp_path, None)
    with RunStore(tmp_path, create=True) as store:
        store.add_plan(swept, spec=swept.settings)
        first = _Accounting(store, swept.runs)
        request_stop()  # read after the first step: checkpoint there, then stop
        try:
            with pytest.raises(flops_fit.Interrupted):
                train_item(spec, lambda run_id, done, total, loss: first.heard(run_id, done, loss), host=HOST,
                           checkpoints=policy)
        finally:
            clear_stop()
        assert list_checkpoints(policy.run_dir(spec.run_id))[0].name == "step-000000001.safetensors"
        resumed = _Accounting(store, swept.runs)  # the next driver
        result = train_item(spec, lambda run_id, done, total, loss: resumed.heard(run_id, done, loss), host=HOST,
                            checkpoints=policy)
        store.record(result)
        [row] = [r for r in store.accounting() if r["run_id"] == spec.run_id]
    assert result.timings["resumed_from_step"] == 1
    assert row["attempts"] == 2 and row["steps_trained"] == row["steps"] == spec.steps


def test_a_run_that_crashed_keeps_its_checkpoints_so_retry_failed_goes_on_from_them(tmp_path, monkeypatch):
    """A run whose worker died mid-run (killed, out of memory) was stored failed and its checkpoints
    deleted, so `--resume --retry-failed` trained it again from its first step."""
    import threading

    from flops_fit.training.loop import train

    swept = plan(host=HOST, **sweep_support.small_plan_options(schedule="cosine", checkpoint_seconds=1e-9))
    out, gate = tmp_path / "out", tmp_path / "gate"
    first = sweep_support.CountingText.train_instances + 1  # the first run this sweep trains in this process
    monkeypatch.setenv(sweep_support.GATE, f"{gate}:{first}:5")

    def crash_at_the_gate():
        sweep_support.gate_reached(gate)
        (tmp_path / "gate.release").write_text("crash")

    threading.Thread(target=crash_at_the_gate, daemon=True).start()
    options = {"host": HOST, "skip_parity": True, "skip_preflight": True, "show_progress": False}
    run_plan(swept, out, **options)
    with RunStore(out) as store:
        frame = store.runs_frame()
    [crashed] = frame.run_id[frame.status == "failed"]
    assert "RuntimeError: the run crashed at the test's gate" in frame.error[frame.run_id == crashed].iloc[0]
    assert list_checkpoints(out / "checkpoints" / crashed)[0].name == "step-000000004.safetensors"
    monkeypatch.delenv(sweep_support.GATE)
    run_plan(swept, out, resume=True, retry_failed=True, **options)
    with RunStore(out) as store:
        row = store.runs_frame().set_index("run_id").loc[crashed]
    assert row.status == "done" and row.timings["resumed_from_step"] == 4
    alone = train(next(r for r in swept.runs if r.run_id == crashed), host=HOST)
    assert (row.loss, row.curve) == (alone.loss, alone.curve)
    assert not (out / "checkpoints" / crashed).exists()  # removed once its result was stored


class _Killed(BaseException):
    """What a SIGKILL does to a worker, in-process: it stops where it stands and saves nothing more."""


def test_steps_a_worker_trained_after_its_driver_died_are_counted_trained(tmp_path, capsys):
    """kill -9 of the driver: its worker trained and checkpointed on, but its reports reached no one, so
    status --json counted fewer steps trained than the results hold (steps_lost went to -21; clamped to
    0, those steps were counted nowhere)."""
    from flops_fit.cli.main import main
    from flops_fit.sweeps.driver import _Accounting, checkpoint_policy
    from flops_fit.training.task import train_item

    swept = plan(host=HOST, **sweep_support.small_plan_options(schedule="cosine", checkpoint_seconds=1e-9))
    spec = max(swept.runs, key=lambda r: r.steps)
    units = spec.batch_size * spec.seq_len
    deaf, killed = 3 * units, 7 * units  # the driver dies after step 3; the worker is killed after step 7
    policy = checkpoint_policy(swept.options, tmp_path, None)
    with RunStore(tmp_path, create=True) as store:
        store.add_plan(swept, spec=swept.settings)
        first = _Accounting(store, swept.runs)

        def dying(run_id, done, total, loss):
            if done <= deaf:
                first.heard(run_id, done, loss)
            if done >= killed:
                raise _Killed

        with pytest.raises(_Killed):
            train_item(spec, dying, host=HOST, checkpoints=policy)
        resumed = _Accounting(store, swept.runs)  # the next driver
        result = train_item(spec, lambda run_id, done, total, loss: resumed.heard(run_id, done, loss), host=HOST,
                            checkpoints=policy)
        store.record(result)
    assert result.timings["resumed_from_step"] == 7 and result.steps == spec.steps
    assert main(["status", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    [row] = [r for r in report["runs"] if r["run_id"] == spec.run_id]
    assert row["steps_trained"] == spec.steps - 4  # what the drivers heard: steps 4 to 7 reached no one
    assert row["steps_unreported"] == 4  # said per run too: the totals' sum of the two is the runs' sums
    assert sum(r["steps_trained"] + r["steps_unreported"] for r in report["runs"]) == report["totals"]["steps_trained"]
    totals = report["totals"]
    assert (totals["steps_lost"], totals["steps_unreported"]) == (0, 4)
    assert totals["steps_trained"] == totals["steps"] == spec.steps  # every step of the result was trained


class _HangingParity:
    """A parity case for tiny-lm that does not return until released."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()

    @flops_fit.hookimpl
    def register_parity_cases(self, register):
        register(flops_fit.ParityCaseEntry("tiny-hangs", model="tiny-lm", reference="a stand-in", quick=True,
                                           run=lambda device, dtype: self.release.wait(60), devices=("cpu",),
                                           dtypes=("float32",)))


def test_a_hanging_parity_case_refuses_the_sweep_after_its_time_limit(tmp_path, monkeypatch):
    """A parity case that never returned held the sweep before its first run forever; after the
    case's time limit the gate fails and the sweep refuses, as for a failing case."""
    from flops_fit.sweeps.driver import ParityGateError
    from flops_fit.testing import isolated_host

    case = _HangingParity()
    monkeypatch.setenv("FLOPS_FIT_PARITY_TIMEOUT", "0.3")
    host = isolated_host(("sweep_support", sweep_support), ("hanging", case), builtins=True)
    try:
        with pytest.raises(ParityGateError, match="tiny-hangs: error: still running after the time limit of 0.3 s"):
            sweep(host=host, out_dir=tmp_path, show_progress=False, **sweep_support.small_plan_options())
    finally:
        case.release.set()
    with RunStore(tmp_path) as store:
        assert store.get_meta("parity")["status"] == "failed" and store.counts() == {"pending": 6}


def test_a_bad_parity_time_limit_is_refused_before_the_folder_is_touched(tmp_path, monkeypatch):
    """FLOPS_FIT_PARITY_TIMEOUT=abc was read at the gate: the plan was recorded and the preflight run
    first, and status then said the gate was interrupted."""
    from flops_fit.errors import OptionError
    from flops_fit.testing import isolated_host

    monkeypatch.setenv("FLOPS_FIT_PARITY_TIMEOUT", "abc")
    host = isolated_host(("sweep_support", sweep_support), builtins=True)
    with pytest.raises(OptionError, match="FLOPS_FIT_PARITY_TIMEOUT='abc' is not a number of seconds above zero"):
        sweep(host=host, out_dir=tmp_path / "out", show_progress=False, **sweep_support.small_plan_options())
    assert not (tmp_path / "out").exists()


def test_a_sweep_resumed_on_a_corpus_edited_to_the_same_length_is_refused(tmp_path):
    """A corpus edited between a sweep's runs, to as many windows as before: the resume trained the rest of the
    sweep on the new text beside runs stored from the old, without a word. It is refused naming the dataset and
    the fix; the text restored, the sweep goes on."""
    corpus = tmp_path / "corpus.txt"
    text = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(400))
    corpus.write_text(text)
    options = sweep_support.small_plan_options(budgets=[2.1e7], dataset="text-files", seq_len=16,
                                               dataset_config={"paths": [str(corpus)]})
    the_plan = plan(host=HOST, **options)
    out = tmp_path / "out"
    run_plan(the_plan, out, host=HOST, show_progress=False, only=[the_plan.runs[0].run_id])
    corpus.write_text(text.replace("fox", "cat"))  # the same bytes long: the same windows
    with pytest.raises(StoreError, match=r"^the training data of dataset 'text-files' \(.*corpus\.txt.*\) changed since "
                                         r".*out's runs trained on it \(its content differs\): restore it as it was, or "
                                         r"sweep the changed data into another --out folder$"):
        run_plan(the_plan, out, resume=True, host=HOST, show_progress=False)
    with RunStore(out) as store:
        assert store.counts() == {"done": 1, "pending": 2}  # nothing trained on the edited text
    corpus.write_text(text)
    run_plan(the_plan, out, resume=True, host=HOST, show_progress=False, record_only=True)  # past the check


@pytest.mark.parametrize("argument, value, message", [
    # "no" is truthy: the sweep skipped its parity gate (resumed, retried) where the caller said not to
    ("skip_parity", "no", "skip_parity must be True or False, got 'no'"),
    ("resume", "yes", "resume must be True or False, got 'yes'"),
    # read as a script without its main guard (workers != 1 starts processes)
    ("workers", 0, "workers must be a positive integer, got 0"),
    ("workers", "2", "workers must be a positive integer, got '2'"),
    # pathlib's "expected str, bytes or os.PathLike object, not int"
    ("checkpoint_dir", 3, r"checkpoint_dir must be a folder \(a str or pathlib.Path\), got 3"),
])
def test_run_plans_own_arguments_are_refused_by_name_before_the_folder(tmp_path, argument, value, message):
    small = plan(host=HOST, **sweep_support.small_plan_options())
    with pytest.raises(flops_fit.OptionError, match=f"^{message}$"):
        run_plan(small, tmp_path / "out", host=HOST, show_progress=False, **{argument: value})
    with pytest.raises(flops_fit.OptionError, match=r"^out_dir must be a folder \(a str or pathlib.Path\), got 3$"):
        small.run(3, host=HOST)
    assert not (tmp_path / "out").exists()
