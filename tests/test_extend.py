"""A sweep extended with budgets or sizes: `sweep --resume` (and ``plan.run(out, resume=True)``) into the
folder that holds it adds the new runs and trains only them; a plan that changes or drops stored runs is
refused, naming which and why (``sweeps.extend``)."""

import json
import shutil
import sqlite3

import pytest
import sweep_support
from plugin_kit import process_host
from test_lr_reach import MODEL, write_law

import flops_fit
from flops_fit.cli.main import main
from flops_fit.errors import StoreError
from flops_fit.store.run_store import RunStore
from flops_fit.sweeps.driver import checkpoint_policy, counted_after, sweep
from flops_fit.sweeps.extend import HISTORY_META
from flops_fit.sweeps.planner import plan
from flops_fit.sweeps.progress import work_of

HOST = sweep_support.host()
MORE = [2e7, 4e7, 8e7]  # the tiny sweep's 2 budgets, and one more


def run(out, **overrides):
    options = {"host": HOST, "out_dir": out, "show_progress": False}
    return sweep(**{**options, **{k: v for k, v in overrides.items() if k in ("resume", "show_progress")}},
                 **sweep_support.small_plan_options(**{k: v for k, v in overrides.items()
                                                       if k not in ("resume", "show_progress")}))


def stored_rows(out):
    """Every run's row as the store holds it (results, attempts, times), by run id."""
    db = sqlite3.connect(out / "runs.sqlite")
    try:
        db.row_factory = sqlite3.Row
        return {row["run_id"]: dict(row) for row in db.execute("SELECT * FROM runs")}
    finally:
        db.close()


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The tiny cosine sweep of 2 budgets, trained."""
    out = tmp_path_factory.mktemp("swept") / "out"
    run(out)
    return out


@pytest.fixture
def folder(swept, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(swept, out)
    return out


def test_a_budget_more_trains_only_the_new_runs(folder, capsys):
    """Before: `--resume` with a budget more was refused ("holds a different sweep (... 3 planned runs are new):
    choose another --out folder"), and every run trained had to be trained again elsewhere."""
    before = stored_rows(folder)
    with pytest.raises(StoreError, match=r"already holds this sweep: pass resume=True \(--resume\) to continue it "
                                         r"and add this plan's 3 new runs \(budget 8e\+07 \(sizes 4, 8, 16\)\)"):
        run(folder, budgets=MORE)
    assert stored_rows(folder) == before  # refused: nothing recorded
    frame = run(folder, budgets=MORE, resume=True, show_progress=True).runs
    err = capsys.readouterr().err
    assert f"flops-fit: added 3 runs to the sweep in {folder} (budget 8e+07 (sizes 4, 8, 16)); its 6 stored runs " \
           "keep their results" in err
    after = stored_rows(folder)
    assert len(after) == 9 and set(frame.status) == {"done"}
    for run_id, row in before.items():  # not trained again: the same attempt, result and times
        assert {k: v for k, v in after[run_id].items() if k != "position"} == \
            {k: v for k, v in row.items() if k != "position"}
    added = [r for r in after.values() if r["run_id"] not in before]
    assert {r["budget"] for r in added} == {8e7} and all(r["attempts"] == 1 for r in added)
    grown = plan(host=HOST, **sweep_support.small_plan_options(budgets=MORE))
    with RunStore(folder) as store:
        assert [r.run_id for r in store.planned_runs()] == [r.run_id for r in grown.runs]
        assert store.get_meta("spec")["budgets"] == MORE
        history = store.get_meta(HISTORY_META)
    assert [(h["runs"], h["added"], h["budgets"]) for h in history] == [(6, 6, [2e7, 4e7]), (9, 3, [8e7])]
    order = sorted(after.values(), key=lambda r: r["position"])
    assert [r["run_id"] for r in order] == [r.run_id for r in grown.runs]  # the plan's order, new runs in place
    assert len(flops_fit.load_runs(folder).frame) == 9  # what fit and report read
    assert run(folder, budgets=MORE, resume=True).runs.shape[0] == 9  # resumed again: nothing to add or train


def test_a_size_more_through_plan_run(folder):
    """The API path: ``plan(...).run(out, resume=True)`` with a size more trains that size at each budget."""
    before = stored_rows(folder)
    grown = plan(host=HOST, **sweep_support.small_plan_options(sizes=[4, 8, 16, 24]))
    frame = grown.run(folder, resume=True, host=HOST, show_progress=False).runs
    after = stored_rows(folder)
    assert set(frame[~frame.run_id.isin(list(before))]["size"]) == {24} and len(frame) > len(before)
    assert all(after[k]["attempts"] == row["attempts"] and after[k]["loss"] == row["loss"] for k, row in before.items())


def test_a_changed_or_dropped_run_is_refused_naming_it(folder):
    before = stored_rows(folder)
    with pytest.raises(StoreError) as refused:
        run(folder, budgets=[2e7, 8e7], resume=True)
    assert str(refused.value) == (
        f"{folder} holds a different sweep (3 of its runs are not in this plan, 3 planned runs are new): it drops 3 "
        "stored runs (budget 4e+07 (sizes 4, 8, 16)); a sweep resumed into its folder may add runs, not leave stored "
        "ones out: keep the stored runs' settings as they were and only add budgets or sizes, or choose another "
        "--out folder")
    with pytest.raises(StoreError) as refused:
        run(folder, budgets=MORE, eval_tokens=256, resume=True)
    assert str(refused.value) == (
        f"{folder} holds a different sweep (6 of its runs are not in this plan, 9 planned runs are new; settings that "
        "differ: eval_tokens): this plan changes 6 stored runs (budget 2e+07 (sizes 4, 8, 16), budget 4e+07 (sizes "
        "4, 8, 16)): keep the stored runs' settings as they were and only add budgets or sizes, or choose another "
        "--out folder")
    assert stored_rows(folder) == before


def test_a_wsd_budget_that_moves_the_stored_families_is_refused_with_why(tmp_path):
    """A smaller budget in a WSD sweep shortens the warmup its families share (warmup_fraction of their
    shortest branch): the stored branches trained with the old one. Recorded only: nothing trains."""
    options = sweep_support.small_plan_options(schedule="wsd", budgets=[2e7, 4e7], hparams={"warmup_fraction": 0.2})
    first = plan(host=HOST, **options)
    out = tmp_path / "out"
    first.run(out, host=HOST, record_only=True, show_progress=False)
    smaller = plan(host=HOST, **{**options, "budgets": [1.6e7, 2e7, 4e7]})
    assert {r.warmup_steps for r in smaller.runs if r.budget == 2e7} != \
        {r.warmup_steps for r in first.runs if r.budget == 2e7}  # what the refusal is about
    with pytest.raises(StoreError) as refused:
        smaller.run(out, host=HOST, resume=True, record_only=True, show_progress=False)
    message = str(refused.value)
    assert "settings that differ: warmup_steps" in message
    assert "this plan changes 4 stored runs (budget 2e+07 (sizes 4, 8), budget 4e+07 (sizes 4, 8)): adding budget " \
           "1.6e+07 changes the warmup of 2 stored WSD families (a family warms up over warmup_fraction of its " \
           "shortest branch's steps, so a shorter branch shortens it; the stored runs have the old warmup): add " \
           "budgets above 4e+07 (the largest stored; they leave every family's warmup as it is), or sweep the grown plan into another --out folder" in message
    larger = plan(host=HOST, **{**options, "budgets": [2e7, 4e7, 8e7]})  # the fix it names
    larger.run(out, host=HOST, resume=True, record_only=True, show_progress=False)
    with RunStore(out) as store:
        assert len(store.planned_runs()) == 9


def test_an_extended_folder_is_read_whole_by_status_train_run_and_record(tmp_path, capsys):
    """`--record-only` of the grown plan, then `train-run` and `record` of its new runs; status lists every run."""
    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML)
    out = tmp_path / "out"
    with process_host(HOST):
        assert main(["sweep", str(config), "--out", str(out), "--record-only", "--skip-preflight"]) == 0
        config.write_text(sweep_support.SMALL_SWEEP_TOML.replace("[2e7, 4e7]", "[2e7, 4e7, 8e7]"))
        capsys.readouterr()
        assert main(["sweep", str(config), "--out", str(out), "--record-only", "--skip-preflight"]) == 2
        err = capsys.readouterr().err
        assert err.splitlines()[-1].startswith("flops-fit: error: ") and \
            "--resume) to continue it and add this plan's 3 new runs" in err.splitlines()[-1]
        assert main(["sweep", str(config), "--out", str(out), "--record-only", "--skip-preflight", "--resume"]) == 0
        assert "added 3 runs to the sweep" in capsys.readouterr().err
        assert main(["status", str(out)]) == 0
        text = capsys.readouterr().out
        assert f"{out}: 9 runs: 9 pending" in text and text.count("8.00e+07") == 3
        with RunStore(out) as store:
            new = [r for r in store.planned_runs() if r.budget == 8e7]
        result = tmp_path / "result.json"
        result.write_text(json.dumps({"loss": 3.5, "tokens": new[0].tokens}))
        assert main(["record", str(out), new[0].run_id, "--result", str(result)]) == 0
        assert main(["train-run", str(out), new[1].run_id]) == 0
        capsys.readouterr()
        assert main(["status", str(out)]) == 0
        assert f"{out}: 9 runs: 2 done, 7 pending" in capsys.readouterr().out


def test_an_adaptive_sweeps_pool_does_not_grow(folder):
    with RunStore(folder) as store:
        store.set_meta(adaptive={"rounds": []})
    with pytest.raises(StoreError, match=r"holds an adaptive sweep, whose rounds are replayed from the plan they were "
                                         r"chosen in: this plan adds 3 runs \(budget 8e\+07 \(sizes 4, 8, 16\)\)"):
        run(folder, budgets=MORE, resume=True)


def test_a_wsd_budget_that_moves_a_tuned_rate_is_refused_with_why(tmp_path):
    """Under a tuned law with a tokens term a WSD family trains at the law's rate at the geometric mean of
    its branches' tokens: a budget more moves every shared family's rate. Recorded only: nothing trains."""
    law = write_law(tmp_path / "law")

    def planned(budgets):
        return flops_fit.plan(model="gpt", budgets=budgets, sizes=[8, 12, 16], seq_len=16, batch_size=8, min_steps=5,
                              schedule="wsd", model_config=MODEL, hparams={"tuned": str(law), "beyond": "extrapolate"})

    out = tmp_path / "out"
    planned([4e8, 8e8]).run(out, record_only=True, skip_preflight=True, show_progress=False)
    with pytest.raises(StoreError) as refused:
        planned([4e8, 8e8, 1.6e9]).run(out, resume=True, record_only=True, skip_preflight=True, show_progress=False)
    assert str(refused.value).endswith(
        "settings that differ: lr, lr_source): this plan changes 6 stored runs (budget 4e+08 (sizes 8, 12, 16), budget "
        "8e+08 (sizes 8, 12, 16)): adding budget 1.6e+09 changes the learning rate of 3 stored WSD families (a family "
        "shares one rate, its tuned law's at the geometric mean of its branches' tokens, so a new branch moves it; the "
        "stored runs have the old rate): sweep the grown plan into another --out folder; a sweep planned with a rate "
        "that no budget moves (a fixed [hparams] lr, a rule, a law without tokens, or schedule = \"cosine\": each "
        "run's rate at its own tokens) takes added budgets")
    with RunStore(out) as store:
        assert len(store.planned_runs()) == 6


def test_a_wsd_sweep_extended_with_a_larger_budget_ends_as_the_grown_sweep_would(tmp_path):
    """A larger budget leaves every WSD family's warmup and rate as they were: its branches join the store,
    each training its family's stable phase again (the stored branches' state was removed as they ended),
    and every run ends with the loss the grown sweep trained in one go gives it. The pace counts that
    stable phase (it counted only the stretch beyond the stored branches)."""
    wsd = {"schedule": "wsd", "checkpoint_seconds": 600}
    out = tmp_path / "out"
    run(out, **wsd)
    grown = plan(host=HOST, **sweep_support.small_plan_options(budgets=MORE, **wsd))
    with RunStore(out) as store:
        todo = [r for r in grown.runs if r.run_id not in store.statuses()]
    policy = checkpoint_policy(grown.options, out, None)
    work, _ = work_of(counted_after(grown.runs, todo, policy), todo)
    assert {r.run_id: work[r.run_id][1] for r in todo} == {r.run_id: r.flops for r in todo}  # from the start
    assert work_of(grown.runs, todo)[0][todo[0].run_id][1] < todo[0].flops  # what the pace counted before
    extended = run(out, budgets=MORE, resume=True, **wsd).runs
    fresh = run(tmp_path / "fresh", budgets=MORE, **wsd).runs
    assert dict(zip(extended.run_id, extended.loss)) == dict(zip(fresh.run_id, fresh.loss))
