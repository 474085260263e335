"""One parity case end to end: save the reference's weights, convert them from disk, build
ours, compare layer by layer.

Every case goes through a real safetensors file (or Hugging Face folder), so the case tests
the converter exactly as a user runs it. ``overrides`` (our config) and ``tamper`` (edits of
the converted state dict) inject known-wrong variants for the negative controls.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from flops_fit.parity.compare import ParityReport, Side, compare_sides, timed_report
from flops_fit.parity.mapping import Converted

from flops_fit.errors import ConversionAssumptionWarning

Tamper = Callable[[dict[str, Any]], None]


def run_model_case(
    *,
    case: str,
    model: str,
    reference: str,
    ref_module: Any,
    save: Callable[[Any, Path], None],
    convert: Callable[[Path], Converted],
    inputs: Sequence[Any],
    ref_forward: Callable[[Any, Sequence[Any]], Any],
    our_forward: Callable[[Any, Sequence[Any]], Any],
    taps: Mapping[str, tuple[str, str]],
    device: str,
    dtype: str,
    overrides: Mapping[str, Any] | None = None,
    tamper: Tamper | None = None,
    setup: Callable[[Any], None] | None = None,
    output_name: str = "logits",
) -> ParityReport:
    """``taps`` maps report names to (reference module path, our module path), in forward order.

    ``setup(ours)`` runs on our built model before the comparison (e.g. installing hooks).
    What the converter assumed goes into the report (``assumptions``) instead of a warning.
    """
    assumed: dict[str, str] = {}

    def compute():
        with tempfile.TemporaryDirectory(prefix="flops-fit-parity-") as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore", ConversionAssumptionWarning)
            save(ref_module, Path(tmp))
            converted = convert(Path(tmp))
        assumed.update(converted.assumptions)
        if tamper is not None:
            converted.state = dict(converted.state)
            tamper(converted.state)
        ours = converted.build(**(overrides or {}))
        if setup is not None:
            setup(ours)
        return compare_sides(
            Side(ref_module, ref_forward, {name: r for name, (r, _) in taps.items()}),
            Side(ours, our_forward, {name: o for name, (_, o) in taps.items()}),
            inputs, device=device, dtype=dtype, output_name=output_name,
        )

    report = timed_report(case, model, reference, device, dtype, compute)
    report.assumptions = assumed
    return report


def variant_case(runner: Callable[..., ParityReport], variant: str, doc: str) -> Callable[..., ParityReport]:
    """A registrable case function, ``run(device, dtype, **kwargs)``, running ``runner`` on one variant."""

    def run(device: str = "cpu", dtype: str = "float32", **kwargs: Any) -> ParityReport:
        return runner(device, dtype, variant=variant, **kwargs)

    run.__doc__ = doc
    return run


def save_hf(model: Any, folder: Path) -> None:
    """``save_pretrained`` (the on-disk names files have), without its progress bar."""
    from transformers.utils import logging

    shown = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        model.save_pretrained(str(folder))
    finally:
        if shown:
            logging.enable_progress_bar()


def call(module: Any, inputs: Sequence[Any]) -> Any:
    """The plain forward: ``module(*inputs)``."""
    return module(*inputs)


def block_taps(depth: int, ref_block: str, ref_attn: str, our_block: str = "blocks.{i}",
               our_attn: str = "blocks.{i}.attn") -> dict[str, tuple[str, str]]:
    """Attention output then block output for each block, named after our modules."""
    taps: dict[str, tuple[str, str]] = {}
    for i in range(depth):
        taps[our_attn.format(i=i)] = (ref_attn.format(i=i), our_attn.format(i=i))
        taps[our_block.format(i=i)] = (ref_block.format(i=i), our_block.format(i=i))
    return taps
