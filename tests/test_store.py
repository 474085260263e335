"""The run store: plan and results in SQLite, atomic writes, the frame the fitter reads."""

import math
import re
import sqlite3
from pathlib import Path

import pytest
import sweep_support

from flops_fit.errors import StoreError
from flops_fit.store.run_store import SCHEMA, RunStore
from flops_fit.store.runs import RunResult
from flops_fit.sweeps.planner import plan

HOST = sweep_support.host()
REQUIRED = ["run_id", "model", "size", "params", "tokens", "flops", "budget", "loss", "status", "curve"]


@pytest.fixture
def store(tmp_path):
    swept = plan(host=HOST, **sweep_support.small_plan_options())
    with RunStore(tmp_path, create=True) as s:
        s.add_plan(swept, spec=swept.settings, versions={"flops-fit": "x"})
        yield s, swept


def test_a_missing_store_is_refused_with_the_fix(tmp_path):
    with pytest.raises(StoreError, match="no sweep store at .*run a sweep with --out"):
        RunStore(tmp_path / "nothing")


def test_a_reader_given_the_store_file_reads_its_folder_and_a_table_is_told_what_to_give(store, tmp_path, capsys):
    """`flops-fit status OUT/runs.sqlite` (which `fit` and `report` read) said "is an existing file, not a
    folder: choose a folder for the sweep's store", and a CSV given to status said the same."""
    from flops_fit.cli.main import main

    s, plan = store
    with RunStore(s.path) as again:
        assert again.dir == s.dir and again.counts() == {"pending": 6}
    assert main(["status", str(s.path)]) == 0
    table = tmp_path / "runs.csv"
    table.write_text("params,tokens,loss\n1,2,3\n")
    assert main(["status", str(table)]) == 2
    assert capsys.readouterr().err == (f"flops-fit: error: {table} is a file, not a sweep's output folder: give the "
                                       "folder the sweep wrote (it holds runs.sqlite)\n")


def test_plan_and_meta_round_trip(store):
    s, plan = store
    assert [r.run_id for r in s.planned_runs()] == [r.run_id for r in plan.runs]
    assert s.get_meta("versions") == {"flops-fit": "x"}
    assert s.counts() == {"pending": 6}
    assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_results_and_the_frame_for_fitting(store):
    s, plan = store
    a, b = plan.runs[:2]
    s.mark_running(a.run_id)
    s.record(RunResult(a.run_id, "done", loss=2.5, tokens=a.tokens, flops=a.flops, steps=a.steps,
                       curve=[[10, 3.0], [20, 2.7]], timings={"total_s": 1.0}))
    s.record(RunResult(b.run_id, "failed", error="diverged: boom", tokens=5, flops=5 * b.flops_per_unit))
    frame = s.runs_frame()
    assert list(frame.columns[:len(REQUIRED)]) == REQUIRED
    assert frame.run_id.tolist() == [a.run_id, b.run_id]
    done, failed = frame.iloc[0], frame.iloc[1]
    fields = ["size", "params", "tokens", "flops", "budget", "loss"]
    assert [done[f] for f in fields] == [a.size, a.params, a.tokens, a.flops, a.budget, 2.5]
    assert done.curve == [[10, 3.0], [20, 2.7]]
    assert done.schedule == {"schedule": a.schedule, "steps": a.steps, "warmup_steps": a.warmup_steps,
                             "cooldown_start": a.cooldown_start, "cooldown_shape": a.cooldown_shape,
                             "min_lr_ratio": a.min_lr_ratio, "batch_size": a.batch_size, "seq_len": a.seq_len}
    assert failed.status == "failed" and math.isnan(failed.loss) and failed.error == "diverged: boom"
    assert s.runs_frame(include_failed=False).run_id.tolist() == [a.run_id]
    assert [r.run_id for r in s.unfinished(plan)] == [r.run_id for r in plan.runs[2:]]


def test_recording_a_run_outside_plan_is_refused(store):
    s, _ = store
    with pytest.raises(StoreError, match="not in this sweep's plan"):
        s.record(RunResult("0123456789abcdef", "done", loss=1.0))


def test_a_failed_write_leaves_nothing_behind(store):
    s, plan = store
    run = plan.runs[0]
    bad = RunResult(run.run_id, "done", loss=1.0, curve=[[1, object()]])  # not JSON-serialisable
    with pytest.raises(TypeError):
        s.record(bad)
    assert s.counts() == {"pending": 6}
    # another connection sees the committed state only
    other = sqlite3.connect(s.path)
    assert other.execute("SELECT COUNT(*) FROM runs WHERE status = 'pending'").fetchone()[0] == 6


def test_steps_trained_count_every_attempt_and_old_stores_gain_the_column(tmp_path):
    from flops_fit.sweeps.driver import _Accounting

    swept = plan(host=HOST, **sweep_support.small_plan_options())
    run = swept.runs[0]
    unit = run.batch_size * run.seq_len
    old = sqlite3.connect(tmp_path / "runs.sqlite")  # a store from before the column existed
    old.executescript(SCHEMA)  # no steps_trained: ADDED_COLUMNS add it on open
    old.close()
    with RunStore(tmp_path) as s:
        s.add_plan(swept, spec=swept.settings)
        heard = _Accounting(s, swept.runs).heard
        heard(run.run_id, 0, math.nan)  # attempt 1 starts at step 0 ...
        for step in (3, 6, 8):
            heard(run.run_id, step * unit, 2.0)  # ... reports up to step 8, then is killed
        heard(run.run_id, 6 * unit, math.nan)  # attempt 2 continues from its checkpoint at step 6
        heard(run.run_id, run.tokens, 1.5)  # ... to the end (a trimmed last step)
        s.record(RunResult(run.run_id, "done", loss=1.5, tokens=run.tokens, steps=run.steps))
        [first] = [r for r in s.accounting() if r["run_id"] == run.run_id]
    assert first["attempts"] == 2 and first["steps"] == run.steps == first["steps_planned"]
    assert first["steps_trained"] == 8 + (run.steps - 6)  # steps 7 and 8 were trained twice


def test_one_driver_per_store_and_a_dead_drivers_lease_is_taken_over(store):
    import os
    import subprocess
    import sys
    import time

    from flops_fit.errors import StoreBusy
    from flops_fit.store.lease import Lease

    s, _ = store
    with Lease(s.path):
        with pytest.raises(StoreBusy, match=rf"being swept by another driver \(pid {os.getpid()} on "):
            Lease(s.path).acquire()
        assert s.counts() == {"pending": 6}  # readers need no lease
    with Lease(s.path):  # released on exit: the next driver gets it
        pass

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    now = time.time()
    rows = {"dead process here": (int(dead.stdout), "HOST", now), "silent other host": (1, "elsewhere", now - 120)}
    for why, (pid, host, beat) in rows.items():
        host = Lease(s.path).host if host == "HOST" else host
        s.db.execute("INSERT OR REPLACE INTO lease VALUES (1, 'old', ?, ?, ?, ?)", (pid, host, beat, beat))
        with Lease(s.path) as lease:
            assert s.db.execute("SELECT token FROM lease").fetchone()[0] == lease.token, why
    s.db.execute("INSERT OR REPLACE INTO lease VALUES (1, 'old', 1, 'elsewhere', ?, ?)", (now, now))
    with pytest.raises(StoreBusy, match="pid 1 on elsewhere"):  # a live heartbeat on another host
        Lease(s.path).acquire()


@pytest.mark.parametrize("damage, said", [
    ("UPDATE lease SET heartbeat = 'x', started = 'y'", "the lease row of {} was damaged ((1, 'elsewhere', 'y', 'x')): "
                                                        "taken over"),
    ("DROP TABLE lease; CREATE TABLE lease (x)", "the lease table of {} was damaged (columns x): made again")])
def test_a_damaged_lease_holds_no_driver_and_is_taken_over(store, damage, said, capsys, caplog):
    """The lease row damaged into text (or its table into other columns): status and every driver after stopped
    with a TypeError (OperationalError) traceback, and the sweep could not be resumed."""
    import os

    from flops_fit.cli.main import main
    from flops_fit.store.lease import Lease, holder

    s, _ = store
    with Lease(s.path):
        pass
    s.db.execute("INSERT INTO lease VALUES (1, 'old', 1, 'elsewhere', 5.0, 5.0)")
    s.db.executescript(damage)
    assert holder(s.path) is None
    assert main(["status", str(s.dir)]) == 0 and "Traceback" not in capsys.readouterr().err
    with caplog.at_level("WARNING", logger="flops_fit.store.lease"), Lease(s.path) as lease:
        assert s.db.execute("SELECT token FROM lease").fetchone()[0] == lease.token
        assert holder(s.path).pid == os.getpid()
    assert said.format(s.path) in caplog.text
    assert s.counts() == {"pending": 6}  # the runs are untouched


def test_a_lease_taken_over_tells_its_holder_to_stop(store):
    import threading

    from flops_fit.store.lease import Lease

    s, _ = store
    told = threading.Event()
    with Lease(s.path, heartbeat=0.01, on_lost=lambda message: told.set()):
        s.db.execute("UPDATE lease SET token = 'someone else'")
        assert told.wait(30)


def test_status_says_who_trains_a_sweep_the_time_it_has_left_and_what_a_killed_driver_left(tmp_path, capsys):
    """A sweep in flight read from another shell: its driver and the time left at the pace its
    finished runs kept (here 0.1 s a step, exactly: four runs finished, one before this driver
    started, which is not its work; one run half trained, one to come, 10,000 s since the driver
    started); once the driver is gone, the run it left marked running reads as interrupted."""
    import json
    import os
    import time

    from flops_fit.cli.main import main
    from flops_fit.store.lease import Lease

    swept = plan(host=HOST, **sweep_support.small_plan_options(schedule="cosine"))
    runs = swept.runs
    steps = [r.tokens / (r.batch_size * r.seq_len) for r in runs]  # what each executes (a last step may be short)
    with RunStore(tmp_path, create=True) as s:
        s.add_plan(swept, spec=swept.settings)
        for r, n in zip(runs[:4], steps, strict=False):
            s.mark_running(r.run_id)
            s.record(RunResult(r.run_id, "done", loss=2.5, tokens=r.tokens, flops=r.flops, steps=r.steps,
                               timings={"total_s": 0.1 * n}))
        s.mark_running(runs[4].run_id)
        s.add_steps_trained(runs[4].run_id, runs[4].steps // 2)
        with Lease(s.path):
            since = time.time() - 10_000
            s.db.execute("UPDATE lease SET started = ?", (since,))
            s.db.execute("UPDATE runs SET finished = ? WHERE run_id = ?", (since - 500, runs[0].run_id))
            assert main(["status", str(tmp_path), "--json"]) == 0
            state = json.loads(capsys.readouterr().out)
            assert main(["status", str(tmp_path)]) == 0
            text = capsys.readouterr().out.splitlines()
    done = sum(steps[1:4]) + runs[4].steps // 2
    left = max(10_000 * (sum(steps[1:]) - done) / done, 0.1 * max(steps[4] - runs[4].steps // 2, steps[5]))
    assert state["driver"]["pid"] == os.getpid() and state["seconds_left"] == pytest.approx(left, rel=1e-3)
    # each run as the text table shows it (the JSON lacked its size, planned tokens and rate)
    assert [(r["params"], r["tokens_planned"], r["lr"]) for r in state["runs"]] == \
        [(r.params, r.tokens, r.lr) for r in runs]
    assert text[1].startswith(f"training now: pid {os.getpid()} on ") and " left" in text[1]

    assert main(["status", str(tmp_path), "--json"]) == 0  # the driver gone, its run still marked running
    assert {k: v for k, v in json.loads(capsys.readouterr().out).items() if k in ("driver", "interrupted")} == {
        "driver": None, "interrupted": 1}
    assert main(["status", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith(
        f"nothing is training it now: 1 run marked running was interrupted; `flops-fit sweep CONFIG --out {tmp_path} "
        "--resume` continues it")
    table = lines[lines.index(next(line for line in lines if line.startswith("run "))) + 2:]
    assert [row.split()[0] for row in table] == [r.run_id[:8] for r in runs]  # the id prefix train-run takes
    assert [row.split()[5] for row in table] == ["done"] * 4 + ["running", "pending"]  # every run, in plan order
    assert table[5].split()[4] == f"{runs[5].tokens:,}"  # a run still to train: its planned tokens
    assert [row.split()[6] for row in table] == [f"{r.lr:.3g}" for r in runs]  # each run's rate (a tune's differ)


def test_status_of_an_interrupted_tune_says_the_tunes_resume_command(tmp_path, capsys):
    """A tune stopped mid-run: status said "run the sweep again ... --resume", which is not how a tune goes on."""
    from dataclasses import replace

    from flops_fit.cli.main import main

    swept = plan(host=HOST, **sweep_support.small_plan_options(schedule="cosine"))
    swept.runs[:] = [replace(r, lr_source="tune:x0.5 marin") for r in swept.runs]  # as the tune records its cells
    with RunStore(tmp_path, create=True) as s:
        s.add_plan(swept, spec=swept.settings)
        s.mark_running(swept.runs[0].run_id)
    assert main(["status", str(tmp_path)]) == 0
    grid = (f"--budgets {','.join(f'{b:g}' for b in sorted({r.budget for r in swept.runs}))} "
            f"--sizes {','.join(str(n) for n in sorted({r.size for r in swept.runs}))} --multipliers 0.5")
    assert f"interrupted; `flops-fit tune SPEC --out {tmp_path} {grid} --resume` continues it" in \
        capsys.readouterr().out  # with the grid it was planned with: without it, the tune plans another


def _truncated(path):
    swept = plan(host=HOST, **sweep_support.small_plan_options())
    with RunStore(path.parent, create=True) as s:
        s.add_plan(swept, spec=swept.settings)
    whole = path.read_bytes()
    path.write_bytes(whole[:len(whole) // 2])


def _garbled_schema(path):
    """A byte of the schema's text garbled into one that is no UTF-8: SQLite's message about it quoted the byte,
    and reading that message was a UnicodeDecodeError traceback."""
    swept = plan(host=HOST, **sweep_support.small_plan_options())
    with RunStore(path.parent, create=True) as s:
        s.add_plan(swept, spec=swept.settings)
    whole = path.read_bytes()
    at = whole.index(b"sqlite_autoindex_runs_1") + len("sqlite_autoindex_")
    path.write_bytes(whole[:at] + b"\xda" + whole[at + 1:])


def _garbled_value(path, statement):
    """A store whose pages are sound but whose text is not what flops-fit wrote: SQLite's quick_check passed it,
    and reading the value was a traceback (UnicodeDecodeError, JSONDecodeError) in every command."""
    _with_a_result(path)
    db = sqlite3.connect(path)
    db.execute(statement)
    db.commit()
    db.close()


def _with_a_result(path):
    """A store of the small plan with one run done."""
    swept = plan(host=HOST, **sweep_support.small_plan_options())
    with RunStore(path.parent, create=True) as s:
        s.add_plan(swept, spec=swept.settings)
        s.record(RunResult(run_id=swept.runs[0].run_id, status="done", loss=3.0, tokens=swept.runs[0].tokens,
                           curve=[[256, 5.5]]))


def _random(path):
    import random

    path.write_bytes(random.Random(0).randbytes(8192))


def _foreign(path):
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('not a sweep');")
    db.close()


DAMAGED = {"truncated": (_truncated, "is damaged (database disk image is malformed)"),
           "random bytes": (_random, "is damaged (file is not a database)"),
           "garbled schema": (_garbled_schema, "is damaged (malformed database schema (sqlite_autoindex_\ufffduns_1)"),
           "curve no text": (lambda p: _garbled_value(p, "UPDATE runs SET curve = CAST(X'5bda5d' AS TEXT) WHERE loss"),
                             ": its curve holds bytes that are no text)"),
           "plan no JSON": (lambda p: _garbled_value(p, "UPDATE meta SET value = '{\"runs\": [' WHERE key = 'plan'"),
                            "is damaged (the entry plan: its value is no longer the JSON flops-fit wrote)"),
           "foreign schema": (_foreign, "is an SQLite file but not a flops-fit store (no meta table; no runs table)")}
SPEC = '[sweep]\nmodel = "gpt"\nbudgets = [4e8]\nsizes = [8, 12, 16]\nbatch_size = 8\nmin_steps = 5\n'
COMMANDS = [["fit", "{out}"], ["report", "{out}"], ["status", "{out}"], ["status", "{out}", "--json"],
            ["sweep", "{spec}", "--out", "{out}", "--resume"], ["tune", "{spec}", "--out", "{out}", "--resume"]]


@pytest.fixture(params=list(DAMAGED))
def damaged(request, tmp_path):
    """A sweep folder whose runs.sqlite is damaged or not a store, its bytes, and the expected message."""
    make, message = DAMAGED[request.param]
    out = tmp_path / "out"
    out.mkdir()
    make(out / "runs.sqlite")
    return out, {p.name: p.read_bytes() for p in out.iterdir()}, message


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2] if c[0] != "status" else c))
def test_every_command_answers_a_damaged_store_with_one_line_and_writes_nothing(damaged, tmp_path, capsys, command):
    from flops_fit.cli.main import main

    out, before, message = damaged
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    code = main([arg.format(out=out, spec=spec) for arg in command])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("flops-fit: error: ") and captured.err.count("\n") == 1, captured.err
    assert message in captured.err and "flops-fit wrote nothing into it" in captured.err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_the_python_api_refuses_a_damaged_store_and_writes_nothing(damaged):
    import flops_fit

    out, before, message = damaged
    swept = plan(host=HOST, **sweep_support.small_plan_options())
    calls = {"fit": lambda: flops_fit.fit(out), "fit runs.sqlite": lambda: flops_fit.fit(out / "runs.sqlite"),
             "load_runs": lambda: flops_fit.load_runs(out), "RunStore": lambda: RunStore(out),
             "sweep resume": lambda: swept.run(out, resume=True, host=HOST, skip_parity=True, show_progress=False)}
    for name, call in calls.items():
        with pytest.raises(StoreError, match="fix|restore|move the file away") as caught:
            call()
        assert message in str(caught.value), name
    assert issubclass(flops_fit.StoreError, flops_fit.FlopsFitError)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_an_empty_store_file_is_filled_by_a_sweep_and_refused_to_readers(tmp_path):
    (tmp_path / "runs.sqlite").write_bytes(b"")  # a driver killed between creating the file and its tables
    with pytest.raises(StoreError, match="holds no sweep yet"):
        RunStore(tmp_path)
    with RunStore(tmp_path, create=True) as s:
        assert s.counts() == {}


def test_a_store_from_a_newer_release_is_one_line_naming_it_and_stays_as_it_was(tmp_path, capsys):
    """A store whose runs carry a field this release lacks (a newer flops-fit wrote it): status,
    status --json and sweep --resume printed a TypeError traceback from RunSpec."""
    from flops_fit.cli.main import main

    swept = plan(host=HOST, **sweep_support.small_plan_options(schedule="cosine"))
    with RunStore(tmp_path / "out", create=True) as s:
        s.add_plan(swept, spec=swept.settings, versions={"flops-fit": "9.0.0"})
        stored = s.get_meta("plan")
        for run in stored["runs"]:
            run["a_later_field"] = 1
        s.set_meta(plan=stored)
    def saved():
        db = sqlite3.connect(tmp_path / "out" / "runs.sqlite")
        try:
            return [db.execute(f"SELECT * FROM {table}").fetchall() for table in ("meta", "runs")]
        finally:
            db.close()

    before = saved()
    for command in (["status", str(tmp_path / "out")], ["status", str(tmp_path / "out"), "--json"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith("flops-fit: error: the plan in ") and err.count("\n") == 1, err
        assert "a_later_field" in err and "written by flops-fit 9.0.0" in err
    with pytest.raises(StoreError, match="a_later_field.*written by flops-fit 9.0.0"):
        swept.run(tmp_path / "out", resume=True, host=HOST, skip_parity=True, show_progress=False)
    assert saved() == before


def test_status_of_a_sweep_killed_before_its_first_run_says_how_to_resume(tmp_path, capsys):
    """A driver killed while planning, in the parity gate or before a worker reported: every run
    pending and no driver, and status printed only the counts, not that nothing trains it nor how
    to go on."""
    import json

    from flops_fit.cli.main import main

    swept = plan(host=HOST, **sweep_support.small_plan_options(schedule="cosine"))
    with RunStore(tmp_path, create=True) as s:
        s.add_plan(swept, spec=swept.settings)
    assert main(["status", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == (f"nothing is training it now: {len(swept.runs)} runs not started yet; "
                        f"`flops-fit sweep CONFIG --out {tmp_path} --resume` trains them")
    assert main(["status", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["waiting"] == len(swept.runs)



def test_status_between_two_train_runs_says_so_and_advises_no_resume(tmp_path, capsys):
    """Runs trained one by one with `flops-fit train-run`: for the seconds between one's result and the
    next's start no process holds the store, and status said "nothing is training it now ... `flops-fit
    sweep CONFIG --out tr --resume` trains them". A result stored seconds ago, nothing marked running: the
    store is between runs; a minute on with nothing started, the advice to resume comes back."""
    import json
    import time

    from flops_fit.cli.main import main

    swept = plan(host=HOST, **sweep_support.small_plan_options(schedule="cosine"))
    first = swept.runs[0]
    with RunStore(tmp_path, create=True) as s:
        s.add_plan(swept, spec=swept.settings)
        s.mark_running(first.run_id)  # what train-run does (its own lease, released with its result)
        s.record(RunResult(first.run_id, "done", loss=2.5, tokens=first.tokens, flops=first.flops, steps=first.steps,
                           timings={"total_s": 1.0}))
    waiting = len(swept.runs) - 1
    assert main(["status", str(tmp_path)]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith("between runs: nothing holds it this moment, but its last result was stored ")
    assert line.endswith(f"{waiting} runs not started yet") and "--resume" not in line
    assert "`flops-fit train-run`, or recorded by `flops-fit record`" in line
    assert main(["status", str(tmp_path), "--json"]) == 0
    state = json.loads(capsys.readouterr().out)
    assert state["driver"] is None and 0 <= state["between_runs_s"] <= 60 and state["waiting"] == waiting

    with RunStore(tmp_path) as s:  # two minutes on, nothing started: no train-run follows
        s.db.execute("UPDATE runs SET finished = ? WHERE run_id = ?", (time.time() - 120, first.run_id))
    assert main(["status", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        f"nothing is training it now: {waiting} runs not started yet; "
        f"`flops-fit sweep CONFIG --out {tmp_path} --resume` trains them")



def test_status_of_a_sweep_in_its_preflight_says_it_is_starting(tmp_path, capsys):
    """A driver holds the store's lease while its preflight checks the plan (building datasets, probing memory:
    seconds), before it records the plan; status said "no plan recorded (a sweep into it stopped before its
    first run)" of the sweep starting."""
    import os

    from flops_fit.cli.main import main
    from flops_fit.store.lease import Lease

    with RunStore(tmp_path, create=True) as s, Lease(s.path):  # what run_plan holds before add_plan
        assert main(["status", str(tmp_path)]) == 0
        line = capsys.readouterr().out
        assert line.startswith(f"{tmp_path}: a sweep is starting: pid {os.getpid()} on ")
        assert line.endswith("checks its plan (the preflight) before it records the plan here\n")
    assert main(["status", str(tmp_path)]) == 0  # the driver gone without a plan: it stopped
    assert capsys.readouterr().out.startswith(f"{tmp_path}: no plan recorded (a sweep into it stopped before")


@pytest.fixture
def read_only():
    """Make files or folders read-only for this user, even root (``chattr +i``), and writable again after."""
    import os
    import shutil
    import subprocess

    made = []

    def make(*paths):
        for path in paths:
            if os.geteuid() == 0:
                if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)]).returncode:
                    pytest.skip("root, and chattr +i does not work here: nothing is read-only to root")
            else:
                path.chmod(0o555 if path.is_dir() else 0o444)
            made.append(path)

    yield make
    for path in reversed(made):
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        else:
            path.chmod(0o755 if path.is_dir() else 0o644)


def test_a_store_this_user_may_not_write_is_refused_with_one_line(tmp_path, read_only):
    """A sweep folder copied read-only (or another user's): sweep --resume printed sqlite3's traceback
    "attempt to write a readonly database" from the lease, and a sweep into a folder that cannot be
    made a PermissionError traceback; recording a result there said the run already had one."""
    import flops_fit

    swept = plan(host=HOST, **sweep_support.small_plan_options(schedule="cosine"))
    out = tmp_path / "out"
    with RunStore(out, create=True) as s:
        s.add_plan(swept, spec=swept.settings)
    read_only(out / "runs.sqlite")
    with pytest.raises(StoreError, match=r"cannot write the store .*runs.sqlite \(attempt to write a readonly "
                                         r"database\): make .* writable .*; nothing in it was changed"):
        swept.run(out, resume=True, host=HOST, skip_parity=True, show_progress=False)
    run = swept.runs[0]
    with pytest.raises(StoreError, match="cannot write the store"):
        flops_fit.record_result(out, run.run_id, {"loss": 3.0, "tokens": run.tokens})
    with RunStore(out) as s:
        assert s.counts() == {"pending": len(swept.runs)}  # nothing was written
    read_only(tmp_path)
    with pytest.raises(StoreError, match=r"cannot make the sweep's folder .*new \(.*\): choose an --out folder"):
        swept.run(tmp_path / "new", host=HOST, skip_parity=True, show_progress=False)


def test_a_finished_sweep_on_a_read_only_folder_is_read_and_not_written(tmp_path, read_only, capsys):
    """An archived sweep on a read-only share (its WAL merged on close): status and fit said "cannot
    read the store (attempt to write a readonly database): check that it is readable", because SQLite
    could not make the WAL's shared-memory file there."""
    from flops_fit.cli.main import main

    swept = plan(host=HOST, **sweep_support.small_plan_options(schedule="cosine"))
    out = tmp_path / "out"
    with RunStore(out, create=True) as s:
        s.add_plan(swept, spec=swept.settings)
        run = swept.runs[0]
        s.record(RunResult(run.run_id, "done", loss=2.5, tokens=run.tokens, flops=run.flops, steps=run.steps))
    assert sorted(p.name for p in out.iterdir()) == ["runs.sqlite"]  # the WAL merged on close
    read_only(out / "runs.sqlite", out)
    assert main(["status", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"{out}: {len(swept.runs)} runs: 1 done, {len(swept.runs) - 1} pending")
    with RunStore(out) as s:
        assert list(s.runs_frame().loss) == [2.5]
    with pytest.raises(StoreError, match=r"cannot write the store .*: make .* writable .*; nothing in it was changed"):
        swept.run(out, resume=True, host=HOST, skip_parity=True, show_progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["runs.sqlite"]


def test_a_report_into_a_folder_this_user_may_not_write_is_refused_before_the_fit(tmp_path, read_only, capsys):
    """`flops-fit report` of runs in a read-only folder fitted every method, then ended in a
    PermissionError traceback writing report.html; it is now one line, before any fit."""
    import shutil

    from flops_fit.cli.main import main

    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copy(Path(__file__).parent / "data" / "demo_runs.csv", folder / "runs.csv")
    read_only(folder)
    assert main(["report", str(folder / "runs.csv"), "--bootstrap", "0"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"flops-fit: error: cannot write the report {folder / 'runs.report.html'} (")
    assert f"make {folder} writable, or give --out PATH" in captured.err and captured.err.count("\n") == 1
    assert "fitting" not in captured.err and captured.out == ""


def test_status_of_a_holder_whose_clock_runs_ahead_says_so(tmp_path, capsys):
    """A driver on another host whose clock runs an hour ahead read "heartbeat -3598s ago"."""
    import time

    from flops_fit.cli.main import main
    from flops_fit.store.lease import Lease

    swept = plan(host=HOST, **sweep_support.small_plan_options(schedule="cosine"))
    with RunStore(tmp_path, create=True) as s:
        s.add_plan(swept, spec=swept.settings)
        with Lease(s.path, heartbeat=1e6):  # no beat of its own during the test: the stamp stays ahead
            s.db.execute("UPDATE lease SET heartbeat = ?", (time.time() + 3600,))
            assert main(["status", str(tmp_path)]) == 0
            line = capsys.readouterr().out.splitlines()[1]
    ahead = re.search(r"\(heartbeat stamped (\d+)s ahead of this machine's clock\)", line)
    assert ahead and 3500 <= int(ahead.group(1)) <= 3600, line  # an hour, less the test's own seconds


def test_status_times_runs_trained_one_by_one_by_train_run_as_one_session(tmp_path, capsys):
    """`flops-fit train-run` under a launcher: each run its own process holding its own lease, so status timed
    the pace from the holder's start alone, where no run had finished: the time left was never measured."""
    import json
    import time

    from flops_fit.cli.main import main
    from flops_fit.store.lease import Lease

    swept = plan(host=HOST, **sweep_support.small_plan_options(schedule="cosine"))
    runs = swept.runs
    steps = [r.tokens / (r.batch_size * r.seq_len) for r in runs]
    now = time.time()
    t = now - 1000.0
    with RunStore(tmp_path, create=True) as s:
        s.add_plan(swept, spec=swept.settings)
        for r, n in zip(runs[:3], steps, strict=False):  # three train-run processes, one after another
            s.mark_running(r.run_id)
            s.record(RunResult(r.run_id, "done", loss=2.5, tokens=r.tokens, flops=r.flops, steps=r.steps,
                               timings={"total_s": 0.1 * n}))
            s.db.execute("UPDATE runs SET started = ?, finished = ? WHERE run_id = ?", (t + 5, t + 5 + 0.1 * n,
                                                                                       r.run_id))
            t += 5 + 0.1 * n
        s.mark_running(runs[3].run_id)  # the fourth, its process started 5 s after the third ended
        with Lease(s.path):
            s.db.execute("UPDATE lease SET started = ?", (t + 5,))
            assert main(["status", str(tmp_path), "--json"]) == 0
            state = json.loads(capsys.readouterr().out)
            assert main(["status", str(tmp_path)]) == 0
            text = capsys.readouterr().out.splitlines()
        s.db.execute("UPDATE runs SET finished = ? WHERE run_id = ?", (t - 600, runs[2].run_id))
        with Lease(s.path):  # the last result long before this driver: another session, not timed with it
            s.db.execute("UPDATE lease SET started = ?", (t + 5,))
            assert main(["status", str(tmp_path), "--json"]) == 0
            later = json.loads(capsys.readouterr().out)
    # timed from the first run's start, the pace its three results kept (0.1 s a step): as one driver's sweep
    elapsed, done = now - (now - 1000.0 + 5), sum(steps[:3])
    assert state["seconds_left"] == pytest.approx(elapsed * (sum(steps) - done) / done, rel=1e-2)
    assert " left" in text[1] and "measured once" not in text[1]
    assert later["seconds_left"] is None


def test_a_sweep_resumed_within_a_minute_is_timed_as_its_own_session(tmp_path, capsys, monkeypatch):
    """status joined a driver to the runs that finished up to 60 s before it started (how runs trained one by
    one by `flops-fit train-run` are one session), so a sweep stopped and resumed within a minute was timed
    from the earlier driver's runs, idle seconds between them included, where its own display counts from its
    own start. The sweep's driver records its start (run_plan), and status times such a driver alone."""
    import json
    import threading
    import time

    from flops_fit.cli.main import main
    from flops_fit.sweeps.driver import run_plan

    swept = plan(host=HOST, **sweep_support.small_plan_options(schedule="cosine"))
    out, gate = tmp_path / "out", tmp_path / "gate"
    options = {"host": HOST, "skip_parity": True, "skip_preflight": True, "show_progress": False}
    earlier = [r.run_id for r in swept.runs[:3]]
    run_plan(swept, out, only=set(earlier), **options)  # the first driver: three runs, then it ended
    with RunStore(out) as s:  # as if they took 40 s, the last stored 5 s ago
        now = time.time()
        for i, run_id in enumerate(earlier):
            s.db.execute("UPDATE runs SET started = ?, finished = ? WHERE run_id = ?",
                         (now - 45 + 13 * i, now - 32 + 13 * i, run_id))
    monkeypatch.setenv(sweep_support.GATE, f"{gate}:{sweep_support.CountingText.train_instances + 1}:2")
    resumed = threading.Thread(target=lambda: run_plan(swept, out, resume=True, **options))
    resumed.start()
    try:
        sweep_support.gate_reached(gate)
        assert main(["status", str(out), "--json"]) == 0
        state = json.loads(capsys.readouterr().out)
    finally:
        (tmp_path / "gate.release").write_text("go")
        resumed.join()
    assert state["driver"] is not None
    assert state["seconds_left"] is None  # none of this driver's runs has finished: its pace is not measured yet


def test_a_store_on_a_full_disk_refuses_the_write_in_one_line_and_keeps_what_it_held(store):
    """A commit the disk takes no more of (SQLITE_FULL; here the store's page limit stands in for the disk)
    was an OperationalError traceback that left the transaction open."""
    s, swept = store
    first, second = swept.runs[:2]
    s.record(RunResult(first.run_id, "done", loss=3.0, tokens=first.tokens))
    s.db.execute(f"PRAGMA max_page_count = {s.db.execute('PRAGMA page_count').fetchone()[0]}")
    big = RunResult(second.run_id, "done", loss=3.5, tokens=second.tokens, curve=[[i, 2.0] for i in range(3000)])
    with pytest.raises(StoreError, match=r"^cannot write the store .*runs.sqlite \(database or disk is full\): free "
                                         r"space on its disk .*then go on \(a sweep: the same command with --resume\); "
                                         r"what it held before is kept"):
        s.record(big)
    assert not s.db.in_transaction
    assert s.counts() == {"done": 1, "pending": 5}
    assert s.runs_frame()["loss"].tolist() == [3.0]


def test_a_write_past_the_file_size_limit_is_one_line_and_keeps_what_the_store_held(store):
    """A write the system refuses (ulimit -f, a quota: SQLite's 'disk I/O error') ended the sweep in an
    OperationalError traceback."""
    import resource
    import signal

    s, swept = store
    first, second = swept.runs[:2]
    s.record(RunResult(first.run_id, "done", loss=3.0, tokens=first.tokens))
    big = RunResult(second.run_id, "done", loss=3.5, tokens=second.tokens, curve=[[i, 2.0] for i in range(20000)])
    assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN  # Python's default: the write fails with EFBIG
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (s.path.stat().st_size, limit[1]))  # no file may grow now
    try:
        with pytest.raises(StoreError, match=r"^cannot write the store .*runs.sqlite \(disk I/O error\): free space "
                                             r"on its disk \(or lift the quota or file-size limit"):
            s.record(big)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
    assert not s.db.in_transaction
    assert s.counts() == {"done": 1, "pending": 5}


def test_a_lease_that_cannot_be_given_up_is_a_warning_not_a_second_traceback(tmp_path, caplog):
    """Giving the lease up on a store that can no longer be written (a full disk; here its folder removed
    under the driver: moved away) raised from the driver's ``with``, hiding why the sweep stopped behind a second
    traceback; the lease is taken over anyway once its process is gone."""
    from flops_fit.store.lease import Lease

    folder = tmp_path / "out"
    swept = plan(host=HOST, **sweep_support.small_plan_options())
    with RunStore(folder, create=True) as s:
        s.add_plan(swept, spec=swept.settings)
    lease = Lease(folder / "runs.sqlite").acquire()
    folder.rename(tmp_path / "moved")
    with caplog.at_level("WARNING", logger="flops_fit.store.lease"):
        lease.release()
    assert f"the lease on {folder / 'runs.sqlite'} could not be given up (unable to open database file)" in caplog.text


def test_the_store_file_alone_holds_every_stored_result_while_its_driver_runs(store, tmp_path):
    """The results lived in runs.sqlite-wal until the driver closed the store: after a kill -9, the store file
    copied alone (or left without its -wal) held no plan and no result, and a sweep resumed on it trained
    every run again."""
    import shutil

    s, swept = store
    run = swept.runs[0]
    s.record(RunResult(run.run_id, "done", loss=3.0, tokens=run.tokens))
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(s.path, alone / "runs.sqlite")  # the driver still holds it open: its WAL not yet merged on close
    with RunStore(alone) as copy:
        assert copy.statuses()[run.run_id] == "done" and copy.runs_frame()["loss"].tolist() == [3.0]
        assert len(copy.planned_runs()) == 6


def _listing(folder):
    """Each path under ``folder`` (itself too) with its modification time and size."""
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in [folder, *sorted(folder.rglob("*"))]}


def test_commands_that_read_a_store_leave_its_folder_as_it_was(tmp_path, capsys):
    """status, fit and report of a finished sweep (a folder chmod -R a-w too) opened the store for writing:
    SQLite made and removed the WAL's files, so the folder's modification time changed (and, as root, the
    read-only folder was written). They now read it through a read-only connection."""
    from flops_fit.cli.main import main

    swept = plan(host=HOST, **sweep_support.small_plan_options(budgets=[2e7, 4e7, 8e7], sizes=[4, 8, 12, 16]))
    out = tmp_path / "out"
    with RunStore(out, create=True) as s:
        s.add_plan(swept, spec=swept.settings)
        for r in swept.runs:  # a Chinchilla-like loss, for fit to fit
            loss = 1.8 + 40 / r.params ** 0.3 + 60 / r.tokens ** 0.3
            s.record(RunResult(r.run_id, "done", loss=loss, tokens=r.tokens, flops=r.flops, steps=r.steps))
    before = _listing(out)
    assert main(["status", str(out)]) == 0
    assert main(["status", str(out), "--json"]) == 0
    assert main(["fit", str(out), "--method", "vpnls", "--bootstrap", "0"]) == 0
    assert main(["report", str(out), "--method", "vpnls", "--bootstrap", "0", "--out", str(tmp_path / "r.html")]) == 0
    assert _listing(out) == before
    for path in [out, *out.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        assert main(["status", str(out)]) == 0
        assert main(["fit", str(out), "--method", "vpnls", "--bootstrap", "0"]) == 0
        assert _listing(out) == before
    finally:
        for path in [out, *out.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert f"{len(swept.runs)} runs: {len(swept.runs)} done" in capsys.readouterr().out


def test_a_reader_sees_what_a_sweep_in_flight_committed(tmp_path):
    """A store in use (its -wal file there) is read through the WAL, not as the immutable file: a result a
    writer committed and has not yet merged into the file is read."""
    swept = plan(host=HOST, **sweep_support.small_plan_options())
    with RunStore(tmp_path, create=True) as s:
        s.add_plan(swept, spec=swept.settings)
    writer = sqlite3.connect(tmp_path / "runs.sqlite", isolation_level=None)
    try:
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute("UPDATE runs SET status = 'done', loss = 2.5 WHERE run_id = ?", (swept.runs[0].run_id,))
        assert (tmp_path / "runs.sqlite-wal").stat().st_size > 0
        with RunStore(tmp_path, reading=True) as s:
            assert s.statuses()[swept.runs[0].run_id] == "done"
    finally:
        writer.close()
