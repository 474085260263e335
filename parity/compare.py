"""The layer-by-layer comparison runner and its report.

Both models get the same inputs; forward hooks capture each tapped layer's output on both
sides (a block's attention output, the block's output), then the final output. Every pair
is compared for shape and value. A layer passes when

    max |ours - reference| <= atol + rtol * max |reference|

with (atol, rtol) chosen per dtype (``TOLERANCES``). Differences are computed in float64
from the tensors each side produced in its own dtype, so bf16/fp16 runs are judged by
bf16/fp16 tolerances, never by fp32 ones. The report lists max absolute and relative
(max abs error / max |reference|) error per layer and names the first failing layer.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from flops_fit.tables import format_table


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


# fp32: torch.testing.assert_close's defaults; tight enough that a wrong LayerNorm eps or
# tanh-for-exact GELU (1e-4..1e-2 errors, see docs/validation/parity.md) fails, while a faithful
# re-implementation stays below 1e-6. bf16 / fp16: a few units of the format's rounding
# (bf16 eps 7.8e-3, fp16 eps 9.8e-4) on the layer's scale, since two correct low-precision
# implementations round in different places.
TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(atol=1e-5, rtol=1.3e-6),
    "bfloat16": Tolerance(atol=1e-2, rtol=4e-2),
    "float16": Tolerance(atol=1e-3, rtol=5e-3),
}

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LayerResult:
    """One compared tensor: shapes, errors and verdict."""

    name: str
    ref_shape: tuple[int, ...]
    our_shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    passed: bool
    note: str = ""
    limit: float = float("nan")  # the largest max_abs that passes: atol + rtol * max |reference|


@dataclass
class ParityReport:
    """Outcome of one parity case on one device and dtype."""

    case: str
    model: str
    reference: str
    device: str
    dtype: str
    tolerance: Tolerance
    layers: list[LayerResult] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    assumptions: dict[str, str] = field(default_factory=dict)  # what the converter assumed (Converted.assumptions)

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.layers) and all(layer.passed for layer in self.layers)

    @property
    def first_failure(self) -> LayerResult | None:
        return next((layer for layer in self.layers if not layer.passed), None)

    @property
    def max_abs(self) -> float:
        return max((layer.max_abs for layer in self.layers), default=float("nan"))

    @property
    def worst_ratio(self) -> float:
        """max over layers of max_abs / limit: below 1 passes; how close a pass came to failing."""
        return max((layer.max_abs / layer.limit for layer in self.layers if layer.limit > 0), default=float("nan"))

    def summary(self) -> str:
        head = f"{self.case} [{self.device}, {self.dtype}]"
        if self.error:
            return f"{head}: ERROR {self.error}"
        bad = self.first_failure
        if bad is None:
            return f"{head}: passed, {len(self.layers)} tensors, max abs error {self.max_abs:.2e}"
        return (
            f"{head}: FAILED at {bad.name}: max abs {bad.max_abs:.2e}, max rel {bad.max_rel:.2e} "
            f"(atol {self.tolerance.atol:g}, rtol {self.tolerance.rtol:g}){' ' + bad.note if bad.note else ''}"
        )

    def table(self) -> str:
        rows = [
            [r.name, "x".join(map(str, r.our_shape)), f"{r.max_abs:.2e}", f"{r.limit:.2e}", f"{r.max_rel:.2e}",
             "ok" if r.passed else "FAIL", r.note]
            for r in self.layers
        ]
        return format_table(rows, ["layer", "shape", "max abs", "limit", "max rel", "verdict", "note"])

    def __str__(self) -> str:
        return self.summary() + ("\n" + self.table() if self.layers else "")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        bad = self.first_failure
        data["first_failure"] = bad.name if bad else None
        return data


def compare_tensors(name: str, reference: Any, ours: Any, tolerance: Tolerance) -> LayerResult:
    """Compare one pair of tensors (shapes first, then values) under ``tolerance``."""
    ref_shape, our_shape = tuple(reference.shape), tuple(ours.shape)
    if ref_shape != our_shape:
        return LayerResult(name, ref_shape, our_shape, float("inf"), float("inf"), False,
                           f"shape mismatch: reference {ref_shape}, ours {our_shape}")
    if reference.numel() == 0:
        return LayerResult(name, ref_shape, our_shape, 0.0, 0.0, True)
    ref, out = reference.detach().to("cpu", torch.float64), ours.detach().to("cpu", torch.float64)
    if not torch.isfinite(out).all() or not torch.isfinite(ref).all():
        which = "ours" if not torch.isfinite(out).all() else "the reference"
        return LayerResult(name, ref_shape, our_shape, float("inf"), float("inf"), False,
                           f"non-finite values in {which}")
    max_abs = float((out - ref).abs().max())
    scale = float(ref.abs().max())
    max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    limit = tolerance.atol + tolerance.rtol * scale
    return LayerResult(name, ref_shape, our_shape, max_abs, max_rel, max_abs <= limit, limit=limit)


@dataclass
class Side:
    """One side of a comparison.

    ``forward(module, inputs)`` runs the model and returns its final output (the first
    tensor of a tuple or a ``logits`` attribute is used); ``taps`` maps report names to
    dotted sub-module paths whose forward output (first tensor of a tuple) is captured.
    """

    module: torch.nn.Module
    forward: Callable[[torch.nn.Module, Sequence[Any]], Any]
    taps: Mapping[str, str] = field(default_factory=dict)


def first_tensor(value: Any) -> torch.Tensor:
    """The tensor in a module output: itself, ``.logits``, or the first element of a tuple."""
    if isinstance(value, torch.Tensor):
        return value
    if hasattr(value, "logits") and isinstance(value.logits, torch.Tensor):
        return value.logits
    if isinstance(value, Sequence) and value:
        return first_tensor(value[0])
    if hasattr(value, "last_hidden_state"):
        return value.last_hidden_state
    raise TypeError(f"cannot find a tensor in a {type(value).__name__} output")


@contextlib.contextmanager
def exact_fp32() -> Iterator[None]:
    """Turn TF32 off for CUDA matmuls and convolutions (restored afterwards): with TF32 on,
    fp32 results differ from the reference's by ~1e-3 and the fp32 tolerance cannot hold."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (matmul.allow_tf32, cudnn.allow_tf32, torch.get_float32_matmul_precision())
    try:
        matmul.allow_tf32 = False
        cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        yield
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = saved[0], saved[1]
        torch.set_float32_matmul_precision(saved[2])


def cast_inputs(inputs: Sequence[Any], device: str, dtype: torch.dtype) -> list[Any]:
    """Move tensors to ``device``; floating-point ones also to ``dtype`` (ids and masks keep theirs)."""
    return [
        (x.to(device, dtype) if x.is_floating_point() else x.to(device)) if isinstance(x, torch.Tensor) else x
        for x in inputs
    ]


def run_side(side: Side, inputs: Sequence[Any]) -> dict[str, torch.Tensor]:
    """Run one side with hooks on its taps; returns tap name -> captured tensor, plus ``"output"``.

    Each tap must fire exactly once, so a hook on a module the forward never reaches
    (a guard against comparing a path that did not run) is an error.
    """
    captured: dict[str, list[torch.Tensor]] = {name: [] for name in side.taps}
    handles = []
    try:
        for name, path in side.taps.items():
            module = side.module.get_submodule(path)
            handles.append(module.register_forward_hook(
                lambda _m, _i, out, name=name: captured[name].append(first_tensor(out).detach().clone())
            ))
        with torch.no_grad():
            output = first_tensor(side.forward(side.module, inputs)).detach()
    finally:
        for h in handles:
            h.remove()
    wrong = {name: len(v) for name, v in captured.items() if len(v) != 1}
    if wrong:
        raise RuntimeError(f"taps did not fire exactly once per forward: {wrong} (calls per tap)")
    return {**{name: v[0] for name, v in captured.items()}, "output": output}


def compare_sides(
    reference: Side,
    ours: Side,
    inputs: Sequence[Any],
    *,
    device: str = "cpu",
    dtype: str = "float32",
    output_name: str = "logits",
    tolerance: Tolerance | None = None,
) -> list[LayerResult]:
    """Run both sides on the same inputs (moved to ``device`` / cast to ``dtype``) and compare
    every tap in order, then the final output."""
    if set(reference.taps) != set(ours.taps):
        raise ValueError(f"the two sides tap different layers: {sorted(set(reference.taps) ^ set(ours.taps))}")
    tol = tolerance or TOLERANCES[dtype]
    torch_dtype = DTYPES[dtype]
    moved = cast_inputs(inputs, device, torch_dtype)
    results = {}
    with exact_fp32() if dtype == "float32" else contextlib.nullcontext():
        for key, side in (("ref", reference), ("ours", ours)):
            side.module.to(device=device, dtype=torch_dtype).eval()
            results[key] = run_side(side, moved)
    names = [*reference.taps, "output"]
    return [
        compare_tensors(output_name if n == "output" else n, results["ref"][n], results["ours"][n], tol)
        for n in names
    ]


def timed_report(case: str, model: str, reference: str, device: str, dtype: str,
                 compute: Callable[[], list[LayerResult]]) -> ParityReport:
    """Build a report around ``compute()``, timing it."""
    start = time.perf_counter()
    report = ParityReport(case, model, reference, device, dtype, TOLERANCES[dtype])
    report.layers = compute()
    report.seconds = time.perf_counter() - start
    return report
