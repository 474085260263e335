"""Durable runs: a run stopped or SIGKILLed anywhere (even inside a checkpoint write)
continues from its last checkpoint and ends with bitwise the same held-out loss and curve
as a run that was never interrupted."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sweep_support
from safetensors.torch import load_file

from flops_fit.errors import DataError, Interrupted
from flops_fit.executors.stopping import clear_stop, request_stop
from flops_fit.sweeps.planner import plan
from flops_fit.training.checkpoint import CheckpointPolicy, list_checkpoints
from flops_fit.training.loop import train

HOST = sweep_support.host()
TESTS = Path(__file__).resolve().parent
EVERY_STEP = 1e-9  # checkpoint_seconds that makes every step due: deterministic tests


@pytest.fixture(scope="module")
def spec():
    return plan(host=HOST, **sweep_support.small_plan_options(budgets=[2.1e7])).runs[1]


@pytest.fixture(scope="module")
def reference(spec):
    return train(spec, host=HOST)


def stopped_at_third_report(spec, policy):
    """Train ``spec`` until its third progress report asks it to stop (it checkpoints and raises
    Interrupted); the steps reported."""
    reports = []

    def stop_at_third_report(run_id, done, total, loss):
        reports.append(done)
        if len(reports) == 3:
            request_stop()

    try:
        with pytest.raises(Interrupted):
            train(spec, stop_at_third_report, host=HOST, checkpoints=policy)
    finally:
        clear_stop()
    return reports


def same_result(a, b):
    assert a.status == b.status == "done"
    assert a.loss == b.loss and a.curve == b.curve  # bitwise: exact float equality
    assert (a.tokens, a.steps, a.flops) == (b.tokens, b.steps, b.flops)


def test_a_stop_request_checkpoints_and_the_run_continues_bit_for_bit(spec, reference, tmp_path):
    policy = CheckpointPolicy(str(tmp_path), seconds=600)  # no timed checkpoint: only the stop saves
    reports = stopped_at_third_report(spec, policy)
    [saved] = list_checkpoints(policy.run_dir(spec.run_id))
    stopped_at = reports[-1]
    assert 0 < stopped_at < spec.tokens

    resumed_reports = []
    result = train(spec, lambda *r: resumed_reports.append(r[1]), host=HOST, checkpoints=policy)
    same_result(result, reference)
    assert resumed_reports[0] == stopped_at  # the attempt starts where the first one stopped
    assert result.timings["resumed_from_step"] == int(saved.name[5:14])


def test_final_weights_are_kept_when_asked(spec, reference, tmp_path):
    policy = CheckpointPolicy(str(tmp_path / "ck"), seconds=0, weights_dir=str(tmp_path / "weights"))
    result = train(spec, host=HOST, checkpoints=policy)
    same_result(result, reference)  # checkpointing changes nothing
    weights = load_file(tmp_path / "weights" / f"{spec.run_id}.safetensors")
    model = sweep_support.TinyLM(spec.size)
    model.load_state_dict(weights)
    assert set(weights) == {"embed.weight", "head.weight", "head.bias"}


CRASH_SCRIPT = """
import json, os, signal, sys
sys.path.insert(0, {tests!r})
import sweep_support
from flops_fit.sweeps.planner import plan
from flops_fit.training import checkpoint, loop
from flops_fit.training.data import Batches

kind, at = os.environ.get("CRASH", "none:0").split(":")
at = int(at)
saves = []

def die():
    os.kill(os.getpid(), signal.SIGKILL)

real_save, real_next = checkpoint.Checkpointer.save, Batches.indices

def save(self, model, optimizer, state):
    saves.append(state.step)
    if state.step % 3:  # checkpoint every third step: a kill then loses up to two steps
        return None
    if kind == "write" and state.step == at:  # die half-way through writing the file
        def torn(src, dst):
            with open(src, "r+b") as f:
                f.truncate(os.path.getsize(src) // 2)
            die()
        checkpoint.os.replace = torn
    if kind == "rename" and state.step == at:  # die with the file written, before the rename
        checkpoint.os.replace = lambda src, dst: die()
    return real_save(self, model, optimizer, state)

def next_batch(self, k):
    if kind == "step" and len(saves) == at:  # die fetching the batch after step `at`
        die()
    return real_next(self, k)

checkpoint.Checkpointer.save, Batches.indices = save, next_batch
spec = plan(host=sweep_support.host(), **sweep_support.small_plan_options(budgets=[2.1e7])).runs[1]
policy = checkpoint.CheckpointPolicy(sys.argv[1], seconds=1e-9)
result = loop.train(spec, host=sweep_support.host(), checkpoints=policy)
print(json.dumps({{"loss": result.loss, "curve": result.curve, "resumed": result.timings.get("resumed_from_step")}}))
"""


@pytest.mark.e2e
def test_sigkill_anywhere_then_resume_gives_the_uninterrupted_result(spec, reference, tmp_path):
    script = tmp_path / "crash.py"
    script.write_text(CRASH_SCRIPT.format(tests=str(TESTS)))
    folder = tmp_path / "checkpoints"
    run_dir = folder / spec.run_id

    def attempt(crash):
        env = {**os.environ, "CRASH": crash}
        return subprocess.run([sys.executable, str(script), str(folder)], env=env, capture_output=True, text=True,
                              timeout=120)

    # killed fetching the batch of step 8: checkpoints of steps 3 and 6 exist
    assert attempt("step:7").returncode == -9
    assert [p.name for p in list_checkpoints(run_dir)] == ["step-000000006.safetensors", "step-000000003.safetensors"]
    # resumed from 6, killed half-way through writing the checkpoint of step 9
    assert attempt("write:9").returncode == -9
    assert [p.name[5:14] for p in list_checkpoints(run_dir)] == ["000000006", "000000003"]
    assert any(n.endswith(".tmp") for n in os.listdir(run_dir))  # the torn write, never renamed
    # resumed from 6 again, killed after writing step 12's checkpoint but before renaming it
    assert attempt("rename:12").returncode == -9
    assert [p.name[5:14] for p in list_checkpoints(run_dir)] == ["000000009", "000000006"]
    # the last attempt resumes from 9 and finishes
    assert spec.steps > 12
    done = attempt("none:0")
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout.strip().splitlines()[-1])
    assert final["resumed"] == 9
    assert final["loss"] == reference.loss and final["curve"] == reference.curve  # bitwise



def test_a_run_resumed_on_data_that_changed_since_its_checkpoint_fails_with_the_reason(tmp_path):
    """A corpus edited between a stop and the resume: the checkpoint's data order (a permutation of the old
    windows) was taken over for the new ones, indexing past them when there were fewer, without a word."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(400)))
    options = sweep_support.small_plan_options(budgets=[2.1e7], dataset="text-files", seq_len=16,
                                               dataset_config={"paths": [str(corpus)]})
    spec = plan(host=HOST, **options).runs[1]
    policy = CheckpointPolicy(str(tmp_path / "checkpoints"), seconds=600)
    stopped_at_third_report(spec, policy)
    assert list_checkpoints(policy.run_dir(spec.run_id))
    corpus.write_text(corpus.read_text()[: len(corpus.read_text()) // 2])  # half the windows
    with pytest.raises(DataError, match=r"^the training data has \d+ samples, but the checkpoint's data order is of "
                                        r"\d+: the data changed since the run was checkpointed .*restore the data, or "
                                        r"train the run from its start"):
        train(spec, host=HOST, checkpoints=policy)
