"""Hook implementations: metadata and lazy references only (torch is imported only inside ``build``)."""

import flops_fit


def valid_sizes(lo: int, hi: int, **config) -> list[int]:
    """Widths that are multiples of 8."""
    return [w for w in range(max(8, -(-lo // 8) * 8), hi + 1, 8)]


def param_count(width: int, vocab_size: int = 64, **config) -> int:
    hidden = 4 * width
    return vocab_size * width + (width * hidden + hidden) + (hidden * width + width) + (width * vocab_size + vocab_size)


def training_flops(width: int, vocab_size: int = 64, **config) -> float:
    """Per token: the three matmuls forward (2 FLOPs per multiply-add), backward twice that."""
    hidden = 4 * width
    forward = 2 * (width * hidden + hidden * width + width * vocab_size)
    return 3.0 * forward


@flops_fit.model_family(task=flops_fit.TASK_CAUSAL_LM, default_datasets=("modular-sequences",))
def build(width: int, vocab_size: int = 64, **config):
    """Builder of mlp-lm: torch is imported here, when a model is built, not when the plugin loads."""
    from flops_fit_example.model import MLPLanguageModel

    return MLPLanguageModel(width, vocab_size)


@flops_fit.hookimpl
def register_models(register):
    # the builder reference "flops_fit_example.plugin:build" and the sizing functions above
    # are read by model_family; the task sets flops_unit "token" and default_loss "next-token"
    register(build.entry("mlp-lm", "Next-token MLP language model (example plugin)", defaults={"vocab_size": 64}))


@flops_fit.hookimpl
def register_datasets(register):
    register(flops_fit.DatasetEntry(
        "modular-sequences",
        description="Synthetic sequences x[t+1] = (a*x[t] + c) mod vocab_size (example plugin)",
        builder="flops_fit_example.data:build",
        modality="text",
        splits=("train", "validation"),
        batch_format={"tokens": "int64[B, T]"},
        tasks=(flops_fit.TASK_CAUSAL_LM,),
        defaults={"vocab_size": 64, "seq_len": 32, "num_sequences": 1024},
    ))
