"""Built-in losses: the next-token shift is right, padding is ignored, errors are clear."""

import math

import pytest
import torch
import torch.nn.functional as F
from flops_fit.plugins import losses

import flops_fit
from flops_fit.testing import check_loss_entry, isolated_host

V = 11


def one_hot_logits(ids, scale=50.0):
    """Logits that put (almost) all probability on ``ids``."""
    return F.one_hot(ids, V).float() * scale


def test_registered_with_tasks_and_resolvable():
    host = isolated_host(losses, builtins=False)
    assert flops_fit.list_losses(host=host) == ["cross-entropy", "next-token"]
    assert flops_fit.loss_info("next-token", host=host).task == flops_fit.TASK_CAUSAL_LM
    assert flops_fit.loss_info("cross-entropy", host=host).task == flops_fit.TASK_IMAGE_CLASSIFICATION
    for name in ("cross-entropy", "next-token"):
        check_loss_entry(name, host=host)
    assert flops_fit.get_loss("next-token", host=host) is losses.next_token


def test_next_token_rewards_predicting_the_next_token_not_copying():
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6], [7, 3, 9, 0, 2, 8]])
    batch = {"tokens": tokens}
    copy = losses.next_token(one_hot_logits(tokens), batch)  # predicts the current token
    shifted = torch.cat([tokens[:, 1:], tokens[:, :1]], dim=1)  # position t predicts t+1
    predict = losses.next_token(one_hot_logits(shifted), batch)
    assert predict < 1e-6
    assert copy > 10.0


def test_next_token_value_matches_a_hand_computation():
    logits = torch.randn(2, 4, V, generator=torch.Generator().manual_seed(0))
    tokens = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    expected = sum(
        -logits[b, t].log_softmax(-1)[tokens[b, t + 1]].item() for b in range(2) for t in range(3)
    ) / 6
    assert math.isclose(losses.next_token(logits, {"tokens": tokens}).item(), expected, rel_tol=1e-6)


def test_masked_targets_are_ignored():
    logits = torch.randn(2, 5, V, generator=torch.Generator().manual_seed(1))
    tokens = torch.tensor([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]])
    mask = torch.tensor([[True, True, True, False, False], [True] * 5])
    loss = losses.next_token(logits, {"tokens": tokens, "mask": mask})
    changed = tokens.clone()
    changed[0, 3:] = 9  # whatever the padding holds, the loss does not move
    assert loss == losses.next_token(logits, {"tokens": changed, "mask": mask})
    kept = [-logits[0, t].log_softmax(-1)[tokens[0, t + 1]] for t in range(2)]
    kept += [-logits[1, t].log_softmax(-1)[tokens[1, t + 1]] for t in range(4)]
    torch.testing.assert_close(loss, torch.stack(kept).mean())
    unmasked = losses.next_token(logits, {"tokens": tokens})
    assert not torch.isclose(loss, unmasked)


def test_cross_entropy():
    logits = torch.randn(4, 3, generator=torch.Generator().manual_seed(2))
    labels = torch.tensor([0, 2, 1, 1])
    torch.testing.assert_close(losses.cross_entropy(logits, {"labels": labels}), F.cross_entropy(logits, labels))
    assert losses.cross_entropy(one_hot_logits(labels)[:, :V], {"labels": labels}) < 1e-6


def test_losses_accept_bf16_logits_and_compute_in_fp32():
    logits = torch.randn(2, 4, V).bfloat16()
    tokens = torch.randint(0, V, (2, 4))
    assert losses.next_token(logits, {"tokens": tokens}).dtype == torch.float32


@pytest.mark.parametrize(
    "logits, batch, message",
    [
        (torch.zeros(2, 4, V), {"ids": torch.zeros(2, 4)}, r"a causal-lm batch needs 'tokens'; got keys \['ids'\]"),
        (torch.zeros(2, V), {"tokens": torch.zeros(2, 4, dtype=torch.long)}, r"logits must be \(batch, sequence, vocab\)"),
        (torch.zeros(2, 5, V), {"tokens": torch.zeros(2, 4, dtype=torch.long)}, r"tokens of shape \(2, 4\) do not match logits of shape \(2, 5, 11\)"),
        (torch.zeros(2, 1, V), {"tokens": torch.zeros(2, 1, dtype=torch.long)}, "needs sequences of 2 or more tokens, got 1"),
        (torch.zeros(2, 4, V), {"tokens": torch.zeros(2, 4, dtype=torch.long), "mask": torch.ones(2, 4)},
         r"mask must be bool with the shape of tokens \(2, 4\), got torch.float32"),
        (torch.zeros(2, 4, V), {"tokens": torch.zeros(2, 4, dtype=torch.long), "mask": torch.ones(2, 3, dtype=torch.bool)},
         r"mask must be bool .* of shape \(2, 3\)"),
    ],
)
def test_next_token_errors(logits, batch, message):
    with pytest.raises(ValueError, match=message):
        losses.next_token(logits, batch)


@pytest.mark.parametrize(
    "logits, batch, message",
    [
        (torch.zeros(2, 3), {"images": torch.zeros(2)}, r"needs 'labels'; got keys \['images'\]"),
        (torch.zeros(2, 3, 4), {"labels": torch.zeros(2, dtype=torch.long)}, r"logits must be \(batch, classes\)"),
        (torch.zeros(2, 3), {"labels": torch.zeros(3, dtype=torch.long)}, r"labels must have shape \(2,\)"),
    ],
)
def test_cross_entropy_errors(logits, batch, message):
    with pytest.raises(ValueError, match=message):
        losses.cross_entropy(logits, batch)
