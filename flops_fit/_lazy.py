"""Resolve lazy ``"module:attribute"`` references, so plugins import nothing heavy until used."""

from __future__ import annotations

import importlib
import re
from typing import Any

_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def is_reference(value: Any) -> bool:
    """True for a well-formed ``"package.module:function"`` string."""
    return isinstance(value, str) and bool(_REF.match(value))


def resolve(value: Any) -> Any:
    """Return ``value`` itself, or the object a ``"module:attr"`` string points to."""
    if not isinstance(value, str):
        return value
    if not is_reference(value):
        raise ValueError(f"{value!r} is not a 'module:attribute' reference")
    module_name, _, attr_path = value.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AttributeError(
                f"{value!r}: module {module_name!r} has no attribute {attr_path!r}"
            ) from None
    return obj
