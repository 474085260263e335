"""The parity suite (installed as ``flops_fit.parity``): proves our models compute what
their timm / Hugging Face / torch references compute."""


def check(model_name: str, **kwargs):
    """Run ``model_name``'s quick parity cases; see ``flops_fit.parity.gate.check``."""
    from flops_fit.parity.gate import check as _check

    return _check(model_name, **kwargs)
