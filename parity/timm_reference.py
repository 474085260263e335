"""What every timm converter reads off a timm model the same way: the reference built on the
meta device (timm's refusals as one ConversionError), activation names, and which norms are
plain affine LayerNorms. One place, so the converters cannot drift apart on them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flops_fit.errors import ConversionError


def declared_args(config: dict[str, Any], top_level: tuple[str, ...], reference: str) -> dict[str, Any]:
    """The model arguments a timm hub ``config.json`` declares: its ``top_level`` keys, then its
    ``model_args`` (which must be an object of timm's argument names)."""
    model_args = config.get("model_args") or {}
    if not isinstance(model_args, dict):
        raise ConversionError(f"{reference}: config.json's model_args must be an object of timm arguments, got "
                              f"{type(model_args).__name__} {model_args!r}; re-save the model (timm's save_for_hf)")
    return {**{k: config[k] for k in top_level if k in config}, **model_args}


def build_on_meta(reference: str, architecture: str | None, args: dict[str, Any], declared: dict[str, Any],
                  default: Callable[..., Any], check_family: Callable[[Any], None]) -> Any:
    """The timm model on the meta device: ``architecture`` built with ``args``, else ``default(**args)``.

    An architecture is first built with the ``declared`` arguments alone and handed to
    ``check_family``, so another model family is refused by name before it is given this
    family's arguments. timm's own errors become one ConversionError naming ``reference``.
    """
    import timm
    import torch

    try:
        with torch.device("meta"):
            if architecture:
                check_family(timm.create_model(architecture, pretrained=False, **declared))
                return timm.create_model(architecture, pretrained=False, **args)
            return default(**args)
    except ConversionError:
        raise
    except RuntimeError as exc:
        if architecture and "Unknown model" in str(exc):
            raise ConversionError(f"{reference}: timm does not know architecture {architecture!r} ({exc})") from None
        raise ConversionError(f"{reference}: timm refuses these options: {_reason(exc)}{_given(declared)}") from None
    except (TypeError, AssertionError, ValueError, LookupError, ArithmeticError) as exc:  # num_heads=0: a division,
        # Swin's num_heads one short of its stages: an IndexError
        raise ConversionError(f"{reference}: timm refuses these options: {_reason(exc)}{_given(declared)}") from None


def _given(declared: dict[str, Any], limit: int = 200) -> str:
    """" (given: k=v, ...)": the arguments the caller or config.json gave, after timm's reason and cut
    short; the whole argument dict (what the weights show too) put the reason off the screen."""
    text = ", ".join(f"{k}={v!r}" for k, v in declared.items())
    return f" (given: {text if len(text) <= limit else text[:limit - 3] + '...'})" if text else ""


def _reason(exc: BaseException) -> str:
    """The exception's text; for a bare ``assert`` (no text) the line of timm that refused."""
    if str(exc):
        return str(exc)
    import traceback

    frame = traceback.extract_tb(exc.__traceback__)[-1]
    where = "/".join(frame.filename.split("/")[-3:])
    return f"{type(exc).__name__} at {where}:{frame.lineno}: {frame.line}"


def activation_name(act: Any) -> str | None:
    """Our ``act_layer`` name of a timm / torch activation module, or None."""
    import torch.nn as nn
    from timm.layers.activations import GELU, GELUTanh, QuickGELU

    if isinstance(act, nn.GELU):
        return {"none": "gelu", "tanh": "gelu_tanh"}[act.approximate]
    for cls, name in ((GELU, "gelu"), (GELUTanh, "gelu_tanh"), (QuickGELU, "quick_gelu"), (nn.SiLU, "silu"),
                      (nn.ReLU, "relu")):
        if type(act) is cls:
            return name
    return None


def affine_layer_norm(norm: Any) -> bool:
    """An affine LayerNorm computed as ``F.layer_norm`` (torch's, or timm's ``LayerNorm``)."""
    import torch.nn as nn
    from timm.layers import LayerNorm

    return type(norm) in (nn.LayerNorm, LayerNorm) and norm.elementwise_affine and norm.bias is not None
