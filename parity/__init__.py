"""The parity suite (installed as ``flops_fit.parity``): proves our models compute what
their timm / Hugging Face / torch references compute. ``check`` is the sweep's gate."""

from flops_fit.sweeps.gate import check

__all__ = ["check"]
