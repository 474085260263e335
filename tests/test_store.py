"""The run store: plan and results in SQLite, atomic writes, the frame the fitter reads."""

import math
import sqlite3

import pytest
import sweep_support

from flops_fit.errors import StoreError
from flops_fit.store.run_store import RunStore
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
