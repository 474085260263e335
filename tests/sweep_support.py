"""Test support for the sweep engine: a tiny causal LM plugin (a width-sized bigram model,
so sizes differ in capacity and a sweep has something to find) and a text dataset that
counts the rows it hands out. Test modules put the tests folder on sys.path and import
it; worker-process tests set FLOPS_FIT_PLUGINS=sweep_support."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

import flops_fit

VOCAB = 256

# Tiny models train fastest on one thread; idle threads spin and contend on small CPUs.
torch.set_num_threads(1)


class TinyLM(nn.Module):
    def __init__(self, width: int, vocab_size: int = VOCAB, dropout: float = 0.0, **config) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        self.head = nn.Linear(width, vocab_size)
        self.drop = nn.Dropout(dropout) if dropout else nn.Identity()

    def forward(self, tokens):
        return self.head(self.drop(torch.tanh(self.embed(tokens))))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def valid_sizes(lo, hi, **config):
    return [w for w in range(4, hi + 1, 4) if w >= lo]


def param_count(width, vocab_size=VOCAB, **config):
    return vocab_size * width + width * vocab_size + vocab_size


def training_flops(width, vocab_size=VOCAB, **config):
    return 3.0 * 2 * width * vocab_size


def next_token(logits, batch):
    tokens = batch["tokens"]
    return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))


GATE = "SWEEP_SUPPORT_GATE"  # env: "PREFIX:RUN:BATCH", see CountingText


def wait_at_gate(prefix):
    """Say so (PREFIX.waiting.PID) and block until the test creates PREFIX.release; one that reads
    "crash" makes the run raise there, as a run whose process dies mid-run."""
    Path(f"{prefix}.waiting.{os.getpid()}").touch()
    while not Path(f"{prefix}.release").exists():
        time.sleep(0.01)
    if Path(f"{prefix}.release").read_text() == "crash":
        raise RuntimeError("the run crashed at the test's gate")


def gate_reached(prefix, timeout=240):
    """Wait (in a test) until some process is blocked at the gate; deterministic, no race."""
    folder, name = Path(prefix).parent, Path(prefix).name
    deadline = time.monotonic() + timeout
    while not any(p.name.startswith(f"{name}.waiting.") for p in folder.iterdir()):
        assert time.monotonic() < deadline, "no run reached the gate"
        time.sleep(0.01)


class CountingText:
    """Windows of a fixed pseudo-text; counts every row it gives out, per split (class-wide).

    With SWEEP_SUPPORT_GATE="PREFIX:RUN:BATCH" the RUN-th training run of a process (1-based)
    blocks when it asks for its BATCH-th batch until the test releases it (``wait_at_gate``):
    tests stop or kill a sweep at an exact point instead of racing it.
    """

    rows_served = {"train": 0, "validation": 0}
    train_instances = 0

    def __init__(self, split, seq_len=16, vocab_size=VOCAB):
        self.split = split
        self.gate, self.batches = None, 0
        rng = np.random.default_rng(0 if split == "train" else 1)
        base = rng.integers(0, 16, size=200_000)
        self.tokens = (base * 7 + np.arange(len(base)) % 3).astype(np.int64) % vocab_size
        self.seq_len = seq_len

    def __len__(self):
        return len(self.tokens) // self.seq_len

    def get_batch(self, indices):
        self.batches += 1
        if self.split == "train" and self.batches == 1:  # a training run (the preflight opens, never draws)
            type(self).train_instances += 1
            if os.environ.get(GATE):
                prefix, run, batch = os.environ[GATE].rsplit(":", 2)
                if int(run) == type(self).train_instances:
                    self.gate = (prefix, int(batch))
        if self.gate and self.batches == self.gate[1]:
            wait_at_gate(self.gate[0])
        type(self).rows_served[self.split] += len(indices)
        rows = np.asarray(indices)[:, None] * self.seq_len + np.arange(self.seq_len)
        return {"tokens": torch.from_numpy(self.tokens[rows])}


@flops_fit.hookimpl
def register_models(register):
    register(flops_fit.ModelEntry(
        "tiny-lm", builder=TinyLM, size_param="width", valid_sizes=valid_sizes, param_count=param_count,
        training_flops=training_flops, flops_unit="token", task=flops_fit.TASK_CAUSAL_LM,
        default_loss="tiny-next-token", default_datasets=("counting-text",),
        defaults={"vocab_size": VOCAB, "block_size": 16},
    ))


@flops_fit.hookimpl
def register_losses(register):
    register(flops_fit.LossEntry("tiny-next-token", fn=next_token, task=flops_fit.TASK_CAUSAL_LM))


@flops_fit.hookimpl
def register_datasets(register):
    register(flops_fit.DatasetEntry(
        "counting-text", builder=CountingText, modality="text", batch_format={"tokens": "int64[B, T]"},
        tasks=(flops_fit.TASK_CAUSAL_LM,), defaults={"seq_len": 16, "vocab_size": VOCAB},
    ))


def store_rows(path):
    """run_id -> (status, loss, finished, attempts), read-only, from a store being written."""
    import sqlite3

    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {r[0]: r[1:] for r in db.execute("SELECT run_id, status, loss, finished, attempts FROM runs")}
    except sqlite3.OperationalError:  # not created yet
        return {}
    finally:
        db.close()


def host():
    """A host with the built-ins and this plugin."""
    from flops_fit.testing import isolated_host

    return isolated_host(("sweep_support", sys.modules[__name__]), builtins=True)


# small_plan_options() as a sweep file's [sweep] table, for tests of the CLI
SMALL_SWEEP_TOML = """
[sweep]
model = "tiny-lm"
budgets = [2e7, 4e7]
sizes = [4, 8, 16]
batch_size = 8
min_steps = 5
eval_tokens = 512
curve_points = 4
"""


def small_plan_options(**overrides):
    """A sweep of tiny-lm: 2 budgets x 3 sizes, about 130 optimizer steps in all."""
    return {
        "model": "tiny-lm", "budgets": [2e7, 4e7], "sizes": [4, 8, 16], "batch_size": 8,
        "min_steps": 5, "eval_tokens": 512, "curve_points": 4, **overrides,
    }
