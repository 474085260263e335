"""A run's training memory, estimated without building it, and plans that cannot fit refused."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import flops_fit
from flops_fit.cli.main import main
from flops_fit.errors import PlanError
from flops_fit.sweeps.memory import STATE_BYTES, check_memory, micro_rows, run_memory, state_memory


def _saved_bytes(model, loss_fn, batch, key) -> int:
    """Bytes of the tensors autograd saves for backward in one forward pass (parameters aside)."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_fn(model(batch[key]), batch)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in storages.items() if ptr not in params)


@pytest.mark.parametrize("name,width,config,rows,seq", [
    ("gpt", 48, {"n_layer": 3}, 3, 96),
    ("gpt", 64, {"n_head": 2}, 2, 128),
    ("llama", 96, {"n_kv_head": 2}, 3, 64),
    ("vit", 96, {"depth": 3}, 5, 1),
    ("vit", 64, {"num_classes": 100}, 3, 1),
    ("swin", 64, {}, 3, 1),
    ("swin", 32, {"depths": (1, 2), "window_size": 8, "num_heads": (2, 2)}, 2, 1),
    ("cait", 64, {"depth": 2}, 3, 1),
    ("cait", 64, {"global_pool": "avg", "talking_heads": False, "head_dim": 16}, 2, 1),
    ("pvt_v2", 32, {}, 3, 1),
    ("pvt_v2", 64, {"linear": True, "depths": (1, 2, 1, 1)}, 2, 1),
    ("pvt_v2", 32, {"sr_ratios": (2, 2, 2, 1), "mlp_ratios": (4.0, 4.0, 4.0, 4.0)}, 2, 1),
])
def test_activation_estimate_matches_what_autograd_saves(name, width, config, rows, seq):
    entry = flops_fit.model_info(name)
    torch.manual_seed(0)
    model = flops_fit.create_model(name, width, **config)
    if entry.flops_unit == "sample":
        batch, key = {"images": torch.randn(rows, 3, 32, 32), "labels": torch.randint(0, 10, (rows,))}, "images"
    else:
        batch, key = {"tokens": torch.randint(0, 256, (rows, seq))}, "tokens"
    saved = _saved_bytes(model, flops_fit.get_loss(entry.default_loss), batch, key)
    assert entry.activation_bytes(width, rows, seq, **config) == pytest.approx(saved, rel=0.005)


def _plan(**options):
    base = {"model": "gpt2", "budgets": [1e21], "sizes": [768, 1536, 2304], "batch_size": 4096, "seq_len": 1024,
            "device": "cpu", "min_steps": 1}
    return flops_fit.plan(**{**base, **options})


def test_a_run_that_cannot_fit_is_refused_at_plan_time_naming_it_and_the_fixes():
    with pytest.raises(PlanError) as refused:
        _plan()
    text = str(refused.value)
    assert text.startswith("run size 2304 at budget 1e+21 needs about ") and "of available RAM" in text
    assert all(fix in text for fix in ("micro_batch_size", "processes_per_run", 'parallel = "fsdp"'))


def test_the_estimate_follows_micro_batches_processes_and_sharding():
    plan = _plan(sizes=[384, 576, 768], micro_batch_size=2)
    spec = next(r for r in plan.runs if r.size == 768)
    entry = flops_fit.model_info("gpt2")
    alone = run_memory(spec, entry)
    assert micro_rows(spec) == 2 and alone.state == STATE_BYTES * spec.params
    assert alone.activations == entry.activation_bytes(768, 2, 1024, **spec.model_config)
    split = run_memory(dataclasses.replace(spec, processes_per_run=4, micro_batch_size=None), entry)
    assert split.activations == entry.activation_bytes(768, 1024, 1024, **spec.model_config)  # 4096 / 4 ranks
    sharded = run_memory(dataclasses.replace(spec, processes_per_run=4, parallel="fsdp"), entry)
    assert sharded.state == -(-alone.state // 4) and sharded.activations == alone.activations
    assert "memory" in plan.table() and f"{alone.total / 2**30:.2f} GiB" in plan.table()


def test_flops_fit_plan_refuses_with_one_line_and_exit_2(capsys):
    code = main(["plan", "--model", "gpt2", "--budgets", "1e21", "--sizes", "768,1536,2304", "--batch-size", "4096",
                 "--seq-len", "1024", "--device", "cpu", "--min-steps", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "needs about" in err[0] and "micro_batch_size" in err[0]


def test_a_model_without_an_activation_estimate_is_still_refused_when_its_state_alone_cannot_fit():
    # hf-causal-lm estimates no activations: its plan said "unknown" and refused nothing, so a run whose
    # weights and AdamW state alone exceed the machine started and failed allocating them
    entry = dataclasses.replace(flops_fit.model_info("gpt2"), activation_memory=None)
    spec = _plan(sizes=[384, 576, 768], micro_batch_size=2).runs[0]
    huge = dataclasses.replace(spec, params=10**13)  # 160 TB of state: more than any machine
    assert run_memory(huge, entry) is None
    with pytest.raises(PlanError) as refused:
        check_memory([spec, huge], entry, "cpu")
    text = str(refused.value)
    assert f"run size {spec.size} at budget 1e+21 needs at least " in text and "does not estimate" in text
    check_memory([spec], entry, "cpu")  # a small run's state fits: nothing refused


def test_a_run_whose_step_losses_alone_cannot_fit_is_refused_at_plan_time(capsys):
    """A tiny model at a huge budget (size 16 at 1e20 FLOPs: 5.7e11 steps) passed the memory check, and every run
    of the sweep or tune then failed allocating the loop's per-step losses ('can't allocate 2270653134304 bytes').
    The estimate counts them, and such a plan is refused in one line saying what to change."""
    argv = ["plan", "--model", "gpt", "--budgets", "1e22", "--sizes", "16,32,48", "--batch-size", "32",
            "--seq-len", "64", "--device", "cpu"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and " optimizer steps, whose training losses alone (" in err[0]
    assert err[0].endswith("plan fewer steps (a smaller budget, larger sizes, or a larger batch_size)")
    spec = _plan(sizes=[384, 576, 768], micro_batch_size=2).runs[0]
    assert state_memory(spec).steps == 4 * spec.steps and run_memory(spec, flops_fit.model_info("gpt2")).steps == \
        4 * spec.steps
