"""Value checks shared by every boundary (options, contracts, model configurations).

One function per rule, so a bad value reads the same wherever it is caught; the caller
names the exception class its boundary raises.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

from flops_fit.errors import OptionError


def is_integer(value: Any) -> bool:
    """An integer of any kind (a NumPy one too: ``np.arange`` gives them), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A real number of any kind (``np.float32``, ``np.int64`` too), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def plain(value: Any) -> Any:
    """A real number as Python's int or float: what is stored as JSON and hashed into run ids."""
    return int(value) if is_integer(value) else float(value)


def plain_values(value: Any) -> Any:
    """A configuration (mappings, lists, numbers) with its NumPy numbers as Python's: it is stored as JSON."""
    if isinstance(value, Mapping):
        return {key: plain_values(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain_values(item) for item in value)
    return plain(value) if is_real(value) and not isinstance(value, (int, float)) else value


def positive_int(value: Any, what: str, error: type[Exception] = OptionError) -> int:
    """``value`` as an int if it is an integer (not a bool) above zero; else ``error`` naming ``what``."""
    if not is_integer(value) or value <= 0:
        raise error(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def positive_number(value: Any, what: str, error: type[Exception] = OptionError) -> float:
    """``value`` (an int or float) if it is a finite real number above zero; else ``error`` naming ``what``."""
    if not is_real(value) or not math.isfinite(value) or value <= 0:
        raise error(f"{what} must be a finite positive number, got {value!r}")
    return plain(value)


def non_negative_number(value: Any, what: str, error: type[Exception] = OptionError) -> float:
    """``value`` (an int or float) if it is a finite real number >= 0; else ``error`` naming ``what``."""
    if not is_real(value) or not math.isfinite(value) or value < 0:
        raise error(f"{what} must be a finite number >= 0, got {value!r}")
    return plain(value)


def held_out_share(value: Any, name: str, error: type[Exception] = OptionError, *, data: str = "text",
                   example: str = "0.05") -> float:
    """A dataset's ``validation_fraction``, strictly between 0 and 1: 0 left the held-out split empty, 1.5 or -1
    cut the data at a negative position (one split empty, or each what the other should be), "0.1" raised a
    TypeError. ``name`` is the dataset, ``data`` what it holds out."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise error(f"{name}: validation_fraction is the share of the {data} held out, between 0 and 1 "
                    f"(e.g. {example}), got {value!r}")
    return value


def one_of(value: Any, choices: Iterable[Any], what: str, error: type[Exception] = OptionError) -> Any:
    """``value`` if it is one of ``choices``; else ``error`` listing them."""
    choices = tuple(choices)
    if value not in choices:
        raise error(f"{what} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value
