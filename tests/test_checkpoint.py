"""The checkpointer: a full training state (model, optimizer, the loop's ``LoopState``)
round-trips bit for bit through safetensors, writes are atomic, and a corrupt or partial
checkpoint is skipped with a warning."""

import os
import random

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from flops_fit.errors import CheckpointError, CheckpointWarning
from flops_fit.training.checkpoint import (
    Checkpointer,
    checkpoint_step,
    list_checkpoints,
    read_checkpoint,
    remove_checkpoints,
    save_weights,
    stable_start,
)
from flops_fit.training.state import LoopState, Snapshot


class Tied(torch.nn.Module):
    """Tied input and output embeddings, a buffer and dropout: what trips naive checkpoints."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(32, 8)
        self.head = torch.nn.Linear(8, 32, bias=False)
        self.head.weight = self.embed.weight
        self.drop = torch.nn.Dropout(0.2)
        self.register_buffer("scale", torch.tensor(1.5))

    def forward(self, x):
        return self.head(self.drop(self.embed(x)) * self.scale)


def build():
    torch.manual_seed(0)
    model = Tied()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def step(model, optimizer, n=1):
    for _ in range(n):
        x = torch.randint(0, 32, (4, 6))
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, 32), x.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def state(step_count):
    """The loop's state after ``step_count`` steps, every RNG captured now."""
    return LoopState(run_id="run-a", step=step_count, tokens=24 * step_count, curve=[[24, 3.5]],
                     data_rng=np.random.default_rng(3).bit_generator.state, data_order=np.arange(10),
                     data_pos=7, losses=torch.linspace(4, 3, step_count))


def save(folder, model, optimizer, loop, keep=2):
    Checkpointer(folder, "run-a", keep=keep).save(model, optimizer, loop)
    return list_checkpoints(folder)[0]


def test_a_restored_run_continues_bit_for_bit(tmp_path):
    model, optimizer = build()
    step(model, optimizer, 3)
    random.random(), np.random.rand()
    save(tmp_path, model, optimizer, state(3))
    expected_loss = step(model, optimizer, 4)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    expected_draws = (random.random(), np.random.rand())

    torch.manual_seed(123), random.seed(9), np.random.seed(9)  # everything the restore must undo
    fresh, fresh_optimizer = build()
    restored = Checkpointer(tmp_path, "run-a").load(fresh, fresh_optimizer)
    restored.rng.restore()
    assert (restored.step, restored.tokens, restored.curve, restored.data_pos) == (3, 72, [[24, 3.5]], 7)
    assert restored.data_rng == np.random.default_rng(3).bit_generator.state  # its big integers survive JSON
    assert np.array_equal(restored.data_order, np.arange(10))
    assert torch.equal(restored.losses, torch.linspace(4, 3, 3))
    assert torch.equal(step(fresh, fresh_optimizer, 4), expected_loss)
    for name, value in fresh.state_dict().items():
        assert torch.equal(value, expected[name]), name
    assert fresh.head.weight is fresh.embed.weight  # still tied
    assert (random.random(), np.random.rand()) == expected_draws


def test_writes_are_atomic_and_only_the_newest_are_kept(tmp_path):
    model, optimizer = build()
    for n in range(1, 5):
        step(model, optimizer)
        save(tmp_path, model, optimizer, state(n), keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000000004.safetensors",
                                                           "step-000000003.safetensors"]
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    (tmp_path / ".step-000000005.safetensors.99.tmp").write_bytes(b"half a write")  # a kill mid-write
    assert Checkpointer(tmp_path, "run-a").latest().loop.step == 4
    remove_checkpoints(tmp_path)
    assert not tmp_path.exists()


def test_a_checkpoint_that_cannot_be_written_names_its_folder_and_the_fix(tmp_path):
    """A full disk mid-run failed every run with "SafetensorError: Error while serializing: I/O error: No space
    left on device (os error 28)": no folder, no way on. Here the folder's place is taken by a file."""
    model, optimizer = build()
    step(model, optimizer)
    (tmp_path / "taken").write_text("")
    folder = tmp_path / "taken" / "run-a"
    with pytest.raises(CheckpointError) as caught:
        save(folder, model, optimizer, state(1))
    message = str(caught.value)
    assert message.startswith(f"checkpoint step-000000001.safetensors could not be written in {folder} (")
    assert "--checkpoint-dir" in message and "--resume --retry-failed" in message


def test_a_familys_stable_states_are_kept_at_its_waypoints_and_read_up_to_a_step(tmp_path):
    """A WSD family's folder: each save removes the states before it but a later batch's branch
    points (waypoints); a branch reads the furthest state at or before its cooldown start, from
    memory unless the folder holds a further one."""
    model, optimizer = build()
    saver = Checkpointer(tmp_path, "run-a")
    for n in (2, 4, 6, 8):
        step(model, optimizer)
        saver.save_stable(Snapshot.take(state(n), model, optimizer), waypoints={4})
    assert [checkpoint_step(p) for p in list_checkpoints(tmp_path)] == [8, 4]
    assert [checkpoint_step(p) for p in list_checkpoints(tmp_path, at_most=7)] == [4]
    assert saver.latest(at_most=5).loop.step == 4 and saver.latest(at_most=3) is None
    held = Snapshot.take(state(5), model, optimizer)
    assert stable_start(5, held, saver) is held  # nothing further saved: no file read
    assert stable_start(9, held, saver).loop.step == 8  # a further one saved (an earlier batch's)
    assert stable_start(3, held, saver) is None  # held and saved lie beyond: from scratch
    assert stable_start(4, None, None) is None
    saver.save_stable(Snapshot.take(state(5), model, optimizer))  # no waypoints left: 4 goes
    assert [checkpoint_step(p) for p in list_checkpoints(tmp_path)] == [8, 5]


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_a_damaged_checkpoint_falls_back_to_the_previous_one_with_a_warning(tmp_path, damage):
    model, optimizer = build()
    for n in (1, 2):
        step(model, optimizer)
        save(tmp_path, model, optimizer, state(n))
    newest = list_checkpoints(tmp_path)[0]
    data = bytearray(newest.read_bytes())
    if damage == "flip":
        data[-5] ^= 0xFF  # inside the last tensor's bytes: only the digest can tell
    newest.write_bytes({"flip": bytes(data), "truncate": bytes(data[:len(data) // 2]), "empty": b""}[damage])
    with pytest.warns(CheckpointWarning, match="step-000000002.*falling back"):
        checkpoint = Checkpointer(tmp_path, "run-a").latest()
    assert checkpoint.loop.step == 1
    for path in list_checkpoints(tmp_path):
        path.write_bytes(b"")
    with pytest.warns(CheckpointWarning):
        assert Checkpointer(tmp_path, "run-a").latest() is None


def test_another_runs_checkpoint_is_refused_unless_asked_for(tmp_path):
    model, optimizer = build()
    path = save(tmp_path, model, optimizer, state(0))
    with pytest.raises(CheckpointError, match="belongs to run run-a, not run-b"):
        read_checkpoint(path, run_id="run-b")
    assert read_checkpoint(path).loop.run_id == "run-a"  # e.g. a cooldown branched from it
    with pytest.warns(CheckpointWarning, match="not run-b"):
        assert Checkpointer(tmp_path, "run-b").load(*build()) is None


def test_final_weights_are_plain_safetensors(tmp_path):
    model, _ = build()
    path = save_weights(tmp_path / "weights" / "run-a.safetensors", model)
    weights = load_file(path)
    assert set(weights) == set(model.state_dict())
    assert torch.equal(weights["head.weight"], model.head.weight.detach())


def test_a_damaged_result_file_is_said_and_read_as_none(tmp_path):
    """A truncated result.json (written atomically, so damaged from outside) was ignored without a word and
    its WSD branch trained again; it is still trained again, and a warning names the file."""
    from flops_fit.store.runs import RunResult
    from flops_fit.training.checkpoint import load_result, save_result

    save_result(tmp_path, RunResult("abc", "done", loss=2.5, tokens=10, flops=60.0, steps=1))
    assert load_result(tmp_path, "abc").loss == 2.5
    assert load_result(tmp_path / "none", "abc") is None  # no result left: nothing to say
    text = (tmp_path / "result.json").read_text()
    (tmp_path / "result.json").write_text(text[: len(text) // 2])
    with pytest.warns(CheckpointWarning, match=r"the result left at .*result.json is unreadable \(JSONDecodeError: "
                                               r".*\): run abc is trained again from its checkpoint"):
        assert load_result(tmp_path, "abc") is None


@pytest.mark.parametrize("field, value", [("loss", "abc"), ("loss", -1.0), ("loss", None), ("status", "running"),
                                          ("tokens", "10"), ("curve", [[1, "x"]]), ("timings", [])])
def test_a_result_file_damaged_into_other_json_is_said_and_read_as_none(tmp_path, field, value):
    """A result.json edited or damaged into JSON of other kinds ("loss": "abc"): the driver's resume stopped with
    a TypeError traceback, or stored a loss of -1 (or a null one) as the run's finished result."""
    import json

    from flops_fit.store.runs import RunResult
    from flops_fit.training.checkpoint import load_result, save_result

    save_result(tmp_path, RunResult("abc", "done", loss=2.5, tokens=10, flops=60.0, steps=1, curve=[[5, 3.0]],
                                    timings={"total_s": 1.5}))
    data = json.loads((tmp_path / "result.json").read_text())
    (tmp_path / "result.json").write_text(json.dumps({**data, field: value}))
    with pytest.warns(CheckpointWarning, match=rf"the result left at .*result.json is unreadable \(\w+Error: .*{field}"
                                               r".*\): run abc is trained again from its checkpoint"):
        assert load_result(tmp_path, "abc") is None
