"""Parity cases for ``llama``: Hugging Face ``LlamaForCausalLM``, ``Qwen2ForCausalLM`` and
``MistralForCausalLM``, whole model, layer by layer (each layer's ``self_attn`` output and
each decoder layer's output), then the logits.

Tiny configurations (width 64, 2 layers, 12 tokens) keep a case under a second on CPU.
Each exercises different options: GQA with a ``head_dim`` independent of the width, Llama
3.1 RoPE scaling with every bias and a tied head, Qwen2's q/k/v-only biases, Mistral's
sliding window (4 keys, shorter than the 12-token input, so it binds).
"""

from __future__ import annotations

from typing import Any

from flops_fit.parity import probe
from flops_fit.parity.compare import ParityReport
from flops_fit.parity.convert_llama import convert_llama
from flops_fit.parity.pipeline import (
    Tamper,
    block_taps,
    call,
    run_model_case,
    save_hf,
    variant_case,
)

BASE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 96, "vocab_size": 96, "max_position_embeddings": 32}
BATCH, LENGTH = 2, 12

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # name -> (transformers config class, its options)
    "llama": ("LlamaConfig", {"head_dim": 32}),  # 4 x 32 = 128 != 64: head_dim independent of the width
    "llama-rope-llama3": ("LlamaConfig", {
        "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 16}}),
    "llama-rope-linear-mqa": ("LlamaConfig", {"num_key_value_heads": 1,
                                              "rope_scaling": {"rope_type": "linear", "factor": 4.0}}),
    "qwen2": ("Qwen2Config", {}),
    "mistral": ("MistralConfig", {"sliding_window": 4}),
}
MODELS = {"LlamaConfig": "LlamaForCausalLM", "Qwen2Config": "Qwen2ForCausalLM", "MistralConfig": "MistralForCausalLM"}


def hf_reference(variant: str = "llama", seed: int = 0) -> Any:
    """A randomly initialised HF causal LM of this variant (eager attention), with probe weights."""
    import transformers

    config_class, options = VARIANTS[variant]
    config = getattr(transformers, config_class)(**{**BASE, **options})
    model = getattr(transformers, MODELS[config_class])(config)
    model.set_attn_implementation("eager")
    return probe.probe_init_(model, seed)


def hf_llama(device: str = "cpu", dtype: str = "float32", *, variant: str = "llama", overrides: dict | None = None,
             tamper: Tamper | None = None) -> ParityReport:
    """A saved HF Llama-family model (``save_pretrained`` folder) -> our ``llama``."""
    config_class, options = VARIANTS[variant]
    return run_model_case(
        case=f"hf-{variant}", model="llama", reference=f"transformers {MODELS[config_class]} {options or ''}".strip(),
        ref_module=hf_reference(variant), save=save_hf, convert=convert_llama,
        inputs=[probe.tokens(BATCH, LENGTH, BASE["vocab_size"])], ref_forward=call, our_forward=call,
        taps=block_taps(BASE["num_hidden_layers"], "model.layers.{i}", "model.layers.{i}.self_attn",
                        "layers.{i}", "layers.{i}.self_attn"),
        device=device, dtype=dtype, overrides=overrides, tamper=tamper,
    )


def _variant_case(variant: str):
    return variant_case(hf_llama, variant, f"HF {VARIANTS[variant]} -> our ``llama``.")


hf_llama_rope_llama3 = _variant_case("llama-rope-llama3")
hf_llama_rope_linear_mqa = _variant_case("llama-rope-linear-mqa")
hf_qwen2 = _variant_case("qwen2")
hf_mistral = _variant_case("mistral")
