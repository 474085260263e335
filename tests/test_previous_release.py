"""A store and checkpoints written by earlier releases still work after an upgrade.

tests/data/previous_release/ holds files the old code wrote (make_fixtures.py says how; the
expected values beside them were read back by that code): a 3-run sweep stored by commit
2248f99 at a rate with every bit set (one run done, one stopped with a checkpoint, one not
started), and a format-1 checkpoint of the release before the ``training`` refactor."""

import json
import math
import shutil
import sqlite3
from pathlib import Path

import pytest
import sweep_support
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from flops_fit.errors import CheckpointError
from flops_fit.store.run_store import RunStore
from flops_fit.store.runs import RunSpec
from flops_fit.sweeps.driver import run_plan
from flops_fit.sweeps.planner import plan
from flops_fit.training.checkpoint import _digest, read_checkpoint, write_checkpoint

DATA = Path(__file__).resolve().parent / "data" / "previous_release"
STORE = json.loads((DATA / "store.json").read_text())
HOST = sweep_support.host()


def options(lr):
    return {**STORE["options"], "hparams": {"lr": lr}}


def test_a_rate_moved_in_its_last_bit_keeps_its_run_ids():
    moved = math.nextafter(STORE["lr"], 1.0)
    assert moved != STORE["lr"]
    assert [r.run_id for r in plan(host=HOST, **options(moved)).runs] == \
        [r.run_id for r in plan(host=HOST, **options(STORE["lr"])).runs]


def test_the_previous_releases_store_reads_with_its_own_ids():
    with RunStore(DATA / "sweep") as store:
        stored = store.planned_runs()
    assert [r.run_id for r in stored] == STORE["run_ids"]  # legacy ids accepted as they are
    assert all(r.compute_id() == p.run_id for r, p in zip(stored, plan(host=HOST, **options(STORE["lr"])).runs,
                                                          strict=True))


def test_an_upgraded_sweep_resumes_the_previous_releases_store(tmp_path):
    out = tmp_path / "sweep"
    shutil.copytree(DATA / "sweep", out)
    moved = math.nextafter(STORE["lr"], 1.0)  # the new release's rate differs in the last bit
    run_plan(plan(host=HOST, **options(moved)), out, resume=True, skip_parity=True, host=HOST, show_progress=False)
    db = sqlite3.connect(out / "runs.sqlite")
    rows = {r[0]: r[1:] for r in db.execute("SELECT run_id, status, loss, attempts, timings FROM runs")}
    db.close()
    assert list(rows) == STORE["run_ids"]  # the stored ids, not new ones
    assert all(status == "done" for status, *_ in rows.values())
    done = rows[STORE["done"]["run_id"]]
    assert done[1] == STORE["done"]["loss"] and done[2] == 0  # stored, not trained again
    resumed = json.loads(rows[STORE["checkpointed"]][3])
    assert resumed["resumed_from_step"] == STORE["checkpoint_step"]  # continued from the old checkpoint


def test_a_stored_spec_edited_by_hand_is_still_refused():
    with RunStore(DATA / "sweep") as store:
        spec = store.planned_runs()[0].to_dict()
    with pytest.raises(ValueError, match="does not hash to its id"):
        RunSpec.from_dict({**spec, "lr": spec["lr"] * 2})


def test_a_format_1_checkpoint_reads_and_restores():
    expected = json.loads((DATA / "checkpoint-v1.json").read_text())
    snapshot = read_checkpoint(DATA / expected["file"], run_id=expected["run_id"])
    loop = snapshot.loop
    assert (loop.run_id, loop.step, loop.tokens, loop.curve) == \
        (expected["run_id"], expected["step"], expected["tokens"], expected["curve"])
    assert (loop.data_pos, loop.data_rng) == (expected["scalars"]["data_pos"], expected["scalars"]["data_rng"])
    assert loop.data_order.tolist() == expected["data_order"] and loop.losses.tolist() == expected["losses"]
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    snapshot.restore(model, optimizer)
    assert model.weight.tolist() == expected["weight"]
    assert optimizer.state[model.weight]["exp_avg_sq"].tolist() == expected["exp_avg_sq"]


def test_an_unknown_format_says_what_to_do(tmp_path):
    snapshot = read_checkpoint(DATA / json.loads((DATA / "checkpoint-v1.json").read_text())["file"])
    path = write_checkpoint(tmp_path, snapshot)
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
    header = json.loads(metadata["flops_fit"])
    header["format"] = 99
    tensors = load_file(path)
    save_file(tensors, str(path), metadata={"flops_fit": json.dumps(header), "digest": _digest(tensors)})
    with pytest.raises(CheckpointError, match=r"unknown checkpoint format \(99; this flops-fit reads 1, 2\).*delete"):
        read_checkpoint(path)
