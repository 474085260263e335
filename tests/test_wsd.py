"""Warmup-stable-decay sweeps: the schedule, the shared size ladder, families of branches,
the FLOPs they save, and branches stored as ordinary runs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sweep_support

from flops_fit.errors import PlanError
from flops_fit.store.run_store import RunStore
from flops_fit.store.runs import RunSpec
from flops_fit.sweeps.driver import sweep
from flops_fit.sweeps.planner import plan
from flops_fit.training import task
from flops_fit.training.loop import train
from flops_fit.training.schedules import cosine_factor, schedule_factor, wsd_factor
from flops_fit.training.wsd import executed_flops, families, stable_tokens

HOST = sweep_support.host()
# tiny-lm on a ladder: 5 budgets, each size serving several of them
LADDER = {"model": "tiny-lm", "budgets": [1e9, 2e9, 4e9, 8e9, 1.6e10], "sizes_per_budget": 4, "span": 8.0,
          "batch_size": 8, "min_steps": 5, "eval_tokens": 512, "curve_points": 4}


def wsd_plan(**overrides):
    return plan(host=HOST, **{**LADDER, "schedule": "wsd", **overrides})


def test_wsd_schedule_warms_up_holds_then_cools_down():
    warmup, start, total = 4, 20, 30
    factors = [wsd_factor(s, warmup, start, total, "linear") for s in range(total)]
    assert factors[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert factors[4:20] == [1.0] * 16
    assert factors[20:] == pytest.approx([1 - k / 10 for k in range(10)])
    # 1-sqrt: a quarter of the way into the cooldown the rate is 1 - 0.5 (Hägele et al.'s shape)
    assert wsd_factor(start + 2, warmup, start, 28, "1-sqrt") == pytest.approx(0.5)
    assert all(0 < wsd_factor(s, warmup, start, total, "1-sqrt") <= 1 for s in range(total))


def test_a_wsd_prefix_does_not_depend_on_the_runs_length():
    short, long = wsd_plan().runs[0], None
    long = max((r for r in wsd_plan().runs if r.family == short.family), key=lambda r: r.steps)
    assert long.steps > 2 * short.steps and long.warmup_steps == short.warmup_steps
    assert [schedule_factor(short, s) for s in range(short.cooldown_start)] == \
        [schedule_factor(long, s) for s in range(short.cooldown_start)]
    # the cosine schedule of the same lengths differs from the first step after warmup
    w = short.warmup_steps
    assert cosine_factor(w + 1, w, short.steps, 0.1) != cosine_factor(w + 1, w, long.steps, 0.1)


def test_budgets_share_sizes_on_one_ladder():
    p = wsd_plan()
    by_budget = {b: {r.size for r in p.runs if r.budget == b} for b in p.budgets}
    for lo, hi in zip(p.budgets, p.budgets[1:], strict=False):
        assert len(by_budget[lo] & by_budget[hi]) >= 3  # 4 sizes per budget, the grid moves one rung or none
    assert len({r.size for r in p.runs}) < len(p.runs) / 2
    # the default cosine plan centres each budget's grid by itself: fewer shared sizes
    cosine = plan(host=HOST, **LADDER)
    assert len({r.size for r in cosine.runs}) > len({r.size for r in p.runs})
    assert plan(host=HOST, **LADDER, size_ladder=True).runs[0].size == p.runs[0].size


def test_branches_of_a_family_differ_only_in_length():
    p = wsd_plan(cooldown_fraction=0.25, cooldown_shape="linear")
    for family in families(p.runs):
        sizes = {r.size for r in family.runs}
        assert len(sizes) == 1 and len({r.warmup_steps for r in family.runs}) == 1
        assert [r.tokens for r in family.runs] == sorted(r.tokens for r in family.runs)
        for r in family.runs:
            assert r.schedule == "wsd" and r.cooldown_shape == "linear"
            assert r.cooldown_start == r.steps - round(0.25 * r.steps) >= r.warmup_steps
    assert len(families(p.runs)) == len({r.size for r in p.runs})


def test_wsd_flops_follow_the_papers_arithmetic():
    p = wsd_plan()
    f = p.options.cooldown_fraction
    for family in families(p.runs):
        tokens = [r.tokens for r in family.runs]
        executed = sum(p.executed_flops[r.run_id] for r in family.runs) / family.runs[0].flops_per_unit
        # (1 - f) D_k + f sum(D_i), up to whole steps
        assert executed == pytest.approx((1 - f) * tokens[-1] + f * sum(tokens), rel=0.02)
        assert p.executed_flops[family.runs[0].run_id] == family.runs[0].flops  # the first branch pays all
    assert p.cosine_flops == pytest.approx(sum(r.tokens * r.flops_per_unit for r in p.runs))
    assert p.total_flops < 0.7 * p.cosine_flops
    assert p.saved_fraction == pytest.approx(1 - p.total_flops / p.cosine_flops)
    text = str(p)
    assert f"saves {p.saved_fraction:.0%}" in text and f"{p.cosine_flops:.3e}" in text and "cooldown at" in text
    cosine = plan(host=HOST, **LADDER)
    assert cosine.total_flops == cosine.cosine_flops and "saves" not in str(cosine)


def test_cosine_runs_keep_their_ids_and_wsd_options_are_checked():
    spec = plan(host=HOST, **sweep_support.small_plan_options()).runs[0]
    assert not {"schedule", "cooldown_start", "cooldown_shape"} & set(spec.identity())
    assert RunSpec.from_dict(spec.to_dict()).run_id == spec.run_id
    for bad in ({"cooldown_fraction": 1.0}, {"cooldown_fraction": 0}, {"cooldown_shape": "cosine"},
                {"schedule": "step"}):
        with pytest.raises(PlanError, match=next(iter(bad))):
            wsd_plan(**bad)
    with pytest.raises(PlanError, match="inside the warmup"):
        wsd_plan(cooldown_fraction=0.99, hparams={"warmup_fraction": 0.2})


def _status_json(out):
    """What `flops-fit status OUT --json` prints, read."""
    import contextlib
    import io
    import json

    from flops_fit.cli.main import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["status", str(out), "--json"]) == 0
    return json.loads(printed.getvalue())


def test_a_cooldown_of_one_step_is_noted_in_the_plan():
    # a 1-step cooldown is all at the peak rate (the cooldown starts at 1): the run never cools down,
    # and the plan said nothing of it (its table shows a "cooldown at" step like any other)
    flat = wsd_plan(cooldown_fraction=1e-6)
    one = [r for r in flat.runs if r.steps - r.cooldown_start == 1]
    assert one and schedule_factor(one[0], one[0].steps - 1) == 1.0  # its last step at the peak rate
    (note,) = [n for n in flat.notes if "cool down over 1 step" in n]
    assert note.startswith(f"{len(one)} run(s) cool down over 1 step") and "raise cooldown_fraction" in note
    assert "cool down over 1 step" in flat.headline()
    fine = wsd_plan(min_steps=20)  # every cooldown 4 steps or more at the default 0.2
    assert all(r.steps - r.cooldown_start >= 2 for r in fine.runs)
    assert not any("cool down over 1 step" in n for n in fine.notes)


def test_a_wsd_sweep_stores_each_branch_as_an_ordinary_run(tmp_path):
    p = plan(host=HOST, **{**sweep_support.small_plan_options(budgets=[2e7, 4e7, 8e7]), "schedule": "wsd"})
    result = p.run(tmp_path, show_progress=False, host=HOST)
    frame = result.runs
    assert sorted(frame.run_id) == sorted(r.run_id for r in p.runs) and set(frame.status) == {"done"}
    assert (frame.tokens == frame.tokens_planned).all()
    with RunStore(tmp_path) as store:
        assert store.get_meta("spec")["schedule"] == "wsd"
        trained = {row["run_id"]: row["steps_trained"] for row in store.accounting()}
    # the store counts the steps each branch trained: the stable phase once per family
    for family in families(p.runs):
        assert trained[family.runs[0].run_id] == family.runs[0].steps
        for before, spec in zip(family.runs, family.runs[1:], strict=False):
            assert trained[spec.run_id] == spec.steps - before.cooldown_start
    assert sum(trained.values()) < 0.8 * sum(r.steps for r in p.runs)
    # nothing was interrupted, so status --json counts no step lost (it said minus the steps reused)
    totals = _status_json(tmp_path)["totals"]
    assert totals["steps_lost"] == 0 and totals["steps_trained"] == sum(trained.values()) < totals["steps"]
    # each branch took over the stable state of the branch before it, and got exactly
    # what it gets trained alone from scratch
    stored = frame.set_index("run_id")
    for family in families(p.runs):
        assert "stable_steps_reused" not in stored.timings[family.runs[0].run_id]
        for before, spec in zip(family.runs, family.runs[1:], strict=False):
            assert stored.timings[spec.run_id]["stable_steps_reused"] == before.cooldown_start > 0
            assert stable_tokens(spec) < spec.tokens
        for spec in family.runs:
            alone = train(spec, host=HOST)
            assert (stored.loss[spec.run_id], stored.curve[spec.run_id]) == (alone.loss, alone.curve)


def test_status_json_counts_no_steps_lost_for_a_wsd_branch_resumed_from_its_own_checkpoint(tmp_path):
    # a branch killed after taking over its family's stable phase resumes from its own checkpoint, and
    # its result records no stable_steps_reused (only resumed_from_step): status --json read steps_lost
    # < 0 (-3543 on a 24-run sweep killed once), counting the shared stable steps as never trained
    import json
    import sqlite3

    p = plan(host=HOST, **{**sweep_support.small_plan_options(budgets=[2e7, 4e7]), "schedule": "wsd"})
    p.run(tmp_path, show_progress=False, host=HOST)
    second = [family.runs[1] for family in families(p.runs)]
    with sqlite3.connect(tmp_path / "runs.sqlite") as db:  # what such a branch's result holds
        for run in second:
            timings = json.loads(db.execute("SELECT timings FROM runs WHERE run_id = ?", (run.run_id,)).fetchone()[0])
            timings["resumed_from_step"] = timings.pop("stable_steps_reused") + 1
            db.execute("UPDATE runs SET timings = ? WHERE run_id = ?", (json.dumps(timings), run.run_id))
    totals = _status_json(tmp_path)["totals"]
    assert totals["steps_lost"] == 0
    shared = sum(b.cooldown_start for family in families(p.runs) for b in family.runs[:-1])
    assert shared > 0 and totals["steps_shared"] == shared
    assert totals["steps_trained"] == totals["steps"] - shared == sum(r.steps for r in p.runs) - shared


@pytest.mark.e2e
def test_a_wsd_sweep_on_worker_processes_matches_in_process(tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML.replace("[2e7, 4e7]", "[2e7, 4e7]")
                      + 'schedule = "wsd"\n[executor]\nworkers = 2\n')
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "FLOPS_FIT_PLUGINS": "sweep_support"}
    done = subprocess.run([sys.executable, "-m", "flops_fit", "sweep", str(config), "--out", str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "saves" in done.stderr and "6 done" in done.stdout
    parallel = RunStore(tmp_path / "out").runs_frame().set_index("run_id").loss.to_dict()
    options = {**sweep_support.small_plan_options(), "schedule": "wsd"}
    serial = sweep(host=HOST, out_dir=tmp_path / "serial", show_progress=False, **options).runs
    assert parallel == serial.set_index("run_id").loss.to_dict()


class Killed(BaseException):
    """What a SIGKILL does to a run, in-process: it stops where it stands and saves nothing more."""


def test_a_family_killed_mid_way_keeps_its_finished_branches_and_stable_phase(tmp_path, monkeypatch):
    p = plan(host=HOST, **{**sweep_support.small_plan_options(budgets=[2e7, 4e7, 8e7]), "schedule": "wsd"})
    family = max(families(p.runs), key=lambda f: len(f.runs))
    assert len(family.runs) == 3
    first, second, third = family.runs
    reports = []

    def train_and_listen(spec, progress, **kwargs):
        def listen(run_id, done, total, loss):
            reports.append((run_id, done))
            if kill and run_id == third.run_id and done > stable_tokens(second):
                raise Killed  # the third branch, past the stable state the second one saved
            progress(run_id, done, total, loss)
        return train(spec, listen, **kwargs)

    monkeypatch.setattr(task, "train", train_and_listen)
    kill = True
    with pytest.raises(Killed):
        p.run(tmp_path, show_progress=False, host=HOST)
    with RunStore(tmp_path) as store:
        status = store.statuses()  # the branches that ended were stored as they did; the third was not
        assert status[first.run_id] == status[second.run_id] == "done" != status[third.run_id]

    reports.clear()
    kill = False
    frame = p.run(tmp_path, resume=True, show_progress=False, host=HOST).runs.set_index("run_id")
    assert set(frame.status) == {"done"}
    heard = {run_id for run_id, _ in reports}
    assert first.run_id not in heard and second.run_id not in heard  # recovered, not trained again
    # the third branch went on from the second's stable state, not from scratch
    assert min(done for run_id, done in reports if run_id == third.run_id) == stable_tokens(second) > 0
    for spec in family.runs:
        alone = train(spec, host=HOST)
        assert (frame.loss[spec.run_id], frame.curve[spec.run_id]) == (alone.loss, alone.curve)
    leftovers = tmp_path / "checkpoints"
    assert not leftovers.exists() or not any(leftovers.iterdir())


def test_the_longest_family_starts_first_counting_its_steps_not_only_its_flops():
    from flops_fit.sweeps.demo import demo_plan
    from flops_fit.training.task import work_items
    from flops_fit.training.wsd import executed_flops

    plan, _ = demo_plan("gpt")
    cost = executed_flops(plan.runs)
    items = work_items(plan.runs)
    flops = {f.runs[0].size: sum(cost[r.run_id] for r in f.runs) for f in items}
    steps = {f.runs[0].size: sum(cost[r.run_id] * r.steps / (r.tokens * r.flops_per_unit) for r in f.runs)
             for f in items}
    order = [f.runs[0].size for f in items]
    # width 6 spans 4 budgets (a quarter of width 26's FLOPs) but takes 1.7x its steps: it goes first
    assert flops[6] < flops[26] / 4 and steps[6] > 1.7 * steps[26]
    assert order.index(6) < order.index(26)
    assert order[0] == max(steps, key=steps.get)  # the most steps (the smallest model at most budgets) leads


def test_a_later_batch_goes_on_from_its_familys_stable_state(tmp_path):
    """An adaptive sweep trains a plan's runs in batches (``only=``): a branch added by a later batch
    continues its family's stable phase from where the earlier batch left it, not from scratch."""
    from flops_fit.sweeps.driver import run_plan

    p = plan(host=HOST, **{**sweep_support.small_plan_options(budgets=[2e7, 4e7, 8e7]), "schedule": "wsd"})
    family = max(families(p.runs), key=lambda f: len(f.runs))
    early = {r.run_id for r in p.runs if r.budget < 8e7}
    options = {"show_progress": False, "skip_parity": True, "host": HOST}
    run_plan(p, tmp_path, only=early, **options)
    assert (tmp_path / "checkpoints" / family.run_id).is_dir()  # kept for the branch still to train
    run_plan(p, tmp_path, resume=True, only={r.run_id for r in p.runs}, **options)
    with RunStore(tmp_path) as store:
        trained = {row["run_id"]: row["steps_trained"] for row in store.accounting()}
        frame = store.runs_frame().set_index("run_id")
    last, before = family.runs[-1], family.runs[-2]
    assert last.budget == 8e7 and frame.timings[last.run_id]["stable_steps_reused"] == before.cooldown_start > 0
    assert trained[last.run_id] == last.steps - before.cooldown_start
    assert not (tmp_path / "checkpoints" / family.run_id).exists()  # every branch stored: removed
    alone = train(last, host=HOST)
    assert (frame.loss[last.run_id], frame.curve[last.run_id]) == (alone.loss, alone.curve)


def test_a_batch_below_a_trained_branch_trains_only_its_cooldown_as_the_accounting_says(tmp_path):
    """Batches out of token order (an adaptive sweep may add a smaller budget after a larger one):
    the first batch saves each family's stable phase at the planned branch points it passes
    (``Family.waypoints``), so a branch added below it trains only its cooldown, gives the result
    it gets alone, and ``executed_in_order`` counts what is trained."""
    from flops_fit.sweeps.driver import run_plan
    from flops_fit.training.wsd import executed_in_order

    p = plan(host=HOST, **{**sweep_support.small_plan_options(budgets=[2e7, 4e7, 8e7]), "schedule": "wsd"})
    late = [r for r in p.runs if r.budget == 8e7]
    rest = [r for r in p.runs if r.budget < 8e7]
    options = {"show_progress": False, "skip_parity": True, "host": HOST}
    run_plan(p, tmp_path, only={r.run_id for r in late}, **options)
    family = tmp_path / "checkpoints" / late[0].family
    saved = sorted(path.name for path in family.iterdir())
    waypoints = {r.cooldown_start for r in rest if r.family == late[0].family}
    assert len(saved) == len(waypoints) + 1 and waypoints  # every planned point passed, and the furthest
    run_plan(p, tmp_path, resume=True, only={r.run_id for r in p.runs}, **options)
    with RunStore(tmp_path) as store:
        trained = {row["run_id"]: row["steps_trained"] for row in store.accounting()}
        frame = store.runs_frame().set_index("run_id")
    order = late + sorted(rest, key=lambda r: (r.family, r.tokens))  # each batch's family in token order
    expected = executed_in_order(order)
    for r in p.runs:  # to the run's last step, which is trimmed to its tokens
        step = r.batch_size * r.seq_len * r.flops_per_unit
        assert 0 <= trained[r.run_id] * step - expected[r.run_id] < step
    back = next(r for r in order if r.budget == 2e7 and r.family == late[0].family)
    assert trained[back.run_id] == back.steps - back.cooldown_start  # its cooldown, nothing more
    assert frame.timings[back.run_id]["stable_steps_reused"] == back.cooldown_start
    assert sum(expected.values()) == pytest.approx(sum(executed_flops(p.runs).values()))  # as cheap as in order
    assert executed_in_order(sorted(p.runs, key=lambda r: r.tokens)) == executed_flops(p.runs)
    alone = train(back, host=HOST)
    assert (frame.loss[back.run_id], frame.curve[back.run_id]) == (alone.loss, alone.curve)
    assert not family.exists()  # every branch stored: the family's states are removed


def test_a_familys_branches_are_stored_as_each_ends_not_when_the_family_does(tmp_path, monkeypatch):
    # status read a family's finished branches as running until its last branch ended: the driver stored
    # them only when the family's task returned
    p = plan(host=HOST, **{**sweep_support.small_plan_options(budgets=[2e7, 4e7, 8e7]), "schedule": "wsd"})
    family = max(families(p.runs), key=lambda f: len(f.runs))
    first, second, third = family.runs
    seen = {}

    def train_and_look(spec, progress, **kwargs):
        def look(run_id, done, total, loss):
            progress(run_id, done, total, loss)
            if run_id == third.run_id and done > stable_tokens(second) and not seen:
                seen.update(sweep_support.store_rows(tmp_path / "runs.sqlite"))  # what status reads now
        return train(spec, look, **kwargs)

    monkeypatch.setattr(task, "train", train_and_look)
    frame = p.run(tmp_path, show_progress=False, host=HOST).runs.set_index("run_id")
    assert seen[first.run_id][0] == seen[second.run_id][0] == "done"
    assert seen[third.run_id][0] == "running"
    assert seen[second.run_id][1] == frame.loss[second.run_id]  # the result itself, stored once
    assert set(frame.status) == {"done"}
    with RunStore(tmp_path) as store:
        trained = {row["run_id"]: row["steps_trained"] for row in store.accounting()}
    assert trained[third.run_id] == third.steps - second.cooldown_start


def test_a_branch_whose_start_is_heard_after_it_ended_is_not_left_running(tmp_path, monkeypatch):
    # worker processes report through a queue the driver reads when it can: a short branch had ended (its result
    # saved) before its start was heard, so the driver stored it, then marked it running again: the sweep
    # ended with a done run shown running

    p = plan(host=HOST, **{**sweep_support.small_plan_options(budgets=[2e7, 4e7, 8e7]), "schedule": "wsd"})
    family = max(families(p.runs), key=lambda f: len(f.runs))
    first, second, third = family.runs
    held = []

    def train_late(spec, progress, **kwargs):
        for report in held:  # the second branch's reports, in order, heard once its result is saved
            progress(*report)
        held.clear()

        def late(run_id, done, total, loss):
            if run_id == second.run_id:
                held.append((run_id, done, total, loss))
            else:
                progress(run_id, done, total, loss)
        return train(spec, late, **kwargs)

    monkeypatch.setattr(task, "train", train_late)
    frame = p.run(tmp_path, show_progress=False, host=HOST).runs.set_index("run_id")
    assert set(frame.status) == {"done"}
    with RunStore(tmp_path) as store:
        assert set(store.statuses().values()) == {"done"}
        rows = {row["run_id"]: row for row in store.accounting()}
    assert rows[second.run_id]["steps_trained"] == second.steps - first.cooldown_start
