"""``micro_batch_size = "auto"``: the probe halves until a micro-batch fits, remembers the answer
per model and device, probes again when a larger batch might fit, and refuses a sharded model.
A CUDA device runs out of memory at some row count; here a model that raises
``torch.cuda.OutOfMemoryError`` above a given count stands in for it."""

import contextlib
import dataclasses
import json

import pytest
import sweep_support
import torch

from flops_fit.errors import PlanError
from flops_fit.files import cache_root
from flops_fit.sweeps.options import SweepOptions
from flops_fit.sweeps.planner import plan
from flops_fit.training.micro_batch import largest_fitting_micro_batch

HOST = sweep_support.host()


class RowLimited(torch.nn.Module):
    """A linear model whose forward runs out of 'device memory' above ``limit`` rows."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit, self.seen = limit, []
        self.linear = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(len(x))
        if len(x) > self.limit:
            raise torch.cuda.OutOfMemoryError(f"{len(x)} rows do not fit")
        return self.linear(x)


@pytest.fixture
def spec(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOPS_FIT_CACHE", str(tmp_path / "cache"))
    run = plan(host=HOST, **sweep_support.small_plan_options(budgets=[2.1e7])).runs[0]
    return dataclasses.replace(run, batch_size=24, micro_batch_size="auto")


def probe(spec, model):
    def rows(k):
        return {"x": torch.ones(k, 4)}

    def loss(output, batch):
        return output.sum()

    return largest_fitting_micro_batch(spec, model, loss, rows, "x", torch.device("cpu"), contextlib.nullcontext())


def test_the_probe_halves_until_it_fits_and_remembers_the_limit(spec):
    model = RowLimited(limit=7)
    assert probe(spec, model) == 6  # 24 -> 12 -> 6
    assert model.seen == [24, 12, 6]
    assert all(p.grad is None for p in model.parameters())  # the probe's gradients are discarded
    cache = json.loads((cache_root() / "micro_batch.json").read_text())
    assert list(cache.values()) == [{"fits": 6, "limited": True}]
    again = RowLimited(limit=7)
    assert probe(dataclasses.replace(spec, batch_size=96), again) == 6 and again.seen == []  # the limit is known
    assert probe(dataclasses.replace(spec, batch_size=4), again) == 4 and again.seen == []


def test_a_batch_that_fitted_whole_is_probed_again_when_a_larger_one_comes(spec):
    model = RowLimited(limit=40)
    assert probe(spec, model) == 24 and model.seen == [24]  # fits whole: the limit is still unknown
    assert probe(dataclasses.replace(spec, batch_size=16), model) == 16 and model.seen == [24]
    assert probe(dataclasses.replace(spec, batch_size=96), model) == 24  # 96 -> 48 -> 24, known to fit
    assert model.seen == [24, 96, 48]
    cache = json.loads((cache_root() / "micro_batch.json").read_text())
    assert list(cache.values()) == [{"fits": 24, "limited": True}]


def test_the_device_that_cannot_fit_one_row_says_so(spec):
    with pytest.raises(torch.cuda.OutOfMemoryError, match="1 rows do not fit"):
        probe(spec, RowLimited(limit=0))


def test_auto_with_a_sharded_model_is_refused_at_planning_and_in_the_trainer(spec):
    with pytest.raises(PlanError, match='micro_batch_size = "auto" cannot probe a sharded'):
        SweepOptions(model="gpt", dataset="x", budgets=[1e9], micro_batch_size="auto", processes_per_run=2,
                     parallel="fsdp")
    sharded = dataclasses.replace(spec, processes_per_run=2, parallel="fsdp")
    with pytest.raises(PlanError, match="give micro_batch_size a number of rows"):
        probe(sharded, RowLimited(limit=7))
