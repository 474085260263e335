"""Plans out, results in: ``flops-fit plan --json / --csv`` for a lab's own scheduler, and
``flops-fit record`` (``flops_fit.record_result``) storing what it trained, with the store's checks."""

import csv
import io
import json
import sqlite3

import pytest

import flops_fit
from flops_fit.cli.main import main
from flops_fit.cli.sweep import _prefix as status_prefix
from flops_fit.errors import StoreError
from flops_fit.store.run_store import RunStore
from flops_fit.sweeps.config import load_config

SPEC = ('[sweep]\nmodel = "gpt"\nbudgets = [4e8]\nsizes = [8, 12, 16]\nseq_len = 16\nbatch_size = 8\nmin_steps = 5\n'
        '[model]\nn_layer = 1\nn_head = 1\n')


@pytest.fixture
def planned(tmp_path, capsys):
    spec = tmp_path / "sweep.toml"
    spec.write_text(SPEC)
    assert main(["plan", str(spec), "--json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--record-only", "--skip-preflight"]) == 0
    capsys.readouterr()
    return spec, out, exported


def rows(out):
    db = sqlite3.connect(out / "runs.sqlite")
    try:
        return {r[0]: r[1:] for r in db.execute("SELECT run_id, status, loss, tokens FROM runs")}
    finally:
        db.close()


def test_plan_exports_the_runs_the_store_records(planned, capsys):
    spec, out, exported = planned
    planned_runs = flops_fit.plan(load_config(spec).options).runs
    assert [r["run_id"] for r in exported["runs"]] == [r.run_id for r in planned_runs] == list(rows(out))
    first = exported["runs"][0]
    assert first["tokens"] == planned_runs[0].tokens and first["lr"] == planned_runs[0].lr
    assert first["flops"] == planned_runs[0].tokens * planned_runs[0].flops_per_unit
    assert main(["plan", str(spec), "--csv"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["run_id"] for r in table] == [r.run_id for r in planned_runs]
    assert [float(r["lr"]) for r in table] == [r.lr for r in planned_runs]  # every digit survives
    assert json.loads(table[0]["model_config"]) == planned_runs[0].model_config


def test_record_stores_an_outside_result_once(planned, tmp_path, capsys):
    _, out, exported = planned
    run = exported["runs"][1]
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"loss": 3.5, "tokens": run["tokens"], "curve": [[run["tokens"] / 2, 4.0]]}))
    assert main(["record", str(out), run["run_id"], "--result", str(result)]) == 0
    assert rows(out)[run["run_id"]] == ("done", 3.5, run["tokens"])
    frame = flops_fit.load_runs(out).frame
    assert frame["run_id"].tolist() == [run["run_id"]] and frame["curve"][0].tolist() == [[run["tokens"] / 2, 4.0]]
    capsys.readouterr()
    result.write_text(json.dumps({"loss": 3.0, "tokens": run["tokens"]}))
    assert main(["record", str(out), run["run_id"], "--result", str(result)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already has a result" in err
    assert rows(out)[run["run_id"]] == ("done", 3.5, run["tokens"])  # the first result stays


@pytest.mark.parametrize("content, run_index, message", [
    ({"loss": 3.5, "tokens": 1}, 0, "trained 1 tokens, the plan gives it"),
    # the count as given: {:g} printed 6 figures, "trained 2.1696e+06 tokens" (or 610336 for 610336.5)
    ({"loss": 3.5, "tokens": 2169600.5}, 0, "trained 2169600.5 tokens, the plan gives it 21,696"),
    ({"loss": 3.5, "tokens": 12345678}, 0, "trained 12345678 tokens, the plan gives it 21,696"),
    ({"loss": float("nan"), "tokens": None}, 0, "loss must be a finite positive number"),
    ({"loss": "NaN", "tokens": None}, 0, 'must be a number, got \'NaN\'; a run that diverged is recorded with '
     '"status": "failed"'),
    ({"loss": 3.5}, 0, "the result needs tokens"),
    ({"loss": 3.5, "tokens": None, "lr": 1.0}, 0, "unknown result field(s) lr"),
    ({"loss": 3.5, "tokens": None}, None, "is not in the plan stored in"),
    ("{not json", 0, "not JSON"),
    # a binary file given as the result: a UnicodeDecodeError traceback (exit 1)
    (b"\x89PNG\r\n\x1a\n\xda\xff", 0, "not a text file, so not the result's JSON"),
    # a traceback (ValueError, AttributeError) and exit 1, not one line
    ({"loss": 3.5, "tokens": None, "timings": {"total_s": "1h"}}, 0, "timings must map names to seconds"),
    ({"loss": 3.5, "tokens": None, "timings": [3600]}, 0, "timings must map names to seconds"),
    # stored as given (-4 steps), or cut (12.7 -> 12)
    ({"loss": 3.5, "tokens": None, "steps": -4}, 0, "steps must be the whole number of optimizer steps it took"),
    ({"loss": 3.5, "tokens": None, "steps": 12.7}, 0, "steps must be the whole number of optimizer steps it took"),
    # an error that is no text: a list was a SQLite traceback (exit 1), a number was kept as the reason
    ({"status": "failed", "error": ["out of memory"]}, 0, "error must be text saying why the run failed"),
    ({"status": "failed", "error": 5}, 0, "error must be text saying why the run failed, got 5"),
    # a failed run's tokens: inf was an OverflowError traceback (exit 1), -5 was stored and shown
    ({"status": "failed", "error": "oom", "tokens": float("inf")}, 0, "a failed run's tokens are the whole number"),
    ({"status": "failed", "error": "oom", "tokens": -5}, 0, "from 0 to the plan's"),
    ({"status": "failed", "error": "oom", "tokens": 2.5}, 0, "got 2.5"),
    # stored as given for the curve law and the report to read: NaN losses, -5 tokens seen, -1 bits per byte
    ({"loss": 3.5, "tokens": None, "curve": [[10, 4.0], [20, float("nan")]]}, 0, "and finite losses; got [20.0, nan]"),
    ({"loss": 3.5, "tokens": None, "curve": [[-5, 4.0]]}, 0, "tokens seen a finite number from 0"),
    ({"loss": 3.5, "tokens": None, "bpb": -1}, 0, "bpb must be a finite positive number of bits per byte, got -1"),
    ({"loss": 3.5, "tokens": None, "bpb": float("inf")}, 0, "bpb must be a finite positive number of bits per byte, "
                                                             "got inf"),
    ({"loss": 3.5, "tokens": None, "top1_error": 7}, 0, "top1_error must be a fraction from 0 to 1, got 7"),
    # a device that is no text was stored as the text "5" (or "['a', 'b']")
    ({"loss": 3.5, "tokens": None, "device": 5}, 0, 'device must be text naming where it ran, e.g. "cuda:0"'),
    ({"loss": 3.5, "tokens": None, "device": ["a", "b"]}, 0, "device must be text naming where it ran"),
])
def test_a_refused_result_is_one_line_and_changes_nothing(planned, tmp_path, capsys, content, run_index, message):
    _, out, exported = planned
    run_id = exported["runs"][run_index]["run_id"] if run_index is not None else "0123456789abcdef"
    if isinstance(content, dict) and content.get("tokens", 0) is None:
        content["tokens"] = exported["runs"][0]["tokens"]
    result = tmp_path / "result.json"
    if isinstance(content, bytes):
        result.write_bytes(content)
    else:
        result.write_text(content if isinstance(content, str) else json.dumps(content))
    before = rows(out)
    assert main(["record", str(out), run_id, "--result", str(result)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert rows(out) == before


def test_record_result_api_and_a_failed_run(planned):
    _, out, exported = planned
    run = exported["runs"][2]
    stored = flops_fit.record_result(out, run["run_id"], {"status": "failed", "error": "diverged at step 3"})
    assert stored.status == "failed" and rows(out)[run["run_id"]][0] == "failed"
    with pytest.raises(StoreError, match="already has a result"):
        flops_fit.record_result(out, run["run_id"], {"loss": 3.0, "tokens": run["tokens"]})


def test_a_recorded_failure_and_the_status_table_print_no_nan(planned, tmp_path, capsys):
    """Recording a failed run printed "failed, held-out loss nan after N tokens" (it has no loss, and N was the
    plan's), and `flops-fit status` then showed "nan" in the error column of every run that did not fail."""
    _, out, exported = planned
    done, failed = exported["runs"][0], exported["runs"][1]
    (tmp_path / "done.json").write_text(json.dumps({"loss": 3.5, "tokens": done["tokens"]}))
    (tmp_path / "failed.json").write_text(json.dumps({"status": "failed", "error": "diverged at step 3"}))
    assert main(["record", str(out), done["run_id"], "--result", str(tmp_path / "done.json")]) == 0
    assert main(["record", str(out), failed["run_id"], "--result", str(tmp_path / "failed.json")]) == 0
    printed = capsys.readouterr().out
    assert f"run {failed['run_id']}: failed (diverged at step 3), recorded in" in printed
    assert main(["status", str(out)]) == 0
    table = capsys.readouterr().out
    assert "diverged at step 3" in table and "3.5000" in table
    assert "nan" not in printed + table


def test_the_status_table_names_each_run_by_a_prefix_record_accepts(planned, tmp_path, capsys):
    """The status table showed no run ids, so a user reading it had nothing to pass to train-run or record:
    its first column is now each run's id prefix (8 characters, longer where two runs share them)."""
    _, out, exported = planned
    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("run "))
    shown = [line.split()[0] for line in lines[header + 2:]]
    assert shown == [r["run_id"][:8] for r in exported["runs"]]
    run = exported["runs"][1]
    (tmp_path / "done.json").write_text(json.dumps({"loss": 3.5, "tokens": run["tokens"]}))
    assert main(["record", str(out), shown[1], "--result", str(tmp_path / "done.json")]) == 0
    assert rows(out)[run["run_id"]][0] == "done"
    assert status_prefix(["0123456789ab", "01234567cdef", "fedcba9876543210"]) == 9  # two share 8: one more


def test_the_status_table_shows_a_failure_without_tokens_or_time_as_planned_and_untimed(planned, tmp_path, capsys):
    """A run whose worker was killed (RunLost) is stored with no tokens and no timings: its row read
    "0" tokens and "0.0s", as if it had trained nothing in no time."""
    _, out, exported = planned
    failed = exported["runs"][1]
    (tmp_path / "failed.json").write_text(json.dumps({"status": "failed", "error": "RunLost: worker died"}))
    assert main(["record", str(out), failed["run_id"], "--result", str(tmp_path / "failed.json")]) == 0
    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if "RunLost" in line]
    cells = row.split()
    assert f"{failed['tokens']:,}" in cells and "failed" in cells
    assert "0" not in cells and "0.0s" not in cells


def test_a_failed_run_retried_outside_is_recorded_in_its_place_only_when_asked(planned, tmp_path, capsys):
    """A lab that trains a failed run again on its own scheduler could not record the retry ("a run is
    recorded once", no way forward). --retry-failed replaces a failure; a done run, or a retry the store
    refuses, leaves what is stored as it was."""
    _, out, exported = planned
    run = exported["runs"][2]["run_id"]
    files = {name: tmp_path / f"{name}.json" for name in ("failed", "retry", "bad")}
    files["failed"].write_text(json.dumps({"status": "failed", "error": "node lost"}))
    files["retry"].write_text(json.dumps({"loss": 3.25, "tokens": exported["runs"][2]["tokens"]}))
    files["bad"].write_text(json.dumps({"loss": float("nan"), "tokens": exported["runs"][2]["tokens"]}))
    assert main(["record", str(out), run, "--result", str(files["failed"])]) == 0
    assert main(["record", str(out), run, "--result", str(files["retry"])]) == 2
    assert "(failed); a run is recorded once; to record a retry of the failed run in its place, add --retry-failed" \
        in capsys.readouterr().err
    assert main(["record", str(out), run, "--result", str(files["bad"]), "--retry-failed"]) == 2
    with RunStore(out) as store:
        assert store.statuses()[run] == "failed"  # a refused retry replaced nothing
    # a retry whose error is no text was a traceback after the failure was put back to pending: it was lost
    files["bad"].write_text(json.dumps({"status": "failed", "error": ["out of memory"]}))
    assert main(["record", str(out), run, "--result", str(files["bad"]), "--retry-failed"]) == 2
    with RunStore(out) as store:
        assert store.statuses()[run] == "failed" and store.runs_frame().set_index("run_id").error[run] == "node lost"
    assert main(["record", str(out), run, "--result", str(files["retry"]), "--retry-failed"]) == 0
    with RunStore(out) as store:
        row = store.runs_frame().set_index("run_id").loc[run]
    assert row.status == "done" and row.loss == 3.25
    capsys.readouterr()
    assert main(["record", str(out), run, "--result", str(files["retry"]), "--retry-failed"]) == 2  # done: once
    assert capsys.readouterr().err.strip().endswith("(done); a run is recorded once")


def test_run_ids_as_printed_are_taken_where_a_command_takes_one(planned, tmp_path, capsys):
    """Status, progress and a sweep's failure summary print 8-character run ids, but `flops-fit record OUT
    87d8b5f1` and `train-run` refused them ("not in the plan"). A unique prefix of 8 or more characters now
    names its run; a shorter one says how long a prefix must be; an ambiguous one names its matches."""
    import dataclasses

    from flops_fit.store.run_store import planned_run

    _, out, exported = planned
    run = exported["runs"][1]
    (tmp_path / "done.json").write_text(json.dumps({"loss": 3.5, "tokens": run["tokens"]}))
    assert main(["record", str(out), run["run_id"][:8], "--result", str(tmp_path / "done.json")]) == 0
    assert f"run {run['run_id']}: done" in capsys.readouterr().out
    assert rows(out)[run["run_id"]][:2] == ("done", 3.5)
    # train-run finds the run by its prefix too (and refuses it: it has a result, named by its whole id)
    assert main(["train-run", str(out), run["run_id"][:10]]) == 2
    assert f"run {run['run_id']} already has a result in {out} (done)" in capsys.readouterr().err
    assert main(["train-run", str(out), run["run_id"][:4]]) == 2
    assert "is not in the plan stored in" in (err := capsys.readouterr().err)
    assert "a prefix needs at least 8 characters" in err and err.count("\n") == 1
    with RunStore(out) as store:
        runs = store.planned_runs()
    twins = [dataclasses.replace(runs[0], run_id="87d8b5f1" + "0" * 8),
             dataclasses.replace(runs[1], run_id="87d8b5f1" + "1" * 8)]
    with pytest.raises(StoreError, match="ambiguous in .*: it starts 87d8b5f100000000, 87d8b5f111111111"):
        planned_run(twins, "87d8b5f1", out)
    assert planned_run(twins, "87d8b5f11", out).run_id == "87d8b5f111111111"


def test_a_result_is_recorded_beside_a_train_run_of_another_run(planned, tmp_path, capsys):
    """`flops-fit record` was refused while `flops-fit train-run` trained another run of the folder, as if a sweep
    driver held it; a train-run trains and records its one run only, so the others are recorded beside it. Its own
    run stays refused (the train-run would store its result over the recorded one), saying why."""
    import subprocess
    import sys

    _, out, exported = planned
    training, other = exported["runs"][1], exported["runs"][2]
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"loss": 9.5, "tokens": other["tokens"]}))
    trainer = subprocess.Popen(  # train-run's hold on the store: the lease, and the run it trains alone
        [sys.executable, "-c", "import sys; from flops_fit.store.lease import Lease\n"
         "from flops_fit.store.outside import mark_training\nfrom flops_fit.store.run_store import RunStore\n"
         f"with Lease({str(out / 'runs.sqlite')!r}), RunStore({str(out)!r}) as store:\n"
         f"    mark_training(store, {training['run_id']!r}); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert trainer.stdout.readline() == "held\n"
        assert main(["record", str(out), other["run_id"][:8], "--result", str(result)]) == 0
        assert rows(out)[other["run_id"]] == ("done", 9.5, other["tokens"])
        before = rows(out)
        result.write_text(json.dumps({"loss": 9.5, "tokens": training["tokens"]}))
        assert main(["record", str(out), training["run_id"], "--result", str(result)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"run {training['run_id']} is being trained in {out} by `flops-fit train-run` " \
            f"(pid {trainer.pid} on " in err and "records its own result when it ends" in err
        assert rows(out) == before
    finally:
        trainer.communicate("")


def test_a_result_is_not_recorded_into_a_folder_a_driver_sweeps(planned, tmp_path, capsys):
    """`flops-fit record OUT RUN` while `flops-fit sweep` trained OUT said "recorded"; the driver then trained
    the run itself and stored its own result over it without a word. A live driver (another process holding
    the store's lease) now makes record refuse in one line, nothing stored; once it is gone, record works."""
    import subprocess
    import sys

    _, out, exported = planned
    run = exported["runs"][2]
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"loss": 9.5, "tokens": run["tokens"]}))
    driver = subprocess.Popen(  # a driver in another process: it holds the lease until its stdin closes
        [sys.executable, "-c", "import sys; from flops_fit.store.lease import Lease\n"
         f"with Lease({str(out / 'runs.sqlite')!r}):\n    print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout.readline() == "held\n"
        before = rows(out)
        assert main(["record", str(out), run["run_id"], "--result", str(result)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{out} is being swept by a driver (pid {driver.pid} on " in err
        assert "record once it ends (or stop it)" in err and rows(out) == before
    finally:
        driver.communicate("")
    assert main(["record", str(out), run["run_id"], "--result", str(result)]) == 0
    assert rows(out)[run["run_id"]] == ("done", 9.5, run["tokens"])
