"""Same-shape runs trained together (training.stacked): each run's curve and result are the
ones it trains alone, each is checkpointed, resumed and recorded as its own run."""

import dataclasses
import os
import threading
import warnings

import executor_tasks
import pytest
import sweep_support
import torch

from flops_fit import machine
from flops_fit.errors import Interrupted
from flops_fit.executors.local import LocalExecutor
from flops_fit.executors.stopping import clear_stop, request_stop
from flops_fit.executors.threads import item_threads
from flops_fit.store.run_store import RunStore
from flops_fit.sweeps.driver import run_plan
from flops_fit.sweeps.planner import Plan, plan
from flops_fit.training.checkpoint import CheckpointPolicy, list_checkpoints
from flops_fit.training.loop import train
from flops_fit.training.stacked import Stack, StackedFamilies, _Lanes, stack_items, train_stacked
from flops_fit.training.task import train_family, train_item, work_items
from flops_fit.training.wsd import Family, families

HOST = sweep_support.host()
TOLERANCE = 1e-5  # fp32 on CPU: the bound on a curve trained together against alone


def tiny_plan(**overrides):
    return plan(host=HOST, **{**sweep_support.small_plan_options(device="cpu"), **overrides})


def variants(base, multipliers=(0.5, 1.0, 2.0), seeds=(1,)):
    """The base run at several rates, and at its own rate from other seeds."""
    return [dataclasses.replace(base, lr=base.lr * m, run_id="") for m in multipliers] + \
        [dataclasses.replace(base, seed=s, run_id="") for s in seeds]


def assert_same_run(alone, together):
    assert together.run_id == alone.run_id and together.status == alone.status == "done"
    assert (together.steps, together.tokens, together.flops) == (alone.steps, alone.tokens, alone.flops)
    assert len(together.curve) == len(alone.curve)
    for (tokens_a, loss_a), (tokens_b, loss_b) in zip(alone.curve, together.curve, strict=True):
        assert tokens_a == tokens_b and loss_b == pytest.approx(loss_a, abs=TOLERANCE)
    assert together.loss == pytest.approx(alone.loss, abs=TOLERANCE)


def stopped_midway(train_with, heard=None):
    """``train_with(progress)`` stopped once a run reports half its work done (it must raise
    ``Interrupted``); ``heard`` collects the work each report said was done."""
    def stop_midway(run_id, done, total, loss):
        if heard is not None:
            heard.append(done)
        if done >= total // 2:
            request_stop()

    try:
        with pytest.raises(Interrupted):
            train_with(stop_midway)
    finally:
        clear_stop()


def test_runs_trained_together_match_each_trained_alone():
    specs = variants(max(tiny_plan().runs, key=lambda r: r.steps))
    together = train_stacked(specs, host=HOST)
    assert [r.run_id for r in together] == [s.run_id for s in specs]
    for spec, result in zip(specs, together, strict=True):
        assert_same_run(train(spec, host=HOST), result)
        assert result.timings["trained_together"] == len(specs)


def test_runs_on_the_programs_threads_are_bit_for_bit_the_runs_alone():
    """Two threads, each kernel on one: every curve point and held-out loss is the run's alone
    (at one thread) exactly."""
    specs = variants(max(tiny_plan().runs, key=lambda r: r.steps))
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    alone = [train(s, host=HOST) for s in specs]
    torch.set_num_threads(2)
    try:
        together = train_stacked(specs, host=HOST)
    finally:
        torch.set_num_threads(previous)
    for a, b in zip(alone, together, strict=True):
        assert b.status == a.status == "done" and b.curve == a.curve and b.loss == a.loss


def test_the_program_steps_its_runs_on_the_workers_threads_one_kernel_thread_each():
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with _Lanes(runs=3) as lanes:
            seen = lanes.map(lambda i: (i, threading.current_thread().name, torch.get_num_threads()), range(3))
        assert lanes.lanes == 2 and torch.get_num_threads() == 2  # the worker's threads given back
    finally:
        torch.set_num_threads(previous)
    assert [i for i, _, _ in seen] == [0, 1, 2]  # in the runs' order
    assert all(name.startswith("flops-fit-stacked") and kernel == 1 for _, name, kernel in seen)
    with _Lanes(runs=3) as alone:  # one thread: the runs step in this thread, one after another
        assert alone.lanes == 1 and alone.map(lambda i: threading.current_thread().name, [0]) == [
            threading.current_thread().name]


def test_a_program_of_runs_gets_a_thread_per_run_within_the_free_cores(monkeypatch):
    specs = variants(tiny_plan().runs[0], multipliers=(0.5, 1.0, 2.0), seeds=(1,))
    stack = Stack(tuple(specs))
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert item_threads(stack, 1, workers=1) == 4 and item_threads(stack, 1, workers=4) == 2
    assert item_threads(specs[0], 1, workers=1) == 1  # a run alone: its own threads, as before
    with LocalExecutor(workers=1, threads=1) as serial:  # the sweep's threads are each run's
        assert [n for _, n in serial.map(executor_tasks.torch_threads, [stack, specs[0]])] == [4, 1]
    monkeypatch.setattr(machine, "running_elsewhere", lambda: None)  # the load average alone says
    monkeypatch.setattr(os, "getloadavg", lambda: (7.0, 7.0, 7.0))  # one core free: no more than a run's
    assert item_threads(stack, 1, workers=1) == 1


def test_a_model_that_draws_random_numbers_is_refused_with_the_reason():
    base = max(tiny_plan(model_config={"dropout": 0.1}).runs, key=lambda r: r.steps)
    specs = variants(base, multipliers=(0.5, 1.0), seeds=())
    with pytest.raises(ValueError, match="draws random numbers while it trains"):
        train_stacked(specs, host=HOST)
    assert train(specs[0], host=HOST).status == "done"  # alone it trains


def test_runs_of_different_shapes_are_refused_naming_what_differs():
    # the refusal named no field (which of a plan's many differed?) and said the same of no runs at all
    runs = sorted(tiny_plan().runs, key=lambda r: r.params)
    small, large = runs[0], runs[-1]
    with pytest.raises(ValueError, match=r"differ in .*params.*: train them apart \(stack_runs = 1\)"):
        train_stacked([small, large], host=HOST)
    with pytest.raises(ValueError, match="no runs to train together"):
        train_stacked([], host=HOST)


def test_a_transformer_trained_together_matches_alone():
    """The built-in GPT (attention, LayerNorm, tied head, weight decay groups, clipping)."""
    runs = plan(model="gpt", budgets=[4e8], sizes=[16, 32, 48], seq_len=32, batch_size=8, min_steps=5,
                eval_tokens=512, curve_points=8, device="cpu", precision="fp32",
                model_config={"n_layer": 1, "n_head": 2}).runs
    specs = variants(runs[0], multipliers=(0.5, 1.0), seeds=(3,))
    assert 25 <= specs[0].steps <= 40  # long enough to move, short enough for rounding not to grow past 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about on the way
        together = train_stacked(specs)
    for spec, result in zip(specs, together, strict=True):
        assert_same_run(train(spec), result)


def test_same_shape_items_are_grouped_and_split_evenly():
    base = tiny_plan().runs
    five = variants(base[0], multipliers=(0.25, 0.5, 1.0, 2.0, 4.0), seeds=())
    other_size = [dataclasses.replace(r, lr=r.lr * 2, run_id="") for r in base[1:2]] + base[1:2]
    alone = dataclasses.replace(base[2], processes_per_run=2)
    items = stack_items([*five, *other_size, alone], limit=4)
    assert [type(i).__name__ for i in items] == ["Stack", "Stack", "Stack", "RunSpec"]
    assert sorted(len(i.runs) for i in items[:2]) == [2, 3] and len(items[2].runs) == 2  # 5 by 4: 2 + 3, not 4 + 1
    assert {r.size for r in items[2].runs} == {base[1].size}
    assert stack_items([*five, alone], limit=1) == [*five, alone]
    # WSD: a size's families at several rates stack when their branches match one to one
    wsd = plan(host=HOST, **{**sweep_support.small_plan_options(), "schedule": "wsd", "budgets": [2e7, 4e7, 8e7]}).runs
    runs = [dataclasses.replace(r, lr=r.lr * m, run_id="") for m in (0.5, 1.0) for r in wsd]
    grouped = work_items(runs, stack=4)
    assert all(isinstance(i, StackedFamilies) for i in grouped)
    assert sorted(len(i.families) for i in grouped) == [2] * len(families(wsd))
    # a family that saves its stable phase for a later batch (waypoints, below its branches) trains alone
    later = [r for r in runs if r.budget < 8e7]
    batch = work_items([r for r in runs if r.budget == 8e7], stack=4, later=later)
    alone = [i for i in batch if isinstance(i, Family)]
    assert alone and all(i.waypoints for i in alone)
    assert all(not any(f.waypoints for f in i.families) for i in batch if isinstance(i, StackedFamilies))
    assert not any(f.waypoints for f in families([r for r in runs if r.budget < 8e7], [r for r in runs if r.budget == 8e7]))


def test_stacked_families_branch_like_families_alone(tmp_path):
    wsd = plan(host=HOST, **{**sweep_support.small_plan_options(device="cpu"), "schedule": "wsd", "budgets": [2e7, 4e7, 8e7]})
    size = max({r.size for r in wsd.runs}, key=lambda s: sum(r.size == s for r in wsd.runs))
    runs = [dataclasses.replace(r, lr=r.lr * m, run_id="") for m in (0.5, 2.0) for r in wsd.runs if r.size == size]
    group = StackedFamilies(tuple(families(runs)))
    assert len(group.families) == 2 and len(group.families[0].runs) >= 2
    policy = CheckpointPolicy(str(tmp_path / "ck"), seconds=0)
    together = train_item(group, host=HOST, checkpoints=policy)
    alone = [o for f in group.families for o in train_family(f, host=HOST)]
    for a, b in zip(alone, together, strict=True):
        assert_same_run(a, b)
        assert b.timings.get("stable_steps_reused", 0) == a.timings.get("stable_steps_reused", 0)
    assert any(r.timings.get("stable_steps_reused") for r in together)  # later branches began mid-family


def test_a_diverging_run_fails_alone_and_the_others_go_on():
    base = max(tiny_plan().runs, key=lambda r: r.steps)
    specs = [dataclasses.replace(base, lr=base.lr * m, run_id="") for m in (1.0, 3000.0, 0.5)]
    together = train_stacked(specs, host=HOST)
    assert together[1].status == "failed" and together[1].error.startswith("diverged")
    assert together[1].error == train(specs[1], host=HOST).error
    for i in (0, 2):
        assert_same_run(train(specs[i], host=HOST), together[i])


def test_a_stopped_program_resumes_each_run_stacked_or_alone(tmp_path):
    specs = variants(max(tiny_plan().runs, key=lambda r: r.steps), multipliers=(0.5, 2.0))
    policy = CheckpointPolicy(str(tmp_path / "ck"), seconds=0.0)
    heard = []
    stopped_midway(lambda progress: train_stacked(specs, progress, host=HOST, checkpoints=policy), heard)
    for spec in specs:  # each run wrote its own checkpoint, the one it writes alone
        assert len(list_checkpoints(policy.run_dir(spec.run_id))) == 1
    alone = [train(s, host=HOST) for s in specs]
    resumed = train_stacked(specs, host=HOST, checkpoints=policy)
    for a, b in zip(alone, resumed, strict=True):
        assert_same_run(a, b)
        assert 0 < b.timings["resumed_from_step"] < b.steps
    one = train(specs[0], host=HOST, checkpoints=policy)  # the same checkpoint continues alone too
    assert_same_run(alone[0], one) and one.timings["resumed_from_step"] > 0


def test_a_sweep_records_runs_trained_together_as_its_own(tmp_path):
    base = tiny_plan()
    runs = [dataclasses.replace(r, lr=r.lr * m, lr_source=f"tune:x{m:g}", run_id="")
            for r in base.runs[:2] for m in (0.5, 1.0, 2.0)]
    options = base.options.replace(stack_runs=3)
    stacked = Plan(runs, options, base.unit, base.throughput, {})
    run_plan(stacked, tmp_path / "together", show_progress=False, skip_preflight=True, skip_parity=True, host=HOST)
    alone = Plan(runs, base.options, base.unit, base.throughput, {})
    run_plan(alone, tmp_path / "alone", show_progress=False, skip_preflight=True, skip_parity=True, host=HOST)
    frames = {}
    for name in ("together", "alone"):
        with RunStore(tmp_path / name) as store:
            frames[name] = store.runs_frame().set_index("run_id").sort_index()
        assert not (tmp_path / name / "checkpoints").exists() or not any((tmp_path / name / "checkpoints").iterdir())
    assert list(frames["together"].index) == sorted(r.run_id for r in runs)
    assert (frames["together"].status == "done").all()
    assert (frames["together"].loss - frames["alone"].loss).abs().max() <= TOLERANCE
    assert isinstance(work_items(runs, stack=3)[0], Stack)


def test_micro_batches_and_other_seeds_match_alone():
    base = dataclasses.replace(max(tiny_plan().runs, key=lambda r: r.steps), micro_batch_size=3)
    specs = [dataclasses.replace(base, seed=s, lr=base.lr * m, run_id="") for s, m in ((0, 1.0), (5, 0.5))]
    for spec, result in zip(specs, train_stacked(specs, host=HOST), strict=True):
        assert_same_run(train(spec, host=HOST), result)


def test_the_program_lists_each_runs_parameters_once_not_every_step(monkeypatch):
    """Clipping took ``[p for p in model.parameters() ...]`` every step of every run (a walk of the
    modules: a few percent of a small model's step); the runs' steps now clip a list made once, as
    ``loop.train`` does, so the walks do not grow with the steps."""
    base = max(tiny_plan().runs, key=lambda r: r.steps)
    assert base.grad_clip > 0 and base.steps >= 8
    walk = torch.nn.Module.parameters
    walks = []

    def counted(module, *args, **kwargs):
        walks.append(1)
        return walk(module, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "parameters", counted)

    def walks_for(steps):
        spec = dataclasses.replace(base, steps=steps, tokens=steps * base.batch_size * base.seq_len,
                                   warmup_steps=min(base.warmup_steps, steps // 4), run_id="")
        walks.clear()
        assert all(r.status == "done" for r in train_stacked(variants(spec, multipliers=(0.5, 1.0), seeds=()),
                                                             host=HOST))
        return len(walks)

    assert walks_for(base.steps) == walks_for(base.steps // 2)


def test_runs_stopped_together_before_their_first_curve_point_count_the_steps_their_checkpoints_keep(tmp_path):
    """SIGTERM before the first curve point: each run trained together checkpointed and stopped but
    reported no step (a run alone reports one), so the resumed attempt was counted from the
    checkpoint and status --json said each trained fewer steps than its result has."""
    from flops_fit.sweeps.driver import _Accounting, checkpoint_policy

    swept = tiny_plan(schedule="cosine", checkpoint_seconds=1e-9)
    base = max(swept.runs, key=lambda r: r.steps)
    assert base.steps // swept.options.curve_points > 1  # the stop comes before the first curve point
    specs = variants(base, multipliers=(0.5, 2.0), seeds=())
    stacked = Plan(specs, swept.options.replace(stack_runs=2), swept.unit, swept.throughput, {})
    [stack] = work_items(specs, stack=2)
    policy = checkpoint_policy(stacked.options, tmp_path, None)
    with RunStore(tmp_path, create=True) as store:
        store.add_plan(stacked, spec=swept.settings)
        first = _Accounting(store, specs)
        request_stop()  # read after the first step: checkpoint there, then stop
        try:
            with pytest.raises(Interrupted):
                train_item(stack, lambda run_id, done, total, loss: first.heard(run_id, done, loss), host=HOST,
                           checkpoints=policy)
        finally:
            clear_stop()
        for spec in specs:
            assert list_checkpoints(policy.run_dir(spec.run_id))[0].name == "step-000000001.safetensors"
        resumed = _Accounting(store, specs)  # the next driver
        results = train_item(stack, lambda run_id, done, total, loss: resumed.heard(run_id, done, loss),
                             host=HOST, checkpoints=policy)
        for result in results:
            store.record(result)
        rows = {r["run_id"]: r for r in store.accounting()}
    for spec, result in zip(specs, results, strict=True):
        assert result.timings["resumed_from_step"] == 1
        row = rows[spec.run_id]
        assert row["attempts"] == 2 and row["steps_trained"] == row["steps"] == spec.steps


def test_a_program_stopped_after_one_run_diverged_resumes_the_others_from_their_checkpoints(tmp_path):
    """A run that diverged stops checkpointing while the others go on; a stop after that left the
    runs' checkpoints at different steps, so the resumed program threw every run's away and
    trained them all from scratch (with a warning). The diverged run's result is now kept beside
    its checkpoints as it fails, so a resume skips it and the others continue."""
    base = max(tiny_plan().runs, key=lambda r: r.steps)
    specs = [dataclasses.replace(base, lr=base.lr * m, run_id="") for m in (1.0, 3000.0, 0.5)]
    alone = [train(s, host=HOST) for s in specs]
    assert alone[1].status == "failed" and alone[1].steps < base.steps // 2  # diverges before the stop
    policy = CheckpointPolicy(str(tmp_path / "ck"), seconds=0.0)
    stopped_midway(lambda progress: train_item(Stack(tuple(specs)), progress, host=HOST, checkpoints=policy))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "they start again"
        resumed = train_item(Stack(tuple(specs)), host=HOST, checkpoints=policy)
    assert resumed[1].status == "failed" and resumed[1].error == alone[1].error
    for i in (0, 2):
        assert_same_run(alone[i], resumed[i])
        assert 0 < resumed[i].timings["resumed_from_step"] < base.steps


def test_a_program_killed_between_its_runs_saves_resumes_from_the_step_all_of_them_kept(tmp_path):
    """A kill between two runs' checkpoint writes (or a damaged newest file) left the runs'
    newest checkpoints at different steps, and the resumed program trained every run from
    scratch; each run keeps its previous checkpoint too, so the program now resumes all of them
    from the newest step they all kept."""
    specs = variants(max(tiny_plan().runs, key=lambda r: r.steps), multipliers=(0.5, 2.0), seeds=())
    policy = CheckpointPolicy(str(tmp_path / "ck"), seconds=1e-9)  # a checkpoint every step, the newest 2 kept
    stopped_midway(lambda progress: train_stacked(specs, progress, host=HOST, checkpoints=policy))
    newest, previous = list_checkpoints(policy.run_dir(specs[1].run_id))
    newest.unlink()  # the kill came before this run's newest write
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "they start again"
        resumed = train_stacked(specs, host=HOST, checkpoints=policy)
    for spec, result in zip(specs, resumed, strict=True):
        assert_same_run(train(spec, host=HOST), result)
        assert result.timings["resumed_from_step"] == int(previous.name.split("-")[1].split(".")[0])
