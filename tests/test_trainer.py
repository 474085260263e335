"""The trainer: exactly the planned tokens, FLOPs recorded from what ran, the schedule,
a held-out loss, a curve, seeded results, and divergence recorded as a failure."""

import dataclasses
import math

import pytest
import sweep_support

import flops_fit
from flops_fit.fitting.inputs import divergence
from flops_fit.sweeps.planner import plan
from flops_fit.testing import isolated_host
from flops_fit.training.data import eval_indices
from flops_fit.training.loop import train
from flops_fit.training.schedules import cosine_factor as lr_factor

HOST = sweep_support.host()


@pytest.fixture(scope="module")
def spec():
    # 12 sizes x budget: tokens are not a multiple of batch x seq_len, so the last step is trimmed
    runs = plan(host=HOST, **sweep_support.small_plan_options(budgets=[2.1e7])).runs
    return runs[0]


def test_trains_exactly_the_planned_tokens_and_records_their_flops(spec):
    before = sweep_support.CountingText.rows_served["train"]
    assert spec.tokens % (spec.batch_size * spec.seq_len) != 0  # a trimmed last step is exercised
    result = train(spec, host=HOST)
    served = sweep_support.CountingText.rows_served["train"] - before
    assert result.status == "done", result.error
    assert result.tokens == spec.tokens
    assert served * spec.seq_len == spec.tokens  # counted by the dataset itself
    assert result.steps == spec.steps
    assert result.flops == spec.tokens * sweep_support.training_flops(spec.size)


def test_curve_and_held_out_loss(spec):
    result = train(spec, host=HOST)
    tokens = [t for t, _ in result.curve]
    assert tokens == sorted(tokens) and tokens[-1] == spec.tokens
    assert spec.curve_points - 1 <= len(result.curve) <= spec.curve_points
    assert all(math.isfinite(v) for _, v in result.curve)
    assert result.curve[-1][1] < result.curve[0][1]  # it learned something
    assert 0 < result.loss < math.log(256)
    assert {"setup_s", "train_s", "data_s", "eval_s", "total_s"} <= set(result.timings)


def test_same_spec_same_result(spec):
    a, b = train(spec, host=HOST), train(spec, host=HOST)
    assert a.loss == b.loss and a.curve == b.curve
    c = train(dataclasses.replace(spec, seed=1, run_id=""), host=HOST)
    assert c.loss != a.loss


def test_a_diverging_run_is_stopped_and_recorded_as_failed(spec):
    wild = dataclasses.replace(spec, lr=1e4, grad_clip=0.0, run_id="")
    result = train(wild, host=HOST)
    assert result.status == "failed"
    assert result.error.startswith("diverged: train loss")
    assert result.tokens < wild.tokens  # stopped early
    assert result.flops == result.tokens * wild.flops_per_unit


class _NanLoss:
    """A loss that is NaN from the start (a plugin's bug), as the meta-device preflight cannot see."""

    @flops_fit.hookimpl
    def register_losses(self, register):
        register(flops_fit.LossEntry("nan-loss", fn=lambda output, batch: sweep_support.next_token(output, batch)
                                     * float("nan"), task=flops_fit.TASK_CAUSAL_LM))


def test_a_loss_that_is_nan_before_any_update_is_not_called_divergence(spec):
    """A loss NaN at the first step read "diverged: train loss became nan at step 4", which sends the user to
    the learning rate; no rate was tried: the loss, model or data is at fault."""
    host = isolated_host(("sweep_support", sweep_support), ("nan", _NanLoss()), builtins=True)
    result = train(dataclasses.replace(spec, loss="nan-loss", run_id=""), host=host)
    assert result.status == "failed"
    assert result.error == ("the loss was nan at the first step, before any update: check the loss / model / data, "
                            "not the learning rate")
    # and a fit of a tune's runs does not read it as the rate diverging (its curve and error say "nan")
    assert divergence(result.error, result.loss, result.curve) is None
    assert divergence("diverged: train loss became nan at step 4", result.loss, result.curve) is not None


def test_a_dataset_of_the_wrong_sequence_length_is_refused(spec):
    bad = dataclasses.replace(spec, dataset_config={**spec.dataset_config, "seq_len": 8}, run_id="")
    with pytest.raises(ValueError, match="yields sequences of 8 tokens but the plan's seq_len is 16"):
        train(bad, host=HOST)


def test_schedule_warms_up_then_decays_to_the_end_of_the_run():
    steps, warmup = 100, 10
    factors = [lr_factor(s, warmup, steps, 0.1) for s in range(steps)]
    assert factors[0] == pytest.approx(0.1) and factors[warmup - 1] == pytest.approx(1.0)
    assert factors[warmup] == pytest.approx(1.0)
    assert factors[-1] == pytest.approx(0.1)
    assert all(b <= a for a, b in zip(factors[warmup:], factors[warmup + 1:], strict=False))
    assert lr_factor(0, 0, 1, 0.1) == pytest.approx(1.0)  # a one-step run without warmup


def test_eval_indices_spread_over_the_split():
    assert eval_indices(5, 10).tolist() == [0, 1, 2, 3, 4]
    idx = eval_indices(1000, 4).tolist()
    assert idx == [0, 333, 666, 999]


@pytest.mark.parametrize("micro", [1, 3])
def test_micro_batches_give_the_whole_batchs_loss_curve(spec, micro):
    """A step's rows in micro-batches (the last one smaller, the trimmed last step too) accumulate
    the whole batch's gradient: the same curve and held-out loss in fp32 on CPU."""
    whole = train(spec, host=HOST)
    split = train(dataclasses.replace(spec, micro_batch_size=micro), host=HOST)
    assert spec.batch_size % 3 != 0 or micro == 1  # a ragged last micro-batch is exercised
    assert split.tokens == whole.tokens and split.steps == whole.steps and split.flops == whole.flops
    assert [t for t, _ in split.curve] == [t for t, _ in whole.curve]
    assert [v for _, v in split.curve] == pytest.approx([v for _, v in whole.curve], rel=1e-6)
    assert split.loss == pytest.approx(whole.loss, rel=1e-6)
    wild = train(dataclasses.replace(spec, micro_batch_size=micro, seed=1), host=HOST)
    assert wild.loss != pytest.approx(whole.loss, rel=1e-6)  # the check can tell runs apart
