"""One run on 2 gloo ranks: DDP and FSDP train the loss curve of one process with the same
global batch, a killed rank restarts the run from its checkpoint, a group launched outside
(torchrun) trains and records one planned run, and every process started is ended."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import threading

import executor_tasks
import pytest
import sweep_support
from plugin_kit import process_host

import flops_fit
from flops_fit.cli.main import main
from flops_fit.errors import Interrupted, OptionError, PlanError, RunLost
from flops_fit.executors.base import ignore_progress
from flops_fit.executors.ray import RayExecutor
from flops_fit.store.lease import Lease
from flops_fit.store.run_store import RunStore
from flops_fit.store.runs import RunResult
from flops_fit.training.checkpoint import CheckpointPolicy, list_checkpoints
from flops_fit.training.launch import launch, run_ranks
from flops_fit.training.loop import train
from flops_fit.training.task import train_item

HOST = sweep_support.host()
GPT = {"model": "gpt", "budgets": [3e8], "sizes": [16, 32, 48], "batch_size": 5, "seq_len": 32, "min_steps": 3,
       "eval_tokens": 320, "curve_points": 4, "model_config": {"n_layer": 2, "block_size": 32}, "device": "cpu",
       "hparams": {"lr": 0.005}}  # a rate at which float reassociation stays near 1e-7 over the run


def tiny_spec(batch_size=8, **changes):
    """The smallest run of tiny-lm (a bigram model), planned at ``batch_size``."""
    spec = flops_fit.plan(host=HOST, **sweep_support.small_plan_options(budgets=[2e7], batch_size=batch_size)).runs[0]
    return dataclasses.replace(spec, **changes)


def same_training(result, alone):
    assert result.status == alone.status == "done", result.error
    assert result.tokens == alone.tokens and result.steps == alone.steps
    assert [t for t, _ in result.curve] == [t for t, _ in alone.curve]
    assert [v for _, v in result.curve] == pytest.approx([v for _, v in alone.curve], rel=1e-5)
    assert result.loss == pytest.approx(alone.loss, rel=1e-5)


@pytest.fixture
def no_children_left():
    before = set(multiprocessing.active_children())
    yield
    assert set(multiprocessing.active_children()) <= before


@pytest.mark.e2e
def test_ddp_ranks_stopped_by_sigterm_checkpoint_together_and_resume_to_one_process_curve(
        tmp_path, monkeypatch, no_children_left):
    """5 rows a step: slices of 3 and 2 rows, each in micro-batches of 2. SIGTERM to one rank
    during step 3 stops both after that step, each having checkpointed the same state."""
    spec = tiny_spec(batch_size=5, micro_batch_size=2, processes_per_run=2)
    gate = tmp_path / "gate"
    monkeypatch.setenv("FLOPS_FIT_PLUGINS", "sweep_support")
    monkeypatch.setenv(sweep_support.GATE, f"{gate}:1:3")
    policy = CheckpointPolicy(str(tmp_path / "checkpoints"), seconds=600)  # saved on the stop only

    def stop_at_the_gate():
        try:
            sweep_support.gate_reached(gate)
            waiting = next(p for p in tmp_path.iterdir() if p.name.startswith("gate.waiting."))
            os.kill(int(waiting.name.rsplit(".", 1)[1]), signal.SIGTERM)  # pending before the release is seen
        finally:
            (tmp_path / "gate.release").touch()

    stopper = threading.Thread(target=stop_at_the_gate)
    stopper.start()
    try:
        with pytest.raises(Interrupted, match="stopped by signal 15; the run checkpointed"):
            train_item(spec, checkpoints=policy)
    finally:
        stopper.join()
    assert [p.name for p in list_checkpoints(policy.run_dir(spec.run_id))] == ["step-000000003.safetensors"]
    heard = []
    result = train_item(spec, lambda *message: heard.append(message), checkpoints=policy)
    assert result.timings["resumed_from_step"] == 3
    assert math.isnan(heard[0][3]) and heard[-1][1] == spec.tokens  # rank 0's progress came back
    same_training(result, train(spec, host=HOST))


@pytest.mark.e2e
def test_fsdp_under_torchrun_trains_one_planned_run_and_records_it(tmp_path):
    out = tmp_path / "out"
    # sharded per block, each rank's 3 or 2 rows in micro-batches of 2, a sharded checkpoint every step
    plan = flops_fit.plan(**GPT, processes_per_run=2, parallel="fsdp", micro_batch_size=2, checkpoint_seconds=1e-6)
    plan.run(out, record_only=True, show_progress=False)
    spec = next(r for r in plan.runs if r.size == 32)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "flops_fit", "train-run", str(out), spec.run_id],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        stdout, stderr = torchrun.communicate(timeout=300)
    finally:  # torchrun and its ranks, whatever happened
        with contextlib.suppress(ProcessLookupError):
            os.killpg(torchrun.pid, signal.SIGKILL)
        torchrun.wait()
    assert torchrun.returncode == 0, stderr[-3000:]
    assert f"run {spec.run_id}: held-out loss" in stdout
    with RunStore(out) as store:
        assert store.statuses() == {r.run_id: "done" if r is spec else "pending" for r in plan.runs}
        row = next(r for r in store.accounting() if r["run_id"] == spec.run_id)
        recorded = store.runs_frame().set_index("run_id").loc[spec.run_id]
    assert row["attempts"] == 1 and row["steps_trained"] == spec.steps
    same_training(RunResult(spec.run_id, recorded.status, recorded.loss, int(recorded.tokens), curve=recorded.curve,
                            steps=int(recorded.steps)), train(spec))
    assert not (out / "checkpoints" / spec.run_id).exists()  # its sharded checkpoints went with the result


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
@pytest.mark.e2e
def test_a_killed_rank_restarts_the_run_from_its_last_checkpoint(parallel, tmp_path, monkeypatch, no_children_left):
    spec = tiny_spec(processes_per_run=2, parallel=parallel)
    gate = tmp_path / "gate"
    monkeypatch.setenv("FLOPS_FIT_PLUGINS", "sweep_support")
    monkeypatch.setenv(sweep_support.GATE, f"{gate}:1:4")  # each rank waits at its 4th batch: 3 steps checkpointed

    def kill_a_rank():
        try:
            sweep_support.gate_reached(gate)
            waiting = next(p for p in tmp_path.iterdir() if p.name.startswith("gate.waiting."))
            os.kill(int(waiting.name.rsplit(".", 1)[1]), signal.SIGKILL)
        finally:
            (tmp_path / "gate.release").touch()

    killer = threading.Thread(target=kill_a_rank)
    killer.start()
    heard = []
    try:
        result = train_item(spec, lambda *message: heard.append(message),
                            checkpoints=CheckpointPolicy(str(tmp_path / "checkpoints"), seconds=1e-9))
    finally:
        killer.join()
    starts = [done for _, done, _, loss in heard if math.isnan(loss)]
    assert starts == [0, 3 * spec.batch_size * spec.seq_len]  # the second gang took over at step 3
    assert result.timings["resumed_from_step"] == 3
    same_training(result, train(spec, host=HOST))


@pytest.mark.e2e
def test_a_ranks_exception_is_the_runs_outcome_and_ends_every_rank(no_children_left):
    with pytest.raises(ValueError, match="rank 1 found a bad batch"):
        launch(executor_tasks.rank_fails, tiny_spec(processes_per_run=2), ignore_progress, 2)


@pytest.mark.e2e
def test_a_rank_that_keeps_dying_loses_the_run_after_its_restarts(no_children_left):
    with pytest.raises(RunLost, match=r"died 1 times \(restarts=0\); last: rank 1 exited with code 7 mid-run"):
        launch(executor_tasks.rank_dies, tiny_spec(processes_per_run=2), ignore_progress, 2, restarts=0)


def test_a_launched_group_of_the_wrong_size_or_half_set_is_refused(monkeypatch):
    spec = tiny_spec(processes_per_run=2)
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(OptionError, match="MASTER_ADDR, MASTER_PORT not: launch the run with torchrun"):
        run_ranks(executor_tasks.rank_fails, spec)
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(OptionError, match="spans processes_per_run = 2 processes but the launcher started "
                                          "WORLD_SIZE = 3: launch it with 2 processes"):
        run_ranks(executor_tasks.rank_fails, spec)


def test_options_that_cannot_reach_or_shard_the_ranks_are_refused():
    with pytest.raises(OptionError, match="a custom host= cannot reach the processes of a run"):
        train_item(tiny_spec(processes_per_run=2), host=HOST)
    with pytest.raises(PlanError, match='schedule = "wsd" does not yet hand a sharded'):
        flops_fit.SweepOptions(model="gpt", budgets=(1e9,), schedule="wsd", parallel="fsdp", processes_per_run=2)


def test_ray_reserves_every_process_of_a_run_in_one_task():
    one = RayExecutor(cpus_per_run=2).resources(tiny_spec())
    two = RayExecutor(cpus_per_run=2).resources(tiny_spec(processes_per_run=2))
    assert two == {"num_cpus": 4, "num_gpus": 0, "memory": 2 * one["memory"]}


def test_train_run_refuses_a_folder_without_plan_an_unknown_run_and_a_finished_one(tmp_path, capsys):
    out = tmp_path / "out"
    RunStore(out, create=True).close()
    assert main(["train-run", str(out), "abc"]) == 2
    assert "holds no plan: record one with `flops-fit sweep CONFIG --out" in capsys.readouterr().err
    plan = flops_fit.plan(host=HOST, **sweep_support.small_plan_options())
    plan.run(out, record_only=True, show_progress=False, host=HOST)
    assert main(["train-run", str(out), "abc"]) == 2
    assert "run 'abc' is not in the plan stored in" in capsys.readouterr().err
    done = plan.runs[0].run_id
    with RunStore(out) as store:
        store.record(RunResult(run_id=done, status="done", loss=1.0))
    assert main(["train-run", str(out), done]) == 2
    assert f"run {done} already has a result in {out} (done)" in capsys.readouterr().err
    with Lease(out / "runs.sqlite"):  # a driver sweeping the folder
        assert main(["train-run", str(out), plan.runs[1].run_id]) == 2
    assert f"{out} is being swept by another driver (pid {os.getpid()}" in capsys.readouterr().err


@pytest.mark.parametrize("rank", ["1", "0"])
def test_train_run_of_a_one_process_run_under_a_launched_group_is_refused_on_every_rank(rank, tmp_path, capsys,
                                                                                        monkeypatch):
    """torchrun --nproc-per-node 2 train-run on a run planned for one process trained it on both ranks."""
    out = tmp_path / "out"
    plan = flops_fit.plan(host=HOST, **sweep_support.small_plan_options())
    plan.run(out, record_only=True, show_progress=False, host=HOST)
    run = plan.runs[0].run_id
    for name, value in {"RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(name, value)
    with process_host(HOST):
        assert main(["train-run", str(out), run]) == 2
    assert ("spans processes_per_run = 1 processes but the launcher started WORLD_SIZE = 2: run `flops-fit "
            "train-run` without torchrun / srun") in capsys.readouterr().err
    with RunStore(out) as store:
        assert store.statuses()[run] == "pending"
    assert not (out / "checkpoints" / run).exists()


def test_train_run_records_a_diverged_run_as_failed_and_exits_1(tmp_path, capsys):
    out = tmp_path / "out"
    plan = flops_fit.plan(host=HOST, **sweep_support.small_plan_options(hparams={"lr": 1e4, "grad_clip": 0.0}))
    plan.run(out, record_only=True, show_progress=False, host=HOST)
    run = plan.runs[0].run_id
    with process_host(HOST):  # the command's default host: the built-ins and the tests' tiny-lm
        assert main(["train-run", str(out), run]) == 1
    assert f"flops-fit: run {run} failed: diverged: train loss" in capsys.readouterr().err
    with RunStore(out) as store:
        assert store.statuses()[run] == "failed"
        assert next(r for r in store.accounting() if r["run_id"] == run)["attempts"] == 1


def test_train_run_retry_failed_trains_a_failed_run_again_and_keeps_its_failure_until_it_ends(tmp_path, capsys,
                                                                                                monkeypatch):
    """train-run refused a failed run and pointed to `sweep --resume --retry-failed`, which trains every failed
    run here. --retry-failed trains this one; a retry stopped by SIGTERM leaves the failure stored."""
    out = tmp_path / "out"
    plan = flops_fit.plan(host=HOST, **sweep_support.small_plan_options(checkpoint_seconds=1e-6))
    plan.run(out, record_only=True, show_progress=False, host=HOST)
    run = plan.runs[0].run_id
    with RunStore(out) as store:
        store.record(RunResult(run_id=run, status="failed", error="node lost"))
    with process_host(HOST):
        assert main(["train-run", str(out), run]) == 2
        assert ("(failed); to train it again here, add --retry-failed (API: retry_failed=True): its failure stays "
                "stored until the new attempt ends") in capsys.readouterr().err
        gate = tmp_path / "gate"
        # the next training run of this process waits at its 3rd batch (the count is the process's)
        monkeypatch.setenv(sweep_support.GATE, f"{gate}:{sweep_support.CountingText.train_instances + 1}:3")
        seen = []

        def stop_the_retry():  # a cluster's SIGTERM while the retry trains
            try:
                sweep_support.gate_reached(gate)
                with RunStore(out) as store:
                    seen.append(store.statuses()[run])
                os.kill(os.getpid(), signal.SIGTERM)
            finally:
                (tmp_path / "gate.release").touch()

        stopper = threading.Thread(target=stop_the_retry)
        stopper.start()
        assert main(["train-run", str(out), run, "--retry-failed"]) != 0
        stopper.join()
        monkeypatch.delenv(sweep_support.GATE)
        with RunStore(out) as store:
            assert seen == ["failed"] and store.statuses()[run] == "failed"
            assert store.runs_frame().set_index("run_id").loc[run, "error"] == "node lost"
        capsys.readouterr()
        assert main(["train-run", str(out), run[:8], "--retry-failed"]) == 0
    assert f"run {run}: held-out loss" in capsys.readouterr().out
    with RunStore(out) as store:
        assert store.statuses()[run] == "done"
    assert not (out / "checkpoints" / run).exists()


def test_sweep_record_only_records_the_plan_and_trains_nothing(tmp_path, capsys):
    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML)
    out = tmp_path / "out"
    with process_host(HOST):
        assert main(["sweep", str(config), "--out", str(out), "--record-only"]) == 0
    assert f"train each run with `flops-fit train-run {out} RUN_ID`" in capsys.readouterr().err
    with RunStore(out) as store:
        assert set(store.statuses().values()) == {"pending"} and len(store.statuses()) == 6


def test_no_fsdp_model_outlives_the_group_it_was_sharded_over(monkeypatch):
    """An FSDP model lives on in reference cycles after its run, holding the process group, until a
    garbage-collection pass; left to interpreter exit, the group's gloo threads went down with it and
    aborted a torchrun rank once in CI. ``train_this_rank`` frees such models before it leaves the
    group (a group of one process here, with automatic collection off so that only it can)."""
    import gc
    import weakref

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from flops_fit.training.launch import free_port, train_this_rank

    spec = next(r for r in flops_fit.plan(**GPT, processes_per_run=1).runs if r.size == 32)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    models = []

    def task(item, progress, parallel):
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
        model(torch.randn(2, 4)).sum().backward()
        models.append(weakref.ref(model))
        return "done"

    gc.disable()
    try:
        assert train_this_rank(task, spec) == "done"
        assert not dist.is_initialized() and models[0]() is None
    finally:
        gc.enable()
