"""The parity suite (installed as ``flops_fit.parity``): proves our models compute what
their timm / Hugging Face / torch references compute."""
