"""Built-in parity cases, registered through the ``register_parity_cases`` hook like any
plugin's. Metadata and lazy references only: nothing heavy is imported here."""

from __future__ import annotations

import flops_fit

_CASES = "flops_fit.parity.case_"

BUILTIN_CASES = (
    # name, model, reference, run, requires, quick
    ("timm-vit", "vit", "timm VisionTransformer (class token)", "vit:timm_vit", ("timm",), True),
    ("timm-vit-bare", "vit", "timm VisionTransformer from a bare weights file (activation, eps, pooling assumed)",
     "vit:timm_vit_bare", ("timm",), False),
    ("timm-vit-avg", "vit", "timm VisionTransformer (global_pool='avg', fc_norm)", "vit:timm_vit_avg", ("timm",), False),
    ("timm-vit-avg-norm-first", "vit", "timm VisionTransformer (global_pool='avg', fc_norm=False)",
     "vit:timm_vit_avg_norm_first", ("timm",), False),
    ("timm-vit-gap", "vit", "timm VisionTransformer (class_token=False, global_pool='avg')", "vit:timm_vit_gap",
     ("timm",), False),
    ("timm-vit-deit3", "vit", "timm VisionTransformer (LayerScale init_values, no_embed_class)", "vit:timm_vit_deit3",
     ("timm",), False),
    ("timm-vit-reg-qknorm", "vit", "timm VisionTransformer (reg_tokens=4, qk_norm)", "vit:timm_vit_reg_qknorm",
     ("timm",), False),
    ("timm-vit-clip", "vit", "timm VisionTransformer (pre_norm, quick_gelu)", "vit:timm_vit_clip", ("timm",), False),
    ("timm-vit-silu", "vit", "timm VisionTransformer (act_layer='silu' in config.json)", "vit:timm_vit_silu",
     ("timm",), False),
    ("timm-vit-deit-distilled", "vit", "timm VisionTransformerDistilled (DeiT distillation token)",
     "vit:timm_deit_distilled", ("timm",), False),
    ("timm-swin", "swin", "timm SwinTransformer (shifted windows, 2 stages)", "swin:timm_swin", ("timm",), True),
    ("timm-swin-whole-stage-window", "swin", "timm SwinTransformer (a stage as small as its window: no shift)",
     "swin:timm_swin_whole_stage_window", ("timm",), False),
    ("timm-swin-s3-options", "swin", "timm SwinTransformer (per-stage windows, always_partition, no qkv bias)",
     "swin:timm_swin_s3_options", ("timm",), False),
    ("timm-swin-bare", "swin", "timm SwinTransformer from a bare weights file (eps, pooling assumed)",
     "swin:timm_swin_bare", ("timm",), False),
    ("hf-vit", "vit", "transformers ViTForImageClassification", "vit:hf_vit", ("transformers",), False),
    ("hf-vit-backbone", "vit", "transformers ViTModel (features)", "vit:hf_vit_backbone", ("transformers",), False),
    ("hf-deit", "vit", "transformers DeiTForImageClassification (distillation token, class head only, no qkv bias)",
     "vit:hf_deit", ("transformers",), False),
    ("hf-deit-distilled", "vit", "transformers DeiTForImageClassificationWithTeacher (mean of two heads)",
     "vit:hf_deit_distilled", ("transformers",), False),
    ("hf-deit-backbone", "vit", "transformers DeiTModel (features)", "vit:hf_deit_backbone", ("transformers",), False),
    ("hf-dinov2", "vit", "transformers Dinov2Model (LayerScale; features)", "vit:hf_dinov2", ("transformers",), False),
    ("hf-dinov2-registers", "vit", "transformers Dinov2WithRegistersModel (4 registers; features)",
     "vit:hf_dinov2_registers", ("transformers",), False),
    ("hf-gpt2", "gpt", "transformers GPT2LMHeadModel", "gpt:hf_gpt2", ("transformers",), True),
    ("hf-llama", "llama", "transformers LlamaForCausalLM (GQA, head_dim 32 != 64 / 4, untied)", "llama:hf_llama",
     ("transformers",), True),
    ("hf-llama-rope-llama3", "llama", "transformers LlamaForCausalLM (llama3 RoPE scaling, all biases, tied head)",
     "llama:hf_llama_rope_llama3", ("transformers",), False),
    ("hf-llama-rope-linear-mqa", "llama", "transformers LlamaForCausalLM (linear RoPE scaling, MQA)",
     "llama:hf_llama_rope_linear_mqa", ("transformers",), False),
    ("hf-qwen2", "llama", "transformers Qwen2ForCausalLM (q/k/v biases)", "llama:hf_qwen2", ("transformers",), True),
    ("hf-mistral", "llama", "transformers MistralForCausalLM (sliding window 4 < 12 tokens)", "llama:hf_mistral",
     ("transformers",), False),
    ("attention-sdpa", "attention", "F.scaled_dot_product_attention (MHA; GQA causal)", "attention:sdpa", (), False),
    ("attention-torch-mha", "attention", "torch.nn.MultiheadAttention", "attention:torch_mha", (), False),
    ("attention-torch-mha-functional", "attention", "F.multi_head_attention_forward (separate projections)",
     "attention:torch_mha_functional", (), False),
    ("attention-llama-gqa", "attention", "transformers LlamaAttention (GQA, RoPE)", "attention:llama_gqa",
     ("transformers",), False),
    ("timm-cait", "cait", "timm Cait (talking heads, class attention, LayerScale)", "cait:timm_cait", ("timm",), True),
    ("timm-cait-avg", "cait", "timm Cait (global_pool='avg', qkv_bias=False, mlp_ratio_token_only=2)",
     "cait:timm_cait_avg", ("timm",), False),
    ("timm-pvt-v2", "pvt_v2", "timm PyramidVisionTransformerV2 (spatial reduction 4, 2, 1, 1)", "pvt_v2:timm_pvt_v2",
     ("timm",), True),
    ("timm-pvt-v2-linear", "pvt_v2", "timm PyramidVisionTransformerV2 (linear=True, qkv_bias=False)",
     "pvt_v2:timm_pvt_v2_linear", ("timm",), False),
)


@flops_fit.hookimpl
def register_parity_cases(register):
    for name, model, reference, run, requires, quick in BUILTIN_CASES:
        register(flops_fit.ParityCaseEntry(
            name, description=f"{model} vs {reference}", model=model, reference=reference,
            run=_CASES + run, requires=requires, quick=quick,
        ))
