"""Parity case for ``gpt``: Hugging Face ``GPT2LMHeadModel`` (tiny, 2 layers, width 64)."""

from __future__ import annotations

from typing import Any

from flops_fit.parity import probe
from flops_fit.parity.compare import ParityReport
from flops_fit.parity.convert_gpt2 import convert_gpt2
from flops_fit.parity.pipeline import Tamper, block_taps, call, run_model_case, save_hf

TINY = {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 96, "n_positions": 16,
        "bos_token_id": 0, "eos_token_id": 0}
BATCH, LENGTH = 2, 12


def gpt2_reference(seed: int = 0) -> Any:
    """A randomly initialised HF GPT-2 (eager attention), with probe weights; the head stays tied."""
    import transformers

    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**TINY))
    model.set_attn_implementation("eager")
    return probe.probe_init_(model, seed)


def hf_gpt2(device: str = "cpu", dtype: str = "float32", *, overrides: dict | None = None,
            tamper: Tamper | None = None) -> ParityReport:
    """HF GPT-2 (save_pretrained folder: Conv1D weights, tied head) -> our ``gpt``."""
    return run_model_case(
        case="hf-gpt2", model="gpt", reference="transformers GPT2LMHeadModel",
        ref_module=gpt2_reference(), save=save_hf, convert=convert_gpt2,
        inputs=[probe.tokens(BATCH, LENGTH, TINY["vocab_size"])], ref_forward=call, our_forward=call,
        taps=block_taps(TINY["n_layer"], "transformer.h.{i}", "transformer.h.{i}.attn"),
        device=device, dtype=dtype, overrides=overrides, tamper=tamper,
    )
