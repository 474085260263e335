"""The comparison runner: verdicts, shapes, non-finite values, hooks that must fire, dtypes."""

from __future__ import annotations

import pytest
import torch
from flops_fit.parity.compare import TOLERANCES, Side, compare_sides, compare_tensors, exact_fp32
from torch import nn

FP32 = TOLERANCES["float32"]


def test_verdict_uses_atol_plus_rtol_times_reference_scale() -> None:
    ref = torch.tensor([100.0, 0.0])
    limit = FP32.atol + FP32.rtol * 100
    assert compare_tensors("x", ref, ref + torch.tensor([0.0, 0.9 * limit]), FP32).passed
    row = compare_tensors("x", ref, ref + torch.tensor([0.0, 1.1 * limit]), FP32)
    assert not row.passed and row.max_abs == pytest.approx(1.1 * limit) and row.limit == pytest.approx(limit)
    assert row.max_rel == pytest.approx(1.1 * limit / 100)


def test_shape_mismatch_and_non_finite_values_fail_with_a_note() -> None:
    row = compare_tensors("logits", torch.zeros(2, 3), torch.zeros(3, 2), FP32)
    assert not row.passed and row.note == "shape mismatch: reference (2, 3), ours (3, 2)"
    row = compare_tensors("logits", torch.zeros(2), torch.tensor([0.0, float("nan")]), FP32)
    assert not row.passed and row.note == "non-finite values in ours"


def test_bf16_outputs_are_judged_by_bf16_tolerances() -> None:
    ref = torch.linspace(-3, 3, 50)
    ours = (ref.to(torch.bfloat16) + 0.01).float()  # a couple of bf16 rounding steps off
    assert not compare_tensors("x", ref, ours, FP32).passed
    assert compare_tensors("x", ref.bfloat16(), ours.bfloat16(), TOLERANCES["bfloat16"]).passed


class TwoLayers(nn.Module):
    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.scale = scale

    def forward(self, x):
        return self.b(self.a(x) * self.scale)


def _pair(scale: float):
    torch.manual_seed(0)
    ref = TwoLayers()
    ours = TwoLayers(scale)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def test_first_failing_tap_is_reported_in_forward_order() -> None:
    ref, ours = _pair(scale=1.5)  # same weights, wrong after layer a
    taps = {"a": "a", "b": "b"}
    rows = compare_sides(Side(ref, lambda m, i: m(*i), taps), Side(ours, lambda m, i: m(*i), taps),
                         [torch.randn(2, 4)])
    assert [(r.name, r.passed) for r in rows] == [("a", True), ("b", False), ("logits", False)]


def test_a_tap_that_never_fires_is_an_error() -> None:
    ref, ours = _pair(scale=1.0)
    with pytest.raises(RuntimeError, match=r"taps did not fire exactly once per forward: \{'b': 0\}"):
        compare_sides(Side(ref, lambda m, i: m.a(*i), {"b": "b"}), Side(ours, lambda m, i: m(*i), {"b": "b"}),
                      [torch.randn(2, 4)])


def test_inputs_are_cast_but_ids_keep_their_dtype() -> None:
    seen = {}
    emb = nn.Embedding(5, 3)

    def forward(m, i):
        seen["ids"], seen["x"] = i[0].dtype, i[1].dtype
        return m(i[0]) + i[1]

    compare_sides(Side(emb, forward), Side(emb, forward), [torch.tensor([[1, 2]]), torch.zeros(1, 2, 3)],
                  dtype="bfloat16")
    assert seen == {"ids": torch.int64, "x": torch.bfloat16}


def test_exact_fp32_turns_tf32_off_and_restores_it() -> None:
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
              torch.get_float32_matmul_precision())
    with exact_fp32():
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        assert torch.get_float32_matmul_precision() == "highest"
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.get_float32_matmul_precision()) == before
